//! The fast merged tree against libgit2's three-way merge: wherever the
//! fast path answers, libgit2 merges without conflict to the same tree.

use std::collections::BTreeMap;

use git2::{Oid, Repository, Signature};
use proptest::prelude::*;

use super::*;
use crate::treediff::tests::{files, repo, tree_strategy, write_tree, EXEC, FILE};

type Files = BTreeMap<String, (String, i32)>;

fn commit(repo: &Repository, files: &Files, parents: &[Oid]) -> Oid {
    let tree = repo.find_tree(write_tree(repo, files)).unwrap();
    let sig = Signature::now("t", "t@t").unwrap();
    let parents: Vec<Commit<'_>> = parents
        .iter()
        .map(|p| repo.find_commit(*p).unwrap())
        .collect();
    let refs: Vec<&Commit<'_>> = parents.iter().collect();
    repo.commit(None, &sig, &sig, "c", &tree, &refs).unwrap()
}

/// libgit2's merged tree, `None` on conflict.
fn libgit2_merge(repo: &Repository, ours: Oid, theirs: Oid) -> Option<Oid> {
    try_libgit2_merge(repo, ours, theirs).unwrap()
}

/// The same, or libgit2's failure: some trees it cannot merge at all (its
/// merged index holds a file `x` beside files under `x/`, which no tree can).
fn try_libgit2_merge(
    repo: &Repository,
    ours: Oid,
    theirs: Oid,
) -> Result<Option<Oid>, git2::Error> {
    let (o, t) = (
        repo.find_commit(ours).unwrap(),
        repo.find_commit(theirs).unwrap(),
    );
    let mut index = repo.merge_commits(&o, &t, None)?;
    if index.has_conflicts() {
        return Ok(None);
    }
    index.write_tree_to(repo).map(Some)
}

fn fast(repo: &Repository, ours: Oid, theirs: Oid) -> Option<Oid> {
    let (o, t) = (
        repo.find_commit(ours).unwrap(),
        repo.find_commit(theirs).unwrap(),
    );
    let found = bases(repo, ours, theirs).unwrap();
    merged_tree(repo, &found, &o, &t).unwrap()
}

#[test]
fn stories_touching_different_files_merge_without_a_three_way_merge() {
    let (_tmp, repo) = repo();
    let base = commit(
        &repo,
        &files(&[
            ("README", "r", FILE),
            ("src/a/one.rs", "1", FILE),
            ("src/b/two.rs", "2", FILE),
            ("old/gone.txt", "g", FILE),
        ]),
        &[],
    );
    // The target moved on: one file changed, one directory emptied.
    let ours = commit(
        &repo,
        &files(&[
            ("README", "r2", FILE),
            ("src/a/one.rs", "1", FILE),
            ("src/b/two.rs", "2", FILE),
        ]),
        &[base],
    );
    // The story: a new nested file, a changed file, an exec bit, a deletion.
    let theirs = commit(
        &repo,
        &files(&[
            ("README", "r", FILE),
            ("src/a/one.rs", "1 changed", EXEC),
            ("new/deep/file.rs", "n", FILE),
            ("old/gone.txt", "g", FILE),
        ]),
        &[base],
    );
    let got = fast(&repo, ours, theirs).expect("disjoint changes take the fast path");
    assert_eq!(Some(got), libgit2_merge(&repo, ours, theirs));
    let tree = repo.find_tree(got).unwrap();
    assert!(
        tree.get_path(std::path::Path::new("src/b")).is_err(),
        "emptied directory removed"
    );
    assert!(tree.get_path(std::path::Path::new("old")).is_err());
    assert!(tree
        .get_path(std::path::Path::new("new/deep/file.rs"))
        .is_ok());
}

