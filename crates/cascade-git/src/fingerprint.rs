//! The content fingerprint of a working tree: the key material of the gate cache.
//!
//! A [`Fingerprint`] is a pure function of the files' content: the sorted list
//! of `(path, mode, git blob id)` of every tracked or untracked-but-not-ignored
//! file, folded into one blake3 hash. Blob ids come from the index when the
//! file's stat data is unchanged ([`crate::status::scan`]: git's index is the
//! only stat cache) and are computed from the file otherwise, in parallel. So equal bytes give an equal fingerprint
//! whether they are committed, staged or only on disk, and in any worktree.
//! Deleted files drop out; a symlink's blob is its target path (as in git); the
//! executable bit is part of the mode. `.cascade/` is never included.
//!
//! Hashing uses libgit2's `git_odb_hash` (`Oid::hash_file`): the blob id must be
//! git's SHA-1 so that it equals the id stored in the index, and only dirty
//! files are hashed, so a faster SHA-1 crate would not change the clean-tree
//! cost at all (see the fingerprint bench for the dirty-file cost).
//!
//! Outside a git repository ([`fingerprint_dir`]) every file under the
//! directory is hashed, respecting `.gitignore`/`.ignore` files.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

pub use git2::Oid;
use git2::{ObjectType, Repository};
use globset::GlobSet;
use rayon::prelude::*;

use crate::status::{self, git_mode, PathState, Source};
use crate::GitError;

/// Version of the fold, part of every digest: bump it when the encoding changes.
const FOLD_VERSION: &[u8] = b"cascade-fingerprint-v1\n";

/// One file of a fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    /// Repository-relative path with `/` separators.
    pub path: String,
    /// Git mode (`100644`, `100755`, `120000`, `160000`).
    pub mode: u32,
    /// Git blob id of the content (a commit id for a submodule).
    pub oid: Oid,
}

/// The fingerprint of a tree: its digest and the files it was made of (sorted by path).
#[derive(Clone, PartialEq, Eq)]
pub struct Fingerprint {
    digest: blake3::Hash,
    files: Vec<FileId>,
    /// How many files had to be hashed (not taken from the index).
    hashed: usize,
}

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fingerprint")
            .field("digest", &self.hex())
            .field("files", &self.files().len())
            .field("hashed", &self.hashed)
            .finish()
    }
}

impl Fingerprint {
    /// Builds a fingerprint from files (sorted here).
    pub fn from_files(mut files: Vec<FileId>) -> Fingerprint {
        // Already sorted in the common case, which this sort checks in one pass.
        files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        files.dedup_by(|a, b| a.path == b.path);
        let digest = fold(&files);
        Fingerprint {
            digest,
            files,
            hashed: 0,
        }
    }

    /// The blake3 digest.
    pub fn digest(&self) -> &blake3::Hash {
        &self.digest
    }

    /// The digest as 64 hex characters.
    pub fn hex(&self) -> String {
        self.digest.to_hex().to_string()
    }

    /// The files, sorted by path.
    pub fn files(&self) -> &[FileId] {
        &self.files
    }

    /// How many files were hashed from disk rather than taken from an index.
    pub fn hashed(&self) -> usize {
        self.hashed
    }

    /// The fingerprint of only the files matching `inputs` (cheap: no I/O).
    pub fn restrict(&self, inputs: &GlobSet) -> Fingerprint {
        let files: Vec<FileId> = self
            .files()
            .iter()
            .filter(|f| inputs.is_match(&f.path))
            .cloned()
            .collect();
        Fingerprint {
            digest: fold(&files),
            files,
            hashed: self.hashed,
        }
    }
}

/// Folds sorted files into the digest: `path NUL mode oid` per file. The
/// bytes go to blake3 in large pieces, which it hashes several chunks at a
/// time (per-file updates cost three times as much).
fn fold<'a>(files: impl IntoIterator<Item = &'a FileId>) -> blake3::Hash {
    const PIECE: usize = 64 * 1024;
    let mut h = blake3::Hasher::new();
    h.update(FOLD_VERSION);
    let mut buf = Vec::with_capacity(PIECE + 4096);
    for f in files {
        buf.extend_from_slice(f.path.as_bytes());
        buf.push(0);
        buf.extend_from_slice(&f.mode.to_le_bytes());
        buf.extend_from_slice(f.oid.as_bytes());
        if buf.len() >= PIECE {
            h.update(&buf);
            buf.clear();
        }
    }
    h.update(&buf);
    h.finalize()
}

/// The fingerprint of the git working tree containing `dir` (the whole
/// worktree, whatever subdirectory `dir` is), optionally restricted to the
/// files matching `inputs`.
pub fn fingerprint(dir: &Path, inputs: Option<&GlobSet>) -> Result<Fingerprint, GitError> {
    let repo = Repository::discover(dir).map_err(|_| GitError::NotARepo {
        path: dir.to_path_buf(),
    })?;
    fingerprint_repo(&repo, inputs)
}

