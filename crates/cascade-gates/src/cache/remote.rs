//! The remote tier of the gate cache: settings, trust, and a store that may
//! be slow or down without ever failing or stalling a gate run.
//!
//! **Where.** `--remote-cache URL`, else `CASCADE_REMOTE_CACHE`, else
//! `remote_cache` in `.cascade/gates.json` (`off` / empty turns it off).
//! `file:///dir` works in every build; `s3://`, `gs://`, `az://`/`abfs://`,
//! `http(s)://` need the `remote-cloud` feature. Credentials come only from
//! each backend's usual environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
//!
//! **Trust.** Objects are sealed (see `cache/sign.rs`): HMAC-SHA256 with
//! `CASCADE_CACHE_SECRET` over the key and the entry. With a secret, entries
//! without a valid signature are ignored (a warning, and a miss). Writing
//! needs the secret, so every published entry is signed; the mode defaults
//! to read-write with one and read-only without. A reader without the secret
//! cannot verify and relies on the store's own access control (it says so,
//! once per run).
//!
//! **Failure.** Every request has a timeout; after [`TRIP_AFTER`]
//! consecutive failures the circuit opens for [`COOL_DOWN`] and lookups go
//! local-only at once. A store that cannot be used at all (a `file://` root
//! that is a file, a FIFO, or cannot be created) is no different: a
//! warning, and the gates run with the local cache. Uploads are create-only
//! (the first writer wins; an existing object is a no-op), run in the
//! background, and are awaited at exit only up to a short bound
//! ([`RemoteCache::flush`]). One exception: a writer with the secret that
//! finds the existing object wrongly signed replaces it, so an entry
//! planted by someone without the secret cannot block its key for good.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::sign;

#[cfg(feature = "remote")]
mod backend;

/// Per-request timeout unless configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the end of a run waits for uploads unless configured.
pub const DEFAULT_FLUSH: Duration = Duration::from_secs(10);
/// Consecutive failures that open the circuit.
pub const TRIP_AFTER: u32 = 3;
/// How long an open circuit keeps the remote out.
pub const COOL_DOWN: Duration = Duration::from_secs(60);

/// Which directions the remote is used in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteMode {
    /// Lookups only (laptops).
    Read,
    /// Publishing only (a CI job that should not trust anything).
    Write,
    /// Both (CI with the secret).
    ReadWrite,
}

impl RemoteMode {
    pub fn reads(self) -> bool {
        matches!(self, RemoteMode::Read | RemoteMode::ReadWrite)
    }
    pub fn writes(self) -> bool {
        matches!(self, RemoteMode::Write | RemoteMode::ReadWrite)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            RemoteMode::Read => "read",
            RemoteMode::Write => "write",
            RemoteMode::ReadWrite => "read-write",
        }
    }
    /// `read`, `write`, `read-write` (also `readwrite`, `rw`).
    pub fn parse(s: &str) -> Option<RemoteMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "read" | "r" | "read-only" => Some(RemoteMode::Read),
            "write" | "w" | "write-only" => Some(RemoteMode::Write),
            "read-write" | "readwrite" | "rw" => Some(RemoteMode::ReadWrite),
            _ => None,
        }
    }
}

/// `remote_cache` in `.cascade/gates.json`: a URL, or an object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RemoteConfig {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub mode: Option<String>,
    /// Per-request timeout.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Bound on waiting for uploads at the end of a run.
    #[serde(default)]
    pub flush_ms: Option<u64>,
}

/// What the command line asked for (flags win over everything).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteRequest {
    pub url: Option<String>,
    pub mode: Option<RemoteMode>,
}

/// A remote configuration that cannot be used (exit 2 in the binary).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteError {
    #[error("invalid remote cache URL '{url}': {message}")]
    InvalidUrl { url: String, message: String },
    #[error("remote cache URL '{url}': {message}")]
    Unsupported { url: String, message: String },
    #[error("invalid remote cache mode '{mode}' (from {origin}): use read, write or read-write")]
    InvalidMode { mode: String, origin: String },
    #[error("remote cache mode '{mode}' publishes entries, which must be signed: set CASCADE_CACHE_SECRET (the same secret on every machine), or use --remote-cache-mode read")]
    NeedsSecret { mode: &'static str },
    #[error("remote cache '{url}': {message}")]
    Backend { url: String, message: String },
}

/// Everything needed to talk to the remote.
#[derive(Clone)]
pub struct RemoteSettings {
    pub url: String,
    pub mode: RemoteMode,
    secret: Option<Vec<u8>>,
    pub timeout: Duration,
    pub flush: Duration,
    /// `--remote-cache`, `CASCADE_REMOTE_CACHE` or `gates.json`.
    pub source: &'static str,
}

