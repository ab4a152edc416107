//! Where the work of an attempt runs: here (the default: the `steps`
//! module, in a local worktree) or on another machine (an [`Executor`] set
//! in [`RunOptions::executor`](crate::config::RunOptions::executor), such as
//! the fleet's NATS coordinator).
//!
//! With an executor, an attempt is: the target branch's tip is the job's
//! base; the executor gets a [`Job`] (story, attempt, base, agent choices,
//! the retry context, a one-story PRD) and returns what a worker made of it
//! ([`Executed`]); a passed job's commit has been fetched onto the story
//! branch by the executor (a child of the base), and the engine's own merge
//! queue merges it. The scheduler, state, retries and merge queue are the
//! same as for a local attempt.
//!
//! The worker side runs the same steps a local attempt runs, minus the merge:
//! [`Engine::run_job`](crate::engine::Engine::run_job) (the `job` module).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::events::{EventSink, GateSummary};

/// One attempt of one story, as another machine needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The coordinator's run id.
    pub run_id: String,
    /// The mega-plan feature the story belongs to (story ids repeat across
    /// features: see [`Job::key`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature: Option<String>,
    pub story: String,
    pub title: String,
    /// The attempt's number in the story's history (the pushed branch is
    /// [`Job::attempt_branch`]).
    pub attempt: u32,
    /// The number of the last attempt the run allows (for the prompt).
    pub max_attempts: u32,
    /// `implementation` or `retry`.
    pub phase: String,
    /// The target branch's commit the work starts from.
    pub base: String,
    pub target_branch: String,
    /// prd.json with only this story (dependencies dropped: they are
    /// merged in `base`), every other field as the coordinator has it (its
    /// `quality_gates` too; a `.cascade/gates.json` comes from `base`, or
    /// from `judging` when the base commits none).
    pub prd: serde_json::Value,
    /// design_doc.json of the coordinator's project, when it has one.
    #[serde(default)]
    pub design_doc: Option<serde_json::Value>,
    pub agents: JobAgents,
    /// The previous attempt's failure, on a retry.
    #[serde(default)]
    pub previous: Option<JobFailure>,
    /// `--agent-timeout` style override of every agent's timeout, seconds.
    #[serde(default)]
    pub agent_timeout_secs: Option<u64>,
    pub use_gate_cache: bool,
    #[serde(default)]
    pub review: Option<crate::config::ReviewMode>,
    /// The coordinator's `--prove-tests` (`None`: on with a strict review).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prove_tests: Option<bool>,
    /// The coordinator's `--base-failures` (how a gate the base already
    /// fails judges the story).
    #[serde(default)]
    pub base_failures: crate::config::BaseFailures,
    /// The coordinator's untracked `.cascade/gates.json` and `verify.json`
    /// as its run found them (name -> text): what judges the story where
    /// its base commits none (see the `judging` module).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub judging: std::collections::BTreeMap<String, String>,
    pub excerpt_bytes: usize,
    /// Labels a worker must have to take the job (the story's `labels`).
    #[serde(default)]
    pub labels: Vec<String>,
    /// The coordinator's `--remote-cache URL` and mode, so workers and the
    /// coordinator share gate results (`None`: the gate configuration in
    /// `prd` or the worker's own `CASCADE_REMOTE_CACHE` decide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_cache_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_cache_mode: Option<cascade_gates::RemoteMode>,
    /// The coordinator's `--gate-jobs`: on a worker, the jobs that name the
    /// same number share that many gate slots (across its slots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_jobs: Option<usize>,
    /// Set when the job resolves a merge conflict of work done earlier
    /// instead of doing the story: the worker merges `base` into that work
    /// and an agent resolves the conflicts (the `resolve_conflict` step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve: Option<JobResolve>,
    /// Set when the job is a contestant of a race (see `crate::race`): its
    /// name. Contestants of one story are jobs of their own, each with its
    /// attempt number and agent ([`Job::job_key`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contestant: Option<String>,
}

impl Job {
    /// The story's name across the fleet: `<feature>.<story>` for a story of
    /// a mega-plan feature, else the story id (job ids, the coordinator's
    /// ledger and the pushed branches are keyed by it).
    pub fn key(&self) -> String {
        story_key(self.feature.as_deref(), &self.story)
    }

    /// What the coordinator's ledger of jobs out knows the job by: the
    /// story key, and for a race's contestant `<key>@<contestant>` (the
    /// contestants of a story are out at once).
    pub fn job_key(&self) -> String {
        match &self.contestant {
            Some(c) => format!("{}@{c}", self.key()),
            None => self.key(),
        }
    }

    /// The branch on the shared remote a worker pushes this attempt's work
    /// to: `cascade/<key>/a<attempt>` (a resolution job updates the branch
    /// of the attempt it resolves).
    pub fn attempt_branch(&self) -> String {
        format!(
            "{}/a{}",
            cascade_git::worktree::branch_name(self.feature.as_deref(), &self.story),
            self.attempt
        )
    }
}

/// A story's fleet key (see [`Job::key`]).
pub fn story_key(feature: Option<&str>, story: &str) -> String {
    match feature {
        Some(f) => format!("{f}.{story}"),
        None => story.to_string(),
    }
}

