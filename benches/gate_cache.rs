//! Gate cache speed: a full cache hit (fingerprint + lookup, through the
//! runner) against running a trivial gate, on a generated 20,000-file
//! repository; and a cache holding 10,000 entries (open + lookup, stats,
//! loading every entry).
//!
//! `cargo bench --bench gate_cache -- --quick`. `CASCADE_BENCH_FILES` changes the tree size.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cascade_gates::{run_gates, GateCache, GateResult, GateSet, KeyParts, RunOptions};
use cascade_process::CancelToken;
use criterion::{criterion_group, criterion_main, Criterion};

/// Runs git in the generated repository. Automatic gc/maintenance is off:
/// committing 20,000 loose objects otherwise starts a detached
/// `git maintenance run --auto` (gc, repack) that competes for the CPU with
/// the first benchmarks for several seconds and inflated their figures.
fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@b")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@b")
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "git {args:?} failed");
}

fn generate(root: &Path, n: usize) -> PathBuf {
    let repo = root.join("repo");
    for i in 0..n {
        let dir = repo.join(format!("pkg{:03}/src", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(
            dir.join(format!("m{i}.rs")),
            format!("pub fn f{i}() {{}}\n{}", "x".repeat(i % 300)),
        )
        .unwrap();
    }
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "gen"]);
    std::thread::sleep(Duration::from_millis(20));
    git(&repo, &["status", "--porcelain"]);
    repo
}

fn result(name: &str) -> GateResult {
    GateResult {
        name: name.into(),
        passed: true,
        required: true,
        cached: false,
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
    let n: usize = std::env::var("CASCADE_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
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
