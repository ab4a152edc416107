//! Availability detection: is an agent's command on PATH?
//!
//! Lookups go through the `which` crate with an explicit PATH (taken from the
//! environment by default, or given, so tests can point at a directory of stub
//! executables) and are cached in memory and, optionally, in a JSON file under
//! `.cascade/` with a one-hour TTL. The cache remembers which PATH it was made
//! for, so a different PATH never reuses stale answers; a command that was
//! found but whose file has since disappeared is looked up again.
//! [`Detector::refresh`] forgets everything. Cache writes are atomic (temp
//! file + rename) and never fail a run.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::config::AgentDef;

/// How long a cached detection result is trusted.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);

/// Name of the cache file inside the cache directory.
pub const CACHE_FILE: &str = "agent-detection.json";

const CACHE_VERSION: u32 = 1;

/// The result of looking up one command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detection {
    /// The command as configured.
    pub command: String,
    /// Where it was found, if it was.
    pub path: Option<PathBuf>,
    /// Unix seconds of the lookup.
    pub checked_at: u64,
}

impl Detection {
    /// Whether the command was found.
    pub fn found(&self) -> bool {
        self.path.is_some()
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    /// The PATH the entries were looked up with.
    path_env: String,
    entries: BTreeMap<String, Detection>,
}

/// Finds agents' commands, with a cache.
#[derive(Debug)]
pub struct Detector {
    path_env: OsString,
    cwd: PathBuf,
    cache_file: Option<PathBuf>,
    ttl: Duration,
    entries: Mutex<BTreeMap<String, Detection>>,
    /// Results of `cascade agents check` next to the cache (see [`Detector::check_failure`]).
    checks: Option<crate::check::CheckCache>,
    /// Whether the cache file is written (off: read only, until
    /// [`Detector::allow_writes`]).
    writes: std::sync::atomic::AtomicBool,
}

impl Detector {
    /// A detector using `$PATH` and the current directory, without a cache file.
    pub fn from_env() -> Detector {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        Detector::with_path(std::env::var_os("PATH").unwrap_or_default(), cwd)
    }

