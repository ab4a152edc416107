//! Merging a story (or feature) branch into its target branch.
//!
//! The merge is computed in memory (`merge_commits`): a conflict changes
//! nothing (no ref moves, no file is written, the source branch is kept) and
//! is reported with the conflicting paths. When the merge succeeds and the
//! target branch is checked out in some worktree (the main one, typically),
//! that worktree's files and index are brought to the new tip with a *safe*
//! checkout, the way `git merge` does it: a change of the user's to a file the
//! merge does not touch is kept; a change that the merge would overwrite
//! makes it refuse ([`MergeError::TargetDirty`]) before anything moved.
//!
//! # API summary
//! - [`merge_into`]`(paths, target_branch, source_branch, message, &MergeOptions{ff_allowed})
//!   -> Result<MergeOutcome, MergeError>` with
//!   `MergeOutcome::{UpToDate, FastForward(oid), Merged(oid), Conflict{files}}`.
//!   `ff_allowed: false` always makes a merge commit (`--no-ff`, for features).
//!   Branch names may be short (`main`) or full (`refs/heads/main`).
//! - [`merge_group`]`(paths, target_branch, &[GroupMember{source_branch, message}], &opts)
//!   -> Vec<Result<MergeOutcome, MergeError>>`: several branches merged in
//!   order with one worktree update and one ref move (the merge queue's turn
//!   when several stories wait for it).
//! - [`merge_preview`] / [`advance_to`]: the same merge in memory first, the
//!   target moved to it only after its tree was checked (integration gating);
//!   [`merge_preview_onto`] merges onto any commit (a merge train's tip+A+B).
//! - [`is_merged`]`(paths, source_oid, target_branch)`: whether the target
//!   already contains that commit (resume: a merged story is never redone).
//! - [`reachable_from`]`(repo, tip, &commits)`: which of many commits are on
//!   a branch's history, in one walk (resume, deleting merged branches).
//! - [`branch_tip`]`(paths, branch)`: the commit a branch points at, if it exists.
//! - [`checked_out_in`]`(paths, branch)`: the worktree (main or linked) that has
//!   the branch checked out.
//!
//! Merges into one target must be serialised by the caller (the engine's merge
//! queue); the ref is updated with a compare-and-swap so a concurrent move is
//! detected ([`MergeError::TargetMoved`]) rather than lost.

use std::cell::RefCell;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use git2::build::CheckoutBuilder;
use git2::{CheckoutNotificationType, Oid, Repository};

use crate::commit::signature;
use crate::repo::RepoPaths;
use crate::GitError;

/// How to merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeOptions {
    /// Fast-forward when the target is an ancestor of the source; when false
    /// a merge commit is always made (`git merge --no-ff`).
    pub ff_allowed: bool,
}

impl Default for MergeOptions {
    fn default() -> Self {
        MergeOptions { ff_allowed: true }
    }
}

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    /// The target already contains the source: nothing moved.
    UpToDate,
    /// The target moved forward to the source's tip (this commit).
    FastForward(Oid),
    /// A merge commit was made on the target.
    Merged(Oid),
    /// The branches conflict in these paths; nothing was changed.
    Conflict { files: Vec<String> },
}

impl MergeOutcome {
    /// The target's new tip, when it moved.
    pub fn new_tip(&self) -> Option<Oid> {
        match self {
            MergeOutcome::FastForward(o) | MergeOutcome::Merged(o) => Some(*o),
            _ => None,
        }
    }
}

/// A merge could not be done (a conflict is not an error: see [`MergeOutcome`]).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A branch does not exist.
    #[error("branch '{branch}' does not exist")]
    NoSuchBranch { branch: String },
    /// The worktree that has the target checked out has uncommitted changes
    /// the merge would overwrite.
    #[error("cannot merge into '{branch}': uncommitted changes in '{}' would be overwritten ({}); commit or stash them and run again", worktree.display(), files.join(", "))]
    TargetDirty {
        branch: String,
        worktree: PathBuf,
        files: Vec<String>,
    },
    /// The target branch moved while the merge was being made.
    #[error("branch '{branch}' moved while merging into it; the files in '{}' were updated to the merge result, check `git status` there", worktree.display())]
    TargetMoved { branch: String, worktree: PathBuf },
    /// Something else failed in git or on disk.
    #[error(transparent)]
    Git(#[from] GitError),
}

/// Merges `source_branch` into `target_branch` (see the module docs).
pub fn merge_into(
    paths: &RepoPaths,
    target_branch: &str,
    source_branch: &str,
    message: &str,
    opts: &MergeOptions,
) -> Result<MergeOutcome, MergeError> {
    let one = GroupMember {
        source_branch: source_branch.to_string(),
        message: message.to_string(),
    };
    let mut outcomes = merge_all(paths, target_branch, std::slice::from_ref(&one), opts)?;
    outcomes.pop().unwrap_or(Ok(MergeOutcome::UpToDate))
}

/// The merge [`merge_into`] would make, in memory: the target's tip and the
/// outcome (a merge commit is written but no ref or file moves), so the
/// merged tree can be checked before the target moves ([`advance_to`]).
/// Integration gating builds on it.
pub fn merge_preview(
    paths: &RepoPaths,
    target_branch: &str,
    source_branch: &str,
    message: &str,
) -> Result<(Oid, MergeOutcome), MergeError> {
    let repo = open_main(paths)?;
    let target = branch_id(&repo, target_branch)?;
    let member = GroupMember {
        source_branch: source_branch.to_string(),
        message: message.to_string(),
    };
    let outcome = merge_commit(
        &repo,
        target_branch,
        target,
        &member,
        &MergeOptions::default(),
    )?;
    Ok((target, outcome))
}

