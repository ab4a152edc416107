//! Lock files a killed git writer left behind in a repository's git
//! directory (`HEAD.lock`, `index.lock`, `refs/heads/<b>.lock`, ...).
//!
//! git and libgit2 take a file's lock by creating `<file>.lock` exclusively
//! and rename it over the file when done; a process killed in between
//! leaves the lock, and every later writer of that file fails with "failed
//! to lock file ... for writing" until someone removes it. Only a caller
//! that knows no live process writes the repository may sweep them: a fleet
//! worker that has claimed its directory and stopped the agents a killed
//! worker left running there.

use std::path::{Path, PathBuf};

/// The git directory's own files that writers lock (besides the refs).
const LOCKED_FILES: &[&str] = &[
    "HEAD",
    "index",
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "config",
    "packed-refs",
    "shallow",
];

/// Removes the lock files left in `git_dir` (a `.git` directory) and under
/// its `refs/`, returning the ones removed. Missing files and directories
/// are not errors: there is nothing to sweep.
pub fn remove_stale_locks(git_dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for name in LOCKED_FILES {
        let lock = git_dir.join(format!("{name}.lock"));
        if std::fs::remove_file(&lock).is_ok() {
            removed.push(lock);
        }
    }
    sweep_refs(&git_dir.join("refs"), &mut removed);
    removed
}

/// The `*.lock` files anywhere under `dir` (ref names nest as directories).
fn sweep_refs(dir: &Path, removed: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => sweep_refs(&path, removed),
            Ok(_)
                if path.extension().is_some_and(|e| e == "lock")
                    && std::fs::remove_file(&path).is_ok() =>
            {
                removed.push(path);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_left_head_lock_is_removed_and_a_later_checkout_succeeds() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(tmp.path()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let tree = repo.treebuilder(None).unwrap().write().unwrap();
        let tree = repo.find_tree(tree).unwrap();
        let commit = repo
            .commit(Some("HEAD"), &sig, &sig, "one", &tree, &[])
            .unwrap();
        let git_dir = repo.path().to_path_buf();
        std::fs::write(git_dir.join("HEAD.lock"), "").unwrap();
        std::fs::create_dir_all(git_dir.join("refs/heads/cascade")).unwrap();
        std::fs::write(git_dir.join("refs/heads/cascade/s1.lock"), "").unwrap();
        std::fs::write(git_dir.join("refs/heads/keep"), "").unwrap();
        assert!(repo.set_head_detached(commit).is_err(), "the lock blocks");

        let mut removed = remove_stale_locks(&git_dir);
        removed.sort();
        assert_eq!(
            removed,
            vec![
                git_dir.join("HEAD.lock"),
                git_dir.join("refs/heads/cascade/s1.lock")
            ]
        );
        assert!(git_dir.join("refs/heads/keep").exists(), "only locks go");
        repo.set_head_detached(commit).unwrap();
        assert!(remove_stale_locks(&git_dir).is_empty());
        assert!(remove_stale_locks(&tmp.path().join("absent")).is_empty());
    }
}
