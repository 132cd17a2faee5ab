//! Words the analysis's own tests used to assert beside its facts: a comparison's headline, a
//! peak's breakdown in one line, and where a peak was said to be.

use oomscope_analysis::compare::memory_peaks;
use oomscope_analysis::facts::StageAt;
use oomscope_analysis::facts::{OutsideMarks, breakdown_peak, memory_peak};
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::units::MIB;
use oomscope_format::{ComponentBreakdown, CounterKind, Phase, Trace, decode};
use oomscope_testkit::run::Run;
use oomscope_testkit::synth::TrainingRun;
use oomscope_words::breakdown::breakdown_line;
use oomscope_words::compare::compare_headline;
use oomscope_words::phrases::peak_place;

fn run(leak: u64) -> Trace {
    let r = TrainingRun {
        steps: 50,
        leak_bytes_per_step: leak,
        eval_every: Some(20),
        eval_steps: 2,
        ..TrainingRun::default()
    };
    decode(&r.to_bytes()).unwrap().trace
}

#[test]
fn a_comparison_says_what_the_fix_removed_and_how_the_peak_moved() {
    let a = analyze(&run(64 << 20), &AnalysisOptions::default());
    let b = analyze(&run(0), &AnalysisOptions::default());
    let peak = memory_peaks(&a, &b).unwrap();
    let headline = compare_headline(&a, &b);
    assert!(headline.starts_with("Leak gone; "), "{headline}");
    assert!(
        headline.contains(&format!("{} -", peak.metric)),
        "{headline}"
    );
    let same = compare_headline(&a, &a);
    assert!(same.starts_with("Leak still there"), "{same}");
    assert!(same.contains(" 0 B ("), "{same}");
}

#[test]
fn a_device_peak_in_one_line() {
    let analysis = analyze(&Run::default().build(), &AnalysisOptions::default());
    let peak = memory_peak(&analysis.peaks).unwrap();
    assert_eq!(
        breakdown_line(peak).unwrap(),
        "peak_allocated 28.0 GiB = weights 4.00 GiB + gradients 4.00 GiB + optimizer state 8.00 \
         GiB + activations 12.0 GiB; beside it on the GPU: the allocator's cache 512 MiB + \
         outside the allocator 600 MiB (CUDA context, NCCL, other libraries)"
    );
}

#[test]
fn a_cpu_run_s_breakdown_says_what_a_training_forward_adds() {
    let mut trace = Trace::default();
    let rss = trace.declare_counter(CounterKind::HostRss, None);
    // Forwards that add 30, 50 and 40 MiB; an eval forward's 500 MiB does not count.
    let mut t = 0;
    for (step, rise, phase) in [
        (0, 30, Phase::Train),
        (1, 50, Phase::Train),
        (2, 40, Phase::Train),
        (3, 500, Phase::Eval),
    ] {
        for (stage, bytes) in [("pre_forward", 700), ("post_forward", 700 + rise)] {
            t += 1_000;
            trace.samples.push_row(t, &[(rss, bytes * MIB)]);
            trace.marks.push(oomscope_format::StageMark {
                t_us: t,
                name: stage.into(),
                step,
                phase,
                ..Default::default()
            });
        }
    }
    trace.components.push(ComponentBreakdown {
        t_us: 500,
        parameters_bytes: 10 * MIB,
        ..Default::default()
    });
    let analysis = analyze(&trace, &AnalysisOptions::default());
    let p = breakdown_peak(&analysis.peaks).expect("a host peak");
    assert_eq!(
        breakdown_line(p).unwrap(),
        "host.rss 1.17 GiB = weights 10.0 MiB + the rest 1.16 GiB (activations, data, the \
         interpreter and its libraries; a training forward adds 40.0 MiB to it, the activations \
         kept for backward)"
    );
}

#[test]
fn where_a_peak_was() {
    let analysis = analyze(&Run::default().build(), &AnalysisOptions::default());
    let mut peak = memory_peak(&analysis.peaks).unwrap().clone();
    assert_eq!(peak_place(&peak), " at post_forward of step 0");
    let last = StageAt {
        mark_index: 3,
        stage: "post_optimizer_step".into(),
        step: 3,
        phase: Phase::Train,
        t_us: 0,
    };
    peak.stage = None;
    peak.outside_marks = Some(OutsideMarks::AfterLastMark {
        last,
        after_us: 222_000,
    });
    assert_eq!(
        peak_place(&peak),
        " after the last mark (222 ms after post_optimizer_step of step 3)"
    );
    peak.outside_marks = Some(OutsideMarks::BeforeFirstMark { before_us: 40_000 });
    assert_eq!(
        peak_place(&peak),
        " before the first mark (40.0 ms before it)"
    );
    peak.outside_marks = None;
    assert_eq!(peak_place(&peak), "");
}
