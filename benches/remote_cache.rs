//! Remote gate cache speed: a lookup that hits the remote tier on the
//! local-directory backend (read the signed object, verify HMAC-SHA256,
//! parse, copy into the local cache) against a lookup that hits the local
//! cache on disk. Both go through `GateCache::lookup_through`, stats and
//! explain bookkeeping included; each iteration starts from a freshly opened
//! cache so nothing is served from memory, and the remote case first removes
//! the local copy its previous iteration made.
//!
//! `cargo bench --bench remote_cache -- --quick`.

use std::sync::Arc;

use cascade_gates::{
    GateCache, GateResult, KeyParts, RemoteCache, RemoteMode, RemoteRequest, RemoteSettings,
};
use criterion::{criterion_group, BatchSize, Criterion};

#[macro_use]
#[path = "support/mod.rs"]
mod support;

fn result() -> GateResult {
    GateResult {
        name: "tests".into(),
        passed: true,
        required: true,
        cached: false,
        cache: Default::default(),
        skipped: false,
        skip_reason: None,
        flaky: false,
        tool_missing: false,
        timed_out: false,
        duration_ms: 5000,
        original_duration_ms: None,
        command: "cargo test".into(),
        working_dir: ".".into(),
        outcome: Some("exit code 0".into()),
        errors: vec![],
        output_excerpt: "test result: ok. 120 passed; 0 failed".into(),
        census: None,
    }
}

fn remote(url: &str, mode: RemoteMode) -> RemoteCache {
    let req = RemoteRequest {
        url: Some(url.into()),
        mode: Some(mode),
    };
    let env = |k: &str| (k == "CASCADE_CACHE_SECRET").then(|| "bench-secret".to_string());
    let settings = RemoteSettings::resolve_with(&req, None, env)
        .expect("valid settings")
        .expect("a remote");
    RemoteCache::connect(settings).expect("file backend")
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    for i in 0..50 {
        std::fs::write(tree.join(format!("f{i}.rs")), format!("fn f{i}() {{}}\n")).unwrap();
    }
    let fp = Arc::new(cascade_git::fingerprint::fingerprint_dir(&tree, None).unwrap());
    let parts = KeyParts {
        fingerprint: fp.hex(),
        gate: "tests".into(),
        command: "cargo".into(),
        args: vec!["test".into()],
        working_dir: ".".into(),
        env: Default::default(),
        inputs: vec![],
        toolchain: "rustc 1.95.0\nhost: x86_64-unknown-linux-gnu".into(),
    };
    let url = format!("file://{}", tmp.path().join("remote").display());
    let rt = tokio::runtime::Runtime::new().unwrap();

    // Publish once (from a "CI" cache), and fill one local cache.
    let ci = GateCache::open(&tmp.path().join("ci"))
        .with_remote(Some(remote(&url, RemoteMode::ReadWrite)));
    rt.block_on(async {
        ci.store(&parts, &result());
        ci.flush_remote(None).await;
    });
    let local_dir = tmp.path().join("ci");
    let laptop = remote(&url, RemoteMode::Read);

    let mut g = c.benchmark_group("remote_cache");
    g.bench_function("local_hit", |b| {
        b.iter_batched(
            || GateCache::open(&local_dir),
            |cache| {
                let hit = rt.block_on(cache.lookup_through(&parts, fp.clone()));
                assert!(hit.is_some());
            },
            BatchSize::PerIteration,
        )
    });
    // The laptop's cache has looked this gate up before (its bookkeeping
    // files exist, as in the local case); only the entry itself is missing.
    let laptop_dir = tmp.path().join("laptop");
    let entry = laptop_dir
        .join("gate-cache/entries")
        .join(format!("{}.json", parts.key()));
    g.bench_function("remote_hit_file_backend", |b| {
        b.iter_batched(
            || {
                let _ = std::fs::remove_file(&entry);
                GateCache::open(&laptop_dir).with_remote(Some(laptop.clone()))
            },
            |cache| {
                let hit = rt.block_on(cache.lookup_through(&parts, fp.clone()));
                assert_eq!(
                    hit.map(|h| h.cache),
                    Some(cascade_gates::CacheSource::Remote)
                );
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
bench_main!(benches);
