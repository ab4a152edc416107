//! A worker's own work directory: `<root>/<id>` (clones, job files), locked
//! for as long as the worker runs, so two workers never share clones, branch
//! locks or pushes.
//!
//! With `--id`, the directory is that id's and a second worker with the same
//! id on this host is refused. Without it, the worker takes the first free
//! id `<host>-<n>` (n = 1, 2, ...): several default workers on one host each
//! get their own directory, and a restarted worker reuses the clones of the
//! one before it (a lock whose process is gone is taken over).

use std::path::{Path, PathBuf};

use cascade_engine::lock::{LockError, RunLock};

use crate::error::FleetError;
use crate::protocol::token;

/// The lock file inside a worker's directory.
const LOCK_FILE: &str = "worker.lock";

/// How many default ids are tried before giving up (workers on one host).
const MAX_DEFAULT_IDS: usize = 1000;

/// A worker's directory, held until dropped.
#[derive(Debug)]
pub struct Claimed {
    /// The worker's id (as given, or `<host>-<n>`).
    pub id: String,
    /// `<root>/<id>`.
    pub dir: PathBuf,
    /// Set when a lock of a worker that is no longer running was taken over.
    pub note: Option<String>,
    _lock: RunLock,
}

/// Claims the directory of worker `id` under `root` (or of the first free
/// default id when `id` is `None`).
pub fn claim(root: &Path, id: Option<&str>) -> Result<Claimed, FleetError> {
    if let Some(id) = id {
        let id = token(id);
        return try_claim(root, &id)?.ok_or_else(|| busy(root, &id));
    }
    let host = token(&cascade_engine::lock::hostname());
    for n in 1..=MAX_DEFAULT_IDS {
        if let Some(c) = try_claim(root, &format!("{host}-{n}"))? {
            return Ok(c);
        }
    }
    Err(FleetError::WorkdirBusy {
        dir: root.to_path_buf(),
        holder: format!("{MAX_DEFAULT_IDS} workers of this host"),
    })
}

/// `Ok(None)`: a live worker holds it.
fn try_claim(root: &Path, id: &str) -> Result<Option<Claimed>, FleetError> {
    let dir = root.join(id);
    match RunLock::acquire(&dir.join(LOCK_FILE), &format!("worker {id}")) {
        Ok((lock, note)) => Ok(Some(Claimed {
            id: id.to_string(),
            dir,
            note,
            _lock: lock,
        })),
        Err(LockError::Held { .. }) => Ok(None),
        Err(LockError::Io { path, source, .. }) => Err(FleetError::Io { path, source }),
    }
}

fn busy(root: &Path, id: &str) -> FleetError {
    let dir = root.join(id);
    let holder = match RunLock::holder(&dir.join(LOCK_FILE)) {
        Some(h) => format!("worker '{id}' (pid {} on {})", h.pid, h.host),
        None => format!("worker '{id}'"),
    };
    FleetError::WorkdirBusy { dir, holder }
}

/// Removes the git lock files left in the slots' clones of a claimed
/// directory (`<dir>/<repo>/slot-<n>/.git`), returning the ones removed.
/// Only for the holder of the directory's claim, once the agents a killed
/// worker left running there are stopped: then no live process writes them.
pub fn remove_stale_git_locks(dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(repos) = std::fs::read_dir(dir) else {
        return removed;
    };
    for repo in repos.flatten() {
        let Ok(slots) = std::fs::read_dir(repo.path()) else {
            continue;
        };
        for slot in slots.flatten() {
            if slot.file_name().to_string_lossy().starts_with("slot-") {
                let git_dir = slot.path().join(".git");
                removed.extend(cascade_git::locks::remove_stale_locks(&git_dir));
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slots_left_git_locks_are_removed_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let git = root.path().join("repo-1/slot-2/.git");
        std::fs::create_dir_all(git.join("refs/heads")).unwrap();
        std::fs::write(git.join("HEAD.lock"), "").unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let jobs = root.path().join("repo-1/jobs/j1/.git");
        std::fs::create_dir_all(&jobs).unwrap();
        std::fs::write(jobs.join("index.lock"), "").unwrap();

        let removed = remove_stale_git_locks(root.path());
        assert_eq!(removed, vec![git.join("HEAD.lock")]);
        assert!(git.join("HEAD").exists());
        assert!(jobs.join("index.lock").exists(), "only the slots' clones");
    }

    #[test]
    fn default_workers_get_their_own_directories_and_a_named_one_is_exclusive() {
        let root = tempfile::tempdir().unwrap();
        let a = claim(root.path(), None).unwrap();
        let b = claim(root.path(), None).unwrap();
        assert_ne!(a.id, b.id);
        assert_ne!(a.dir, b.dir);
        assert!(
            a.id.ends_with("-1") && b.id.ends_with("-2"),
            "{} {}",
            a.id,
            b.id
        );
        assert!(a.dir.join(LOCK_FILE).is_file());

        let named = claim(root.path(), Some("w.1")).unwrap();
        assert_eq!(named.id, "w_1");
        assert_eq!(named.dir, root.path().join("w_1"));
        let again = claim(root.path(), Some("w.1")).unwrap_err();
        assert!(matches!(again, FleetError::WorkdirBusy { .. }), "{again}");
        assert!(again.to_string().contains("w_1"), "{again}");
        assert!(again.is_usage());

        // A worker that stopped leaves its directory to the next one.
        let first = a.dir.clone();
        drop(a);
        let c = claim(root.path(), None).unwrap();
        assert_eq!(c.dir, first);
    }
}
