//! One story, from a fresh worktree to a merge: the attempt loop.
//!
//! Each attempt is a sequence of named steps (the `steps` module: resolve
//! the agent, prepare the worktree, run the agent, commit, gates, queue for
//! merge). A failure at any step is classified; the retry manager decides
//! whether and when the next attempt runs. Every
//! transition is recorded in the state first (on disk at once: for a large
//! plan, one transaction of the run database), then announced as an
//! event.
//!
//! Attempt numbers count the story's whole history: a resumed story goes on
//! after the attempts recorded by earlier runs (so the logs and prompts of
//! every attempt are kept), while the retry budget (`--max-retries`) is per
//! run: an attempt interrupted by a kill or Ctrl-C costs no retry. An agent
//! that committed its work itself is fine: its commits on the story branch
//! beyond the base are the work. A merge refused because the user's
//! uncommitted changes (`--allow-dirty`) would be overwritten fails the story
//! once (`target_dirty`), without re-running the agent.
//!
//! Run controls (the `control` module): before each attempt the budgets are
//! checked (the run's exhausted: the story goes back to pending; its own:
//! it fails as `budget`), a rate-limited attempt is recorded but costs no
//! retry, and the story holds its own port range while it runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use cascade_agents::{Phase, Resolver};
use cascade_git::worktree;
use cascade_plan::{Status, Story};

use crate::engine::Ctx;
use crate::events::Event;
use crate::retry::FailureKind;
use crate::state::{now_rfc3339, StoryStatus};
use crate::steps::{run_attempt, Attempt, AttemptEnd, Failure};

/// How a story's task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoryEnd {
    Merged,
    Failed,
    Interrupted,
}

