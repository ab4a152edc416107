//! Gate cache speed on a generated 20,000-file repository:
//! - `gate_<n>_files`: a full cache hit in process (fingerprint + lookup,
//!   through the runner) against running a trivial gate;
//! - `gate_<n>_files_process`: the whole `cascade gates run` process
//!   answering from the cache (the figure users see) against `git status
//!   --porcelain` on the same tree, for a trivial gate and for a Rust-style
//!   gate whose key carries the `rustc -vV` toolchain identity; plus, on
//!   stderr, the median ratio of paired runs (alternated, so both see the
//!   same machine load);
//! - `cache_10000_entries`: a cache holding 10,000 entries (open + lookup,
//!   stats, loading every entry).
//!
//! `cargo bench --bench gate_cache -- --quick`. `CASCADE_BENCH_FILES` changes the tree size.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cascade_gates::{run_gates, GateCache, GateResult, GateSet, KeyParts, RunOptions};
use cascade_process::CancelToken;
use criterion::{criterion_group, Criterion};

#[macro_use]
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
        census: None,
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
    whole_process(c, &repo, n);

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

/// `cascade gates run` in `repo`, which must pass (from the cache).
fn cascade_gates_run(repo: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_cascade"))
        .args(["gates", "run"])
        .current_dir(repo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("cached:"),
        "not a hit: {out:?}"
    );
}

fn git_status(repo: &Path) {
    let out = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(repo)
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success());
}

/// Median wall-time ratio of `a` over `b` over alternated pairs.
fn paired_ratio(pairs: usize, a: impl Fn(), b: impl Fn()) -> (f64, f64, f64) {
    let mut ratios: Vec<f64> = (0..pairs)
        .map(|_| {
            let t = Instant::now();
            a();
            let ta = t.elapsed();
            let t = Instant::now();
            b();
            ta.as_secs_f64() / t.elapsed().as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    (ratios[pairs / 2], ratios[0], ratios[pairs - 1])
}

/// The whole process, as users run it, against `git status --porcelain`.
fn whole_process(c: &mut Criterion, repo: &Path, n: usize) {
    let gates = |cfg: serde_json::Value| {
        std::fs::create_dir_all(repo.join(".cascade")).unwrap();
        std::fs::write(repo.join(".cascade/gates.json"), cfg.to_string()).unwrap();
        // First run stores (and adds .cascade/ to info/exclude, so git
        // status is clean too), the second builds on a settled tree.
        let _ = Command::new(env!("CARGO_BIN_EXE_cascade"))
            .args(["gates", "run"])
            .current_dir(repo)
            .output();
        std::thread::sleep(Duration::from_millis(50));
        cascade_gates_run(repo);
    };
    let mut g = c.benchmark_group(format!("gate_{n}_files_process"));
    g.sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for (name, cfg) in [
        (
            "trivial_gate",
            serde_json::json!({"gates": [{"name": "trivial", "type": "test", "command": "true"}]}),
        ),
        (
            "rust_gate",
            serde_json::json!({"gates": [{"name": "check", "type": "lint", "command": "cargo", "args": ["--version"]}]}),
        ),
    ] {
        gates(cfg);
        let (median, min, max) = paired_ratio(31, || cascade_gates_run(repo), || git_status(repo));
        eprintln!(
            "paired [{name}]: cascade gates run (hit) / git status --porcelain = {median:.2} \
             median (min {min:.2}, max {max:.2}) over 31 alternated pairs"
        );
        g.bench_function(format!("cascade_gates_run_hit_{name}"), |b| {
            b.iter(|| cascade_gates_run(repo))
        });
    }
    g.bench_function("git_status_porcelain", |b| b.iter(|| git_status(repo)));
    g.finish();
}

criterion_group!(benches, bench);
bench_main!(benches);
