//! git2 helpers for cascade. Nothing here knows about stories or agents.
//!
//! - [`repo`]: discovering the repository from any directory (main or linked
//!   worktree), the one `.cascade/` state directory per repository, and
//!   `.git/info/exclude` entries.
//! - [`status`] and [`fingerprint`]: the content fingerprint of a working tree
//!   that keys the gate cache (git blob ids from the index where git's
//!   index-to-workdir diff finds a file clean, hashed in parallel where not).
//! - [`diff`]: the lines a change added and removed, numbered, with the
//!   file texts on both sides (for stub detection and reviews).
//! - [`worktree`], [`commit`], [`merge`]: creating and removing worktrees,
//!   committing everything an agent changed, and merging a story branch into
//!   its feature branch with conflict detection (the private `disjoint` merges changes
//!   to different files without a three-way merge).
//! - [`locks`]: sweeping the lock files a killed git writer left in a git
//!   directory (for callers that know no live process writes it).
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
mod disjoint;
pub mod error;
pub mod fingerprint;
pub mod head;
pub mod local_files;
pub mod locks;
pub mod merge;
pub mod repo;
pub mod resolve;
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
/// Trees of any size are kept in each handle's object cache
/// ([`CACHED_TREE_LIMIT`]), so a large directory is not inflated again per
/// lookup. libgit2's object checks (a hash check of every object read, an
/// existence check of every entry written) keep their defaults.
///
/// # Safety
///
/// The cache limit is a plain global of libgit2's, written without
/// synchronisation: call this before any other thread uses libgit2 (the
/// binary calls it before it starts any thread).
pub unsafe fn configure_libgit2() {
    // SAFETY: the caller runs before any other thread uses libgit2 (this
    // function's contract); `Tree` is a kind the option accepts, so it
    // cannot fail.
    let _ =
        unsafe { git2::opts::set_cache_object_limit(git2::ObjectType::Tree, CACHED_TREE_LIMIT) };
}
