//! `collector run --live` on a tall enough terminal: `collector watch`'s view of the run in a pane
//! at the bottom of the terminal, the program's own output scrolling above it, untouched.
//!
//! Why a scroll region and not a full-screen view: the program keeps writing to the terminal
//! itself (its stdout is never piped: piping would change its buffering, its progress bars and
//! its colours), so the terminal's scrolling margins (DECSTBM, as `apt` draws its progress bar)
//! keep its lines in the rows above the pane, and the pane is drawn below them between a save
//! and a restore of the cursor (DECSC/DECRC), each redraw one `write` (the kernel does not
//! interleave another writer's `write` with it). The margins are given back when the run ends,
//! or when the pane is dropped on any other way out. A terminal too small for a readable pane,
//! or output that is not a terminal, keeps the status line.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};

use crate::watch_view::{Pane as ViewPane, draw_run};

/// Rows a terminal needs for the pane: fewer, and the program's output would have too little
/// room above it (the status line is kept instead).
pub const MIN_ROWS: u16 = 30;

/// Columns a terminal needs for the pane.
pub const MIN_COLUMNS: u16 = 60;

/// The pane's height on a terminal of `rows` rows: two fifths of it, 14 to 22 rows.
pub fn pane_height(rows: u16) -> u16 {
    (rows * 2 / 5).clamp(14, 22)
}

/// The pane at the bottom of a terminal of `columns` × `rows`, and where it writes.
#[allow(missing_debug_implementations)] // holds a ratatui terminal, which has no `Debug`
pub struct LivePane<W: Write> {
    out: W,
    columns: u16,
    rows: u16,
    terminal: Terminal<CrosstermBackend<Escapes>>,
    /// What `terminal` wrote since the last draw.
    escapes: Escapes,
    open: bool,
}

/// The escapes a ratatui terminal writes, kept to be written to the terminal at once.
#[derive(Debug, Clone, Default)]
struct Escapes(Rc<RefCell<Vec<u8>>>);

impl Write for Escapes {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<W: Write> LivePane<W> {
    /// Reserves the bottom rows of a terminal of `columns` × `rows` (its cursor anywhere) and
    /// returns the pane; `None` when the terminal is too small for one.
    pub fn open(mut out: W, columns: u16, rows: u16) -> Option<LivePane<W>> {
        if rows < MIN_ROWS || columns < MIN_COLUMNS {
            return None;
        }
        let escapes = Escapes::default();
        let terminal = pane_terminal(columns, rows, &escapes)?;
        let mut bytes = Vec::new();
        // Room below the cursor: newlines scroll the screen when the cursor is near its end,
        // then the cursor goes back up to the line it was on (or where that line went).
        let height = pane_height(rows);
        bytes.extend(std::iter::repeat_n(b'\n', usize::from(height)));
        bytes.extend(format!("\x1b[{height}A").bytes());
        reserve(&mut bytes, rows);
        out.write_all(&bytes).ok()?;
        out.flush().ok()?;
        Some(LivePane {
            out,
            columns,
            rows,
            terminal,
            escapes,
            open: true,
        })
    }

    /// Draws `pane` in the reserved rows; `size`: the terminal's columns and rows now (a resized
    /// terminal gets its margins set again and the pane drawn whole; one made too small for a
    /// pane gets its margins back and the pane closes: see [`LivePane::is_open`]).
    pub fn draw(&mut self, pane: &ViewPane<'_>, size: (u16, u16)) {
        if !self.open {
            return;
        }
        if size.1 < MIN_ROWS || size.0 < MIN_COLUMNS {
            self.rows = size.1;
            self.close();
            return;
        }
        let mut bytes = b"\x1b7".to_vec();
        if size != (self.columns, self.rows) {
            let Some(terminal) = pane_terminal(size.0, size.1, &self.escapes) else {
                return;
            };
            (self.columns, self.rows, self.terminal) = (size.0, size.1, terminal);
            bytes.extend(b"\x1b8");
            reserve(&mut bytes, self.rows);
            bytes.extend(b"\x1b7");
        }
        self.escapes.0.borrow_mut().clear();
        if self.terminal.draw(|frame| draw_run(frame, pane)).is_err() {
            return;
        }
        bytes.extend_from_slice(&self.escapes.0.borrow());
        // Plain style and a visible cursor for the program, then its cursor back.
        bytes.extend(b"\x1b[0m\x1b[?25h\x1b8");
        let _ = self.out.write_all(&bytes);
        let _ = self.out.flush();
    }

