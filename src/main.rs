//! The `cascade` binary: argument parsing, reporters and exit codes.
//!
//! Everything that does work lives in the library crates under `crates/`;
//! this binary turns their typed results and events into text, JSON and the
//! exit codes of `shared/CLI.md` (0 ok, 1 something failed, 2 bad input,
//! 130 interrupted). Errors print as `error: ...` on stderr, never a panic.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    install_panic_hook();
    let (args, matches) = cli::parse();
    let code = match cli::dispatch(args, &matches) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!(
                "error: {}",
                cli::report::printable(&cli::render_error(&failure.error))
            );
            failure.code
        }
    };
    ExitCode::from(code)
}

/// Keeps panics from reaching the user as backtraces.
///
/// `println!` panics when stdout is a closed pipe (`cascade deps | head`);
/// that is the reader going away, not an error, so it ends the process
/// quietly the way Unix tools do. SIGPIPE is deliberately left ignored (Rust's
/// default): cascade writes to its children's pipes and must not die when one
/// of them exits early. Any other panic is a bug: it is reported on one line
/// with its location, in the `error:` format, and then unwinds as usual (the
/// main thread exits with 101; a panicking task is reported by tokio to
/// whoever awaits it).
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if msg.contains("failed printing to stdout") || msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error{at}: {msg} (please report this)");
    }));
}
