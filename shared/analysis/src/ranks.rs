//! Ranks: one analysis per rank, and what only a comparison of ranks shows.
//!
//! Why: under `collector run -- torchrun …` one trace holds every rank of the node, and a job's
//! nodes write one trace each. Marks of several ranks in one stage table double the counts and
//! pair stages of different processes; a rank that holds more than the others, or that failed
//! first while the others waited in a collective, is only seen side by side.
//!
//! Each rank gets a *view* of its trace: its own marks and OOMs, its own memory counters (its
//! RSS, its memory on each GPU) in the places the single-process analysis reads them, the
//! device-level counters as they are. [`crate::analyze`] runs on the view as on any
//! trace, so a rank's stage table, leaks and findings are the same words as a single run's. Across
//! ranks: the imbalance per stage (the rank furthest above the median), the first failure on the
//! common clock (traces are aligned on their wall-clock start) and what the other ranks did then.

use serde::Serialize;

use super::leaks::GrowthFit;
use super::node::{NodeHostSpike, node_host_spike};
use super::recommend::Finding;
use super::stages::StageTable;
use super::{AnalysisOptions, analyze};
use oomscope_format::{
    Counter, CounterId, CounterKind, ExitStatus, ProcessEnd, ProcessRole, StageMark, Trace,
};

/// A stage's value on one rank is called out when it exceeds the median rank's by this much…
pub const IMBALANCE_MIN_BYTES: u64 = 64 << 20;
/// …and by this share of the median.
pub const IMBALANCE_MIN_SHARE: f64 = 0.10;

/// One rank of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RankProcess {
    /// Its rank.
    pub rank: u32,
    /// Its process (the latest one, after elastic restarts), when known.
    pub pid: Option<u32>,
    /// Its rank on the node.
    pub local_rank: Option<u32>,
}

/// The ranks a trace holds: processes the collector took for ranks, and the senders of marks
/// that named a rank (traces of format 1.2–1.4 have only those). A single-process trace whose
/// program has a rank is that one rank; a trace without any rank has none.
pub fn ranks_of(trace: &Trace) -> Vec<RankProcess> {
    let mut ranks: Vec<RankProcess> = Vec::new();
    let mut add = |rank: u32, pid: Option<u32>, local_rank: Option<u32>| match ranks
        .iter_mut()
        .find(|r| r.rank == rank)
    {
        Some(r) => {
            r.pid = pid.or(r.pid);
            r.local_rank = local_rank.or(r.local_rank);
        }
        None => ranks.push(RankProcess {
            rank,
            pid,
            local_rank,
        }),
    };
    // The latest record of each pid is what it is.
    let mut latest: Vec<&oomscope_format::ProcessInfo> = Vec::new();
    for p in &trace.processes {
        match latest.iter_mut().find(|q| q.pid == p.pid) {
            Some(q) => *q = p,
            None => latest.push(p),
        }
    }
    for p in &latest {
        if p.role == ProcessRole::Rank
            && let Some(rank) = p.rank
        {
            add(rank, Some(p.pid), p.local_rank);
        }
    }
    for m in &trace.marks {
        if let Some(rank) = m.rank {
            let is_launcher = latest
                .iter()
                .any(|p| Some(p.pid) == m.pid && p.role == ProcessRole::Launcher);
            if !is_launcher {
                add(rank, m.pid, None);
            }
        }
    }
    ranks.sort_by_key(|r| r.rank);
    ranks
}

