//! Fingerprint tests against real temp repositories (driven by the git CLI).

use super::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

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
