//! One process at a time per session: `session.lock` holds the pid of the
//! cascade working on it. A lock whose process is gone (a killed run) is
//! taken over; a live one is refused with the pid, so two `plan resume` of
//! the same session cannot interleave their writes.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::PlanningError;

/// Held while a session is being worked on; removed on drop.
#[derive(Debug)]
pub struct SessionLock {
    path: PathBuf,
}

impl SessionLock {
    /// Takes the lock of the session in `dir` (`dir/session.lock`).
    pub fn acquire(dir: &Path, id: &str) -> Result<SessionLock, PlanningError> {
        let path = dir.join("session.lock");
        for _ in 0..2 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    let _ = write!(f, "{}", std::process::id());
                    return Ok(SessionLock { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holder = std::fs::read_to_string(&path)
                        .ok()
                        .and_then(|t| t.trim().parse::<u32>().ok());
                    match holder {
                        Some(pid)
                            if pid != std::process::id() && cascade_process::pid_alive(pid) =>
                        {
                            return Err(PlanningError::Usage(format!(
                                "the planning session {id} is in use by another cascade (pid {pid}); wait for it or stop it first"
                            )));
                        }
                        // Stale (the holder is gone) or unreadable: take it over.
                        _ => {
                            let _ = std::fs::remove_file(&path);
                        }
                    }
                }
                Err(source) => return Err(PlanningError::Io { path, source }),
            }
        }
        Err(PlanningError::Usage(format!(
            "cannot take the lock of planning session {id} ('{}')",
            path.display()
        )))
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_holder_is_refused_and_a_dead_one_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let lock = SessionLock::acquire(tmp.path(), "planning-1").unwrap();
        // Held by this (live) process: a second taker from another pid would be refused.
        std::fs::write(tmp.path().join("session.lock"), "1").unwrap();
        let err = SessionLock::acquire(tmp.path(), "planning-1").unwrap_err();
        assert!(
            err.to_string()
                .contains("in use by another cascade (pid 1)"),
            "{err}"
        );
        drop(lock);
        // A pid that does not exist is stale.
        std::fs::write(tmp.path().join("session.lock"), "999999999").unwrap();
        let again = SessionLock::acquire(tmp.path(), "planning-1").unwrap();
        drop(again);
        assert!(!tmp.path().join("session.lock").exists());
    }
}
