//! The lines a change added and removed, with their line numbers and the
//! file's text on both sides: what a reviewer (or a stub detector) reads.
//!
//! [`diff_lines`] compares a revision with another revision, or with the
//! working tree (staged, unstaged and untracked files, not ignored ones).
//! cascade's own state (untracked files under `.cascade/`) is left out, but a
//! file under `.cascade/` that is committed (a project's `gates.json`,
//! `verify.json`, `config.json`) is part of the change like any other: an
//! edit to it is exactly what verification must see. Binary files carry no
//! text, and a file larger than [`MAX_TEXT_BYTES`] carries no text either
//! (nothing a person wrote by hand is that large).
//!
//! [`diff_stat`] counts the lines a branch changed since it left another
//! (a story's `git diff --stat` against its target).
//!
//! [`lines_changed`] counts the lines a change added and removed.
//! [`file_at`] reads one file of a commit without checking anything out,
//! [`blob_ids_at`] names a commit's files by blob id without reading them,
//! [`is_tracked`] says whether a path is in a worktree's index, and
//! [`export_tree`] writes a commit's whole tree into a directory (a scratch
//! copy of a base commit to run tests in).

use std::path::Path;

use git2::{Delta, DiffOptions, ObjectType, Oid, Patch, Repository};

use crate::status::is_cascade_path;
use crate::GitError;

/// Files larger than this carry no text.
pub const MAX_TEXT_BYTES: usize = 2 * 1024 * 1024;

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileStatus {
    Added,
    Modified,
    Deleted,
    Renamed,
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    /// Repository-relative path after the change (before it, for a deleted file).
    pub path: String,
    /// The path before a rename.
    pub old_path: Option<String>,
    pub status: FileStatus,
    /// 1-based line numbers of added lines, in the new text.
    pub added: Vec<u32>,
    /// 1-based line numbers of removed lines, in the old text.
    pub removed: Vec<u32>,
    /// The text before the change (`None`: added, binary or too large).
    pub old_text: Option<String>,
    /// The text after the change (`None`: deleted, binary, too large or a
    /// symbolic link).
    pub new_text: Option<String>,
    /// Where the file points when the change leaves it a symbolic link
    /// (git's mode 120000): its target as written, never followed.
    pub link_target: Option<String>,
}

/// The lines that differ between revision `from` and revision `to`, or the
/// working tree when `to` is `None`. `workdir` is any directory of the
/// repository (a linked worktree diffs its own working tree).
pub fn diff_lines(workdir: &Path, from: &str, to: Option<&str>) -> Result<Vec<FileDiff>, GitError> {
    diff_lines_as(workdir, from, to, Lines::Counted)
}

/// How [`diff_lines_as`] numbers the lines of a whole file added or deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lines {
    /// Counted from its text, where that is provably what a patch says
    /// ([`whole_file_lines`]).
    Counted,
    /// Always from a patch (what `Counted` must agree with).
    #[cfg(test)]
    Patched,
}

