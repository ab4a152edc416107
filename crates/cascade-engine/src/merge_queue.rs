//! The serial merge queue of a run's target branch: who holds the turn,
//! the stories waiting for the next one, and what each is told. The types
//! only (the run's context holds one queue); the merge step and the
//! integration train (the `steps` module) work it.

use cascade_git::merge::{GroupMember, MergeError, MergeOutcome};

use crate::failure::Failure;

/// The serial merge queue of one target branch.
#[derive(Default)]
pub(crate) struct MergeQueue {
    /// Held by the merge in progress (and a local story's resolution).
    pub turn: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// Stories waiting to be merged by the next turn (the merge step's `queued`).
    waiting: std::sync::Mutex<Vec<Waiting>>,
    /// Told when a story joins `waiting`: a merge train in progress takes
    /// it aboard at once.
    pub arrived: tokio::sync::Notify,
    /// Resolutions waiting for the turn: while there is one, a train takes
    /// no one else aboard, so it ends and the resolution gets the turn.
    resolvers: std::sync::atomic::AtomicUsize,
}

impl MergeQueue {
    pub fn waiting(&self) -> std::sync::MutexGuard<'_, Vec<Waiting>> {
        // A plain list: consistent whatever panicked.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a story to `waiting` and tells a train in progress.
    pub fn wait(&self, waiting: Waiting) {
        self.waiting().push(waiting);
        self.arrived.notify_one();
    }

    /// The turn, for a conflict's resolution (a train in progress lets it
    /// have the turn next rather than taking new stories aboard).
    pub async fn turn_for_resolution(&self) -> tokio::sync::MutexGuard<'_, ()> {
        use std::sync::atomic::Ordering;
        self.resolvers.fetch_add(1, Ordering::SeqCst);
        let turn = self.turn.lock().await;
        self.resolvers.fetch_sub(1, Ordering::SeqCst);
        turn
    }

    /// Whether a train in progress may take new stories aboard.
    pub fn may_board(&self) -> bool {
        self.resolvers.load(std::sync::atomic::Ordering::SeqCst) == 0
    }
}

/// A story waiting for its merge, and where its outcome goes.
pub(crate) struct Waiting {
    pub story: String,
    pub attempt: u32,
    pub member: GroupMember,
    /// Who the gates of its merge run for (integration gating).
    pub gated: Gated,
    /// The commit its work started from.
    pub base: String,
    pub reply: tokio::sync::oneshot::Sender<Landing>,
}

/// What the queue's turn did with a waiting story.
pub(crate) enum Landing {
    /// Merged (or not) as `merge_group` says.
    Merge(Result<MergeOutcome, MergeError>),
    /// Not merged: its merge failed integration gating, or the gating
    /// could not run.
    Failed(Failure),
    /// The run was cancelled while its merge was gated.
    Interrupted,
}

/// Whose merge is gated: the story, its attempt and its environment (what
/// its own gates ran with).
#[derive(Clone)]
pub(crate) struct Gated {
    pub story: String,
    pub attempt: u32,
    pub env: Vec<(String, String)>,
}
