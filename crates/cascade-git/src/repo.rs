//! Finding the repository from any directory and the paths cascade derives from it.
//!
//! cascade keeps one `.cascade/` directory per repository, at the root of the
//! *main* worktree, even when it is started inside a linked worktree (a story
//! or feature worktree): config, gate cache and run state are shared by all
//! worktrees. The directory is kept out of git through `.git/info/exclude`,
//! never by editing the user's `.gitignore`.

use std::path::{Path, PathBuf};

use git2::Repository;

use crate::GitError;

/// Name of cascade's state directory at the main worktree's root.
pub const CASCADE_DIR: &str = ".cascade";

/// The paths of the repository that contains some directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoPaths {
    /// Root of the worktree that contains the directory (main or linked).
    pub workdir: PathBuf,
    /// Root of the main worktree.
    pub main_root: PathBuf,
    /// The common git directory (`<main_root>/.git` for a normal repository).
    pub common_dir: PathBuf,
    /// Whether `workdir` is a linked worktree.
    pub is_linked: bool,
}

impl RepoPaths {
    /// Discovers the repository containing `dir` (searching upwards).
    pub fn discover(dir: &Path) -> Result<RepoPaths, GitError> {
        let repo = Repository::discover(dir).map_err(|_| GitError::NotARepo {
            path: dir.to_path_buf(),
        })?;
        Self::of(&repo)
    }

    /// The paths of an open repository.
    pub fn of(repo: &Repository) -> Result<RepoPaths, GitError> {
        let workdir = repo
            .workdir()
            .ok_or_else(|| GitError::Bare {
                path: repo.path().to_path_buf(),
            })?
            .to_path_buf();
        let common_dir = repo.commondir().to_path_buf();
        let is_linked = repo.is_worktree();
        let main_root = if is_linked {
            // The common dir of a non-bare repository is `<main root>/.git`.
            common_dir
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| workdir.clone())
        } else {
            workdir.clone()
        };
        Ok(RepoPaths {
            workdir: normalize(workdir),
            main_root: normalize(main_root),
            common_dir: normalize(common_dir),
            is_linked,
        })
    }

    /// `<main root>/.cascade`: the one state directory of this repository.
    pub fn cascade_dir(&self) -> PathBuf {
        self.main_root.join(CASCADE_DIR)
    }

    /// Opens the repository of `workdir`.
    pub fn open(&self) -> Result<Repository, GitError> {
        Repository::open(&self.workdir).map_err(GitError::git("open repository"))
    }

    /// `<common dir>/info/exclude`, shared by every worktree.
    pub fn exclude_file(&self) -> PathBuf {
        self.common_dir.join("info").join("exclude")
    }

    /// Makes sure every pattern is listed in `.git/info/exclude` (appending
    /// the missing ones), so cascade's own files never show up as changes.
    pub fn ensure_excluded(&self, patterns: &[&str]) -> Result<(), GitError> {
        let path = self.exclude_file();
        // Temp files of earlier writes whose process was killed.
        cascade_fs::remove_dead_writers_temps(&path);
        let existing = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(GitError::io("read", &path)(e)),
        };
        // Each pattern once, however often it is asked for (the usual names
        // and the exact files of a run often coincide): the block stays as
        // it is on every later call.
        let mut present: std::collections::HashSet<&str> =
            existing.lines().map(str::trim).collect();
        let missing: Vec<&str> = patterns
            .iter()
            .copied()
            .filter(|p| present.insert(p))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut text = existing.clone();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        if !text.contains("# cascade") {
            text.push_str("# cascade (planning, progress and state files)\n");
        }
        for p in missing {
            text.push_str(p);
            text.push('\n');
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(GitError::io("create", dir))?;
        }
        // Write beside and rename (a temp name unique per process and call,
        // removed again when the write fails, e.g. on a full disk).
        cascade_fs::write_atomic(&path, text.as_bytes(), cascade_fs::Durability::Renamed)
            .map_err(GitError::io("write", &path))
    }
}

