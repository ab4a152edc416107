//! Step (inside the merge queue): integration gating. A story whose branch
//! is not a fast-forward of the target's tip is merged in memory, the merge
//! is checked out in a scratch worktree (`cascade/integration-<id>`), and
//! the required gates of the tip (read from the tip, through the gate
//! cache) run on the merged tree. Only a passing merge moves the target, to
//! exactly the commit that was gated; a failing one moves nothing and fails
//! the attempt as `integration`, naming the stories merged since the
//! story's base, with the gates' errors for the retry (which starts from
//! the new tip). The queue is held throughout, so the tip cannot move
//! between the gates and the move. `--integration trust` skips this step.

use git2::Oid;

use super::gates::WorkPlace;
use super::merge::Merged;
use super::prepare_worktree::Worktree;
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::retry::FailureKind;

/// What integration gating decided.
pub(super) enum Integrated {
    /// Nothing to gate (a fast-forward, up to date, or a conflict): the
    /// merge queue's usual merge goes on.
    NotNeeded,
    /// The gated merge is the target's new tip.
    Landed(Merged),
}

pub(super) async fn run(a: &Attempt<'_>, wt: &Worktree, message: &str) -> Result<Integrated, Stop> {
    let ctx = a.ctx;
    let (paths, target) = (ctx.paths.clone(), ctx.target_branch.clone());
    let (branch, msg) = (a.branch.to_string(), message.to_string());
    let preview = tokio::task::spawn_blocking(move || {
        cascade_git::merge::merge_preview(&paths, &target, &branch, &msg)
    })
    .await
    .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?;
    // Anything but a new merge commit is the usual merge's to report.
    let Ok((tip, cascade_git::merge::MergeOutcome::Merged(merge))) = preview else {
        return Ok(Integrated::NotNeeded);
    };
    let members = vec![a.id().to_string()];
    let merged_since = merged_since(a, &wt.base);
    ctx.emit(Event::IntegrationStarted {
        story: a.id().to_string(),
        members: members.clone(),
        merged_since: merged_since.clone(),
        target_branch: ctx.target_branch.clone(),
    });
    let report = gate_merge(a, tip, merge).await?;
    a.check_cancel()?;
    let (failed, message) = super::gates::failed_required(&report);
    ctx.emit(Event::IntegrationFinished {
        story: a.id().to_string(),
        members,
        verdict: if report.passed { "passed" } else { "failed" }.to_string(),
        failed_gates: failed,
    });
    if !report.passed {
        return Err(failure(a, &merged_since, &message, &report).into());
    }
    let (paths, target) = (ctx.paths.clone(), ctx.target_branch.clone());
    let moved = tokio::task::spawn_blocking(move || {
        cascade_git::merge::advance_to(&paths, &target, tip, merge)
    })
    .await
    .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?;
    match moved {
        Ok(()) => Ok(Integrated::Landed(Merged {
            commit: merge.to_string(),
            fast_forward: false,
        })),
        // The user's uncommitted change is in the way: the usual merge
        // reports it as it does without gating.
        Err(cascade_git::merge::MergeError::TargetDirty { .. }) => Ok(Integrated::NotNeeded),
        Err(e) => Err(Failure::new(FailureKind::Setup, e.to_string()).into()),
    }
}

/// The merge commit checked out in a scratch worktree, gated with the
/// tip's gates; the scratch worktree goes whatever the verdict.
async fn gate_merge(
    a: &Attempt<'_>,
    tip: Oid,
    merge: Oid,
) -> Result<cascade_gates::GateReport, Stop> {
    let ctx = a.ctx;
    let setup = |e: String| Stop::from(Failure::new(FailureKind::Setup, e));
    let judges = ctx
        .judging
        .at(&tip.to_string())
        .map_err(|e| setup(e.to_string()))?;
    let branch = format!(
        "{}integration-{}",
        cascade_git::worktree::BRANCH_PREFIX,
        a.id()
    );
    let path = cascade_git::worktree::path_for(&ctx.paths, &branch);
    let (paths, p, b) = (ctx.paths.clone(), path.clone(), branch.clone());
    tokio::task::spawn_blocking(move || {
        cascade_git::worktree::create(&paths, &p, &b, &merge.to_string())
    })
    .await
    .map_err(|e| setup(e.to_string()))?
    .map_err(|e| setup(format!("integration worktree for '{}': {e}", a.id())))?;
    // Confined like the story's own gates, to the scratch worktree.
    let (sandbox, _) =
        crate::confine::AttemptSandbox::new(ctx.options.sandbox, &judges.sandbox, &path)
            .map_err(setup)?;
    let place = WorkPlace {
        path: path.clone(),
        base: tip.to_string(),
        judges,
        sandbox: sandbox.policy.clone(),
    };
    let report = super::gates::run_at(a, &place).await;
    drop(sandbox);
    let paths = ctx.paths.clone();
    let removed =
        tokio::task::spawn_blocking(move || cascade_git::worktree::remove(&paths, &path, true))
            .await;
    if !matches!(removed, Ok(Ok(_))) {
        ctx.emit(Event::Notice {
            message: format!("{}: could not remove the integration worktree", a.id()),
        });
    }
    Ok(report)
}

/// The stories merged into the target since `base` (the commit the story
/// started from): complete stories whose merge `base` does not contain.
fn merged_since(a: &Attempt<'_>, base: &str) -> Vec<String> {
    let ctx = a.ctx;
    let merged: Vec<(String, Oid)> = match ctx.state.lock() {
        Ok(st) => st
            .stories
            .iter()
            .filter(|s| s.id != a.id() && s.status == crate::state::StoryStatus::Complete)
            .filter_map(|s| {
                let commit = s.merge_commit.as_ref().or(s.commit.as_ref())?;
                Some((s.id.clone(), Oid::from_str(commit).ok()?))
            })
            .collect(),
        Err(_) => return Vec::new(),
    };
    let (Ok(repo), Ok(base)) = (
        git2::Repository::open(&ctx.paths.main_root),
        Oid::from_str(base),
    ) else {
        return Vec::new();
    };
    let commits = merged.iter().map(|(_, c)| *c).collect();
    let before = cascade_git::merge::reachable_from(&repo, base, &commits).unwrap_or_default();
    merged
        .into_iter()
        .filter(|(_, c)| !before.contains(c))
        .map(|(id, _)| id)
        .collect()
}

/// The attempt's failure: what it must now fit with, and the gates' errors.
fn failure(
    a: &Attempt<'_>,
    merged_since: &[String],
    gates: &str,
    report: &cascade_gates::GateReport,
) -> Failure {
    let target = &a.ctx.target_branch;
    let with = if merged_since.is_empty() {
        "work merged meanwhile".to_string()
    } else {
        format!("stories merged meanwhile: {}", merged_since.join(", "))
    };
    let mut f = Failure::new(
        FailureKind::Integration,
        format!("integration with '{target}' failed ({with}): {gates} on the merged tree"),
    )
    .with_excerpt(format!(
        "Your change passed its gates on its own, but merged into '{target}' together with the {with} the gates fail. Start from the current code (it now contains them) and make your change fit with it."
    ));
    f.gate_summary = report.summary_for_prompt(20);
    f
}
