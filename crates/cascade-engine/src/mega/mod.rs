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
//! The features are nodes of the engine's [`crate::scheduler::Scheduler`]
//! (batch discipline), and the run speaks through the engine's
//! [`crate::events::EventSink`]: its own steps are [`crate::events::Event`]
//! variants (`mega_started` ... `mega_finished`), a feature engine's events
//! come as [`crate::events::Event::Feature`] (the event with a `feature`
//! field). [`ports::MegaPorts`] is the seam to the rest of cascade
//! ([`live::LivePorts`] the real one); [`state`] is the mega run's state
//! (kept in the run database by [`crate::store::mega`]); [`error::MegaError`] is what stops a run as a
//! whole (a failing feature is recorded in the state, not an error).

pub mod error;
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
pub use state::{FailureKind, FeatureFailure, FeatureState, FeatureStatus, MegaState, StoryCounts};
