//! Step (with an executor, e.g. the fleet): the work of the attempt runs
//! on another machine. The target branch's tip is the job's base; the
//! executor publishes the job and returns the worker's report; a passed
//! job's commit (fetched onto the story branch and checked to descend from
//! the base by the executor) goes through the same serial merge queue as a
//! local attempt, without conflict resolution (no local worktree: a conflict
//! fails the attempt and the retry starts from the new tip).

use cascade_agents::Resolver;

use super::commit::Committed;
use super::merge::{self, Merged};
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::executor::{ExecContext, Executed, ExecutorHandle, Job, JobAgents, JobOutcome};
use crate::retry::FailureKind;

pub(super) async fn run(a: &mut Attempt<'_>, executor: &ExecutorHandle) -> Result<Merged, Stop> {
    let ctx = a.ctx;
    // The shared limit (mega runs), as for a local attempt: held until the
    // merge queue.
    let slot = a.slot.take();
    let base = super::target_tip(ctx)?;
    let job = build_job(a, &base);
    // The attempt is recorded under its first candidate until the worker
    // says which agent ran it.
    if let Some(first) = job.agents.candidates.first() {
        a.agent = first.clone();
    }
    super::resolve_agent::record_attempt(a);
    a.check_cancel()?;
    let cx = ExecContext {
        repo: ctx.paths.workdir.clone(),
        story_branch: a.branch.to_string(),
        sink: std::sync::Arc::clone(&ctx.sink),
        cancel: ctx.cancel.clone(),
    };
    let executed = executor.0.execute(job, cx).await;
    let (worker, report) = match executed {
        Executed::Interrupted => return Err(Stop::Interrupted),
        Executed::NotRun(f) => {
            a.agent = f.agent.clone();
            return Err(Failure::from_job(&f).into());
        }
        Executed::Ran { worker, report } => (worker, report),
    };
    a.worker = Some(worker.clone());
    a.agent = report.agent.clone();
    // What the worker measured, in the attempt's record.
    let (agent, gates) = (report.agent.clone(), report.gates.clone());
    ctx.amend_story(a.id(), |s| {
        s.agent = Some(agent.clone());
        if !gates.is_empty() {
            s.gates = gates;
        }
        if let Some(r) = s.attempts.last_mut() {
            r.agent = agent;
            r.input_tokens = report.input_tokens;
            r.output_tokens = report.output_tokens;
            r.cost_usd = report.cost_usd;
        }
    });
    crate::control::check_run_budget(ctx);
    let commit = match report.outcome {
        JobOutcome::Passed { commit } => commit,
        JobOutcome::Failed { failure } => return Err(Failure::from_job(&failure).into()),
        JobOutcome::Interrupted => {
            return Err(Failure::new(
                FailureKind::ProcessCrash,
                format!("worker '{worker}' stopped before the job finished"),
            )
            .into())
        }
    };
    ctx.amend_story(a.id(), |s| s.commit = Some(commit.clone()));
    ctx.emit(Event::StoryCommitted {
        story: a.id().to_string(),
        attempt: a.number,
        commit: commit.clone(),
    });
    drop(slot);
    merge::run_unresolved(a, &Committed { commit }).await
}

/// The job of this attempt: everything a worker needs besides the code.
fn build_job(a: &Attempt<'_>, base: &str) -> Job {
    let ctx = a.ctx;
    let o = &ctx.options;
    let resolver = Resolver::new(&ctx.agents, &ctx.detector, ctx.overrides());
    let mut candidates: Vec<String> = resolver
        .candidates(a.story, a.phase)
        .0
        .into_iter()
        .map(|c| c.agent)
        .collect();
    // `--no-fallback`: the first candidate or nothing (as the resolver does).
    if o.no_fallback {
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
        run_id: ctx
            .state
            .lock()
            .map(|st| st.run_id.clone())
            .unwrap_or_default(),
        story: a.id().to_string(),
        title: a.story.title.clone(),
        attempt: a.number,
        max_attempts: a.max,
        phase: a.phase.as_str().to_string(),
        base: base.to_string(),
        target_branch: ctx.target_branch.clone(),
        prd: one_story_prd(ctx, a.id()),
        design_doc: design_doc(ctx),
        agents: JobAgents {
            agent: o.agent.clone(),
            impl_agent: o.impl_agent.clone(),
            retry_agent: o.retry_agent.clone(),
            review_agent: o.review_agent.clone(),
            no_fallback: o.no_fallback,
            candidates,
        },
        previous: a.previous.map(|(agent, f)| f.to_job(agent)),
        agent_timeout_secs: o.agent_timeout.map(|d| d.as_secs().max(1)),
        use_gate_cache: o.use_gate_cache,
        review: o.review,
        prove_tests: o.prove_tests,
        judging: ctx.judging.untracked().clone(),
        excerpt_bytes: o.excerpt_bytes,
        labels,
        remote_cache_url: o.remote_cache.url.clone(),
        remote_cache_mode: o.remote_cache.mode,
    }
}

/// prd.json as on disk (unknown fields kept) with only story `id`, its
/// dependencies dropped (they are in the base). (The coordinator's
/// untracked `.cascade/gates.json` travels in the job's `judging`.)
fn one_story_prd(ctx: &crate::engine::Ctx, id: &str) -> serde_json::Value {
    let mut prd: serde_json::Value = std::fs::read(&ctx.prd_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    if let Some(stories) = prd.get_mut("stories").and_then(|s| s.as_array_mut()) {
        stories.retain(|s| s.get("id").and_then(|v| v.as_str()) == Some(id));
        for s in stories.iter_mut() {
            s["dependencies"] = serde_json::json!([]);
            s["status"] = serde_json::json!("pending");
        }
    }
    prd
}

/// The design document the coordinator's own prompts would use.
fn design_doc(ctx: &crate::engine::Ctx) -> Option<serde_json::Value> {
    let dir = crate::engine::design_dir(&ctx.prd_path, &ctx.project_root);
    let bytes = std::fs::read(dir.join("design_doc.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}
