//! Step: build the prompt (with the previous failure on a retry), run the
//! agent in the worktree, collect the findings it appended, record its usage
//! and classify how it ended ([`classify`]).

use std::sync::Arc;

use cascade_agents::exec::{execute, ExecError};
use cascade_agents::prompt::{build_prompt, PromptContext, RetryContext};
use cascade_agents::AgentRun;

use super::prepare_worktree::Worktree;
use super::resolve_agent::Assigned;
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::retry::{classify_agent_run, FailureKind};

/// What the agent left for the later steps.
pub(super) struct AgentOutput {
    /// The tail of its output, for a later step's failure.
    pub excerpt: String,
}

pub(super) async fn run(
    a: &Attempt<'_>,
    assigned: &Assigned,
    wt: &Worktree,
) -> Result<AgentOutput, Stop> {
    let ctx = a.ctx;
    let id = a.id();
    let mut req = a.agent_request(a.phase, prompt(a, wt), wt);
    req.extra_env.extend(wt.findings.env());
    req.extra_env.extend(a.env.iter().cloned());
    // An api agent gets RunGates, and a retry continues its conversation.
    if assigned.def.api.is_some() {
        req.tools.run_gates = Some(super::gates::hook(a, wt));
        req.resume = earlier_session(a).await;
    }
    let on_spawn = on_spawn(a, assigned, wt);
    // Held while the agent runs: its share of the agent's concurrency (after
    // any cooldown) and its place under the memory guard.
    let _permit = admit(a).await?;
    // Steered runs: a cancel request for this story stops its agent too,
    // and whoever watches gets the agent's lines.
    let steering = ctx.options.steering.as_ref();
    let (cancel, _link) =
        crate::control::steer::agent_cancel(steering, &ctx.control.agents_cancel, id);
    req.on_output = crate::control::steer::output_lines(steering, id, a.number);
    let run = execute(&assigned.def, req, on_spawn, &cancel)
        .await
        .map_err(|e| {
            ctx.write_failed(&ctx.artifacts_dir, exec_error_kind(&e), e.to_string(), &e)
        })?;
    // What the agent appended to findings.md outlives its worktree.
    let heading = format!(
        "{id}: {}",
        a.story
            .title
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    );
    if let Err(e) = wt.findings.collect(&heading) {
        ctx.emit(Event::Notice {
            message: format!("{id}: could not collect findings.md: {e}"),
        });
    }
    record_run(a, &assigned.def, &run);
    // What it spent may exhaust the run's budget (with --hard-budget this
    // stops the running work, this agent's gates included).
    crate::spend::recheck_run_budget(ctx);
    if run.outcome.cancelled || ctx.cancel.is_cancelled() {
        return Err(Stop::Interrupted);
    }
    let excerpt = run.outcome.output_excerpt(ctx.options.excerpt_bytes);
    if let Some(f) = rate_limited(a, &run) {
        return Err(f.with_excerpt(excerpt).into());
    }
    if let Some(f) = classify(&a.agent, &run) {
        return Err(f.with_excerpt(excerpt).into());
    }
    ctx.control.limits.succeeded(&a.agent);
    Ok(AgentOutput { excerpt })
}

/// Waits for the agent's cooldown and concurrency (see
/// `control::ratelimit`), then for memory; the permits are held while the
/// agent runs.
async fn admit(
    a: &Attempt<'_>,
) -> Result<
    (
        crate::control::ratelimit::AgentPermit,
        Option<cascade_process::resources::Running>,
    ),
    Stop,
> {
    let ctx = a.ctx;
    let id = a.id().to_string();
    let agent = a.agent.clone();
    let permit = ctx
        .control
        .limits
        .acquire(&a.agent, &ctx.cancel, |left| {
            ctx.emit(Event::Notice {
                message: format!(
                    "{id}: waiting {}s for agent '{agent}' to cool down (rate limited)",
                    left.as_secs_f64().ceil() as u64
                ),
            })
        })
        .await
        .map_err(|()| Stop::Interrupted)?;
    let running = match &ctx.control.memory {
        Some(guard) => {
            let notice: cascade_process::resources::WaitNotice = {
                let (c, id) = (Arc::clone(ctx), id.clone());
                Arc::new(move |available: u64, threshold: u64| {
                    c.emit(Event::WaitingForMemory {
                        what: "agent".into(),
                        story: id.clone(),
                        available_mb: available / (1024 * 1024),
                        threshold_mb: threshold / (1024 * 1024),
                    })
                })
            };
            Some(
                guard
                    .admit_with(None, &ctx.cancel, Some(&notice))
                    .await
                    .map_err(|()| Stop::Interrupted)?,
            )
        }
        None => None,
    };
    Ok((permit, running))
}

