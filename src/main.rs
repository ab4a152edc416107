//! The `cascade` binary: argument parsing, reporters and exit codes.
//!
//! Everything that does work lives in the library crates under `crates/`;
//! this binary turns their typed results and events into text, JSON and the
//! exit codes of `shared/CLI.md` (0 ok, 1 something failed, 2 bad input,
//! 130 interrupted; 141 when the reader of stdout went away). Errors print
//! as `error: ...` on stderr, never a panic, and a failed write to stdout
//! or stderr never aborts (see `cli::out`).

// Everything goes through `cli::out` (a failed write never panics there).
#![deny(clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
mod cli;

use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    // SAFETY: first thing, before any thread is started.
    unsafe { cascade_git::configure_libgit2() };
    install_panic_hook();
    let (args, matches) = cli::parse();
    let code = match cli::dispatch(args, &matches) {
        Ok(code) => code,
        Err(failure) => {
            errln!(
                "error: {}",
                cli::report::printable(&cli::render_error(&failure.error))
            );
            failure.code
        }
    };
    // Orphans adopted meanwhile (see `cli::dispatch`) do not outlive the command.
    if cascade_process::is_subreaper() {
        cascade_process::kill_all(Duration::from_secs(5));
    }
    ExitCode::from(cli::out::exit_code(code, cli::signals::stopped_by_output()))
}

/// Keeps panics from reaching the user as backtraces.
///
/// Nothing prints with `println!` (see `cli::out`), so a failed write no
/// longer panics; a panic is a bug: it is reported on one line with its
/// location, in the `error:` format (ignoring a stderr that cannot be
/// written: printing from here must not panic again, which would abort),
/// and then unwinds as usual (the main thread exits with 101; a panicking
/// task is reported by tokio to whoever awaits it). SIGPIPE is deliberately
/// left ignored (Rust's default): cascade writes to its children's pipes and
/// must not die when one of them exits early.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        errln!("error: internal error{at}: {msg} (please report this)");
    }));
}
