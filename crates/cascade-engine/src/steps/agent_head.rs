//! Step (around the agent's run): whatever the worktree's `HEAD` holds when
//! the agent exits is the attempt's work, and no branch the agent created is
//! left behind unmentioned.
//!
//! An agent that ran `git checkout -b agent-branch` and committed there had
//! its work missed: the commit step looked at the story branch. Now the
//! story branch is moved to the agent's `HEAD` when that contains the story
//! branch's tip ([`cascade_git::head::bring_back`]); when it does not (the
//! agent reset or checked out other history) the attempt fails as
//! `verification` with a finding naming the branch. The branches the agent
//! created (listed before and after it ran; cascade's own `cascade/...` are
//! not the agent's) are deleted when the story branch holds their commits,
//! else reported in a notice and kept, so no commit is lost. A branch that
//! existed before and moved while the agent ran is the user's (or another
//! story's agent moved it: branches are shared by every worktree): it is
//! reported and never deleted.
//!
//! On a fleet worker, where an earlier worker's agent could still be writing
//! into the slot, [`unchanged_since_commit`] fails a job whose tracked files
//! changed after its work was committed (by anyone: the agent had exited):
//! such work is never delivered.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cascade_git::head::{bring_back, local_branches, remove_if_contained, Head};
use cascade_git::local_files::changed_tracked;
use git2::Oid;

use super::prepare_worktree::Worktree;
use super::run_agent::AgentOutput;
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::retry::FailureKind;

/// The local branches before the agent ran (cascade's own left out).
pub(super) struct Before(BTreeMap<String, Oid>);

/// Lists the branches before the agent runs; a listing that fails is empty
/// (then every branch found afterwards counts as the agent's, and those the
/// story branch holds are the only ones deleted).
pub(super) async fn before(wt: &Worktree) -> Before {
    let path = wt.path.clone();
    let branches = tokio::task::spawn_blocking(move || local_branches(&path))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    Before(theirs(branches))
}

/// After the agent's run `ran`: its `HEAD` brought back onto the story
/// branch (a passed run only), then the branches it created deleted or
/// reported (whatever the run came to).
pub(super) async fn after(
    a: &Attempt<'_>,
    wt: &Worktree,
    before: Before,
    ran: Result<AgentOutput, Stop>,
) -> Result<AgentOutput, Stop> {
    if matches!(ran, Err(Stop::Interrupted)) {
        return ran;
    }
    let (path, branch) = (wt.path.clone(), a.branch.to_string());
    let target = a.ctx.target_branch.clone();
    let passed = ran.is_ok();
    let checked =
        tokio::task::spawn_blocking(move || check(path, &branch, &target, passed, before))
            .await
            .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?
            .map_err(|e| Failure::new(FailureKind::Setup, format!("story '{}': {e}", a.id())))?;
    let id = a.id();
    for name in &checked.removed {
        a.ctx.emit(Event::Notice {
            message: format!(
                "{id}: removed branch '{name}' that the agent created (its commits are on '{}')",
                a.branch
            ),
        });
    }
    for name in &checked.kept {
        a.ctx.emit(Event::Notice {
            message: format!(
                "{id}: the agent created branch '{name}', whose commits are not part of the story's work on '{}'; it was left in place",
                a.branch
            ),
        });
    }
    for (name, was, now) in &checked.moved {
        a.ctx.emit(Event::Notice {
            message: format!(
                "{id}: branch '{name}' moved from {} to {} while the agent ran; it was there before the story, so it was left as it is",
                short(*was),
                short(*now)
            ),
        });
    }
    match checked.head {
        Some(Head::BroughtBack { left_on, commit }) => a.ctx.emit(Event::Notice {
            message: format!(
                "{id}: the agent left branch '{}' for {}; its work ({commit}) was brought back onto '{}'",
                a.branch,
                place(left_on.as_deref()),
                a.branch
            ),
        }),
        Some(Head::Diverged { left_on, commit }) => {
            let output = ran?;
            return Err(diverged(a, left_on.as_deref(), commit)
                .with_excerpt(output.excerpt)
                .into());
        }
        Some(Head::OnStoryBranch) | None => {}
    }
    ran
}

