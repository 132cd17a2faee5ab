//! What the memory is, zero-code (issue 31): real, unmodified PyTorch programs under `collector
//! run` on CPU, their memory by component held against what torch itself counts (the program
//! sums its own tensors' storages after the first optimizer step and writes them out), in the
//! trace, the terminal summary and the JSON.

mod support;

use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::ComponentBreakdown;
use oomscope_testkit::Scratch;
use oomscope_words::findings::FindingWords as _;
use support::{plain, record, run, stderr, torch_program as program, torch_python};

/// A list of findings in words.
fn worded(
    findings: &[oomscope_analysis::finding::Finding],
) -> Vec<oomscope_words::findings::Worded> {
    findings
        .iter()
        .map(oomscope_words::findings::worded)
        .collect()
}

/// The program's own count of a group of tensors.
fn expected(json: &serde_json::Value, key: &str) -> u64 {
    json[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {json}"))
}

fn extras(c: &ComponentBreakdown) -> Vec<(String, u64)> {
    c.extras
        .iter()
        .map(|e| (e.name.to_string(), e.bytes))
        .collect()
}

/// The diffusion-style loop: the trained denoiser, its EMA copy and the frozen encoder each
/// named (by variable where Python lets the hooks read it, else by class) and every category
/// exactly torch's own count; said in the summary and the JSON at the peak.
#[test]
fn a_diffusion_loop_s_memory_is_named_by_model_and_category_as_torch_counts_it() {
    let py = torch_python();
    // Before Python 3.13 a function's locals are not read (see oomscope/_hooks/breakdown.py): the
    // models are named by class, the EMA copy as the trained model's copy.
    let version = std::process::Command::new(&py)
        .args(["-c", "import sys; print(sys.version_info >= (3, 13))"])
        .output()
        .unwrap();
    let locals_named = String::from_utf8_lossy(&version.stdout).trim() == "True";
    let in_function = if locals_named {
        ("function", "ema", "encoder", "opt:AdamW")
    } else {
        ("function", "Denoiser_copy", "Encoder", "AdamW(Denoiser)")
    };
    for (where_, ema, encoder, optimizer) in
        [("globals", "ema", "encoder", "opt:AdamW"), in_function]
    {
        let s = Scratch::new(&format!("breakdown-{where_}"));
        let expect = s.path("expect.json");
        let cmd = [
            py.to_str().unwrap(),
            &program("diffusion_memory.py"),
            "--where",
            where_,
            "--expect",
            expect.to_str().unwrap(),
        ];
        let (out, t) = record(&s, &[], &cmd);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&expect).unwrap()).unwrap();
        // Measured at the end of the first iteration, then in the next one at its first mark
        // (gradients set to None) and after its backward (gradients again), and not again.
        let [c, cleared, again] = t.components.as_slice() else {
            panic!("three breakdowns: {:?}", t.components)
        };
        assert_eq!(c.step, 0);
        assert_eq!(cleared.gradients_bytes, 0);
        let same_but_time = |b: &ComponentBreakdown| ComponentBreakdown {
            t_us: c.t_us,
            step: c.step,
            ..b.clone()
        };
        assert_eq!(same_but_time(again), *c);
        for (got, key) in [
            (c.parameters_bytes, "parameters_bytes"),
            (c.buffers_bytes, "buffers_bytes"),
            (c.gradients_bytes, "gradients_bytes"),
            (c.optimizer_state_bytes, "optimizer_state_bytes"),
        ] {
            assert_eq!(got, expected(&json, key), "{where_}: {key}");
        }
        let mut want = vec![
            (ema.to_owned(), expected(&json, "ema_bytes")),
            (encoder.to_owned(), expected(&json, "encoder_bytes")),
        ];
        want.sort();
        assert_eq!(extras(c), want, "{where_}");
        // The optimizer's state by optimizer, named by its variable where the program's names
        // reach it, and by its class.
        let optimizers: Vec<(&str, u64)> = c
            .optimizers
            .iter()
            .map(|o| (o.name.as_ref(), o.bytes))
            .collect();
        assert_eq!(
            optimizers,
            [(optimizer, expected(&json, "optimizer_state_bytes"))],
            "{where_}"
        );

        // The host peak of this CPU run carries it; the summary and the JSON say so.
        let a = analyze(&t, &AnalysisOptions::default());
        let peak = oomscope_analysis::facts::breakdown_peak(&a.peaks).expect("a peak");
        assert_eq!(
            same_but_time(&peak.components.as_ref().unwrap().breakdown),
            *c
        );
        // Stage by stage, the iteration after the first: gradients from backward on.
        let stages = a.stage_breakdown.as_ref().expect("the stages' breakdown");
        let gradients: Vec<(&str, u64)> = stages
            .rows
            .iter()
            .map(|r| (r.stage.as_str(), r.gradients_bytes))
            .collect();
        let g = expected(&json, "gradients_bytes");
        assert_eq!(
            gradients,
            [
                ("frozen_forward", 0),
                ("pre_forward", 0),
                ("post_forward", 0),
                ("pre_backward", 0),
                ("post_backward", g),
                ("pre_optimizer_step", g),
                ("post_optimizer_step", g)
            ],
            "{where_}"
        );
        let weights = expected(&json, "parameters_bytes")
            + expected(&json, "buffers_bytes")
            + expected(&json, "ema_bytes")
            + expected(&json, "encoder_bytes");
        for r in &stages.rows {
            assert_eq!(r.weights_bytes, weights, "{r:?}");
            assert_eq!(
                r.optimizer_state_bytes,
                expected(&json, "optimizer_state_bytes")
            );
            assert_eq!(
                r.bytes,
                r.weights_bytes + r.gradients_bytes + r.optimizer_state_bytes + r.rest_bytes
            );
        }
        let trace = s.path("t.oomt");
        let summary = run(&["summary", trace.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&summary.stdout).to_string();
        let line = format!(
            "weights 8.58 MiB (model 4.04 MiB, {}) + gradients 4.02 MiB + optimizer state \
             8.05 MiB ({}) + the rest",
            if ema < encoder {
                format!("{ema} 4.04 MiB, {encoder} 513 KiB")
            } else {
                format!("{encoder} 513 KiB, {ema} 4.04 MiB")
            },
            oomscope_words::breakdown::optimizer_label(optimizer)
        );
        assert!(
            text.replace("\n    ", " ").contains(&line),
            "{line}\n{text}"
        );
        assert!(
            text.contains("What the memory is, stage by stage (step 1, host.rss)"),
            "{text}"
        );
        // Beside `collector estimate` for the same model: the parameter count the hooks sent,
        // fp32, AdamW; every part as estimated.
        let params = expected(&json, "parameters_bytes") / 4;
        assert_eq!(c.parameter_count, Some(params));
        assert_eq!(c.trainable_parameter_count, Some(params));
        let command = format!(
            "`collector estimate --params {params} --precision fp32 --optimizer adamw` for the \
             same model"
        );
        assert!(
            text.replace("\n    ", " ").contains(&command),
            "{command}\n{text}"
        );
        let summary = run(&["summary", "--json", trace.to_str().unwrap()]);
        let j: serde_json::Value = serde_json::from_slice(&summary.stdout).unwrap();
        let parts = j["analysis"]["against_estimate"]["parts"]
            .as_array()
            .unwrap();
        assert_eq!(parts.len(), 3);
        for p in parts {
            let (m, e) = (
                p["measured_bytes"].as_u64().unwrap(),
                p["estimated_bytes"].as_u64().unwrap(),
            );
            // Equal but for AdamW's step count, a 4-byte tensor per parameter tensor.
            assert!(m >= e && m - e <= 64, "{p}");
            assert!(p["why"].is_null(), "{p}");
        }
        let with: Vec<&serde_json::Value> = j["analysis"]["peaks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| !p["components"].is_null())
            .collect();
        assert_eq!(
            with[0]["components"]["optimizer_state_bytes"],
            json["optimizer_state_bytes"]
        );
    }
}

/// The four leaks users write, each named by the hooks' two counts of live tensors: the list
/// that keeps every validation loss (and the graph behind it), a metric whose state is never
/// reset, a running total summed without `.item()`, a function's mutable default that keeps
/// what it is given — and a clean run counted never.
#[test]
fn what_holds_a_leak_is_named_a_list_a_metric_s_state_a_running_total_s_graph() {
    let py = torch_python();
    for (kind, want, advice) in [
        (
            "list",
            "list `val_losses`",
            "keep .item() (or .detach()) instead of the tensor",
        ),
        ("metric", "list `preds`", "reset it after compute()"),
        (
            "default",
            "list `log_outputs._seen`",
            "and is never emptied",
        ),
        (
            "total",
            "total_val",
            "`total_val` is summed without .item(): the autograd graph behind it grows",
        ),
    ] {
        let s = Scratch::new(&format!("held-{kind}"));
        let cmd = [
            py.to_str().unwrap(),
            &program("held_leaks.py"),
            "--kind",
            kind,
            "--steps",
            "30",
        ];
        let (out, t) = record(&s, &[], &cmd);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        // The program makes no reference cycle: a collection that freed memory would be the
        // hooks' own (a census kept alive by a cycle once held dropped tensors until one ran).
        assert!(t.gc.is_empty(), "{kind}: {:?}", t.gc);
        let named: Vec<_> = t
            .held
            .iter()
            .filter(|h| h.holder.starts_with(want) && h.is_graph() == (kind == "total"))
            .collect();
        assert!(!named.is_empty(), "{kind}: {:#?}", t.held);
        for h in &named {
            assert!(h.to_step - h.from_step >= 8, "{h:?}");
            if h.is_graph() {
                // Each step adds the validation loss's graph: several nodes a step.
                assert!(h.count >= 8 * 5, "{h:?}");
            } else {
                // One tensor a step, 64x1024 float32 storage each (256 KiB).
                assert_eq!(h.count, h.to_step - h.from_step, "{h:?}");
                assert_eq!(h.bytes, h.count * 256 * 1024, "{h:?}");
            }
        }
        let trace = s.path("t.oomt");
        let summary = run(&["summary", trace.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&summary.stdout).replace("\n    ", " ");
        assert!(
            text.contains("What grew (live tensors and the program's containers counted twice")
                && text.contains(want),
            "{text}"
        );
        // The leak finding's advice names it (a leak fit or, below the fits' reach, the counts).
        let a = analyze(&t, &AnalysisOptions::default());
        let leak = a
            .findings
            .iter()
            .find(|f| f.kind() == oomscope_analysis::finding::FindingKind::Leak)
            .unwrap_or_else(|| panic!("{kind}: no leak finding\n{text}"));
        assert!(
            leak.change()
                .starts_with("what grows, as counted in the program: ")
                && leak.change().contains(advice),
            "{kind}: {}",
            leak.change()
        );
    }
    // The same loop without a leak: memory flat, no count taken.
    let s = Scratch::new("held-clean");
    let clean = s.script(
        "clean.py",
        "import torch, torch.nn as nn\n\
         m = nn.Linear(512, 512); o = torch.optim.AdamW(m.parameters())\n\
         for _ in range(30):\n    \
             l = m(torch.randn(64, 512)).square().mean(); l.backward(); o.step(); o.zero_grad()\n",
    );
    let (out, t) = record(&s, &[], &[py.to_str().unwrap(), clean.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(t.held.is_empty(), "{:#?}", t.held);
}

/// A chat endpoint that never evicts a conversation: each conversation's cache is its own
/// (key, value) tuples of one length, replaced at every turn, and the server is a local of
/// `main` (no global names it). What retains every conversation's tensors is named — the dict
/// of sessions, as the attribute of the server it is — not one conversation's tuple; its groups
/// of several lengths are said once.
#[test]
fn what_keeps_every_conversation_s_cache_is_named_not_one_conversation_s_tuple() {
    let py = torch_python();
    let s = Scratch::new("held-sessions");
    let cmd = [py.to_str().unwrap(), &program("kv_sessions.py")];
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!t.held.is_empty(), "no count taken");
    // Nearly all of what grew (the request in flight, its input in the forward's arguments, is
    // the rest).
    let sessions: u64 = t
        .held
        .iter()
        .filter(|h| &*h.holder == "dict `sessions` of the `Server` object")
        .map(|h| h.bytes)
        .sum();
    let all: u64 = t.held.iter().map(|h| h.bytes).sum();
    assert!(sessions * 10 >= all * 9, "{:#?}", t.held);
    let a = analyze(&t, &AnalysisOptions::default());
    let leak = a
        .findings
        .iter()
        .find(|f| f.kind() == oomscope_analysis::finding::FindingKind::Leak)
        .expect("a leak");
    let change = leak.change().replace('\n', " ");
    assert_eq!(
        change
            .matches("dict `sessions` of the `Server` object")
            .count(),
        1,
        "{change}"
    );
    assert!(change.contains(" shapes ("), "{change}");
}

/// Memory only the garbage collector frees: each step's record refers to itself, and the
/// program collects every 20 steps. The collections are recorded with what they freed (20
/// steps × 4 MiB), the tensors are named as a cycle's, and the run is told it is a saw-tooth of
/// reference cycles — not a leak.
#[test]
fn a_reference_cycle_saw_tooth_is_named_and_not_called_a_leak() {
    let py = torch_python();
    let s = Scratch::new("gc-cycles");
    let cmd = [
        py.to_str().unwrap(),
        &program("cycles.py"),
        "--steps",
        "60",
        "--collect-every",
        "20",
    ];
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        out.stdout,
        plain(&cmd).stdout,
        "the program's output is unchanged"
    );
    let freed: Vec<u64> =
        t.gc.iter()
            .filter(|g| g.generation == 2)
            .map(|g| g.freed_bytes >> 20)
            .collect();
    assert_eq!(freed.len(), 3, "{:?}", t.gc);
    assert!(
        freed.iter().all(|mib| (78..=82).contains(mib)),
        "{freed:?} MiB"
    );
    assert!(
        t.held
            .iter()
            .any(|h| h.is_cycle() && h.holder.contains("`StepRecord`")),
        "{:#?}",
        t.held
    );
    let a = analyze(&t, &AnalysisOptions::default());
    let kinds: Vec<_> = worded(&a.findings).iter().map(|f| f.kind).collect();
    use oomscope_analysis::finding::FindingKind;
    assert!(kinds.contains(&FindingKind::ReferenceCycles), "{kinds:?}");
    assert!(
        !kinds.contains(&FindingKind::Leak),
        "{:#?}",
        worded(&a.findings)
    );
}

/// A layer the program keeps but never runs and that holds no submodule (a lone embedding table
/// in a global) is still an extra: the hooks' registry of modules misses it, the program's names
/// find it.
#[test]
fn a_lone_layer_the_program_keeps_is_counted_beside_the_model() {
    let s = Scratch::new("breakdown-lone");
    let py = torch_python();
    let (out, t) = record(&s, &[], &[py.to_str().unwrap(), &program("lone_layer.py")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = t.components.first().expect("a breakdown");
    assert_eq!(extras(c), [("table".to_owned(), 4096 * 64 * 4)]);
    // The trained model: two Linear layers, 64x64 + 64 and 64x10 + 10 float32 parameters.
    assert_eq!(c.parameters_bytes, (64 * 64 + 64 + 64 * 10 + 10) * 4);
}
