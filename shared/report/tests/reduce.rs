//! Re-encoding decoded traces, and thinning their samples without changing the analysis.

use std::time::Instant;

use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::{
    CounterId, CounterKind, Dropped, ExitStatus, Metadata, Note, OomEvent, OomSource, Phase,
    ProcessExit, Record, StageMark, Trace, TraceWriter, decode,
};
use oomscope_report::reduce::{FitLimits, encode, fit, fit_to_size, thin_samples};
use oomscope_testkit::synth::TrainingRun;
use proptest::prelude::*;

use oomscope_format::AllocatorQuantity;
use oomscope_format::units::{GIB, MIB};

fn decoded(bytes: &[u8]) -> Trace {
    let decoded = decode(bytes).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    decoded.trace
}

use oomscope_testkit::data::trace as golden;

/// Asserts `decode(encode(trace)) == trace`. `format_version` becomes the writer's (documented);
/// gradient norms are compared bit for bit first, since NaN (a planted fault) is not equal to
/// itself.
fn assert_round_trip(trace: &Trace) {
    let bytes = encode(trace).unwrap();
    let mut back = decode(&bytes).unwrap().trace;
    assert_eq!(
        back.format_version,
        (
            oomscope_format::codec::FORMAT_MAJOR,
            oomscope_format::codec::FORMAT_MINOR
        )
    );
    let mut expected = trace.clone();
    expected.format_version = back.format_version;
    let norms = |t: &mut Trace| -> Vec<u64> {
        t.gradients
            .iter_mut()
            .map(|g| std::mem::replace(&mut g.global_norm, 0.0).to_bits())
            .collect()
    };
    assert_eq!(norms(&mut back), norms(&mut expected));
    // Compare the parts first, so a failure says which one differs.
    assert_eq!(back.metadata, expected.metadata);
    assert_eq!(back.counters, expected.counters);
    assert!(back.samples == expected.samples, "samples differ");
    assert_eq!(back.marks, expected.marks);
    assert_eq!(back, expected);
}

/// Synthetic runs that plant every kind of record the simulator can write.
fn synth_runs() -> Vec<(&'static str, TrainingRun)> {
    let small = TrainingRun {
        steps: 40,
        step_us: 100_000,
        sample_interval_us: 5_000,
        process_poll_us: 200_000,
        ..TrainingRun::default()
    };
    vec![
        ("plain", small.clone()),
        (
            "instrumented",
            TrainingRun {
                leak_bytes_per_step: 48 * MIB,
                eval_every: Some(10),
                eval_steps: 2,
                eval_retained_bytes: 512 * MIB,
                batch_search: true,
                tensor_stats_every: 5,
                alloc_retries_per_step: 1,
                ..small.clone()
            },
        ),
        (
            "oom",
            TrainingRun {
                batch_size: 64,
                activation_bytes_per_sample: GIB,
                oom_at_step: Some(12),
                leak_bytes_per_step: GIB,
                allocator_stats: false,
                ..small.clone()
            },
        ),
        (
            "nan",
            TrainingRun {
                nan_at_step: Some(7),
                ..small
            },
        ),
    ]
}

#[test]
fn synth_runs_round_trip() {
    for (name, run) in synth_runs() {
        let trace = decoded(&run.to_bytes());
        assert!(!trace.samples.is_empty(), "{name}");
        assert_round_trip(&trace);
    }
}

#[test]
fn synth_runs_plant_what_the_round_trips_cover() {
    let traces: Vec<Trace> = synth_runs()
        .into_iter()
        .map(|(_, run)| decoded(&run.to_bytes()))
        .collect();
    let any = |f: &dyn Fn(&Trace) -> bool| traces.iter().any(f);
    assert!(any(&|t| !t.ooms.is_empty()));
    assert!(any(&|t| !t.batch_trials.is_empty()));
    assert!(any(&|t| !t.tensors.is_empty()));
    assert!(any(&|t| !t.components.is_empty()));
    assert!(any(&|t| t.marks.iter().any(|m| m.phase == Phase::Eval)));
    assert!(any(&|t| t.gradients.iter().any(|g| g.global_norm.is_nan())));
    assert!(any(&|t| t
        .exit
        .is_some_and(|e| e.status == ExitStatus::Code(1))));
}

