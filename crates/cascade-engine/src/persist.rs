//! Group commit for a document the run rewrites whole: `prd.json` (the run
//! state is in the database, see the `store` module).
//!
//! Rewriting a whole document per transition made large plans quadratic
//! and queued parallel stories behind each other's writes. Here a caller
//! that changed a document takes a ticket; only one thread writes at a
//! time, and each write covers every change made before it started. A
//! caller may wait until a write that includes its change has finished;
//! changes nothing waits for are written at most once per ten write
//! durations, so writing takes at most about a tenth of the time whatever
//! the document's size (a small plan's prd.json follows within
//! milliseconds, a 100,000-story one within seconds);
//! [`GroupWriter::due`] tells a periodic flush when such a change has
//! waited long enough. That holds in a busy run too: a writer writes again
//! only for changes somebody waits for, so changes that keep arriving while
//! it writes do not keep it writing back to back (at 5,000 stories of a
//! 10,000-story run that was a quarter of the run's CPU).

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Writes of changes nothing waits for are spaced by this many times the
/// duration of the last write.
const SPACING: u32 = 10;

#[derive(Debug, Default)]
struct Progress {
    /// Tickets handed out (changes applied to the document).
    changed: u64,
    /// Every change up to this ticket is on disk.
    written: u64,
    /// A thread is writing.
    writing: bool,
    /// When the last write finished and how long it took.
    last: Option<(Instant, Duration)>,
    /// The highest ticket a caller waits for.
    waited: u64,
}

impl Progress {
    /// Whether writes are spaced out enough for one that nothing waits for.
    fn spaced(&self) -> bool {
        match self.last {
            Some((done, took)) => done.elapsed() >= took * SPACING,
            None => true,
        }
    }
}

/// Coordinates the writes of one document.
#[derive(Debug, Default)]
pub(crate) struct GroupWriter {
    progress: Mutex<Progress>,
    done: Condvar,
}

impl GroupWriter {
    /// Registers a change and returns its ticket. Call it while still
    /// holding the document's lock, after changing the document, so that
    /// any write that starts after this call sees the change.
    pub fn changed(&self) -> u64 {
        let mut p = self.lock();
        p.changed += 1;
        p.changed
    }

