//! The run's pool of story worktrees.
//!
//! Checking out the whole tree for every story and deleting it after the
//! merge made the file system the bottleneck of large plans (the cost grows
//! with tree size x stories). Instead a run keeps idle worktrees, one per
//! slot of parallelism at most, under `.cascade/worktrees/slot-<n>` (or
//! `<feature>.slot-<n>` in a mega-plan feature): a story leases one, which
//! is pointed at its fresh branch `cascade/<id>` at the current tip and
//! brought to exactly that tree with only the differences written
//! ([`cascade_git::worktree::reuse`]; ignored files such as `target/` stay:
//! warm build caches). A merged story gives its worktree back (HEAD
//! detached); its branch is deleted with the others at the end of the run,
//! so that until the run state is written git alone says it was merged (the
//! state need not be on disk before the next story goes on). A failed story
//! keeps its worktree for inspection (it leaves the pool). Idle worktrees
//! are removed when the run ends; those a killed run left behind are taken
//! over at the start.
//!
//! All methods block (git and the file system): call them from
//! `spawn_blocking`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cascade_git::worktree::{self, WorktreeError};
use cascade_git::RepoPaths;

/// Idle worktrees of one run (one namespace: the run's feature, if any).
pub(crate) struct WorktreePool {
    paths: RepoPaths,
    feature: Option<String>,
    /// Worktrees ready for the next story.
    idle: Mutex<Vec<PathBuf>>,
    /// Every slot directory this pool handed out or took over (never reused
    /// for a new slot while the run lasts).
    taken: Mutex<HashSet<PathBuf>>,
}

impl WorktreePool {
    pub fn new(paths: RepoPaths, feature: Option<String>) -> WorktreePool {
        WorktreePool {
            paths,
            feature,
            idle: Mutex::new(Vec::new()),
            taken: Mutex::new(HashSet::new()),
        }
    }

    /// Takes over the slots of this namespace that an earlier (killed or
    /// interrupted) run left: their HEAD is detached (branches are kept:
    /// resume reads them) and they become idle. Returns what could not be
    /// taken over, as messages.
    pub fn adopt_leftovers(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let list = match worktree::list(&self.paths) {
            Ok(l) => l,
            Err(e) => return vec![format!("cannot list worktrees: {e}")],
        };
        for wt in list {
            let ours = wt.is_cascade
                && !wt.locked
                && !wt.prunable
                && worktree::slot_number(&wt.path, self.feature.as_deref()).is_some();
            if !ours {
                continue;
            }
            if wt.branch.is_some() {
                if let Err(e) = worktree::detach(&self.paths, &wt.path, false) {
                    notes.push(format!(
                        "cannot take over worktree '{}': {e}",
                        wt.path.display()
                    ));
                    continue;
                }
            }
            lock(&self.taken).insert(wt.path.clone());
            lock(&self.idle).push(wt.path);
        }
        notes
    }

    /// A worktree on the new branch `branch` at `from`: an idle one brought
    /// to that commit, or a new slot.
    pub fn lease(&self, branch: &str, from: &str) -> Result<PathBuf, WorktreeError> {
        let reused = lock(&self.idle).pop();
        match reused {
            Some(path) => match worktree::reuse(&self.paths, &path, branch, from) {
                Ok(wt) => Ok(wt.path),
                Err(e) => {
                    // Neither idle nor leased any more: do not leave it behind.
                    let _ = worktree::remove(&self.paths, &path, false);
                    Err(e)
                }
            },
            None => {
                let path = self.new_slot();
                Ok(worktree::create(&self.paths, &path, branch, from)?.path)
            }
        }
    }

    /// Resets the worktree a story holds for its next attempt: its branch
    /// starts again at `from` and the files are exactly that commit's.
    pub fn restart(&self, path: &Path, branch: &str, from: &str) -> Result<PathBuf, WorktreeError> {
        Ok(worktree::reuse(&self.paths, path, branch, from)?.path)
    }

    /// A merged story's worktree comes back: HEAD detached, idle (its
    /// branch stays until the end of the run). When that fails the worktree
    /// is removed instead.
    pub fn give_back(&self, path: &Path) -> Result<(), WorktreeError> {
        match worktree::detach(&self.paths, path, false) {
            Ok(_) => {
                lock(&self.idle).push(path.to_path_buf());
                Ok(())
            }
            Err(e) => {
                worktree::remove(&self.paths, path, false)?;
                Err(e)
            }
        }
    }

    /// Removes every idle worktree (the end of the run). Returns the errors.
    pub fn drain(&self) -> Vec<String> {
        let idle: Vec<PathBuf> = std::mem::take(&mut *lock(&self.idle));
        std::thread::scope(|s| {
            let handles: Vec<_> = idle
                .iter()
                .map(|p| s.spawn(move || worktree::remove(&self.paths, p, false)))
                .collect();
            handles
                .into_iter()
                .zip(&idle)
                .filter_map(|(h, p)| match h.join() {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(format!("cannot remove worktree '{}': {e}", p.display())),
                    Err(_) => Some(format!("cannot remove worktree '{}'", p.display())),
                })
                .collect()
        })
    }

    /// The lowest free slot directory.
    fn new_slot(&self) -> PathBuf {
        let mut taken = lock(&self.taken);
        let mut n = 1;
        loop {
            let p = worktree::slot_path(&self.paths, self.feature.as_deref(), n);
            if !taken.contains(&p) && std::fs::symlink_metadata(&p).is_err() {
                taken.insert(p.clone());
                return p;
            }
            n += 1;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The data (paths) stays consistent whatever panicked.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
