//! Step: queue for merge: one story at a time merges its branch into the
//! target branch (a `merge_started` event says when its turn came, local
//! or fleet attempt alike). A conflict fails the attempt as `merge_conflict` (the retry
//! starts from the new tip with the conflict in its prompt); a merge refused
//! to protect the user's uncommitted changes fails it as `target_dirty`.
//! Before a conflict fails the attempt, an agent may resolve it (the
//! `resolve_conflict` step; off with `--no-resolve`).

use cascade_git::merge::{MergeError, MergeOptions, MergeOutcome};

use super::commit::Committed;
use super::prepare_worktree::Worktree;
use super::{Attempt, Failure, Stop};
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
    let ctx = a.ctx;
    let _turn = turn(a).await;
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
    let _turn = turn(a).await;
    merge_once(a, committed).await
}

/// Waits for the story's turn in the serial merge queue and says that its
/// merge starts (held until the merge, and any resolution, is done).
async fn turn<'a>(a: &'a Attempt<'_>) -> tokio::sync::MutexGuard<'a, ()> {
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
