//! The retry manager: failure classification, backoff, and whether to try again.
//!
//! Every failed attempt is classified ([`FailureKind`]) so the reports and
//! the retry prompt can say what went wrong. The delay before attempt `n + 1`
//! is exponential in `n` from a base (`--retry-delay`; 0 retries at once),
//! capped, with a little jitter so parallel retries do not start in lockstep.
//! Which agent runs the retry is the resolver's job (the retry phase).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The agent ran past its timeout and was killed.
    Timeout,
    /// The agent exited with a non-zero code.
    ExitCode,
    /// A required quality gate failed.
    QualityGate,
    /// Merging the story (or feature) branch into the target branch conflicted.
    MergeConflict,
    /// The story merged without a conflict, but the merged tree (the
    /// target's tip with the story) failed the required gates: it does not
    /// fit with stories merged since its base (integration gating). For a
    /// mega run's feature: its merge with the features landed meanwhile.
    Integration,
    /// The agent was killed by a signal or could not be run properly.
    ProcessCrash,
    /// No agent command could be found or started.
    AgentUnavailable,
    /// The agent exited 0 but changed nothing.
    NoChanges,
    /// A git or setup step of cascade itself failed (worktree, commit, setup command).
    Setup,
    /// The merge was refused because it would overwrite uncommitted changes
    /// of the user in the target branch's worktree (`--allow-dirty`). The
    /// agent's work is fine and kept on its branch; another attempt could
    /// only end the same way.
    TargetDirty,
    /// Local verification found a stub, a skipped test or tampered gates.
    Verification,
    /// The review agent answered NEEDS_REVISION.
    Review,
    /// The agent's provider refused its credentials (HTTP 401/403): another
    /// attempt with the same key fails the same way.
    Auth,
    /// The provider rate-limited the agent (HTTP 429/529, overloaded, quota).
    /// Never counted as an attempt.
    RateLimited,
    /// The provider failed (HTTP 5xx) while the agent was talking to it.
    ProviderError,
    /// The story or the run reached its cost or time budget.
    Budget,
    /// A person cancelled the story (the dashboard's or the live channel's
    /// cancel): it is not retried unless asked for.
    Cancelled,
    // Why a mega run's feature failed (its state, `feature_failed`).
    /// No valid PRD: the PRD agent failed or wrote an invalid PRD too often,
    /// or an existing PRD is invalid.
    PrdInvalid,
    /// Some of the feature's stories failed or were blocked.
    StoriesFailed,
    /// The gates failed on the target branch after the feature was merged.
    TargetGates,
    /// cascade itself could not run the feature (git, disk, agents config).
    Error,
    /// A feature it depends on did not complete.
    Blocked,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Timeout => "timeout",
            FailureKind::ExitCode => "exit_code",
            FailureKind::QualityGate => "quality_gate",
            FailureKind::MergeConflict => "merge_conflict",
            FailureKind::Integration => "integration",
            FailureKind::ProcessCrash => "process_crash",
            FailureKind::AgentUnavailable => "agent_unavailable",
            FailureKind::NoChanges => "no_changes",
            FailureKind::Setup => "setup",
            FailureKind::TargetDirty => "target_dirty",
            FailureKind::Verification => "verification",
            FailureKind::Review => "review",
            FailureKind::Auth => "auth",
            FailureKind::RateLimited => "rate_limited",
            FailureKind::ProviderError => "provider_error",
            FailureKind::Budget => "budget",
            FailureKind::Cancelled => "cancelled",
            FailureKind::PrdInvalid => "prd_invalid",
            FailureKind::StoriesFailed => "stories_failed",
            FailureKind::TargetGates => "target_gates",
            FailureKind::Error => "error",
            FailureKind::Blocked => "blocked",
        }
    }

    /// Whether another attempt can help. A missing agent stays missing; a
    /// merge refused to protect the user's uncommitted changes is no fault
    /// of the agent (re-running it would redo good work for nothing); a
    /// rejected key stays rejected; a spent budget stays spent.
    pub fn retryable(self) -> bool {
        !matches!(
            self,
            FailureKind::AgentUnavailable
                | FailureKind::TargetDirty
                | FailureKind::Auth
                | FailureKind::Budget
                | FailureKind::Cancelled
        )
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Classifies a finished agent process that did not succeed.
pub fn classify_agent_exit(
    timed_out: bool,
    exit_code: Option<i32>,
    signal: Option<i32>,
) -> FailureKind {
    if timed_out {
        FailureKind::Timeout
    } else if exit_code.is_some() {
        FailureKind::ExitCode
    } else {
        let _ = signal;
        FailureKind::ProcessCrash
    }
}

/// Classifies an agent run that did not succeed and says why, in one
/// line: a provider signal read from the live stream (auth, rate limit,
/// provider error) wins over how the process ended (a watcher-stopped or
/// timed-out run says nothing about the work); then the agent's own words
/// are added: the error it reported in its stream, else the output lines
/// that say what went wrong (not a generic last line such as "For more
/// information, try '--help'."), and a known fix (claude as root).
pub fn classify_agent_run(agent: &str, run: &cascade_agents::AgentRun) -> (FailureKind, String) {
    let outcome = &run.outcome;
    let mut error = format!("agent '{agent}' {}", outcome.describe());
    let kind = match &run.signal {
        Some(signal) => {
            error.push_str(&format!(": {}: {}", signal.kind, signal.message));
            if let Some(advice) = &signal.advice {
                error.push_str(&format!(" (to fix: {advice})"));
            }
            match signal.kind {
                cascade_agents::SignalKind::Auth => FailureKind::Auth,
                cascade_agents::SignalKind::RateLimited => FailureKind::RateLimited,
                cascade_agents::SignalKind::ProviderError => FailureKind::ProviderError,
            }
        }
        None => {
            let said = run.reported_error.clone().or_else(|| {
                let lines = cascade_agents::telling_lines(&outcome.stderr.text_lossy(), 2);
                let lines = if lines.is_empty() {
                    cascade_agents::telling_lines(&outcome.stdout.text_lossy(), 2)
                } else {
                    lines
                };
                (!lines.is_empty()).then(|| lines.join(" / "))
            });
            if let Some(said) = said {
                error.push_str(&format!(": {said}"));
            }
            classify_agent_exit(outcome.timed_out, outcome.exit_code, outcome.signal)
        }
    };
    if let Some(hint) = &run.hint {
        error.push_str(&format!(" ({hint})"));
    }
    (kind, error)
}

/// Retry limits and backoff.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Delay before the first retry; doubled for each further one.
    pub base_delay: Duration,
    /// Upper bound of the delay.
    pub max_delay: Duration,
    /// Fraction of the delay added or removed at random (0.1 = +-10%).
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(60),
            jitter: 0.1,
        }
    }
}

