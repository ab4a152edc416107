//! Local verification speed: the rules over a 5,000-line change (Rust,
//! Python, TypeScript and Go files, a few stubs among ordinary code), in
//! memory and from a real commit range (git diff + both texts + scan), next
//! to the cost of running one trivial gate (`true`, uncached) through the
//! gate runner: what the verify step adds to an attempt against the
//! cheapest possible gate.
//!
//! `cargo bench --bench verify -- --quick`.

use std::time::Duration;

use cascade_gates::{run_gates, GateCache, GateSet, RunOptions};
use cascade_git::diff::{FileDiff, FileStatus};
use cascade_process::CancelToken;
use cascade_verify::{scan, verify_repo, Intent, RuleSet};
use criterion::{criterion_group, Criterion};

#[macro_use]
#[path = "support/mod.rs"]
mod support;

use support::git;

/// Lines of the change.
const LINES: usize = 5_000;
/// Files it spreads over (a quarter per language).
const FILES: usize = 40;

/// One file's text: functions of ordinary code, with a stub every 25th.
fn source(ext: &str, lines: usize, seed: usize) -> String {
    let mut out = String::new();
    let mut i = 0;
    while out.lines().count() + 5 <= lines {
        let stub = (seed + i) % 25 == 0;
        let body = match (ext, stub) {
            ("rs", false) => format!("pub fn f{i}(xs: &[u32]) -> u32 {{\n    // sum the items (\"todo!()\" is only text here)\n    let s: u32 = xs.iter().sum();\n    s + {i}\n}}\n"),
            ("rs", true) => format!("pub fn f{i}(xs: &[u32]) -> u32 {{\n    todo!()\n}}\n\n\n"),
            ("py", false) => format!("def f{i}(xs):\n    # sum the items\n    s = sum(xs)\n    return s + {i}\n\n"),
            ("py", true) => format!("def f{i}(xs):\n    pass\n\n\n\n"),
            ("ts", false) => format!("export function f{i}(xs: number[]): number {{\n  // sum the items\n  const s = xs.reduce((a, b) => a + b, 0);\n  return s + {i};\n}}\n"),
            ("ts", true) => format!("export function f{i}(xs: number[]): number {{\n  throw new Error(\"not implemented\");\n}}\n\n\n"),
            (_, false) => format!("func F{i}(xs []int) int {{\n\t// sum the items\n\ts := 0\n\tfor _, x := range xs {{ s += x }}\n\treturn s + {i}\n}}\n"),
            (_, true) => format!("func F{i}(xs []int) int {{\n\tpanic(\"not implemented\")\n}}\n\n\n"),
        };
        out.push_str(&body);
        i += 1;
    }
    // Exactly `lines` lines (blank ones pad the end).
    let mut all: Vec<&str> = out.lines().collect();
    all.resize(lines, "");
    all.join("\n") + "\n"
}

/// The change: FILES new files, LINES added lines in all.
fn change() -> Vec<(String, String)> {
    let exts = ["rs", "py", "ts", "go"];
    (0..FILES)
        .map(|n| {
            let ext = exts[n % exts.len()];
            (format!("src/m{n}.{ext}"), source(ext, LINES / FILES, n))
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let files = change();
    let diffs: Vec<FileDiff> = files
        .iter()
        .map(|(path, text)| FileDiff {
            path: path.clone(),
            old_path: None,
            status: FileStatus::Added,
            added: (1..=text.lines().count() as u32).collect(),
            removed: vec![],
            old_text: None,
            new_text: Some(text.clone()),
            link_target: None,
        })
        .collect();
    let lines: usize = diffs.iter().map(|d| d.added.len()).sum();
    assert_eq!(lines, LINES);
    let rules = RuleSet::builtin();
    let intent = Intent::default();
    let found = scan(&diffs, &rules, &intent);
    assert!(!found.is_empty(), "the stubs are found");

    // The same change as a commit of a real repository.
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "gc.auto", "0"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "base"]);
    for (path, text) in &files {
        std::fs::write(repo.join(path), text).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "change"]);
    let from_git = verify_repo(&repo, "HEAD~1", Some("HEAD"), &rules, &intent).unwrap();
    assert_eq!(from_git.findings.len(), found.len());

    // The cheapest gate there is, uncached, through the runner.
    let cascade_dir = tmp.path().join("cascade");
    let cfg =
        serde_json::json!({"gates": [{"name": "trivial", "type": "test", "command": "true"}]});
    let set = GateSet::resolve(Some(&cfg), &cascade_dir, &repo).unwrap();
    let cache = GateCache::open(&cascade_dir);
    let opts = RunOptions {
        workdir: repo.clone(),
        use_cache: false,
        ..RunOptions::default()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();

    let mut g = c.benchmark_group(format!("verify_{LINES}_lines"));
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("scan_in_memory", |b| {
        b.iter(|| scan(&diffs, &rules, &intent))
    });
    g.bench_function("diff_and_scan_commit_range", |b| {
        b.iter(|| verify_repo(&repo, "HEAD~1", Some("HEAD"), &rules, &intent).unwrap())
    });
    g.bench_function("trivial_gate_uncached", |b| {
        b.iter(|| {
            let r = rt.block_on(run_gates(&set, &opts, &cache, |_| {}, &CancelToken::new()));
            assert!(r.passed);
        })
    });
    g.bench_function("rules_load", |b| b.iter(RuleSet::builtin));
    g.bench_function("lex_only", |b| {
        b.iter(|| {
            diffs
                .iter()
                .map(|d| {
                    cascade_verify::lex::lex(
                        d.new_text.as_deref().unwrap_or(""),
                        cascade_verify::Language::Rust.syntax(),
                    )
                    .len()
                })
                .sum::<usize>()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
bench_main!(benches);