/// The merge of `member` onto the commit `onto` (the target's tip or a
/// merge [`merge_preview_onto`] wrote before), in memory: a merge train
/// builds tip+A, tip+A+B, ... this way and moves the target
/// ([`advance_to`]) only to a prefix whose trees were checked.
/// `target_branch` only names the target in messages.
pub fn merge_preview_onto(
    paths: &RepoPaths,
    target_branch: &str,
    onto: Oid,
    member: &GroupMember,
    opts: &MergeOptions,
) -> Result<MergeOutcome, MergeError> {
    let repo = open_main(paths)?;
    merge_commit(&repo, target_branch, onto, member, opts)
}

/// Moves `target_branch` from `from` to `to` (a commit [`merge_preview`]
/// wrote), bringing the worktree that has it checked out along, as a merge
/// does; [`MergeError::TargetMoved`] when the branch is no longer at `from`.
pub fn advance_to(
    paths: &RepoPaths,
    target_branch: &str,
    from: Oid,
    to: Oid,
) -> Result<(), MergeError> {
    let repo = open_main(paths)?;
    let reflog = format!("cascade: integration-gated merge into {target_branch}");
    advance(paths, &repo, target_branch, from, to, &reflog)
}

/// One branch of a [`merge_group`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    pub source_branch: String,
    /// The message of its merge commit (when it gets one).
    pub message: String,
}

/// Merges the branches of `group` into `target_branch` in order, each onto
/// the tip the previous ones left (the commits are those that as many
/// [`merge_into`] calls would make), then brings the target's worktree and
/// the branch to the last tip once: one journal, one checkout of the paths
/// the whole group changed, one ref update, where one merge at a time pays
/// each per branch. A conflict leaves its member out (its outcome says so)
/// and the next member merges onto the same tip. An outcome per member, in
/// order.
///
/// When the group cannot move the target as a whole (the user's
/// uncommitted change is in the way of one member's files, say), nothing
/// has moved and every member is merged on its own instead, so each gets
/// its own answer: the one in the way is refused, the others merge.
pub fn merge_group(
    paths: &RepoPaths,
    target_branch: &str,
    group: &[GroupMember],
    opts: &MergeOptions,
) -> Vec<Result<MergeOutcome, MergeError>> {
    match merge_all(paths, target_branch, group, opts) {
        Ok(outcomes) => outcomes,
        Err(e) if group.len() == 1 => vec![Err(e)],
        // The files are the group's and the branch moved elsewhere (the
        // user committed meanwhile): merging again would find them dirty.
        Err(MergeError::TargetMoved { branch, worktree }) => group
            .iter()
            .map(|_| {
                Err(MergeError::TargetMoved {
                    branch: branch.clone(),
                    worktree: worktree.clone(),
                })
            })
            .collect(),
        Err(_) => group
            .iter()
            .map(|m| merge_into(paths, target_branch, &m.source_branch, &m.message, opts))
            .collect(),
    }
}

/// The merges of `group` in memory, then the target moved once (see
/// [`merge_group`]); an error of the move is the group's.
fn merge_all(
    paths: &RepoPaths,
    target_branch: &str,
    group: &[GroupMember],
    opts: &MergeOptions,
) -> Result<Vec<Result<MergeOutcome, MergeError>>, MergeError> {
    let repo = open_main(paths)?;
    let target = branch_id(&repo, target_branch)?;
    let mut tip = target;
    let mut outcomes = Vec::with_capacity(group.len());
    for member in group {
        let outcome = merge_commit(&repo, target_branch, tip, member, opts);
        if let Ok(moved) = &outcome {
            tip = moved.new_tip().unwrap_or(tip);
        }
        outcomes.push(outcome);
    }
    if tip != target {
        let sources: Vec<&str> = group.iter().map(|m| m.source_branch.as_str()).collect();
        let reflog = format!("cascade: merge {} into {target_branch}", sources.join(", "));
        advance(paths, &repo, target_branch, target, tip, &reflog)?;
    }
    Ok(outcomes)
}

/// The merge of `member` onto `tip` of `target_branch`, in memory: the
/// commit it needs is written, nothing moves.
fn merge_commit(
    repo: &Repository,
    target_branch: &str,
    target: Oid,
    member: &GroupMember,
    opts: &MergeOptions,
) -> Result<MergeOutcome, MergeError> {
    let source_branch = member.source_branch.as_str();
    let source = branch_id(repo, source_branch)?;

    // One walk of the history answers all three questions: the source is
    // already in (it is the merge base), the target can fast-forward (the
    // target is), or which base a merge starts from.
    let bases = if target == source {
        vec![source]
    } else {
        crate::disjoint::bases(repo, target, source).map_err(GitError::git("compare commits"))?
    };
    if bases == [source] {
        return Ok(MergeOutcome::UpToDate);
    }
    if opts.ff_allowed && bases == [target] {
        return Ok(MergeOutcome::FastForward(source));
    }
    let ours = repo
        .find_commit(target)
        .map_err(GitError::git("read target commit"))?;
    let theirs = repo
        .find_commit(source)
        .map_err(GitError::git("read source commit"))?;
    // Changes to different files merge at the cost of the changes;
    // anything else (or any trouble on that path) takes libgit2's
    // three-way merge, which reads all three trees.
    let tree_id = match crate::disjoint::merged_tree(repo, &bases, &ours, &theirs) {
        Ok(Some(tree)) => tree,
        Ok(None) | Err(_) => {
            let mut index = repo
                .merge_commits(&ours, &theirs, None)
                .map_err(GitError::git(format!(
                    "merge '{source_branch}' into '{target_branch}'"
                )))?;
            if index.has_conflicts() {
                return Ok(MergeOutcome::Conflict {
                    files: conflict_paths(&index)?,
                });
            }
            index
                .write_tree_to(repo)
                .map_err(GitError::git("write merged tree"))?
        }
    };
    let tree = repo
        .find_tree(tree_id)
        .map_err(GitError::git("read merged tree"))?;
    let sig = signature(repo)?;
    let oid = repo
        .commit(None, &sig, &sig, &member.message, &tree, &[&ours, &theirs])
        .map_err(GitError::git("write merge commit"))?;
    Ok(MergeOutcome::Merged(oid))
}

