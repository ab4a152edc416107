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

/// Whether HEAD names a branch that has no commit yet (a fresh `git init`).
pub fn head_unborn(dir: &Path) -> bool {
    Repository::discover(dir)
        .map(|repo| matches!(repo.head(), Err(e) if e.code() == git2::ErrorCode::UnbornBranch))
        .unwrap_or(false)
}

/// Paths with uncommitted changes in the worktree at `dir` (tracked changes
/// and untracked files that are not ignored), at most `limit` of them,
/// leaving out anything under a `.cascade/` directory.
pub fn dirty_files(dir: &Path, limit: usize) -> Result<Vec<String>, GitError> {
    dirty_files_except(dir, &[], limit)
}

/// The user's uncommitted changes in the worktree of `dir`, leaving out
/// cascade's own files: `files`, and the root files the exclude `patterns`
/// name (`/prd.json`; a directory pattern such as `/.cascade/` is left out
/// by [`dirty_files_except`] anyway), whether or not those patterns are in
/// `info/exclude` yet: a run writes them only once it starts, after this
/// check.
pub fn user_changes(
    dir: &Path,
    patterns: &[String],
    files: &[PathBuf],
    limit: usize,
) -> Result<Vec<String>, GitError> {
    let root = Repository::discover(dir)
        .ok()
        .and_then(|r| r.workdir().map(Path::to_path_buf))
        .unwrap_or_else(|| dir.to_path_buf());
    let own: Vec<PathBuf> = patterns
        .iter()
        .filter(|p| !p.ends_with('/'))
        .map(|p| root.join(p.trim_start_matches('/')))
        .chain(files.iter().cloned())
        .collect();
    dirty_files_except(dir, &own, limit)
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
    // Untracked directories are listed file by file: a PRD kept in an
    // untracked folder (`--prd plans/prd.json`) must not make the whole
    // folder count as the user's changes.
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
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

/// `info/exclude` patterns for exactly the files `files` (absolute, or
/// relative to `dir`), anchored at the root of the worktree holding `dir`:
/// `/plans/next/prd.json`. A PRD or progress.txt kept in an untracked folder
/// is then ignored itself (the folder no longer shows as `?? plans/`), while
/// the user's other files beside it still count. Files outside the worktree
/// get no pattern.
pub fn exclude_patterns(dir: &Path, files: &[PathBuf]) -> Vec<String> {
    let Ok(repo) = Repository::discover(dir) else {
        return Vec::new();
    };
    let Some(root) = repo.workdir() else {
        return Vec::new();
    };
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut out = Vec::new();
    for f in files {
        let abs = if f.is_absolute() {
            f.clone()
        } else {
            dir.join(f)
        };
        let abs = match (
            abs.parent().and_then(|d| d.canonicalize().ok()),
            abs.file_name(),
        ) {
            (Some(d), Some(n)) => d.join(n),
            _ => abs,
        };
        let Ok(rel) = abs.strip_prefix(&root) else {
            continue;
        };
        let Some(rel) = rel.to_str() else { continue };
        if rel.is_empty() {
            continue;
        }
        let pattern = format!("/{}", escape_pattern(rel));
        if !out.contains(&pattern) {
            out.push(pattern);
        }
    }
    out
}

/// A path as a gitignore pattern that matches only itself: glob characters
/// and a trailing space escaped.
fn escape_pattern(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    if out.ends_with(' ') {
        out.pop();
        out.push_str("\\ ");
    }
    out
}

#[cfg(test)]
mod exclude_tests {
    use super::*;

    #[test]
    fn patterns_name_exactly_the_files_inside_the_worktree() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        std::fs::create_dir_all(root.join("plans/next")).unwrap();
        Repository::init(&root).unwrap();
        let got = exclude_patterns(
            &root,
            &[
                PathBuf::from("plans/next/prd.json"),
                root.join("progress.txt"),
                root.join("plans/we*rd[1].json"),
                tmp.path().join("outside.json"),
            ],
        );
        assert_eq!(
            got,
            vec![
                "/plans/next/prd.json".to_string(),
                "/progress.txt".to_string(),
                "/plans/we\\*rd\\[1].json".to_string(),
            ]
        );
    }
}