#[test]
fn golden_files_round_trip() {
    for name in [
        "v1_0_instrumented.oomt",
        "v1_0_oom.oomt",
        "v1_0_truncated.oomt",
        "v1_1_host_error.oomt",
    ] {
        let trace = decode(&golden(name)).unwrap().trace;
        assert!(!trace.marks.is_empty(), "{name}");
        assert_round_trip(&trace);
    }
}

#[test]
fn a_truncated_trace_stays_truncated() {
    // No end record in, none out: the copy still says the recording did not finish cleanly.
    let trace = decode(&golden("v1_0_truncated.oomt")).unwrap().trace;
    assert_eq!(trace.end_us, None);
    let copy = decode(&encode(&trace).unwrap()).unwrap();
    assert_eq!(copy.trace.end_us, None);
    let messages: Vec<&str> = copy.warnings.iter().map(|w| w.message.as_str()).collect();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].contains("did not finish cleanly"),
        "{messages:?}"
    );
}

/// What no recorder of ours writes but a decoded trace can hold: missing cells (blocks with
/// different counter sets, a row without any value), a name lost with its chunk (`?`), a counter
/// that never gets a sample, records of one kind out of time order, drop accounting, marks from
/// two senders.
fn odd_trace() -> Trace {
    let mut w = TraceWriter::new(Vec::new(), &Metadata::default()).unwrap();
    let a = w.declare_counter(CounterKind::GpuUsed, Some(0)).unwrap();
    let b = w.declare_counter(CounterKind::HostRss, None).unwrap();
    w.declare_counter(CounterKind::Other(999), Some(3)).unwrap();
    for i in 0..100u64 {
        let t = i * 1000;
        match i % 7 {
            0 => w.sample(t, &[(a, i), (b, u64::MAX - 1)]).unwrap(),
            1 | 2 => w.sample(t, &[(b, i << 20)]).unwrap(),
            3 => w.sample(t, &[]).unwrap(),
            _ => w.sample(t, &[(a, i * 3), (b, 7)]).unwrap(),
        }
        if i % 10 == 5 {
            w.write(&Record::Mark(StageMark {
                t_us: t,
                name: "?".into(),
                step: i,
                phase: Phase::Train,
                pid: (i > 50).then_some(4000 + i as u32 % 2),
                rank: (i > 70).then_some(i as u32 % 2),
                ..StageMark::default()
            }))
            .unwrap();
        }
    }
    for (t_us, text) in [(90_000, "late note"), (10_000, "early note, written later")] {
        w.write(&Record::Note(Note {
            t_us,
            text: text.into(),
        }))
        .unwrap();
    }
    w.write(&Record::Dropped(Dropped {
        t_us: 50_000,
        record_tag: 0x04,
        count: 3,
    }))
    .unwrap();
    w.write(&Record::Oom(OomEvent {
        t_us: 95_500,
        source: OomSource::Other(77),
        stage: Some("?".into()),
        step: None,
        requested_bytes: Some(1),
        device: None,
        device_free_bytes: None,
        device_total_bytes: None,
        message: String::new(),
        pid: None,
        rank: Some(1),
        allocated_bytes: None,
        reserved_bytes: None,
    }))
    .unwrap();
    w.write(&Record::Exit(ProcessExit {
        t_us: 99_500,
        status: ExitStatus::Signal(9),
        probable_host_oom: true,
    }))
    .unwrap();
    decoded(&w.finish(99_000).unwrap())
}

#[test]
fn odd_traces_round_trip() {
    let trace = odd_trace();
    assert_eq!(trace.marks[0].name.as_ref(), "?");
    assert_eq!(trace.marks[9].pid, Some(4001));
    assert_eq!(trace.notes[1].text, "early note, written later");
    assert_eq!(trace.samples.value(CounterId(0), 1), None);
    assert_round_trip(&trace);
}

