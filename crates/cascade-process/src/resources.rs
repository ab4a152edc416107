//! Machine resources shared by everything a run starts: a limit on how many
//! processes of one kind run at once ([`Admission`]) and a memory guard that
//! holds back new processes while the machine is short of memory.
//!
//! The memory guard reads `MemAvailable` from `/proc/meminfo` (the kernel's
//! estimate of what can be allocated without swapping). A process waits while
//! available memory is below the threshold *and* something else admitted by
//! the same guard is still running: only those can give memory back, so a
//! run never waits forever for memory that other programs hold. Where
//! `/proc/meminfo` does not exist the guard lets everything through.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::CancelToken;

/// How often a process held back by the memory guard looks again.
const MEMORY_POLL: Duration = Duration::from_millis(500);

/// Bytes of memory available for new processes (`MemAvailable`), if known.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text)
}

fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The number of CPUs this process may use (at least 1).
pub fn cpu_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Called when a process is held back: (available bytes, threshold bytes).
pub type WaitNotice = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// Holds back new processes while available memory is below a threshold.
pub struct MemoryGuard {
    min_available: u64,
    running: Arc<AtomicUsize>,
    on_wait: Option<WaitNotice>,
    /// Reads available memory (replaceable in tests).
    probe: Arc<dyn Fn() -> Option<u64> + Send + Sync>,
}

impl std::fmt::Debug for MemoryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryGuard")
            .field("min_available", &self.min_available)
            .field("running", &self.running.load(Ordering::SeqCst))
            .finish()
    }
}

/// A process admitted by the guard; dropping it says the process is done.
#[derive(Debug)]
pub struct Running {
    count: Arc<AtomicUsize>,
    _slot: Option<OwnedSemaphorePermit>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

impl MemoryGuard {
    /// A guard that waits while fewer than `min_available` bytes are
    /// available (0 turns it off).
    pub fn new(min_available: u64) -> MemoryGuard {
        MemoryGuard {
            min_available,
            running: Arc::new(AtomicUsize::new(0)),
            on_wait: None,
            probe: Arc::new(available_memory),
        }
    }

    /// Called once each time a process starts waiting for memory.
    pub fn on_wait(mut self, notice: WaitNotice) -> MemoryGuard {
        self.on_wait = Some(notice);
        self
    }

    /// Reads available memory with `probe` instead of `/proc/meminfo`.
    pub fn with_probe(mut self, probe: Arc<dyn Fn() -> Option<u64> + Send + Sync>) -> MemoryGuard {
        self.probe = probe;
        self
    }

    /// The threshold in bytes.
    pub fn threshold(&self) -> u64 {
        self.min_available
    }

    /// Processes admitted and not yet done.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Waits until memory allows a new process (or nothing else of ours
    /// runs), then counts it as running until the returned token drops.
    /// `Err(())` when `cancel` fires first.
    pub async fn admit(&self, cancel: &CancelToken) -> Result<Running, ()> {
        self.admit_with(None, cancel, None).await
    }

    /// Like [`MemoryGuard::admit`], after taking a permit of `slots` (the
    /// permit is held as long as the token); `notice` is told of a wait
    /// instead of the guard's own [`MemoryGuard::on_wait`].
    pub async fn admit_with(
        &self,
        slots: Option<&Arc<Semaphore>>,
        cancel: &CancelToken,
        notice: Option<&WaitNotice>,
    ) -> Result<Running, ()> {
        let slot = match slots {
            Some(s) => tokio::select! {
                p = Arc::clone(s).acquire_owned() => Some(p.map_err(|_| ())?),
                _ = cancel.cancelled() => return Err(()),
            },
            None => None,
        };
        let mut told = false;
        loop {
            if cancel.is_cancelled() {
                return Err(());
            }
            let available = if self.min_available == 0 {
                None
            } else {
                (self.probe)()
            };
            let short = available.is_some_and(|a| a < self.min_available);
            if !short || self.running() == 0 {
                break;
            }
            if !told {
                told = true;
                if let (Some(n), Some(a)) = (notice.or(self.on_wait.as_ref()), available) {
                    n(a, self.min_available);
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(MEMORY_POLL) => {}
                _ = cancel.cancelled() => return Err(()),
            }
        }
        self.running.fetch_add(1, Ordering::SeqCst);
        Ok(Running {
            count: Arc::clone(&self.running),
            _slot: slot,
        })
    }
}

/// How many processes of one kind may run at once, and the memory guard
/// they pass: what gate runs and agent starts ask before they spawn.
#[derive(Clone, Default)]
pub struct Admission {
    /// At most this many at once (`None`: no limit).
    pub slots: Option<Arc<Semaphore>>,
    /// Shared by every kind of process of a run.
    pub memory: Option<Arc<MemoryGuard>>,
    /// Told when a process of this admission waits for memory.
    pub on_wait: Option<WaitNotice>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("slots", &self.slots.as_ref().map(|s| s.available_permits()))
            .field("memory", &self.memory)
            .finish()
    }
}

impl Admission {
    /// At most `n` at once (at least 1), passing `memory`.
    pub fn new(n: usize, memory: Option<Arc<MemoryGuard>>) -> Admission {
        Admission {
            slots: Some(Arc::new(Semaphore::new(n.max(1)))),
            memory,
            on_wait: None,
        }
    }

