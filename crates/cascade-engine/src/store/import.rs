//! The one-time import of the run state an older cascade kept as files:
//! `state.json` (one document) and, above 200 stories, `state.journal`
//! beside it (the document's generation on its first line, then one
//! `{"story": {...}}` or `{"run": {...}}` record per line, a torn last line
//! skipped). The state they read as becomes the database's latest run, and
//! the files are renamed `*.imported` so it happens once.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::Deserialize;

use crate::state::{RunState, StateError, StoryState};

/// The older state document beside the database at `db`.
fn legacy_document(db: &Path) -> PathBuf {
    db.with_file_name("state.json")
}

/// Whether an older cascade left a state beside the database at `db`.
pub fn has_legacy_state(db: &Path) -> bool {
    legacy_document(db).is_file()
}

/// Imports the older state beside the database, if there is one.
pub fn legacy_state(conn: &mut Connection, db: &Path) -> Result<(), StateError> {
    let document = legacy_document(db);
    let bytes = match std::fs::read(&document) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(StateError::Io {
                op: "read",
                path: document,
                source,
            })
        }
    };
    let journal = document.with_extension("journal");
    let state = read_legacy(
        &document,
        &bytes,
        &std::fs::read(&journal).unwrap_or_default(),
    )?;
    super::write::replace_run(conn, db, &state)?;
    for old in [document, journal] {
        let mut done = old.clone().into_os_string();
        done.push(".imported");
        match std::fs::rename(&old, &done) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(StateError::Io {
                    op: "rename",
                    path: old,
                    source: e,
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// The state an older document and its journal read as.
fn read_legacy(path: &Path, document: &[u8], journal: &[u8]) -> Result<RunState, StateError> {
    #[derive(Deserialize)]
    struct Generation {
        #[serde(default)]
        journal: u64,
        #[serde(default)]
        schema_version: u32,
    }
    let parse_error = |source| StateError::Parse {
        path: path.to_path_buf(),
        source,
    };
    let generation: Generation = serde_json::from_slice(document).map_err(parse_error)?;
    if generation.schema_version > super::SCHEMA_VERSION {
        return Err(StateError::NewerSchema {
            path: path.to_path_buf(),
            found: generation.schema_version,
            understood: super::SCHEMA_VERSION,
        });
    }
    let mut state: RunState = serde_json::from_slice(document).map_err(parse_error)?;
    let mut lines = journal.split_inclusive(|&b| b == b'\n');
    let current = lines
        .next()
        .and_then(|head| serde_json::from_slice::<Generation>(head).ok())
        .is_some_and(|head| generation.journal != 0 && head.journal == generation.journal);
    if !current {
        return Ok(state);
    }
    #[derive(Deserialize)]
    struct Record {
        #[serde(default)]
        story: Option<StoryState>,
        #[serde(default)]
        run: Option<RunState>,
        #[serde(default)]
        at: Option<String>,
    }
    // A line that does not parse (cut short by a kill or a full disk) is skipped.
    for line in lines.filter(|l| l.ends_with(b"\n")) {
        let Ok(record) = serde_json::from_slice::<Record>(line) else {
            continue;
        };
        if let Some(story) = record.story {
            state.put_story(story);
        }
        if let Some(run) = record.run {
            state.take_run_fields(run);
        }
        if let Some(at) = record.at {
            state.updated_at = at;
        }
    }
    Ok(state)
}
