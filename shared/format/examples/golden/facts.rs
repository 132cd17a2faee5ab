//! The golden traces of format v1.8 onward: what later versions say of what the memory is and
//! who holds it (file-backed pages, held tensors and their clocks, inputs, optimizers, the hooks'
//! facts, sampled marks, a program's end, workers' start methods, `/dev/shm`). Apart from
//! `processes.rs` (v1.0 to v1.7) so that each reads in one sitting; a new version's traces go here.

use oomscope_format::{
    ComponentBreakdown, CounterKind, EvalAutograd, ExitStatus, HeldClock, HeldKind, HeldTensors,
    MarkSampling, Metadata, NamedBytes, Phase, ProcessExit, ProcessInfo, ProcessRole, ProgramEnd,
    Record, SavedSnapshot, StageMark, StartMethod, StepInput, TraceWriter,
};

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