/// Moves `target_branch` from `target` to `new_tip`, bringing the worktree
/// that has it checked out along first.
fn advance(
    paths: &RepoPaths,
    repo: &Repository,
    target_branch: &str,
    target: Oid,
    new_tip: Oid,
    reflog: &str,
) -> Result<(), MergeError> {
    let holder = checked_out_in(paths, target_branch)?;
    // Between the files changing and the branch moving, a killed process
    // would leave the worktree ahead of its branch (a "dirty" tree that
    // `resume` refuses); the journal lets [`finish_interrupted_merges`]
    // complete the merge instead.
    let journal = match &holder {
        Some(worktree) => Some(write_journal(
            paths,
            target_branch,
            target,
            new_tip,
            worktree,
        )?),
        None => None,
    };
    if let Some(worktree) = &holder {
        if let Err(e) = update_worktree(worktree, target_branch, target, new_tip, false) {
            remove_journal(journal.as_deref());
            return Err(e);
        }
    }
    let moved = repo.reference_matching(&full_ref(target_branch), new_tip, true, target, reflog);
    remove_journal(journal.as_deref());
    match moved {
        Ok(_) => Ok(()),
        Err(e) => Err(match holder {
            Some(worktree) if e.code() == git2::ErrorCode::Modified => MergeError::TargetMoved {
                branch: target_branch.to_string(),
                worktree,
            },
            _ => GitError::git(format!("update branch '{target_branch}'"))(e).into(),
        }),
    }
}

/// Whether a killed process left a merge into `branch` half done (its
/// journal is there): [`finish_interrupted_merge`] has work to do. Reads only.
pub fn interrupted_merge_pending(paths: &RepoPaths, branch: &str) -> bool {
    journal_file(paths, branch).is_file()
}

/// Completes a merge into the checked-out `branch` that a killed process
/// left between updating the worktree's files and moving the branch (see
/// the journal in [`merge_into`]): when the branch is still at the old tip,
/// the changed paths are checked out (forced: they are the merge's) and the
/// branch moves to the merge; when it moved already, nothing is left to do;
/// when it moved elsewhere, the journal is dropped. Call it with the run
/// lock held, before looking at the worktree's cleanliness, and only for a
/// branch no merge is running into. Returns the new tip when it completed one.
pub fn finish_interrupted_merge(
    paths: &RepoPaths,
    branch: &str,
) -> Result<Option<Oid>, MergeError> {
    let file = journal_file(paths, branch);
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Ok(None);
    };
    let mut lines = text.lines();
    let parsed = (|| {
        let recorded = lines.next()?.to_string();
        let old = Oid::from_str(lines.next()?).ok()?;
        let new = Oid::from_str(lines.next()?).ok()?;
        let worktree = PathBuf::from(lines.next()?);
        Some((recorded, old, new, worktree))
    })();
    let mut finished = None;
    if let Some((recorded, old, new, worktree)) = parsed {
        // The killed merge held these, if anything (the caller holds the run
        // lock: no other cascade process writes them).
        let short = recorded.strip_prefix("refs/heads/").unwrap_or(&recorded);
        let _ = std::fs::remove_file(
            paths
                .common_dir
                .join("refs/heads")
                .join(format!("{short}.lock")),
        );
        if let Ok(wrepo) = Repository::open(&worktree) {
            let _ = std::fs::remove_file(wrepo.path().join("index.lock"));
        }
        let repo = open_main(paths)?;
        let current = repo.refname_to_id(&full_ref(&recorded)).ok();
        if current == Some(old) && repo.find_commit(new).is_ok() && worktree.is_dir() {
            update_worktree(&worktree, &recorded, old, new, true)?;
            repo.reference_matching(
                &full_ref(&recorded),
                new,
                true,
                old,
                &format!("cascade: finish interrupted merge into {recorded}"),
            )
            .map_err(GitError::git(format!("update branch '{recorded}'")))?;
            finished = Some(new);
        }
    }
    remove_journal(Some(&file));
    Ok(finished)
}

/// Where merge journals live: `.cascade/merging/`.
fn journal_dir(paths: &RepoPaths) -> PathBuf {
    paths.cascade_dir().join("merging")
}

/// The journal of merges into `branch`.
fn journal_file(paths: &RepoPaths, branch: &str) -> PathBuf {
    let short = branch.strip_prefix("refs/heads/").unwrap_or(branch);
    let name: String = short
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '+'
            }
        })
        .collect();
    journal_dir(paths).join(name)
}

/// Records a merge about to change `worktree`'s files (atomically).
fn write_journal(
    paths: &RepoPaths,
    branch: &str,
    old: Oid,
    new: Oid,
    worktree: &std::path::Path,
) -> Result<PathBuf, GitError> {
    let dir = journal_dir(paths);
    std::fs::create_dir_all(&dir).map_err(GitError::io("create", &dir))?;
    let file = journal_file(paths, branch);
    // Merges into different branches run at once (mega-plan features).
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let text = format!("{branch}\n{old}\n{new}\n{}\n", worktree.display());
    std::fs::write(&tmp, text).map_err(GitError::io("write", &tmp))?;
    std::fs::rename(&tmp, &file).map_err(GitError::io("write", &file))?;
    Ok(file)
}

