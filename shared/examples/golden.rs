//! Regenerates the golden traces in `shared/tests/data/`.
//!
//! `cargo run -p oomscope-trace --example golden -- shared/tests/data`
//!
//! Golden files are written ONCE per format version and then committed and never rewritten:
//! `tests/golden.rs` decodes them so that a later change cannot silently break old traces. Only
//! run this to add the files of a NEW version (it refuses to overwrite existing files).

// A developer tool: it reports what it wrote on stderr.
#![allow(clippy::print_stderr)]

use std::path::PathBuf;

use oomscope_trace::WriterOptions;
use oomscope_trace::synth::TrainingRun;

/// The instrumented run: snapshots, components, gradients, tensors, batch search, eval, a leak.
pub fn instrumented() -> TrainingRun {
    TrainingRun {
        steps: 30,
        step_us: 100_000,
        sample_interval_us: 20_000,
        process_poll_us: 200_000,
        leak_bytes_per_step: 48 << 20,
        eval_every: Some(10),
        eval_steps: 2,
        eval_retained_bytes: 512 << 20,
        batch_search: true,
        tensor_stats_every: 10,
        writer: WriterOptions {
            flush_interval_us: 250_000,
            ..WriterOptions::default()
        },
        ..TrainingRun::default()
    }
}

/// A plain run (no snapshots) that dies of OOM at step 12.
pub fn oom() -> TrainingRun {
    TrainingRun {
        steps: 20,
        step_us: 100_000,
        sample_interval_us: 20_000,
        batch_size: 64,
        activation_bytes_per_sample: 1 << 30,
        oom_at_step: Some(12),
        leak_bytes_per_step: 1 << 30,
        snapshots: false,
        ..TrainingRun::default()
    }
}

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "shared/tests/data".into()),
    );
    let instrumented = instrumented().to_bytes();
    let files = [
        ("v1_0_instrumented.oomt", instrumented.clone()),
        ("v1_0_oom.oomt", oom().to_bytes()),
        // Cut in the middle of a chunk, as a killed recorder leaves it.
        (
            "v1_0_truncated.oomt",
            instrumented[..instrumented.len() * 2 / 3].to_vec(),
        ),
    ];
    for (name, bytes) in files {
        let path = dir.join(name);
        if path.exists() {
            eprintln!(
                "{} exists: golden files are never rewritten",
                path.display()
            );
            continue;
        }
        std::fs::write(&path, bytes)?;
        eprintln!(
            "wrote {} ({} bytes)",
            path.display(),
            std::fs::metadata(&path)?.len()
        );
    }
    Ok(())
}
