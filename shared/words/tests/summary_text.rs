//! The whole `collector summary` text of a set of traces, snapshot-tested: a change of wording
//! (or of a number) shows as a diff of `tests/snapshots/*.snap` to review, not as a dozen
//! `contains` assertions to edit. Numbers are also asserted where they are computed; these
//! snapshots hold what a reader sees.
//!
//! Update after an intended change: `INSTA_UPDATE=always cargo test -p oomscope-words --test
//! summary_text`, then read the diff before committing it.

use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::{Trace, decode};
use oomscope_testkit::synth::TrainingRun;
use oomscope_words as render;

fn file(path: &str) -> Trace {
    decode(&oomscope_testkit::data::trace(path)).unwrap().trace
}

fn summary(trace: &Trace) -> String {
    render::summary::render(trace, &analyze(trace, &AnalysisOptions::default()))
}

#[test]
fn golden_traces() {
    for (name, path) in [
        ("v1_0_instrumented", "v1_0_instrumented.oomt"),
        ("v1_0_oom", "v1_0_oom.oomt"),
        ("v1_0_truncated", "v1_0_truncated.oomt"),
        ("v1_1_host_error", "v1_1_host_error.oomt"),
        ("v1_2_mark_senders", "v1_2_mark_senders.oomt"),
        ("v1_3_alive_at_oom", "v1_3_alive_at_oom.oomt"),
        ("v1_4_oom_kill", "v1_4_oom_kill.oomt"),
        ("v1_10_inputs", "v1_10_inputs.oomt"),
        (
            "v1_10_lightning_eval_creep",
            "v1_10_lightning_eval_creep.oomt",
        ),
        ("v1_14_attached", "v1_14_attached.oomt"),
    ] {
        insta::assert_snapshot!(name, summary(&file(path)));
    }
}

#[test]
fn traces_recorded_on_an_h200() {
    for name in [
        "h200_v1_10_breakdown",
        "h200_v1_10_torch_oom",
        "h200_v1_10_inputs",
    ] {
        insta::assert_snapshot!(name, summary(&file(&format!("gpu/{name}.oomt"))));
    }
}

#[test]
fn traces_recorded_on_an_h100() {
    for name in [
        "h100_torch_loop",
        "h100_torch_oom",
        "h100_gpt",
        "h100_tch_oom",
        "h100_batch",
    ] {
        insta::assert_snapshot!(name, summary(&file(&format!("gpu/{name}.oomt"))));
    }
}

#[test]
fn simulated_runs() {
    let runs = [
        ("synth_healthy", TrainingRun::default()),
        (
            "synth_leak_and_eval",
            TrainingRun {
                steps: 60,
                leak_bytes_per_step: 64 << 20,
                eval_every: Some(20),
                eval_steps: 2,
                eval_retained_bytes: 1 << 30,
                ..TrainingRun::default()
            },
        ),
        (
            "synth_nan_gradients",
            TrainingRun {
                steps: 40,
                nan_at_step: Some(25),
                ..TrainingRun::default()
            },
        ),
    ];
    for (name, run) in runs {
        let trace = decode(&run.to_bytes()).unwrap().trace;
        insta::assert_snapshot!(name, summary(&trace));
    }
}

#[test]
fn a_fix_compared_with_the_run_before_it() {
    let run = |leak: u64, eval_retained_bytes: u64| {
        let r = TrainingRun {
            steps: 60,
            leak_bytes_per_step: leak,
            eval_every: Some(20),
            eval_steps: 2,
            eval_retained_bytes,
            ..TrainingRun::default()
        };
        let trace = decode(&r.to_bytes()).unwrap().trace;
        let analysis = analyze(&trace, &AnalysisOptions::default());
        (trace, analysis)
    };
    let (_, before) = run(64 << 20, 1 << 30);
    let (_, after) = run(0, 1 << 30);
    let text = render::compare::render_compare("before.oomt", &before, "after.oomt", &after);
    insta::assert_snapshot!("compare_leak_fixed", text);
}
