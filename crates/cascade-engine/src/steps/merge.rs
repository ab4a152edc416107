//! Step: queue for merge: one story at a time merges its branch into the
//! target branch (a `merge_started` event says when its turn came, local
//! or fleet attempt alike). A conflict fails the attempt as `merge_conflict` (the retry
//! starts from the new tip with the conflict in its prompt); a merge refused
//! to protect the user's uncommitted changes fails it as `target_dirty`.
//! Before a conflict fails the attempt, an agent may resolve it (the
//! `resolve_conflict` step; off with `--no-resolve`).

use cascade_git::merge::{MergeError, MergeOptions, MergeOutcome};
use cascade_git::objects::Packed;
use cascade_git::GitError;

use super::commit::Committed;
use super::prepare_worktree::Worktree;
use super::{Attempt, Failure, Stop};
use crate::engine::Ctx;
use crate::events::Event;
use crate::retry::FailureKind;

/// The story is on the target branch.
pub(super) struct Merged {
    pub commit: String,
    pub fast_forward: bool,
}

pub(super) async fn run(
    a: &Attempt<'_>,
    wt: &Worktree,
    committed: &Committed,
) -> Result<Merged, Stop> {
    let mut turn = turn(a).await;
    let merged = merge_with_resolution(a, wt, committed).await;
    if merged.is_ok() {
        pack_when_due(a.ctx, &mut turn).await;
    }
    merged
}

async fn merge_with_resolution(
    a: &Attempt<'_>,
    wt: &Worktree,
    committed: &Committed,
) -> Result<Merged, Stop> {
    let ctx = a.ctx;
    match merge_once(a, committed).await {
        // An agent resolves the conflict (unless --no-resolve), on the story
        // branch, gated; then the branch merges (a fast-forward now). The
        // queue is held meanwhile, so the target cannot move again.
        Err(Conflict(files, failure)) if !ctx.options.no_resolve => {
            match super::resolve_conflict::run(a, wt, &files).await {
                Ok(resolved) => {
                    let again = Committed {
                        commit: resolved.commit,
                    };
                    merge_once(a, &again)
                        .await
                        .map_err(|Conflict(_, f)| Stop::Failed(f))?
                }
                Err(why) => Err(unresolved(failure, why)),
            }
        }
        Err(Conflict(_, failure)) => Err(failure.into()),
        Ok(done) => done,
    }
}

/// One turn of the merge queue without a resolution (the fleet: a conflict
/// is resolved on a worker, outside the queue; see the `remote` step).
pub(super) async fn queued(
    a: &Attempt<'_>,
    committed: &Committed,
) -> Result<Result<Merged, Stop>, Conflict> {
    let mut turn = turn(a).await;
    let merged = merge_once(a, committed).await;
    if matches!(merged, Ok(Ok(_))) {
        pack_when_due(a.ctx, &mut turn).await;
    }
    merged
}

/// The merge queue's own bookkeeping, kept behind its lock.
#[derive(Debug, Default)]
pub(crate) struct MergeQueue {
    /// Merges done by this run.
    merges: u64,
    /// Merges since the loose objects were last packed.
    since_pack: u64,
    /// The packing of loose objects running beside the queue, if any.
    packing: Option<tokio::task::JoinHandle<Result<Packed, GitError>>>,
}

/// Merges between two packings of the loose objects, at least.
const PACK_EVERY: u64 = 200;

impl MergeQueue {
    /// Counts a merge; says whether the loose objects are due for packing:
    /// every [`PACK_EVERY`] merges, and later every tenth of the merges
    /// so far, so that a run of n stories leaves about 10 ln(n / 200) packs
    /// (each object packed once) rather than one per 200 stories.
    fn merged(&mut self) -> bool {
        self.merges += 1;
        self.since_pack += 1;
        let due = self.since_pack >= PACK_EVERY.max(self.merges / 10);
        if due {
            self.since_pack = 0;
        }
        due
    }
}

/// After a merge, in the queue: starts packing the repository's loose
/// objects when due (see [`cascade_git::objects::pack_loose`]; libgit2
/// never does, and every later read of a loose object costs a file). The
/// packing runs beside the queue, not in it: it is safe beside merges
/// (only what it listed is removed, once packed), and holding the queue
/// for it would hold every waiting story. One at a time: when the last one
/// is still running, these objects wait for the next.
async fn pack_when_due(ctx: &Ctx, queue: &mut MergeQueue) {
    if !queue.merged() {
        return;
    }
    if let Some(previous) = queue.packing.take() {
        if !previous.is_finished() {
            queue.packing = Some(previous);
            return;
        }
        report_packing(ctx, previous.await);
    }
    let paths = ctx.paths.clone();
    queue.packing = Some(tokio::task::spawn_blocking(move || {
        cascade_git::objects::pack_loose(&paths)
    }));
}

