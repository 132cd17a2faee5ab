//! # oomscope-analysis
//!
//! Everything oomscope computes from a trace, in one call, and the words above it.
//!
//! [`analyze`] is the single entry point the terminal summary and the viewer share, so they can
//! never disagree. It evaluates every memory metric at every stage mark once ([`MarkValues`]) and
//! hands that to each analysis; each submodule answers one question (where is the peak, which
//! stage costs what, is there a leak, what did eval keep, what was going on at the OOM) and the
//! [`recommend`] rules turn the answers into findings that quote the numbers.
//!
//! Every output type is `Serialize`: field names are the JSON contract (snake_case, units in the
//! names), string ids are resolved, and outputs never refer back into the trace.

pub mod batch_fit;
pub mod compare;
pub mod estimate;
pub mod fit;
pub mod host;
pub mod inputs;
pub mod job;
pub mod leaks;
pub mod marks;
pub mod metrics;
pub mod node;
pub mod oom;
pub mod overhead;
pub mod peaks;
pub mod phases;
pub mod pressure;
pub mod rank_views;
pub mod ranks;
pub mod recommend;
pub mod series;
pub mod stage_breakdown;
pub mod stages;
pub mod trend;
pub mod workers;

pub mod export;
pub mod reduce;
pub mod report_page;
pub mod snapshot;

pub mod words;

pub mod render;

use serde::Serialize;

use batch_fit::{BatchFit, DEFAULT_BATCH_MARGIN, TrialSummary};
use host::HostMemory;
use leaks::{DEFAULT_MIN_STEPS, GrowthFit};
use marks::StageIndex;
use metrics::{MarkValues, MetricKey};
use oom::OomContext;
use oomscope_format::{ExitStatus, Trace};
use overhead::OutsideAllocator;
use peaks::{Peak, PeakSource};
use phases::PhaseTransition;
use pressure::PressureReport;
use recommend::{Finding, RuleContext};
use stages::{Growth, StageTable, StageTableOptions};

/// Knobs of the analysis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnalysisOptions {
    /// Mark index the stage table reports deltas against (see [`StageTableOptions`]).
    pub baseline_mark: Option<usize>,
    /// Share of device memory kept free when choosing a batch size (default 0.10).
    pub batch_margin: f64,
    /// Distinct steps a leak fit needs (default 20).
    pub leak_min_steps: usize,
}

impl Default for AnalysisOptions {
    fn default() -> AnalysisOptions {
        AnalysisOptions {
            baseline_mark: None,
            batch_margin: DEFAULT_BATCH_MARGIN,
            leak_min_steps: DEFAULT_MIN_STEPS,
        }
    }
}

/// One GPU of the overview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuSummary {
    /// Device index.
    pub index: u32,
    /// Marketing name.
    pub name: String,
    /// Total memory.
    pub total_memory_bytes: u64,
}

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ExitSummary {
    /// When.
    pub t_us: u64,
    /// Exit code or signal.
    pub status: ExitStatus,
    /// Killed while host memory was nearly exhausted.
    pub probable_host_oom: bool,
}

/// Records the recorder dropped, per record tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DroppedSummary {
    /// Record tag (see `FORMAT.md`).
    pub record_tag: u8,
    /// Records dropped.
    pub count: u64,
}

/// The highest value of one counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterPeak {
    /// The counter (serialised as its label, `gpu0.used`).
    pub label: MetricKey,
    /// Its peak.
    pub bytes: u64,
}

/// What was recorded, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overview {
    /// The watched command line, arguments joined by spaces.
    pub command: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Distributed rank, when known.
    pub rank: Option<u32>,
    /// Distributed world size, when known.
    pub world_size: Option<u32>,
    /// Recorder version.
    pub collector_version: String,
    /// The watched GPUs.
    pub gpus: Vec<GpuSummary>,
    /// Time of the last thing in the trace.
    pub duration_us: u64,
    /// Sample rows.
    pub samples: usize,
    /// Stage marks.
    pub marks: usize,
    /// Distinct steps among the marks.
    pub steps: usize,
    /// Lowest step.
    pub first_step: Option<u64>,
    /// Highest step.
    pub last_step: Option<u64>,
    /// Label of the metric headline numbers use.
    pub primary_metric: Option<MetricKey>,
    /// How the process ended, if it did while recorded.
    pub exit: Option<ExitSummary>,
    /// The recorder wrote its end record (false: crash, kill or truncation).
    pub ended_cleanly: bool,
    /// Dropped records per tag.
    pub dropped: Vec<DroppedSummary>,
    /// All dropped records.
    pub dropped_total: u64,
    /// Peak of each sampled counter.
    pub counter_peaks: Vec<CounterPeak>,
}

