//! The words of the rules about the caching allocator: fragmentation and retries, and memory
//! outside it.

use super::finding_text::FindingText;
use oomscope_analysis::finding::{FragmentedCache, Outside};
use oomscope_format::units::{format_bytes, format_count, format_percent};

/// The changes fragmentation calls for (a trace's rule and a snapshot's say the same).
const EXPANDABLE_SEGMENTS_CHANGES: [&str; 2] = [
    "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so segments grow in place instead of \
     fragmenting",
    "if input shapes vary between batches, pad them to a few fixed sizes",
];

/// The changes fragmentation calls for, to be added to.
pub(crate) fn expandable_segments() -> Vec<String> {
    EXPANDABLE_SEGMENTS_CHANGES.map(str::to_owned).to_vec()
}

/// `fragmentation`.
pub(super) fn fragmentation(d: &FragmentedCache) -> FindingText {
    let (p, retries) = (&d.pressure, d.retries);
    let gap = &p.peak_gap;
    let mut facts = vec![format!(
        "at its peak the allocator reserved {}, {} ({}) more than tensors ever held at once ({})",
        format_bytes(gap.reserved_bytes),
        format_bytes(gap.bytes),
        format_percent(gap.fraction_of_reserved),
        format_bytes(gap.allocated_bytes),
    )];
    if retries > 0 {
        let first = p.first_retry.as_ref().map_or_else(String::new, |s| {
            format!(", first at {} of step {}", s.stage, format_count(s.step))
        });
        facts.push(format!(
            "it freed its cache and retried allocations {} times{first}",
            format_count(retries)
        ));
    }
    if let Some(split) = p.max_inactive_split_bytes.filter(|b| *b > 0) {
        facts.push(format!(
            "up to {} sat in split blocks that cannot serve large requests",
            format_bytes(split)
        ));
    }
    if let Some(o) = &d.served_by_cache {
        let unused = o
            .reserved_bytes
            .unwrap_or(0)
            .saturating_sub(o.allocated_bytes.unwrap_or(0));
        facts.push(format!(
            "the OOM{} asked for {} while {} was reserved but unused",
            o.event
                .step
                .map_or_else(String::new, |s| format!(" at step {}", format_count(s))),
            format_bytes(o.event.requested_bytes.unwrap_or(0)),
            format_bytes(unused),
        ));
    }
    let mut changes = expandable_segments();
    if retries > 0 {
        changes.push(
            "each retry synchronises the device and empties the cache, so retries also cost step \
             time"
                .to_owned(),
        );
    }
    let title = if d.large_gap {
        format!(
            "Allocator fragmentation: {} reserved but unused at the peak",
            format_bytes(gap.bytes)
        )
    } else {
        format!(
            "The allocator retried allocations {} times",
            format_count(retries)
        )
    };
    FindingText::new(title, facts.join("; "), changes)
}

/// `outside-allocator`.
pub(super) fn outside(d: &Outside) -> FindingText {
    let o = &d.outside;
    let outside = format_bytes(o.median_bytes.unsigned_abs());
    let mut explanation = format!(
        "the process holds {outside} of GPU memory outside PyTorch's allocator (median over {} \
         marks: {} on the device by NVML against {} reserved by the allocator, at most {}); this \
         is the CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers and any other library \
         allocating on the GPU",
        format_count(o.marks as u64),
        format_bytes(o.median_process_bytes),
        format_bytes(o.median_reserved_bytes),
        format_bytes(o.max_bytes.unsigned_abs()),
    );
    if let Some(rise) = &o.largest_rise {
        let between = if rise.from_step == rise.to_step {
            format!(
                "between {} and {} of step {}",
                rise.from_stage, rise.to_stage, rise.to_step
            )
        } else {
            format!(
                "between {} of step {} and {} of step {}",
                rise.from_stage, rise.from_step, rise.to_stage, rise.to_step
            )
        };
        let why = match (rise.first_step, d.distributed) {
            (true, true) => {
                ": the first step of a distributed run, where the first collective (DDP's \
                 all-reduce in backward, FSDP's all-gather in forward) creates NCCL's \
                 communicators and buffers"
            }
            (true, false) => ": the first step, where libraries set up their workspaces",
            (false, _) => "",
        };
        explanation.push_str(&format!(
            "; it rose by {} {between}{why}",
            format_bytes(rise.bytes)
        ));
    }
    let changes = vec![
        format!(
            "count the {outside} in the memory budget (torch.cuda.memory_allocated() does not \
             see it)"
        ),
        "if it is more than the CUDA context needs, look for other libraries on the GPU (CuPy, \
         JAX, TensorRT, a CUDA context created in a DataLoader worker), lower NCCL_BUFFSIZE, or \
         cap cuDNN workspaces with torch.backends.cudnn.benchmark=False"
            .to_owned(),
    ];
    FindingText::new(
        format!("{outside} of GPU memory is outside the allocator"),
        explanation,
        changes,
    )
}

