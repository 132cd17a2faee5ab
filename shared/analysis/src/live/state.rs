//! A run's live state at one moment ([`LiveState`]): where it is (step, stage, phase), the memory
//! each device and the host hold now against their limits, an alert when one passes
//! [`ALERT_SHARE`] of it, and the analysis's verdict so far (the leak's rate and when memory is
//! full, the findings), as typed values computed from the same [`Analysis`] the summary prints.

use crate::clocks::{Clock, clock_rows_last, clock_rows_last_of};
use crate::finding::Finding;
use crate::leaks::{limit_of, limit_with_host};
use crate::metrics::{MetricKey, host_in_use};
use crate::{Analysis, Prepared};
use oomscope_format::{CounterId, CounterKind, Phase, Trace};

/// Memory at or above this share of its limit is an alert of its own: the OOM is near.
pub const ALERT_SHARE: f64 = 0.9;

/// A run as a live view shows it at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveState {
    /// The run's time of the last reading or mark.
    pub t_us: u64,
    /// The recorder wrote its end: the run is over.
    pub ended: bool,
    /// The last mark's step, stage and phase.
    pub step: Option<u64>,
    /// See `step`.
    pub stage: Option<String>,
    /// See `step`.
    pub phase: Option<Phase>,
    /// Each device's memory and the host's, as last read.
    pub memory: Vec<LiveMemory>,
    /// Memory at [`ALERT_SHARE`] of its limit or above.
    pub alerts: Vec<Alert>,
    /// The leak the findings headline: its rate and when it fills memory.
    pub leak: Option<LiveLeak>,
    /// The findings so far, most severe first.
    pub findings: Vec<Finding>,
    /// Memory along the run's clock, for a chart.
    pub chart: Option<LiveChart>,
}

/// One memory along a clock: the headlined leak's metric on its clock, else the first memory
/// per step, each position's highest reading over its stages (its peak between marks), the last
/// [`CHART_POINTS`] positions.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveChart {
    /// The metric.
    pub metric: MetricKey,
    /// What a position counts.
    pub clock: Clock,
    /// (position, bytes), in order.
    pub points: Vec<(u64, u64)>,
    /// The limit the metric runs into, when known.
    pub limit_bytes: Option<u64>,
}

/// Positions a live chart keeps (the latest).
pub const CHART_POINTS: usize = 400;

/// One memory as last read.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveMemory {
    /// The metric.
    pub metric: MetricKey,
    /// Its last value.
    pub bytes: u64,
    /// What it runs into, when known.
    pub limit_bytes: Option<u64>,
}

/// A memory at [`ALERT_SHARE`] of its limit or above.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Alert {
    /// The metric.
    pub metric: MetricKey,
    /// Its last value.
    pub bytes: u64,
    /// Its limit.
    pub limit_bytes: u64,
}

impl Alert {
    /// How much of its limit it holds.
    pub fn share(&self) -> f64 {
        self.bytes as f64 / self.limit_bytes.max(1) as f64
    }
}

/// A leak as a live view states it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveLeak {
    /// The metric and stage it was fitted at.
    pub metric: MetricKey,
    /// See `metric`.
    pub stage: String,
    /// The clock it is counted on.
    pub clock: Clock,
    /// Growth per unit of the clock.
    pub bytes_per: f64,
    /// Where on that clock memory is full, and in how long, when the limit is known.
    pub full_at: Option<u64>,
    /// See `full_at`.
    pub time_to_full_us: Option<u64>,
}

/// The live state of `trace` (decoded so far) with `analysis` of it.
pub fn live_state(trace: &Trace, analysis: &Analysis) -> LiveState {
    with_analysis(readings(trace, host_in_use(trace)), trace, analysis, None)
}

/// What a refresh can afford each time, whatever the trace's length: where the run is, each
/// memory's last reading against its limit and the alerts (a row and a mark), without the
/// analysis's part (leak, findings, chart: [`with_analysis`] adds it; a watcher keeps the last).
/// `host`: the host's memory in use (`metrics::host_in_use`), which a watcher keeps from its last
/// analysis (telling PSS from RSS reads every row).
pub fn readings(trace: &Trace, host: Option<CounterId>) -> LiveState {
    let last_mark = trace.marks.last();
    let t_us = trace
        .samples
        .times_us()
        .last()
        .max(last_mark.map(|m| m.t_us))
        .unwrap_or(0);
    let last_row = trace.samples.len().checked_sub(1);
    let memory: Vec<LiveMemory> = memory_counters(trace, host)
        .filter_map(|(id, key)| {
            let bytes = last_row.and_then(|row| trace.samples.value_at_row(id, row))?;
            Some(LiveMemory {
                metric: key,
                bytes,
                limit_bytes: limit_with_host(trace, key, || host).map(|(limit, _)| limit),
            })
        })
        .collect();
    let alerts = memory
        .iter()
        .filter_map(|m| {
            let limit_bytes = m.limit_bytes.filter(|l| *l > 0)?;
            let alert = Alert {
                metric: m.metric,
                bytes: m.bytes,
                limit_bytes,
            };
            (alert.share() >= ALERT_SHARE).then_some(alert)
        })
        .collect();
    LiveState {
        t_us,
        ended: trace.end_us.is_some(),
        step: last_mark.map(|m| m.step),
        stage: last_mark.map(|m| m.name.to_string()),
        phase: last_mark.map(|m| m.phase),
        memory,
        alerts,
        leak: None,
        findings: Vec::new(),
        chart: None,
    }
}