fn remove_journal(file: Option<&std::path::Path>) {
    if let Some(f) = file {
        let _ = std::fs::remove_file(f);
    }
}

/// The commit `branch` points at, or [`MergeError::NoSuchBranch`].
fn branch_id(repo: &Repository, branch: &str) -> Result<Oid, MergeError> {
    repo.refname_to_id(&full_ref(branch))
        .map_err(|_| MergeError::NoSuchBranch {
            branch: branch.to_string(),
        })
}

/// Whether the tip of `target_branch` contains `source` (equal or ancestor).
pub fn is_merged(paths: &RepoPaths, source: Oid, target_branch: &str) -> Result<bool, MergeError> {
    let repo = open_main(paths)?;
    let target = branch_id(&repo, target_branch)?;
    Ok(target == source || descends(&repo, target, source)?)
}

/// Which of `commits` are on the history of `tip` (equal to it or its
/// ancestors). One walk of that history answers for all of them, stopping
/// once every one is found: asking per commit (`graph_descendant_of`) walks
/// the history since each commit again, which made resuming or finishing a
/// run of many stories quadratic. A commit that is not there costs the
/// whole walk, once.
pub fn reachable_from(
    repo: &Repository,
    tip: Oid,
    commits: &std::collections::HashSet<Oid>,
) -> Result<std::collections::HashSet<Oid>, GitError> {
    let mut found = std::collections::HashSet::new();
    if commits.is_empty() {
        return Ok(found);
    }
    let mut walk = repo.revwalk().map_err(GitError::git("walk history"))?;
    walk.push(tip).map_err(GitError::git("walk history"))?;
    for oid in walk {
        let oid = oid.map_err(GitError::git("walk history"))?;
        if commits.contains(&oid) {
            found.insert(oid);
            if found.len() == commits.len() {
                break;
            }
        }
    }
    Ok(found)
}

/// The commit `branch` points at; `None` when there is no such branch.
pub fn branch_tip(paths: &RepoPaths, branch: &str) -> Result<Option<Oid>, GitError> {
    let repo = open_main(paths)?;
    Ok(repo.refname_to_id(&full_ref(branch)).ok())
}

/// The worktree (main or linked, with its directory present) that has
/// `branch` checked out.
pub fn checked_out_in(paths: &RepoPaths, branch: &str) -> Result<Option<PathBuf>, GitError> {
    let refname = full_ref(branch);
    let names_it = |head: &str| head.trim().strip_prefix("ref:").map(str::trim) == Some(&refname);
    if let Ok(head) = std::fs::read_to_string(paths.common_dir.join("HEAD")) {
        if names_it(&head) {
            return Ok(Some(paths.main_root.clone()));
        }
    }
    let repo = open_main(paths)?;
    let names = repo.worktrees().map_err(GitError::git("list worktrees"))?;
    for name in names.iter().flatten() {
        let head_file = paths.common_dir.join("worktrees").join(name).join("HEAD");
        let Ok(head) = std::fs::read_to_string(&head_file) else {
            continue;
        };
        if !names_it(&head) {
            continue;
        }
        if let Ok(wt) = repo.find_worktree(name) {
            if wt.validate().is_ok() {
                return Ok(Some(wt.path().to_path_buf()));
            }
        }
    }
    Ok(None)
}

// ---------------------------------------------------------------------------

fn open_main(paths: &RepoPaths) -> Result<Repository, GitError> {
    Repository::open(&paths.main_root).map_err(GitError::git("open repository"))
}

fn full_ref(branch: &str) -> String {
    if branch.starts_with("refs/") {
        branch.to_string()
    } else {
        format!("refs/heads/{branch}")
    }
}

/// Whether `commit` is a strict descendant of `ancestor`.
fn descends(repo: &Repository, commit: Oid, ancestor: Oid) -> Result<bool, GitError> {
    repo.graph_descendant_of(commit, ancestor)
        .map_err(GitError::git("compare commits"))
}

fn conflict_paths(index: &git2::Index) -> Result<Vec<String>, GitError> {
    let mut files = Vec::new();
    for c in index.conflicts().map_err(GitError::git("read conflicts"))? {
        let c = c.map_err(GitError::git("read conflicts"))?;
        for entry in [c.our, c.their, c.ancestor].into_iter().flatten() {
            files.push(String::from_utf8_lossy(&entry.path).into_owned());
        }
    }
    files.sort();
    files.dedup();
    Ok(files)
}

