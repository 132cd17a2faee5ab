//! The command line: `collector run | summary | export | report | estimate`.
//!
//! Every failure ends as one `error: …` line on stderr and a non-zero exit code (2 for usage
//! errors, as clap reports them; 1 otherwise; 127 when the program to run does not exist).
//! `collector run` exits with the program's own code.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use oomscope_trace::analysis::{AnalysisOptions, analyze};
use oomscope_trace::{export, text};
use serde::Serialize;

use crate::gpu::GpuSelection;
use crate::run::{RunOptions, run};
use crate::trace_file::read_trace;

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
    /// Print the analysis of a trace: peaks, stage table, leaks, OOM context, recommendations.
    Summary(SummaryArgs),
    /// Export a trace to CSV or Chrome trace-event JSON (Perfetto).
    Export(ExportArgs),
    /// Write one self-contained HTML file with the viewer and the trace (opens offline).
    Report(ReportArgs),
    /// Estimate the memory needed to train a model: weights, gradients, optimizer, activations.
    Estimate(EstimateArgs),
}

/// Weight dtypes for `estimate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// 4 bytes.
    Fp32,
    /// 2 bytes.
    Bf16,
    /// 2 bytes.
    Fp16,
    /// 1 byte.
    Fp8,
}

/// Optimizers for `estimate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OptimizerArg {
    /// Adam or AdamW: two moments per parameter.
    Adamw,
    /// Same as adamw.
    Adam,
    /// 8-bit AdamW (bitsandbytes).
    #[value(name = "adamw-8bit")]
    Adamw8bit,
    /// SGD with momentum.
    SgdMomentum,
    /// Plain SGD.
    Sgd,
}

/// `collector estimate`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("model").required(true).args(["params", "safetensors"])))]
pub struct EstimateArgs {
    /// Trainable parameters: a number, or with a suffix (`125M`, `7B`, `1.3B`).
    #[arg(long, value_parser = parse_count)]
    pub params: Option<u64>,
    /// A .safetensors file: parameters and dtype are read from its header (not its weights).
    #[arg(long)]
    pub safetensors: Option<PathBuf>,
    /// Dtype of weights and gradients [default: the file's, else bf16].
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeArg>,
    /// Optimizer.
    #[arg(long, value_enum, default_value = "adamw")]
    pub optimizer: OptimizerArg,
    /// Samples per step.
    #[arg(long)]
    pub batch: Option<u64>,
    /// Activation bytes per sample (`310MiB`, `0.3GiB`, or bytes), e.g. the post_forward growth
    /// `collector run` measured divided by its batch.
    #[arg(long, value_parser = parse_bytes)]
    pub activation_bytes_per_sample: Option<u64>,
    /// GPU memory to compare with (`80GiB`) [default: GPU 0 as NVML reports it].
    #[arg(long, value_parser = parse_bytes)]
    pub gpu_memory: Option<u64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn parse_count(text: &str) -> Result<u64, String> {
    let (number, scale) = match text.trim().char_indices().last() {
        Some((i, 'K' | 'k')) => (&text[..i], 1e3),
        Some((i, 'M' | 'm')) => (&text[..i], 1e6),
        Some((i, 'B' | 'b' | 'G' | 'g')) => (&text[..i], 1e9),
        Some((i, 'T' | 't')) => (&text[..i], 1e12),
        _ => (text, 1.0),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a count (e.g. 7B, 350M, 125000000)"))?;
    if !(value.is_finite() && value >= 0.0) {
        return Err(format!("`{text}` is not a count"));
    }
    Ok((value * scale).round() as u64)
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    oomscope_trace::units::parse_bytes(text)
        .ok_or_else(|| format!("`{text}` is not a size (e.g. 80GiB, 310MiB, 1073741824)"))
}

/// `collector run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Trace file to write [default: oomscope-YYYYMMDD-HHMMSS.oomt in the current directory].
    #[arg(short, long)]
    pub out: Option<PathBuf>,
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
    /// No live status line and no summary; only the trace path is printed.
    #[arg(short, long)]
    pub quiet: bool,
    /// Memory limit used to judge whether a SIGKILL was the host OOM killer [default: the
    /// cgroup's memory.max, else the host's RAM].
    #[arg(long, hide = true)]
    pub host_limit_bytes: Option<u64>,
    /// The program to run and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// `collector summary`.
#[derive(Debug, clap::Args)]
pub struct SummaryArgs {
    /// The trace.
    pub trace: PathBuf,
    /// Print stable JSON for scripts instead of tables.
    #[arg(long)]
    pub json: bool,
}

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

/// Runs the parsed command; returns the process exit code.
pub fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Run(args) => run_command(args),
        Command::Summary(args) => summary_command(&args),
        Command::Export(args) => export_command(&args),
        Command::Report(args) => report_command(&args),
        Command::Estimate(args) => estimate_command(&args),
    }
}