/// The memories a live view shows: each GPU's used memory and the host's in use.
fn memory_counters(
    trace: &Trace,
    host: Option<CounterId>,
) -> impl Iterator<Item = (CounterId, MetricKey)> + '_ {
    trace
        .counters
        .iter()
        .enumerate()
        .map(|(i, c)| (CounterId(i as u32), c))
        .filter(move |(id, c)| {
            host == Some(*id) || (c.kind == CounterKind::GpuUsed && c.pid.is_none())
        })
        .map(|(id, _)| (id, MetricKey::of_counter(trace, id)))
}

/// `state` with what `analysis` (of `trace`) says: the headlined leak, the findings, the chart.
/// `prepared`: what the analysis read at the marks, when the caller kept it
/// ([`crate::analyze_prepared`]); the chart reads its metric there.
pub fn with_analysis(
    state: LiveState,
    trace: &Trace,
    analysis: &Analysis,
    prepared: Option<&Prepared>,
) -> LiveState {
    let leak = analysis.headline_leak().map(|f| LiveLeak {
        metric: f.metric,
        stage: f.stage.clone(),
        clock: f.clock,
        bytes_per: f.slope_bytes_per_step,
        full_at: f.projection.as_ref().map(|p| p.full_at_step),
        time_to_full_us: f.projection.as_ref().and_then(|p| p.time_to_full_us),
    });
    let charted = match analysis.headline_leak() {
        Some(f) => Some((f.metric, f.clock)),
        None => memory_counters(trace, host_in_use(trace))
            .next()
            .map(|(_, k)| (k, Clock::of(trace))),
    };
    let chart = charted.map(|(metric, clock)| {
        let kept = prepared.and_then(|p| Some((p, p.values().index_of(metric)?)));
        let rows = match kept {
            Some((p, index)) => clock_rows_last_of(
                trace,
                p.stages(),
                Some(p.clock_marks()),
                p.values().column(index),
                clock,
                CHART_POINTS,
            ),
            None => clock_rows_last(trace, metric, clock, CHART_POINTS),
        };
        LiveChart {
            metric,
            clock,
            points: rows
                .iter()
                .filter_map(|r| Some((r.at, r.values.iter().flatten().max().copied()?)))
                .collect(),
            limit_bytes: limit_of(trace, metric).map(|(limit, _)| limit),
        }
    });
    LiveState {
        leak,
        // The analysis orders them, most severe first.
        findings: analysis.findings.clone(),
        chart,
        ..state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AnalysisOptions, analyze};
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    #[test]
    fn a_leaking_run_shows_its_step_its_rate_and_when_memory_is_full() {
        let trace = Run {
            steps: 200,
            leak_bytes_per_step: 64 * MIB,
            ..Run::default()
        }
        .build();
        let analysis = analyze(&trace, &AnalysisOptions::default());
        let live = live_state(&trace, &analysis);
        assert_eq!(live.step, Some(199));
        assert_eq!(live.phase, Some(Phase::Train));
        let leak = live.leak.unwrap();
        assert_eq!(leak.clock, Clock::Step);
        assert!(
            (leak.bytes_per - (64 * MIB) as f64).abs() < MIB as f64,
            "{leak:?}"
        );
        assert!(leak.full_at.is_some_and(|s| s > 199));
        assert_eq!(live.findings[0].kind(), crate::finding::FindingKind::Leak);
        // The chart: the leak's metric per step, every step, rising by the leak.
        let chart = live.chart.as_ref().unwrap();
        assert_eq!((chart.metric, chart.clock), (leak.metric, Clock::Step));
        assert_eq!(chart.points.len(), 200);
        assert_eq!(chart.points.last().map(|p| p.0), Some(199));
        let (first, last) = (chart.points[0].1, chart.points[199].1);
        assert!(
            (last - first) as f64 >= 199.0 * 63.0 * MIB as f64,
            "{first} → {last}"
        );
        assert_eq!(chart.limit_bytes, Some(80 * GIB));
        let gpu = live
            .memory
            .iter()
            .find(|m| m.metric.label() == "gpu0.used")
            .unwrap();
        assert_eq!(gpu.limit_bytes, Some(80 * GIB));
        // An alert exactly when a memory is at 90% of its limit or above.
        let mut shares = Vec::new();
        for leak in [8 * MIB, 460 * MIB] {
            let run = Run {
                steps: 100,
                leak_bytes_per_step: leak,
                ..Run::default()
            }
            .build();
            let live = live_state(&run, &analyze(&run, &AnalysisOptions::default()));
            let gpu = live
                .memory
                .iter()
                .find(|m| m.metric.label() == "gpu0.used")
                .unwrap();
            let share = gpu.bytes as f64 / (80 * GIB) as f64;
            assert_eq!(live.alerts.is_empty(), share < ALERT_SHARE, "{live:?}");
            if let Some(alert) = live.alerts.first() {
                assert_eq!(alert.metric.label(), "gpu0.used");
                assert_eq!((alert.bytes, alert.limit_bytes), (gpu.bytes, 80 * GIB));
            }
            shares.push(share);
        }
        assert!(
            shares[0] < ALERT_SHARE && shares[1] >= ALERT_SHARE,
            "{shares:?}"
        );
    }
}