#[test]
fn overlapping_changes_are_left_to_the_three_way_merge() {
    let (_tmp, repo) = repo();
    let base = commit(&repo, &files(&[("x", "1", FILE), ("y", "1", FILE)]), &[]);
    // The same file on both sides (even an identical change).
    let ours = commit(
        &repo,
        &files(&[("x", "2", FILE), ("y", "1", FILE)]),
        &[base],
    );
    let theirs = commit(
        &repo,
        &files(&[("x", "2", FILE), ("y", "1", FILE), ("w", "new", FILE)]),
        &[base],
    );
    assert_eq!(fast(&repo, ours, theirs), None);
    // A file on one side where the other made it a directory's parent.
    let ours = commit(
        &repo,
        &files(&[("x", "1", FILE), ("y", "1", FILE), ("z", "f", FILE)]),
        &[base],
    );
    let theirs = commit(
        &repo,
        &files(&[("x", "1", FILE), ("y", "1", FILE), ("z/in", "d", FILE)]),
        &[base],
    );
    assert_eq!(fast(&repo, ours, theirs), None);
    // Two merge bases (a criss-cross): left to libgit2's recursive merge.
    let a = commit(
        &repo,
        &files(&[("x", "a", FILE), ("y", "1", FILE)]),
        &[base],
    );
    let b = commit(
        &repo,
        &files(&[("x", "1", FILE), ("y", "b", FILE)]),
        &[base],
    );
    let ab = commit(
        &repo,
        &files(&[("x", "a", FILE), ("y", "b", FILE)]),
        &[a, b],
    );
    let ba = commit(
        &repo,
        &files(&[("x", "a", FILE), ("y", "b", FILE), ("w", "w", FILE)]),
        &[b, a],
    );
    assert_eq!(fast(&repo, ab, ba), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn wherever_the_fast_path_answers_libgit2_merges_to_the_same_tree(
        base in tree_strategy(),
        ours in tree_strategy(),
        theirs in tree_strategy(),
        keep_ours in prop::collection::vec(any::<bool>(), 12),
        keep_theirs in prop::collection::vec(any::<bool>(), 12),
    ) {
        // Each side keeps some of the base's files as they were, so that
        // disjoint changes are common.
        let side = |edits: &Files, keep: &[bool]| -> Files {
            let mut out = edits.clone();
            for ((path, file), k) in base.iter().zip(keep) {
                let clashes = out.keys().any(|q| {
                    q == path || q.starts_with(&format!("{path}/")) || path.starts_with(&format!("{q}/"))
                });
                if *k && !clashes {
                    out.insert(path.clone(), file.clone());
                }
            }
            out
        };
        let (ours, theirs) = (side(&ours, &keep_ours), side(&theirs, &keep_theirs));
        let (_tmp, repo) = repo();
        let b = commit(&repo, &base, &[]);
        let o = commit(&repo, &ours, &[b]);
        let t = commit(&repo, &theirs, &[b]);
        // Where libgit2 refuses to merge at all, there is nothing to compare.
        if let (Some(tree), Ok(merged)) = (fast(&repo, o, t), try_libgit2_merge(&repo, o, t)) {
            prop_assert_eq!(Some(tree), merged);
        }
    }
}

#[test]
fn the_fast_path_is_the_common_case_for_stories_adding_their_own_files() {
    // As in a run: every story adds its own file to a target that moved.
    let (_tmp, repo) = repo();
    let mut target_files = files(&[("README", "r", FILE)]);
    let mut target = commit(&repo, &target_files, &[]);
    for i in 0..20 {
        let base = target;
        let mut story_files = target_files.clone();
        story_files.insert(format!("src/s{i}.rs"), (format!("{i}"), FILE));
        let story = commit(&repo, &story_files, &[base]);
        // Another story merged meanwhile.
        target_files.insert(format!("other/o{i}.rs"), (format!("{i}"), FILE));
        let moved = commit(&repo, &target_files, &[base]);
        let tree = fast(&repo, moved, story).expect("fast path");
        assert_eq!(Some(tree), libgit2_merge(&repo, moved, story));
        target_files.insert(format!("src/s{i}.rs"), (format!("{i}"), FILE));
        let sig = Signature::now("t", "t@t").unwrap();
        let (m, s) = (
            repo.find_commit(moved).unwrap(),
            repo.find_commit(story).unwrap(),
        );
        target = repo
            .commit(
                None,
                &sig,
                &sig,
                "merge",
                &repo.find_tree(tree).unwrap(),
                &[&m, &s],
            )
            .unwrap();
    }
}
