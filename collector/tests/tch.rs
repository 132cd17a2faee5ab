//! The tch instrumentation end to end on CPU: the GPT example under `collector run` and on its
//! own, with its stages, gradient and tensor statistics, components, and a planted leak found at
//! its true rate. Built only with the `tch` feature.
#![cfg(feature = "tch")]

use std::path::PathBuf;
use std::process::Command;

use oomscope_analysis::finding::FindingKind;
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::{Phase, Trace};

mod support;

use oomscope_testkit::Scratch;
use support::{collector, example, read, stderr};

/// A list of findings in words.
fn worded(
    findings: &[oomscope_analysis::finding::Finding],
) -> Vec<oomscope_words::findings::Worded> {
    findings
        .iter()
        .map(oomscope_words::findings::worded)
        .collect()
}

fn gpt() -> PathBuf {
    example("gpt")
}

fn run_under_collector(dir: &Scratch, args: &[&str]) -> Trace {
    let trace = dir.path("t.oomt");
    let out = collector(&["run", "-q", "-o", trace.to_str().unwrap(), "--"])
        .arg(gpt())
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    read(&trace).trace
}

#[test]
fn the_gpt_example_under_the_collector_shows_its_stages() {
    let dir = Scratch::new("tch-stages");
    let t = run_under_collector(
        &dir,
        &["--steps", "20", "--eval-every", "10", "--device", "cpu"],
    );
    let stages = [
        "pre_forward",
        "post_forward",
        "pre_backward",
        "post_backward",
        "post_optimizer_step",
    ];
    let train: Vec<&str> = t
        .marks
        .iter()
        .filter(|m| m.phase == Phase::Train)
        .map(|m| m.name.as_ref())
        .collect();
    assert_eq!(train.len(), 20 * 5);
    assert_eq!(&train[..5], stages);
    // 2 evaluations × 2 batches × (pre_forward, post_forward).
    assert_eq!(t.marks.iter().filter(|m| m.phase == Phase::Eval).count(), 8);
    assert_eq!(t.marks.last().unwrap().step, 19);
    assert_eq!(t.gradients.len(), 20);
    let g = &t.gradients[0];
    assert!(g.params_with_grad > 10 && g.global_norm.is_finite() && g.global_norm > 0.0);
    assert_eq!((g.nan_count, g.inf_count), (0, 0));
    // Logits statistics at steps 0 and 10.
    assert_eq!(t.tensors.len(), 2);
    assert_eq!(t.tensors[0].shape, [8, 64, 2048]);
    assert_eq!(t.tensors[0].bytes, 8 * 64 * 2048 * 4);
    let c = &t.components[0];
    // Measured over the first AdamW step (two moments per parameter), or computed when the
    // measurement was disturbed: either way within a quarter of 2 × parameters.
    assert!(
        c.optimizer_state_bytes.abs_diff(2 * c.parameters_bytes) <= c.parameters_bytes / 2,
        "{c:?}"
    );
    assert_eq!(c.gradients_bytes, c.parameters_bytes);
    assert_eq!(c.batch_size, Some(8));
    assert_eq!(g.gradient_bytes, c.gradients_bytes);
    let analysis = analyze(&t, &AnalysisOptions::default());
    let row = analysis
        .stage_table
        .rows
        .iter()
        .find(|r| r.stage == "post_forward" && r.phase == Phase::Train);
    assert!(row.is_some_and(|r| r.count == 20));
    assert!(
        analysis.leaks().next().is_none(),
        "no leak planted: {:?}",
        analysis.leaks().collect::<Vec<_>>()
    );
}

#[test]
fn a_planted_leak_is_found_within_20_percent_of_its_true_rate() {
    let dir = Scratch::new("tch-leak");
    let t = run_under_collector(
        &dir,
        &[
            "--steps",
            "60",
            "--eval-every",
            "0",
            "--leak-logits",
            "--device",
            "cpu",
        ],
    );
    let analysis = analyze(&t, &AnalysisOptions::default());
    // Each step keeps its logits: 8 × 64 × 2048 f32.
    let truth = f64::from(8 * 64 * 2048 * 4);
    let leak = analysis
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::Leak);
    assert!(leak.is_some(), "{:?}", worded(&analysis.findings));
    let fits: Vec<f64> = analysis.leaks().map(|f| f.slope_bytes_per_step).collect();
    assert!(!fits.is_empty());
    for slope in &fits {
        assert!(
            (slope - truth).abs() / truth < 0.2,
            "slope {slope:.0} vs true {truth}"
        );
    }
}

#[test]
fn the_gpt_example_records_itself_without_a_collector() {
    let dir = Scratch::new("tch-standalone");
    let trace = dir.path("gpt.oomt");
    let out = Command::new(gpt())
        .args([
            "--steps",
            "5",
            "--eval-every",
            "0",
            "--device",
            "cpu",
            "--trace",
            trace.to_str().unwrap(),
        ])
        .env_remove("OOMSCOPE_SOCKET")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let decoded = read(&trace);
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.marks.len(), 25);
    assert!(t.samples.len() > 2 && t.end_us.is_some());
    assert!(t.metadata.collector_version.contains("tch session"));
}
