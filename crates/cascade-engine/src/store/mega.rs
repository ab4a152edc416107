//! The mega runs of the run database: each mega run's state (its plan, its
//! batches, each feature's progress) is a row of `mega_runs` holding the
//! whole state, with one row per feature in `features` for people who
//! query them, written in one transaction per transition. The latest mega
//! run is the repository's; the earlier ones stay for `history`-style
//! queries. A `.cascade/mega-state.json` an older cascade left is imported
//! once, when the mega state is first read, and renamed `*.imported`.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};

use crate::mega::state::{MegaState, MEGA_STATE_FILE, MEGA_STATE_SCHEMA};
use crate::mega::MegaError;
use crate::state::StateError;

/// The file an older cascade kept the mega state in, under `.cascade/`.
pub fn legacy_path(cascade_dir: &Path) -> PathBuf {
    cascade_dir.join(MEGA_STATE_FILE)
}

/// Writes `state` as its mega run's row (a new row for a mega run not
/// written before: one is known by when it started and its plan).
pub fn save(cascade_dir: &Path, state: &MegaState) -> Result<(), MegaError> {
    let path = super::db_path(cascade_dir);
    let mut conn = super::connect(&path)?;
    write(&mut conn, &path, state).map_err(MegaError::from)
}

/// The repository's mega run (the latest), `Ok(None)` when there is none.
pub fn load(cascade_dir: &Path) -> Result<Option<MegaState>, MegaError> {
    let path = super::db_path(cascade_dir);
    let legacy = legacy_path(cascade_dir);
    if !super::exists(&path) && !legacy.is_file() {
        return Ok(None);
    }
    let mut conn = super::connect(&path)?;
    if let Some(state) = latest(&conn, &path)? {
        return Ok(Some(state));
    }
    import_legacy(&mut conn, &path, &legacy)
}

fn write(conn: &mut Connection, path: &Path, s: &MegaState) -> Result<(), StateError> {
    let db = |e| StateError::db(path, e);
    let record = serde_json::to_string(s).map_err(|source| StateError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let tx = conn.transaction().map_err(db)?;
    let plan = s.plan.to_string_lossy();
    let seq: i64 = tx
        .query_row(
            "INSERT INTO mega_runs (started_at, plan, goal, target_branch, status, updated_at, record)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (started_at, plan) DO UPDATE SET
               goal = excluded.goal, target_branch = excluded.target_branch,
               status = excluded.status, updated_at = excluded.updated_at,
               record = excluded.record
             RETURNING seq",
            params![
                s.started_at,
                plan,
                s.goal,
                s.target_branch,
                s.status.as_str(),
                s.updated_at,
                record
            ],
            |r| r.get(0),
        )
        .map_err(db)?;
    tx.execute("DELETE FROM features WHERE mega_run = ?1", [seq])
        .map_err(db)?;
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO features (mega_run, name, batch, status, branch, merge_commit, failure_kind)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .map_err(db)?;
        for (name, f) in &s.features {
            insert
                .execute(params![
                    seq,
                    name,
                    f.batch as i64,
                    f.status.as_str(),
                    f.branch,
                    f.merge_commit,
                    f.failure.as_ref().map(|x| x.kind.as_str()),
                ])
                .map_err(db)?;
        }
    }
    tx.commit().map_err(db)
}

/// The latest mega run's state.
fn latest(conn: &Connection, path: &Path) -> Result<Option<MegaState>, MegaError> {
    let record: Option<String> = conn
        .query_row(
            "SELECT record FROM mega_runs ORDER BY seq DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| StateError::db(path, e))?;
    record.map(|text| parse(path, &text)).transpose()
}

/// A mega state from its JSON text (a row's record, or an older file),
/// refused when another version of cascade wrote it.
fn parse(path: &Path, text: &str) -> Result<MegaState, MegaError> {
    let corrupt = |e: serde_json::Error| MegaError::StateCorrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(corrupt)?;
    let version = value
        .get("schema_version")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    if version != u64::from(MEGA_STATE_SCHEMA) {
        return Err(MegaError::StateVersion {
            path: path.to_path_buf(),
            found: version,
            expected: MEGA_STATE_SCHEMA,
        });
    }
    serde_json::from_value(value).map_err(corrupt)
}

/// Imports the file an older cascade kept the mega state in, if there is
/// one, as the database's mega run, and renames it so it happens once.
fn import_legacy(
    conn: &mut Connection,
    db: &Path,
    legacy: &Path,
) -> Result<Option<MegaState>, MegaError> {
    let text = match std::fs::read_to_string(legacy) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(MegaError::io("read", legacy, e)),
    };
    let state = parse(legacy, &text)?;
    write(conn, db, &state)?;
    let mut done = legacy.as_os_str().to_owned();
    done.push(".imported");
    std::fs::rename(legacy, &done).map_err(|e| MegaError::io("rename", legacy, e))?;
    Ok(Some(state))
}