/// [`fingerprint`] for an already open repository.
pub fn fingerprint_repo(
    repo: &Repository,
    inputs: Option<&GlobSet>,
) -> Result<Fingerprint, GitError> {
    let workdir = repo.workdir().ok_or_else(|| GitError::Bare {
        path: repo.path().to_path_buf(),
    })?;
    let mut paths = status::scan(repo, workdir)?.paths;
    if let Some(set) = inputs {
        paths.retain(|p| set.is_match(&p.path));
    }
    let hashed = paths.iter().filter(|p| p.source == Source::Hash).count();
    // Sorted by the scan; a file that vanished before it was hashed drops out.
    let files = resolve(workdir, paths)?;
    Ok(Fingerprint {
        digest: fold(&files),
        files,
        hashed,
    })
}

/// The blob ids of the scanned paths: known ones as they are, the others
/// hashed in parallel. A file that vanished before it was hashed is deleted.
fn resolve(workdir: &Path, paths: Vec<PathState>) -> Result<Vec<FileId>, GitError> {
    let errors: Mutex<Option<GitError>> = Mutex::new(None);
    let files: Vec<FileId> = paths
        .into_par_iter()
        .filter_map(|p| {
            let oid = match p.source {
                Source::Index(oid) => oid,
                Source::Hash => match hash_path(&workdir.join(&p.path), p.mode) {
                    Ok(Some(oid)) => oid,
                    Ok(None) => return None,
                    Err(e) => {
                        if let Ok(mut slot) = errors.lock() {
                            slot.get_or_insert(e);
                        }
                        return None;
                    }
                },
            };
            Some(FileId {
                path: p.path,
                mode: p.mode,
                oid,
            })
        })
        .collect();
    if let Ok(mut slot) = errors.lock() {
        if let Some(e) = slot.take() {
            return Err(e);
        }
    }
    Ok(files)
}

/// Git's blob id of a file on disk: the content, or a symlink's target path.
/// `None` when the file no longer exists.
pub fn hash_path(path: &Path, mode: u32) -> Result<Option<Oid>, GitError> {
    if mode == status::mode::SYMLINK {
        return match std::fs::read_link(path) {
            Ok(target) => Oid::hash_object(ObjectType::Blob, target.as_os_str().as_bytes())
                .map(Some)
                .map_err(GitError::git("hash symlink")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(GitError::io("read link", path)(e)),
        };
    }
    match Oid::hash_file(ObjectType::Blob, path) {
        Ok(oid) => Ok(Some(oid)),
        Err(e) if e.code() == git2::ErrorCode::NotFound || !path.exists() => Ok(None),
        Err(e) => Err(GitError::Git {
            op: format!("hash '{}'", path.display()),
            source: e,
        }),
    }
}

/// The fingerprint of a directory that is not in a git repository: every
/// file under it, hashed, respecting ignore files (`.gitignore`, `.ignore`);
/// `.cascade/` and `.git` are skipped.
pub fn fingerprint_dir(dir: &Path, inputs: Option<&GlobSet>) -> Result<Fingerprint, GitError> {
    let mut builder = ignore::WalkBuilder::new(dir);
    builder
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| {
            let name = e.file_name();
            name != ".git" && !(e.depth() == 1 && name == crate::repo::CASCADE_DIR)
        });
    let mut paths = Vec::new();
    for entry in builder.build() {
        let Ok(entry) = entry else { continue };
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        let Some(mode) = git_mode(&meta) else {
            continue;
        };
        let Ok(rel) = entry.path().strip_prefix(dir) else {
            continue;
        };
        let rel = rel.to_string_lossy().into_owned();
        if inputs.is_some_and(|set| !set.is_match(&rel)) {
            continue;
        }
        paths.push((rel, mode));
    }
    let hashed = paths.len();
    let files: Result<Vec<Option<FileId>>, GitError> = paths
        .into_par_iter()
        .map(|(path, mode)| {
            Ok(hash_path(&dir.join(&path), mode)?.map(|oid| FileId { path, mode, oid }))
        })
        .collect();
    let mut fp = Fingerprint::from_files(files?.into_iter().flatten().collect());
    fp.hashed = hashed;
    Ok(fp)
}

/// What differs between two file lists (both sorted by path).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileChanges {
    /// Paths only in the new list.
    pub added: Vec<String>,
    /// Paths only in the old list.
    pub removed: Vec<String>,
    /// Paths in both with a different content or mode.
    pub modified: Vec<String>,
}

impl FileChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.modified.is_empty()
    }
}

/// Compares two sorted file lists.
pub fn diff_files(old: &[FileId], new: &[FileId]) -> FileChanges {
    let mut out = FileChanges::default();
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(a), Some(b)) if a.path == b.path => {
                if a.oid != b.oid || a.mode != b.mode {
                    out.modified.push(b.path.clone());
                }
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a.path < b.path => {
                out.removed.push(a.path.clone());
                i += 1;
            }
            (Some(_), Some(b)) => {
                out.added.push(b.path.clone());
                j += 1;
            }
            (Some(a), None) => {
                out.removed.push(a.path.clone());
                i += 1;
            }
            (None, Some(b)) => {
                out.added.push(b.path.clone());
                j += 1;
            }
            (None, None) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests;
