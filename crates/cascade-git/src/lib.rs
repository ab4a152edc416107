//! git2 helpers for cascade. Nothing here knows about stories or agents.
//!
//! - [`repo`]: discovering the repository from any directory (main or linked
//!   worktree), the one `.cascade/` state directory per repository, and
//!   `.git/info/exclude` entries.
//! - [`status`] and [`fingerprint`]: the content fingerprint of a working tree
//!   that keys the gate cache (git blob ids from the index where stat data is
//!   unchanged, hashed in parallel where not).
//! - [`statindex`]: the per-worktree stat index (path, mode, stat data ->
//!   blob id, validated against racy timestamps) that lets a fingerprint
//!   skip every file, tracked or not, whose stat data has not changed.
//! - [`diff`]: the lines a change added and removed, numbered, with the
//!   file texts on both sides (for stub detection and reviews).
//! - [`worktree`], [`commit`], [`merge`]: creating and removing worktrees,
//!   committing everything an agent changed, and merging a story branch into
//!   its feature branch with conflict detection (the private `disjoint` merges changes
//!   to different files without a three-way merge).
//! - [`local_files`]: a worktree's own exclude, the files cascade copied in
//!   or setup left behind, which its commits never contain.
//! - [`resolve`]: a merge left for an agent to resolve (the target merged into
//!   a story's worktree with conflict markers), concluded or aborted.
//! - [`treediff`]: the files that differ between two trees, reading only
//!   the subtrees that differ (libgit2's own diff reads them all).
//! - [`transfer`]: a story's commits from one repository to another as a
//!   pack, without a git process (the fleet's workers and coordinator).
//!
//! Errors are [`GitError`] (or a module's own type), always naming the path or
//! operation that failed.

pub mod commit;
pub mod diff;
mod dirent;
mod disjoint;
pub mod error;
pub mod fingerprint;
pub mod head;
pub mod local_files;
pub mod merge;
pub mod repo;
pub mod resolve;
pub mod statindex;
pub mod status;
pub mod transfer;
pub mod treediff;
pub mod worktree;

pub use error::GitError;
pub use repo::RepoPaths;

/// The largest tree libgit2 keeps parsed in a repository handle's object
/// cache once read. libgit2 caches trees of at most 4 KiB by default, so a
/// directory of more than about a hundred entries (a repository's root,
/// often) was inflated and parsed again by every lookup: several times per
/// story through one handle, 400 KB a time for a directory of 10,000 files.
/// Larger than any real tree; what all handles cache together stays within
/// libgit2's own bound for the process (256 MiB; it evicts beyond it).
pub const CACHED_TREE_LIMIT: usize = 64 << 20;

/// Sets libgit2's process-wide options as cascade wants them; the binary
/// calls it first thing (library users may too; calling it again changes
/// nothing).
///
/// - No hash check of every object read: libgit2 re-hashes each object it
///   reads off disk by default; git does not (`git fsck` does), and in a
///   run the same trees are read again per story.
/// - No existence check of every entry of every tree and commit written:
///   cascade writes trees only from its own indexes, whose blobs it has just
///   written or read; libgit2 would open and inflate each entry's object to
///   check it (git stats it), which grew with the repository per commit.
/// - Trees of any size kept in each handle's object cache
///   ([`CACHED_TREE_LIMIT`]): on a tree of 10,000 files in one directory a
///   story costs 5-15% less CPU (a scripted agent, `--parallel 8`, 300
///   stories, runs of each taken in turn: 143-146 ms against 152-158, and
///   149-160 against 180-186 at a busier time); inflating trees went from
///   14% of the run's samples to 9.5%.
///
/// # Safety
///
/// The cache limit is a plain global of libgit2's, written without
/// synchronisation: call this before any other thread uses libgit2 (the
/// binary calls it before it starts any thread).
pub unsafe fn configure_libgit2() {
    git2::opts::strict_hash_verification(false);
    git2::opts::strict_object_creation(false);
    // SAFETY: the caller runs before any other thread uses libgit2 (this
    // function's contract); `Tree` is a kind the option accepts, so it
    // cannot fail.
    let _ =
        unsafe { git2::opts::set_cache_object_limit(git2::ObjectType::Tree, CACHED_TREE_LIMIT) };
}
