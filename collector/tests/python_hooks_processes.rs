//! The zero-code PyTorch hooks, end to end, with the processes around the program: torchrun's
//! agent and ranks (only the ranks mark, each says who it is, each rank's stage table, the rank
//! that holds more or runs out first named), two nodes writing templated traces read together,
//! and Ctrl-C or an ignored SIGINT reading as without the collector. Real, unmodified PyTorch
//! programs (`tests/torch_programs/`) under `collector run` with PyTorch 2.11 on CPU.
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
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

use hooks::{STAGES, count, program_stderr, senders};
use oomscope_analysis::facts::SpikeWhen;
use oomscope_analysis::finding::FindingKind;
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::{CounterKind, ExitStatus, Phase, ProcessRole, Trace};
use oomscope_testkit::Scratch;
use oomscope_words::findings::FindingWords as _;
use support::{collector, read, record, stderr, torch_program as program, torch_python};

#[test]
fn under_torchrun_only_the_ranks_mark_and_each_says_who_it_is() {
    let s = Scratch::new("zc-torchrun");
    let py = torch_python();
    let cmd = [
        py.to_str().unwrap(),
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        &program("ddp.py"),
        "--steps",
        "3",
    ];
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("rank 0 of 2") && stdout.contains("rank 1 of 2"),
        "{stdout}"
    );
    // Two senders, ranks 0 and 1, neither of them the agent (the collector's child).
    let senders = senders(&t);
    let ranks: BTreeSet<Option<u32>> = senders.iter().map(|s| s.1).collect();
    assert_eq!(ranks, [Some(0), Some(1)].into_iter().collect());
    assert_eq!(senders.len(), 2);
    assert!(senders.iter().all(|s| s.0 != Some(t.metadata.pid)));
    for stage in STAGES {
        assert_eq!(count(&t, stage, Phase::Train), 6, "{stage}");
    }
    for rank in 0..2 {
        let said = t.notes.iter().any(|n| {
            n.text
                .contains(&format!("rank={rank} local_rank={rank} world_size=2"))
        });
        assert!(said, "{:?}", t.notes);
    }
}