    /// The same limits, telling `notice` of memory waits.
    pub fn noting(&self, notice: WaitNotice) -> Admission {
        Admission {
            on_wait: Some(notice),
            ..self.clone()
        }
    }

    /// Waits for a slot and for memory. The token is held while the process runs.
    pub async fn enter(&self, cancel: &CancelToken) -> Result<Admitted, ()> {
        match &self.memory {
            Some(m) => m
                .admit_with(self.slots.as_ref(), cancel, self.on_wait.as_ref())
                .await
                .map(|r| Admitted {
                    _inner: Inner::Guarded(r),
                }),
            None => match &self.slots {
                Some(s) => tokio::select! {
                    p = Arc::clone(s).acquire_owned() => p
                        .map(|p| Admitted { _inner: Inner::Slot(p) })
                        .map_err(|_| ()),
                    _ = cancel.cancelled() => Err(()),
                },
                None => Ok(Admitted {
                    _inner: Inner::Free,
                }),
            },
        }
    }
}

/// Held while an admitted process runs.
#[derive(Debug)]
pub struct Admitted {
    _inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Guarded(#[allow(dead_code)] Running),
    Slot(#[allow(dead_code)] OwnedSemaphorePermit),
    Free,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn meminfo_is_parsed() {
        let text = "MemTotal:       24684096 kB\nMemFree:  1 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_meminfo(text), Some(2048 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
        assert!(cpu_count() >= 1);
    }

    #[tokio::test]
    async fn low_memory_holds_back_only_while_something_else_runs() {
        let free = Arc::new(AtomicU64::new(100));
        let probe = {
            let free = Arc::clone(&free);
            Arc::new(move || Some(free.load(Ordering::SeqCst)))
        };
        let waits = Arc::new(AtomicUsize::new(0));
        let w = Arc::clone(&waits);
        let guard = Arc::new(MemoryGuard::new(1000).with_probe(probe).on_wait(Arc::new(
            move |_, _| {
                w.fetch_add(1, Ordering::SeqCst);
            },
        )));
        let cancel = CancelToken::new();
        // Nothing of ours runs: waiting could not help, so it goes.
        let first = guard.admit(&cancel).await.unwrap();
        assert_eq!(guard.running(), 1);
        // The second waits for memory...
        let g = Arc::clone(&guard);
        let c = cancel.clone();
        let second = tokio::spawn(async move { g.admit(&c).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!second.is_finished());
        assert_eq!(waits.load(Ordering::SeqCst), 1);
        // ...until the first is done.
        drop(first);
        assert!(second.await.unwrap().is_ok());
        assert_eq!(guard.running(), 0);
        // Enough memory: no wait.
        free.store(5000, Ordering::SeqCst);
        let _a = guard.admit(&cancel).await.unwrap();
        let _b = guard.admit(&cancel).await.unwrap();
        assert_eq!(waits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn admission_bounds_concurrency_and_honours_cancel() {
        let adm = Admission::new(1, None);
        let cancel = CancelToken::new();
        let held = adm.enter(&cancel).await.unwrap();
        let a2 = adm.clone();
        let c2 = cancel.clone();
        let waiting = tokio::spawn(async move { a2.enter(&c2).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        cancel.cancel();
        assert!(waiting.await.unwrap().is_err());
        drop(held);
    }
}
