//! prd.json written behind the run (the run state is in the database, see
//! the `store` module): a status change only marks the document changed;
//! the run's flusher writes it when it looks next, and the run's end writes
//! what is left. The flusher looks every [`PERIOD`], or ten times the last
//! write's duration when that is longer, so writing a large plan's prd.json
//! takes at most about a tenth of the run whatever its size.
//!
//! Writes take turns, and a write covers every change marked before it
//! began: the last write of the run holds the last status.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The shortest time between two looks of the flusher.
pub const PERIOD: Duration = Duration::from_millis(100);

/// Whether prd.json has changes not written yet, and the turn to write it.
#[derive(Debug, Default)]
pub struct BehindWriter {
    changed: AtomicBool,
    /// Held while writing.
    turn: Mutex<()>,
    /// How long the last write took, in microseconds (read by the flusher
    /// without waiting for a write in progress).
    last_micros: AtomicU64,
}

impl BehindWriter {
    /// Marks the document changed (after changing it in memory).
    pub fn changed(&self) {
        self.changed.store(true, Ordering::SeqCst);
    }

    /// Whether a change is marked that no write has begun to cover.
    pub fn pending(&self) -> bool {
        self.changed.load(Ordering::SeqCst)
    }

    /// Writes with `write` when a change was marked since the last write
    /// began, after any write in progress has finished. A failed write is
    /// not tried again until the next change.
    pub fn write<E>(&self, write: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        let _turn = self.turn.lock().unwrap_or_else(PoisonError::into_inner);
        // Taken inside the turn: a change marked after this is in a write
        // that begins later.
        if !self.changed.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        let started = Instant::now();
        let result = write();
        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last_micros.store(took, Ordering::SeqCst);
        result
    }

    /// How long the flusher waits before it looks again.
    pub fn pause(&self) -> Duration {
        let last = Duration::from_micros(self.last_micros.load(Ordering::SeqCst));
        PERIOD.max(last.saturating_mul(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn a_write_happens_only_after_a_change_and_covers_it() {
        let w = BehindWriter::default();
        let writes = AtomicU32::new(0);
        let write = || {
            writes.fetch_add(1, Ordering::SeqCst);
            Ok::<(), ()>(())
        };
        w.write(write).unwrap();
        assert_eq!(writes.load(Ordering::SeqCst), 0, "nothing changed");
        assert!(!w.pending());
        w.changed();
        w.changed();
        assert!(w.pending());
        w.write(write).unwrap();
        assert!(!w.pending());
        w.write(write).unwrap();
        assert_eq!(writes.load(Ordering::SeqCst), 1, "one write for both");
    }

    #[test]
    fn a_change_made_while_a_write_runs_is_written_by_the_next() {
        let w = BehindWriter::default();
        w.changed();
        let mut seen = Vec::new();
        w.write(|| {
            // What the write reads is taken; a change now is newer.
            w.changed();
            seen.push("first");
            Ok::<(), ()>(())
        })
        .unwrap();
        w.write(|| {
            seen.push("second");
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(seen, ["first", "second"]);
    }

    #[test]
    fn a_failed_write_is_reported_and_the_pause_follows_the_last_write() {
        let w = BehindWriter::default();
        assert_eq!(w.pause(), PERIOD);
        w.changed();
        assert_eq!(
            w.write(|| {
                std::thread::sleep(Duration::from_millis(20));
                Err("disk full")
            }),
            Err("disk full")
        );
        assert!(w.pause() >= Duration::from_millis(200));
        assert_eq!(w.write(|| Err("not called")), Ok(()));
    }
}
