//! `collector watch TRACE… [--json | --plain]`: follows traces while their runs record them (from
//! another shell, over ssh, a job's rank traces) and shows, each refresh, where each run is, its
//! memory against its limits, a warning at 90% of one, and the analysis so far (the leak's rate
//! and when memory is full); at a run's end, its summary. In a terminal the view is a screen of
//! its own ([`crate::watch_view`]; `q` quits, the arrows move between traces); piped, or with
//! `--plain`, a line per trace that grew; `--json`, an object per trace per refresh.
//!
//! The following itself (the file read as it grows, the analysis no more than 1% of a core) is
//! [`crate::live_trace`]'s; every word shown is `oomscope_words`'.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_words::live::{LiveJson, line};
use serde::Serialize;

use crate::live_trace::LiveTrace;
use crate::ui::{info, write_stdout};
use crate::watch_view::{Following, Pane, draw};

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
    /// Print a line per trace per refresh even in a terminal (no full-screen view).
    #[arg(long, conflicts_with = "json")]
    pub plain: bool,
    /// How often to read the traces, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub interval_ms: u64,
}

/// A trace that has not grown for this long, and has no end, is said to have stopped.
const STALE_AFTER: Duration = Duration::from_secs(10);

/// One line of `--json`.
#[derive(Serialize)]
struct WatchJson {
    trace: String,
    #[serde(flatten)]
    state: LiveJson,
}

/// A trace being followed, and what was said of it.
struct Followed {
    live: LiveTrace,
    said_stale: bool,
    done: bool,
}

impl Followed {
    fn following(&self) -> Following {
        if self.live.feed.ended() {
            Following::Ended
        } else if !self.live.found() {
            Following::Waiting
        } else if self.said_stale {
            Following::Stale
        } else {
            Following::Live
        }
    }
}

pub fn watch(args: &WatchArgs) -> Result<i32> {
    let mut followed: Vec<Followed> = args
        .traces
        .iter()
        .map(|path| Followed {
            live: LiveTrace::new(path.clone()),
            said_stale: false,
            done: false,
        })
        .collect();
    let interval = Duration::from_millis(args.interval_ms);
    if !args.json && !args.plain && std::io::stdout().is_terminal() {
        return watch_screen(&mut followed, interval);
    }
    for f in &followed {
        if !f.live.path.exists() {
            info(&format!("waiting for {} to appear", f.live.path.display()));
        }
    }
    let mut buf = Vec::new();
    while followed.iter().any(|f| !f.done) {
        for f in followed.iter_mut().filter(|f| !f.done) {
            f.live.refresh(&mut buf)?;
            let fresh = f.live.take_fresh();
            let Some(state) = f.live.state() else {
                continue;
            };
            if fresh {
                let text = if args.json {
                    serde_json::to_string(&WatchJson {
                        trace: f.live.path.display().to_string(),
                        state: LiveJson::of(state),
                    })? + "\n"
                } else {
                    format!("{}: {}\n", f.live.path.display(), line(state))
                };
                write_stdout(text.as_bytes())?;
            }
            if f.live.feed.ended() {
                f.done = true;
                if !args.json {
                    print_summary(f)?;
                }
            } else if stale(f) {
                info(&format!(
                    "{} has not grown for {} s and has no end: its recorder may have stopped \
                     (still watching)",
                    f.live.path.display(),
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

/// Whether `f` just became stale: no growth for [`STALE_AFTER`] and no end (said once).
fn stale(f: &mut Followed) -> bool {
    let now = !f.said_stale && f.live.found() && f.live.grew_at.elapsed() >= STALE_AFTER;
    f.said_stale |= now;
    now
}

/// The run is over: what `collector summary` says of it (the feed's last analysis is of the whole
/// trace, its end included).
fn print_summary(f: &Followed) -> Result<()> {
    let Some(trace) = f.live.feed.trace() else {
        return Ok(());
    };
    let text = match f.live.feed.analysis() {
        Some(analysis) => oomscope_words::summary::render(trace, analysis),
        None => {
            oomscope_words::summary::render(trace, &analyze(trace, &AnalysisOptions::default()))
        }
    };
    write_stdout(format!("{}:\n{text}", f.live.path.display()).as_bytes())
}

/// The full-screen view: refreshes every `interval` (sooner on a key), `q` (or Esc, Ctrl-C)
/// quits, the arrows move between traces; once every run has ended, the screen closes and their
/// summaries print.
fn watch_screen(followed: &mut [Followed], interval: Duration) -> Result<i32> {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    let mut terminal = ratatui::init();
    let mut selected = 0usize;
    let mut buf = Vec::new();
    let result = (|| -> Result<bool> {
        let mut next = Instant::now();
        loop {
            if Instant::now() >= next {
                for f in followed.iter_mut() {
                    f.live.refresh(&mut buf)?;
                    stale(f);
                }
                next = Instant::now() + interval;
            }
            if followed.iter().all(|f| f.live.feed.ended()) {
                return Ok(true);
            }
            let names: Vec<String> = followed
                .iter()
                .map(|f| f.live.path.display().to_string())
                .collect();
            let panes: Vec<Pane> = followed
                .iter()
                .zip(&names)
                .map(|(f, name)| Pane {
                    name,
                    following: f.following(),
                    state: f.live.state(),
                })
                .collect();
            terminal.draw(|frame| draw(frame, &panes, selected))?;
            if event::poll(next.saturating_duration_since(Instant::now()))?
                && let Event::Key(key) = event::read()?
                && key.kind == KeyEventKind::Press
            {
                let n = followed.len();
                match key.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(false),
                    KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                        return Ok(false);
                    }
                    KeyCode::Right | KeyCode::Down | KeyCode::Tab => selected = (selected + 1) % n,
                    KeyCode::Left | KeyCode::Up | KeyCode::BackTab => {
                        selected = (selected + n - 1) % n;
                    }
                    _ => {}
                }
            }
        }
    })();
    ratatui::restore();
    if result? {
        for f in followed.iter() {
            print_summary(f)?;
        }
    }
    Ok(0)
}