impl std::fmt::Debug for RemoteSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSettings")
            .field("url", &self.url)
            .field("mode", &self.mode)
            .field("secret", &self.secret.as_ref().map(|_| "<set>"))
            .field("timeout", &self.timeout)
            .field("flush", &self.flush)
            .finish()
    }
}

fn is_off(s: &str) -> bool {
    matches!(s.trim(), "" | "off" | "none" | "false" | "0")
}

impl RemoteSettings {
    /// Resolves from the flags, the process environment and the config.
    pub fn resolve(
        req: &RemoteRequest,
        config: Option<&RemoteConfig>,
    ) -> Result<Option<RemoteSettings>, RemoteError> {
        Self::resolve_with(req, config, |k| std::env::var(k).ok())
    }

    /// [`RemoteSettings::resolve`] with another environment (tests).
    pub fn resolve_with(
        req: &RemoteRequest,
        config: Option<&RemoteConfig>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<RemoteSettings>, RemoteError> {
        let (url, source) = if let Some(u) = &req.url {
            (u.clone(), "--remote-cache")
        } else if let Some(u) = env("CASCADE_REMOTE_CACHE") {
            (u, "CASCADE_REMOTE_CACHE")
        } else if let Some(u) = config.and_then(|c| c.url.clone()) {
            (u, "gates.json remote_cache")
        } else {
            return Ok(None);
        };
        if is_off(&url) {
            return Ok(None);
        }
        let secret = env("CASCADE_CACHE_SECRET")
            .filter(|s| !s.is_empty())
            .map(String::into_bytes);
        let mode = match (
            req.mode,
            env("CASCADE_REMOTE_CACHE_MODE"),
            config.and_then(|c| c.mode.clone()),
        ) {
            (Some(m), _, _) => m,
            (None, Some(m), _) if !m.trim().is_empty() => {
                RemoteMode::parse(&m).ok_or(RemoteError::InvalidMode {
                    mode: m,
                    origin: "CASCADE_REMOTE_CACHE_MODE".into(),
                })?
            }
            (None, _, Some(m)) => RemoteMode::parse(&m).ok_or(RemoteError::InvalidMode {
                mode: m,
                origin: "gates.json remote_cache.mode".into(),
            })?,
            _ if secret.is_some() => RemoteMode::ReadWrite,
            _ => RemoteMode::Read,
        };
        if mode.writes() && secret.is_none() {
            return Err(RemoteError::NeedsSecret {
                mode: mode.as_str(),
            });
        }
        let ms = |v: Option<u64>, d: Duration| v.map(Duration::from_millis).unwrap_or(d);
        Ok(Some(RemoteSettings {
            url: url.trim().to_string(),
            mode,
            secret,
            timeout: ms(config.and_then(|c| c.timeout_ms), DEFAULT_TIMEOUT),
            flush: ms(config.and_then(|c| c.flush_ms), DEFAULT_FLUSH),
            source,
        }))
    }

    /// Whether entries are verified (a secret is set).
    pub fn verifies(&self) -> bool {
        self.secret.is_some()
    }

    /// Replaces the timeouts (tests, benches).
    pub fn with_timeouts(mut self, request: Duration, flush: Duration) -> Self {
        self.timeout = request;
        self.flush = flush;
        self
    }
}

/// A boxed future, for the object-safe backend trait.
pub(crate) type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a create-only put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) enum PutOutcome {
    Created,
    /// Another writer was first: a no-op.
    AlreadyExists,
}

/// The storage a [`RemoteCache`] talks to. Errors are messages: every one
/// of them means the same to the cache (count it, warn, go local-only).
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// The object at `path`, `None` when there is none.
    fn get(&self, path: String) -> BoxFut<Result<Option<Vec<u8>>, String>>;
    /// Creates the object unless it exists.
    fn put_create(&self, path: String, bytes: Vec<u8>) -> BoxFut<Result<PutOutcome, String>>;
    /// Writes the object, replacing what is there (a wrongly signed entry).
    fn put_replace(&self, path: String, bytes: Vec<u8>) -> BoxFut<Result<(), String>>;
}

/// The backend of a store that cannot be used at all: every request fails
/// with why, which the cache turns into warnings and local-only lookups.
#[derive(Debug)]
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) struct Unusable(pub String);