/// What [`check`] found and did.
struct Checked {
    /// Where `HEAD` was (a passed run only).
    head: Option<Head>,
    removed: Vec<String>,
    kept: Vec<String>,
    /// Branches from before the run that moved: name, tip before, tip now.
    moved: Vec<(String, Oid, Oid)>,
}

/// `target`: the branch stories merge into, which other stories' merges
/// move while the agent runs: it is never the agent's (nor deleted).
fn check(
    path: PathBuf,
    branch: &str,
    target: &str,
    passed: bool,
    before: Before,
) -> Result<Checked, cascade_git::GitError> {
    let head = if passed {
        Some(bring_back(&path, branch)?)
    } else {
        None
    };
    let story_tip = local_branches(&path)?.get(branch).copied();
    let (mut created, mut moved) = (Vec::new(), Vec::new());
    for (name, tip) in theirs(local_branches(&path)?) {
        match before.0.get(&name) {
            None => created.push(name),
            Some(was) if *was != tip && name != target => moved.push((name, *was, tip)),
            Some(_) => {}
        }
    }
    let (mut removed, mut kept) = (Vec::new(), Vec::new());
    for name in created {
        let gone = match story_tip {
            Some(tip) => remove_if_contained(&path, &name, tip)?,
            None => false,
        };
        if gone {
            removed.push(name);
        } else {
            kept.push(name);
        }
    }
    Ok(Checked {
        head,
        removed,
        kept,
        moved,
    })
}

/// Branches that are not cascade's own (`cascade/...`).
fn theirs(branches: BTreeMap<String, Oid>) -> BTreeMap<String, Oid> {
    branches
        .into_iter()
        .filter(|(name, _)| !name.starts_with("cascade/"))
        .collect()
}

/// A commit as the notices name it.
fn short(oid: Oid) -> String {
    crate::start::short(&oid.to_string()).to_string()
}

fn place(left_on: Option<&str>) -> String {
    match left_on {
        Some(b) => format!("branch '{b}'"),
        None => "a detached HEAD".to_string(),
    }
}

/// The failure of an attempt whose `HEAD` holds history that does not
/// contain the story branch.
fn diverged(a: &Attempt<'_>, left_on: Option<&str>, commit: Oid) -> Failure {
    let at = place(left_on);
    let mut f = Failure::new(
        FailureKind::Verification,
        format!(
            "the agent left branch '{}' for {at} at {commit}, whose history does not contain the story's work; nothing was committed{}",
            a.branch,
            if left_on.is_some() { " (the branch was left in place)" } else { "" }
        ),
    );
    f.findings = format!(
        "You switched from the story branch '{}' to {at} and your work there does not build on the story branch. Stay on '{}': do not create, check out or reset branches.",
        a.branch, a.branch
    );
    f
}

/// After the checks of a job's committed work: fails the attempt when a
/// tracked file of the worktree no longer matches the commit (see the
/// module doc). Untracked files are left to the gates that make them.
pub(super) async fn unchanged_since_commit(a: &Attempt<'_>, wt: &Worktree) -> Result<(), Stop> {
    let path = wt.path.clone();
    let changed = tokio::task::spawn_blocking(move || changed_tracked(&path))
        .await
        .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?
        .map_err(|e| Failure::new(FailureKind::Setup, format!("story '{}': {e}", a.id())))?;
    if changed.is_empty() {
        return Ok(());
    }
    let list = changed
        .iter()
        .map(|p| cascade_plan::text::printable_line(p).into_owned())
        .collect::<Vec<_>>()
        .join(", ");
    Err(Failure::new(
        FailureKind::Verification,
        format!(
            "the worktree changed after the agent exited and its work was committed ({list}): \
             another process wrote into it; the work is not delivered"
        ),
    )
    .into())
}
