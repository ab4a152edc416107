//! The run state's one owner. The run's loop holds the state's store and
//! the event sink; story tasks, steps and the fleet executor send it typed
//! [`Change`]s over a channel ([`StateTx`], in the story context): a
//! transition (committed at once), an amendment (kept in memory until the
//! next transition), an event, or a question about the state answered on a
//! oneshot. Only the owner calls the store's `commit` and the sink.
//!
//! Changes apply in the order they were sent, and an event after the
//! changes sent before it: what a task announces is on disk by then, as
//! when it wrote the state itself. The owner applies changes whenever its
//! loop waits ([`Owner::serve_while`], the engine's `drive` loop) and
//! before it reads the state itself ([`Owner::drain`]).

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

use crate::events::{Event, EventSink};
use crate::scheduler::{NodeState, Scheduler};
use crate::state::{RunState, StateError, StoryState};
use crate::store::Store;
use crate::transition::Transition;

/// A change of one story's record.
pub(crate) type StoryChange = Box<dyn FnOnce(&mut StoryState) + Send>;
/// A change of the run's own fields.
pub(crate) type RunChange = Box<dyn FnOnce(&mut RunState) + Send>;

/// What a task asks of the state's owner.
pub(crate) enum Change {
    /// One of the story loop's transitions of story `id`: applied and
    /// committed (with every amendment before it; a start waits for the
    /// next, see [`Transition::commits`]).
    Transition { id: String, transition: Transition },
    /// Another change of story `id` that is written at once (a step's
    /// record: the agent's pid, a cooldown).
    Story { id: String, change: StoryChange },
    /// A detail of story `id`'s record (log paths, gate results): in
    /// memory until the next transition, which always follows.
    AmendStory { id: String, change: StoryChange },
    /// A transition of the run's own fields (committed).
    Run(RunChange),
    /// A detail of the run's own fields (written with the next transition).
    AmendRun(RunChange),
    /// An event, announced after the changes sent before it.
    Event(Event),
    /// An event made from the state when its turn comes (a story's
    /// charged attempts, counted over every record).
    EventFrom(Box<dyn FnOnce(&RunState) -> Event + Send>),
    /// A look at the state; the closure answers on its own channel (see
    /// [`StateTx::read`]) or acts on what it sees (the run's budget).
    Read(Box<dyn FnOnce(&RunState) + Send>),
    /// A request of the run's loop, which holds the scheduler (kept for
    /// it: [`Owner::take_asks`]).
    Ask(Ask),
}

/// What a story task asks of the run's loop.
pub(crate) enum Ask {
    /// Story `id` waits for the stories `until` to end, and lends its slot
    /// of parallelism meanwhile; `resume` is answered once they have ended
    /// and it has a slot again (dropped unanswered when the run ends
    /// first).
    Lend {
        id: String,
        until: Vec<String>,
        resume: oneshot::Sender<()>,
    },
    /// Story `id`'s merge conflicted in `files`: for the rest of the run
    /// they count among its files, which the eager scheduler keeps apart.
    Touches { id: String, files: Vec<String> },
}

/// Who hears of a state write that failed (the run's context: a notice,
/// or the end of the run when the disk is full).
pub(crate) trait WriteFailed: Sync {
    fn state_write_failed(&self, e: &StateError);
}

impl<T: WriteFailed + Send> WriteFailed for std::sync::Arc<T> {
    fn state_write_failed(&self, e: &StateError) {
        (**self).state_write_failed(e);
    }
}

/// The sending side, in every story's context.
#[derive(Clone)]
pub(crate) struct StateTx(mpsc::UnboundedSender<Change>);

impl StateTx {
    /// One of the story loop's transitions of story `id`.
    pub fn transition(&self, id: &str, transition: Transition) {
        self.send(Change::Transition {
            id: id.to_string(),
            transition,
        });
    }

    /// A change of story `id` written at once (see [`Change::Story`]).
    pub fn story(&self, id: &str, f: impl FnOnce(&mut StoryState) + Send + 'static) {
        self.send(Change::Story {
            id: id.to_string(),
            change: Box::new(f),
        });
    }

    /// Announces `event` after the changes sent before.
    pub fn emit(&self, event: Event) {
        self.send(Change::Event(event));
    }

