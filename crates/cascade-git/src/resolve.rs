//! A merge left for someone to resolve: the target branch merged *into* a
//! story's worktree with conflict markers in the files, concluded as a merge
//! commit on the story branch once they are gone, or aborted back to where
//! the branch was.
//!
//! # API summary
//! - [`begin`]`(workdir, their_branch) -> Begun`: merges `their_branch` into
//!   the worktree's branch; `Begun::Conflicted { files, orig_head }` leaves
//!   git's conflict markers (`<<<<<<<` / `=======` / `>>>>>>>`) in `files`
//!   and the merge state (MERGE_HEAD) for [`conclude`]; `Begun::Clean` when
//!   nothing conflicted (then it is concluded at once).
//! - [`conclude`]`(workdir, files, message) -> Concluded`: stages everything,
//!   refuses while an index conflict or a conflict marker remains in one of
//!   `files` (`Concluded::Unresolved`), else commits the merge (parents: the
//!   branch tip and the merged tip) and clears the merge state.
//! - [`abort`]`(workdir, orig_head)`: the worktree and branch back at
//!   `orig_head`, the merge state cleared.

use std::path::Path;

use git2::{build::CheckoutBuilder, Oid, Repository, ResetType};

use crate::GitError;

/// What [`begin`] left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// Files with conflict markers; the merge waits for [`conclude`].
    Conflicted { files: Vec<String>, orig_head: Oid },
    /// Merged without conflict (committed).
    Clean(Oid),
}

/// What [`conclude`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Concluded {
    /// The merge commit.
    Committed(Oid),
    /// Files still conflicted or holding conflict markers.
    Unresolved(Vec<String>),
}

fn open(workdir: &Path) -> Result<Repository, GitError> {
    Repository::open(workdir).map_err(|_| GitError::NotARepo {
        path: workdir.to_path_buf(),
    })
}

/// Merges branch `their` into the branch checked out at `workdir`.
pub fn begin(workdir: &Path, their: &str, message: &str) -> Result<Begun, GitError> {
    let repo = open(workdir)?;
    let orig_head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(GitError::git("read HEAD"))?
        .id();
    let their_oid = repo
        .refname_to_id(&format!("refs/heads/{their}"))
        .map_err(GitError::git(format!("find branch '{their}'")))?;
    let annotated = repo
        .find_annotated_commit(their_oid)
        .map_err(GitError::git("read the commit to merge"))?;
    let mut checkout = CheckoutBuilder::new();
    checkout.allow_conflicts(true).conflict_style_merge(true);
    repo.merge(&[&annotated], None, Some(&mut checkout))
        .map_err(GitError::git(format!("merge '{their}'")))?;
    let index = repo.index().map_err(GitError::git("read index"))?;
    if index.has_conflicts() {
        let mut files = Vec::new();
        for c in index.conflicts().map_err(GitError::git("read conflicts"))? {
            let c = c.map_err(GitError::git("read conflicts"))?;
            if let Some(e) = c.our.or(c.their).or(c.ancestor) {
                files.push(String::from_utf8_lossy(&e.path).into_owned());
            }
        }
        files.sort();
        files.dedup();
        return Ok(Begun::Conflicted { files, orig_head });
    }
    match conclude(workdir, &[], message)? {
        Concluded::Committed(oid) => Ok(Begun::Clean(oid)),
        Concluded::Unresolved(files) => Ok(Begun::Conflicted { files, orig_head }),
    }
}

/// Whether `text` still holds a conflict marker line.
fn has_markers(text: &str) -> bool {
    let mut open = false;
    for line in text.lines() {
        if line.starts_with("<<<<<<< ") || line == "<<<<<<<" {
            open = true;
        } else if open && (line.starts_with(">>>>>>> ") || line == ">>>>>>>") {
            return true;
        }
    }
    false
}

