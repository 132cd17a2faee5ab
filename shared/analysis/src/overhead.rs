//! GPU memory the process holds outside PyTorch's caching allocator.
//!
//! NVML sees everything the process has on the device; the allocator only sees its own segments.
//! The difference is the CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers and any other
//! library allocating on the GPU. It is invisible to `torch.cuda.memory_allocated()` but counts
//! toward an OOM, so batch-size arithmetic that ignores it is optimistic. It is measured at marks,
//! where the allocator's statistics and the sampled process memory describe the same instant.
//!
//! The process reading is slow (NVML's per-process query runs once a second, and within ~0.1 s
//! of a device's use moving), so at a mark it can predate the allocator's growth: a process never
//! holds less than its allocator has reserved, and a mark where the last reading says so is left
//! out as stale rather than read as negative memory outside the allocator (an H100 OOM trace
//! showed "-24 MiB" that way).

use serde::Serialize;

use crate::fit::median;
use crate::metrics::{MarkValues, MetricKey, counter_with_data, reserved_metric};
use crate::stages::signed_delta;
use oomscope_format::{CounterId, CounterKind, Trace};

/// Process GPU memory minus allocator reserved, over the marks that have both.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutsideAllocator {
    /// Label of the process memory metric.
    pub process_metric: MetricKey,
    /// Label of the allocator reserved metric.
    pub reserved_metric: MetricKey,
    /// Marks with both values.
    pub marks: usize,
    /// Median of `process − reserved`.
    pub median_bytes: i64,
    /// Largest `process − reserved`.
    pub max_bytes: i64,
    /// Median process GPU memory over the same marks.
    pub median_process_bytes: u64,
    /// Median allocator reserved over the same marks.
    pub median_reserved_bytes: u64,
    /// The largest rise of `process − reserved` from one mark to the next, when it reached
    /// [`OUTSIDE_RISE_MIN_BYTES`]: memory a library took without the allocator at that point
    /// (NCCL's buffers and communicators at a distributed run's first collective, cuBLAS
    /// workspaces at the first matmul).
    pub largest_rise: Option<OutsideRise>,
}

/// A rise of the memory outside the allocator between two consecutive marks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutsideRise {
    /// How much.
    pub bytes: u64,
    /// The mark before.
    pub from_stage: String,
    /// Its step.
    pub from_step: u64,
    /// The mark at which it was there.
    pub to_stage: String,
    /// Its step.
    pub to_step: u64,
    /// Whether it came at the first step the trace marks (setup and first collectives), rather
    /// than in steady training.
    pub first_step: bool,
}

/// Smallest rise of the memory outside the allocator between two marks worth naming.
pub const OUTSIDE_RISE_MIN_BYTES: u64 = 64 << 20;

/// The process's GPU memory that goes with the allocator's `reserved_bytes` at mark `mark`: the
/// poller's last reading before it, or, when that one predates the allocator's growth (it is
/// below the reserved bytes), its first reading after the mark while the allocator's reserved
/// bytes (metric number `reserved` of `values`) are still those. The poller asks again within
/// ~0.1 s of a growth, so a peak in a program's last second is still read (the H200 proof).
pub fn process_gpu_at_mark(
    trace: &Trace,
    values: &MarkValues,
    process: CounterId,
    reserved: usize,
    mark: usize,
    reserved_bytes: u64,
) -> Option<u64> {
    let t_us = trace.marks.get(mark)?.t_us;
    if let Some(bytes) = trace
        .samples
        .value_at(process, t_us)
        .filter(|b| *b >= reserved_bytes)
    {
        return Some(bytes);
    }
    let until_us = (mark + 1..trace.marks.len())
        .find(|&m| values.get(m, reserved).is_some_and(|r| r != reserved_bytes))
        .map_or(u64::MAX, |m| trace.marks[m].t_us);
    trace
        .samples
        .points(process)
        .find(|(t, _)| *t > t_us)
        .filter(|(t, bytes)| *t <= until_us && *bytes >= reserved_bytes)
        .map(|(_, bytes)| bytes)
}