impl RetryPolicy {
    /// Total attempts allowed.
    pub fn max_attempts(&self) -> u32 {
        self.max_retries.saturating_add(1)
    }

    /// Whether attempt `attempt` (1-based) that failed with `kind` gets another try.
    pub fn should_retry(&self, attempt: u32, kind: FailureKind) -> bool {
        kind.retryable() && attempt < self.max_attempts()
    }

    /// The delay before the attempt after `failed_attempt` (1-based).
    pub fn delay(&self, failed_attempt: u32) -> Duration {
        self.delay_with(failed_attempt, random_unit())
    }

    /// [`delay`](Self::delay) with the random draw `unit` in `[0, 1)` given (for tests).
    pub fn delay_with(&self, failed_attempt: u32, unit: f64) -> Duration {
        if self.base_delay.is_zero() {
            return Duration::ZERO;
        }
        let exp = failed_attempt.saturating_sub(1).min(30);
        let raw = self.base_delay.as_secs_f64() * f64::from(1u32 << exp);
        let capped = raw.min(self.max_delay.as_secs_f64());
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 + jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        Duration::from_secs_f64((capped * factor).max(0.0))
    }
}

/// A draw in `[0, 1)` from the standard library's per-process random keys
/// (good enough for jitter; no dependency).
fn random_unit() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_base_retries_at_once() {
        let p = RetryPolicy {
            base_delay: Duration::ZERO,
            ..Default::default()
        };
        assert_eq!(p.delay(1), Duration::ZERO);
        assert_eq!(p.delay(5), Duration::ZERO);
    }

    #[test]
    fn exponential_capped_with_bounded_jitter() {
        let p = RetryPolicy {
            max_retries: 10,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(10),
            jitter: 0.1,
        };
        assert_eq!(p.delay_with(1, 0.5), Duration::from_secs(2));
        assert_eq!(p.delay_with(2, 0.5), Duration::from_secs(4));
        assert_eq!(p.delay_with(3, 0.5), Duration::from_secs(8));
        assert_eq!(p.delay_with(4, 0.5), Duration::from_secs(10));
        assert_eq!(p.delay_with(40, 0.5), Duration::from_secs(10));
        for _ in 0..100 {
            let d = p.delay(2).as_secs_f64();
            assert!((3.6..=4.4).contains(&d), "{d}");
        }
    }

    #[test]
    fn attempts_and_retryability() {
        let p = RetryPolicy {
            max_retries: 2,
            ..Default::default()
        };
        assert_eq!(p.max_attempts(), 3);
        assert!(p.should_retry(1, FailureKind::QualityGate));
        assert!(p.should_retry(2, FailureKind::Timeout));
        assert!(!p.should_retry(3, FailureKind::Timeout));
        assert!(!p.should_retry(1, FailureKind::AgentUnavailable));
        assert_eq!(
            classify_agent_exit(true, None, Some(15)),
            FailureKind::Timeout
        );
        assert_eq!(
            classify_agent_exit(false, Some(3), None),
            FailureKind::ExitCode
        );
        assert_eq!(
            classify_agent_exit(false, None, Some(9)),
            FailureKind::ProcessCrash
        );
        assert_eq!(
            serde_json::to_string(&FailureKind::NoChanges).unwrap(),
            "\"no_changes\""
        );
    }
}

