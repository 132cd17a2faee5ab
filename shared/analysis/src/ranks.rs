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

use crate::finding::Finding;
use crate::leaks::GrowthFit;
use crate::metrics::MetricKey;
use crate::node::NodeHostSpike;
pub use crate::rank_facts::{FirstFailure, RankFate, RankOom, StageImbalance};
use crate::rank_views::{RankProcess, rank_view, ranks_of};
use crate::stages::StageTable;
use oomscope_format::{CounterId, CounterKind, ExitStatus, ProcessEnd, Trace};

/// A stage's value on one rank is called out when it exceeds the median rank's by this much…
pub const IMBALANCE_MIN_BYTES: u64 = 64 << 20;
/// …and by this share of the median.
pub const IMBALANCE_MIN_SHARE: f64 = 0.10;

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
    /// Its own findings (the same rules as a single run; in `summary --json` in words, which the
    /// words crate adds).
    #[serde(skip)]
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

/// What a rank's own analysis (of its view, as of any trace) adds to its summary.
#[derive(Debug, Clone)]
pub struct RankOwn {
    /// Its stage table.
    pub stage_table: StageTable,
    /// Its findings.
    pub findings: Vec<Finding>,
    /// Its growth fits.
    pub leak_fits: Vec<GrowthFit>,
}

/// Summarises every rank of a trace; times move by `offset_us` onto the job's clock. `analyze`
/// analyses a rank's view (the whole analysis: `crate::analyze::rank_own`).
pub fn summarize(
    trace: &Trace,
    source: &str,
    offset_us: u64,
    analyze: &mut dyn FnMut(&RankProcess, &Trace) -> RankOwn,
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
            summarize_view(trace, t, rank, source, offset_us, analyze(rank, t))
        })
        .collect()
}

fn summarize_view(
    whole: &Trace,
    view: &Trace,
    rank: &RankProcess,
    source: &str,
    offset_us: u64,
    analysis: RankOwn,
) -> RankSummary {
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
        .allocator_iter()
        .filter_map(|s| s.map(|s| s.peak_allocated_bytes.max(s.allocated_bytes)))
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
    // A rank that is the trace's program (one `srun` task per rank, no launcher) ended as the
    // trace says its program did.
    let own_exit = whole.exit.filter(|_| rank.pid == Some(whole.metadata.pid));
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
        exit: launcher
            .and_then(|e| e.status)
            .or(own_exit.map(|e| e.status)),
        launcher_root_cause: launcher.is_some_and(|e| e.first_failure),
        ended_us: ends
            .iter()
            .find(|e| !e.from_launcher)
            .map(|e| e.t_us)
            .or(own_exit.map(|e| e.t_us))
            .map(|t| t + offset_us),
        stage_table: analysis.stage_table,
        findings: analysis.findings,
        leak_fits: analysis.leak_fits,
        curve: rank_curve(view, offset_us),
    }
}

/// Compares ranks: imbalance per stage and the first failure.
pub fn compare_ranks(ranks: Vec<RankSummary>) -> RankAnalysis {
    let mut ranks = ranks;
    crate::sort::sort_by_key(&mut ranks, |r| r.rank);
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
    type Cell = ((Option<String>, String, MetricKey), Vec<(u32, u64)>);
    let mut cells: Vec<Cell> = Vec::new();
    for r in ranks {
        for row in &r.stage_table.rows {
            for m in &row.metrics {
                let Some(max) = m.max_bytes else {
                    continue;
                };
                let key = (r.group.clone(), row.stage.clone(), m.metric);
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
    crate::sort::sort_by(&mut found, |a, b| {
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
        oom: first.oom.clone(),
        exit: first.exit,
        others,
    })
}
