//! Traces of real programs — framework programs (`collector/tests/framework_programs/`, PyTorch
//! 2.11 CPU, Lightning 2.6.6) recorded by `collector/tests/frameworks.rs`, and plain Python ones —
//! recorded on the development VM, kept where a run showed something the analysis got wrong.
//! Never regenerate: add new ones.

use oomscope_analysis::facts::{LeakVerdict, NotALeak};
use oomscope_analysis::finding::FindingKind;
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::decode;
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

/// `lightning_eval_outputs.py --keep` (validation_step_outputs never cleared: 16 MiB of logits a
/// batch, 10 batches a validation, six validations) recorded while the rest of the test suite
/// ran (2026-11-26): the RSS also rose 2.2 MiB/step inside the training steps, which read as
/// "Memory leak: +8.41 MiB/step at pre_backward" beside the right eval finding.
#[test]
fn lightning_s_eval_staircase_under_load_is_no_per_step_leak() {
    let t = decode(&oomscope_testkit::data::trace(
        "v1_10_lightning_eval_creep.oomt",
    ))
    .unwrap()
    .trace;
    let a = analyze(&t, &AnalysisOptions::default());
    let kinds: Vec<FindingKind> = worded(&a.findings).iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        [FindingKind::EvalRetainsMemory],
        "{:#?}",
        worded(&a.findings)
    );
    assert!(a.leaks().next().is_none());
    // Every fitted stage of the RSS: what the five evals kept (688–752 MiB) against what the
    // training steps added (140–317 MiB), no tensors counted growing.
    let rss: Vec<_> = a
        .leak_fits
        .iter()
        .filter(|f| f.host_memory && f.transitions == 5)
        .collect();
    assert_eq!(rss.len(), 6, "{rss:#?}");
    for f in &rss {
        assert!(f.transition_growth_bytes >= 688 << 20, "{f:#?}");
        assert!(f.train_growth_bytes <= 320 << 20, "{f:#?}");
    }
    let creeping: Vec<&str> = rss
        .iter()
        .filter(|f| f.verdict == LeakVerdict::Not(NotALeak::StaircaseCreep))
        .map(|f| f.stage.as_str())
        .collect();
    assert!(creeping.contains(&"pre_backward"), "{creeping:?}");
    let eval = &a.findings[0];
    assert!(
        eval.explanation()
            .contains("the training steps between the evals added"),
        "{}",
        eval.explanation()
    );
    assert!(!eval.explanation().contains("not a per-step leak"));
}

/// Four forked workers reading their parent's two million Python strings for 30 s (the classic
/// copy-on-write "DataLoader leak"; the program of `diagnosis.rs`'s workers test, 4 workers, 60
/// chunks 0.5 s apart), recorded with `collector run` (2026-11-26): the tree's PSS grew 466 MiB,
/// all of it the workers' private copies, and a generic "Memory grows +1.14 GiB/min" leak headed
/// the findings — with tensor advice — above the workers' own finding.
#[test]
fn workers_copying_their_parent_are_one_finding_not_a_leak_beside_it() {
    let t = decode(&oomscope_testkit::data::trace("v1_10_cow_workers.oomt"))
        .unwrap()
        .trace;
    let a = analyze(&t, &AnalysisOptions::default());
    let kinds: Vec<FindingKind> = worded(&a.findings).iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        [FindingKind::WorkerPrivateGrowth],
        "{:#?}",
        worded(&a.findings)
    );
    assert_eq!(a.growing_workers.len(), 4);
    let workers: f64 = a.growing_workers.iter().map(|w| w.slope_bytes_per_s).sum();
    let trend = a
        .time_trends
        .iter()
        .find(|t| t.host_memory && t.is_leak)
        .expect("the host memory's growth is still measured");
    assert!(
        workers >= trend.slope_bytes_per_s,
        "{workers} vs {trend:#?}"
    );
    assert!(trend.growth_bytes >= 400 << 20, "{trend:#?}");
}

/// The zoo's `eval_concat_fits.py` (an eval that keeps 24 batches of 8 MiB logits in a list and
/// concatenates them) recorded beside three more copies of itself (2026-11-29): its first eval's
/// ~190 MiB stayed in the host's RSS for three training steps, then fell, to 8 MiB above where
/// training was before (the allocator's and the program's accuracy list). Training's peak read
/// that tail (827 MiB) and the eval's 1.0 GiB peak was no longer 256 MiB above it: no eval-peak
/// finding (the CI failure of the stop of 2026-11-29 10:45).
#[test]
fn an_eval_s_memory_handed_back_late_is_not_training_s_peak_though_the_eval_kept_a_little() {
    let t = decode(&oomscope_testkit::data::trace("v1_13_eval_late_arena.oomt"))
        .unwrap()
        .trace;
    let a = analyze(&t, &AnalysisOptions::default());
    let training = a.training_peak.as_ref().unwrap();
    let tail = training.tail.unwrap();
    assert_eq!((tail.entry_step, tail.steps), (39, 3), "{training:?}");
    assert!(tail.bytes >= 820 << 20, "{training:?}");
    assert!(
        (640 << 20..660 << 20).contains(&training.bytes),
        "{training:?}"
    );
    let kinds: Vec<FindingKind> = worded(&a.findings).iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [FindingKind::EvalPeak], "{:#?}", worded(&a.findings));
    let text = &a.findings[0].explanation();
    assert!(text.contains("handed back late"), "{text}");
    assert!(text.contains("batch by batch"), "{text}");
}
