//! What a live view shows of a run still being recorded (`collector watch`): where it is (step,
//! stage, phase), the memory each device and the host hold now against their limits, a warning
//! when one passes [`ALERT_SHARE`] of it, and the analysis's verdict so far (the leak's rate and
//! when memory is full, the findings' titles). Computed here from the same [`Analysis`] the
//! summary prints, so a live view and the summary never disagree; the words of the warnings are
//! here too, so a terminal and a browser say the same.

use serde::Serialize;

use crate::clocks::{Clock, clock_rows_last, clock_rows_last_of};
use crate::finding::Severity;
use crate::leaks::{limit_of, limit_with_host};
use crate::metrics::{MetricKey, host_in_use};
use crate::{Analysis, Prepared};
use oomscope_format::units::{
    format_bytes, format_bytes_f64, format_count, format_duration_us, format_percent,
};
use oomscope_format::{CounterId, CounterKind, Phase, Trace};

/// Memory at or above this share of its limit is a warning of its own: the OOM is near.
pub const ALERT_SHARE: f64 = 0.9;

/// A run as a live view shows it at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    /// Memory at [`ALERT_SHARE`] of its limit or above, in words.
    pub alerts: Vec<String>,
    /// The leak the findings headline: its rate and when it fills memory.
    pub leak: Option<LiveLeak>,
    /// The findings so far, most severe first.
    pub findings: Vec<LiveFinding>,
    /// Memory along the run's clock, for a chart (not in `collector watch --json`: a script
    /// reads the summary's tables).
    #[serde(skip)]
    pub chart: Option<LiveChart>,
}

/// One memory along a clock: the headlined leak's metric on its clock, else the first memory
/// per step, each position's highest reading over its stages (its peak between marks), the last
/// [`CHART_POINTS`] positions.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveChart {
    /// The metric (`gpu0.used`, `host.rss`).
    pub metric: String,
    /// What a position counts (`step`, `forward`, `epoch`).
    pub per: &'static str,
    /// (position, bytes), in order.
    pub points: Vec<(u64, u64)>,
    /// The limit the metric runs into, when known.
    pub limit_bytes: Option<u64>,
}

/// Positions a live chart keeps (the latest).
pub const CHART_POINTS: usize = 400;

/// One memory as last read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveMemory {
    /// The metric (`gpu0.used`, `host.rss`).
    pub metric: String,
    /// Its last value.
    pub bytes: u64,
    /// What it runs into, when known.
    pub limit_bytes: Option<u64>,
}

/// A leak as a live view states it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveLeak {
    /// The metric and stage it was fitted at.
    pub metric: String,
    /// See `metric`.
    pub stage: String,
    /// What it is counted per (`step`, `forward`, `epoch`).
    pub per: &'static str,
    /// Growth per `per`.
    pub bytes_per: f64,
    /// Where on that clock memory is full, and in how long, when the limit is known.
    pub full_at: Option<u64>,
    /// See `full_at`.
    pub time_to_full_us: Option<u64>,
}

/// A finding's id, severity and title.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveFinding {
    /// The finding's id (`leak`, `eval-retains-memory`, …).
    pub id: &'static str,
    /// Its severity.
    pub severity: Severity,
    /// Its title.
    pub title: String,
}

/// The live state of `trace` (decoded so far) with `analysis` of it.
pub fn live_state(trace: &Trace, analysis: &Analysis) -> LiveState {
    analysed(live_now(trace, host_in_use(trace)), trace, analysis, None)
}

/// What a refresh can afford each time, whatever the trace's length: where the run is, each
/// memory's last reading against its limit and the warnings (a row and a mark), without the
/// analysis's part (leak, findings, chart: [`analysed`] adds it; a watcher keeps the last).
/// `host`: the host's memory in use (`metrics::host_in_use`), which a watcher keeps from its last
/// analysis (telling PSS from RSS reads every row).
pub fn live_now(trace: &Trace, host: Option<CounterId>) -> LiveState {
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
                metric: key.label(),
                bytes,
                limit_bytes: limit_with_host(trace, key, || host).map(|(limit, _)| limit),
            })
        })
        .collect();
    let alerts = memory
        .iter()
        .filter_map(|m| {
            let limit = m.limit_bytes.filter(|l| *l > 0)?;
            let share = m.bytes as f64 / limit as f64;
            (share >= ALERT_SHARE).then(|| {
                format!(
                    "{} at {} of its {} ({} free)",
                    m.metric,
                    format_percent(share),
                    format_bytes(limit),
                    format_bytes(limit.saturating_sub(m.bytes))
                )
            })
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
pub fn analysed(
    state: LiveState,
    trace: &Trace,
    analysis: &Analysis,
    prepared: Option<&Prepared>,
) -> LiveState {
    let leak = analysis.headline_leak().map(|f| LiveLeak {
        metric: f.metric.label(),
        stage: f.stage.clone(),
        per: f.clock.unit(),
        bytes_per: f.slope_bytes_per_step,
        full_at: f.projection.as_ref().map(|p| p.full_at_step),
        time_to_full_us: f.projection.as_ref().and_then(|p| p.time_to_full_us),
    });
    // The analysis orders them, most severe first.
    let findings: Vec<LiveFinding> = analysis
        .findings
        .iter()
        .map(|f| LiveFinding {
            id: f.kind.id(),
            severity: f.severity,
            title: f.title.clone(),
        })
        .collect();
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
            metric: metric.label(),
            per: clock.unit(),
            points: rows
                .iter()
                .filter_map(|r| Some((r.at, r.values.iter().flatten().max().copied()?)))
                .collect(),
            limit_bytes: limit_of(trace, metric).map(|(limit, _)| limit),
        }
    });
    LiveState {
        leak,
        findings,
        chart,
        ..state
    }
}

