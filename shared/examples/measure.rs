//! Whole-trace measurements for BENCHMARKS.md: size per counter value, encode and decode
//! throughput, and full-analysis time on the 1-hour 1 kHz workload of the foundation issue.
//!
//! `cargo run --release -p oomscope-trace --example measure`

use std::time::Instant;

use oomscope_trace::synth::TrainingRun;
use oomscope_trace::{analysis, decode};

fn main() {
    let run = TrainingRun::hour_at_1khz();
    let start = Instant::now();
    let bytes = run.to_bytes();
    let generate_secs = start.elapsed().as_secs_f64();
    let decoded = decode(&bytes).expect("synthetic trace decodes");
    let trace = &decoded.trace;
    let rows = trace.samples.len();
    let counters = trace.counters.len();
    let values = rows * counters;

    // Size attributable to samples: the whole trace minus a trace with the same marks and
    // records but no samples would be ideal; instead report both the total and the per-value
    // figure of a samples-only trace of the same timeline.
    let samples_only = TrainingRun {
        snapshots: false,
        ..run.clone()
    };
    let no_marks_bytes = samples_only.to_bytes().len();

    let mut best_decode = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let d = decode(&bytes).expect("decodes");
        best_decode = best_decode.min(t.elapsed().as_secs_f64());
        std::hint::black_box(d);
    }
    let mut best_analysis = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let a = analysis::analyze(trace, &analysis::AnalysisOptions::default());
        best_analysis = best_analysis.min(t.elapsed().as_secs_f64());
        std::hint::black_box(a);
    }

    let report = [
        format!(
            "workload: {} steps x {} stages, {} rows x {} counters = {} values, {} marks",
            run.steps,
            5,
            rows,
            counters,
            values,
            trace.marks.len()
        ),
        format!(
            "trace size: {} bytes ({:.2} MiB)",
            bytes.len(),
            bytes.len() as f64 / (1 << 20) as f64
        ),
        format!(
            "bytes per counter value (whole trace / values): {:.3}",
            bytes.len() as f64 / values as f64
        ),
        format!(
            "bytes per counter value (trace with snapshot-free marks / values): {:.3}",
            no_marks_bytes as f64 / values as f64
        ),
        format!(
            "generate+encode: {:.3} s ({:.1} M values/s incl. simulation)",
            generate_secs,
            values as f64 / generate_secs / 1e6
        ),
        format!(
            "decode (best of 5): {:.1} ms = {:.1} M counter values/s",
            best_decode * 1e3,
            values as f64 / best_decode / 1e6
        ),
        format!("full analysis (best of 5): {:.1} ms", best_analysis * 1e3),
    ];
    // An example prints its report; this is its whole purpose.
    #[allow(clippy::print_stdout)]
    for line in report {
        println!("{line}");
    }
}
