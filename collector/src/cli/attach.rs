//! `collector attach PID`: arguments, and what is printed when the watch ends.

use std::path::PathBuf;

use anyhow::Result;

use crate::run::attach::AttachOptions;

/// `collector attach`.
#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The running process to record, with the processes it starts (its children as they come
    /// and go). It is not changed: no hooks are loaded into it, so its memory is read from
    /// outside and the trace's clock is time.
    pub pid: u32,
    /// Trace file to write [default: oomscope-YYYYMMDD-HHMMSS.oomt in the current directory].
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// What is sampled, and how often.
    #[command(flatten)]
    pub sampling: super::run::SamplingArgs,
    /// No summary; only the trace path is printed.
    #[arg(short, long)]
    pub quiet: bool,
    /// Take marks from the process: bind a marker socket and write its path to this file, for
    /// the process to send to (`OOMSCOPE_SOCKET`). The IPython extension (`%load_ext oomscope`)
    /// starts the collector so.
    #[arg(long, value_name = "FILE")]
    pub socket_file: Option<PathBuf>,
}

/// Records until the process ends or Ctrl-C (which stops the recording, not the process), then
/// prints the summary as `collector run` does.
pub fn attach(args: &AttachArgs) -> Result<i32> {
    let options = AttachOptions {
        pid: args.pid,
        out: args
            .out
            .clone()
            .unwrap_or_else(super::run::default_trace_name),
        interval: args.sampling.interval(),
        process_interval: args.sampling.process_interval(),
        gpus: args.sampling.gpus.clone(),
        announce: !args.quiet,
        socket_file: args.socket_file.clone(),
    };
    let outcome = crate::run::attach::attach(&options)?;
    super::run::print_outcome(&outcome, args.quiet);
    Ok(outcome.exit_code)
}
