//! A live view's state in words (`collector watch`, `collector run --live`, the page `collector
//! serve` serves): where the run is, each memory against its limit, the alerts, the leak and
//! when memory is full, the findings. One line of it ([`line`]) and its pieces are what the
//! terminal's panes and the page's live panel show, and [`LiveJson`] is `collector watch
//! --json`'s document, so every view says the same.

use serde::Serialize;

use oomscope_analysis::facts::MetricKey;
use oomscope_analysis::finding::{FindingKind, Severity};
use oomscope_analysis::live::{Alert, LiveLeak, LiveMemory, LiveState};
use oomscope_format::Phase;
use oomscope_format::units::{
    format_bytes, format_bytes_f64, format_count, format_duration_us, format_percent,
};

use crate::findings::text;

/// The state in one line, as `collector watch` prints it each refresh: "12.3 s · step 120
/// post_backward (train) · gpu0.used 12.3 GiB of 80.0 GiB · leak +3.90 MiB/step at
/// pre_backward (gpu0.used): full at step 5 954, in 4 min · 2 findings".
pub fn line(state: &LiveState) -> String {
    let mut parts = vec![format_duration_us(state.t_us)];
    parts.extend(place(state));
    parts.extend(state.memory.iter().map(memory));
    parts.extend(state.leak.as_ref().map(leak));
    parts.extend(state.alerts.iter().map(warning));
    if let Some(first) = state.findings.first() {
        parts.push(format!(
            "{} finding(s), first: {}",
            format_count(state.findings.len() as u64),
            text(first).title
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

/// An alert: "gpu0.used at 93% of its 80.0 GiB (5.60 GiB free)".
pub fn alert(a: &Alert) -> String {
    format!(
        "{} at {} of its {} ({} free)",
        a.metric,
        format_percent(a.share()),
        format_bytes(a.limit_bytes),
        format_bytes(a.limit_bytes.saturating_sub(a.bytes))
    )
}

/// An alert as the views flag it: "WARNING gpu0.used at 93% of its 80.0 GiB (5.60 GiB free)".
pub fn warning(a: &Alert) -> String {
    format!("WARNING {}", alert(a))
}

/// The leak: "leak +3.90 MiB/step at pre_backward (gpu0.used): full at step 5 954, in 4 min".
pub fn leak(l: &LiveLeak) -> String {
    let per = l.clock.unit();
    let mut words = format!(
        "leak +{}/{per} at {} ({})",
        format_bytes_f64(l.bytes_per),
        l.stage,
        l.metric
    );
    if let Some(at) = l.full_at {
        words.push_str(&format!(": full at {per} {}", format_count(at)));
        if let Some(us) = l.time_to_full_us {
            words.push_str(&format!(", in {}", format_duration_us(us)));
        }
    }
    words
}

/// `collector watch --json`'s document for one trace's state: the facts, and each alert and
/// finding with its words.
#[derive(Debug, Clone, Serialize)]
pub struct LiveJson {
    /// The run's time of the last reading or mark.
    pub t_us: u64,
    /// The recorder wrote its end: the run is over.
    pub ended: bool,
    /// The last mark's step.
    pub step: Option<u64>,
    /// The last mark's stage.
    pub stage: Option<String>,
    /// The last mark's phase.
    pub phase: Option<Phase>,
    /// Each memory as last read.
    pub memory: Vec<MemoryJson>,
    /// Memory at 90% of its limit or above.
    pub alerts: Vec<AlertJson>,
    /// The headlined leak.
    pub leak: Option<LeakJson>,
    /// The findings so far, most severe first.
    pub findings: Vec<LiveFindingJson>,
}

/// One memory as last read.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryJson {
    /// The metric (`gpu0.used`, `host.rss`).
    pub metric: MetricKey,
    /// Its last value.
    pub bytes: u64,
    /// What it runs into, when known.
    pub limit_bytes: Option<u64>,
}

/// An alert, with its words.
#[derive(Debug, Clone, Serialize)]
pub struct AlertJson {
    /// The metric.
    pub metric: MetricKey,
    /// Its last value.
    pub bytes: u64,
    /// Its limit.
    pub limit_bytes: u64,
    /// The alert in words ("gpu0.used at 93% of its 80.0 GiB (5.60 GiB free)").
    pub said: String,
}

/// The headlined leak.
#[derive(Debug, Clone, Serialize)]
pub struct LeakJson {
    /// The metric it was fitted at.
    pub metric: MetricKey,
    /// The stage it was fitted at.
    pub stage: String,
    /// What it is counted per (`step`, `forward`, `epoch`).
    pub per: &'static str,
    /// Growth per `per`.
    pub bytes_per: f64,
    /// Where on that clock memory is full, when the limit is known.
    pub full_at: Option<u64>,
    /// In how long.
    pub time_to_full_us: Option<u64>,
    /// The leak in words ("leak +3.90 MiB/step at pre_backward (gpu0.used): full at step 5 954,
    /// in 4 min").
    pub said: String,
}

/// A finding's id, severity and title.
#[derive(Debug, Clone, Serialize)]
pub struct LiveFindingJson {
    /// The finding's id (`leak`, `eval-retains-memory`, …).
    pub id: FindingKind,
    /// Its severity.
    pub severity: Severity,
    /// Its title.
    pub title: String,
}

impl LiveJson {
    /// The document of `state`.
    pub fn of(state: &LiveState) -> LiveJson {
        LiveJson {
            t_us: state.t_us,
            ended: state.ended,
            step: state.step,
            stage: state.stage.clone(),
            phase: state.phase,
            memory: state
                .memory
                .iter()
                .map(|m| MemoryJson {
                    metric: m.metric,
                    bytes: m.bytes,
                    limit_bytes: m.limit_bytes,
                })
                .collect(),
            alerts: state
                .alerts
                .iter()
                .map(|a| AlertJson {
                    metric: a.metric,
                    bytes: a.bytes,
                    limit_bytes: a.limit_bytes,
                    said: alert(a),
                })
                .collect(),
            leak: state.leak.as_ref().map(|l| LeakJson {
                metric: l.metric,
                stage: l.stage.clone(),
                per: l.clock.unit(),
                bytes_per: l.bytes_per,
                full_at: l.full_at,
                time_to_full_us: l.time_to_full_us,
                said: leak(l),
            }),
            findings: state
                .findings
                .iter()
                .map(|f| LiveFindingJson {
                    id: f.kind(),
                    severity: f.severity,
                    title: text(f).title,
                })
                .collect(),
        }
    }
}

/// A live chart's title: "gpu0.used per step, each step's highest, limit 80.0 GiB".
pub fn chart_title(chart: &oomscope_analysis::live::LiveChart) -> String {
    let per = chart.clock.unit();
    let limit = chart
        .limit_bytes
        .map(|l| format!(", limit {}", format_bytes(l)))
        .unwrap_or_default();
    format!("{} per {per}, each {per}'s highest{limit}", chart.metric)
}
