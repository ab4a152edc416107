//! Step (with an executor, e.g. the fleet): the work of the attempt runs
//! on another machine. The target branch's tip is the job's base; the
//! executor publishes the job and returns the worker's report; a passed
//! job's commit (fetched onto the story branch and checked to descend from
//! the base by the executor) goes through the same serial merge queue as a
//! local attempt.
//!
//! A race's contestant (see `steps::race`) is a job of its own: its agent
//! and nothing else, its attempt number, its branch; the race step takes
//! the work ([`work`]) and sends only the winner's to the merge queue
//! ([`merge_work`]).
//!
//! A merge conflict goes to the same resolve step as a local one (unless
//! `--no-resolve`), run by a worker: a second job carries the conflict (the
//! story's commit, the files) with the target's tip now as its base; the
//! worker merges that base into the story's work, an agent resolves, the
//! gates judge it, and the resolution comes back through the merge queue.
//! Unlike a local resolution the queue is not held meanwhile (a job may wait
//! for a free worker; every other story's merge would wait with it), so the
//! resolution merges like any story: onto the tip of its turn.

use cascade_agents::Phase;

use super::commit::Committed;
use super::merge::{self, Conflict, Merged};
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::executor::{
    ExecContext, Executed, ExecutorHandle, Job, JobAgents, JobOutcome, JobReport, JobResolve,
};
use crate::retry::FailureKind;
use crate::state::Judged;

pub(super) async fn run(a: &mut Attempt<'_>, executor: &ExecutorHandle) -> Result<Merged, Stop> {
    // The shared limit (mega runs), as for a local attempt: held until the
    // merge queue.
    let slot = a.slot.take();
    let work = work(a, executor).await?;
    drop(slot);
    merge_work(a, executor, &work).await
}

/// What a worker made of an attempt: the commit on the attempt's branch
/// here, the base it was built on, and how the worker judged it.
pub(super) struct RemoteWork {
    pub base: String,
    pub committed: Committed,
    pub judged: Judged,
}

/// The attempt's work, done by a worker: published as a job from the
/// target's tip, its commit fetched onto the attempt's branch (a race's
/// contestant: its own branch).
pub(super) async fn work(
    a: &mut Attempt<'_>,
    executor: &ExecutorHandle,
) -> Result<RemoteWork, Stop> {
    let ctx = a.ctx;
    let base = super::target_tip(ctx)?;
    let job = build_job(a, &base);
    // The attempt is recorded under its first candidate until the worker
    // says which agent ran it.
    if let Some(first) = job.agents.candidates.first() {
        a.agent = first.clone();
    }
    super::resolve_agent::record_attempt(a);
    a.check_cancel()?;
    let (commit, judged) = execute(a, executor, job).await?;
    ctx.amend_story(a.id(), {
        let c = commit.clone();
        move |s| s.commit = Some(c)
    });
    ctx.emit(Event::StoryCommitted {
        story: a.id().to_string(),
        attempt: a.number,
        commit: commit.clone(),
    });
    Ok(RemoteWork {
        base,
        committed: Committed { commit },
        judged,
    })
}

/// A worker's work through the merge queue (a conflict resolved by a
/// worker, unless `--no-resolve`); then the executor may drop what it
/// keeps of the story elsewhere.
pub(super) async fn merge_work(
    a: &mut Attempt<'_>,
    executor: &ExecutorHandle,
    work: &RemoteWork,
) -> Result<Merged, Stop> {
    let ctx = a.ctx;
    let merged = match merge::queued(a, &work.committed, &work.base).await {
        Ok(done) => done?,
        Err(conflict) if !ctx.options.no_resolve => {
            resolve(a, executor, &work.committed, conflict).await?
        }
        Err(Conflict(_, failure)) => return Err(failure.into()),
    };
    // The target's tip now: the base of the stories this one unblocks.
    if let Ok(tip) = super::target_tip(ctx) {
        let key = crate::executor::story_key(ctx.feature.as_deref(), a.id());
        executor.0.merged(&key, &ctx.target_branch, &tip);
    }
    Ok(merged)
}

