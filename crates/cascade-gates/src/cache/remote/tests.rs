//! Remote tier tests over in-process backends: settings resolution,
//! create-only publishing, read-only mode, trust, timeouts and the breaker.

use super::*;
use dashmap::DashMap;

/// A store in memory that counts requests.
#[derive(Debug, Default)]
struct Mem {
    objects: DashMap<String, Vec<u8>>,
    gets: AtomicU64,
    puts: AtomicU64,
}

#[derive(Debug)]
struct Shared(Arc<Mem>);

impl Backend for Shared {
    fn get(&self, path: String) -> BoxFut<Result<Option<Vec<u8>>, String>> {
        self.0.gets.fetch_add(1, Ordering::Relaxed);
        let got = self.0.objects.get(&path).map(|v| v.clone());
        Box::pin(async move { Ok(got) })
    }
    fn put_create(&self, path: String, bytes: Vec<u8>) -> BoxFut<Result<PutOutcome, String>> {
        self.0.puts.fetch_add(1, Ordering::Relaxed);
        let outcome = match self.0.objects.entry(path) {
            dashmap::Entry::Occupied(_) => PutOutcome::AlreadyExists,
            dashmap::Entry::Vacant(v) => {
                v.insert(bytes);
                PutOutcome::Created
            }
        };
        Box::pin(async move { Ok(outcome) })
    }
    fn put_replace(&self, path: String, bytes: Vec<u8>) -> BoxFut<Result<(), String>> {
        self.0.puts.fetch_add(1, Ordering::Relaxed);
        self.0.objects.insert(path, bytes);
        Box::pin(async move { Ok(()) })
    }
}

/// A store that accepts requests and never answers.
#[derive(Debug, Default)]
struct Hangs {
    requests: AtomicU64,
}

#[derive(Debug)]
struct SharedHangs(Arc<Hangs>);

impl Backend for SharedHangs {
    fn get(&self, _: String) -> BoxFut<Result<Option<Vec<u8>>, String>> {
        self.0.requests.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::pending())
    }
    fn put_create(&self, _: String, _: Vec<u8>) -> BoxFut<Result<PutOutcome, String>> {
        self.0.requests.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::pending())
    }
    fn put_replace(&self, _: String, _: Vec<u8>) -> BoxFut<Result<(), String>> {
        self.0.requests.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::pending())
    }
}

fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

fn settings(mode: RemoteMode, secret: Option<&str>) -> RemoteSettings {
    RemoteSettings {
        url: "memory:///".into(),
        mode,
        secret: secret.map(|s| s.as_bytes().to_vec()),
        timeout: Duration::from_millis(200),
        flush: Duration::from_secs(5),
        source: "test",
    }
}

#[test]
fn settings_resolve_in_order_with_safe_defaults() {
    let req = RemoteRequest::default();
    let cfg = RemoteConfig {
        url: Some("file:///from/config".into()),
        timeout_ms: Some(250),
        ..Default::default()
    };
    // Nothing anywhere: no remote.
    assert!(RemoteSettings::resolve_with(&req, None, env(&[]))
        .unwrap()
        .is_none());
    // Config, then env, then flag.
    let s = RemoteSettings::resolve_with(&req, Some(&cfg), env(&[]))
        .unwrap()
        .unwrap();
    assert_eq!(
        (s.url.as_str(), s.mode),
        ("file:///from/config", RemoteMode::Read)
    );
    assert_eq!(s.timeout, Duration::from_millis(250));
    let e = [
        ("CASCADE_REMOTE_CACHE", "s3://b/p"),
        ("CASCADE_CACHE_SECRET", "k"),
    ];
    let s = RemoteSettings::resolve_with(&req, Some(&cfg), env(&e))
        .unwrap()
        .unwrap();
    assert_eq!(
        (s.url.as_str(), s.mode),
        ("s3://b/p", RemoteMode::ReadWrite)
    );
    assert!(s.verifies());
    assert!(
        !format!("{s:?}").contains("\"k\""),
        "the secret is never shown"
    );
    let flag = RemoteRequest {
        url: Some("file:///flag".into()),
        mode: Some(RemoteMode::Read),
    };
    let s = RemoteSettings::resolve_with(&flag, Some(&cfg), env(&e))
        .unwrap()
        .unwrap();
    assert_eq!((s.url.as_str(), s.mode), ("file:///flag", RemoteMode::Read));
    // `off` turns a configured remote off for one run.
    let off = [("CASCADE_REMOTE_CACHE", "off")];
    assert!(RemoteSettings::resolve_with(&req, Some(&cfg), env(&off))
        .unwrap()
        .is_none());
    // Publishing needs the secret; a bad mode says where it came from.
    let write = RemoteRequest {
        url: Some("file:///x".into()),
        mode: Some(RemoteMode::Write),
    };
    let err = RemoteSettings::resolve_with(&write, None, env(&[])).unwrap_err();
    assert!(err.to_string().contains("CASCADE_CACHE_SECRET"), "{err}");
    let bad = [("CASCADE_REMOTE_CACHE_MODE", "sideways")];
    let err = RemoteSettings::resolve_with(&flag_url_only(), None, env(&bad)).unwrap_err();
    assert!(
        err.to_string().contains("CASCADE_REMOTE_CACHE_MODE"),
        "{err}"
    );
}

