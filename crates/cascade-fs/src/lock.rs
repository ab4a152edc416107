//! Locks held by the kernel: an exclusive `flock` on a file whose content
//! says who holds it (the run lock, a planning session's lock, a fleet
//! worker's directory).
//!
//! The kernel drops the lock when its holder exits, however it exits, so a
//! lock is never stale: a file a killed holder left behind is taken over
//! by the next taker, which gets that file's old content to tell the user
//! about. Dropping a [`FileLock`] removes the file while it is still
//! locked, so a file that exists unlocked always means its holder died.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt as _, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fs4::TryLockError;

/// How many times a busy lock is tried again: [`FileLock::held_by`] takes a
/// shared lock for the moment it reads, and a taker that meets that reader
/// must not report the file as held by a run.
const BUSY_TRIES: u32 = 20;
/// The wait between two of those tries (a reader holds its lock for
/// microseconds).
const BUSY_WAIT: Duration = Duration::from_millis(5);

/// An exclusive lock on a file, held until dropped.
#[derive(Debug)]
pub struct FileLock {
    path: PathBuf,
    file: File,
}

/// What [`FileLock::try_acquire`] found.
#[derive(Debug)]
pub enum Acquired {
    /// The lock is ours. `left_behind` is what a holder that died without
    /// releasing it had written (empty when there was no such file).
    Taken {
        lock: FileLock,
        left_behind: Vec<u8>,
    },
    /// A live process holds it; its content (as far as it was written).
    Held { content: Vec<u8> },
}

impl FileLock {
    /// Takes the lock at `path` without waiting for a live holder, writing
    /// `content` into the file once it is ours. The file's directory must
    /// exist.
    pub fn try_acquire(path: &Path, content: &[u8]) -> io::Result<Acquired> {
        let mut busy = 0;
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)?;
            match fs4::FileExt::try_lock(&file) {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) if busy < BUSY_TRIES => {
                    busy += 1;
                    std::thread::sleep(BUSY_WAIT);
                    continue;
                }
                Err(TryLockError::WouldBlock) => {
                    return Ok(Acquired::Held {
                        content: read_all(&file)?,
                    })
                }
                Err(TryLockError::Error(e)) => return Err(e),
            }
            // The holder we waited for may have removed the file between our
            // open and our lock: then the lock is on a file nobody else sees.
            if !names(path, &file)? {
                continue;
            }
            let left_behind = read_all(&file)?;
            file.set_len(0)?;
            file.write_all_at(content, 0)?;
            return Ok(Acquired::Taken {
                lock: FileLock {
                    path: path.to_path_buf(),
                    file,
                },
                left_behind,
            });
        }
    }

    /// The content of the lock file at `path` while a process holds it;
    /// `None` when nobody does (no file, or one a dead holder left).
    pub fn held_by(path: &Path) -> Option<Vec<u8>> {
        let file = File::open(path).ok()?;
        match fs4::FileExt::try_lock_shared(&file) {
            // Free: nobody holds it (our shared lock goes with the file).
            Ok(()) => None,
            Err(TryLockError::WouldBlock) => read_all(&file).ok(),
            Err(TryLockError::Error(_)) => None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Removed while still locked, so no taker ever sees it free and
        // mistakes it for a dead holder's; the lock goes with the file.
        if names(&self.path, &self.file).unwrap_or(false) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether `path` names the open `file` (and not a newer file, or none).
fn names(path: &Path, file: &File) -> io::Result<bool> {
    let open = file.metadata()?;
    match std::fs::metadata(path) {
        Ok(m) => Ok(m.dev() == open.dev() && m.ino() == open.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn read_all(mut file: &File) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    fn taken(a: Acquired) -> (FileLock, Vec<u8>) {
        match a {
            Acquired::Taken { lock, left_behind } => (lock, left_behind),
            Acquired::Held { content } => panic!("held: {content:?}"),
        }
    }

    #[test]
    fn a_second_taker_sees_the_holders_content_until_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let (lock, left) = taken(FileLock::try_acquire(&path, b"first").unwrap());
        assert!(left.is_empty());
        assert_eq!(FileLock::held_by(&path).unwrap(), b"first");
        match FileLock::try_acquire(&path, b"second").unwrap() {
            Acquired::Held { content } => assert_eq!(content, b"first"),
            Acquired::Taken { .. } => panic!("taken twice"),
        }
        drop(lock);
        assert!(!path.exists());
        assert!(FileLock::held_by(&path).is_none());
        let (_again, left) = taken(FileLock::try_acquire(&path, b"second").unwrap());
        assert!(left.is_empty());
    }

    #[test]
    fn a_file_left_unlocked_is_taken_over_with_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        // What a holder killed with SIGKILL leaves: the file, no lock.
        std::fs::write(&path, b"a long dead holder").unwrap();
        assert!(FileLock::held_by(&path).is_none());
        let (lock, left) = taken(FileLock::try_acquire(&path, b"me").unwrap());
        assert_eq!(left, b"a long dead holder");
        assert_eq!(std::fs::read(&path).unwrap(), b"me");
        drop(lock);
        assert!(!path.exists());
    }

    #[test]
    fn the_lock_is_released_when_its_holder_process_dies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        // flock(1) holds the lock (`-o`: its `sleep` does not inherit it) in
        // a process group of its own that we then kill.
        let Ok(mut child) = std::process::Command::new("flock")
            .arg("-o")
            .arg(&path)
            .args(["sleep", "60"])
            .process_group(0)
            .spawn()
        else {
            eprintln!("skipped: flock(1) is not installed");
            return;
        };
        let mut waited = 0;
        while FileLock::held_by(&path).is_none() {
            waited += 1;
            assert!(waited < 3000, "flock(1) never took the lock");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(matches!(
            FileLock::try_acquire(&path, b"me").unwrap(),
            Acquired::Held { .. }
        ));
        let group = i32::try_from(child.id()).unwrap();
        // SAFETY: signals the process group we started above.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
        child.wait().unwrap();
        let (_lock, left) = taken(FileLock::try_acquire(&path, b"me").unwrap());
        assert!(left.is_empty());
    }
}
