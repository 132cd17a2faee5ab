//! A live view's analysis of a trace still being written ([`analyze_prepared`], what it read at
//! the marks kept from one refresh to the next and extended with what was appended) is the
//! analysis of the trace decoded so far made anew ([`analyze`]), and so is its live state (the
//! chart read from the kept values): checked on the committed traces, on synthetic runs long
//! enough to pack their columns, and on runs written to change what was read before (marks ahead
//! of their readings, a clock that turns from forwards to steps, the allocator's statistics
//! appearing, a counter taking another's place), each read as a follower reads a growing file,
//! in pieces cut anywhere.

use oomscope_analysis::facts::host_in_use;
use oomscope_analysis::live::{live_state, readings, with_analysis};
use oomscope_analysis::{AnalysisOptions, Prepared, analyze, analyze_prepared};
use oomscope_format::{
    AllocatorQuantity, AllocatorStats, CounterKind, Follower, Metadata, Phase, Record, StageMark,
    TraceWriter, WriterOptions,
};
use oomscope_testkit::synth::TrainingRun;

/// Feeds `bytes` to a follower in `pieces` pieces and, after each, checks the kept preparation
/// against one made anew and the live analysis against the whole one. Returns the refreshes
/// that had marks.
fn follow_and_compare(name: &str, bytes: &[u8], pieces: usize) -> usize {
    let mut follower = Follower::default();
    let mut prepared: Option<Prepared> = None;
    let options = AnalysisOptions::default();
    let piece = bytes.len().div_ceil(pieces).max(1);
    let mut compared = 0;
    for (i, chunk) in bytes.chunks(piece).enumerate() {
        follower
            .push(chunk)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let Some(trace) = follower.trace() else {
            continue;
        };
        let kept = prepared.get_or_insert_with(|| Prepared::new(trace));
        let live = analyze_prepared(trace, &options, kept);
        // What was kept equals what one analysis of the trace so far reads (of a trace of
        // several ranks, each rank's view's and the whole run's too).
        let mut anew = Prepared::new(trace);
        analyze_prepared(trace, &options, &mut anew);
        assert!(
            *kept == anew,
            "{name}: what was kept of the marks after piece {i} differs: {}",
            first_difference(&format!("{kept:?}"), &format!("{anew:?}"))
        );
        let whole = analyze(trace, &options);
        // Every field, the findings' diagnoses and the ranks' own analyses included.
        let (live_text, whole_text) = (format!("{live:?}"), format!("{whole:?}"));
        assert!(
            live_text == whole_text,
            "{name}: the analysis after piece {i} differs: {}",
            first_difference(&live_text, &whole_text)
        );
        // What a watcher shows: its chart read from the kept values.
        let now = readings(trace, host_in_use(trace));
        assert_eq!(
            with_analysis(now, trace, &live, Some(kept)),
            live_state(trace, &whole),
            "{name}: the live state after piece {i}"
        );
        compared += usize::from(!trace.marks.is_empty());
    }
    compared
}

/// Where two debug texts part: a few hundred characters of each from a little before.
fn first_difference(kept: &str, anew: &str) -> String {
    let at = kept
        .bytes()
        .zip(anew.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(kept.len().min(anew.len()));
    let from = kept.floor_char_boundary(at.saturating_sub(300));
    let around =
        |s: &str| s[from.min(s.len())..s.ceil_char_boundary((at + 200).min(s.len()))].to_owned();
    format!("\nkept: …{}…\nanew: …{}…", around(kept), around(anew))
}

#[test]
fn the_committed_traces_read_live_are_analysed_as_whole() {
    let dir = format!(
        "{}/../format/tests/data",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    let mut names: Vec<String> = Vec::new();
    for sub in ["", "gpu/"] {
        for entry in std::fs::read_dir(format!("{dir}/{sub}")).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".oomt") {
                names.push(format!("{sub}{name}"));
            }
        }
    }
    names.sort();
    assert!(names.len() >= 30, "{names:?}");
    let mut with_marks = 0;
    for name in &names {
        let bytes = oomscope_testkit::data::trace(name);
        with_marks += usize::from(follow_and_compare(name, &bytes, 7) > 0);
        // And a byte at a time through the first chunks (torn chunks, the header in pieces).
        let head = &bytes[..bytes.len().min(600)];
        follow_and_compare(name, head, head.len());
    }
    assert!(with_marks >= 20, "{with_marks} traces had marks");
}