/// Runs `story` until it is merged, fails for good, or the run is cancelled.
pub(crate) async fn run_story(ctx: Arc<Ctx>, story: Story) -> StoryEnd {
    let id = story.id.clone();
    // Its own cancel token, for a cancel request from outside (control::steer).
    let steered = crate::control::steer::Running::new(&ctx, &id);
    let branch = worktree::branch_name(ctx.feature.as_deref(), &id);
    // The worktree this story holds (leased from the pool by its first attempt).
    let mut held: Option<PathBuf> = None;
    // Attempts of earlier (interrupted or failed) runs stay in the history
    // and numbering goes on after them (logs are never overwritten), but
    // they do not use up this run's budget: a resumed story gets the full
    // `--max-retries` again, so an interrupted attempt costs no retry.
    let earlier = ctx
        .state
        .lock()
        .map(|st| st.story(&id).map_or(0, |s| s.attempts.len() as u32))
        .unwrap_or(0);
    let max = earlier.saturating_add(ctx.options.retry.max_attempts());
    let story_started = Instant::now();
    ctx.set_prd_status(&id, Status::InProgress);
    // Written with the agent's pid (or the attempt's failure): one state
    // write per story start instead of two.
    ctx.amend_story(&id, |s| {
        s.status = StoryStatus::Running;
        s.branch = Some(branch.clone());
        s.worktree = None;
        s.error = None;
        s.error_type = None;
        s.blocked_by.clear();
    });

    // The story's port range, for its agent and gates, while it runs.
    let ports = crate::control::resources::PortLease::take();
    let env = ports.env();
    let mut previous: Option<(String, Failure)> = None;
    let mut attempt = earlier + 1;
    // Rate-limited attempts of this run: recorded, but never charged to
    // the retry budget (bounded by MAX_RATE_LIMITED).
    let mut rate_limited = 0u32;
    // A racing story: each round runs all its contestants (one attempt
    // number each) and counts as one attempt of the retry budget.
    let mut race = crate::steps::race::Race::for_story(&ctx, &story);
    let mut raced = 0u32;
    loop {
        if steered.cancelled() {
            let agent = previous
                .as_ref()
                .map_or_else(|| "none".to_string(), |p| p.0.clone());
            let failure = steered.failure();
            return fail_for_good(&ctx, &id, &branch, &mut held, agent, failure, None).await;
        }
        // A slot of the limit shared with other engines (a mega run's),
        // taken before the budget check: a story that waited for one sees
        // what the others spent meanwhile. Held until the merge queue.
        let slot = match ctx.options.acquire_slot(&ctx.cancel).await {
            Ok(slot) => slot,
            Err(()) => {
                ctx.update_story(&id, |s| s.status = StoryStatus::Pending);
                ctx.set_prd_status(&id, Status::Pending);
                return StoryEnd::Interrupted;
            }
        };
        // Before each attempt: the run's budget (exhausted: the story waits
        // for a resume with a higher one) and the story's own.
        match crate::control::before_attempt(&ctx, &id) {
            crate::control::Go::Ahead => {}
            crate::control::Go::RunExhausted => {
                ctx.update_story(&id, |s| s.status = StoryStatus::Pending);
                ctx.set_prd_status(&id, Status::Pending);
                return StoryEnd::Interrupted;
            }
            crate::control::Go::StoryExhausted(failure) => {
                let agent = previous
                    .as_ref()
                    .map_or_else(|| "none".to_string(), |p| p.0.clone());
                ctx.update_story(&id, |s| {
                    s.error = Some(failure.error.clone());
                    s.error_type = Some(failure.kind);
                });
                return fail_for_good(&ctx, &id, &branch, &mut held, agent, failure, None).await;
            }
        }
        // The first attempt of this run implements; later ones retry with
        // the previous failure in their prompt.
        let phase = if previous.is_none() {
            Phase::Implementation
        } else {
            Phase::Retry
        };
        let attempt_started = Instant::now();
        let this = Attempt {
            ctx: &ctx,
            story: &story,
            branch: &branch,
            number: attempt,
            max: max + rate_limited + raced,
            phase,
            previous: previous.as_ref(),
            agent: previous
                .as_ref()
                .map_or_else(|| "none".to_string(), |p| p.0.clone()),
            env: &env,
            worker: None,
            job: None,
            slot,
            contestant: None,
        };
        let (agent, worker, outcome, number) = match race.as_mut() {
            Some(race) => {
                let round = race.round(this, &mut held).await;
                raced += round.used.saturating_sub(1);
                let number = round.number;
                attempt += round.used.saturating_sub(1);
                (round.agent, None, round.end, number)
            }
            None => {
                let (agent, worker, outcome) = run_attempt(this, &mut held).await;
                (agent, worker, outcome, attempt)
            }
        };
        let duration_ms = attempt_started.elapsed().as_millis() as u64;
        // Cancelled from outside: whatever the attempt came to short of a
        // merge, the story fails as cancelled (no retry).
        let outcome = match outcome {
            AttemptEnd::Merged { .. } => outcome,
            _ if steered.cancelled() => AttemptEnd::Failed(steered.failure()),
            // A full disk is nobody's fault in the story: the run stops and
            // the story goes back to pending (no attempt charged).
            AttemptEnd::Failed(f) if ctx.halt_if_disk_full(&ctx.project_root, &f.error) => {
                AttemptEnd::Interrupted
            }
            other => other,
        };
        match outcome {
            AttemptEnd::Merged {
                commit,
                fast_forward,
            } => {
                ctx.update_story(&id, |s| {
                    s.status = StoryStatus::Complete;
                    s.merge_commit = Some(commit.clone());
                    s.agent = Some(agent.clone());
                    if let Some(a) = s.attempt_mut(number) {
                        a.outcome = Some("passed".into());
                        a.finished_at = Some(now_rfc3339());
                        a.duration_ms = Some(duration_ms);
                    }
                });
                ctx.set_prd_status(&id, Status::Complete);
                // The worktree returns to the pool for the next story.
                if let Some(p) = held.take() {
                    let c = Arc::clone(&ctx);
                    let q = p.clone();
                    let back = tokio::task::spawn_blocking(move || c.pool.give_back(&q)).await;
                    if let Ok(Err(e)) = back {
                        ctx.emit(Event::Notice {
                            message: format!(
                                "{id}: could not reuse worktree '{}': {e}",
                                p.display()
                            ),
                        });
                    }
                }
                let attempts = ctx
                    .state
                    .lock()
                    .map(|st| st.story(&id).map_or(0, |s| s.charged_attempts()))
                    .unwrap_or(attempt);
                ctx.emit(Event::StoryMerged {
                    story: id.clone(),
                    agent,
                    attempts,
                    commit,
                    fast_forward,
                    target_branch: ctx.target_branch.clone(),
                    duration_ms: story_started.elapsed().as_millis() as u64,
                    worker,
                });
                return StoryEnd::Merged;
            }
            AttemptEnd::Interrupted => {
                ctx.update_story(&id, |s| {
                    s.status = StoryStatus::Pending;
                    if let Some(a) = s.attempt_mut(number) {
                        if a.outcome.is_none() {
                            a.outcome = Some(crate::state::INTERRUPTED.into());
                            a.finished_at = Some(now_rfc3339());
                            a.duration_ms = Some(duration_ms);
                        }
                    }
                });
                ctx.set_prd_status(&id, Status::Pending);
                return StoryEnd::Interrupted;
            }
            AttemptEnd::Failed(failure) => {
                ctx.update_story(&id, |s| {
                    s.error = Some(failure.error.clone());
                    s.error_type = Some(failure.kind);
                    s.agent = Some(agent.clone());
                    if let Some(a) = s.attempt_mut(number) {
                        a.outcome = Some("failed".into());
                        a.finished_at = Some(now_rfc3339());
                        a.duration_ms = Some(duration_ms);
                        a.error = Some(failure.error.clone());
                        a.error_type = Some(failure.kind);
                    }
                });
                ctx.emit(Event::AttemptFailed {
                    story: id.clone(),
                    agent: agent.clone(),
                    attempt: number,
                    error_type: failure.kind,
                    error: failure.error.clone(),
                });
                if ctx.cancel.is_cancelled() {
                    ctx.update_story(&id, |s| s.status = StoryStatus::Pending);
                    ctx.set_prd_status(&id, Status::Pending);
                    return StoryEnd::Interrupted;
                }
                // A rate limit is the provider's doing, not the agent's: the
                // attempt costs no retry and the agent's cooldown (shared by
                // every story using it, see control::ratelimit) is the wait.
                if failure.kind == FailureKind::RateLimited
                    && rate_limited < crate::control::ratelimit::MAX_RATE_LIMITED
                {
                    rate_limited += 1;
                    attempt += 1;
                    continue;
                }
                let charged = attempt - earlier - rate_limited - raced;
                let retry = failure.kind != FailureKind::RateLimited
                    && ctx.options.retry.should_retry(charged, failure.kind);
                if !retry {
                    let (f, w) = (failure, worker);
                    return fail_for_good(&ctx, &id, &branch, &mut held, agent, f, w).await;
                }
                let next_agent = Resolver::new(&ctx.agents, &ctx.detector, ctx.overrides())
                    .resolve(&story, Phase::Retry)
                    .map(|a| a.agent)
                    .unwrap_or_else(|_| agent.clone());
                let delay = ctx.options.retry.delay(charged);
                ctx.emit(Event::RetryScheduled {
                    story: id.clone(),
                    attempt: attempt + 1,
                    max_attempts: max,
                    agent: next_agent,
                    error_type: failure.kind,
                    delay_ms: delay.as_millis() as u64,
                });
                if !delay.is_zero() {
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = steered.token().cancelled() => {
                            let failure = steered.failure();
                            return fail_for_good(&ctx, &id, &branch, &mut held, agent, failure, worker).await;
                        }
                        _ = ctx.cancel.cancelled() => {
                            ctx.update_story(&id, |s| s.status = StoryStatus::Pending);
                            ctx.set_prd_status(&id, Status::Pending);
                            return StoryEnd::Interrupted;
                        }
                    }
                }
                previous = Some((agent, failure));
                attempt += 1;
            }
        }
    }
}

