//! [`EngineError`]: what stops a run as a whole (before it starts, mostly).
//!
//! A failing story is not an error: it is recorded in the state and reported
//! through events and the [`crate::engine::RunSummary`]. `is_usage` tells the binary
//! which errors are bad input (exit 2) and which are run-time failures (exit 1).

use std::path::PathBuf;

use cascade_git::GitError;

use crate::config::ProjectConfigError;
use crate::lock::LockError;
use crate::state::StateError;

/// A run could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The project directory is not in a git repository, or git failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// Another live cascade run holds the lock.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// prd.json could not be read or written.
    #[error(transparent)]
    Plan(#[from] cascade_plan::PlanError),
    /// prd.json parses but is not a valid plan.
    #[error("{}: invalid plan:\n{source}", path.display())]
    Invalid {
        path: PathBuf,
        #[source]
        source: cascade_plan::ValidationErrors,
    },
    /// agents.json could not be used.
    #[error(transparent)]
    Agents(#[from] cascade_agents::ConfigError),
    /// An agent named on the command line is not configured.
    #[error(transparent)]
    UnknownAgent(cascade_agents::resolve::ResolveError),
    /// No agent can run a story.
    #[error("story '{story}': {source}")]
    NoAgent {
        story: String,
        #[source]
        source: cascade_agents::ResolveError,
    },
    /// The quality gates could not be configured.
    #[error(transparent)]
    Gates(#[from] cascade_gates::GateConfigError),
    /// Skills or the design doc for prompts could not be loaded.
    #[error(transparent)]
    Prompt(#[from] cascade_agents::prompt::PromptError),
    /// `.cascade/config.json` could not be used.
    #[error(transparent)]
    ProjectConfig(#[from] ProjectConfigError),
    /// An acceptance criterion's `check` is not a usable command.
    #[error("{origin}: {message}")]
    Criterion { origin: String, message: String },
    /// `.cascade/verify.json` could not be used.
    #[error(transparent)]
    Verify(#[from] cascade_verify::VerifyError),
    /// The run state could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The working tree has uncommitted changes.
    #[error("the working tree '{}' has uncommitted changes ({}); commit or stash them, or pass --allow-dirty", dir.display(), files.join(", "))]
    Dirty { dir: PathBuf, files: Vec<String> },
    /// HEAD is detached: there is no branch to merge stories into.
    #[error("'{}' is not on a branch (detached HEAD); check out the branch stories should merge into", dir.display())]
    DetachedHead { dir: PathBuf },
    /// The repository has no commit yet: there is nothing to branch from.
    #[error("the repository at '{}' has no commits yet; make a first commit (for example `git commit --allow-empty -m init`) and run again", dir.display())]
    NoCommits { dir: PathBuf },
    /// `resume` without a previous run (no run database, or one that no
    /// run was recorded in yet: a run killed as it started).
    #[error("there is no run to resume (none recorded in '{}'); start one with `cascade approve`", path.display())]
    NothingToResume { path: PathBuf },
    /// A write failed for want of disk space: the run stopped.
    #[error(transparent)]
    DiskFull(#[from] DiskFull),
    /// A required gate already fails on the run's base: every story would
    /// fail it, so the run stopped before any agent ran.
    #[error("{}", red_base(branch, commit, failed, *known))]
    RedBase {
        branch: String,
        commit: String,
        failed: Vec<crate::events::BaseFailure>,
        /// `--base-failures known` was given (and these gates cannot be
        /// judged by the census).
        known: bool,
    },
    /// A budget in prd.json is malformed.
    #[error("{}: {message}", path.display())]
    Budget {
        path: PathBuf,
        #[source]
        message: crate::control::budget::BudgetError,
    },

    /// `--sandbox required` (or `sandbox.mode`) on a machine without Landlock.
    #[error(transparent)]
    Sandbox(#[from] crate::confine::SandboxUnavailable),
    /// `--race` or a story's `"race"` cannot be run.
    #[error(transparent)]
    Race(#[from] crate::race::RaceError),

    /// A background task of the engine died (a bug).
    #[error("internal error: {0}")]
    Internal(String),
}

/// The run stopped because the disk it writes to is full.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{} is full: {error} (at '{}'); free some space there, then run `cascade resume`: the run state and prd.json were kept as they were before the failed write", disk.as_deref().unwrap_or("the disk"), path.display())]
pub struct DiskFull {
    /// What was being written (or the repository, when only the error's
    /// text says that the disk is full).
    pub path: PathBuf,
    /// The disk, named (`the disk mounted at '/x' (ext4 on /dev/sda2, 0 B free)`).
    pub disk: Option<String>,
    /// The error that said so.
    pub error: String,
}

/// "the base 'main' (abc1234) already fails the required gate 'tests' (...)":
/// the gates with their first errors, and what to do.
fn red_base(
    branch: &str,
    commit: &str,
    failed: &[crate::events::BaseFailure],
    known: bool,
) -> String {
    let short = commit.get(..10).unwrap_or(commit);
    let gates: Vec<String> = failed
        .iter()
        .map(|f| {
            let mut s = format!("'{}'", f.gate);
            if !f.errors.is_empty() {
                s.push_str(&format!(":\n    {}", f.errors.join("\n    ")));
            }
            s
        })
        .collect();
    let what = if failed.len() == 1 {
        "the required gate"
    } else {
        "the required gates"
    };
    let advice = if known {
        "no test census tells its known failures from new ones; fix the base or mark the gate \"required\": false"
    } else {
        "every story would fail it; fix the base, or pass --base-failures known to judge stories by new test failures only"
    };
    format!(
        "the base '{branch}' ({short}) already fails {what} {}\n{advice}, then run `cascade resume`",
        gates.join(", ")
    )
}

impl EngineError {
    /// Bad input or usage (exit 2) rather than a run-time failure (exit 1).
    pub fn is_usage(&self) -> bool {
        !matches!(
            self,
            EngineError::Internal(_)
                | EngineError::Git(GitError::Io { .. })
                | EngineError::DiskFull(_)
        )
    }
}
