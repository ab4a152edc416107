//! The crate's error type: every failure names the operation and the path.

use std::path::PathBuf;

/// A git operation failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The directory is not inside a git repository.
    #[error("'{}' is not inside a git repository (run `git init` first)", path.display())]
    NotARepo { path: PathBuf },
    /// The repository is bare: there is no working tree to run in.
    #[error("'{}' is a bare repository; cascade needs a working tree", path.display())]
    Bare { path: PathBuf },
    /// A libgit2 call failed.
    #[error("git {op} failed: {}", source.message())]
    Git {
        op: String,
        #[source]
        source: git2::Error,
    },
    /// A file-system operation failed.
    #[error("{op} '{}': {source}", path.display())]
    Io {
        op: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl GitError {
    /// Wraps a libgit2 error with the operation it came from.
    pub fn git(op: impl Into<String>) -> impl FnOnce(git2::Error) -> GitError {
        let op = op.into();
        move |source| GitError::Git { op, source }
    }

    /// Wraps an I/O error with the operation and path it came from.
    pub fn io(
        op: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> GitError {
        let (op, path) = (op.into(), path.into());
        move |source| GitError::Io { op, path, source }
    }
}
