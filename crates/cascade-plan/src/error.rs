//! `PlanError`: reading, parsing and writing plan files.
//!
//! Every variant names the file; parse errors also carry the line and column
//! so a user can jump straight to the problem. Validation problems (a file that
//! parses but does not make sense) are [`crate::ValidationErrors`] instead.

use std::path::PathBuf;

/// A plan file could not be read, parsed or written.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The file does not exist.
    #[error("{} not found: create it or pass its path with --{flag} PATH", path.display())]
    NotFound {
        /// The file that was looked for.
        path: PathBuf,
        /// The command-line flag that names this kind of file (`prd` or `mega`).
        flag: &'static str,
    },
    /// The file exists but could not be read.
    #[error("cannot read {}: {source} (pass the path of a readable JSON file)", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not valid JSON, or a field has the wrong type.
    #[error("{}:{line}:{column}: {message}; fix the JSON and try again", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line of the problem (0 when unknown).
        line: usize,
        /// 1-based column of the problem (0 when unknown).
        column: usize,
        /// What is wrong, without the position.
        message: String,
    },
    /// Stories whose status is not one of Plan Cascade's; each problem
    /// starts with `file:line:column` (see [`crate::Status::SPELLINGS`]).
    #[error("{}", problems.join("\n"))]
    Vocabulary {
        /// The file.
        path: PathBuf,
        /// One message per unknown status.
        problems: Vec<String>,
        /// The file's warnings too (unknown priorities), for a report of
        /// everything at once (`cascade validate`).
        warnings: Vec<crate::PlanWarning>,
    },
    /// The file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The plan could not be turned into JSON (never expected for plan types).
    #[error("cannot serialize {}: {source}", path.display())]
    Serialize {
        /// The file being written.
        path: PathBuf,
        /// The serializer's error.
        source: serde_json::Error,
    },
}

impl PlanError {
    /// Builds a [`PlanError::Parse`] from serde_json's error, moving the
    /// position out of the message into fields.
    pub(crate) fn parse(path: PathBuf, err: &serde_json::Error) -> PlanError {
        let (line, column) = (err.line(), err.column());
        let full = err.to_string();
        let suffix = format!(" at line {line} column {column}");
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
        let message = match err.classify() {
            serde_json::error::Category::Eof => format!("invalid JSON: {message}"),
            serde_json::error::Category::Syntax => format!("invalid JSON: {message}"),
            _ => message,
        };
        PlanError::Parse {
            path,
            line,
            column,
            message,
        }
    }

    /// The file this error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            PlanError::NotFound { path, .. }
            | PlanError::Read { path, .. }
            | PlanError::Parse { path, .. }
            | PlanError::Vocabulary { path, .. }
            | PlanError::Write { path, .. }
            | PlanError::Serialize { path, .. } => path,
        }
    }
}
