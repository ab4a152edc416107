//! What the mega runner needs from the rest of cascade, as one trait.
//!
//! The runner owns the order of things (worktrees, PRDs, batches, merges,
//! state); *how* a PRD is validated, how the PRD agent is called, how one
//! feature's stories are run and how gates are checked belongs to other crates.
//! [`MegaPorts`] is that seam: the real implementation plugs in cascade-plan,
//! cascade-agents, the [`crate`] engine and cascade-gates; tests plug in fakes.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cascade_process::CancelToken;
use tokio::sync::Semaphore;

use super::prd_gen::{AuthorError, PrdCheck};
use crate::events::{EventSink, RunStatus, StoryCounts};

/// One feature's PRD to run with the engine.
#[derive(Debug, Clone)]
pub struct FeatureRun {
    /// The feature's name (namespaces its story branches and worktrees).
    pub feature: String,
    /// The feature branch the stories merge into.
    pub branch: String,
    /// The feature worktree (the engine's project root for this run).
    pub worktree: PathBuf,
    /// The PRD to run (inside the feature worktree).
    pub prd: PathBuf,
    /// Where this feature's engine state, progress, prompts, agent logs and
    /// gate results go (`.cascade/mega/features/<name>/`).
    pub state_dir: PathBuf,
    /// Stories of this feature in flight at once (`--parallel`: the engine's
    /// own limit; what really bounds the work is `slots`).
    pub parallel: usize,
    /// The run's one semaphore of `--parallel` permits, shared by every
    /// feature engine (and the PRD agent): features x stories never exceed it,
    /// and a feature that is done leaves its slots to the others.
    pub slots: Arc<Semaphore>,
    /// Continue an earlier run of this feature (its engine state exists).
    pub resume: bool,
}

/// How one feature's engine run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureOutcome {
    pub status: RunStatus,
    pub stories: StoryCounts,
    /// One line per failed or blocked story: `story-002: quality gate 'tests' failed`.
    pub failures: Vec<String>,
    /// The engine could not run at all (bad PRD, config, git): why.
    pub error: Option<String>,
}

/// What one agent call outside a feature's engine (the PRD agent) spent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCharge {
    pub agent: String,
    /// Reported, else priced from its tokens; `None`: unknown.
    pub cost_usd: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// The run's budget ran out with this charge (said once: the first
    /// charge over the limit carries it).
    pub exhausted: Option<crate::control::budget::Exhausted>,
}

/// Result of the gates on the merged target branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatesVerdict {
    pub passed: bool,
    /// Which gates failed and their first errors (empty when all passed).
    pub summary: String,
}

/// The services the mega runner calls.
pub trait MegaPorts: Send + Sync + 'static {
    /// Validates the PRD at `path`: its story count, or every problem verbatim.
    fn check_prd(&self, path: &Path) -> PrdCheck;

    /// Runs the PRD agent once (planning phase) in `worktree` with `prompt`;
    /// it must write the PRD to `prd_path` (also in `CASCADE_PRD_PATH`).
    fn write_prd(
        &self,
        feature: &str,
        worktree: &Path,
        attempt: u32,
        prompt: &str,
        prd_path: &Path,
        cancel: &CancelToken,
    ) -> impl Future<Output = Result<(), AuthorError>> + Send;

    /// What the latest [`MegaPorts::write_prd`] call for `feature` spent,
    /// taken once (the caller announces it); `None`: no agent ran.
    fn take_prd_charge(&self, feature: &str) -> Option<AgentCharge> {
        let _ = feature;
        None
    }

    /// Runs a feature's PRD with the engine inside its worktree.
    fn run_feature(
        &self,
        run: FeatureRun,
        events: EventSink,
        cancel: CancelToken,
    ) -> impl Future<Output = FeatureOutcome> + Send;

    /// Why the run's shared budget is exhausted, if it is (then no feature
    /// starts, and the run ends as `budget_exhausted`).
    fn budget_exhausted(&self) -> Option<String> {
        None
    }

    /// Counts what feature `feature` spent in earlier invocations (its
    /// engine state at `state_file`) toward the run's budget.
    fn prior_spend(&self, feature: &str, state_file: &Path) {
        let _ = (feature, state_file);
    }

    /// Counts what feature `feature`'s PRD agent spent in earlier
    /// invocations (kept in the mega state) toward the run's budget.
    fn prior_prd_spend(&self, feature: &str, spend: crate::control::budget::Spend) {
        let _ = (feature, spend);
    }

    /// Runs the quality gates in `dir` (the checked-out target branch).
    fn target_gates(
        &self,
        dir: &Path,
        cancel: &CancelToken,
    ) -> impl Future<Output = Result<GatesVerdict, String>> + Send;
}