    /// A detector searching `path_env` (a PATH-style list); relative commands
    /// (with a slash) are resolved against `cwd`.
    pub fn with_path(path_env: impl Into<OsString>, cwd: impl Into<PathBuf>) -> Detector {
        Detector {
            path_env: path_env.into(),
            cwd: cwd.into(),
            cache_file: None,
            ttl: DEFAULT_TTL,
            entries: Mutex::new(BTreeMap::new()),
            checks: None,
            writes: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Reads the cache but never writes it (nor creates its directory)
    /// until [`Detector::allow_writes`]: what a command that may still be
    /// refused uses, so a refusal leaves nothing behind.
    pub fn read_only(self) -> Detector {
        self.writes
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Lets the cache be written from now on (a run has started).
    pub fn allow_writes(&self) {
        self.writes
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn writes(&self) -> bool {
        self.writes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps the cache in `<dir>/agent-detection.json` (typically `.cascade/`)
    /// and loads what is there and still fresh for this PATH.
    pub fn cache_dir(mut self, dir: impl AsRef<Path>) -> Detector {
        let file = dir.as_ref().join(CACHE_FILE);
        let loaded = load_cache(&file, &self.path_env_string(), self.ttl);
        self.entries = Mutex::new(loaded);
        self.cache_file = Some(file);
        self.checks = Some(crate::check::CheckCache::new(dir.as_ref()));
        self
    }

    /// Why `agent` is unusable although installed: its last `cascade agents
    /// check` (in the same cache directory) failed, and neither the binary
    /// nor the agent's definition changed since. Resolvers fall back from it.
    pub fn check_failure(&self, agent: &AgentDef) -> Option<String> {
        let checks = self.checks.as_ref()?;
        let path = self.detect(&agent.command).path?;
        checks.failure(agent, &path)
    }

    /// How long cached results are trusted (default one hour).
    pub fn ttl(mut self, ttl: Duration) -> Detector {
        self.ttl = ttl;
        let now = now_secs();
        if let Ok(entries) = self.entries.get_mut() {
            entries.retain(|_, d| fresh(d, now, ttl));
        }
        self
    }

    /// The PATH this detector searches.
    pub fn path_env(&self) -> &OsString {
        &self.path_env
    }

    /// Forgets every cached result (memory and file).
    pub fn refresh(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.clear();
        }
        if let Some(file) = self.cache_file.as_ref().filter(|_| self.writes()) {
            // A missing file is already refreshed.
            let _ = std::fs::remove_file(file);
        }
    }

    /// Looks up `command` (cached).
    pub fn detect(&self, command: &str) -> Detection {
        let now = now_secs();
        if let Ok(entries) = self.entries.lock() {
            if let Some(d) = entries.get(command) {
                let still_there = d.path.as_ref().map_or(true, |p| p.is_file());
                if fresh(d, now, self.ttl) && still_there {
                    return d.clone();
                }
            }
        }
        let path = which::which_in(command, Some(&self.path_env), &self.cwd).ok();
        let detection = Detection {
            command: command.to_string(),
            path,
            checked_at: now,
        };
        let snapshot = match self.entries.lock() {
            Ok(mut entries) => {
                entries.insert(command.to_string(), detection.clone());
                Some(entries.clone())
            }
            Err(_) => None,
        };
        if let (Some(file), Some(entries), true) = (&self.cache_file, snapshot, self.writes()) {
            save_cache(file, &self.path_env_string(), entries);
        }
        detection
    }

    /// Looks up an agent's command.
    pub fn detect_agent(&self, agent: &AgentDef) -> Detection {
        self.detect(&agent.command)
    }

    /// Whether an agent can be used: its command is found, or, for an api
    /// agent, its key variable is set (or it needs none).
    pub fn is_available(&self, agent: &AgentDef) -> bool {
        match &agent.api {
            Some(api) => api.key().is_ok(),
            None => self.detect_agent(agent).found(),
        }
    }

    fn path_env_string(&self) -> String {
        self.path_env.to_string_lossy().into_owned()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn fresh(d: &Detection, now: u64, ttl: Duration) -> bool {
    // A timestamp from the future (clock moved back) is not trusted either.
    d.checked_at <= now && now - d.checked_at < ttl.as_secs()
}

fn load_cache(file: &Path, path_env: &str, ttl: Duration) -> BTreeMap<String, Detection> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return BTreeMap::new();
    };
    let Ok(cache) = serde_json::from_str::<CacheFile>(&text) else {
        // A corrupt cache is only a slower run.
        return BTreeMap::new();
    };
    if cache.version != CACHE_VERSION || cache.path_env != path_env {
        return BTreeMap::new();
    }
    let now = now_secs();
    cache
        .entries
        .into_iter()
        .filter(|(_, d)| fresh(d, now, ttl))
        .collect()
}

/// Writes the cache atomically; failures are ignored on purpose (a read-only
/// `.cascade/` must not stop agents from running).
fn save_cache(file: &Path, path_env: &str, entries: BTreeMap<String, Detection>) {
    let cache = CacheFile {
        version: CACHE_VERSION,
        path_env: path_env.to_string(),
        entries,
    };
    let Ok(text) = serde_json::to_string_pretty(&cache) else {
        return;
    };
    let _ = cascade_fs::write_atomic(file, text.as_bytes(), cascade_fs::Durability::Synced);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn stub(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn finds_only_executables_on_the_given_path() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let codex = stub(&bin, "codex");
        std::fs::write(bin.join("aider"), "not executable").unwrap();
        let d = Detector::with_path(&bin, dir.path());
        assert_eq!(d.detect("codex").path, Some(codex));
        assert!(
            !d.detect("aider").found(),
            "non-executable file counts as missing"
        );
        assert!(!d.detect("claude").found());
    }

    #[test]
    fn cache_is_written_reused_and_refreshed() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let cache = dir.path().join(".cascade");
        std::fs::create_dir(&bin).unwrap();

        let d = Detector::with_path(&bin, dir.path()).cache_dir(&cache);
        assert!(!d.detect("codex").found());
        let text = std::fs::read_to_string(cache.join(CACHE_FILE)).unwrap();
        assert!(text.contains("\"codex\""), "{text}");

        // Installed after the lookup: the cache still says missing...
        stub(&bin, "codex");
        let d = Detector::with_path(&bin, dir.path()).cache_dir(&cache);
        assert!(!d.detect("codex").found());
        // ...until refreshed.
        d.refresh();
        assert!(d.detect("codex").found());

        // A different PATH does not reuse the cache.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let d2 = Detector::with_path(&other, dir.path()).cache_dir(&cache);
        assert!(!d2.detect("codex").found());
    }

    #[test]
    fn stale_and_vanished_entries_are_looked_up_again() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let cache = dir.path().join(".cascade");
        std::fs::create_dir(&bin).unwrap();
        let path = stub(&bin, "aider");
        let d = Detector::with_path(&bin, dir.path()).cache_dir(&cache);
        assert!(d.detect("aider").found());
        std::fs::remove_file(&path).unwrap();
        assert!(!d.detect("aider").found(), "vanished command re-detected");

        // Expired entries in the file are ignored.
        stub(&bin, "gemini");
        let mut file: CacheFile =
            serde_json::from_str(&std::fs::read_to_string(cache.join(CACHE_FILE)).unwrap())
                .unwrap();
        file.entries.insert(
            "gemini".into(),
            Detection {
                command: "gemini".into(),
                path: None,
                checked_at: now_secs() - 2 * 3600,
            },
        );
        std::fs::write(
            cache.join(CACHE_FILE),
            serde_json::to_string(&file).unwrap(),
        )
        .unwrap();
        let d = Detector::with_path(&bin, dir.path()).cache_dir(&cache);
        assert!(d.detect("gemini").found());
    }

    #[test]
    fn corrupt_cache_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CACHE_FILE), "{not json").unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        stub(&bin, "amp");
        let d = Detector::with_path(&bin, dir.path()).cache_dir(dir.path());
        assert!(d.detect("amp").found());
    }
}