fn estimate_command(args: &EstimateArgs) -> Result<i32> {
    use oomscope_trace::estimate::{
        EstimateInput, Optimizer, dtype_bytes, estimate, parse_safetensors_header,
    };
    let (parameters, weight_bytes, file_dtype_bytes, what) = match (&args.safetensors, args.params)
    {
        (Some(path), _) => {
            let mut file = std::fs::File::open(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let len = file.metadata()?.len();
            // Only the header is read: its length, then at most that many bytes.
            let mut prefix = vec![0u8; 8];
            std::io::Read::read_exact(&mut file, &mut prefix)
                .with_context(|| format!("{} is not a safetensors file", path.display()))?;
            let header_len = u64::from_le_bytes(prefix[..8].try_into().unwrap_or([0; 8]))
                .min(oomscope_trace::estimate::MAX_SAFETENSORS_HEADER_BYTES)
                .min(len.saturating_sub(8));
            prefix.resize(8 + header_len as usize, 0);
            std::io::Read::read_exact(&mut file, &mut prefix[8..])
                .with_context(|| format!("cannot read {}", path.display()))?;
            let s = parse_safetensors_header(&prefix, len)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let dtypes: Vec<&str> = s.parameters_by_dtype.keys().map(String::as_str).collect();
            let what = format!(
                "{} parameters in {} tensors ({}) from {}",
                s.parameters,
                s.tensors,
                dtypes.join(", "),
                path.display()
            );
            (
                s.parameters,
                Some(s.data_bytes),
                s.dominant_dtype_bytes(),
                what,
            )
        }
        (None, Some(params)) => (
            params,
            None,
            None,
            format!("{} parameters", oomscope_trace::units::format_count(params)),
        ),
        (None, None) => anyhow::bail!("give --params or --safetensors"),
    };
    let dtype_bytes_value = match args.dtype {
        Some(DtypeArg::Fp32) => 4.0,
        Some(DtypeArg::Bf16 | DtypeArg::Fp16) => 2.0,
        Some(DtypeArg::Fp8) => 1.0,
        None => file_dtype_bytes
            .or_else(|| dtype_bytes("BF16"))
            .unwrap_or(2.0),
    };
    // An explicit dtype overrides the file's stored size.
    let weight_bytes = if args.dtype.is_some() {
        None
    } else {
        weight_bytes
    };
    let optimizer = match args.optimizer {
        OptimizerArg::Adamw | OptimizerArg::Adam => Optimizer::Adam,
        OptimizerArg::Adamw8bit => Optimizer::Adam8bit,
        OptimizerArg::SgdMomentum => Optimizer::SgdMomentum,
        OptimizerArg::Sgd => Optimizer::Sgd,
    };
    let gpu_memory_bytes = args.gpu_memory.or_else(|| {
        crate::gpu::Gpus::open(&GpuSelection::Indices(vec![0]))
            .ok()
            .and_then(|g| g.infos().first().map(|i| i.total_memory_bytes))
    });
    let e = estimate(&EstimateInput {
        parameters,
        weight_bytes,
        dtype_bytes: dtype_bytes_value,
        optimizer,
        batch_size: args.batch,
        activation_bytes_per_sample: args.activation_bytes_per_sample,
        gpu_memory_bytes,
    });
    let out = if args.json {
        serde_json::to_string_pretty(&e).context("encoding the estimate as JSON failed")? + "\n"
    } else {
        let what = format!(
            "{what}, {:?} optimizer, {} bytes per weight{}",
            args.optimizer,
            dtype_bytes_value,
            args.batch
                .map(|b| format!(", batch {b}"))
                .unwrap_or_default()
        );
        text::render_estimate(&e, &what)
    };
    write_stdout(out.as_bytes())?;
    Ok(0)
}

fn run_command(args: RunArgs) -> Result<i32> {
    let out = args.out.unwrap_or_else(default_trace_name);
    let options = RunOptions {
        out,
        interval: Duration::from_millis(args.interval_ms),
        process_interval: Duration::from_millis(args.process_interval_ms),
        gpus: args.gpus,
        quiet: args.quiet,
        host_limit_bytes: args.host_limit_bytes,
        command: args.command,
    };
    let outcome = run(&options)?;
    let mut report = String::new();
    if !options.quiet {
        match read_trace(&outcome.trace) {
            Ok(decoded) => {
                let analysis = analyze(&decoded.trace, &AnalysisOptions::default());
                report.push('\n');
                report.push_str(&text::render_brief(&decoded.trace, &analysis));
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
    // The summary goes to stderr: the program's stdout stays exactly the program's.
    let _ = std::io::stderr().write_all(report.as_bytes());
    Ok(outcome.exit_code)
}

fn summary_command(args: &SummaryArgs) -> Result<i32> {
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

fn report_command(args: &ReportArgs) -> Result<i32> {
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

fn export_command(args: &ExportArgs) -> Result<i32> {
    let decoded = read_trace(&args.trace)?;
    for w in &decoded.warnings {
        crate::ui::warning(&w.to_string());
    }
    let body = match args.format {
        ExportFormat::Csv => export::to_csv(&decoded.trace),
        ExportFormat::Chrome => export::to_chrome_json(&decoded.trace),
    };
    match &args.output {
        Some(path) => std::fs::write(path, body)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => write_stdout(body.as_bytes())?,
    }
    Ok(0)
}

fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        // A closed pipe (`| head`) is the reader's choice, not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout failed"),
    }
}

/// `oomscope-20261121-091500.oomt` (UTC).
fn default_trace_name() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    PathBuf::from(format!(
        "oomscope-{y:04}{m:02}{d:02}-{:02}{:02}{:02}.oomt",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    ))
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(m <= 2), m, d)
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

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_413), (2025, 11, 21));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
