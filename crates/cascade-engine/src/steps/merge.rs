//! Step: queue for merge: one turn at a time merges into the target branch
//! (a `merge_started` event says when a story's turn came, local or fleet
//! attempt alike). Without integration gating a local story takes a turn
//! of its own (a conflict's resolution holds it); fleet stories that wait
//! together merge together in one turn (see [`queued`]). A conflict fails the attempt as `merge_conflict` (the retry
//! starts from the new tip with the conflict in its prompt); a merge refused
//! to protect the user's uncommitted changes fails it as `target_dirty`.
//! Before a conflict fails the attempt, an agent may resolve it (the
//! `resolve_conflict` step; off with `--no-resolve`). With integration
//! gating (the default; off with `--integration trust`) local and fleet
//! stories alike wait together and the turn gates them as merged before
//! the target moves (the `train` step).

use crate::owner::{Ask, Change};
use cascade_git::merge::{
    merge_group, merge_into, GroupMember, MergeError, MergeOptions, MergeOutcome,
};

use super::commit::Committed;
use super::prepare_worktree::Worktree;
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::merge_queue::{Gated, Landing, Waiting};
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
    // With gating, stories that wait together are gated as merged and
    // merged together (the merge train, see the `train` step).
    if ctx.options.integration == crate::config::Integration::Gate {
        return match queued(a, committed, &wt.base).await {
            Ok(done) => done,
            // The resolution holds the turn, so the target cannot move
            // before the resolved branch (which then contains the tip, a
            // fast-forward whose tree the resolution gated) merges.
            Err(Conflict(files, failure)) if !ctx.options.no_resolve => {
                let _turn = ctx.merge_queue.turn_for_resolution().await;
                resolved(a, wt, &files, failure).await
            }
            Err(Conflict(_, failure)) => Err(failure.into()),
        };
    }
    let _turn = turn(a).await;
    match merge_once(a, committed).await {
        // An agent resolves the conflict (unless --no-resolve), on the story
        // branch, gated; then the branch merges (a fast-forward now). The
        // queue is held meanwhile, so the target cannot move again.
        Err(Conflict(files, failure)) if !ctx.options.no_resolve => {
            resolved(a, wt, &files, failure).await
        }
        Err(Conflict(_, failure)) => Err(failure.into()),
        Ok(done) => done,
    }
}

/// A conflict resolved by an agent (the `resolve_conflict` step), then the
/// resolution merged; the caller holds the turn.
async fn resolved(
    a: &Attempt<'_>,
    wt: &Worktree,
    files: &[String],
    conflict: Failure,
) -> Result<Merged, Stop> {
    match super::resolve_conflict::run(a, wt, files).await {
        Ok(resolved) => {
            let again = Committed {
                commit: resolved.commit,
            };
            merge_once(a, &again)
                .await
                .map_err(|Conflict(_, f)| Stop::Failed(f))?
        }
        Err(why) => Err(unresolved(conflict, why)),
    }
}

/// One turn of the merge queue without a resolution (the fleet: a conflict
/// is resolved on a worker, outside the queue; see the `remote` step).
/// Stories that wait for the queue together merge together: whoever gets
/// the turn merges every story waiting at that moment as one group
/// ([`cascade_git::merge::merge_group`]: the same commits, one worktree
/// update and one branch move), so a busy queue pays its fixed costs once
/// per turn instead of once per story.
pub(super) async fn queued(
    a: &Attempt<'_>,
    committed: &Committed,
    base: &str,
) -> Result<Result<Merged, Stop>, Conflict> {
    let ctx = a.ctx;
    let queue = &ctx.merge_queue;
    let (reply, mut answer) = tokio::sync::oneshot::channel();
    queue.wait(Waiting {
        story: a.id().to_string(),
        attempt: a.number,
        member: GroupMember {
            source_branch: a.branch.to_string(),
            message: message(a),
        },
        gated: Gated::of(a),
        base: base.to_string(),
        reply,
    });
    let merged = loop {
        let turn = tokio::select! {
            biased;
            merged = &mut answer => break merged.ok(),
            turn = std::sync::Arc::clone(&queue.turn).lock_owned() => turn,
        };
        match answer.try_recv() {
            // The turn before this one took this story along.
            Ok(merged) => break Some(merged),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => lead(ctx, turn).await,
            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => break None,
        }
    };
    match merged {
        Some(Landing::Merge(merged)) => outcome(a, committed, merged),
        Some(Landing::Failed(failure)) => Ok(Err(failure.into())),
        Some(Landing::Interrupted) => Ok(Err(Stop::Interrupted)),
        None => Ok(Err(Failure::new(
            FailureKind::Setup,
            "the merge queue stopped before merging the story".to_string(),
        )
        .into())),
    }
}

