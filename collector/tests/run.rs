//! `collector run` end to end: real child processes (Python and shell) under the real binary,
//! then the trace it wrote read back and analysed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use oomscope_analysis::metrics::MetricKey;
use oomscope_analysis::recommend::FindingKind;
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::codec::tag;
use oomscope_format::{CounterKind, ExitStatus, OomSource, TrialOutcome, decode, protocol};

mod support;

use oomscope_testkit::Scratch;
use support::{COLLECTOR, collector, python_path, read, run, stderr};

const MIB: f64 = oomscope_format::units::MIB as f64;

#[test]
fn host_memory_steps_show_in_the_stage_table() {
    let s = Scratch::new("steps");
    let child = s.script(
        "child.py",
        r#"
import time, oomscope_probe as oom
blocks = []
print("hello from the child")
for step in range(6):
    oom.step(step)
    oom.mark("pre_forward", phase="train")
    time.sleep(0.05)
    block = bytearray(64 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    blocks.append(block)
    time.sleep(0.05)  # let the sampler see it
    oom.mark("post_forward")
    time.sleep(0.05)
    oom.mark("post_optimizer_step")
"#,
    );
    let trace = s.path("t.oomt");
    let out = run(&[
        "run",
        "-q",
        "--interval-ms",
        "5",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "python3",
        child.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The child's stdout passes through untouched.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from the child\n"
    );
    let decoded = read(&trace);
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = &decoded.trace;
    assert_eq!(t.marks.len(), 18);
    assert_eq!(t.exit.map(|e| e.status), Some(ExitStatus::Code(0)));
    assert!(t.samples.len() > 40, "{}", t.samples.len());
    let analysis = analyze(t, &AnalysisOptions::default());
    let row = analysis
        .stage_table
        .rows
        .iter()
        .find(|r| r.stage == "post_forward")
        .unwrap();
    let host_rss = MetricKey::Counter {
        kind: CounterKind::HostRss,
        device: None,
    };
    let m = analysis.stage_table.metric_index(host_rss).unwrap();
    let mean_delta = row.metrics[m].mean_delta_bytes.unwrap();
    assert!(
        (mean_delta - 64.0 * MIB).abs() < 6.0 * MIB,
        "post_forward grows {:.1} MiB per step, expected 64",
        mean_delta / MIB
    );
}

#[test]
fn a_pytorch_oom_on_stderr_is_recorded_with_its_stage() {
    let s = Scratch::new("oom");
    let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.34 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.23 GiB is free.";
    let child = s.script(
        "child.py",
        &format!(
            r#"
import sys, time, oomscope_probe as oom
oom.mark("pre_forward", step=41)
time.sleep(0.05)
oom.mark("post_forward", step=41)
time.sleep(0.1)
print("Traceback (most recent call last):", file=sys.stderr)
print("{line}", file=sys.stderr)
sys.exit(1)
"#
        ),
    );
    let trace = s.path("t.oomt");
    let out = run(&[
        "run",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "python3",
        child.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    // The child's stderr passes through unchanged; the summary follows it.
    let err = stderr(&out);
    assert!(
        err.contains(&format!("Traceback (most recent call last):\n{line}\n")),
        "{err}"
    );
    assert!(err.contains("Out of GPU memory"), "{err}");
    let t = read(&trace).trace;
    assert_eq!(t.ooms.len(), 1);
    let oom = &t.ooms[0];
    assert_eq!(oom.source, OomSource::Stderr);
    assert_eq!(
        oom.requested_bytes,
        Some((2.34 * 1024.0 * MIB).round() as u64)
    );
    assert_eq!(
        oom.device_free_bytes,
        Some((1.23 * 1024.0 * MIB).round() as u64)
    );
    assert_eq!(oom.stage.as_deref(), Some("post_forward"));
    assert_eq!(oom.step, Some(41));
}

#[test]
fn an_oom_completed_by_the_lines_after_it_on_stderr() {
    // NCCL's real lines (shared/analysis/tests/data/oom_texts.md, nccl-warn-alloc: NVIDIA/nccl#1235): the
    // size is on the line after the error, written together with it.
    let s = Scratch::new("nccl-oom");
    let child = s.script(
        "child.py",
        r#"
import sys
sys.stderr.write(
    "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
    "\n"
    "ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes\n"
    "ng30903:3063028:3066152 [3] NCCL INFO transport/p2p.cc:204 -> 1\n"
)
sys.stderr.flush()
sys.exit(1)
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
    assert_eq!(out.status.code(), Some(1));
    let t = read(&trace).trace;
    let [oom] = t.ooms.as_slice() else {
        panic!("{:?}", t.ooms)
    };
    assert_eq!(oom.source, OomSource::Stderr);
    assert_eq!(
        (oom.device, oom.requested_bytes),
        (Some(3), Some(6_291_456))
    );
}

#[test]
fn exit_codes_and_signals_pass_through() {
    let s = Scratch::new("exit");
    let trace = s.path("t.oomt");
    let out = run(&[
        "run",
        "-q",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7));
    let out = run(&[
        "run",
        "-q",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "kill -9 $$",
    ]);
    assert_eq!(out.status.code(), Some(128 + 9));
    let t = read(&trace).trace;
    let exit = t.exit.unwrap();
    assert_eq!(exit.status, ExitStatus::Signal(9));
    assert!(
        !exit.probable_host_oom,
        "a small shell is not near any memory limit"
    );
}

#[test]
fn a_sigkill_near_the_memory_limit_is_a_probable_host_oom_kill() {
    let s = Scratch::new("hostoom");
    let child = s.script(
        "child.py",
        r#"
import os, signal, time
block = bytearray(160 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
time.sleep(0.3)
os.kill(os.getpid(), signal.SIGKILL)
"#,
    );
    let trace = s.path("t.oomt");
    // Pretend the machine has 170 MiB: 160 MiB resident is past 90% of it.
    let limit = (170u64 << 20).to_string();
    let out = run(&[
        "run",
        "-q",
        "--host-limit-bytes",
        &limit,
        "-o",
        trace.to_str().unwrap(),
        "--",
        "python3",
        child.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(137));
    let t = read(&trace).trace;
    assert!(t.exit.unwrap().probable_host_oom);
    assert!(t.ooms.iter().any(|o| o.source == OomSource::HostKill));
    let analysis = analyze(&t, &AnalysisOptions::default());
    assert!(
        analysis
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::HostMemoryPressure),
        "{:?}",
        analysis.findings
    );
}

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
fn killing_the_collector_leaves_a_readable_trace() {
    let s = Scratch::new("killcollector");
    let child = s.script(
        "child.py",
        r#"
import time, oomscope_probe as oom
for step in range(1000):
    oom.mark("pre_forward", step=step)
    if step == 30:
        print("30 marks sent", flush=True)
    time.sleep(0.02)
"#,
    );
    let trace = s.path("t.oomt");
    let mut collector = collector(&[
        "run",
        "-q",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "python3",
        child.to_str().unwrap(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Wait for the child's word rather than a fixed time: a loaded machine may take seconds
    // to start Python.
    let mut stdout = std::io::BufReader::new(collector.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("30 marks sent") {
        line.clear();
        use std::io::BufRead;
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the child ended early"
        );
    }
    std::thread::sleep(Duration::from_millis(1500));
    collector.kill().unwrap(); // SIGKILL: no chance to finish the trace
    collector.wait().unwrap();
    let decoded = read(&trace);
    let t = &decoded.trace;
    assert!(t.end_us.is_none());
    assert!(!decoded.warnings.is_empty());
    // Flushed at least twice a second: well over a second of the last 2 s is there.
    assert!(t.duration_us() > 1_000_000, "{} µs", t.duration_us());
    assert!(t.marks.len() > 20, "{}", t.marks.len());
    // The orphaned child goes on; stop it.
    let _ = Command::new("pkill")
        .args(["-f", child.to_str().unwrap()])
        .status();
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
    let ranks = oomscope_analysis::rank_views::ranks_of(&t);
    assert_eq!(
        ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
}

#[test]
fn slurm_s_word_that_a_task_was_killed_for_memory_names_the_rank() {
    // No Slurm on this machine: a stand-in for `srun` prints what Slurm prints when a step's
    // memory cgroup kills task 1 (the lines of launcher_text's tests, with their sources) and
    // exits as srun does then.
    let s = Scratch::new("slurm-oom");
    let srun = s.script(
        "srun.sh",
        "#!/bin/sh\n\
         echo 'slurmstepd: error: Detected 1 oom_kill event in StepId=6959634.0. Some of the step tasks have been OOM Killed.' >&2\n\
         echo 'srun: error: holy8a24101: task 1: Out Of Memory' >&2\n\
         exit 137\n",
    );
    let trace = s.path("t.oomt");
    let out = run(&[
        "run",
        "-q",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "sh",
        srun.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    // The lines still reach the terminal.
    assert!(stderr(&out).contains("task 1: Out Of Memory"));
    let t = read(&trace).trace;
    let [oom] = t.ooms.as_slice() else {
        panic!("{:?}", t.ooms)
    };
    assert_eq!(oom.source, OomSource::LauncherKill);
    assert_eq!(oom.rank, Some(1));
    let [end] = t.process_ends.as_slice() else {
        panic!("{:?}", t.process_ends)
    };
    assert_eq!(end.rank, Some(1));
    assert_eq!(end.status, Some(ExitStatus::Signal(9)));
    assert!(end.from_launcher && end.first_failure);
    assert!(
        t.notes
            .iter()
            .any(|n| n.text.contains("oom_kill event in StepId=6959634.0"))
    );
    let summary = run(&["summary", trace.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&summary.stdout);
    assert!(
        text.contains("[CRITICAL] Rank 1 was killed by its launcher for memory"),
        "{text}"
    );
}

#[test]
fn sigterm_to_the_collector_reaches_the_child_and_the_trace_is_finished() {
    let s = Scratch::new("sigterm");
    let child = s.script(
        "child.py",
        r#"
import signal, sys, time
def done(*_):
    print("child got SIGTERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
print("ready", flush=True)
time.sleep(600)
print("never signalled", flush=True)
"#,
    );
    let trace = s.path("t.oomt");
    let mut c = collector(&[
        "run",
        "-q",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "python3",
        child.to_str().unwrap(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let start = Instant::now();
    let mut stdout = c.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 64];
    while !String::from_utf8_lossy(&seen).contains("ready") {
        use std::io::Read;
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0 && start.elapsed() < Duration::from_secs(120));
        seen.extend_from_slice(&buf[..n]);
    }
    // SAFETY: plain kill(2) on the child's pid.
    unsafe {
        libc::kill(c.id() as i32, libc::SIGTERM);
    }
    let status = c.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    {
        use std::io::Read;
        stdout.read_to_end(&mut seen).unwrap();
    }
    // The child's own words say the signal reached it (a clock would flake on a loaded machine;
    // the child sleeps for ten minutes otherwise).
    let said = String::from_utf8_lossy(&seen);
    assert!(said.contains("child got SIGTERM"), "{said}");
    let t = read(&trace).trace;
    assert!(t.end_us.is_some(), "the collector finished the trace");
    assert_eq!(t.exit.map(|e| e.status), Some(ExitStatus::Code(0)));
}

#[test]
fn a_missing_command_is_one_clear_error() {
    let s = Scratch::new("missing");
    let trace = s.path("t.oomt");
    let out = run(&[
        "run",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "/nonexistent/train",
    ]);
    assert_eq!(out.status.code(), Some(127));
    let err = stderr(&out);
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("error: cannot run `/nonexistent/train`"),
        "{err}"
    );
    assert!(!trace.exists(), "no trace for a run that never started");
    // A file that is not executable: 126, as a shell says.
    let not_executable = s.path("train.sh");
    std::fs::write(&not_executable, "echo hi\n").unwrap();
    let out = run(&[
        "run",
        "-o",
        trace.to_str().unwrap(),
        "--",
        not_executable.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("error: cannot run `"),
        "{}",
        stderr(&out)
    );
    let out = run(&["run"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
}

#[test]
fn an_unwritable_trace_path_fails_before_the_program_starts() {
    let s = Scratch::new("unwritable");
    let marker = s.path("started");
    let out = run(&[
        "run",
        "-o",
        "/nonexistent-dir/t.oomt",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: cannot write the trace to /nonexistent-dir/t.oomt"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!marker.exists(), "the program must not have run");
}

#[test]
fn summary_and_export_refuse_bad_traces_with_one_line() {
    let s = Scratch::new("badtrace");
    let garbage = s.script("garbage.oomt", "this is not a trace at all, just text");
    for args in [
        vec!["summary", garbage.to_str().unwrap()],
        vec!["export", garbage.to_str().unwrap(), "--format", "csv"],
        vec!["summary", "/nonexistent/t.oomt"],
        vec!["watch", garbage.to_str().unwrap()],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: cannot "), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // A newer major version names both versions.
    let mut bytes = oomscope_testkit::synth::TrainingRun {
        steps: 1,
        ..Default::default()
    }
    .to_bytes();
    bytes[8] = 9;
    let newer = s.path("newer.oomt");
    std::fs::write(&newer, &bytes).unwrap();
    let minor = oomscope_format::codec::FORMAT_MINOR;
    for command in ["summary", "watch"] {
        let err = stderr(&run(&[command, newer.to_str().unwrap()]));
        assert!(
            err.contains(&format!(
                "v9.{minor} is newer than this reader, which reads v1.x"
            )),
            "{command}: {err}"
        );
    }

    // A truncated trace is summarised with a warning.
    let whole = oomscope_testkit::synth::TrainingRun {
        steps: 20,
        ..Default::default()
    }
    .to_bytes();
    let cut = s.path("cut.oomt");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let out = run(&["summary", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("warning: truncated after"));
    // A finished trace: `watch` prints its state once, then its summary, and exits.
    let done = s.path("done.oomt");
    std::fs::write(&done, &whole).unwrap();
    let out = run(&["watch", done.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("{}: ", done.display())) && first.ends_with(" · ended"),
        "{text}"
    );
    assert!(first.contains("step 19 "), "{first}");
    assert!(text.contains("\nPeaks\n"), "{text}");
}

#[test]
fn summary_json_and_exports_agree_with_the_analysis() {
    let s = Scratch::new("exports");
    let trace = s.path("t.oomt");
    let run_bytes = oomscope_testkit::synth::TrainingRun {
        steps: 10,
        ..Default::default()
    }
    .to_bytes();
    std::fs::write(&trace, &run_bytes).unwrap();
    let out = run(&["summary", trace.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["schema_version"], 1);
    let t = decode(&run_bytes).unwrap().trace;
    let analysis = analyze(&t, &AnalysisOptions::default());
    assert_eq!(json["analysis"], serde_json::to_value(&analysis).unwrap());

    let csv = s.path("t.csv");
    let out = run(&[
        "export",
        trace.to_str().unwrap(),
        "--format",
        "csv",
        "-o",
        csv.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 1 + t.samples.len() + t.marks.len());

    let out = run(&["export", trace.to_str().unwrap(), "--format", "chrome"]);
    let chrome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(chrome["traceEvents"].as_array().unwrap().len() > t.marks.len());
}

/// `collector run -o TRACE -- python3 PROGRAM` with the NVML test double playing `script`.
fn record_python_on_fake_gpus(program: &Path, script: &Path, trace: &Path) -> Output {
    collector(&[
        "run",
        "-q",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "python3",
        program.to_str().unwrap(),
    ])
    .env("OOMSCOPE_NVML_LIB", fake_nvml())
    .env("OOMSCOPE_FAKE_NVML_SCRIPT", script)
    .output()
    .unwrap()
}

/// The NVML test double, built next to the test binaries (a dev-dependency of this crate).
fn fake_nvml() -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let lib = deps.join("libfake_nvml.so");
    assert!(
        lib.exists(),
        "{} missing: build the oomscope-fake-nvml dev-dependency",
        lib.display()
    );
    lib
}

#[test]
fn each_rank_s_gpu_memory_from_nvml_is_its_own_and_the_heavier_rank_is_named() {
    // Two ranks under a launcher (RANK in their environment, as torchrun starts them), each on
    // its GPU; NVML (the test double) lists rank 0 with 2 GiB and rank 1 with 3 GiB.
    let s = Scratch::new("fakenvml-ranks");
    let device = |i: u32, rank_bytes: u64| {
        format!(
            r#"{{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-fake-{i}", "total_bytes": 85899345920,
               "used_bytes": {}, "processes": [{{"match": {{"rank": {i}}}, "used_bytes": {rank_bytes}}}]}}"#,
            rank_bytes + (512 << 20)
        )
    };
    let script = s.script(
        "nvml.json",
        &format!(
            r#"{{"devices": [{}, {}]}}"#,
            device(0, 2 << 30),
            device(1, 3 << 30)
        ),
    );
    let launcher = s.script(
        "launcher.py",
        r#"
import os, subprocess, sys
RANK_CODE = """
import time, oomscope_probe as oom
for step in range(12):
    oom.mark("pre_forward", step=step)
    time.sleep(0.1)
    oom.mark("post_forward", step=step)
    time.sleep(0.1)
"""
ranks = [subprocess.Popen([sys.executable, "-c", RANK_CODE],
                          env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2"})
         for r in range(2)]
sys.exit(max(p.wait() for p in ranks))
"#,
    );
    let trace = s.path("t.oomt");
    let out = record_python_on_fake_gpus(&launcher, &script, &trace);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let t = read(&trace).trace;
    // One per-process GPU counter per rank, on its device, with its own bytes.
    let rank_of = |pid: u32| {
        t.processes
            .iter()
            .rev()
            .find(|p| p.pid == pid)
            .and_then(|p| p.rank)
    };
    let mut per_rank: Vec<(Option<u32>, Option<u32>, u64)> = t
        .counters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == CounterKind::PidGpu)
        .map(|(i, c)| {
            let peak = t
                .samples
                .points(oomscope_format::CounterId(i as u32))
                .map(|(_, v)| v)
                .max()
                .unwrap_or(0);
            (rank_of(c.pid.unwrap()), c.device, peak)
        })
        .collect();
    per_rank.sort_unstable();
    assert_eq!(
        per_rank,
        [(Some(0), Some(0), 2 << 30), (Some(1), Some(1), 3 << 30)],
        "{:?}",
        t.counters
    );
    // The analysis reads each rank's own device memory and names the heavier one.
    let a = analyze(&t, &Default::default());
    let r = a.ranks.expect("two ranks");
    let device: Vec<Option<u64>> = r.ranks.iter().map(|x| x.peak_device_bytes).collect();
    assert_eq!(device, [Some(2 << 30), Some(3 << 30)]);
    let (worst, spread, on_device) = r.worst().unwrap();
    assert_eq!((worst.rank, spread, on_device), (1, 1 << 30, true));
}

#[test]
fn per_process_gpu_memory_follows_a_growth_within_the_second() {
    // The allocator grows once, 0.5 s in, and the program ends 0.4 s later: a query once a
    // second (at 0 s and 1 s) would never see the growth, and the memory outside the allocator
    // at the peak would go unsaid (the H200 GPU proof). The device's use moved, so the poller asks
    // again within ~0.1 s; while nothing moves it asks once a second.
    let s = Scratch::new("requery");
    let script = s.script(
        "nvml.json",
        r#"{
  "devices": [{
    "name": "NVIDIA H200",
    "uuid": "GPU-fake-0",
    "total_bytes": 150109880320,
    "reserved_bytes": 644939776,
    "used_bytes": [[0, 1073741824], [500, 1073741824], [500, 3221225472]],
    "processes": [{"match": "children_of_caller", "used_bytes": [[0, 1073741824], [500, 1073741824], [500, 3221225472]]}]
  }]
}"#,
    );
    let child = s.script("child.py", "import time\ntime.sleep(0.9)\n");
    let trace = s.path("t.oomt");
    let out = record_python_on_fake_gpus(&child, &script, &trace);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decoded = read(&trace);
    let t = &decoded.trace;
    let used = t.counter(CounterKind::GpuUsed, Some(0)).unwrap();
    let process = t.counter(CounterKind::ProcessGpu, Some(0)).unwrap();
    let grew_us = t
        .samples
        .points(used)
        .find(|(_, v)| *v == 3 << 30)
        .expect("the device's growth sampled")
        .0;
    let seen_us = t
        .samples
        .points(process)
        .find(|(_, v)| *v == 3 << 30)
        .expect("the per-process figure never saw the growth")
        .0;
    assert!(
        seen_us - grew_us <= 250_000,
        "seen {seen_us} µs, grown at {grew_us} µs"
    );
    let mut values: Vec<u64> = t.samples.points(process).map(|(_, v)| v).collect();
    values.dedup();
    assert_eq!(values, [1 << 30, 3 << 30]);
}

#[test]
fn gpu_memory_from_nvml_appears_in_summary_csv_and_chrome_export() {
    let s = Scratch::new("fakenvml");
    let script = s.script(
        "nvml.json",
        r#"{
  "driver_version": "580.65.06",
  "cuda_driver_version": 13000,
  "devices": [{
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-fake-0",
    "total_bytes": 85899345920,
    "reserved_bytes": 536870912,
    "used_bytes": [[0, 1073741824], [1500, 10737418240]],
    "processes": [{"match": "children_of_caller", "used_bytes": [[0, 536870912], [1500, 9663676416]]}]
  }]
}"#,
    );
    let child = s.script(
        "child.py",
        r#"
import time, oomscope_probe as oom
for step in range(8):
    oom.mark("pre_forward", step=step)
    time.sleep(0.12)
    oom.mark("post_forward", step=step)
    time.sleep(0.12)
"#,
    );
    let trace = s.path("t.oomt");
    let out = record_python_on_fake_gpus(&child, &script, &trace);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decoded = read(&trace);
    let t = &decoded.trace;
    assert_eq!(t.metadata.gpus.len(), 1);
    assert_eq!(t.metadata.gpus[0].name, "NVIDIA H100 80GB HBM3");
    assert_eq!(t.metadata.gpus[0].total_memory_bytes, 85_899_345_920);
    assert_eq!(t.metadata.gpus[0].driver_version, "580.65.06");
    let used = t.counter(CounterKind::GpuUsed, Some(0)).unwrap();
    let process = t.counter(CounterKind::ProcessGpu, Some(0)).unwrap();
    let used_values: Vec<u64> = t.samples.points(used).map(|(_, v)| v).collect();
    let max_used = *used_values.iter().max().unwrap();
    assert_eq!(
        max_used,
        10 << 30,
        "the schedule tops out at 10 GiB after 1.5 s"
    );
    assert!(used_values[0] < 2 << 30);
    // Two speeds: device memory every 10 ms; the per-process query, which holds the driver's
    // lock, once a second, and while the device's use moves (it ramps for 1.5 s here) at most
    // every 100 ms.
    let mut process_values: Vec<u64> = t.samples.points(process).map(|(_, v)| v).collect();
    assert!(
        !process_values.is_empty(),
        "the child's GPU memory was never read"
    );
    process_values.dedup();
    let mut distinct_used = used_values.clone();
    distinct_used.dedup();
    assert!(distinct_used.len() > 30, "{}", distinct_used.len());
    let seconds = t.samples.points(used).last().unwrap().0 as f64 / 1e6;
    assert!(
        process_values.len() >= 5 && (process_values.len() as f64) <= seconds / 0.1 + 2.0,
        "the per-process query follows the ramp at most every 100 ms ({seconds:.2} s): {process_values:?}"
    );

    let summary = run(&["summary", trace.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&summary.stdout);
    assert!(text.contains("NVIDIA H100 80GB HBM3"), "{text}");
    assert!(
        text.contains("gpu0.used") && text.contains("10.0 GiB"),
        "{text}"
    );
    assert!(text.contains("gpu0.process"), "{text}");

    let csv =
        String::from_utf8(run(&["export", trace.to_str().unwrap(), "--format", "csv"]).stdout)
            .unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "gpu0.process").unwrap();
    assert!(
        csv.lines()
            .skip(1)
            .any(|l| !l.split(',').nth(col).unwrap().is_empty())
    );
    assert!(header.contains(&"gpu0.used") && header.contains(&"gpu0.total"));

    let chrome: serde_json::Value = serde_json::from_slice(
        &run(&["export", trace.to_str().unwrap(), "--format", "chrome"]).stdout,
    )
    .unwrap();
    let gpu_events: Vec<&serde_json::Value> = chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "gpu0 memory (bytes)")
        .collect();
    assert!(gpu_events.iter().any(|e| e["args"]["process"].is_u64()));
    assert!(gpu_events.iter().any(|e| e["args"]["used"] == 10u64 << 30));
}

#[test]
fn the_live_status_line_shows_memory_and_stage_on_a_terminal() {
    let s = Scratch::new("status");
    let child = s.script(
        "child.py",
        r#"
import time, oomscope_probe as oom
block = bytearray(32 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
for step in range(12):
    oom.mark("post_forward", step=step)
    time.sleep(0.1)
"#,
    );
    let trace = s.path("t.oomt");
    let typescript = s.path("typescript");
    // `script` gives the collector a pseudo-terminal as stderr, as a person's shell would.
    let command = format!(
        "OOMSCOPE_NVML_LIB=/nonexistent PYTHONPATH={} {COLLECTOR} run -o {} -- python3 {}",
        python_path(),
        trace.display(),
        child.display()
    );
    let status = Command::new("script")
        .args(["-qfec", &command, typescript.to_str().unwrap()])
        .stdout(Stdio::null())
        .status()
        .expect("`script` (util-linux) runs the collector on a pseudo-terminal");
    assert!(status.success());
    let screen = String::from_utf8_lossy(&std::fs::read(&typescript).unwrap()).into_owned();
    let line = screen
        .split('\r')
        .find(|l| l.contains("oomscope 00:00:") && l.contains("post_forward step"))
        .unwrap_or_else(|| panic!("no status line in {screen:?}"));
    assert!(
        line.contains("| host ") && line.contains("(peak "),
        "{line}"
    );
    // The line is erased before the summary, which follows on its own lines.
    assert!(screen.contains("\x1b[2K"));
    assert!(screen.contains("oomscope: trace written to"));
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

#[test]
fn estimate_reads_a_safetensors_header_and_matches_hand_computed_figures() {
    let s = Scratch::new("estimate");
    // Two tensors: 4096 × 1024 bf16 and 1024 f32; the data is zeros (only the header is read).
    let header = r#"{"__metadata__":{"format":"pt"},"layer.weight":{"dtype":"BF16","shape":[4096,1024],"data_offsets":[0,8388608]},"layer.bias":{"dtype":"F32","shape":[1024],"data_offsets":[8388608,8392704]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + 8_392_704, 0);
    let file = s.path("model.safetensors");
    std::fs::write(&file, &bytes).unwrap();
    let out = run(&[
        "estimate",
        "--safetensors",
        file.to_str().unwrap(),
        "--precision",
        "bf16",
        "--cuda-context",
        "0",
        "--batch",
        "8",
        "--activation-bytes-per-sample",
        "2MiB",
        "--gpu-memory",
        "64MiB",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // By hand: 4 194 304 + 1 024 parameters, everything bf16: weights and gradients 2 B each
    // (8 390 656 B), AdamW moments 4 B (16 781 312 B); activations 8 × 2 MiB = 16 777 216 B;
    // the allocator's 10% on top of those 50 339 840 B: 5 033 984 B; total 55 373 824 B.
    assert_eq!(e["parameters"], 4_195_328);
    assert_eq!(e["weights_bytes"], 8_390_656);
    assert_eq!(e["gradients_bytes"], 8_390_656);
    assert_eq!(e["master_weights_bytes"], 0);
    assert_eq!(e["optimizer_bytes"], 16_781_312);
    assert_eq!(e["activations_bytes"], 16_777_216);
    assert_eq!(e["allocator_overhead_bytes"], 5_033_984);
    assert_eq!(e["total_bytes"], 55_373_824);
    // (90% of 64 MiB − 1.1 × 33 562 624 B) / (1.1 × 2 MiB) = 10.2 → 10 samples.
    assert_eq!(e["max_batch_within_90_percent"], 10);
    assert_eq!(e["warnings"].as_array().unwrap().len(), 0);
    // The default is mixed precision: 16 bytes per parameter (fp32 master weights and moments).
    let out = run(&[
        "estimate",
        "--params",
        "7B",
        "--gpu-memory",
        "80GiB",
        "--json",
    ]);
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["bytes_per_trainable_parameter"], 16.0);
    assert!(e["fraction_of_gpu"].as_f64().unwrap() > 1.3, "{e}");
    // Past 90% it warns, in the table too.
    let out = run(&[
        "estimate",
        "--safetensors",
        file.to_str().unwrap(),
        "--batch",
        "16",
        "--activation-bytes-per-sample",
        "2MiB",
        "--gpu-memory",
        "64MiB",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("warning: the total"), "{table}");
    // A file that is not safetensors is one clear error.
    let bad = s.script("bad.safetensors", "definitely not a model");
    let out = run(&["estimate", "--safetensors", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("error: cannot read"),
        "{}",
        stderr(&out)
    );
}