fn flag_url_only() -> RemoteRequest {
    RemoteRequest {
        url: Some("file:///x".into()),
        mode: None,
    }
}

#[tokio::test]
async fn create_only_publishing_and_verified_reads() {
    let mem = Arc::new(Mem::default());
    let writer = RemoteCache::with_backend(
        settings(RemoteMode::ReadWrite, Some("s")),
        Arc::new(Shared(mem.clone())),
        "pre/".into(),
    );
    writer.publish("abcd", b"{\"first\":1}");
    writer.flush(None).await;
    writer.publish("abcd", b"{\"second\":2}");
    let report = writer.flush(None).await;
    assert_eq!((report.uploaded, report.already_present), (1, 1));
    assert!(mem.objects.contains_key("pre/v1/ab/abcd"));
    // The first writer won.
    match writer.fetch("abcd").await {
        Fetched::Hit(entry, _) => assert_eq!(entry, b"{\"first\":1}"),
        other => panic!("expected a hit, got {other:?}"),
    }
    // A reader with another secret ignores it, with a warning.
    let other = RemoteCache::with_backend(
        settings(RemoteMode::Read, Some("not-s")),
        Arc::new(Shared(mem.clone())),
        "pre/".into(),
    );
    match other.fetch("abcd").await {
        Fetched::Miss(n) => assert_eq!(n.outcome, "rejected"),
        other => panic!("expected a miss, got {other:?}"),
    }
    assert!(other
        .take_warnings()
        .iter()
        .any(|w| w.contains("wrongly signed")));
    match other.fetch("ffff").await {
        Fetched::Miss(n) => assert_eq!((n.consulted, n.outcome.as_str()), (true, "not_found")),
        other => panic!("expected a miss, got {other:?}"),
    }
}

#[tokio::test]
async fn a_writer_with_the_secret_replaces_a_forged_entry() {
    for mode in [RemoteMode::Write, RemoteMode::ReadWrite] {
        let mem = Arc::new(Mem::default());
        // Planted by someone without the secret (here: sealed with another one).
        let forger = RemoteCache::with_backend(
            settings(RemoteMode::Write, Some("forged")),
            Arc::new(Shared(mem.clone())),
            String::new(),
        );
        forger.publish("abcd", b"{\"passed\":true,\"forged\":1}");
        forger.flush(None).await;
        let writer = RemoteCache::with_backend(
            settings(mode, Some("s")),
            Arc::new(Shared(mem.clone())),
            String::new(),
        );
        if mode.reads() {
            match writer.fetch("abcd").await {
                Fetched::Miss(n) => assert_eq!(n.outcome, "rejected"),
                other => panic!("expected a miss, got {other:?}"),
            }
        }
        writer.publish("abcd", b"{\"real\":1}");
        let report = writer.flush(None).await;
        assert_eq!(
            (report.uploaded, report.already_present),
            (1, 0),
            "{mode:?}: {report:?}"
        );
        let warnings = writer.take_warnings();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("replaced the remote entry abcd")),
            "{warnings:?}"
        );
        // Now validly signed: a reader with the secret hits.
        let reader = RemoteCache::with_backend(
            settings(RemoteMode::Read, Some("s")),
            Arc::new(Shared(mem.clone())),
            String::new(),
        );
        match reader.fetch("abcd").await {
            Fetched::Hit(entry, _) => assert_eq!(entry, b"{\"real\":1}"),
            other => panic!("{mode:?}: expected a hit, got {other:?}"),
        }
        // A valid entry is never replaced.
        writer.publish("abcd", b"{\"again\":1}");
        let report = writer.flush(None).await;
        assert_eq!(report.already_present, 1, "{report:?}");
    }
}

