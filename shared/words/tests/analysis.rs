//! End to end through bytes: generated runs with planted faults are written by the real writer,
//! decoded, and analysed; each finding must fire on its fault (with the planted numbers) and stay
//! silent on a healthy run.

use oomscope_analysis::finding::{FindingKind, Severity};
use oomscope_analysis::{Analysis, AnalysisOptions, analyze};
use oomscope_format::{Trace, decode};
use oomscope_testkit::synth::TrainingRun;
use oomscope_words as render;

use oomscope_format::units::{GIB, MIB};
use oomscope_words::findings::FindingWords as _;

/// A list of findings in words.
fn worded(
    findings: &[oomscope_analysis::finding::Finding],
) -> Vec<oomscope_words::findings::Worded> {
    findings
        .iter()
        .map(oomscope_words::findings::worded)
        .collect()
}

fn analysed(run: &TrainingRun) -> (Trace, Analysis) {
    let decoded = decode(&run.to_bytes()).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let analysis = analyze(&decoded.trace, &AnalysisOptions::default());
    (decoded.trace, analysis)
}

fn ids(analysis: &Analysis) -> Vec<&str> {
    worded(&analysis.findings)
        .iter()
        .map(|f| f.kind.id())
        .collect()
}

/// Batch 20: activations 6.25 GiB (44% of the peak) against 8 GiB of model state (Adam's state
/// 28% of the peak): nothing wrong, nothing to say.
fn healthy() -> TrainingRun {
    TrainingRun {
        batch_size: 20,
        ..TrainingRun::default()
    }
}

#[test]
fn a_healthy_run_has_no_findings() {
    let (_, analysis) = analysed(&healthy());
    assert_eq!(ids(&analysis), Vec::<&str>::new());
    assert!(analysis.leaks().next().is_none());
}

#[test]
fn adam_state_on_a_small_batch_is_reported() {
    // Batch 16: Adam's 4 GiB are 31% of a 13 GiB peak.
    let (_, analysis) = analysed(&TrainingRun::default());
    assert_eq!(ids(&analysis), ["optimizer-state-heavy"]);
    let finding = &analysis.findings[0];
    assert!(
        finding.explanation().contains("4.00 GiB"),
        "{}",
        finding.explanation()
    );
    assert!(finding.change().contains("8-bit"), "{}", finding.change());
}

#[test]
fn a_planted_leak_is_found_at_its_rate() {
    for snapshots in [true, false] {
        let run = TrainingRun {
            leak_bytes_per_step: 12 * MIB,
            allocator_stats: snapshots,
            ..healthy()
        };
        let (_, analysis) = analysed(&run);
        assert!(
            ids(&analysis).contains(&"leak"),
            "snapshots={snapshots}: {:?}",
            ids(&analysis)
        );
        let fit = analysis
            .leaks()
            .find(|f| f.stage == "post_optimizer_step" && !f.host_memory)
            .expect("a leak at post_optimizer_step");
        let truth = (12 * MIB) as f64;
        // With snapshots the allocator's own numbers are exact; from NVML the slope is read off
        // 2 MiB segments and a 1 Hz process poll, so allow more.
        let tolerance = if snapshots { 0.01 } else { 0.2 };
        assert!(
            (fit.slope_bytes_per_step - truth).abs() / truth < tolerance,
            "snapshots={snapshots}: slope {} vs {truth}",
            fit.slope_bytes_per_step
        );
        assert!(fit.r_squared > 0.95);
    }
}

#[test]
fn eval_that_keeps_its_outputs_is_reported() {
    let run = TrainingRun {
        eval_every: Some(50),
        eval_retained_bytes: GIB,
        ..healthy()
    };
    let (_, analysis) = analysed(&run);
    let finding = analysis
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::EvalRetainsMemory);
    let finding = finding.unwrap_or_else(|| panic!("{:?}", ids(&analysis)));
    assert!(
        finding.explanation().contains("1.00 GiB"),
        "{}",
        finding.explanation()
    );
    // Eval that gives everything back is not.
    let clean = TrainingRun {
        eval_retained_bytes: 0,
        ..run
    };
    assert!(!ids(&analysed(&clean).1).contains(&"eval-retains-memory"));
}

