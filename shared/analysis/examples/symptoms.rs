//! Prints each trace's symptoms, one line each: the memory, its unit, the shape and its numbers
//! (what `summary --json` writes as `symptom`, for every memory). A look at what the readings
//! alone say, before any rule.
//!
//! `cargo run --release -p oomscope-analysis --example symptoms -- TRACE...`

#![allow(clippy::print_stdout)]

use oomscope_analysis::symptom::symptoms;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path)?;
        let trace = oomscope_format::decode(&bytes)?.trace;
        for s in symptoms(&trace) {
            println!(
                "{path}: {} per {}: {}",
                s.metric,
                s.unit.word(),
                serde_json::to_string(&s)?
            );
        }
    }
    Ok(())
}
