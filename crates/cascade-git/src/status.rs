//! The content-relevant state of a working tree, read through git's index.
//!
//! [`scan`] lists every path git would show in a tree listing (tracked paths
//! from the index, plus untracked paths that are not ignored) and says for each
//! one whether its blob id is already known or the file must be hashed. It
//! never hashes anything itself: [`crate::fingerprint`] does that, in
//! parallel, for the paths that need it.
//!
//! Git's index is the only stat cache: libgit2's index-to-workdir diff
//! compares each tracked file's stat data with its index entry (and checks
//! the content of racily clean entries, as git does), walks untracked
//! directories with git's ignore rules, and enters neither an ignored
//! directory nor a nested repository. A tracked path the diff leaves out is
//! clean, so its index entry's id is the file's blob id; what it lists as
//! modified, typechanged, conflicted or untracked is hashed from disk.
//!
//! [`changed_files`] lists what changed relative to a base commit (untracked
//! included), for incremental gates.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use git2::{Delta, DiffOptions, Oid, Repository};

use crate::repo::CASCADE_DIR;
use crate::GitError;

/// Git file modes as they appear in trees.
pub mod mode {
    /// A regular file.
    pub const FILE: u32 = 0o100644;
    /// An executable regular file.
    pub const EXECUTABLE: u32 = 0o100755;
    /// A symbolic link (its blob is the link target).
    pub const SYMLINK: u32 = 0o120000;
    /// A submodule (its id is a commit id).
    pub const GITLINK: u32 = 0o160000;
}

/// One path of a working tree and how to learn its blob id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathState {
    /// Repository-relative path with `/` separators.
    pub path: String,
    /// Git mode of the file as it is on disk (executable bit included).
    pub mode: u32,
    /// What to do to get the blob id.
    pub source: Source,
}

/// Where a path's blob id comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Git's index entry is up to date: its id is the file's blob id.
    Index(Oid),
    /// The file must be hashed (modified, typechanged, conflicted or untracked).
    Hash,
}

/// The paths of a working tree; see [`scan`].
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Every present path, sorted by path.
    pub paths: Vec<PathState>,
    /// How many paths were tracked (came from the index).
    pub tracked: usize,
}

/// Lists the paths of the worktree at `workdir` (its root) with how to get
/// their blob ids. Deleted tracked files are left out. `.cascade/` is never
/// listed.
pub fn scan(repo: &Repository, workdir: &Path) -> Result<Scan, GitError> {
    let index = repo.index().map_err(GitError::git("read index"))?;
    let (changed, untracked) = workdir_changes(repo, &index, workdir)?;
    let mut paths: Vec<PathState> = Vec::with_capacity(index.len() + untracked.len());
    for entry in index.iter() {
        // A conflicted path has up to three stage entries: one is enough
        // (they all say the same: hash it, or it is gone).
        if is_cascade_path(&entry.path)
            || paths
                .last()
                .is_some_and(|p| p.path.as_bytes() == entry.path)
        {
            continue;
        }
        let found = match changed.get(entry.path.as_slice()) {
            Some(&Some(mode)) => Some((mode, Source::Hash)),
            Some(None) => None,
            // A submodule counts while its directory is there.
            None if entry.mode == mode::GITLINK => {
                is_dir(workdir, &entry.path).then_some((mode::GITLINK, Source::Index(entry.id)))
            }
            None => Some((entry.mode, Source::Index(entry.id))),
        };
        if let Some((mode, source)) = found {
            paths.push(PathState {
                path: String::from_utf8_lossy(&entry.path).into_owned(),
                mode,
                source,
            });
        }
    }
    let tracked = paths.len();
    paths.extend(untracked);
    // Byte order (a case-insensitive index, or the untracked paths
    // appended, sort otherwise); already sorted when nothing is untracked.
    paths.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    Ok(Scan { paths, tracked })
}

/// Per changed tracked path, its git mode on disk (`None`: deleted, or
/// nothing git could track is there now).
type Changed = HashMap<Vec<u8>, Option<u32>>;