fn diff_lines_as(
    workdir: &Path,
    from: &str,
    to: Option<&str>,
    lines: Lines,
) -> Result<Vec<FileDiff>, GitError> {
    let repo = open(workdir)?;
    let mut opts = DiffOptions::new();
    opts.context_lines(0).include_typechange(true);
    let mut diff = diff_of(&repo, from, to, &mut opts)?;
    diff.find_similar(None)
        .map_err(GitError::git("find renames"))?;
    let root = repo.workdir().map(Path::to_path_buf);
    // Between two commits, with no attributes anywhere, a file added or
    // deleted whole is all added or all removed lines (see
    // `whole_file_lines`): counted rather than diffed, which at 100,000
    // files is most of the time (libgit2 looks up each file's attributes).
    let counted = lines == Lines::Counted && to.is_some() && no_attributes(&repo, &diff);
    let mut out = Vec::new();
    for idx in 0..diff.deltas().len() {
        let Some(delta) = diff.get_delta(idx) else {
            continue;
        };
        let status = match delta.status() {
            Delta::Added | Delta::Untracked | Delta::Copied => FileStatus::Added,
            Delta::Deleted => FileStatus::Deleted,
            Delta::Renamed => FileStatus::Renamed,
            Delta::Modified | Delta::Typechange => FileStatus::Modified,
            _ => continue,
        };
        let new_path = delta
            .new_file()
            .path()
            .map(|p| p.to_string_lossy().into_owned());
        let old_path = delta
            .old_file()
            .path()
            .map(|p| p.to_string_lossy().into_owned());
        let Some(path) = new_path.clone().or_else(|| old_path.clone()) else {
            continue;
        };
        if own_state(&delta) {
            continue;
        }
        // Each side's blob is read once: for its text, and for its lines
        // when the file is counted whole.
        let blob = |id: git2::Oid| match id.is_zero() {
            true => None,
            false => repo.find_blob(id).ok(),
        };
        let old_blob = match status {
            FileStatus::Added => None,
            _ => blob(delta.old_file().id()),
        };
        let new_blob = match status {
            FileStatus::Deleted => None,
            _ if to.is_none() => None,
            _ => blob(delta.new_file().id()),
        };
        let old_text = old_blob.as_ref().and_then(|b| text_of(b.content()));
        let link_target = match status {
            FileStatus::Deleted => None,
            _ if delta.new_file().mode() != git2::FileMode::Link => None,
            _ if to.is_none() => root
                .as_ref()
                .and_then(|r| std::fs::read_link(r.join(&path)).ok())
                .map(|t| t.to_string_lossy().into_owned()),
            _ => new_blob
                .as_ref()
                .map(|b| String::from_utf8_lossy(b.content()).into_owned()),
        };
        let new_text = match status {
            FileStatus::Deleted => None,
            // A link's text is its target (read through it, the working
            // tree would give the content of whatever it points at).
            _ if link_target.is_some() => None,
            _ if to.is_none() => root
                .as_ref()
                .and_then(|r| std::fs::read(r.join(&path)).ok())
                .and_then(|b| text_of(&b)),
            _ => new_blob.as_ref().and_then(|b| text_of(b.content())),
        };
        let mut file = FileDiff {
            path,
            old_path: (status == FileStatus::Renamed)
                .then_some(old_path)
                .flatten(),
            status,
            added: Vec::new(),
            removed: Vec::new(),
            old_text,
            new_text,
            link_target,
        };
        let whole = match delta.status() {
            Delta::Added if counted => Some((&mut file.added, &new_blob)),
            Delta::Deleted if counted => Some((&mut file.removed, &old_blob)),
            _ => None,
        };
        if let Some((numbers, blob)) = whole {
            let n = blob.as_ref().map_or(0, |b| whole_file_lines(b.content()));
            numbers.extend(1..=n);
        } else if let Ok(Some(patch)) = Patch::from_diff(&diff, idx) {
            for h in 0..patch.num_hunks() {
                let lines = patch.num_lines_in_hunk(h).unwrap_or(0);
                for l in 0..lines {
                    let Ok(line) = patch.line_in_hunk(h, l) else {
                        continue;
                    };
                    match line.origin() {
                        '+' => file.added.extend(line.new_lineno()),
                        '-' => file.removed.extend(line.old_lineno()),
                        _ => {}
                    }
                }
            }
        }
        out.push(file);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The change `from..to` (or `from` against the working tree) as a unified
/// diff with three lines of context, at most `max_bytes` long (cut at a line
/// end, with a note saying how much was left out).
pub fn diff_patch(
    workdir: &Path,
    from: &str,
    to: Option<&str>,
    max_bytes: usize,
) -> Result<String, GitError> {
    let repo = open(workdir)?;
    let diff = diff_of(&repo, from, to, &mut DiffOptions::new())?;
    let mut out = String::new();
    let mut left_out = 0usize;
    diff.print(git2::DiffFormat::Patch, |delta, _, line| {
        if own_state(&delta) {
            return true;
        }
        let text = String::from_utf8_lossy(line.content());
        let piece = match line.origin() {
            '+' | '-' | ' ' => format!("{}{text}", line.origin()),
            _ => text.into_owned(),
        };
        if left_out > 0 || out.len() + piece.len() > max_bytes {
            left_out += piece.len();
        } else {
            out.push_str(&piece);
        }
        true
    })
    .map_err(GitError::git("print diff"))?;
    if left_out > 0 {
        out.push_str(&format!(
            "\n[... {left_out} more bytes of the diff left out ...]\n"
        ));
    }
    Ok(out)
}

/// Lines added and removed in one file of a change (`git diff --stat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    /// Repository-relative path after the change (before it, for a deleted file).
    pub path: String,
    pub added: usize,
    pub removed: usize,
    /// Binary content: no lines to count.
    pub binary: bool,
}

/// What revision `head` changed since it left revision `base`: the diff from
/// their merge base to `head` (`git diff --stat base...head`), so a story
/// branch shows its own change, not what its target gained since. A `head`
/// that `base` contains already (fast-forwarded into it) shows its own
/// commit's change. Files in path order; unrelated histories diff from the
/// empty tree.
pub fn diff_stat(workdir: &Path, base: &str, head: &str) -> Result<Vec<FileStat>, GitError> {
    let repo = discover(workdir)?;
    let commit = |rev: &str| {
        repo.revparse_single(rev)
            .and_then(|o| o.peel_to_commit())
            .map_err(GitError::git(format!("resolve revision '{rev}'")))
    };
    let (base_commit, head_commit) = (commit(base)?, commit(head)?);
    let fork = match repo.merge_base(base_commit.id(), head_commit.id()) {
        // `head` merged already (by a fast-forward): its own commit's change.
        Ok(oid) if oid == head_commit.id() && head_commit.parent_count() > 0 => Some(
            head_commit
                .parent(0)
                .and_then(|c| c.tree())
                .map_err(GitError::git(format!("read the parent of '{head}'")))?,
        ),
        Ok(oid) => Some(
            repo.find_commit(oid)
                .and_then(|c| c.tree())
                .map_err(GitError::git("read the merge base"))?,
        ),
        Err(e) if e.code() == git2::ErrorCode::NotFound => None,
        Err(e) => {
            return Err(GitError::git(format!(
                "find the merge base of '{base}' and '{head}'"
            ))(e))
        }
    };
    let head_tree = head_commit
        .tree()
        .map_err(GitError::git(format!("read the tree of '{head}'")))?;
    let diff = repo
        .diff_tree_to_tree(fork.as_ref(), Some(&head_tree), None)
        .map_err(GitError::git("diff"))?;
    let mut out = Vec::new();
    for idx in 0..diff.deltas().len() {
        let Some(delta) = diff.get_delta(idx) else {
            continue;
        };
        let path = delta
            .new_file()
            .path()
            .or_else(|| delta.old_file().path())
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (added, removed, binary) = match Patch::from_diff(&diff, idx) {
            Ok(Some(patch)) => {
                let binary = patch.delta().flags().is_binary();
                let (_, added, removed) = patch
                    .line_stats()
                    .map_err(GitError::git("count changed lines"))?;
                (added, removed, binary)
            }
            // libgit2 makes no patch of a binary file.
            Ok(None) => (0, 0, true),
            Err(e) => return Err(GitError::git("diff")(e)),
        };
        out.push(FileStat {
            path,
            added,
            removed,
            binary,
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Lines added plus lines removed between revisions `from` and `to`: the
/// size of a change (a race prefers the smaller of two passing ones).
pub fn lines_changed(workdir: &Path, from: &str, to: &str) -> Result<u64, GitError> {
    let repo = open(workdir)?;
    let diff = diff_of(&repo, from, Some(to), &mut DiffOptions::new())?;
    let stats = diff.stats().map_err(GitError::git("diff stats"))?;
    Ok((stats.insertions() + stats.deletions()) as u64)
}

/// Whether a delta is cascade's own state: an untracked file under
/// `.cascade/` (a tracked one is the project's configuration).
fn own_state(delta: &git2::DiffDelta<'_>) -> bool {
    matches!(delta.status(), Delta::Untracked | Delta::Ignored)
        && [delta.new_file().path(), delta.old_file().path()]
            .into_iter()
            .flatten()
            .any(|p| is_cascade_path(p.to_string_lossy().as_bytes()))
}

/// The bytes of the file at repository-relative `path` in revision `rev`
/// (`None` when the commit has no such file). `workdir` is any directory of
/// the repository.
pub fn file_at(workdir: &Path, rev: &str, path: &str) -> Result<Option<Vec<u8>>, GitError> {
    let repo = discover(workdir)?;
    let tree = tree_at(&repo, rev)?;
    let Some(entry) = entry_at(&tree, rev, path)? else {
        return Ok(None);
    };
    let bytes = match entry.to_object(&repo).map(|o| o.into_blob()) {
        Ok(Ok(blob)) => Some(blob.content().to_vec()),
        // A folder (or a submodule) at that path is not a file.
        Ok(Err(_)) => None,
        Err(e) => return Err(GitError::git(format!("read '{path}' at '{rev}'"))(e)),
    };
    Ok(bytes)
}

/// The blob id of each repository-relative path in `paths` at revision
/// `rev` (`None` where the commit has no file there), without reading the
/// files: two commits whose ids agree hold the same contents.
pub fn blob_ids_at(
    workdir: &Path,
    rev: &str,
    paths: &[&str],
) -> Result<Vec<Option<Oid>>, GitError> {
    let repo = discover(workdir)?;
    let tree = tree_at(&repo, rev)?;
    paths
        .iter()
        .map(|path| {
            Ok(entry_at(&tree, rev, path)?
                .filter(|e| e.kind() == Some(ObjectType::Blob))
                .map(|e| e.id()))
        })
        .collect()
}

fn discover(workdir: &Path) -> Result<Repository, GitError> {
    Repository::discover(workdir).map_err(|_| GitError::NotARepo {
        path: workdir.to_path_buf(),
    })
}

fn tree_at<'r>(repo: &'r Repository, rev: &str) -> Result<git2::Tree<'r>, GitError> {
    repo.revparse_single(rev)
        .and_then(|o| o.peel_to_tree())
        .map_err(GitError::git(format!("resolve revision '{rev}'")))
}

/// The entry at `path` in `tree` (of revision `rev`, for messages).
fn entry_at(
    tree: &git2::Tree<'_>,
    rev: &str,
    path: &str,
) -> Result<Option<git2::TreeEntry<'static>>, GitError> {
    match tree.get_path(Path::new(path)) {
        Ok(e) => Ok(Some(e)),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(GitError::git(format!("read '{path}' at '{rev}'"))(e)),
    }
}

/// Whether repository-relative `path` is tracked (in the index of the
/// worktree containing `workdir`).
pub fn is_tracked(workdir: &Path, path: &str) -> Result<bool, GitError> {
    let repo = discover(workdir)?;
    let index = repo.index().map_err(GitError::git("read index"))?;
    Ok(index.get_path(Path::new(path), 0).is_some())
}

/// Writes the tree of revision `rev` into `dest` (created if missing; files
/// already there are overwritten), without touching any worktree, index or
/// branch of the repository.
pub fn export_tree(workdir: &Path, rev: &str, dest: &Path) -> Result<(), GitError> {
    let repo = discover(workdir)?;
    let tree = tree_at(&repo, rev)?;
    std::fs::create_dir_all(dest).map_err(GitError::io("create", dest))?;
    let mut co = git2::build::CheckoutBuilder::new();
    co.target_dir(dest)
        .force()
        .recreate_missing(true)
        .update_index(false);
    repo.checkout_tree(tree.as_object(), Some(&mut co))
        .map_err(GitError::git(format!(
            "write the tree of '{rev}' to '{}'",
            dest.display()
        )))
}

fn open(workdir: &Path) -> Result<Repository, GitError> {
    Repository::open(workdir).map_err(|_| GitError::NotARepo {
        path: workdir.to_path_buf(),
    })
}

/// The diff of revision `from` against revision `to`, or against the
/// working tree (untracked files included) when `to` is `None`.
fn diff_of<'r>(
    repo: &'r Repository,
    from: &str,
    to: Option<&str>,
    opts: &mut DiffOptions,
) -> Result<git2::Diff<'r>, GitError> {
    let old_tree = tree_at(repo, from)?;
    match to {
        Some(rev) => {
            // libgit2 would read every subtree of both sides; limited to
            // the files that differ, its iterators skip the rest unread.
            let new_tree = tree_at(repo, rev)?;
            let changed = crate::treediff::changed_paths(repo, Some(&old_tree), &new_tree)
                .map_err(GitError::git("diff"))?;
            if changed.is_empty() {
                // (An empty pathspec would mean every path.)
                return repo
                    .diff_tree_to_tree(None, None, Some(opts))
                    .map_err(GitError::git("diff"));
            }
            opts.disable_pathspec_match(true);
            for (path, _) in changed {
                opts.pathspec(path);
            }
            repo.diff_tree_to_tree(Some(&old_tree), Some(&new_tree), Some(opts))
        }
        None => {
            opts.include_untracked(true)
                .recurse_untracked_dirs(true)
                .show_untracked_content(true);
            repo.diff_tree_to_workdir_with_index(Some(&old_tree), Some(opts))
        }
    }
    .map_err(GitError::git("diff"))
}

