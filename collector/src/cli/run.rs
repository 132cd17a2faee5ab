//! `collector run -- CMD`: arguments, and what is printed after the program exits.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_words as render;

use crate::gpu::GpuSelection;
use crate::run::RunOptions;
use crate::trace_file::read_trace;

/// How often memory is read, and which GPUs: `collector run`'s and `collector attach`'s.
#[derive(Debug, Clone, clap::Args)]
pub struct SamplingArgs {
    /// Sampling interval of GPU and host memory, in milliseconds (1 = 1 kHz).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub interval_ms: u64,
    /// Interval of the per-process GPU memory query, in milliseconds. That NVML query takes the
    /// driver's global lock, so it runs far less often than the sampler.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub process_interval_ms: u64,
    /// GPUs to watch: `all` or indices such as `0,2`.
    #[arg(long, default_value = "all")]
    pub gpus: GpuSelection,
}

impl SamplingArgs {
    /// The sampler's interval.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// The process tree's and per-process GPU query's interval.
    pub fn process_interval(&self) -> Duration {
        Duration::from_millis(self.process_interval_ms)
    }
}

/// `collector run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Trace file to write [default: oomscope-YYYYMMDD-HHMMSS.oomt in the current directory].
    /// May be a template filled from the launchers' environment, one file per node or rank:
    /// `{job}` (SLURM_JOB_ID, TORCHELASTIC_RUN_ID, …), `{node}` (SLURMD_NODENAME or the host
    /// name), `{node_rank}`, `{rank}`, `{local_rank}`, `{attempt}`, `{pid}`, `{host}`, e.g.
    /// `-o 'runs/{job}/{node}-{rank}.oomt'`; missing directories are made, and a templated
    /// path that already exists (another rank's file) is refused, never overwritten.
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// What is sampled, and how often.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// No live status line and no summary; only the trace path is printed.
    #[arg(short, long)]
    pub quiet: bool,
    /// What `collector watch` shows, while the program runs: on a terminal of at least 30 rows,
    /// its view in a pane at the bottom (memory against limits, memory per step, the leak with
    /// when memory is full, the findings), the program's own output scrolling above it,
    /// unchanged; on a smaller one, in the status line's words (a warning when a GPU or the host
    /// passes 90% of its limit, the leak). The trace is read as it is written, its analysis under
    /// 1% of a core.
    #[arg(long, conflicts_with = "quiet")]
    pub live: bool,
    /// Memory limit used to judge whether a SIGKILL was the host OOM killer [default: the
    /// cgroup's memory.max, else the host's RAM].
    #[arg(long, hide = true)]
    pub host_limit_bytes: Option<u64>,
    /// Do not load the zero-code PyTorch hooks into Python programs (stage marks, steps, phases,
    /// allocator statistics and the OOM moment, with no code change). Without them a Python
    /// program is recorded like any other: memory from outside, OOMs from stderr.
    #[arg(long)]
    pub no_python_hooks: bool,
    /// With the hooks, on CUDA: keep the Python stack of every live allocation (PyTorch's
    /// `_record_memory_history(stacks="python")`, which PyTorch documents at ~2 us per
    /// allocation) so that an OOM says what was alive, by source line.
    #[arg(long, conflicts_with = "no_python_hooks")]
    pub oom_snapshot: bool,
    /// The program to run and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

pub fn run(args: RunArgs) -> Result<i32> {
    let (out, exclusive) = match args.out {
        Some(path) => output_path(&path)?,
        None => (default_trace_name(), false),
    };
    let options = RunOptions {
        out,
        exclusive,
        interval: args.sampling.interval(),
        process_interval: args.sampling.process_interval(),
        gpus: args.sampling.gpus,
        quiet: args.quiet,
        live: args.live,
        host_limit_bytes: args.host_limit_bytes,
        python_hooks: !args.no_python_hooks,
        oom_snapshot: args.oom_snapshot,
        command: args.command,
    };
    let outcome = crate::run::run(&options)?;
    print_outcome(&outcome, options.quiet);
    Ok(outcome.exit_code)
}

/// The brief summary of the trace written (unless `quiet`) and its path, on stderr: the
/// program's stdout stays exactly the program's.
pub(super) fn print_outcome(outcome: &crate::run::RunOutcome, quiet: bool) {
    let mut report = String::new();
    if !quiet {
        match read_trace(&outcome.trace) {
            Ok(decoded) => {
                let analysis = analyze(&decoded.trace, &AnalysisOptions::default());
                report.push('\n');
                report.push_str(&render::summary::render_brief(&decoded.trace, &analysis));
                for w in &decoded.warnings {
                    report.push_str(&format!("warning: {w}\n"));
                }
            }
            Err(e) => report.push_str(&format!("oomscope: could not summarize the trace: {e:#}\n")),
        }
    }
    report.push_str(&format!(
        "oomscope: trace written to {}\n",
        outcome.trace.display()
    ));
    let _ = std::io::stderr().write_all(report.as_bytes());
}

/// `oomscope-20261121-091500.oomt` (UTC).
pub(super) fn default_trace_name() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d, hh, mm, ss) = crate::clock::utc(secs);
    PathBuf::from(format!(
        "oomscope-{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}.oomt"
    ))
}

/// Fills an output path template (`{rank}`, `{node}`, …; see `RunArgs::out`): the path and
/// whether it must be a new file.
fn output_path(path: &std::path::Path) -> Result<(PathBuf, bool)> {
    let text = path.to_string_lossy();
    if !crate::launch_env::is_template(&text) {
        return Ok((path.to_owned(), false));
    }
    let env: Vec<(String, String)> = std::env::vars().collect();
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let filled = crate::launch_env::expand_template(
        &text,
        lookup,
        &crate::run::recording::host_name(),
        std::process::id(),
    )
    .map_err(anyhow::Error::msg)?;
    let filled = PathBuf::from(filled);
    if let Some(dir) = filled.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    }
    Ok((filled, true))
}