/// Strips a trailing separator and resolves symlinks where possible, so that
/// paths compare equal however the repository was reached.
fn normalize(p: PathBuf) -> PathBuf {
    let p = p.canonicalize().unwrap_or(p);
    match p.to_str() {
        Some(s) if s.len() > 1 && s.ends_with('/') => PathBuf::from(&s[..s.len() - 1]),
        _ => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init(dir: &Path) -> Repository {
        let repo = Repository::init(dir).unwrap();
        {
            let mut cfg = repo.config().unwrap();
            cfg.set_str("user.name", "t").unwrap();
            cfg.set_str("user.email", "t@t").unwrap();
        }
        std::fs::write(dir.join("a.txt"), "a").unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("a.txt")).unwrap();
        let tree_id = index.write_tree().unwrap();
        {
            let tree = repo.find_tree(tree_id).unwrap();
            let sig = repo.signature().unwrap();
            repo.commit(Some("HEAD"), &sig, &sig, "init", &tree, &[])
                .unwrap();
        }
        repo
    }

    #[test]
    fn discovers_main_and_linked_worktrees() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        std::fs::create_dir(&root).unwrap();
        let repo = init(&root);
        std::fs::create_dir(root.join("sub")).unwrap();
        let main = RepoPaths::discover(&root.join("sub")).unwrap();
        let canon = root.canonicalize().unwrap();
        assert_eq!(main.workdir, canon);
        assert_eq!(main.main_root, canon);
        assert!(!main.is_linked);
        assert_eq!(main.cascade_dir(), canon.join(".cascade"));

        let wt_path = tmp.path().join("wt");
        repo.worktree("wt", &wt_path, None).unwrap();
        let linked = RepoPaths::discover(&wt_path).unwrap();
        assert!(linked.is_linked);
        assert_eq!(linked.workdir, wt_path.canonicalize().unwrap());
        assert_eq!(linked.main_root, canon);
        assert_eq!(linked.cascade_dir(), canon.join(".cascade"));
        assert_eq!(linked.exclude_file(), main.exclude_file());
    }

    #[test]
    fn not_a_repo_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let err = RepoPaths::discover(tmp.path()).unwrap_err();
        assert!(err.to_string().contains("not inside a git repository"));
    }

    #[test]
    fn ensure_excluded_appends_once() {
        let tmp = tempfile::tempdir().unwrap();
        init(tmp.path());
        let paths = RepoPaths::discover(tmp.path()).unwrap();
        paths
            .ensure_excluded(&["/.cascade/", "/prd.json", "/prd.json"])
            .unwrap();
        paths
            .ensure_excluded(&["/.cascade/", "/progress.txt", "/prd.json"])
            .unwrap();
        let text = std::fs::read_to_string(paths.exclude_file()).unwrap();
        assert_eq!(text.matches("/.cascade/").count(), 1);
        assert_eq!(text.matches("/prd.json").count(), 1, "{text}");
        let before = text.clone();
        paths
            .ensure_excluded(&["/prd.json", "/progress.txt"])
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(paths.exclude_file()).unwrap(),
            before
        );
        assert!(text.contains("/prd.json\n"));
        assert!(text.contains("/progress.txt\n"));
        // Git now ignores the state directory.
        std::fs::create_dir(tmp.path().join(".cascade")).unwrap();
        std::fs::write(tmp.path().join(".cascade/x"), "x").unwrap();
        let repo = paths.open().unwrap();
        assert!(repo.status_should_ignore(Path::new(".cascade/x")).unwrap());
    }

    #[test]
    fn ensure_excluded_removes_the_temp_files_of_killed_writers_and_leaves_none() {
        let tmp = tempfile::tempdir().unwrap();
        init(tmp.path());
        let paths = RepoPaths::discover(tmp.path()).unwrap();
        let info = paths.exclude_file().parent().unwrap().to_path_buf();
        std::fs::create_dir_all(&info).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        std::fs::write(info.join(format!(".exclude.{dead}.0.tmp")), "half").unwrap();
        paths.ensure_excluded(&["/prd.json"]).unwrap();
        // Also when nothing is missing: the next call finds nothing to add.
        std::fs::write(info.join(format!(".exclude.{dead}.1.tmp")), "half").unwrap();
        paths.ensure_excluded(&["/prd.json"]).unwrap();
        let left: Vec<String> = std::fs::read_dir(&info)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("exclude"))
            .collect();
        assert_eq!(left, ["exclude"]);
    }
}
