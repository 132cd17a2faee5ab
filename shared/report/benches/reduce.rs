//! What `collector report` spends fitting a long trace into a report: thinning the sample rows
//! and re-encoding (`oomscope_report::reduce`). Run with
//! `cargo bench -p oomscope-report --bench reduce`.
//! The whole-hour figure (fit the 1-hour 1 kHz trace into 3.5 MB) is in BENCHMARKS.md.

use divan::{Bencher, black_box, counter::ItemsCount};
use oomscope_format::{Trace, decode};
use oomscope_report::reduce::{encode, fit_to_size, thin_samples};
use oomscope_testkit::synth::TrainingRun;

fn main() {
    divan::main();
}

/// Ten minutes at 1 kHz: 600 000 rows × 6 counters, 1 650 steps.
fn ten_minutes() -> Trace {
    let run = TrainingRun {
        steps: 1_650,
        ..TrainingRun::hour_at_1khz()
    };
    decode(&run.to_bytes()).unwrap().trace
}

#[divan::bench(sample_count = 10)]
fn thin_ten_minutes_to_5_percent(bencher: Bencher) {
    let trace = ten_minutes();
    let rows = trace.samples.len();
    bencher
        .counter(ItemsCount::new(rows))
        .bench_local(|| thin_samples(black_box(&trace), rows / 20));
}

#[divan::bench(sample_count = 10)]
fn encode_ten_minutes(bencher: Bencher) {
    let trace = ten_minutes();
    bencher
        .counter(ItemsCount::new(trace.samples.len()))
        .bench_local(|| encode(black_box(&trace)).unwrap());
}

#[divan::bench(sample_count = 10)]
fn fit_ten_minutes_into_one_megabyte(bencher: Bencher) {
    let trace = ten_minutes();
    bencher
        .counter(ItemsCount::new(trace.samples.len()))
        .bench_local(|| fit_to_size(black_box(&trace), 1_000_000).unwrap());
}
