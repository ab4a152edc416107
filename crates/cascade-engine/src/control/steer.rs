//! Steering a live run from outside: pause and resume the scheduling of new
//! stories, cancel a story, retry a failed one.
//!
//! The caller (the binary, on behalf of the dashboard or any client of the
//! run's live channel) holds a [`Steering`] and puts it in
//! `RunOptions::steering`; the engine's main loop takes the requests
//! between two scheduling decisions ([`apply`]), so they go through the
//! same scheduler, state and events as everything else: every request,
//! taken or refused, ends in an [`Event::Control`] with who asked.
//!
//! - **pause**: no new story starts; running ones go on to their end. While
//!   paused with nothing running, the run waits (it does not end).
//! - **resume**: scheduling goes on.
//! - **cancel** a story: a running one has its agent's process group killed
//!   (through a cancel token of its own, linked to the run's) and fails as
//!   `cancelled` without a retry; a waiting one fails at once. Its
//!   dependents are blocked as with any failure.
//! - **retry** a failed story: it goes back to waiting with a fresh retry
//!   budget (as `cascade resume` gives it; attempt numbers go on), and the
//!   stories it blocked wait again.
//!
//! Agent output: [`Steering::on_output`] installs a hook that gets every
//! line the running agents print, for a live view; the engine's events
//! stay free of it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cascade_process::{AbortOnDrop, CancelToken};
use tokio::sync::{oneshot, Notify};

use crate::events::Event;
use crate::scheduler::{NodeState, Scheduler};
use crate::state::StoryStatus;

/// What a client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Pause,
    Resume,
    Cancel(String),
    Retry(String),
}

impl Action {
    /// `pause`, `resume`, `cancel`, `retry`.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Cancel(_) => "cancel",
            Action::Retry(_) => "retry",
        }
    }

    /// The story it is about.
    pub fn story(&self) -> Option<&str> {
        match self {
            Action::Cancel(s) | Action::Retry(s) => Some(s),
            Action::Pause | Action::Resume => None,
        }
    }
}

/// How a request ended: `Ok(what happened)` or `Err(why it does not apply)`.
pub type Outcome = Result<String, String>;

/// A line an agent printed: story, attempt, the line (without its newline).
pub type OutputHook = Arc<dyn Fn(&str, u32, &[u8]) + Send + Sync>;

struct Request {
    action: Action,
    by: String,
    reply: oneshot::Sender<Outcome>,
}

#[derive(Default)]
struct Inner {
    paused: AtomicBool,
    /// Whether an engine is taking requests now.
    attached: AtomicBool,
    queue: Mutex<VecDeque<Request>>,
    wake: Notify,
    /// Cancel tokens of the stories running now.
    running: Mutex<HashMap<String, CancelToken>>,
    /// Running stories cancelled by a request (their end is a failure).
    cancelled: Mutex<HashSet<String>>,
    output: Mutex<Option<OutputHook>>,
}

/// The handle a live run is steered through. Cheap to clone; every clone
/// steers the same run.
#[derive(Clone, Default)]
pub struct Steering {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Steering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steering")
            .field("paused", &self.is_paused())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Steering {
    pub fn new() -> Steering {
        Steering::default()
    }

    /// Asks the running engine for `action` on behalf of `by` (`ui`, `cli`)
    /// and waits for its answer. Without a running engine: `Err`.
    pub async fn request(&self, action: Action, by: &str) -> Outcome {
        if !self.inner.attached.load(Ordering::SeqCst) {
            return Err("no run is taking requests now (it has finished or not started)".into());
        }
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.queue).push_back(Request {
            action,
            by: by.to_string(),
            reply: tx,
        });
        self.inner.wake.notify_one();
        rx.await
            .unwrap_or_else(|_| Err("the run ended before it took the request".into()))
    }

    /// Whether scheduling is paused.
    pub fn is_paused(&self) -> bool {
        self.inner.paused.load(Ordering::SeqCst)
    }

    /// Installs the hook that gets running agents' output lines.
    pub fn on_output(&self, hook: OutputHook) {
        *lock(&self.inner.output) = Some(hook);
    }

    /// The output hook, if one is installed.
    pub(crate) fn output_hook(&self) -> Option<OutputHook> {
        lock(&self.inner.output).clone()
    }

    /// Completes when a request may be waiting.
    pub(crate) async fn woken(&self) {
        self.inner.wake.notified().await
    }

    pub(crate) fn attach(&self, on: bool) {
        self.inner.attached.store(on, Ordering::SeqCst);
        if !on {
            // Whoever still waits is told.
            for r in lock(&self.inner.queue).drain(..) {
                let _ = r.reply.send(Err("the run has ended".into()));
            }
        }
    }

