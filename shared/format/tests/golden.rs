//! Golden traces: files each format version wrote, committed and never rewritten
//! (`examples/golden/` writes a new version's). Whatever the reader becomes, these must keep
//! decoding to the same facts; what the analysis reads from them is pinned in
//! `shared/words/tests/golden.rs`.

use oomscope_format::AllocatorQuantity;
use oomscope_format::{
    CounterKind, ExitStatus, HeldClock, HeldKind, OomSource, Phase, StartMethod, TrialOutcome,
    decode,
};

/// The bytes of a committed trace under `tests/data/`.
fn read(path: &str) -> Vec<u8> {
    // At run time: a test binary cargo reuses from a clone elsewhere (it hashes paths relative to
    // the workspace) would look where that clone was.
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let path = format!("{root}/tests/data/{path}");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn v1_0_instrumented() {
    let decoded = decode(&read("v1_0_instrumented.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 0));
    assert_eq!(t.metadata.host, "synth-node-01");
    assert_eq!(
        t.metadata.command,
        ["python", "train.py", "--batch-size=16"]
    );
    assert_eq!(t.metadata.gpus[0].total_memory_bytes, 80 << 30);
    assert_eq!((t.metadata.rank, t.metadata.world_size), (Some(0), Some(1)));
    let kinds: Vec<_> = t.counters.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [
            CounterKind::GpuUsed,
            CounterKind::GpuFree,
            CounterKind::ProcessGpu,
            CounterKind::Allocator(AllocatorQuantity::Reserved),
            CounterKind::HostRss,
            CounterKind::HostAvailable
        ]
    );
    // 30 training steps × 5 stages, plus 2 evaluations × 2 steps × 2 stages.
    assert_eq!(t.marks.len(), 30 * 5 + 2 * 2 * 2);
    assert_eq!(t.marks.iter().filter(|m| m.phase == Phase::Eval).count(), 8);
    assert!((0..t.marks.len()).all(|i| t.marks.allocator(i).is_some()));
    assert_eq!(t.marks[1].name.as_ref(), "post_forward");
    // 34 steps of 100 ms sampled every 20 ms, after a batch search of 9 trials (1…256) × 100 ms;
    // sample times carry up to ±40 µs of jitter.
    assert_eq!(t.samples.len(), 34 * 5);
    assert_eq!(t.batch_trials.len(), 9);
    assert!(t.samples.time_us(0).abs_diff(900_000) <= 40);
    let trials: Vec<_> = t
        .batch_trials
        .iter()
        .map(|b| (b.batch_size, b.outcome))
        .collect();
    assert_eq!(trials.last(), Some(&(256, TrialOutcome::Oom)));
    assert_eq!(trials[trials.len() - 2], (128, TrialOutcome::Fit));
    assert_eq!(t.components.len(), 1);
    assert_eq!(t.components[0].optimizer_state_bytes, 4 << 30);
    assert_eq!(t.gradients.len(), 30);
    assert_eq!(t.tensors.len(), 6);
    assert_eq!(t.exit.map(|e| e.status), Some(ExitStatus::Code(0)));
    assert!(t.end_us.is_some());
}

#[test]
fn v1_0_oom() {
    let decoded = decode(&read("v1_0_oom.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert!((0..t.marks.len()).all(|i| t.marks.allocator(i).is_none()));
    assert_eq!(t.ooms.len(), 1);
    let oom = &t.ooms[0];
    assert_eq!(oom.source, OomSource::Stderr);
    assert_eq!(oom.step, Some(12));
    assert_eq!(oom.stage.as_deref(), Some("post_forward"));
    assert!(oom.requested_bytes.unwrap() > oom.device_free_bytes.unwrap());
    assert!(oom.message.contains("CUDA out of memory"));
    assert_eq!(t.exit.map(|e| e.status), Some(ExitStatus::Code(1)));
}

#[test]
fn v1_0_truncated_decodes_its_prefix() {
    let full = decode(&read("v1_0_instrumented.oomt")).unwrap().trace;
    let decoded = decode(&read("v1_0_truncated.oomt")).unwrap();
    assert_eq!(decoded.warnings.len(), 1, "{:?}", decoded.warnings);
    assert!(decoded.warnings[0].message.starts_with("truncated after"));
    let t = decoded.trace;
    assert!(t.end_us.is_none());
    assert!(t.marks.len() > 50 && t.marks.len() < full.marks.len());
    assert_eq!(
        t.marks.iter_recorded().collect::<Vec<_>>(),
        full.marks
            .iter_recorded()
            .take(t.marks.len())
            .collect::<Vec<_>>()
    );
    assert_eq!(
        t.samples.times_us().to_vec(),
        full.samples.times_us().to_vec()[..t.samples.len()]
    );
}

#[test]
fn v1_1_host_error() {
    let decoded = decode(&read("v1_1_host_error.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 1));
    assert_eq!(t.samples.len(), 20);
    assert_eq!(t.marks.len(), 4);
    assert_eq!(t.ooms.len(), 1);
    assert_eq!(t.ooms[0].source, OomSource::HostError);
    assert!(t.ooms[0].source.is_host());
    assert_eq!(t.ooms[0].stage.as_deref(), Some("load_shard"));
    assert_eq!(t.exit.map(|e| e.status), Some(ExitStatus::Code(1)));
}

#[test]
fn v1_2_mark_senders() {
    let decoded = decode(&read("v1_2_mark_senders.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 2));
    assert_eq!(t.marks.len(), 3 * 2 * 2 + 1);
    let senders: Vec<_> = t.marks[..4].iter().map(|m| (m.pid, m.rank)).collect();
    assert_eq!(
        senders,
        [
            (Some(4101), Some(0)),
            (Some(4102), Some(1)),
            (Some(4101), Some(0)),
            (Some(4102), Some(1)),
        ]
    );
    let last = t.marks.last().unwrap();
    assert_eq!(
        (last.name.as_ref(), last.pid, last.rank),
        ("done", None, None)
    );
}

#[test]
fn v1_3_alive_at_oom() {
    let decoded = decode(&read("v1_3_alive_at_oom.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 3));
    assert_eq!(t.ooms.len(), 1);
    assert_eq!(t.ooms[0].source, OomSource::Allocator);
    let rows: Vec<_> = t
        .alive
        .iter()
        .map(|a| {
            (
                a.t_us,
                a.file.as_ref(),
                a.line,
                a.function.as_ref(),
                a.bytes,
                a.count,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (31_000, "/home/me/train.py", 20, "forward", 6 << 30, 12),
            (31_000, "/home/me/train.py", 55, "train_step", 512 << 20, 1),
            (31_000, "<unknown>", 0, "?", 256 << 20, 3),
        ]
    );
}

#[test]
fn v1_7_oom_allocator_state() {
    let decoded = decode(&read("v1_7_oom_allocator_state.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 7));
    let [oom] = t.ooms.as_slice() else {
        panic!("{:?}", t.ooms)
    };
    assert_eq!(oom.source, OomSource::Allocator);
    assert_eq!((oom.pid, oom.rank), (Some(5300), None));
    assert_eq!(
        (oom.allocated_bytes, oom.reserved_bytes),
        (Some(70 << 30), Some(78 << 30))
    );
    // The message says neither figure: the analysis reads them from the record, as the state at
    // the failure (no mark's snapshot stands in for them).
    assert_eq!(oom.message, "CUDA out of memory");
}

#[test]
fn v1_8_file_pages() {
    let decoded = decode(&read("v1_8_file_pages.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 8));
    let file = t.counter(CounterKind::HostRssFile, None).unwrap();
    assert_eq!(t.counters[file.0 as usize].name, "host.rss_file");
    assert_eq!(
        t.samples.value_at(file, 780_000),
        Some((60 << 20) + 39 * (8 << 20))
    );
    // RSS grows 8 MiB a step, all of it pages of the mapped file: no leak, and the verdict says
    // what the growth is.
}

#[test]
fn v1_9_held() {
    let decoded = decode(&read("v1_9_held.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 9));
    let [list, graph] = t.held.as_slice() else {
        panic!("{:?}", t.held)
    };
    assert_eq!((list.count, list.bytes), (8, 8 * (256 << 10)));
    // v1.9 said the holder's length and the graph row in words: read into fields.
    assert_eq!(
        (list.kind, &*list.holder, list.items),
        (HeldKind::Tensors, "list `val_losses`", Some(12))
    );
    assert_eq!((graph.kind, &*graph.holder), (HeldKind::Graph, "total_val"));
}

#[test]
fn v1_10_inputs() {
    let decoded = decode(&read("v1_10_inputs.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 10));
    let sent: Vec<(u64, u64, &str)> = t
        .inputs
        .iter()
        .map(|i| (i.step, i.elements, i.shape.as_ref()))
        .collect();
    assert_eq!(
        sent,
        [
            (0, 512, "8x64"),
            (9, 4096, "8x512"),
            (10, 512, "8x64"),
            (19, 4096, "8x512"),
            (20, 512, "8x64"),
            (29, 4096, "8x512"),
        ]
    );
}

#[test]
fn v1_10_optimizers() {
    let decoded = decode(&read("v1_10_optimizers.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 10));
    let [c] = t.components.as_slice() else {
        panic!("{:?}", t.components)
    };
    let optimizers: Vec<(&str, u64)> = c
        .optimizers
        .iter()
        .map(|o| (o.name.as_ref(), o.bytes))
        .collect();
    assert_eq!(
        optimizers,
        [("optimizerD:Adam", 4 << 20), ("Adam(Generator)", 2 << 20)]
    );
}

#[test]
fn v1_4_oom_kill() {
    let decoded = decode(&read("v1_4_oom_kill.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 4));
    let [kill] = t.oom_kills.as_slice() else {
        panic!("{:?}", t.oom_kills)
    };
    assert_eq!(
        (
            kill.t_us,
            kill.pid,
            kill.process.as_ref(),
            kill.cgroup.as_ref()
        ),
        (2_950_000, 4242, "python", "/kubepods/burstable/pod-1234")
    );
    assert!(kill.main_process && kill.from_kernel_log && kill.from_cgroup_counter && !kill.global);
    assert_eq!(
        (kill.rss_bytes, kill.limit_bytes),
        (Some(4 << 30), Some(4 << 30))
    );
    assert!(
        t.counters
            .iter()
            .any(|c| c.kind == CounterKind::HostPss && c.name == "host.pss")
    );
}

#[test]
fn older_versions_have_nothing_alive() {
    for name in [
        "v1_0_instrumented.oomt",
        "v1_0_oom.oomt",
        "v1_1_host_error.oomt",
        "v1_2_mark_senders.oomt",
    ] {
        assert!(
            decode(&read(name)).unwrap().trace.alive.is_empty(),
            "{name}"
        );
    }
}

#[test]
fn marks_of_older_versions_have_no_sender() {
    for name in ["v1_0_instrumented.oomt", "v1_1_host_error.oomt"] {
        let t = decode(&read(name)).unwrap().trace;
        assert!(t.marks.iter().all(|m| m.pid.is_none() && m.rank.is_none()));
    }
}

#[test]
fn v1_5_ranks() {
    let decoded = decode(&read("v1_5_ranks.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 5));
    assert_eq!(t.processes.len(), 4);
    assert_eq!(t.processes[3].role, oomscope_format::ProcessRole::Launcher);
    let per_rank: Vec<Option<u32>> = t
        .counters
        .iter()
        .filter(|c| c.kind == CounterKind::PidRss)
        .map(|c| c.pid)
        .collect();
    assert_eq!(per_rank, [Some(5001), Some(5002)]);
    assert_eq!((t.ooms[0].pid, t.ooms[0].rank), (Some(5002), Some(1)));
    assert_eq!(t.process_ends.len(), 2);
    assert!(t.process_ends[1].first_failure && t.process_ends[1].from_launcher);
}

#[test]
fn v1_6_launcher_kill() {
    let decoded = decode(&read("v1_6_launcher_kill.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 6));
    let [oom] = t.ooms.as_slice() else {
        panic!("{:?}", t.ooms)
    };
    assert_eq!(oom.source, OomSource::LauncherKill);
    assert_eq!(oom.rank, Some(1));
    assert!(oom.source.is_host());
    assert_eq!(t.notes.len(), 1);
}

#[test]
fn v1_6_pipeline_groups() {
    let decoded = decode(&read("v1_6_pipeline_groups.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    let groups: Vec<Option<&str>> = t.processes.iter().map(|p| p.group.as_deref()).collect();
    assert_eq!(groups, [Some("pp0"), Some("pp0"), Some("pp1"), Some("pp1")]);
}

#[test]
fn v1_11_hook_facts() {
    let decoded = decode(&read("v1_11_hook_facts.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    assert_eq!(t.format_version, (1, 11));
    let rows: Vec<(HeldKind, &str, &str, Option<u64>, u64)> = t
        .held
        .iter()
        .map(|h| (h.kind, &*h.shape, &*h.holder, h.items, h.count))
        .collect();
    assert_eq!(
        rows,
        [
            (
                HeldKind::Tensors,
                "scalar",
                "list `val_losses`",
                Some(12),
                8
            ),
            (HeldKind::Graph, "scalar", "total_val", None, 56),
            (
                HeldKind::Cycle,
                "1024x1024",
                "a `StepRecord` object (attribute `batch`)",
                None,
                8
            ),
            (HeldKind::Uncontained, "64x1024", "", None, 8),
        ]
    );
    let evals: Vec<(u64, bool, Option<u32>)> = t
        .eval_autograd
        .iter()
        .map(|e| (e.t_us, e.enabled, e.pid))
        .collect();
    assert_eq!(
        evals,
        [(300_000, false, Some(5700)), (420_000, true, Some(5700))]
    );
    let [snapshot] = t.saved_snapshots.as_slice() else {
        panic!("{:?}", t.saved_snapshots)
    };
    assert_eq!(
        (&*snapshot.file, snapshot.pid),
        ("run.oom-5700.pickle", Some(5700))
    );
    assert!(t.notes.is_empty());
}

#[test]
fn every_version_before_1_11_reads_without_the_new_records() {
    for name in [
        "v1_0_instrumented.oomt",
        "v1_3_alive_at_oom.oomt",
        "v1_9_held.oomt",
        "v1_10_inputs.oomt",
    ] {
        let t = decode(&read(name)).unwrap().trace;
        assert!(
            t.eval_autograd.is_empty() && t.saved_snapshots.is_empty(),
            "{name}"
        );
    }
}

#[test]
fn v1_11_mark_sampling() {
    let decoded = decode(&read("v1_11_mark_sampling.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    let [s, at_exit] = t.mark_sampling.as_slice() else {
        panic!("{:?}", t.mark_sampling)
    };
    assert_eq!(
        (s.every, s.from_step, s.iteration_us, s.last_step, s.pid),
        (8, 100, 2_500, None, Some(5800))
    );
    assert_eq!(at_exit.last_step, Some(299));
    // 100 steps marked, then steps 100-299 one in 8: 25; two marks each.
    assert_eq!(t.marks.len(), (100 + 25) * 2);
}

#[test]
fn v1_12_program_end() {
    let decoded = decode(&read("v1_12_program_end.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    let [end] = t.program_ends.as_slice() else {
        panic!("{:?}", t.program_ends)
    };
    assert_eq!((end.t_us, end.pid), (100_000, Some(5900)));
    assert_eq!(t.marks.len(), 10);
}

#[test]
fn v1_12_start_methods() {
    let decoded = decode(&read("v1_12_start_methods.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let got: Vec<_> = decoded
        .trace
        .processes
        .iter()
        .map(|p| (p.pid, p.start, p.group.as_deref().map(str::to_owned)))
        .collect();
    assert_eq!(
        got,
        [
            (6001, StartMethod::Fork, None),
            (6002, StartMethod::Spawn, Some("loaders".to_owned())),
            (6003, StartMethod::Forkserver, None),
            (6004, StartMethod::Forkserver, None),
            (6005, StartMethod::Unknown, None),
        ]
    );
}

#[test]
fn v1_13_held_clocks() {
    let decoded = decode(&read("v1_13_held_clocks.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    assert_eq!(decoded.trace.format_version, (1, 13));
    let got: Vec<_> = decoded
        .trace
        .held
        .iter()
        .map(|h| {
            (
                h.clock,
                h.from_step,
                h.to_step,
                h.kind,
                h.holder.to_string(),
                h.items,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                HeldClock::Step,
                4,
                12,
                HeldKind::Tensors,
                "list `losses`".to_owned(),
                Some(12)
            ),
            (
                HeldClock::Forward,
                10,
                18,
                HeldKind::Tensors,
                "list `kv_log`".to_owned(),
                Some(18)
            ),
            (
                HeldClock::Epoch,
                30,
                60,
                HeldKind::Objects,
                "list `history`".to_owned(),
                Some(2)
            ),
            (
                HeldClock::Eval,
                5,
                13,
                HeldKind::Tensors,
                "list `all_logits`".to_owned(),
                Some(13)
            ),
        ]
    );
    assert_eq!(decoded.trace.held[3].bytes, 8 << 23);
}

#[test]
fn v1_13_shm() {
    let decoded = decode(&read("v1_13_shm.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = &decoded.trace;
    let used = t.counter(CounterKind::ShmUsed, None).unwrap();
    let size = t.counter(CounterKind::ShmSize, None).unwrap();
    assert_eq!(t.counters[used.0 as usize].name, "host.shm_used");
    let rows = t.samples.times_us().len();
    assert_eq!(rows, 10);
    assert_eq!(t.samples.value(used, 0), Some(1 << 20));
    assert_eq!(t.samples.value(used, rows - 1), Some(63 << 20));
    assert_eq!(t.samples.value(size, 3), Some(64 << 20));
}

#[test]
fn v1_14_attached() {
    // Recorded by `collector attach` on a Python program keeping 6 MiB every 100 ms, started
    // without the collector half a second before (the program's own end, 13.8 s later).
    let decoded = decode(&read("v1_14_attached.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    let events: Vec<_> = t.attach.iter().map(|a| a.event).collect();
    assert_eq!(
        events,
        [
            oomscope_format::AttachEvent::Attached,
            oomscope_format::AttachEvent::ProcessEnded
        ]
    );
    let age = t.attach[0].process_age_us.unwrap();
    assert!((400_000..700_000).contains(&age), "{age}");
    assert_eq!(t.attach[1].process_age_us, None);
    assert!(t.exit.is_none() && t.end_us.is_some() && !t.failed());
    assert!(t.metadata.collector_version.ends_with("(attached)"));
    assert!(t.marks.is_empty());
    assert_eq!(t.samples.times_us().len(), 1383);
}
