//! The worker side of an executor: [`Engine::run_job`] runs one [`Job`]
//! with the same steps a local attempt runs (resolve the agent against this
//! machine's PATH, prepare a worktree from the job's base, run the agent,
//! commit, verify, gates, review), without the merge: the story branch's
//! tip is the result, for the caller to push.
//!
//! The engine is configured for the job by the caller: `project_root` a
//! clone holding the base commit, `prd_path` the job's one-story PRD,
//! `target_branch` a branch at the job's base, `feature` the worker slot's
//! namespace (its worktrees and branches, reused from job to job), own
//! state/progress/artifacts paths, `take_lock: false`.

use std::sync::Arc;
use std::time::Instant;

use cascade_agents::Phase;
use cascade_plan::Story;
use cascade_process::CancelToken;

use crate::config::RunOptions;
use crate::control::RunPools;
use crate::ctx::Ctx;
use crate::engine::{Engine, RunParts};
use crate::error::EngineError;
use crate::events::EventSink;
use crate::executor::{Job, JobOutcome, JobReport};
use crate::owner::Owner;

use crate::retry::RetryPolicy;
use crate::state::RunState;
use crate::steps::{job_sequence, Attempt, Stop};

impl Engine {
    /// Runs `job` here and reports how it ended. `pools`: the gate slots,
    /// cooldowns and budget it shares with the caller's other jobs (a worker
    /// shares them across its slots; see [`Job::pools`]). `Err` only when the
    /// job could not be set up (a PRD or gate configuration this machine
    /// cannot use): the caller reports that as the job's failure.
    pub async fn run_job(
        &self,
        job: &Job,
        pools: Option<RunPools>,
        sink: EventSink,
        cancel: &CancelToken,
    ) -> Result<JobReport, EngineError> {
        let started = Instant::now();
        let (ctx, story, mut owner) = self.job_ctx(job, pools, sink, cancel)?;
        owner.serve_while(&ctx, clear_slot(&ctx)).await;
        let branch = crate::ctx::story_branch(self.config(), &job.story);
        let ran = attempt(&ctx, job, &story, &branch);
        let (agent, outcome) = owner.serve_while(&ctx, ran).await;
        Ok(report(&owner.store, job, agent, outcome, started))
    }

    /// The context of a job's attempt: the job's one-story PRD prepared
    /// and checked, cascade's files kept out of git, the caches writable,
    /// a state of its own (held by the returned owner, which `run_job`
    /// serves while the attempt runs).
    fn job_ctx(
        &self,
        job: &Job,
        pools: Option<RunPools>,
        sink: EventSink,
        cancel: &CancelToken,
    ) -> Result<(Arc<Ctx>, Story, Owner), EngineError> {
        let p = self.prepare()?;
        // A job is a run that has started (the worker took it): cascade's
        // own files are kept out of git, and the caches written.
        let excluded = self.excluded_patterns();
        let excluded: Vec<&str> = excluded.iter().map(String::as_str).collect();
        p.paths.ensure_excluded(&excluded)?;
        p.detector.allow_writes();
        let mut options = job_options(job);
        options.pools = pools;
        let mut inputs = self.inputs(&p, &options)?;
        inputs.judging = inputs.judging.with_untracked(job.judging.clone());
        let Some(story) = p.prd.story(&job.story).cloned() else {
            return Err(EngineError::Internal(format!(
                "the job's PRD has no story '{}'",
                job.story
            )));
        };
        let state_path = self
            .config()
            .state_path
            .clone()
            .unwrap_or_else(|| p.cascade_dir.join("job.db"));
        let state = RunState::new(
            job.run_id.clone(),
            p.prd_path.display().to_string(),
            p.target_branch.clone(),
            self.config().project_root.display().to_string(),
            [job.story.clone()],
        );
        let store = crate::store::Store::open(state, &state_path)?;
        let parts = RunParts {
            options,
            store,
            state_path,
            sink,
            cancel: cancel.clone(),
            run_id: job.run_id.clone(),
        };
        let (ctx, owner) = self.context(p, inputs, parts)?;
        let ctx = Arc::new(ctx);
        Ok((ctx, story, owner))
    }
}

/// The slot's worktrees of earlier jobs are reused: first stopped is any
/// agent a killed worker left writing into them (the slot runs one job at
/// a time, so none is this worker's).
async fn clear_slot(ctx: &Arc<Ctx>) {
    let c = Arc::clone(ctx);
    let dir = ctx.paths.cascade_dir();
    let stopped = tokio::task::spawn_blocking(move || {
        let stopped = crate::leftover::stop_agents_under(&dir, std::time::Duration::from_secs(2));
        c.pool.adopt_leftovers();
        stopped
    })
    .await
    .unwrap_or_default();
    for message in stopped {
        ctx.emit(crate::events::Event::Notice { message });
    }
}

