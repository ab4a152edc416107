//! Fingerprint tests against real temp repositories (driven by the git CLI).

use super::*;
use cascade_test_support::git;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

fn repo() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("r");
    std::fs::create_dir(&root).unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    std::fs::create_dir(root.join("src")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "fn x() {}\n").unwrap();
    std::fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "init"]);
    (tmp, root)
}

fn fp(dir: &Path) -> Fingerprint {
    fingerprint(dir, None).unwrap()
}

#[test]
fn blob_ids_equal_gits() {
    let (_t, root) = repo();
    std::fs::write(root.join("a.txt"), "changed\n").unwrap();
    let f = fp(&root);
    let a = f.files().iter().find(|f| f.path == "a.txt").unwrap();
    let want = git(&root, &["hash-object", "a.txt"]);
    assert_eq!(a.oid.to_string(), want.trim());
    let paths: Vec<&str> = f.files().iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, vec![".gitignore", "a.txt", "src/lib.rs"]);
}

#[test]
fn same_content_same_fingerprint_committed_staged_or_on_disk() {
    let (_t, root) = repo();
    let clean = fp(&root);
    assert_eq!(clean, fp(&root));
    // Edit, then restore the same bytes: stat differs, content does not.
    std::fs::write(root.join("a.txt"), "beta\n").unwrap();
    let edited = fp(&root);
    assert_ne!(clean.digest(), edited.digest());
    git(&root, &["add", "a.txt"]);
    assert_eq!(
        edited.digest(),
        fp(&root).digest(),
        "staging changes nothing"
    );
    git(&root, &["commit", "-q", "-m", "b"]);
    assert_eq!(
        edited.digest(),
        fp(&root).digest(),
        "committing changes nothing"
    );
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    assert_eq!(clean.digest(), fp(&root).digest(), "same bytes as at first");
}

#[test]
fn deleted_untracked_ignored_and_cascade_files() {
    let (_t, root) = repo();
    let clean = fp(&root);
    std::fs::create_dir_all(root.join("target/debug")).unwrap();
    std::fs::write(root.join("target/debug/out"), "x").unwrap();
    std::fs::write(root.join("build.log"), "x").unwrap();
    std::fs::create_dir_all(root.join(".cascade/gate-cache")).unwrap();
    std::fs::write(root.join(".cascade/gate-cache/e"), "x").unwrap();
    assert_eq!(
        clean.digest(),
        fp(&root).digest(),
        "ignored files and .cascade do not count"
    );

    std::fs::write(root.join("new.txt"), "n").unwrap();
    let with_new = fp(&root);
    assert_ne!(clean.digest(), with_new.digest());
    assert!(with_new.files().iter().any(|f| f.path == "new.txt"));
    std::fs::remove_file(root.join("new.txt")).unwrap();
    assert_eq!(clean.digest(), fp(&root).digest());

    std::fs::remove_file(root.join("src/lib.rs")).unwrap();
    let deleted = fp(&root);
    assert!(!deleted.files().iter().any(|f| f.path == "src/lib.rs"));
    assert_ne!(clean.digest(), deleted.digest());
}