/// A run that failed on its provider's rate limit: the live watcher's
/// signal, else the agent's words on stderr (`classify_text`; stdout is
/// the agent's work, which may well talk about rate limits). The whole of
/// stderr also supplies a Retry-After the watcher, reading line by line,
/// did not see next to the status. Starts the agent's shared cooldown and
/// says so.
fn rate_limited(a: &Attempt<'_>, run: &AgentRun) -> Option<Failure> {
    if run.success() || run.outcome.timed_out {
        return None;
    }
    let from_text = cascade_agents::classify_text(&run.outcome.stderr.text_lossy());
    let signal = match run.signal.clone() {
        Some(mut live) if live.kind == cascade_agents::SignalKind::RateLimited => {
            if live.retry_after.is_none() {
                live.retry_after = from_text.and_then(|t| t.retry_after);
            }
            live
        }
        // A signal of another kind was classified from the agent's own
        // report (an api agent's HTTP status): its words do not make it a
        // rate limit ("overloaded" is a provider error there).
        Some(_) => return None,
        None => from_text?,
    };
    let ctx = a.ctx;
    let cooldown = ctx
        .control
        .limits
        .rate_limited(&a.agent, signal.retry_after);
    let until = chrono::DateTime::<chrono::Utc>::from(cooldown.until)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    // For `cascade status` (written with the attempt's failure).
    let record = crate::state::CooldownRecord {
        agent: a.agent.clone(),
        until: until.clone(),
        concurrency: cooldown.concurrency,
        message: signal.message.clone(),
    };
    ctx.amend_state(move |st| {
        st.cooldowns.retain(|c| c.agent != record.agent);
        st.cooldowns.push(record);
    });
    ctx.emit(Event::AgentCooldown {
        agent: a.agent.clone(),
        story: a.id().to_string(),
        cooldown_ms: cooldown.duration.as_millis() as u64,
        until,
        retry_after: cooldown.retry_after,
        concurrency: cooldown.concurrency,
        message: signal.message.clone(),
    });
    Some(Failure::new(
        FailureKind::RateLimited,
        format!(
            "agent '{}' was rate limited by its provider: {}",
            a.agent, signal.message
        ),
    ))
}

/// How an agent run that did not succeed failed, or `None` when it
/// succeeded. The one place that reads an agent's result as a failure
/// (the classification itself is `retry::classify_agent_run`).
fn classify(agent: &str, run: &AgentRun) -> Option<Failure> {
    if run.success() {
        return None;
    }
    let (kind, error) = classify_agent_run(agent, run);
    Some(Failure::new(kind, error))
}

/// The session the story's previous attempt left, when the same agent ran
/// it: a retry continues that conversation instead of starting over.
async fn earlier_session(a: &Attempt<'_>) -> Option<cascade_agents::ResumeSession> {
    let (id, number, agent) = (a.id().to_string(), a.number, a.agent.clone());
    let session = a.ctx.state.read(move |st| {
        // The last record is this attempt's own.
        st.story(&id)?
            .attempts
            .iter()
            .rev()
            .skip(1)
            .find(|r| r.attempt < number)
            .filter(|r| r.agent == agent)
            .and_then(|r| r.session_id.clone())
    });
    session
        .await
        .flatten()
        .map(|session_id| cascade_agents::ResumeSession {
            session_id,
            session_index: None,
        })
}

/// The failure kind of an agent that could not be run at all.
fn exec_error_kind(e: &ExecError) -> FailureKind {
    match e {
        ExecError::Unavailable { .. }
        | ExecError::NotExecutable { .. }
        | ExecError::MissingKey { .. } => FailureKind::AgentUnavailable,
        ExecError::Spawn { .. } => FailureKind::ProcessCrash,
        _ => FailureKind::Setup,
    }
}

