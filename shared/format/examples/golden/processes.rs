//! The golden traces of format v1.0 to v1.7: training runs (instrumented, an OOM, a truncated
//! file), then an OOM of each source and the processes around a run (senders, workers in a
//! cgroup, torchrun's ranks, a Slurm launcher, pipeline groups). Apart from `main.rs` so that the
//! list of files stays short to read; later versions' traces are in `facts.rs`.

use oomscope_format::{
    AliveSite, CounterKind, ExitStatus, Metadata, Note, OomEvent, OomKill, OomSource, Phase,
    ProcessEnd, ProcessExit, ProcessInfo, ProcessRole, RankSource, Record, StageMark, StartMethod,
    TraceWriter, WriterOptions,
};
use oomscope_testkit::synth::TrainingRun;

/// The instrumented run: snapshots, components, gradients, tensors, batch search, eval, a leak.
pub fn instrumented() -> TrainingRun {
    TrainingRun {
        steps: 30,
        step_us: 100_000,
        sample_interval_us: 20_000,
        process_poll_us: 200_000,
        leak_bytes_per_step: 48 << 20,
        eval_every: Some(10),
        eval_steps: 2,
        eval_retained_bytes: 512 << 20,
        batch_search: true,
        tensor_stats_every: 10,
        writer: WriterOptions {
            flush_interval_us: 250_000,
            ..WriterOptions::default()
        },
        ..TrainingRun::default()
    }
}

/// A plain run (no snapshots) that dies of OOM at step 12.
pub fn oom() -> TrainingRun {
    TrainingRun {
        steps: 20,
        step_us: 100_000,
        sample_interval_us: 20_000,
        batch_size: 64,
        activation_bytes_per_sample: 1 << 30,
        oom_at_step: Some(12),
        leak_bytes_per_step: 1 << 30,
        allocator_stats: false,
        ..TrainingRun::default()
    }
}

