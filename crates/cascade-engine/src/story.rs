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
use tokio::sync::OwnedSemaphorePermit;

use crate::control::steer::Running;
use crate::ctx::Ctx;
use crate::events::Event;
use crate::retry::FailureKind;
use crate::state::RunState;
use crate::steps::race::Race;
use crate::steps::{run_attempt, Attempt, AttemptEnd, Failure};
use crate::transition::Transition;

/// How a story's task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoryEnd {
    Merged,
    Failed,
    Interrupted,
}

/// Runs `story` until it is merged, fails for good, or the run is
/// cancelled. `earlier`: the attempts its record holds from earlier runs.
pub(crate) async fn run_story(ctx: Arc<Ctx>, story: Story, earlier: u32) -> StoryEnd {
    let mut run = StoryRun::begin(&ctx, &story, earlier);
    // The story's port range, for its agent and gates, while it runs.
    let ports = crate::control::resources::PortLease::take();
    let env = ports.env();
    // A racing story: each round runs all its contestants (one attempt
    // number each) and counts as one attempt of the retry budget.
    let mut race = Race::for_story(&ctx, &story);
    loop {
        let slot = match run.admit().await {
            Ok(slot) => slot,
            Err(end) => return end,
        };
        let (ended, outcome) = run.attempt(slot, &env, race.as_mut()).await;
        let next = match outcome {
            AttemptEnd::Merged {
                commit,
                fast_forward,
            } => Err(run.merged(&ended, commit, fast_forward).await),
            AttemptEnd::Interrupted => Err(run.interrupted(&ended)),
            AttemptEnd::Failed(failure) => run.failed(ended, failure).await,
        };
        if let Err(end) = next {
            return end;
        }
    }
}

/// Who ran one attempt (or race round), and when: what its end is
/// recorded with.
struct Ended {
    agent: String,
    worker: Option<String>,
    /// The attempt the end belongs to.
    number: u32,
    duration_ms: u64,
}

/// A story's task: what stays across its attempts.
struct StoryRun<'a> {
    ctx: &'a Arc<Ctx>,
    story: &'a Story,
    id: String,
    branch: String,
    /// Its own cancel token, for a cancel request from outside (control::steer).
    steered: Running,
    /// The worktree this story holds (leased from the pool by its first attempt).
    held: Option<PathBuf>,
    /// Attempts of earlier (interrupted or failed) runs: they stay in the
    /// history and numbering goes on after them (logs are never
    /// overwritten), but they do not use up this run's budget: a resumed
    /// story gets the full `--max-retries` again, so an interrupted attempt
    /// costs no retry.
    earlier: u32,
    max: u32,
    started: Instant,
    /// The previous attempt's failure, charged to its agent (the retry's
    /// prompt).
    previous: Option<Failure>,
    /// The next attempt's number.
    attempt: u32,
    /// Rate-limited attempts of this run: recorded, but never charged to
    /// the retry budget (bounded by MAX_RATE_LIMITED).
    rate_limited: u32,
    /// Attempt numbers race rounds used beyond one each.
    raced: u32,
}

