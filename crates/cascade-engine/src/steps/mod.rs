//! A story's attempt as a sequence of named steps.
//!
//! [`run_attempt`] reads as the attempt's life: take a slot, resolve the
//! agent, prepare a worktree (and read what judges work from its base:
//! gates and verification rules), run the agent, commit, verify (local stub
//! and cheating detection), run the gates (with the story's
//! acceptance-criteria checks), prove the new tests on the base (when
//! asked for), review (a second agent, when asked for), queue for merge. Each step is a small unit in its own file with a typed outcome: it
//! returns what the next steps need, or stops the attempt ([`Stop`]: a
//! classified [`Failure`] carried into the next prompt, or an interruption).
//! Adding a step is a new file here and one line in [`sequence`].
//!
//! The loop around attempts (retries, backoff, the story's final state) is in
//! the `story` module; the steps only record and announce what happens in
//! their own part of the attempt.

mod agent_head;
mod base;
mod census;
mod commit;
mod gates;
mod git_config;
pub use gates::gate_report_path;
pub(crate) mod integrate;
pub(crate) mod merge;
mod prepare_worktree;
mod prove_tests;
pub(crate) mod race;
mod remote;
mod resolve_agent;
mod resolve_conflict;
mod review;
mod run_agent;
mod train;
mod verify;

use std::path::PathBuf;
use std::sync::Arc;

use cascade_agents::{AgentRequest, Phase};
use cascade_plan::Story;

use crate::ctx::Ctx;
pub(crate) use crate::failure::Failure;
use crate::retry::FailureKind;

pub(crate) use base::judge_first as judge_base;

/// The current tip of the run's target branch: where an attempt's work
/// starts (a missing branch fails the attempt as `setup`).
fn target_tip(ctx: &Ctx) -> Result<String, Failure> {
    match cascade_git::merge::branch_tip(&ctx.paths, &ctx.target_branch) {
        Ok(Some(oid)) => Ok(oid.to_string()),
        Ok(None) => Err(Failure::new(
            FailureKind::Setup,
            format!("target branch '{}' does not exist", ctx.target_branch),
        )),
        Err(e) => Err(Failure::new(FailureKind::Setup, e.to_string())),
    }
}

/// Why a step stopped the attempt.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The attempt failed; the retry manager decides what comes next.
    Failed(Failure),
    /// The run is being cancelled: the story goes back to pending.
    Interrupted,
}

impl From<Failure> for Stop {
    fn from(f: Failure) -> Stop {
        Stop::Failed(f)
    }
}

/// What one attempt came to.
pub(crate) enum AttemptEnd {
    Merged { commit: String, fast_forward: bool },
    Failed(Failure),
    Interrupted,
}

/// What every step of one attempt knows.
pub(crate) struct Attempt<'a> {
    pub ctx: &'a Arc<Ctx>,
    pub story: &'a Story,
    /// The story branch (`cascade/<id>`).
    pub branch: &'a str,
    /// This attempt's number in the story's whole history.
    pub number: u32,
    /// The number of the last attempt this run allows.
    pub max: u32,
    pub phase: Phase,
    /// The previous attempt's failure (charged to its agent), on a retry.
    pub previous: Option<&'a Failure>,
    /// The agent running this attempt: the previous one until the
    /// resolve step has chosen (what a failure before that is charged to).
    pub agent: String,
    /// Environment the story's agent and gates get (its port range).
    pub env: &'a [(String, String)],
    /// The fleet worker that ran the attempt (set by the remote step).
    pub worker: Option<String>,
    /// On a fleet worker: the job this attempt runs (its candidate agents,
    /// or the merge conflict it resolves).
    pub job: Option<&'a crate::executor::Job>,
    /// The permit of the limit shared with other engines (mega runs), taken
    /// by the story before its budget check; given back before the merge.
    pub slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// In a race: the agent this contestant runs (it takes the place of
    /// `--agent` for this attempt's agent; see `steps::race`).
    pub contestant: Option<String>,
}

impl Attempt<'_> {
    pub fn id(&self) -> &str {
        &self.story.id
    }

    /// A request to run an agent of this attempt in its worktree, with what
    /// every agent of an attempt gets: the attempt's sandbox, the run's
    /// timeout override and log limit, and `CASCADE_TARGET_BRANCH`.
    fn agent_request(
        &self,
        phase: Phase,
        prompt: String,
        wt: &prepare_worktree::Worktree,
    ) -> AgentRequest {
        let ctx = self.ctx;
        let mut req = AgentRequest::new(
            self.id(),
            self.number,
            phase,
            prompt,
            &wt.path,
            &ctx.artifacts_dir,
        );
        req.sandbox = wt.sandbox.policy.clone();
        req.timeout_override = ctx.options.agent_timeout;
        req.log_limit = ctx.project.resources.log_limit();
        req.extra_env
            .push(("CASCADE_TARGET_BRANCH".into(), ctx.target_branch.clone()));
        req
    }

    /// A step's way to stop when the run is being cancelled.
    pub fn check_cancel(&self) -> Result<(), Stop> {
        if self.ctx.cancel.is_cancelled() {
            Err(Stop::Interrupted)
        } else {
            Ok(())
        }
    }
}