/// A rank's view of a trace: its marks, OOMs and kills, its own RSS as `host.rss` and its own
/// memory on each GPU as `gpuN.process`, the devices' counters as recorded. Records without a
/// sender (components, statistics, trials) and the other processes are left out.
pub fn rank_view(trace: &Trace, rank: &RankProcess) -> Trace {
    let mine = |pid: Option<u32>, r: Option<u32>| {
        r == Some(rank.rank) || (r.is_none() && pid.is_some() && pid == rank.pid)
    };
    // Columns: device-level and in-process counters as they are; the tree's RSS, PSS and
    // per-GPU process memory replaced by this rank's own. When the rank is the program itself
    // (`srun` running one collector per task), the tree is the rank and its workers: its
    // counters are the rank's.
    let program_is_rank = rank.pid == Some(trace.metadata.pid)
        && !trace
            .counters
            .iter()
            .any(|c| c.kind.is_per_process() && c.pid == rank.pid);
    let mut keep: Vec<(CounterId, Counter)> = Vec::new();
    for (i, c) in trace.counters.iter().enumerate() {
        let id = CounterId(i as u32);
        let as_kind = match c.kind {
            CounterKind::HostRss | CounterKind::HostPss | CounterKind::ProcessGpu
                if program_is_rank =>
            {
                c.kind
            }
            CounterKind::PidRss if c.pid.is_some() && c.pid == rank.pid => CounterKind::HostRss,
            CounterKind::PidGpu if c.pid.is_some() && c.pid == rank.pid => CounterKind::ProcessGpu,
            CounterKind::PidRss
            | CounterKind::PidGpu
            | CounterKind::HostRss
            | CounterKind::HostPss
            | CounterKind::ProcessGpu => continue,
            other => other,
        };
        keep.push((
            id,
            Counter {
                kind: as_kind,
                device: c.device,
                name: as_kind.counter_name(c.device),
                pid: None,
            },
        ));
    }
    let ids: Vec<CounterId> = keep.iter().map(|(id, _)| *id).collect();
    let end = trace
        .process_ends
        .iter()
        .filter(|e| e.from_launcher && mine(Some(e.pid).filter(|p| *p != 0), e.rank))
        .find_map(|e| e.status);
    let mut metadata = trace.metadata.clone();
    metadata.rank = Some(rank.rank);
    metadata.world_size = trace
        .processes
        .iter()
        .rev()
        .find(|p| Some(p.pid) == rank.pid)
        .and_then(|p| p.world_size)
        .or(metadata.world_size);
    metadata.pid = rank.pid.unwrap_or(metadata.pid);
    Trace {
        format_version: trace.format_version,
        metadata,
        counters: keep.into_iter().map(|(_, c)| c).collect(),
        samples: trace.samples.select(&ids),
        marks: trace
            .marks
            .iter()
            .filter(|m| mine(m.pid, m.rank))
            .cloned()
            .collect(),
        ooms: trace
            .ooms
            .iter()
            .filter(|o| mine(o.pid, o.rank))
            .cloned()
            .collect(),
        oom_kills: trace
            .oom_kills
            .iter()
            .filter(|k| rank.pid == Some(k.pid))
            .cloned()
            .collect(),
        exit: match (end, trace.exit) {
            (Some(status), Some(exit)) => Some(oomscope_format::ProcessExit {
                status,
                probable_host_oom: false,
                ..exit
            }),
            (_, exit) => exit,
        },
        notes: trace.notes.clone(),
        dropped: trace.dropped.clone(),
        end_us: trace.end_us,
        ..Trace::default()
    }
}

/// The marks the whole-run analysis reads when a trace holds several ranks: the lowest rank's
/// and those without a sender (one process's stages; each rank's are in
/// [`RankSummary::stage_table`]).
pub fn lowest_rank_marks(trace: &Trace, ranks: &[RankProcess]) -> Option<Vec<StageMark>> {
    let lowest = ranks.first()?;
    Some(
        trace
            .marks
            .iter()
            .filter(|m| {
                m.rank == Some(lowest.rank)
                    || (m.rank.is_none() && (m.pid.is_none() || m.pid == lowest.pid))
            })
            .cloned()
            .collect(),
    )
}

