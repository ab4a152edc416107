//! The content-relevant state of a working tree, as fast as `git status`.
//!
//! [`scan`] lists every path git would show in a tree listing (tracked paths
//! from the index, plus untracked paths that are not ignored) and says for each
//! one whether its blob id is already known or the file must be hashed. It
//! never hashes anything itself: [`crate::fingerprint`] does that, in
//! parallel, for the paths that need it. A blob id is known when the
//! worktree's stat index ([`crate::statindex`], given to [`scan_with`])
//! vouches for it, or when git's index entry does (the file's stat data still
//! matches the entry and the entry is not racily clean). When git's index file
//! is unchanged since the stat index was written, git's index is not even
//! read: the stat index knows which paths are tracked.
//!
//! How, and why this way (see the fingerprint bench): one parallel walk
//! (rayon, a task per directory) reads every directory once. A name that is
//! known (tracked, or in the stat index) is `fstatat`ed relative to its
//! directory (cheaper than an `lstat` of the full path, which resolves every
//! component again) and compared with what is known; an untracked name is
//! checked against the gitignore rules (`.gitignore` at every level,
//! `info/exclude` of the common dir, the global excludes file; matched with
//! the `ignore` crate's gitignore engine). Only untracked names and
//! directories are ever matched against ignore globs, never the tracked
//! files. Ignored directories are not entered; tracked files git still tracks
//! inside them, and deleted files, are settled by a pass over the tracked
//! paths the walk did not see. libgit2's status (a single-threaded full diff)
//! and the `ignore` crate's walker (which matches every file against the
//! globs and stats paths from the root) were both measurably slower.
//!
//! [`changed_files`] lists what changed relative to a base commit (untracked
//! included), for incremental gates.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use git2::{Oid, Repository};
use rayon::prelude::*;

use crate::dirent::{Kind, Listing, Meta, S_IFLNK, S_IFMT, S_IFREG};
use crate::repo::CASCADE_DIR;
use crate::statindex::{Stat, StatIndex, Time};
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
    /// The stat data the walk saw (what the stat index records).
    pub stat: Stat,
    /// Whether git's index holds the path.
    pub tracked: bool,
}

/// Where a path's blob id comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The stat index vouches for the id (stat data unchanged, not racy).
    Recorded(Oid),
    /// Git's index entry is up to date: its id is the file's blob id.
    Index(Oid),
    /// The file must be hashed (modified, untracked, racily clean, or never staged).
    Hash,
}

/// The paths of a working tree; see [`scan`].
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Every present path, sorted by path.
    pub paths: Vec<PathState>,
    /// How many paths were tracked (came from the index).
    pub tracked: usize,
    /// Stat data of git's index file (`None`: there is none).
    pub git_index: Option<Stat>,
    /// Whether git's index was read; `false` when the stat index vouched
    /// for the tracked paths (git's index unchanged since it was written).
    pub read_git_index: bool,
}

/// What a scan with a stat index found; see [`scan_indexed`].
#[derive(Debug, Clone)]
pub enum Scanned {
    /// Every file is as the stat index recorded it: the same paths, with
    /// unchanged (and not racy) stat data and modes, so the same ids; and
    /// git's index is unchanged. What was recorded with it still holds.
    Unchanged,
    /// Something differs: the paths, as [`scan`] lists them.
    Changed(Scan),
}

/// Lists the paths of the worktree at `workdir` (its root) with how to get
/// their blob ids. Deleted tracked files are left out. `.cascade/` is never
/// listed.
pub fn scan(repo: &Repository, workdir: &Path) -> Result<Scan, GitError> {
    scan_with(repo, workdir, None)
}

/// [`scan`] with the stat index of the previous scan of this worktree: its
/// records give the ids of files whose stat data has not changed, and when
/// git's index file is unchanged since then (and was not racy), its list of
/// tracked paths is used instead of reading git's index.
pub fn scan_with(
    repo: &Repository,
    workdir: &Path,
    prev: Option<&StatIndex>,
) -> Result<Scan, GitError> {
    match scan_indexed(repo, workdir, prev)? {
        Scanned::Changed(scan) => Ok(scan),
        Scanned::Unchanged => Ok(Scan::recorded(prev)),
    }
}

