//! Step: queue for merge: one story at a time merges its branch into the
//! target branch. A conflict fails the attempt as `merge_conflict` (the retry
//! starts from the new tip with the conflict in its prompt); a merge refused
//! to protect the user's uncommitted changes fails it as `target_dirty`.

use cascade_git::merge::{MergeError, MergeOptions, MergeOutcome};

use super::commit::Committed;
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::retry::FailureKind;

/// The story is on the target branch.
pub(super) struct Merged {
    pub commit: String,
    pub fast_forward: bool,
}

pub(super) async fn run(a: &Attempt<'_>, committed: &Committed) -> Result<Merged, Stop> {
    let ctx = a.ctx;
    let id = a.id();
    let branch = a.branch;
    let _turn = ctx.merge_lock.lock().await;
    let paths = ctx.paths.clone();
    let (target, b) = (ctx.target_branch.clone(), branch.to_string());
    let msg = format!("Merge {b}: {id}: {}", a.story.title);
    let merged = tokio::task::spawn_blocking(move || {
        cascade_git::merge::merge_into(&paths, &target, &b, &msg, &MergeOptions::default())
    })
    .await
    .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?;
    match merged {
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
            Err(Failure::new(
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
            ))
            .into())
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
    }
}
