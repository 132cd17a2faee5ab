//! `collector run` end to end, the marks' way from a program to the trace: the Python helper's
//! rings (wrapping, several senders in bursts, a sender killed right after marking) and datagrams,
//! marker floods that never block the child and are counted, marks of several ranks under one
//! collector named by sender, every verb of the helper with exactly its declared keys, and torch's
//! allocator statistics attached (a stand-in torch module, no GPU).
//!
//! One of three targets of `collector run`'s tests (`run.rs`, `run_marks.rs`, `run_gpu.rs`), split
//! by what they test so that each reads in one sitting.

use std::path::Path;
use std::process::{Command, Output};

use oomscope_format::codec::tag;
use oomscope_format::{TrialOutcome, protocol};

mod support;

use oomscope_testkit::Scratch;
use support::{collector, python_path, read, run, stderr};

#[test]
fn marks_through_a_small_ring_wrap_and_arrive_in_order() {
    // A 4 KiB ring (~40 marks) written ~10 marks a millisecond, drained every 2 ms: messages
    // straddle the ring's end ~40 times, and when a drain is late the ones that do not fit go as
    // datagrams (the helper counts what neither could take); every other mark arrives, in order.
    let s = Scratch::new("ring-small");
    let child = s.script(
        "child.py",
        r#"
import time
import oomscope as oom
oom._transport.RING_DATA_BYTES = 4096  # before the first message: the ring is made at it
p = oom._probe.default_probe()
for i in range(3000):
    oom.mark("stage_%d" % (i % 7), step=i)
    if i % 10 == 9:
        time.sleep(0.001)
p.flush()
t = p.transport
print(t._ring is not None, t._ring_bytes, t._ring_pos, p.dropped)
"#,
    );
    let (out, t) = run_python(&s, &child, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    let said: Vec<&str> = said.split_whitespace().collect();
    assert_eq!(said[..2], ["True", "4096"], "{said:?}");
    let written: u64 = said[2].parse().unwrap();
    let dropped: usize = said[3].parse().unwrap();
    assert!(written > 30 * 4096, "the ring wrapped: {said:?}");
    let steps: Vec<u64> = t.marks.iter().map(|m| m.step).collect();
    assert_eq!(steps.len(), 3000 - dropped, "{said:?}");
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "in order");
    assert!(t.marks.windows(2).all(|w| w[0].t_us <= w[1].t_us));
    assert_eq!(steps.last(), Some(&2999));
}

#[test]
fn four_senders_marking_in_bursts_lose_no_mark_through_their_rings() {
    // Bursts of six marks from four processes at once: as datagrams, the socket's queue of ten
    // overflows and the helpers drop what they cannot keep (8 senders: 20% of 48 000 marks on the
    // development VM); each ring holds all 2 000 of its sender's, whenever the collector reads.
    let s = Scratch::new("ring-senders");
    let child = s.script(
        "child.py",
        r#"
import subprocess, sys, time
if len(sys.argv) > 1:
    import oomscope as oom
    p = oom._probe.default_probe()
    for i in range(2000):
        p.mark("stage_%d" % (i % 6), step=i)
        if i % 6 == 5:
            time.sleep(0.0005)
    p.flush()
    print(p.transport._ring is not None, p.dropped, flush=True)
else:
    senders = [subprocess.Popen([sys.executable, __file__, "x"], stdout=subprocess.PIPE, text=True)
               for _ in range(4)]
    for sender in senders:
        print(sender.communicate()[0].strip())
"#,
    );
    let (out, t) = run_python(&s, &child, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.lines().collect::<Vec<_>>(), ["True 0"; 4]);
    let mut by_sender: std::collections::BTreeMap<Option<u32>, Vec<u64>> = Default::default();
    for m in &t.marks {
        by_sender.entry(m.pid).or_default().push(m.step);
    }
    assert_eq!(by_sender.len(), 4, "{:?}", by_sender.keys());
    for steps in by_sender.values() {
        assert_eq!(*steps, (0..2000).collect::<Vec<u64>>());
    }
}

#[test]
fn a_sender_killed_right_after_marking_into_its_ring_loses_no_mark() {
    let s = Scratch::new("ring-kill");
    let child = s.script(
        "child.py",
        r#"
import os, signal, sys
import oomscope as oom
for i in range(50):
    oom.mark("post_forward", step=i)
print(oom._probe.default_probe().transport._ring is not None, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"#,
    );
    let (out, t) = run_python(&s, &child, &[]);
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "True");
    let steps: Vec<u64> = t.marks.iter().map(|m| m.step).collect();
    assert_eq!(steps, (0..50).collect::<Vec<u64>>());
}