impl Backend for Unusable {
    fn get(&self, _: String) -> BoxFut<Result<Option<Vec<u8>>, String>> {
        let why = self.0.clone();
        Box::pin(async move { Err(why) })
    }
    fn put_create(&self, _: String, _: Vec<u8>) -> BoxFut<Result<PutOutcome, String>> {
        let why = self.0.clone();
        Box::pin(async move { Err(why) })
    }
    fn put_replace(&self, _: String, _: Vec<u8>) -> BoxFut<Result<(), String>> {
        let why = self.0.clone();
        Box::pin(async move { Err(why) })
    }
}

/// How a remote lookup went, for `gates cache explain`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteNote {
    /// Whether a request was made.
    pub consulted: bool,
    /// `hit`, `not_found`, `rejected`, `error`, `timeout`, `circuit_open`,
    /// `write_only`, `not_configured`, `unavailable`.
    pub outcome: String,
    /// The URL (without any user info), when one is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// For humans.
    pub detail: String,
}

impl RemoteNote {
    pub(crate) fn not_configured() -> RemoteNote {
        RemoteNote {
            consulted: false,
            outcome: "not_configured".into(),
            url: None,
            detail: "no remote cache configured (--remote-cache, CASCADE_REMOTE_CACHE or remote_cache in .cascade/gates.json)".into(),
        }
    }
}

/// The result of [`RemoteCache::fetch`].
#[derive(Debug)]
pub(crate) enum Fetched {
    /// The verified entry's JSON bytes, and the object's size.
    Hit(Vec<u8>, u64),
    Miss(RemoteNote),
}

/// What the uploads did, as reported by [`RemoteCache::flush`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FlushReport {
    pub uploaded: u64,
    /// Create-only puts that found the entry already there (no-ops).
    pub already_present: u64,
    pub failed: u64,
    /// Still running when the flush bound ran out (given up).
    pub abandoned: u64,
    pub bytes_uploaded: u64,
}

/// Opens for [`COOL_DOWN`] after [`TRIP_AFTER`] consecutive failures; then
/// lets requests try again (one more failure re-opens it at once).
#[derive(Debug, Default)]
struct Breaker {
    failures: AtomicU32,
    open_until: Mutex<Option<Instant>>,
}

impl Breaker {
    fn is_open(&self) -> bool {
        let g = self.open_until.lock().unwrap_or_else(|p| p.into_inner());
        g.is_some_and(|t| Instant::now() < t)
    }
    fn success(&self) {
        self.failures.store(0, Ordering::Relaxed);
        *self.open_until.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
    /// Returns true when this failure opened the circuit.
    fn failure(&self) -> bool {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < TRIP_AFTER {
            return false;
        }
        let mut g = self.open_until.lock().unwrap_or_else(|p| p.into_inner());
        let was_open = g.is_some_and(|t| Instant::now() < t);
        *g = Some(Instant::now() + COOL_DOWN);
        !was_open
    }
}

#[derive(Debug, Default)]
struct Counters {
    uploaded: AtomicU64,
    already_present: AtomicU64,
    upload_failed: AtomicU64,
    bytes_uploaded: AtomicU64,
}

/// The remote tier. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct RemoteCache {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: RemoteSettings,
    /// The URL as shown (no user info).
    shown_url: String,
    backend: Arc<dyn Backend>,
    /// Object names are `<prefix>v1/<key[..2]>/<key>`.
    prefix: String,
    breaker: Breaker,
    counters: Counters,
    uploads: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    warnings: Mutex<Vec<String>>,
    warned: Mutex<HashSet<String>>,
    /// `stats.log` of the local cache, for upload lines.
    stats_log: Mutex<Option<std::path::PathBuf>>,
}