/// One rank's story.
#[derive(Debug, Clone, Serialize)]
pub struct RankSummary {
    /// Its rank.
    pub rank: u32,
    /// Its process, when known.
    pub pid: Option<u32>,
    /// Its rank on the node.
    pub local_rank: Option<u32>,
    /// The node (host name) it ran on.
    pub host: String,
    /// The trace it came from (a file name, for a job's directory; empty for one trace).
    pub source: String,
    /// The group of ranks it is compared with, as it said (`process group=pp0`); `None`: the
    /// job's one group.
    pub group: Option<String>,
    /// Stage marks.
    pub marks: usize,
    /// Highest step marked.
    pub last_step: Option<u64>,
    /// Its last mark, on the job's clock (µs from the earliest trace's start).
    pub last_mark_us: Option<u64>,
    /// Its highest RSS.
    pub peak_host_bytes: Option<u64>,
    /// Its highest device memory (NVML per process, summed over GPUs), else the allocator's.
    pub peak_device_bytes: Option<u64>,
    /// Its first OOM: when (job clock) and what.
    pub oom: Option<RankOom>,
    /// How it ended, as its launcher said (torchrun's summary); `None` when unknown.
    pub exit: Option<ExitStatus>,
    /// Its launcher named it the first failure.
    pub launcher_root_cause: bool,
    /// When the collector saw it leave the tree (job clock).
    pub ended_us: Option<u64>,
    /// Its stage table.
    pub stage_table: StageTable,
    /// Its own findings (the same rules as a single run).
    pub findings: Vec<Finding>,
    /// Its growth fits per stage (the fleet export's `fits` table; not in the summary's JSON).
    #[serde(skip)]
    pub leak_fits: Vec<GrowthFit>,
    /// Its memory over time, thinned for a small chart (the viewer's small multiples; not in the
    /// summary's JSON).
    #[serde(skip)]
    pub curve: Option<RankCurve>,
}

/// Most points in a [`RankCurve`]: enough for a chart a few hundred pixels wide.
pub const CURVE_POINTS: usize = 160;

/// One rank's memory over time: its process's GPU memory when recorded, else its resident host
/// memory; each point the highest value in its slice of the rank's samples, so a thinned curve
/// never hides a peak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankCurve {
    /// Whether the curve is GPU memory (else host RSS).
    pub device: bool,
    /// (µs on the job's clock, bytes), in time order; at most [`CURVE_POINTS`].
    pub points: Vec<(u64, u64)>,
}

impl RankCurve {
    /// The highest point of the curve (each point is its slice's maximum, so this is the rank's
    /// peak of what the curve draws).
    pub fn peak_bytes(&self) -> Option<u64> {
        self.points.iter().map(|p| p.1).max()
    }
}

/// The one scale the ranks' curves are drawn on, side by side ([`RankAnalysis::curve_scale`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CurveScale {
    /// The first point of any curve, µs on the job's clock.
    pub t0_us: u64,
    /// The last point of any curve (after `t0_us`).
    pub t1_us: u64,
    /// The highest point of any curve (at least 1).
    pub top_bytes: u64,
    /// The ranks' lower-median peak, as the imbalance finding's median.
    pub median_peak_bytes: u64,
    /// Whether every curve is GPU memory (else some are host RSS).
    pub device: bool,
}

/// The lower median (with two values, the smaller): the imbalance finding's median, so that a
/// rank compared with "the median" is never compared with itself in a pair.
fn lower_median(mut values: Vec<u64>) -> Option<u64> {
    values.sort_unstable();
    values.get(values.len().checked_sub(1)? / 2).copied()
}

/// The curve of one rank's view ([`RankCurve`]); `None` without GPU or host samples.
fn rank_curve(view: &Trace, offset_us: u64) -> Option<RankCurve> {
    let highest = |kind: CounterKind| {
        view.counters
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind == kind)
            .map(|(i, _)| CounterId(i as u32))
            .filter_map(|id| Some((id, view.samples.points(id).map(|(_, v)| v).max()?)))
            .max_by_key(|(_, peak)| *peak)
            .map(|(id, _)| id)
    };
    let (device, id) = match highest(CounterKind::ProcessGpu) {
        Some(id) => (true, id),
        None => (false, highest(CounterKind::HostRss)?),
    };
    let points: Vec<(u64, u64)> = view.samples.points(id).collect();
    let (first, last) = (points.first()?.0, points.last()?.0);
    let slices = CURVE_POINTS as u64;
    let width = ((last - first) / slices).max(1);
    let mut curve: Vec<(u64, u64)> = Vec::new();
    for (t, v) in points {
        let slice = ((t - first) / width).min(slices - 1);
        let at = first + slice * width + offset_us;
        match curve.last_mut() {
            Some((s, best)) if *s == at => *best = (*best).max(v),
            _ => curve.push((at, v)),
        }
    }
    Some(RankCurve {
        device,
        points: curve,
    })
}