/// A merge conflict for a worker to resolve: the story's work (a commit on
/// [`Job::attempt_branch`] of the shared remote) conflicts with the job's
/// base (the target branch's tip now).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResolve {
    /// The story branch's tip the worker made.
    pub commit: String,
    /// The conflicting files.
    pub files: Vec<String>,
    /// The agent that did the story (it resolves, unless the merge phase
    /// names another).
    pub agent: String,
}

/// The agent choices of a job: the run's overrides (the worker resolves
/// them against its own PATH) and the candidates in resolution order (what
/// the coordinator checks live workers against).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobAgents {
    pub agent: Option<String>,
    pub impl_agent: Option<String>,
    pub retry_agent: Option<String>,
    pub review_agent: Option<String>,
    pub no_fallback: bool,
    /// The coordinator's resolution chain for the story, highest first: a
    /// worker runs the first one its own agents.json configures and its PATH
    /// has (with `--no-fallback` only the first is offered).
    pub candidates: Vec<String>,
}

/// A failed attempt, carried both ways: a worker's failure, and the
/// previous failure for a retry's prompt (the engine's own [`Failure`],
/// with the agent it is charged to).
pub type JobFailure = crate::failure::Failure;

/// How a job ended on the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum JobOutcome {
    /// The work passed its checks; `commit` is the story branch's tip (a
    /// descendant of the job's base).
    Passed {
        commit: String,
    },
    Failed {
        failure: JobFailure,
    },
    /// The worker stopped (drain, Ctrl-C) before the job finished.
    Interrupted,
}

impl JobOutcome {
    /// `passed`, `failed` or `interrupted` (events, a worker's log).
    pub fn status(&self) -> &'static str {
        match self {
            JobOutcome::Passed { .. } => "passed",
            JobOutcome::Failed { .. } => "failed",
            JobOutcome::Interrupted => "interrupted",
        }
    }

    /// A failed job's error.
    pub fn error(&self) -> Option<String> {
        match self {
            JobOutcome::Failed { failure } => Some(failure.error.clone()),
            _ => None,
        }
    }
}

/// What a worker reports about a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    /// The agent that ran (or was meant to run) the attempt.
    pub agent: String,
    #[serde(flatten)]
    pub outcome: JobOutcome,
    #[serde(default)]
    pub gates: Vec<GateSummary>,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cost_usd: Option<f64>,
    pub duration_ms: u64,
    /// How a passed job was judged beyond passing (review verdict,
    /// findings): what a race compares its contestants by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged: Option<crate::state::Judged>,
}

/// What an executor made of a job.
#[derive(Debug, Clone)]
pub enum Executed {
    /// A worker ran it. A `Passed` outcome's commit is on the story branch
    /// of the coordinator's repository (fetched and checked by the
    /// executor: a child of the job's base).
    Ran { worker: String, report: JobReport },
    /// The job did not run on any worker (no worker has its agent or
    /// labels, the transport failed for good): the attempt fails with this.
    NotRun(JobFailure),
    /// The run is being stopped (Ctrl-C, the transport is down): the story
    /// goes back to pending and `resume` picks the job up again.
    Interrupted,
}

/// What the engine gives an executor besides the job.
#[derive(Clone)]
pub struct ExecContext {
    /// The coordinator's repository (where the story branch goes).
    pub repo: std::path::PathBuf,
    /// The local story branch a passed job's commit is fetched onto.
    pub story_branch: String,
    pub sink: EventSink,
    pub cancel: cascade_process::CancelToken,
}

/// The boxed future an executor returns.
pub type ExecFuture<'a, T = Executed> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs attempts elsewhere.
pub trait Executor: Send + Sync {
    /// Runs `job` and returns what came of it.
    fn execute(&self, job: Job, cx: ExecContext) -> ExecFuture<'_>;

    /// The story `key` ([`Job::key`]) is merged into `target`, whose tip is
    /// now `tip`: what the executor keeps of its attempts elsewhere can go
    /// (the fleet deletes the branches workers pushed; not called for a
    /// story that failed: its work is kept, as its local branch is), and the
    /// next jobs will start from `tip` (the fleet makes it fetchable now).
    fn merged(&self, _key: &str, _target: &str, _tip: &str) {}

    /// The run of `target` is ending: finishes what the executor still has
    /// to do for it (cleanup); returns notices for the run's events.
    fn finish<'a>(&'a self, _target: &'a str) -> ExecFuture<'a, Vec<String>> {
        Box::pin(async { Vec::new() })
    }
}

/// An executor in [`RunOptions`](crate::config::RunOptions) (cloneable, printable).
#[derive(Clone)]
pub struct ExecutorHandle(pub Arc<dyn Executor>);

impl std::fmt::Debug for ExecutorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Executor(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::FailureKind;

    #[test]
    fn report_round_trips_with_a_flat_status() {
        let r = JobReport {
            agent: "codex".into(),
            outcome: JobOutcome::Failed {
                failure: JobFailure {
                    agent: "codex".into(),
                    kind: FailureKind::QualityGate,
                    error: "quality gate 'test' failed".into(),
                    gate_summary: String::new(),
                    output_excerpt: String::new(),
                    findings: String::new(),
                },
            },
            gates: vec![],
            input_tokens: None,
            output_tokens: None,
            cost_usd: None,
            duration_ms: 5,
            judged: None,
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["status"], "failed");
        assert_eq!(v["failure"]["kind"], "quality_gate");
        let back: JobReport = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }
}
