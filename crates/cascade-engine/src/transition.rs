//! The transitions of a story's record that the story's loop (and the
//! run's loop, for blocked stories) makes, as values: what each one
//! changes is written once, here, and the state's owner applies them in
//! the order they were sent (see the `owner` module). The steps' details
//! of an attempt (log paths, tokens, gate results) stay amendments of
//! their own.

use crate::retry::FailureKind;
use crate::state::{now_rfc3339, StoryState, StoryStatus, INTERRUPTED};

/// One transition of a story's record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Transition {
    /// The story's task starts it on `branch`: running, last run's error
    /// and blockers cleared. Written with the next transition (the agent's
    /// pid, or the attempt's failure): one write per story start.
    Started { branch: String },
    /// Merged as `commit` by `attempt` of `agent`.
    Merged {
        commit: String,
        agent: String,
        attempt: u32,
        duration_ms: u64,
    },
    /// `attempt` was interrupted (Ctrl-C, a full disk): pending again.
    Interrupted { attempt: u32, duration_ms: u64 },
    /// Pending again, stopped short of an attempt's end.
    Pending,
    /// `attempt` of `agent` failed.
    AttemptFailed {
        agent: String,
        attempt: u32,
        duration_ms: u64,
        kind: FailureKind,
        error: String,
    },
    /// No further attempt starts, for `error` (its budget is spent).
    NoAttempt { kind: FailureKind, error: String },
    /// Failed for good; its worktree is kept at `worktree`.
    Failed { worktree: String },
    /// Blocked by the failed or blocked dependencies `by`.
    Blocked { by: Vec<String> },
}

impl Transition {
    /// Whether it is written at once ([`Transition::Started`] waits for the
    /// next one).
    pub fn commits(&self) -> bool {
        !matches!(self, Transition::Started { .. })
    }

    /// Changes `s` as the transition says.
    pub fn apply(self, s: &mut StoryState) {
        match self {
            Transition::Started { branch } => {
                s.status = StoryStatus::Running;
                s.branch = Some(branch);
                s.worktree = None;
                s.error = None;
                s.error_type = None;
                s.blocked_by.clear();
            }
            Transition::Merged {
                commit,
                agent,
                attempt,
                duration_ms,
            } => {
                s.status = StoryStatus::Complete;
                s.merge_commit = Some(commit);
                s.agent = Some(agent);
                if let Some(a) = s.attempt_mut(attempt) {
                    a.outcome = Some("passed".into());
                    a.finished_at = Some(now_rfc3339());
                    a.duration_ms = Some(duration_ms);
                }
            }
            Transition::Interrupted {
                attempt,
                duration_ms,
            } => {
                s.status = StoryStatus::Pending;
                if let Some(a) = s.attempt_mut(attempt).filter(|a| a.outcome.is_none()) {
                    a.outcome = Some(INTERRUPTED.into());
                    a.finished_at = Some(now_rfc3339());
                    a.duration_ms = Some(duration_ms);
                }
            }
            Transition::Pending => s.status = StoryStatus::Pending,
            Transition::AttemptFailed {
                agent,
                attempt,
                duration_ms,
                kind,
                error,
            } => {
                s.error = Some(error.clone());
                s.error_type = Some(kind);
                s.agent = Some(agent);
                if let Some(a) = s.attempt_mut(attempt) {
                    a.outcome = Some("failed".into());
                    a.finished_at = Some(now_rfc3339());
                    a.duration_ms = Some(duration_ms);
                    a.error = Some(error);
                    a.error_type = Some(kind);
                }
            }
            Transition::NoAttempt { kind, error } => {
                s.error = Some(error);
                s.error_type = Some(kind);
            }
            Transition::Failed { worktree } => {
                s.status = StoryStatus::Failed;
                s.worktree = Some(worktree);
            }
            Transition::Blocked { by } => {
                s.status = StoryStatus::Blocked;
                s.blocked_by = by;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::AttemptRecord;

    #[test]
    fn an_interrupted_attempt_keeps_an_outcome_it_already_has() {
        let mut s = StoryState::new("a".into(), StoryStatus::Running);
        let mut rec =
            AttemptRecord::started(1, "codex".into(), "implementation".into(), now_rfc3339());
        rec.outcome = Some("failed".into());
        s.attempts.push(rec);
        s.attempts.push(AttemptRecord::started(
            2,
            "codex".into(),
            "retry".into(),
            now_rfc3339(),
        ));
        Transition::Interrupted {
            attempt: 1,
            duration_ms: 5,
        }
        .apply(&mut s);
        Transition::Interrupted {
            attempt: 2,
            duration_ms: 7,
        }
        .apply(&mut s);
        assert_eq!(s.status, StoryStatus::Pending);
        assert_eq!(s.attempts[0].outcome.as_deref(), Some("failed"));
        assert_eq!(s.attempts[1].outcome.as_deref(), Some(INTERRUPTED));
        assert_eq!(s.attempts[1].duration_ms, Some(7));
    }

    #[test]
    fn a_start_clears_what_the_last_run_left_and_waits_for_the_next_write() {
        let mut s = StoryState::new("a".into(), StoryStatus::Failed);
        s.error = Some("gate".into());
        s.blocked_by = vec!["b".into()];
        let t = Transition::Started {
            branch: "cascade/a".into(),
        };
        assert!(!t.commits());
        t.apply(&mut s);
        assert_eq!(s.status, StoryStatus::Running);
        assert_eq!(s.branch.as_deref(), Some("cascade/a"));
        assert!(s.error.is_none() && s.blocked_by.is_empty());
        assert!(Transition::Pending.commits());
    }
}
