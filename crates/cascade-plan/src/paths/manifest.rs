//! `manifest.json` of a data directory: read (never written) to confirm
//! that the directory belongs to this project.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::id::path_text;

/// `manifest.json` in a data directory, as Plan Cascade writes it. Every
/// field is optional: cascade only reads it, and a field it lacks is no
/// reason to ignore the others.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    #[serde(default)]
    pub project_root: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub platform: Option<String>,
}

/// Why a `manifest.json` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

impl Manifest {
    /// Reads a manifest: `Ok(None)` when there is none, an error naming the
    /// file (and line and column for bad JSON) when it cannot be used.
    pub fn read(path: &Path) -> Result<Option<Manifest>, ManifestError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(ManifestError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| ManifestError::Parse {
                path: path.to_path_buf(),
                line: e.line(),
                column: e.column(),
                message: strip_position(&e.to_string()),
            })
    }
}

/// serde_json ends its messages with " at line L column C"; the error
/// shows them in front, as `file:line:column:`.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

/// Whether a manifest's `project_root` names `root`: the same directory on
/// disk, or the same text once separators and case are normalized (the
/// project id ignores both, so Plan Cascade would share the directory too).
pub(super) fn same_root(manifest_root: &str, root: &Path) -> bool {
    let canon = Path::new(manifest_root).canonicalize().ok();
    if canon.is_some_and(|c| PathBuf::from(path_text(&c)) == root) {
        return true;
    }
    let norm = |s: &str| {
        let s = s.replace('\\', "/").to_lowercase();
        match s.trim_end_matches('/') {
            "" => "/".to_string(),
            t => t.to_string(),
        }
    };
    norm(manifest_root) == norm(&path_text(root))
}