/// The job's attempt: the steps up to the merge (see `steps::job_sequence`).
/// Returns the agent that ran it (or was meant to) and how it ended; the
/// worktree goes back to the slot's pool (the branch keeps the work until
/// the caller pushed it).
async fn attempt(ctx: &Arc<Ctx>, job: &Job, story: &Story, branch: &str) -> (String, JobOutcome) {
    let phase: Phase = job.phase.parse().unwrap_or(Phase::Implementation);
    let previous = job.previous.clone();
    // A resolution is charged to the agent that did the story.
    let agent = match (&job.resolve, &previous) {
        (Some(r), _) => r.agent.clone(),
        (None, Some(p)) => p.agent.to_string(),
        (None, None) => "none".to_string(),
    };
    let ports = crate::control::resources::PortLease::take();
    let env = ports.env();
    let mut held = None;
    let mut attempt = Attempt {
        ctx,
        story,
        branch,
        number: job.attempt,
        max: job.max_attempts,
        phase,
        previous: previous.as_ref(),
        agent,
        env: &env,
        worker: None,
        job: Some(job),
        slot: None,
        contestant: None,
    };
    let ended = job_sequence(&mut attempt, &mut held).await;
    let agent = attempt.agent.clone();
    let outcome = match ended {
        Ok(commit) => JobOutcome::Passed { commit },
        Err(Stop::Interrupted) => JobOutcome::Interrupted,
        Err(Stop::Failed(f)) => JobOutcome::Failed {
            failure: f.charged_to(&agent),
        },
    };
    if let Some(path) = held.take() {
        let c = Arc::clone(ctx);
        let _ = tokio::task::spawn_blocking(move || c.pool.give_back(&path)).await;
    }
    (agent, outcome)
}

/// What the worker reports: the outcome with the story's gate results, the
/// last attempt's spend and, for work that passed, how it was judged, from
/// the job's state.
fn report(
    st: &RunState,
    job: &Job,
    agent: String,
    outcome: JobOutcome,
    started: Instant,
) -> JobReport {
    let s = st.story(&job.story);
    let gates = s.map(|s| s.gates.clone()).unwrap_or_default();
    let last = s.and_then(|s| s.attempts.last().cloned());
    let judged = s
        .filter(|_| matches!(outcome, JobOutcome::Passed { .. }))
        .map(|s| s.judged());
    JobReport {
        agent,
        outcome,
        gates,
        input_tokens: last.as_ref().and_then(|a| a.input_tokens),
        output_tokens: last.as_ref().and_then(|a| a.output_tokens),
        cost_usd: last.as_ref().and_then(|a| a.cost_usd),
        duration_ms: started.elapsed().as_millis() as u64,
        judged,
    }
}

/// The run options of one job: the coordinator's agent choices and checks,
/// one attempt (the coordinator's retry manager decides about the next).
fn job_options(job: &Job) -> RunOptions {
    RunOptions {
        agent: job.agents.agent.clone(),
        impl_agent: job.agents.impl_agent.clone(),
        retry_agent: job.agents.retry_agent.clone(),
        review_agent: job.agents.review_agent.clone(),
        no_fallback: job.agents.no_fallback,
        review: job.review,
        prove_tests: job.prove_tests,
        base_failures: job.base_failures,
        retry: RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        },
        parallel: 1,
        use_gate_cache: job.use_gate_cache,
        agent_timeout: job.agent_timeout_secs.map(std::time::Duration::from_secs),
        excerpt_bytes: job.excerpt_bytes,
        remote_cache: job_remote_cache(job),
        gate_jobs: job.gate_jobs,
        ..RunOptions::default()
    }
}

impl Job {
    /// The pools jobs like this one share on a machine running `slots` of
    /// them at once: its `--gate-jobs` slots (the machine's default when it
    /// names none), cooldowns, no budget of their own (the coordinator
    /// keeps that).
    pub fn pools(&self, slots: usize) -> RunPools {
        let options = RunOptions {
            parallel: slots.max(1),
            ..job_options(self)
        };
        RunPools::new(&options, &crate::config::ProjectConfig::default())
    }
}

/// The remote gate cache a job's gates use: the coordinator's
/// `--remote-cache`, unless this machine names its own store in
/// `CASCADE_REMOTE_CACHE` (the same bucket can have another address here, a
/// `file://` mount another path), which then decides with the gate config.
fn job_remote_cache(job: &Job) -> cascade_gates::RemoteRequest {
    if std::env::var_os("CASCADE_REMOTE_CACHE").is_some() {
        return cascade_gates::RemoteRequest::default();
    }
    cascade_gates::RemoteRequest {
        url: job.remote_cache_url.clone(),
        mode: job.remote_cache_mode,
    }
}
