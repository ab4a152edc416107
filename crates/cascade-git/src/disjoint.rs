//! The merged tree of two commits whose changes touch different files,
//! built at the cost of the changes.
//!
//! libgit2's `merge_commits` walks all three trees whole and the merged
//! index is then written tree by tree: every merge in the serial merge queue
//! costs the size of the repository. In a run, nearly every merge brings in
//! a story whose files no other story since its base touched. Then the
//! result is known without a three-way merge: the target's tree with the
//! story's changes applied (`git_tree_create_updated` rewrites only the
//! trees along the changed paths). Anything else (a path changed on both
//! sides, a file on one side where the other has a directory, several merge
//! bases) is left to libgit2's merge, which gives the same tree in the
//! disjoint case; the tests check that it does.

use std::collections::HashSet;

use git2::build::TreeUpdateBuilder;
use git2::{Commit, FileMode, Oid, Repository};

use crate::treediff::{changed_paths, Change};

/// The best common ancestors of two commits; none for unrelated histories.
pub(crate) fn bases(repo: &Repository, a: Oid, b: Oid) -> Result<Vec<Oid>, git2::Error> {
    match repo.merge_bases(a, b) {
        Ok(found) => Ok(found.iter().copied().collect()),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The merged tree of `ours` and `theirs` when their changes since their
/// merge bases (`bases`, found by the caller) touch different files; `None`
/// when a real three-way merge is needed (or may be): several bases or
/// none among them. Errors are libgit2's, for the caller to report.
pub(crate) fn merged_tree(
    repo: &Repository,
    bases: &[Oid],
    ours: &Commit<'_>,
    theirs: &Commit<'_>,
) -> Result<Option<Oid>, git2::Error> {
    let [base] = bases else {
        return Ok(None);
    };
    let base_tree = repo.find_commit(*base)?.tree()?;
    let (our_tree, their_tree) = (ours.tree()?, theirs.tree()?);
    let our_changes = changed_paths(repo, Some(&base_tree), &our_tree)?;
    let their_changes = changed_paths(repo, Some(&base_tree), &their_tree)?;
    if !disjoint(&our_changes, &their_changes) {
        return Ok(None);
    }
    if their_changes.is_empty() {
        return Ok(Some(our_tree.id()));
    }
    let mut update = TreeUpdateBuilder::new();
    for (path, change) in &their_changes {
        match change {
            Change::Deleted => {
                update.remove(path.as_slice());
            }
            Change::Added | Change::Modified => {
                let entry = their_tree.get_path(std::path::Path::new(os_str(path)))?;
                let Some(mode) = file_mode(entry.filemode()) else {
                    return Ok(None);
                };
                update.upsert(path.as_slice(), entry.id(), mode);
            }
        }
    }
    update.create_updated(repo, &our_tree).map(Some)
}

/// Whether no file changed on one side is changed on the other, or lies
/// where the other side has a file among its parent directories (and
/// theirs changed the kind of no file).
fn disjoint(ours: &[(Vec<u8>, Change)], theirs: &[(Vec<u8>, Change)]) -> bool {
    let files = |side: &[(Vec<u8>, Change)]| -> HashSet<Vec<u8>> {
        side.iter().map(|(p, _)| p.clone()).collect()
    };
    let (our_files, their_files) = (files(ours), files(theirs));
    let under_none_of = |path: &[u8], files: &HashSet<Vec<u8>>| {
        path.iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .all(|(i, _)| !files.contains(&path[..i]))
    };
    let clear = |side: &[(Vec<u8>, Change)], other: &HashSet<Vec<u8>>| {
        side.iter()
            .all(|(path, _)| !other.contains(path) && under_none_of(path, other))
    };
    // A file of theirs turned into a directory or back (`x` and `x/...`
    // both changed), or into a symlink or back (`x` deleted and added), is
    // left to the merge too: the tree update takes one change per path and
    // cannot replace a tree with a file in one step.
    let no_kind_change = their_files.len() == theirs.len()
        && theirs
            .iter()
            .all(|(path, _)| under_none_of(path, &their_files));
    no_kind_change && clear(theirs, &our_files) && clear(ours, &their_files)
}

fn file_mode(mode: i32) -> Option<FileMode> {
    match mode {
        0o100644 => Some(FileMode::Blob),
        0o100755 => Some(FileMode::BlobExecutable),
        0o120000 => Some(FileMode::Link),
        0o160000 => Some(FileMode::Commit),
        _ => None,
    }
}

fn os_str(path: &[u8]) -> &std::ffi::OsStr {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(path)
}

#[cfg(test)]
mod tests;