#[test]
fn with_rings_off_the_helper_sends_datagrams() {
    let s = Scratch::new("ring-off");
    let child = s.script(
        "child.py",
        r#"
import oomscope as oom
for i in range(20):
    oom.mark("post_forward", step=i)
print(oom._probe.default_probe().transport._ring is None)
"#,
    );
    let (out, t) = run_python(&s, &child, &[("OOMSCOPE_RING", "0")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "True");
    assert_eq!(t.marks.len(), 20);
}

#[test]
fn a_marker_flood_never_blocks_the_child_and_drops_are_counted() {
    let s = Scratch::new("flood");
    let child = s.script(
        "child.py",
        r#"
import threading, time, oomscope_probe as oom
probes = [oom.Probe() for _ in range(4)]
N = 20000
def flood(p, t):
    for i in range(N):
        p.mark("flood%d" % t, step=i)
start = time.time()
threads = [threading.Thread(target=flood, args=(p, t)) for t, p in enumerate(probes)]
for t in threads: t.start()
for t in threads: t.join()
for p in probes: p.flush()  # what is still pending: sent, or counted in p.dropped
print(sum(p.dropped for p in probes), time.time() - start)
"#,
    );
    let trace = s.path("t.oomt");
    let out = run(&[
        "run",
        "-q",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "python3",
        child.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut fields = stdout.split_whitespace();
    let child_dropped: u64 = fields.next().unwrap().parse().unwrap();
    let secs: f64 = fields.next().unwrap().parse().unwrap();
    assert!(secs < 20.0, "80 000 non-blocking sends took {secs} s");
    let t = read(&trace).trace;
    let collector_dropped: u64 = t
        .dropped
        .iter()
        .filter(|d| d.record_tag == tag::MARK)
        .map(|d| d.count)
        .sum();
    // Every mark is accounted for: recorded, dropped by the collector, or refused to the child.
    assert_eq!(
        t.marks.len() as u64 + collector_dropped + child_dropped,
        80_000
    );
    assert!(t.marks.len() > 1000, "{}", t.marks.len());
}

#[test]
fn a_marker_flood_from_several_ranks_attributes_every_recorded_mark_to_its_sender() {
    // Four rank processes under one launcher, as torchrun starts them (RANK in the
    // environment), each sending 10 000 marks as fast as it can.
    let s = Scratch::new("flood-ranks");
    let child = s.script(
        "launcher.py",
        r#"
import os, subprocess, sys
RANK_CODE = """
import os, oomscope_probe as oom
p = oom.Probe()
rank = int(os.environ["RANK"])
for i in range(10000):
    p.mark("flood%d" % rank, step=i)
p.flush()  # what is still pending: sent, or counted in p.dropped
print(os.getpid(), rank, p.dropped)
"""
ranks = [subprocess.Popen([sys.executable, "-c", RANK_CODE], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "4"})
         for r in range(4)]
for p in ranks:
    sys.stdout.write(p.communicate()[0])
"#,
    );
    let trace = s.path("t.oomt");
    let out = run(&[
        "run",
        "-q",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "python3",
        child.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let senders: Vec<(u32, u32, u64)> = stdout
        .lines()
        .map(|l| {
            let f: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
            (f[0] as u32, f[1] as u32, f[2])
        })
        .collect();
    assert_eq!(senders.len(), 4, "{stdout}");
    let t = read(&trace).trace;
    // Every recorded mark names the process that sent it and that process's rank.
    for m in &t.marks {
        let (pid, rank, _) = senders
            .iter()
            .find(|(_, r, _)| *m.name == *format!("flood{r}"))
            .unwrap_or_else(|| panic!("unexpected mark {}", m.name));
        assert_eq!(m.pid, Some(*pid), "{} sent by pid {pid}", m.name);
        assert_eq!(m.rank, Some(*rank), "{} sent by rank {rank}", m.name);
    }
    // Each rank's steps arrive in its own order: the per-sender contexts never mix.
    for (_, rank, _) in &senders {
        let steps: Vec<u64> = t
            .marks
            .iter()
            .filter(|m| m.rank == Some(*rank))
            .map(|m| m.step)
            .collect();
        assert!(steps.windows(2).all(|w| w[0] < w[1]), "rank {rank}");
    }
    let collector_dropped: u64 = t
        .dropped
        .iter()
        .filter(|d| d.record_tag == tag::MARK)
        .map(|d| d.count)
        .sum();
    let child_dropped: u64 = senders.iter().map(|s| s.2).sum();
    assert_eq!(
        t.marks.len() as u64 + collector_dropped + child_dropped,
        40_000,
        "every mark recorded or counted as dropped"
    );
    assert!(t.marks.len() > 1000, "{}", t.marks.len());
    let ranks = oomscope_analysis::facts::ranks_of(&t);
    assert_eq!(
        ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
}

/// torch is not installed for these tests: the helper only reads `sys.modules["torch"]`, so a
/// stand-in module with the functions it calls exercises exactly the code that runs on a
/// GPU host, with the shape of torch 2.11's `torch._C._cuda_memoryStats(device)` (the GPU proof checks
/// the real one).
const STAND_IN_TORCH: &str = r#"
import sys, types
torch = types.ModuleType("torch")
torch.cuda = types.SimpleNamespace(
    is_available=lambda: True,
    is_initialized=lambda: True,
    current_device=lambda: 0,
)
# The allocator's nested statistics, as torch._C returns them (the helper reads them directly).
torch._C = types.SimpleNamespace(_cuda_memoryStats=lambda device: {
    "allocated_bytes": {"all": {"current": 9_000_000_000, "peak": 14_000_000_000}},
    "reserved_bytes": {"all": {"current": 12_000_000_000, "peak": 15_000_000_000}},
    "active_bytes": {"all": {"current": 9_100_000_000}},
    "inactive_split_bytes": {"all": {"current": 300_000_000}},
    "num_alloc_retries": 3,
    "num_ooms": 1,
})
sys.modules["torch"] = torch
"#;

/// Records a Python script under the collector; it must exit 0.
fn record_python(s: &Scratch, script: &Path) -> oomscope_format::Trace {
    let (out, trace) = run_python(s, script, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    trace
}

/// `python3 script` under the collector, with `env` for the program: how it ended, its trace.
fn run_python(
    s: &Scratch,
    script: &Path,
    env: &[(&str, &str)],
) -> (Output, oomscope_format::Trace) {
    let trace = s.path("t.oomt");
    let args = [
        "run",
        "-q",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "python3",
        script.to_str().unwrap(),
    ];
    let out = collector(&args).envs(env.iter().copied()).output().unwrap();
    (out, read(&trace).trace)
}

#[test]
fn the_python_helper_attaches_torch_allocator_statistics() {
    let s = Scratch::new("torchstats");
    let child = s.script(
        "child.py",
        &format!(
            "{STAND_IN_TORCH}{}",
            r#"
import oomscope_probe as oom
oom.mark("post_forward", step=5, phase="train")
"#
        ),
    );
    let t = record_python(&s, &child);
    assert_eq!(t.marks.len(), 1);
    let snapshot = t.marks.allocator(0).expect("allocator statistics attached");
    assert_eq!(snapshot.allocated_bytes, 9_000_000_000);
    assert_eq!(snapshot.reserved_bytes, 12_000_000_000);
    assert_eq!(snapshot.active_bytes, 9_100_000_000);
    assert_eq!(snapshot.inactive_split_bytes, 300_000_000);
    assert_eq!(snapshot.peak_allocated_bytes, 14_000_000_000);
    assert_eq!(snapshot.peak_reserved_bytes, 15_000_000_000);
    assert_eq!((snapshot.num_alloc_retries, snapshot.num_ooms), (3, 1));
    assert_eq!(t.marks[0].step, 5);
}

#[test]
fn marks_from_two_ranks_under_one_collector_name_their_senders() {
    // torchrun's shape: one collector, several worker processes, each with its RANK. Every mark
    // carries its sender's pid and rank from the helper to the trace.
    let s = Scratch::new("senders");
    let child = s.script(
        "launcher.py",
        r#"
import os, subprocess, sys
worker = "import oomscope_probe as oom, os; oom.mark('post_forward', step=1); print(os.getpid())"
pids = []
for rank in (0, 1):
    env = dict(os.environ, RANK=str(rank))
    out = subprocess.run([sys.executable, "-c", worker], env=env, capture_output=True, text=True)
    pids.append(out.stdout.strip())
open(sys.argv[1], "w").write(" ".join(pids))
"#,
    );
    let pids_file = s.path("pids.txt");
    let trace = s.path("t.oomt");
    let out = collector(&["run", "-q", "-o", trace.to_str().unwrap(), "--", "python3"])
        .arg(&child)
        .arg(&pids_file)
        .env_remove("RANK")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let pids: Vec<u32> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let t = read(&trace).trace;
    let senders: Vec<_> = t.marks.iter().map(|m| (m.pid, m.rank)).collect();
    assert_eq!(
        senders,
        [(Some(pids[0]), Some(0)), (Some(pids[1]), Some(1))]
    );
}

#[test]
fn every_verb_of_the_python_helper_reaches_the_trace() {
    // The helper had drifted from the protocol (no gradients/tensor/trial, oom() without
    // device/free/total): each verb, sent by the real helper, must land as its record.
    let s = Scratch::new("pyverbs");
    let child = s.script(
        "child.py",
        r#"
import oomscope_probe as oom
oom.step(7)
oom.mark("post_backward")
oom.gradients(12, 4096, 3.5, step=7)
oom.gradients(12, 4096, float("nan"), nan_count=5, inf_count=1)
oom.tensor("block 3.out", (32, 1024), "f32", 131072, -1.5, 2.0, 0.25, 0.75, step=7)
oom.trial(16, "fit", peak_bytes=1 << 30)
oom.trial(32, "oom")
oom.oom("CUDA out of memory (caught)", requested_bytes=2 << 30, stage="post_forward", step=7,
        device=0, free_bytes=1 << 30, total_bytes=80 << 30)
"#,
    );
    let t = record_python(&s, &child);
    assert_eq!(t.gradients.len(), 2);
    assert_eq!(
        (
            t.gradients[0].step,
            t.gradients[0].params_with_grad,
            t.gradients[0].gradient_bytes
        ),
        (7, 12, 4096)
    );
    assert_eq!(t.gradients[0].global_norm, 3.5);
    assert!(t.gradients[1].global_norm.is_nan());
    assert_eq!((t.gradients[1].nan_count, t.gradients[1].inf_count), (5, 1));
    let [tensor] = t.tensors.as_slice() else {
        panic!("{:?}", t.tensors)
    };
    assert_eq!(tensor.name.as_ref(), "block_3.out");
    assert_eq!(
        (tensor.shape.as_slice(), tensor.dtype.as_ref()),
        ([32, 1024].as_slice(), "f32")
    );
    assert_eq!(
        (tensor.min, tensor.max, tensor.mean, tensor.std),
        (-1.5, 2.0, 0.25, 0.75)
    );
    assert_eq!(t.batch_trials.len(), 2);
    assert_eq!(
        (
            t.batch_trials[0].batch_size,
            t.batch_trials[0].outcome,
            t.batch_trials[0].peak_bytes
        ),
        (16, TrialOutcome::Fit, Some(1 << 30))
    );
    assert_eq!(t.batch_trials[1].outcome, TrialOutcome::Oom);
    let [event] = t.ooms.as_slice() else {
        panic!("{:?}", t.ooms)
    };
    assert_eq!(event.stage.as_deref().unwrap(), "post_forward");
    assert_eq!(
        (
            event.step,
            event.requested_bytes,
            event.device,
            event.device_free_bytes,
            event.device_total_bytes
        ),
        (
            Some(7),
            Some(2 << 30),
            Some(0),
            Some(1 << 30),
            Some(80 << 30)
        )
    );
    assert_eq!(event.message, "CUDA out of memory (caught)");
}

#[test]
fn the_helper_decides_by_a_message_s_verb_even_its_first() {
    // The first message goes out behind the `process` line that announces the sender: a first
    // mark still carries the sender's memory, a first OOM is still sent at once.
    let s = Scratch::new("pyverb-first");
    let child = s.script(
        "child.py",
        r#"
import json, os
from oomscope import _probe
sent = []
for first in ("mark pre_forward", "oom -- CUDA out of memory"):
    probe = _probe.Probe()
    # As a rank's probe is: its first message goes behind the line that says who it is.
    probe._announced = False
    probe._process_line = lambda: "process rank=0"
    transport = probe.transport
    transport.send = lambda text, now, urgent=False: sent.append([text, urgent])
    probe.send(first)
    probe.send(first)
print(json.dumps(sent))
"#,
    );
    let (out, _) = run_python(&s, &child, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sent: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sent = sent.as_array().unwrap();
    assert_eq!(sent.len(), 4, "{sent:?}");
    for (i, message) in sent.iter().enumerate() {
        let (text, urgent) = (message[0].as_str().unwrap(), message[1].as_bool().unwrap());
        let mark = i < 2;
        assert_eq!(
            text.lines().next().unwrap().contains(" rss_bytes="),
            mark && i == 0,
            "a mark's memory (read once per gap): {text}"
        );
        assert_eq!(urgent, !mark, "{text}");
        assert_eq!(
            text.contains("\nprocess"),
            i % 2 == 0,
            "announced first: {text}"
        );
    }
}

#[test]
fn the_python_helper_writes_exactly_the_declared_keys_of_every_verb() {
    // `protocol::keys` is the one declaration of each verb's fields: the helper, called with every
    // optional argument, must write exactly those (no more, no fewer), for every verb.
    let s = Scratch::new("pykeys");
    let script = s.script(
        "keys.py",
        &format!(
            "{STAND_IN_TORCH}{}",
            r#"
import oomscope_probe as oom
p = oom.Probe(path="/nonexistent")
lines = []
p.send = lines.append
p.mark("post_forward", step=1, phase="eval", epoch=2)
p.step(1, epoch=2)
p.phase("eval")
p.note("hello")
p.components(parameters_bytes=1, buffers_bytes=2, gradients_bytes=3, optimizer_state_bytes=4,
             batch_size=8, step=1, parameter_count=6, trainable_parameter_count=7, ema=5)
p.gradients(1, 2, 0.5, nan_count=0, inf_count=0, step=1)
p.tensor("logits", (2, 3), "f32", 24, -1.0, 1.0, 0.0, 0.5, step=1)
p.trial(8, "fit", peak_bytes=9)
p.oom("boom", source="allocator", requested_bytes=1, stage="s", step=1, device=0, free_bytes=2,
      total_bytes=3, allocated_bytes=4, reserved_bytes=5)
p.alive([("/home/me/train.py", 20, "forward", 1 << 30, 2)])
# The zero-code hooks' verbs, formatted by the same probe.
p.gc(2, 40, 64 << 20, 1200)
p.held("tensors", 8, 2 << 20, 4, 12, "cpu", "float32", "64x1024", "AddmmBackward0",
       "list `val_losses`", 12)
p.input(512, "8x64", step=3)
p.eval_autograd(True)
p.memory_snapshot("run.oom-4242.pickle")
p.sampling(8, 100, 2500, last_step=2999)
p.program_end()
p.process(group="pp0")
lines.append(p._at_line(memory=True))
lines.append(oom._transport.ring_line("ring-4242-1"))
print("\n".join(lines))
import sys
from oomscope import _probe
for names in (_probe._RANK_VARS, _probe._LOCAL_RANK_VARS, _probe._WORLD_SIZE_VARS,
              _probe._ATTEMPT_VARS, _probe._SLURM_STEP_ONLY_VARS):
    print(",".join(names), file=sys.stderr)
"#
        ),
    );
    let out = Command::new("python3")
        .arg(&script)
        .env("PYTHONPATH", python_path())
        .env("RANK", "3")
        .env("LOCAL_RANK", "1")
        .env("WORLD_SIZE", "4")
        .env("TORCHELASTIC_RESTART_COUNT", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    use oomscope_collector::launch_env;
    let lists: Vec<String> = [
        &launch_env::RANK_VARS[..],
        &launch_env::LOCAL_RANK_VARS,
        &launch_env::WORLD_SIZE_VARS,
        &launch_env::ATTEMPT_VARS,
        &launch_env::SLURM_STEP_ONLY_VARS,
    ]
    .iter()
    .map(|l| l.join(","))
    .collect();
    assert_eq!(
        stderr(&out).lines().collect::<Vec<_>>(),
        lists,
        "the helper reads the launchers' variables of launch_env"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut verbs = Vec::new();
    for line in text.lines() {
        let (verb, written) = protocol::written_keys(line);
        let mut declared = protocol::keys(verb);
        declared.sort_unstable();
        assert_eq!(written, declared, "{line}");
        assert!(protocol::parse_line(line).is_some(), "{line}");
        verbs.push(verb);
    }
    assert_eq!(
        verbs,
        protocol::VERBS,
        "the helper has a function for every verb"
    );
}
