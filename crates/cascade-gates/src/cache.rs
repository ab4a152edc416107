//! The gate result cache: content-addressed, shared by every worktree of a
//! repository, explainable.
//!
//! **Key.** blake3 over [`KeyParts`]: the tree fingerprint (restricted to the
//! gate's `inputs` when it has some), the gate's name, program, args, working
//! directory relative to the repository root, sorted env and inputs.
//!
//! **Storage.** `<.cascade>/gate-cache/entries/<key>.json`, one file per
//! entry, written to a unique temp file and renamed into place. One file per
//! key needs no lock: two processes storing the same key write equivalent
//! results and the last rename wins atomically; readers see a whole file or
//! none. Opening the cache reads nothing (a lookup reads one file), so its
//! cost does not grow with the number of entries. Hits refresh the entry's
//! mtime, which is the LRU clock: when a process first stores, entries beyond
//! `max_entries` (oldest first) and older than `max_age` are deleted. An
//! optional TTL turns older entries into misses.
//!
//! **Explain.** Per gate, `gates/<name>.json` keeps the key parts of its last
//! lookup. The compact per-path list of each fingerprint a gate last saw
//! (`oid-prefix mode path` lines) is kept once per fingerprint in
//! `fingerprints/<digest>.files`, shared by all gates and written only when
//! that fingerprint is new (the newest [`KEEP_FILE_LISTS`] are kept). On a
//! miss the differences (files added, removed, modified; command, args, env,
//! working dir, inputs) are written to `gates/<name>.miss.json` for
//! `cascade gates cache explain`.
//!
//! **Beside the entries.** `toolchains.json` holds the toolchain identities
//! probed by earlier runs ([`crate::toolchain`]).
//!
//! **Stats.** Hits (with the time each saved) and misses are appended to
//! `stats.log`, one short line per lookup (appends are atomic).
//!
//! **Remote tier.** With a [`RemoteCache`] attached ([`GateCache::with_remote`]),
//! [`GateCache::lookup_through`] reads local first, then remote (a remote hit
//! is copied into the local cache), and [`GateCache::store`] also publishes
//! in the background (see [`remote`]). Stats then count local and remote
//! hits and the bytes moved; explanations say whether the remote was asked.
//!
//! Nothing here fails a gate run: every write error is swallowed (and counted
//! in [`GateCache::write_errors`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cascade_git::fingerprint::{diff_files, FileId, Fingerprint};
use dashmap::DashMap;
use serde::{Deserialize, Serialize};

use crate::report::{CacheSource, GateResult};
use crate::toolchain::Toolchains;

pub mod remote;
pub(crate) mod sign;

pub use remote::{RemoteCache, RemoteNote};

/// Format version of the entry files; other versions are misses.
const ENTRY_VERSION: u32 = 1;
/// Default bound on the number of entries kept on disk.
pub const DEFAULT_MAX_ENTRIES: usize = 5000;
/// Default age after which unused entries are deleted.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
/// How many fingerprint file lists are kept for explaining misses.
pub const KEEP_FILE_LISTS: usize = 32;
/// At most this many paths per category in an explanation.
const EXPLAIN_MAX_PATHS: usize = 50;

/// Everything a cache key is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyParts {
    /// Hex digest of the (inputs-restricted) tree fingerprint.
    pub fingerprint: String,
    pub gate: String,
    pub command: String,
    pub args: Vec<String>,
    /// Relative to the repository root, `/`-separated (`.` for the root).
    pub working_dir: String,
    pub env: BTreeMap<String, String>,
    pub inputs: Vec<String>,
    /// Output of the gate's toolchain command (`rustc -vV`...); empty when
    /// the gate has none.
    #[serde(default)]
    pub toolchain: String,
}

