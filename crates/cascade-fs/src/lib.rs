//! Files cascade writes for itself, and what to say when the disk is full.
//!
//! - [`write_atomic`]: the one way cascade replaces a file of its own
//!   (`prd.json`, plan sessions, caches): a temp file beside
//!   it, then a rename, so a reader or a process killed at any moment sees
//!   the old content or the new, never half of it. A failed write (a full
//!   disk) removes its temp file before it returns; a temp file a killed
//!   process left is found by [`leftover_write_temps`], and removed by
//!   [`remove_dead_writers_temps`] once its writer is gone.
//!   [`write_atomic_private`] is the same for a file only its owner may
//!   read (mode 0600: the API agent's saved sessions).
//! - [`is_disk_full`] tells whether an error (or any error in its source
//!   chain) is "no space left on device" or an exceeded quota, and
//!   [`Disk::holding`] names the file system a path lives on, so that the
//!   message says which disk to free rather than only which file failed.
//! - [`FileLock`]: a lock held by the kernel (`flock`) on a file that says
//!   who holds it: the run lock, a planning session's, a fleet worker's
//!   directory. A holder that dies releases it; no lock is ever stale.
//!
//! ```no_run
//! use cascade_fs::{write_atomic, Durability};
//! # fn main() -> std::io::Result<()> {
//! write_atomic(std::path::Path::new(".cascade/state.json"), b"{}", Durability::Renamed)?;
//! # Ok(()) }
//! ```
//!
//! It depends on nothing but `libc` and `fs4` (the `flock` call), so every
//! crate can use it, the plan model included.

mod atomic;
mod disk;
mod lock;

pub use atomic::{
    leftover_write_temps, remove_dead_writers_temps, write_atomic, write_atomic_private, Durability,
};
pub use disk::{is_disk_full, is_disk_full_io, mentions_disk_full, Disk};
pub use lock::{Acquired, FileLock};