/// [`scan_with`] that says when nothing changed since the stat index was
/// written instead of listing the paths (the cheap answer of a clean tree:
/// no path is copied, nothing is sorted).
pub fn scan_indexed(
    repo: &Repository,
    workdir: &Path,
    prev: Option<&StatIndex>,
) -> Result<Scanned, GitError> {
    let git_index = std::fs::metadata(repo.path().join("index"))
        .ok()
        .map(|m| Stat::of(&m));
    let reuse = prev.is_some_and(|p| {
        p.git_index() == git_index && git_index.map_or(true, |s| !s.racy(p.reference()))
    });
    let entries = if reuse {
        Vec::new()
    } else {
        index_entries(repo)?
    };
    let known = Known::new(&entries, prev, reuse);
    let ctx = WalkCtx::new(repo, workdir, &known, git_index);
    rayon::scope(|s| walk_dir(s, &ctx, workdir.to_path_buf(), Vec::new(), None, 0));

    // Tracked paths the walk did not meet: deleted, inside an ignored
    // directory, or inside a directory the walk could not read.
    let leftovers: Vec<(usize, Found)> = (0..known.len())
        .into_par_iter()
        .filter(|&k| known.tracked(k) && ctx.state[k].load(Ordering::Relaxed) == UNSEEN)
        .filter_map(|k| {
            let full = workdir.join(std::ffi::OsStr::from_bytes(known.path(k)));
            let meta = std::fs::symlink_metadata(&full).ok()?;
            ctx.tracked_found(k, &Meta::of(&meta)).map(|f| (k, f))
        })
        .collect();
    fn walked<T>(m: Mutex<Vec<T>>, workdir: &Path) -> Result<Vec<T>, GitError> {
        m.into_inner()
            .map_err(|_| GitError::io("walk", workdir)(std::io::Error::other("walker panicked")))
    }
    let mut added = walked(ctx.added, workdir)?;
    let mut found = walked(ctx.found, workdir)?;
    found.extend(leftovers);
    if reuse
        && added.is_empty()
        && found.is_empty()
        && ctx
            .state
            .iter()
            .all(|s| s.load(Ordering::Relaxed) == RECORDED)
    {
        return Ok(Scanned::Unchanged);
    }
    // The known paths are sorted; what was found of them comes from the
    // records or from `found`; the new paths are merged in.
    found.sort_unstable_by_key(|f| f.0);
    let mut found = found.into_iter().peekable();
    let present = (0..known.len()).filter_map(|k| {
        let (mode, source, stat) = match ctx.state[k].load(Ordering::Relaxed) {
            RECORDED => {
                let r = known.rec(k).map(|(p, r)| p.record(r))?;
                (r.mode, Source::Recorded(r.oid), r.stat)
            }
            _ => {
                let f = found.next_if(|f| f.0 == k)?.1;
                let source = match f.source {
                    Via::Index(oid) => Source::Index(oid),
                    Via::Recorded | Via::Hash => Source::Hash,
                };
                (f.mode, source, f.stat)
            }
        };
        Some(PathState {
            path: String::from_utf8_lossy(known.path(k)).into_owned(),
            mode,
            source,
            stat,
            tracked: known.tracked(k),
        })
    });
    added.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    let paths = merge_sorted(present, added);
    let tracked = paths.iter().filter(|p| p.tracked).count();
    Ok(Scanned::Changed(Scan {
        paths,
        tracked,
        git_index,
        read_git_index: !reuse,
    }))
}

impl Scan {
    /// The scan a stat index's records describe (what [`Scanned::Unchanged`]
    /// stands for).
    fn recorded(prev: Option<&StatIndex>) -> Scan {
        let paths: Vec<PathState> = prev
            .into_iter()
            .flat_map(StatIndex::records)
            .map(|r| PathState {
                path: String::from_utf8_lossy(r.path).into_owned(),
                mode: r.mode,
                source: Source::Recorded(r.oid),
                stat: r.stat,
                tracked: r.tracked,
            })
            .collect();
        Scan {
            tracked: paths.iter().filter(|p| p.tracked).count(),
            paths,
            git_index: prev.and_then(StatIndex::git_index),
            read_git_index: false,
        }
    }
}

