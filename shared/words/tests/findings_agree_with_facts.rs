//! A finding must never contradict the recorded facts. For every committed trace (golden, and
//! recorded on an H100) and for a few hundred simulated runs, each finding's words and evidence
//! are checked against the trace itself:
//! - "SIGKILL" / "killed" claims only when the program died of a signal or the kernel's OOM
//!   killer is on record, "exited with code N" only with that exit code;
//! - every step a finding names (evidence `step`, `first_step`, `last_step`, `entry_step`, and
//!   "step N" in its words, projections excepted) is a step the trace has;
//! - every stage it names (`pre_*`, `post_*`, `eval_*` words) is a stage the trace marked;
//! - every GPU it names ("GPU N") is one the trace watched or an OOM named;
//! - "probably" is never said of a kill the kernel itself accounted for;
//! - "out of GPU memory" only with a GPU OOM on record, host-memory findings only with host
//!   counters or a host OOM.
//!
//! And every printed number is true (issue 42): counts agree across sections ("N of M evals"
//! names the eval table's M; an eval is named only in a run that had one); a part is never
//! larger than its whole (the file-backed share of a leak's growth, the model's parts of a CPU
//! peak, an eval run-up's batches); a leak fit's transitions are its evals, epoch ends and pauses.

use std::collections::BTreeSet;

use oomscope_analysis::finding::{Finding, FindingKind};
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::{CounterKind, ExitStatus, Trace, decode};
use oomscope_testkit::synth::TrainingRun;
use oomscope_words as render;
use oomscope_words::findings::FindingWords as _;
use proptest::prelude::*;

/// The numbers written after `word ` in `text` ("step 1 332" reads as 1332).
fn numbers_after(text: &str, word: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        rest = &rest[at + word.len()..];
        let digits: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ' ')
            .filter(char::is_ascii_digit)
            .collect();
        if let Ok(n) = digits.parse() {
            out.push(n);
        }
    }
    out
}

/// Checks every finding of `trace` against it; `name` says which trace failed.
fn check(name: &str, trace: &Trace) {
    let analysis = analyze(trace, &AnalysisOptions::default());
    numbers_are_true(name, trace, &analysis);
    symptoms_are_consistent(name, &analysis);
    let steps: BTreeSet<u64> = trace
        .marks
        .iter()
        .map(|m| m.step)
        .chain(trace.ooms.iter().filter_map(|o| o.step))
        .collect();
    let stages: BTreeSet<&str> = trace.marks.iter().map(|m| m.name.as_ref()).collect();
    let gpus: BTreeSet<u32> = trace
        .metadata
        .gpus
        .iter()
        .map(|g| g.index)
        .chain(trace.ooms.iter().filter_map(|o| o.device))
        .chain(trace.counters.iter().filter_map(|c| c.device))
        .collect();
    let signal = matches!(trace.exit.map(|e| e.status), Some(ExitStatus::Signal(_)));
    let kernel_kill = !trace.oom_kills.is_empty();
    // A launcher's word that it killed a task (Slurm's "task N: Out Of Memory").
    let launcher_kill = trace
        .ooms
        .iter()
        .any(|o| o.source == oomscope_format::OomSource::LauncherKill);
    for f in &analysis.findings {
        let words = format!("{} {} {}", f.title(), f.explanation(), f.change());
        let context = || format!("{name}: {:?} says {words:?}", f.kind());
        if words.contains("SIGKILL") || words.contains("was killed") || words.contains("killed ") {
            assert!(signal || kernel_kill || launcher_kill, "{}", context());
        }
        if let Some(code) = numbers_after(&words, "exited with code ").first() {
            assert_eq!(
                trace.exit.map(|e| e.status),
                Some(ExitStatus::Code(*code as i32)),
                "{}",
                context()
            );
        }
        if kernel_kill
            && trace
                .oom_kills
                .iter()
                .any(|k| k.from_kernel_log || k.from_cgroup_counter)
        {
            assert!(
                !(f.kind() == FindingKind::HostMemoryPressure && words.contains("probably")),
                "{}",
                context()
            );
        }
        check_steps(f, &words, &steps, &context);
        for word in words.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            let looks_like_stage = ["pre_", "post_", "eval_"]
                .iter()
                .any(|p| word.starts_with(p));
            if looks_like_stage {
                assert!(stages.contains(word), "stage {word}: {}", context());
            }
        }
        for gpu in numbers_after(&words, "GPU ") {
            assert!(gpus.contains(&(gpu as u32)), "GPU {gpu}: {}", context());
        }
        if f.kind() == FindingKind::Oom {
            assert!(
                trace.ooms.iter().any(|o| !o.source.is_host()),
                "{}",
                context()
            );
        }
        if f.kind() == FindingKind::HostMemoryPressure {
            let host_counters = trace
                .counters
                .iter()
                .any(|c| matches!(c.kind, CounterKind::HostAvailable | CounterKind::HostRss));
            assert!(
                host_counters
                    || kernel_kill
                    || trace.ooms.iter().any(|o| o.source.is_host())
                    || trace.exit.is_some_and(|e| e.probable_host_oom),
                "{}",
                context()
            );
        }
    }
}