impl KeyParts {
    /// The cache key: 64 hex characters.
    pub fn key(&self) -> String {
        let mut h = blake3::Hasher::new();
        h.update(b"cascade-gate-key-v1\0");
        let field = |h: &mut blake3::Hasher, s: &str| {
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        };
        field(&mut h, &self.fingerprint);
        field(&mut h, &self.gate);
        field(&mut h, &self.command);
        h.update(&(self.args.len() as u64).to_le_bytes());
        for a in &self.args {
            field(&mut h, a);
        }
        field(&mut h, &self.working_dir);
        h.update(&(self.env.len() as u64).to_le_bytes());
        for (k, v) in &self.env {
            field(&mut h, k);
            field(&mut h, v);
        }
        h.update(&(self.inputs.len() as u64).to_le_bytes());
        for i in &self.inputs {
            field(&mut h, i);
        }
        // Last and only when set: keys of gates without a toolchain stay
        // what they were before toolchains joined the key (a trailing field
        // cannot make two different part lists hash the same bytes).
        if !self.toolchain.is_empty() {
            field(&mut h, &self.toolchain);
        }
        h.finalize().to_hex().to_string()
    }
}

/// One stored result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheEntry {
    pub version: u32,
    pub key: String,
    pub gate: String,
    /// Unix seconds.
    pub created: u64,
    pub result: GateResult,
}

/// Counters of the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: u64,
    /// All hits: `local_hits + remote_hits`.
    pub hits: u64,
    pub misses: u64,
    /// Sum of the original durations of all hits.
    pub time_saved_ms: u64,
    pub local_hits: u64,
    /// Hits found in the remote cache (then copied locally).
    pub remote_hits: u64,
    /// Part of `time_saved_ms` that remote hits saved.
    pub remote_time_saved_ms: u64,
    /// Bytes of remote entries downloaded (hits).
    pub bytes_downloaded: u64,
    /// Entries published to the remote cache, and their bytes.
    pub uploads: u64,
    pub bytes_uploaded: u64,
}

/// Why a gate's last lookup missed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissExplanation {
    pub gate: String,
    /// Unix seconds of the miss.
    pub at: u64,
    pub key: String,
    /// Parts that differ from the previous lookup: `files`, `command`,
    /// `args`, `env`, `working_dir`, `inputs`; empty when nothing changed.
    pub changed: Vec<String>,
    /// One sentence per reason, for humans.
    pub reasons: Vec<String>,
    pub files_added: Vec<String>,
    pub files_removed: Vec<String>,
    pub files_modified: Vec<String>,
    /// Totals (the lists above are capped).
    pub files_changed_total: usize,
    /// Whether the remote cache was consulted and why it missed too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteNote>,
}

/// The per-gate record of the last lookup.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LastLookup {
    parts: KeyParts,
    key: String,
}

/// The gate result cache. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct GateCache {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `<.cascade>/gate-cache`, or `None` for a memory-only cache.
    dir: Option<PathBuf>,
    mem: DashMap<String, CacheEntry>,
    max_entries: usize,
    max_age: Duration,
    ttl: Option<Duration>,
    pruned: AtomicBool,
    write_errors: AtomicU64,
    remote: Option<RemoteCache>,
    toolchains: Toolchains,
}

impl GateCache {
    /// The cache of the repository whose state directory is `cascade_dir`.
    /// Opening reads nothing and never fails; a missing or unwritable
    /// directory only means nothing is remembered on disk.
    pub fn open(cascade_dir: &Path) -> GateCache {
        Self::build(Some(cascade_dir.join("gate-cache")))
    }

    /// A cache that lives only in memory (tests, `--no-cache`-like uses).
    pub fn in_memory() -> GateCache {
        Self::build(None)
    }

    fn build(dir: Option<PathBuf>) -> GateCache {
        GateCache {
            inner: Arc::new(Inner {
                mem: DashMap::new(),
                max_entries: DEFAULT_MAX_ENTRIES,
                max_age: DEFAULT_MAX_AGE,
                ttl: None,
                pruned: AtomicBool::new(false),
                write_errors: AtomicU64::new(0),
                remote: None,
                toolchains: dir
                    .as_ref()
                    .map(|d| Toolchains::persistent(d.join("toolchains.json")))
                    .unwrap_or_default(),
                dir,
            }),
        }
    }

