//! Golden traces: files written by format v1.0 and committed. Whatever the reader becomes, these
//! must keep decoding to the same facts. Never regenerate them; add new files for new versions.

use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::{CounterKind, ExitStatus, OomSource, Phase, TrialOutcome, decode};

mod support;

use support::data as read;

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
            CounterKind::AllocReserved,
            CounterKind::HostRss,
            CounterKind::HostAvailable
        ]
    );
    // 30 training steps × 5 stages, plus 2 evaluations × 2 steps × 2 stages.
    assert_eq!(t.marks.len(), 30 * 5 + 2 * 2 * 2);
    assert_eq!(t.marks.iter().filter(|m| m.phase == Phase::Eval).count(), 8);
    assert!(t.marks.iter().all(|m| m.snapshot.is_some()));
    assert_eq!(t.marks[1].name.as_ref(), "post_forward");
    // 34 steps of 100 ms sampled every 20 ms, after a batch search of 9 trials (1…256) × 100 ms;
    // sample times carry up to ±40 µs of jitter.
    assert_eq!(t.samples.len(), 34 * 5);
    assert_eq!(t.batch_trials.len(), 9);
    assert!(t.samples.times_us()[0].abs_diff(900_000) <= 40);
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
    assert!(t.marks.iter().all(|m| m.snapshot.is_none()));
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
    assert_eq!(t.marks[..], full.marks[..t.marks.len()]);
    assert_eq!(
        t.samples.times_us(),
        &full.samples.times_us()[..t.samples.len()]
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
    let analysis = analyze(&t, &AnalysisOptions::default());
    assert_eq!(analysis.ooms[0].alive.len(), 3);
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
    let analysis = analyze(&t, &AnalysisOptions::default());
    let o = &analysis.ooms[0];
    assert_eq!(
        (
            o.allocated_bytes,
            o.reserved_bytes,
            o.allocator_mark_stage.as_deref()
        ),
        (Some(70 << 30), Some(78 << 30), None)
    );
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
    let analysis = analyze(&t, &AnalysisOptions::default());
    assert!(analysis.findings.is_empty(), "{:#?}", analysis.findings);
    let fit = analysis
        .leak_fits
        .iter()
        .find(|f| f.stage == "post_forward")
        .unwrap();
    assert!(!fit.is_leak);
    assert!((fit.slope_bytes_per_step - f64::from(8 << 20)).abs() < 1.0);
    assert_eq!(fit.file_backed_growth_bytes, Some(fit.growth_bytes));
    let text = oomscope_analysis::render::summary::render(&t, &analysis);
    assert!(
        text.contains("of it resident pages of memory-mapped files"),
        "{text}"
    );
    assert!(text.contains("anonymous memory did not grow"), "{text}");
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
    assert_eq!(&*list.holder, "list `val_losses` (12 items)");
    assert!(graph.is_graph() && !list.is_graph());
    let analysis = analyze(&t, &AnalysisOptions::default());
    let text = oomscope_analysis::render::summary::render(&t, &analysis);
    assert!(
        text.contains(
            "  +8 float32[scalar] (MseLossBackward0) on cpu, +2.00 MiB over steps 4-12 (1 a step): \
             list\n    `val_losses` (12 items)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "+56 autograd nodes over steps 4-12 behind `total_val`, one float32 (AddBackward0) \
             tensor on cpu:\n    each step's graph stays attached to it"
        ),
        "{text}"
    );
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
    let a = analyze(&t, &AnalysisOptions::default());
    let p = a.input_peak.as_ref().expect("an input-driven peak");
    assert_eq!((p.elements, p.median_elements), (4096, 512));
    assert_eq!(p.stage, "post_forward");
    let steps: Vec<u64> = p.long_steps.iter().map(|l| l.step).collect();
    assert_eq!(steps, [9, 19, 29]);
    assert_eq!(p.peak_bytes - p.median_peak_bytes, 3584 * (40 << 10));
    assert!((p.bytes_per_element - f64::from(40 << 10)).abs() < 1.0);
    assert_eq!(a.findings[0].kind.id(), "input-peak");
    assert!(a.leaks().next().is_none());
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
    let a = analyze(&t, &AnalysisOptions::default());
    let peak = oomscope_analysis::peaks::breakdown_peak(&a.peaks).unwrap();
    let line = oomscope_analysis::render::breakdown::breakdown_line(peak).unwrap();
    assert!(
        line.contains(
            "optimizer state 6.00 MiB (optimizerD Adam 4.00 MiB, Adam(Generator) 2.00 MiB)"
        ),
        "{line}"
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
    let analysis = analyze(&t, &AnalysisOptions::default());
    let top = &analysis.findings[0];
    assert_eq!(
        top.title,
        "The program was killed by the kernel's OOM killer"
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
    let analysis = analyze(&t, &AnalysisOptions::default());
    let r = analysis.ranks.as_ref().unwrap();
    assert_eq!(r.ranks.len(), 2);
    assert_eq!((r.ranks[0].marks, r.ranks[1].marks), (4, 3));
    assert_eq!(r.first_failure.as_ref().unwrap().rank, 1);
    assert_eq!(r.imbalance[0].rank, 1);
    assert_eq!(r.imbalance[0].excess_bytes(), 300 << 20);
    assert_eq!(analysis.findings[0].kind.id(), "first-rank-failure");
    assert!(
        analysis
            .findings
            .iter()
            .any(|f| f.title.starts_with("Rank 1 failed first"))
    );
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
    let analysis = analyze(&t, &AnalysisOptions::default());
    let f = &analysis.findings[0];
    assert_eq!(f.kind.id(), "host-memory-pressure");
    assert_eq!(f.title, "Rank 1 was killed by its launcher for memory");
    // Not this host's memory: the batch node's figures are not quoted.
    assert!(!f.explanation.contains("available"), "{}", f.explanation);
}

#[test]
fn v1_6_pipeline_groups() {
    let decoded = decode(&read("v1_6_pipeline_groups.oomt")).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let t = decoded.trace;
    let groups: Vec<Option<&str>> = t.processes.iter().map(|p| p.group.as_deref()).collect();
    assert_eq!(groups, [Some("pp0"), Some("pp0"), Some("pp1"), Some("pp1")]);
    let analysis = analyze(&t, &AnalysisOptions::default());
    let r = analysis.ranks.as_ref().unwrap();
    // pp0 holds more than pp1 by design: only rank 1 within pp0 is out of line.
    assert_eq!(r.imbalance.len(), 1, "{:?}", r.imbalance);
    assert_eq!(
        (r.imbalance[0].rank, r.imbalance[0].group.as_deref()),
        (1, Some("pp0"))
    );
    assert_eq!(r.imbalance[0].excess_bytes(), 200 << 20);
    let f = analysis
        .findings
        .iter()
        .find(|f| f.kind.id() == "rank-imbalance")
        .unwrap();
    assert_eq!(
        f.title,
        "Rank 1 holds 200 MiB more than the median rank of group pp0 at post_forward (host.rss)"
    );
}
