//! The reads of the run database: the latest run with its stories read as
//! any view of a story's record, and a follower that keeps one current by
//! reading only the stories committed since its last look.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, Row};
use serde::de::DeserializeOwned;

use crate::state::{RunPhase, RunState, StateError, StoryState};

/// The id of the latest run in the database (the one `status` and
/// `resume` mean), if any.
pub fn latest_run_id(conn: &Connection) -> rusqlite::Result<Option<String>> {
    conn.query_row("SELECT id FROM runs ORDER BY seq DESC LIMIT 1", [], |r| {
        r.get(0)
    })
    .optional()
}

/// The latest run, its stories read whole; `None`: no run yet.
pub fn latest(conn: &Connection, path: &Path) -> Result<Option<RunState>, StateError> {
    let Some(mut state) = latest_head(conn, path)? else {
        return Ok(None);
    };
    let mut stories = Vec::new();
    each_record(conn, path, &state.run_id, None, |text| {
        stories.push(parse(path, text)?);
        Ok(())
    })?;
    state.stories = stories;
    Ok(Some(state))
}

/// The latest run's own fields (its stories unread), if any.
pub fn latest_head(conn: &Connection, path: &Path) -> Result<Option<RunState>, StateError> {
    let db = |e| StateError::db(path, e);
    let Some(id) = latest_run_id(conn).map_err(db)? else {
        return Ok(None);
    };
    conn.query_row(
        "SELECT id, prd, target_branch, project_root, status, pid, started_at, updated_at,
                options, cooldowns
         FROM runs WHERE id = ?1",
        [&id],
        |r| Ok(head_of(r, path)),
    )
    .map_err(db)?
    .map(Some)
}

/// A `runs` row as a [`RunState`] without its stories.
fn head_of(r: &Row<'_>, path: &Path) -> Result<RunState, StateError> {
    let db = |e| StateError::db(path, e);
    let text = |i: usize| r.get::<_, String>(i).map_err(db);
    let status: RunPhase = parse(path, &format!("\"{}\"", text(4)?))?;
    let options: Option<String> = r.get(8).map_err(db)?;
    Ok(RunState {
        schema_version: super::SCHEMA_VERSION,
        run_id: text(0)?,
        prd: text(1)?,
        target_branch: text(2)?,
        project_root: text(3)?,
        status,
        pid: r.get(5).map_err(db)?,
        started_at: text(6)?,
        updated_at: text(7)?,
        options: options.map(|o| parse(path, &o)).transpose()?,
        cooldowns: parse(path, &text(9)?)?,
        stories: Vec::new(),
        index: Default::default(),
        order: Default::default(),
    })
}

/// The whole record of story `id` in the latest run of the database at
/// `path` (`None`: no run, or no such story): a story's view reads one row.
pub fn story_record(path: &Path, id: &str) -> Result<Option<StoryState>, StateError> {
    let Some(conn) = super::connect_existing(path)? else {
        return Ok(None);
    };
    let db = |e| StateError::db(path, e);
    let Some(run) = latest_run_id(&conn).map_err(db)? else {
        return Ok(None);
    };
    let text: Option<String> = conn
        .query_row(
            "SELECT record FROM stories WHERE run_id = ?1 AND id = ?2",
            (&run, id),
            |r| r.get(0),
        )
        .optional()
        .map_err(db)?;
    text.map(|t| parse(path, &t)).transpose()
}

/// Hands `f` the record of each story of `run_id` in plan order (only
/// those written after `since`, a version, when given).
pub fn each_record(
    conn: &Connection,
    path: &Path,
    run_id: &str,
    since: Option<i64>,
    mut f: impl FnMut(&str) -> Result<(), StateError>,
) -> Result<(), StateError> {
    let db = |e| StateError::db(path, e);
    let mut st = conn
        .prepare_cached(
            "SELECT record FROM stories WHERE run_id = ?1 AND version > ?2 ORDER BY position",
        )
        .map_err(db)?;
    let mut rows = st.query((run_id, since.unwrap_or(-1))).map_err(db)?;
    while let Some(row) = rows.next().map_err(db)? {
        let text = row.get_ref(0).and_then(|v| Ok(v.as_str()?)).map_err(db)?;
        f(text)?;
    }
    Ok(())
}

/// A JSON value of a column.
pub(crate) fn parse<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, StateError> {
    serde_json::from_str(text).map_err(|source| StateError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Keeps the latest run read from the database current at the cost of what
/// changed: the stories committed since the last look (for readers that
/// look again and again, such as the dashboard).
#[derive(Debug)]
pub struct StateFollower {
    path: PathBuf,
    conn: Option<Connection>,
    state: Option<RunState>,
    /// The run read, how often it had been opened, and the version read.
    seen: Option<(String, i64, i64)>,
}

impl StateFollower {
    /// Follows the database at `path` (nothing read yet).
    pub fn new(path: &Path) -> StateFollower {
        StateFollower {
            path: path.to_path_buf(),
            conn: None,
            state: None,
            seen: None,
        }
    }

    /// The latest run as it is in the database now (`None`: no run yet).
    pub fn refresh(&mut self) -> Result<Option<&RunState>, StateError> {
        if self.conn.is_none() {
            self.conn = super::connect_existing(&self.path)?;
        }
        let Some(conn) = &self.conn else {
            return Ok(None);
        };
        let path = &self.path;
        let db = |e| StateError::db(path, e);
        let now: Option<(String, i64, i64)> = conn
            .query_row(
                "SELECT id, opened, version FROM runs ORDER BY seq DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(db)?;
        let Some(now) = now else {
            self.state = None;
            self.seen = None;
            return Ok(None);
        };
        match (&self.seen, self.state.as_mut()) {
            (Some(seen), Some(_)) if *seen == now => {}
            (Some((id, opened, version)), Some(state)) if *id == now.0 && *opened == now.1 => {
                each_record(conn, path, id, Some(*version), |text| {
                    state.put_story(parse(path, text)?);
                    Ok(())
                })?;
                if let Some(head) = latest_head(conn, path)? {
                    state.take_run_fields(head);
                }
            }
            _ => self.state = latest(conn, path)?,
        }
        self.seen = Some(now);
        Ok(self.state.as_ref())
    }
}
