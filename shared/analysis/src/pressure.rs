//! Allocator pressure: memory the caching allocator holds but tensors do not use.
//!
//! PyTorch's caching allocator keeps freed blocks to reuse them, so `reserved` is normally above
//! `allocated`. The gap becomes a problem when it is large at the peak (blocks of the wrong sizes,
//! split blocks that cannot serve a large request), and the allocator itself says so when it has
//! to free its cache and retry an allocation (`num_alloc_retries`): that is slow, and one step
//! away from an OOM with "free" memory on the device. This module measures both, from the
//! statistics at marks and from the sampled allocator counters when the recorder has them.

use serde::Serialize;

use crate::marks::StageAt;
use crate::metrics::counter_with_data;
use oomscope_format::AllocatorQuantity;
use oomscope_format::{CounterKind, MISSING, Trace};

/// Reserved and allocated at one instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gap {
    /// `reserved − allocated` (saturating).
    pub bytes: u64,
    /// The gap as a share of reserved.
    pub fraction_of_reserved: f64,
    /// Allocator reserved.
    pub reserved_bytes: u64,
    /// Allocator allocated.
    pub allocated_bytes: u64,
    /// When (for [`PressureReport::peak_gap`], when reserved reached its peak).
    pub t_us: u64,
    /// The stage active then.
    pub stage: Option<StageAt>,
}

impl Gap {
    fn new(trace: &Trace, reserved_bytes: u64, allocated_bytes: u64, t_us: u64) -> Gap {
        let bytes = reserved_bytes.saturating_sub(allocated_bytes);
        Gap {
            bytes,
            fraction_of_reserved: if reserved_bytes > 0 {
                bytes as f64 / reserved_bytes as f64
            } else {
                0.0
            },
            reserved_bytes,
            allocated_bytes,
            t_us,
            stage: StageAt::at(trace, t_us),
        }
    }
}

/// Fragmentation and retry pressure over the whole trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PressureReport {
    /// Whether the allocator's statistics at marks were used (`from_snapshots` in JSON, its name
    /// there since the first release).
    #[serde(rename = "from_snapshots")]
    pub from_marks: bool,
    /// Whether sampled allocator counters were used.
    pub from_counters: bool,
    /// The largest gap at any one instant. Right after backward this is mostly cached
    /// activation memory waiting for the next forward pass, which is the cache doing its job.
    pub max_gap: Gap,
    /// Peak reserved minus peak allocated: what the allocator held at its highest beyond what
    /// tensors ever needed at once. Peaks use the allocator's own peak statistics when present,
    /// which see the transient peaks between samples.
    pub peak_gap: Gap,
    /// Largest inactive split bytes at any mark.
    pub max_inactive_split_bytes: Option<u64>,
    /// Where it was.
    pub max_inactive_split_at: Option<StageAt>,
    /// Times the allocator freed its cache and retried (a cumulative counter the marks carry).
    pub alloc_retries: Option<u64>,
    /// Out-of-memory errors the allocator raised (cumulative).
    pub allocator_ooms: Option<u64>,
    /// The first mark whose statistics show a retry.
    pub first_retry: Option<StageAt>,
}

/// Running maxima while scanning instants.
#[derive(Default)]
struct Scan {
    max_gap: Option<(u64, u64, u64)>,
    peak_reserved: Option<(u64, u64)>,
    peak_allocated: u64,
}

impl Scan {
    /// One instant with reserved, allocated and the peaks the allocator reported there.
    fn see(
        &mut self,
        t_us: u64,
        reserved: u64,
        allocated: u64,
        peak_reserved: u64,
        peak_allocated: u64,
    ) {
        let gap = reserved.saturating_sub(allocated);
        if self
            .max_gap
            .is_none_or(|(_, r, a)| gap > r.saturating_sub(a))
        {
            self.max_gap = Some((t_us, reserved, allocated));
        }
        let peak_reserved = peak_reserved.max(reserved);
        if self.peak_reserved.is_none_or(|(_, r)| peak_reserved > r) {
            self.peak_reserved = Some((t_us, peak_reserved));
        }
        self.peak_allocated = self.peak_allocated.max(peak_allocated).max(allocated);
    }
}

