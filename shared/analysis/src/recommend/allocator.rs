//! Rules about the caching allocator: fragmentation and retries, and memory outside it.

use super::rule::{Diagnose, RuleContext, finding};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use crate::oom::OomContext;
use crate::overhead::OutsideAllocator;
use crate::pressure::PressureReport;
use oomscope_format::OomKind;
use oomscope_format::units::{format_bytes, format_count, format_percent};

/// A peak gap (reserved beyond what tensors needed) of at least this many bytes...
pub const FRAGMENTATION_MIN_GAP_BYTES: u64 = 1 << 30;

/// ...and at least this share of peak reserved is fragmentation worth fixing; smaller gaps are
/// the cache doing its job (rounding, a few spare blocks).
pub const FRAGMENTATION_MIN_GAP_FRACTION: f64 = 0.25;

/// Process GPU memory beyond the allocator's reserved bytes (median over marks) from which it is
/// worth pointing out: a CUDA context alone is 300–600 MiB.
pub const OUTSIDE_ALLOCATOR_MIN_BYTES: i64 = 1 << 30;

/// The change fragmentation calls for (a trace's rule and a snapshot's say the same).
pub const EXPANDABLE_SEGMENTS_CHANGE: &str = "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
     so segments grow in place instead of fragmenting; if input shapes vary between batches, pad \
     them to a few fixed sizes";

/// `fragmentation`: the allocator holds much more than tensors need, or had to retry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fragmentation;

/// What [`Fragmentation`] detected.
#[derive(Debug, Clone, Copy)]
pub struct FragmentedCache<'a> {
    /// The allocator's pressure report it read.
    pub pressure: &'a PressureReport,
    /// The peak gap reached the thresholds ([`FRAGMENTATION_MIN_GAP_BYTES`],
    /// [`FRAGMENTATION_MIN_GAP_FRACTION`]).
    pub large_gap: bool,
    /// Times the allocator freed its cache and retried.
    pub retries: u64,
    /// An OOM the cache could have served: its request was no larger than what the allocator
    /// held unused at that moment.
    pub served_by_cache: Option<&'a OomContext>,
}

impl Diagnose for Fragmentation {
    const KIND: FindingKind = FindingKind::Fragmentation;
    type Diagnosis<'a> = FragmentedCache<'a>;

    /// Detection: a large gap at the peak, or any retry; `None` otherwise.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let p = ctx.analysis.pressure.as_ref()?;
        let gap = &p.peak_gap;
        let min_gap = FRAGMENTATION_MIN_GAP_BYTES
            .max((FRAGMENTATION_MIN_GAP_FRACTION * gap.reserved_bytes as f64) as u64);
        let large_gap = gap.bytes >= min_gap;
        let retries = p.alloc_retries.unwrap_or(0);
        if !large_gap && retries == 0 {
            return None;
        }
        let served_by_cache = ctx.analysis.ooms.iter().find(|o| {
            o.kind == OomKind::Gpu
                && matches!(
                    (o.event.requested_bytes, o.reserved_bytes, o.allocated_bytes),
                    (Some(req), Some(res), Some(alloc)) if req <= res.saturating_sub(alloc)
                )
        });
        Some(FragmentedCache {
            pressure: p,
            large_gap,
            retries,
            served_by_cache,
        })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let (p, retries) = (d.pressure, d.retries);
        let gap = &p.peak_gap;
        let mut facts = vec![format!(
            "at its peak the allocator reserved {}, {} ({}) more than tensors ever held at once \
             ({})",
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
        if let Some(o) = d.served_by_cache {
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
        let mut change = EXPANDABLE_SEGMENTS_CHANGE.to_owned();
        if retries > 0 {
            change.push_str(
                "; each retry synchronises the device and empties the cache, so retries also cost \
                 step time",
            );
        }
        let severity = if d.served_by_cache.is_some() {
            Severity::Critical
        } else {
            Severity::Warning
        };
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
        let mut evidence = vec![
            Evidence::bytes("peak_gap_bytes", gap.bytes as f64),
            Evidence::share("peak_gap_fraction", gap.fraction_of_reserved),
            Evidence::bytes("peak_reserved_bytes", gap.reserved_bytes as f64),
            Evidence::bytes("peak_allocated_bytes", gap.allocated_bytes as f64),
            Evidence::count("alloc_retries", retries as f64),
        ];
        if let Some(split) = p.max_inactive_split_bytes {
            evidence.push(Evidence::bytes("max_inactive_split_bytes", split as f64));
        }
        finding(self, severity, title, facts.join("; "), change, evidence)
    }
}

/// `outside-allocator`: the process holds a lot of GPU memory the allocator does not know about.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutsideAllocatorRule;

/// What [`OutsideAllocatorRule`] found.
#[derive(Debug, Clone, Copy)]
pub struct Outside<'a> {
    /// The measurement.
    pub outside: &'a OutsideAllocator,
    /// The trace is one rank of several (its first collective creates NCCL's buffers).
    pub distributed: bool,
}

impl Diagnose for OutsideAllocatorRule {
    const KIND: FindingKind = FindingKind::OutsideAllocator;
    type Diagnosis<'a> = Outside<'a>;

