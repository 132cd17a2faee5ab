//! Prints the verdict a report of a trace opens with, as JSON (each line's severity, id, words
//! and change; how many findings follow; what a clean verdict checked): a look at the verdict
//! without a browser, and what a wording review compares between two builds.
//!
//! `cargo run -p oomscope-words --example verdict -- run.oomt`

use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_words::verdict::verdict;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: verdict TRACE")?;
    let trace = oomscope_format::decode(&std::fs::read(&path)?)?.trace;
    let v = verdict(&trace, &analyze(&trace, &AnalysisOptions::default()));
    let lines: Vec<serde_json::Value> = v
        .lines
        .iter()
        .map(|l| {
            serde_json::json!({
                "severity": l.severity.label(),
                "id": l.kind.id(),
                "said": l.said(),
                "change": l.change,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "short": v.short,
        "more": v.more.to_string(),
        "clean": v.clean,
        "lines": lines,
    });
    #[allow(clippy::print_stdout)] // the example's output
    {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(())
}
