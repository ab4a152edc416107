//! Fingerprint tests against real temp repositories (driven by the git CLI).

use super::*;
use crate::statindex::{self as si, Record, Stat, StatIndex, Store, Time};
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

// ---------------------------------------------------------------------------
// The stat index (crate::statindex) behind `fingerprint_with`.

/// Lets the filesystem's timestamp tick move on, so files written before
/// are not racy for the next scan (coarse ticks are a few ms on Linux).
fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(30));
}

/// A fingerprint keeping its stat index in `<tmp>/stat`.
fn fp_indexed(root: &Path, stat: &Path) -> Fingerprint {
    fingerprint_with(root, None, Some(stat)).unwrap()
}

/// The worktree path the index is keyed by (as the fingerprint sees it).
fn workdir_of(root: &Path) -> PathBuf {
    Repository::discover(root)
        .unwrap()
        .workdir()
        .unwrap()
        .to_path_buf()
}

/// Rewrites the worktree's stat index with `edit` applied to the record of
/// `path` and the given reference time (a forged but valid index).
fn forge(root: &Path, stat: &Path, path: &str, reference: Time, edit: impl Fn(&mut Record)) {
    let wd = workdir_of(root);
    let store = Store::new(stat);
    let idx = store.load(&wd).expect("an index to forge");
    let mut recs: Vec<Record> = idx.records().collect();
    let rec = recs
        .iter_mut()
        .find(|r| r.path == path.as_bytes())
        .expect("the path is recorded");
    edit(rec);
    // Consistent in every respect: the digest is the forged records'.
    let files: Vec<FileId> = recs
        .iter()
        .map(|r| FileId {
            path: String::from_utf8_lossy(r.path).into_owned(),
            mode: r.mode,
            oid: r.oid,
        })
        .collect();
    let digest = fold(&files);
    let bytes = si::encode(&wd, reference, idx.git_index(), digest.as_bytes(), &recs);
    store.save(store.clock().unwrap(), &wd, &bytes).unwrap();
}

/// Same files with the same ids (so the same digest), however many were hashed.
fn same(a: &Fingerprint, b: &Fingerprint) {
    assert_eq!(a.files(), b.files());
    assert_eq!(a.digest(), b.digest());
}

fn stat_of(path: &Path) -> Stat {
    Stat::of(&std::fs::symlink_metadata(path).unwrap())
}

fn later(t: Time) -> Time {
    Time {
        sec: t.sec + 60,
        nsec: 0,
    }
}

#[test]
fn stat_index_vouches_for_unchanged_files_tracked_or_not() {
    let (t, root) = repo();
    let stat = t.path().join("stat");
    std::fs::write(root.join("a.txt"), "dirty\n").unwrap();
    std::fs::write(root.join("u.txt"), "untracked\n").unwrap();
    tick();
    let first = fp_indexed(&root, &stat);
    assert_eq!(first.hashed(), 2, "the dirty and the untracked file");
    same(&first, &fp(&root));
    tick();
    let second = fp_indexed(&root, &stat);
    assert_eq!(second.hashed(), 0, "nothing read again");
    assert_eq!(second.digest(), first.digest());
    // Git's index is unchanged: the stat index's tracked paths stand in for it.
    let repo = Repository::discover(&root).unwrap();
    let idx = Store::new(&stat).load(&workdir_of(&root)).unwrap();
    let scan = status::scan_with(&repo, &workdir_of(&root), Some(&idx)).unwrap();
    assert!(!scan.read_git_index);
    assert_eq!(scan.tracked, 3);
    assert!(matches!(
        status::scan_indexed(&repo, &workdir_of(&root), Some(&idx)).unwrap(),
        Scanned::Unchanged
    ));
    same(&second, &fp(&root));

    // Staging rewrites git's index: it is read again, the records still hold.
    git(&root, &["add", "u.txt"]);
    tick();
    let staged = fp_indexed(&root, &stat);
    assert_eq!(staged.digest(), first.digest());
    assert_eq!(staged.hashed(), 0);
}

#[test]
fn files_changed_added_or_deleted_after_the_index_was_written_are_seen() {
    let (t, root) = repo();
    let stat = t.path().join("stat");
    std::fs::write(root.join("u.txt"), "untracked\n").unwrap();
    tick();
    fp_indexed(&root, &stat);
    tick();
    // Same size, new bytes, a later tick: the stat data differs.
    std::fs::write(root.join("a.txt"), "ALPHA\n").unwrap();
    std::fs::write(root.join("u.txt"), "UNTRACKED\n").unwrap();
    let edited = fp_indexed(&root, &stat);
    same(&edited, &fp(&root));
    let a = edited.files().iter().find(|f| f.path == "a.txt").unwrap();
    assert_eq!(
        a.oid.to_string(),
        git(&root, &["hash-object", "a.txt"]).trim()
    );

    std::fs::remove_file(root.join("src/lib.rs")).unwrap();
    std::fs::remove_file(root.join("u.txt")).unwrap();
    std::fs::write(root.join("n.txt"), "new\n").unwrap();
    let changed = fp_indexed(&root, &stat);
    let paths: Vec<&str> = changed.files().iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, vec![".gitignore", "a.txt", "n.txt"]);
    same(&changed, &fp(&root));
}

