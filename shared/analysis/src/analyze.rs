//! The one entry point: [`analyze`] a trace into an [`Analysis`], every analysis computed once
//! from the marks' values ([`MarkValues`]) and the rules run on the result. A trace of several
//! ranks is analysed whole (the lowest rank's marks) and rank by rank, each rank's view as any
//! trace ([`rank_own`]).

use crate::analysis::{
    Analysis, AnalysisOptions, CounterPeak, DroppedSummary, ExitSummary, GpuSummary, MarksSampled,
    Overview,
};
use crate::mark_steps::MarkSteps;
use crate::metrics::MarkValues;
use crate::peaks::{Peak, PeakSource};
use crate::prepared::{Prepared, RankPrepared};
use crate::rank_views::RankProcess;
use crate::recommend::RuleContext;
use crate::stages::StageTableOptions;
use crate::{
    batch_fit, estimate, inputs, leaks, node, oom, peaks, rank_views, ranks, recommend, run_up,
    shm, stage_breakdown, stages, trend, workers,
};
use oomscope_format::Trace;

/// [`analyze`] of a trace still being written, with what was read at its marks the last time
/// (`prepared`, brought up to `trace` first): the same analysis, the marks' values read only
/// for what was appended. A trace of several ranks keeps what was read of each rank's view and
/// of the whole run's marks too (the views themselves are made anew: a view is the trace's
/// columns selected, kept by no one between refreshes).
pub fn analyze_prepared(
    trace: &Trace,
    options: &AnalysisOptions,
    prepared: &mut Prepared,
) -> Analysis {
    prepared.update(trace);
    let ranks = prepared.ranks(trace);
    if ranks.len() >= 2
        && let Some(analysis) = {
            let steps = prepared.steps().clone();
            analyze_ranks(trace, options, &ranks, &steps, prepared.per_rank_mut())
        }
    {
        return analysis;
    }
    analyze_one(trace, options, None, prepared)
}

/// Analyses a trace. A trace of several ranks is analysed as a whole with the lowest rank's
/// marks (one process's stages), and rank by rank ([`Analysis::ranks`]).
pub fn analyze(trace: &Trace, options: &AnalysisOptions) -> Analysis {
    let ranks = rank_views::ranks_of(trace);
    if ranks.len() >= 2
        && let Some(analysis) = analyze_ranks(
            trace,
            options,
            &ranks,
            &MarkSteps::new(trace),
            &mut RankPrepared::default(),
        )
    {
        return analysis;
    }
    analyze_one(trace, options, None, &Prepared::new(trace))
}

/// A trace of several ranks (`ranks`) analysed whole, with the lowest rank's marks, and rank by
/// rank, each view read with what `kept` read of it before; `steps` are the distinct steps of
/// all its marks. None without a lowest rank's marks.
fn analyze_ranks(
    trace: &Trace,
    options: &AnalysisOptions,
    ranks: &[RankProcess],
    steps: &MarkSteps,
    kept: &mut RankPrepared,
) -> Option<Analysis> {
    let marks = rank_views::lowest_rank_marks(trace, ranks)?;
    let whole = Trace {
        marks,
        ..trace.clone()
    };
    let mut compared = ranks::compare_ranks(ranks::summarize(trace, "", 0, &mut |rank, view| {
        analyze_one(view, options, None, kept.rank(rank, view)).into_rank_own()
    }));
    compared
        .node_spikes
        .extend(node::node_host_spike(trace, ranks, "", 0));
    let mut analysis = analyze_one(
        &whole,
        options,
        Some(compared),
        kept.whole(&ranks[0], &whole),
    );
    // The overview counts what the trace holds: every rank's marks.
    let o = &mut analysis.overview;
    (o.marks, o.marked_steps) = (trace.marks.len(), steps.count());
    o.steps = step_count(steps, o.marks_sampled.as_ref());
    (o.first_step, o.last_step) = (steps.first(), last_step(steps, trace));
    Some(analysis)
}

/// A rank's view analysed as any trace: what it adds to the rank's summary.
pub fn rank_own(view: &Trace, options: &AnalysisOptions) -> ranks::RankOwn {
    analyze(view, options).into_rank_own()
}