/// Merges two lists sorted by path.
fn merge_sorted(a: impl Iterator<Item = PathState>, b: Vec<PathState>) -> Vec<PathState> {
    let mut out = Vec::with_capacity(a.size_hint().0 + b.len());
    let mut b = b.into_iter().peekable();
    for x in a {
        while let Some(y) = b.next_if(|y| y.path < x.path) {
            out.push(y);
        }
        out.push(x);
    }
    out.extend(b);
    out
}

/// Git's index entries outside `.cascade/`, one per path.
fn index_entries(repo: &Repository) -> Result<Vec<git2::IndexEntry>, GitError> {
    let index = repo.index().map_err(GitError::git("read index"))?;
    let mut entries: Vec<git2::IndexEntry> = Vec::with_capacity(index.len());
    for entry in index.iter() {
        if is_cascade_path(&entry.path) {
            continue;
        }
        // A conflicted path has up to three stage entries; keep one (it is
        // hashed from disk anyway, see `git_clean`).
        if entries.last().is_some_and(|e| e.path == entry.path) {
            continue;
        }
        entries.push(entry);
    }
    // Byte order, as the stat index keeps it (a case-insensitive index
    // sorts otherwise).
    if !entries.windows(2).all(|w| w[0].path < w[1].path) {
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        entries.dedup_by(|a, b| a.path == b.path);
    }
    Ok(entries)
}

/// No entry (in [`Join`]).
const NONE: u32 = u32::MAX;

/// One known path: its git index entry and stat index record (by number).
#[derive(Debug, Clone, Copy)]
struct Join {
    git: u32,
    rec: u32,
    /// In git's index: visited even inside ignored directories, never
    /// matched against ignore rules.
    tracked: bool,
}

/// What the scan knows before looking at the disk: git's entries (when
/// read) joined with the stat index's records, sorted by path. With
/// `reuse`, the records alone say what is tracked. About thirty bytes a
/// path: the paths and records themselves stay where they are.
struct Known<'a> {
    entries: &'a [git2::IndexEntry],
    prev: Option<&'a StatIndex>,
    joined: Vec<Join>,
    /// Path hash -> position in `joined` (the first path with that hash).
    by_hash: HashMap<u64, u32, BuildHasherDefault<HashIsKey>>,
}

impl<'a> Known<'a> {
    fn new(entries: &'a [git2::IndexEntry], prev: Option<&'a StatIndex>, reuse: bool) -> Known<'a> {
        let git = |i: usize| Join {
            git: i as u32,
            rec: NONE,
            tracked: true,
        };
        let rec = |i: usize, tracked: bool| Join {
            git: NONE,
            rec: i as u32,
            tracked,
        };
        let joined = match prev {
            None => (0..entries.len()).map(git).collect(),
            Some(p) if reuse => (0..p.len()).map(|i| rec(i, p.tracked(i))).collect(),
            Some(p) => {
                // Both sorted: a merge join. Records git no longer (or
                // never) tracked are untracked candidates.
                let mut joined = Vec::with_capacity(entries.len().max(p.len()));
                let mut r = 0;
                for (i, e) in entries.iter().enumerate() {
                    while r < p.len() && p.path(r) < e.path.as_slice() {
                        joined.push(rec(r, false));
                        r += 1;
                    }
                    let mut j = git(i);
                    if r < p.len() && p.path(r) == e.path.as_slice() {
                        j.rec = r as u32;
                        r += 1;
                    }
                    joined.push(j);
                }
                joined.extend((r..p.len()).map(|r| rec(r, false)));
                joined
            }
        };
        let mut known = Known {
            entries,
            prev,
            by_hash: HashMap::default(),
            joined,
        };
        known.by_hash.reserve(known.joined.len());
        for k in 0..known.joined.len() {
            known
                .by_hash
                .entry(path_hash(known.path(k)))
                .or_insert(k as u32);
        }
        known
    }

    fn len(&self) -> usize {
        self.joined.len()
    }

    fn tracked(&self, k: usize) -> bool {
        self.joined[k].tracked
    }

    fn git(&self, k: usize) -> Option<&'a git2::IndexEntry> {
        self.entries.get(self.joined[k].git as usize)
    }

    /// The stat index and the number of path `k`'s record there.
    fn rec(&self, k: usize) -> Option<(&'a StatIndex, usize)> {
        let (prev, r) = (self.prev?, self.joined[k].rec);
        (r != NONE).then_some((prev, r as usize))
    }

    /// Where `path` is among the known paths.
    fn find(&self, path: &[u8]) -> Option<usize> {
        match self.by_hash.get(&path_hash(path)) {
            Some(&k) if self.path(k as usize) == path => Some(k as usize),
            // Another path with the same hash: the sorted table decides.
            Some(_) => {
                let at = self.joined.partition_point(|j| self.path_of(j) < path);
                (at < self.len() && self.path(at) == path).then_some(at)
            }
            None => None,
        }
    }

    fn path(&self, k: usize) -> &'a [u8] {
        self.path_of(&self.joined[k])
    }

    fn path_of(&self, j: &Join) -> &'a [u8] {
        match (self.entries.get(j.git as usize), self.prev) {
            (Some(e), _) => &e.path,
            (None, Some(prev)) if j.rec != NONE => prev.path(j.rec as usize),
            _ => &[],
        }
    }

    /// The commit a tracked submodule is at, per git's index (or the record
    /// of it when git's index was not read).
    fn gitlink(&self, k: usize) -> Option<Oid> {
        if !self.tracked(k) {
            return None;
        }
        match (self.git(k), self.rec(k)) {
            (Some(e), _) => (e.mode == mode::GITLINK).then_some(e.id),
            (None, Some((p, r))) => (p.mode(r) == mode::GITLINK).then(|| p.oid(r)),
            (None, None) => None,
        }
    }
}