/// A rank's first OOM.
#[derive(Debug, Clone, Serialize)]
pub struct RankOom {
    /// When, on the job's clock.
    pub t_us: u64,
    /// Host memory (not device).
    pub host: bool,
    /// At which stage and step, when known.
    pub stage: Option<String>,
    /// Step.
    pub step: Option<u64>,
    /// The error's first line.
    pub message: String,
}

/// The rank furthest above the others at one stage.
#[derive(Debug, Clone, Serialize)]
pub struct StageImbalance {
    /// The stage.
    pub stage: String,
    /// What was compared (`host.rss`, `gpu0.process`, `allocated`).
    pub metric: String,
    /// The rank with the most.
    pub rank: u32,
    /// Its value (the stage's highest on that rank).
    pub max_bytes: u64,
    /// The median rank's value.
    pub median_bytes: u64,
    /// How many ranks were compared.
    pub ranks: usize,
    /// The group compared within, when the ranks named groups.
    pub group: Option<String>,
}

impl StageImbalance {
    /// What the rank holds beyond the median.
    pub fn excess_bytes(&self) -> u64 {
        self.max_bytes.saturating_sub(self.median_bytes)
    }
}

/// What one of the other ranks did when the first one failed.
#[derive(Debug, Clone, Serialize)]
pub struct RankFate {
    /// The rank.
    pub rank: u32,
    /// How it ended (its launcher's word), when known.
    pub exit: Option<ExitStatus>,
    /// Seconds between the failure and its last mark when it marked nothing after the failure
    /// (it waited: in a collective, for the failed rank), else `None`.
    pub idle_after_failure_us: Option<u64>,
    /// It also ran out of memory.
    pub oom: bool,
}

/// The first rank to fail on the common clock, and the others' fate.
#[derive(Debug, Clone, Serialize)]
pub struct FirstFailure {
    /// The rank.
    pub rank: u32,
    /// When (job clock), when known.
    pub t_us: Option<u64>,
    /// What happened, in words (`out of host memory at post_forward of step 3`).
    pub what: String,
    /// The error line, when there is one.
    pub message: Option<String>,
    /// The other ranks.
    pub others: Vec<RankFate>,
}

/// Ranks side by side.
#[derive(Debug, Clone, Serialize)]
pub struct RankAnalysis {
    /// Each rank, by rank.
    pub ranks: Vec<RankSummary>,
    /// Per stage and metric, the rank furthest above the median, largest excess first (only
    /// those over [`IMBALANCE_MIN_BYTES`] and [`IMBALANCE_MIN_SHARE`]).
    pub imbalance: Vec<StageImbalance>,
    /// The first failure, when a rank failed.
    pub first_failure: Option<FirstFailure>,
    /// Nodes whose host memory spiked far above their level in the loop (every rank loading or
    /// saving at once), largest excess first.
    pub node_spikes: Vec<NodeHostSpike>,
}

impl RankAnalysis {
    /// The rank with the highest memory (device when recorded, else host) and the spread
    /// between the highest and the lowest rank.
    pub fn worst(&self) -> Option<(&RankSummary, u64, bool)> {
        let device = self.ranks.iter().any(|r| r.peak_device_bytes.is_some());
        let value = |r: &RankSummary| {
            if device {
                r.peak_device_bytes
            } else {
                r.peak_host_bytes
            }
        };
        let worst = self
            .ranks
            .iter()
            .filter(|r| value(r).is_some())
            .max_by_key(|r| value(r))?;
        let lowest = self.ranks.iter().filter_map(value).min()?;
        Some((worst, value(worst)?.saturating_sub(lowest), device))
    }