impl RemoteCache {
    /// Connects to the store of `settings`. A URL this build cannot use is
    /// an error; so is a backend whose configuration is incomplete. A store
    /// that is configured right but cannot be used (an unusable `file://`
    /// root) is a warning: lookups miss and the gates run.
    pub fn connect(settings: RemoteSettings) -> Result<RemoteCache, RemoteError> {
        #[cfg(feature = "remote")]
        {
            Ok(match backend::open(&settings)? {
                backend::Opened::Store(backend, prefix) => {
                    Self::with_backend(settings, backend, prefix)
                }
                backend::Opened::Unusable(why) => {
                    let cache = Self::with_backend(
                        settings,
                        Arc::new(Unusable(why.clone())),
                        String::new(),
                    );
                    cache.push_warning(format!(
                        "remote gate cache {} cannot be used ({why}); the gates run with the local cache only",
                        cache.inner.shown_url
                    ));
                    cache
                }
            })
        }
        #[cfg(not(feature = "remote"))]
        {
            Err(RemoteError::Unsupported {
                url: settings.url,
                message: "this cascade was built without remote cache support (cargo feature `remote-cache`)".into(),
            })
        }
    }

    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn with_backend(
        settings: RemoteSettings,
        backend: Arc<dyn Backend>,
        prefix: String,
    ) -> RemoteCache {
        let shown_url = redact_url(&settings.url);
        let cache = RemoteCache {
            inner: Arc::new(Inner {
                settings,
                shown_url,
                backend,
                prefix,
                breaker: Breaker::default(),
                counters: Counters::default(),
                uploads: Mutex::new(Vec::new()),
                warnings: Mutex::new(Vec::new()),
                warned: Mutex::new(HashSet::new()),
                stats_log: Mutex::new(None),
            }),
        };
        if !cache.inner.settings.verifies() && cache.inner.settings.mode.reads() {
            cache.warn_once(
                "unverified",
                format!(
                    "CASCADE_CACHE_SECRET is not set: entries read from {} cannot be verified and are trusted on the store's access control alone",
                    cache.inner.shown_url
                ),
            );
        }
        cache
    }

    pub fn settings(&self) -> &RemoteSettings {
        &self.inner.settings
    }

    /// The URL without user info.
    pub fn url(&self) -> &str {
        &self.inner.shown_url
    }

    pub(crate) fn set_stats_log(&self, path: std::path::PathBuf) {
        *self
            .inner
            .stats_log
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(path);
    }

    fn object_path(&self, key: &str) -> String {
        let fan = key.get(..2).unwrap_or("xx");
        format!("{}v1/{fan}/{key}", self.inner.prefix)
    }

    fn note(&self, consulted: bool, outcome: &str, detail: String) -> RemoteNote {
        RemoteNote {
            consulted,
            outcome: outcome.into(),
            url: Some(self.inner.shown_url.clone()),
            detail,
        }
    }

    /// Looks `key` up. Never waits longer than the request timeout.
    pub(crate) async fn fetch(&self, key: &str) -> Fetched {
        let s = &self.inner.settings;
        if !s.mode.reads() {
            return Fetched::Miss(self.note(
                false,
                "write_only",
                "the remote cache is write-only here (--remote-cache-mode write)".into(),
            ));
        }
        if self.inner.breaker.is_open() {
            return Fetched::Miss(self.note(
                false,
                "circuit_open",
                format!(
                    "the remote was skipped: {TRIP_AFTER} requests in a row failed (it is tried again after {}s)",
                    COOL_DOWN.as_secs()
                ),
            ));
        }
        let req = self.inner.backend.get(self.object_path(key));
        let got = match tokio::time::timeout(s.timeout, req).await {
            Err(_) => {
                let why = format!("no answer within {}ms", s.timeout.as_millis());
                self.failed(&why);
                return Fetched::Miss(self.note(true, "timeout", why));
            }
            Ok(Err(e)) => {
                self.failed(&e);
                return Fetched::Miss(self.note(true, "error", e));
            }
            Ok(Ok(got)) => got,
        };
        self.inner.breaker.success();
        let Some(object) = got else {
            return Fetched::Miss(self.note(
                true,
                "not_found",
                "the remote has no entry for this key (no machine published this tree, command and toolchain yet)".into(),
            ));
        };
        let size = object.len() as u64;
        match sign::open(s.secret.as_deref(), key, &object) {
            Ok(entry) => Fetched::Hit(entry.to_vec(), size),
            Err(why) => {
                let msg = format!(
                    "ignored the remote entry {key} from {}: {why} (was it written with another CASCADE_CACHE_SECRET?)",
                    self.inner.shown_url
                );
                self.push_warning(msg.clone());
                Fetched::Miss(self.note(true, "rejected", msg))
            }
        }
    }

    fn failed(&self, why: &str) {
        if self.inner.breaker.failure() {
            self.push_warning(format!(
                "remote gate cache {} is not answering ({why}); {TRIP_AFTER} failures in a row: going local-only for {}s",
                self.inner.shown_url,
                COOL_DOWN.as_secs()
            ));
        } else {
            self.warn_once(
                "request-failed",
                format!(
                    "remote gate cache {}: {why}; continuing with the local cache",
                    self.inner.shown_url
                ),
            );
        }
    }

