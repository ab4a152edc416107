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
//! A mega run is steered through one [`Steering`] too: every feature's
//! engine gets a handle scoped to its feature ([`Steering::for_feature`]),
//! with a request desk and running stories of its own (story ids repeat
//! across features), while the paused flag is the run's. A cancel or retry
//! names the feature ([`Steering::request`]) and its engine answers it;
//! pause and resume are the mega runner's ([`serve_run`]), hold for every
//! feature engine, and no new feature batch starts while paused
//! ([`Steering::unpaused`]).
//!
//! Agent output: [`Steering::on_output`] installs a hook that gets every
//! line the running agents print, for a live view; the engine's events
//! stay free of it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cascade_process::{AbortOnDrop, CancelToken};
use tokio::sync::{oneshot, watch, Notify};

use crate::events::Event;
use crate::owner::StateTx;
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
pub type Outcome = Result<String, Refusal>;

/// Why a request does not apply (its text is the reply and the `control`
/// event's message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the run has ended")]
    Ended,
    #[error("no run is taking requests now (it has finished or not started)")]
    NoRun,
    #[error("the run ended before it took the request")]
    EndedBeforeTaken,
    #[error("scheduling is already paused")]
    AlreadyPaused,
    #[error("scheduling is not paused")]
    NotPaused,
    #[error("this is not a mega run: it has no feature '{0}' (leave the feature out)")]
    NotMega(String),
    #[error("feature '{0}' runs no stories now (it has not started, or its stories have finished); once the mega run has ended, a retry resumes it")]
    FeatureIdle(String),
    #[error("{0}: this is a mega run: say which feature the story belongs to")]
    NoFeature(String),
    #[error("unknown story '{0}' (not in this run's plan)")]
    UnknownStory(String),
    #[error("{id} is {state} and cannot be cancelled")]
    NotCancellable { id: String, state: &'static str },
    #[error("{id} is {state}: only a failed story can be retried")]
    NotFailed { id: String, state: &'static str },
}

/// A line an agent printed: the feature (a mega run's), story, attempt,
/// the line (without its newline).
pub type OutputHook = Arc<dyn Fn(Option<&str>, &str, u32, &[u8]) + Send + Sync>;

struct Request {
    action: Action,
    /// The feature it names (a mega run's cancel or retry).
    feature: Option<String>,
    by: String,
    reply: oneshot::Sender<Outcome>,
}

/// Where one engine takes its requests: a plain run's engine, a mega
/// run's runner (the run-wide requests), or one feature's engine.
#[derive(Default)]
struct Desk {
    /// Whether someone is taking this desk's requests now.
    attached: AtomicBool,
    queue: Mutex<VecDeque<Request>>,
    wake: Notify,
    /// Cancel tokens of the stories running now.
    running: Mutex<HashMap<String, CancelToken>>,
    /// Running stories cancelled by a request (their end is a failure).
    cancelled: Mutex<HashSet<String>>,
}

impl Desk {
    fn attach(&self, on: bool) {
        self.attached.store(on, Ordering::SeqCst);
        if !on {
            // Whoever still waits is told.
            for r in lock(&self.queue).drain(..) {
                let _ = r.reply.send(Err(Refusal::Ended));
            }
        }
    }

    fn is_attached(&self) -> bool {
        self.attached.load(Ordering::SeqCst)
    }
}

/// What every handle of one run shares.
struct Shared {
    paused: watch::Sender<bool>,
    /// The run's own desk: everything in a plain run; pause and resume in
    /// a mega run.
    run: Arc<Desk>,
    /// A mega run's feature engines, by feature.
    features: Mutex<HashMap<String, Arc<Desk>>>,
    output: Mutex<Option<OutputHook>>,
}

/// The handle a live run is steered through. Cheap to clone; every clone
/// steers the same run (a [`Steering::for_feature`] handle: the same run,
/// one feature's engine).
#[derive(Clone)]
pub struct Steering {
    shared: Arc<Shared>,
    /// The desk of the engine holding this handle.
    desk: Arc<Desk>,
    feature: Option<String>,
}

impl Default for Steering {
    fn default() -> Self {
        let run = Arc::new(Desk::default());
        Steering {
            shared: Arc::new(Shared {
                paused: watch::channel(false).0,
                run: Arc::clone(&run),
                features: Mutex::default(),
                output: Mutex::default(),
            }),
            desk: run,
            feature: None,
        }
    }
}

impl std::fmt::Debug for Steering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steering")
            .field("paused", &self.is_paused())
            .field("feature", &self.feature)
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

    /// The handle of feature `feature`'s engine in a mega run: the run's
    /// paused flag and output hook, the feature's own requests and stories.
    pub fn for_feature(&self, feature: &str) -> Steering {
        let desk = Arc::clone(
            lock(&self.shared.features)
                .entry(feature.to_string())
                .or_default(),
        );
        Steering {
            shared: Arc::clone(&self.shared),
            desk,
            feature: Some(feature.to_string()),
        }
    }

    /// The feature this handle's engine runs (mega runs).
    pub fn feature(&self) -> Option<&str> {
        self.feature.as_deref()
    }

    /// Asks the running engine for `action` on behalf of `by` (`ui`, `cli`)
    /// and waits for its answer. In a mega run a cancel or retry names its
    /// `feature` (that feature's engine answers); pause and resume are for
    /// the whole run. Without a running engine: `Err`.
    pub async fn request(&self, action: Action, feature: Option<&str>, by: &str) -> Outcome {
        if !self.shared.run.is_attached() {
            return Err(Refusal::NoRun);
        }
        // A feature's story goes to its engine while one runs it; else to
        // the run, which refuses it (as a control event).
        let feature = match &action {
            Action::Cancel(_) | Action::Retry(_) => feature,
            Action::Pause | Action::Resume => None,
        };
        let desk = feature
            .and_then(|f| lock(&self.shared.features).get(f).cloned())
            .filter(|d| d.is_attached())
            .unwrap_or_else(|| Arc::clone(&self.shared.run));
        let (tx, rx) = oneshot::channel();
        lock(&desk.queue).push_back(Request {
            action,
            feature: feature.map(str::to_string),
            by: by.to_string(),
            reply: tx,
        });
        desk.wake.notify_one();
        rx.await.unwrap_or(Err(Refusal::EndedBeforeTaken))
    }

    /// Whether scheduling is paused.
    pub fn is_paused(&self) -> bool {
        *self.shared.paused.borrow()
    }

    /// Completes when scheduling is not paused.
    pub async fn unpaused(&self) {
        let mut rx = self.shared.paused.subscribe();
        // The sender lives as long as `self`: never closed here.
        let _ = rx.wait_for(|paused| !*paused).await;
    }

    /// Pauses (`true`) or resumes scheduling; refused when it already is so.
    fn set_paused(&self, pause: bool) -> Outcome {
        if self.shared.paused.send_replace(pause) == pause {
            return Err(if pause {
                Refusal::AlreadyPaused
            } else {
                Refusal::NotPaused
            });
        }
        if pause {
            return Ok("scheduling paused: running stories finish, no new one starts".into());
        }
        // Every engine waiting for a request (or the end of the pause)
        // looks again.
        self.shared.run.wake.notify_one();
        for d in lock(&self.shared.features).values() {
            d.wake.notify_one();
        }
        Ok("scheduling resumed".into())
    }

    /// Installs the hook that gets running agents' output lines.
    pub fn on_output(&self, hook: OutputHook) {
        *lock(&self.shared.output) = Some(hook);
    }

    /// The output hook, if one is installed.
    pub(crate) fn output_hook(&self) -> Option<OutputHook> {
        lock(&self.shared.output).clone()
    }

    /// Completes when a request may be waiting.
    pub(crate) async fn woken(&self) {
        self.desk.wake.notified().await
    }

    #[cfg(test)]
    fn attach(&self, on: bool) {
        self.desk.attach(on);
    }

    /// A story starts: its own cancel token (fired by a cancel request).
    pub(crate) fn story_started(&self, id: &str) -> CancelToken {
        let token = CancelToken::new();
        lock(&self.desk.running).insert(id.to_string(), token.clone());
        token
    }

    /// The story's task ended.
    pub(crate) fn story_ended(&self, id: &str) {
        lock(&self.desk.running).remove(id);
    }

    /// Whether a cancel request stopped this story (it then fails as cancelled).
    pub(crate) fn was_cancelled(&self, id: &str) -> bool {
        lock(&self.desk.cancelled).contains(id)
    }

    /// The story's cancel token, while it runs.
    pub(crate) fn token(&self, id: &str) -> Option<CancelToken> {
        lock(&self.desk.running).get(id).cloned()
    }

    fn take(&self) -> Vec<Request> {
        lock(&self.desk.queue).drain(..).collect()
    }
}