#[test]
fn long_runs_read_live_are_analysed_as_whole() {
    // Past 4 096 marks (the columns pack runs of that many: a kept column is cut through one),
    // with a leak, evals and the samples' rows well ahead of and behind the marks.
    for (name, run) in [
        (
            "leak and evals",
            TrainingRun {
                steps: 1_200,
                leak_bytes_per_step: 8 << 20,
                eval_every: Some(100),
                seed: 3,
                ..TrainingRun::default()
            },
        ),
        (
            // Past the marks a stage's fit reads one by one (`fit_marks`): thinned as they come.
            "a stage's marks thinned for its fit",
            TrainingRun {
                steps: 9_000,
                leak_bytes_per_step: 1 << 20,
                eval_every: Some(700),
                seed: 7,
                ..TrainingRun::default()
            },
        ),
        (
            "sampled, no allocator statistics",
            TrainingRun {
                steps: 1_000,
                allocator_stats: false,
                sample_interval_us: 7_000,
                seed: 5,
                ..TrainingRun::default()
            },
        ),
    ] {
        let bytes = run.to_bytes();
        let refreshes = follow_and_compare(name, &bytes, 13);
        assert!(refreshes >= 10, "{name}: {refreshes} refreshes had marks");
        let mut whole = Follower::default();
        whole.push(&bytes).unwrap();
        let analysis = analyze(whole.trace().unwrap(), &AnalysisOptions::default());
        let thinned = analysis.leak_fits.iter().any(|f| f.steps_per_point > 1);
        assert_eq!(thinned, run.steps > 4_096, "{name}: fits thinned");
    }
}

/// The recorder's writer into memory, flushing a chunk only when told to.
fn writer() -> TraceWriter<Vec<u8>> {
    let metadata = Metadata {
        command: vec!["train.py".into()],
        ..Metadata::default()
    };
    let options = WriterOptions {
        flush_interval_us: u64::MAX,
        ..WriterOptions::default()
    };
    TraceWriter::with_options(Vec::new(), &metadata, options).unwrap()
}

#[test]
fn marks_written_before_the_readings_of_their_time_are_read_again() {
    // The recorder writes what reaches it: a mark from the program's hooks can be in a chunk
    // before the sampler's reading of the same moment, which a follower then reads a refresh
    // later. Each step's marks here are flushed before its readings.
    let mut w = writer();
    let rss = w.declare_counter(CounterKind::HostRss, None).unwrap();
    let used = w.declare_counter(CounterKind::GpuUsed, Some(0)).unwrap();
    let mut t_us = 0;
    for step in 0..1_400u64 {
        let leaked = step * (4 << 20);
        for (i, stage) in ["pre_forward", "post_forward", "post_backward"]
            .iter()
            .enumerate()
        {
            w.write(&Record::Mark(StageMark {
                t_us: t_us + 3_000 * i as u64,
                name: (*stage).into(),
                step,
                phase: if step % 50 == 49 {
                    Phase::Eval
                } else {
                    Phase::Train
                },
                ..StageMark::default()
            }))
            .unwrap();
        }
        w.flush().unwrap();
        for k in 0..5 {
            let bytes = (1 << 30) + leaked + k * (1 << 20);
            w.sample(t_us + 2_000 * k, &[(rss, bytes), (used, 2 * bytes)])
                .unwrap();
        }
        w.flush().unwrap();
        t_us += 10_000;
    }
    let bytes = w.finish(t_us).unwrap();
    // Cut so that many refreshes end between a step's marks and its readings (4 200 marks: past
    // a packed run of 4 096, cut through when read again).
    let refreshes = follow_and_compare("marks ahead of readings", &bytes, 300);
    assert!(refreshes >= 250, "{refreshes} refreshes had marks");
    let trace = oomscope_format::decode(&bytes).unwrap().trace;
    let leak = analyze(&trace, &AnalysisOptions::default());
    assert!(
        leak.leak_fits
            .iter()
            .any(oomscope_analysis::facts::GrowthFit::is_leak),
        "the planted leak"
    );
}