/// The analysis as JSON, without the sample count (which thinning changes by design).
fn analysis_json(trace: &Trace) -> serde_json::Value {
    let mut json = serde_json::to_value(analyze(trace, &AnalysisOptions::default())).unwrap();
    json["overview"]["samples"] = serde_json::Value::Null;
    json
}

/// Asserts that two analyses agree everywhere but in the sample count, naming the first field
/// that differs.
fn assert_same_analysis(full: &Trace, thinned: &Trace) {
    let (a, b) = (analysis_json(full), analysis_json(thinned));
    for (field, value) in a.as_object().unwrap() {
        assert_eq!(value, &b[field], "analysis field `{field}` differs");
    }
    assert_eq!(a, b);
}

/// A few hundred steps at 1 kHz: many rows, and every analysis has something to say.
fn dense_runs() -> Vec<(&'static str, TrainingRun)> {
    let base = TrainingRun {
        steps: 300,
        step_us: 250_000,
        sample_interval_us: 1_000,
        ..TrainingRun::default()
    };
    vec![
        (
            "leak, eval, search, tensors, retries",
            TrainingRun {
                leak_bytes_per_step: 12 * MIB,
                eval_every: Some(100),
                eval_steps: 10,
                eval_retained_bytes: GIB,
                batch_search: true,
                tensor_stats_every: 50,
                alloc_retries_per_step: 1,
                ..base.clone()
            },
        ),
        (
            "no snapshots, OOM",
            TrainingRun {
                batch_size: 64,
                activation_bytes_per_sample: GIB,
                oom_at_step: Some(250),
                leak_bytes_per_step: 64 * MIB,
                allocator_stats: false,
                nan_at_step: Some(100),
                ..base
            },
        ),
    ]
}

#[test]
fn thinned_runs_analyse_the_same() {
    for (name, run) in dense_runs() {
        let trace = decoded(&run.to_bytes());
        let rows = trace.samples.len();
        assert!(rows > 60_000, "{name}: {rows}");
        let max_rows = rows / 15;
        let thinned = thin_samples(&trace, max_rows);
        let kept = thinned.samples.len();
        // 5–10 % of the rows, within the soft target.
        assert!(kept <= rows / 10, "{name}: kept {kept} of {rows}");
        let mandatory = thin_samples(&trace, 0).samples.len();
        assert!(
            kept <= max_rows.max(mandatory + 2 * trace.counters.len()),
            "{name}: kept {kept}, max {max_rows}, mandatory {mandatory}"
        );
        assert!(kept > mandatory, "{name}: the budget was not used");
        assert_same_analysis(&trace, &thinned);
        // Also after the round trip through bytes that the report embeds.
        let embedded = decoded(&encode(&thinned).unwrap());
        assert_same_analysis(&trace, &embedded);
    }
}

#[test]
fn thinning_keeps_extremes_span_and_everything_but_samples() {
    let (_, run) = dense_runs().remove(0);
    let trace = decoded(&run.to_bytes());
    for max_rows in [0, 1_000, 5_000] {
        let thinned = thin_samples(&trace, max_rows);
        let (full, thin) = (&trace.samples, &thinned.samples);
        assert_eq!(thin.times_us().first(), full.times_us().first());
        assert_eq!(thin.times_us().last(), full.times_us().last());
        assert_eq!(thin.columns(), full.columns());
        for id in (0..trace.counters.len()).map(|i| CounterId(i as u32)) {
            let values =
                |s: &oomscope_format::Samples| s.points(id).map(|(_, v)| v).collect::<Vec<_>>();
            let (all, kept) = (values(full), values(thin));
            assert_eq!(kept.iter().max(), all.iter().max(), "max of {id:?}");
            assert_eq!(kept.iter().min(), all.iter().min(), "min of {id:?}");
        }
        // Every kept row is an original row, unchanged.
        let mut row = 0;
        for (i, t) in thin.times_us().iter().enumerate() {
            while full.time_us(row) != t
                || (0..trace.counters.len()).any(|c| {
                    full.value(CounterId(c as u32), row) != thin.value(CounterId(c as u32), i)
                })
            {
                row += 1;
            }
            row += 1;
        }
        let mut rest = thinned.clone();
        rest.samples = trace.samples.clone();
        assert_eq!(rest.marks, trace.marks);
        assert!(rest == trace, "only the samples may differ");
    }
}

