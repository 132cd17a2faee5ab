//! `collector run` end to end: real child processes (Python and shell) under the real binary,
//! then the trace it wrote read back and analysed. Here: memory by stage, OOMs read from stderr,
//! how a run ends (exit codes and signals passed through, a kill near the memory limit, the
//! collector killed or sent SIGTERM, Slurm's word of a task killed for memory), errors before the
//! program starts, `summary` and the exports on good and bad traces, the live status line.
//!
//! One of three targets of `collector run`'s tests (`run.rs`, `run_marks.rs`, `run_gpu.rs`), split
//! by what they test so that each reads in one sitting.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oomscope_analysis::facts::MetricKey;
use oomscope_analysis::finding::FindingKind;
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::{CounterKind, ExitStatus, OomSource, decode};

mod support;

use oomscope_testkit::Scratch;
use support::{COLLECTOR, collector, python_path, read, run, stderr};

/// A list of findings in words.
fn worded(
    findings: &[oomscope_analysis::finding::Finding],
) -> Vec<oomscope_words::findings::Worded> {
    findings
        .iter()
        .map(oomscope_words::findings::worded)
        .collect()
}

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
            .any(|f| f.kind() == FindingKind::HostMemoryPressure),
        "{:?}",
        worded(&analysis.findings)
    );
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
    assert_eq!(
        json["analysis"],
        serde_json::to_value(oomscope_words::json::AnalysisJson::of(&analysis)).unwrap()
    );

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
