//! Integration gating's parts (the merge train, the `train` step, uses
//! them): a merge checked out in a scratch worktree
//! (`cascade/integration-<id>`) and gated with the required gates of the
//! target's tip (through the gate cache); the stories merged since a
//! story's base, which it must now fit with; and the `integration` failure
//! naming them, with the gates' errors for the retry (which starts from
//! the new tip). `--integration trust` skips all of it.

use git2::Oid;

use super::gates::WorkPlace;
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::merge_queue::Gated;
use crate::retry::FailureKind;

impl Gated {
    pub fn of(a: &Attempt<'_>) -> Gated {
        Gated {
            story: a.id().to_string(),
            attempt: a.number,
            env: a.env.to_vec(),
        }
    }
}

/// The merge commit checked out in a scratch worktree, gated with the
/// tip's gates until `stop` fires; the scratch worktree goes whatever the
/// verdict, before this returns (the same story's next gating makes it again).
pub(super) async fn gate_merge(
    ctx: &std::sync::Arc<crate::ctx::Ctx>,
    who: &Gated,
    tip: Oid,
    merge: Oid,
    stop: &cascade_process::CancelToken,
) -> Result<cascade_gates::GateReport, Stop> {
    let setup = |e: String| Stop::from(Failure::new(FailureKind::Setup, e));
    let judges = ctx
        .judging
        .at(&tip.to_string())
        .map_err(|e| setup(e.to_string()))?;
    let branch = format!(
        "{}integration-{}",
        cascade_git::worktree::BRANCH_PREFIX,
        who.story
    );
    let path = cascade_git::worktree::path_for(&ctx.paths, &branch);
    let (paths, p, b) = (ctx.paths.clone(), path.clone(), branch.clone());
    tokio::task::spawn_blocking(move || {
        cascade_git::worktree::create(&paths, &p, &b, &merge.to_string())
    })
    .await
    .map_err(|e| setup(e.to_string()))?
    .map_err(|e| setup(format!("integration worktree for '{}': {e}", who.story)))?;
    // Confined like the story's own gates, to the scratch worktree.
    let (sandbox, _) =
        crate::confine::AttemptSandbox::new(ctx.options.sandbox, &judges.sandbox, &path)
            .map_err(|e| setup(e.to_string()))?;
    let place = WorkPlace {
        path: path.clone(),
        base: tip.to_string(),
        judges,
        sandbox: sandbox.policy.clone(),
    };
    let report = super::gates::run_at(ctx, &who.story, who.attempt, &who.env, &place, stop).await;
    drop(sandbox);
    let paths = ctx.paths.clone();
    let removed =
        tokio::task::spawn_blocking(move || cascade_git::worktree::remove(&paths, &path, true))
            .await;
    if !matches!(removed, Ok(Ok(_))) {
        ctx.emit(Event::Notice {
            message: format!("{}: could not remove the integration worktree", who.story),
        });
    }
    Ok(report)
}

/// The scratch worktrees and branches of merges gated as merged
/// (`cascade/integration-<story>`) that a killed run left: a scratch tree
/// is only ever a merge of a story branch and a tip, rebuilt when the merge
/// is gated again, so it goes (a resumed run with the lock held; no live
/// run of this repository gates anything). Returns a note per one removed.
pub(crate) fn remove_scratch(paths: &cascade_git::RepoPaths) -> Vec<String> {
    let prefix = format!("{}integration-", cascade_git::worktree::BRANCH_PREFIX);
    let Ok(worktrees) = cascade_git::worktree::list(paths) else {
        return Vec::new();
    };
    let mut notes = Vec::new();
    for w in worktrees {
        let Some(branch) = w.branch.filter(|b| b.starts_with(&prefix)) else {
            continue;
        };
        if cascade_git::worktree::remove(paths, &w.path, true).is_ok() {
            notes.push(format!(
                "removed the integration worktree a killed run left ({branch})"
            ));
        }
    }
    notes
}

/// The stories merged into the target since `base` (the commit the story
/// started from): complete stories whose merge `base` does not contain.
pub(super) async fn merged_since(ctx: &crate::ctx::Ctx, story: &str, base: &str) -> Vec<String> {
    let story = story.to_string();
    let merged = ctx.state.read(move |st| {
        st.stories
            .iter()
            .filter(|s| s.id != story && s.status == crate::state::StoryStatus::Complete)
            .filter_map(|s| {
                let commit = s.merge_commit.as_ref().or(s.commit.as_ref())?;
                Some((s.id.clone(), Oid::from_str(commit).ok()?))
            })
            .collect::<Vec<(String, Oid)>>()
    });
    let Some(merged) = merged.await else {
        return Vec::new();
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
pub(super) fn failure(
    target: &str,
    merged_since: &[String],
    gates: &str,
    report: &cascade_gates::GateReport,
) -> Failure {
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
