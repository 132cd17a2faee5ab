//! What the analysis reads from the golden traces (`shared/format/tests/data/`, decoded to the
//! same facts by `shared/format/tests/golden.rs`): findings, fits, ranks and words that must not
//! change for files already written.

use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::decode;

use oomscope_testkit::data::trace as read;
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

#[test]
fn v1_3_alive_at_oom() {
    let t = decode(&read("v1_3_alive_at_oom.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    assert_eq!(analysis.ooms[0].alive.len(), 3);
}

#[test]
fn v1_7_oom_allocator_state() {
    let t = decode(&read("v1_7_oom_allocator_state.oomt"))
        .unwrap()
        .trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    let o = &analysis.ooms[0];
    assert_eq!(
        (
            o.allocated_bytes,
            o.reserved_bytes,
            o.allocator_mark_stage.as_deref()
        ),
        (Some(70 << 30), Some(78 << 30), None)
    );
}

#[test]
fn v1_8_file_pages() {
    let t = decode(&read("v1_8_file_pages.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    assert!(
        worded(&analysis.findings).is_empty(),
        "{:#?}",
        worded(&analysis.findings)
    );
    let fit = analysis
        .leak_fits
        .iter()
        .find(|f| f.stage == "post_forward")
        .unwrap();
    assert!(!fit.is_leak());
    assert!((fit.slope_bytes_per_step - f64::from(8 << 20)).abs() < 1.0);
    assert_eq!(fit.file_backed_growth_bytes, Some(fit.growth_bytes));
    let text = oomscope_words::summary::render(&t, &analysis);
    assert!(
        text.contains("of it resident pages of memory-mapped files"),
        "{text}"
    );
    assert!(text.contains("anonymous memory did not grow"), "{text}");
}

#[test]
fn v1_9_held() {
    let t = decode(&read("v1_9_held.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    let text = oomscope_words::summary::render(&t, &analysis);
    assert!(
        text.contains(
            "  +8 float32[scalar] (MseLossBackward0) on cpu, +2.00 MiB over steps 4-12 (1 a step): \
             list\n    `val_losses` (12 items)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "+56 autograd nodes over steps 4-12 behind `total_val`, one float32 (AddBackward0) \
             tensor on cpu:\n    each step's graph stays attached to it"
        ),
        "{text}"
    );
}

#[test]
fn v1_10_inputs() {
    let t = decode(&read("v1_10_inputs.oomt")).unwrap().trace;
    let a = analyze(&t, &AnalysisOptions::default());
    let p = a.input_peak.as_ref().expect("an input-driven peak");
    assert_eq!((p.elements, p.median_elements), (4096, 512));
    assert_eq!(p.stage, "post_forward");
    let steps: Vec<u64> = p.long_steps.iter().map(|l| l.step).collect();
    assert_eq!(steps, [9, 19, 29]);
    assert_eq!(p.peak_bytes - p.median_peak_bytes, 3584 * (40 << 10));
    assert!((p.bytes_per_element - f64::from(40 << 10)).abs() < 1.0);
    assert_eq!(worded(&a.findings)[0].kind.id(), "input-peak");
    assert!(a.leaks().next().is_none());
}

#[test]
fn v1_10_optimizers() {
    let t = decode(&read("v1_10_optimizers.oomt")).unwrap().trace;
    let a = analyze(&t, &AnalysisOptions::default());
    let peak = oomscope_analysis::facts::breakdown_peak(&a.peaks).unwrap();
    let line = oomscope_words::breakdown::breakdown_line(peak).unwrap();
    assert!(
        line.contains(
            "optimizer state 6.00 MiB (optimizerD Adam 4.00 MiB, Adam(Generator) 2.00 MiB)"
        ),
        "{line}"
    );
}

#[test]
fn v1_4_oom_kill() {
    let t = decode(&read("v1_4_oom_kill.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    let top = &analysis.findings[0];
    assert_eq!(
        top.title(),
        "The program was killed by the kernel's OOM killer"
    );
}

#[test]
fn v1_5_ranks() {
    let t = decode(&read("v1_5_ranks.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    let r = analysis.ranks.as_ref().unwrap();
    assert_eq!(r.ranks.len(), 2);
    assert_eq!((r.ranks[0].marks, r.ranks[1].marks), (4, 3));
    assert_eq!(r.first_failure.as_ref().unwrap().rank, 1);
    assert_eq!(r.imbalance[0].rank, 1);
    assert_eq!(r.imbalance[0].excess_bytes(), 300 << 20);
    assert_eq!(
        worded(&analysis.findings)[0].kind.id(),
        "first-rank-failure"
    );
    assert!(
        analysis
            .findings
            .iter()
            .any(|f| f.title().starts_with("Rank 1 failed first"))
    );
}

#[test]
fn v1_6_launcher_kill() {
    let t = decode(&read("v1_6_launcher_kill.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    let f = &analysis.findings[0];
    assert_eq!(f.kind().id(), "host-memory-pressure");
    assert_eq!(f.title(), "Rank 1 was killed by its launcher for memory");
    // Not this host's memory: the batch node's figures are not quoted.
    assert!(
        !f.explanation().contains("available"),
        "{}",
        f.explanation()
    );
}

#[test]
fn v1_6_pipeline_groups() {
    let t = decode(&read("v1_6_pipeline_groups.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    let r = analysis.ranks.as_ref().unwrap();
    // pp0 holds more than pp1 by design: only rank 1 within pp0 is out of line.
    assert_eq!(r.imbalance.len(), 1, "{:?}", r.imbalance);
    assert_eq!(
        (r.imbalance[0].rank, r.imbalance[0].group.as_deref()),
        (1, Some("pp0"))
    );
    assert_eq!(r.imbalance[0].excess_bytes(), 200 << 20);
    let f = analysis
        .findings
        .iter()
        .find(|f| f.kind().id() == "rank-imbalance")
        .unwrap();
    assert_eq!(
        f.title(),
        "Rank 1 holds 200 MiB more than the median rank of group pp0 at post_forward (host.rss)"
    );
}

#[test]
fn v1_11_hook_facts() {
    let t = decode(&read("v1_11_hook_facts.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    let text = oomscope_words::summary::render(&t, &analysis);
    // (The words wrap at 100 columns.)
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for line in [
        "list `val_losses` (12 items)",
        "a reference cycle through a `StepRecord` object (attribute `batch`)",
        "no Python container (held from C++",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
    // An eval ran with autograd on: the advice may say so.
    assert_eq!(oomscope_analysis::facts::eval_autograd(&t), Some(true));
}

#[test]
fn v1_11_mark_sampling() {
    let t = decode(&read("v1_11_mark_sampling.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    let o = &analysis.overview;
    // The program's steps, not the marked ones.
    assert_eq!((o.steps, o.marked_steps), (300, 125));
    let text = oomscope_words::summary::render(&t, &analysis);
    assert!(text.contains("250 marks, 300 steps (0-299)"), "{text}");
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains(
            "a fast loop (2.50 ms an iteration): every iteration marked up to step 99, then one in \
             8 at most (125 marked steps), and every eval, checkpoint and long input"
        ),
        "{text}"
    );
}

#[test]
fn v1_12_program_end() {
    let t = decode(&read("v1_12_program_end.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    let rss = &analysis.peaks[0];
    // The loop's 609 MiB is the peak; the shutdown's 700 MiB, 50 ms after the end, is told apart.
    assert_eq!((rss.bytes, rss.t_us), (609 << 20, 90_000));
    let after = rss.after_program_end.expect("the shutdown's reading");
    assert_eq!((after.bytes, after.after_us), (700 << 20, 50_000));
    let text = oomscope_words::summary::render(&t, &analysis);
    assert!(
        text.contains("then 700 MiB 50.0 ms after the program's last line"),
        "{text}"
    );
}

#[test]
fn v1_14_attached() {
    // `collector attach` on a program keeping 60 MiB/s: the leak over time, and the ending an
    // attached recorder can say.
    let t = decode(&read("v1_14_attached.oomt")).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    let trend = analysis.time_trends.iter().find(|t| t.is_leak).unwrap();
    let mib_per_s = trend.slope_bytes_per_s / f64::from(1 << 20);
    assert!((45.0..=60.0).contains(&mib_per_s), "{mib_per_s}");
    let words = worded(&analysis.findings);
    assert_eq!(words.len(), 1, "{words:?}");
    assert_eq!(
        oomscope_words::headline::ending(&t),
        "attached to the running process 510 ms after its start; it ended (its exit status is \
         its parent's to read, not an attached recorder's)"
    );
}