/// Concludes the merge in progress at `workdir` (see the module doc).
pub fn conclude(workdir: &Path, files: &[String], message: &str) -> Result<Concluded, GitError> {
    let repo = open(workdir)?;
    let root = repo
        .workdir()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| workdir.to_path_buf());
    let left: Vec<String> = files
        .iter()
        .filter(|f| {
            std::fs::read(root.join(f))
                .map(|b| has_markers(&String::from_utf8_lossy(&b)))
                .unwrap_or(false)
        })
        .cloned()
        .collect();
    if !left.is_empty() {
        return Ok(Concluded::Unresolved(left));
    }
    let mut index = repo.index().map_err(GitError::git("read index"))?;
    crate::commit::stage_all(&repo, &mut index)?;
    if index.has_conflicts() {
        let mut still = Vec::new();
        for c in index.conflicts().map_err(GitError::git("read conflicts"))? {
            let c = c.map_err(GitError::git("read conflicts"))?;
            if let Some(e) = c.our.or(c.their).or(c.ancestor) {
                still.push(String::from_utf8_lossy(&e.path).into_owned());
            }
        }
        return Ok(Concluded::Unresolved(still));
    }
    index.write().map_err(GitError::git("write index"))?;
    let tree_id = index.write_tree().map_err(GitError::git("write tree"))?;
    let tree = repo
        .find_tree(tree_id)
        .map_err(GitError::git("find tree"))?;
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(GitError::git("read HEAD"))?;
    let theirs = repo
        .find_reference("MERGE_HEAD")
        .and_then(|r| r.peel_to_commit())
        .map_err(GitError::git("read MERGE_HEAD (no merge in progress)"))?;
    let sig = crate::commit::signature(&repo)?;
    let oid = repo
        .commit(Some("HEAD"), &sig, &sig, message, &tree, &[&head, &theirs])
        .map_err(GitError::git("commit the merge"))?;
    repo.cleanup_state()
        .map_err(GitError::git("clear the merge state"))?;
    Ok(Concluded::Committed(oid))
}

/// Abandons the merge at `workdir`: files, index and branch back at `orig_head`.
pub fn abort(workdir: &Path, orig_head: Oid) -> Result<(), GitError> {
    let repo = open(workdir)?;
    let commit = repo
        .find_object(orig_head, None)
        .map_err(GitError::git("find the original HEAD"))?;
    let mut checkout = CheckoutBuilder::new();
    checkout.force().remove_untracked(false);
    repo.reset(&commit, ResetType::Hard, Some(&mut checkout))
        .map_err(GitError::git("reset to the original HEAD"))?;
    repo.cleanup_state()
        .map_err(GitError::git("clear the merge state"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::{commit_all, init_repository};

    fn repo_with_conflict() -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("r");
        init_repository(&root, "main").unwrap();
        std::fs::write(root.join("f.txt"), "base\n").unwrap();
        commit_all(&root, "init").unwrap();
        let repo = Repository::open(&root).unwrap();
        let head = repo.head().unwrap().peel_to_commit().unwrap();
        repo.branch("story", &head, false).unwrap();
        std::fs::write(root.join("f.txt"), "main side\n").unwrap();
        commit_all(&root, "main change").unwrap();
        repo.set_head("refs/heads/story").unwrap();
        repo.checkout_head(Some(CheckoutBuilder::new().force()))
            .unwrap();
        std::fs::write(root.join("f.txt"), "story side\n").unwrap();
        commit_all(&root, "story change").unwrap();
        (tmp, root)
    }

    #[test]
    fn conflict_markers_then_resolution_commits_a_merge() {
        let (_tmp, root) = repo_with_conflict();
        let Begun::Conflicted { files, orig_head } = begin(&root, "main", "m").unwrap() else {
            panic!("expected a conflict");
        };
        assert_eq!(files, ["f.txt"]);
        let text = std::fs::read_to_string(root.join("f.txt")).unwrap();
        assert!(has_markers(&text), "{text}");
        // Not yet resolved.
        assert_eq!(
            conclude(&root, &files, "m").unwrap(),
            Concluded::Unresolved(vec!["f.txt".into()])
        );
        std::fs::write(root.join("f.txt"), "main side\nstory side\n").unwrap();
        let Concluded::Committed(oid) = conclude(&root, &files, "merge main").unwrap() else {
            panic!("not committed");
        };
        let repo = Repository::open(&root).unwrap();
        let c = repo.find_commit(oid).unwrap();
        assert_eq!(c.parent_count(), 2);
        assert_eq!(c.parent_id(0).unwrap(), orig_head);
        assert_eq!(repo.state(), git2::RepositoryState::Clean);
    }

    #[test]
    fn abort_restores_the_branch() {
        let (_tmp, root) = repo_with_conflict();
        let Begun::Conflicted { orig_head, .. } = begin(&root, "main", "m").unwrap() else {
            panic!("expected a conflict");
        };
        abort(&root, orig_head).unwrap();
        let repo = Repository::open(&root).unwrap();
        assert_eq!(repo.head().unwrap().target(), Some(orig_head));
        assert_eq!(repo.state(), git2::RepositoryState::Clean);
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).unwrap(),
            "story side\n"
        );
    }
}
