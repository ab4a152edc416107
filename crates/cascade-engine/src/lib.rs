//! cascade-engine: the orchestrator that takes a PRD from "approved" to
//! "merged": state, scheduler, retries, events, resume (and mega-plan runs in
//! [`mega`]). It never prints: everything it does is an [`Event`] sent to one
//! callback ([`EventSink`], `Arc<dyn Fn(&Event) + Send + Sync>`); the binary's
//! reporters render them.
//!
//! # API summary
//! - [`engine::Engine`]`::new(`[`config::EngineConfig`]`)`:
//!   - `.check(&RunOptions) -> Result<`[`engine::CheckedRun`]`, EngineError>`:
//!     everything that can refuse a run (PRD and its statuses, agents incl.
//!     unknown `--agent` names and an agent for every pending story, target
//!     branch, gates, `.cascade/config.json`, the state to resume, the dirty
//!     tree), writing nothing; `.start(CheckedRun, options, sink, &cancel)`
//!     takes the lock, writes the `info/exclude` block and runs.
//!   - `.run(`[`config::RunOptions`]`, sink, &CancelToken).await ->
//!     Result<`[`engine::RunSummary`]`, `[`error::EngineError`]`>`: `check`
//!     then `start`: runs stories in worktrees
//!     (`cascade/<id>`, or `cascade/<feature>.<id>` with `config.feature`)
//!     as a sequence of named steps (the `steps` module: resolve agent ->
//!     prepare worktree -> run agent -> commit -> verify (cascade-verify) ->
//!     gates (+ the story's acceptance-criteria `check`s) -> prove tests
//!     (`RunOptions::prove_tests`) -> review (a second
//!     agent, [`config::ReviewMode`]) -> serial merge), retries and resume.
//!     Story worktrees are pooled per run (`.cascade/worktrees/slot-<n>`,
//!     reset to each new story's base with only the difference written;
//!     a failed story's is kept as `.cascade/worktrees/<id>`), each state
//!     transition is one transaction of the run database, and prd.json
//!     writes of parallel stories are grouped.
//!     `RunSummary { run_id, status: `[`RunStatus`]` (completed|failed|interrupted|paused|budget_exhausted),
//!     counts, stories: Vec<`[`StorySummary`]`>, duration_ms }`. `Err` only
//!     when the run could not start; `EngineError::is_usage()` => exit 2.
//!   - `.dry_run(&RunOptions) -> Result<`[`engine::DryRun`]`>`: batches with agents and
//!     fallbacks, and the notices a run would start with; writes nothing.
//!   - `.state_path()`.
//! - `EngineConfig::new(project_root, prd_path)` plus `agents_path`,
//!   `target_branch` (default: the branch checked out at `project_root`),
//!   `feature`, `state_path`, `progress_path`, `artifacts_dir` (prompts/logs),
//!   `take_lock`, `excluded` ([`config::OWN_FILES`]). For a feature of a
//!   mega-plan: the feature worktree as root, its branch, `feature`, its own
//!   state/progress/artifacts paths and `take_lock: false`.
//! - `RunOptions { agent, impl_agent, retry_agent, no_fallback, retry:
//!   `[`RetryPolicy`]`, parallel, schedule: `[`scheduler::Discipline`]`, fail_fast,
//!   allow_dirty, mode: `[`config::Mode`]`, pause: `[`config::Pause`]` (Never |
//!   AfterBatch | Confirm(callback)), resume, use_gate_cache, agent_timeout,
//!   excerpt_bytes, review: Option<ReviewMode>, review_agent, gate_jobs,
//!   min_available_memory_mb, budget: `[`control::budget::Budget`]`, no_resolve,
//!   ... }` (`Default` = CLI defaults).
//! - [`executor`]: where an attempt's work runs. `RunOptions::executor`
//!   (an [`executor::Executor`], e.g. the fleet's coordinator) replaces the
//!   agent..review steps with a [`executor::Job`] run elsewhere, whose
//!   commit goes through the same merge queue (a conflict goes back out as
//!   a job that resolves it); `Engine::run_job(&Job, pools, sink, &cancel)
//!   -> JobReport` is the worker side (the same steps, no merge).
//! - [`control`]: budgets, per-agent rate-limit cooldowns (AIMD), gate jobs
//!   and the memory guard, per-story ports and shared build caches; merge
//!   conflicts go to an agent (phase `merge`) before they fail an attempt;
//!   steering a live run ([`control::steer::Steering`] in
//!   `RunOptions::steering`: pause/resume, cancel/retry a story; a mega run
//!   shares one, scoped per feature engine).
//! - [`findings`]: the `findings.md` notes every story's agent reads and appends to.
//! - [`secrets`]: what a story's commit refuses (credentials by name or
//!   content unless the story's `allow_secrets` allows them, files over
//!   `commit.max_file_mb`, new binary files its `files` does not name: the
//!   commit step fails the attempt as `verification`, nothing committed) and
//!   leaves out (dependency and build output the base does not track, named
//!   by a `commit_left_out` event); files worktree setup put there are never
//!   committed (`cascade_git::local_files`).
//! - [`events`]: the [`Event`] enum (`#[serde(tag = "event", rename_all = "snake_case")]`).
//! - [`state`]: [`state::RunState`] (per story status/agent/attempts/branch/
//!   worktree/commits), kept by [`store`] in `.cascade/cascade.db` (SQLite:
//!   runs, stories, attempts; one transaction per transition).
//! - [`lock`]: `.cascade/lock` ([`lock::RunLock`], held by the kernel: live
//!   holder => error naming the pid; a dead holder's file => taken over with a note).
//! - [`progress`]: progress.txt in Plan Cascade's line format.
//! - [`retry`]: [`FailureKind`] classification and [`RetryPolicy`] backoff.
//! - `clash`: a conflict retry waits for the running stories it is against
//!   (they touch a file it touches), not for the backoff timer.
//! - [`scheduler`]: the work-agnostic ready-queue ([`scheduler::Scheduler`];
//!   batch and eager disciplines, parallelism limit, blocking, fail-fast).
//! - [`gitops`]: the git reads of the engine (current branch, the user's
//!   uncommitted changes with cascade's own files left out).
//! - [`judging`]: the gates and verification rules that judge a story, read
//!   from its base commit (else the main worktree's untracked copies as the
//!   run found them), never from its branch.

pub mod checks;
mod clash;
pub mod config;
pub mod confine;
pub mod control;
pub(crate) mod ctx;
pub mod engine;
pub mod error;
pub mod events;
pub mod executor;
pub mod failure;
pub mod findings;
pub mod gitops;
mod job;
pub mod judging;
mod leftover;
pub mod lock;
mod merge_queue;
mod owner;
mod persist;
mod pool;
mod prepared;
pub mod progress;
pub mod race;
pub mod retry;
pub mod routes;
pub mod scheduler;
pub mod secrets;
mod spend;
mod start;
pub mod state;
pub(crate) mod steps;
pub mod store;
mod story;
mod transition;

pub mod mega;

pub use events::{Event, EventSink, FallbackNote, RunStatus, StoryCounts, StorySummary};
pub use leftover::stop_agents_under;
pub use retry::{FailureKind, RetryPolicy};
/// Where an attempt's gate results are kept (`cascade show` reads them).
pub use steps::gate_report_path;
