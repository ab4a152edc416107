//! Mega-plans: many features, each in its own worktree, run in dependency
//! batches and merged into the target branch in order.
//!
//! Flow ([`run::run_mega`]): load and validate `mega-plan.json`
//! ([`plan_input::load_plan`], batches from cascade-plan's analyzer), take
//! the repository's run lock, refuse a dirty tree, then per batch: a worktree
//! per feature on `cascade/<name>` from the target's tip, its PRD (found,
//! copied from `features/<name>/prd.json`, or written by the PRD agent), an
//! engine run of that PRD inside the worktree, `--no-ff` merges into the target
//! in batch order, the gates on the merged target (in a throwaway worktree
//! when the target is not checked out), cleanup. Failing features keep their
//! branch and worktree and block only their dependents. `--parallel N` is one
//! semaphore of N permits shared by every feature engine (each may run N
//! stories) and the PRD agent: features x stories never exceed N, and slots a
//! finished feature no longer needs go to the others.
//!
//! API summary (for the binary):
//! - [`run::run_mega`]`(Arc<impl MegaPorts>, PlanInput, MegaOptions{start_dir,
//!   auto_run, parallel, allow_dirty}, MegaSink, Option<Confirm>, CancelToken)
//!   -> Result<MegaSummary{status, state}, MegaError>`; resumes when a state of
//!   the same plan exists.
//! - [`ports::MegaPorts`]: the seam to the rest of cascade (validate a PRD, run
//!   the PRD agent, run a feature's PRD with the engine, run gates);
//!   [`live::LivePorts`] is the real one (cascade-plan, cascade-agents,
//!   [`crate::engine::Engine`], cascade-gates).
//! - [`events::MegaEvent`]: `MegaStep`s (`mega_started`, `feature_merged`,
//!   `feature_failed`, ..., `mega_finished`) and the engine's story events with
//!   a `feature` field, one NDJSON line each.
//! - [`state`]: `.cascade/mega-state.json` ([`MegaState`], [`FeatureState`],
//!   [`FeatureStatus`] pending|generating_prd|running|merging|complete|failed|blocked,
//!   worktree, branch, stories done/total, failure kind and message), written
//!   atomically with a schema version after every transition.
//! - [`prd_gen`]: the PRD agent loop (prompt from the feature and the design
//!   doc, `CASCADE_PRD_PATH`, validation, up to two fix rounds with the exact errors).
//! - [`findings`]: `mega-findings.md` shared read-only (0444) into every feature
//!   worktree; each feature's `findings.md` kept under
//!   `.cascade/mega/features/<name>/` and appended to the shared file (the
//!   story side, used by every run, is [`crate::findings`]).
//! - [`error::MegaError`]: what stops a mega run as a whole (a failing feature
//!   is recorded in the state, not an error); `is_usage()` picks exit 2.

pub mod error;
pub mod events;
mod feature;
pub mod findings;
mod land;
pub mod live;
pub mod plan_input;
pub mod ports;
pub mod prd_gen;
pub mod run;
#[cfg(test)]
mod run_tests;
pub mod state;

pub use error::MegaError;
pub use state::{
    FailureKind, FeatureFailure, FeatureState, FeatureStatus, MegaRunStatus, MegaState, StoryCounts,
};
