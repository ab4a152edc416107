//! The one colour decision of every human printer (the terminal reporter
//! and its summary, `status`, `show`), and the colours of status words.
//!
//! `--color auto|always|never` (a global flag) sets the choice once per
//! process. `auto`, the default, colours a stream only when it is a
//! terminal, `TERM` is not `dumb` and `NO_COLOR` is unset or empty
//! (<https://no-color.org>); `always` and `never` are what the user asked
//! for on this command line, so they win over `NO_COLOR` (a per-invocation
//! flag overrides the environment, as no-color.org asks).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU8, Ordering};

/// When output is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set or `TERM=dumb`
    #[default]
    Auto,
    /// Always, even into a pipe or a file
    Always,
    /// Never
    Never,
}

static CHOICE: AtomicU8 = AtomicU8::new(0);

/// Records the command line's choice (`dispatch` calls it first).
pub fn set(choice: ColorChoice) {
    let n = match choice {
        ColorChoice::Auto => 0,
        ColorChoice::Always => 1,
        ColorChoice::Never => 2,
    };
    CHOICE.store(n, Ordering::SeqCst);
}

fn choice() -> ColorChoice {
    match CHOICE.load(Ordering::SeqCst) {
        1 => ColorChoice::Always,
        2 => ColorChoice::Never,
        _ => ColorChoice::Auto,
    }
}

/// The decision itself, from everything it depends on.
pub fn decide(choice: ColorChoice, no_color: bool, terminal: bool, dumb: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => terminal && !dumb && !no_color,
    }
}

fn from_env(terminal: bool) -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    decide(choice(), no_color, terminal, dumb)
}

/// Whether what is printed on stdout is coloured.
pub fn stdout() -> bool {
    from_env(std::io::stdout().is_terminal())
}

/// Whether what is printed on stderr is coloured.
pub fn stderr() -> bool {
    from_env(std::io::stderr().is_terminal())
}

/// `text` in the SGR colour `code` (`"31"` red, `"1"` bold...) when `on`.
pub fn paint(text: &str, code: &str, on: bool) -> String {
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// A status word (of a story, an attempt, a gate or a run) in its colour:
/// green for done, red for failed, yellow for waiting or stopped, cyan for
/// going on (cargo's and nextest's conventions).
pub fn status(word: &str, on: bool) -> String {
    let code = match word {
        "complete" | "completed" | "passed" | "pass" | "merged" => "32",
        "failed" | "needs_revision" | "conflict" => "31",
        "blocked" | "interrupted" | "paused" | "budget_exhausted" | "missing" | "cancelled" => "33",
        "running" => "36",
        _ => "2",
    };
    paint(word, code, on)
}

/// [`status`] left-aligned in `width` columns (the padding outside the
/// colour, so columns line up whether or not it is on).
pub fn status_padded(word: &str, width: usize, on: bool) -> String {
    let pad = width.saturating_sub(word.chars().count());
    format!("{}{}", status(word, on), " ".repeat(pad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_colours_only_a_terminal_without_no_color() {
        use ColorChoice::*;
        assert!(decide(Auto, false, true, false));
        assert!(!decide(Auto, true, true, false), "NO_COLOR");
        assert!(!decide(Auto, false, false, false), "not a terminal");
        assert!(!decide(Auto, false, true, true), "TERM=dumb");
        assert!(decide(Always, true, false, true), "the flag wins");
        assert!(!decide(Never, false, true, false));
    }

    #[test]
    fn status_words_have_their_colours() {
        assert_eq!(status("complete", true), "\x1b[32mcomplete\x1b[0m");
        assert_eq!(status("failed", true), "\x1b[31mfailed\x1b[0m");
        assert_eq!(status("blocked", true), "\x1b[33mblocked\x1b[0m");
        assert_eq!(status("failed", false), "failed");
    }
}
