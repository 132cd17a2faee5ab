//! `collector summary TRACE [--json]`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use oomscope_trace::analysis::{AnalysisOptions, analyze};
use oomscope_trace::text;
use serde::Serialize;

use super::write_stdout;
use crate::trace_file::read_trace;

/// `collector summary`.
#[derive(Debug, clap::Args)]
pub struct SummaryArgs {
    /// The trace.
    pub trace: PathBuf,
    /// Print stable JSON for scripts instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Version of the `summary --json` document; bumped only when a field is removed or changes
/// meaning (fields may be added).
pub const SUMMARY_SCHEMA_VERSION: u32 = 1;

#[derive(Serialize)]
struct SummaryJson<'a> {
    schema_version: u32,
    trace: String,
    format_version: String,
    warnings: Vec<String>,
    analysis: &'a oomscope_trace::analysis::Analysis,
}

pub fn summary(args: &SummaryArgs) -> Result<i32> {
    let decoded = read_trace(&args.trace)?;
    let analysis = analyze(&decoded.trace, &AnalysisOptions::default());
    let mut out = if args.json {
        let doc = SummaryJson {
            schema_version: SUMMARY_SCHEMA_VERSION,
            trace: args.trace.display().to_string(),
            format_version: format!(
                "{}.{}",
                decoded.trace.format_version.0, decoded.trace.format_version.1
            ),
            warnings: decoded.warnings.iter().map(ToString::to_string).collect(),
            analysis: &analysis,
        };
        serde_json::to_string_pretty(&doc).context("encoding the summary as JSON failed")?
    } else {
        let mut text = String::new();
        for w in &decoded.warnings {
            text.push_str(&format!("warning: {w}\n"));
        }
        text.push_str(&text::render(&decoded.trace, &analysis));
        text
    };
    if !out.ends_with('\n') {
        out.push('\n');
    }
    write_stdout(out.as_bytes())?;
    Ok(0)
}
