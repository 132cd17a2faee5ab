//! `collector export TRACE --format csv|chrome`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::ValueEnum;
use oomscope_trace::export::{to_chrome_json, to_csv};

use super::write_stdout;
use crate::trace_file::read_trace;

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// One row per sample and per mark.
    Csv,
    /// Chrome trace-event JSON: counter tracks and stage slices (opens in Perfetto).
    Chrome,
}

/// `collector export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The trace.
    pub trace: PathBuf,
    /// Output format.
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Output file [default: stdout].
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

pub fn export(args: &ExportArgs) -> Result<i32> {
    let decoded = read_trace(&args.trace)?;
    for w in &decoded.warnings {
        crate::ui::warning(&w.to_string());
    }
    let body = match args.format {
        ExportFormat::Csv => to_csv(&decoded.trace),
        ExportFormat::Chrome => to_chrome_json(&decoded.trace),
    };
    match &args.output {
        Some(path) => std::fs::write(path, body)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => write_stdout(body.as_bytes())?,
    }
    Ok(0)
}
