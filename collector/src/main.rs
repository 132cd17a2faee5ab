//! `collector`: see `collector --help` and the README.

use std::process::ExitCode;

use clap::Parser;
use oomscope_collector::cli::{Cli, dispatch};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => ExitCode::from(u8::try_from(code.rem_euclid(256)).unwrap_or(1)),
        Err(e) => {
            // One line: the error and its causes, never a backtrace.
            oomscope_collector::ui::error(&e);
            let not_found = e
                .chain()
                .filter_map(|c| c.downcast_ref::<std::io::Error>())
                .any(|io| io.kind() == std::io::ErrorKind::NotFound)
                && e.to_string().starts_with("cannot run");
            ExitCode::from(if not_found { 127 } else { 1 })
        }
    }
}
