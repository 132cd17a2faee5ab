//! The ranks' workloads of BENCHMARKS.md: one node of 8 ranks recorded for an hour at 100 Hz
//! (its size, decode and analysis time; `--out DIR` keeps it for `collector report` and the
//! browser), and a job of 64 one-rank traces merged as `collector summary DIR` does (decode and
//! `analyze_job`).
//!
//! `cargo run --release -p oomscope-analysis --example ranks_workload -- [--out DIR]`

// It prints its measurements: that is its output.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use oomscope_analysis::job::{JobTrace, analyze_job};
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::decode;
use oomscope_testkit::synth::NodeRun;

/// The ranks' workloads, measured.
#[derive(Parser)]
struct Args {
    /// Write the node's trace (`node8.oomt`) and the job's (`job/rank-N.oomt`) here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Traces in the job.
    #[arg(long, default_value_t = 64)]
    traces: u32,
    /// Minutes each of the job's traces lasts (one rank each, 100 Hz).
    #[arg(long, default_value_t = 10)]
    job_minutes: u64,
}

fn secs(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

fn main() {
    let args = Args::parse();
    let node = NodeRun::default();
    let start = Instant::now();
    let bytes = node.to_bytes();
    let encode = secs(start);
    let start = Instant::now();
    let trace = decode(&bytes).expect("decodes").trace;
    let decode_s = secs(start);
    let start = Instant::now();
    let analysis = analyze(&trace, &AnalysisOptions::default());
    let analyse = secs(start);
    let values = trace.samples.cells();
    println!(
        "node: {} ranks x {} s at {} Hz: {} rows, {} counters, {values} values, {} marks; \
         {:.1} MiB ({:.2} bytes/value); simulate+encode {encode:.2} s, decode {decode_s:.2} s, \
         analysis {analyse:.2} s ({} ranks compared)",
        node.ranks,
        node.seconds,
        1_000_000 / node.sample_interval_us,
        trace.samples.len(),
        trace.counters.len(),
        trace.marks.len(),
        bytes.len() as f64 / f64::from(1 << 20),
        bytes.len() as f64 / values as f64,
        analysis.ranks.as_ref().map_or(0, |r| r.ranks.len()),
    );
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir.join("job")).expect("output directory");
        std::fs::write(dir.join("node8.oomt"), &bytes).expect("write the node's trace");
    }

    let job: Vec<Vec<u8>> = (0..args.traces)
        .map(|rank| {
            NodeRun {
                host: format!("node-{}", rank / 8),
                ranks: 1,
                first_rank: rank,
                world_size: args.traces,
                seconds: args.job_minutes * 60,
                start_unix_ns: NodeRun::default().start_unix_ns + u64::from(rank) * 1_000_000,
                ..NodeRun::default()
            }
            .to_bytes()
        })
        .collect();
    let total: usize = job.iter().map(Vec::len).sum();
    if let Some(dir) = &args.out {
        for (rank, bytes) in job.iter().enumerate() {
            std::fs::write(dir.join(format!("job/rank-{rank:02}.oomt")), bytes)
                .expect("write a job trace");
        }
    }
    let start = Instant::now();
    let decoded: Vec<_> = job
        .iter()
        .map(|b| decode(b).expect("decodes").trace)
        .collect();
    let decode_s = secs(start);
    let names: Vec<String> = (0..job.len())
        .map(|i| format!("rank-{i:02}.oomt"))
        .collect();
    let traces: Vec<JobTrace<'_>> = decoded
        .iter()
        .zip(&names)
        .map(|(trace, source)| JobTrace { source, trace })
        .collect();
    let start = Instant::now();
    let merged = analyze_job(&traces, &AnalysisOptions::default());
    let merge = secs(start);
    println!(
        "job: {} traces of {} min at 100 Hz ({:.1} MiB in all): decode {decode_s:.2} s, \
         analyze_job {merge:.2} s, {} ranks",
        job.len(),
        args.job_minutes,
        total as f64 / f64::from(1 << 20),
        merged.ranks.len()
    );
}
