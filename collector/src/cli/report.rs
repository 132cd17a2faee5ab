//! `collector report [TRACE | DIR | TRACE...]`: one self-contained HTML file (the work is in
//! [`crate::report`]); a directory or several traces make a job's report.

use std::path::PathBuf;

use anyhow::Result;

use crate::report::Named;
use crate::ui::write_stdout;

/// `collector report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The trace; a directory (searched for *.oomt) or several traces make a job's report, its
    /// ranks analysed together as `collector summary DIR` does; without any, the page is an empty
    /// viewer that opens trace files.
    pub traces: Vec<PathBuf>,
    /// Output file [default: the trace's path with `.html`].
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Largest report in megabytes (10^6 bytes); a larger trace is embedded with thinned
    /// samples. 0: no size limit.
    #[arg(long, default_value_t = crate::report::DEFAULT_MAX_BYTES as f64 / 1e6, value_name = "MB")]
    pub max_size_mb: f64,
    /// About the most sample rows the report carries (a job's traces share them), so that it
    /// opens at once; a trace with more is embedded with thinned samples (each counter's extremes
    /// per time slice kept; the reading at every stage mark always). 0: no limit.
    #[arg(long, default_value_t = crate::report::DEFAULT_MAX_ROWS, value_name = "ROWS")]
    pub max_rows: usize,
}

pub fn report(args: &ReportArgs) -> Result<i32> {
    if !(args.max_size_mb.is_finite() && args.max_size_mb >= 0.0) {
        anyhow::bail!("--max-size-mb must be a number of megabytes, 0 for no limit");
    }
    let output = match (&args.output, args.traces.as_slice()) {
        (Some(o), _) => o.clone(),
        (None, []) => crate::report::default_output(None),
        (None, [one]) => crate::report::default_output(Some(one)),
        (None, _) => anyhow::bail!("a report of several traces needs a name: -o REPORT.html"),
    };
    // A directory's traces are named by their path inside it.
    let root = match args.traces.as_slice() {
        [dir] if dir.is_dir() => Some(dir.as_path()),
        _ => None,
    };
    let traces: Vec<Named> = match args.traces.as_slice() {
        [] => Vec::new(),
        paths => super::summary::trace_files(paths)?
            .into_iter()
            .map(|p| Named::new(p, root))
            .collect(),
    };
    if traces.iter().any(|t| t.path == output) {
        anyhow::bail!(
            "the report would overwrite its own trace {}: name the report with -o",
            output.display()
        );
    }
    let max_bytes = (args.max_size_mb * 1e6) as u64;
    let (bytes, thinned) = crate::report::write_report(&traces, &output, max_bytes, args.max_rows)?;
    if let Some(why) = thinned.first() {
        let which = match traces.len() {
            1 => "a thinned copy of the trace".to_owned(),
            n => format!("thinned copies of {} of its {n} traces", thinned.len()),
        };
        crate::ui::warning(&format!(
            "the report carries {which}, {why} (the page says so; --max-size-mb 0 --max-rows 0 \
             keep every sample)"
        ));
    }
    crate::ui::info(&format!(
        "report: {} ({})",
        output.display(),
        oomscope_format::units::format_bytes(bytes as u64)
    ));
    write_stdout(format!("{}\n", output.display()).as_bytes())?;
    Ok(0)
}