    /// The scale shared by the ranks' curves, drawn side by side; `None` unless at least two
    /// ranks have one.
    pub fn curve_scale(&self) -> Option<CurveScale> {
        let curves: Vec<&RankCurve> = self.ranks.iter().filter_map(|r| r.curve.as_ref()).collect();
        if curves.len() < 2 {
            return None;
        }
        let times = || curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
        let t0_us = times().min()?;
        Some(CurveScale {
            t0_us,
            t1_us: times().max()?.max(t0_us + 1),
            top_bytes: curves.iter().filter_map(|c| c.peak_bytes()).max()?.max(1),
            median_peak_bytes: lower_median(
                curves.iter().filter_map(|c| c.peak_bytes()).collect(),
            )?,
            device: curves.iter().all(|c| c.device),
        })
    }
}

/// Summarises every rank of a trace; times move by `offset_us` onto the job's clock.
pub fn summarize(
    trace: &Trace,
    source: &str,
    offset_us: u64,
    options: &AnalysisOptions,
) -> Vec<RankSummary> {
    let mut ranks = ranks_of(trace);
    // A trace without ranks of its own is analysed whole as its one rank.
    let single = ranks.is_empty();
    if single {
        // A single-process trace of a rank (srun per task): that rank.
        let rank = trace.metadata.rank.or_else(|| {
            trace
                .processes
                .iter()
                .rev()
                .find(|p| p.pid == trace.metadata.pid)
                .and_then(|p| p.rank)
        });
        match rank {
            Some(rank) => ranks.push(RankProcess {
                rank,
                pid: Some(trace.metadata.pid),
                local_rank: None,
            }),
            None => return Vec::new(),
        }
    }
    ranks
        .iter()
        .map(|rank| {
            let view;
            let t = if single {
                trace
            } else {
                view = rank_view(trace, rank);
                &view
            };
            summarize_view(trace, t, rank, source, offset_us, options)
        })
        .collect()
}

fn summarize_view(
    whole: &Trace,
    view: &Trace,
    rank: &RankProcess,
    source: &str,
    offset_us: u64,
    options: &AnalysisOptions,
) -> RankSummary {
    let analysis = analyze(view, options);
    let peak_of = |kind: CounterKind| {
        view.counters
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind == kind)
            .filter_map(|(i, _)| {
                view.samples
                    .points(CounterId(i as u32))
                    .map(|(_, v)| v)
                    .max()
            })
            .reduce(|a, b| a + b)
    };
    let allocated = view
        .marks
        .iter()
        .filter_map(|m| {
            m.snapshot
                .map(|s| s.peak_allocated_bytes.max(s.allocated_bytes))
        })
        .max();
    let oom = view.ooms.iter().min_by_key(|o| o.t_us).map(|o| RankOom {
        t_us: o.t_us + offset_us,
        host: o.source.is_host(),
        stage: o.stage.as_deref().map(str::to_owned),
        step: o.step,
        message: o.message.lines().next().unwrap_or_default().to_owned(),
    });
    let ends: Vec<&ProcessEnd> = whole
        .process_ends
        .iter()
        .filter(|e| e.rank == Some(rank.rank) || (e.pid != 0 && Some(e.pid) == rank.pid))
        .collect();
    let launcher = ends.iter().find(|e| e.from_launcher);
    RankSummary {
        rank: rank.rank,
        pid: rank.pid,
        local_rank: rank
            .local_rank
            .or_else(|| launcher.and_then(|e| e.local_rank)),
        host: whole.metadata.host.clone(),
        source: source.to_owned(),
        group: whole
            .processes
            .iter()
            .rev()
            .filter(|p| Some(p.pid) == rank.pid)
            .find_map(|p| p.group.as_deref().map(str::to_owned)),
        marks: view.marks.len(),
        last_step: view.marks.iter().map(|m| m.step).max(),
        last_mark_us: view.marks.last().map(|m| m.t_us + offset_us),
        peak_host_bytes: peak_of(CounterKind::HostRss),
        peak_device_bytes: peak_of(CounterKind::ProcessGpu).or(allocated),
        oom,
        exit: launcher.and_then(|e| e.status),
        launcher_root_cause: launcher.is_some_and(|e| e.first_failure),
        ended_us: ends
            .iter()
            .find(|e| !e.from_launcher)
            .map(|e| e.t_us + offset_us),
        stage_table: analysis.stage_table,
        findings: analysis.findings,
        leak_fits: analysis.leak_fits,
        curve: rank_curve(view, offset_us),
    }
}

