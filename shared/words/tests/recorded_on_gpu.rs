//! Traces recorded on real hardware by the GPU proof (`scripts/gpu-proof.sh`, an NVIDIA H100
//! 80GB HBM3 with driver 580.159.04 and torch 2.11.0+cu130, 2026-11-22). Their analysis must keep
//! saying what the hardware and PyTorch said then; the figures in the comments are PyTorch's own
//! (its error texts and `torch.cuda.memory_stats()`, kept in docs/benchmarks-log.md, 2026-11-22).
//! Never regenerate these files: add new ones from later runs.

use oomscope_analysis::finding::FindingKind;
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::{ExitStatus, OomSource, Trace, decode};
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

fn trace(name: &str) -> Trace {
    let decoded = decode(&oomscope_testkit::data::trace(&format!("gpu/{name}"))).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    decoded.trace
}

const MIB: f64 = oomscope_format::units::MIB as f64;
const GIB: f64 = oomscope_format::units::GIB as f64;

#[test]
fn a_pytorch_oom_recognised_from_stderr() {
    let t = trace("h100_torch_oom.oomt");
    assert_eq!(t.metadata.gpus[0].name, "NVIDIA H100 80GB HBM3");
    assert_eq!(t.exit.unwrap().status, ExitStatus::Code(1));
    let a = analyze(&t, &AnalysisOptions::default());
    let [oom] = a.ooms.as_slice() else {
        panic!("{:?}", a.ooms)
    };
    assert_eq!(oom.event.source, OomSource::Stderr);
    assert_eq!(
        (
            oom.event.stage.as_deref(),
            oom.next_stage.as_deref(),
            oom.event.step
        ),
        (Some("post_forward"), Some("post_backward"), Some(5))
    );
    // torch: "Tried to allocate 117.32 GiB ... Of the allocated memory 171.06 MiB is allocated by
    // PyTorch, and 14.94 MiB is reserved by PyTorch but unallocated."
    assert_eq!(
        oom.event.requested_bytes,
        Some((117.32 * GIB).round() as u64)
    );
    let allocated = (171.06 * MIB).round() as u64;
    assert_eq!(oom.allocated_bytes, Some(allocated));
    assert_eq!(
        oom.reserved_bytes,
        Some(allocated + (14.94 * MIB).round() as u64)
    );
    assert_eq!(oom.allocator_mark_stage, None);
    // 117 GiB on a 79 GiB H100 can never fit: that is the headline, not the batch size.
    let top = &a.findings[0];
    assert_eq!(top.kind(), FindingKind::ImpossibleRequest);
    assert!(
        top.title()
            .starts_with("One request of 117 GiB can never fit"),
        "{}",
        top.title()
    );
    let oom = &a.findings[1];
    assert_eq!(oom.kind(), FindingKind::Oom);
    assert!(
        oom.explanation()
            .contains("when it failed, tensors held 171 MiB and the allocator 186 MiB reserved"),
        "{}",
        oom.explanation()
    );
    assert!(
        oom.change().contains("impossible-request"),
        "{}",
        oom.change()
    );
}

#[test]
fn a_tch_oom_seen_by_the_allocator_observer_states_the_allocator_at_the_failure() {
    let t = trace("h100_tch_oom.oomt");
    let a = analyze(&t, &AnalysisOptions::default());
    let [oom] = a.ooms.as_slice() else {
        panic!("{:?}", a.ooms)
    };
    assert_eq!(
        (oom.event.stage.as_deref(), oom.event.step),
        (Some("pre_forward"), Some(0))
    );
    // libtorch: "Tried to allocate 32.00 GiB ... 64.73 GiB is allocated by PyTorch, and
    // 43.35 MiB is reserved by PyTorch but unallocated": the observer's exact bytes agree.
    assert_eq!(oom.event.requested_bytes, Some(32 << 30));
    assert_eq!(oom.allocated_bytes, Some(69_506_587_136));
    assert_eq!(oom.reserved_bytes, Some(69_552_046_080));
    assert_eq!(
        ((69_552_046_080u64 - 69_506_587_136) as f64 / MIB * 100.0).round() / 100.0,
        43.35
    );
    // The last mark's snapshot (12.5 MiB) is not what the explanation quotes.
    assert!(
        worded(&a.findings)[0]
            .explanation
            .contains("when it failed, tensors held 64.7 GiB and the allocator 64.8 GiB reserved"),
        "{}",
        worded(&a.findings)[0].explanation
    );
}

#[test]
fn allocator_snapshots_equal_what_pytorch_reported() {
    // torch_loop.py: 1 + 12 × 4 marks; at model_ready the allocator held exactly the parameters
    // in 512-byte blocks (torch.cuda.memory_stats() said the same at every mark).
    let t = trace("h100_torch_loop.oomt");
    assert_eq!(t.marks.len(), 49);
    let first = t.marks.allocator(0).unwrap();
    assert_eq!(t.marks[0].name.as_ref(), "model_ready");
    assert_eq!(first.allocated_bytes, 33_574_912);
    let gpt = trace("h100_gpt.oomt");
    assert_eq!(gpt.marks.len(), 109);
    assert_eq!(gpt.marks.allocator(0).unwrap().allocated_bytes, 3_725_312);
    assert!(gpt.marks.allocator_iter().all(|s| {
        let s = s.unwrap();
        s.allocated_bytes <= s.peak_allocated_bytes && s.allocated_bytes <= s.reserved_bytes
    }));
    // Gradient summaries of every step, recorded asynchronously with their own step.
    let steps: Vec<u64> = gpt.gradients.iter().map(|g| g.step).collect();
    assert_eq!(steps, (0..20).collect::<Vec<_>>());
    assert!(gpt.gradients.iter().all(|g| g.global_norm.is_finite()));
}