    /// Sets the bounds (before sharing the cache).
    pub fn with_limits(
        self,
        max_entries: usize,
        max_age: Duration,
        ttl: Option<Duration>,
    ) -> GateCache {
        let inner = Inner {
            dir: self.inner.dir.clone(),
            mem: DashMap::new(),
            max_entries: max_entries.max(1),
            max_age,
            ttl,
            pruned: AtomicBool::new(false),
            write_errors: AtomicU64::new(0),
            remote: self.inner.remote.clone(),
            toolchains: self.inner.toolchains.clone(),
        };
        GateCache {
            inner: Arc::new(inner),
        }
    }

    /// Attaches (or, with `None`, detaches) the remote tier (before sharing
    /// the cache).
    pub fn with_remote(self, remote: Option<RemoteCache>) -> GateCache {
        if let (Some(r), Some(dir)) = (&remote, &self.inner.dir) {
            r.set_stats_log(dir.join("stats.log"));
        }
        let inner = Inner {
            dir: self.inner.dir.clone(),
            mem: DashMap::new(),
            max_entries: self.inner.max_entries,
            max_age: self.inner.max_age,
            ttl: self.inner.ttl,
            pruned: AtomicBool::new(false),
            write_errors: AtomicU64::new(0),
            // Verdicts shared with other machines come from fresh probes.
            toolchains: self
                .inner
                .toolchains
                .clone()
                .trusting_kept(remote.is_none()),
            remote,
        };
        GateCache {
            inner: Arc::new(inner),
        }
    }

    /// The remote tier, if one is attached.
    pub fn remote(&self) -> Option<&RemoteCache> {
        self.inner.remote.as_ref()
    }

    /// The toolchain identities of this cache's run (memoised).
    pub fn toolchains(&self) -> &Toolchains {
        &self.inner.toolchains
    }

    /// Waits (bounded) for the remote uploads still running; `None` without
    /// a remote. Call once at the end of a run.
    pub async fn flush_remote(&self, bound: Option<Duration>) -> Option<remote::FlushReport> {
        match &self.inner.remote {
            Some(r) => Some(r.flush(bound).await),
            None => None,
        }
    }

    /// Warnings of the remote tier since the last call.
    pub fn take_remote_warnings(&self) -> Vec<String> {
        self.inner
            .remote
            .as_ref()
            .map(RemoteCache::take_warnings)
            .unwrap_or_default()
    }

