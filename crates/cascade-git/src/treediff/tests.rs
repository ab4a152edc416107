//! The tree walk against libgit2's own tree-to-tree diff, on hand-picked
//! and generated trees, and proof that equal subtrees are never read.

use std::collections::BTreeMap;

use git2::{Oid, Repository};
use proptest::prelude::*;

use super::*;

pub(crate) const FILE: i32 = 0o100644;
pub(crate) const EXEC: i32 = 0o100755;
pub(crate) const LINK: i32 = 0o120000;

/// Writes a tree of `files` (path -> (contents, mode)) into `repo`.
pub(crate) fn write_tree(repo: &Repository, files: &BTreeMap<String, (String, i32)>) -> Oid {
    // Group by first component: files here, the rest one level down.
    let mut here: BTreeMap<&str, (&str, i32)> = BTreeMap::new();
    let mut below: BTreeMap<&str, BTreeMap<String, (String, i32)>> = BTreeMap::new();
    for (path, (body, mode)) in files {
        match path.split_once('/') {
            Some((dir, rest)) => {
                below
                    .entry(dir)
                    .or_default()
                    .insert(rest.to_string(), (body.clone(), *mode));
            }
            None => {
                here.insert(path, (body, *mode));
            }
        }
    }
    let mut b = repo.treebuilder(None).unwrap();
    for (name, (body, mode)) in here {
        let blob = repo.blob(body.as_bytes()).unwrap();
        b.insert(name, blob, mode).unwrap();
    }
    for (dir, files) in below {
        let sub = write_tree(repo, &files);
        b.insert(dir, sub, 0o040000).unwrap();
    }
    b.write().unwrap()
}

/// libgit2's answer, in the same terms.
fn libgit2_says(repo: &Repository, old: Oid, new: Oid) -> Vec<(String, Change)> {
    let (old, new) = (repo.find_tree(old).unwrap(), repo.find_tree(new).unwrap());
    let diff = repo
        .diff_tree_to_tree(Some(&old), Some(&new), None)
        .unwrap();
    let mut out: Vec<(String, Change)> = diff
        .deltas()
        .map(|d| {
            let (file, change) = match d.status() {
                git2::Delta::Added => (d.new_file(), Change::Added),
                git2::Delta::Deleted => (d.old_file(), Change::Deleted),
                git2::Delta::Modified => (d.new_file(), Change::Modified),
                other => panic!("unexpected delta {other:?}"),
            };
            (file.path().unwrap().to_str().unwrap().to_string(), change)
        })
        .collect();
    out.sort();
    out
}

fn ours(repo: &Repository, old: Oid, new: Oid) -> Vec<(String, Change)> {
    let (old, new) = (repo.find_tree(old).unwrap(), repo.find_tree(new).unwrap());
    let mut out: Vec<(String, Change)> = changed_paths(repo, Some(&old), &new)
        .unwrap()
        .into_iter()
        .map(|(p, c)| (String::from_utf8(p).unwrap(), c))
        .collect();
    out.sort();
    out
}

pub(crate) fn files(list: &[(&str, &str, i32)]) -> BTreeMap<String, (String, i32)> {
    list.iter()
        .map(|(p, b, m)| (p.to_string(), (b.to_string(), *m)))
        .collect()
}

/// A bare repository in a temporary directory.
pub(crate) fn repo() -> (tempfile::TempDir, Repository) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repository::init_bare(tmp.path()).unwrap();
    (tmp, repo)
}

