//! The main job until `collector run` exists: writes a generated training run with planted
//! faults to disk through the real writer, reads it back, and prints the same summary the
//! collector and the viewer show.
//!
//! `cargo run --release -p oomscope-words --example demo -- out/demo.oomt`
//!
//! With `--more` the run also searches its batch size first and gets NaN gradients from step
//! 150, so every section of the viewer has something to show.
//!
//! With `--hour` it writes the benchmark workload instead: one hour sampled at 1 kHz
//! (`TrainingRun::hour_at_1khz`), the trace BENCHMARKS.md measures reports and the viewer with.
//! With `--day`, a day sampled at 100 Hz (240 000 steps of 0.36 s): what a watcher follows at the
//! end of a long run (`scripts/measure_watch.py`).

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use oomscope_format::decode;
use oomscope_testkit::synth::TrainingRun;
use oomscope_words as render;

use oomscope_format::units::MIB;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let hour = args.iter().any(|a| a == "--hour");
    let day = args.iter().any(|a| a == "--day");
    let more = args.iter().any(|a| a == "--more");
    let path = PathBuf::from(
        args.iter()
            .find(|a| !a.starts_with("--"))
            .cloned()
            .unwrap_or_else(|| "out/demo.oomt".into()),
    );
    // A 7B-parameter-class run in bf16 with Adam on an 80 GiB GPU: activations dominate, a
    // loss tensor is kept every step (the classic `losses.append(loss)` leak), evaluation runs
    // with autograd on and keeps its outputs on the device, and the allocator fragments.
    let demo = TrainingRun {
        steps: 400,
        step_us: 250_000,
        sample_interval_us: 10_000,
        batch_size: 12,
        parameters_bytes: 6 << 30,
        optimizer_factor: 2.0,
        activation_bytes_per_sample: 2600 * MIB,
        leak_bytes_per_step: 24 * MIB,
        eval_every: Some(100),
        eval_steps: 8,
        eval_activation_fraction: 0.4,
        eval_retained_bytes: 1536 * MIB,
        fragmentation_bytes: 3 << 30,
        alloc_retries_per_step: 1,
        tensor_stats_every: 50,
        ..TrainingRun::default()
    };
    let run = if day {
        TrainingRun {
            steps: 240_000,
            step_us: 360_000,
            sample_interval_us: 10_000,
            ..TrainingRun::default()
        }
    } else if hour {
        TrainingRun::hour_at_1khz()
    } else if more {
        TrainingRun {
            batch_search: true,
            nan_at_step: Some(150),
            ..demo
        }
    } else {
        demo
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = BufWriter::new(File::create(&path)?);
    run.write_to(file)?;
    let bytes = std::fs::read(&path)?;
    let decoded = decode(&bytes)?;
    let analysis = oomscope_analysis::analyze(
        &decoded.trace,
        &oomscope_analysis::AnalysisOptions::default(),
    );
    let mut out = String::new();
    for warning in &decoded.warnings {
        out.push_str(&format!("warning: {warning}\n"));
    }
    out.push_str(&render::summary::render(&decoded.trace, &analysis));
    out.push_str(&format!(
        "\ntrace: {} ({} bytes)\n",
        path.display(),
        bytes.len()
    ));
    // An example prints its report; that is its purpose.
    #[allow(clippy::print_stdout)]
    {
        print!("{out}");
    }
    Ok(())
}
