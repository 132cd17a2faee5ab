//! The zero-code PyTorch hooks, end to end: real, unmodified PyTorch programs
//! (`tests/torch_programs/`, which know nothing about oomscope) run under `collector run` with
//! PyTorch 2.11 on CPU, and the trace is checked against what the programs did: the six stages at
//! every step, micro-batches, eval as its own phase, one sender (no DataLoader worker), the
//! program's own marks beside the automatic ones, torch.compile, sampled fast loops, GradScaler,
//! two optimizers, a frozen encoder, checkpoint saves — and the program's output and exit code
//! unchanged, however the hooks are loaded (or not).
//!
//! PyTorch comes from `OOMSCOPE_TORCH_VENV` (`scripts/setup-torch.sh`, which `scripts/test.sh`
//! runs); without it these tests fail and say so.
//!
//! One of three targets of the hooks' tests (`python_hooks.rs`, `python_hooks_findings.rs`,
//! `python_hooks_processes.rs`), split by what they test so that each reads in one sitting; what
//! they share is in `support/hooks.rs`.

#[path = "support/hooks.rs"]
mod hooks;
mod support;

use std::collections::BTreeSet;
use std::process::Command;

use hooks::{STAGES, count, program_stderr, senders};
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::{Phase, Trace};
use oomscope_testkit::Scratch;
use support::{collector, plain, read, record, stderr, torch_program as program, torch_python};

/// Six stages of `steps` training steps of two micro-batches each: the forward and backward
/// marks twice a step, the optimizer's once, and a step's marks in loop order.
fn two_micro_batches_a_step(t: &Trace, steps: usize) {
    for stage in &STAGES[..4] {
        assert_eq!(count(t, stage, Phase::Train), 2 * steps, "{stage}");
    }
    for stage in &STAGES[4..] {
        assert_eq!(count(t, stage, Phase::Train), steps, "{stage}");
    }
    let step1: Vec<&str> = t
        .marks
        .iter()
        .filter(|m| m.step == 1 && m.phase == Phase::Train)
        .map(|m| m.name.as_ref())
        .collect();
    assert_eq!(
        step1,
        [&STAGES[..4], &STAGES[..4], &STAGES[4..]].concat(),
        "micro-batches then the step"
    );
}

#[test]
fn an_unmodified_loop_gets_stages_steps_micro_batches_and_eval_with_output_unchanged() {
    let s = Scratch::new("zc-loop");
    let py = torch_python();
    let cmd = [
        py.to_str().unwrap(),
        &program("train.py"),
        "--steps",
        "6",
        "--accum",
        "2",
        "--eval-every",
        "3",
        "--workers",
        "2",
        "--mp-context",
        "fork",
    ];
    let (out, t) = record(&s, &[], &cmd);
    let without = plain(&cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        out.stdout, without.stdout,
        "the program's stdout is unchanged"
    );
    assert_eq!(
        program_stderr(&out),
        String::from_utf8_lossy(&without.stderr)
    );

    two_micro_batches_a_step(&t, 6);
    let steps = |phase: Phase| -> BTreeSet<u64> {
        t.marks
            .iter()
            .filter(|m| m.phase == phase)
            .map(|m| m.step)
            .collect()
    };
    assert_eq!(steps(Phase::Train), (0..6).collect());
    // An eval after the 3rd and the 6th applied step carries the number of the step it follows
    // (2 and 5): the next step begins at the next training forward, so the final eval is no step.
    assert_eq!(steps(Phase::Eval), [2, 5].into_iter().collect());
    // Eval after steps 3 and 6: two batches each, forward only, its own phase.
    assert_eq!(count(&t, "pre_forward", Phase::Eval), 4);
    assert_eq!(count(&t, "post_forward", Phase::Eval), 4);
    assert_eq!(t.marks.iter().filter(|m| m.phase == Phase::Eval).count(), 8);
    // One sender: the DataLoader's forked workers emit nothing.
    let senders = senders(&t);
    assert_eq!(senders.len(), 1, "{senders:?}");
    let (pid, rank) = *senders.iter().next().unwrap();
    assert!(pid.is_some());
    assert_eq!(rank, None);
    // The analysis sees the stages (host memory on CPU).
    let analysis = analyze(&t, &AnalysisOptions::default());
    let table = analysis.stage_table;
    let names: BTreeSet<&str> = table.rows.iter().map(|r| r.stage.as_str()).collect();
    assert_eq!(names, STAGES.iter().copied().collect());
}