/// Everything [`analyze`] computes.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// What was recorded.
    pub overview: Overview,
    /// Live tensors that grew across steps, as the hooks counted them while memory rose (the
    /// trace's HELD records, largest growth first).
    pub held: Vec<oomscope_format::HeldTensors>,
    /// Garbage collections that freed memory (the trace's GC records, in time order).
    pub gc: Vec<oomscope_format::GcCollection>,
    /// Peaks of every memory quantity.
    pub peaks: Vec<Peak>,
    /// Memory per stage.
    pub stage_table: StageTable,
    /// The largest rise of the primary metric between consecutive marks.
    pub largest_growth: Option<Growth>,
    /// A training step whose peak its larger input explains (variable-length batches).
    pub input_peak: Option<inputs::InputPeak>,
    /// Per-stage growth fits; `is_leak` marks the leaks.
    pub leak_fits: Vec<GrowthFit>,
    /// Growth of the main counters over time, for runs without step marks.
    pub time_trends: Vec<trend::TimeTrend>,
    /// The program's other processes (workers) whose private memory grows.
    pub growing_workers: Vec<workers::WorkerGrowth>,
    /// Allocator fragmentation and retries.
    pub pressure: Option<PressureReport>,
    /// GPU memory outside the allocator.
    pub outside_allocator: Option<OutsideAllocator>,
    /// What the memory is at each stage of one iteration (see [`stage_breakdown`]).
    pub stage_breakdown: Option<stage_breakdown::StageBreakdown>,
    /// The breakdown at the peak beside `collector estimate` for the same model, when the trace
    /// has a breakdown with the parameter counts.
    pub against_estimate: Option<estimate::AgainstEstimate>,
    /// The host's tightest moment.
    pub host_memory: Option<HostMemory>,
    /// Train→eval→train transitions.
    pub phase_transitions: Vec<PhaseTransition>,
    /// Out-of-memory events in context.
    pub ooms: Vec<OomContext>,
    /// The batch-size memory model (from a breakdown only when the primary metric does not
    /// leak: a leak would be counted as activations).
    pub batch_fit: Option<BatchFit>,
    /// The batch-size search, if one ran.
    pub batch_trials: Option<TrialSummary>,
    /// Ranks side by side, when the trace holds several (torchrun's workers under one
    /// collector): each rank's stage table and findings, imbalance, the first failure.
    pub ranks: Option<ranks::RankAnalysis>,
    /// What to change, most severe first.
    pub findings: Vec<Finding>,
}

impl Analysis {
    /// The leak fits that are leaks.
    pub fn leaks(&self) -> impl Iterator<Item = &GrowthFit> {
        self.leak_fits.iter().filter(|f| f.is_leak)
    }
}

/// Analyses a trace. A trace of several ranks is analysed as a whole with the lowest rank's
/// marks (one process's stages), and rank by rank ([`Analysis::ranks`]).
pub fn analyze(trace: &Trace, options: &AnalysisOptions) -> Analysis {
    let ranks = rank_views::ranks_of(trace);
    if ranks.len() >= 2
        && let Some(marks) = rank_views::lowest_rank_marks(trace, &ranks)
    {
        let whole = Trace {
            marks,
            ..trace.clone()
        };
        let mut compared = ranks::compare_ranks(ranks::summarize(trace, "", 0, options));
        compared
            .node_spikes
            .extend(node::node_host_spike(trace, &ranks, "", 0));
        let mut analysis = analyze_one(&whole, options, Some(compared));
        // The overview counts what the trace holds: every rank's marks.
        let (marks, steps) = (trace.marks.len(), mark_steps(trace));
        let o = &mut analysis.overview;
        (o.marks, o.steps) = (marks, steps.len());
        (o.first_step, o.last_step) = (steps.first().copied(), steps.last().copied());
        return analysis;
    }
    analyze_one(trace, options, None)
}