    /// A story starts: its own cancel token (fired by a cancel request).
    pub(crate) fn story_started(&self, id: &str) -> CancelToken {
        let token = CancelToken::new();
        lock(&self.inner.running).insert(id.to_string(), token.clone());
        token
    }

    /// The story's task ended.
    pub(crate) fn story_ended(&self, id: &str) {
        lock(&self.inner.running).remove(id);
    }

    /// Whether a cancel request stopped this story (it then fails as cancelled).
    pub(crate) fn was_cancelled(&self, id: &str) -> bool {
        lock(&self.inner.cancelled).contains(id)
    }

    /// The story's cancel token, while it runs.
    pub(crate) fn token(&self, id: &str) -> Option<CancelToken> {
        lock(&self.inner.running).get(id).cloned()
    }

    fn take(&self) -> Vec<Request> {
        lock(&self.inner.queue).drain(..).collect()
    }
}

/// A story's part in steering while its task runs: its cancel token
/// (never fired when nobody steers the run), forgotten on drop.
pub(crate) struct Running {
    steer: Option<Steering>,
    id: String,
    token: CancelToken,
}

impl Running {
    pub fn new(ctx: &crate::engine::Ctx, id: &str) -> Running {
        let steer = ctx.options.steering.clone();
        let token = match &steer {
            Some(s) => s.story_started(id),
            None => CancelToken::new(),
        };
        Running {
            steer,
            id: id.to_string(),
            token,
        }
    }

    /// Fired by a cancel request.
    pub fn token(&self) -> &CancelToken {
        &self.token
    }

    /// Whether a cancel request stopped the story.
    pub fn cancelled(&self) -> bool {
        self.steer
            .as_ref()
            .is_some_and(|s| s.was_cancelled(&self.id))
    }

    /// The failure a cancelled story ends with.
    pub fn failure(&self) -> crate::steps::Failure {
        crate::steps::Failure::new(
            crate::FailureKind::Cancelled,
            "cancelled on request (dashboard or live channel); its agent was stopped",
        )
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = &self.steer {
            s.story_ended(&self.id);
        }
    }
}

/// What the agent of story `id` runs under: the run's agent token, or,
/// in a steered run, that or the story's own.
pub(crate) fn agent_cancel(
    ctx: &crate::engine::Ctx,
    id: &str,
) -> (CancelToken, Option<AbortOnDrop>) {
    let own = ctx.options.steering.as_ref().and_then(|s| s.token(id));
    match own {
        Some(t) => {
            let (c, g) = either(&ctx.control.agents_cancel, &t);
            (c, Some(g))
        }
        None => (ctx.control.agents_cancel.clone(), None),
    }
}

/// The output callback of story `id`'s agent (attempt `n`), when someone watches.
pub(crate) fn output_lines(
    ctx: &crate::engine::Ctx,
    id: &str,
    n: u32,
) -> Option<cascade_agents::exec::OutputLines> {
    let hook = ctx.options.steering.as_ref()?.output_hook()?;
    let id = id.to_string();
    Some(cascade_agents::exec::OutputLines(Arc::new(move |line| {
        hook(&id, n, line)
    })))
}

/// A token fired by either `a` or `b`, and the task that links them
/// (aborted on drop).
pub(crate) fn either(a: &CancelToken, b: &CancelToken) -> (CancelToken, AbortOnDrop) {
    let out = CancelToken::new();
    let (a, b, o) = (a.clone(), b.clone(), out.clone());
    let task = tokio::spawn(async move {
        tokio::select! {
            _ = a.cancelled() => {}
            _ = b.cancelled() => {}
        }
        o.cancel();
    });
    (out, AbortOnDrop(task))
}

/// Takes the waiting requests: run by the engine's main loop between two
/// scheduling decisions. `stories` are the plan's ids in scheduler order.
pub(crate) fn apply(ctx: &crate::engine::Ctx, sched: &mut Scheduler, stories: &[String]) {
    let Some(steer) = ctx.options.steering.as_ref() else {
        return;
    };
    for req in steer.take() {
        let outcome = decide(ctx, steer, sched, stories, &req.action);
        let (ok, message) = match &outcome {
            Ok(m) => (true, m.clone()),
            Err(m) => (false, m.clone()),
        };
        ctx.emit(Event::Control {
            action: req.action.name().to_string(),
            story: req.action.story().map(str::to_string),
            by: req.by.clone(),
            ok,
            message,
        });
        let _ = req.reply.send(outcome);
    }
}