#[test]
fn spawned_workers_checkpointing_and_bf16_autocast_keep_the_marks_exact() {
    let s = Scratch::new("zc-spawn");
    let py = torch_python();
    let cmd = [
        py.to_str().unwrap(),
        &program("train.py"),
        "--steps",
        "4",
        "--workers",
        "2",
        "--mp-context",
        "spawn",
        "--checkpoint",
        "--bf16",
    ];
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Recomputation inside backward (checkpointing) is not a forward; spawned workers (which
    // run the bootstrap again) send nothing.
    for stage in STAGES {
        assert_eq!(count(&t, stage, Phase::Train), 4, "{stage}");
    }
    assert_eq!(t.marks.len(), 24);
    assert_eq!(senders(&t).len(), 1);
}

#[test]
fn torch_compile_in_both_forms_keeps_every_mark_and_adds_no_warning() {
    let s = Scratch::new("zc-compile");
    let py = torch_python();
    for form in ["wrap", "method"] {
        let cmd = [
            py.to_str().unwrap(),
            &program("train.py"),
            "--steps",
            "10",
            "--compile",
            form,
        ];
        let (out, t) = record(&s, &[], &cmd);
        assert_eq!(out.status.code(), Some(0), "{form}: {}", stderr(&out));
        for stage in STAGES {
            assert_eq!(count(&t, stage, Phase::Train), 10, "{form} {stage}");
        }
        let err = program_stderr(&out);
        assert!(!err.contains("global hooks"), "{form}: {err}");
        assert!(!err.contains("graph break"), "{form}: {err}");
    }
}

#[test]
fn a_compiled_model_compiles_as_often_as_without_the_collector() {
    // A compiled model whose batch shape changes once, with evals (train()/eval() switches) or
    // without: Dynamo compiles the same frames under the collector as without it. (The hooks
    // once swapped the global forward hooks for the model's own at the ninth forward and back at
    // each train()/eval(): a guard on their number failed, 5 and 10 frames for 2 and 4.)
    // A compiled layer (`block`) leaves the hooks global, the model around it the root: its
    // forwards are marked, not the layer's.
    let s = Scratch::new("zc-compile-count");
    let py = torch_python();
    for form in ["wrap", "method", "block"] {
        for evals in ["0", "4"] {
            let cmd = [
                py.to_str().unwrap(),
                &program("compiled_loop.py"),
                "--form",
                form,
                "--eval-every",
                evals,
            ];
            let plain = Command::new(cmd[0]).args(&cmd[1..]).output().unwrap();
            assert!(plain.status.success(), "{}", stderr(&plain));
            let (out, t) = record(&s, &[], &cmd);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{form} {evals}: {}",
                stderr(&out)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&plain.stdout),
                "{form}, evals every {evals}: the frames Dynamo compiled"
            );
            // Every forward still marked, once.
            let forwards = if evals == "0" { 24 } else { 24 + 6 };
            for stage in ["pre_forward", "post_forward"] {
                let n = t.marks.iter().filter(|m| m.name.as_ref() == stage).count();
                assert_eq!(n, forwards, "{form} {evals} {stage}");
            }
        }
    }
}

#[test]
fn a_fast_loop_is_marked_one_iteration_in_several_and_its_numbers_stay_true() {
    // Past 100 iterations a loop faster than the marking interval (1 s here, 50 ms by default) is
    // marked one iteration in several: the trace says so, the step count is the program's, every
    // marked iteration has all its stages, and the evals are all marked.
    let s = Scratch::new("zc-sampled");
    let py = torch_python();
    let cmd = [
        "env",
        "OOMSCOPE_MARK_INTERVAL_MS=1000",
        py.to_str().unwrap(),
        &program("train.py"),
        "--steps",
        "300",
        "--eval-every",
        "100",
        "--d",
        "32",
        "--layers",
        "1",
    ];
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sampling = t.mark_sampling.first().expect("marks thinned out");
    assert!(
        sampling.every > 1 && sampling.from_step >= 100,
        "{sampling:?}"
    );
    let train = |stage| count(&t, stage, Phase::Train);
    let marked = train("pre_forward");
    assert!(marked > 100 && marked < 300, "{marked} marked iterations");
    for stage in STAGES {
        assert_eq!(train(stage), marked, "{stage}");
    }
    // Every eval forward marked: 3 evals of the program's eval batches.
    let evals = count(&t, "pre_forward", Phase::Eval);
    assert_eq!(evals, count(&t, "post_forward", Phase::Eval));
    assert!(evals >= 3, "{evals} eval forwards");
    let analysis = analyze(&t, &AnalysisOptions::default());
    let o = &analysis.overview;
    assert_eq!(
        (o.steps, o.first_step, o.last_step),
        (300, Some(0), Some(299))
    );
    // (An eval after an iteration not marked adds its step.)
    assert!(
        (marked..=marked + evals).contains(&o.marked_steps),
        "{}",
        o.marked_steps
    );
    let text = oomscope_words::summary::render(&t, &analysis);
    assert!(text.contains("300 steps (0-299)"), "{text}");
    assert!(text.contains("then one in"), "{text}");
}