/// A 64-bit hash of a path for [`Known::find`] (an FxHash-style word mix:
/// a few instructions per 8 bytes; collisions are resolved by comparing
/// paths).
fn path_hash(p: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mix = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
    let mut h = p.len() as u64;
    let mut words = p.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = mix(h, u64::from_le_bytes(b));
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    h = mix(h, u64::from_le_bytes(tail));
    // The table picks buckets by the low bits: fold the high ones in.
    h ^ (h >> 29)
}

/// A hasher for keys that are hashes already.
#[derive(Default)]
struct HashIsKey(u64);

impl std::hash::Hasher for HashIsKey {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed with it; anything else still works.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// What the walk found of a known path on disk.
#[derive(Debug, Clone, Copy)]
struct Found {
    mode: u32,
    source: Via,
    stat: Stat,
}

/// Where the walk gets a known path's blob id ([`Source`] before the id
/// of a record is decoded, which a clean tree never needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Recorded,
    Index(Oid),
    Hash,
}

/// Walk states of a known path.
const UNSEEN: u8 = 0;
/// Met by the walk (present or not, recorded or not).
const SEEN: u8 = 1;
/// Present and exactly as its record says.
const RECORDED: u8 = 2;

/// Shared state of one walk.
struct WalkCtx<'a> {
    known: &'a Known<'a>,
    /// Per known path: [`UNSEEN`], [`SEEN`] or [`RECORDED`].
    state: Vec<AtomicU8>,
    /// Known paths present but not [`RECORDED`], with their mode, stat
    /// data and id source.
    found: Mutex<Vec<(usize, Found)>>,
    /// Present paths nothing knew about (new untracked files).
    added: Mutex<Vec<PathState>>,
    index_mtime: Option<Time>,
    exclude: Gitignore,
    global: Gitignore,
}

/// The `.gitignore` files from a directory up to the root.
struct IgnoreChain {
    gitignore: Gitignore,
    parent: Option<Arc<IgnoreChain>>,
}