/// Brings the worktree that has `branch` checked out (its HEAD still at
/// `old_tip`) to `new_tip`: files and index, safely. Only the paths that
/// differ between the two trees are looked at (found without reading equal
/// subtrees, [`crate::treediff`]), so the cost follows the size of the
/// change, not of the repository (this runs in the serial merge queue). libgit2 computes every conflict before writing anything, so a
/// refusal leaves the worktree as it was.
fn update_worktree(
    worktree: &PathBuf,
    branch: &str,
    old_tip: Oid,
    new_tip: Oid,
    force: bool,
) -> Result<(), MergeError> {
    let repo = Repository::open(worktree).map_err(GitError::git(format!(
        "open worktree '{}'",
        worktree.display()
    )))?;
    let commit = repo
        .find_commit(new_tip)
        .map_err(GitError::git("read merged commit"))?;
    let old_tree = repo
        .find_commit(old_tip)
        .and_then(|c| c.tree())
        .map_err(GitError::git("read target tree"))?;
    let new_tree = commit.tree().map_err(GitError::git("read merged tree"))?;
    let changed: Vec<PathBuf> = crate::treediff::changed_paths(&repo, Some(&old_tree), &new_tree)
        .map_err(GitError::git("compare trees"))?
        .into_iter()
        .map(|(path, _)| PathBuf::from(std::ffi::OsString::from_vec(path)))
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    let conflicts = RefCell::new(Vec::<String>::new());
    let result = {
        let mut co = CheckoutBuilder::new();
        co.disable_pathspec_match(true);
        for p in &changed {
            co.path(p.as_path());
        }
        if force {
            co.force();
        } else {
            co.safe();
        }
        co.notify_on(CheckoutNotificationType::CONFLICT)
            .notify(|_, path, _, _, _| {
                if let Some(p) = path {
                    conflicts
                        .borrow_mut()
                        .push(p.to_string_lossy().into_owned());
                }
                true
            });
        repo.checkout_tree(commit.as_object(), Some(&mut co))
    };
    // Forced (finishing an interrupted merge): the paths are the merge's.
    let mut files = if force {
        Vec::new()
    } else {
        conflicts.into_inner()
    };
    match result {
        Ok(()) if files.is_empty() => Ok(()),
        Ok(()) => Err(dirty(branch, worktree, files)),
        Err(e) if e.code() == git2::ErrorCode::Conflict || !files.is_empty() => {
            files.sort();
            files.dedup();
            Err(dirty(branch, worktree, files))
        }
        Err(e) => Err(GitError::git(format!("update files of '{}'", worktree.display()))(e).into()),
    }
}