/// Waits for the story's turn in the serial merge queue and says that its
/// merge starts (held until the merge, and any resolution, is done).
async fn turn<'a>(a: &'a Attempt<'_>) -> tokio::sync::MutexGuard<'a, ()> {
    let turn = a.ctx.merge_queue.turn.lock().await;
    a.ctx.emit(Event::MergeStarted {
        story: a.id().to_string(),
        attempt: a.number,
        branch: a.branch.to_string(),
        target_branch: a.ctx.target_branch.clone(),
    });
    turn
}

/// Merges every story waiting, as one group, holding the turn until the
/// merges are done (even if the task that took the turn is cancelled: the
/// merges run on, and their stories get their outcomes).
async fn lead(ctx: &std::sync::Arc<crate::ctx::Ctx>, turn: tokio::sync::OwnedMutexGuard<()>) {
    let group = take_waiting(ctx);
    if group.is_empty() {
        return;
    }
    if ctx.options.integration == crate::config::Integration::Gate {
        let ctx = std::sync::Arc::clone(ctx);
        let _ = tokio::spawn(async move {
            let _turn = turn;
            super::train::run(&ctx, group).await;
        })
        .await;
        return;
    }
    let (members, replies): (Vec<GroupMember>, Vec<_>) =
        group.into_iter().map(|w| (w.member, w.reply)).unzip();
    let (paths, target) = (ctx.paths.clone(), ctx.target_branch.clone());
    let _ = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        let outcomes = merge_group(&paths, &target, &members, &MergeOptions::default());
        for (reply, merged) in replies.into_iter().zip(outcomes) {
            let _ = reply.send(Landing::Merge(merged));
        }
    })
    .await;
}

/// The stories waiting for the queue, taken by the turn in progress, each
/// told by a `merge_started` event. A story whose task is gone (cancelled
/// while it waited) is not merged, as it would not have been had it waited
/// for the turn itself.
pub(super) fn take_waiting(ctx: &crate::ctx::Ctx) -> Vec<Waiting> {
    let group = std::mem::take(&mut *ctx.merge_queue.waiting());
    let group: Vec<Waiting> = group.into_iter().filter(|w| !w.reply.is_closed()).collect();
    for w in &group {
        ctx.emit(Event::MergeStarted {
            story: w.story.clone(),
            attempt: w.attempt,
            branch: w.member.source_branch.clone(),
            target_branch: ctx.target_branch.clone(),
        });
    }
    group
}

/// The message of the story's merge commit.
fn message(a: &Attempt<'_>) -> String {
    format!("Merge {}: {}: {}", a.branch, a.id(), a.story.title)
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
    let paths = ctx.paths.clone();
    let (target, b) = (ctx.target_branch.clone(), a.branch.to_string());
    let msg = message(a);
    match tokio::task::spawn_blocking(move || {
        merge_into(&paths, &target, &b, &msg, &MergeOptions::default())
    })
    .await
    {
        Ok(merged) => outcome(a, committed, merged),
        Err(e) => Ok(Err(Failure::new(FailureKind::Setup, e.to_string()).into())),
    }
}

/// What the story's merge means for its attempt.
// The shape of the async steps it serves (which the lint does not check);
// the large `Err` is a conflict, once per conflicting merge.
#[allow(clippy::result_large_err)]
fn outcome(
    a: &Attempt<'_>,
    committed: &Committed,
    merged: Result<MergeOutcome, MergeError>,
) -> Result<Result<Merged, Stop>, Conflict> {
    let ctx = a.ctx;
    let (id, branch) = (a.id(), a.branch);
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
            // The scheduler keeps the story apart from others in these
            // files for the rest of the run, and the record keeps them
            // for a resume of it (written with the attempt's end).
            ctx.state.send(Change::Ask(Ask::Touches {
                id: id.to_string(),
                files: files.clone(),
            }));
            let kept = files.clone();
            ctx.state.send(Change::AmendStory {
                id: id.to_string(),
                change: Box::new(move |s| {
                    for f in kept {
                        if !s.conflicted_files.contains(&f) {
                            s.conflicted_files.push(f);
                        }
                    }
                }),
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
        Err(e) => {
            // Merging writes the target's objects and files: a full disk
            // stops the run.
            ctx.halt_if_disk_full(&ctx.paths.common_dir, &e);
            Err(refused(&e, branch).into())
        }
    })
}

/// The failure of a merge that could not be made.
pub(super) fn refused(e: &MergeError, branch: &str) -> Failure {
    match e {
        // The user's uncommitted changes (--allow-dirty) are in the way: the
        // agent's work passed its gates and stays on its branch; nothing of
        // the user's was touched. Not retried (see FailureKind::TargetDirty).
        MergeError::TargetDirty { .. } => Failure::new(
            FailureKind::TargetDirty,
            format!(
                "{e}; the story's work passed its gates and is kept on branch '{branch}' (after committing or stashing, merge it with `git merge {branch}`)"
            ),
        ),
        e => Failure::new(FailureKind::Setup, e.to_string()),
    }
}