/// Compares ranks: imbalance per stage and the first failure.
pub fn compare_ranks(ranks: Vec<RankSummary>) -> RankAnalysis {
    let mut ranks = ranks;
    ranks.sort_by_key(|r| r.rank);
    RankAnalysis {
        imbalance: imbalance(&ranks),
        first_failure: first_failure(&ranks),
        ranks,
        node_spikes: Vec::new(),
    }
}

fn imbalance(ranks: &[RankSummary]) -> Vec<StageImbalance> {
    if ranks.len() < 2 {
        return Vec::new();
    }
    // (group, stage, metric) → (rank, highest value at that stage): ranks are compared within
    // the group they named (a pipeline stage holds other layers than the next one by design).
    type Cell = ((Option<String>, String, String), Vec<(u32, u64)>);
    let mut cells: Vec<Cell> = Vec::new();
    for r in ranks {
        for row in &r.stage_table.rows {
            for m in &row.metrics {
                let Some(max) = m.max_bytes else {
                    continue;
                };
                let key = (r.group.clone(), row.stage.clone(), m.metric.label());
                match cells.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, values)) => values.push((r.rank, max)),
                    None => cells.push((key, vec![(r.rank, max)])),
                }
            }
        }
    }
    let mut found: Vec<StageImbalance> = cells
        .into_iter()
        .filter(|(_, values)| values.len() >= 2)
        .filter_map(|((group, stage, metric), values)| {
            let median = lower_median(values.iter().map(|(_, v)| *v).collect())?;
            let &(rank, max) = values
                .iter()
                .max_by_key(|(r, v)| (*v, std::cmp::Reverse(*r)))?;
            let excess = max.saturating_sub(median);
            (excess >= IMBALANCE_MIN_BYTES && excess as f64 >= IMBALANCE_MIN_SHARE * median as f64)
                .then_some(StageImbalance {
                    stage,
                    metric,
                    rank,
                    max_bytes: max,
                    median_bytes: median,
                    ranks: values.len(),
                    group,
                })
        })
        .collect();
    found.sort_by(|a, b| {
        b.excess_bytes()
            .cmp(&a.excess_bytes())
            .then_with(|| a.stage.cmp(&b.stage))
    });
    found
}

fn first_failure(ranks: &[RankSummary]) -> Option<FirstFailure> {
    // An OOM on the common clock first; else the launcher's root cause; else the first rank
    // that ended with a failure status.
    let by_oom = ranks
        .iter()
        .filter_map(|r| Some((r.oom.as_ref()?.t_us, r)))
        .min_by_key(|(t, r)| (*t, r.rank))
        .map(|(_, r)| r);
    let failed = |r: &&RankSummary| r.exit.is_some_and(|s| s != ExitStatus::Code(0));
    let first = by_oom
        .or_else(|| ranks.iter().find(|r| r.launcher_root_cause && failed(r)))
        .or_else(|| ranks.iter().filter(failed).min_by_key(|r| r.ended_us))?;
    let t_us = first
        .oom
        .as_ref()
        .map(|o| o.t_us)
        .or(first.ended_us)
        .or(first.last_mark_us);
    let what = match (&first.oom, first.exit) {
        (Some(oom), _) => {
            let memory = if oom.host { "host" } else { "device" };
            match (&oom.stage, oom.step) {
                (Some(stage), Some(step)) => {
                    format!("ran out of {memory} memory after {stage} of step {step}")
                }
                (Some(stage), None) => format!("ran out of {memory} memory after {stage}"),
                _ => format!("ran out of {memory} memory"),
            }
        }
        (None, Some(status)) => format!("ended with {}", status_words(status)),
        (None, None) => "failed".to_owned(),
    };
    let others = ranks
        .iter()
        .filter(|r| r.rank != first.rank)
        .map(|r| RankFate {
            rank: r.rank,
            exit: r.exit,
            idle_after_failure_us: match (t_us, r.last_mark_us) {
                (Some(t), Some(last)) if last <= t => r.ended_us.map(|end| end.saturating_sub(t)),
                _ => None,
            },
            oom: r.oom.is_some(),
        })
        .collect();
    Some(FirstFailure {
        rank: first.rank,
        t_us,
        what,
        message: first.oom.as_ref().map(|o| o.message.clone()),
        others,
    })
}