/// The state in one line, as `collector watch` prints it each refresh: "12.3 s · step 120
/// post_backward (train) · gpu0.used 12.3 GiB of 80.0 GiB · leak +3.90 MiB/step at
/// pre_backward (gpu0.used): full at step 5 954, in 4 min · 2 findings". Its pieces are the
/// words the terminal view shows in its panes.
pub fn line(state: &LiveState) -> String {
    let mut parts = vec![format_duration_us(state.t_us)];
    parts.extend(place(state));
    parts.extend(state.memory.iter().map(memory));
    parts.extend(state.leak.as_ref().map(leak));
    parts.extend(state.alerts.iter().map(|a| format!("WARNING {a}")));
    if !state.findings.is_empty() {
        parts.push(format!(
            "{} finding(s), first: {}",
            format_count(state.findings.len() as u64),
            state.findings[0].title
        ));
    }
    if state.ended {
        parts.push("ended".to_owned());
    }
    parts.join(" · ")
}

/// Where the run is: "step 120 post_backward (train)"; `None` before its first mark.
pub fn place(state: &LiveState) -> Option<String> {
    let (step, stage) = (state.step?, state.stage.as_ref()?);
    let phase = match state.phase {
        Some(Phase::Train) => "train",
        Some(Phase::Eval) => "eval",
        _ => "phase unknown",
    };
    Some(format!("step {} {stage} ({phase})", format_count(step)))
}

/// One memory: "gpu0.used 12.3 GiB of 80.0 GiB", or "host.rss 2.1 GiB" without a known limit.
pub fn memory(m: &LiveMemory) -> String {
    match m.limit_bytes {
        Some(limit) => format!(
            "{} {} of {}",
            m.metric,
            format_bytes(m.bytes),
            format_bytes(limit)
        ),
        None => format!("{} {}", m.metric, format_bytes(m.bytes)),
    }
}

/// The leak: "leak +3.90 MiB/step at pre_backward (gpu0.used): full at step 5 954, in 4 min".
pub fn leak(l: &LiveLeak) -> String {
    let mut words = format!(
        "leak +{}/{} at {} ({})",
        format_bytes_f64(l.bytes_per),
        l.per,
        l.stage,
        l.metric
    );
    if let Some(at) = l.full_at {
        words.push_str(&format!(": full at {} {}", l.per, format_count(at)));
        if let Some(us) = l.time_to_full_us {
            words.push_str(&format!(", in {}", format_duration_us(us)));
        }
    }
    words
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
        assert_eq!(leak.per, "step");
        assert!(
            (leak.bytes_per - (64 * MIB) as f64).abs() < MIB as f64,
            "{leak:?}"
        );
        assert!(leak.full_at.is_some_and(|s| s > 199));
        assert_eq!(live.findings[0].id, "leak");
        // The chart: the leak's metric per step, every step, rising by the leak.
        let chart = live.chart.as_ref().unwrap();
        assert_eq!(
            (chart.metric.as_str(), chart.per),
            (leak.metric.as_str(), "step")
        );
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
            .find(|m| m.metric == "gpu0.used")
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
                .find(|m| m.metric == "gpu0.used")
                .unwrap();
            let share = gpu.bytes as f64 / (80 * GIB) as f64;
            assert_eq!(live.alerts.is_empty(), share < ALERT_SHARE, "{live:?}");
            if let Some(alert) = live.alerts.first() {
                assert!(alert.starts_with("gpu0.used at "), "{alert}");
                assert!(alert.contains("of its 80.0 GiB"), "{alert}");
            }
            shares.push(share);
        }
        assert!(
            shares[0] < ALERT_SHARE && shares[1] >= ALERT_SHARE,
            "{shares:?}"
        );
    }
}
