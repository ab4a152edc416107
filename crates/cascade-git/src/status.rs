//! The content-relevant state of a working tree, as fast as `git status`.
//!
//! [`scan`] lists every path git would show in a tree listing (tracked paths
//! from the index, plus untracked paths that are not ignored) and says for each
//! one whether the blob id recorded in the index can be trusted (the file's stat
//! data still matches the index entry and the entry is not racily clean) or the
//! file must be hashed. It never hashes anything itself: [`crate::fingerprint`]
//! does that, in parallel, for the paths that need it.
//!
//! How, and why this way (see the fingerprint bench): one parallel walk
//! (rayon, a task per directory) reads every directory once. A name that is in
//! the index is `fstatat`ed relative to its directory (cheaper than an `lstat`
//! of the full path, which resolves every component again) and compared with
//! the index entry; a name that is not in the index is checked against the
//! gitignore rules (`.gitignore` at every level, `info/exclude` of the common
//! dir, the global excludes file; matched with the `ignore` crate's gitignore
//! engine). Only untracked names and directories are ever matched against
//! ignore globs, never the tracked files. Ignored directories are not entered;
//! tracked files git still tracks inside them, and deleted files, are settled
//! by a pass over the index entries the walk did not see. libgit2's status (a
//! single-threaded full diff) and the `ignore` crate's walker (which matches
//! every file against the globs and stats paths from the root) were both
//! measurably slower.
//!
//! [`changed_files`] lists what changed relative to a base commit (untracked
//! included), for incremental gates.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use git2::{Oid, Repository};
use rayon::prelude::*;

use crate::repo::CASCADE_DIR;
use crate::GitError;

/// Git file modes as they appear in trees.
pub mod mode {
    /// A regular file.
    pub const FILE: u32 = 0o100644;
    /// An executable regular file.
    pub const EXECUTABLE: u32 = 0o100755;
    /// A symbolic link (its blob is the link target).
    pub const SYMLINK: u32 = 0o120000;
    /// A submodule (its id is a commit id).
    pub const GITLINK: u32 = 0o160000;
}

/// One path of a working tree and how to learn its blob id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathState {
    /// Repository-relative path with `/` separators.
    pub path: String,
    /// Git mode of the file as it is on disk (executable bit included).
    pub mode: u32,
    /// What to do to get the blob id.
    pub source: Source,
}

/// Where a path's blob id comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The index entry is up to date: its id is the file's blob id.
    Index(Oid),
    /// The file must be hashed (modified, untracked, racily clean, or never staged).
    Hash,
}

/// The paths of a working tree; see [`scan`].
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Every present path, in no particular order.
    pub paths: Vec<PathState>,
    /// How many paths were tracked (came from the index).
    pub tracked: usize,
}

/// Lists the paths of the worktree at `workdir` (its root) with how to get
/// their blob ids. Deleted tracked files are left out. `.cascade/` is never
/// listed.
pub fn scan(repo: &Repository, workdir: &Path) -> Result<Scan, GitError> {
    let index = repo.index().map_err(GitError::git("read index"))?;
    // Entries modified at or after the index was written may have changed
    // within the same timestamp tick ("racily clean"); git re-checks their
    // content, and so do we.
    let index_mtime = std::fs::metadata(repo.path().join("index"))
        .ok()
        .map(|m| (m.mtime(), m.mtime_nsec()));

    let mut entries: Vec<git2::IndexEntry> = Vec::with_capacity(index.len());
    let mut seen_prefix: Option<Vec<u8>> = None;
    for entry in index.iter() {
        if is_cascade_path(&entry.path) {
            continue;
        }
        // A conflicted path has up to three stage entries; keep one (it is
        // hashed from disk anyway, see below).
        if seen_prefix.as_deref() == Some(entry.path.as_slice()) {
            continue;
        }
        seen_prefix = Some(entry.path.clone());
        entries.push(entry);
    }
    let lookup: HashMap<&[u8], usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.path.as_slice(), i))
        .collect();
    let seen: Vec<AtomicBool> = entries.iter().map(|_| AtomicBool::new(false)).collect();
    let common_dir = repo.commondir().to_path_buf();
    // info/exclude patterns are relative to the worktree root, not to `.git/info`.
    let exclude = {
        let mut b = GitignoreBuilder::new(workdir);
        let _ = b.add(common_dir.join("info").join("exclude"));
        b.build().unwrap_or_else(|_| Gitignore::empty())
    };
    let global = GitignoreBuilder::new(workdir).build_global().0;
    let ctx = WalkCtx {
        entries: &entries,
        lookup,
        seen,
        index_mtime,
        exclude,
        global,
        out: Mutex::new(Vec::with_capacity(entries.len() + 64)),
    };
    rayon::scope(|s| walk_dir(s, &ctx, workdir.to_path_buf(), Vec::new(), None, 0));

    // Index entries the walk did not meet: deleted, inside an ignored
    // directory, or inside a directory the walk could not read.
    let leftovers: Vec<PathState> = entries
        .par_iter()
        .enumerate()
        .filter(|(i, _)| !ctx.seen[*i].load(Ordering::Relaxed))
        .filter_map(|(_, entry)| {
            let full = workdir.join(std::ffi::OsStr::from_bytes(&entry.path));
            let meta = std::fs::symlink_metadata(&full).ok()?;
            tracked_state(entry, &meta, index_mtime)
        })
        .collect();
    let mut paths = ctx
        .out
        .into_inner()
        .map_err(|_| GitError::io("walk", workdir)(std::io::Error::other("walker panicked")))?;
    let tracked = ctx
        .seen
        .iter()
        .filter(|s| s.load(Ordering::Relaxed))
        .count()
        + leftovers.len();
    paths.extend(leftovers);
    Ok(Scan { paths, tracked })
}

