//! Growth over time for runs without step marks.
//!
//! A non-Python program, or a Python one run with the hooks off, has no stages and no steps, so
//! the per-stage leak fits ([`crate::leaks`]) have nothing to compare. Memory that
//! climbs for the whole run is still a leak, and the counters show it: this module fits the
//! process's GPU memory, the device's used memory and the host RSS of the process tree against
//! time.
//!
//! Training memory is not a line: it rises while the model, the optimizer and the allocator's
//! cache warm up, then saws up and down inside every step. So the first [`WARMUP_SHARE`] of the
//! run is skipped, the rest is cut into up to [`BUCKETS`] time slices and each slice contributes
//! its *lowest* reading (the floor a step returns to: a leak raises the floor, a large forward
//! pass only the ceiling), and the slices' floors are fitted robustly. A leak must be straight,
//! still rising in its second half (a cache that filled and stopped is not), and large against
//! the limit.

use serde::Serialize;

use crate::fit::{least_squares, robust_line};
use crate::leaks::{LimitBasis, MIN_GROWTH_BYTES, MIN_GROWTH_FRACTION_OF_LIMIT, limit_of};
use crate::metrics::MetricKey;
use oomscope_format::{CounterId, CounterKind, MISSING, Trace};

/// The start of the run skipped as warm-up.
pub const WARMUP_SHARE: f64 = 0.2;

/// Time slices the rest is cut into (at most).
pub const BUCKETS: usize = 64;

/// Slices with a reading a fit needs.
pub const MIN_BUCKETS: usize = 12;

/// R² a leak over time needs.
pub const MIN_R_SQUARED: f64 = 0.9;

/// The second half must rise at least this share of the whole fit's slope.
pub const SUSTAINED_SHARE: f64 = 0.5;

/// Time the run must span after the warm-up for a trend to be fitted at all.
pub const MIN_SPAN_US: u64 = 10_000_000;

/// A line fitted to one counter against time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeTrend {
    /// The counter.
    pub metric: MetricKey,
    /// True for host memory.
    pub host_memory: bool,
    /// Fitted growth per second.
    pub slope_bytes_per_s: f64,
    /// R² of the fit of the slices' floors.
    pub r_squared: f64,
    /// Slices fitted.
    pub points: usize,
    /// Start of the fitted span (after the warm-up).
    pub from_us: u64,
    /// End of the fitted span.
    pub to_us: u64,
    /// Fitted growth over the span.
    pub growth_bytes: i64,
    /// The floor at the end of the span.
    pub current_bytes: u64,
    /// The second half still rises.
    pub sustained: bool,
    /// Growth needed to call it a leak.
    pub min_leak_growth_bytes: u64,
    /// Straight, sustained, rising, long and large enough.
    pub is_leak: bool,
    /// The limit and what it is, when known.
    pub limit_bytes: Option<u64>,
    /// What the limit is.
    pub limit_basis: Option<LimitBasis>,
    /// Time until the floor reaches the limit at this rate (leaks with a limit only).
    pub time_to_full_us: Option<u64>,
}

impl TimeTrend {
    /// Whether the fit is as straight as a leak's must be ([`MIN_R_SQUARED`]).
    pub fn straight(&self) -> bool {
        self.r_squared >= MIN_R_SQUARED
    }
}

/// The counters fitted, in order: per-process GPU memory, device used memory, host RSS.
const FITTED: [CounterKind; 4] = [
    CounterKind::ProcessGpu,
    CounterKind::GpuUsed,
    CounterKind::HostPss,
    CounterKind::HostRss,
];

/// Fits each watched counter against time. Empty when the trace has step marks: the per-stage
/// fits answer better then.
pub fn time_trends(trace: &Trace) -> Vec<TimeTrend> {
    fitted_counters(trace)
        .into_iter()
        .filter_map(|id| fit_counter(trace, id))
        .collect()
}

