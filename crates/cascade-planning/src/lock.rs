//! One process at a time per session: `session.lock`, locked by the kernel
//! ([`cascade_fs::FileLock`]) and holding the pid of the cascade working on
//! it. A live holder is refused with its pid, so two `plan resume` of the
//! same session cannot interleave their writes; a killed one's lock is gone
//! with it.

use std::path::Path;

use cascade_fs::{Acquired, FileLock};

use crate::error::PlanningError;

/// Held while a session is being worked on; removed on drop.
#[derive(Debug)]
pub struct SessionLock {
    _lock: FileLock,
}

impl SessionLock {
    /// Takes the lock of the session in `dir` (`dir/session.lock`).
    pub fn acquire(dir: &Path, id: &str) -> Result<SessionLock, PlanningError> {
        let path = dir.join("session.lock");
        let pid = std::process::id().to_string();
        match FileLock::try_acquire(&path, pid.as_bytes()) {
            Ok(Acquired::Taken { lock, .. }) => Ok(SessionLock { _lock: lock }),
            Ok(Acquired::Held { content }) => {
                let pid = String::from_utf8_lossy(&content).trim().to_string();
                let pid = if pid.is_empty() {
                    "unknown".into()
                } else {
                    pid
                };
                Err(PlanningError::Usage(format!(
                    "the planning session {id} is in use by another cascade (pid {pid}); wait for it or stop it first"
                )))
            }
            Err(source) => Err(PlanningError::Io { path, source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_holder_is_refused_and_a_dead_one_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let lock = SessionLock::acquire(tmp.path(), "planning-1").unwrap();
        // Held: a second taker is refused with the pid the file names.
        std::fs::write(tmp.path().join("session.lock"), "1").unwrap();
        let err = SessionLock::acquire(tmp.path(), "planning-1").unwrap_err();
        assert!(
            err.to_string()
                .contains("in use by another cascade (pid 1)"),
            "{err}"
        );
        drop(lock);
        // A file left by a killed holder is not a lock.
        std::fs::write(tmp.path().join("session.lock"), "999999999").unwrap();
        let again = SessionLock::acquire(tmp.path(), "planning-1").unwrap();
        drop(again);
        assert!(!tmp.path().join("session.lock").exists());
    }
}
