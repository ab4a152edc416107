//! Step: resolve the agent for this attempt's phase (implementation first,
//! retry afterwards), announce the fallbacks taken, and record the attempt.

use cascade_agents::{AgentDef, Resolver};

use super::{Attempt, Failure, Stop};
use crate::ctx::Ctx;
use crate::events::{Event, FallbackNote};
use crate::retry::FailureKind;
use crate::state::{now_rfc3339, AttemptRecord};

/// The agent chosen for the attempt.
pub(super) struct Assigned {
    pub def: AgentDef,
    pub fallbacks: Vec<FallbackNote>,
}

pub(super) fn run(a: &mut Attempt<'_>) -> Result<Assigned, Stop> {
    let ctx = a.ctx;
    let resolver = resolver(ctx, a.job, a.contestant.as_deref());
    let assignment = match resolver.resolve(a.story, a.phase) {
        Ok(found) => found,
        Err(e) => {
            record_attempt(a);
            return Err(Failure::new(FailureKind::AgentUnavailable, e.to_string()).into());
        }
    };
    a.agent = assignment.agent.clone();
    let mut fallbacks: Vec<FallbackNote> = assignment
        .fallbacks
        .iter()
        .map(|f| FallbackNote {
            from: f.from.clone(),
            to: f.to.clone(),
            why: f.why.clone(),
        })
        .collect();
    if let Some(note) = away_from_cooldown(a, &resolver) {
        a.agent = note.to.clone();
        fallbacks.push(note);
    }
    for f in &fallbacks {
        ctx.emit(Event::AgentFallback {
            story: a.id().to_string(),
            from: f.from.clone(),
            to: f.to.clone(),
            why: f.why.clone(),
        });
    }
    record_attempt(a);
    let Some(def) = ctx.agents.agent(&a.agent).cloned() else {
        return Err(Failure::new(
            FailureKind::AgentUnavailable,
            format!("agent '{}' is not configured", a.agent),
        )
        .into());
    };
    a.check_cancel()?;
    Ok(Assigned { def, fallbacks })
}

/// The attempt's resolver: on a fleet worker the job's candidates (the
/// coordinator's chain for the story) take the place of this machine's own
/// chain; its agents.json and PATH decide which of them it has.
pub(super) fn resolver<'c>(
    ctx: &'c Ctx,
    job: Option<&crate::executor::Job>,
    contestant: Option<&str>,
) -> Resolver<'c> {
    let mut overrides = ctx.overrides();
    // A race's contestant runs its own agent, whatever `--agent` says.
    if let Some(agent) = contestant {
        overrides.agent = Some(agent.to_string());
    }
    let resolver = Resolver::new(&ctx.agents, &ctx.detector, overrides);
    match job.map(|j| &j.agents.candidates) {
        Some(chain) if !chain.is_empty() => resolver.with_chain(chain.clone()),
        _ => resolver,
    }
}

/// Adds the attempt's record (running) to the state; it is written with the
/// agent's pid once the agent started (or with the attempt's failure).
pub(super) fn record_attempt(a: &Attempt<'_>) {
    let (agent, number, phase) = (a.agent.clone(), a.number, a.phase.as_str().to_string());
    a.ctx.amend_story(a.id(), move |s| {
        s.agent = Some(agent.clone());
        s.attempts
            .push(AttemptRecord::started(number, agent, phase, now_rfc3339()));
    });
}

/// When the chosen agent is in a long rate-limit cooldown (longer than
/// `control::ratelimit::LONG_COOLDOWN`), the next candidate of its chain
/// that is installed and not cooling down itself, unless `--no-fallback`.
fn away_from_cooldown(a: &Attempt<'_>, resolver: &Resolver<'_>) -> Option<FallbackNote> {
    use crate::control::ratelimit::LONG_COOLDOWN;
    let ctx = a.ctx;
    if ctx.options.no_fallback {
        return None;
    }
    let limits = &ctx.control.limits;
    let left = limits
        .cooldown_left(&a.agent)
        .filter(|d| *d > LONG_COOLDOWN)?;
    let (candidates, _) = resolver.candidates(a.story, a.phase);
    let to = candidates.into_iter().find(|c| {
        c.agent != a.agent
            && ctx
                .agents
                .agent(&c.agent)
                .is_some_and(|d| ctx.detector.is_available(d))
            && limits
                .cooldown_left(&c.agent)
                .map_or(true, |d| d <= LONG_COOLDOWN)
    })?;
    Some(FallbackNote {
        from: a.agent.clone(),
        to: to.agent,
        why: format!(
            "'{}' is rate limited (cooling down for {}s)",
            a.agent,
            left.as_secs()
        ),
    })
}
