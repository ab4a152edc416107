//! Where an agent left a story worktree's `HEAD`, and the branches it made.
//!
//! An agent runs git itself: it may `git checkout -b` a branch of its own
//! (or detach `HEAD`) and commit there. Whatever `HEAD` holds when the agent
//! exits is the attempt's work, so [`bring_back`] moves the story branch to
//! it and puts `HEAD` back on the story branch; work that does not descend
//! from the story branch's tip cannot be brought back that way and is
//! reported ([`Head::Diverged`]). [`local_branches`] lists the branches
//! before and after the agent ran, so that those it created can be removed
//! ([`remove_if_contained`], only when the story branch holds their commits)
//! or reported: never left behind unmentioned. `local_files::changed_tracked` tells
//! whether anything wrote into the worktree after the work was committed
//! (through `local_files`).

use std::collections::BTreeMap;
use std::path::Path;

use git2::{BranchType, Oid, Repository};

use crate::error::GitError;

/// Where [`bring_back`] found `HEAD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// On the story branch, as the agent was given it.
    OnStoryBranch,
    /// Off the story branch (on branch `left_on`, `None`: detached) at
    /// `commit`, which contains the story branch's tip: the story branch
    /// now points at `commit` and `HEAD` is back on it (index and files as
    /// the agent left them, so uncommitted work is still committed).
    BroughtBack {
        left_on: Option<String>,
        commit: Oid,
    },
    /// Off the story branch at `commit`, whose history does not contain the
    /// story branch's tip: nothing was changed.
    Diverged {
        left_on: Option<String>,
        commit: Oid,
    },
}

/// Brings the worktree at `workdir` back onto `branch` (a local branch
/// name) as described in the module doc.
pub fn bring_back(workdir: &Path, branch: &str) -> Result<Head, GitError> {
    let repo = open(workdir)?;
    let story_ref = format!("refs/heads/{branch}");
    let head = repo
        .find_reference("HEAD")
        .map_err(GitError::git("read HEAD"))?;
    let left_on = match head.symbolic_target() {
        Some(target) if target == story_ref => return Ok(Head::OnStoryBranch),
        Some(target) => Some(
            target
                .strip_prefix("refs/heads/")
                .unwrap_or(target)
                .to_string(),
        ),
        None => None,
    };
    let commit = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(GitError::git("read the commit HEAD is on"))?
        .id();
    let tip = repo
        .refname_to_id(&story_ref)
        .map_err(GitError::git(format!("read branch '{branch}'")))?;
    let contains = commit == tip
        || repo
            .graph_descendant_of(commit, tip)
            .map_err(GitError::git("compare histories"))?;
    if !contains {
        return Ok(Head::Diverged { left_on, commit });
    }
    let from = left_on.as_deref().unwrap_or("a detached HEAD");
    repo.reference(
        &story_ref,
        commit,
        true,
        &format!("cascade: the agent's work brought back from {from}"),
    )
    .map_err(GitError::git(format!("move branch '{branch}'")))?;
    repo.set_head(&story_ref)
        .map_err(GitError::git(format!("put HEAD back on '{branch}'")))?;
    Ok(Head::BroughtBack { left_on, commit })
}

/// The repository's local branches and their tips, by name.
pub fn local_branches(workdir: &Path) -> Result<BTreeMap<String, Oid>, GitError> {
    let repo = open(workdir)?;
    let branches = repo
        .branches(Some(BranchType::Local))
        .map_err(GitError::git("list branches"))?;
    let mut out = BTreeMap::new();
    for b in branches {
        let (b, _) = b.map_err(GitError::git("list branches"))?;
        let (Ok(Some(name)), Some(tip)) = (b.name(), b.get().target()) else {
            continue;
        };
        out.insert(name.to_string(), tip);
    }
    Ok(out)
}