/// torchrun with `n` ranks of the DDP test program (`args` after the program).
fn torchrun(n: &str, args: &[&str]) -> Vec<String> {
    let mut cmd: Vec<String> = [
        torch_python().to_str().unwrap(),
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        n,
        &program("ddp.py"),
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    cmd.extend(args.iter().map(|a| (*a).to_owned()));
    cmd
}

/// The latest PROCESS record of each pid: (pid, role, rank).
fn roles(t: &Trace) -> Vec<(u32, ProcessRole, Option<u32>)> {
    let mut latest: Vec<(u32, ProcessRole, Option<u32>)> = Vec::new();
    for p in &t.processes {
        latest.retain(|(pid, _, _)| *pid != p.pid);
        latest.push((p.pid, p.role, p.rank));
    }
    latest
}

#[test]
fn each_rank_gets_its_stage_table_and_a_rank_holding_more_is_named() {
    // Three ranks with a DataLoader worker each; rank 1 keeps 256 MiB more from its first step;
    // before training every rank torch.loads the same 400 MiB checkpoint at once.
    let s = Scratch::new("ranks-imbalance");
    let cmd = torchrun(
        "3",
        &[
            "--steps",
            "12",
            "--workers",
            "1",
            "--hold-rank",
            "1",
            "--hold-mib",
            "256",
            "--load-mib",
            "400",
        ],
    );
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Who is who: the agent is the launcher, three ranks, their workers are workers.
    let roles = roles(&t);
    let of = |role: ProcessRole| roles.iter().filter(|r| r.1 == role).count();
    assert!(
        roles.contains(&(t.metadata.pid, ProcessRole::Launcher, None)),
        "{roles:?}"
    );
    // A rank seen between torchrun's fork and its exec (a copy of the agent) is read again.
    assert_eq!(of(ProcessRole::Rank), 3, "{roles:?}");
    let analysed = oomscope_analysis::facts::ranks_of(&t);
    assert_eq!(analysed.len(), 3, "{analysed:?}");
    let ranks: BTreeSet<Option<u32>> = roles
        .iter()
        .filter(|r| r.1 == ProcessRole::Rank)
        .map(|r| r.2)
        .collect();
    assert_eq!(ranks, [Some(0), Some(1), Some(2)].into_iter().collect());
    assert!(
        of(ProcessRole::Worker) >= 3,
        "one DataLoader worker per rank: {roles:?}"
    );
    // Every mark names its sender's rank; each rank's own RSS is recorded.
    assert!(t.marks.iter().all(|m| m.rank.is_some() && m.pid.is_some()));
    let per_rank_rss = t
        .counters
        .iter()
        .filter(|c| c.kind == CounterKind::PidRss)
        .count();
    assert_eq!(per_rank_rss, 3);
    let a = analyze(&t, &AnalysisOptions::default());
    let r = a.ranks.as_ref().expect("a rank analysis");
    assert_eq!(r.ranks.len(), 3);
    for rank in &r.ranks {
        for row in &rank.stage_table.rows {
            // Rank 0 saves the file all ranks load, once, before training (torch.save, marked).
            let expected = if row.stage.ends_with("checkpoint_save") {
                assert_eq!(rank.rank, 0, "{}", row.stage);
                1
            } else {
                12
            };
            assert_eq!(row.count, expected, "rank {} {}", rank.rank, row.stage);
        }
    }
    let top = &r.imbalance[0];
    assert_eq!((top.rank, top.metric.label().as_str()), (1, "host.rss"));
    let excess = top.excess_bytes() as f64 / f64::from(1 << 20);
    assert!((230.0..290.0).contains(&excess), "{excess} MiB");
    let f = a
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::RankImbalance)
        .expect("the imbalance finding");
    assert!(f.title().starts_with("Rank 1 holds"), "{}", f.title());
    // The node: three ranks holding the checkpoint at once, before the loop's first mark (rank
    // 0's save of that file is marked, but it is no mark of the loop).
    let spike = r.node_spikes.first().expect("the node's load spike");
    assert_eq!(spike.when, SpikeWhen::BeforeFirstMark, "{spike:?}");
    assert_eq!(spike.ranks, 3);
    let excess = spike.excess_bytes() as f64 / f64::from(1 << 20);
    assert!(excess > 900.0, "3 × 400 MiB loaded at once: {excess} MiB");
    let f = a
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::NodeHostSpike)
        .expect("the node spike finding");
    assert!(
        f.title().starts_with("The node's host memory spikes")
            && f.title().ends_with("before the first mark"),
        "{}",
        f.title()
    );
    assert!(f.change().contains("mmap=True"), "{}", f.change());
    // The summary shows the ranks.
    let summary = collector(&["summary", s.path("t.oomt").to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&summary.stdout);
    // Every rank peaks while holding the checkpoint; rank 1 holds more in the loop.
    assert!(
        text.contains("Ranks (3)") && text.contains("imbalance at") && text.contains(": rank 1 "),
        "{text}"
    );
    assert!(text.contains("(node-host-spike)"), "{text}");
}

