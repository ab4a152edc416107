//! Errors of the mega run that stop it as a whole (a failing *feature* is not
//! an error: it is recorded in the state and reported).

use std::path::{Path, PathBuf};

/// Something stopped the mega run before or between features.
#[derive(Debug, thiserror::Error)]
pub enum MegaError {
    /// The mega state (a row of the run database, or the file an older
    /// cascade kept) is not valid JSON or misses fields.
    #[error("mega state '{}' is corrupt: {message} (move it away to start the mega-plan afresh)", path.display())]
    StateCorrupt { path: PathBuf, message: String },
    /// The mega state was written by another version of cascade.
    #[error("mega state '{}' has schema version {found}, this cascade reads version {expected} (finish the run with the cascade that started it, or move the file away)", path.display())]
    StateVersion {
        path: PathBuf,
        found: u64,
        expected: u32,
    },
    /// Another process runs a mega-plan in this repository.
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
    /// The mega-plan cannot be used.
    #[error("{0}")]
    Plan(String),
    /// The state belongs to a different mega-plan.
    #[error("a mega run of '{}' is unfinished in this repository; finish it (`cascade mega resume --mega {}`) or discard it with `cascade mega complete --force`", existing.display(), existing.display())]
    OtherPlan { existing: PathBuf },
    /// A feature name that cannot be a branch or a path component.
    #[error("feature name '{name}' is invalid: use lowercase letters, digits and '-', starting with a letter or digit")]
    BadFeatureName { name: String },
    /// The main worktree has uncommitted changes (merges would touch it).
    #[error("the working tree '{}' has uncommitted changes ({}); commit or stash them, or pass --allow-dirty", dir.display(), files.join(", "))]
    Dirty { dir: PathBuf, files: Vec<String> },
    /// The repository cannot take a mega run: not a repository, a detached
    /// HEAD, no commits yet (bad input, like `approve`'s).
    #[error("{0}")]
    Repo(String),
    /// A git operation failed outside any one feature.
    #[error("{0}")]
    Git(String),
    /// The agents configuration cannot be used.
    #[error("{0}")]
    Agents(String),
    /// The run database refused a read or write.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// A file-system operation failed.
    #[error("{op} '{}': {source}", path.display())]
    Io {
        op: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl MegaError {
    /// Whether the error is bad input or usage (exit 2) rather than a run-time failure.
    pub fn is_usage(&self) -> bool {
        !matches!(
            self,
            MegaError::Git(_) | MegaError::Io { .. } | MegaError::State(_)
        )
    }

    /// An I/O error with the operation and path it came from.
    pub fn io(op: &str, path: &Path, source: std::io::Error) -> Self {
        MegaError::Io {
            op: op.to_string(),
            path: path.to_path_buf(),
            source,
        }
    }
}