/// `exit code 1`, `SIGKILL`, `signal 40`.
pub fn status_words(status: ExitStatus) -> String {
    match status {
        ExitStatus::Code(code) => format!("exit code {code}"),
        ExitStatus::Signal(signal) => match signal_name(signal) {
            Some(name) => name.to_owned(),
            None => format!("signal {signal}"),
        },
    }
}

/// The name of a common signal.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// One trace of a job: where it came from and what it holds.
#[derive(Debug, Clone, Copy)]
pub struct JobTrace<'a> {
    /// Its name (the file).
    pub source: &'a str,
    /// The decoded trace.
    pub trace: &'a Trace,
}

/// A job's traces analysed together (one per node under a launcher, or one per rank): every
/// rank on the clock of the earliest trace's start (wall clock, so nodes agree as far as their
/// clocks do), imbalance across nodes, the first failure of the whole job.
pub fn analyze_job(traces: &[JobTrace<'_>], options: &AnalysisOptions) -> RankAnalysis {
    let start = traces
        .iter()
        .map(|t| t.trace.metadata.start_unix_ns)
        .min()
        .unwrap_or(0);
    let offset_us = |t: &JobTrace<'_>| t.trace.metadata.start_unix_ns.saturating_sub(start) / 1_000;
    let summaries = traces
        .iter()
        .flat_map(|t| summarize(t.trace, t.source, offset_us(t), options))
        .collect();
    let mut compared = compare_ranks(summaries);
    compared.node_spikes = traces
        .iter()
        .filter_map(|t| node_host_spike(t.trace, &ranks_of(t.trace), t.source, offset_us(t)))
        .collect();
    compared
        .node_spikes
        .sort_by_key(|s| std::cmp::Reverse(s.excess_bytes()));
    compared
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::{Counter, Samples};

    /// A trace whose program is rank `rank` (one collector per task), its RSS rising to
    /// `peak_mib`.
    fn one_task(rank: u32, peak_mib: u64) -> Trace {
        let mut t = Trace::default();
        t.metadata.pid = 10 + rank;
        t.counters.push(Counter {
            kind: CounterKind::HostRss,
            device: None,
            name: "host.rss".into(),
            pid: None,
        });
        t.samples = Samples::with_counters(1);
        for (i, mib) in [peak_mib / 2, peak_mib, peak_mib / 2]
            .into_iter()
            .enumerate()
        {
            t.samples
                .push_row(i as u64 * 1000, &[(CounterId(0), mib << 20)]);
            t.marks.push(StageMark {
                t_us: i as u64 * 1000,
                name: "post_forward".into(),
                step: i as u64,
                pid: Some(10 + rank),
                rank: Some(rank),
                ..StageMark::default()
            });
        }
        t
    }

    #[test]
    fn a_rank_s_curve_is_thinned_on_the_job_clock_and_keeps_its_peak() {
        let mut t = one_task(3, 0);
        t.samples = Samples::with_counters(1);
        // 10 000 samples over 10 s, a one-sample spike at 4.321 s.
        for i in 0..10_000u64 {
            let mib = if i == 4_321 { 900 } else { 100 + i / 100 };
            t.samples.push_row(i * 1_000, &[(CounterId(0), mib << 20)]);
        }
        let summary = &summarize(&t, "", 5_000_000, &AnalysisOptions::default())[0];
        let curve = summary.curve.as_ref().unwrap();
        assert!(!curve.device);
        assert!(curve.points.len() <= CURVE_POINTS && curve.points.len() >= CURVE_POINTS - 1);
        assert_eq!(
            curve.points.iter().map(|p| p.1).max(),
            summary.peak_host_bytes
        );
        assert_eq!(curve.points.iter().map(|p| p.1).max(), Some(900 << 20));
        assert_eq!(curve.points[0], (5_000_000, 100 << 20));
        assert!(curve.points.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(curve.points.last().unwrap().0 <= 5_000_000 + 9_999_000);
    }

    #[test]
    fn the_ranks_curves_share_one_scale_with_the_lower_median_peak() {
        let traces: Vec<Trace> = [(0, 200), (1, 500), (2, 300), (3, 400)]
            .into_iter()
            .map(|(rank, mib)| one_task(rank, mib))
            .collect();
        let jobs: Vec<JobTrace> = traces
            .iter()
            .map(|trace| JobTrace {
                source: "node.oomt",
                trace,
            })
            .collect();
        let mut job = analyze_job(&jobs, &AnalysisOptions::default());
        let scale = job.curve_scale().expect("four ranks with curves");
        assert_eq!(scale.top_bytes, 500 << 20);
        // Peaks 200, 300, 400, 500: the lower median is 300, as the imbalance finding's.
        assert_eq!(scale.median_peak_bytes, 300 << 20);
        assert!(!scale.device);
        assert!(scale.t1_us > scale.t0_us);
        job.ranks.truncate(1);
        assert_eq!(job.curve_scale(), None, "one rank has nothing to compare");
    }

    #[test]
    fn a_rank_that_is_the_program_keeps_the_tree_s_memory() {
        let (a, b) = (one_task(0, 200), one_task(1, 500));
        let job = analyze_job(
            &[
                JobTrace {
                    source: "node-0.oomt",
                    trace: &a,
                },
                JobTrace {
                    source: "node-1.oomt",
                    trace: &b,
                },
            ],
            &AnalysisOptions::default(),
        );
        let peaks: Vec<_> = job.ranks.iter().map(|r| r.peak_host_bytes).collect();
        assert_eq!(peaks, [Some(200 << 20), Some(500 << 20)]);
        assert_eq!(job.ranks[1].marks, 3);
        let i = job.imbalance.first().expect("rank 1 holds 300 MiB more");
        assert_eq!((i.rank, i.stage.as_str()), (1, "post_forward"));
    }

    #[test]
    fn ranks_are_compared_within_the_group_they_named() {
        // Four ranks in two pipeline stages: the first stage holds 400 MiB more by design;
        // within it, rank 1 holds 200 MiB more than rank 0.
        let peaks = [(0, 1000), (1, 1200), (2, 600), (3, 600)];
        let traces: Vec<Trace> = peaks
            .iter()
            .map(|&(rank, mib)| {
                let mut t = one_task(rank, mib);
                t.processes.push(oomscope_format::ProcessInfo {
                    pid: 10 + rank,
                    role: ProcessRole::Rank,
                    rank: Some(rank),
                    group: Some(if rank < 2 { "pp0" } else { "pp1" }.into()),
                    ..Default::default()
                });
                t
            })
            .collect();
        let names: Vec<String> = (0..4).map(|i| format!("rank{i}.oomt")).collect();
        let job: Vec<JobTrace<'_>> = traces
            .iter()
            .zip(&names)
            .map(|(trace, source)| JobTrace { source, trace })
            .collect();
        let r = analyze_job(&job, &AnalysisOptions::default());
        assert_eq!(r.imbalance.len(), 1, "{:?}", r.imbalance);
        let i = &r.imbalance[0];
        assert_eq!((i.rank, i.group.as_deref()), (1, Some("pp0")));
        assert_eq!(i.excess_bytes(), 200 << 20);
        assert_eq!(i.ranks, 2);
    }
}
