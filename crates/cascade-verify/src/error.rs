//! [`VerifyError`]: a rule set that cannot be used (a bad `verify.json`),
//! or git's own files that cannot be read or put back.
//! Findings are not errors.

use std::path::PathBuf;

/// The rules could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read '{}': {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write '{}': {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read git's configuration at '{}': {source}", path.display())]
    GitConfig {
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: rule '{id}': {message}", path.display())]
    Rule {
        path: PathBuf,
        id: String,
        message: String,
    },
    #[error("invalid protected path glob '{glob}': {message}")]
    Glob { glob: String, message: String },
    #[error(transparent)]
    Git(#[from] cascade_git::GitError),
}
