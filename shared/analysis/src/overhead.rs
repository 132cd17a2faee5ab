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

use rustc_hash::FxHashMap as HashMap;

use crate::metrics::{MarkValues, MetricKey, counter_with_data, reserved_metric};
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
    let until_us = values
        .column(reserved)
        .first_other(mark + 1, reserved_bytes)
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
#[cfg(test)] // the batch form, the folds' oracle in the tests
pub fn outside_allocator(trace: &Trace, values: &MarkValues) -> Option<OutsideAllocator> {
    OutsideScan::default().report(trace, values)
}

/// [`outside_allocator`] as a fold over the marks (`crate::Prepared` keeps it from one analysis
/// of a trace still being written to the next and adds the marks whose values are settled).
/// Its medians are exact: each series is kept as counts of its distinct values, which are few
/// (memory moves by whole pages and the allocator's segments: at most 5 distinct values in the
/// committed GPU traces, 1 in the day's 1.2 M marks), where a copy of every value would be
/// 10 MB a series on a day-long trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutsideScan {
    /// The metrics read (process, reserved, as numbered in the values), `None` before any.
    columns: Option<(usize, usize)>,
    /// Marks read.
    marks: usize,
    /// Marks with both values and a reading not stale.
    both: usize,
    first_step: Option<u64>,
    max_bytes: Option<u64>,
    /// The last such mark and its bytes outside the allocator.
    previous: Option<(usize, u64)>,
    /// (from, to, rise), the largest, the earliest among equals.
    rise: Option<(usize, usize, u64)>,
    /// Each series' values and how often each came.
    outside: HashMap<u64, usize>,
    process: HashMap<u64, usize>,
    reserved: HashMap<u64, usize>,
}

impl OutsideScan {
    /// The metrics of `values` it reads: the process's GPU memory and the allocator's reserved.
    fn columns_of(trace: &Trace, values: &MarkValues) -> Option<(usize, usize)> {
        let process =
            MetricKey::of_counter(trace, counter_with_data(trace, CounterKind::ProcessGpu)?);
        Some((
            values.index_of(process)?,
            values.index_of(reserved_metric(trace)?)?,
        ))
    }

    /// Marks read so far.
    pub fn marks(&self) -> usize {
        self.marks
    }

    /// The marks from the last read up to (not including) mark `to` read; all from the first
    /// when the metrics read are others now (a counter's first readings).
    pub fn add(&mut self, trace: &Trace, values: &MarkValues, to: usize) {
        let columns = OutsideScan::columns_of(trace, values);
        if columns != self.columns {
            *self = OutsideScan {
                columns,
                ..OutsideScan::default()
            };
        }
        let from = self.marks;
        self.marks = self.marks.max(to);
        let Some((p, r)) = columns else {
            return;
        };
        if to <= from {
            return;
        }
        let process = values.column(p).range(from..to);
        let reserved = values.column(r).range(from..to);
        for (i, (process, reserved)) in process.iter().zip(reserved.iter()).enumerate() {
            let Some((process, reserved)) = process.zip(reserved) else {
                continue;
            };
            if process < reserved {
                continue;
            }
            let i = from + i;
            let outside = process - reserved;
            self.both += 1;
            let step = trace.marks[i].step;
            self.first_step = Some(self.first_step.map_or(step, |f| f.min(step)));
            self.max_bytes = Some(self.max_bytes.map_or(outside, |m| m.max(outside)));
            if let Some((from, before)) = self.previous {
                let bytes = outside.saturating_sub(before);
                if bytes >= OUTSIDE_RISE_MIN_BYTES
                    && self.rise.is_none_or(|(_, _, most)| bytes > most)
                {
                    self.rise = Some((from, i, bytes));
                }
            }
            self.previous = Some((i, outside));
            *self.outside.entry(outside).or_default() += 1;
            *self.process.entry(process).or_default() += 1;
            *self.reserved.entry(reserved).or_default() += 1;
        }
    }

    /// [`outside_allocator`] of `trace`, the trace these marks were read from: what was read and
    /// the marks after it.
    pub fn report(&self, trace: &Trace, values: &MarkValues) -> Option<OutsideAllocator> {
        let mut all = self.clone();
        all.add(trace, values, trace.marks.len());
        let (p, r) = all.columns?;
        if all.both == 0 {
            return None;
        }
        let largest_rise = all.rise.map(|(from, to, bytes)| {
            let (a, b) = (&trace.marks[from], &trace.marks[to]);
            OutsideRise {
                bytes,
                from_stage: a.name.to_string(),
                from_step: a.step,
                to_stage: b.name.to_string(),
                to_step: b.step,
                first_step: Some(b.step) == all.first_step,
            }
        });
        Some(OutsideAllocator {
            process_metric: values.key(p),
            reserved_metric: values.key(r),
            marks: all.both,
            median_bytes: counted_median(&all.outside, all.both) as i64,
            max_bytes: all
                .max_bytes
                .map_or(i64::MIN, |m| i64::try_from(m).unwrap_or(i64::MAX)),
            median_process_bytes: counted_median(&all.process, all.both) as u64,
            median_reserved_bytes: counted_median(&all.reserved, all.both) as u64,
            largest_rise,
        })
    }
}

/// The median of the `n` values `counts` holds (each value, how often), as
/// [`crate::fit::median`] takes it: the middle one, or the mean of the two middle ones.
fn counted_median(counts: &HashMap<u64, usize>, n: usize) -> f64 {
    let mut values: Vec<u64> = counts.keys().copied().collect();
    values.sort_unstable();
    // The values at sorted positions `n / 2 - 1` (when n is even) and `n / 2`.
    let mut seen = 0;
    let (mut lower, mut upper) = (None, None);
    for value in values {
        let next = seen + counts[&value];
        if n.is_multiple_of(2) && lower.is_none() && n / 2 >= 1 && n / 2 - 1 < next {
            lower = Some(value as f64);
        }
        if n / 2 < next {
            upper = Some(value as f64);
            break;
        }
        seen = next;
    }
    match (lower, upper) {
        (Some(lower), Some(upper)) => (lower + upper) / 2.0,
        (_, upper) => upper.unwrap_or(0.0),
    }
}

impl crate::fold::Fold for OutsideScan {
    fn clear(&mut self, _: &crate::fold::FoldInput<'_>) {
        *self = OutsideScan::default();
    }

    fn extend(&mut self, input: &crate::fold::FoldInput<'_>) {
        self.add(input.trace, input.values, input.settled);
    }

    fn stale(&self, changed: usize) -> bool {
        crate::fold::values_changed(self.marks(), changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::{Run, add_outside_allocator};

    proptest::proptest! {
        /// The median of counted values is the median of the values.
        #[test]
        fn a_median_of_counts_is_the_values_median(
            values in proptest::collection::vec(0u64..40, 1..200),
        ) {
            let mut counts = HashMap::default();
            for v in &values {
                *counts.entry(v << 21).or_default() += 1;
            }
            let mut plain: Vec<f64> = values.iter().map(|v| (v << 21) as f64).collect();
            proptest::prop_assert_eq!(
                counted_median(&counts, values.len()),
                crate::fit::median(&mut plain)
            );
        }
    }

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
