//! The collector's messages to the person at the terminal. All printing goes through here, so
//! the workspace lint against stray prints stays on everywhere else, and every message has the
//! same shape: `error: …` for failures, `oomscope: warning: …` for things worth knowing.
#![allow(clippy::print_stderr)]

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