/// Shared state of one walk.
struct WalkCtx<'a> {
    entries: &'a [git2::IndexEntry],
    lookup: HashMap<&'a [u8], usize>,
    seen: Vec<AtomicBool>,
    index_mtime: Option<(i64, i64)>,
    exclude: Gitignore,
    global: Gitignore,
    out: Mutex<Vec<PathState>>,
}

/// The `.gitignore` files from a directory up to the root.
struct IgnoreChain {
    gitignore: Gitignore,
    parent: Option<Arc<IgnoreChain>>,
}

impl WalkCtx<'_> {
    /// git's precedence: the deepest `.gitignore` first, then `info/exclude`,
    /// then the global excludes file; the first rule that matches decides.
    fn ignored(&self, chain: &Option<Arc<IgnoreChain>>, path: &Path, is_dir: bool) -> bool {
        let mut level = chain.as_deref();
        while let Some(c) = level {
            match c.gitignore.matched(path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => level = c.parent.as_deref(),
            }
        }
        for gi in [&self.exclude, &self.global] {
            match gi.matched(path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }
}

/// Reads one directory and spawns a task per sub-directory.
fn walk_dir<'s, 'a: 's>(
    scope: &rayon::Scope<'s>,
    ctx: &'s WalkCtx<'a>,
    dir: PathBuf,
    rel: Vec<u8>,
    chain: Option<Arc<IgnoreChain>>,
    depth: usize,
) {
    let Ok(rd) = std::fs::read_dir(&dir) else {
        // Unreadable: skipped, as git does.
        return;
    };
    // `file_name()` allocates: take each name once.
    let children: Vec<(std::fs::DirEntry, std::ffi::OsString)> = rd
        .filter_map(Result::ok)
        .map(|c| {
            let name = c.file_name();
            (c, name)
        })
        .collect();
    if depth > 0 && children.iter().any(|(_, n)| n == ".git") {
        // A nested repository git does not know as a submodule: git shows it
        // as one opaque untracked entry and never looks inside.
        return;
    }
    let chain = match children.iter().find(|(_, n)| n == ".gitignore") {
        Some((c, _)) => {
            let gitignore = Gitignore::new(c.path()).0;
            if gitignore.is_empty() {
                chain
            } else {
                Some(Arc::new(IgnoreChain {
                    gitignore,
                    parent: chain,
                }))
            }
        }
        None => chain,
    };
    let mut local = Vec::new();
    for (child, name) in children {
        let name_bytes = name.as_bytes();
        if name_bytes == b".git" || (depth == 0 && name_bytes == CASCADE_DIR.as_bytes()) {
            continue;
        }
        let mut child_rel = Vec::with_capacity(rel.len() + 1 + name_bytes.len());
        if !rel.is_empty() {
            child_rel.extend_from_slice(&rel);
            child_rel.push(b'/');
        }
        child_rel.extend_from_slice(name_bytes);
        let Ok(ft) = child.file_type() else { continue };
        if let Some(&i) = ctx.lookup.get(child_rel.as_slice()) {
            let entry = &ctx.entries[i];
            if entry.mode == mode::GITLINK || !ft.is_dir() {
                ctx.seen[i].store(true, Ordering::Relaxed);
                // `DirEntry::metadata` is an fstatat relative to the open directory.
                if let Ok(meta) = child.metadata() {
                    if let Some(state) = tracked_state(entry, &meta, ctx.index_mtime) {
                        local.push(state);
                    }
                }
                continue;
            }
            // A tracked file became a directory: the file is deleted; walk the directory.
        }
        if ft.is_dir() {
            let path = child.path();
            if ctx.ignored(&chain, &path, true) {
                continue;
            }
            let chain = chain.clone();
            scope.spawn(move |s| walk_dir(s, ctx, path, child_rel, chain, depth + 1));
        } else if ft.is_file() || ft.is_symlink() {
            if ctx.ignored(&chain, &child.path(), false) {
                continue;
            }
            let mode = if ft.is_symlink() {
                Some(mode::SYMLINK)
            } else {
                child.metadata().ok().and_then(|m| git_mode(&m))
            };
            if let Some(mode) = mode {
                local.push(PathState {
                    path: String::from_utf8_lossy(&child_rel).into_owned(),
                    mode,
                    source: Source::Hash,
                });
            }
        }
    }
    if !local.is_empty() {
        if let Ok(mut out) = ctx.out.lock() {
            out.append(&mut local);
        }
    }
}

