//! The run lock: `.cascade/lock`, so two cascade runs never share one repository.
//!
//! The file holds the holder's pid, host and start time. It is created
//! atomically *with* its content (written to a temp file, then hard-linked to
//! the lock path, which fails if the lock exists), so a reader never sees an
//! empty lock. A lock whose pid is dead on this host is stale: it is taken
//! over and the caller gets a note to show. Dropping the guard removes the
//! file (if it is still ours).

use std::path::{Path, PathBuf};

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

/// A held lock; released on drop.
#[derive(Debug)]
pub struct RunLock {
    path: PathBuf,
    holder: LockHolder,
}

impl RunLock {
    /// Takes the lock at `path`. Returns the guard and, when a stale lock of a
    /// dead process was taken over, a note saying so.
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
        let tmp = path.with_file_name(format!(".lock.tmp-{}", holder.pid));
        std::fs::write(&tmp, &text).map_err(io("write"))?;
        let mut note = None;
        let result = loop {
            match std::fs::hard_link(&tmp, path) {
                Ok(()) => break Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => break Err(io("create")(e)),
            }
            // Someone holds it: alive, or stale?
            let existing = std::fs::read_to_string(path).ok();
            let parsed: Option<LockHolder> = existing
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok());
            match parsed {
                Some(h) if h.host != holder.host || cascade_process::pid_alive(h.pid) => {
                    break Err(LockError::Held {
                        path: path.to_path_buf(),
                        pid: h.pid,
                        host: h.host,
                        started_at: h.started_at,
                    });
                }
                Some(h) if note.is_none() => {
                    note = Some(format!(
                        "took over a stale lock of pid {} (started {}), which is no longer running",
                        h.pid, h.started_at
                    ));
                    let _ = std::fs::remove_file(path);
                }
                None if note.is_none() && existing.is_some() => {
                    note = Some("took over an unreadable lock file".to_string());
                    let _ = std::fs::remove_file(path);
                }
                _ => {
                    // We already removed a stale lock once and someone else
                    // took it in between, or it vanished: try once more, then give up.
                    if existing.is_none() && note.is_none() {
                        note = Some(String::new());
                        continue;
                    }
                    break Err(LockError::Held {
                        path: path.to_path_buf(),
                        pid: 0,
                        host: "unknown".into(),
                        started_at: "unknown".into(),
                    });
                }
            }
        };
        let _ = std::fs::remove_file(&tmp);
        result?;
        let note = note.filter(|n| !n.is_empty());
        Ok((
            RunLock {
                path: path.to_path_buf(),
                holder,
            },
            note,
        ))
    }

    /// Who holds the lock at `path` now, if anyone alive does.
    pub fn holder(path: &Path) -> Option<LockHolder> {
        let text = std::fs::read_to_string(path).ok()?;
        let h: LockHolder = serde_json::from_str(&text).ok()?;
        (h.host != hostname() || cascade_process::pid_alive(h.pid)).then_some(h)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Only remove the file if it is still ours (never someone else's lock).
        let ours = std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| serde_json::from_str::<LockHolder>(&t).ok())
            .is_some_and(|h| h == self.holder);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
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
        drop(lock);
        assert!(!path.exists());
        let (_again, _) = RunLock::acquire(&path, "approve").unwrap();
    }

    #[test]
    fn stale_lock_of_a_dead_pid_is_taken_over() {
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
