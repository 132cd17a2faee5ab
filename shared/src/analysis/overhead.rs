//! GPU memory the process holds outside PyTorch's caching allocator.
//!
//! NVML sees everything the process has on the device; the allocator only sees its own segments.
//! The difference is the CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers and any other
//! library allocating on the GPU. It is invisible to `torch.cuda.memory_allocated()` but counts
//! toward an OOM, so batch-size arithmetic that ignores it is optimistic. It is measured at marks,
//! where the allocator's snapshot and the sampled process memory describe the same instant.
//!
//! The process reading is slow (NVML's per-process query runs about once a second), so at a mark
//! it can predate the allocator's growth: a process never holds less than its allocator has
//! reserved, and a mark where the last reading says so is left out as stale rather than read as
//! negative memory outside the allocator (an H100 OOM trace showed "-24 MiB" that way).

use serde::Serialize;

use crate::analysis::fit::median;
use crate::analysis::metrics::{MarkValues, Metric, MetricKey, counter_with_data, reserved_metric};
use crate::analysis::stages::signed_delta;
use crate::model::{CounterKind, Trace};

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
}

/// Measures memory outside the allocator; `None` without a mark where both values are known and
/// the process reading is not stale.
pub fn outside_allocator(trace: &Trace, values: &MarkValues) -> Option<OutsideAllocator> {
    let process = Metric::Counter(counter_with_data(trace, CounterKind::ProcessGpu)?);
    let reserved = reserved_metric(trace)?;
    let (p, r) = (values.index_of(process)?, values.index_of(reserved)?);
    let pairs: Vec<(u64, u64)> = values
        .column(p)
        .iter()
        .zip(values.column(r))
        .filter_map(|(p, r)| p.zip(*r))
        .filter(|(process, reserved)| process >= reserved)
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let mut diffs: Vec<f64> = pairs
        .iter()
        .map(|(p, r)| signed_delta(*p, *r) as f64)
        .collect();
    let max_bytes = pairs.iter().map(|(p, r)| signed_delta(*p, *r)).max()?;
    let median_of = |f: fn(&(u64, u64)) -> u64| {
        let mut v: Vec<f64> = pairs.iter().map(|x| f(x) as f64).collect();
        median(&mut v) as u64
    };
    Some(OutsideAllocator {
        process_metric: values.key(p),
        reserved_metric: values.key(r),
        marks: pairs.len(),
        median_bytes: median(&mut diffs) as i64,
        max_bytes,
        median_process_bytes: median_of(|x| x.0),
        median_reserved_bytes: median_of(|x| x.1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testkit::{GIB, MIB, Run};

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
        let column = trace.samples.column_mut(id);
        let half = column.len() / 2;
        column[..half].fill(0);
        let o = outside_allocator(&trace, &MarkValues::new(&trace)).unwrap();
        assert!(o.marks > 0 && o.marks < 240, "{}", o.marks);
        assert_eq!(o.median_bytes, (600 * MIB) as i64);
        trace.samples.column_mut(id).fill(0);
        assert!(outside_allocator(&trace, &MarkValues::new(&trace)).is_none());
    }

    #[test]
    fn needs_both_sides() {
        assert!(
            measure(&Run {
                snapshots: false,
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