/// Steps a finding names exist in the trace (a projection's "full at step N" is the future).
fn check_steps(f: &Finding, words: &str, steps: &BTreeSet<u64>, context: &dyn Fn() -> String) {
    let Some((&first, &last)) = steps.first().zip(steps.last()) else {
        return;
    };
    for e in &f.evidence {
        if ["step", "first_step", "last_step", "entry_step"].contains(&e.key.label()) {
            let step = e.value as u64;
            assert!(
                steps.contains(&step),
                "evidence {} = {step}: {}",
                e.key.label(),
                context()
            );
        }
    }
    let without_projections = words
        .replace("full at step", "")
        .replace("training steps from now", "");
    for step in numbers_after(&without_projections, "step ") {
        assert!(
            (first..=last).contains(&step),
            "step {step} outside {first}..={last}: {}",
            context()
        );
    }
}

/// The numbers of the analysis and its words against each other and the trace.
fn numbers_are_true(name: &str, trace: &Trace, analysis: &oomscope_analysis::Analysis) {
    let text = render::summary::render(trace, analysis);
    let evals = analysis.phase_transitions.len();
    let context = |what: &str| format!("{name}: {what}\n{text}");
    // Counts agree: "3 of 4 evals kept memory" beside an eval table of 4.
    for f in &analysis.findings {
        let words = format!("{} {} {}", f.title(), f.explanation(), f.change());
        for at in words.match_indices(" evals kept memory").map(|(i, _)| i) {
            let of: u64 = words[..at]
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{}", context(&words)));
            assert_eq!(of, evals as u64, "{}", context(&words));
        }
    }
    assert!(
        !text.contains("transition(s)"),
        "{}",
        context("transitions not told by what they were")
    );
    for fit in &analysis.leak_fits {
        assert!(fit.pauses + fit.epoch_ends <= fit.transitions, "{fit:#?}");
        let fit_evals = fit.transitions - fit.pauses - fit.epoch_ends;
        // The epoch clock counts epochs, and an eval between epochs has no epoch fit.
        if fit.clock == oomscope_analysis::facts::Clock::Step {
            assert!(
                fit_evals == 0 || evals > 0,
                "{}",
                context(&format!("{fit_evals} evals in a fit of a run with none"))
            );
        }
        // A part never larger than its whole: the file-backed share of the growth.
        if let Some(file) = fit.file_backed_growth_bytes {
            assert!(
                file <= fit.growth_bytes.max(0),
                "{}",
                context(&format!("{file} B file-backed of {} B", fit.growth_bytes))
            );
        }
    }
    if evals == 0 {
        assert!(
            !text.contains("eval(s)"),
            "{}",
            context("an eval in a run with none")
        );
    }
    // A CPU run's peak holds the model's parts it is broken into.
    if trace.metadata.gpus.is_empty() {
        for p in &analysis.peaks {
            if let Some(c) = &p.components {
                let b = &c.breakdown;
                let parts = b.parameters_bytes
                    + b.buffers_bytes
                    + b.gradients_bytes
                    + b.optimizer_state_bytes;
                assert!(
                    parts <= p.bytes,
                    "{}",
                    context(&format!("parts {parts} B of a {} B peak", p.bytes))
                );
            }
        }
    }
    if let Some(r) = &analysis.run_up {
        assert!(r.batches <= analysis.overview.marks, "{r:#?}");
        for h in &r.held {
            assert_eq!(h.clock, oomscope_format::HeldClock::Eval, "{r:#?}");
            assert!(h.t_us >= r.eval_t_us && h.t_us <= r.oom_t_us, "{r:#?}");
        }
    }
}