/// The counters [`time_trends`] fits, when it fits any.
fn fitted_counters(trace: &Trace) -> Vec<CounterId> {
    // Two steps marked: the per-stage fits answer (found at the second step, not by
    // collecting a day's 1.2 million marks' steps).
    let first_step = trace.marks.first().map(|m| m.step);
    if trace.marks.iter().any(|m| Some(m.step) != first_step) {
        return Vec::new();
    }
    // Host memory in use: the tree's PSS where it differs from its RSS, else the RSS.
    let host = crate::metrics::host_in_use(trace);
    FITTED
        .iter()
        .filter(|&&kind| {
            !matches!(kind, CounterKind::HostRss | CounterKind::HostPss)
                || host.is_some_and(|id| trace.counters[id.0 as usize].kind == kind)
        })
        .flat_map(|&kind| {
            trace
                .counters
                .iter()
                .enumerate()
                .filter(move |(_, c)| c.kind == kind)
                .map(|(i, _)| CounterId(i as u32))
        })
        .collect()
}

/// The sample rows the trends read (each slice's floor), so that a thinned copy of the trace
/// (`oomscope_report::reduce::thin_samples`) keeps them and its analysis stays the same.
pub fn rows_read(trace: &Trace) -> Vec<usize> {
    fitted_counters(trace)
        .into_iter()
        .flat_map(|id| floor_rows(trace, id).unwrap_or_default())
        .collect()
}

/// The row of each slice's lowest reading (the first such row), after the warm-up.
fn floor_rows(trace: &Trace, id: CounterId) -> Option<Vec<usize>> {
    let column = trace.samples.column(id)?;
    let times = trace.samples.times_us();
    let first = column.iter().position(|v| v != MISSING)?;
    let last = column.iter().rposition(|v| v != MISSING)?;
    let (first_us, last_us) = (times.at(first), times.at(last));
    let start_us = first_us + ((last_us - first_us) as f64 * WARMUP_SHARE) as u64;
    // Too short a run to say anything about a trend (and a rate over a second reads absurdly).
    let span_us = last_us
        .checked_sub(start_us)
        .filter(|s| *s >= MIN_SPAN_US)?;
    let width_us = span_us.div_ceil(BUCKETS as u64).max(1);
    // Each slot's lowest reading so far, as (row, value).
    let mut floors: Vec<Option<(usize, u64)>> = vec![None; BUCKETS];
    let rows = first..last + 1;
    for ((row, v), t) in rows
        .clone()
        .zip(column.range(rows.clone()))
        .zip(times.range(rows))
    {
        if v == MISSING || t < start_us {
            continue;
        }
        let slot = (((t - start_us) / width_us) as usize).min(BUCKETS - 1);
        let floor = &mut floors[slot];
        if floor.is_none_or(|(_, low)| v < low) {
            *floor = Some((row, v));
        }
    }
    Some(floors.into_iter().flatten().map(|(row, _)| row).collect())
}