    /// Detection: the median memory outside the allocator reached
    /// [`OUTSIDE_ALLOCATOR_MIN_BYTES`]; `None` otherwise.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let outside = ctx
            .analysis
            .outside_allocator
            .as_ref()
            .filter(|o| o.median_bytes >= OUTSIDE_ALLOCATOR_MIN_BYTES)?;
        let m = &ctx.trace.metadata;
        // A rank is set by launchers only; a world of one is not distributed.
        let distributed = match m.world_size {
            Some(w) => w > 1,
            None => m.rank.is_some(),
        } || ctx.analysis.ranks.is_some();
        Some(Outside {
            outside,
            distributed,
        })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let o = d.outside;
        let outside = format_bytes(o.median_bytes.unsigned_abs());
        let mut explanation = format!(
            "the process holds {outside} of GPU memory outside PyTorch's allocator (median over \
             {} marks: {} on the device by NVML against {} reserved by the allocator, at most {}); \
             this is the CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers and any other \
             library allocating on the GPU",
            format_count(o.marks as u64),
            format_bytes(o.median_process_bytes),
            format_bytes(o.median_reserved_bytes),
            format_bytes(o.max_bytes.unsigned_abs()),
        );
        let mut evidence = vec![
            Evidence::bytes("median_outside_bytes", o.median_bytes as f64),
            Evidence::bytes("max_outside_bytes", o.max_bytes as f64),
            Evidence::bytes("median_process_gpu_bytes", o.median_process_bytes as f64),
            Evidence::bytes("median_reserved_bytes", o.median_reserved_bytes as f64),
            Evidence::count("marks", o.marks as f64),
        ];
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
                    ": the first step of a distributed run, where the first collective \
                     (DDP's all-reduce in backward, FSDP's all-gather in forward) creates NCCL's \
                     communicators and buffers"
                }
                (true, false) => ": the first step, where libraries set up their workspaces",
                (false, _) => "",
            };
            explanation.push_str(&format!(
                "; it rose by {} {between}{why}",
                format_bytes(rise.bytes)
            ));
            evidence.push(Evidence::bytes("largest_rise_bytes", rise.bytes as f64));
            evidence.push(Evidence::count("largest_rise_step", rise.to_step as f64));
        }
        let change = format!(
            "count the {outside} in the memory budget (torch.cuda.memory_allocated() does not see \
             it); if it is more than the CUDA context needs, look for other libraries on the GPU \
             (CuPy, JAX, TensorRT, a CUDA context created in a DataLoader worker), lower \
             NCCL_BUFFSIZE, or cap cuDNN workspaces with torch.backends.cudnn.benchmark=False"
        );
        finding(
            self,
            Severity::Info,
            format!("{outside} of GPU memory is outside the allocator"),
            explanation,
            change,
            evidence,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{evidence, find, with_context};
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::{Run, add_outside_allocator};

    #[test]
    fn large_gap_at_the_peak_is_fragmentation() {
        let run = Run {
            fragmentation_bytes: 10 * GIB,
            ..Run::default()
        };
        let trace = run.build();
        let (gap, large, retries) = with_context(&trace, |ctx| {
            let d = Fragmentation.detect(ctx).unwrap();
            (d.pressure.peak_gap.bytes, d.large_gap, d.retries)
        });
        assert_eq!((gap, large, retries), (10 * GIB, true, 0));
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