#[test]
fn the_rank_that_runs_out_first_is_named_with_the_others_fate() {
    // Rank 1 asks libtorch for a petabyte at its fourth batch; torchrun stops ranks 0 and 2.
    let s = Scratch::new("ranks-first-failure");
    let cmd = torchrun(
        "3",
        &["--steps", "30", "--oom-rank", "1", "--oom-step", "3"],
    );
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let (out, t) = record(&s, &[], &cmd);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // The OOM is rank 1's (from its `[rank1]:` traceback and its hooks), torchrun's summary says
    // how every rank ended.
    assert!(!t.ooms.is_empty());
    assert!(t.ooms.iter().all(|o| o.rank == Some(1)), "{:?}", t.ooms);
    let launcher: Vec<_> = t.process_ends.iter().filter(|e| e.from_launcher).collect();
    assert_eq!(launcher.len(), 3, "{launcher:?}");
    // torchrun names the first failure it observed: rank 1, or (a race on a loaded host) a rank
    // whose collective broke when rank 1 died, which then ended after rank 1's OOM.
    let root = launcher.iter().find(|e| e.first_failure).unwrap();
    assert_eq!(root.status, Some(ExitStatus::Code(1)), "{root:?}");
    let oom_us = t.ooms.iter().map(|o| o.t_us).min().unwrap();
    if root.rank != Some(1) {
        let seen_end = t
            .process_ends
            .iter()
            .find(|e| !e.from_launcher && e.rank == root.rank)
            .unwrap_or_else(|| panic!("no end of rank {:?} seen: {:?}", root.rank, t.process_ends));
        assert!(
            seen_end.t_us >= oom_us,
            "{seen_end:?} before the OOM at {oom_us}"
        );
    }
    let a = analyze(&t, &AnalysisOptions::default());
    let first = a.ranks.as_ref().unwrap().first_failure.as_ref().unwrap();
    assert_eq!(first.rank, 1);
    let what = oomscope_words::phrases::failure_what(first);
    assert!(what.starts_with("ran out of host memory"), "{what}");
    assert_eq!(first.others.len(), 2);
    for other in &first.others {
        // Each as torchrun's summary said it.
        let said = launcher.iter().find(|e| e.rank == Some(other.rank));
        assert_eq!(other.exit, said.and_then(|e| e.status), "{other:?}");
        assert!(!other.oom);
        if Some(other.rank) == root.rank {
            assert_eq!(other.exit, Some(ExitStatus::Code(1)), "{other:?}");
            continue;
        }
        // torchrun stops the others (SIGTERM); on a loaded host one whose collective broke when
        // rank 1 died can end on its own first, aborted by the C++ runtime (SIGABRT, seen with
        // PyTorch 2.15 under the suite), after rank 1's OOM.
        match other.exit {
            Some(ExitStatus::Signal(15)) => {}
            Some(ExitStatus::Signal(6)) => {
                let seen_end = t
                    .process_ends
                    .iter()
                    .find(|e| !e.from_launcher && e.rank == Some(other.rank))
                    .unwrap_or_else(|| panic!("no end of rank {} seen", other.rank));
                assert!(seen_end.t_us >= oom_us, "{seen_end:?} before the OOM");
            }
            _ => panic!("{other:?}"),
        }
    }
    let f = a
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::FirstRankFailure)
        .expect("the first-failure finding");
    assert!(
        f.title().starts_with("Rank 1 failed first"),
        "{}",
        f.title()
    );
    assert!(
        f.explanation().contains("rank 0") && f.explanation().contains("SIGTERM"),
        "{}",
        f.explanation()
    );
}

