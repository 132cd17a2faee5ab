//! The collector's messages to the person at the terminal, and commands' output on stdout. Printing
//! goes through here (but for the live status line, `run::status`), so
//! the workspace lint against stray prints stays on everywhere else, and every message has the
//! same shape: `error: …` for failures, `oomscope: warning: …` for things worth knowing.
#![allow(clippy::print_stderr)]

use std::io::Write;

use anyhow::{Context, Result};

/// Writes a command's output (a summary, a table, JSON) to stdout; a closed pipe (`| head`) is
/// the reader's choice, not an error.
pub fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        // A closed pipe (`| head`) is the reader's choice, not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout failed"),
    }
}

/// One line on stderr: `error: <message>` (the causes, if any, joined with `: `).
pub fn error(error: &anyhow::Error) {
    eprintln!("error: {error:#}");
}

/// One line on stderr: `oomscope: warning: <message>`.
pub fn warning(message: &str) {
    eprintln!("oomscope: warning: {message}");
}

/// One line on stderr: `oomscope: <message>`.
pub fn info(message: &str) {
    eprintln!("oomscope: {message}");
}
