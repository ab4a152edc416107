//! Landing a feature: the `--no-ff` merge into the target branch (never twice:
//! a branch already contained in the target counts as merged; gated as
//! merged first when the target moved since the feature started, so only a
//! tree that passed the target's gates moves it), the gates on the merged
//! target, and the cleanup of a landed feature's worktree and branch after
//! its findings and PRD are kept.

use std::sync::Arc;

use super::findings;
use super::ports::MegaPorts;
use super::run::Ctx;
use super::state::{now, FailureKind, FeatureStatus, TargetGatesRecord};
use crate::events::Event;

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
    let gate = ctx.integration == crate::config::Integration::Gate;
    let result = tokio::task::spawn_blocking(move || prepare(&paths, &target, &b, &message, gate))
        .await
        .unwrap_or_else(|e| Err(format!("merge task failed: {e}")));
    let result = match result {
        Ok(Prepared::Gate { tip, merge }) => integrate(ctx, name, tip, merge).await,
        Ok(Prepared::Landed(commit)) => Ok(Ok(commit)),
        Ok(Prepared::Conflict(files)) => Ok(Err(files)),
        Err(e) => Err(e),
    };
    match result {
        Ok(Ok(commit)) => {
            ctx.update(name, |f| {
                f.status = FeatureStatus::Complete;
                f.merge_commit = Some(commit.clone());
                f.finished_at = Some(now());
            });
            ctx.emit(Event::FeatureMerged {
                feature: name.to_string(),
                branch,
                target_branch: ctx.target.clone(),
                commit,
            });
            true
        }
        Ok(Err(files)) if files.is_empty() => false,
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

/// What merging a feature comes to before anything is gated.
enum Prepared {
    /// On the target (merged now, or already before: resume): its tip.
    Landed(String),
    /// The merge conflicts in these files; nothing moved.
    Conflict(Vec<String>),
    /// The target moved since the feature started: this merge of the
    /// feature onto `tip` (in memory) is gated before the target moves.
    Gate { tip: git2::Oid, merge: git2::Oid },
}

/// The feature's merge: nothing when the target already holds it, a
/// commit to gate when the target moved since the feature started (and
/// `gate`), else the merge itself, as ungated as a fast-forward would be
/// (its tree is the feature's, which its stories' gates judged).
fn prepare(
    paths: &cascade_git::RepoPaths,
    target: &str,
    branch: &str,
    message: &str,
    gate: bool,
) -> Result<Prepared, String> {
    use cascade_git::merge::{self as git_merge, MergeOptions, MergeOutcome};
    let no_ff = MergeOptions { ff_allowed: false };
    let tip = git_merge::branch_tip(paths, target)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("target branch '{target}' does not exist"))?;
    // Resume: a feature already in the target is not merged twice.
    if let Some(head) = git_merge::branch_tip(paths, branch).map_err(|e| e.to_string())? {
        if git_merge::is_merged(paths, head, target).map_err(|e| e.to_string())? {
            return Ok(Prepared::Landed(tip.to_string()));
        }
    }
    let moved = !git_merge::is_merged(paths, tip, branch).map_err(|e| e.to_string())?;
    if gate && moved {
        let member = git_merge::GroupMember {
            source_branch: branch.to_string(),
            message: message.to_string(),
        };
        return match git_merge::merge_preview_onto(paths, target, tip, &member, &no_ff) {
            Ok(MergeOutcome::Merged(merge)) => Ok(Prepared::Gate { tip, merge }),
            Ok(MergeOutcome::Conflict { files }) => Ok(Prepared::Conflict(files)),
            Ok(outcome) => Ok(Prepared::Landed(
                outcome.new_tip().unwrap_or(tip).to_string(),
            )),
            Err(e) => Err(e.to_string()),
        };
    }
    match git_merge::merge_into(paths, target, branch, message, &no_ff) {
        Ok(MergeOutcome::Conflict { files }) => Ok(Prepared::Conflict(files)),
        Ok(outcome) => Ok(Prepared::Landed(
            outcome.new_tip().map(|o| o.to_string()).unwrap_or_default(),
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The branch of the scratch worktree a feature's merge is gated in.
fn integration_branch(name: &str) -> String {
    format!("cascade/_integration-{name}")
}

/// Integration gating of a feature's merge: the merge checked out in a
/// scratch worktree, the target's gates on it; only a pass moves the
/// target (to exactly that commit). A failure fails the feature as
/// `integration` (answered `Ok(Err(vec![]))`: nothing more to report).
async fn integrate<P: MegaPorts>(
    ctx: &Arc<Ctx<P>>,
    name: &str,
    tip: git2::Oid,
    merge: git2::Oid,
) -> Result<Result<String, Vec<String>>, String> {
    let since = merged_since(ctx, name);
    ctx.emit(Event::FeatureIntegrationStarted {
        feature: name.to_string(),
        merged_since: since.clone(),
        target_branch: ctx.target.clone(),
    });
    let verdict = gate_in_scratch(ctx, &integration_branch(name), &merge.to_string())
        .await
        .and_then(|v| v)
        .map_err(|e| format!("the gates could not run on the merged tree: {e}"))?;
    ctx.emit(Event::FeatureIntegrationFinished {
        feature: name.to_string(),
        passed: verdict.passed,
        summary: verdict.summary.clone(),
    });
    if !verdict.passed {
        let with = if since.is_empty() {
            "work merged meanwhile".to_string()
        } else {
            format!("features merged meanwhile: {}", since.join(", "))
        };
        let message = format!(
            "integration with '{}' failed ({with}): the target's gates fail on the merged tree; '{}' did not move and the branch is kept: make it fit (merge '{}' into it in its worktree) and run `cascade mega resume`\n{}",
            ctx.target, ctx.target, ctx.target, verdict.summary
        );
        ctx.fail(name, FailureKind::Integration, message, vec![]);
        return Ok(Err(Vec::new()));
    }
    let (paths, target) = (ctx.paths.clone(), ctx.target.clone());
    tokio::task::spawn_blocking(move || {
        cascade_git::merge::advance_to(&paths, &target, tip, merge)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    Ok(Ok(merge.to_string()))
}

/// The features landed since `name` started: complete ones whose merge its
/// branch does not contain.
fn merged_since<P: MegaPorts>(ctx: &Ctx<P>, name: &str) -> Vec<String> {
    let branch = cascade_git::worktree::branch_name(None, name);
    let mut since: Vec<String> = ctx
        .snapshot()
        .features
        .iter()
        .filter(|(n, f)| n.as_str() != name && f.status == FeatureStatus::Complete)
        .filter_map(|(n, f)| {
            let commit = git2::Oid::from_str(f.merge_commit.as_deref()?).ok()?;
            let contained = cascade_git::merge::is_merged(&ctx.paths, commit, &branch).ok()?;
            (!contained).then(|| n.clone())
        })
        .collect();
    since.sort();
    since
}

/// The target's gates in a throwaway worktree of `branch` at `at`, removed
/// after (a leftover is noted: `cascade worktree prune` removes it). The
/// outer error: no worktree could be made; the inner: the gates' own.
async fn gate_in_scratch<P: MegaPorts>(
    ctx: &Arc<Ctx<P>>,
    branch: &str,
    at: &str,
) -> Result<Result<super::ports::GatesVerdict, String>, String> {
    let (paths, b, at) = (ctx.paths.clone(), branch.to_string(), at.to_string());
    let dir = tokio::task::spawn_blocking(move || {
        let path = cascade_git::worktree::path_for(&paths, &b);
        cascade_git::worktree::create(&paths, &path, &b, &at)
            .map(|_| path)
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()))?;
    let verdict = ctx.ports.target_gates(&dir, &ctx.cancel).await;
    let (paths, b) = (ctx.paths.clone(), branch.to_string());
    let removed = tokio::task::spawn_blocking(move || {
        cascade_git::worktree::remove(&paths, &dir, true).map_err(|e| e.to_string())?;
        cascade_git::worktree::delete_branch(&paths, &b).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    if let Err(e) = removed {
        ctx.emit(Event::MegaNotice {
            message: format!("could not remove the gates worktree of '{branch}' ({e}); `cascade worktree prune` removes it"),
        });
    }
    Ok(verdict)
}

use super::run::TARGET_GATES_BRANCH as GATES_BRANCH;

/// Re-runs the gates on the merged target: where it is checked out, else in
/// a throwaway worktree at its tip. `None` when they could not run (noted).
pub(super) async fn run_target_gates<P: MegaPorts>(
    ctx: &Arc<Ctx<P>>,
    batch: usize,
) -> Option<bool> {
    let verdict = match cascade_git::merge::checked_out_in(&ctx.paths, &ctx.target) {
        Ok(Some(dir)) => ctx.ports.target_gates(&dir, &ctx.cancel).await,
        Ok(None) => match gate_in_scratch(ctx, GATES_BRANCH, &ctx.target).await {
            Ok(verdict) => verdict,
            Err(e) => {
                ctx.emit(Event::MegaNotice {
                    message: format!(
                        "target branch '{}' is not checked out and no worktree could be made for its gates ({e}); gates not re-run after batch {batch}",
                        ctx.target
                    ),
                });
                return None;
            }
        },
        Err(e) => {
            ctx.emit(Event::MegaNotice {
                message: format!("cannot find where '{}' is checked out: {e}", ctx.target),
            });
            return None;
        }
    };
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
            ctx.emit(Event::TargetGatesFinished {
                batch,
                passed: v.passed,
                summary: v.summary,
            });
            Some(v.passed)
        }
        Err(e) => {
            ctx.emit(Event::MegaNotice {
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
            Err(e) => ctx.emit(Event::MegaNotice {
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
            ctx.emit(Event::FeatureCleanedUp {
                feature: name.to_string(),
            });
        }
        Err(e) => ctx.emit(Event::MegaNotice {
            message: format!(
                "feature '{name}' landed but its worktree or branch could not be removed ({e}); `cascade worktree prune` removes leftovers"
            ),
        }),
    }
}