/// Analyses one process's trace (with its ranks compared, when it holds several): the rules
/// run once, on everything.
fn analyze_one(
    trace: &Trace,
    options: &AnalysisOptions,
    ranks: Option<ranks::RankAnalysis>,
    prepared: &Prepared,
) -> Analysis {
    let (values, stage_index) = (prepared.values(), prepared.stages());
    let several_ranks = prepared.ranks(trace).len() >= 2;
    let columns = prepared.columns(trace);
    let peaks = peaks::peaks_with(trace, values, several_ranks, &columns);
    let stage_options = StageTableOptions {
        baseline_mark: options.baseline_mark,
    };
    let growing_workers = workers::growing_workers_with(trace, prepared.marking_pids());
    let leak_fits = leaks::leak_fits(trace, prepared, &growing_workers, options.leak_min_steps);
    // With the primary metric leaking, "peak − model state" is activations plus leaked memory,
    // so a per-sample cost derived from it would be wrong; batch trials measure it directly.
    let primary_leaks = values.primary().is_some_and(|p| {
        leak_fits
            .iter()
            .any(|f| f.is_leak() && f.metric == values.key(p))
    });
    let batch_fit = batch_fit::batch_fit(trace, &peaks, options.batch_margin)
        .filter(|f| f.method == batch_fit::BatchFitMethod::Trials || !primary_leaks);
    let mut held = trace.held.clone();
    crate::sort::sort_by_key(&mut held, |h| std::cmp::Reverse((h.bytes, h.count)));
    // The breakdown at the peak (else the last one) beside the estimate for the same model; a
    // peak in an eval after zero_grad(set_to_none=True) has no gradients to compare, so then the
    // last breakdown that had them (training's).
    let at_peak = peaks::breakdown_peak(&peaks)
        .and_then(|p| p.components.as_ref())
        .map(|c| &c.breakdown);
    let with_gradients = trace
        .components
        .iter()
        .rev()
        .find(|c| c.gradients_bytes > 0);
    let against_estimate = at_peak
        .filter(|b| b.gradients_bytes > 0)
        .or(with_gradients)
        .or(at_peak)
        .or_else(|| trace.components.last())
        .and_then(estimate::against_estimate);
    let (phase_transitions, training_peak) = prepared.phases(trace);
    let ooms = oom::oom_contexts(trace);
    let run_up = run_up::run_up(trace, &ooms, &phase_transitions);
    let mut analysis = Analysis {
        overview: overview(trace, values, prepared.steps(), &peaks),
        held,
        gc: trace.gc.clone(),
        stage_table: match stage_options.baseline_mark {
            None => prepared.stage_table(trace),
            Some(_) => stages::stage_table(trace, values, stage_index, &stage_options),
        },
        largest_growth: stages::largest_growth_with(trace, values, &columns),
        input_peak: inputs::input_peak_with(trace, values, stage_index),
        leak_fits,
        time_trends: trend::time_trends(trace),
        growing_workers,
        pressure: prepared.pressure(trace),
        outside_allocator: prepared.outside_allocator(trace),
        host_memory: prepared.host_memory(trace),
        phase_transitions,
        training_peak,
        ooms,
        symptoms: crate::symptom::symptoms(trace),
        run_up,
        shared_memory: shm::shared_memory(trace),
        batch_fit,
        batch_trials: batch_fit::trial_summary(trace),
        against_estimate,
        stage_breakdown: stage_breakdown::stage_breakdown(trace, values),
        peaks,
        ranks,
        findings: Vec::new(),
    };
    analysis.findings = recommend::findings(&RuleContext {
        trace,
        analysis: &analysis,
    });
    analysis
}

/// The steps the program ran, from the marks' distinct steps: when the hooks marked one
/// iteration in several, all from the first to the last the loop reached (the hooks say it as
/// the process exits; else the last marked).
fn step_count(steps: &MarkSteps, sampled: Option<&MarksSampled>) -> usize {
    match (steps.first(), steps.last(), sampled) {
        (Some(first), Some(last), Some(s)) => {
            (s.last_step.unwrap_or(last).max(last) - first).saturating_add(1) as usize
        }
        _ => steps.count(),
    }
}

/// The last step: the last marked, or the last the loop reached when the hooks said it.
fn last_step(steps: &MarkSteps, trace: &Trace) -> Option<u64> {
    let said = trace.mark_sampling.iter().filter_map(|s| s.last_step).max();
    steps.last().max(said).filter(|_| steps.count() > 0)
}

/// The overview block.
fn overview(trace: &Trace, values: &MarkValues, steps: &MarkSteps, peaks: &[Peak]) -> Overview {
    let meta = &trace.metadata;
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
    crate::sort::sort_by_key(&mut dropped, |d| d.record_tag);
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
        steps: step_count(steps, crate::marks::marks_sampled(trace).as_ref()),
        marked_steps: steps.count(),
        marks_sampled: crate::marks::marks_sampled(trace),
        first_step: steps.first(),
        last_step: last_step(steps, trace),
        primary_metric: values.primary().map(|p| values.key(p)),
        exit: trace.exit.map(|e| ExitSummary {
            t_us: e.t_us,
            status: e.status,
            probable_host_oom: e.probable_host_oom,
        }),
        ended_cleanly: trace.end_us.is_some(),
        attach: trace.attach.clone(),
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
    use crate::finding::FindingKind;
    use crate::metrics::MetricKey;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_format::{Dropped, ExitStatus, Phase};
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
                .filter(|f| f.kind() == FindingKind::Leak)
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

    /// 10 000 steps × 5 stages = 50 000 marks with allocator statistics, and 3.6 M sample rows × 7 counters
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