#[cfg(test)]
mod agent_run_tests {
    use super::*;
    use cascade_agents::{AgentRun, FailureSignal, SignalKind};
    use cascade_process::{Captured, Outcome};

    fn run(exit: Option<i32>, stderr: &str, signal: Option<FailureSignal>) -> AgentRun {
        AgentRun {
            agent: "a".into(),
            outcome: Outcome {
                pid: 1,
                exit_code: exit,
                signal: None,
                timed_out: false,
                cancelled: false,
                stopped: signal.is_some(),
                leaked: false,
                duration: Duration::from_millis(200),
                stdout: Captured::default(),
                stderr: Captured {
                    tail: stderr.as_bytes().to_vec(),
                    total_bytes: stderr.len() as u64,
                },
            },
            log_path: "l".into(),
            prompt_path: "p".into(),
            usage: None,
            final_text: None,
            session_id: None,
            review: None,
            reported_error: None,
            signal,
            model: None,
            hint: None,
        }
    }

    #[test]
    fn the_signal_decides_the_kind_and_names_the_fix() {
        let signal = FailureSignal {
            kind: SignalKind::Auth,
            http_status: Some(401),
            retry_after: None,
            message: "API request failed (HTTP 401 authentication_failed)".into(),
            advice: Some("check ANTHROPIC_API_KEY".into()),
        };
        let (kind, error) = classify_agent_run("claude-code", &run(None, "", Some(signal)));
        assert_eq!(kind, FailureKind::Auth);
        assert!(!kind.retryable());
        assert!(
            error.contains("HTTP 401") && error.contains("ANTHROPIC_API_KEY"),
            "{error}"
        );
        for (k, want) in [
            (SignalKind::RateLimited, FailureKind::RateLimited),
            (SignalKind::ProviderError, FailureKind::ProviderError),
        ] {
            let s = FailureSignal {
                kind: k,
                http_status: None,
                retry_after: None,
                message: "m".into(),
                advice: None,
            };
            assert_eq!(classify_agent_run("x", &run(None, "", Some(s))).0, want);
        }
    }

    #[test]
    fn without_a_signal_the_telling_line_beats_the_last_one() {
        let stderr = "error: unexpected argument '--full-auto' found\n\nUsage: codex exec [OPTIONS] [PROMPT]\n\nFor more information, try '--help'.\n";
        let (kind, error) = classify_agent_run("codex", &run(Some(2), stderr, None));
        assert_eq!(kind, FailureKind::ExitCode);
        assert_eq!(
            error,
            "agent 'codex' exit code 2: error: unexpected argument '--full-auto' found"
        );
    }
}