impl<'a> StoryRun<'a> {
    /// The story starts: running in its state (written with the agent's pid
    /// or the attempt's failure: one state write per story start instead of
    /// two), in progress in prd.json.
    fn begin(ctx: &'a Arc<Ctx>, story: &'a Story, earlier: u32) -> StoryRun<'a> {
        let id = story.id.clone();
        let steered = Running::new(ctx.options.steering.as_ref(), &id);
        let branch = worktree::branch_name(ctx.feature.as_deref(), &id);
        ctx.set_prd_status(&id, Status::InProgress);
        let started = Transition::Started {
            branch: branch.clone(),
        };
        ctx.transition(&id, started);
        StoryRun {
            ctx,
            story,
            id,
            branch,
            steered,
            held: None,
            earlier,
            max: earlier.saturating_add(ctx.options.retry.max_attempts()),
            started: Instant::now(),
            previous: None,
            attempt: earlier + 1,
            rate_limited: 0,
            raced: 0,
        }
    }

    /// The agent the next failure is charged to before one is chosen.
    fn last_agent(&self) -> String {
        self.previous
            .as_ref()
            .map_or_else(|| "none".to_string(), |p| p.agent.to_string())
    }

    /// Whether the next attempt may start: not cancelled from outside, a
    /// slot of the limit shared with other engines (a mega run's; taken
    /// before the budget check, so a story that waited for one sees what
    /// the others spent meanwhile; held until the merge queue), and the
    /// budgets (the run's exhausted: the story waits for a resume with a
    /// higher one; its own: it fails).
    async fn admit(&mut self) -> Result<Option<OwnedSemaphorePermit>, StoryEnd> {
        let ctx = self.ctx;
        if self.steered.cancelled() {
            let failure = self.steered.failure();
            return Err(self.fail_for_good(self.last_agent(), failure, None).await);
        }
        let Ok(slot) = ctx.options.acquire_slot(&ctx.cancel).await else {
            return Err(self.back_to_pending());
        };
        match crate::spend::before_attempt(ctx, &self.id).await {
            crate::spend::Go::Ahead => Ok(slot),
            crate::spend::Go::RunExhausted => Err(self.back_to_pending()),
            crate::spend::Go::StoryExhausted(failure) => {
                let (error, kind) = (failure.error.clone(), failure.kind);
                ctx.transition(&self.id, Transition::NoAttempt { kind, error });
                Err(self.fail_for_good(self.last_agent(), failure, None).await)
            }
        }
    }

    /// Runs the next attempt (a race round for a racing story). The first
    /// attempt of this run implements; later ones retry with the previous
    /// failure in their prompt.
    async fn attempt(
        &mut self,
        slot: Option<OwnedSemaphorePermit>,
        env: &[(String, String)],
        race: Option<&mut Race>,
    ) -> (Ended, AttemptEnd) {
        let ctx = self.ctx;
        let phase = if self.previous.is_none() {
            Phase::Implementation
        } else {
            Phase::Retry
        };
        let started = Instant::now();
        let this = Attempt {
            ctx,
            story: self.story,
            branch: &self.branch,
            number: self.attempt,
            max: self.max + self.rate_limited + self.raced,
            phase,
            previous: self.previous.as_ref(),
            agent: self.last_agent(),
            env,
            worker: None,
            job: None,
            slot,
            contestant: None,
        };
        let (agent, worker, outcome, number) = match race {
            Some(race) => {
                let round = race.round(this, &mut self.held).await;
                let extra = round.used.saturating_sub(1);
                self.raced += extra;
                self.attempt += extra;
                (round.agent, round.worker, round.end, round.number)
            }
            None => {
                let (agent, worker, outcome) = run_attempt(this, &mut self.held).await;
                (agent, worker, outcome, self.attempt)
            }
        };
        // Cancelled from outside: whatever the attempt came to short of a
        // merge, the story fails as cancelled (no retry).
        let outcome = match outcome {
            AttemptEnd::Merged { .. } => outcome,
            _ if self.steered.cancelled() => AttemptEnd::Failed(self.steered.failure()),
            // A full disk is nobody's fault in the story: the step that
            // met it stopped the run (`Ctx::write_failed`), and the story
            // goes back to pending (no attempt charged).
            AttemptEnd::Failed(_) if ctx.halted() => AttemptEnd::Interrupted,
            other => other,
        };
        let ended = Ended {
            agent,
            worker,
            number,
            duration_ms: started.elapsed().as_millis() as u64,
        };
        (ended, outcome)
    }

    /// The story is merged: recorded, its worktree back in the pool for the
    /// next story, announced.
    async fn merged(&mut self, ended: &Ended, commit: String, fast_forward: bool) -> StoryEnd {
        let ctx = self.ctx;
        let id = &self.id;
        let record = Transition::Merged {
            commit: commit.clone(),
            agent: ended.agent.clone(),
            attempt: ended.number,
            duration_ms: ended.duration_ms,
        };
        ctx.transition(id, record);
        ctx.set_prd_status(id, Status::Complete);
        if let Some(p) = self.held.take() {
            let c = Arc::clone(ctx);
            let q = p.clone();
            let back = tokio::task::spawn_blocking(move || c.pool.give_back(&q)).await;
            if let Ok(Err(e)) = back {
                ctx.emit(Event::Notice {
                    message: format!("{id}: could not reuse worktree '{}': {e}", p.display()),
                });
            }
        }
        let merged = Event::StoryMerged {
            story: id.clone(),
            agent: ended.agent.clone(),
            attempts: 0,
            commit,
            fast_forward,
            target_branch: ctx.target_branch.clone(),
            duration_ms: self.started.elapsed().as_millis() as u64,
            worker: ended.worker.clone(),
        };
        ctx.emit_from(with_attempts(merged));
        StoryEnd::Merged
    }

    /// The attempt was interrupted (Ctrl-C, a full disk, the run's budget):
    /// it is recorded as such and the story goes back to pending.
    fn interrupted(&mut self, ended: &Ended) -> StoryEnd {
        let interrupted = Transition::Interrupted {
            attempt: ended.number,
            duration_ms: ended.duration_ms,
        };
        self.ctx.transition(&self.id, interrupted);
        self.ctx.set_prd_status(&self.id, Status::Pending);
        StoryEnd::Interrupted
    }

    /// The attempt failed: recorded and announced; then the story retries
    /// (`Ok`, after the backoff) or ends (`Err`).
    async fn failed(&mut self, ended: Ended, failure: Failure) -> Result<(), StoryEnd> {
        let ctx = self.ctx;
        let id = self.id.clone();
        let Ended {
            agent,
            worker,
            number,
            duration_ms,
        } = ended;
        record_failure(ctx, &id, &agent, number, duration_ms, &failure);
        if ctx.cancel.is_cancelled() {
            return Err(self.back_to_pending());
        }
        // A rate limit is the provider's doing, not the agent's: the
        // attempt costs no retry and the agent's cooldown (shared by
        // every story using it, see control::ratelimit) is the wait.
        if failure.kind == FailureKind::RateLimited
            && self.rate_limited < crate::control::ratelimit::MAX_RATE_LIMITED
        {
            self.rate_limited += 1;
            self.attempt += 1;
            return Ok(());
        }
        let charged = self.attempt - self.earlier - self.rate_limited - self.raced;
        let retry = failure.kind != FailureKind::RateLimited
            && ctx.options.retry.should_retry(charged, failure.kind);
        if !retry {
            return Err(self.fail_for_good(agent, failure, worker).await);
        }
        let next_agent = Resolver::new(&ctx.agents, &ctx.detector, ctx.overrides())
            .resolve(self.story, Phase::Retry)
            .map(|a| a.agent)
            .unwrap_or_else(|_| agent.clone());
        // Against a story still running: the retry waits for it to end
        // instead of the timer (the same conflict would meet it again).
        let delay = if self.waited_for_clash(&failure, &agent, &worker).await? {
            std::time::Duration::ZERO
        } else {
            ctx.options.retry.delay(charged)
        };
        ctx.emit(Event::RetryScheduled {
            story: id.clone(),
            attempt: self.attempt + 1,
            max_attempts: self.max,
            agent: next_agent,
            error_type: failure.kind,
            delay_ms: delay.as_millis() as u64,
        });
        if !delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.steered.token().cancelled() => {
                    let failure = self.steered.failure();
                    return Err(self.fail_for_good(agent, failure, worker).await);
                }
                _ = ctx.cancel.cancelled() => return Err(self.back_to_pending()),
            }
        }
        self.previous = Some(failure.charged_to(&agent));
        self.attempt += 1;
        Ok(())
    }

    /// Waits for the running stories `failure` is against, if any (see
    /// `clash`); `Ok(true)` when it waited, `Err` when the story or the
    /// run was stopped meanwhile.
    async fn waited_for_clash(
        &mut self,
        failure: &Failure,
        agent: &str,
        worker: &Option<String>,
    ) -> Result<bool, StoryEnd> {
        let ctx = self.ctx;
        let id = self.id.clone();
        let Some(against) = crate::clash::against(ctx, &id, failure, self.held.clone()).await
        else {
            return Ok(false);
        };
        ctx.emit(Event::Notice {
            message: format!(
                "{id}: its retry waits for {} to end ({} in {})",
                against.stories.join(", "),
                failure.kind,
                against.files.join(", ")
            ),
        });
        let stopped = tokio::select! {
            _ = crate::clash::wait_for(ctx, &id, &against) => return Ok(true),
            _ = self.steered.token().cancelled() => true,
            _ = ctx.cancel.cancelled() => false,
        };
        drop(against);
        Err(if stopped {
            let failure = self.steered.failure();
            self.fail_for_good(agent.to_string(), failure, worker.clone())
                .await
        } else {
            self.back_to_pending()
        })
    }

    /// The story stops short of an attempt's end (the run is stopping, its
    /// budget is spent): pending again, for a resume.
    fn back_to_pending(&self) -> StoryEnd {
        self.ctx.transition(&self.id, Transition::Pending);
        self.ctx.set_prd_status(&self.id, Status::Pending);
        StoryEnd::Interrupted
    }

    /// The story failed for good: its worktree is kept for inspection (under
    /// the story's own name when that is free; it leaves the pool), its
    /// state and prd.json say so, and `StoryFailed` is announced.
    async fn fail_for_good(
        &mut self,
        agent: String,
        failure: Failure,
        worker: Option<String>,
    ) -> StoryEnd {
        let (ctx, id, branch) = (self.ctx, &self.id, &self.branch);
        let kept = match self.held.take() {
            Some(p) => {
                let c = Arc::clone(ctx);
                let (q, b) = (p.clone(), branch.clone());
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
        let record = Transition::Failed {
            worktree: kept.clone(),
        };
        ctx.transition(id, record);
        ctx.set_prd_status(id, Status::Pending);
        let failed = Event::StoryFailed {
            story: id.clone(),
            agent,
            attempts: 0,
            error_type: failure.kind,
            error: failure.error,
            branch: branch.clone(),
            worktree: kept,
            worker,
        };
        ctx.emit_from(with_attempts(failed));
        StoryEnd::Failed
    }
}

/// A failed attempt in the story's record and as `attempt_failed`.
fn record_failure(
    ctx: &Ctx,
    id: &str,
    agent: &str,
    number: u32,
    duration_ms: u64,
    failure: &Failure,
) {
    let failed = Transition::AttemptFailed {
        agent: agent.to_string(),
        attempt: number,
        duration_ms,
        kind: failure.kind,
        error: failure.error.clone(),
    };
    ctx.transition(id, failed);
    ctx.emit(Event::AttemptFailed {
        story: id.to_string(),
        agent: agent.to_string(),
        attempt: number,
        error_type: failure.kind,
        error: failure.error.clone(),
    });
}

/// `event` (a story's merge or failure) with the story's charged attempts
/// as its record has them when the run's loop announces it (every attempt
/// recorded by then).
fn with_attempts(mut event: Event) -> impl FnOnce(&RunState) -> Event + Send + 'static {
    move |st| {
        if let Event::StoryMerged {
            story, attempts, ..
        }
        | Event::StoryFailed {
            story, attempts, ..
        } = &mut event
        {
            *attempts = st.story(story).map_or(0, |s| s.charged_attempts());
        }
        event
    }
}
