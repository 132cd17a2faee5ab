//! `collector export TRACE|SNAPSHOT --format csv|chrome` and `collector export DIR|TRACE...
//! --format parquet -o OUT`.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use oomscope_report::export::{to_chrome_json, to_csv};

use crate::trace_file::{open_snapshot, read_trace};
use crate::ui::write_stdout;

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// One row per sample and per mark (of a memory snapshot: per trace entry, with the active
    /// and reserved bytes after it).
    Csv,
    /// Chrome trace-event JSON: counter tracks and stage slices (opens in Perfetto); of a memory
    /// snapshot, active and reserved bytes per GPU and its OOMs.
    Chrome,
    /// Fleet tables (runs, samples, marks, ooms, ranks, peaks, findings, evidence, fits,
    /// components) as hive-partitioned Parquet for DuckDB, Polars or Spark:
    /// OUT/<table>/run=<run_id>/part-0.parquet.
    Parquet,
}

/// `collector export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The trace (or report, or PyTorch memory snapshot pickle); for Parquet, any number of
    /// traces and directories (searched for *.oomt).
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Output file [default: stdout]; for Parquet, the directory to write the tables into
    /// (required; a run exported again replaces its files).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

pub fn export(args: &ExportArgs) -> Result<i32> {
    if args.format == ExportFormat::Parquet {
        let Some(out) = &args.output else {
            bail!("--format parquet writes a directory of tables: name it with -o DIR");
        };
        return parquet(&args.traces, out);
    }
    let [trace] = args.traces.as_slice() else {
        bail!(
            "--format {} exports one trace ({} named); Parquet takes several",
            format_name(args.format),
            args.traces.len()
        );
    };
    if let Some(file) = open_snapshot(trace)? {
        return snapshot(trace, file, args);
    }
    let decoded = read_trace(trace)?;
    for w in &decoded.warnings {
        crate::ui::warning(&w.to_string());
    }
    let body = match args.format {
        ExportFormat::Csv => to_csv(&decoded.trace),
        ExportFormat::Chrome => to_chrome_json(&decoded.trace),
        ExportFormat::Parquet => unreachable!("written above"),
    };
    match &args.output {
        Some(path) => std::fs::write(path, body)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => write_stdout(body.as_bytes())?,
    }
    Ok(0)
}

/// A PyTorch memory snapshot's timeline: a row (or a counter event) per trace entry, written as
/// it is replayed.
fn snapshot(path: &Path, file: BufReader<File>, args: &ExportArgs) -> Result<i32> {
    use oomscope_report::snapshot_export as export;
    use oomscope_snapshot::read_snapshot;
    let snap = read_snapshot(file).with_context(|| format!("cannot open {}", path.display()))?;
    for w in &snap.warnings {
        crate::ui::warning(w);
    }
    let mut out: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(BufWriter::new(
            File::create(p).with_context(|| format!("cannot write {}", p.display()))?,
        )),
        None => Box::new(BufWriter::new(std::io::stdout().lock())),
    };
    let written = match args.format {
        ExportFormat::Csv => export::write_csv(&snap, &mut out),
        ExportFormat::Chrome => export::write_chrome_json(&snap, &mut out),
        ExportFormat::Parquet => unreachable!("refused above"),
    };
    let where_to = || {
        args.output
            .as_ref()
            .map_or_else(|| "standard output".to_owned(), |p| p.display().to_string())
    };
    match written.and_then(|()| out.flush()) {
        // A closed pipe (`| head`) is the reader's choice, not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe && args.output.is_none() => Ok(0),
        other => other
            .map(|()| 0)
            .with_context(|| format!("cannot write {}", where_to())),
    }
}

fn format_name(format: ExportFormat) -> String {
    format
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

#[cfg(feature = "parquet")]
fn parquet(traces: &[PathBuf], out: &Path) -> Result<i32> {
    use crate::fleet;
    use oomscope_analysis::{AnalysisOptions, analyze};

    let files = super::summary::trace_files(traces)?;
    if out.is_file() {
        bail!(
            "{} is a file: -o names a directory for the tables",
            out.display()
        );
    }
    let options = AnalysisOptions::default();
    let (mut rows, mut bytes) = (0usize, 0u64);
    let mut exported: Vec<(String, &PathBuf)> = Vec::new();
    for file in &files {
        let decoded = read_trace(file)?;
        for w in &decoded.warnings {
            crate::ui::warning(&format!("{}: {w}", file.display()));
        }
        let run_id = fleet::run_id(&decoded.trace.metadata);
        // Two files of one run (a copy, a renamed file): the first one named is exported.
        if let Some((_, first)) = exported.iter().find(|(id, _)| *id == run_id) {
            crate::ui::warning(&format!(
                "{} is the same run as {} ({run_id}): not exported twice",
                file.display(),
                first.display()
            ));
            continue;
        }
        let analysis = analyze(&decoded.trace, &options);
        let source = file.display().to_string();
        let chunks = fleet::sample_chunks(
            &decoded.trace,
            &run_id,
            crate::parquet_export::ROW_GROUP_ROWS,
        );
        let mut written = vec![crate::parquet_export::write_table(
            out,
            &run_id,
            &fleet::SAMPLES,
            chunks,
        )?];
        for table in fleet::tables(&decoded.trace, &source, &analysis, &options) {
            written.push(crate::parquet_export::write_table(
                out,
                &run_id,
                table.spec,
                [table],
            )?);
        }
        for (path, n) in written {
            rows += n;
            bytes += std::fs::metadata(&path).map_or(0, |m| m.len());
        }
        exported.push((run_id, file));
    }
    crate::ui::info(&format!(
        "wrote {} run{} ({rows} rows, {}) into {}: query with read_parquet('{}/<table>/*/*.parquet')",
        exported.len(),
        if exported.len() == 1 { "" } else { "s" },
        oomscope_format::units::format_bytes(bytes),
        out.display(),
        out.display()
    ));
    Ok(0)
}

#[cfg(not(feature = "parquet"))]
fn parquet(_traces: &[PathBuf], _out: &Path) -> Result<i32> {
    bail!(
        "this collector was built without Parquet export: build it with `cargo build --release -p oomscope-collector --features parquet`"
    )
}
