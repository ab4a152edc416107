//! Machine resources of a run's stories: distinct port ranges and shared
//! build caches.
//!
//! **Ports.** Every running story leases a block of [`PORT_BLOCK`] ports
//! (`CASCADE_PORT_BASE` .. `+ CASCADE_PORT_COUNT`) that no other story of
//! this process holds at the same time, given to its agent and its gates,
//! so parallel test servers do not collide. Leases are process-wide (the
//! features of a mega run share one allocator) and go back when the story ends.
//!
//! **Build caches.** Rust: each worktree would otherwise build into its own
//! `target/`, from scratch. Gates get `CARGO_TARGET_DIR` pointing at one of
//! a small set of target directories under `.cascade/cache/cargo-target/`,
//! one per gate job: a gate run leases a directory nobody else in this
//! process (any engine of a mega run included) is building in (so parallel gates never wait on cargo's build lock, and never share
//! a half-written tree), and the next story's gates find the dependencies
//! built. npm/pnpm and pip keep using the user's caches, which are already
//! shared by every worktree and safe for concurrent use. A user who set
//! `CARGO_TARGET_DIR` keeps theirs; `.cascade/config.json`
//! `{"resources": {"shared_build_cache": false}}` turns the sharing off.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Ports per story.
pub const PORT_BLOCK: u16 = 100;
/// The first port handed out.
const PORT_FIRST: u16 = 20000;
/// Blocks available (20000..60000).
const PORT_BLOCKS: u16 = 400;

static PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A story's port range, released on drop.
#[derive(Debug)]
pub struct PortLease {
    block: Option<u16>,
}

impl PortLease {
    /// The lowest free block (or, with all 400 taken, none: then no
    /// variable is set rather than a shared one).
    pub fn take() -> PortLease {
        let mut used = match PORTS.lock() {
            Ok(u) => u,
            Err(e) => e.into_inner(),
        };
        let block = (0..PORT_BLOCKS).find(|b| !used.contains(b));
        if let Some(b) = block {
            used.insert(b);
        }
        PortLease { block }
    }

    /// The first port of the range.
    pub fn base(&self) -> Option<u16> {
        self.block.map(|b| PORT_FIRST + b * PORT_BLOCK)
    }

    /// `CASCADE_PORT_BASE` and `CASCADE_PORT_COUNT`.
    pub fn env(&self) -> Vec<(String, String)> {
        match self.base() {
            Some(base) => vec![
                ("CASCADE_PORT_BASE".into(), base.to_string()),
                ("CASCADE_PORT_COUNT".into(), PORT_BLOCK.to_string()),
            ],
            None => Vec::new(),
        }
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        if let Some(b) = self.block {
            if let Ok(mut used) = PORTS.lock() {
                used.remove(&b);
            }
        }
    }
}

/// Target directories being built in, by any engine of this process (the
/// feature engines of a mega run share the repository's directories).
static BUSY_TARGETS: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// The shared Cargo target directories of a repository.
#[derive(Debug)]
pub struct CargoTargets {
    root: PathBuf,
}

/// A leased target directory; free again on drop.
#[derive(Debug)]
pub struct TargetLease {
    path: PathBuf,
}

impl CargoTargets {
    /// Under `<cascade_dir>/cache/cargo-target/`.
    pub fn new(cascade_dir: &Path) -> CargoTargets {
        CargoTargets {
            root: cascade_dir.join("cache").join("cargo-target"),
        }
    }

    /// The lowest directory nobody builds in now.
    pub fn lease(&self) -> TargetLease {
        let mut busy = match BUSY_TARGETS.lock() {
            Ok(b) => b,
            Err(e) => e.into_inner(),
        };
        let path = (0usize..)
            .map(|n| self.root.join(format!("job-{n}")))
            .find(|p| !busy.contains(p))
            .unwrap_or_else(|| self.root.join("job-0"));
        busy.insert(path.clone());
        TargetLease { path }
    }
}

impl TargetLease {
    pub fn path(&self) -> PathBuf {
        self.path.clone()
    }
}

impl Drop for TargetLease {
    fn drop(&mut self) {
        if let Ok(mut busy) = BUSY_TARGETS.lock() {
            busy.remove(&self.path);
        }
    }
}

/// Whether the worktree holds a Rust project cargo would build.
pub fn is_cargo_project(worktree: &Path) -> bool {
    worktree.join("Cargo.toml").is_file()
}

/// The default `--gate-jobs`: half the cores, at least one.
pub fn default_gate_jobs() -> usize {
    (cascade_process::resources::cpu_count() / 2).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_leases_are_distinct_while_held_and_reused_after() {
        let a = PortLease::take();
        let b = PortLease::take();
        assert_ne!(a.base(), b.base());
        let base_a = a.base().unwrap();
        assert!(base_a >= PORT_FIRST && base_a % PORT_BLOCK == 0);
        assert_eq!(a.env()[0].0, "CASCADE_PORT_BASE");
        drop(a);
        // Other tests may hold leases too; the freed block is free again.
        let used = PORTS.lock().unwrap().clone();
        assert!(!used.contains(&((base_a - PORT_FIRST) / PORT_BLOCK)));
        drop(b);
    }

    #[test]
    fn cargo_targets_are_leased_one_builder_each() {
        let tmp = tempfile::tempdir().unwrap();
        let t = CargoTargets::new(tmp.path());
        let a = t.lease();
        // Another engine of the same repository (a mega feature) too.
        let b = CargoTargets::new(tmp.path()).lease();
        assert_ne!(a.path(), b.path());
        let pa = a.path();
        drop(a);
        assert_eq!(t.lease().path(), pa);
        assert!(default_gate_jobs() >= 1);
    }
}