/// v1.1: a CPU-only data-loading run that dies of a host allocation failure (OOM source 5).
pub fn host_error() -> Vec<u8> {
    let metadata = Metadata {
        host: "cpu-node".into(),
        pid: 77,
        command: vec!["python".into(), "prep.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 100_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    let available = w
        .declare_counter(CounterKind::HostAvailable, None)
        .expect("in memory");
    for i in 0..20u64 {
        let used = (1 + i) << 30;
        w.sample(i * 100_000, &[(rss, used), (available, (24 << 30) - used)])
            .expect("in memory");
        if i % 5 == 0 {
            w.write(&Record::Mark(StageMark {
                t_us: i * 100_000,
                name: "load_shard".into(),
                step: i / 5,
                phase: Phase::Train,
                ..StageMark::default()
            }))
            .expect("in memory");
        }
    }
    w.write(&Record::Oom(OomEvent {
        t_us: 1_950_000,
        source: OomSource::HostError,
        stage: Some("load_shard".into()),
        step: Some(3),
        requested_bytes: None,
        device: None,
        device_free_bytes: None,
        device_total_bytes: None,
        message: "OSError: [Errno 12] Cannot allocate memory".into(),
        pid: None,
        rank: None,
        allocated_bytes: None,
        reserved_bytes: None,
    }))
    .expect("in memory");
    w.write(&Record::Exit(ProcessExit {
        t_us: 1_960_000,
        status: ExitStatus::Code(1),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(1_960_000).expect("in memory")
}

/// v1.2: two torchrun workers under one collector, each mark naming its sender (pid and rank),
/// and one mark from a program that does not say who it is.
pub fn mark_senders() -> Vec<u8> {
    let metadata = Metadata {
        host: "gpu-node-3".into(),
        pid: 4100,
        command: vec![
            "torchrun".into(),
            "--nproc-per-node=2".into(),
            "train.py".into(),
        ],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    for step in 0..3u64 {
        let t_us = step * 100_000;
        w.sample(t_us, &[(rss, (4 + step) << 30)])
            .expect("in memory");
        for rank in 0..2u32 {
            for (offset, stage) in [(10_000, "post_forward"), (60_000, "post_backward")] {
                w.write(&Record::Mark(StageMark {
                    t_us: t_us + offset + u64::from(rank) * 1_000,
                    name: stage.into(),
                    step,
                    phase: Phase::Train,
                    pid: Some(4101 + rank),
                    rank: Some(rank),
                    ..StageMark::default()
                }))
                .expect("in memory");
            }
        }
    }
    w.write(&Record::Mark(StageMark {
        t_us: 300_000,
        name: "done".into(),
        step: 3,
        ..StageMark::default()
    }))
    .expect("in memory");
    w.write(&Record::Exit(ProcessExit {
        t_us: 310_000,
        status: ExitStatus::Code(0),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(310_000).expect("in memory")
}

/// A one-GPU Python run of process `pid` whose process `sender` marked step `step`'s forward
/// (`pre_forward` at 10 ms, `post_forward` at 20 ms): the start of the OOM traces below.
fn into_a_forward(pid: u32, sender: u32, step: u64) -> TraceWriter<Vec<u8>> {
    let metadata = Metadata {
        host: "gpu-node-1".into(),
        pid,
        command: vec!["python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    for (t_us, stage) in [(10_000, "pre_forward"), (20_000, "post_forward")] {
        w.write(&Record::Mark(StageMark {
            t_us,
            name: stage.into(),
            step,
            phase: Phase::Train,
            pid: Some(sender),
            ..StageMark::default()
        }))
        .expect("in memory");
    }
    w
}

/// v1.3: a GPU OOM reported by the zero-code hooks' allocator observer, then what was alive at
/// it by source line (`collector run --oom-snapshot`).
pub fn alive_at_oom() -> Vec<u8> {
    let mut w = into_a_forward(5100, 5101, 7);
    w.write(&Record::Oom(OomEvent {
        stage: Some("post_forward".into()),
        step: Some(7),
        requested_bytes: Some(2 << 30),
        device: Some(0),
        device_free_bytes: Some(1 << 30),
        device_total_bytes: Some(80 << 30),
        ..OomEvent::new(
            30_000,
            OomSource::Allocator,
            "CUDA out of memory (allocator observer). Tried to allocate 2147483648 bytes.".into(),
        )
    }))
    .expect("in memory");
    for (file, line, function, bytes, count) in [
        ("/home/me/train.py", 20, "forward", 6u64 << 30, 12u64),
        ("/home/me/train.py", 55, "train_step", 512 << 20, 1),
        ("<unknown>", 0, "?", 256 << 20, 3),
    ] {
        w.write(&Record::Alive(AliveSite {
            t_us: 31_000,
            file: file.into(),
            line,
            function: function.into(),
            bytes,
            count,
        }))
        .expect("in memory");
    }
    w.write(&Record::Exit(ProcessExit {
        t_us: 40_000,
        status: ExitStatus::Code(1),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(40_000).expect("in memory")
}

/// v1.4: a program with four forked workers in a 4 GiB memory cgroup, its PSS beside the summed
/// RSS (the workers share the parent's pages), killed by the kernel's OOM killer: the cgroup's
/// counter and the kernel log both say so.
pub fn oom_kill() -> Vec<u8> {
    let metadata = Metadata {
        host: "k8s-node-3".into(),
        pid: 4242,
        command: vec!["python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 100_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let declare =
        |w: &mut TraceWriter<Vec<u8>>, kind| w.declare_counter(kind, None).expect("in memory");
    let rss = declare(&mut w, CounterKind::HostRss);
    let available = declare(&mut w, CounterKind::HostAvailable);
    let pss = declare(&mut w, CounterKind::HostPss);
    for i in 0..30u64 {
        let own = (1 << 30) + i * (100 << 20);
        w.sample(
            i * 100_000,
            &[(rss, own * 5), (pss, own), (available, (64 << 30) - own)],
        )
        .expect("in memory");
        if i % 10 == 0 {
            w.write(&Record::Mark(StageMark {
                t_us: i * 100_000,
                name: "pre_forward".into(),
                step: i / 10,
                phase: Phase::Train,
                ..StageMark::default()
            }))
            .expect("in memory");
        }
    }
    w.write(&Record::OomKill(OomKill {
        t_us: 2_950_000,
        pid: 4242,
        process: "python".into(),
        main_process: true,
        from_kernel_log: true,
        from_cgroup_counter: true,
        global: false,
        rss_bytes: Some(4 << 30),
        limit_bytes: Some(4 << 30),
        cgroup: "/kubepods/burstable/pod-1234".into(),
    }))
    .expect("in memory");
    w.write(&Record::Exit(ProcessExit {
        t_us: 2_960_000,
        status: ExitStatus::Signal(9),
        probable_host_oom: true,
    }))
    .expect("in memory");
    w.finish(2_960_000).expect("in memory")
}

/// v1.5: torchrun's agent with two ranks: who each process is, each rank's RSS, marks of both
/// ranks, rank 1 running out of host memory at step 3 (its `[rank1]:` traceback) and torchrun's
/// summary of how both ended.
pub fn ranks() -> Vec<u8> {
    let metadata = Metadata {
        host: "gpu-node-1".into(),
        pid: 5000,
        command: vec![
            "torchrun".into(),
            "--nproc-per-node".into(),
            "2".into(),
            "train.py".into(),
        ],
        collector_version: "golden".into(),
        sample_interval_us: 100_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    let process = |pid, parent, role, rank: Option<u32>| {
        Record::Process(ProcessInfo {
            t_us: 50_000,
            pid,
            parent_pid: parent,
            name: if pid == 5000 {
                "torchrun"
            } else {
                "pt_main_thread"
            }
            .into(),
            role,
            rank_from: if rank.is_some() {
                RankSource::Environment
            } else {
                RankSource::None
            },
            rank,
            local_rank: rank,
            world_size: rank.map(|_| 2),
            restart: rank.map(|_| 0),
            group: None,
            start: StartMethod::Unknown,
        })
    };
    w.write(&process(5000, None, ProcessRole::Program, None))
        .expect("in memory");
    for (pid, rank) in [(5001, 0), (5002, 1)] {
        w.write(&process(pid, Some(5000), ProcessRole::Rank, Some(rank)))
            .expect("in memory");
    }
    w.write(&process(5000, None, ProcessRole::Launcher, None))
        .expect("in memory");
    let per_rank = [
        w.declare_process_counter(CounterKind::PidRss, None, 5001)
            .expect("in memory"),
        w.declare_process_counter(CounterKind::PidRss, None, 5002)
            .expect("in memory"),
    ];
    for i in 0..40u64 {
        let t_us = 100_000 + i * 100_000;
        let base = 600u64 << 20;
        let rank1 = base + (300 << 20);
        w.sample(
            t_us,
            &[
                (rss, 2 * base + (300 << 20)),
                (per_rank[0], base),
                (per_rank[1], rank1),
            ],
        )
        .expect("in memory");
        for (pid, rank) in [(5001, 0), (5002, 1)] {
            let step = i / 10;
            if rank == 1 && step == 3 {
                continue;
            }
            if i % 10 == 0 {
                w.write(&Record::Mark(StageMark {
                    t_us: t_us + u64::from(rank),
                    name: "pre_forward".into(),
                    step,
                    phase: Phase::Train,
                    pid: Some(pid),
                    rank: Some(rank),
                    ..StageMark::default()
                }))
                .expect("in memory");
            }
        }
    }
    w.write(&Record::Oom(OomEvent {
        t_us: 3_150_000,
        source: OomSource::HostError,
        stage: Some("pre_forward".into()),
        step: Some(3),
        requested_bytes: Some(1 << 50),
        device: None,
        device_free_bytes: None,
        device_total_bytes: None,
        message: "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1125899906842624 bytes. Error code 12 (Cannot allocate memory)".into(),
        pid: Some(5002),
        rank: Some(1),
        allocated_bytes: None,
        reserved_bytes: None,
    }))
    .expect("in memory");
    for (pid, rank, status, first) in [
        (5001, 0, ExitStatus::Signal(15), false),
        (5002, 1, ExitStatus::Code(1), true),
    ] {
        w.write(&Record::ProcessEnd(ProcessEnd {
            t_us: 4_400_000,
            pid,
            rank: Some(rank),
            local_rank: Some(rank),
            status: Some(status),
            first_failure: first,
            from_launcher: true,
        }))
        .expect("in memory");
    }
    w.write(&Record::Exit(ProcessExit {
        t_us: 4_500_000,
        status: ExitStatus::Code(1),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(4_500_000).expect("in memory")
}

/// v1.6: `collector run -- srun …` on a batch node: Slurm says it killed task 1 for memory
/// (OOM source 6, the task as its rank) and that the step counted one oom_kill event (a NOTE);
/// the task's end as its launcher states it (PROCESS_END).
pub fn launcher_kill() -> Vec<u8> {
    let metadata = Metadata {
        host: "login-2".into(),
        pid: 6000,
        command: vec!["srun".into(), "python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 100_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    for i in 0..20u64 {
        w.sample(100_000 + i * 100_000, &[(rss, 12 << 20)])
            .expect("in memory");
    }
    let line = "srun: error: gpu-a-12: task 1: Out Of Memory";
    let mut oom = OomEvent::new(2_050_000, OomSource::LauncherKill, line.into());
    oom.rank = Some(1);
    w.write(&Record::Oom(oom)).expect("in memory");
    w.write(&Record::ProcessEnd(ProcessEnd {
        t_us: 2_050_000,
        rank: Some(1),
        status: Some(ExitStatus::Signal(9)),
        first_failure: true,
        from_launcher: true,
        ..ProcessEnd::default()
    }))
    .expect("in memory");
    w.write(&Record::Note(Note {
        t_us: 2_040_000,
        text: "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM Killed.".into(),
    }))
    .expect("in memory");
    w.finish(2_100_000).expect("in memory")
}

/// v1.6: four ranks in two pipeline stages (PROCESS records naming their group): the first
/// stage holds 400 MiB more by design, and within it rank 1 holds 200 MiB more than rank 0.
pub fn pipeline_groups() -> Vec<u8> {
    let metadata = Metadata {
        host: "gpu-node-2".into(),
        pid: 7000,
        command: vec![
            "torchrun".into(),
            "--nproc-per-node".into(),
            "4".into(),
            "pp.py".into(),
        ],
        collector_version: "golden".into(),
        sample_interval_us: 100_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let mib = [1000u64, 1200, 600, 600];
    let mut counters = Vec::new();
    for (rank, _) in mib.iter().enumerate() {
        let pid = 7001 + rank as u32;
        w.write(&Record::Process(ProcessInfo {
            t_us: 50_000,
            pid,
            parent_pid: Some(7000),
            name: "pt_main_thread".into(),
            role: ProcessRole::Rank,
            rank_from: RankSource::Message,
            rank: Some(rank as u32),
            local_rank: Some(rank as u32),
            world_size: Some(4),
            restart: Some(0),
            group: Some(if rank < 2 { "pp0" } else { "pp1" }.into()),
            start: StartMethod::Unknown,
        }))
        .expect("in memory");
        counters.push(
            w.declare_process_counter(CounterKind::PidRss, None, pid)
                .expect("in memory"),
        );
    }
    for step in 0..5u64 {
        let t_us = 100_000 + step * 100_000;
        let row: Vec<_> = counters
            .iter()
            .zip(mib)
            .map(|(id, m)| (*id, m << 20))
            .collect();
        w.sample(t_us, &row).expect("in memory");
        for rank in 0..4u32 {
            w.write(&Record::Mark(StageMark {
                t_us: t_us + 1_000 + u64::from(rank),
                name: "post_forward".into(),
                step,
                pid: Some(7001 + rank),
                rank: Some(rank),
                ..StageMark::default()
            }))
            .expect("in memory");
        }
    }
    w.finish(700_000).expect("in memory")
}

/// v1.7: an OOM the allocator's observer reported with the allocator's state at the failure as
/// numbers (allocated, reserved), after the pid and rank; its message says neither.
pub fn oom_allocator_state() -> Vec<u8> {
    let mut w = into_a_forward(5300, 5300, 3);
    w.write(&Record::Oom(OomEvent {
        stage: Some("post_forward".into()),
        step: Some(3),
        requested_bytes: Some(3 << 30),
        device: Some(0),
        device_free_bytes: Some(1 << 30),
        device_total_bytes: Some(80 << 30),
        pid: Some(5300),
        allocated_bytes: Some(70 << 30),
        reserved_bytes: Some(78 << 30),
        ..OomEvent::new(30_000, OomSource::Allocator, "CUDA out of memory".into())
    }))
    .expect("in memory");
    w.write(&Record::Exit(ProcessExit {
        t_us: 40_000,
        status: ExitStatus::Code(1),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(40_000).expect("in memory")
}
