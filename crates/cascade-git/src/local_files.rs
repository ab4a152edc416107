//! A worktree's own exclude: the files cascade itself put into a story's
//! worktree (copied in by `worktree.copy`, such as `.env`, or left behind by
//! `worktree.setup` commands) that must never be committed with the story.
//! With a fleet, story branches travel to a shared remote, and a secret in
//! one leaves the machine.
//!
//! Git has no exclude file of a single worktree (a linked worktree's
//! `info/exclude` is the repository's common one, and the user's
//! `.gitignore` is theirs), so the list lives in the worktree's own admin
//! directory (`.git/worktrees/<name>/cascade-local`): it goes with the
//! worktree, and every commit cascade makes there ([`crate::commit`],
//! [`crate::resolve`]) leaves those paths as they were in `HEAD`.
//!
//! - [`changed`]`(workdir)`: what differs from `HEAD` right now (modified,
//!   deleted and untracked paths that are not ignored; an untracked
//!   directory as `dir/`), taken after setup as the list to keep out;
//! - [`record`]`(workdir, paths)` / [`read`]`(workdir)`: the list itself;
//! - [`LocalFiles::covers`]: whether a path is one of them or inside one.

use std::path::{Path, PathBuf};

use git2::{Repository, Status, StatusOptions};

use crate::GitError;

/// Name of the list in a linked worktree's admin directory.
const FILE_NAME: &str = "cascade-local";

/// Paths a worktree keeps out of cascade's commits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalFiles {
    /// Repository-relative paths; a directory ends with `/`.
    pub paths: Vec<String>,
}

impl LocalFiles {
    /// Whether `path` (repository-relative, `/`-separated) is one of the
    /// files or inside one of the directories.
    pub fn covers(&self, path: &str) -> bool {
        self.paths.iter().any(|p| match p.strip_suffix('/') {
            Some(dir) => path.strip_prefix(dir).is_some_and(|r| r.starts_with('/')),
            None => p == path,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
}

fn open(workdir: &Path) -> Result<Repository, GitError> {
    Repository::open(workdir).map_err(|_| GitError::NotARepo {
        path: workdir.to_path_buf(),
    })
}

/// Where the list of the worktree of `repo` lives; `None` for a main
/// worktree (cascade never keeps local files there).
fn list_path(repo: &Repository) -> Option<PathBuf> {
    repo.is_worktree().then(|| repo.path().join(FILE_NAME))
}

/// The paths of the worktree at `workdir` that differ from `HEAD`: tracked
/// files modified or deleted, untracked files and directories that are not
/// ignored (an untracked directory as `dir/`, not its every file).
pub fn changed(workdir: &Path) -> Result<Vec<String>, GitError> {
    status_paths(workdir, true)
}

/// The tracked files of the worktree at `workdir` whose content on disk or
/// in the index differs from `HEAD` (modified, deleted, type changed),
/// sorted: [`changed`] without untracked files (which gates may leave).
pub fn changed_tracked(workdir: &Path) -> Result<Vec<String>, GitError> {
    status_paths(workdir, false)
}

fn status_paths(workdir: &Path, untracked: bool) -> Result<Vec<String>, GitError> {
    let repo = open(workdir)?;
    let mut so = StatusOptions::new();
    so.include_untracked(untracked)
        .recurse_untracked_dirs(false)
        .include_ignored(false)
        .exclude_submodules(true);
    let statuses = repo
        .statuses(Some(&mut so))
        .map_err(GitError::git("read status"))?;
    let mut out: Vec<String> = statuses
        .iter()
        .filter(|e| e.status() != Status::CURRENT)
        .filter_map(|e| e.path().map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// Replaces the list of the worktree at `workdir` with `paths` (an empty
/// list removes it).
pub fn record(workdir: &Path, paths: &[String]) -> Result<(), GitError> {
    let repo = open(workdir)?;
    let Some(file) = list_path(&repo) else {
        return Ok(());
    };
    if paths.is_empty() {
        return match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(GitError::io("remove", &file)(e))
            }
            _ => Ok(()),
        };
    }
    let mut text = String::from("# files cascade put into this worktree; never committed\n");
    for p in paths {
        text.push_str(p);
        text.push('\n');
    }
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(GitError::io("write", &tmp))?;
    std::fs::rename(&tmp, &file).map_err(GitError::io("write", &file))
}

/// The list of the worktree of `repo` (empty when there is none).
pub(crate) fn of(repo: &Repository) -> LocalFiles {
    let text = list_path(repo)
        .and_then(|f| std::fs::read_to_string(f).ok())
        .unwrap_or_default();
    LocalFiles {
        paths: text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect(),
    }
}

/// The list of the worktree at `workdir`.
pub fn read(workdir: &Path) -> Result<LocalFiles, GitError> {
    Ok(of(&open(workdir)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::testutil::*;

    #[test]
    fn covers_files_and_directories() {
        let l = LocalFiles {
            paths: vec![".env".into(), "node_modules/".into()],
        };
        assert!(l.covers(".env"));
        assert!(!l.covers(".env.local"));
        assert!(l.covers("node_modules/a/b.js"));
        assert!(!l.covers("node_modules_old/x"));
        assert!(!l.covers("src/.env"));
    }

    #[test]
    fn recorded_after_setup_and_kept_in_the_admin_dir() {
        let (_tmp, repo, paths) = init_repo();
        commit_file(&repo, "lock.txt", "v1\n", "lock");
        let wt = story_worktree(&paths, "cascade/s1");
        std::fs::write(wt.path.join(".env"), "SECRET=hunter2\n").unwrap();
        std::fs::create_dir_all(wt.path.join("out/deep")).unwrap();
        std::fs::write(wt.path.join("out/deep/x"), "x").unwrap();
        std::fs::write(wt.path.join("lock.txt"), "v2\n").unwrap();
        let found = changed(&wt.path).unwrap();
        assert_eq!(found, [".env", "lock.txt", "out/"]);
        record(&wt.path, &found).unwrap();
        assert_eq!(read(&wt.path).unwrap().paths, found);
        // Not in the worktree, not in the main repository's exclude.
        assert!(!wt.path.join(FILE_NAME).exists());
        assert!(read(&paths.workdir).unwrap().is_empty());
        record(&wt.path, &[]).unwrap();
        assert!(read(&wt.path).unwrap().is_empty());
    }
}
