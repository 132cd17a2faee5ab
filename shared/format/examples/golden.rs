//! Regenerates the golden traces in `shared/format/tests/data/`.
//!
//! `cargo run -p oomscope-format --example golden -- shared/format/tests/data`
//!
//! Golden files are written ONCE per format version and then committed and never rewritten:
//! `shared/format/tests/golden.rs` decodes them so that a later change cannot silently break old traces. Only
//! run this to add the files of a NEW version (it refuses to overwrite existing files).

// A developer tool: it reports what it wrote on stderr.
#![allow(clippy::print_stderr)]

use std::path::PathBuf;

use oomscope_format::{
    AliveSite, ComponentBreakdown, CounterKind, EvalAutograd, ExitStatus, HeldClock, HeldKind,
    HeldTensors, MarkSampling, Metadata, NamedBytes, Note, OomEvent, OomKill, OomSource, Phase,
    ProcessEnd, ProcessExit, ProcessInfo, ProcessRole, ProgramEnd, RankSource, Record,
    SavedSnapshot, StageMark, StartMethod, StepInput, TraceWriter, WriterOptions,
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

/// v1.8: a CPU loop reading a memory-mapped dataset: host RSS grows 8 MiB a step, every byte of
/// it resident pages of the mapped file (`host.rss_file`); the anonymous part stays flat.
pub fn file_pages() -> Vec<u8> {
    let metadata = Metadata {
        host: "gpu-node-1".into(),
        pid: 5400,
        command: vec!["python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    let file = w
        .declare_counter(CounterKind::HostRssFile, None)
        .expect("in memory");
    let available = w
        .declare_counter(CounterKind::HostAvailable, None)
        .expect("in memory");
    let anon: u64 = 700 << 20;
    for step in 0..40u64 {
        let t_us = step * 20_000;
        let mapped = (60 << 20) + step * (8 << 20);
        w.sample(
            t_us,
            &[(rss, anon + mapped), (file, mapped), (available, 16 << 30)],
        )
        .expect("in memory");
        for (k, stage) in ["pre_forward", "post_forward"].into_iter().enumerate() {
            w.write(&Record::Mark(StageMark {
                t_us: t_us + 1_000 + k as u64 * 5_000,
                name: stage.into(),
                step,
                phase: Phase::Train,
                pid: Some(5400),
                ..StageMark::default()
            }))
            .expect("in memory");
        }
    }
    w.write(&Record::Exit(ProcessExit {
        t_us: 800_000,
        status: ExitStatus::Code(0),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(800_000).expect("in memory")
}

/// Format v1.9: a CPU loop keeping each step's validation loss in a list (RSS +256 KiB a step)
/// and the hooks' two counts of live tensors: the losses, held by the list `val_losses`, and a
/// running total's autograd graph.
pub fn held() -> Vec<u8> {
    let metadata = Metadata {
        host: "gpu-node-1".into(),
        pid: 5500,
        command: vec!["python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    for step in 0..30u64 {
        let t_us = step * 20_000;
        w.sample(t_us, &[(rss, (700 << 20) + step * (256 << 10))])
            .expect("in memory");
        w.write(&Record::Mark(StageMark {
            t_us: t_us + 1_000,
            name: "post_optimizer_step".into(),
            step,
            phase: Phase::Train,
            pid: Some(5500),
            ..StageMark::default()
        }))
        .expect("in memory");
    }
    for held in [
        HeldTensors {
            t_us: 250_000,
            from_step: 4,
            to_step: 12,
            device: "cpu".into(),
            dtype: "float32".into(),
            shape: "scalar".into(),
            grad_fn: "MseLossBackward0".into(),
            count: 8,
            bytes: 8 * (256 << 10),
            holder: "list `val_losses` (12 items)".into(),
            ..HeldTensors::default()
        },
        HeldTensors {
            t_us: 250_000,
            from_step: 4,
            to_step: 12,
            device: "cpu".into(),
            dtype: "float32".into(),
            // (v1.9 said a graph row in its shape: v1.11's writer adds the kind, which this
            // file predates.)
            shape: "graph".into(),
            grad_fn: "AddBackward0".into(),
            count: 56,
            bytes: 0,
            holder: "total_val".into(),
            ..HeldTensors::default()
        },
    ] {
        w.write(&Record::Held(held)).expect("in memory");
    }
    w.write(&Record::Exit(ProcessExit {
        t_us: 600_000,
        status: ExitStatus::Code(0),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(600_000).expect("in memory")
}

/// Format v1.10: a CPU language-model loop over batches of 8 sequences, 64 tokens long but every
/// 10th step 512 (the INPUT records, sent when the shape changes), whose memory at `post_forward`
/// rises 40 KiB a token.
pub fn inputs() -> Vec<u8> {
    let metadata = Metadata {
        host: "gpu-node-1".into(),
        pid: 5600,
        command: vec!["python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    let mut last_shape = 0;
    for step in 0..30u64 {
        let t_us = step * 30_000;
        let length: u64 = if step % 10 == 9 { 512 } else { 64 };
        if length != last_shape {
            last_shape = length;
            w.write(&Record::Input(StepInput {
                t_us: t_us + 500,
                step,
                elements: 8 * length,
                shape: format!("8x{length}").into(),
                pid: None,
            }))
            .expect("in memory");
        }
        let base: u64 = 600 << 20;
        let activations = 8 * length * (40 << 10);
        for (k, (stage, bytes)) in [
            ("pre_forward", base),
            ("post_forward", base + activations),
            ("post_optimizer_step", base),
        ]
        .into_iter()
        .enumerate()
        {
            let at = t_us + 1_000 + k as u64 * 5_000;
            w.sample(at, &[(rss, bytes)]).expect("in memory");
            w.write(&Record::Mark(StageMark {
                t_us: at,
                name: stage.into(),
                step,
                phase: Phase::Train,
                pid: Some(5600),
                ..StageMark::default()
            }))
            .expect("in memory");
        }
    }
    w.write(&Record::Exit(ProcessExit {
        t_us: 900_000,
        status: ExitStatus::Code(0),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(900_000).expect("in memory")
}

/// Format v1.10: a GAN's breakdown with its two optimizers' state apart, named as the hooks
/// name them (a variable and a class; a class and the model it trains).
pub fn optimizers() -> Vec<u8> {
    let metadata = Metadata {
        host: "gpu-node-1".into(),
        pid: 5700,
        command: vec!["python".into(), "dcgan.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    for step in 0..4u64 {
        let t_us = step * 20_000;
        w.sample(t_us, &[(rss, 700 << 20)]).expect("in memory");
        w.write(&Record::Mark(StageMark {
            t_us: t_us + 1_000,
            name: "post_optimizer_step".into(),
            step,
            phase: Phase::Train,
            pid: Some(5700),
            ..StageMark::default()
        }))
        .expect("in memory");
    }
    w.write(&Record::Components(ComponentBreakdown {
        t_us: 2_000,
        step: 0,
        parameters_bytes: 3 << 20,
        gradients_bytes: 3 << 20,
        optimizer_state_bytes: 6 << 20,
        optimizers: vec![
            NamedBytes {
                name: "optimizerD:Adam".into(),
                bytes: 4 << 20,
            },
            NamedBytes {
                name: "Adam(Generator)".into(),
                bytes: 2 << 20,
            },
        ],
        ..ComponentBreakdown::default()
    }))
    .expect("in memory");
    w.write(&Record::Exit(ProcessExit {
        t_us: 100_000,
        status: ExitStatus::Code(0),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(100_000).expect("in memory")
}

/// Format v1.11: the zero-code hooks' facts as fields: a HELD row of each kind (tensors a list
/// holds, with its item count; a running total's graph, with the tensor's own shape; tensors
/// only a reference cycle holds; tensors no Python container holds), whether evals ran with
/// autograd (off, then on), and the memory snapshot saved at an OOM.
pub fn hook_facts() -> Vec<u8> {
    let metadata = Metadata {
        host: "gpu-node-1".into(),
        pid: 5700,
        command: vec!["python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    for step in 0..30u64 {
        let t_us = step * 20_000;
        w.sample(t_us, &[(rss, (700 << 20) + step * (256 << 10))])
            .expect("in memory");
        w.write(&Record::Mark(StageMark {
            t_us: t_us + 1_000,
            name: "post_optimizer_step".into(),
            step,
            phase: Phase::Train,
            pid: Some(5700),
            ..StageMark::default()
        }))
        .expect("in memory");
    }
    let row = |kind, shape: &str, grad_fn: &str, count, bytes, holder: &str, items| HeldTensors {
        t_us: 250_000,
        from_step: 4,
        to_step: 12,
        kind,
        device: "cpu".into(),
        dtype: "float32".into(),
        shape: shape.into(),
        grad_fn: grad_fn.into(),
        count,
        bytes,
        holder: holder.into(),
        items,
        ..HeldTensors::default()
    };
    for held in [
        row(
            HeldKind::Tensors,
            "scalar",
            "MseLossBackward0",
            8,
            8 * (256 << 10),
            "list `val_losses`",
            Some(12),
        ),
        row(
            HeldKind::Graph,
            "scalar",
            "AddBackward0",
            56,
            0,
            "total_val",
            None,
        ),
        row(
            HeldKind::Cycle,
            "1024x1024",
            "",
            8,
            8 << 22,
            "a `StepRecord` object (attribute `batch`)",
            None,
        ),
        row(
            HeldKind::Uncontained,
            "64x1024",
            "ReluBackward0",
            8,
            8 << 18,
            "",
            None,
        ),
    ] {
        w.write(&Record::Held(held)).expect("in memory");
    }
    for (t_us, enabled) in [(300_000, false), (420_000, true)] {
        w.write(&Record::EvalAutograd(EvalAutograd {
            t_us,
            enabled,
            pid: Some(5700),
        }))
        .expect("in memory");
    }
    w.write(&Record::SavedSnapshot(SavedSnapshot {
        t_us: 590_000,
        file: "run.oom-5700.pickle".into(),
        pid: Some(5700),
    }))
    .expect("in memory");
    w.write(&Record::Exit(ProcessExit {
        t_us: 600_000,
        status: ExitStatus::Code(1),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(600_000).expect("in memory")
}

/// Format v1.11: a fast loop the hooks marked every iteration for its first 100 and one in 8
/// after (MARK_SAMPLING), 300 steps of 2.5 ms.
pub fn mark_sampling() -> Vec<u8> {
    let metadata = Metadata {
        host: "cpu-node".into(),
        pid: 5800,
        command: vec!["python".into(), "fast_loop.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    for step in 0..300u64 {
        let t_us = step * 2_500;
        if step % 4 == 0 {
            w.sample(t_us, &[(rss, 500 << 20)]).expect("in memory");
        }
        if step == 100 {
            w.write(&Record::MarkSampling(MarkSampling {
                t_us,
                every: 8,
                from_step: 100,
                iteration_us: 2_500,
                last_step: None,
                pid: Some(5800),
            }))
            .expect("in memory");
        }
        if step < 100 || step % 8 == 4 {
            for (i, stage) in ["pre_forward", "post_forward"].into_iter().enumerate() {
                w.write(&Record::Mark(StageMark {
                    t_us: t_us + 500 * i as u64,
                    name: stage.into(),
                    step,
                    phase: Phase::Train,
                    pid: Some(5800),
                    ..StageMark::default()
                }))
                .expect("in memory");
            }
        }
    }
    // As the process exits: the loop's last step (the last marked one is 292).
    w.write(&Record::MarkSampling(MarkSampling {
        t_us: 749_000,
        every: 8,
        from_step: 100,
        iteration_us: 2_500,
        last_step: Some(299),
        pid: Some(5800),
    }))
    .expect("in memory");
    w.write(&Record::Exit(ProcessExit {
        t_us: 750_000,
        status: ExitStatus::Code(0),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(750_000).expect("in memory")
}

/// Format v1.12: a short loop whose program ended (PROGRAM_END) 100 ms before its process did,
/// the host's memory rising in the interpreter's shutdown above anything the loop reached.
pub fn program_end() -> Vec<u8> {
    let metadata = Metadata {
        host: "cpu-node".into(),
        pid: 5900,
        command: vec!["python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    for step in 0..10u64 {
        let t_us = step * 10_000;
        w.sample(t_us, &[(rss, (600 + step) << 20)])
            .expect("in memory");
        w.write(&Record::Mark(StageMark {
            t_us: t_us + 1_000,
            name: "pre_forward".into(),
            step,
            phase: Phase::Train,
            pid: Some(5900),
            ..StageMark::default()
        }))
        .expect("in memory");
    }
    w.write(&Record::ProgramEnd(ProgramEnd {
        t_us: 100_000,
        pid: Some(5900),
    }))
    .expect("in memory");
    // The interpreter's shutdown: 700 MiB, above the loop's 609 MiB.
    w.sample(150_000, &[(rss, 700 << 20)]).expect("in memory");
    w.write(&Record::Exit(ProcessExit {
        t_us: 200_000,
        status: ExitStatus::Code(0),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(200_000).expect("in memory")
}

/// Format v1.12: a program's DataLoader workers started three ways (PROCESS's start method: a
/// forked one, a spawned one, a fork server and its child), the spawned one with a group named
/// too.
pub fn start_methods() -> Vec<u8> {
    let metadata = Metadata {
        host: "cpu-node".into(),
        pid: 6000,
        command: vec!["python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let process = |pid: u32, parent: u32, start: StartMethod| {
        Record::Process(ProcessInfo {
            t_us: u64::from(pid - 6000) * 1_000,
            pid,
            parent_pid: Some(parent),
            name: "python".into(),
            role: ProcessRole::Other,
            start,
            group: (start == StartMethod::Spawn).then(|| "loaders".into()),
            ..ProcessInfo::default()
        })
    };
    for record in [
        process(6001, 6000, StartMethod::Fork),
        process(6002, 6000, StartMethod::Spawn),
        process(6003, 6000, StartMethod::Forkserver),
        process(6004, 6003, StartMethod::Forkserver),
        process(6005, 6000, StartMethod::Unknown),
    ] {
        w.write(&record).expect("in memory");
    }
    w.write(&Record::Exit(ProcessExit {
        t_us: 10_000,
        status: ExitStatus::Code(0),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(10_000).expect("in memory")
}

/// Format v1.13: HELD rows on each clock: a list that gained a tensor a step over steps 4 to 12,
/// a serving program's list over forwards 10 to 18, a history list that gained one
/// `OrderedDict` between the epoch starts at steps 30 and 60, an eval's list that gained a batch's
/// logits each batch over its batches 5 to 13 (in the eval at step 99), then a kill by the
/// kernel's OOM killer during that eval.
pub fn held_clocks() -> Vec<u8> {
    let metadata = Metadata {
        host: "cpu-node".into(),
        pid: 6100,
        command: vec!["python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let row = |t_us,
               clock,
               from_step,
               to_step,
               kind,
               dtype: &str,
               shape: &str,
               count,
               bytes,
               holder: &str,
               items| {
        Record::Held(HeldTensors {
            t_us,
            from_step,
            to_step,
            kind,
            clock,
            device: if kind == HeldKind::Objects { "" } else { "cpu" }.into(),
            dtype: dtype.into(),
            shape: shape.into(),
            count,
            bytes,
            holder: holder.into(),
            items: Some(items),
            ..HeldTensors::default()
        })
    };
    for record in [
        row(
            100_000,
            HeldClock::Step,
            4,
            12,
            HeldKind::Tensors,
            "float32",
            "scalar",
            8,
            8 * 4,
            "list `losses`",
            12,
        ),
        row(
            200_000,
            HeldClock::Forward,
            10,
            18,
            HeldKind::Tensors,
            "float32",
            "4x39x512",
            8,
            8 * 319_488,
            "list `kv_log`",
            18,
        ),
        row(
            300_000,
            HeldClock::Epoch,
            30,
            60,
            HeldKind::Objects,
            "OrderedDict",
            "",
            1,
            32 << 20,
            "list `history`",
            2,
        ),
        row(
            400_000,
            HeldClock::Eval,
            5,
            13,
            HeldKind::Tensors,
            "float32",
            "64x32768",
            8,
            8 << 23,
            "list `all_logits`",
            13,
        ),
    ] {
        w.write(&record).expect("in memory");
    }
    w.write(&Record::Exit(ProcessExit {
        t_us: 450_000,
        status: ExitStatus::Signal(9),
        probable_host_oom: true,
    }))
    .expect("in memory");
    w.finish(450_000).expect("in memory")
}

/// Format v1.13: `/dev/shm` sampled (counter kinds 20 and 21): a 64 MiB tmpfs holding 1 MiB
/// when the run begins, filling by 8 MiB a tick to 63 MiB as DataLoader workers hand over
/// batches the main process does not take, then the run failing (exit 1).
pub fn shm() -> Vec<u8> {
    let metadata = Metadata {
        host: "container".into(),
        pid: 6200,
        command: vec!["python".into(), "train.py".into()],
        collector_version: "golden".into(),
        sample_interval_us: 10_000,
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata).expect("in memory");
    let rss = w
        .declare_counter(CounterKind::HostRss, None)
        .expect("in memory");
    let used = w
        .declare_counter(CounterKind::ShmUsed, None)
        .expect("in memory");
    let size = w
        .declare_counter(CounterKind::ShmSize, None)
        .expect("in memory");
    for tick in 0..10u64 {
        let in_shm = ((1 + 8 * tick) << 20).min(63 << 20);
        w.sample(
            tick * 10_000,
            &[(rss, 600 << 20), (used, in_shm), (size, 64 << 20)],
        )
        .expect("in memory");
    }
    w.write(&Record::Exit(ProcessExit {
        t_us: 100_000,
        status: ExitStatus::Code(1),
        probable_host_oom: false,
    }))
    .expect("in memory");
    w.finish(100_000).expect("in memory")
}

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "shared/format/tests/data".into()),
    );
    let instrumented = instrumented().to_bytes();
    let files = [
        ("v1_0_instrumented.oomt", instrumented.clone()),
        ("v1_0_oom.oomt", oom().to_bytes()),
        // Cut in the middle of a chunk, as a killed recorder leaves it.
        (
            "v1_0_truncated.oomt",
            instrumented[..instrumented.len() * 2 / 3].to_vec(),
        ),
        ("v1_1_host_error.oomt", host_error()),
        ("v1_2_mark_senders.oomt", mark_senders()),
        ("v1_3_alive_at_oom.oomt", alive_at_oom()),
        ("v1_4_oom_kill.oomt", oom_kill()),
        ("v1_5_ranks.oomt", ranks()),
        ("v1_6_launcher_kill.oomt", launcher_kill()),
        ("v1_6_pipeline_groups.oomt", pipeline_groups()),
        ("v1_7_oom_allocator_state.oomt", oom_allocator_state()),
        ("v1_8_file_pages.oomt", file_pages()),
        ("v1_9_held.oomt", held()),
        ("v1_10_inputs.oomt", inputs()),
        ("v1_10_optimizers.oomt", optimizers()),
        ("v1_11_hook_facts.oomt", hook_facts()),
        ("v1_11_mark_sampling.oomt", mark_sampling()),
        ("v1_12_program_end.oomt", program_end()),
        ("v1_12_start_methods.oomt", start_methods()),
        ("v1_13_held_clocks.oomt", held_clocks()),
        ("v1_13_shm.oomt", shm()),
    ];
    for (name, bytes) in files {
        let path = dir.join(name);
        if path.exists() {
            eprintln!(
                "{} exists: golden files are never rewritten",
                path.display()
            );
            continue;
        }
        std::fs::write(&path, bytes)?;
        eprintln!(
            "wrote {} ({} bytes)",
            path.display(),
            std::fs::metadata(&path)?.len()
        );
    }
    Ok(())
}
