//! `collector watch TRACE… [--json]`: follows traces while their runs record them (from another
//! shell, over ssh, a job's rank traces) and prints, each refresh, where each run is, its memory
//! against its limits, a warning at 90% of one, and the analysis so far (the leak's rate and when
//! memory is full); at a run's end, its summary.
//!
//! Why it reads the file and nothing else: the recorder must never wait for a viewer (memray's
//! live mode blocked the traced program when its reader fell behind), and the trace is already
//! crash-safe and flushed at least once a second. Each refresh decodes only the bytes appended
//! since the last (`oomscope_format::Follower`); the analysis of what was decoded is re-run only
//! when something was appended, and no more often than keeps it under 1% of a core
//! ([`ANALYSIS_SHARE`]).

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use oomscope_analysis::live::{LiveState, line, live_state};
use oomscope_analysis::{AnalysisOptions, analyze, render};
use oomscope_format::Follower;
use serde::Serialize;

use crate::ui::{info, write_stdout};

/// `collector watch`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The traces to follow, as `collector run -o` names them (a job's: one per rank or node);
    /// one that does not exist yet is waited for.
    #[arg(required = true, num_args = 1..)]
    pub traces: Vec<PathBuf>,
    /// Print one JSON object per trace per refresh instead of a line (for scripts and agents).
    #[arg(long)]
    pub json: bool,
    /// How often to read the traces, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub interval_ms: u64,
}

/// The analysis may take at most this share of the watcher's wall time: re-run no sooner than
/// its last run's cost divided by it.
const ANALYSIS_SHARE: f64 = 0.01;

/// A trace that has not grown for this long, and has no end, is said to have stopped.
const STALE_AFTER: Duration = Duration::from_secs(10);

/// One line of `--json`.
#[derive(Serialize)]
struct WatchJson<'a> {
    trace: String,
    #[serde(flatten)]
    state: &'a LiveState,
}

/// A trace being followed.
struct Followed {
    path: PathBuf,
    file: Option<File>,
    follower: Follower,
    grew_at: Instant,
    said_stale: bool,
    analysed_at: Option<Instant>,
    analysis_cost: Duration,
    /// Chunks were decoded since the last analysis.
    unanalysed: bool,
    /// The state changed since it was last printed.
    fresh: bool,
    state: Option<LiveState>,
    done: bool,
}

pub fn watch(args: &WatchArgs) -> Result<i32> {
    let mut followed: Vec<Followed> = args
        .traces
        .iter()
        .map(|path| Followed {
            path: path.clone(),
            file: None,
            follower: Follower::default(),
            grew_at: Instant::now(),
            said_stale: false,
            analysed_at: None,
            analysis_cost: Duration::ZERO,
            unanalysed: false,
            fresh: false,
            state: None,
            done: false,
        })
        .collect();
    for f in &followed {
        if !f.path.exists() {
            info(&format!("waiting for {} to appear", f.path.display()));
        }
    }
    let interval = Duration::from_millis(args.interval_ms);
    let mut buf = Vec::new();
    while followed.iter().any(|f| !f.done) {
        for f in followed.iter_mut().filter(|f| !f.done) {
            refresh(f, &mut buf)?;
            let Some(state) = &f.state else { continue };
            if f.fresh {
                f.fresh = false;
                let text = if args.json {
                    serde_json::to_string(&WatchJson {
                        trace: f.path.display().to_string(),
                        state,
                    })? + "\n"
                } else {
                    format!("{}: {}\n", f.path.display(), line(state))
                };
                write_stdout(text.as_bytes())?;
            }
            if f.follower.ended() {
                f.done = true;
                if !args.json {
                    // The run is over: what `collector summary` says of it.
                    let follower = std::mem::take(&mut f.follower);
                    let decoded = follower.finish()?;
                    let analysis = analyze(&decoded.trace, &AnalysisOptions::default());
                    let text = render::summary::render(&decoded.trace, &analysis);
                    write_stdout(text.as_bytes())?;
                }
            } else if !f.said_stale && f.grew_at.elapsed() >= STALE_AFTER {
                f.said_stale = true;
                info(&format!(
                    "{} has not grown for {} s and has no end: its recorder may have stopped \
                     (still watching)",
                    f.path.display(),
                    STALE_AFTER.as_secs()
                ));
            }
        }
        if followed.iter().any(|f| !f.done) {
            std::thread::sleep(interval);
        }
    }
    Ok(0)
}

/// Reads what was appended to `f`'s file and, when it is due, analyses what was decoded.
fn refresh(f: &mut Followed, buf: &mut Vec<u8>) -> Result<()> {
    if f.file.is_none() {
        match File::open(&f.path) {
            Ok(file) => f.file = Some(file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", f.path.display())),
        }
    }
    let Some(file) = f.file.as_mut() else {
        return Ok(());
    };
    buf.clear();
    file.read_to_end(buf)
        .with_context(|| format!("cannot read {}", f.path.display()))?;
    let before = f.follower.chunks();
    if !buf.is_empty() {
        f.grew_at = Instant::now();
        f.said_stale = false;
        if let Err(e) = f.follower.push(buf) {
            bail!("cannot follow {}: {e}", f.path.display());
        }
    }
    f.unanalysed |= f.follower.chunks() > before;
    let due = f.analysed_at.is_none_or(|at| {
        at.elapsed().as_secs_f64() >= f.analysis_cost.as_secs_f64() / ANALYSIS_SHARE
    });
    if let Some(trace) = f.follower.trace()
        && f.unanalysed
        && (due || f.follower.ended())
    {
        f.unanalysed = false;
        let started = Instant::now();
        let analysis = analyze(trace, &AnalysisOptions::default());
        f.state = Some(live_state(trace, &analysis));
        f.analysis_cost = started.elapsed();
        f.analysed_at = Some(Instant::now());
        f.fresh = true;
    }
    Ok(())
}