impl<'a> WalkCtx<'a> {
    fn new(
        repo: &Repository,
        workdir: &Path,
        known: &'a Known<'a>,
        git_index: Option<Stat>,
    ) -> WalkCtx<'a> {
        // info/exclude patterns are relative to the worktree root, not to `.git/info`.
        let exclude = {
            let mut b = GitignoreBuilder::new(workdir);
            let _ = b.add(repo.commondir().join("info").join("exclude"));
            b.build().unwrap_or_else(|_| Gitignore::empty())
        };
        WalkCtx {
            known,
            state: (0..known.len()).map(|_| AtomicU8::new(UNSEEN)).collect(),
            found: Mutex::new(Vec::new()),
            added: Mutex::new(Vec::new()),
            // Entries modified at or after git's index was written may have
            // changed within the same timestamp tick ("racily clean"); git
            // re-checks their content, and so do we.
            index_mtime: git_index.map(|s| s.mtime),
            exclude,
            global: GitignoreBuilder::new(workdir).build_global().0,
        }
    }

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

    /// Where the blob id of known path `k` with this mode and stat data
    /// comes from: the stat index, git's index, or hashing.
    fn source(&self, k: usize, mode: u32, stat: &Stat) -> Via {
        if let Some((prev, r)) = self.known.rec(k) {
            if prev.vouches(r, mode, stat) {
                return Via::Recorded;
            }
        }
        match self.known.git(k) {
            Some(e) if git_clean(e, mode, stat, self.index_mtime) => Via::Index(e.id),
            _ => Via::Hash,
        }
    }

    /// What tracked path `k` is on disk given its metadata; `None` when git
    /// could not track what is there now.
    fn tracked_found(&self, k: usize, meta: &Meta) -> Option<Found> {
        if let Some(oid) = self.known.gitlink(k) {
            // A submodule: the index records the commit it is at; a
            // checked-out submodule is a directory, an uninitialised one an
            // empty directory.
            return meta.is_dir().then_some(Found {
                mode: mode::GITLINK,
                source: match self.known.git(k) {
                    Some(_) => Via::Index(oid),
                    None => Via::Recorded,
                },
                stat: meta.stat,
            });
        }
        let mode = git_mode_of(meta.mode)?;
        Some(Found {
            mode,
            source: self.source(k, mode, &meta.stat),
            stat: meta.stat,
        })
    }

    /// Notes what the walk found of known path `k`.
    fn note(&self, k: usize, found: Option<Found>, mine: &mut Vec<(usize, Found)>) {
        let state = match found {
            Some(f) if f.source == Via::Recorded => RECORDED,
            Some(f) => {
                mine.push((k, f));
                SEEN
            }
            None => SEEN,
        };
        self.state[k].store(state, Ordering::Relaxed);
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
    let Ok(listing) = Listing::read(&dir) else {
        // Unreadable: skipped, as git does.
        return;
    };
    let names = || (0..listing.len()).map(|i| listing.entry(i).0);
    if depth > 0 && names().any(|n| n == b".git") {
        // A nested repository git does not know as a submodule: git shows it
        // as one opaque untracked entry and never looks inside.
        return;
    }
    let chain = match names().position(|n| n == b".gitignore") {
        Some(i) => {
            let gitignore = Gitignore::new(listing.path(i)).0;
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
    let known = ctx.known;
    let mut found = Vec::new();
    let mut added = Vec::new();
    let mut child_rel = Vec::with_capacity(rel.len() + 64);
    for i in 0..listing.len() {
        let (name, kind) = listing.entry(i);
        if name == b".git" || (depth == 0 && name == CASCADE_DIR.as_bytes()) {
            continue;
        }
        child_rel.clear();
        if !rel.is_empty() {
            child_rel.extend_from_slice(&rel);
            child_rel.push(b'/');
        }
        child_rel.extend_from_slice(name);
        let k = known.find(&child_rel);
        // The listing's type when it has one; stat data where needed.
        let mut meta = None;
        let kind = match kind {
            Kind::Unknown => match listing.stat(i) {
                Ok(m) => {
                    meta = Some(m);
                    m.kind()
                }
                Err(_) => continue,
            },
            kind => kind,
        };
        if let Some(k) = k.filter(|&k| known.tracked(k)) {
            if known.gitlink(k).is_some() || kind != Kind::Dir {
                // Relative to the open directory: no path resolution.
                let f = meta
                    .or_else(|| listing.stat(i).ok())
                    .and_then(|m| ctx.tracked_found(k, &m));
                ctx.note(k, f, &mut found);
                continue;
            }
            // A tracked file became a directory: the file is deleted; walk the directory.
        }
        match kind {
            Kind::Dir => {
                let path = listing.path(i);
                if ctx.ignored(&chain, &path, true) {
                    continue;
                }
                let (chain, sub) = (chain.clone(), child_rel.clone());
                scope.spawn(move |s| walk_dir(s, ctx, path, sub, chain, depth + 1));
            }
            Kind::File | Kind::Symlink => {
                if ctx.ignored(&chain, &listing.path(i), false) {
                    continue;
                }
                let Some(m) = meta.or_else(|| listing.stat(i).ok()) else {
                    continue;
                };
                let Some(mode) = git_mode_of(m.mode) else {
                    continue;
                };
                match k {
                    // Untracked, and recorded by the stat index.
                    Some(k) => {
                        let source = ctx.source(k, mode, &m.stat);
                        let f = Found {
                            mode,
                            source,
                            stat: m.stat,
                        };
                        ctx.note(k, Some(f), &mut found);
                    }
                    None => added.push(PathState {
                        path: String::from_utf8_lossy(&child_rel).into_owned(),
                        mode,
                        source: Source::Hash,
                        stat: m.stat,
                        tracked: false,
                    }),
                }
            }
            Kind::Other | Kind::Unknown => {}
        }
    }
    append(&ctx.found, found);
    append(&ctx.added, added);
}

/// Adds one directory's results to the walk's (one lock per directory).
fn append<T>(all: &Mutex<Vec<T>>, mut mine: Vec<T>) {
    if !mine.is_empty() {
        if let Ok(mut all) = all.lock() {
            all.append(&mut mine);
        }
    }
}

/// Whether git's index entry still gives the blob id of a file with this
/// mode and stat data (and is not racily clean).
fn git_clean(
    entry: &git2::IndexEntry,
    disk_mode: u32,
    stat: &Stat,
    index_mtime: Option<Time>,
) -> bool {
    let stage = (entry.flags >> 12) & 0x3;
    stage == 0
        && disk_mode == entry.mode
        && entry.mtime.seconds() as i64 == stat.mtime.sec
        && entry.mtime.nanoseconds() == stat.mtime.nsec
        && entry.ctime.seconds() as i64 == stat.ctime.sec
        && entry.ctime.nanoseconds() == stat.ctime.nsec
        && entry.ino == stat.ino as u32
        && entry.file_size == stat.size as u32
        && !entry.id.is_zero()
        && !racy(entry, index_mtime)
}

/// Whether the entry was written in the same tick as (or after) the index.
fn racy(entry: &git2::IndexEntry, index_mtime: Option<Time>) -> bool {
    match index_mtime {
        None => true,
        Some(t) => {
            let e = Time {
                sec: entry.mtime.seconds() as i64,
                nsec: entry.mtime.nanoseconds(),
            };
            e >= t
        }
    }
}

/// The git mode of a file on disk; `None` for what git cannot track (fifos,
/// sockets, directories where a file was).
pub fn git_mode(meta: &std::fs::Metadata) -> Option<u32> {
    git_mode_of(meta.mode())
}

/// [`git_mode`] of an `st_mode`.
fn git_mode_of(st_mode: u32) -> Option<u32> {
    match st_mode & S_IFMT {
        S_IFLNK => Some(mode::SYMLINK),
        S_IFREG if st_mode & 0o100 != 0 => Some(mode::EXECUTABLE),
        S_IFREG => Some(mode::FILE),
        _ => None,
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
    fn paths_are_found_even_when_their_hashes_collide() {
        use crate::statindex::{encode, Record, Stat, Time};
        let wd = Path::new("/w");
        let rec = |path: &'static [u8]| Record {
            path,
            mode: mode::FILE,
            tracked: true,
            stat: Stat::default(),
            oid: Oid::zero(),
        };
        let bytes = encode(
            wd,
            Time::default(),
            None,
            &[0; 32],
            &[rec(b"a"), rec(b"b"), rec(b"c/d")],
        );
        let idx = StatIndex::parse(bytes, wd).unwrap();
        let mut known = Known::new(&[], Some(&idx), true);
        assert_eq!(known.find(b"b"), Some(1));
        assert_eq!(known.find(b"c/d"), Some(2));
        assert_eq!(known.find(b"c"), None);
        // A hash shared with another path (the first one keeps the slot):
        // the comparison of the paths catches it.
        known.by_hash.insert(path_hash(b"b"), 0);
        known.by_hash.insert(path_hash(b"new"), 2);
        assert_eq!(known.find(b"b"), Some(1));
        assert_eq!(known.find(b"new"), None);
        assert_eq!(known.find(b"a"), Some(0));
    }

    #[test]
    fn cascade_paths_are_recognised() {
        assert!(is_cascade_path(b".cascade"));
        assert!(is_cascade_path(b".cascade/gate-cache/x"));
        assert!(!is_cascade_path(b".cascaded"));
        assert!(!is_cascade_path(b"src/.cascade"));
    }
}
