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
            let code = e
                .downcast_ref::<oomscope_collector::run::CannotRun>()
                .map_or(1, oomscope_collector::run::CannotRun::exit_code);
            ExitCode::from(code)
        }
    }
}