#[test]
fn the_programs_own_marks_add_to_the_automatic_ones_without_duplicates() {
    let s = Scratch::new("zc-user");
    let child = s.script(
        "user.py",
        r#"
import torch, oomscope_probe as oom
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    oom.mark("batch_ready")
    loss = model(torch.ones(4, 8)).sum()
    oom.mark("post_forward")   # also marked by the hooks: sent once
    loss.backward()
    opt.step()
    opt.zero_grad()
print("done")
"#,
    );
    let py = torch_python();
    let (out, t) = record(&s, &[], &[py.to_str().unwrap(), child.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        count(&t, "batch_ready", Phase::Unknown) + count(&t, "batch_ready", Phase::Train),
        3
    );
    assert_eq!(
        t.marks
            .iter()
            .filter(|m| m.name.as_ref() == "post_forward")
            .count(),
        3
    );
    assert_eq!(count(&t, "pre_forward", Phase::Train), 3);
    assert_eq!(count(&t, "post_optimizer_step", Phase::Train), 3);
}

#[test]
fn without_hooks_or_under_python_isolated_mode_a_program_gets_no_marks() {
    let s = Scratch::new("zc-off");
    let py = torch_python();
    let cmd = [py.to_str().unwrap(), &program("train.py"), "--steps", "2"];
    let (out, t) = record(&s, &["--no-python-hooks"], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(t.marks.is_empty());
    let isolated = [
        py.to_str().unwrap(),
        "-I",
        &program("train.py"),
        "--steps",
        "2",
    ];
    let (out, t) = record(&s, &[], &isolated);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(t.marks.is_empty(), "python -I skips sitecustomize");
}

#[test]
fn the_users_sitecustomize_still_runs_and_its_errors_read_as_before() {
    let s = Scratch::new("zc-chain");
    let site = s.dir().join("site");
    std::fs::create_dir_all(&site).unwrap();
    let prog = s.script(
        "prog.py",
        "import os, sys\nprint('user site ran:', os.environ.get('USER_SITE_RAN'))\n",
    );
    // A user's sitecustomize that sets something up.
    std::fs::write(
        site.join("sitecustomize.py"),
        "import os\nos.environ['USER_SITE_RAN'] = 'yes'\n",
    )
    .unwrap();
    let user_path = format!("{}:{}", site.display(), support::python_path());
    let run_with = |hooks: bool| {
        let trace = s.path("c.oomt");
        let mut args = vec!["run", "-q", "-o", trace.to_str().unwrap()];
        if !hooks {
            args.push("--no-python-hooks");
        }
        args.extend(["--", "python3", prog.to_str().unwrap()]);
        collector(&args)
            .env("PYTHONPATH", &user_path)
            .output()
            .unwrap()
    };
    let out = run_with(true);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "user site ran: yes\n");
    // A user's sitecustomize that fails: Python's own message, exactly as without the hooks.
    std::fs::write(site.join("sitecustomize.py"), "raise ValueError('boom')\n").unwrap();
    let (with, without) = (run_with(true), run_with(false));
    assert_eq!(with.stdout, without.stdout);
    assert_eq!(program_stderr(&with), program_stderr(&without));
    assert!(program_stderr(&with).contains("Error in sitecustomize"));
    assert!(program_stderr(&with).contains("ValueError: boom"));
}

#[test]
fn a_failing_bootstrap_leaves_the_program_running_untouched() {
    // A `torch` the hooks cannot work with (no nn, no optim): installing them fails, silently,
    // and the program goes on as it would.
    let s = Scratch::new("zc-broken");
    let fake = s.dir().join("fake");
    std::fs::create_dir_all(fake.join("torch")).unwrap();
    std::fs::write(fake.join("torch/__init__.py"), "answer = 42\n").unwrap();
    let prog = s.script(
        "prog.py",
        "import sys, torch\nprint('torch says', torch.answer)\nsys.exit(3)\n",
    );
    let trace = s.path("b.oomt");
    let out = collector(&["run", "-q", "-o", trace.to_str().unwrap(), "--", "python3"])
        .arg(&prog)
        .env(
            "PYTHONPATH",
            format!("{}:{}", fake.display(), support::python_path()),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "torch says 42\n");
    assert_eq!(program_stderr(&out), "");
    assert!(read(&trace).trace.marks.is_empty());
}

#[test]
fn a_step_gradscaler_skips_is_noted_and_inference_mode_is_eval() {
    let s = Scratch::new("zc-scaler");
    let child = s.script(
        "scaler.py",
        r#"
import torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for step in range(2):
    loss = model(torch.ones(4, 8)).sum()
    if step == 0:
        loss = loss * float("inf")  # inf gradients: GradScaler skips this step
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
model.eval()
with torch.inference_mode():
    model(torch.ones(4, 8))
print("done")
"#,
    );
    let py = torch_python();
    let (out, t) = record(&s, &[], &[py.to_str().unwrap(), child.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let skipped: Vec<&str> = t
        .notes
        .iter()
        .map(|n| n.text.as_str())
        .filter(|n| n.contains("GradScaler skipped"))
        .collect();
    assert_eq!(
        skipped,
        ["GradScaler skipped the optimizer step at step 0 (inf/NaN gradients)"]
    );
    // One applied step; two training forwards; the inference-mode forward is eval.
    assert_eq!(count(&t, "post_optimizer_step", Phase::Train), 1);
    assert_eq!(count(&t, "pre_forward", Phase::Train), 2);
    assert_eq!(count(&t, "pre_forward", Phase::Eval), 1);
}

#[test]
fn a_loop_without_a_torch_optimizer_still_counts_its_steps() {
    // pytorch/examples' word_language_model updates its weights by hand (`p.data.add_`), with
    // no optimizer: each training forward after a backward is a step.
    let s = Scratch::new("zc-manual");
    let child = s.script(
        "manual.py",
        r#"
import torch
model = torch.nn.LSTM(8, 8)
head = torch.nn.Linear(8, 4)
criterion = torch.nn.CrossEntropyLoss()
for step in range(5):
    model.zero_grad()
    out, _ = model(torch.ones(3, 2, 8))
    loss = criterion(head(out).view(-1, 4), torch.zeros(6, dtype=torch.long))
    loss.backward()
    for p in list(model.parameters()) + list(head.parameters()):
        p.data.add_(p.grad, alpha=-0.1)
model.eval()
with torch.no_grad():
    model(torch.ones(3, 2, 8))
"#,
    );
    let py = torch_python();
    let (out, t) = record(&s, &[], &[py.to_str().unwrap(), child.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let train: Vec<(&str, u64)> = t
        .marks
        .iter()
        .filter(|m| m.phase == Phase::Train && m.name.as_ref() == "pre_forward")
        .map(|m| (m.name.as_ref(), m.step))
        .collect();
    // The LSTM is the outermost module with parameters; the head is a second root.
    let steps: BTreeSet<u64> = train.iter().map(|m| m.1).collect();
    assert_eq!(steps, (0..5).collect(), "{train:?}");
    assert_eq!(count(&t, "post_backward", Phase::Train), 5);
    assert_eq!(count(&t, "pre_forward", Phase::Eval), 1);
}

#[test]
fn the_hooks_never_travel_with_the_model_and_survive_probes_and_except_blocks() {
    // Found by review: hooks on a root must not be pickled, deep-copied or scripted with it; a
    // library probing `find_spec("torch")` before the import must not disarm the bootstrap; a
    // forward run inside an `except` block is still a forward.
    let s = Scratch::new("zc-travel");
    let saved = s.path("model.pt");
    let child = s.script(
        "travel.py",
        &format!(
            r#"
import copy, importlib.util, subprocess, sys
assert importlib.util.find_spec("torch") is not None  # what datasets/transformers do first
import torch
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def step():
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
for _ in range(10):  # past the search: the hooks now sit on the root
    step()
try:
    raise ValueError("a retry loop")
except ValueError:
    step()  # inside an except block: still a full step
ema = copy.deepcopy(model)
print("copy hooks", len(ema._forward_pre_hooks), len(ema._forward_hooks))
torch.save(model, {saved:?})
scripted = torch.jit.script(model)
print("scripted", scripted(torch.ones(1, 4)).shape)
# A plain Python (no bootstrap: -I) loads the saved model.
code = "import torch; m = torch.load(%r, weights_only=False); print(type(m).__name__)" % {saved:?}
print("plain load", subprocess.run([sys.executable, "-I", "-c", code], capture_output=True,
                                   text=True).stdout.strip())
"#
        ),
    );
    let py = torch_python();
    let (out, t) = record(&s, &[], &[py.to_str().unwrap(), child.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{stdout}", stderr(&out));
    assert!(stdout.contains("copy hooks 0 0"), "{stdout}");
    assert!(stdout.contains("scripted torch.Size([1, 1])"), "{stdout}");
    assert!(stdout.contains("plain load Sequential"), "{stdout}");
    // 11 steps; the scripted model's one call is a forward too.
    for stage in STAGES {
        let forward = stage.ends_with("_forward");
        assert_eq!(
            count(&t, stage, Phase::Train),
            11 + usize::from(forward),
            "{stage}"
        );
    }
}

/// Distinct step numbers of the training marks, and the marks of one stage in one phase.
fn train_steps(t: &Trace) -> BTreeSet<u64> {
    t.marks
        .iter()
        .filter(|m| m.phase == Phase::Train)
        .map(|m| m.step)
        .collect()
}

#[test]
fn two_optimizers_stepped_in_one_iteration_count_one_step_however_forwards_interleave() {
    let s = Scratch::new("zc-gan");
    let py = torch_python();
    // DCGAN's iteration: D on real and fake (two backwards), D steps, then D on the fakes for G,
    // G steps. 12 iterations are 12 steps (not 24), each with both optimizer steps in order.
    let cmd = [py.to_str().unwrap(), &program("gan.py"), "--iters", "12"];
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        out.stdout,
        plain(&cmd).stdout,
        "the program's stdout is unchanged"
    );
    assert_eq!(train_steps(&t), (0..12).collect());
    for step in 0..12 {
        let stages: Vec<&str> = t
            .marks
            .iter()
            .filter(|m| m.step == step)
            .map(|m| m.name.as_ref())
            .collect();
        let forwards = stages.iter().filter(|s| **s == "pre_forward").count();
        let steps = stages
            .iter()
            .filter(|s| **s == "pre_optimizer_step")
            .count();
        // D(real), G(noise), D(fake), D(fake) for G: four outermost forwards; two optimizers.
        assert_eq!((forwards, steps), (4, 2), "step {step}: {stages:?}");
        assert_eq!(stages.last(), Some(&"post_optimizer_step"), "step {step}");
    }
    let analysis = analyze(&t, &AnalysisOptions::default());
    assert_eq!(analysis.overview.last_step, Some(11));
    // The breakdown keeps the two optimizers' state apart (both Adam, each training an
    // `nn.Sequential` only function locals name): two entries that add up to the whole.
    let c = t.components.last().expect("a breakdown");
    let names: Vec<&str> = c.optimizers.iter().map(|o| o.name.as_ref()).collect();
    assert_eq!(names, ["Adam(Sequential)", "Adam(Sequential)#2"]);
    assert_eq!(
        c.optimizers.iter().map(|o| o.bytes).sum::<u64>(),
        c.optimizer_state_bytes
    );
    assert!(c.optimizers.iter().all(|o| o.bytes > 0));

    // WGAN's schedule: five critic steps, then one generator step, is one iteration.
    let s = Scratch::new("zc-wgan");
    let cmd = [
        py.to_str().unwrap(),
        &program("gan.py"),
        "--iters",
        "6",
        "--critic",
        "5",
    ];
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(train_steps(&t), (0..6).collect());
    let per_step = t.marks.iter().filter(|m| m.step == 3);
    assert_eq!(
        per_step
            .filter(|m| m.name.as_ref() == "post_optimizer_step")
            .count(),
        6
    );
}

#[test]
fn a_frozen_encoder_under_no_grad_is_part_of_the_step_and_an_ema_eval_is_an_eval() {
    let s = Scratch::new("zc-frozen");
    let py = torch_python();
    // Each step: the frozen encoder under no_grad, then the denoiser's forward, backward, AdamW;
    // an EMA copy (frozen too) evaluated on 3 batches after every 4th step.
    let cmd = [
        py.to_str().unwrap(),
        &program("frozen_encoder.py"),
        "--steps",
        "12",
        "--eval-every",
        "4",
        "--eval-batches",
        "3",
    ];
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        out.stdout,
        plain(&cmd).stdout,
        "the program's stdout is unchanged"
    );
    assert_eq!(
        train_steps(&t),
        (0..12).collect(),
        "12 steps, the last eval none"
    );
    // The encoder's forward is one training mark a step (never an eval of its own); the evals
    // open with it once each (read as the step's) and the step after each eval opens with it as
    // the eval's last.
    assert_eq!(count(&t, "frozen_forward", Phase::Train), 12 + 3 - 2);
    assert_eq!(count(&t, "frozen_forward", Phase::Eval), 0);
    assert_eq!(count(&t, "pre_forward", Phase::Train), 12);
    let analysis = analyze(&t, &AnalysisOptions::default());
    let evals: Vec<u64> = analysis
        .phase_transitions
        .iter()
        .map(|p| p.entry_step)
        .collect();
    assert_eq!(evals, [3, 7, 11], "one eval after every 4th step");
    // Each eval: the EMA copy's 3 forwards and the encoder's for the 2nd and 3rd batch (the
    // 1st reads as the step's), plus the next step's encoder for the first two.
    let eval_forwards: Vec<usize> = analysis
        .phase_transitions
        .iter()
        .map(|p| p.eval_marks)
        .collect();
    assert_eq!(eval_forwards, [12, 12, 10]);
    // The hooks say the evals ran without autograd: no advice to add torch.no_grad().
    assert!(!t.eval_autograd.is_empty());
    assert!(
        t.eval_autograd.iter().all(|e| !e.enabled),
        "{:?}",
        t.eval_autograd
    );
}

#[test]
fn a_checkpoint_save_is_marked_as_what_it_is() {
    let s = Scratch::new("zc-save");
    let py = torch_python();
    let checkpoint = s.path("ck.pt");
    let cmd = [
        py.to_str().unwrap(),
        &program("train.py"),
        "--steps",
        "6",
        "--save-every",
        "2",
        "--save-path",
        checkpoint.to_str().unwrap(),
    ];
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        checkpoint.exists(),
        "the program's checkpoint is written as without us"
    );
    // After the 2nd, 4th and 6th optimizer step (steps 1, 3, 5), in the training phase, right
    // after post_optimizer_step; the step's marks are otherwise untouched.
    for stage in ["pre_checkpoint_save", "post_checkpoint_save"] {
        let steps: Vec<u64> = t
            .marks
            .iter()
            .filter(|m| m.name.as_ref() == stage)
            .map(|m| m.step)
            .collect();
        assert_eq!(steps, [1, 3, 5], "{stage}");
    }
    let names: Vec<&str> = t.marks.iter().map(|m| m.name.as_ref()).collect();
    let at = names
        .iter()
        .position(|n| *n == "pre_checkpoint_save")
        .unwrap();
    assert_eq!(
        &names[at - 1..at + 3],
        [
            "post_optimizer_step",
            "pre_checkpoint_save",
            "post_checkpoint_save",
            "pre_forward"
        ]
    );
    assert_eq!(count(&t, "pre_forward", Phase::Train), 6);
}

#[test]
fn the_hooks_marks_arrive_whole_as_datagrams_too() {
    // With the rings off (`OOMSCOPE_RING=0`, or where there are none) every mark of the hooks'
    // fast path goes as a datagram, none lost or out of order.
    let s = Scratch::new("zc-datagrams");
    let py = torch_python();
    let cmd = [
        "env",
        "OOMSCOPE_RING=0",
        py.to_str().unwrap(),
        &program("train.py"),
        "--steps",
        "6",
        "--accum",
        "2",
    ];
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    two_micro_batches_a_step(&t, 6);
}