#[test]
fn allocator_retries_are_reported_as_fragmentation() {
    let run = TrainingRun {
        alloc_retries_per_step: 2,
        ..healthy()
    };
    let (_, analysis) = analysed(&run);
    let finding = analysis
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::Fragmentation)
        .unwrap();
    assert!(finding.change().contains("expandable_segments:True"));
    assert!(
        // 2 per step after step 0, as last seen at the mark of step 199 (before its own retries).
        finding.explanation().contains("396 times"),
        "{}",
        finding.explanation()
    );
}

#[test]
fn activations_that_dominate_get_a_batch_that_fits() {
    let run = TrainingRun {
        batch_size: 32,
        activation_bytes_per_sample: 2253 * MIB, // 2.2 GiB
        ..TrainingRun::default()
    };
    let (_, analysis) = analysed(&run);
    let finding = analysis
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::ActivationsDominate)
        .unwrap_or_else(|| panic!("{:?}", ids(&analysis)));
    // 10% margin on 80 GiB leaves 72 GiB; 8 GiB of model state; 2.2 GiB per sample: 29 fit.
    let fit = analysis.batch_fit.as_ref().unwrap();
    assert_eq!(fit.max_batch, 29, "{fit:?}");
    assert_eq!(fit.accumulation_steps, Some(2));
    assert!(
        finding.explanation().contains("batch 29"),
        "{}",
        finding.explanation()
    );
}

#[test]
fn a_batch_search_predicts_the_largest_batch() {
    let run = TrainingRun {
        batch_search: true,
        ..healthy()
    };
    let (_, analysis) = analysed(&run);
    assert!(ids(&analysis).contains(&"batch-size"));
    let trials = analysis.batch_trials.as_ref().unwrap();
    assert_eq!(trials.largest_fit_batch, Some(128));
    assert_eq!(trials.smallest_oom_batch, Some(256));
    // Ground truth: 8 GiB fixed + 320 MiB per sample within 90% of 80 GiB → 204.
    let fit = analysis.batch_fit.as_ref().unwrap();
    assert!(
        (fit.per_sample_bytes - (320 * MIB) as f64).abs() < MIB as f64,
        "{fit:?}"
    );
    assert_eq!(fit.max_batch, 204);
}

#[test]
fn non_finite_gradients_are_critical() {
    let run = TrainingRun {
        nan_at_step: Some(50),
        ..healthy()
    };
    let (_, analysis) = analysed(&run);
    let finding = analysis
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::NonFiniteGradients)
        .unwrap();
    assert_eq!(finding.severity, Severity::Critical);
    assert!(
        finding.explanation().contains("step 50"),
        "{}",
        finding.explanation()
    );
}

#[test]
fn the_oom_golden_trace_explains_its_oom() {
    let bytes = oomscope_testkit::data::trace("v1_0_oom.oomt");
    let trace = decode(&bytes).unwrap().trace;
    let analysis = analyze(&trace, &AnalysisOptions::default());
    // The trace plants 1 GiB kept per step: eleven steps of it, then the OOM. The leak is the
    // cause and is found although the run is short; both are critical.
    let kinds: Vec<FindingKind> = worded(&analysis.findings).iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds[..2],
        [FindingKind::Leak, FindingKind::Oom],
        "{kinds:?}"
    );
    assert!(
        worded(&analysis.findings)[..2]
            .iter()
            .all(|f| f.severity == Severity::Critical)
    );
    let leak = &analysis.findings[0];
    assert!(
        leak.title().starts_with("Memory leak: +1.00 GiB/step"),
        "{}",
        leak.title()
    );
    let oom = &analysis.ooms[0];
    assert_eq!(oom.event.step, Some(12));
    assert_eq!(oom.event.stage.as_deref(), Some("post_forward"));
    assert!(oom.shortfall_bytes.unwrap() > 0);
    let summary = render::summary::render(&trace, &analysis);
    assert!(summary.contains("step 12"), "{summary}");
}

#[test]
fn the_summary_shows_the_stage_table() {
    let (trace, analysis) = analysed(&healthy());
    let summary = render::summary::render(&trace, &analysis);
    for stage in [
        "pre_forward",
        "post_forward",
        "pre_backward",
        "post_backward",
        "post_optimizer_step",
    ] {
        assert!(summary.contains(stage), "{stage} missing from\n{summary}");
    }
    // 20 samples × 320 MiB of activations appear as the post_forward delta.
    assert!(summary.contains("+6.25 GiB"), "{summary}");
}
