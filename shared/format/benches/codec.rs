//! Codec benchmarks: encode cost per record and decode throughput.
//!
//! Run with `cargo bench -p oomscope-format --bench codec`. The bytes-per-value figure and the
//! whole-trace numbers come from `cargo run --release -p oomscope-analysis --example measure`.

use divan::{Bencher, black_box, counter::ItemsCount};
use oomscope_format::{CounterKind, Metadata, Name, Record, StageMark, TraceWriter, decode};
use oomscope_testkit::synth::TrainingRun;

fn main() {
    divan::main();
}

/// Encoding one sampling instant of 6 counters (the sampler's per-tick cost).
#[divan::bench]
fn encode_sample_row(bencher: Bencher) {
    let mut w = TraceWriter::new(Vec::with_capacity(64 << 20), &Metadata::default()).unwrap();
    let ids: Vec<_> = (0..6)
        .map(|i| w.declare_counter(CounterKind::GpuUsed, Some(i)).unwrap())
        .collect();
    let mut t = 0u64;
    bencher.counter(ItemsCount::new(1usize)).bench_local(|| {
        t += 1000;
        let v = 8 << 30 | (t & 0xff) << 12;
        let row = [
            (ids[0], v),
            (ids[1], v),
            (ids[2], v),
            (ids[3], 80 << 30),
            (ids[4], v),
            (ids[5], v),
        ];
        w.sample(black_box(t), black_box(&row)).unwrap();
    });
}

/// Encoding one stage mark with an allocator snapshot.
#[divan::bench]
fn encode_mark_with_snapshot(bencher: Bencher) {
    let mut w = TraceWriter::new(Vec::with_capacity(64 << 20), &Metadata::default()).unwrap();
    let snapshot = oomscope_format::AllocatorStats {
        allocated_bytes: 9 << 30,
        reserved_bytes: 12 << 30,
        active_bytes: 9 << 30,
        inactive_split_bytes: 1 << 28,
        peak_allocated_bytes: 14 << 30,
        peak_reserved_bytes: 15 << 30,
        num_alloc_retries: 3,
        num_ooms: 0,
    };
    let name: Name = "post_forward".into();
    let mut step = 0u64;
    bencher.counter(ItemsCount::new(1usize)).bench_local(|| {
        step += 1;
        w.write(&Record::Mark(StageMark {
            t_us: step * 1000,
            name: name.clone(),
            step,
            allocator: Some(snapshot),
            ..StageMark::default()
        }))
        .unwrap();
    });
}

/// Decoding a 10-minute 1 kHz trace (600 k rows × 6 counters); throughput in counter values.
#[divan::bench(sample_count = 20)]
fn decode_10min_1khz(bencher: Bencher) {
    let run = TrainingRun {
        steps: 1_667,
        ..TrainingRun::hour_at_1khz()
    };
    let bytes = run.to_bytes();
    let values = {
        let t = decode(&bytes).unwrap().trace;
        t.samples.len() * 6
    };
    bencher
        .counter(ItemsCount::new(values))
        .bench(|| decode(black_box(&bytes)).unwrap());
}