#[test]
fn the_cases_git_orders_with_care_agree_with_libgit2() {
    let (_tmp, repo) = repo();
    let old = write_tree(
        &repo,
        &files(&[
            ("a.txt", "1", FILE),
            ("a/x", "2", FILE),
            ("a-b", "3", FILE),
            ("x", "file", FILE),
            ("run.sh", "echo", FILE),
            ("link", "target", LINK),
            ("deep/er/still/f", "4", FILE),
            ("same/one", "5", FILE),
        ]),
    );
    let new = write_tree(
        &repo,
        &files(&[
            ("a.txt", "1", FILE),
            ("a/x", "2 changed", FILE),
            ("a/y", "new", FILE),
            ("a-b", "3", FILE),
            // A file turned directory, an exec bit, a symlink turned file.
            ("x/inside", "dir now", FILE),
            ("run.sh", "echo", EXEC),
            ("link", "target", FILE),
            ("same/one", "5", FILE),
            ("z/new/file", "6", FILE),
        ]),
    );
    let got = ours(&repo, old, new);
    assert_eq!(got, libgit2_says(&repo, old, new));
    assert!(got.contains(&("deep/er/still/f".to_string(), Change::Deleted)));
    assert!(got.contains(&("x".to_string(), Change::Deleted)));
    assert!(got.contains(&("x/inside".to_string(), Change::Added)));
    assert!(got.contains(&("run.sh".to_string(), Change::Modified)));
    assert!(!got.iter().any(|(p, _)| p.starts_with("same")));
    // From the empty tree: everything is added.
    let new_tree = repo.find_tree(new).unwrap();
    let all = changed_paths(&repo, None, &new_tree).unwrap();
    assert_eq!(all.len(), 9);
    assert!(all.iter().all(|(_, c)| *c == Change::Added));
}

#[test]
fn a_subtree_equal_on_both_sides_is_never_read() {
    let (tmp, repo) = repo();
    let mut both: Vec<(String, String, i32)> = (0..50)
        .map(|i| (format!("vendor/lib{i}/src.rs"), format!("{i}"), FILE))
        .collect();
    both.push(("README".into(), "v1".into(), FILE));
    let as_map = |v: &[(String, String, i32)]| -> BTreeMap<String, (String, i32)> {
        v.iter()
            .map(|(p, b, m)| (p.clone(), (b.clone(), *m)))
            .collect()
    };
    let old = write_tree(&repo, &as_map(&both));
    both.last_mut().unwrap().1 = "v2".into();
    let new = write_tree(&repo, &as_map(&both));
    // Remove the shared `vendor` tree from the object store: reading it
    // would now fail, so a successful answer shows it was not read.
    let vendor = repo
        .find_tree(old)
        .unwrap()
        .get_name("vendor")
        .unwrap()
        .id()
        .to_string();
    let loose = tmp
        .path()
        .join("objects")
        .join(&vendor[..2])
        .join(&vendor[2..]);
    std::fs::remove_file(&loose).unwrap();
    let (old, new) = (repo.find_tree(old).unwrap(), repo.find_tree(new).unwrap());
    assert_eq!(
        changed_paths(&repo, Some(&old), &new).unwrap(),
        vec![(b"README".to_vec(), Change::Modified)]
    );
    // libgit2's own diff reads it, and fails.
    assert!(repo
        .diff_tree_to_tree(Some(&old), Some(&new), None)
        .is_err());
}

/// Small trees over a few names that sort awkwardly against each other.
pub(crate) fn tree_strategy() -> impl Strategy<Value = BTreeMap<String, (String, i32)>> {
    let name = prop::sample::select(vec!["a", "a.b", "a-b", "ab", "b", "x"]);
    let path = prop::collection::vec(name, 1..4).prop_map(|v| v.join("/"));
    let mode = prop::sample::select(vec![FILE, EXEC, LINK]);
    let body = prop::sample::select(vec!["1", "2"]);
    prop::collection::vec((path, body, mode), 0..12).prop_map(|entries| {
        // Keep a consistent tree: no path may be both a file and a directory.
        let mut out: BTreeMap<String, (String, i32)> = BTreeMap::new();
        for (p, b, m) in entries {
            let clashes = out
                .keys()
                .any(|k| k.starts_with(&format!("{p}/")) || p.starts_with(&format!("{k}/")));
            if !clashes {
                out.insert(p, (b.to_string(), m));
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn any_two_trees_differ_as_libgit2_says(old in tree_strategy(), new in tree_strategy()) {
        let (_tmp, repo) = repo();
        let (old, new) = (write_tree(&repo, &old), write_tree(&repo, &new));
        prop_assert_eq!(ours(&repo, old, new), libgit2_says(&repo, old, new));
    }
}