#[test]
fn ranks_read_live_are_analysed_as_whole() {
    // A node's ranks (each its own RSS and GPU memory) followed as they are written.
    let node = oomscope_testkit::synth::NodeRun {
        ranks: 3,
        seconds: 90,
        step_us: 500_000,
        ..oomscope_testkit::synth::NodeRun::default()
    };
    let refreshes = follow_and_compare("a node's three ranks", &node.to_bytes(), 11);
    assert!(refreshes >= 9, "{refreshes} refreshes had marks");

    // Rank 1 and 2 start; rank 0, the lowest (whose marks the whole run reads), starts halfway;
    // rank 2 is restarted under another pid later: each changes a view read before.
    let mut w = writer();
    let process = |t_us: u64, pid: u32, rank: u32| {
        Record::Process(oomscope_format::ProcessInfo {
            t_us,
            pid,
            parent_pid: None,
            name: "python".into(),
            role: oomscope_format::ProcessRole::Rank,
            rank_from: oomscope_format::RankSource::Environment,
            rank: Some(rank),
            local_rank: Some(rank),
            world_size: Some(3),
            restart: Some(0),
            group: None,
            start: oomscope_format::StartMethod::Unknown,
        })
    };
    let tree = w.declare_counter(CounterKind::HostRss, None).unwrap();
    let mut own = Vec::new();
    for pid in [10, 11, 12, 22] {
        own.push((
            pid,
            w.declare_process_counter(CounterKind::PidRss, None, pid)
                .unwrap(),
        ));
    }
    let mut t_us = 0;
    for step in 0..600u64 {
        let alive: Vec<(u32, u32)> = [
            (step >= 300).then_some((10, 0)),
            Some((11, 1)),
            Some(if step < 450 { (12, 2) } else { (22, 2) }),
        ]
        .into_iter()
        .flatten()
        .collect();
        for &(pid, rank) in &alive {
            if step == 0 || (pid == 10 && step == 300) || (pid == 22 && step == 450) {
                w.write(&process(t_us, pid, rank)).unwrap();
            }
            for (i, stage) in ["pre_forward", "post_forward"].iter().enumerate() {
                w.write(&Record::Mark(StageMark {
                    t_us: t_us + 1_000 * i as u64 + u64::from(rank),
                    name: (*stage).into(),
                    step,
                    phase: Phase::Train,
                    pid: Some(pid),
                    rank: Some(rank),
                    ..StageMark::default()
                }))
                .unwrap();
            }
        }
        let row: Vec<_> = own
            .iter()
            .map(|&(pid, id)| (id, (1 << 30) + u64::from(pid) * step * (64 << 10)))
            .chain([(tree, (4 << 30) + step * (1 << 20))])
            .collect();
        w.sample(t_us + 1_500, &row).unwrap();
        w.flush().unwrap();
        t_us += 10_000;
    }
    let bytes = w.finish(t_us).unwrap();
    let refreshes = follow_and_compare("a rank late, a rank restarted", &bytes, 37);
    assert!(refreshes >= 30, "{refreshes} refreshes had marks");
    let trace = oomscope_format::decode(&bytes).unwrap().trace;
    let ranks = analyze(&trace, &AnalysisOptions::default()).ranks.unwrap();
    assert_eq!(ranks.ranks.len(), 3);
}

/// What [`written`] writes.
#[derive(Clone, Copy)]
struct Shape {
    steps: u64,
    /// The first steps' marks are an eval's only (a sanity check before training: the clock is
    /// forwards until the first training mark).
    eval_first: u64,
    /// Marks carry the allocator's statistics from this step on.
    stats_from: u64,
    /// A second counter of the device's used memory, declared first, read from this step on:
    /// from then on the metric reads it rather than the other.
    first_used_from: u64,
}

/// A run written through the recorder's writer, flushed a step at a time.
fn written(shape: Shape) -> Vec<u8> {
    let mut w = writer();
    let late_used = w
        .declare_counter_named(CounterKind::GpuUsed, Some(0), None, "used (late)")
        .unwrap();
    let used = w.declare_counter(CounterKind::GpuUsed, Some(0)).unwrap();
    let rss = w.declare_counter(CounterKind::HostRss, None).unwrap();
    let mut t_us = 0;
    for step in 0..shape.steps {
        let held = (2 << 30) + step * (3 << 20);
        let eval = step < shape.eval_first;
        let stages: &[&str] = if eval {
            &["pre_forward", "post_forward"]
        } else {
            &["pre_forward", "post_forward", "post_backward"]
        };
        for (i, stage) in stages.iter().enumerate() {
            let allocated = held + i as u64 * (64 << 20);
            w.write(&Record::Mark(StageMark {
                t_us: t_us + 2_000 * i as u64,
                name: (*stage).into(),
                step,
                phase: if eval { Phase::Eval } else { Phase::Train },
                allocator: (step >= shape.stats_from).then(|| AllocatorStats {
                    allocated_bytes: allocated,
                    reserved_bytes: allocated + (256 << 20),
                    ..AllocatorStats::default()
                }),
                ..StageMark::default()
            }))
            .unwrap();
        }
        w.flush().unwrap();
        for k in 0..4 {
            let bytes = held + (512 << 20) + k * (16 << 20);
            let mut row = vec![(used, bytes), (rss, (1 << 30) + step * 4096)];
            if step >= shape.first_used_from {
                row.push((late_used, bytes + (1 << 20)));
            }
            w.sample(t_us + 1_500 * k, &row).unwrap();
        }
        w.flush().unwrap();
        t_us += 8_000;
    }
    w.finish(t_us).unwrap()
}