    /// Publishes `entry` (JSON bytes) under `key` in the background when the
    /// mode writes. Create-only: an existing object is left as it is.
    pub(crate) fn publish(&self, key: &str, entry: &[u8]) {
        let s = &self.inner.settings;
        if !s.mode.writes() || self.inner.breaker.is_open() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let object = sign::seal(s.secret.as_deref(), key, entry);
        let (path, me, key) = (self.object_path(key), self.clone(), key.to_string());
        let task = handle.spawn(async move {
            let n = object.len() as u64;
            let put = me.inner.backend.put_create(path.clone(), object.clone());
            let timeout = me.inner.settings.timeout;
            let c = &me.inner.counters;
            let outcome = match tokio::time::timeout(timeout, put).await {
                Ok(Ok(PutOutcome::AlreadyExists)) => {
                    match tokio::time::timeout(timeout, me.replace_forgery(&key, path, object))
                        .await
                    {
                        Ok(Ok(true)) => Ok(PutOutcome::Created),
                        Ok(Ok(false)) => Ok(PutOutcome::AlreadyExists),
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(format!("no answer within {}ms", timeout.as_millis())),
                    }
                }
                Ok(other) => other,
                Err(_) => Err(format!("no answer within {}ms", timeout.as_millis())),
            };
            match outcome {
                Ok(outcome) => {
                    me.inner.breaker.success();
                    if outcome == PutOutcome::Created {
                        c.uploaded.fetch_add(1, Ordering::Relaxed);
                        c.bytes_uploaded.fetch_add(n, Ordering::Relaxed);
                        me.append_stat(&format!("u {n}\n"));
                    } else {
                        c.already_present.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => {
                    c.upload_failed.fetch_add(1, Ordering::Relaxed);
                    me.failed(&format!("upload failed: {e}"));
                }
            }
        });
        let mut uploads = self.inner.uploads.lock().unwrap_or_else(|p| p.into_inner());
        uploads.retain(|h| !h.is_finished());
        uploads.push(task);
    }

    /// After a create-only put found `key` taken: with the secret, the
    /// object there is checked, and one that is not validly signed (planted,
    /// or written with another secret) is replaced by `object`. `Ok(true)`
    /// when it was replaced. Without the secret nothing can be checked.
    async fn replace_forgery(
        &self,
        key: &str,
        path: String,
        object: Vec<u8>,
    ) -> Result<bool, String> {
        let Some(secret) = self.inner.settings.secret.as_deref() else {
            return Ok(false);
        };
        let Some(there) = self.inner.backend.get(path.clone()).await? else {
            return Ok(false);
        };
        let Err(why) = sign::open(Some(secret), key, &there) else {
            return Ok(false);
        };
        self.inner.backend.put_replace(path, object).await?;
        self.push_warning(format!(
            "replaced the remote entry {key} on {}: {why} (written without this CASCADE_CACHE_SECRET)",
            self.inner.shown_url
        ));
        Ok(true)
    }

    fn append_stat(&self, line: &str) {
        let path = self
            .inner
            .stats_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(path) = path {
            super::append_line(&path, line);
        }
    }

    /// Waits for the uploads still running, at most `bound` (the configured
    /// flush bound when `None`); gives up on the rest.
    pub async fn flush(&self, bound: Option<Duration>) -> FlushReport {
        let bound = bound.unwrap_or(self.inner.settings.flush);
        let handles: Vec<_> =
            std::mem::take(&mut *self.inner.uploads.lock().unwrap_or_else(|p| p.into_inner()));
        let deadline = tokio::time::Instant::now() + bound;
        let mut abandoned = 0;
        for mut h in handles {
            if tokio::time::timeout_at(deadline, &mut h).await.is_err() {
                h.abort();
                abandoned += 1;
            }
        }
        if abandoned > 0 {
            self.push_warning(format!(
                "gave up on {abandoned} upload(s) to {} after waiting {}ms at exit",
                self.inner.shown_url,
                bound.as_millis()
            ));
        }
        let c = &self.inner.counters;
        FlushReport {
            uploaded: c.uploaded.load(Ordering::Relaxed),
            already_present: c.already_present.load(Ordering::Relaxed),
            failed: c.upload_failed.load(Ordering::Relaxed),
            abandoned,
            bytes_uploaded: c.bytes_uploaded.load(Ordering::Relaxed),
        }
    }

    fn push_warning(&self, msg: String) {
        self.inner
            .warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(msg);
    }

    fn warn_once(&self, what: &str, msg: String) {
        let first = self
            .inner
            .warned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(what.to_string());
        if first {
            self.push_warning(msg);
        }
    }

    /// Warnings since the last call, for the runner to turn into events.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .inner
                .warnings
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }
}

/// `scheme://user:pass@host/p` -> `scheme://host/p`.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://{host}{path}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests;
