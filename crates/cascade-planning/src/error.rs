//! Errors of the planning workflow, one variant per way a session can stop.
//!
//! The binary maps them to exit codes: [`PlanningError::is_usage`] ones are
//! bad input (exit 2), every other one is a failed session (exit 1).

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PlanningError {
    #[error("cannot access '{}': {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: {message}", path.display())]
    Shape { path: PathBuf, message: String },
    #[error("no planning session '{id}'{}", known_hint(known))]
    UnknownSession { id: String, known: Vec<String> },
    #[error("'{}' was written by a newer cascade (schema version {version}); upgrade cascade to continue this session", path.display())]
    NewerSchema { path: PathBuf, version: u32 },
    #[error("the planning session {id} is already {status}; start a new one with `cascade plan \"GOAL\"`")]
    Finished { id: String, status: String },
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Resolve(#[from] cascade_agents::ResolveError),
    #[error("the {step} step could not run agent '{agent}': {message}")]
    AgentUnavailable {
        step: String,
        agent: String,
        message: String,
    },
    #[error("the {step} step failed: agent '{agent}' {message} (log: {})", log.display())]
    AgentFailed {
        step: String,
        agent: String,
        message: String,
        log: PathBuf,
    },
    #[error("the {step} step did not write '{}': {message}", path.display())]
    MissingOutput {
        step: String,
        path: PathBuf,
        message: String,
    },
    #[error("session not found, re-run the plan: agent '{agent}' does not list its session {session_id} any more")]
    SessionNotFound { agent: String, session_id: String },
    #[error("listing the sessions of agent '{agent}' failed ({status}): {output}")]
    ListSessions {
        agent: String,
        status: String,
        output: String,
    },
    #[error(
        "the plan is still invalid after {rounds} fix round(s):\n{}",
        bullet(problems)
    )]
    InvalidPlan { rounds: u32, problems: Vec<String> },
    #[error("could not parse challenge verdict in '{}' (expected a line `Verdict: APPROVED`, `Verdict: NEEDS_REVISION` or `Verdict: REJECTED`)", path.display())]
    UnparsableVerdict { path: PathBuf },
    #[error("the challenge by '{agent}' rejected the plan (see '{}')", path.display())]
    Rejected { agent: String, path: PathBuf },
    #[error("the challenge still says NEEDS_REVISION after {rounds} revision round(s) (see '{}')", path.display())]
    StillNeedsRevision { rounds: u32, path: PathBuf },
    #[error("interrupted; the session is saved: continue it with `cascade plan resume {id}`")]
    Interrupted { id: String },
}

impl PlanningError {
    pub(crate) fn json(path: &Path, e: &serde_json::Error) -> PlanningError {
        PlanningError::Json {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        }
    }

    /// Bad input or usage (exit 2) rather than a failed session (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            PlanningError::UnknownSession { .. }
                | PlanningError::NewerSchema { .. }
                | PlanningError::Finished { .. }
                | PlanningError::Usage(_)
                | PlanningError::Json { .. }
                | PlanningError::Shape { .. }
                | PlanningError::Resolve(_)
        )
    }

    /// The session was saved as failed and `plan resume` retries the step
    /// (an agent that failed, or none installed yet), as opposed to input
    /// that was refused before anything ran.
    pub fn session_failed(&self) -> bool {
        !self.is_usage()
            || matches!(
                self,
                PlanningError::Resolve(cascade_agents::ResolveError::NoneAvailable { .. })
            )
    }
}

fn known_hint(known: &[String]) -> String {
    if known.is_empty() {
        " (there are no planning sessions here; start one with `cascade plan \"GOAL\"`)".into()
    } else {
        " (see `cascade plan list`)".into()
    }
}

fn bullet(problems: &[String]) -> String {
    problems
        .iter()
        .map(|p| format!("  - {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}
