//! Analysis benchmarks: the full analysis and a live view's, on the 1-hour 1 kHz workload
//! (3.6 M rows × 6 counters, 10 000 steps × 5 stages with allocator statistics).
//!
//! Run with `cargo bench -p oomscope-analysis --bench analysis`.

use std::sync::LazyLock;

use divan::{Bencher, black_box};
use oomscope_analysis::{AnalysisOptions, Prepared, analyze, analyze_prepared};
use oomscope_format::{Follower, Trace, decode};
use oomscope_testkit::synth::TrainingRun;

fn main() {
    divan::main();
}

static HOUR: LazyLock<Trace> = LazyLock::new(|| {
    decode(&TrainingRun::hour_at_1khz().to_bytes())
        .unwrap()
        .trace
});

/// Everything `collector summary` and the viewer's first screen compute.
#[divan::bench(sample_count = 10)]
fn analyze_hour_1khz(bencher: Bencher) {
    let trace = &*HOUR;
    bencher.bench(|| analyze(black_box(trace), &AnalysisOptions::default()));
}

/// The hour followed as it is written: its first 99% read, what the marks read there prepared,
/// and the whole trace after the last 1% arrived.
static HOUR_FOLLOWED: LazyLock<(Prepared, Trace)> = LazyLock::new(|| {
    let bytes = TrainingRun::hour_at_1khz().to_bytes();
    let cut = bytes.len() * 99 / 100;
    let mut follower = Follower::default();
    follower.push(&bytes[..cut]).unwrap();
    let prepared = Prepared::new(follower.trace().unwrap());
    follower.push(&bytes[cut..]).unwrap();
    (prepared, follower.trace().unwrap().clone())
});

/// A live view's analysis of the hour after its last 1% was appended (`collector watch`,
/// `collector serve`): what the marks read brought up to date, then the analysis.
#[divan::bench(sample_count = 10)]
fn analyze_hour_1khz_live(bencher: Bencher) {
    let (prepared, trace) = &*HOUR_FOLLOWED;
    bencher
        .with_inputs(|| prepared.clone())
        .bench_local_refs(|p| analyze_prepared(black_box(trace), &AnalysisOptions::default(), p));
}