#[test]
fn executable_bit_and_symlinks_count() {
    let (_t, root) = repo();
    let clean = fp(&root);
    std::fs::set_permissions(root.join("a.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exec = fp(&root);
    assert_ne!(clean.digest(), exec.digest());
    std::fs::set_permissions(root.join("a.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(clean.digest(), fp(&root).digest());

    std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
    let f = fp(&root);
    let link = f.files().iter().find(|f| f.path == "link").unwrap();
    assert_eq!(link.mode, crate::status::mode::SYMLINK);
    git(&root, &["add", "link"]);
    let staged = git(&root, &["ls-files", "-s", "link"]);
    assert!(staged.contains(&link.oid.to_string()), "{staged}");
}

#[test]
fn racily_clean_edit_is_seen() {
    let (_t, root) = repo();
    // Same size, written right after the index: stat data may look unchanged
    // at coarse timestamp resolution; the racy check rehashes it.
    git(&root, &["add", "-A"]);
    std::fs::write(root.join("a.txt"), "ALPHA\n").unwrap();
    let f = fp(&root);
    let a = f.files().iter().find(|f| f.path == "a.txt").unwrap();
    assert_eq!(
        a.oid.to_string(),
        git(&root, &["hash-object", "a.txt"]).trim()
    );
}

#[test]
fn linked_worktree_with_same_content_matches() {
    let (t, root) = repo();
    let wt = t.path().join("wt");
    git(
        &root,
        &["worktree", "add", "-q", "-b", "other", wt.to_str().unwrap()],
    );
    assert_eq!(fp(&root).digest(), fp(&wt).digest());
    std::fs::write(wt.join("a.txt"), "other\n").unwrap();
    assert_ne!(fp(&root).digest(), fp(&wt).digest());
}

#[test]
fn inputs_restrict_and_diff_names_files() {
    let (_t, root) = repo();
    let mut b = globset::GlobSetBuilder::new();
    b.add(globset::Glob::new("src/**").unwrap());
    let set = b.build().unwrap();
    let before = fingerprint(&root, Some(&set)).unwrap();
    std::fs::write(root.join("a.txt"), "unrelated\n").unwrap();
    let after = fingerprint(&root, Some(&set)).unwrap();
    assert_eq!(before.digest(), after.digest());
    assert_eq!(fp(&root).restrict(&set).digest(), after.digest());

    let full_before = Fingerprint::from_files(before.files().to_vec());
    std::fs::write(root.join("src/lib.rs"), "fn y() {}\n").unwrap();
    std::fs::write(root.join("src/new.rs"), "").unwrap();
    let changed = diff_files(
        full_before.files(),
        fingerprint(&root, Some(&set)).unwrap().files(),
    );
    assert_eq!(changed.modified, vec!["src/lib.rs"]);
    assert_eq!(changed.added, vec!["src/new.rs"]);
    assert!(changed.removed.is_empty());
}

#[test]
fn outside_git_hashes_files_and_respects_ignores() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("a"), "1").unwrap();
    std::fs::write(d.join(".ignore"), "skip\n").unwrap();
    std::fs::write(d.join("skip"), "x").unwrap();
    let one = fingerprint_dir(d, None).unwrap();
    assert!(one.files().iter().all(|f| f.path != "skip"));
    std::fs::write(d.join("skip"), "y").unwrap();
    assert_eq!(one.digest(), fingerprint_dir(d, None).unwrap().digest());
    std::fs::write(d.join("a"), "2").unwrap();
    assert_ne!(one.digest(), fingerprint_dir(d, None).unwrap().digest());
}

#[test]
fn changed_files_against_base_include_untracked() {
    let (_t, root) = repo();
    std::fs::write(root.join("a.txt"), "x\n").unwrap();
    std::fs::write(root.join("u.py"), "x\n").unwrap();
    std::fs::write(root.join("ignored.log"), "x\n").unwrap();
    std::fs::remove_file(root.join("src/lib.rs")).unwrap();
    let changed = crate::status::changed_files(&root, "HEAD").unwrap();
    assert_eq!(changed, vec!["a.txt", "u.py"]);
}

#[test]
fn gitignore_rules_exclude_file_nested_repos_and_tracked_files_in_ignored_dirs() {
    let (_t, root) = repo();
    let clean = fp(&root);
    // info/exclude, a nested .gitignore with a negation, an ignored dir.
    std::fs::write(root.join(".git/info/exclude"), "/secret.txt\n").unwrap();
    std::fs::write(root.join("secret.txt"), "s").unwrap();
    std::fs::create_dir_all(root.join("docs/gen")).unwrap();
    std::fs::write(root.join("docs/.gitignore"), "*.html\n!keep.html\ngen/\n").unwrap();
    std::fs::write(root.join("docs/a.html"), "x").unwrap();
    std::fs::write(root.join("docs/keep.html"), "k").unwrap();
    std::fs::write(root.join("docs/gen/out.md"), "o").unwrap();
    // An untracked nested repository is one opaque entry git never enters.
    std::fs::create_dir_all(root.join("vendor/lib")).unwrap();
    git(&root.join("vendor/lib"), &["init", "-q"]);
    std::fs::write(root.join("vendor/lib/x.c"), "c").unwrap();
    let f = fp(&root);
    let paths: Vec<&str> = f.files().iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            ".gitignore",
            "a.txt",
            "docs/.gitignore",
            "docs/keep.html",
            "src/lib.rs"
        ]
    );
    // Our listing equals git's own.
    let mut git_paths: Vec<String> = git(&root, &["ls-files", "-co", "--exclude-standard"])
        .lines()
        .map(str::to_string)
        .filter(|p| !p.starts_with("vendor/lib"))
        .collect();
    git_paths.sort();
    assert_eq!(paths, git_paths);
    // A tracked file inside an ignored directory still counts.
    git(&root, &["add", "-f", "docs/gen/out.md"]);
    let f = fp(&root);
    assert!(f.files().iter().any(|f| f.path == "docs/gen/out.md"));
    std::fs::write(root.join("docs/gen/out.md"), "changed").unwrap();
    assert_ne!(f.digest(), fp(&root).digest());
    let _ = clean;
}

// ---------------------------------------------------------------------------
// Git's index as the only stat cache.

/// Lets the filesystem's timestamp tick move on, so files written before
/// are not racily clean for an index written after (coarse ticks are a few
/// ms on Linux).
fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(30));
}

#[test]
fn the_index_vouches_for_clean_files_and_only_changed_ones_are_hashed() {
    let (_t, root) = repo();
    tick();
    // Refresh the index's stat data after the tick (as any git command may).
    git(&root, &["status", "--porcelain"]);
    let clean = fp(&root);
    assert_eq!(clean.hashed(), 0, "a clean tree reads no file");
    tick();
    std::fs::write(root.join("a.txt"), "dirty\n").unwrap();
    std::fs::write(root.join("u.txt"), "untracked\n").unwrap();
    let dirty = fp(&root);
    assert_eq!(dirty.hashed(), 2, "the dirty and the untracked file");
    assert_ne!(dirty.digest(), clean.digest());
    // Staged after a tick: git's index now vouches for both.
    tick();
    git(&root, &["add", "a.txt", "u.txt"]);
    tick();
    let staged = fp(&root);
    assert_eq!(staged.hashed(), 0);
    assert_eq!(staged.digest(), dirty.digest());
}