/// What git's index-to-workdir diff reports: the changed tracked paths, and
/// the untracked, not ignored files.
fn workdir_changes(
    repo: &Repository,
    index: &git2::Index,
    workdir: &Path,
) -> Result<(Changed, Vec<PathState>), GitError> {
    let mut opts = DiffOptions::new();
    // Submodules are taken at the commit the index records: opening each
    // one to compare its HEAD is not what a content key needs.
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_typechange(true)
        .ignore_submodules(true);
    let diff = repo
        .diff_index_to_workdir(Some(index), Some(&mut opts))
        .map_err(GitError::git("compare the index with the working tree"))?;
    let mut changed = HashMap::new();
    let mut untracked = Vec::new();
    for delta in diff.deltas() {
        let file = delta.new_file();
        let Some(path) = file.path_bytes().filter(|p| !is_cascade_path(p)) else {
            continue;
        };
        match delta.status() {
            Delta::Untracked => {
                // A nested repository is listed as its directory: not a file.
                if let Some(mode) = blob_mode(u32::from(file.mode())) {
                    untracked.push(PathState {
                        path: String::from_utf8_lossy(path).into_owned(),
                        mode,
                        source: Source::Hash,
                    });
                }
            }
            Delta::Deleted => {
                changed.insert(path.to_vec(), None);
            }
            // Modified, typechanged or conflicted: what is on disk now.
            _ => {
                let mode = std::fs::symlink_metadata(workdir.join(OsStr::from_bytes(path)))
                    .ok()
                    .and_then(|m| git_mode(&m));
                changed.insert(path.to_vec(), mode);
            }
        }
    }
    Ok((changed, untracked))
}

/// The mode itself when it is one of a file git stores as a blob.
fn blob_mode(mode: u32) -> Option<u32> {
    matches!(mode, mode::FILE | mode::EXECUTABLE | mode::SYMLINK).then_some(mode)
}

/// Whether the repository-relative `path` is a directory in `workdir`.
fn is_dir(workdir: &Path, path: &[u8]) -> bool {
    std::fs::symlink_metadata(workdir.join(OsStr::from_bytes(path))).is_ok_and(|m| m.is_dir())
}

/// The git mode of a file on disk; `None` for what git cannot track (fifos,
/// sockets, directories where a file was).
pub fn git_mode(meta: &std::fs::Metadata) -> Option<u32> {
    let ft = meta.file_type();
    if ft.is_symlink() {
        Some(mode::SYMLINK)
    } else if ft.is_file() && meta.mode() & 0o100 != 0 {
        Some(mode::EXECUTABLE)
    } else if ft.is_file() {
        Some(mode::FILE)
    } else {
        None
    }
}

/// Whether a repository-relative path is inside cascade's own directory.
pub fn is_cascade_path(path: &[u8]) -> bool {
    let dir = CASCADE_DIR.as_bytes();
    path.starts_with(dir) && (path.len() == dir.len() || path[dir.len()] == b'/')
}

/// Files that differ between the commit `base` (any revision git can parse)
/// and the working tree (staged, unstaged and untracked, not ignored),
/// repository-relative and sorted. Deleted files are not listed: there is
/// nothing left to check in them.
pub fn changed_files(workdir: &Path, base: &str) -> Result<Vec<String>, GitError> {
    let repo = Repository::open(workdir).map_err(GitError::git("open repository"))?;
    let obj = repo
        .revparse_single(base)
        .map_err(GitError::git(format!("resolve base '{base}'")))?;
    differing(&repo, obj.id(), false)
}

/// Files the work in `workdir` touches since it left `branch` (from the
/// merge base of its `HEAD` and the branch to the working tree: commits,
/// staged, unstaged and untracked changes, deletions included),
/// repository-relative and sorted: what a story still running changes,
/// for telling whether another story's conflict is with it.
pub fn touched_since(workdir: &Path, branch: &str) -> Result<Vec<String>, GitError> {
    let repo = Repository::open(workdir).map_err(GitError::git("open repository"))?;
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(GitError::git("resolve HEAD"))?;
    let tip = repo
        .revparse_single(&format!("refs/heads/{branch}"))
        .map_err(GitError::git(format!("resolve branch '{branch}'")))?;
    let base = repo
        .merge_base(head.id(), tip.id())
        .map_err(GitError::git(format!("merge base with '{branch}'")))?;
    differing(&repo, base, true)
}