/// Measures allocator pressure; `None` when the trace has no allocator data.
pub fn pressure(trace: &Trace) -> Option<PressureReport> {
    let mut scan = Scan::default();
    let mut from_marks = false;
    let mut inactive: Option<(usize, u64)> = None;
    let mut retries: Option<u64> = None;
    let mut ooms: Option<u64> = None;
    let mut first_retry = None;
    for (i, (mark, stats)) in trace
        .marks
        .iter()
        .zip(trace.marks.allocator_iter())
        .enumerate()
    {
        let Some(s) = &stats else {
            continue;
        };
        from_marks = true;
        scan.see(
            mark.t_us,
            s.reserved_bytes,
            s.allocated_bytes,
            s.peak_reserved_bytes,
            s.peak_allocated_bytes,
        );
        if inactive.is_none_or(|(_, b)| s.inactive_split_bytes > b) {
            inactive = Some((i, s.inactive_split_bytes));
        }
        retries = Some(retries.map_or(s.num_alloc_retries, |r| r.max(s.num_alloc_retries)));
        ooms = Some(ooms.map_or(s.num_ooms, |o| o.max(s.num_ooms)));
        if first_retry.is_none() && s.num_alloc_retries > 0 {
            first_retry = Some(i);
        }
    }

    let reserved = counter_with_data(trace, CounterKind::Allocator(AllocatorQuantity::Reserved));
    let allocated = counter_with_data(trace, CounterKind::Allocator(AllocatorQuantity::Allocated));
    let mut from_counters = false;
    if let (Some(r), Some(a)) = (reserved, allocated)
        && let (Some(rc), Some(ac)) = (trace.samples.column(r), trace.samples.column(a))
    {
        let peak_column =
            |kind| counter_with_data(trace, kind).and_then(|id| trace.samples.column(id));
        let peak_r = peak_column(CounterKind::Allocator(AllocatorQuantity::PeakReserved));
        let peak_a = peak_column(CounterKind::Allocator(AllocatorQuantity::PeakAllocated));
        let present = |column: Option<oomscope_format::Column<'_>>, row: usize| {
            column
                .and_then(|c| c.get(row))
                .filter(|v| *v != MISSING)
                .unwrap_or(0)
        };
        for (row, (t_us, (rv, av))) in trace
            .samples
            .times_us()
            .iter()
            .zip(rc.iter().zip(ac.iter()))
            .enumerate()
        {
            if rv == MISSING || av == MISSING {
                continue;
            }
            from_counters = true;
            scan.see(t_us, rv, av, present(peak_r, row), present(peak_a, row));
        }
    }

    let (t_us, reserved_bytes, allocated_bytes) = scan.max_gap?;
    let max_gap = Gap::new(trace, reserved_bytes, allocated_bytes, t_us);
    let (peak_t_us, peak_reserved) = scan.peak_reserved?;
    let peak_gap = Gap::new(trace, peak_reserved, scan.peak_allocated, peak_t_us);
    Some(PressureReport {
        from_marks,
        from_counters,
        max_gap,
        peak_gap,
        max_inactive_split_bytes: inactive.map(|(_, b)| b),
        max_inactive_split_at: inactive.and_then(|(i, _)| StageAt::of_mark(trace, i)),
        alloc_retries: retries,
        allocator_ooms: ooms,
        first_retry: first_retry.and_then(|i| StageAt::of_mark(trace, i)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    #[test]
    fn healthy_cache_has_a_small_peak_gap() {
        let report = pressure(&Run::default().build()).unwrap();
        assert!(report.from_marks && !report.from_counters);
        // At the peak, reserved is only the default 512 MiB above allocated.
        assert_eq!(report.peak_gap.bytes, 512 * MIB);
        assert_eq!(report.peak_gap.reserved_bytes, 28 * GIB + 512 * MIB);
        // After backward the cache holds the freed activations: a large instantaneous gap.
        assert_eq!(report.max_gap.bytes, 12 * GIB + 512 * MIB);
        assert_eq!(
            report.max_gap.stage.as_ref().unwrap().stage,
            "post_backward"
        );
        assert_eq!(report.alloc_retries, Some(0));
        assert_eq!(report.allocator_ooms, Some(0));
        assert!(report.first_retry.is_none());
        assert_eq!(report.max_inactive_split_bytes, Some(64 * MIB));
    }

    #[test]
    fn fragmentation_and_retries_are_measured() {
        let run = Run {
            fragmentation_bytes: 6 * GIB,
            alloc_retries_from: Some((12, 2)),
            ..Run::default()
        };
        let report = pressure(&run.build()).unwrap();
        assert_eq!(report.peak_gap.bytes, 6 * GIB);
        assert!((report.peak_gap.fraction_of_reserved - 6.0 / 34.0).abs() < 1e-9);
        assert_eq!(report.alloc_retries, Some(2 * 48));
        let first = report.first_retry.unwrap();
        assert_eq!((first.stage.as_str(), first.step), ("post_forward", 12));
    }

    #[test]
    fn counters_alone_are_enough() {
        let run = Run {
            allocator_stats: false,
            allocator_counters: true,
            fragmentation_bytes: 2 * GIB,
            ..Run::default()
        };
        let report = pressure(&run.build()).unwrap();
        assert!(!report.from_marks && report.from_counters);
        assert_eq!(report.peak_gap.bytes, 2 * GIB);
        assert_eq!(report.alloc_retries, None);
        assert_eq!(report.max_inactive_split_bytes, None);
    }

    #[test]
    fn no_allocator_data_no_report() {
        let run = Run {
            allocator_stats: false,
            ..Run::default()
        };
        assert!(pressure(&run.build()).is_none());
    }
}