#[test]
fn two_nodes_write_templated_traces_and_summary_dir_puts_their_ranks_together() {
    // Two torchrun agents on one machine stand in for two nodes (static rendezvous over
    // localhost, 2 ranks each): one collector per node, each writing `{job}/{node}.oomt`.
    let s = Scratch::new("two-nodes");
    let template = format!("{}/{{job}}/{{node}}.oomt", s.path("runs").display());
    let port = 29_400 + (std::process::id() % 500);
    let children: Vec<_> = (0..2)
        .map(|node| {
            let mut cmd = vec![
                "run".to_owned(),
                "-q".to_owned(),
                "-o".to_owned(),
                template.clone(),
                "--".to_owned(),
            ];
            cmd.extend(torchrun(
                "2",
                &["--steps", "8", "--hold-rank", "2", "--hold-mib", "200"],
            ));
            // A static rendezvous instead of --standalone.
            cmd.retain(|a| a != "--standalone");
            let at = cmd.iter().position(|a| a == "--nproc-per-node").unwrap();
            for (i, arg) in [
                "--nnodes".to_owned(),
                "2".to_owned(),
                "--node-rank".to_owned(),
                node.to_string(),
                "--master-addr".to_owned(),
                "127.0.0.1".to_owned(),
                "--master-port".to_owned(),
                port.to_string(),
            ]
            .into_iter()
            .enumerate()
            {
                cmd.insert(at + i, arg);
            }
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            collector(&args)
                .env("SLURM_JOB_ID", "4242")
                .env("SLURMD_NODENAME", format!("node{node}"))
                .env("OMP_NUM_THREADS", "1")
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let dir = s.path("runs/4242");
    for node in ["node0.oomt", "node1.oomt"] {
        assert!(dir.join(node).exists(), "{node}");
    }
    // A third collector with the same template refuses to overwrite node0's trace.
    let again = collector(&["run", "-q", "-o", &template, "--", "true"])
        .env("SLURM_JOB_ID", "4242")
        .env("SLURMD_NODENAME", "node0")
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("will not overwrite"),
        "{}",
        stderr(&again)
    );
    // The job, analysed together: four ranks, rank 2 (on node1) holding 200 MiB more.
    let out = collector(&["summary", "--json", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ranks = doc["ranks"]["ranks"].as_array().unwrap();
    let numbers: Vec<u64> = ranks.iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [0, 1, 2, 3]);
    for r in ranks {
        assert_eq!(r["marks"].as_u64(), Some(48), "8 steps × 6 stages: {r}");
    }
    let top = &doc["ranks"]["imbalance"][0];
    assert_eq!(top["rank"].as_u64(), Some(2), "{top}");
    let excess = top["max_bytes"].as_f64().unwrap() - top["median_bytes"].as_f64().unwrap();
    assert!(
        (180.0..230.0).contains(&(excess / f64::from(1 << 20))),
        "{top}"
    );
    assert_eq!(doc["findings"][0]["id"], "rank-imbalance");
    let text = collector(&["summary", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("2 traces, 4 ranks") && text.contains("node1"),
        "{text}"
    );
}

#[test]
fn a_ctrl_c_during_backward_reads_as_without_the_collector() {
    let s = Scratch::new("zc-sigint");
    let py = torch_python();
    // A SIGINT arrives while backward runs in C++: Python raises KeyboardInterrupt at the first
    // Python code after it, which under the hooks is their end-of-backward callback.
    let cmd = [py.to_str().unwrap(), &program("interrupt.py")];
    let (out, t) = with_sigint(&s, &cmd, false);
    let without = plain_with_sigint(&cmd, false);
    // Python dies of the SIGINT it re-raises; `collector run` exits 128 + 2 for it, as shells do.
    assert_eq!(
        without.status.signal(),
        Some(2),
        "died of the interrupt (without the collector: {:?}, stdout {:?}, stderr {})",
        without.status,
        String::from_utf8_lossy(&without.stdout),
        String::from_utf8_lossy(&without.stderr)
    );
    assert_eq!(out.status.code(), Some(130));
    assert_eq!(out.stdout, without.stdout);
    let traceback = program_stderr(&out);
    assert!(
        traceback.trim_end().ends_with("KeyboardInterrupt"),
        "{traceback}"
    );
    assert!(
        !traceback.contains("/oomscope/_") && !traceback.contains("/oomscope/__init__.py"),
        "no frame of ours in the program's traceback:\n{traceback}"
    );
    assert_eq!(traceback, String::from_utf8_lossy(&without.stderr));
    // Recorded up to the interrupt: the steps before it and the step it stopped.
    assert!(
        t.marks
            .iter()
            .any(|m| m.step == 2 && m.name.as_ref() == "pre_backward")
    );
}

/// Sets SIGINT's disposition for the spawned process: the default, or ignored (how a background
/// job of a non-interactive shell starts; the test suite itself may have been started so).
fn sigint_disposition(c: &mut Command, ignored: bool) {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal(2) is async-signal-safe, called between fork and exec.
    unsafe {
        c.pre_exec(move || {
            libc::signal(
                libc::SIGINT,
                if ignored {
                    libc::SIG_IGN
                } else {
                    libc::SIG_DFL
                },
            );
            Ok(())
        });
    }
}

/// `record`, with SIGINT's disposition set for the collector.
fn with_sigint(s: &Scratch, cmd: &[&str], ignored: bool) -> (Output, Trace) {
    let trace = s.path("t.oomt");
    let mut args = vec!["run", "-q", "-o", trace.to_str().unwrap(), "--"];
    args.extend_from_slice(cmd);
    let mut c = collector(&args);
    c.env("OMP_NUM_THREADS", "1");
    sigint_disposition(&mut c, ignored);
    let out = c.output().unwrap();
    (out, read(&trace).trace)
}

/// `plain`, with SIGINT's disposition set.
fn plain_with_sigint(cmd: &[&str], ignored: bool) -> Output {
    let mut c = Command::new(cmd[0]);
    c.args(&cmd[1..])
        .env("OMP_NUM_THREADS", "1")
        .env("PYTHONUNBUFFERED", "1");
    sigint_disposition(&mut c, ignored);
    c.output().unwrap()
}

#[test]
fn a_program_started_with_sigint_ignored_ignores_it_under_the_collector_too() {
    // A background job of a non-interactive shell starts with SIGINT ignored; the program's
    // own Ctrl-C then does nothing, and must do nothing under the collector either (a handler
    // the collector installed would be reset to the default at exec: the program would die).
    let s = Scratch::new("zc-sigint-ignored");
    let py = torch_python();
    let cmd = [py.to_str().unwrap(), &program("interrupt.py")];
    let without = plain_with_sigint(&cmd, true);
    assert_eq!(without.status.code(), Some(0), "{without:?}");
    let (out, _) = with_sigint(&s, &cmd, true);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(out.stdout, without.stdout);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "step 0\nstep 1\nstep 2\nstep 3\n"
    );
}
