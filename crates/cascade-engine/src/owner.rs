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

use crate::ctx::Ctx;
use crate::events::{Event, EventSink};
use crate::state::{RunState, StoryState};
use crate::store::Store;

/// A change of one story's record.
pub(crate) type StoryChange = Box<dyn FnOnce(&mut StoryState) + Send>;
/// A change of the run's own fields.
pub(crate) type RunChange = Box<dyn FnOnce(&mut RunState) + Send>;

/// What a task asks of the state's owner.
pub(crate) enum Change {
    /// A transition of story `id`: applied and committed (with every
    /// amendment before it).
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
}

/// The sending side, in every story's context.
#[derive(Clone)]
pub(crate) struct StateTx(mpsc::UnboundedSender<Change>);

impl StateTx {
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
}

/// A channel to the owner of `store`, whose events go to `sink`.
pub(crate) fn channel(store: Store, sink: EventSink) -> (StateTx, Owner) {
    let (tx, rx) = mpsc::unbounded_channel();
    (StateTx(tx), Owner { store, sink, rx })
}

impl Owner {
    /// Applies one change. A failed commit is reported through `ctx` (a
    /// notice, or the end of the run when the disk is full) and never
    /// stops the work.
    pub fn apply(&mut self, ctx: &Ctx, change: Change) {
        let committed = match change {
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
        };
        if let Err(e) = committed {
            ctx.state_write_failed(&e);
        }
    }

    /// Applies every change waiting (before the owner reads the state).
    pub fn drain(&mut self, ctx: &Ctx) {
        while let Ok(change) = self.rx.try_recv() {
            self.apply(ctx, change);
        }
    }

    /// The next change, for a loop that waits on other things too.
    pub async fn next(&mut self) -> Option<Change> {
        self.rx.recv().await
    }

    /// Runs `work`, applying the changes it (and any other task) sends
    /// meanwhile; then applies those still waiting.
    pub async fn serve_while<F: Future>(&mut self, ctx: &Ctx, work: F) -> F::Output {
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                Some(change) = self.rx.recv() => self.apply(ctx, change),
                out = &mut work => {
                    self.drain(ctx);
                    return out;
                }
            }
        }
    }

    /// Announces `event` now, after the changes waiting (the run's last
    /// event, whose per-story rows the caller keeps: not copied).
    pub fn announce(&mut self, ctx: &Ctx, event: &Event) {
        self.drain(ctx);
        (self.sink)(event);
    }

    /// Writes the whole state as one document (the end of the run).
    pub fn finish(&mut self, ctx: &Ctx) {
        self.drain(ctx);
        if let Err(e) = self.store.finish() {
            ctx.state_write_failed(&e);
        }
        // The notice of a failed write.
        self.drain(ctx);
    }
}
