//! The live status line on a terminal: elapsed time, current and peak GPU and host memory, and
//! the current stage, redrawn in place on stderr; with `--live`, also what `collector watch`
//! says of the trace being written (a warning at 90% of a limit, the leak and when memory is
//! full), read from the trace file as any watcher reads it ([`crate::live_trace`]); with
//! `--live` on a tall terminal, `collector watch`'s view in a pane instead ([`super::pane`]).
//!
//! The child's stderr goes to the same terminal, so both writers share a [`Terminal`]: child
//! output first erases the status line, and the status line is only redrawn when the child's
//! last output ended a line (never in the middle of a progress bar the program is drawing).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oomscope_analysis::live::LiveState;
use oomscope_format::units::format_bytes;
use oomscope_words::live::{leak, warning};

use super::pane::{LivePane, terminal_size};
use super::shared_state::RunState;
use crate::live_trace::LiveTrace;
use crate::watch_view::{Following, Pane as ViewPane};

/// Our stderr, shared by the child's output and the status line.
#[derive(Debug)]
pub struct Terminal {
    show_status: bool,
    status_visible: bool,
    child_line_open: bool,
}

impl Terminal {
    /// `show_status`: stderr is a terminal and the user did not ask for quiet.
    pub fn new(show_status: bool) -> Terminal {
        Terminal {
            show_status,
            status_visible: false,
            child_line_open: false,
        }
    }

    /// Writes the child's bytes unchanged (after erasing the status line).
    pub fn write_child_output(&mut self, bytes: &[u8]) {
        let mut err = std::io::stderr().lock();
        if self.status_visible {
            let _ = err.write_all(b"\r\x1b[2K");
            self.status_visible = false;
        }
        let _ = err.write_all(bytes);
        let _ = err.flush();
        if let Some(last) = bytes.last() {
            self.child_line_open = *last != b'\n';
        }
    }