#[test]
fn rewrites_in_the_same_second_with_the_same_size_never_give_a_stale_answer() {
    let (_t, root) = repo();
    // No pauses: many of these rewrites land in the tick of the previous
    // scan, and every other round stages the tracked file (an index entry
    // written in the same tick as its file is racily clean). Whatever the
    // timing, the answer must be the file's content.
    for i in 0..40 {
        let body = format!("v{:03}\n", i);
        std::fs::write(root.join("a.txt"), &body).unwrap();
        std::fs::write(root.join("u.txt"), &body).unwrap();
        if i % 2 == 1 {
            git(&root, &["add", "a.txt"]);
        }
        let f = fp(&root);
        let want = Oid::hash_object(ObjectType::Blob, body.as_bytes()).unwrap();
        for p in ["a.txt", "u.txt"] {
            let got = f.files().iter().find(|f| f.path == p).unwrap().oid;
            assert_eq!(got, want, "{p} after rewrite {i}");
        }
    }
}

#[test]
fn a_tracked_path_replaced_by_a_directory_or_a_symlink_is_seen() {
    let (_t, root) = repo();
    std::fs::remove_file(root.join("a.txt")).unwrap();
    std::fs::create_dir(root.join("a.txt")).unwrap();
    std::fs::write(root.join("a.txt/inner"), "i").unwrap();
    let f = fp(&root);
    let paths: Vec<&str> = f.files().iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, vec![".gitignore", "a.txt/inner", "src/lib.rs"]);
    std::fs::remove_dir_all(root.join("a.txt")).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", root.join("a.txt")).unwrap();
    let f = fp(&root);
    let a = f.files().iter().find(|f| f.path == "a.txt").unwrap();
    assert_eq!(a.mode, crate::status::mode::SYMLINK);
    let want = Oid::hash_object(ObjectType::Blob, b"src/lib.rs").unwrap();
    assert_eq!(a.oid, want);
}

#[test]
fn names_that_sort_around_the_separator_are_all_found() {
    // '.' < '/' < '0': the files of `a/` sit between `a.b` and `a0` in git's
    // order; tracked and untracked paths merge into one sorted list.
    let (_t, root) = repo();
    for p in ["a/x", "a/b/c", "a.b", "a0", "ab/y", "a-/z", "a/b.c/d"] {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, p).unwrap();
    }
    git(&root, &["add", "a/x", "a.b", "ab/y"]);
    let listed: Vec<String> = {
        let mut v: Vec<String> = git(&root, &["ls-files", "-co", "--exclude-standard"])
            .lines()
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    let f = fp(&root);
    let paths: Vec<&str> = f.files().iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, listed);
    for file in f.files() {
        let want = git(&root, &["hash-object", &file.path]);
        assert_eq!(file.oid.to_string(), want.trim(), "{}", file.path);
    }
}

#[test]
fn the_key_is_a_pure_function_of_content() {
    // DESIGN.md's gate-cache semantics, with `.cascade/` present and not
    // excluded.
    let (t, root) = repo();
    tick();
    let clean = fp(&root);
    let paths =
        |f: &Fingerprint| -> Vec<String> { f.files().iter().map(|f| f.path.clone()).collect() };
    assert_eq!(paths(&clean), vec![".gitignore", "a.txt", "src/lib.rs"]);

    // Anything under .cascade/ is never part of it.
    std::fs::create_dir_all(root.join(".cascade/gate-cache")).unwrap();
    std::fs::write(root.join(".cascade/gates.json"), "{}").unwrap();
    std::fs::write(root.join(".cascade/gate-cache/entry"), "x").unwrap();
    assert_eq!(fp(&root), clean);

    // The same bytes give the same key on disk, staged and committed.
    std::fs::write(root.join("a.txt"), "beta\n").unwrap();
    let on_disk = fp(&root);
    assert_ne!(on_disk.digest(), clean.digest());
    git(&root, &["add", "a.txt"]);
    assert_eq!(fp(&root).digest(), on_disk.digest(), "staged");
    git(&root, &["commit", "-q", "-m", "b"]);
    assert_eq!(fp(&root).digest(), on_disk.digest(), "committed");
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    assert_eq!(fp(&root).digest(), clean.digest(), "restored bytes");

    // Another checkout of the same content, elsewhere, with its own
    // timestamps and inodes (and an index of its own): the same key.
    let copy = t.path().join("copy");
    git(
        t.path(),
        &[
            "clone",
            "-q",
            root.to_str().unwrap(),
            copy.to_str().unwrap(),
        ],
    );
    std::fs::write(copy.join("a.txt"), "alpha\n").unwrap();
    assert_eq!(fp(&copy).digest(), clean.digest());
}