#[test]
fn fit_to_size_keeps_a_trace_that_fits() {
    let trace = decoded(&synth_runs()[1].1.to_bytes());
    let fitted = fit_to_size(&trace, 10 << 20).unwrap();
    assert!(!fitted.is_thinned());
    assert_eq!(fitted.rows_kept, trace.samples.len());
    assert_eq!(fitted.trace_bytes, encode(&trace).unwrap());
}

#[test]
fn fit_to_size_returns_the_smallest_copy_when_nothing_fits() {
    let (_, run) = dense_runs().remove(0);
    let trace = decoded(&run.to_bytes());
    let fitted = fit_to_size(&trace, 10_000).unwrap();
    assert!(fitted.trace_bytes.len() > 10_000);
    assert_eq!(fitted.rows_kept, thin_samples(&trace, 0).samples.len());
    assert_eq!(fitted.rows_total, trace.samples.len());
    assert_eq!(decoded(&fitted.trace_bytes).samples.len(), fitted.rows_kept);
}

#[test]
fn fit_keeps_at_most_max_rows_even_when_the_bytes_fit() {
    let (_, run) = dense_runs().remove(0);
    let trace = decoded(&run.to_bytes());
    let max_rows = trace.samples.len() / 4;
    let limits = FitLimits {
        max_bytes: 0,
        max_rows,
    };
    let fitted = fit(&trace, limits, |b| b).unwrap();
    assert!(fitted.is_thinned());
    assert!(fitted.rows_kept <= max_rows, "{} rows", fitted.rows_kept);
    // Every row it was allowed is used (the envelope fills the slices), bar a few.
    assert!(
        fitted.rows_kept > max_rows * 9 / 10,
        "{} rows",
        fitted.rows_kept
    );
    let copy = decoded(&fitted.trace_bytes);
    assert_eq!(copy.samples.len(), fitted.rows_kept);
    assert_eq!(copy.marks, trace.marks);
    // A limit above the trace's rows keeps it whole.
    let all = FitLimits {
        max_bytes: 0,
        max_rows: trace.samples.len(),
    };
    assert!(!fit(&trace, all, |b| b).unwrap().is_thinned());
}

/// The report deflates the copy: the search measures each attempt packed, so a budget with
/// little room beyond the marks still gets the rows that fit, not the marks' rows alone (what
/// guessing the deflate ratio once gave: 50 006 of 3.6 M rows for an hour in 3.5 MB).
#[test]
fn fit_fills_a_deflated_budget() {
    let (_, run) = dense_runs().remove(0);
    let trace = decoded(&run.to_bytes());
    let pack = |b: Vec<u8>| oomscope_report::page::pack(&b);
    let smallest = pack(encode(&thin_samples(&trace, 0)).unwrap()).len();
    let whole = pack(encode(&trace).unwrap()).len();
    for share in [0.1, 0.3, 0.6] {
        let max_bytes = smallest + ((whole - smallest) as f64 * share) as usize;
        let limits = FitLimits {
            max_bytes,
            max_rows: 0,
        };
        let fitted = fit(&trace, limits, pack).unwrap();
        let len = fitted.trace_bytes.len();
        assert!(len <= max_bytes, "{len} > {max_bytes}");
        assert!(
            len as f64 >= max_bytes as f64 * 0.9,
            "{share}: {len} of {max_bytes} bytes used, {} rows",
            fitted.rows_kept
        );
        let inflated = inflate(&fitted.trace_bytes);
        assert_eq!(decoded(&inflated).samples.len(), fitted.rows_kept);
    }
}

fn inflate(bytes: &[u8]) -> Vec<u8> {
    oomscope_report::page::unpack(bytes.to_vec(), Some(oomscope_report::page::DEFLATE)).unwrap()
}