    /// Draws the status line in place.
    pub fn draw_status(&mut self, text: &str) {
        if !self.show_status || self.child_line_open {
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{text}");
        let _ = err.flush();
        self.status_visible = true;
    }

    /// Erases the status line for good.
    pub fn clear(&mut self) {
        if self.status_visible {
            let _ = std::io::stderr().write_all(b"\r\x1b[2K");
            self.status_visible = false;
        }
        self.show_status = false;
    }
}

/// Redraws the status line twice a second until the run stops; `live`: the trace file to follow
/// for `--live`, shown in a pane under the program's output when the terminal is tall enough
/// ([`super::pane`]), else in the status line's words.
pub fn status_loop(state: &RunState, terminal: &Arc<Mutex<Terminal>>, live: Option<PathBuf>) {
    if let Some(path) = &live
        && let Some((columns, rows)) = terminal_size()
        && let Some(mut pane) = LivePane::open(std::io::stderr(), columns, rows)
    {
        pane_loop(state, terminal, path, &mut pane);
        if let Ok(_term) = terminal.lock() {
            pane.close();
        }
        if state.stopping() {
            return;
        }
        // The terminal was made too small for the pane: the status line from now on.
    }
    let mut live = live.map(LiveTrace::new);
    let mut buf = Vec::new();
    while !state.stopping() {
        let mut text = status_text(state);
        if let Some(trace) = live.as_mut() {
            // A trace that cannot be followed leaves the plain status line: never an error here.
            let _ = trace.refresh(&mut buf);
            if let Some(s) = trace.state() {
                text.push_str(&live_words(s));
            }
        }
        let text = fit(&text, terminal_columns());
        if let Ok(mut term) = terminal.lock() {
            term.draw_status(&text);
        }
        state.sleep_unless_stopping(Duration::from_millis(500));
    }
    if let Ok(mut term) = terminal.lock() {
        term.clear();
    }
}

/// Redraws the pane twice a second until the run stops, and once more then, or until the
/// terminal is made too small for it; its writes and the program's stderr take turns through
/// `terminal`.
fn pane_loop(
    state: &RunState,
    terminal: &Arc<Mutex<Terminal>>,
    path: &Path,
    pane: &mut LivePane<std::io::Stderr>,
) {
    let mut trace = LiveTrace::new(path.to_owned());
    let mut buf = Vec::new();
    let name = path.display().to_string();
    loop {
        let stopping = state.stopping();
        let _ = trace.refresh(&mut buf);
        let view = ViewPane {
            name: &name,
            // The program has exited once the run stops: the last frame says so, even before
            // the recorder has written the trace's end.
            following: if stopping || trace.state().is_some_and(|s| s.ended) {
                Following::Ended
            } else {
                Following::Live
            },
            state: trace.state(),
        };
        if let (Some(size), Ok(_term)) = (terminal_size(), terminal.lock()) {
            pane.draw(&view, size);
        }
        if stopping || !pane.is_open() {
            return;
        }
        state.sleep_unless_stopping(Duration::from_millis(500));
    }
}

/// What `--live` adds to the status line: each `WARNING` and the leak, in `collector watch`'s
/// words (" | WARNING gpu0.used at 93% of its 80.0 GiB (5.60 GiB free) | leak +4.00 MiB/step at
/// pre_forward (gpu0.used): full at step 5 954, in 4 min").
pub fn live_words(state: &LiveState) -> String {
    let mut words = String::new();
    for a in &state.alerts {
        words.push_str(&format!(" | {}", warning(a)));
    }
    if let Some(l) = &state.leak {
        words.push_str(" | ");
        words.push_str(&leak(l));
    }
    words
}

/// The width of the terminal on stderr (80 when it cannot be read): a status line longer than it
/// would wrap, and the next redraw could not erase it.
fn terminal_columns() -> usize {
    terminal_size().map_or(80, |(columns, _)| usize::from(columns))
}

/// `text` cut to `columns` characters (an ellipsis says so).
fn fit(text: &str, columns: usize) -> String {
    if text.chars().count() < columns {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(columns.saturating_sub(2)).collect();
    cut.push('…');
    cut
}

/// `oomscope 00:12:34 | gpu0 71.2 GiB/80.0 GiB (peak 75.1 GiB) | host 3.50 GiB (peak 3.61 GiB) | post_forward step 120`
pub fn status_text(state: &RunState) -> String {
    let secs = state.now_us() / 1_000_000;
    let mut parts = vec![format!(
        "oomscope {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )];
    for (i, gauge) in state.gpu_used.iter().enumerate() {
        if let Some(used) = gauge.current() {
            parts.push(format!(
                "gpu{} {}/{} (peak {})",
                state.gpu_indices[i],
                format_bytes(used),
                format_bytes(state.gpu_total_bytes[i]),
                format_bytes(gauge.peak())
            ));
        }
    }
    if let Some(rss) = state.host_rss.current() {
        parts.push(format!(
            "host {} (peak {})",
            format_bytes(rss),
            format_bytes(state.host_rss.peak())
        ));
    }
    if let Ok(stage) = state.stage.lock()
        && !stage.0.is_empty()
    {
        parts.push(format!("{} step {}", stage.0, stage.1));
    }
    parts.join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_names_gpus_by_their_device_index() {
        // `--gpus 2` watches one GPU: it is gpu2, not the first of the list.
        let gpu = oomscope_format::GpuInfo {
            index: 2,
            name: "GPU".into(),
            uuid: "GPU-2".into(),
            total_memory_bytes: 80 << 30,
            driver_version: String::new(),
            cuda_version: String::new(),
        };
        let state = RunState::new(&[gpu], 1);
        state.gpu_used[0].set(10 << 30);
        let line = status_text(&state);
        assert!(
            line.contains("| gpu2 10.0 GiB/80.0 GiB (peak 10.0 GiB)"),
            "{line}"
        );
    }

    #[test]
    fn live_words_are_the_watchers_and_the_line_fits_the_terminal() {
        use oomscope_analysis::live::live_state;
        use oomscope_analysis::{AnalysisOptions, analyze};
        use oomscope_format::units::MIB;
        let trace = oomscope_testkit::run::Run {
            steps: 100,
            leak_bytes_per_step: 460 * MIB,
            ..oomscope_testkit::run::Run::default()
        }
        .build();
        let state = live_state(&trace, &analyze(&trace, &AnalysisOptions::default()));
        let words = live_words(&state);
        assert!(words.starts_with(" | WARNING gpu0.used at 9"), "{words}");
        assert!(words.contains(" | leak +460 MiB/step at "), "{words}");
        let line = fit(&format!("oomscope 00:00:01{words}"), 60);
        assert_eq!(line.chars().count(), 59, "{line}");
        assert!(line.ends_with('…'));
        assert_eq!(fit("short", 60), "short");
    }
}