/// The prompt: the story, skills and design context, the retry context on a
/// retry, and the findings section.
fn prompt(a: &Attempt<'_>, wt: &Worktree) -> String {
    let ctx = a.ctx;
    let retry = a.previous.map(|f| RetryContext {
        attempt: a.number,
        max_attempts: a.max,
        previous_agent: f.agent.to_string(),
        error: f.error.clone(),
        gate_summary: f.gate_summary.clone(),
        output_excerpt: f.output_excerpt.clone(),
        findings: f.findings.clone(),
    });
    let pctx = PromptContext {
        project_root: wt.path.clone(),
        phase: Some(a.phase),
        retry,
        ..ctx.prompt.clone()
    };
    match ctx.prd.lock() {
        Ok(prd) => build_prompt(&prd, a.story, &pctx) + &wt.findings.prompt_section(),
        Err(_) => String::new(),
    }
}

/// Records the agent's pid and announces the start once it is running.
fn on_spawn(a: &Attempt<'_>, assigned: &Assigned, wt: &Worktree) -> impl FnOnce(u32) + Send {
    let ctx = Arc::clone(a.ctx);
    let (agent, id) = (a.agent.clone(), a.id().to_string());
    let (title, branch, worktree, confinement) = (
        a.story.title.clone(),
        a.branch.to_string(),
        wt.path.display().to_string(),
        wt.sandbox.confinement.clone(),
    );
    let fallbacks = assigned.fallbacks.clone();
    let (attempt, max_attempts, phase) = (a.number, a.max, a.phase);
    move |pid: u32| {
        ctx.update_story(&id, move |s| {
            if let Some(r) = s.attempt_mut(attempt) {
                r.pid = Some(pid);
            }
        });
        ctx.emit(Event::StoryStarted {
            story: id.clone(),
            title,
            agent,
            attempt,
            max_attempts,
            phase: phase.as_str().to_string(),
            fallbacks,
            pid,
            branch,
            worktree,
            confinement,
        });
    }
}

/// How the agent's run ended, in words: an api agent has no process, so a
/// finished one says which model answered instead of "exit code 0".
fn outcome_of(def: &cascade_agents::AgentDef, run: &AgentRun) -> String {
    match (&def.api, run.outcome.exit_code) {
        (Some(api), Some(0)) => {
            let model = run.model.as_deref().unwrap_or(&api.model);
            format!("answered by {} model {model}", api.provider.as_str())
        }
        (Some(_), Some(_)) => "the model API call failed".to_string(),
        _ => run.outcome.describe(),
    }
}

/// Keeps the agent's log and usage in the attempt's record and announces
/// that it finished.
fn record_run(a: &Attempt<'_>, def: &cascade_agents::AgentDef, run: &AgentRun) {
    let usage = run.usage.clone();
    // The agent's reported cost, else its tokens at the model's price.
    let cost = usage
        .as_ref()
        .and_then(|u| a.ctx.agents.prices.cost(def, u));
    let number = a.number;
    let (log, session) = (run.log_path.display().to_string(), run.session_id.clone());
    let used = usage.clone();
    a.ctx.amend_story(a.id(), move |s| {
        if let Some(r) = s.attempt_mut(number) {
            r.log = Some(log);
            if let Some(u) = &used {
                r.input_tokens = Some(u.input_tokens);
                r.output_tokens = Some(u.output_tokens);
            }
            r.cost_usd = cost.map(|(usd, _)| usd);
            r.cost_estimated = cost.map(|(_, estimated)| estimated);
            r.session_id = session;
        }
    });
    a.ctx.emit(Event::AgentFinished {
        story: a.id().to_string(),
        agent: a.agent.clone(),
        attempt: a.number,
        success: run.success(),
        outcome: outcome_of(def, run),
        exit_code: run.outcome.exit_code,
        timed_out: run.outcome.timed_out,
        duration_ms: run.outcome.duration.as_millis() as u64,
        input_tokens: usage.as_ref().map(|u| u.input_tokens),
        output_tokens: usage.as_ref().map(|u| u.output_tokens),
        cost_usd: cost.map(|(usd, _)| usd),
        log: run.log_path.display().to_string(),
    });
}
