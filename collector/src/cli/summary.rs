//! `collector summary TRACE [--json]`, `collector summary A --compare B` (before and after a
//! fix), and `collector summary DIR|TRACE... [--json]` for a job's
//! traces analysed together (one per node or per rank).

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use anyhow::{Context, Result};
use oomscope_analysis::job::{JobTrace, analyze_job};
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_words as render;
use oomscope_words::json::{AnalysisJson, RanksJson, SnapshotAnalysisJson, job_findings_worded};
use serde::Serialize;

use crate::trace_file::{TraceFile, open_snapshot, read_trace, read_trace_file};
use crate::ui::write_stdout;

/// `collector summary`.
#[derive(Debug, clap::Args)]
pub struct SummaryArgs {
    /// The trace; or several, or directories of them (`*.oomt`, searched recursively): a job's
    /// traces, one per node or rank, analysed together on the wall clock.
    #[arg(required = true, num_args = 1..)]
    pub traces: Vec<PathBuf>,
    /// Print stable JSON for scripts instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Compare TRACE (A, before a fix) with this trace (B, after it): what became of each finding,
    /// the memory peak, every peak and the stage table side by side. A report's `.html` file is
    /// read as the trace it embeds.
    #[arg(long, value_name = "OTHER", conflicts_with = "json")]
    pub compare: Option<PathBuf>,
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
    analysis: AnalysisJson<'a>,
}

pub fn summary(args: &SummaryArgs) -> Result<i32> {
    let files = trace_files(&args.traces)?;
    if files.len() > 1 || args.traces.iter().any(|p| p.is_dir()) {
        if args.compare.is_some() {
            anyhow::bail!("--compare takes one trace on each side, not a job's traces");
        }
        return job_summary(&files, args.json);
    }
    let path = &files[0];
    if let Some(snapshot) = open_snapshot(path)? {
        if args.compare.is_some() {
            anyhow::bail!(
                "--compare reads traces; {} is a memory snapshot",
                path.display()
            );
        }
        return snapshot_summary(path, snapshot, args.json);
    }
    let TraceFile {
        decoded,
        notice: a_notice,
    } = read_trace_file(path)?;
    let analysis = analyze(&decoded.trace, &AnalysisOptions::default());
    if let Some(other) = &args.compare {
        let b = read_trace_file(other)?;
        let b_analysis = analyze(&b.decoded.trace, &AnalysisOptions::default());
        let mut out = String::new();
        for (name, warnings) in [(path, &decoded.warnings), (other, &b.decoded.warnings)] {
            for w in warnings {
                out.push_str(&format!("warning: {}: {w}\n", name.display()));
            }
        }
        for (name, notice) in [(path, &a_notice), (other, &b.notice)] {
            if let Some(n) = notice {
                out.push_str(&format!("note: {}: {n}\n", name.display()));
            }
        }
        out.push_str(&render::compare::render_compare(
            &path.display().to_string(),
            &analysis,
            &other.display().to_string(),
            &b_analysis,
        ));
        write_stdout(out.as_bytes())?;
        return Ok(0);
    }
    let mut out = if args.json {
        let doc = SummaryJson {
            schema_version: SUMMARY_SCHEMA_VERSION,
            trace: path.display().to_string(),
            format_version: format!(
                "{}.{}",
                decoded.trace.format_version.0, decoded.trace.format_version.1
            ),
            warnings: decoded.warnings.iter().map(ToString::to_string).collect(),
            analysis: AnalysisJson::of(&analysis),
        };
        serde_json::to_string_pretty(&doc).context("encoding the summary as JSON failed")?
    } else {
        let mut text = String::new();
        for w in &decoded.warnings {
            text.push_str(&format!("warning: {w}\n"));
        }
        if let Some(n) = &a_notice {
            text.push_str(&format!("note: {n}\n"));
        }
        text.push_str(&render::summary::render(&decoded.trace, &analysis));
        text
    };
    if !out.ends_with('\n') {
        out.push('\n');
    }
    write_stdout(out.as_bytes())?;
    Ok(0)
}

/// The trace files named, directories searched recursively for `*.oomt` (sorted).
pub fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let before = files.len();
            collect(path, &mut files)
                .with_context(|| format!("cannot read the directory {}", path.display()))?;
            anyhow::ensure!(
                files.len() > before,
                "no trace (*.oomt) in {}",
                path.display()
            );
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn collect(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "oomt") {
            out.push(path);
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct JobJson<'a> {
    schema_version: u32,
    traces: Vec<String>,
    ranks: RanksJson<'a>,
    findings: Vec<oomscope_words::findings::Worded>,
}

/// Several traces of one job, side by side.
fn job_summary(files: &[PathBuf], json: bool) -> Result<i32> {
    let decoded = files
        .iter()
        .map(|f| read_trace(f))
        .collect::<Result<Vec<_>>>()?;
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let job: Vec<JobTrace<'_>> = decoded
        .iter()
        .zip(&names)
        .map(|(d, name)| JobTrace {
            source: name,
            trace: &d.trace,
        })
        .collect();
    let analysis = analyze_job(&job, &AnalysisOptions::default());
    let mut out = if json {
        let doc = JobJson {
            schema_version: SUMMARY_SCHEMA_VERSION,
            traces: names,
            ranks: RanksJson::of(&analysis),
            findings: job_findings_worded(&oomscope_analysis::job::job_findings(&analysis)),
        };
        serde_json::to_string_pretty(&doc).context("encoding the summary as JSON failed")?
    } else {
        let mut text = String::new();
        for (d, name) in decoded.iter().zip(&names) {
            for w in &d.warnings {
                text.push_str(&format!("warning: {name}: {w}\n"));
            }
        }
        let sources: Vec<(String, String)> = decoded
            .iter()
            .zip(&names)
            .map(|(d, name)| (name.clone(), render::job::trace_about(&d.trace)))
            .collect();
        text.push_str(&render::job::render_job(&sources, &analysis));
        text
    };
    if !out.ends_with('\n') {
        out.push('\n');
    }
    write_stdout(out.as_bytes())?;
    Ok(0)
}

#[derive(Serialize)]
struct SnapshotJson<'a> {
    schema_version: u32,
    snapshot: String,
    trace_entries: usize,
    segments: usize,
    frames: usize,
    stacks: usize,
    warnings: &'a [String],
    analysis: SnapshotAnalysisJson<'a>,
}

/// `collector summary snap.pickle`: a PyTorch memory snapshot read in one streaming pass.
fn snapshot_summary(path: &std::path::Path, file: BufReader<File>, json: bool) -> Result<i32> {
    use oomscope_analysis::snapshot::analysis::analyze_snapshot;
    use oomscope_snapshot::read_snapshot;
    use oomscope_words::snapshot::render_snapshot;
    let snap = read_snapshot(file).with_context(|| format!("cannot open {}", path.display()))?;
    let analysis = analyze_snapshot(&snap);
    let mut out = if json {
        serde_json::to_string_pretty(&SnapshotJson {
            schema_version: SUMMARY_SCHEMA_VERSION,
            snapshot: path.display().to_string(),
            trace_entries: snap.events(),
            segments: snap.segments.len(),
            frames: snap.frames.len(),
            stacks: snap.stacks.len(),
            warnings: &snap.warnings,
            analysis: SnapshotAnalysisJson::of(&analysis),
        })
        .context("encoding the summary as JSON failed")?
    } else {
        render_snapshot(&path.display().to_string(), &snap, &analysis)
    };
    if !out.ends_with('\n') {
        out.push('\n');
    }
    write_stdout(out.as_bytes())?;
    Ok(0)
}
