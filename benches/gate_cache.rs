//! Gate cache speed: a full cache hit (fingerprint + lookup, through the
//! runner) against running a trivial gate, on a generated 20,000-file
//! repository; and a cache holding 10,000 entries (open + lookup, stats,
//! loading every entry).
//!
//! `cargo bench --bench gate_cache -- --quick`. `CASCADE_BENCH_FILES` changes the tree size.

use std::process::Command;
use std::time::Duration;

use cascade_gates::{run_gates, GateCache, GateResult, GateSet, KeyParts, RunOptions};
use cascade_process::CancelToken;
use criterion::{criterion_group, criterion_main, Criterion};

#[path = "support/mod.rs"]
mod support;
use support::{files, generate};

fn result(name: &str) -> GateResult {
    GateResult {
        name: name.into(),
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
    }
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let n = files();
    let repo = generate(tmp.path(), n);
    let cascade_dir = tmp.path().join("cascade");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cfg =
        serde_json::json!({"gates": [{"name": "trivial", "type": "test", "command": "true"}]});
    let set = GateSet::resolve(Some(&cfg), &cascade_dir, &repo).unwrap();
    let cache = GateCache::open(&cascade_dir);
    let opts = RunOptions {
        workdir: repo.clone(),
        use_cache: true,
        ..RunOptions::default()
    };
    let first = rt.block_on(run_gates(&set, &opts, &cache, |_| {}, &CancelToken::new()));
    assert!(first.passed);

    let mut g = c.benchmark_group(format!("gate_{n}_files"));
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.bench_function("cache_hit_fingerprint_and_lookup", |b| {
        b.iter(|| {
            let r = rt.block_on(run_gates(&set, &opts, &cache, |_| {}, &CancelToken::new()));
            assert!(r.gates[0].cached);
        })
    });
    let no_cache = RunOptions {
        use_cache: false,
        ..opts.clone()
    };
    g.bench_function("run_trivial_gate_true", |b| {
        b.iter(|| {
            let r = rt.block_on(run_gates(
                &set,
                &no_cache,
                &cache,
                |_| {},
                &CancelToken::new(),
            ));
            assert!(!r.gates[0].cached && r.passed);
        })
    });
    g.bench_function("git_status_porcelain", |b| {
        b.iter(|| {
            Command::new("git")
                .args(["status", "--porcelain"])
                .current_dir(&repo)
                .output()
                .unwrap()
        })
    });
    g.finish();

    // A cache with 10,000 entries.
    let big_dir = tmp.path().join("big");
    let big =
        GateCache::open(&big_dir).with_limits(20_000, cascade_gates::cache::DEFAULT_MAX_AGE, None);
    let mut keys = Vec::new();
    for i in 0..10_000 {
        let parts = KeyParts {
            fingerprint: format!("{i:064x}"),
            gate: "tests".into(),
            command: "cargo".into(),
            args: vec!["test".into()],
            working_dir: ".".into(),
            env: Default::default(),
            inputs: vec![],
            toolchain: String::new(),
        };
        big.store(&parts, &result("tests"));
        keys.push(parts.key());
    }
    let mut g = c.benchmark_group("cache_10000_entries");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("open_and_lookup_one", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 7919) % keys.len();
            let c = GateCache::open(&big_dir);
            assert!(c.get(&keys[i]).is_some());
        })
    });
    g.bench_function("stats", |b| {
        b.iter(|| assert_eq!(GateCache::open(&big_dir).stats().entries, 10_000))
    });
    g.bench_function("load_all", |b| {
        b.iter(|| assert_eq!(GateCache::open(&big_dir).load_all(), 10_000))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
