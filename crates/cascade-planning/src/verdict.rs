//! The challenge verdict: a line `Verdict: APPROVED|NEEDS_REVISION|REJECTED`
//! in CHALLENGE.md (or, when the file has none, in the agent's text).
//!
//! Markdown decoration is tolerated (`**Verdict:** APPROVED`, `## Verdict:
//! NEEDS REVISION`); the last verdict line wins, so a challenger that quotes
//! the format before giving its own verdict is read right.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    Approved,
    NeedsRevision,
    Rejected,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approved => "APPROVED",
            Verdict::NeedsRevision => "NEEDS_REVISION",
            Verdict::Rejected => "REJECTED",
        }
    }
}

/// The last verdict line of `text`, if any.
pub fn parse(text: &str) -> Option<Verdict> {
    let mut found = None;
    for line in text.lines() {
        let clean: String = line
            .chars()
            .filter(|c| !matches!(c, '*' | '_' | '#' | '`' | '>' | '|'))
            .collect();
        let clean = clean.trim().trim_start_matches(['-', ' ']);
        let lower = clean.to_ascii_lowercase();
        let Some(rest) = lower.strip_prefix("verdict") else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(rest) = rest.strip_prefix(':') else {
            continue;
        };
        let word: String = rest
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_alphabetic() || matches!(c, ' ' | '-'))
            .filter(|c| c.is_ascii_alphabetic())
            .collect();
        let v = if word.starts_with("approved") || word == "approve" {
            Some(Verdict::Approved)
        } else if word.starts_with("needsrevision") {
            Some(Verdict::NeedsRevision)
        } else if word.starts_with("rejected") || word == "reject" {
            Some(Verdict::Rejected)
        } else {
            None
        };
        if v.is_some() {
            found = v;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plain_and_decorated_verdicts_last_wins() {
        assert_eq!(parse("x\nVerdict: APPROVED\n"), Some(Verdict::Approved));
        assert_eq!(
            parse("**Verdict:** NEEDS_REVISION"),
            Some(Verdict::NeedsRevision)
        );
        assert_eq!(
            parse("## verdict: needs revision"),
            Some(Verdict::NeedsRevision)
        );
        assert_eq!(parse("- Verdict: REJECTED."), Some(Verdict::Rejected));
        assert_eq!(
            parse("Format: `Verdict: APPROVED` or ...\n\nVerdict: REJECTED"),
            Some(Verdict::Rejected)
        );
        assert_eq!(parse("The verdict is unclear\nVerdict: maybe"), None);
        assert_eq!(parse(""), None);
    }
}