/// Has a worker resolve the conflict of `committed` with the target's tip,
/// then merges the resolution.
async fn resolve(
    a: &mut Attempt<'_>,
    executor: &ExecutorHandle,
    committed: &Committed,
    Conflict(files, conflict): Conflict,
) -> Result<Merged, Stop> {
    let ctx = a.ctx;
    let base = super::target_tip(ctx)?;
    let mut job = build_job(a, &base);
    job.phase = Phase::Merge.as_str().to_string();
    job.resolve = Some(JobResolve {
        commit: committed.commit.clone(),
        files: files.clone(),
        agent: a.agent.clone(),
    });
    ctx.emit(Event::MergeResolving {
        story: a.id().to_string(),
        agent: a.agent.clone(),
        files,
    });
    let commit = match execute(a, executor, job).await {
        Ok((commit, _)) => commit,
        Err(why) => return Err(merge::unresolved(conflict, why)),
    };
    ctx.amend_story(a.id(), {
        let c = commit.clone();
        move |s| s.commit = Some(c)
    });
    ctx.emit(Event::MergeResolved {
        story: a.id().to_string(),
        agent: a.agent.clone(),
        commit: commit.clone(),
    });
    merge::queued(a, &Committed { commit }, &base)
        .await
        .map_err(|Conflict(_, f)| Stop::Failed(f))?
}

/// Runs `job` with the executor; what the worker measured goes into the
/// attempt's record. Returns the passed job's commit (on the attempt's
/// branch) and how the worker judged it.
async fn execute(
    a: &mut Attempt<'_>,
    executor: &ExecutorHandle,
    job: Job,
) -> Result<(String, Judged), Stop> {
    let ctx = a.ctx;
    let resolving = job.resolve.is_some();
    let cx = ExecContext {
        repo: ctx.paths.workdir.clone(),
        story_branch: a.branch.to_string(),
        sink: ctx.state.sink(),
        cancel: ctx.cancel.clone(),
    };
    let (worker, report) = match executor.0.execute(job, cx).await {
        Executed::Interrupted => return Err(Stop::Interrupted),
        Executed::NotRun(f) if resolving => return Err(f.into()),
        Executed::NotRun(f) => {
            a.agent = f.agent.to_string();
            return Err(f.into());
        }
        Executed::Ran { worker, report } => (worker, report),
    };
    a.worker = Some(worker.clone());
    record(a, &report, resolving);
    crate::spend::recheck_run_budget(ctx);
    match report.outcome {
        JobOutcome::Passed { commit } => Ok((commit, report.judged.unwrap_or_default())),
        JobOutcome::Failed { failure } => Err(failure.into()),
        JobOutcome::Interrupted => Err(Failure::new(
            FailureKind::ProcessCrash,
            format!("worker '{worker}' stopped before the job finished"),
        )
        .into()),
    }
}

/// The worker's report in the attempt's record: the agent that ran it, the
/// gates, the usage. A resolution adds its usage to the attempt's (as a
/// local resolution does) and keeps the story's agent.
fn record(a: &mut Attempt<'_>, report: &JobReport, resolving: bool) {
    if !resolving {
        a.agent = report.agent.clone();
    }
    let agent = a.agent.clone();
    let gates = report.gates.clone();
    let (input, output, cost) = (report.input_tokens, report.output_tokens, report.cost_usd);
    // The attempt it ran: a race's contestants are out at once.
    let number = a.number;
    a.ctx.amend_story(a.id(), move |s| {
        s.agent = Some(agent.clone());
        if !gates.is_empty() {
            s.gates = gates;
        }
        if let Some(r) = s.attempt_mut(number) {
            r.agent = agent;
            r.input_tokens = usage(r.input_tokens, input, resolving);
            r.output_tokens = usage(r.output_tokens, output, resolving);
            r.cost_usd = usage(r.cost_usd, cost, resolving);
        }
    });
}

