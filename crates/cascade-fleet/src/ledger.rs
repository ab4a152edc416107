//! The coordinator's record of what it has out (`.cascade/fleet-jobs.json`,
//! written atomically):
//!
//! - the jobs out, by job key (the story key; a race's contestant adds its
//!   name): after a kill -9, the next `cascade resume
//!   --fleet` adopts a story's job that is still out (same run, same base)
//!   instead of publishing it again;
//! - the refs it made on the shared remote and has not deleted yet: the
//!   bases it pushed, and the branches workers pushed for each story (see the
//!   `refs` module), so a restarted coordinator still cleans them up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Why the ledger could not record a change (the change is kept in
/// memory: the ledger is a hint for a restarted coordinator).
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("the fleet ledger is unusable: a thread panicked while changing it")]
    Poisoned,
    #[error("cannot encode the fleet ledger: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One job out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Out {
    pub job_id: String,
    pub run_id: String,
    pub attempt: u32,
    pub base: String,
    pub published_at: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    /// By job key ([`Job::job_key`](cascade_engine::executor::Job::job_key)).
    jobs: BTreeMap<String, Out>,
    /// Branches workers pushed to the remote, by story key (until the story
    /// is merged and they are deleted).
    #[serde(default)]
    branches: BTreeMap<String, BTreeSet<String>>,
    /// Base commits pushed to the remote (as `refs/cascade/base/<sha>`) and
    /// not deleted yet.
    #[serde(default)]
    bases: BTreeSet<String>,
}

/// The ledger file and its content.
pub struct Ledger {
    path: PathBuf,
    file: Mutex<File>,
}

impl Ledger {
    /// Reads `path` (missing or unreadable: empty; it is only a hint).
    pub fn open(path: PathBuf) -> Ledger {
        let file = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Ledger {
            path,
            file: Mutex::new(file),
        }
    }

    pub fn get(&self, key: &str) -> Option<Out> {
        self.file.lock().ok()?.jobs.get(key).cloned()
    }

    /// Records a job published.
    pub fn put(&self, key: &str, out: Out) -> Result<(), LedgerError> {
        self.change(|f| {
            f.jobs.insert(key.to_string(), out);
        })
    }

    /// Records bases about to be pushed.
    pub fn add_bases(&self, bases: &[String]) -> Result<(), LedgerError> {
        if bases.is_empty() {
            return Ok(());
        }
        self.change(|f| f.bases.extend(bases.iter().cloned()))
    }

    /// Forgets the job out under `job_key` if it is `job_id`; records the
    /// branch its worker pushed, if any, under the story `key` (a race's
    /// contestants are jobs of their own, their branches the story's).
    pub fn done(
        &self,
        (job_key, key): (&str, &str),
        job_id: &str,
        pushed: Option<&str>,
    ) -> Result<(), LedgerError> {
        self.change(|f| {
            if f.jobs.get(job_key).is_some_and(|o| o.job_id == job_id) {
                f.jobs.remove(job_key);
            }
            if let Some(branch) = pushed {
                record_branch(f, key, branch);
            }
        })
    }

    /// Records a branch pushed for story `key`.
    pub fn pushed(&self, key: &str, branch: &str) -> Result<(), LedgerError> {
        self.change(|f| record_branch(f, key, branch))
    }

    /// Jobs out.
    pub fn len(&self) -> usize {
        self.file.lock().map(|f| f.jobs.len()).unwrap_or(0)
    }

    /// The branches pushed for story `key`.
    pub fn branches(&self, key: &str) -> Vec<String> {
        self.file
            .lock()
            .map(|f| f.branches.get(key).into_iter().flatten().cloned().collect())
            .unwrap_or_default()
    }

    /// The bases pushed and not deleted, and those of them jobs out use.
    pub fn bases(&self) -> (Vec<String>, BTreeSet<String>) {
        self.file
            .lock()
            .map(|f| {
                let used = f.jobs.values().map(|o| o.base.clone()).collect();
                (f.bases.iter().cloned().collect(), used)
            })
            .unwrap_or_default()
    }

    /// Forgets refs deleted from the remote: branches and bases.
    pub fn forget(&self, branches: &[String], bases: &[String]) -> Result<(), LedgerError> {
        if branches.is_empty() && bases.is_empty() {
            return Ok(());
        }
        self.change(|f| {
            for set in f.branches.values_mut() {
                for b in branches {
                    set.remove(b);
                }
            }
            f.branches.retain(|_, set| !set.is_empty());
            for b in bases {
                f.bases.remove(b);
            }
        })
    }

    fn change(&self, f: impl FnOnce(&mut File)) -> Result<(), LedgerError> {
        let mut file = self.file.lock().map_err(|_| LedgerError::Poisoned)?;
        f(&mut file);
        let bytes = serde_json::to_vec_pretty(&*file)?;
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        cascade_fs::write_atomic(&self.path, &bytes, cascade_fs::Durability::Renamed).map_err(
            |source| LedgerError::Write {
                path: self.path.clone(),
                source,
            },
        )
    }
}

fn record_branch(f: &mut File, key: &str, branch: &str) {
    f.branches
        .entry(key.to_string())
        .or_default()
        .insert(branch.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fleet-jobs.json");
        let l = Ledger::open(p.clone());
        let out = Out {
            job_id: "j1".into(),
            run_id: "r".into(),
            attempt: 1,
            base: "abc".into(),
            published_at: "t".into(),
        };
        l.add_bases(&["abc".to_string()]).unwrap();
        l.put("s1", out.clone()).unwrap();
        assert_eq!(Ledger::open(p.clone()).get("s1"), Some(out));
        l.done(("s1", "s1"), "other", None).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(
            l.bases(),
            (vec!["abc".to_string()], ["abc".to_string()].into())
        );
        l.done(("s1", "s1"), "j1", Some("cascade/s1/a1")).unwrap();
        let again = Ledger::open(p.clone());
        assert_eq!(again.len(), 0);
        assert_eq!(again.branches("s1"), ["cascade/s1/a1"]);
        assert_eq!(again.bases(), (vec!["abc".to_string()], BTreeSet::new()));
        again
            .forget(&["cascade/s1/a1".to_string()], &["abc".to_string()])
            .unwrap();
        let last = Ledger::open(p);
        assert!(last.branches("s1").is_empty());
        assert!(last.bases().0.is_empty());
    }
}