    /// Records and announces the stories a failure blocked (`blocked`, from
    /// [`Scheduler::fail`]; `stories` are the ids in scheduler order), each
    /// with the dependencies that block it.
    pub fn blocked(&self, sched: &Scheduler, stories: &[String], blocked: &[usize]) {
        for &b in blocked {
            let by: Vec<String> = sched
                .deps(b)
                .iter()
                .filter(|&&d| matches!(sched.state(d), NodeState::Failed | NodeState::Blocked))
                .map(|&d| stories[d].clone())
                .collect();
            let blocked_by = by.clone();
            self.transition(&stories[b], Transition::Blocked { by: blocked_by });
            self.emit(Event::StoryBlocked {
                story: stories[b].clone(),
                blocked_by: by,
            });
        }
    }

    /// Sends `change` to the owner. Once the run has ended (the owner is
    /// gone) there is nobody to tell: the change is dropped.
    pub fn send(&self, change: Change) {
        let _ = self.0.send(change);
    }

    /// The answer of `f` over the state as the owner has it once the
    /// changes sent before are applied; `None` when the run has ended.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&RunState) -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.send(Change::Read(Box::new(move |st| {
            let _ = tx.send(f(st));
        })));
        rx.await.ok()
    }

    /// A sink whose events reach the owner in order with the changes (what
    /// an executor announces).
    pub fn sink(&self) -> EventSink {
        let tx = self.clone();
        std::sync::Arc::new(move |e: &Event| tx.send(Change::Event(e.clone())))
    }
}

/// The receiving side: the store and the sink, held by the run's loop.
pub(crate) struct Owner {
    pub store: Store,
    sink: EventSink,
    rx: mpsc::UnboundedReceiver<Change>,
    /// Requests of the loop not yet taken by it.
    asks: Vec<Ask>,
}

/// A channel to the owner of `store`, whose events go to `sink`.
pub(crate) fn channel(store: Store, sink: EventSink) -> (StateTx, Owner) {
    let (tx, rx) = mpsc::unbounded_channel();
    let owner = Owner {
        store,
        sink,
        rx,
        asks: Vec::new(),
    };
    (StateTx(tx), owner)
}

impl Owner {
    /// Applies one change. A failed commit is reported to `on` (a notice,
    /// or the end of the run when the disk is full) and never stops the
    /// work.
    pub fn apply(&mut self, on: &dyn WriteFailed, change: Change) {
        let committed = match change {
            Change::Transition { id, transition } => {
                let commits = transition.commits();
                self.store.change_story(&id, |s| transition.apply(s));
                if commits {
                    self.store.commit()
                } else {
                    Ok(())
                }
            }
            Change::Story { id, change } => {
                self.store.change_story(&id, change);
                self.store.commit()
            }
            Change::AmendStory { id, change } => {
                self.store.change_story(&id, change);
                Ok(())
            }
            Change::Run(change) => {
                self.store.change_run(change);
                self.store.commit()
            }
            Change::AmendRun(change) => {
                self.store.change_run(change);
                Ok(())
            }
            Change::Event(event) => {
                (self.sink)(&event);
                Ok(())
            }
            Change::EventFrom(make) => {
                (self.sink)(&make(&self.store));
                Ok(())
            }
            Change::Read(look) => {
                look(&self.store);
                Ok(())
            }
            Change::Ask(ask) => {
                self.asks.push(ask);
                Ok(())
            }
        };
        if let Err(e) = committed {
            on.state_write_failed(&e);
        }
    }

    /// Applies every change waiting (before the owner reads the state).
    pub fn drain(&mut self, on: &dyn WriteFailed) {
        while let Ok(change) = self.rx.try_recv() {
            self.apply(on, change);
        }
    }

    /// Whether a task asked something of the loop since the last
    /// [`Owner::take_asks`].
    pub fn has_asks(&self) -> bool {
        !self.asks.is_empty()
    }

    /// What tasks asked of the loop since the last call, in order.
    pub fn take_asks(&mut self) -> Vec<Ask> {
        std::mem::take(&mut self.asks)
    }

    /// The next change, for a loop that waits on other things too.
    pub async fn next(&mut self) -> Option<Change> {
        self.rx.recv().await
    }