/// Analyses one process's trace (with its ranks compared, when it holds several): the rules
/// run once, on everything.
fn analyze_one(
    trace: &Trace,
    options: &AnalysisOptions,
    ranks: Option<ranks::RankAnalysis>,
) -> Analysis {
    let values = MarkValues::new(trace);
    let stages = StageIndex::new(trace);
    let peaks = peaks::peaks(trace, &values);
    let stage_options = StageTableOptions {
        baseline_mark: options.baseline_mark,
    };
    let leak_fits = leaks::leak_fits(trace, &values, &stages, options.leak_min_steps);
    // With the primary metric leaking, "peak − model state" is activations plus leaked memory,
    // so a per-sample cost derived from it would be wrong; batch trials measure it directly.
    let primary_leaks = values.primary().is_some_and(|p| {
        leak_fits
            .iter()
            .any(|f| f.is_leak && f.metric == values.key(p))
    });
    let batch_fit = batch_fit::batch_fit(trace, &peaks, options.batch_margin)
        .filter(|f| f.method == batch_fit::BatchFitMethod::Trials || !primary_leaks);
    let mut held = trace.held.clone();
    held.sort_by_key(|h| std::cmp::Reverse((h.bytes, h.count)));
    // The breakdown at the peak (else the last one) beside the estimate for the same model.
    let against_estimate = peaks::breakdown_peak(&peaks)
        .and_then(|p| p.components.as_ref())
        .map(|c| &c.breakdown)
        .or_else(|| trace.components.last())
        .and_then(estimate::against_estimate);
    let mut analysis = Analysis {
        overview: overview(trace, &values, &peaks),
        held,
        gc: trace.gc.clone(),
        stage_table: stages::stage_table(trace, &values, &stages, &stage_options),
        largest_growth: stages::largest_growth(trace, &values),
        input_peak: inputs::input_peak(trace, &values),
        leak_fits,
        time_trends: trend::time_trends(trace),
        growing_workers: workers::growing_workers(trace),
        pressure: pressure::pressure(trace),
        outside_allocator: overhead::outside_allocator(trace, &values),
        host_memory: host::host_memory(trace),
        phase_transitions: phases::phase_transitions(trace, &values),
        ooms: oom::oom_contexts(trace),
        batch_fit,
        batch_trials: batch_fit::trial_summary(trace),
        against_estimate,
        stage_breakdown: stage_breakdown::stage_breakdown(trace, &values),
        peaks,
        ranks,
        findings: Vec::new(),
    };
    analysis.findings = recommend::findings(&RuleContext {
        trace,
        analysis: &analysis,
        options,
    });
    analysis
}

/// The distinct steps of the marks, sorted.
fn mark_steps(trace: &Trace) -> Vec<u64> {
    let mut steps: Vec<u64> = trace.marks.iter().map(|m| m.step).collect();
    steps.sort_unstable();
    steps.dedup();
    steps
}