    /// Whether the pane is still drawn (not closed, nor given up on a terminal made too small).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Gives the terminal its margins back and leaves the cursor under the pane, which stays on
    /// the screen as last drawn.
    pub fn close(&mut self) {
        if !std::mem::replace(&mut self.open, false) {
            return;
        }
        let bytes = format!("\x1b7\x1b[r\x1b8\x1b[{};1H\r\n", self.rows);
        let _ = self.out.write_all(bytes.as_bytes());
        let _ = self.out.flush();
    }
}

impl<W: Write> Drop for LivePane<W> {
    fn drop(&mut self) {
        self.close();
    }
}

/// A ratatui terminal drawing into the pane's rows of a `columns` × `rows` terminal, its
/// escapes kept to be written at once.
fn pane_terminal(
    columns: u16,
    rows: u16,
    escapes: &Escapes,
) -> Option<Terminal<CrosstermBackend<Escapes>>> {
    let height = pane_height(rows);
    let area = Rect::new(0, rows - height, columns, height);
    Terminal::with_options(
        CrosstermBackend::new(escapes.clone()),
        TerminalOptions {
            viewport: Viewport::Fixed(area),
        },
    )
    .ok()
}

/// The escapes that keep the program's output in the rows above the pane and clear the pane's
/// rows, the cursor where it was (setting the margins moves it home).
fn reserve(bytes: &mut Vec<u8>, rows: u16) {
    let top = rows - pane_height(rows);
    bytes.extend(format!("\x1b7\x1b[1;{top}r\x1b8\x1b7").bytes());
    for row in top + 1..=rows {
        bytes.extend(format!("\x1b[{row};1H\x1b[2K").bytes());
    }
    bytes.extend(b"\x1b8");
}

/// The columns and rows of the terminal on stderr, when it is one and says its width (a
/// pseudo-terminal may say 0 rows).
pub fn terminal_size() -> Option<(u16, u16)> {
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ fills a winsize; a failure leaves it zeroed.
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &raw mut size) } == 0;
    (ok && size.ws_col > 0).then_some((size.ws_col, size.ws_row))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch_view::Following;

    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    #[test]
    fn a_small_terminal_keeps_the_status_line() {
        assert!(LivePane::open(Vec::new(), 120, MIN_ROWS - 1).is_none());
        assert!(LivePane::open(Vec::new(), MIN_COLUMNS - 1, 50).is_none());
    }

    #[test]
    fn the_pane_keeps_its_rows_draws_between_a_save_and_a_restore_and_gives_them_back() {
        let mut out = Vec::new();
        {
            let mut pane = LivePane::open(&mut out, 100, 40).expect("a pane on 100 x 40");
            let view = ViewPane {
                name: "run.oomt",
                following: Following::Live,
                state: None,
            };
            pane.draw(&view, (100, 40));
        }
        let all = text(&out);
        // 40 rows: 16 for the pane, the program's output in rows 1 to 24.
        assert_eq!(pane_height(40), 16);
        let reserved = all.find("\x1b[1;24r").expect("margins set");
        let drawn = all.find("run.oomt").expect("the pane drawn");
        let given_back = all.rfind("\x1b[r").expect("margins given back");
        assert!(reserved < drawn && drawn < given_back, "{all:?}");
        // Every draw is bracketed by the cursor's save and restore.
        let draw = &all[all[..drawn].rfind("\x1b7").unwrap()..];
        assert!(draw.contains("\x1b[0m\x1b[?25h\x1b8"), "{draw:?}");
        assert!(all.ends_with("\x1b[40;1H\r\n"), "{all:?}");
    }

    #[test]
    fn a_terminal_made_too_small_gets_its_margins_back_and_no_pane() {
        let mut out = Vec::new();
        let view = ViewPane {
            name: "run.oomt",
            following: Following::Live,
            state: None,
        };
        let mut pane = LivePane::open(&mut out, 100, 40).unwrap();
        pane.draw(&view, (100, 20));
        assert!(!pane.is_open());
        pane.draw(&view, (100, 40));
        drop(pane);
        let all = text(&out);
        assert!(all.ends_with("\x1b7\x1b[r\x1b8\x1b[20;1H\r\n"), "{all:?}");
        assert!(
            !all.contains("run.oomt"),
            "drawn on a terminal too small: {all:?}"
        );
    }

    #[test]
    fn a_resized_terminal_gets_its_margins_again() {
        let mut out = Vec::new();
        let view = ViewPane {
            name: "run.oomt",
            following: Following::Waiting,
            state: None,
        };
        let mut pane = LivePane::open(&mut out, 100, 40).unwrap();
        pane.draw(&view, (120, 50));
        pane.close();
        drop(pane);
        let all = text(&out);
        assert!(all.contains("\x1b[1;30r"), "{all:?}");
        assert!(all.ends_with("\x1b[50;1H\r\n"), "{all:?}");
    }
}
