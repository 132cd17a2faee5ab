//! Whole-trace measurements for BENCHMARKS.md: size per counter value, decode throughput, and
//! full-analysis time on the 1-hour 1 kHz workload of the foundation issue (3.6 M rows × 6
//! counters, 10 000 steps × 5 stages).
//!
//! `cargo run --release -p oomscope-analysis --example measure`

use std::time::Instant;

use oomscope_format::decode;
use oomscope_testkit::synth::TrainingRun;

/// Best wall time of `runs` calls, in seconds.
fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(f());
            start.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let run = TrainingRun::hour_at_1khz();
    let bytes = run.to_bytes();
    // Marks without allocator snapshots: the size of what NVML-only `collector run` records.
    let plain_bytes = TrainingRun {
        allocator_stats: false,
        ..run.clone()
    }
    .to_bytes();
    let trace = decode(&bytes).expect("synthetic trace decodes").trace;
    let values = trace.samples.len() * trace.counters.len();
    let encode_secs = best_of(3, || run.to_bytes());
    let decode_secs = best_of(5, || decode(&bytes).expect("decodes"));
    // The analysis is short and this VM noisy: its best and its median of 21.
    let mut analysis_secs: Vec<f64> = (0..21)
        .map(|_| {
            best_of(1, || {
                oomscope_analysis::analyze(&trace, &oomscope_analysis::AnalysisOptions::default())
            })
        })
        .collect();
    analysis_secs.sort_by(f64::total_cmp);

    let mib = |b: usize| b as f64 / f64::from(1 << 20);
    let lines = [
        format!(
            "workload: {} rows x {} counters = {values} values, {} marks",
            trace.samples.len(),
            trace.counters.len(),
            trace.marks.len()
        ),
        format!(
            "trace: {:.2} MiB with snapshot marks, {:.2} MiB with plain marks",
            mib(bytes.len()),
            mib(plain_bytes.len())
        ),
        format!(
            "bytes per counter value, whole trace: {:.3} (plain marks: {:.3})",
            bytes.len() as f64 / values as f64,
            plain_bytes.len() as f64 / values as f64
        ),
        format!("simulate + encode (best of 3): {:.0} ms", encode_secs * 1e3),
        format!(
            "decode (best of 5): {:.1} ms = {:.0} M counter values/s",
            decode_secs * 1e3,
            values as f64 / decode_secs / 1e6
        ),
        format!(
            "full analysis (best / median of 21): {:.1} / {:.1} ms",
            analysis_secs[0] * 1e3,
            analysis_secs[10] * 1e3
        ),
    ];
    // An example prints its report; that is its purpose.
    #[allow(clippy::print_stdout)]
    for line in lines {
        println!("{line}");
    }
}
