//! Setup shared by the benchmarks that need a repository (`fingerprint`,
//! `gate_cache`: a generated, committed tree of `CASCADE_BENCH_FILES` files;
//! `fleet`: git), and the `main` of those that run cascade's git code in
//! their own process ([`bench_main!`]).
//! Included with `#[path]`; not a benchmark of its own.
#![allow(dead_code)]

/// `criterion_main!` with libgit2 set up first as the `cascade` binary sets
/// it up (`cascade_git::configure_libgit2`: trees of any size cached), so
/// that what a benchmark measures in its own process is what a run costs.
macro_rules! bench_main {
    ($($group:path),+ $(,)?) => {
        fn main() {
            // SAFETY: first thing in the process, before any thread.
            unsafe { cascade_git::configure_libgit2() };
            $($group();)+
            criterion::Criterion::default()
                .configure_from_args()
                .final_summary();
        }
    };
}

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Runs git in the generated repository; its output (trimmed). Automatic
/// gc/maintenance is off: committing 20,000 loose objects otherwise starts
/// a detached `git maintenance run --auto` (gc, repack) that competes for
/// the CPU with the first benchmarks for several seconds and inflated their
/// figures.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@b")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@b")
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        other => panic!("git {args:?} failed: {other:?}"),
    };
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A committed repository of `n` files in 100-file folders (plus a
/// .gitignore and some ignored build output), index refreshed.
pub fn generate(root: &Path, n: usize) -> PathBuf {
    let repo = root.join("repo");
    for i in 0..n {
        let dir = repo.join(format!("pkg{:03}/src", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        let body = format!(
            "// file {i}\npub fn f{i}() -> usize {{ {i} }}\n{}\n",
            "x".repeat(i % 300)
        );
        std::fs::write(dir.join(format!("m{i}.rs")), body).unwrap();
    }
    std::fs::write(repo.join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir_all(repo.join("target/debug")).unwrap();
    for i in 0..500 {
        std::fs::write(repo.join(format!("target/debug/o{i}")), "bin").unwrap();
    }
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "gen"]);
    // Let timestamps move past the index's, then refresh it (as any git
    // command does), so clean files are not racily clean.
    std::thread::sleep(Duration::from_millis(20));
    git(&repo, &["status", "--porcelain"]);
    repo
}

/// The tree size: `CASCADE_BENCH_FILES`, default 20,000.
pub fn files() -> usize {
    std::env::var("CASCADE_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// One whole engine run of `config` with `options` on a runtime of its
/// own, which must complete. The runtime is shut down in the background
/// afterwards: what its blocking threads still do is not the run's
/// makespan (the binary exits there).
pub fn run_to_completion(
    config: cascade_engine::config::EngineConfig,
    options: cascade_engine::config::RunOptions,
) {
    let sink: cascade_engine::EventSink = std::sync::Arc::new(|_: &cascade_engine::Event| {});
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let cancel = cascade_process::CancelToken::new();
    let summary = rt
        .block_on(cascade_engine::engine::Engine::new(config).run(options, sink, &cancel))
        .unwrap();
    rt.shutdown_background();
    assert_eq!(
        summary.status,
        cascade_engine::RunStatus::Completed,
        "{:?}",
        summary.counts
    );
}

/// Writes an executable `/bin/sh` script.
pub fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