    /// Makes sure the change of `ticket` reaches the disk. With `wait`, it
    /// returns once it is there: either another thread's write covered it,
    /// or this thread runs `write` (which must save the document as it is
    /// now, taking its lock). Without `wait`, it returns at once when a
    /// write is in progress or the last one was too recent: the change
    /// reaches the disk with the next write (a waiting caller's, or the
    /// periodic flush's once [`GroupWriter::due`]). The writer writes again
    /// while a change somebody waits for is left uncovered. A failed write
    /// is returned to the thread that ran it; the next caller tries again.
    pub fn persist<E>(
        &self,
        ticket: u64,
        wait: bool,
        mut write: impl FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        let mut p = self.lock();
        loop {
            if p.written >= ticket {
                return Ok(());
            }
            if !wait && (p.writing || !p.spaced()) {
                // The writer in progress, or the next flush, takes it.
                return Ok(());
            }
            if p.writing {
                p.waited = p.waited.max(ticket);
                p = self.done.wait(p).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            p.writing = true;
            let result = loop {
                // Every change up to here is already in the document.
                let covers = p.changed;
                drop(p);
                let started = Instant::now();
                let result = write();
                p = self.lock();
                p.last = Some((Instant::now(), started.elapsed()));
                if result.is_err() {
                    break result;
                }
                p.written = p.written.max(covers);
                if p.written >= p.changed.min(p.waited.max(ticket)) {
                    break result;
                }
            };
            p.writing = false;
            self.done.notify_all();
            return result;
        }
    }

    /// Whether a change is unwritten, no write is in progress and writes are
    /// spaced out enough: time for a periodic flush.
    pub fn due(&self) -> bool {
        let p = self.lock();
        p.changed > p.written && !p.writing && p.spaced()
    }

    /// Writes every change made so far (the end of a run), waiting for it.
    pub fn flush<E>(&self, write: impl FnMut() -> Result<(), E>) -> Result<(), E> {
        let ticket = self.lock().changed;
        self.persist(ticket, true, write)
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        // Plain counters: consistent whatever panicked.
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn every_change_is_covered_by_a_write_and_writes_are_shared() {
        let doc = Arc::new(Mutex::new(0u64));
        let disk = Arc::new(AtomicU64::new(0));
        let writes = Arc::new(AtomicU64::new(0));
        let gw = Arc::new(GroupWriter::default());
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (doc, disk, writes, gw) = (&doc, &disk, &writes, &gw);
                s.spawn(move || {
                    for _ in 0..50 {
                        let (mine, ticket) = {
                            let mut d = doc.lock().unwrap();
                            *d += 1;
                            (*d, gw.changed())
                        };
                        gw.persist(ticket, true, || -> Result<(), ()> {
                            let v = *doc.lock().unwrap();
                            std::thread::sleep(std::time::Duration::from_micros(200));
                            disk.fetch_max(v, Ordering::SeqCst);
                            writes.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        })
                        .unwrap();
                        assert!(disk.load(Ordering::SeqCst) >= mine);
                    }
                });
            }
        });
        assert_eq!(disk.load(Ordering::SeqCst), 400);
        assert!(writes.load(Ordering::SeqCst) <= 400);
    }

    #[test]
    fn a_failed_write_is_reported_and_retried_by_the_next_caller() {
        let gw = GroupWriter::default();
        let t1 = gw.changed();
        assert_eq!(gw.persist(t1, true, || Err("disk full")), Err("disk full"));
        let t2 = gw.changed();
        assert_eq!(gw.persist(t1, true, || Ok::<(), &str>(())), Ok(()));
        assert_eq!(
            gw.persist(t2, true, || -> Result<(), &str> { panic!("covered") }),
            Ok(())
        );
    }

    /// A change made while a write is in progress, not waited for, is left
    /// for the next write (the writer does not write again for it: in a
    /// busy run such changes keep coming, and it would never stop); one
    /// waited for is covered by the writer before it stops.
    #[test]
    fn the_writer_in_progress_writes_again_only_for_changes_waited_for() {
        let doc = Mutex::new(0u64);
        let disk = AtomicU64::new(0);
        let writes = AtomicU64::new(0);
        let gw = GroupWriter::default();
        let (entered, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        let write = |first: &mut bool| -> Result<(), ()> {
            let v = *doc.lock().unwrap();
            if std::mem::take(first) {
                entered.wait();
                release.wait();
            }
            disk.store(v, Ordering::SeqCst);
            writes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        let change = || {
            let mut d = doc.lock().unwrap();
            *d += 1;
            gw.changed()
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                let ticket = change();
                let mut first = true;
                gw.persist(ticket, true, || write(&mut first)).unwrap();
            });
            entered.wait();
            // A change while the write is in progress: not waited for.
            let ticket = change();
            gw.persist(ticket, false, || -> Result<(), ()> {
                panic!("a write is in progress")
            })
            .unwrap();
            release.wait();
        });
        assert_eq!(disk.load(Ordering::SeqCst), 1);
        assert_eq!(writes.load(Ordering::SeqCst), 1);
        // The flush (or the periodic one) writes it.
        gw.flush(|| write(&mut false)).unwrap();
        assert_eq!(disk.load(Ordering::SeqCst), 2);
        gw.flush(|| -> Result<(), ()> { panic!("nothing left") })
            .unwrap();

        // Waited for: the writer in progress covers it before it stops.
        std::thread::scope(|s| {
            s.spawn(|| {
                let ticket = change();
                let mut first = true;
                gw.persist(ticket, true, || write(&mut first)).unwrap();
            });
            entered.wait();
            let ticket = change();
            let (gw, disk, write) = (&gw, &disk, &write);
            s.spawn(move || {
                gw.persist(ticket, true, || write(&mut false)).unwrap();
                assert!(disk.load(Ordering::SeqCst) >= 4);
            });
            // Whoever writes it, the change waited for is on disk when both
            // callers return.
            release.wait();
        });
        assert_eq!(disk.load(Ordering::SeqCst), 4);
        gw.flush(|| -> Result<(), ()> { panic!("nothing left") })
            .unwrap();
    }
}