/// Fits `run` into `max_bytes`, checks the copy, and prints sizes and timings.
#[allow(clippy::print_stdout)] // reports sizes and timings
fn fit_run(run: &TrainingRun, max_bytes: usize) {
    let start = Instant::now();
    let bytes = run.to_bytes();
    let trace = decoded(&bytes);
    let prepared = start.elapsed();
    let start = Instant::now();
    let thinned = thin_samples(&trace, trace.samples.len() / 40);
    let thin_time = start.elapsed();
    let start = Instant::now();
    let fitted = fit_to_size(&trace, max_bytes).unwrap();
    let fit_time = start.elapsed();
    println!(
        "{} rows, {} bytes (written and decoded in {prepared:?}); thin_samples to {} rows in \
         {thin_time:?}; fit_to_size({max_bytes}) in {fit_time:?}: {} bytes, {} of {} rows",
        trace.samples.len(),
        bytes.len(),
        thinned.samples.len(),
        fitted.trace_bytes.len(),
        fitted.rows_kept,
        fitted.rows_total,
    );
    assert!(fitted.trace_bytes.len() <= max_bytes);
    assert!(fitted.is_thinned());
    let copy = decoded(&fitted.trace_bytes);
    assert_eq!(copy.samples.len(), fitted.rows_kept);
    assert_eq!(copy.marks, trace.marks);
}

/// The report's real case: an hour at 1 kHz (3.6 M rows, ~14 MB) into 3.5 MB. ~7 s in a debug
/// build; for the timings, run
/// `cargo test --release -p oomscope-report --test reduce fit_to_size_hour -- --nocapture`.
#[test]
fn fit_to_size_hour_at_1khz() {
    fit_run(&TrainingRun::hour_at_1khz(), 3_500_000);
}

/// How a counter is present across the rows of a generated trace.
#[derive(Debug, Clone)]
enum Presence {
    Always,
    /// Present in a row with this probability (percent).
    Sparse(u64),
    /// Present up to this row, then never again (a dead reader).
    DeadAfter(usize),
    /// Present from this row on (a slow poller's first result).
    StartsAt(usize),
    /// Absent in rows [start, start + len).
    Gap(usize, usize),
}

impl Presence {
    fn at(&self, row: usize, hash: u64) -> bool {
        match *self {
            Presence::Always => true,
            Presence::Sparse(percent) => hash % 100 < percent,
            Presence::DeadAfter(last) => row <= last,
            Presence::StartsAt(first) => row >= first,
            Presence::Gap(start, len) => !(start..start + len).contains(&row),
        }
    }
}

