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
use oomscope_format::{CounterId, CounterKind, MISSING, Trace};

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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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

    /// This scan followed by `later`'s readings: what one scan of both in turn finds (a later
    /// reading wins only when larger).
    fn then(&self, later: &Scan) -> Scan {
        let gap = |(_, reserved, allocated): (u64, u64, u64)| reserved.saturating_sub(allocated);
        let later_gap = later
            .max_gap
            .filter(|g| self.max_gap.is_none_or(|best| gap(*g) > gap(best)));
        let later_peak = later
            .peak_reserved
            .filter(|(_, r)| self.peak_reserved.is_none_or(|(_, best)| *r > best));
        Scan {
            max_gap: later_gap.or(self.max_gap),
            peak_reserved: later_peak.or(self.peak_reserved),
            peak_allocated: self.peak_allocated.max(later.peak_allocated),
        }
    }
}

/// Measures allocator pressure; `None` when the trace has no allocator data.
#[cfg(test)] // the batch form, the folds' oracle in the tests
pub fn pressure(trace: &Trace) -> Option<PressureReport> {
    let mut scan = PressureScan::default();
    scan.extend(trace);
    scan.report(trace)
}

/// [`pressure`]'s passes over the marks' statistics and the allocator's sampled counters, kept
/// as folds: a live view keeps one from one analysis of a trace still being written to the next
/// ([`crate::Prepared`]) and folds in only the marks and rows appended (both are final once
/// written). The marks and the rows are scanned apart and joined marks first, as one scan of
/// the marks then the rows finds. Each pass begins again when what it reads shrinks; the rows'
/// when the counters it reads change.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PressureScan {
    /// The marks folded.
    marks: usize,
    on_marks: Scan,
    /// A mark carried the allocator's statistics.
    from_marks: bool,
    /// The largest inactive split bytes, as (mark, bytes), the first among equals.
    inactive: Option<(usize, u64)>,
    retries: Option<u64>,
    ooms: Option<u64>,
    /// The first mark with a retry.
    first_retry: Option<usize>,
    /// The sampled counters read: reserved, allocated, peak reserved, peak allocated.
    counters: Option<[Option<CounterId>; 4]>,
    /// The rows folded.
    rows: usize,
    on_rows: Scan,
    /// A row had both reserved and allocated bytes.
    from_counters: bool,
}

impl PressureScan {
    /// Folds in the marks and rows of `trace` not folded yet.
    pub fn extend(&mut self, trace: &Trace) {
        self.extend_marks(trace);
        self.extend_rows(trace);
    }

    fn extend_marks(&mut self, trace: &Trace) {
        if trace.marks.len() < self.marks {
            *self = PressureScan {
                counters: self.counters,
                rows: self.rows,
                on_rows: self.on_rows.clone(),
                from_counters: self.from_counters,
                ..PressureScan::default()
            };
        }
        let start = self.marks;
        self.marks = trace.marks.len();
        for (i, (mark, stats)) in trace
            .marks
            .iter()
            .skip(start)
            .zip(trace.marks.allocator_iter_from(start))
            .enumerate()
        {
            let Some(s) = &stats else {
                continue;
            };
            let i = start + i;
            self.from_marks = true;
            self.on_marks.see(
                mark.t_us,
                s.reserved_bytes,
                s.allocated_bytes,
                s.peak_reserved_bytes,
                s.peak_allocated_bytes,
            );
            if self
                .inactive
                .is_none_or(|(_, b)| s.inactive_split_bytes > b)
            {
                self.inactive = Some((i, s.inactive_split_bytes));
            }
            self.retries = Some(
                self.retries
                    .map_or(s.num_alloc_retries, |r| r.max(s.num_alloc_retries)),
            );
            self.ooms = Some(self.ooms.map_or(s.num_ooms, |o| o.max(s.num_ooms)));
            if self.first_retry.is_none() && s.num_alloc_retries > 0 {
                self.first_retry = Some(i);
            }
        }
    }

    fn extend_rows(&mut self, trace: &Trace) {
        let id = |quantity| counter_with_data(trace, CounterKind::Allocator(quantity));
        let counters = [
            AllocatorQuantity::Reserved,
            AllocatorQuantity::Allocated,
            AllocatorQuantity::PeakReserved,
            AllocatorQuantity::PeakAllocated,
        ]
        .map(id);
        if self.counters != Some(counters) || trace.samples.len() < self.rows {
            (self.counters, self.rows) = (Some(counters), 0);
            (self.on_rows, self.from_counters) = (Scan::default(), false);
        }
        let [Some(r), Some(a), peak_r, peak_a] = counters else {
            return;
        };
        let (Some(rc), Some(ac)) = (trace.samples.column(r), trace.samples.column(a)) else {
            return;
        };
        let peak_column = |id: Option<CounterId>| id.and_then(|id| trace.samples.column(id));
        let (peak_r, peak_a) = (peak_column(peak_r), peak_column(peak_a));
        let present = |column: Option<oomscope_format::Column<'_>>, row: usize| {
            column
                .and_then(|c| c.get(row))
                .filter(|v| *v != MISSING)
                .unwrap_or(0)
        };
        let rows = self.rows..trace.samples.len();
        self.rows = rows.end;
        let times = trace.samples.times_us();
        for (row, (t_us, (rv, av))) in times
            .range(rows.clone())
            .zip(rc.range(rows.clone()).zip(ac.range(rows.clone())))
            .enumerate()
        {
            if rv == MISSING || av == MISSING {
                continue;
            }
            let row = rows.start + row;
            self.from_counters = true;
            self.on_rows
                .see(t_us, rv, av, present(peak_r, row), present(peak_a, row));
        }
    }

    /// [`pressure`] of `trace`, the trace this was brought up to.
    pub fn report(&self, trace: &Trace) -> Option<PressureReport> {
        let scan = self.on_marks.then(&self.on_rows);
        let (t_us, reserved_bytes, allocated_bytes) = scan.max_gap?;
        let max_gap = Gap::new(trace, reserved_bytes, allocated_bytes, t_us);
        let (peak_t_us, peak_reserved) = scan.peak_reserved?;
        let peak_gap = Gap::new(trace, peak_reserved, scan.peak_allocated, peak_t_us);
        Some(PressureReport {
            from_marks: self.from_marks,
            from_counters: self.from_counters,
            max_gap,
            peak_gap,
            max_inactive_split_bytes: self.inactive.map(|(_, b)| b),
            max_inactive_split_at: self.inactive.and_then(|(i, _)| StageAt::of_mark(trace, i)),
            alloc_retries: self.retries,
            allocator_ooms: self.ooms,
            first_retry: self.first_retry.and_then(|i| StageAt::of_mark(trace, i)),
        })
    }
}

impl crate::fold::Fold for PressureScan {
    fn clear(&mut self, _: &crate::fold::FoldInput<'_>) {
        *self = PressureScan::default();
    }

    fn extend(&mut self, input: &crate::fold::FoldInput<'_>) {
        PressureScan::extend(self, input.trace);
    }
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