fn fit_counter(trace: &Trace, id: CounterId) -> Option<TimeTrend> {
    let column = trace.samples.column(id)?;
    let times = trace.samples.times_us();
    let xy: Vec<(f64, f64)> = floor_rows(trace, id)?
        .into_iter()
        .map(|row| {
            (
                times.at(row) as f64 / 1e6,
                column.get(row).unwrap_or(MISSING) as f64,
            )
        })
        .collect();
    if xy.len() < MIN_BUCKETS {
        return None;
    }
    let robust = robust_line(&xy)?;
    let line = robust.line;
    let kept: Vec<(f64, f64)> = xy
        .iter()
        .zip(&robust.kept)
        .filter(|(_, k)| **k)
        .map(|(p, _)| *p)
        .collect();
    let (from_s, to_s) = (kept.first()?.0, kept.last()?.0);
    let growth = line.slope * (to_s - from_s);
    let sustained = least_squares(&kept[kept.len() / 2..])
        .is_some_and(|half| half.slope >= SUSTAINED_SHARE * line.slope);
    let metric = MetricKey::of_counter(trace, id);
    let limit = limit_of(trace, metric);
    let min_leak_growth_bytes = match limit {
        Some((l, _)) => MIN_GROWTH_BYTES.max((l as f64 * MIN_GROWTH_FRACTION_OF_LIMIT) as u64),
        None => MIN_GROWTH_BYTES,
    };
    let from_us = (from_s * 1e6) as u64;
    let to_us = (to_s * 1e6) as u64;
    let is_leak = line.slope > 0.0
        && line.r_squared >= MIN_R_SQUARED
        && sustained
        && to_us.saturating_sub(from_us) >= MIN_SPAN_US
        && growth >= min_leak_growth_bytes as f64;
    let current_bytes = line.at(to_s).max(0.0) as u64;
    let time_to_full_us = limit.filter(|_| is_leak).map(|(l, _)| {
        let seconds = l.saturating_sub(current_bytes) as f64 / line.slope;
        (seconds * 1e6) as u64
    });
    Some(TimeTrend {
        metric,
        host_memory: metric.is_host(),
        slope_bytes_per_s: line.slope,
        r_squared: line.r_squared,
        points: line.points,
        from_us,
        to_us,
        growth_bytes: growth.clamp(i64::MIN as f64, i64::MAX as f64) as i64,
        current_bytes,
        sustained,
        min_leak_growth_bytes,
        is_leak,
        limit_bytes: limit.map(|(l, _)| l),
        limit_basis: limit.map(|(_, b)| b),
        time_to_full_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_format::{GpuInfo, Metadata};

    /// A run with no marks: host RSS and process GPU memory sampled every 100 ms for `seconds`,
    /// each following `shape(t_s)`.
    fn unmarked(seconds: u64, shape: impl Fn(f64) -> u64) -> Trace {
        let mut trace = Trace {
            metadata: Metadata {
                gpus: vec![GpuInfo {
                    index: 0,
                    name: "test".into(),
                    total_memory_bytes: 80 * GIB,
                    ..GpuInfo::default()
                }],
                ..Metadata::default()
            },
            ..Trace::default()
        };
        let rss = trace.declare_counter(CounterKind::HostRss, None);
        let available = trace.declare_counter(CounterKind::HostAvailable, None);
        let gpu = trace.declare_counter(CounterKind::ProcessGpu, Some(0));
        for i in 0..seconds * 10 {
            let t_s = i as f64 / 10.0;
            let v = shape(t_s);
            trace.samples.push_row(
                i * 100_000,
                &[(rss, GIB + v), (available, 60 * GIB), (gpu, 2 * GIB + v)],
            );
        }
        trace
    }

    /// A training-like sawtooth: every 1 s step allocates 4 GiB and frees it.
    fn sawtooth(t_s: f64) -> u64 {
        if t_s.fract() < 0.5 { 4 * GIB } else { 0 }
    }

    #[test]
    fn steady_growth_without_marks_is_a_leak_with_a_time_to_full() {
        // 20 MiB/s under a sawtooth, for 120 s.
        let trace = unmarked(120, |t| sawtooth(t) + (t * (20 * MIB) as f64) as u64);
        let trends = time_trends(&trace);
        let labels: Vec<String> = trends.iter().map(|t| t.metric.label()).collect();
        assert_eq!(labels, ["gpu0.process", "host.rss"]);
        let gpu = &trends[0];
        assert!(gpu.is_leak, "{gpu:#?}");
        let rate = gpu.slope_bytes_per_s / MIB as f64;
        assert!((rate - 20.0).abs() < 0.5, "{rate}");
        let full = gpu.time_to_full_us.unwrap() as f64 / 1e6;
        // (80 GiB − (2 GiB + 20 MiB × ~119.5 s)) / 20 MiB/s ≈ 3 874 s.
        assert!((full - 3874.0).abs() < 60.0, "{full}");
        assert!(trends[1].is_leak && trends[1].host_memory);
    }

    #[test]
    fn warm_up_plateaus_and_sawtooth_are_not_leaks() {
        // A cache that fills for 30 s, then stays: a plateau.
        let plateau = unmarked(120, |t| {
            sawtooth(t) + (t.min(30.0) * (100 * MIB) as f64) as u64
        });
        assert!(time_trends(&plateau).iter().all(|t| !t.is_leak));
        // Only the sawtooth.
        assert!(
            time_trends(&unmarked(120, sawtooth))
                .iter()
                .all(|t| !t.is_leak)
        );
        // Too short to tell: 10 s of steep growth, 8 s after the warm-up.
        let short = unmarked(10, |t| (t * (200 * MIB) as f64) as u64);
        assert!(time_trends(&short).iter().all(|t| !t.is_leak));
    }

    #[test]
    fn runs_with_steps_are_left_to_the_stage_fits() {
        let trace = oomscope_testkit::run::Run::default().build();
        assert!(time_trends(&trace).is_empty());
    }
}