fn decide(
    ctx: &crate::engine::Ctx,
    steer: &Steering,
    sched: &mut Scheduler,
    stories: &[String],
    action: &Action,
) -> Outcome {
    let index = |id: &str| {
        stories
            .iter()
            .position(|s| s == id)
            .ok_or_else(|| format!("unknown story '{id}' (not in this run's plan)"))
    };
    match action {
        Action::Pause => {
            if steer.inner.paused.swap(true, Ordering::SeqCst) {
                return Err("scheduling is already paused".into());
            }
            Ok("scheduling paused: running stories finish, no new one starts".into())
        }
        Action::Resume => {
            if !steer.inner.paused.swap(false, Ordering::SeqCst) {
                return Err("scheduling is not paused".into());
            }
            Ok("scheduling resumed".into())
        }
        Action::Cancel(id) => {
            let i = index(id)?;
            match sched.state(i) {
                NodeState::Running => {
                    lock(&steer.inner.cancelled).insert(id.clone());
                    if let Some(t) = steer.token(id) {
                        t.cancel();
                    }
                    Ok(format!("{id}: cancelling (its agent is stopped)"))
                }
                NodeState::Waiting => {
                    let error = "cancelled before it started".to_string();
                    ctx.update_story(id, |s| {
                        s.status = StoryStatus::Failed;
                        s.error_type = Some(crate::FailureKind::Cancelled);
                        s.error = Some(error.clone());
                    });
                    ctx.emit(Event::StoryFailed {
                        story: id.clone(),
                        agent: "none".into(),
                        attempts: 0,
                        error_type: crate::FailureKind::Cancelled,
                        error,
                        branch: String::new(),
                        worktree: String::new(),
                        worker: None,
                    });
                    let blocked = sched.fail(i);
                    crate::engine::announce_blocked(ctx, sched, stories, &blocked);
                    Ok(format!("{id}: cancelled before it started"))
                }
                state => Err(format!("{id} is {} and cannot be cancelled", name(state))),
            }
        }
        Action::Retry(id) => {
            let i = index(id)?;
            if sched.state(i) != NodeState::Failed {
                return Err(format!(
                    "{id} is {}: only a failed story can be retried",
                    name(sched.state(i))
                ));
            }
            lock(&steer.inner.cancelled).remove(id);
            let unblocked = sched.requeue(i);
            ctx.update_story(id, |s| {
                s.status = StoryStatus::Pending;
                s.error = None;
                s.error_type = None;
            });
            for &u in &unblocked {
                ctx.update_story(&stories[u], |s| {
                    s.status = StoryStatus::Pending;
                    s.blocked_by.clear();
                });
            }
            let again: Vec<&str> = unblocked.iter().map(|&u| stories[u].as_str()).collect();
            Ok(if again.is_empty() {
                format!("{id}: queued again")
            } else {
                format!("{id}: queued again; waiting again: {}", again.join(", "))
            })
        }
    }
}

fn name(state: NodeState) -> &'static str {
    match state {
        NodeState::Waiting => "waiting",
        NodeState::Running => "running",
        NodeState::Done => "merged",
        NodeState::Failed => "failed",
        NodeState::Blocked => "blocked",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_without_an_engine_are_refused() {
        let s = Steering::new();
        let r = s.request(Action::Pause, "ui").await;
        assert!(r.unwrap_err().contains("no run"));
        assert!(!s.is_paused());
    }

    #[tokio::test]
    async fn detaching_answers_waiting_requests() {
        let s = Steering::new();
        s.attach(true);
        let s2 = s.clone();
        let waiter = tokio::spawn(async move { s2.request(Action::Resume, "ui").await });
        // Wait until the request is queued, then the engine goes away.
        while lock(&s.inner.queue).is_empty() {
            tokio::task::yield_now().await;
        }
        s.attach(false);
        assert_eq!(waiter.await.unwrap().unwrap_err(), "the run has ended");
    }

    #[tokio::test]
    async fn either_token_fires_on_both() {
        let (a, b) = (CancelToken::new(), CancelToken::new());
        let (e, _g) = either(&a, &b);
        assert!(!e.is_cancelled());
        b.cancel();
        e.cancelled().await;
        assert!(e.is_cancelled());
    }

    #[test]
    fn story_tokens_are_per_story() {
        let s = Steering::new();
        let t = s.story_started("s1");
        assert!(s.token("s1").is_some());
        assert!(s.token("s2").is_none());
        assert!(!t.is_cancelled());
        s.story_ended("s1");
        assert!(s.token("s1").is_none());
    }
}