#[tokio::test]
async fn an_unusable_store_fails_lookups_with_warnings_never_an_error() {
    let cache = RemoteCache::with_backend(
        settings(RemoteMode::ReadWrite, Some("s")),
        Arc::new(Unusable(
            "cannot create the directory '/x': File exists".into(),
        )),
        String::new(),
    );
    match cache.fetch("abcd").await {
        Fetched::Miss(n) => assert_eq!(n.outcome, "error"),
        other => panic!("expected a miss, got {other:?}"),
    }
    cache.publish("abcd", b"{}");
    let report = cache.flush(None).await;
    assert_eq!(report.failed, 1);
    assert!(cache
        .take_warnings()
        .iter()
        .any(|w| w.contains("File exists")));
}

#[tokio::test]
async fn read_only_never_writes_and_write_only_never_reads() {
    let mem = Arc::new(Mem::default());
    let reader = RemoteCache::with_backend(
        settings(RemoteMode::Read, Some("s")),
        Arc::new(Shared(mem.clone())),
        String::new(),
    );
    reader.publish("abcd", b"{}");
    let report = reader.flush(None).await;
    assert_eq!(report, FlushReport::default());
    assert_eq!(mem.puts.load(Ordering::Relaxed), 0);
    assert!(mem.objects.is_empty());

    let writer = RemoteCache::with_backend(
        settings(RemoteMode::Write, Some("s")),
        Arc::new(Shared(mem.clone())),
        String::new(),
    );
    match writer.fetch("abcd").await {
        Fetched::Miss(n) => assert_eq!((n.consulted, n.outcome.as_str()), (false, "write_only")),
        other => panic!("expected a miss, got {other:?}"),
    }
    assert_eq!(mem.gets.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_hanging_remote_costs_the_timeout_then_the_circuit_opens() {
    let hangs = Arc::new(Hangs::default());
    let remote = RemoteCache::with_backend(
        settings(RemoteMode::ReadWrite, Some("s")),
        Arc::new(SharedHangs(hangs.clone())),
        String::new(),
    );
    for _ in 0..TRIP_AFTER {
        match remote.fetch("abcd").await {
            Fetched::Miss(n) => assert_eq!(n.outcome, "timeout"),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
    let warnings = remote.take_warnings();
    assert!(
        warnings.iter().any(|w| w.contains("going local-only")),
        "{warnings:?}"
    );
    // Open: no request at all, and no upload either.
    let before = hangs.requests.load(Ordering::Relaxed);
    match remote.fetch("abcd").await {
        Fetched::Miss(n) => assert_eq!((n.consulted, n.outcome.as_str()), (false, "circuit_open")),
        other => panic!("expected a skip, got {other:?}"),
    }
    remote.publish("abcd", b"{}");
    assert_eq!(hangs.requests.load(Ordering::Relaxed), before);
}

#[tokio::test]
async fn uploads_to_a_hanging_remote_are_abandoned_at_the_flush_bound() {
    let hangs = Arc::new(Hangs::default());
    let remote = RemoteCache::with_backend(
        settings(RemoteMode::ReadWrite, Some("s"))
            .with_timeouts(Duration::from_secs(3600), Duration::from_secs(5)),
        Arc::new(SharedHangs(hangs.clone())),
        String::new(),
    );
    remote.publish("abcd", b"{}");
    let report = remote.flush(Some(Duration::from_millis(100))).await;
    assert_eq!(report.abandoned, 1);
    assert!(remote
        .take_warnings()
        .iter()
        .any(|w| w.contains("gave up on 1 upload")));
}

#[test]
fn urls_are_shown_without_user_info() {
    assert_eq!(redact_url("https://u:p@host/x/y"), "https://host/x/y");
    assert_eq!(redact_url("s3://bucket/prefix"), "s3://bucket/prefix");
    assert_eq!(redact_url("file:///a/b"), "file:///a/b");
}
