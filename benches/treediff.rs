//! Comparing two commits of a large repository that differ in one file:
//! `cascade_git::treediff::changed_paths` (equal subtrees skipped unread)
//! beside libgit2's own tree-to-tree diff (every subtree read), on the
//! generated 20,000-file repository of the fingerprint benchmark. Each
//! sample opens the repository afresh, as cascade does per operation, so
//! libgit2's object cache does not hide the reads.
//!
//! `cargo bench --bench treediff -- --quick`; `CASCADE_BENCH_FILES` changes the size.

use std::path::Path;
use std::process::Command;

use criterion::{criterion_group, Criterion};
use git2::Repository;

#[macro_use]
#[path = "support/mod.rs"]
mod support;
use support::{files, generate};

/// The repository and its two commits: `HEAD~1` and `HEAD`, one file apart.
fn two_commits(root: &Path) -> std::path::PathBuf {
    let repo = generate(root, files());
    std::fs::write(repo.join("pkg007/src/m700.rs"), "// changed\n").unwrap();
    for args in [&["add", "-A"][..], &["commit", "-q", "-m", "one file"]] {
        let ok = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_AUTHOR_NAME", "b")
            .env("GIT_AUTHOR_EMAIL", "b@b")
            .env("GIT_COMMITTER_NAME", "b")
            .env("GIT_COMMITTER_EMAIL", "b@b")
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
    repo
}

fn trees(repo: &Repository) -> (git2::Tree<'_>, git2::Tree<'_>) {
    let tree = |rev: &str| repo.revparse_single(rev).unwrap().peel_to_tree().unwrap();
    (tree("HEAD~1"), tree("HEAD"))
}

fn treediff(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = two_commits(tmp.path());
    let mut g = c.benchmark_group("treediff");
    g.bench_function("changed_paths", |b| {
        b.iter(|| {
            let repo = Repository::open(&dir).unwrap();
            let (old, new) = trees(&repo);
            let changed = cascade_git::treediff::changed_paths(&repo, Some(&old), &new).unwrap();
            assert_eq!(changed.len(), 1);
        })
    });
    g.bench_function("libgit2_diff_tree_to_tree", |b| {
        b.iter(|| {
            let repo = Repository::open(&dir).unwrap();
            let (old, new) = trees(&repo);
            let diff = repo
                .diff_tree_to_tree(Some(&old), Some(&new), None)
                .unwrap();
            assert_eq!(diff.deltas().len(), 1);
        })
    });
    g.finish();
}

criterion_group!(benches, treediff);
bench_main!(benches);
