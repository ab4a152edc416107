//! The `cascade` binary: argument parsing, reporters and exit codes.
//!
//! Everything that does work lives in the library crates under `crates/`;
//! this binary turns their typed results and events into text, JSON and the
//! exit codes of `shared/CLI.md` (0 ok, 1 something failed, 2 bad input,
//! 130 interrupted). Errors print as `error: ...` on stderr, never a panic.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let code = match cli::dispatch(args) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("error: {:#}", failure.error);
            failure.code
        }
    };
    ExitCode::from(code)
}