/// The story failed for good: its worktree is kept for inspection (under the
/// story's own name when that is free; it leaves the pool), its state and
/// prd.json say so, and `StoryFailed` is announced.
async fn fail_for_good(
    ctx: &Arc<Ctx>,
    id: &str,
    branch: &str,
    held: &mut Option<PathBuf>,
    agent: String,
    failure: Failure,
    worker: Option<String>,
) -> StoryEnd {
    let attempts = ctx
        .state
        .lock()
        .map(|st| st.story(id).map_or(0, |s| s.charged_attempts()))
        .unwrap_or(0);
    let kept = match held.take() {
        Some(p) => {
            let c = Arc::clone(ctx);
            let (q, b) = (p.clone(), branch.to_string());
            tokio::task::spawn_blocking(move || {
                let to = worktree::path_for(&c.paths, &b);
                worktree::relocate(&c.paths, &q, &to)
            })
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(p)
        }
        None => worktree::path_for(&ctx.paths, branch),
    };
    let kept = kept.display().to_string();
    ctx.update_story(id, |s| {
        s.status = StoryStatus::Failed;
        s.worktree = Some(kept.clone());
    });
    ctx.set_prd_status(id, Status::Pending);
    ctx.emit(Event::StoryFailed {
        story: id.to_string(),
        agent,
        attempts,
        error_type: failure.kind,
        error: failure.error,
        branch: branch.to_string(),
        worktree: kept,
        worker,
    });
    StoryEnd::Failed
}
