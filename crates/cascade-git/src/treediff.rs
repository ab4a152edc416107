//! The paths that differ between two trees, at the cost of the change.
//!
//! libgit2's tree-to-tree diff expands every subtree of both sides, equal or
//! not, so comparing two commits of a 10,000-file repository reads all of
//! its trees even when one file changed: in a run that is paid per story,
//! several times, and it grows with the repository. Here a subtree whose id
//! is the same on both sides is skipped without being read, as git itself
//! does; only the trees along changed paths are loaded.
//!
//! The result lists files (blobs, symlinks and submodule commits), never
//! directories, like a diff without rename detection: a file turned into a
//! directory is the file deleted and the directory's files added. Callers
//! that need line diffs hand these paths to libgit2 as a pathspec, which
//! keeps its iterators out of every other subtree.

use git2::{ObjectType, Oid, Repository, Tree, TreeEntry};

/// How a path differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// Only the new tree has it.
    Added,
    /// Only the old tree has it.
    Deleted,
    /// Both have it, with other contents or another mode.
    Modified,
}

/// Every file path (repository-relative, `/`-separated, as bytes: git names
/// need not be UTF-8) whose entry differs between `old` (`None`: the empty
/// tree) and `new`, in tree order.
pub fn changed_paths(
    repo: &Repository,
    old: Option<&Tree<'_>>,
    new: &Tree<'_>,
) -> Result<Vec<(Vec<u8>, Change)>, git2::Error> {
    let mut out = Vec::new();
    match old {
        Some(old) => compare(repo, b"", old, new, &mut out)?,
        None => list(repo, b"", new, Change::Added, &mut out)?,
    }
    Ok(out)
}

/// Walks two trees' entries side by side (both are sorted in git's order,
/// see [`git_order`]).
fn compare(
    repo: &Repository,
    prefix: &[u8],
    old: &Tree<'_>,
    new: &Tree<'_>,
    out: &mut Vec<(Vec<u8>, Change)>,
) -> Result<(), git2::Error> {
    let (mut o, mut n) = (old.iter().peekable(), new.iter().peekable());
    loop {
        let order = match (o.peek(), n.peek()) {
            (None, None) => return Ok(()),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => git_order(a, b),
        };
        match order {
            std::cmp::Ordering::Less => {
                if let Some(gone) = o.next() {
                    entry_whole(repo, prefix, &gone, Change::Deleted, out)?;
                }
            }
            std::cmp::Ordering::Greater => {
                if let Some(came) = n.next() {
                    entry_whole(repo, prefix, &came, Change::Added, out)?;
                }
            }
            std::cmp::Ordering::Equal => {
                if let (Some(a), Some(b)) = (o.next(), n.next()) {
                    same_name(repo, prefix, &a, &b, out)?;
                }
            }
        }
    }
}

/// Two entries of one name and kind (tree or not): equal ones (same id and
/// mode) are skipped unread; two trees are compared; two files are one
/// modified file, or one deleted and one added when their kind differs.
fn same_name(
    repo: &Repository,
    prefix: &[u8],
    a: &TreeEntry<'_>,
    b: &TreeEntry<'_>,
    out: &mut Vec<(Vec<u8>, Change)>,
) -> Result<(), git2::Error> {
    if a.id() == b.id() && a.filemode() == b.filemode() {
        return Ok(());
    }
    match (is_tree(a), is_tree(b)) {
        (true, true) => {
            let path = join(prefix, a);
            compare(repo, &path, &tree(repo, a.id())?, &tree(repo, b.id())?, out)
        }
        // A file whose kind stays (an executable bit or contents changed).
        (false, false) if kind(a) == kind(b) => {
            out.push((join(prefix, b), Change::Modified));
            Ok(())
        }
        // A file turned into a symlink or a submodule, or the reverse: as
        // libgit2 reports it without typechange detection, the old entry
        // deleted and the new one added.
        _ => {
            entry_whole(repo, prefix, a, Change::Deleted, out)?;
            entry_whole(repo, prefix, b, Change::Added, out)
        }
    }
}

/// An entry present on one side only: a file, or every file of a tree.
fn entry_whole(
    repo: &Repository,
    prefix: &[u8],
    entry: &TreeEntry<'_>,
    change: Change,
    out: &mut Vec<(Vec<u8>, Change)>,
) -> Result<(), git2::Error> {
    let path = join(prefix, entry);
    if is_tree(entry) {
        list(repo, &path, &tree(repo, entry.id())?, change, out)
    } else {
        out.push((path, change));
        Ok(())
    }
}

/// Every file of `tree`, under `prefix`.
fn list(
    repo: &Repository,
    prefix: &[u8],
    tree: &Tree<'_>,
    change: Change,
    out: &mut Vec<(Vec<u8>, Change)>,
) -> Result<(), git2::Error> {
    for entry in tree.iter() {
        entry_whole(repo, prefix, &entry, change, out)?;
    }
    Ok(())
}

/// Git's order of tree entries: by name, a tree's name read as ending in
/// `/` (so `a.txt` comes before the directory `a`, and a file `x` and a
/// directory `x` are different entries).
fn git_order(a: &TreeEntry<'_>, b: &TreeEntry<'_>) -> std::cmp::Ordering {
    order_key(a).cmp(order_key(b))
}

fn order_key<'e>(e: &'e TreeEntry<'_>) -> impl Iterator<Item = u8> + 'e {
    let slash: &'static [u8] = if is_tree(e) { b"/" } else { b"" };
    e.name_bytes().iter().chain(slash).copied()
}

/// The kind of file a mode names (regular, symlink, submodule), without
/// its permission bits.
fn kind(e: &TreeEntry<'_>) -> i32 {
    e.filemode() & 0o170000
}

fn is_tree(e: &TreeEntry<'_>) -> bool {
    e.kind() == Some(ObjectType::Tree)
}

fn tree(repo: &Repository, id: Oid) -> Result<Tree<'_>, git2::Error> {
    repo.find_tree(id)
}

fn join(prefix: &[u8], e: &TreeEntry<'_>) -> Vec<u8> {
    let name = e.name_bytes();
    let mut path = Vec::with_capacity(prefix.len() + 1 + name.len());
    if !prefix.is_empty() {
        path.extend_from_slice(prefix);
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

#[cfg(test)]
pub(crate) mod tests;