fn dirty(branch: &str, worktree: &std::path::Path, files: Vec<String>) -> MergeError {
    MergeError::TargetDirty {
        branch: branch.to_string(),
        worktree: worktree.to_path_buf(),
        files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::commit_all;
    use crate::commit::testutil::*;
    use crate::worktree;

    /// A story worktree on `cascade/<id>` from main with `files` committed.
    fn story(paths: &RepoPaths, id: &str, files: &[(&str, &str)]) -> Oid {
        let branch = format!("cascade/{id}");
        let wt =
            worktree::create(paths, &worktree::path_for(paths, &branch), &branch, "main").unwrap();
        for (name, content) in files {
            let p = wt.path.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        commit_all(&wt.path, &format!("{id}: story"))
            .unwrap()
            .unwrap()
    }

    /// Every path git reports as changed, with its status bits.
    fn changes(repo: &Repository) -> Vec<String> {
        let mut so = git2::StatusOptions::new();
        so.include_untracked(true);
        repo.statuses(Some(&mut so))
            .unwrap()
            .iter()
            .map(|e| format!("{:?} {}", e.status(), e.path().unwrap_or("?")))
            .collect()
    }

    fn no_ff() -> MergeOptions {
        MergeOptions { ff_allowed: false }
    }

    #[test]
    fn a_merge_killed_between_files_and_branch_is_completed() {
        let (_tmp, repo, paths) = init_repo();
        let old = tip(&repo, "main");
        let s = story(&paths, "k", &[("k.txt", "k\n"), ("README.md", "merged\n")]);
        // Killed after the journal and part of the files, before the branch
        // moved, holding the index and branch locks.
        write_journal(&paths, "main", old, s, &paths.workdir).unwrap();
        std::fs::write(paths.workdir.join("k.txt"), "k\n").unwrap();
        std::fs::write(paths.common_dir.join("index.lock"), "").unwrap();
        std::fs::write(paths.common_dir.join("refs/heads/main.lock"), "").unwrap();
        let done = finish_interrupted_merge(&paths, "main").unwrap();
        assert_eq!(done, Some(s));
        assert_eq!(tip(&repo, "main"), s);
        assert_eq!(
            std::fs::read_to_string(paths.workdir.join("README.md")).unwrap(),
            "merged\n"
        );
        let mut so = git2::StatusOptions::new();
        so.include_untracked(true);
        assert!(repo.statuses(Some(&mut so)).unwrap().is_empty());
        assert!(!journal_file(&paths, "main").exists());
        // Nothing left to do: no journal, or the branch moved already.
        assert_eq!(finish_interrupted_merge(&paths, "main").unwrap(), None);
        write_journal(&paths, "main", old, s, &paths.workdir).unwrap();
        assert_eq!(finish_interrupted_merge(&paths, "main").unwrap(), None);
        assert_eq!(tip(&repo, "main"), s);
        assert!(!journal_file(&paths, "main").exists());
    }

    #[test]
    fn fast_forward_updates_the_checked_out_main_worktree() {
        let (_tmp, repo, paths) = init_repo();
        let s = story(
            &paths,
            "a",
            &[
                ("a.txt", "a\n"),
                ("README.md", "changed\n"),
                ("deep/dir/x.txt", "x\n"),
            ],
        );
        let out = merge_into(
            &paths,
            "main",
            "cascade/a",
            "merge a",
            &MergeOptions::default(),
        )
        .unwrap();
        assert_eq!(out, MergeOutcome::FastForward(s));
        assert_eq!(tip(&repo, "main"), s);
        assert_eq!(
            std::fs::read_to_string(paths.workdir.join("a.txt")).unwrap(),
            "a\n"
        );
        assert_eq!(
            std::fs::read_to_string(paths.workdir.join("README.md")).unwrap(),
            "changed\n"
        );
        assert_eq!(
            std::fs::read_to_string(paths.workdir.join("deep/dir/x.txt")).unwrap(),
            "x\n"
        );
        // Files and index match HEAD: nothing shows as changed.
        assert_eq!(changes(&repo), Vec::<String>::new());
        // The source branch is kept.
        assert_eq!(tip(&repo, "cascade/a"), s);
        assert!(is_merged(&paths, s, "main").unwrap());
        // Merging again is a no-op.
        assert_eq!(
            merge_into(
                &paths,
                "main",
                "cascade/a",
                "again",
                &MergeOptions::default()
            )
            .unwrap(),
            MergeOutcome::UpToDate
        );
    }

    #[test]
    fn files_deleted_by_the_story_leave_the_main_worktree() {
        let (_tmp, repo, paths) = init_repo();
        commit_file(&repo, "old.txt", "old\n", "old");
        let branch = "cascade/del";
        let wt =
            worktree::create(&paths, &worktree::path_for(&paths, branch), branch, "main").unwrap();
        std::fs::remove_file(wt.path.join("old.txt")).unwrap();
        let c = commit_all(&wt.path, "del: remove old.txt")
            .unwrap()
            .unwrap();
        let out = merge_into(&paths, "main", branch, "m", &MergeOptions::default()).unwrap();
        assert_eq!(out, MergeOutcome::FastForward(c));
        assert!(!paths.workdir.join("old.txt").exists());
        assert_eq!(changes(&repo), Vec::<String>::new());
    }

    #[test]
    fn true_merge_makes_a_commit_with_both_parents() {
        let (_tmp, repo, paths) = init_repo();
        let a = story(&paths, "a", &[("a.txt", "a\n")]);
        let b = story(&paths, "b", &[("b.txt", "b\n")]);
        let ff = merge_into(
            &paths,
            "main",
            "cascade/a",
            "merge a",
            &MergeOptions::default(),
        )
        .unwrap();
        assert_eq!(ff, MergeOutcome::FastForward(a));
        assert!(!is_merged(&paths, b, "main").unwrap());
        let out = merge_into(
            &paths,
            "main",
            "cascade/b",
            "merge b",
            &MergeOptions::default(),
        )
        .unwrap();
        let MergeOutcome::Merged(m) = out else {
            panic!("expected a merge commit, got {out:?}")
        };
        let c = repo.find_commit(m).unwrap();
        assert_eq!(c.parent_ids().collect::<Vec<_>>(), vec![a, b]);
        assert_eq!(c.message(), Some("merge b"));
        assert_eq!(file_at(&repo, m, "a.txt").as_deref(), Some("a\n"));
        assert_eq!(file_at(&repo, m, "b.txt").as_deref(), Some("b\n"));
        assert!(paths.workdir.join("b.txt").exists());
        assert_eq!(changes(&repo), Vec::<String>::new());
        assert!(is_merged(&paths, b, "main").unwrap());
        assert!(is_merged(&paths, a, "main").unwrap());
    }

    #[test]
    fn no_ff_makes_a_merge_commit_even_when_a_fast_forward_is_possible() {
        let (_tmp, repo, paths) = init_repo();
        let base = tip(&repo, "main");
        let f = story(&paths, "feat", &[("f.txt", "f\n")]);
        let out = merge_into(
            &paths,
            "main",
            "cascade/feat",
            "Merge feature feat",
            &no_ff(),
        )
        .unwrap();
        let MergeOutcome::Merged(m) = out else {
            panic!("expected a merge commit, got {out:?}")
        };
        let c = repo.find_commit(m).unwrap();
        assert_eq!(c.parent_ids().collect::<Vec<_>>(), vec![base, f]);
        assert_eq!(c.message(), Some("Merge feature feat"));
        assert_eq!(tip(&repo, "main"), m);
        assert!(paths.workdir.join("f.txt").exists());
    }

    fn member(branch: &str) -> GroupMember {
        GroupMember {
            source_branch: branch.to_string(),
            message: format!("merge {branch}"),
        }
    }

    fn parents(repo: &Repository, commit: Oid) -> Vec<Oid> {
        repo.find_commit(commit).unwrap().parent_ids().collect()
    }

    /// The commits of main from its tip back, first parents only.
    fn first_parents(repo: &Repository) -> Vec<Oid> {
        let mut walk = repo.revwalk().unwrap();
        walk.push(tip(repo, "main")).unwrap();
        walk.simplify_first_parent().unwrap();
        walk.map(Result::unwrap).collect()
    }

    #[test]
    fn a_group_makes_the_commits_of_merges_one_at_a_time_and_moves_main_once() {
        let (_tmp, repo, paths) = init_repo();
        let base = tip(&repo, "main");
        let a = story(&paths, "a", &[("a.txt", "a\n")]);
        let b = story(&paths, "b", &[("dir/b.txt", "b\n")]);
        let c = story(&paths, "c", &[("README.md", "from c\n")]);
        let reflog_before = repo.reflog("refs/heads/main").unwrap().len();
        let group = [
            member("cascade/a"),
            member("cascade/b"),
            member("cascade/c"),
        ];
        let out: Vec<MergeOutcome> = merge_group(&paths, "main", &group, &MergeOptions::default())
            .into_iter()
            .map(Result::unwrap)
            .collect();
        // a fast-forwards; b and c merge onto the tip the previous one left.
        assert_eq!(out[0], MergeOutcome::FastForward(a));
        let (MergeOutcome::Merged(mb), MergeOutcome::Merged(mc)) = (&out[1], &out[2]) else {
            panic!("expected two merge commits, got {out:?}")
        };
        let parents = |m: Oid| {
            repo.find_commit(m)
                .unwrap()
                .parent_ids()
                .collect::<Vec<_>>()
        };
        assert_eq!(parents(*mb), vec![a, b]);
        assert_eq!(parents(*mc), vec![*mb, c]);
        assert_eq!(
            repo.find_commit(*mc).unwrap().message(),
            Some("merge cascade/c")
        );
        assert_eq!(first_parents(&repo), vec![*mc, *mb, a, base]);
        // One move of the branch, and the worktree is at the last tip.
        assert_eq!(
            repo.reflog("refs/heads/main").unwrap().len(),
            reflog_before + 1
        );
        for (file, text) in [
            ("a.txt", "a\n"),
            ("dir/b.txt", "b\n"),
            ("README.md", "from c\n"),
        ] {
            assert_eq!(
                std::fs::read_to_string(paths.workdir.join(file)).unwrap(),
                text
            );
        }
        assert_eq!(changes(&repo), Vec::<String>::new());
        assert!(!journal_file(&paths, "main").exists());
        // Merged again as a group, each is up to date.
        let again = merge_group(&paths, "main", &group, &MergeOptions::default());
        assert!(again
            .into_iter()
            .all(|o| o.unwrap() == MergeOutcome::UpToDate));
    }

    #[test]
    fn a_conflicting_member_is_left_out_and_the_next_merges_onto_the_same_tip() {
        let (_tmp, repo, paths) = init_repo();
        let a = story(&paths, "a", &[("README.md", "from a\n")]);
        let b = story(&paths, "b", &[("README.md", "from b\n")]);
        let c = story(&paths, "c", &[("c.txt", "c\n")]);
        let group = [
            member("cascade/a"),
            member("cascade/b"),
            member("cascade/nope"),
            member("cascade/c"),
        ];
        let out = merge_group(&paths, "main", &group, &MergeOptions::default());
        assert_eq!(out[0].as_ref().unwrap(), &MergeOutcome::FastForward(a));
        assert_eq!(
            out[1].as_ref().unwrap(),
            &MergeOutcome::Conflict {
                files: vec!["README.md".to_string()]
            }
        );
        assert!(
            matches!(&out[2], Err(MergeError::NoSuchBranch { branch }) if branch == "cascade/nope")
        );
        let MergeOutcome::Merged(mc) = out[3].as_ref().unwrap() else {
            panic!("expected a merge commit, got {:?}", out[3])
        };
        assert_eq!(parents(&repo, *mc), vec![a, c]);
        assert_eq!(tip(&repo, "main"), *mc);
        assert_eq!(tip(&repo, "cascade/b"), b);
        assert_eq!(
            std::fs::read_to_string(paths.workdir.join("README.md")).unwrap(),
            "from a\n"
        );
        assert_eq!(changes(&repo), Vec::<String>::new());
    }

    #[test]
    fn a_change_of_the_users_in_one_members_way_refuses_that_member_only() {
        let (_tmp, repo, paths) = init_repo();
        let a = story(&paths, "a", &[("a.txt", "a\n")]);
        story(&paths, "b", &[("README.md", "from b\n")]);
        let c = story(&paths, "c", &[("c.txt", "c\n")]);
        std::fs::write(paths.workdir.join("README.md"), "the user's edit\n").unwrap();
        let group = [
            member("cascade/a"),
            member("cascade/b"),
            member("cascade/c"),
        ];
        let out = merge_group(&paths, "main", &group, &MergeOptions::default());
        assert_eq!(out[0].as_ref().unwrap(), &MergeOutcome::FastForward(a));
        assert!(
            matches!(&out[1], Err(MergeError::TargetDirty { files, .. }) if files == &["README.md"]),
            "{:?}",
            out[1]
        );
        let MergeOutcome::Merged(mc) = out[2].as_ref().unwrap() else {
            panic!("expected a merge commit, got {:?}", out[2])
        };
        assert_eq!(parents(&repo, *mc), vec![a, c]);
        assert_eq!(tip(&repo, "main"), *mc);
        assert_eq!(
            std::fs::read_to_string(paths.workdir.join("README.md")).unwrap(),
            "the user's edit\n"
        );
        assert!(paths.workdir.join("c.txt").exists());
    }

    #[test]
    fn conflict_changes_nothing_and_names_the_files() {
        let (_tmp, repo, paths) = init_repo();
        story(&paths, "a", &[("README.md", "from a\n"), ("x.txt", "a\n")]);
        let b = story(&paths, "b", &[("README.md", "from b\n"), ("y.txt", "b\n")]);
        let m1 = merge_into(
            &paths,
            "main",
            "cascade/a",
            "merge a",
            &MergeOptions::default(),
        )
        .unwrap();
        let main_tip = tip(&repo, "main");
        assert_eq!(m1.new_tip(), Some(main_tip));
        let out = merge_into(
            &paths,
            "main",
            "cascade/b",
            "merge b",
            &MergeOptions::default(),
        )
        .unwrap();
        assert_eq!(
            out,
            MergeOutcome::Conflict {
                files: vec!["README.md".to_string()]
            }
        );
        assert_eq!(tip(&repo, "main"), main_tip);
        assert_eq!(tip(&repo, "cascade/b"), b);
        assert_eq!(
            std::fs::read_to_string(paths.workdir.join("README.md")).unwrap(),
            "from a\n"
        );
        assert!(!paths.workdir.join("y.txt").exists());
        assert_eq!(changes(&repo), Vec::<String>::new());
        assert!(!repo.index().unwrap().has_conflicts());
    }

    #[test]
    fn merge_into_a_branch_checked_out_in_a_linked_worktree() {
        let (_tmp, repo, paths) = init_repo();
        let feat = worktree::create(
            &paths,
            &worktree::path_for(&paths, "cascade/feat"),
            "cascade/feat",
            "main",
        )
        .unwrap();
        let branch = "cascade/feat.s1";
        let s = worktree::create(
            &paths,
            &worktree::path_for(&paths, branch),
            branch,
            "cascade/feat",
        )
        .unwrap();
        std::fs::write(s.path.join("s1.txt"), "s1\n").unwrap();
        let c = commit_all(&s.path, "s1").unwrap().unwrap();
        assert_eq!(
            checked_out_in(&paths, "cascade/feat").unwrap().as_deref(),
            Some(feat.path.as_path())
        );
        let out = merge_into(
            &paths,
            "cascade/feat",
            branch,
            "m",
            &MergeOptions::default(),
        )
        .unwrap();
        assert_eq!(out, MergeOutcome::FastForward(c));
        assert_eq!(
            std::fs::read_to_string(feat.path.join("s1.txt")).unwrap(),
            "s1\n"
        );
        assert!(Repository::open(&feat.path)
            .unwrap()
            .statuses(None)
            .unwrap()
            .is_empty());
        // main and its files did not move.
        assert!(!paths.workdir.join("s1.txt").exists());
        assert_ne!(tip(&repo, "main"), c);
    }

    #[test]
    fn unrelated_local_changes_in_the_target_worktree_are_kept() {
        let (_tmp, repo, paths) = init_repo();
        commit_file(&repo, "notes.txt", "v1\n", "notes");
        let s = story(&paths, "a", &[("a.txt", "a\n")]);
        std::fs::write(paths.workdir.join("notes.txt"), "my edit\n").unwrap();
        std::fs::write(paths.workdir.join("scratch.txt"), "untracked\n").unwrap();
        let out = merge_into(&paths, "main", "cascade/a", "m", &MergeOptions::default()).unwrap();
        assert_eq!(out, MergeOutcome::FastForward(s));
        assert_eq!(
            std::fs::read_to_string(paths.workdir.join("notes.txt")).unwrap(),
            "my edit\n"
        );
        assert!(paths.workdir.join("scratch.txt").exists());
        assert!(paths.workdir.join("a.txt").exists());
    }

    #[test]
    fn refuses_to_overwrite_uncommitted_changes_and_moves_nothing() {
        let (_tmp, repo, paths) = init_repo();
        story(&paths, "a", &[("README.md", "story\n"), ("a.txt", "a\n")]);
        let before = tip(&repo, "main");
        std::fs::write(paths.workdir.join("README.md"), "user edit\n").unwrap();
        let err =
            merge_into(&paths, "main", "cascade/a", "m", &MergeOptions::default()).unwrap_err();
        match &err {
            MergeError::TargetDirty {
                files, worktree, ..
            } => {
                assert_eq!(files, &vec!["README.md".to_string()]);
                assert_eq!(worktree, &paths.main_root);
            }
            other => panic!("expected TargetDirty, got {other:?}"),
        }
        assert!(err.to_string().contains("commit or stash"));
        assert_eq!(tip(&repo, "main"), before);
        assert_eq!(
            std::fs::read_to_string(paths.workdir.join("README.md")).unwrap(),
            "user edit\n"
        );
        assert!(!paths.workdir.join("a.txt").exists());
    }

    #[test]
    fn refuses_to_overwrite_staged_changes() {
        let (_tmp, repo, paths) = init_repo();
        story(&paths, "a", &[("README.md", "story\n")]);
        let before = tip(&repo, "main");
        std::fs::write(paths.workdir.join("README.md"), "staged\n").unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(std::path::Path::new("README.md")).unwrap();
        index.write().unwrap();
        let err =
            merge_into(&paths, "main", "cascade/a", "m", &MergeOptions::default()).unwrap_err();
        assert!(matches!(err, MergeError::TargetDirty { .. }), "{err}");
        assert_eq!(tip(&repo, "main"), before);
    }

    #[test]
    fn refuses_to_overwrite_an_untracked_file_the_merge_adds() {
        let (_tmp, repo, paths) = init_repo();
        story(&paths, "a", &[("new.txt", "story\n")]);
        let before = tip(&repo, "main");
        std::fs::write(paths.workdir.join("new.txt"), "mine\n").unwrap();
        let err =
            merge_into(&paths, "main", "cascade/a", "m", &MergeOptions::default()).unwrap_err();
        assert!(matches!(err, MergeError::TargetDirty { .. }), "{err}");
        assert_eq!(tip(&repo, "main"), before);
        assert_eq!(
            std::fs::read_to_string(paths.workdir.join("new.txt")).unwrap(),
            "mine\n"
        );
    }

    #[test]
    fn target_not_checked_out_only_moves_the_ref() {
        let (_tmp, repo, paths) = init_repo();
        let c = repo.head().unwrap().peel_to_commit().unwrap();
        repo.branch("cascade/feat", &c, false).unwrap();
        let s = story(&paths, "a", &[("a.txt", "a\n")]);
        let out = merge_into(
            &paths,
            "cascade/feat",
            "cascade/a",
            "m",
            &MergeOptions::default(),
        )
        .unwrap();
        assert_eq!(out, MergeOutcome::FastForward(s));
        assert_eq!(tip(&repo, "cascade/feat"), s);
        assert!(!paths.workdir.join("a.txt").exists());
        assert_eq!(branch_tip(&paths, "cascade/feat").unwrap(), Some(s));
        assert_eq!(branch_tip(&paths, "nope").unwrap(), None);
        assert_eq!(checked_out_in(&paths, "cascade/feat").unwrap(), None);
    }

    #[test]
    fn unknown_branches_are_named() {
        let (_tmp, _repo, paths) = init_repo();
        let err = merge_into(
            &paths,
            "main",
            "cascade/none",
            "m",
            &MergeOptions::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("'cascade/none' does not exist"));
        let err = merge_into(&paths, "nope", "main", "m", &MergeOptions::default()).unwrap_err();
        assert!(matches!(err, MergeError::NoSuchBranch { .. }));
    }
}