    /// The on-disk directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_deref()
    }

    /// How many writes failed (and were ignored) so far.
    pub fn write_errors(&self) -> u64 {
        self.inner.write_errors.load(Ordering::Relaxed)
    }

    fn entry_path(&self, key: &str) -> Option<PathBuf> {
        self.inner
            .dir
            .as_ref()
            .map(|d| d.join("entries").join(format!("{key}.json")))
    }

    /// Looks a result up by key alone (no stats, no explain bookkeeping).
    pub fn get(&self, key: &str) -> Option<CacheEntry> {
        if let Some(e) = self.inner.mem.get(key) {
            if self.fresh(&e) {
                return Some(e.clone());
            }
        }
        let path = self.entry_path(key)?;
        let bytes = std::fs::read(&path).ok()?;
        let entry: CacheEntry = serde_json::from_slice(&bytes).ok()?;
        if entry.version != ENTRY_VERSION || entry.key != key || !self.fresh(&entry) {
            return None;
        }
        self.inner.mem.insert(key.to_string(), entry.clone());
        Some(entry)
    }

    fn fresh(&self, e: &CacheEntry) -> bool {
        match self.inner.ttl {
            Some(ttl) => now_secs().saturating_sub(e.created) <= ttl.as_secs(),
            None => true,
        }
    }

    /// A full lookup for a gate run: returns the stored result marked
    /// `cached` on a hit; records the hit or miss (stats, explain). `files`
    /// is the fingerprint's file list (for explaining a later miss).
    pub fn lookup(&self, parts: &KeyParts, files: &[FileId]) -> Option<GateResult> {
        let key = parts.key();
        let hit = self.lookup_local(&key);
        if hit.is_none() {
            let note = self.inner.remote.as_ref().map(|_| RemoteNote {
                consulted: false,
                outcome: "skipped".into(),
                url: self.inner.remote.as_ref().map(|r| r.url().to_string()),
                detail: "a synchronous lookup does not consult the remote".into(),
            });
            self.record_miss(parts, &key, files, note);
        } else {
            self.record_lookup(parts, &key, files, false, None);
        }
        hit
    }

    /// Local lookup with the hit's bookkeeping (stats line, LRU clock).
    fn lookup_local(&self, key: &str) -> Option<GateResult> {
        let entry = self.get(key)?;
        Some(self.local_hit(key, entry))
    }

    /// The bookkeeping of a local hit (stats line, LRU clock), and its result.
    fn local_hit(&self, key: &str, entry: CacheEntry) -> GateResult {
        self.append_stat(&format!("h {}\n", entry.result.duration_ms));
        if let Some(p) = self.entry_path(key) {
            // LRU clock; failure only makes the entry look older.
            let _ = std::fs::File::options()
                .append(true)
                .open(&p)
                .and_then(|f| f.set_modified(SystemTime::now()));
        }
        as_hit(entry, CacheSource::Local)
    }

    /// Records a hit found with [`GateCache::get`] under the key of `parts`
    /// exactly as [`GateCache::lookup`] records one, and returns its result.
    pub fn record_hit(&self, parts: &KeyParts, entry: CacheEntry, fp: &Fingerprint) -> GateResult {
        let key = parts.key();
        let hit = self.local_hit(&key, entry);
        self.record_lookup(parts, &key, fp.files(), false, None);
        hit
    }

    fn record_miss(&self, parts: &KeyParts, key: &str, files: &[FileId], note: Option<RemoteNote>) {
        self.append_stat("m\n");
        self.record_lookup(parts, key, files, true, note);
    }

    /// The lookup of a gate run: local, then (when attached and readable)
    /// remote; a remote hit is verified, copied into the local cache and
    /// returned marked [`CacheSource::Remote`]. Records the outcome (stats,
    /// explain). Waits on the remote at most its request timeout.
    pub async fn lookup_through(
        &self,
        parts: &KeyParts,
        files: Arc<Fingerprint>,
    ) -> Option<GateResult> {
        let key = parts.key();
        let local = {
            let (me, key) = (self.clone(), key.clone());
            tokio::task::spawn_blocking(move || me.lookup_local(&key))
                .await
                .ok()
                .flatten()
        };
        let (hit, note) = match (local, &self.inner.remote) {
            (Some(hit), _) => (Some(hit), None),
            (None, None) => (None, Some(RemoteNote::not_configured())),
            (None, Some(remote)) => match remote.fetch(&key).await {
                remote::Fetched::Hit(bytes, size) => {
                    match self.accept_remote_blocking(&key, bytes, size).await {
                        Ok(entry) => (Some(as_hit(entry, CacheSource::Remote)), None),
                        Err(why) => (
                            None,
                            Some(RemoteNote {
                                consulted: true,
                                outcome: "rejected".into(),
                                url: Some(remote.url().to_string()),
                                detail: why,
                            }),
                        ),
                    }
                }
                remote::Fetched::Miss(note) => (None, Some(note)),
            },
        };
        let (me, p, k, miss) = (self.clone(), parts.clone(), key, hit.is_none());
        let _ = tokio::task::spawn_blocking(move || {
            if miss {
                me.record_miss(&p, &k, files.files(), note);
            } else {
                me.record_lookup(&p, &k, files.files(), false, None);
            }
        })
        .await;
        hit
    }

    /// [`GateCache::accept_remote`] off the async threads, with its stats line.
    async fn accept_remote_blocking(
        &self,
        key: &str,
        bytes: Vec<u8>,
        size: u64,
    ) -> Result<CacheEntry, String> {
        let (me, key) = (self.clone(), key.to_string());
        tokio::task::spawn_blocking(move || {
            let entry = me.accept_remote(&key, &bytes)?;
            me.append_stat(&format!("r {} {size}\n", entry.result.duration_ms));
            Ok(entry)
        })
        .await
        .map_err(|e| format!("internal error: {e}"))?
    }

    /// Checks a verified remote entry and copies it into the local cache
    /// (as the bytes that were signed).
    fn accept_remote(&self, key: &str, bytes: &[u8]) -> Result<CacheEntry, String> {
        let entry: CacheEntry = serde_json::from_slice(bytes)
            .map_err(|e| format!("the remote entry is not a cache entry: {e}"))?;
        if entry.version != ENTRY_VERSION || entry.key != key {
            return Err(format!(
                "the remote entry has version {} / key {} (expected {ENTRY_VERSION} / {key})",
                entry.version, entry.key
            ));
        }
        if !self.fresh(&entry) {
            return Err("the remote entry is older than the cache's TTL".into());
        }
        if let Some(path) = self.entry_path(key) {
            self.write_atomic(&path, bytes);
        }
        self.inner.mem.insert(key.to_string(), entry.clone());
        Ok(entry)
    }

    /// Stores a result under the key of `parts`. Never fails.
    pub fn store(&self, parts: &KeyParts, result: &GateResult) {
        let key = parts.key();
        let mut result = result.clone();
        result.cached = false;
        let entry = CacheEntry {
            version: ENTRY_VERSION,
            key: key.clone(),
            gate: parts.gate.clone(),
            created: now_secs(),
            result,
        };
        let bytes = serde_json::to_vec(&entry);
        if let Some(path) = self.entry_path(&key) {
            match &bytes {
                Ok(bytes) => self.write_atomic(&path, bytes),
                Err(_) => self.note_write_error(),
            }
            if !self.inner.pruned.swap(true, Ordering::Relaxed) {
                self.prune();
            }
        }
        // Only passes are shared: a failure kept with `cache_failures` may
        // be this machine's own (a missing service, a full disk).
        if let (Some(remote), Ok(bytes), true) = (&self.inner.remote, &bytes, entry.result.passed) {
            remote.publish(&key, bytes);
        }
        self.inner.mem.insert(key, entry);
    }

    fn note_write_error(&self) {
        self.inner.write_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes beside and renames, so readers never see half a file (no
    /// fsync: a lost entry is only a cache miss).
    fn write_atomic(&self, path: &Path, bytes: &[u8]) {
        if cascade_fs::write_atomic(path, bytes, cascade_fs::Durability::Renamed).is_err() {
            self.note_write_error();
        }
    }

    fn append_stat(&self, line: &str) {
        let Some(dir) = &self.inner.dir else { return };
        if !append_line(&dir.join("stats.log"), line) {
            self.note_write_error();
        }
    }

    /// Deletes entries beyond `max_entries` (least recently used first) and
    /// entries unused for longer than `max_age`. Returns how many went.
    pub fn prune(&self) -> usize {
        let Some(dir) = &self.inner.dir else { return 0 };
        let mut entries = list_entries(&dir.join("entries"));
        let now = SystemTime::now();
        entries.sort_by_key(|e| std::cmp::Reverse(e.1)); // newest first
        let mut removed = 0;
        for (i, (path, mtime, _)) in entries.iter().enumerate() {
            let too_old = now
                .duration_since(*mtime)
                .map(|d| d > self.inner.max_age)
                .unwrap_or(false);
            if (i >= self.inner.max_entries || too_old) && std::fs::remove_file(path).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// Loads every entry from disk into memory (what a long-lived process
    /// could do up front); returns how many were loaded.
    pub fn load_all(&self) -> usize {
        let Some(dir) = &self.inner.dir else {
            return self.inner.mem.len();
        };
        let mut n = 0;
        for (path, _, _) in list_entries(&dir.join("entries")) {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let Ok(entry) = serde_json::from_slice::<CacheEntry>(&bytes) else {
                continue;
            };
            if entry.version == ENTRY_VERSION && self.fresh(&entry) {
                self.inner.mem.insert(entry.key.clone(), entry);
                n += 1;
            }
        }
        n
    }

    /// Entries, hits, misses and time saved.
    pub fn stats(&self) -> CacheStats {
        let Some(dir) = &self.inner.dir else {
            return CacheStats {
                entries: self.inner.mem.len(),
                ..CacheStats::default()
            };
        };
        // The first word of a line is its kind; `it` then yields the numbers.
        let num_kind = |l: &str| l.chars().next();
        let entries = list_entries(&dir.join("entries"));
        let mut stats = CacheStats {
            entries: entries.len(),
            bytes: entries.iter().map(|e| e.2).sum(),
            ..CacheStats::default()
        };
        if let Ok(text) = std::fs::read_to_string(dir.join("stats.log")) {
            for line in text.lines() {
                let mut it = line.split_whitespace().skip(1);
                let mut num = || it.next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
                match num_kind(line) {
                    Some('h') => {
                        let saved = num();
                        stats.local_hits += 1;
                        stats.time_saved_ms += saved;
                    }
                    Some('r') => {
                        let (saved, size) = (num(), num());
                        stats.remote_hits += 1;
                        stats.time_saved_ms += saved;
                        stats.remote_time_saved_ms += saved;
                        stats.bytes_downloaded += size;
                    }
                    Some('u') => {
                        stats.uploads += 1;
                        stats.bytes_uploaded += num();
                    }
                    Some('m') => stats.misses += 1,
                    _ => {}
                }
            }
        }
        stats.hits = stats.local_hits + stats.remote_hits;
        stats
    }

    /// Removes every entry, the counters and the explain records. Returns
    /// how many entries were removed.
    pub fn clear(&self) -> std::io::Result<usize> {
        let n = self.inner.mem.len();
        self.inner.mem.clear();
        let Some(dir) = &self.inner.dir else {
            return Ok(n);
        };
        let count = list_entries(&dir.join("entries")).len();
        match std::fs::remove_dir_all(dir) {
            Ok(()) => Ok(count),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// The miss of every gate whose last lookup missed, sorted by gate name
    /// (a hit since then clears it).
    pub fn explain(&self) -> Vec<MissExplanation> {
        let Some(dir) = &self.inner.dir else {
            return Vec::new();
        };
        let Ok(rd) = std::fs::read_dir(dir.join("gates")) else {
            return Vec::new();
        };
        let mut out: Vec<MissExplanation> = rd
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".miss.json"))
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice(&b).ok())
            .collect();
        out.sort_by(|a, b| a.gate.cmp(&b.gate));
        out
    }

    /// Keeps the per-gate record of the last lookup and, on a miss, the
    /// explanation against the previous one.
    fn record_lookup(
        &self,
        parts: &KeyParts,
        key: &str,
        files: &[FileId],
        miss: bool,
        remote: Option<RemoteNote>,
    ) {
        let Some(dir) = &self.inner.dir else { return };
        let gates = dir.join("gates");
        let stem = gate_file_stem(&parts.gate);
        let last_path = gates.join(format!("{stem}.json"));
        let lists = dir.join("fingerprints");
        let previous: Option<LastLookup> = std::fs::read(&last_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let miss_path = gates.join(format!("{stem}.miss.json"));
        if !miss {
            // A miss explains the gate's last lookup only: a later hit
            // makes it history (`explain` would otherwise report it as now).
            let _ = std::fs::remove_file(&miss_path);
        }
        if miss {
            let old_list = previous
                .as_ref()
                .map(|p| lists.join(format!("{}.files", safe_hex(&p.parts.fingerprint))));
            let mut explanation =
                explain_miss(parts, key, previous.as_ref(), old_list.as_deref(), files);
            if let Some(note) = remote {
                explanation.reasons.push(if note.consulted {
                    format!("remote {}: {}", note.outcome.replace('_', " "), note.detail)
                } else {
                    format!("remote not consulted: {}", note.detail)
                });
                explanation.remote = Some(note);
            }
            match serde_json::to_vec_pretty(&explanation) {
                Ok(b) => self.write_atomic(&miss_path, &b),
                Err(_) => self.note_write_error(),
            }
        }
        if previous.as_ref().map(|p| p.key.as_str()) != Some(key) {
            let rec = LastLookup {
                parts: parts.clone(),
                key: key.to_string(),
            };
            if let Ok(b) = serde_json::to_vec(&rec) {
                self.write_atomic(&last_path, &b);
            }
        }
        let list = lists.join(format!("{}.files", safe_hex(&parts.fingerprint)));
        if !list.exists() {
            self.write_atomic(&list, &encode_files(files));
            prune_lists(&lists);
        }
    }
}

/// Keeps the newest [`KEEP_FILE_LISTS`] fingerprint file lists (best
/// effort: errors are ignored).
fn prune_lists(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut lists: Vec<(PathBuf, std::time::SystemTime)> = rd
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "files"))
        .filter_map(|e| Some((e.path(), e.metadata().ok()?.modified().ok()?)))
        .collect();
    if lists.len() <= KEEP_FILE_LISTS {
        return;
    }
    lists.sort_by_key(|f| std::cmp::Reverse(f.1));
    for (path, _) in lists.into_iter().skip(KEEP_FILE_LISTS) {
        let _ = std::fs::remove_file(path);
    }
}

/// A fingerprint digest as a file name (hex only, whatever was stored).
fn safe_hex(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(64)
        .collect()
}

fn explain_miss(
    parts: &KeyParts,
    key: &str,
    previous: Option<&LastLookup>,
    files_path: Option<&Path>,
    files: &[FileId],
) -> MissExplanation {
    let mut ex = MissExplanation {
        gate: parts.gate.clone(),
        at: now_secs(),
        key: key.to_string(),
        ..MissExplanation::default()
    };
    let Some(prev) = previous else {
        ex.reasons
            .push("first lookup of this gate: nothing to compare with".into());
        return ex;
    };
    let p = &prev.parts;
    if p.fingerprint != parts.fingerprint {
        ex.changed.push("files".into());
        match files_path
            .and_then(|p| std::fs::read(p).ok())
            .map(|b| decode_files(&b))
        {
            Some(old) => {
                let new: Vec<(String, u32, String)> = files
                    .iter()
                    .map(|f| (f.path.clone(), f.mode, oid_prefix(f)))
                    .collect();
                let (added, removed, modified) = diff_compact(&old, &new);
                ex.files_changed_total = added.len() + removed.len() + modified.len();
                ex.reasons.push(format!(
                    "files changed: {} added, {} removed, {} modified",
                    added.len(),
                    removed.len(),
                    modified.len()
                ));
                ex.files_added = added.into_iter().take(EXPLAIN_MAX_PATHS).collect();
                ex.files_removed = removed.into_iter().take(EXPLAIN_MAX_PATHS).collect();
                ex.files_modified = modified.into_iter().take(EXPLAIN_MAX_PATHS).collect();
            }
            None => ex
                .reasons
                .push("files changed (the previous file list is not available)".into()),
        }
    }
    if p.command != parts.command {
        ex.changed.push("command".into());
        ex.reasons.push(format!(
            "command changed: `{}` -> `{}`",
            p.command, parts.command
        ));
    }
    if p.args != parts.args {
        ex.changed.push("args".into());
        ex.reasons
            .push(format!("args changed: {:?} -> {:?}", p.args, parts.args));
    }
    if p.env != parts.env {
        ex.changed.push("env".into());
        let mut names: Vec<&String> = p
            .env
            .keys()
            .chain(parts.env.keys())
            .filter(|k| p.env.get(*k) != parts.env.get(*k))
            .collect();
        names.sort();
        names.dedup();
        let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        ex.reasons
            .push(format!("env changed: {}", names.join(", ")));
    }
    if p.working_dir != parts.working_dir {
        ex.changed.push("working_dir".into());
        ex.reasons.push(format!(
            "working dir changed: {} -> {}",
            p.working_dir, parts.working_dir
        ));
    }
    if p.inputs != parts.inputs {
        ex.changed.push("inputs".into());
        ex.reasons.push(format!(
            "inputs changed: {:?} -> {:?}",
            p.inputs, parts.inputs
        ));
    }
    if p.toolchain != parts.toolchain {
        ex.changed.push("toolchain".into());
        let first = |s: &str| s.lines().next().unwrap_or("").to_string();
        ex.reasons.push(format!(
            "toolchain changed: `{}` -> `{}`",
            first(&p.toolchain),
            first(&parts.toolchain)
        ));
    }
    if ex.changed.is_empty() {
        ex.reasons.push(
            "nothing changed since the previous lookup: its result was not stored \
             (failing gates are cached only with cache_failures), or it was cleared, evicted or expired"
                .into(),
        );
    }
    ex
}

/// First 16 hex digits of the blob id: plenty to notice a change.
fn oid_prefix(f: &FileId) -> String {
    let mut s = f.oid.to_string();
    s.truncate(16);
    s
}

fn encode_files(files: &[FileId]) -> Vec<u8> {
    let mut out = Vec::with_capacity(files.len() * 48);
    for f in files {
        if f.path.contains('\n') {
            continue;
        }
        out.extend_from_slice(oid_prefix(f).as_bytes());
        out.extend_from_slice(format!(" {:o} ", f.mode).as_bytes());
        out.extend_from_slice(f.path.as_bytes());
        out.push(b'\n');
    }
    out
}

fn decode_files(bytes: &[u8]) -> Vec<(String, u32, String)> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let oid = it.next()?.to_string();
            let mode = u32::from_str_radix(it.next()?, 8).ok()?;
            Some((it.next()?.to_string(), mode, oid))
        })
        .collect()
}

