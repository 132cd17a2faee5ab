//! Regenerates the golden traces in `shared/format/tests/data/`.
//!
//! `cargo run -p oomscope-format --example golden -- shared/format/tests/data`
//!
//! Golden files are written ONCE per format version and then committed and never rewritten:
//! `shared/format/tests/golden.rs` decodes them so that a later change cannot silently break old traces. Only
//! run this to add the files of a NEW version (it refuses to overwrite existing files).
//!
//! This file names the files and writes them; the traces themselves are made in `processes.rs`
//! (format v1.0 to v1.7) and `facts.rs` (v1.8 on).

// A developer tool: it reports what it wrote on stderr.
#![allow(clippy::print_stderr)]

mod facts;
mod processes;

use std::path::PathBuf;

use facts::{
    file_pages, held, held_clocks, hook_facts, inputs, mark_sampling, optimizers, program_end, shm,
    start_methods,
};
use processes::{
    alive_at_oom, host_error, instrumented, launcher_kill, mark_senders, oom, oom_allocator_state,
    oom_kill, pipeline_groups, ranks,
};

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "shared/format/tests/data".into()),
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
        ("v1_1_host_error.oomt", host_error()),
        ("v1_2_mark_senders.oomt", mark_senders()),
        ("v1_3_alive_at_oom.oomt", alive_at_oom()),
        ("v1_4_oom_kill.oomt", oom_kill()),
        ("v1_5_ranks.oomt", ranks()),
        ("v1_6_launcher_kill.oomt", launcher_kill()),
        ("v1_6_pipeline_groups.oomt", pipeline_groups()),
        ("v1_7_oom_allocator_state.oomt", oom_allocator_state()),
        ("v1_8_file_pages.oomt", file_pages()),
        ("v1_9_held.oomt", held()),
        ("v1_10_inputs.oomt", inputs()),
        ("v1_10_optimizers.oomt", optimizers()),
        ("v1_11_hook_facts.oomt", hook_facts()),
        ("v1_11_mark_sampling.oomt", mark_sampling()),
        ("v1_12_program_end.oomt", program_end()),
        ("v1_12_start_methods.oomt", start_methods()),
        ("v1_13_held_clocks.oomt", held_clocks()),
        ("v1_13_shm.oomt", shm()),
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