    /// Runs `work`, applying the changes it (and any other task) sends
    /// meanwhile; then applies those still waiting.
    pub async fn serve_while<F: Future>(&mut self, on: &dyn WriteFailed, work: F) -> F::Output {
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                Some(change) = self.rx.recv() => self.apply(on, change),
                out = &mut work => {
                    self.drain(on);
                    return out;
                }
            }
        }
    }

    /// Announces `event` now, after the changes waiting (the run's last
    /// event, whose per-story rows the caller keeps: not copied).
    pub fn announce(&mut self, on: &dyn WriteFailed, event: &Event) {
        self.drain(on);
        (self.sink)(event);
    }

    /// Writes the whole state as one document (the end of the run).
    pub fn finish(&mut self, on: &dyn WriteFailed) {
        self.drain(on);
        if let Err(e) = self.store.finish() {
            on.state_write_failed(&e);
        }
        // The notice of a failed write.
        self.drain(on);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::state::StoryStatus;

    /// Collects the failed writes a test expects none of.
    #[derive(Default)]
    struct Failures(Mutex<Vec<String>>);

    impl WriteFailed for Failures {
        fn state_write_failed(&self, e: &StateError) {
            self.0.lock().unwrap().push(e.to_string());
        }
    }

    #[tokio::test]
    async fn what_a_task_announces_is_on_disk_and_what_it_reads_is_what_it_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = crate::store::db_path(dir.path());
        let state = RunState::new(
            "r1".into(),
            "prd.json".into(),
            "main".into(),
            dir.path().display().to_string(),
            ["a".to_string(), "b".to_string()],
        );
        let store = Store::open(state, &path).unwrap();
        // At each event, the status of `a` in the file as the sink sees it.
        let seen: Arc<Mutex<Vec<Option<StoryStatus>>>> = Arc::default();
        let sink: EventSink = {
            let (seen, path) = (Arc::clone(&seen), path.clone());
            Arc::new(move |_: &Event| {
                let on_disk = crate::state::RunState::load(&path).unwrap();
                let a = on_disk.and_then(|st| st.story("a").map(|s| s.status));
                seen.lock().unwrap().push(a);
            })
        };
        let (tx, mut owner) = channel(store, sink);
        let failures = Failures::default();
        let task = {
            let tx = tx.clone();
            tokio::spawn(async move {
                tx.send(Change::AmendStory {
                    id: "a".into(),
                    change: Box::new(|s| s.branch = Some("cascade/a".into())),
                });
                tx.story("a", |s| s.status = StoryStatus::Complete);
                tx.emit(Event::Notice {
                    message: "a merged".into(),
                });
                tx.read(|st| st.story("a").map(|s| (s.status, s.branch.clone())))
                    .await
            })
        };
        let read = owner.serve_while(&failures, task).await.unwrap();
        assert_eq!(
            read,
            Some(Some((StoryStatus::Complete, Some("cascade/a".into()))))
        );
        assert_eq!(*seen.lock().unwrap(), vec![Some(StoryStatus::Complete)]);
        assert!(failures.0.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn blocked_stories_are_recorded_and_announced_with_what_blocks_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = crate::store::db_path(dir.path());
        let ids = vec!["a".to_string(), "b".to_string()];
        let state = RunState::new(
            "r1".into(),
            "prd.json".into(),
            "main".into(),
            dir.path().display().to_string(),
            ids.clone(),
        );
        let events: Arc<Mutex<Vec<Event>>> = Arc::default();
        let sink: EventSink = {
            let events = Arc::clone(&events);
            Arc::new(move |e: &Event| events.lock().unwrap().push(e.clone()))
        };
        let (tx, mut owner) = channel(Store::open(state, &path).unwrap(), sink);
        let node = |deps: Vec<usize>, file_index| crate::scheduler::NodeSpec {
            deps,
            priority: 1,
            file_index,
            remaining_path: 1,
            done: false,
            files: Vec::new(),
        };
        let nodes = vec![node(vec![], 0), node(vec![0], 1)];
        let mut sched = Scheduler::new(nodes, crate::scheduler::Discipline::Batch, 1, false);
        assert_eq!(sched.next_ready(), Some(0));
        let blocked = sched.fail(0);
        tx.blocked(&sched, &ids, &blocked);
        owner.drain(&Failures::default());
        let b = owner.store.story("b").unwrap();
        assert_eq!(b.status, StoryStatus::Blocked);
        assert_eq!(b.blocked_by, vec!["a".to_string()]);
        let events = events.lock().unwrap();
        assert!(
            matches!(&events[..], [Event::StoryBlocked { story, blocked_by }] if story == "b" && blocked_by == &["a".to_string()]),
            "{events:?}"
        );
    }
}
