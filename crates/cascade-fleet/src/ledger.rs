//! The coordinator's record of the jobs it has out
//! (`.cascade/fleet-jobs.json`, written atomically): after a kill -9, the
//! next `cascade resume --fleet` adopts a story's job that is still out
//! (same run, same base) instead of publishing it again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

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
    /// By story id.
    jobs: BTreeMap<String, Out>,
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

    pub fn get(&self, story: &str) -> Option<Out> {
        self.file.lock().ok()?.jobs.get(story).cloned()
    }

    pub fn put(&self, story: &str, out: Out) -> Result<(), String> {
        self.change(|f| {
            f.jobs.insert(story.to_string(), out);
        })
    }

    /// Forgets the story's job if it is `job_id`.
    pub fn done(&self, story: &str, job_id: &str) -> Result<(), String> {
        self.change(|f| {
            if f.jobs.get(story).is_some_and(|o| o.job_id == job_id) {
                f.jobs.remove(story);
            }
        })
    }

    /// Jobs out.
    pub fn len(&self) -> usize {
        self.file.lock().map(|f| f.jobs.len()).unwrap_or(0)
    }

    fn change(&self, f: impl FnOnce(&mut File)) -> Result<(), String> {
        let mut file = self
            .file
            .lock()
            .map_err(|_| "ledger lock poisoned".to_string())?;
        f(&mut file);
        let bytes = serde_json::to_vec_pretty(&*file).map_err(|e| e.to_string())?;
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        cascade_fs::write_atomic(&self.path, &bytes, cascade_fs::Durability::Renamed)
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }
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
        l.put("s1", out.clone()).unwrap();
        assert_eq!(Ledger::open(p.clone()).get("s1"), Some(out));
        l.done("s1", "other").unwrap();
        assert_eq!(l.len(), 1);
        l.done("s1", "j1").unwrap();
        assert_eq!(Ledger::open(p).len(), 0);
    }
}
