//! The writes of the run database: a run written whole when its store
//! opens, and each commit's changed stories, their attempts and the run's
//! row, every one a single transaction.

use std::path::Path;

use rusqlite::{params, Connection, Transaction};

use crate::state::{RunState, StateError, StoryState};

/// Writes `state` as the run with its id (its earlier rows replaced), one
/// transaction; returns the version its rows carry.
pub fn replace_run(
    conn: &mut Connection,
    path: &Path,
    state: &RunState,
) -> Result<i64, StateError> {
    let db = |e| StateError::db(path, e);
    let tx = conn.transaction().map_err(db)?;
    let version: i64 = tx
        .query_row(
            "SELECT version FROM runs WHERE id = ?1",
            [&state.run_id],
            |r| r.get(0),
        )
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(0),
            e => Err(e),
        })
        .map_err(db)?
        + 1;
    upsert_run(&tx, path, state, version, true)?;
    tx.execute("DELETE FROM attempts WHERE run_id = ?1", [&state.run_id])
        .map_err(db)?;
    tx.execute("DELETE FROM stories WHERE run_id = ?1", [&state.run_id])
        .map_err(db)?;
    for (position, story) in state.stories.iter().enumerate() {
        write_story(&tx, path, &state.run_id, position, story, version)?;
    }
    tx.commit().map_err(db)?;
    Ok(version)
}

/// Writes the stories at `changed` (positions in `state.stories`) and the
/// run's row, one transaction, stamped `version`.
pub fn commit(
    conn: &mut Connection,
    path: &Path,
    state: &RunState,
    changed: &[usize],
    version: i64,
) -> Result<(), StateError> {
    let db = |e| StateError::db(path, e);
    let tx = conn.transaction().map_err(db)?;
    for &position in changed {
        if let Some(story) = state.stories.get(position) {
            write_story(&tx, path, &state.run_id, position, story, version)?;
        }
    }
    upsert_run(&tx, path, state, version, false)?;
    tx.commit().map_err(db)
}

/// Stamps the run's `finished_at`.
pub fn finished(conn: &Connection, path: &Path, run_id: &str) -> Result<(), StateError> {
    let now = crate::state::now_rfc3339();
    let sql = "UPDATE runs SET finished_at = ?2 WHERE id = ?1";
    conn.execute(sql, params![run_id, now])
        .map_err(|e| StateError::db(path, e))?;
    Ok(())
}

/// The run's own row (inserted, or updated in place: its `seq` is kept);
/// `reopened` counts an opening of the run (readers then read it whole).
fn upsert_run(
    tx: &Transaction<'_>,
    path: &Path,
    state: &RunState,
    version: i64,
    reopened: bool,
) -> Result<(), StateError> {
    let options = state.options.as_ref().map(|o| o.to_string());
    let cooldowns = json(path, &state.cooldowns)?;
    tx.prepare_cached(
        "INSERT INTO runs (id, prd, target_branch, project_root, status, pid, started_at,
                           updated_at, options, cooldowns, opened, version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 1, ?11)
         ON CONFLICT(id) DO UPDATE SET
           prd = excluded.prd, target_branch = excluded.target_branch,
           project_root = excluded.project_root, status = excluded.status,
           pid = excluded.pid, started_at = excluded.started_at,
           updated_at = excluded.updated_at, options = excluded.options,
           cooldowns = excluded.cooldowns, version = excluded.version,
           opened = runs.opened + ?12",
    )
    .and_then(|mut st| {
        st.execute(params![
            state.run_id,
            state.prd,
            state.target_branch,
            state.project_root,
            state.status.as_str(),
            state.pid,
            state.started_at,
            state.updated_at,
            options,
            cooldowns,
            version,
            i64::from(reopened),
        ])
    })
    .map(|_| ())
    .map_err(|e| StateError::db(path, e))
}

/// One story's row and its attempts' rows.
fn write_story(
    tx: &Transaction<'_>,
    path: &Path,
    run_id: &str,
    position: usize,
    story: &StoryState,
    version: i64,
) -> Result<(), StateError> {
    let db = |e| StateError::db(path, e);
    let record = json(path, story)?;
    tx.prepare_cached(
        "INSERT INTO stories (run_id, id, position, status, agent, attempts, error_type,
                              story_type, record, version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT(run_id, id) DO UPDATE SET
           position = excluded.position, status = excluded.status, agent = excluded.agent,
           attempts = excluded.attempts, error_type = excluded.error_type,
           story_type = excluded.story_type, record = excluded.record,
           version = excluded.version",
    )
    .and_then(|mut st| {
        st.execute(params![
            run_id,
            story.id,
            position as i64,
            story.status.as_str(),
            story.agent,
            story.charged_attempts(),
            story.error_type.map(|k| k.as_str()),
            story.story_type,
            record,
            version,
        ])
    })
    .map_err(db)?;
    tx.prepare_cached("DELETE FROM attempts WHERE run_id = ?1 AND story = ?2")
        .and_then(|mut st| st.execute(params![run_id, story.id]))
        .map_err(db)?;
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO attempts (run_id, story, seq, number, agent, phase, outcome,
                                   error_type, input_tokens, output_tokens, cost_usd,
                                   duration_ms, confinement, started_at, finished_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )
        .map_err(db)?;
    for (seq, a) in story.attempts.iter().enumerate() {
        insert
            .execute(params![
                run_id,
                story.id,
                seq as i64,
                a.attempt,
                a.agent,
                a.phase,
                a.outcome,
                a.error_type.map(|k| k.as_str()),
                a.input_tokens.map(|n| n as i64),
                a.output_tokens.map(|n| n as i64),
                a.cost_usd,
                a.duration_ms.map(|n| n as i64),
                a.confinement,
                a.started_at,
                a.finished_at,
            ])
            .map_err(db)?;
    }
    Ok(())
}

/// A value as the JSON text a column keeps.
fn json(path: &Path, value: &impl serde::Serialize) -> Result<String, StateError> {
    serde_json::to_string(value).map_err(|e| StateError::Io {
        op: "serialize",
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })
}