/// Runs one attempt; returns the agent that ran it (or was meant to), the
/// fleet worker that ran it (if any) and what it came to. `held` is the
/// worktree the story holds across attempts.
pub(crate) async fn run_attempt(
    mut attempt: Attempt<'_>,
    held: &mut Option<PathBuf>,
) -> (String, Option<String>, AttemptEnd) {
    let end = match sequence(&mut attempt, held).await {
        Ok(merged) => AttemptEnd::Merged {
            commit: merged.commit,
            fast_forward: merged.fast_forward,
        },
        Err(Stop::Failed(f)) => AttemptEnd::Failed(f),
        Err(Stop::Interrupted) => AttemptEnd::Interrupted,
    };
    (attempt.agent, attempt.worker, end)
}

/// The steps of an attempt, in order.
async fn sequence(a: &mut Attempt<'_>, held: &mut Option<PathBuf>) -> Result<merge::Merged, Stop> {
    // Another machine does the work up to the merge (the fleet).
    if let Some(executor) = a.ctx.options.executor.clone() {
        return remote::run(a, &executor).await;
    }
    // The slot of the limit shared with other engines (mega runs) is held
    // through worktree, agent, verification, gates and review, and given
    // back before the merge queue.
    let slot = a.slot.take();
    let (worktree, commit) = checked_work(a, held).await?;
    drop(slot);
    merge::run(a, &worktree, &commit).await
}

/// The steps of an attempt up to the merge: what a fleet worker runs for a
/// job (see `Engine::run_job`). Returns the story branch's tip.
pub(crate) async fn job_sequence(
    a: &mut Attempt<'_>,
    held: &mut Option<PathBuf>,
) -> Result<String, Stop> {
    if let Some(conflict) = a.job.and_then(|j| j.resolve.as_ref()) {
        return resolution(a, held, conflict).await;
    }
    let (worktree, commit) = checked_work(a, held).await?;
    agent_head::unchanged_since_commit(a, &worktree).await?;
    Ok(commit.commit)
}

/// A fleet job that resolves the merge conflict of work done earlier: the
/// story branch back at that work, and the resolve step a local merge queue
/// runs (the target, here the job's base, merged into it; an agent resolves;
/// gated). Returns the resolution's commit.
async fn resolution(
    a: &mut Attempt<'_>,
    held: &mut Option<PathBuf>,
    conflict: &crate::executor::JobResolve,
) -> Result<String, Stop> {
    resolve_agent::record_attempt(a);
    let worktree = prepare_worktree::run_from(a, held, Some(&conflict.commit)).await?;
    let resolved = resolve_conflict::run(a, &worktree, &conflict.files).await?;
    Ok(resolved.commit)
}

/// The work of an attempt and its checks, up to the merge queue: agent,
/// worktree, then [`checked_commit`], with git's own files recorded before
/// and put back after (see `git_config`).
async fn checked_work(
    a: &mut Attempt<'_>,
    held: &mut Option<PathBuf>,
) -> Result<(prepare_worktree::Worktree, commit::Committed), Stop> {
    let agent = resolve_agent::run(a)?;
    let worktree = prepare_worktree::run(a, held).await?;
    let git_files = git_config::record(a, &worktree).await;
    let commit = checked_commit(a, &agent, &worktree, &git_files).await;
    let commit = git_config::settle(a, &worktree, &git_files, commit).await?;
    Ok((worktree, commit))
}

/// The agent's run (its `HEAD` and branches checked, git's files put
/// back), commit, verification, gates, proving the new tests, review.
async fn checked_commit(
    a: &mut Attempt<'_>,
    agent: &resolve_agent::Assigned,
    worktree: &prepare_worktree::Worktree,
    git_files: &git_config::Recorded,
) -> Result<commit::Committed, Stop> {
    let branches = agent_head::before(worktree).await;
    let ran = run_agent::run(a, agent, worktree).await;
    let ran = git_config::settle(a, worktree, git_files, ran).await;
    let output = agent_head::after(a, worktree, branches, ran).await?;
    let commit = commit::run(a, worktree, &output).await?;
    verify::run(a, worktree, &commit).await?;
    let gates = gates::run(a, worktree, &output).await?;
    census::run(a, worktree, &commit, &gates).await?;
    prove_tests::run(a, worktree, &commit).await?;
    review::run(a, worktree, &commit, &gates).await?;
    Ok(commit)
}
