//! Landing a feature: the `--no-ff` merge into the target branch (never twice:
//! a branch already contained in the target counts as merged), the gates on
//! the merged target, and the cleanup of a landed feature's worktree and
//! branch after its findings and PRD are kept.

use std::sync::Arc;

use super::events::MegaStep;
use super::findings;
use super::ports::MegaPorts;
use super::run::Ctx;
use super::state::{now, FailureKind, FeatureStatus, TargetGatesRecord};

/// Merges the feature branch into the target (`--no-ff`). Returns whether it landed.
pub(super) async fn merge_feature<P: MegaPorts>(ctx: &Arc<Ctx<P>>, name: &str) -> bool {
    ctx.update(name, |f| f.status = FeatureStatus::Merging);
    let branch = cascade_git::worktree::branch_name(None, name);
    let title = ctx
        .specs
        .get(name)
        .map(|s| s.title.clone())
        .unwrap_or_default();
    let message = if title.is_empty() {
        format!("Merge feature '{name}' ({branch})")
    } else {
        format!("Merge feature '{name}' ({branch}): {title}")
    };
    let paths = ctx.paths.clone();
    let target = ctx.target.clone();
    let b = branch.clone();
    let result = tokio::task::spawn_blocking(move || {
        // Resume: a feature already in the target is not merged twice.
        if let Some(tip) = cascade_git::merge::branch_tip(&paths, &b).map_err(|e| e.to_string())? {
            if cascade_git::merge::is_merged(&paths, tip, &target).map_err(|e| e.to_string())? {
                let head = cascade_git::merge::branch_tip(&paths, &target)
                    .map_err(|e| e.to_string())?
                    .map(|o| o.to_string())
                    .unwrap_or_default();
                return Ok(Ok(head));
            }
        }
        match cascade_git::merge::merge_into(
            &paths,
            &target,
            &b,
            &message,
            &cascade_git::merge::MergeOptions { ff_allowed: false },
        ) {
            Ok(cascade_git::merge::MergeOutcome::Conflict { files }) => Ok(Err(files)),
            Ok(outcome) => Ok(Ok(outcome
                .new_tip()
                .map(|o| o.to_string())
                .unwrap_or_default())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
    .unwrap_or_else(|e| Err(format!("merge task failed: {e}")));
    match result {
        Ok(Ok(commit)) => {
            ctx.update(name, |f| {
                f.status = FeatureStatus::Complete;
                f.merge_commit = Some(commit.clone());
                f.finished_at = Some(now());
            });
            ctx.emit(MegaStep::FeatureMerged {
                feature: name.to_string(),
                branch,
                target_branch: ctx.target.clone(),
                commit,
            });
            true
        }
        Ok(Err(files)) => {
            let message = format!(
                "merging '{branch}' into '{}' conflicts in {}; the branch is kept: resolve the conflict on it (or in its worktree) and run `cascade mega resume`",
                ctx.target,
                files.join(", ")
            );
            ctx.fail(name, FailureKind::MergeConflict, message, files);
            false
        }
        Err(e) => {
            ctx.fail(
                name,
                FailureKind::Error,
                format!("merging '{branch}' into '{}' failed: {e}", ctx.target),
                vec![],
            );
            false
        }
    }
}

use super::run::TARGET_GATES_BRANCH as GATES_BRANCH;

/// Re-runs the gates on the merged target: where it is checked out, else in
/// a throwaway worktree at its tip. `None` when they could not run (noted).
pub(super) async fn run_target_gates<P: MegaPorts>(
    ctx: &Arc<Ctx<P>>,
    batch: usize,
) -> Option<bool> {
    let (dir, scratch) = match cascade_git::merge::checked_out_in(&ctx.paths, &ctx.target) {
        Ok(Some(d)) => (d, false),
        Ok(None) => {
            let paths = ctx.paths.clone();
            let target = ctx.target.clone();
            let made = tokio::task::spawn_blocking(move || {
                let path = cascade_git::worktree::path_for(&paths, GATES_BRANCH);
                cascade_git::worktree::create(&paths, &path, GATES_BRANCH, &target)
                    .map(|_| path)
                    .map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            match made {
                Ok(d) => (d, true),
                Err(e) => {
                    ctx.emit(MegaStep::MegaNotice {
                        message: format!(
                            "target branch '{}' is not checked out and no worktree could be made for its gates ({e}); gates not re-run after batch {batch}",
                            ctx.target
                        ),
                    });
                    return None;
                }
            }
        }
        Err(e) => {
            ctx.emit(MegaStep::MegaNotice {
                message: format!("cannot find where '{}' is checked out: {e}", ctx.target),
            });
            return None;
        }
    };
    let verdict = ctx.ports.target_gates(&dir, &ctx.cancel).await;
    if scratch {
        let paths = ctx.paths.clone();
        let removed = tokio::task::spawn_blocking(move || {
            cascade_git::worktree::remove(&paths, &dir, true).map_err(|e| e.to_string())?;
            cascade_git::worktree::delete_branch(&paths, GATES_BRANCH).map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        if let Err(e) = removed {
            ctx.emit(MegaStep::MegaNotice {
                message: format!("could not remove the gates worktree of '{GATES_BRANCH}' ({e}); `cascade worktree prune` removes it"),
            });
        }
    }
    match verdict {
        Ok(v) => {
            {
                let mut s = ctx.state.lock().unwrap_or_else(|p| p.into_inner());
                s.target_gates.push(TargetGatesRecord {
                    batch,
                    passed: v.passed,
                    summary: v.summary.clone(),
                });
                let _ = s.save(&ctx.cascade_dir);
            }
            ctx.emit(MegaStep::TargetGatesFinished {
                batch,
                passed: v.passed,
                summary: v.summary,
            });
            Some(v.passed)
        }
        Err(e) => {
            ctx.emit(MegaStep::MegaNotice {
                message: format!(
                    "gates on '{}' could not run after batch {batch}: {e}",
                    ctx.target
                ),
            });
            None
        }
    }
}

/// Keeps a landed feature's findings and PRD, then removes its worktree and branch.
pub(super) async fn cleanup_feature<P: MegaPorts>(ctx: &Arc<Ctx<P>>, name: &str) {
    let Some(f) = ctx.snapshot().feature(name).cloned() else {
        return;
    };
    let keep = ctx.feature_dir(name);
    if let Some(wt) = &f.worktree {
        match findings::keep_feature_findings(&ctx.paths.main_root, wt, name, &keep) {
            Ok(Some(kept)) => ctx.update(name, |s| s.findings = Some(kept.clone())),
            Ok(None) => {}
            Err(e) => ctx.emit(MegaStep::MegaNotice {
                message: format!("feature '{name}': could not keep findings.md: {e}"),
            }),
        }
        if let Some(prd) = &f.prd {
            let _ = std::fs::create_dir_all(&keep);
            let _ = std::fs::copy(prd, keep.join("prd.json"));
        }
    }
    let paths = ctx.paths.clone();
    let wt = f.worktree.clone();
    let branch = f.branch.clone();
    let result = tokio::task::spawn_blocking(move || -> Result<(), String> {
        if let Some(wt) = wt {
            cascade_git::worktree::remove(&paths, &wt, true).map_err(|e| e.to_string())?;
        }
        cascade_git::worktree::delete_branch(&paths, &branch).map_err(|e| e.to_string())?;
        Ok(())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    match result {
        Ok(()) => {
            ctx.update(name, |s| s.worktree = None);
            ctx.emit(MegaStep::FeatureCleanedUp {
                feature: name.to_string(),
            });
        }
        Err(e) => ctx.emit(MegaStep::MegaNotice {
            message: format!(
                "feature '{name}' landed but its worktree or branch could not be removed ({e}); `cascade worktree prune` removes leftovers"
            ),
        }),
    }
}