/// The record's figure after a report: the report's, or with `add` the sum.
fn usage<T: std::ops::Add<Output = T>>(was: Option<T>, now: Option<T>, add: bool) -> Option<T> {
    match (was, now) {
        (Some(w), Some(n)) if add => Some(w + n),
        (w, None) if add => w,
        (_, n) => n,
    }
}

/// The job of this attempt: everything a worker needs besides the code.
fn build_job(a: &Attempt<'_>, base: &str) -> Job {
    let ctx = a.ctx;
    let o = &ctx.options;
    let resolver = super::resolve_agent::resolver(ctx, None, a.contestant.as_deref());
    let mut candidates: Vec<String> = resolver
        .candidates(a.story, a.phase)
        .0
        .into_iter()
        .map(|c| c.agent)
        .collect();
    // `--no-fallback`: the first candidate or nothing (as the resolver
    // does); a race's contestant is its own agent or nothing (another agent
    // in its place would race against itself).
    if o.no_fallback || a.contestant.is_some() {
        candidates.truncate(1);
    }
    let labels = a
        .story
        .extra
        .get("labels")
        .and_then(|v| v.as_array())
        .map(|l| {
            l.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Job {
        feature: ctx.feature.clone(),
        run_id: ctx.run_id.clone(),
        story: a.id().to_string(),
        title: a.story.title.clone(),
        attempt: a.number,
        max_attempts: a.max,
        phase: a.phase.as_str().to_string(),
        base: base.to_string(),
        target_branch: ctx.target_branch.clone(),
        prd: one_story_prd(a),
        design_doc: design_doc(ctx),
        agents: JobAgents {
            agent: a.contestant.clone().or_else(|| o.agent.clone()),
            impl_agent: o.impl_agent.clone(),
            retry_agent: o.retry_agent.clone(),
            review_agent: o.review_agent.clone(),
            no_fallback: o.no_fallback || a.contestant.is_some(),
            candidates,
        },
        previous: a.previous.cloned(),
        agent_timeout_secs: o.agent_timeout.map(|d| d.as_secs().max(1)),
        use_gate_cache: o.use_gate_cache,
        review: o.review,
        prove_tests: o.prove_tests,
        base_failures: o.base_failures,
        judging: ctx.judging.untracked().clone(),
        excerpt_bytes: o.excerpt_bytes,
        labels,
        remote_cache_url: o.remote_cache.url.clone(),
        remote_cache_mode: o.remote_cache.mode,
        gate_jobs: o.gate_jobs,
        resolve: None,
        contestant: a.contestant.as_ref().map(|_| contestant_name(a)),
    }
}

/// A contestant's name: the last piece of its branch
/// (`<story branch>/race-<name>`), unique in its race.
fn contestant_name(a: &Attempt<'_>) -> String {
    a.branch
        .rsplit_once("/race-")
        .map_or(a.branch, |(_, name)| name)
        .to_string()
}

/// The plan (unknown fields kept) with only the attempt's story, its
/// dependencies dropped (they are in the base) and its status pending.
/// Built from the plan in memory, so a job costs the same whatever the
/// plan's size (reading prd.json per job made a fleet run quadratic). (The
/// coordinator's untracked `.cascade/gates.json` travels in the job's
/// `judging`.)
fn one_story_prd(a: &Attempt<'_>) -> serde_json::Value {
    let mut story = a.story.clone();
    story.dependencies.clear();
    story.set_status(cascade_plan::Status::Pending);
    let one = match a.ctx.prd.lock() {
        Ok(prd) => prd.with_stories(vec![story]),
        Err(_) => return serde_json::json!({}),
    };
    serde_json::to_value(&one).unwrap_or_else(|_| serde_json::json!({}))
}

/// The design document the coordinator's own prompts would use.
fn design_doc(ctx: &crate::ctx::Ctx) -> Option<serde_json::Value> {
    let dir = crate::ctx::design_dir(&ctx.prd_path, &ctx.project_root);
    let bytes = std::fs::read(dir.join("design_doc.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}