/// Measures memory outside the allocator; `None` without a mark where both values are known and
/// the process reading is not stale.
pub fn outside_allocator(trace: &Trace, values: &MarkValues) -> Option<OutsideAllocator> {
    let process = MetricKey::of_counter(trace, counter_with_data(trace, CounterKind::ProcessGpu)?);
    let reserved = reserved_metric(trace)?;
    let (p, r) = (values.index_of(process)?, values.index_of(reserved)?);
    // (mark index, process, reserved) where both are known, read again for each median rather
    // than kept: a day's marks would hold three copies of them at once (90 MB of 1.2 M marks).
    let both = || {
        values
            .column(p)
            .iter()
            .zip(values.column(r).iter())
            .enumerate()
            .filter_map(|(i, (p, r))| p.zip(r).map(|(p, r)| (i, p, r)))
            .filter(|(_, process, reserved)| process >= reserved)
    };
    let mut marks = 0;
    let mut first_step = u64::MAX;
    let mut max_bytes = i64::MIN;
    let mut previous: Option<(usize, u64)> = None;
    // (from, to, rise), the largest, the earliest among equals.
    let mut rise: Option<(usize, usize, u64)> = None;
    let mut scratch: Vec<f64> = Vec::new();
    for (i, process, reserved) in both() {
        marks += 1;
        first_step = first_step.min(trace.marks[i].step);
        max_bytes = max_bytes.max(signed_delta(process, reserved));
        scratch.push(signed_delta(process, reserved) as f64);
        let outside = process - reserved;
        if let Some((from, before)) = previous {
            let bytes = outside.saturating_sub(before);
            if bytes >= OUTSIDE_RISE_MIN_BYTES && rise.is_none_or(|(_, _, most)| bytes > most) {
                rise = Some((from, i, bytes));
            }
        }
        previous = Some((i, outside));
    }
    if marks == 0 {
        return None;
    }
    let largest_rise = rise.map(|(from, to, bytes)| {
        let (a, b) = (&trace.marks[from], &trace.marks[to]);
        OutsideRise {
            bytes,
            from_stage: a.name.to_string(),
            from_step: a.step,
            to_stage: b.name.to_string(),
            to_step: b.step,
            first_step: b.step == first_step,
        }
    });
    let median_bytes = median(&mut scratch) as i64;
    let mut median_of = |f: fn((usize, u64, u64)) -> u64| {
        scratch.clear();
        scratch.extend(both().map(|x| f(x) as f64));
        median(&mut scratch) as u64
    };
    Some(OutsideAllocator {
        process_metric: values.key(p),
        reserved_metric: values.key(r),
        marks,
        median_bytes,
        max_bytes,
        median_process_bytes: median_of(|x| x.1),
        median_reserved_bytes: median_of(|x| x.2),
        largest_rise,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::{Run, add_outside_allocator};

    fn measure(run: &Run) -> Option<OutsideAllocator> {
        let trace = run.build();
        outside_allocator(&trace, &MarkValues::new(&trace))
    }

    #[test]
    fn context_size_is_the_median_difference() {
        let o = measure(&Run::default()).unwrap();
        assert_eq!(o.median_bytes, (600 * MIB) as i64);
        assert_eq!(o.max_bytes, (600 * MIB) as i64);
        assert_eq!(o.marks, 240);
        assert_eq!(o.process_metric.label(), "gpu0.process");
        assert_eq!(o.reserved_metric.label(), "reserved");
        assert_eq!(o.median_reserved_bytes, 28 * GIB + 512 * MIB);
    }

    #[test]
    fn stale_process_readings_are_left_out() {
        let mut trace = Run::default().build();
        let id = trace.counter(CounterKind::ProcessGpu, Some(0)).unwrap();
        trace.samples.edit_column(id, |column| {
            let half = column.len() / 2;
            column[..half].fill(0);
        });
        let o = outside_allocator(&trace, &MarkValues::new(&trace)).unwrap();
        assert!(o.marks > 0 && o.marks < 240, "{}", o.marks);
        assert_eq!(o.median_bytes, (600 * MIB) as i64);
        trace.samples.edit_column(id, |c| c.fill(0));
        assert!(outside_allocator(&trace, &MarkValues::new(&trace)).is_none());
    }

    #[test]
    fn a_rise_at_the_first_step_is_named_with_its_marks() {
        let mut trace = Run::default().build();
        assert_eq!(
            outside_allocator(&trace, &MarkValues::new(&trace))
                .unwrap()
                .largest_rise,
            None,
            "a steady context"
        );
        // 512 MiB more on the device from the fourth mark on (step 0's post_backward: where
        // DDP's first all-reduce creates NCCL's buffers), the allocator unchanged.
        add_outside_allocator(&mut trace, 3, 512 * MIB);
        let o = outside_allocator(&trace, &MarkValues::new(&trace)).unwrap();
        let rise = o.largest_rise.unwrap();
        assert_eq!(rise.bytes, 512 * MIB);
        assert_eq!(
            (rise.to_stage.as_str(), rise.to_step),
            (trace.marks[3].name.as_ref(), trace.marks[3].step)
        );
        assert_eq!(rise.from_stage.as_str(), trace.marks[2].name.as_ref());
        assert!(rise.first_step);
    }

    #[test]
    fn needs_both_sides() {
        assert!(
            measure(&Run {
                allocator_stats: false,
                ..Run::default()
            })
            .is_none()
        );
        assert!(
            measure(&Run {
                counters: false,
                ..Run::default()
            })
            .is_none()
        );
    }
}
