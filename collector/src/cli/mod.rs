//! The command line: `collector run | attach | summary | watch | serve | export | report | estimate`. This module holds
//! the top-level arguments and the dispatch; each command's arguments and body live in a module
//! of their own.
//!
//! Every failure ends as one `error: …` line on stderr and a non-zero exit code (2 for usage
//! errors, as clap reports them; 1 otherwise; 127 when the program to run does not exist).
//! `collector run` exits with the program's own code.

mod attach;
mod estimate;
mod export;
mod report;
mod run;
mod serve;
mod summary;
mod watch;

use anyhow::Result;
use clap::{Parser, Subcommand};

pub use attach::AttachArgs;
pub use estimate::{EstimateArgs, OptimizerArg, PrecisionArg, ShardArg};
pub use export::{ExportArgs, ExportFormat};
pub use report::ReportArgs;
pub use run::RunArgs;
pub use serve::ServeArgs;
pub use summary::{SUMMARY_SCHEMA_VERSION, SummaryArgs};
pub use watch::WatchArgs;

/// Where GPU and host memory goes during training, why a run died of OOM, and what to change.
#[derive(Debug, Parser)]
#[command(name = "collector", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a program and record its GPU and host memory into a trace.
    Run(RunArgs),
    /// Record a process that is already running (and the processes it starts) until it ends or Ctrl-C.
    Attach(AttachArgs),
    /// Print the analysis of a trace: peaks, stage table, leaks, OOM context, recommendations.
    Summary(SummaryArgs),
    /// Follow traces while their runs record them: memory against its limits, warnings at 90%, leaks and when memory is full.
    Watch(WatchArgs),
    /// Serve the viewer over HTTP (127.0.0.1) with traces streamed to it as their runs write them.
    Serve(ServeArgs),
    /// Export a trace to CSV or Chrome trace-event JSON (Perfetto), or traces to Parquet tables.
    Export(ExportArgs),
    /// Write one self-contained HTML file with the viewer and the trace, or a job's traces (opens offline).
    Report(ReportArgs),
    /// Estimate the memory needed to train a model: weights, gradients, optimizer, activations.
    Estimate(EstimateArgs),
}

/// Runs the parsed command; returns the process exit code.
pub fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Attach(args) => attach::attach(&args),
        Command::Summary(args) => summary::summary(&args),
        Command::Watch(args) => watch::watch(&args),
        Command::Serve(args) => serve::serve(&args),
        Command::Export(args) => export::export(&args),
        Command::Report(args) => report::report(&args),
        Command::Estimate(args) => estimate::estimate(&args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn arguments_after_the_command_belong_to_it() {
        let cli = Cli::try_parse_from([
            "collector",
            "run",
            "--quiet",
            "--",
            "python",
            "train.py",
            "--quiet",
            "-o",
            "x",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!()
        };
        assert!(run.quiet);
        assert_eq!(run.command, ["python", "train.py", "--quiet", "-o", "x"]);
        assert_eq!(run.out, None);
    }

    #[test]
    fn a_run_needs_a_command() {
        assert!(Cli::try_parse_from(["collector", "run"]).is_err());
        assert!(
            Cli::try_parse_from(["collector", "run", "--interval-ms", "0", "--", "x"]).is_err()
        );
    }
}