/// The end of the run: waits for a packing still running, so the
/// process's exit does not cut it off (that would leave a temporary pack
/// file behind).
pub(crate) async fn finish_packing(ctx: &Ctx) {
    let running = ctx.merge_lock.lock().await.packing.take();
    if let Some(packing) = running {
        report_packing(ctx, packing.await);
    }
}

/// Trouble packing is a notice: the objects stay loose and the run goes on.
fn report_packing(ctx: &Ctx, packed: Result<Result<Packed, GitError>, tokio::task::JoinError>) {
    let error = match packed {
        Ok(Ok(_)) => return,
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    ctx.emit(Event::Notice {
        message: format!(
            "could not pack the repository's loose objects (they stay loose): {error}"
        ),
    });
}

/// Waits for the story's turn in the serial merge queue and says that its
/// merge starts (held until the merge, and any resolution, is done).
async fn turn<'a>(a: &'a Attempt<'_>) -> tokio::sync::MutexGuard<'a, MergeQueue> {
    let turn = a.ctx.merge_lock.lock().await;
    a.ctx.emit(Event::MergeStarted {
        story: a.id().to_string(),
        attempt: a.number,
        branch: a.branch.to_string(),
        target_branch: a.ctx.target_branch.clone(),
    });
    turn
}

/// A merge that conflicted: the files, and the failure it is without resolution.
pub(super) struct Conflict(pub Vec<String>, pub Failure);

/// How a conflict ends when its resolution did not work out: the
/// conflict's failure (`merge_conflict`) saying why.
pub(super) fn unresolved(conflict: Failure, why: Stop) -> Stop {
    match why {
        Stop::Failed(why) => Failure {
            error: format!("{}; {}", conflict.error, why.error),
            ..conflict
        }
        .into(),
        stop => stop,
    }
}

/// One merge of the story branch into the target branch.
async fn merge_once(
    a: &Attempt<'_>,
    committed: &Committed,
) -> Result<Result<Merged, Stop>, Conflict> {
    let ctx = a.ctx;
    let id = a.id();
    let branch = a.branch;
    let paths = ctx.paths.clone();
    let (target, b) = (ctx.target_branch.clone(), branch.to_string());
    let msg = format!("Merge {b}: {id}: {}", a.story.title);
    let merged = match tokio::task::spawn_blocking(move || {
        cascade_git::merge::merge_into(&paths, &target, &b, &msg, &MergeOptions::default())
    })
    .await
    {
        Ok(m) => m,
        Err(e) => return Ok(Err(Failure::new(FailureKind::Setup, e.to_string()).into())),
    };
    Ok(match merged {
        Ok(MergeOutcome::FastForward(oid)) => Ok(Merged {
            commit: oid.to_string(),
            fast_forward: true,
        }),
        Ok(MergeOutcome::Merged(oid)) => Ok(Merged {
            commit: oid.to_string(),
            fast_forward: false,
        }),
        Ok(MergeOutcome::UpToDate) => Ok(Merged {
            commit: committed.commit.clone(),
            fast_forward: true,
        }),
        Ok(MergeOutcome::Conflict { files }) => {
            ctx.emit(Event::MergeConflict {
                story: id.to_string(),
                branch: branch.to_string(),
                files: files.clone(),
            });
            let failure = Failure::new(
                FailureKind::MergeConflict,
                format!(
                    "merge conflict with '{}' in {}",
                    ctx.target_branch,
                    files.join(", ")
                ),
            )
            .with_excerpt(format!(
                "Your previous change conflicted with work merged meanwhile into '{}' in: {}. Start from the current code and integrate with it.",
                ctx.target_branch,
                files.join(", ")
            ));
            return Err(Conflict(files, failure));
        }
        // The user's uncommitted changes (--allow-dirty) are in the way: the
        // agent's work passed its gates and stays on its branch; nothing of
        // the user's was touched. Not retried (see FailureKind::TargetDirty).
        Err(e @ MergeError::TargetDirty { .. }) => Err(Failure::new(
            FailureKind::TargetDirty,
            format!(
                "{e}; the story's work passed its gates and is kept on branch '{branch}' (after committing or stashing, merge it with `git merge {branch}`)"
            ),
        )
        .into()),
        Err(e) => Err(Failure::new(FailureKind::Setup, e.to_string()).into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_objects_are_packed_every_200_merges_then_every_tenth_of_the_run() {
        let mut queue = MergeQueue::default();
        let due: Vec<u64> = (1..=100_000u64).filter(|_| queue.merged()).collect();
        assert_eq!(&due[..3], &[200, 400, 600]);
        for pair in due.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap >= PACK_EVERY, "{pair:?}");
            assert!(gap <= PACK_EVERY.max(pair[1] / 10) + 1, "{pair:?}");
        }
        // Each object is packed once, into one of few packs: about
        // 10 ln(100,000 / 2,000) + 2,000 / 200.
        assert!((40..=60).contains(&due.len()), "{} packs", due.len());
    }
}
