//! The two git reads the engine makes itself: which branch is checked out and
//! whether the tree is dirty. Everything else (worktrees, commits, merges,
//! ancestry) is `cascade_git`'s job.

use std::path::{Path, PathBuf};

use cascade_git::GitError;
use git2::{Repository, StatusOptions};

/// The short name of the branch checked out in the worktree at `dir`, or
/// `None` when HEAD is detached or unborn.
pub fn current_branch(dir: &Path) -> Result<Option<String>, GitError> {
    let repo = Repository::discover(dir).map_err(GitError::git("open repository"))?;
    let head = match repo.head() {
        Ok(h) => h,
        Err(_) => return Ok(None),
    };
    if !head.is_branch() {
        return Ok(None);
    }
    Ok(head.shorthand().map(str::to_string))
}

/// Paths with uncommitted changes in the worktree at `dir` (tracked changes
/// and untracked files that are not ignored), at most `limit` of them,
/// leaving out anything under a `.cascade/` directory.
pub fn dirty_files(dir: &Path, limit: usize) -> Result<Vec<String>, GitError> {
    dirty_files_except(dir, &[], limit)
}

/// [`dirty_files`], also leaving out cascade's own files: the paths in `own`.
/// cascade's own files are not the user's changes: paths in `own` (absolute)
/// and anything under a `.cascade/` directory are left out, even when they
/// are tracked or live in a subdirectory the exclude patterns do not reach.
pub fn dirty_files_except(
    dir: &Path,
    own: &[PathBuf],
    limit: usize,
) -> Result<Vec<String>, GitError> {
    let repo = Repository::discover(dir).map_err(GitError::git("open repository"))?;
    let root = repo
        .workdir()
        .map(|w| w.canonicalize().unwrap_or_else(|_| w.to_path_buf()))
        .unwrap_or_else(|| dir.to_path_buf());
    let own: Vec<PathBuf> = own
        .iter()
        .map(|p| {
            let abs = if p.is_absolute() {
                p.clone()
            } else {
                dir.join(p)
            };
            match (
                abs.parent().and_then(|d| d.canonicalize().ok()),
                abs.file_name(),
            ) {
                (Some(d), Some(n)) => d.join(n),
                _ => abs,
            }
        })
        .collect();
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(false)
        .include_ignored(false)
        .exclude_submodules(true);
    let statuses = repo
        .statuses(Some(&mut opts))
        .map_err(GitError::git("status"))?;
    Ok(statuses
        .iter()
        .filter(|e| !e.status().is_ignored())
        .filter_map(|e| e.path().map(str::to_string))
        .filter(|p| {
            let is_state = p.starts_with(".cascade/") || p.contains("/.cascade/");
            !is_state && !own.contains(&root.join(p))
        })
        .take(limit)
        .collect())
}