#[cfg(test)]
mod tests {
    use super::super::worded::test_support::{evidence, find};
    use oomscope_analysis::finding::{FindingKind, Severity};
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::{Run, add_outside_allocator};

    #[test]
    fn large_gap_at_the_peak_is_fragmentation() {
        let run = Run {
            fragmentation_bytes: 10 * GIB,
            ..Run::default()
        };
        let trace = run.build();
        let f = find(&trace, FindingKind::Fragmentation).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            f.title,
            "Allocator fragmentation: 10.0 GiB reserved but unused at the peak"
        );
        assert!(
            f.explanation.starts_with(
                "at its peak the allocator reserved 38.0 GiB, 10.0 GiB (26%) more than tensors \
                 ever held at once (28.0 GiB)"
            ),
            "{}",
            f.explanation
        );
        assert!(f.change.contains("expandable_segments:True"));
        assert_eq!(evidence(&f, "alloc_retries"), 0.0);
    }

    #[test]
    fn retries_alone_fire() {
        let run = Run {
            alloc_retries_from: Some((12, 2)),
            ..Run::default()
        };
        let f = find(&run.build(), FindingKind::Fragmentation).unwrap();
        assert_eq!(f.title, "The allocator retried allocations 96 times");
        assert!(
            f.explanation
                .contains("retried allocations 96 times, first at post_forward of step 12")
        );
        assert!(f.change.contains("cost step time"));
    }

    #[test]
    fn oom_the_cache_could_have_served_is_critical() {
        let run = Run {
            fragmentation_bytes: 10 * GIB,
            oom_at_step: Some(20),
            oom_requested_bytes: 4 * GIB,
            ..Run::default()
        };
        let f = find(&run.build(), FindingKind::Fragmentation).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        // At pre_forward of step 20: 38 GiB reserved, 16 GiB allocated.
        assert!(f.explanation.contains(
            "the OOM at step 20 asked for 4.00 GiB while 22.0 GiB was reserved but unused"
        ));
    }

    #[test]
    fn ordinary_cache_is_not_fragmentation() {
        assert!(find(&Run::default().build(), FindingKind::Fragmentation).is_none());
        // Near miss: 8 GiB of 36 GiB is 22%, under a quarter.
        let near = Run {
            fragmentation_bytes: 8 * GIB,
            ..Run::default()
        };
        assert!(find(&near.build(), FindingKind::Fragmentation).is_none());
        let no_allocator = Run {
            allocator_stats: false,
            fragmentation_bytes: 20 * GIB,
            ..Run::default()
        };
        assert!(find(&no_allocator.build(), FindingKind::Fragmentation).is_none());
    }

    #[test]
    fn memory_outside_the_allocator() {
        let run = Run {
            context_bytes: GIB + GIB / 2,
            ..Run::default()
        };
        let f = find(&run.build(), FindingKind::OutsideAllocator).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(f.title, "1.50 GiB of GPU memory is outside the allocator");
        assert!(f.explanation.contains(
            "median over 240 marks: 30.0 GiB on the device by NVML against 28.5 GiB reserved"
        ));
        assert_eq!(evidence(&f, "median_outside_bytes"), (GIB + GIB / 2) as f64);

        let small = Run {
            context_bytes: 900 * MIB,
            ..Run::default()
        };
        assert!(find(&small.build(), FindingKind::OutsideAllocator).is_none());
    }

    #[test]
    fn a_rise_at_a_distributed_run_s_first_step_is_put_on_its_first_collective() {
        let mut trace = Run {
            context_bytes: GIB + GIB / 2,
            ..Run::default()
        }
        .build();
        trace.metadata.world_size = Some(8);
        add_outside_allocator(&mut trace, 3, 512 * MIB);
        let f = find(&trace, FindingKind::OutsideAllocator).unwrap();
        let (a, b) = (&trace.marks[2], &trace.marks[3]);
        assert_eq!(a.step, b.step);
        let said = format!(
            "; it rose by 512 MiB between {} and {} of step {}: the first step of a distributed \
             run, where the first collective (DDP's all-reduce in backward, FSDP's all-gather in \
             forward) creates NCCL's communicators and buffers",
            a.name, b.name, b.step
        );
        assert!(f.explanation.ends_with(&said), "{}", f.explanation);
        assert_eq!(evidence(&f, "largest_rise_bytes"), (512 * MIB) as f64);
        // Without ranks, the same rise is not put on NCCL.
        trace.metadata.world_size = Some(1);
        let f = find(&trace, FindingKind::OutsideAllocator).unwrap();
        assert!(
            !f.explanation.contains("NCCL's communicators"),
            "{}",
            f.explanation
        );
        assert!(
            f.explanation
                .contains("the first step, where libraries set up")
        );
    }
}