/// The state of one index entry given the file's metadata; `None` when git
/// could not track what is there now.
fn tracked_state(
    entry: &git2::IndexEntry,
    meta: &std::fs::Metadata,
    index_mtime: Option<(i64, i64)>,
) -> Option<PathState> {
    let path = String::from_utf8_lossy(&entry.path).into_owned();
    if entry.mode == mode::GITLINK {
        // A submodule: the index records the commit it is at; a checked-out
        // submodule is a directory, an uninitialised one an empty directory.
        return meta.is_dir().then_some(PathState {
            path,
            mode: mode::GITLINK,
            source: Source::Index(entry.id),
        });
    }
    let disk_mode = git_mode(meta)?;
    let stage = (entry.flags >> 12) & 0x3;
    let clean = stage == 0
        && disk_mode == entry.mode
        && entry.mtime.seconds() as i64 == meta.mtime()
        && entry.mtime.nanoseconds() as i64 == meta.mtime_nsec()
        && entry.ctime.seconds() as i64 == meta.ctime()
        && entry.ctime.nanoseconds() as i64 == meta.ctime_nsec()
        && entry.ino == meta.ino() as u32
        && entry.file_size == meta.size() as u32
        && !entry.id.is_zero()
        && !racy(entry, index_mtime);
    Some(PathState {
        path,
        mode: disk_mode,
        source: if clean {
            Source::Index(entry.id)
        } else {
            Source::Hash
        },
    })
}

/// Whether the entry was written in the same tick as (or after) the index.
fn racy(entry: &git2::IndexEntry, index_mtime: Option<(i64, i64)>) -> bool {
    match index_mtime {
        None => true,
        Some((sec, nsec)) => {
            let e = (
                entry.mtime.seconds() as i64,
                entry.mtime.nanoseconds() as i64,
            );
            e >= (sec, nsec)
        }
    }
}

/// The git mode of a file on disk; `None` for what git cannot track (fifos,
/// sockets, directories where a file was).
pub fn git_mode(meta: &std::fs::Metadata) -> Option<u32> {
    let ft = meta.file_type();
    if ft.is_symlink() {
        Some(mode::SYMLINK)
    } else if ft.is_file() {
        Some(if meta.mode() & 0o100 != 0 {
            mode::EXECUTABLE
        } else {
            mode::FILE
        })
    } else {
        None
    }
}

/// Whether a repository-relative path is inside cascade's own directory.
pub fn is_cascade_path(path: &[u8]) -> bool {
    let dir = CASCADE_DIR.as_bytes();
    path.starts_with(dir) && (path.len() == dir.len() || path[dir.len()] == b'/')
}

/// Files that differ between the commit `base` (any revision git can parse)
/// and the working tree (staged, unstaged and untracked, not ignored),
/// repository-relative and sorted. Deleted files are not listed: there is
/// nothing left to check in them.
pub fn changed_files(workdir: &Path, base: &str) -> Result<Vec<String>, GitError> {
    let repo = Repository::open(workdir).map_err(GitError::git("open repository"))?;
    let obj = repo
        .revparse_single(base)
        .map_err(GitError::git(format!("resolve base '{base}'")))?;
    let tree = obj
        .peel_to_tree()
        .map_err(GitError::git(format!("read tree of '{base}'")))?;
    let mut opts = git2::DiffOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_typechange(true);
    let diff = repo
        .diff_tree_to_workdir_with_index(Some(&tree), Some(&mut opts))
        .map_err(GitError::git("diff against base"))?;
    let mut out: Vec<String> = diff
        .deltas()
        .filter(|d| d.status() != git2::Delta::Deleted)
        .filter_map(|d| {
            d.new_file()
                .path()
                .map(|p| p.to_string_lossy().into_owned())
        })
        .filter(|p| !is_cascade_path(p.as_bytes()))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cascade_paths_are_recognised() {
        assert!(is_cascade_path(b".cascade"));
        assert!(is_cascade_path(b".cascade/gate-cache/x"));
        assert!(!is_cascade_path(b".cascaded"));
        assert!(!is_cascade_path(b"src/.cascade"));
    }
}