/// The overview block.
fn overview(trace: &Trace, values: &MarkValues, peaks: &[Peak]) -> Overview {
    let meta = &trace.metadata;
    let steps = mark_steps(trace);
    let mut dropped: Vec<DroppedSummary> = Vec::new();
    for d in &trace.dropped {
        match dropped.iter_mut().find(|x| x.record_tag == d.record_tag) {
            Some(x) => x.count = x.count.saturating_add(d.count),
            None => dropped.push(DroppedSummary {
                record_tag: d.record_tag,
                count: d.count,
            }),
        }
    }
    dropped.sort_by_key(|d| d.record_tag);
    Overview {
        command: meta.command.join(" "),
        host: meta.host.clone(),
        pid: meta.pid,
        rank: meta.rank,
        world_size: meta.world_size,
        collector_version: meta.collector_version.clone(),
        gpus: meta
            .gpus
            .iter()
            .map(|g| GpuSummary {
                index: g.index,
                name: g.name.clone(),
                total_memory_bytes: g.total_memory_bytes,
            })
            .collect(),
        duration_us: trace.duration_us(),
        samples: trace.samples.len(),
        marks: trace.marks.len(),
        steps: steps.len(),
        first_step: steps.first().copied(),
        last_step: steps.last().copied(),
        primary_metric: values.primary().map(|p| values.key(p)),
        exit: trace.exit.map(|e| ExitSummary {
            t_us: e.t_us,
            status: e.status,
            probable_host_oom: e.probable_host_oom,
        }),
        ended_cleanly: trace.end_us.is_some(),
        dropped_total: dropped.iter().map(|d| d.count).fold(0, u64::saturating_add),
        dropped,
        counter_peaks: peaks
            .iter()
            .filter(|p| p.source == PeakSource::Counter)
            .map(|p| CounterPeak {
                label: p.metric,
                bytes: p.bytes,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recommend::FindingKind;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_format::{Dropped, Phase};
    use oomscope_testkit::run::Run;

    #[test]
    fn overview_of_a_run() {
        let mut trace = Run::default().build();
        trace.metadata.rank = Some(3);
        trace.metadata.world_size = Some(8);
        for (tag, count) in [(3, 10), (5, 1), (3, 2)] {
            trace.dropped.push(Dropped {
                t_us: 0,
                record_tag: tag,
                count,
            });
        }
        let analysis = analyze(&trace, &AnalysisOptions::default());
        let o = &analysis.overview;
        assert_eq!(o.command, "python train.py");
        assert_eq!(
            (o.host.as_str(), o.pid, o.rank, o.world_size),
            ("gpu-node-7", 4242, Some(3), Some(8))
        );
        assert_eq!(o.gpus[0].total_memory_bytes, 80 * GIB);
        assert_eq!((o.samples, o.marks, o.steps), (240, 240, 60));
        assert_eq!((o.first_step, o.last_step), (Some(0), Some(59)));
        assert_eq!(
            o.primary_metric.map(MetricKey::label).as_deref(),
            Some("allocated")
        );
        assert_eq!(o.exit.unwrap().status, ExitStatus::Code(0));
        assert!(o.ended_cleanly);
        assert_eq!(o.dropped_total, 13);
        assert_eq!(
            o.dropped,
            [
                DroppedSummary {
                    record_tag: 3,
                    count: 12
                },
                DroppedSummary {
                    record_tag: 5,
                    count: 1
                }
            ]
        );
        let labels: Vec<String> = o.counter_peaks.iter().map(|p| p.label.label()).collect();
        assert_eq!(labels, ["gpu0.used", "gpu0.process", "host.rss"]);
        assert_eq!(o.duration_us, trace.duration_us());
    }

    #[test]
    fn options_reach_the_analyses() {
        let trace = Run {
            steps: 7,
            leak_bytes_per_step: 200 * MIB,
            ..Run::default()
        }
        .build();
        let defaults = analyze(&trace, &AnalysisOptions::default());
        assert!(
            defaults.leaks().next().is_none(),
            "7 steps are under the default 20 and the short-run 8"
        );
        assert!(defaults.stage_table.baseline.is_none());
        let options = AnalysisOptions {
            baseline_mark: Some(0),
            leak_min_steps: 5,
            batch_margin: 0.5,
        };
        let tuned = analyze(&trace, &options);
        assert!(tuned.leaks().next().is_some());
        assert_eq!(tuned.stage_table.baseline.as_ref().unwrap().mark_index, 0);
        assert_eq!(
            tuned
                .findings
                .iter()
                .filter(|f| f.kind == FindingKind::Leak)
                .count(),
            1
        );
    }

    #[test]
    fn empty_trace_analyses_to_nothing() {
        let analysis = analyze(&Trace::default(), &AnalysisOptions::default());
        assert!(analysis.peaks.is_empty());
        assert!(analysis.stage_table.rows.is_empty());
        assert!(analysis.largest_growth.is_none());
        assert!(analysis.leak_fits.is_empty());
        assert!(analysis.pressure.is_none());
        assert!(analysis.ooms.is_empty());
        assert!(analysis.batch_fit.is_none());
        assert!(analysis.findings.is_empty());
        assert!(!analysis.overview.ended_cleanly);
    }

    #[test]
    fn unknown_phase_marks_count_as_training() {
        let mut trace = Run {
            steps: 40,
            leak_bytes_per_step: 100 * MIB,
            ..Run::default()
        }
        .build();
        for mark in &mut trace.marks {
            mark.phase = Phase::Unknown;
        }
        let analysis = analyze(&trace, &AnalysisOptions::default());
        assert!(analysis.leaks().next().is_some());
    }

    /// 10 000 steps × 5 stages = 50 000 marks with snapshots, and 3.6 M sample rows × 7 counters
    /// (an hour at 1 kHz). Run with `cargo test --release -- --ignored --nocapture`.
    #[test]
    #[ignore = "builds a 3.6 M-row trace; run in release"]
    #[allow(clippy::print_stdout)] // reports the timing it measured
    fn large_trace_analysis_is_fast() {
        let run = Run {
            steps: 10_000,
            step_us: 360_000,
            stages: vec![
                "pre_forward",
                "post_forward",
                "pre_backward",
                "post_backward",
                "post_optimizer_step",
            ],
            samples_per_mark: 72,
            allocator_counters: true,
            leak_bytes_per_step: MIB / 4,
            eval_every: Some(2_500),
            eval_jump_bytes: GIB,
            ..Run::default()
        };
        let build = std::time::Instant::now();
        let trace = run.build();
        let build_time = build.elapsed();
        assert_eq!(trace.samples.len(), 72 * 50_012);
        assert_eq!(trace.counters.len(), 7);
        let start = std::time::Instant::now();
        let analysis = analyze(&trace, &AnalysisOptions::default());
        let elapsed = start.elapsed();
        println!(
            "built in {build_time:?}; analysed {} rows × {} counters and {} marks in {elapsed:?}",
            trace.samples.len(),
            trace.counters.len(),
            trace.marks.len()
        );
        assert_eq!(analysis.overview.marks, 50_012);
        assert!(analysis.leaks().next().is_some());
        assert_eq!(analysis.phase_transitions.len(), 4);
        if !cfg!(debug_assertions) {
            assert!(elapsed.as_millis() <= 300, "analysis took {elapsed:?}");
        }
    }
}