#[test]
fn the_batch_search_on_an_h100() {
    // 16 trials: doubling to 256, bisecting to 203 (the plain scan's largest too).
    let t = trace("h100_batch.oomt");
    assert_eq!(t.batch_trials.len(), 16);
    let a = analyze(&t, &AnalysisOptions::default());
    let trials = a.batch_trials.expect("trials analysed");
    assert_eq!(
        (trials.largest_fit_batch, trials.smallest_oom_batch),
        (Some(203), Some(204))
    );
}

/// Format 1.2 traces from the second H100 session (after the Record refactor): every mark names
/// the process that sent it: the Python helper in a plain PyTorch loop, the tch `Session` in the
/// GPT example, each the collector's direct child here, so the sender is the metadata's pid.
#[test]
fn marks_recorded_on_an_h100_name_their_sender() {
    for (name, marks) in [
        ("h100_v1_2_torch_loop.oomt", 49),
        ("h100_v1_2_gpt.oomt", 109),
    ] {
        let t = trace(name);
        assert_eq!(t.format_version, (1, 2), "{name}");
        assert_eq!(t.marks.len(), marks, "{name}");
        assert!(
            t.marks
                .iter()
                .all(|m| m.pid == Some(t.metadata.pid) && m.rank.is_none()),
            "{name}"
        );
    }
}

/// Format 1.10 traces from the H200 GPU proof (NVIDIA H200, 140 GiB, driver 580.159.04, torch
/// 2.11.0+cu130, 2026-11-26): the zero-code hooks' breakdown, a real OOM that a smaller request
/// would have avoided, and a rare long batch. The truths are the programs' own sums of storages
/// and PyTorch's error text (docs/benchmarks-log.md, 2026-11-26, the H200 session).
fn h200(name: &str) -> Trace {
    let t = trace(name);
    assert_eq!(t.format_version, (1, 10), "{name}");
    assert_eq!(t.metadata.gpus[0].name, "NVIDIA H200", "{name}");
    t
}

#[test]
fn the_breakdown_on_an_h200_equals_the_programs_own_sums() {
    let t = h200("h200_v1_10_breakdown.oomt");
    let a = analyze(&t, &AnalysisOptions::default());
    let peak = oomscope_analysis::facts::memory_peak(&a.peaks).unwrap();
    assert_eq!(peak.metric.label(), "peak_allocated");
    let c = peak.components.as_ref().expect("a breakdown at the peak");
    let b = &c.breakdown;
    // diffusion_memory.py summed its storages: model 268 640 256 B of parameters (and as much in
    // gradients), AdamW's state 537 280 536 B, an EMA copy and a frozen encoder.
    assert_eq!(
        (
            b.parameters_bytes,
            b.buffers_bytes,
            b.gradients_bytes,
            b.optimizer_state_bytes
        ),
        (268_640_256, 131_080, 268_640_256, 537_280_536)
    );
    let extras: Vec<(&str, u64)> = b
        .extras
        .iter()
        .map(|e| (e.name.as_ref(), e.bytes))
        .collect();
    assert_eq!(extras, [("ema", 268_771_336), ("encoder", 33_562_624)]);
    let optimizers: Vec<(&str, u64)> = b
        .optimizers
        .iter()
        .map(|o| (o.name.as_ref(), o.bytes))
        .collect();
    assert_eq!(optimizers, [("opt:AdamW", 537_280_536)]);
    // Beside the peak: the allocator's cache, and what the process held outside it, read by the
    // per-process query the device's growth asked for (the first H200 run, with a query once a
    // second, had none after the growth and said nothing).
    assert_eq!(c.cached_bytes, Some(79_240_192));
    assert_eq!(c.outside_allocator_bytes, Some(778_043_392));
}

#[test]
fn an_oom_on_an_h200_that_a_smaller_request_avoids_is_an_oom_not_an_impossible_request() {
    let t = h200("h200_v1_10_torch_oom.oomt");
    let a = analyze(&t, &AnalysisOptions::default());
    let [oom] = a.ooms.as_slice() else {
        panic!("{:?}", a.ooms)
    };
    // torch: "Tried to allocate 139.32 GiB. GPU 0 has a total capacity of 139.80 GiB of which
    // 138.89 GiB is free. ... 171.06 MiB is allocated by PyTorch, and 14.94 MiB is reserved by
    // PyTorch but unallocated."
    assert_eq!(oom.event.source, OomSource::Stderr);
    assert_eq!(
        oom.event.requested_bytes,
        Some((139.32 * GIB).round() as u64)
    );
    assert_eq!(
        oom.event.device_free_bytes,
        Some((138.89 * GIB).round() as u64)
    );
    assert_eq!(oom.allocated_bytes, Some((171.06 * MIB).round() as u64));
    let top = &a.findings[0];
    assert_eq!(top.kind(), FindingKind::Oom, "{top:?}");
    assert!(
        top.explanation().contains("440 MiB short"),
        "{}",
        top.explanation()
    );
}

#[test]
fn a_rare_long_batch_on_an_h200_is_named_as_the_peak_not_a_leak() {
    let t = h200("h200_v1_10_inputs.oomt");
    let a = analyze(&t, &AnalysisOptions::default());
    let p = a.input_peak.as_ref().expect("the long batch found");
    // variable_length.py: 8 192 input elements a step, 65 536 every 20th (step 19 the first).
    assert_eq!((p.step, p.elements, p.median_elements), (19, 65_536, 8_192));
    let kinds: Vec<FindingKind> = worded(&a.findings).iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&FindingKind::InputPeak), "{kinds:?}");
    assert!(!kinds.contains(&FindingKind::Leak), "{kinds:?}");
}