/// The lines a patch of a whole file added (or deleted) has, one per line of
/// its text, when nothing but its content decides how it diffs (libgit2's
/// default diff driver, no attributes): none when it is binary (larger than
/// libgit2's 512 MiB limit, or a NUL byte in its first 8,000), else every
/// line, the last one counting without its newline too.
fn whole_file_lines(content: &[u8]) -> u32 {
    const MAX_DIFF_BYTES: usize = 512 * 1024 * 1024;
    const BYTES_TO_CHECK_NUL: usize = 8000;
    let head = &content[..content.len().min(BYTES_TO_CHECK_NUL)];
    if content.len() > MAX_DIFF_BYTES || head.contains(&0) {
        return 0;
    }
    let newlines = content.iter().filter(|&&b| b == b'\n').count();
    let unended = content.last().is_some_and(|&b| b != b'\n');
    (newlines + usize::from(unended)) as u32
}

/// Whether no gitattributes can apply to any file of `diff`, so that each
/// diffs with libgit2's default driver. Every place libgit2 reads them from
/// is looked at (`collect_attr_files` in its attr.c): the repository's
/// `info/attributes`, a `.gitattributes` in each directory on the way to a
/// changed file (on disk or in the index),
/// `core.attributesFile` (set at all: not sure) or the XDG default
/// `git/attributes`, and the system's `/etc/gitattributes`. Anything found,
/// or a home not known: `false` (the files are diffed one by one).
fn no_attributes(repo: &Repository, diff: &git2::Diff<'_>) -> bool {
    let Some(workdir) = repo.workdir() else {
        return false;
    };
    let exists = |p: &Path| p.symlink_metadata().is_ok();
    if [repo.path(), repo.commondir()]
        .iter()
        .any(|d| exists(&d.join("info").join("attributes")))
    {
        return false;
    }
    if repo
        .config()
        .ok()
        .map_or(true, |c| c.get_entry("core.attributesfile").is_ok())
    {
        return false;
    }
    let homes = [
        ("XDG_CONFIG_HOME", "git/attributes"),
        ("HOME", ".config/git/attributes"),
    ];
    let mut known = false;
    for (var, file) in homes {
        if let Some(home) = std::env::var_os(var).filter(|h| !h.is_empty()) {
            known = true;
            if exists(&Path::new(&home).join(file)) {
                return false;
            }
        }
    }
    if !known || exists(Path::new("/etc/gitattributes")) {
        return false;
    }
    let Ok(index) = repo.index() else {
        return false;
    };
    // The directories on the way to each changed file, each looked at once
    // (a lookup in the index apiece: the index is not walked, its size is
    // the repository's).
    let mut seen: std::collections::HashSet<&Path> = std::collections::HashSet::new();
    for delta in diff.deltas() {
        for file in [delta.old_file().path(), delta.new_file().path()] {
            let mut dir = file.and_then(Path::parent);
            while let Some(d) = dir {
                if !seen.insert(d) {
                    break;
                }
                let attributes = d.join(".gitattributes");
                if index.get_path(&attributes, 0).is_some() || exists(&workdir.join(&attributes)) {
                    return false;
                }
                dir = d.parent();
            }
        }
    }
    true
}