#[test]
fn what_changes_what_was_read_before_is_read_again() {
    let plain = Shape {
        steps: 300,
        eval_first: 0,
        stats_from: 0,
        first_used_from: u64::MAX,
    };
    for (name, shape) in [
        (
            "forwards, then steps",
            Shape {
                eval_first: 40,
                ..plain
            },
        ),
        (
            "the allocator's statistics from step 120",
            Shape {
                stats_from: 120,
                ..plain
            },
        ),
        (
            "a counter declared first read from step 150",
            Shape {
                stats_from: u64::MAX,
                first_used_from: 150,
                ..plain
            },
        ),
    ] {
        let bytes = written(shape);
        let refreshes = follow_and_compare(name, &bytes, 120);
        assert!(refreshes >= 100, "{name}: {refreshes} refreshes had marks");
    }
}

#[test]
fn the_scans_of_every_row_are_folded_across_refreshes() {
    // The host's tightest moment and the allocator's pressure are folds over the rows (and the
    // marks): a fold must carry what a row reads from the rows before it (the PSS read last, as
    // a real run's PSS is read less often than the available memory; none over the first
    // steps, where the lowest available stands in), begin again when the memory in use turns
    // from RSS to PSS (from step 100 the PSS is 256 MiB under the RSS, so it differs at the
    // RSS's peak), and join the marks' pass and the rows' as one scan of both finds (the first
    // largest wins). Each row is its own chunk, so refreshes end between rows anywhere in a
    // step; the available memory dips deeper one row into every step, one row after the PSS
    // reading; the rows' largest allocator gap equals the marks'.
    let mut w = writer();
    let available = w.declare_counter(CounterKind::HostAvailable, None).unwrap();
    let rss = w.declare_counter(CounterKind::HostRss, None).unwrap();
    let pss = w.declare_counter(CounterKind::HostPss, None).unwrap();
    let reserved = w
        .declare_counter(CounterKind::Allocator(AllocatorQuantity::Reserved), Some(0))
        .unwrap();
    let allocated = w
        .declare_counter(
            CounterKind::Allocator(AllocatorQuantity::Allocated),
            Some(0),
        )
        .unwrap();
    let mut t_us = 0;
    for step in 0..200u64 {
        let held = (2 << 30) + step * (1 << 20);
        for (i, stage) in ["pre_forward", "post_forward", "post_backward"]
            .iter()
            .enumerate()
        {
            let allocated = held + (2 - i as u64) * (64 << 20);
            w.write(&Record::Mark(StageMark {
                t_us: t_us + 2_000 * i as u64,
                name: (*stage).into(),
                step,
                allocator: Some(AllocatorStats {
                    allocated_bytes: allocated,
                    reserved_bytes: held + (512 << 20),
                    peak_reserved_bytes: held + (512 << 20),
                    ..AllocatorStats::default()
                }),
                ..StageMark::default()
            }))
            .unwrap();
        }
        w.flush().unwrap();
        for k in 0..4u64 {
            let in_use = (1 << 30) + step * (2 << 20);
            let free = (6 << 30) - in_use - if k == 1 { step * (1 << 20) } else { 0 };
            let mut row = vec![
                (available, free),
                (reserved, held + (512 << 20)),
                (allocated, held + k * (32 << 20)),
            ];
            if k == 0 && step >= 3 {
                row.push((rss, in_use));
                let shared = if step >= 100 { 256 << 20 } else { 0 };
                row.push((pss, in_use - shared));
            }
            w.sample(t_us + 4_500 + 1_000 * k, &row).unwrap();
            w.flush().unwrap();
        }
        t_us += 8_000;
    }
    let bytes = w.finish(t_us).unwrap();
    let refreshes = follow_and_compare("rows folded", &bytes, 700);
    assert!(refreshes >= 600, "{refreshes} refreshes had marks");
    let trace = oomscope_format::decode(&bytes).unwrap().trace;
    let analysis = analyze(&trace, &AnalysisOptions::default());
    let host = analysis.host_memory.expect("the host's tightest moment");
    assert_eq!(host.t_us, 199 * 8_000 + 5_500, "the last step's dip");
    assert_eq!(
        host.rss_at_min_bytes,
        Some((1 << 30) + 199 * (2 << 20) - (256 << 20)),
        "the PSS read last"
    );
    let pressure = analysis.pressure.expect("the allocator's pressure");
    assert!(pressure.from_marks && pressure.from_counters);
    assert_eq!(pressure.max_gap.bytes, 512 << 20);
    assert_eq!(
        pressure.max_gap.t_us, 4_000,
        "step 0's post_backward, before the rows as large"
    );
}