/// Deletes local branch `name` when `within` (a commit) contains its tip,
/// so no commit is lost; returns whether it was deleted.
pub fn remove_if_contained(workdir: &Path, name: &str, within: Oid) -> Result<bool, GitError> {
    let repo = open(workdir)?;
    let mut branch = match repo.find_branch(name, BranchType::Local) {
        Ok(b) => b,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(false),
        Err(e) => return Err(GitError::git(format!("find branch '{name}'"))(e)),
    };
    let Some(tip) = branch.get().target() else {
        return Ok(false);
    };
    let contained = tip == within
        || repo
            .graph_descendant_of(within, tip)
            .map_err(GitError::git("compare histories"))?;
    if !contained || branch.is_head() {
        return Ok(false);
    }
    branch
        .delete()
        .map_err(GitError::git(format!("delete branch '{name}'")))?;
    Ok(true)
}

fn open(workdir: &Path) -> Result<Repository, GitError> {
    Repository::open(workdir).map_err(|_| GitError::NotARepo {
        path: workdir.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::testutil::*;
    use crate::local_files::changed_tracked;

    #[test]
    fn work_on_a_branch_of_the_agents_own_is_brought_back_and_the_branch_goes() {
        let (_tmp, repo, paths) = init_repo();
        let wt = story_worktree(&paths, "cascade/s1");
        let wt_repo = Repository::open(&wt.path).unwrap();
        let before = local_branches(&wt.path).unwrap();
        let base = head(&wt_repo);
        let c = wt_repo.find_commit(base).unwrap();
        wt_repo.branch("agent-branch", &c, false).unwrap();
        wt_repo.set_head("refs/heads/agent-branch").unwrap();
        let work = commit_file(&wt_repo, "more.txt", "more\n", "more");
        let after = local_branches(&wt.path).unwrap();
        let created: Vec<&String> = after.keys().filter(|b| !before.contains_key(*b)).collect();
        assert_eq!(created, vec!["agent-branch"]);

        let got = bring_back(&wt.path, "cascade/s1").unwrap();
        assert_eq!(
            got,
            Head::BroughtBack {
                left_on: Some("agent-branch".into()),
                commit: work
            }
        );
        assert_eq!(tip(&repo, "cascade/s1"), work);
        let wt_repo = Repository::open(&wt.path).unwrap();
        assert_eq!(
            wt_repo.head().unwrap().name(),
            Some("refs/heads/cascade/s1")
        );
        assert_eq!(
            bring_back(&wt.path, "cascade/s1").unwrap(),
            Head::OnStoryBranch
        );
        assert!(remove_if_contained(&wt.path, "agent-branch", work).unwrap());
        assert!(!local_branches(&wt.path)
            .unwrap()
            .contains_key("agent-branch"));
    }

    #[test]
    fn changed_tracked_lists_edits_of_tracked_files_only() {
        let (_tmp, _repo, paths) = init_repo();
        let wt = story_worktree(&paths, "cascade/s1");
        assert!(changed_tracked(&wt.path).unwrap().is_empty());
        std::fs::write(wt.path.join("new.txt"), "untracked\n").unwrap();
        assert!(changed_tracked(&wt.path).unwrap().is_empty());
        std::fs::write(wt.path.join("README.md"), "changed\n").unwrap();
        assert_eq!(changed_tracked(&wt.path).unwrap(), ["README.md"]);
    }

    #[test]
    fn work_that_left_the_story_history_is_diverged_and_its_branch_kept() {
        let (_tmp, repo, paths) = init_repo();
        let wt = story_worktree(&paths, "cascade/s1");
        let wt_repo = Repository::open(&wt.path).unwrap();
        // The story branch moves on; the agent then works from an orphan.
        let story_tip = commit_file(&wt_repo, "a.txt", "a\n", "a");
        wt_repo.set_head("refs/heads/elsewhere").unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let tree = wt_repo
            .find_tree(wt_repo.treebuilder(None).unwrap().write().unwrap())
            .unwrap();
        let orphan = wt_repo
            .commit(Some("HEAD"), &sig, &sig, "orphan", &tree, &[])
            .unwrap();
        let got = bring_back(&wt.path, "cascade/s1").unwrap();
        assert_eq!(
            got,
            Head::Diverged {
                left_on: Some("elsewhere".into()),
                commit: orphan
            }
        );
        assert_eq!(tip(&repo, "cascade/s1"), story_tip);
        assert!(!remove_if_contained(&wt.path, "elsewhere", story_tip).unwrap());
    }
}