/// Files the commits of `branch` touch since it left `target` (from their
/// merge base to the branch's tip), repository-relative and sorted: what a
/// story's work changes when its worktree is not here to look at (a fleet
/// worker's), once its commits are fetched.
pub fn branch_touches(repo: &Path, branch: &str, target: &str) -> Result<Vec<String>, GitError> {
    let repo = Repository::open(repo).map_err(GitError::git("open repository"))?;
    let commit = |name: &str| {
        repo.revparse_single(&format!("refs/heads/{name}"))
            .and_then(|o| o.peel_to_commit())
            .map_err(GitError::git(format!("resolve branch '{name}'")))
    };
    let (tip, onto) = (commit(branch)?, commit(target)?);
    let base = repo
        .merge_base(tip.id(), onto.id())
        .and_then(|b| repo.find_commit(b))
        .map_err(GitError::git(format!(
            "merge base of '{branch}' and '{target}'"
        )))?;
    let (from, to) = (
        base.tree().map_err(GitError::git("read the base's tree"))?,
        tip.tree()
            .map_err(GitError::git("read the branch's tree"))?,
    );
    let diff = repo
        .diff_tree_to_tree(Some(&from), Some(&to), None)
        .map_err(GitError::git("diff the branch against its base"))?;
    Ok(paths(&diff, true))
}

/// The paths a diff names (a deleted file's old path; deletions only when
/// `deleted`), repository-relative, sorted, without cascade's own.
fn paths(diff: &git2::Diff<'_>, deleted: bool) -> Vec<String> {
    let mut out: Vec<String> = diff
        .deltas()
        .filter(|d| deleted || d.status() != git2::Delta::Deleted)
        .filter_map(|d| {
            let file = if d.status() == git2::Delta::Deleted {
                d.old_file()
            } else {
                d.new_file()
            };
            file.path().map(|p| p.to_string_lossy().into_owned())
        })
        .filter(|p| !is_cascade_path(p.as_bytes()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Paths that differ between the tree of `base` and the working tree.
fn differing(repo: &Repository, base: git2::Oid, deleted: bool) -> Result<Vec<String>, GitError> {
    let tree = repo
        .find_object(base, None)
        .and_then(|o| o.peel_to_tree())
        .map_err(GitError::git(format!("read tree of '{base}'")))?;
    let mut opts = git2::DiffOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_typechange(true);
    let diff = repo
        .diff_tree_to_workdir_with_index(Some(&tree), Some(&mut opts))
        .map_err(GitError::git("diff against base"))?;
    Ok(paths(&diff, deleted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cascade_paths_are_recognised() {
        assert!(is_cascade_path(b".cascade"));
        assert!(is_cascade_path(b".cascade/gate-cache/x"));
        assert!(!is_cascade_path(b".cascaded"));
        assert!(!is_cascade_path(b"src/.cascade"));
    }

    #[test]
    fn only_file_modes_are_blob_modes() {
        for m in [mode::FILE, mode::EXECUTABLE, mode::SYMLINK] {
            assert_eq!(blob_mode(m), Some(m));
        }
        assert_eq!(blob_mode(mode::GITLINK), None);
        assert_eq!(blob_mode(0o040000), None);
    }

    /// A story's branch: what it committed, changed, added and deleted
    /// since it left `main`, not what `main` did meanwhile.
    #[test]
    fn touched_since_names_the_work_since_the_branch_not_the_branch_s_own() {
        use crate::commit::testutil::{git, init_repo};
        let (_tmp, _repo, paths) = init_repo();
        let root = &paths.workdir;
        std::fs::write(root.join("gone.txt"), "x\n").unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "gone"]);
        git(root, &["checkout", "-qb", "story"]);
        std::fs::write(root.join("committed.txt"), "1\n").unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "story work"]);
        git(root, &["checkout", "-q", "main"]);
        std::fs::write(root.join("main-only.txt"), "m\n").unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "main moves on"]);
        git(root, &["checkout", "-q", "story"]);
        std::fs::write(root.join("README.md"), "edited\n").unwrap();
        std::fs::write(root.join("new.txt"), "n\n").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        assert_eq!(
            touched_since(root, "main").unwrap(),
            ["README.md", "committed.txt", "gone.txt", "new.txt"]
        );
        assert!(touched_since(root, "no-such-branch").is_err());
        // The branch alone: its commits, not the worktree's changes nor
        // what main did meanwhile.
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "more story work"]);
        git(root, &["checkout", "-q", "main"]);
        assert_eq!(
            branch_touches(root, "story", "main").unwrap(),
            ["README.md", "committed.txt", "gone.txt", "new.txt"]
        );
        assert!(branch_touches(root, "main", "main").unwrap().is_empty());
        assert!(branch_touches(root, "no-such-branch", "main").is_err());
    }
}
