//! `collector report [TRACE]`: one self-contained HTML file (the work is in [`crate::report`]).

use std::path::PathBuf;

use anyhow::Result;

use super::write_stdout;

/// `collector report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The trace; without one, the page is an empty viewer that opens trace files.
    pub trace: Option<PathBuf>,
    /// Output file [default: the trace's path with `.html`].
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Largest report in megabytes (10^6 bytes); a larger trace is embedded with thinned
    /// samples. 0: no limit, always embed the whole trace.
    #[arg(long, default_value_t = 5.0, value_name = "MB")]
    pub max_size_mb: f64,
}

pub fn report(args: &ReportArgs) -> Result<i32> {
    if !(args.max_size_mb.is_finite() && args.max_size_mb >= 0.0) {
        anyhow::bail!("--max-size-mb must be a number of megabytes, 0 for no limit");
    }
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| crate::report::default_output(args.trace.as_deref()));
    if args.trace.as_deref() == Some(output.as_path()) {
        anyhow::bail!(
            "the report would overwrite its own trace {}: name the report with -o",
            output.display()
        );
    }
    let max_bytes = (args.max_size_mb * 1e6) as u64;
    let (bytes, thinned) = crate::report::write_report(args.trace.as_deref(), &output, max_bytes)?;
    if thinned {
        crate::ui::warning(&format!(
            "the trace did not fit in {} MB: the report carries its samples thinned (the page says so; --max-size-mb 0 keeps all)",
            args.max_size_mb
        ));
    }
    crate::ui::info(&format!(
        "report: {} ({})",
        output.display(),
        oomscope_trace::units::format_bytes(bytes as u64)
    ));
    write_stdout(format!("{}\n", output.display()).as_bytes())?;
    Ok(0)
}