/// Every trace committed under the format crate's `tests/data/` (golden and recorded).
/// Each symptom's numbers agree with each other and with the finding told from it: a span read
/// forwards, the unexplained part the rise less its parts, a shape that rose only past the rise
/// that counts (and one that did not, below it), stairs within the span, rising, in order; a
/// rising floor's leak says the symptom's own rate and a full point ahead of the run.
fn symptoms_are_consistent(name: &str, analysis: &oomscope_analysis::Analysis) {
    use oomscope_analysis::finding::{Detail, LeakDiagnosis};
    use oomscope_analysis::symptom::Shape;
    for s in &analysis.symptoms {
        let context = || format!("{name}: {s:#?}");
        assert!(
            s.first_at <= s.last_at && s.from_us <= s.to_us,
            "{}",
            context()
        );
        let parts: i64 = s.parts.iter().map(|p| p.bytes.max(0)).sum();
        assert_eq!(
            s.unexplained_bytes,
            s.levels.rise_bytes - parts,
            "{}",
            context()
        );
        let rose = s.levels.rise_bytes >= s.levels.need_bytes as i64;
        match &s.shape {
            Shape::LinearGrowth { .. } | Shape::Staircase { .. } | Shape::Bounded { .. } => {
                assert!(rose, "{}", context());
            }
            Shape::None | Shape::TransientPeak { .. } => assert!(!rose, "{}", context()),
            Shape::FollowsInput { .. } => {}
        }
        if let Shape::Staircase { stairs, .. } = &s.shape {
            assert!(
                stairs.windows(2).all(|w| w[0].at < w[1].at)
                    && stairs
                        .iter()
                        .all(|st| st.bytes > 0 && (s.first_at..=s.last_at).contains(&st.at)),
                "{}",
                context()
            );
        }
    }
    for f in &analysis.findings {
        if let Detail::Leak(LeakDiagnosis::Rising(r)) = &f.detail {
            let headline = oomscope_analysis::symptom::headline(&analysis.symptoms);
            assert_eq!(Some(&r.symptom), headline, "{name}");
            assert!(r.symptom.shape.unbounded(), "{name}");
            if let Some(full) = &r.full {
                assert!(full.full_at >= r.symptom.last_at, "{name}: {full:?}");
            }
        }
    }
}

#[test]
fn committed_traces() {
    let root = format!(
        "{}/../format/tests/data",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    let mut checked = 0;
    for dir in [root.clone(), format!("{root}/gpu")] {
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "oomt"))
            .collect();
        paths.sort();
        for path in paths {
            let bytes = std::fs::read(&path).unwrap();
            let name = path.display().to_string();
            // A trace cut short decodes up to its cut (the truncated golden).
            if let Ok(decoded) = decode(&bytes) {
                check(&name, &decoded.trace);
                checked += 1;
            }
        }
    }
    assert!(checked >= 30, "{checked} traces checked");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn simulated_runs(
        steps in 3u64..60,
        leak_mib in prop_oneof![Just(0u64), 1u64..300],
        oom_at in proptest::option::of(1u64..60),
        eval_every in proptest::option::of(3u64..20),
        eval_retained_mib in prop_oneof![Just(0u64), 50u64..2000],
        activation_mib in 64u64..4096,
        batch in 1u64..64,
        snapshots in any::<bool>(),
        nan_at in proptest::option::of(1u64..60),
        seed in any::<u64>(),
    ) {
        let run = TrainingRun {
            steps,
            leak_bytes_per_step: leak_mib << 20,
            oom_at_step: oom_at.filter(|s| *s < steps),
            eval_every,
            eval_retained_bytes: eval_retained_mib << 20,
            activation_bytes_per_sample: (activation_mib << 20) / batch.max(1),
            batch_size: batch,
            allocator_stats: snapshots,
            nan_at_step: nan_at.filter(|s| *s < steps),
            seed,
            ..TrainingRun::default()
        };
        let name = format!("{run:?}");
        check(&name, &decode(&run.to_bytes()).unwrap().trace);
    }
}