/// The bytes as text, unless binary or too large.
fn text_of(bytes: &[u8]) -> Option<String> {
    if bytes.len() > MAX_TEXT_BYTES || bytes.contains(&0) {
        return None;
    }
    Some(String::from_utf8_lossy(bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_test_support::git;

    #[test]
    fn added_and_removed_lines_are_numbered_on_both_sides() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::write(d.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(d.join("gone.txt"), "x\n").unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "base"]);
        std::fs::write(d.join("a.txt"), "one\nTWO\nthree\nfour\n").unwrap();
        std::fs::remove_file(d.join("gone.txt")).unwrap();
        std::fs::write(d.join("new.txt"), "fresh\n").unwrap();
        std::fs::write(d.join("bin.dat"), b"\0\x01").unwrap();

        let work = diff_lines(d, "HEAD", None).unwrap();
        let paths: Vec<&str> = work.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a.txt", "bin.dat", "gone.txt", "new.txt"]);
        let a = &work[0];
        assert_eq!(a.status, FileStatus::Modified);
        assert_eq!(a.added, [2, 4]);
        assert_eq!(a.removed, [2]);
        assert_eq!(a.old_text.as_deref(), Some("one\ntwo\nthree\n"));
        assert_eq!(a.new_text.as_deref(), Some("one\nTWO\nthree\nfour\n"));
        assert_eq!(work[1].new_text, None, "binary files carry no text");
        assert_eq!(work[2].status, FileStatus::Deleted);
        assert_eq!(work[2].removed, [1]);
        assert_eq!(work[3].status, FileStatus::Added);
        assert_eq!(work[3].added, [1]);

        // The same change, committed, as a range.
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "change"]);
        let range = diff_lines(d, "HEAD~1", Some("HEAD")).unwrap();
        assert_eq!(range, work);
        // 2 added and 1 removed in a.txt, 1 each in gone.txt and new.txt,
        // none counted for the binary file.
        assert_eq!(lines_changed(d, "HEAD~1", "HEAD").unwrap(), 5);
        assert!(diff_lines(d, "nope", None).is_err());
        let patch = diff_patch(d, "HEAD~1", Some("HEAD"), 1 << 20).unwrap();
        assert!(patch.contains("-two\n+TWO\n"), "{patch}");
        assert!(patch.contains("+++ b/new.txt"), "{patch}");
        let cut = diff_patch(d, "HEAD~1", Some("HEAD"), 40).unwrap();
        assert!(cut.contains("more bytes of the diff left out"), "{cut}");
    }

    /// A branch's stat counts only its own change, not what the branch it
    /// left gained since.
    #[test]
    fn a_branch_stat_counts_its_own_change_since_the_fork() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::write(d.join("a.txt"), "one\ntwo\n").unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "base"]);
        git(d, &["checkout", "-q", "-b", "story"]);
        std::fs::write(d.join("a.txt"), "one\nTWO\nthree\n").unwrap();
        std::fs::write(d.join("bin.dat"), b"\0\x01").unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "story"]);
        git(d, &["checkout", "-q", "main"]);
        std::fs::write(d.join("later.txt"), "main moved on\n").unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "later"]);

        let stat = diff_stat(d, "main", "story").unwrap();
        let rows: Vec<(&str, usize, usize, bool)> = stat
            .iter()
            .map(|f| (f.path.as_str(), f.added, f.removed, f.binary))
            .collect();
        assert_eq!(rows, [("a.txt", 2, 1, false), ("bin.dat", 0, 0, true)]);
        assert!(diff_stat(d, "main", "no-such-branch").is_err());
        // Fast-forwarded into its target, the branch still shows its change.
        git(d, &["checkout", "-q", "-b", "ff", "story"]);
        git(d, &["checkout", "-q", "story"]);
        git(d, &["merge", "-q", "--ff-only", "ff"]);
        let merged = diff_stat(d, "ff", "story").unwrap();
        assert_eq!(merged, stat);
    }

    /// Files added and deleted whole are counted only where that is what
    /// their patches say: every shape of text (no lines, no last newline,
    /// CRLF, a NUL within libgit2's first 8,000 bytes and after them), in
    /// the root and in a directory; and not where an attribute decides.
    #[test]
    fn whole_files_counted_say_what_their_patches_say() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q", "-b", "main"]);
        let late_nul = [&b"a\n".repeat(4001)[..], b"\0\n"].concat();
        let shapes: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("one", b"x".to_vec()),
            ("one-ended", b"x\n".to_vec()),
            ("two-unended", b"a\nb".to_vec()),
            ("crlf", b"a\r\nb\r\n".to_vec()),
            ("blank", b"\n\n\n".to_vec()),
            ("nul", b"\0abc\n".to_vec()),
            ("late-nul", late_nul),
        ];
        std::fs::create_dir_all(d.join("sub/deeper")).unwrap();
        std::fs::write(d.join("keep.txt"), "one\ntwo\n").unwrap();
        for (name, bytes) in &shapes {
            std::fs::write(d.join(format!("old-{name}")), bytes).unwrap();
        }
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "base"]);
        // Deleted in one commit, added in the next (together, they would
        // be renames).
        std::fs::write(d.join("keep.txt"), "one\nTWO\n").unwrap();
        for (name, _) in &shapes {
            std::fs::remove_file(d.join(format!("old-{name}"))).unwrap();
        }
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "deleted"]);
        for (name, bytes) in &shapes {
            std::fs::write(d.join(format!("new-{name}")), bytes).unwrap();
            std::fs::write(d.join(format!("sub/deeper/{name}.txt")), bytes).unwrap();
        }
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "added"]);
        let same = |from: &str, to: &str| {
            let counted = diff_lines_as(d, from, Some(to), Lines::Counted).unwrap();
            let patched = diff_lines_as(d, from, Some(to), Lines::Patched).unwrap();
            assert_eq!(counted, patched);
            counted
        };
        let deleted = same("HEAD~2", "HEAD~1");
        let removed = |path: &str| {
            deleted
                .iter()
                .find(|f| f.path == path)
                .unwrap()
                .removed
                .clone()
        };
        assert_eq!(removed("old-crlf"), [1, 2]);
        assert_eq!(removed("old-nul"), Vec::<u32>::new(), "binary");
        let files = same("HEAD~1", "HEAD");
        let repo = open(d).unwrap();
        let diff = diff_of(&repo, "HEAD~1", Some("HEAD"), &mut DiffOptions::new()).unwrap();
        assert!(no_attributes(&repo, &diff), "the counted way is taken");
        let added = |path: &str| files.iter().find(|f| f.path == path).unwrap().added.clone();
        assert_eq!(added("new-two-unended"), [1, 2]);
        assert_eq!(added("new-nul"), Vec::<u32>::new(), "binary");
        assert_eq!(
            added("new-late-nul").len(),
            4002,
            "a NUL past 8,000 bytes: text"
        );
        assert_eq!(added("sub/deeper/crlf.txt"), [1, 2]);

        // An attribute in a directory on the way makes a text file binary.
        std::fs::write(d.join("sub/.gitattributes"), "*.txt -diff\n").unwrap();
        std::fs::write(d.join("sub/deeper/late.txt"), "text\n").unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "attributes"]);
        let files = same("HEAD~1", "HEAD");
        let late = files
            .iter()
            .find(|f| f.path == "sub/deeper/late.txt")
            .unwrap();
        assert!(late.added.is_empty(), "{late:?}");
        let diff = diff_of(&repo, "HEAD~1", Some("HEAD"), &mut DiffOptions::new()).unwrap();
        assert!(!no_attributes(&repo, &diff));
        // Only on disk (not committed), it counts too.
        git(d, &["rm", "-q", "--cached", "sub/.gitattributes"]);
        assert!(!no_attributes(&repo, &diff));
        // Only in the index, too (read by a handle opened after the change,
        // as each diff's is).
        git(d, &["add", "sub/.gitattributes"]);
        std::fs::remove_file(d.join("sub/.gitattributes")).unwrap();
        assert!(!no_attributes(&open(d).unwrap(), &diff));
        // Off the way to every changed file, in the index and on disk: no
        // attribute of theirs applies.
        git(d, &["rm", "-q", "--cached", "sub/.gitattributes"]);
        std::fs::create_dir_all(d.join("elsewhere")).unwrap();
        std::fs::write(d.join("elsewhere/.gitattributes"), "*.txt -diff\n").unwrap();
        git(d, &["add", "elsewhere/.gitattributes"]);
        assert!(no_attributes(&open(d).unwrap(), &diff));
    }

    #[test]
    fn committed_cascade_files_are_part_of_the_change_and_commits_read_without_checkout() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::create_dir_all(d.join(".cascade")).unwrap();
        std::fs::write(d.join(".cascade/gates.json"), "{\"gates\": [1]}\n").unwrap();
        std::fs::write(d.join("a.txt"), "a\n").unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "base"]);
        // cascade's own state beside it: untracked, never part of a change.
        std::fs::write(d.join(".cascade/state.json"), "{}\n").unwrap();
        std::fs::write(d.join(".cascade/gates.json"), "{\"gates\": []}\n").unwrap();
        let work = diff_lines(d, "HEAD", None).unwrap();
        let paths: Vec<&str> = work.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, [".cascade/gates.json"]);
        git(d, &["commit", "-q", "-am", "edit gates"]);
        let range = diff_lines(d, "HEAD~1", Some("HEAD")).unwrap();
        assert_eq!(range.len(), 1);
        assert_eq!(range[0].added, [1]);
        assert!(diff_patch(d, "HEAD~1", Some("HEAD"), 1 << 20)
            .unwrap()
            .contains("+{\"gates\": []}"));

        assert_eq!(
            file_at(d, "HEAD~1", ".cascade/gates.json")
                .unwrap()
                .as_deref(),
            Some(&b"{\"gates\": [1]}\n"[..])
        );
        assert_eq!(file_at(d, "HEAD", "missing.txt").unwrap(), None);
        assert_eq!(file_at(d, "HEAD", ".cascade").unwrap(), None, "a folder");
        assert!(file_at(d, "nope", "a.txt").is_err());
        assert!(is_tracked(d, ".cascade/gates.json").unwrap());
        assert!(!is_tracked(d, ".cascade/state.json").unwrap());

        let elsewhere = tempfile::tempdir().unwrap();
        let out = elsewhere.path().join("export");
        export_tree(d, "HEAD~1", &out).unwrap();
        assert_eq!(std::fs::read_to_string(out.join("a.txt")).unwrap(), "a\n");
        assert_eq!(
            std::fs::read_to_string(out.join(".cascade/gates.json")).unwrap(),
            "{\"gates\": [1]}\n"
        );
        // The repository's own worktree and index are untouched.
        let work = diff_lines(d, "HEAD", None).unwrap();
        assert!(work.is_empty(), "{work:?}");
    }
}
