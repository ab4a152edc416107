//! The run lock: `.cascade/lock`, so two cascade runs never share one repository.
//!
//! The kernel holds the lock ([`cascade_fs::FileLock`]); the file says who
//! holds it: pid, host, start time and command, for the message a second
//! run gets. A file left by a process that died holding the lock is taken
//! over and the caller gets a note to show. Dropping the guard removes the
//! file.

use std::path::{Path, PathBuf};

use cascade_fs::{Acquired, FileLock};

use serde::{Deserialize, Serialize};

/// What the lock file says about its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub pid: u32,
    pub host: String,
    pub started_at: String,
    #[serde(default)]
    pub command: String,
}

/// The lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another cascade run (pid {pid} on {host}, started {started_at}) holds '{}'; wait for it to finish or stop it (if no cascade runs there, delete that file)", path.display())]
    Held {
        path: PathBuf,
        pid: u32,
        host: String,
        started_at: String,
    },
    #[error("cannot {op} lock file '{}': {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A held lock; released on drop (and by the kernel if the process dies).
#[derive(Debug)]
pub struct RunLock {
    lock: FileLock,
}

impl RunLock {
    /// Takes the lock at `path`. Returns the guard and, when the lock file
    /// of a process that died holding it was taken over, a note saying so.
    pub fn acquire(path: &Path, command: &str) -> Result<(RunLock, Option<String>), LockError> {
        let io = |op: &'static str| {
            let path = path.to_path_buf();
            move |source| LockError::Io { op, path, source }
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io("create the directory of"))?;
        }
        let holder = LockHolder {
            pid: std::process::id(),
            host: hostname(),
            started_at: crate::state::now_rfc3339(),
            command: command.to_string(),
        };
        let text = serde_json::to_string_pretty(&holder).map_err(|e| LockError::Io {
            op: "serialize",
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
        match FileLock::try_acquire(path, text.as_bytes()).map_err(io("create"))? {
            Acquired::Taken { lock, left_behind } => {
                Ok((RunLock { lock }, dead_holder(&left_behind)))
            }
            Acquired::Held { content } => {
                let h = serde_json::from_slice::<LockHolder>(&content).ok();
                Err(LockError::Held {
                    path: path.to_path_buf(),
                    pid: h.as_ref().map_or(0, |h| h.pid),
                    host: h
                        .as_ref()
                        .map_or_else(|| "unknown".into(), |h| h.host.clone()),
                    started_at: h.map_or_else(|| "unknown".into(), |h| h.started_at),
                })
            }
        }
    }

    /// Who holds the lock at `path` now, if anyone alive does.
    pub fn holder(path: &Path) -> Option<LockHolder> {
        serde_json::from_slice(&FileLock::held_by(path)?).ok()
    }

    pub fn path(&self) -> &Path {
        self.lock.path()
    }
}

/// The note for a lock file left by a process that died holding it.
fn dead_holder(left_behind: &[u8]) -> Option<String> {
    if left_behind.is_empty() {
        return None;
    }
    Some(match serde_json::from_slice::<LockHolder>(left_behind) {
        Ok(h) => format!(
            "took over a stale lock of pid {} (started {}), which is no longer running",
            h.pid, h.started_at
        ),
        Err(_) => "took over an unreadable lock file".to_string(),
    })
}

/// This machine's host name (or "localhost").
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_names_the_live_holder_and_drop_releases() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(".cascade/lock");
        let (lock, note) = RunLock::acquire(&path, "approve").unwrap();
        assert!(note.is_none());
        let err = RunLock::acquire(&path, "approve").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert_eq!(RunLock::holder(&path).unwrap().pid, std::process::id());
        assert_eq!(lock.path(), path);
        drop(lock);
        assert!(!path.exists());
        let (_again, _) = RunLock::acquire(&path, "approve").unwrap();
    }

    #[test]
    fn the_file_of_a_dead_holder_is_taken_over_with_a_note() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("lock");
        // A pid that cannot be alive: spawn and reap a short child.
        let child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        let mut child = child;
        child.wait().unwrap();
        let stale = LockHolder {
            pid: dead,
            host: hostname(),
            started_at: "yesterday".into(),
            command: "approve".into(),
        };
        std::fs::write(&path, serde_json::to_string(&stale).unwrap()).unwrap();
        assert!(RunLock::holder(&path).is_none());
        let (lock, note) = RunLock::acquire(&path, "resume").unwrap();
        let note = note.unwrap();
        assert!(note.contains(&dead.to_string()), "{note}");
        drop(lock);
        assert!(!path.exists());
    }
}