/// (added, removed, modified) between two path-sorted compact lists.
fn diff_compact(
    old: &[(String, u32, String)],
    new: &[(String, u32, String)],
) -> (Vec<String>, Vec<String>, Vec<String>) {
    // Reuse the FileId diff through a cheap conversion of the compact form.
    let to_ids = |v: &[(String, u32, String)]| -> Vec<FileId> {
        v.iter()
            .map(|(p, m, o)| FileId {
                path: p.clone(),
                mode: *m,
                oid: git_oid_from_prefix(o),
            })
            .collect()
    };
    let c = diff_files(&to_ids(old), &to_ids(new));
    (c.added, c.removed, c.modified)
}

fn git_oid_from_prefix(prefix: &str) -> cascade_git::fingerprint::Oid {
    let mut bytes = [0u8; 20];
    for (i, chunk) in prefix.as_bytes().chunks(2).enumerate().take(20) {
        let s = std::str::from_utf8(chunk).unwrap_or("00");
        bytes[i] = u8::from_str_radix(s, 16).unwrap_or(0);
    }
    cascade_git::fingerprint::Oid::from_bytes(&bytes)
        .unwrap_or_else(|_| cascade_git::fingerprint::Oid::zero())
}

/// A file-name-safe, collision-free stem for a gate name.
fn gate_file_stem(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    let h = blake3::hash(name.as_bytes()).to_hex();
    format!("{safe}-{}", &h[..8])
}

fn list_entries(dir: &Path) -> Vec<(PathBuf, SystemTime, u64)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.ends_with(".json") && !n.starts_with('.')
        })
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((e.path(), m.modified().unwrap_or(UNIX_EPOCH), m.len()))
        })
        .collect()
}

/// A stored entry as a hit's result.
fn as_hit(entry: CacheEntry, source: CacheSource) -> GateResult {
    let mut r = entry.result;
    r.cached = true;
    r.cache = source;
    r.original_duration_ms = Some(r.original_duration_ms.unwrap_or(r.duration_ms));
    r
}

/// Appends one line (appends are atomic); false when it could not.
pub(crate) fn append_line(path: &Path, line: &str) -> bool {
    let res = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| {
            std::fs::File::options()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(line.as_bytes()))
        });
    res.is_ok()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
