//! `progress.txt`: Plan Cascade's human-readable run log, one line per step.
//!
//! ```text
//! [2026-01-28 10:30:00] story-001: [START] via codex (pid:12345)
//! [2026-01-28 10:35:00] story-001: [COMPLETE] via codex
//! [2026-01-28 10:35:00] story-002: [FAILED] via aider: quality gate 'tests' failed
//! [2026-01-28 10:35:01] story-002: [RETRY] -> claude-code (attempt 2/3)
//! [2026-01-28 10:30:00] story-004: [FALLBACK] aider -> claude-code: CLI 'aider' not found
//! ```
//!
//! Local time. Each line is appended with one `write` on a file opened with
//! `O_APPEND`, so lines from parallel stories never interleave. Writing is
//! best-effort: a full disk must not fail a run. Control characters in the
//! text (an agent's NUL, ESC or line break, a plan's title) are written as
//! `\u{1b}` escapes (`cascade_plan::text::printable_line`, the sanitiser of
//! every output), so the file stays one line per step and safe to `cat` or
//! `grep`.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::events::Event;

/// Appends progress lines to a file.
#[derive(Debug, Clone)]
pub struct ProgressLog {
    path: PathBuf,
}

impl ProgressLog {
    pub fn new(path: impl Into<PathBuf>) -> ProgressLog {
        ProgressLog { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The line an event becomes, if it becomes one (without timestamp).
    pub fn format(event: &Event) -> Option<String> {
        let line = match event {
            Event::AgentFallback {
                story,
                from,
                to,
                why,
                ..
            } => format!("{story}: [FALLBACK] {from} -> {to}: {why}"),
            Event::StoryStarted {
                story, agent, pid, ..
            } => format!("{story}: [START] via {agent} (pid:{pid})"),
            // A fleet run: the agent started on a worker (Plan Cascade's
            // line, with the worker instead of a local pid).
            Event::JobStarted {
                story,
                agent,
                worker,
                ..
            } => format!("{story}: [START] via {agent} (worker:{worker})"),
            Event::StoryMerged { story, agent, .. } => {
                format!("{story}: [COMPLETE] via {agent}")
            }
            Event::AttemptFailed {
                story,
                agent,
                error,
                ..
            } => format!("{story}: [FAILED] via {agent}: {}", one_line(error)),
            Event::RetryScheduled {
                story,
                agent,
                attempt,
                max_attempts,
                ..
            } => format!("{story}: [RETRY] -> {agent} (attempt {attempt}/{max_attempts})"),
            Event::VerificationFinished {
                story, findings, ..
            } => {
                if findings.is_empty() {
                    format!("{story}: [VERIFY] PASS")
                } else {
                    let shown: Vec<String> = findings
                        .iter()
                        .take(5)
                        .map(|f| format!("{}:{} [{}]", f.file, f.line, f.rule))
                        .collect();
                    let more = findings.len().saturating_sub(shown.len());
                    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
                    format!(
                        "{story}: [VERIFY] FAILED: {} finding(s): {}{more}",
                        findings.len(),
                        one_line(&shown.join(", "))
                    )
                }
            }
            Event::TestsProved {
                story,
                tests,
                findings,
                ..
            } => {
                if findings.is_empty() {
                    format!("{story}: [PROVE] PASS: {tests} new test(s) fail on the base")
                } else {
                    let shown: Vec<String> = findings
                        .iter()
                        .take(5)
                        .map(|f| format!("{}:{}", f.file, f.line))
                        .collect();
                    format!(
                        "{story}: [PROVE] FAILED: {} of {tests} new test(s) pass on the base: {}",
                        findings.len(),
                        one_line(&shown.join(", "))
                    )
                }
            }
            Event::ReviewFinished {
                story,
                agent,
                verdict,
                passed,
                findings,
                ..
            } => match (verdict.as_str(), passed) {
                ("pass", _) => format!("{story}: [REVIEW] PASS via {agent}"),
                ("missing", true) => {
                    format!("{story}: [REVIEW] PASS via {agent} (no <review> marker)")
                }
                ("missing", false) => format!(
                    "{story}: [REVIEW] NEEDS_REVISION via {agent}: no <review> marker (--review=strict)"
                ),
                _ => {
                    let first = findings.lines().map(str::trim).find(|l| !l.is_empty());
                    match first {
                        Some(f) => format!("{story}: [REVIEW] NEEDS_REVISION via {agent}: {}", one_line(f)),
                        None => format!("{story}: [REVIEW] NEEDS_REVISION via {agent}"),
                    }
                }
            },
            Event::StoryBlocked { story, blocked_by } => {
                format!("{story}: [BLOCKED] by {}", blocked_by.join(", "))
            }
            Event::RaceStarted {
                story, contestants, ..
            } => format!("{story}: [RACE] {}", contestants.join(" vs ")),
            Event::RaceWon {
                story,
                winner,
                reason,
                runners_up,
                ..
            } => {
                let over = if runners_up.is_empty() {
                    String::new()
                } else {
                    format!(" over {}", runners_up.join(", "))
                };
                format!("{story}: [RACE] won by {winner}{over}: {}", one_line(reason))
            }
            Event::StorySkipped { story, reason } => {
                format!("{story}: [SKIPPED] {}", one_line(reason))
            }
            Event::BudgetExhausted { story, message, .. } => format!(
                "{}: [BUDGET] {}",
                story.as_deref().unwrap_or("run"),
                one_line(message)
            ),
            Event::AgentCooldown {
                story,
                agent,
                cooldown_ms,
                ..
            } => format!(
                "{story}: [RATE_LIMITED] {agent} cooling down {}s",
                cooldown_ms.div_ceil(1000)
            ),
            _ => return None,
        };
        Some(line)
    }

    /// Appends the event's line, if it has one.
    pub fn record(&self, event: &Event) {
        if let Some(line) = Self::format(event) {
            self.append(&line);
        }
    }

    /// Appends `[local time] text` (control characters escaped).
    pub fn append(&self, text: &str) {
        let stamp = chrono::Local::now().format("%Y-%m-%d %H:%M:%S");
        let line = format!("[{stamp}] {}\n", cascade_plan::text::printable_line(text));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path);
        if let Ok(mut f) = file {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// The first line of a message, trimmed (a progress line is one line).
fn one_line(text: &str) -> String {
    let first = text.lines().next().unwrap_or("").trim();
    if text.lines().nth(1).is_some() {
        format!("{first} ...")
    } else {
        first.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::FailureKind;

    #[test]
    fn control_characters_from_agents_are_escaped() {
        let tmp = tempfile::tempdir().unwrap();
        let log = ProgressLog::new(tmp.path().join("progress.txt"));
        log.record(&Event::AttemptFailed {
            story: "s1".into(),
            agent: "a".into(),
            attempt: 1,
            error_type: FailureKind::ExitCode,
            error: "agent said \u{1b}[2J\u{0}boom\r".into(),
        });
        log.append("x\ny\tz");
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert!(!text.contains('\u{1b}') && !text.contains('\u{0}') && !text.contains('\r'));
        assert!(text.contains(r"agent said \u{1b}[2J\u{0}boom"), "{text}");
        assert!(text.contains(r"x\u{a}y"), "{text}");
        assert_eq!(text.lines().count(), 2, "{text}");
    }

    #[test]
    fn lines_match_plan_cascade_format() {
        let tmp = tempfile::tempdir().unwrap();
        let log = ProgressLog::new(tmp.path().join("progress.txt"));
        log.record(&Event::AgentFallback {
            story: "story-004".into(),
            from: "aider".into(),
            to: "claude-code".into(),
            why: "CLI 'aider' not found".into(),
        });
        log.record(&Event::StoryStarted {
            story: "story-001".into(),
            title: "t".into(),
            agent: "codex".into(),
            attempt: 1,
            max_attempts: 3,
            phase: "implementation".into(),
            fallbacks: vec![],
            pid: 12345,
            branch: "b".into(),
            worktree: "w".into(),
            confinement: "none".into(),
        });
        log.record(&Event::AttemptFailed {
            story: "story-002".into(),
            agent: "aider".into(),
            attempt: 1,
            error_type: FailureKind::QualityGate,
            error: "quality gate 'tests' failed\nmore".into(),
        });
        log.record(&Event::RetryScheduled {
            story: "story-002".into(),
            attempt: 2,
            max_attempts: 3,
            agent: "claude-code".into(),
            error_type: FailureKind::QualityGate,
            delay_ms: 0,
        });
        log.record(&Event::Notice {
            message: "nothing".into(),
        });
        let text = std::fs::read_to_string(log.path()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        let strip = |l: &str| {
            assert!(l.starts_with('['), "{l}");
            assert_eq!(&l[5..6], "-");
            assert_eq!(&l[20..22], "] ");
            l[22..].to_string()
        };
        assert_eq!(
            strip(lines[0]),
            "story-004: [FALLBACK] aider -> claude-code: CLI 'aider' not found"
        );
        assert_eq!(strip(lines[1]), "story-001: [START] via codex (pid:12345)");
        assert_eq!(
            strip(lines[2]),
            "story-002: [FAILED] via aider: quality gate 'tests' failed ..."
        );
        assert_eq!(
            strip(lines[3]),
            "story-002: [RETRY] -> claude-code (attempt 2/3)"
        );
    }
}