fn presence_strategy() -> impl Strategy<Value = Presence> {
    prop_oneof![
        Just(Presence::Always),
        (0..100u64).prop_map(Presence::Sparse),
        (0..400usize).prop_map(Presence::DeadAfter),
        (0..400usize).prop_map(Presence::StartsAt),
        (0..400usize, 1..300usize).prop_map(|(s, l)| Presence::Gap(s, l)),
    ]
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A trace with six memory counters of the given presence, values from few distinct levels (so
/// maxima repeat), stage marks at the given times, an OOM and maybe a host OOM kill.
fn generated(
    rows: usize,
    presence: &[Presence],
    marks: &[u64],
    snapshots: bool,
    host_kill: bool,
    seed: u64,
) -> Trace {
    let kinds = [
        CounterKind::GpuUsed,
        CounterKind::ProcessGpu,
        CounterKind::Allocator(AllocatorQuantity::Allocated),
        CounterKind::Allocator(AllocatorQuantity::Reserved),
        CounterKind::HostRss,
        CounterKind::HostAvailable,
    ];
    let mut w = TraceWriter::new(Vec::new(), &Metadata::default()).unwrap();
    let ids: Vec<CounterId> = kinds
        .iter()
        .map(|k| w.declare_counter(*k, Some(0)).unwrap())
        .collect();
    let stages = ["pre_forward", "post_forward", "post_backward"];
    let mut marks = marks.to_vec();
    marks.sort_unstable();
    let mut next_mark = 0;
    let mut row_values = Vec::new();
    for row in 0..rows {
        let t = row as u64 * 1000 + mix(seed ^ row as u64) % 300;
        while let Some(&mark_t) = marks.get(next_mark).filter(|m| **m < t) {
            let snapshot = snapshots.then(|| {
                oomscope_format::AllocatorStats::from_values([
                    mix(mark_t) % 8 * GIB,
                    8 * GIB,
                    0,
                    0,
                    8 * GIB,
                    8 * GIB,
                    0,
                    0,
                ])
            });
            w.write(&Record::Mark(StageMark {
                t_us: mark_t,
                name: stages[next_mark % 3].into(),
                step: (next_mark / 3) as u64,
                phase: Phase::Train,
                allocator: snapshot,
                ..StageMark::default()
            }))
            .unwrap();
            next_mark += 1;
        }
        row_values.clear();
        for (c, id) in ids.iter().enumerate() {
            let hash = mix(seed ^ ((row as u64) << 8) ^ c as u64);
            if presence[c].at(row, hash) {
                row_values.push((*id, (hash >> 20) % 13 * 512 * MIB + GIB));
            }
        }
        w.sample(t, &row_values).unwrap();
    }
    let end = rows as u64 * 1000;
    w.write(&Record::Oom(OomEvent {
        t_us: end / 2 + 1,
        source: OomSource::Stderr,
        stage: None,
        step: None,
        requested_bytes: Some(GIB),
        device: Some(0),
        device_free_bytes: None,
        device_total_bytes: None,
        message: "CUDA out of memory".into(),
        pid: Some(4101),
        rank: Some(0),
        allocated_bytes: None,
        reserved_bytes: None,
    }))
    .unwrap();
    w.write(&Record::Exit(ProcessExit {
        t_us: end,
        status: ExitStatus::Signal(9),
        probable_host_oom: host_kill,
    }))
    .unwrap();
    w.write(&Record::Note(Note {
        t_us: end / 3,
        text: "a note".into(),
    }))
    .unwrap();
    w.write(&Record::Dropped(Dropped {
        t_us: end / 4,
        record_tag: 0x04,
        count: 1,
    }))
    .unwrap();
    decoded(&w.finish(end).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever cells are missing, the thinned copy reads the same values at every mark and
    /// analyses the same, and the copy round-trips through bytes.
    #[test]
    fn thinning_with_missing_cells_analyses_the_same(
        rows in 50..700usize,
        presence in proptest::collection::vec(presence_strategy(), 6),
        marks in proptest::collection::vec(0..700_000u64, 0..60),
        snapshots in any::<bool>(),
        host_kill in any::<bool>(),
        max_rows in 0..200usize,
        seed in any::<u64>(),
    ) {
        let trace = generated(rows, &presence, &marks, snapshots, host_kill, seed);
        assert_round_trip(&trace);
        let thinned = thin_samples(&trace, max_rows);
        for m in &trace.marks {
            for c in 0..trace.counters.len() {
                let id = CounterId(c as u32);
                prop_assert_eq!(
                    thinned.samples.value_at(id, m.t_us),
                    trace.samples.value_at(id, m.t_us),
                    "counter {} at mark {}", c, m.t_us
                );
            }
        }
        assert_same_analysis(&trace, &thinned);
        assert_round_trip(&thinned);
    }
}

#[test]
fn notes_and_drops_survive_thinning() {
    let mut trace = decoded(&dense_runs()[0].1.to_bytes());
    trace.notes.push(Note {
        t_us: 12_345_678,
        text: "checkpoint saved".into(),
    });
    trace.dropped.push(Dropped {
        t_us: 1,
        record_tag: 0x04,
        count: 2,
    });
    let thinned = thin_samples(&trace, 1_000);
    assert_eq!(thinned.notes, trace.notes);
    assert_eq!(thinned.dropped, trace.dropped);
    let row = trace.samples.row_at_or_before(12_345_678).unwrap();
    let t = trace.samples.time_us(row);
    assert!(thinned.samples.times_us().iter().any(|kept| kept == t));
    assert_round_trip(&thinned);
}
