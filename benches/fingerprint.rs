//! Fingerprint speed: a generated 20,000-file repository, clean and with 200
//! dirty files, side by side with `git status --porcelain` on the same tree.
//!
//! `cargo bench --bench fingerprint -- --quick` (or plain `cargo bench --bench fingerprint`).
//! Set `CASCADE_BENCH_FILES` to change the tree size.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};

#[macro_use]
#[path = "support/mod.rs"]
mod support;
use support::{files, generate};

/// CPU time (user + system) of this process or of its waited-for children, in ms.
fn cpu_ms(who: i32) -> f64 {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    us(u.ru_utime) + us(u.ru_stime)
}

/// The figure the target is about, robust to a busy machine: `git status
/// --porcelain` and a fingerprint alternated pair by pair (so both see the
/// same load), median wall-time ratio, plus CPU time of each.
fn side_by_side(repo: &Path, label: &str) {
    let pairs = 15;
    let (mut ratios, mut git_cpu, mut fp_cpu) = (Vec::new(), 0.0, 0.0);
    for _ in 0..pairs {
        let c0 = cpu_ms(libc::RUSAGE_CHILDREN);
        let t = Instant::now();
        let out = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(repo)
            .output()
            .unwrap();
        assert!(out.status.success());
        let git = t.elapsed();
        git_cpu += cpu_ms(libc::RUSAGE_CHILDREN) - c0;
        let c0 = cpu_ms(libc::RUSAGE_SELF);
        let t = Instant::now();
        cascade_git::fingerprint::fingerprint(repo, None).unwrap();
        let fp = t.elapsed();
        fp_cpu += cpu_ms(libc::RUSAGE_SELF) - c0;
        ratios.push(fp.as_secs_f64() / git.as_secs_f64());
    }
    ratios.sort_by(|a, b| a.total_cmp(b));
    eprintln!(
        "side by side [{label}]: median wall ratio fingerprint / git status = {:.2} \
         (min {:.2}, max {:.2}); CPU per run: fingerprint {:.1} ms, git status {:.1} ms (ratio {:.2})",
        ratios[pairs / 2],
        ratios[0],
        ratios[pairs - 1],
        fp_cpu / pairs as f64,
        git_cpu / pairs as f64,
        fp_cpu / git_cpu
    );
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let n = files();
    let repo = generate(tmp.path(), n);
    side_by_side(&repo, "clean");
    let mut g = c.benchmark_group(format!("tree_{n}_files"));
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));

    g.bench_function("git_status_porcelain", |b| {
        b.iter(|| {
            let out = Command::new("git")
                .args(["status", "--porcelain"])
                .current_dir(&repo)
                .output()
                .unwrap();
            assert!(out.status.success());
        })
    });
    g.bench_function("fingerprint_clean", |b| {
        b.iter(|| {
            let fp = cascade_git::fingerprint::fingerprint(&repo, None).unwrap();
            assert_eq!(fp.hashed(), 0);
            fp
        })
    });

    // 200 dirty files: 100 tracked edits, 100 new untracked files.
    for i in 0..100 {
        let p = repo.join(format!(
            "pkg{:03}/src/m{}.rs",
            (i * 97 % n) / 100,
            i * 97 % n
        ));
        std::fs::write(p, format!("// dirty {i}\n{}\n", "y".repeat(2000))).unwrap();
        std::fs::write(
            repo.join(format!("pkg{:03}/src/new{i}.rs", i % (n / 100))),
            format!("// new {i}\n{}\n", "z".repeat(2000)),
        )
        .unwrap();
    }
    side_by_side(&repo, "200 dirty");
    g.bench_function("git_status_porcelain_200_dirty", |b| {
        b.iter(|| {
            Command::new("git")
                .args(["status", "--porcelain"])
                .current_dir(&repo)
                .output()
                .unwrap()
        })
    });
    g.bench_function("fingerprint_200_dirty", |b| {
        b.iter(|| {
            let fp = cascade_git::fingerprint::fingerprint(&repo, None).unwrap();
            assert_eq!(fp.hashed(), 200);
            fp
        })
    });
    // The per-file cost of a dirty file: hashing 200 of them alone.
    let dirty: Vec<PathBuf> = (0..100)
        .map(|i| repo.join(format!("pkg{:03}/src/new{i}.rs", i % (n / 100))))
        .collect();
    g.bench_function("hash_200_files_only", |b| {
        b.iter(|| {
            for _ in 0..2 {
                for p in &dirty {
                    cascade_git::fingerprint::hash_path(p, 0o100644).unwrap();
                }
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
bench_main!(benches);
