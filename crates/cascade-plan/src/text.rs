//! Text that came from a plan file or an agent, made safe to show, and the
//! known word nearest to a mistyped one.
//!
//! A story title, a planning question or an agent's error excerpt is
//! written by someone else: shown raw, an `ESC]0;...BEL` would retitle the
//! user's terminal and an `ESC[2J` clear it. [`printable`] is the one place
//! that neutralises such text for every output (terminal, `progress.txt`);
//! [`printable_line`] does the same for text that must stay on one line.
//! [`closest`] and [`suggestion`] turn an unknown word into "did you mean";
//! [`spelled`] reads a word of a fixed vocabulary.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal raw: control characters (C0 such as
/// ESC, NUL and CR, DEL, and C1 such as the one-byte CSI `\u{9b}`) and the
/// invisible bidirectional controls that reorder what is shown.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape(text: &str, keep: fn(char) -> bool) -> Cow<'_, str> {
    let bad = |c: char| is_unsafe(c) && !keep(c);
    if !text.chars().any(bad) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if bad(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` safe for a terminal or a log: every control character but newline
/// and tab is shown as its `\u{1b}` escape instead of being written raw, so
/// the text can neither recolour nor rewrite the screen (nor make `grep` call
/// the output binary). Styling is applied around such text, never inside it.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape(text, |c| c == '\n' || c == '\t')
}

/// [`printable`] for text that must stay on its line (a title, an id, a
/// log line): newlines and tabs are escaped too.
pub fn printable_line(text: &str) -> Cow<'_, str> {
    escape(text, |_| false)
}

/// The word of `known` nearest to `word` (case ignored), when it is near
/// enough to be a typo of it: at most a third of its letters (at least one)
/// wrong, a swapped pair counting as one.
pub fn closest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.trim().to_ascii_lowercase();
    let limit = (word.chars().count() / 3).max(1);
    known
        .into_iter()
        .map(|k| (strsim::osa_distance(&word, &k.to_ascii_lowercase()), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The value `text` spells in `table` of `(word, value)` (case and
/// surrounding blanks ignored): the one reader of every fixed vocabulary
/// (statuses, priorities, gate types).
pub fn spelled<T: Copy>(table: &[(&str, T)], text: &str) -> Option<T> {
    let t = text.trim();
    table
        .iter()
        .find(|(word, _)| t.eq_ignore_ascii_case(word))
        .map(|(_, v)| *v)
}

/// `did you mean 'x'?` when [`closest`] finds one, else the list of
/// `known` words (`known: a, b, c`): what follows an "unknown ..." message.
pub fn suggestion<'a>(word: &str, known: impl IntoIterator<Item = &'a str> + Clone) -> String {
    match closest(word, known.clone()) {
        Some(k) => format!("did you mean '{k}'?"),
        None => format!(
            "known: {}",
            known.into_iter().collect::<Vec<_>>().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_obeyed() {
        let title = "\u{1b}]0;owned\u{7}Add login\u{1b}[2J\r\u{9b}31m";
        let shown = printable(title);
        assert!(!shown.chars().any(is_unsafe), "{shown}");
        assert_eq!(
            shown,
            "\\u{1b}]0;owned\\u{7}Add login\\u{1b}[2J\\u{d}\\u{9b}31m"
        );
        assert_eq!(printable("two\nlines\tand tab"), "two\nlines\tand tab");
        assert_eq!(printable_line("two\nlines"), "two\\u{a}lines");
        assert_eq!(printable("a \u{202e}gnp.exe"), "a \\u{202e}gnp.exe");
        assert!(matches!(printable("plain ünïcode"), Cow::Borrowed(_)));
    }

    #[test]
    fn closest_finds_typos_only() {
        let known = ["fallback_chain", "default_agent", "story_type_overrides"];
        assert_eq!(closest("fallback_chian", known), Some("fallback_chain"));
        assert_eq!(closest("Default_Agnet", known), Some("default_agent"));
        assert_eq!(closest("notes", known), None);
        assert_eq!(closest("tset", ["test", "lint", "typecheck"]), Some("test"));
        assert_eq!(closest("urgent", ["high", "medium", "low"]), None);
        assert_eq!(
            suggestion("urgent", ["high", "medium", "low"]),
            "known: high, medium, low"
        );
        assert_eq!(suggestion("hihg", ["high", "low"]), "did you mean 'high'?");
    }
}