/// Marks a handle's desk as taken care of while its holder (an engine's
/// main loop, a mega runner) runs; requests made after it is dropped are
/// refused, and those still waiting are answered.
pub(crate) struct Attached(Arc<Desk>);

impl Attached {
    pub(crate) fn new(s: &Steering) -> Attached {
        s.desk.attach(true);
        Attached(Arc::clone(&s.desk))
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.attach(false);
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
    /// `steering`: the run's, when someone steers it.
    pub fn new(steering: Option<&Steering>, id: &str) -> Running {
        let steer = steering.cloned();
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
    pub fn failure(&self) -> crate::failure::Failure {
        crate::failure::Failure::new(
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
/// `agents`: the run's agent token.
pub(crate) fn agent_cancel(
    steering: Option<&Steering>,
    agents: &CancelToken,
    id: &str,
) -> (CancelToken, Option<AbortOnDrop>) {
    match steering.and_then(|s| s.token(id)) {
        Some(t) => {
            let (c, g) = either(agents, &t);
            (c, Some(g))
        }
        None => (agents.clone(), None),
    }
}

/// The output callback of story `id`'s agent (attempt `n`), when someone watches.
pub(crate) fn output_lines(
    steering: Option<&Steering>,
    id: &str,
    n: u32,
) -> Option<cascade_agents::exec::OutputLines> {
    let steer = steering?;
    let hook = steer.output_hook()?;
    let (feature, id) = (steer.feature.clone(), id.to_string());
    Some(cascade_agents::exec::OutputLines(Arc::new(move |line| {
        hook(feature.as_deref(), &id, n, line)
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
/// scheduling decisions. `stories` are the plan's ids in scheduler order;
/// the state changes and events go to the loop through `tx`.
pub(crate) fn apply(
    steering: Option<&Steering>,
    tx: &StateTx,
    sched: &mut Scheduler,
    stories: &[String],
) {
    let Some(steer) = steering else {
        return;
    };
    for req in steer.take() {
        let outcome = match req.feature.as_deref() {
            // Asked of a plain run's engine.
            Some(f) if steer.feature() != Some(f) => Err(Refusal::NotMega(f.to_string())),
            _ => decide(tx, steer, sched, stories, &req.action),
        };
        // A feature engine's events get its feature from the mega run.
        answer(req, outcome, |_, e| tx.emit(e));
    }
}

/// Says how a request ended, as a `control` event (given with the feature
/// the request named) and to whoever asked.
fn answer(req: Request, outcome: Outcome, emit: impl FnOnce(Option<String>, Event)) {
    let (ok, message) = match &outcome {
        Ok(m) => (true, m.clone()),
        Err(m) => (false, m.to_string()),
    };
    emit(
        req.feature,
        Event::Control {
            action: req.action.name().to_string(),
            story: req.action.story().map(str::to_string),
            by: req.by,
            ok,
            message,
        },
    );
    let _ = req.reply.send(outcome);
}

/// A mega run's own desk: answers pause and resume for the whole run (each
/// answer a `control` event through `emit`, with the feature a request
/// named) until the task is dropped. Cancel and retry belong to a
/// feature's engine: those that reach the run (no feature named, or one
/// whose engine is not running) are refused.
pub(crate) fn serve_run(
    steer: &Steering,
    emit: impl Fn(Option<String>, Event) + Send + 'static,
) -> AbortOnDrop {
    let attached = Attached::new(steer);
    let steer = steer.clone();
    AbortOnDrop(tokio::spawn(async move {
        let _attached = attached;
        loop {
            for req in steer.take() {
                let outcome = match &req.action {
                    Action::Pause => steer.set_paused(true),
                    Action::Resume => steer.set_paused(false),
                    Action::Cancel(id) | Action::Retry(id) => Err(match &req.feature {
                        Some(f) => Refusal::FeatureIdle(f.clone()),
                        None => Refusal::NoFeature(id.clone()),
                    }),
                };
                answer(req, outcome, &emit);
            }
            steer.woken().await;
        }
    }))
}

fn decide(
    tx: &StateTx,
    steer: &Steering,
    sched: &mut Scheduler,
    stories: &[String],
    action: &Action,
) -> Outcome {
    let index = |id: &str| {
        stories
            .iter()
            .position(|s| s == id)
            .ok_or_else(|| Refusal::UnknownStory(id.to_string()))
    };
    match action {
        Action::Pause => steer.set_paused(true),
        Action::Resume => steer.set_paused(false),
        Action::Cancel(id) => {
            let i = index(id)?;
            match sched.state(i) {
                NodeState::Running => {
                    lock(&steer.desk.cancelled).insert(id.clone());
                    if let Some(t) = steer.token(id) {
                        t.cancel();
                    }
                    Ok(format!("{id}: cancelling (its agent is stopped)"))
                }
                NodeState::Waiting => {
                    let error = "cancelled before it started".to_string();
                    let e = error.clone();
                    tx.story(id, move |s| {
                        s.status = StoryStatus::Failed;
                        s.error_type = Some(crate::FailureKind::Cancelled);
                        s.error = Some(e);
                    });
                    tx.emit(Event::StoryFailed {
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
                    tx.blocked(sched, stories, &blocked);
                    Ok(format!("{id}: cancelled before it started"))
                }
                state => Err(Refusal::NotCancellable {
                    id: id.clone(),
                    state: name(state),
                }),
            }
        }
        Action::Retry(id) => {
            let i = index(id)?;
            if sched.state(i) != NodeState::Failed {
                return Err(Refusal::NotFailed {
                    id: id.clone(),
                    state: name(sched.state(i)),
                });
            }
            lock(&steer.desk.cancelled).remove(id);
            let unblocked = sched.requeue(i);
            tx.story(id, |s| {
                s.status = StoryStatus::Pending;
                s.error = None;
                s.error_type = None;
            });
            for &u in &unblocked {
                tx.story(&stories[u], |s| {
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
        let r = s.request(Action::Pause, None, "ui").await;
        assert_eq!(r.unwrap_err(), Refusal::NoRun);
        assert!(!s.is_paused());
    }

    #[tokio::test]
    async fn detaching_answers_waiting_requests() {
        let s = Steering::new();
        s.attach(true);
        let s2 = s.clone();
        let waiter = tokio::spawn(async move { s2.request(Action::Resume, None, "ui").await });
        // Wait until the request is queued, then the engine goes away.
        while lock(&s.desk.queue).is_empty() {
            tokio::task::yield_now().await;
        }
        s.attach(false);
        assert_eq!(waiter.await.unwrap().unwrap_err(), Refusal::Ended);
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

    #[test]
    fn features_keep_their_stories_apart_and_share_the_pause() {
        let run = Steering::new();
        let (a, b) = (run.for_feature("alpha"), run.for_feature("beta"));
        assert_eq!(a.feature(), Some("alpha"));
        let ta = a.story_started("s-1");
        b.story_started("s-1");
        // The same story id in two features: two stories.
        ta.cancel();
        assert!(b.token("s-1").is_some_and(|t| !t.is_cancelled()));
        assert!(run.token("s-1").is_none());
        // Another handle of the same feature is the same engine.
        assert!(run.for_feature("alpha").token("s-1").is_some());
        assert!(run.set_paused(true).is_ok());
        assert_eq!(
            run.set_paused(true).unwrap_err().to_string(),
            "scheduling is already paused"
        );
        assert!(a.is_paused() && b.is_paused());
        assert!(run.set_paused(false).is_ok());
        assert!(!b.is_paused());
        assert_eq!(
            run.set_paused(false).unwrap_err().to_string(),
            "scheduling is not paused"
        );
    }

    #[tokio::test]
    async fn requests_go_to_the_feature_they_name() {
        let run = Steering::new();
        let alpha = run.for_feature("alpha");
        let (events, emitted) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Notify::new()));
        let _serving = {
            let (events, emitted) = (Arc::clone(&events), Arc::clone(&emitted));
            serve_run(&run, move |f, e| {
                lock(&events).push((f, e));
                emitted.notify_one();
            })
        };
        // Pause and resume: the run's own desk answers, for every feature.
        assert!(run.request(Action::Pause, None, "ui").await.is_ok());
        assert!(alpha.is_paused());
        let again = run.request(Action::Pause, Some("alpha"), "ui").await;
        assert_eq!(again.unwrap_err(), Refusal::AlreadyPaused);
        // A feature whose engine is not running: the run refuses it.
        let r = run
            .request(Action::Cancel("s-1".into()), Some("beta"), "ui")
            .await;
        assert!(r
            .unwrap_err()
            .to_string()
            .contains("feature 'beta' runs no stories now"));
        // Cancel without a feature in a mega run: the run refuses it.
        let r = run.request(Action::Cancel("s-1".into()), None, "ui").await;
        assert!(
            r.as_ref()
                .unwrap_err()
                .to_string()
                .contains("say which feature"),
            "{r:?}"
        );
        // With alpha's engine taking requests, alpha's desk gets them.
        let _engine = Attached::new(&alpha);
        let asker = {
            let run = run.clone();
            tokio::spawn(async move {
                run.request(Action::Retry("s-2".into()), Some("alpha"), "cli")
                    .await
            })
        };
        alpha.woken().await;
        let taken = alpha.take();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].action, Action::Retry("s-2".into()));
        for req in taken {
            assert_eq!(req.feature.as_deref(), Some("alpha"));
            answer(req, Ok("queued".into()), |_, _| {});
        }
        assert_eq!(asker.await.unwrap(), Ok("queued".into()));
        // Resume wakes the engines that wait for it.
        assert!(run.request(Action::Resume, None, "ui").await.is_ok());
        alpha.woken().await;
        alpha.unpaused().await;
        // Every request of the run's desk was a control event.
        while lock(&events).len() < 5 {
            emitted.notified().await;
        }
        let said: Vec<(String, Option<String>, bool)> = lock(&events)
            .iter()
            .map(|(f, e)| match e {
                Event::Control { action, ok, .. } => (action.clone(), f.clone(), *ok),
                other => panic!("{other:?}"),
            })
            .collect();
        let want = [
            ("pause", None, true),
            ("pause", None, false),
            ("cancel", Some("beta"), false),
            ("cancel", None, false),
            ("resume", None, true),
        ];
        assert_eq!(
            said,
            want.map(|(a, f, ok)| (a.to_string(), f.map(str::to_string), ok))
                .to_vec()
        );
    }
}