#[test]
fn a_mode_change_is_seen() {
    let (t, root) = repo();
    let stat = t.path().join("stat");
    tick();
    let before = fp_indexed(&root, &stat);
    std::fs::set_permissions(root.join("a.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let after = fp_indexed(&root, &stat);
    assert_ne!(before.digest(), after.digest());
    same(&after, &fp(&root));
    let a = after.files().iter().find(|f| f.path == "a.txt").unwrap();
    assert_eq!(a.mode, crate::status::mode::EXECUTABLE);
}

#[test]
fn a_racy_record_is_rehashed_even_when_its_stat_data_matches() {
    let (t, root) = repo();
    let stat = t.path().join("stat");
    std::fs::write(root.join("u.txt"), "one\n").unwrap();
    tick();
    let old = fp_indexed(&root, &stat);
    let old_oid = old.files().iter().find(|f| f.path == "u.txt").unwrap().oid;
    // A rewrite within the same tick keeps size, mtime, ctime and inode: the
    // record then matches the file's stat data exactly. Forge that state.
    std::fs::write(root.join("u.txt"), "two\n").unwrap();
    let now = stat_of(&root.join("u.txt"));
    let truth = fp(&root);

    // Control: a record written a tick after the rewrite would be trusted
    // (the stale id shows), which is what the racy rule must prevent...
    forge(&root, &stat, "u.txt", later(now.mtime), |r| r.stat = now);
    let trusted = fp_indexed(&root, &stat);
    let u = trusted.files().iter().find(|f| f.path == "u.txt").unwrap();
    assert_eq!(
        u.oid, old_oid,
        "the forged record is believed when not racy"
    );

    // ...when the record's reference is not after the file's timestamps
    // (the scan that wrote it started in the same tick), it is racy.
    forge(&root, &stat, "u.txt", now.mtime, |r| {
        r.stat = now;
        r.oid = old_oid;
    });
    let racy = fp_indexed(&root, &stat);
    assert_eq!(racy.hashed(), 1);
    same(&racy, &truth);
}

#[test]
fn rewrites_in_the_same_second_with_the_same_size_never_give_a_stale_answer() {
    let (t, root) = repo();
    let stat = t.path().join("stat");
    // No pauses: many of these rewrites land in the tick of the previous
    // scan. Whatever the timing, the answer must be the file's content.
    for i in 0..40 {
        let body = format!("v{:03}\n", i);
        std::fs::write(root.join("a.txt"), &body).unwrap();
        std::fs::write(root.join("u.txt"), &body).unwrap();
        let f = fp_indexed(&root, &stat);
        let want = Oid::hash_object(ObjectType::Blob, body.as_bytes()).unwrap();
        for p in ["a.txt", "u.txt"] {
            let got = f.files().iter().find(|f| f.path == p).unwrap().oid;
            assert_eq!(got, want, "{p} after rewrite {i}");
        }
    }
}

#[test]
fn corrupt_truncated_or_old_indexes_are_rebuilt_never_trusted() {
    let (t, root) = repo();
    let stat = t.path().join("stat");
    tick();
    let truth = fp_indexed(&root, &stat);
    let wd = workdir_of(&root);
    let file = Store::new(&stat).file_for(&wd);
    let a_stat = stat_of(&root.join("a.txt"));
    let stale = Oid::from_bytes(&[9; 20]).unwrap();
    // A valid index with a wrong id for a.txt is believed (the control)...
    forge(&root, &stat, "a.txt", later(a_stat.mtime), |r| {
        r.oid = stale
    });
    assert_ne!(fp_indexed(&root, &stat), truth);
    let forged = {
        forge(&root, &stat, "a.txt", later(a_stat.mtime), |r| {
            r.oid = stale
        });
        std::fs::read(&file).unwrap()
    };
    // ...but not once damaged in any way.
    let mut flipped = forged.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0xff;
    let truncated = forged[..forged.len() - 10].to_vec();
    let mut old_version = forged[..forged.len() - 32].to_vec();
    old_version[8..12].copy_from_slice(&0u32.to_le_bytes());
    let sum = blake3::hash(&old_version);
    old_version.extend_from_slice(sum.as_bytes());
    for (what, bytes) in [
        ("corrupt", flipped),
        ("truncated", truncated),
        ("older schema", old_version),
        ("empty", Vec::new()),
    ] {
        std::fs::write(&file, &bytes).unwrap();
        assert!(StatIndex::parse(bytes, &wd).is_err(), "{what}");
        same(&fp_indexed(&root, &stat), &truth);
        let rebuilt = Store::new(&stat).load(&wd).expect(what);
        assert_eq!(rebuilt.len(), truth.files().len(), "{what}");
    }
}

#[test]
fn worktrees_of_one_repository_keep_their_own_index_in_one_directory() {
    let (t, root) = repo();
    let stat = t.path().join("stat");
    let wt = t.path().join("wt");
    git(
        &root,
        &["worktree", "add", "-q", "-b", "other", wt.to_str().unwrap()],
    );
    tick();
    let main = fp_indexed(&root, &stat);
    let linked = fp_indexed(&wt, &stat);
    assert_eq!(main.digest(), linked.digest(), "same content, same key");
    assert_eq!(std::fs::read_dir(&stat).unwrap().count(), 2);
    std::fs::write(wt.join("a.txt"), "other\n").unwrap();
    tick();
    assert_ne!(fp_indexed(&wt, &stat).digest(), main.digest());
    same(&fp_indexed(&root, &stat), &main);
    let again = fp_indexed(&wt, &stat);
    assert_eq!(again.hashed(), 0);
    same(&again, &fp(&wt));
}

#[test]
fn names_that_sort_around_the_separator_are_all_found() {
    // '.' < '/' < '0': the files of `a/` sit between `a.b` and `a0` in git's
    // order, and the walk looks each directory's files up in that order.
    let (t, root) = repo();
    let stat = t.path().join("stat");
    for p in ["a/x", "a/b/c", "a.b", "a0", "ab/y", "a-/z", "a/b.c/d"] {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, p).unwrap();
    }
    git(&root, &["add", "a/x", "a.b", "ab/y"]);
    tick();
    let listed: Vec<String> = {
        let mut v: Vec<String> = git(&root, &["ls-files", "-co", "--exclude-standard"])
            .lines()
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    for f in [
        fp(&root),
        fp_indexed(&root, &stat),
        fp_indexed(&root, &stat),
    ] {
        let paths: Vec<&str> = f.files().iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, listed);
        for file in f.files() {
            let want = git(&root, &["hash-object", &file.path]);
            assert_eq!(file.oid.to_string(), want.trim(), "{}", file.path);
        }
    }
    assert_eq!(fp_indexed(&root, &stat).hashed(), 0);
}

#[test]
fn with_the_stat_index_the_key_is_still_a_pure_function_of_content() {
    // DESIGN.md's gate-cache semantics, through the indexed path, with the
    // index where the gate cache keeps it: inside `.cascade/`.
    let (t, root) = repo();
    let stat = root.join(".cascade/gate-cache/stat");
    let indexed = |dir: &Path| {
        let f = fp_indexed(dir, &stat);
        same(&f, &fp(dir));
        f
    };
    tick();
    let clean = indexed(&root);
    assert_eq!(indexed(&root).hashed(), 0, "the second scan reads nothing");
    let paths =
        |f: &Fingerprint| -> Vec<String> { f.files().iter().map(|f| f.path.clone()).collect() };
    assert_eq!(paths(&clean), vec![".gitignore", "a.txt", "src/lib.rs"]);

    // Anything under .cascade/ (the index itself included) is never part of it.
    std::fs::write(root.join(".cascade/gates.json"), "{}").unwrap();
    std::fs::write(root.join(".cascade/gate-cache/entry"), "x").unwrap();
    tick();
    assert_eq!(indexed(&root).digest(), clean.digest());

    // The same bytes give the same key on disk, staged and committed.
    std::fs::write(root.join("a.txt"), "beta\n").unwrap();
    let on_disk = indexed(&root);
    assert_ne!(on_disk.digest(), clean.digest());
    git(&root, &["add", "a.txt"]);
    assert_eq!(indexed(&root).digest(), on_disk.digest(), "staged");
    git(&root, &["commit", "-q", "-m", "b"]);
    tick();
    assert_eq!(indexed(&root).digest(), on_disk.digest(), "committed");
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    assert_eq!(indexed(&root).digest(), clean.digest(), "restored bytes");

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
    tick();
    assert_eq!(indexed(&copy).digest(), clean.digest());
    assert_eq!(indexed(&copy).hashed(), 0);
}
