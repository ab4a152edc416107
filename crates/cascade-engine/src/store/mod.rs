//! The run database, `.cascade/cascade.db` (SQLite in WAL mode): every run
//! with its options, its stories and their attempts, kept after the run for
//! `cascade history`, and the mega runs with their features ([`mega`]).
//! The tables are in [`schema`]; people query them as docs/state.md says.
//!
//! A running run's state is held by a `Store`: the [`RunState`] in
//! memory, the stories changed since the last commit, and a connection.
//! Each transition is one small transaction (`Store::commit`: the changed
//! stories, their attempts and the run's row), so a `kill -9` at any moment
//! leaves the last committed transition and nothing half written; there is
//! no journal to fold and no document to rewrite. Readers ([`RunState::load`],
//! [`RunState::load_head`], [`StateFollower`]) open their own
//! connections and see the last commit, also while a run writes.
//!
//! A repository whose `.cascade/state.json` an older cascade left is
//! imported once, by the first reader or run that opens the database
//! (the `import` module).

pub mod history;
mod import;
pub mod mega;
mod read;
pub mod schema;
mod write;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;

pub(crate) use read::latest_head;
pub use read::{latest_run_id, story_record, StateFollower};
pub use schema::SCHEMA_VERSION;

use crate::state::{RunState, StateError, StoryState};

/// The database's file name in a `.cascade` directory.
pub const DB_FILE: &str = "cascade.db";

/// How long a connection waits for another's write before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The database of the `.cascade` directory `cascade_dir`.
pub fn db_path(cascade_dir: &Path) -> PathBuf {
    cascade_dir.join(DB_FILE)
}

/// Opens (creating it) the database at `path`, migrated to the current
/// layout, with any state an older cascade left beside it imported.
pub(crate) fn connect(path: &Path) -> Result<Connection, StateError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| StateError::Io {
            op: "create",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let mut conn = Connection::open(path).map_err(|e| StateError::db(path, e))?;
    configure(&conn, path)?;
    schema::migrate(&mut conn, path)?;
    import::legacy_state(&mut conn, path)?;
    Ok(conn)
}

/// Whether there is a database at `path` (or an older state beside it to
/// import into one).
pub fn exists(path: &Path) -> bool {
    path.exists() || import::has_legacy_state(path)
}

/// Opens the database at `path` for reading; `None` when there is none
/// (and no older state to import into one).
pub(crate) fn connect_existing(path: &Path) -> Result<Option<Connection>, StateError> {
    if exists(path) {
        connect(path).map(Some)
    } else {
        Ok(None)
    }
}

/// WAL (readers never wait for the writer), a busy timeout (two writers
/// take turns), `synchronous=NORMAL` (a commit survives the process being
/// killed; only a power cut may lose the last ones), foreign keys on.
fn configure(conn: &Connection, path: &Path) -> Result<(), StateError> {
    let db = |e| StateError::db(path, e);
    conn.busy_timeout(BUSY_TIMEOUT).map_err(db)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(db)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(db)?;
    conn.pragma_update(None, "foreign_keys", "ON").map_err(db)?;
    Ok(())
}

/// The run state of a running run: the state in memory, what changed since
/// it was last committed, and the database it is committed to. Reads go
/// through `Deref`; changes go through [`Store::change_story`] and
/// [`Store::change_run`], and reach the disk with [`Store::commit`].
#[derive(Debug)]
pub(crate) struct Store {
    state: RunState,
    conn: Connection,
    path: PathBuf,
    /// Positions of the stories changed since the last commit.
    dirty: Vec<usize>,
    /// The run's own fields changed since the last commit.
    run_dirty: bool,
    /// Commits made so far (each story row carries the one that wrote it,
    /// which is how a follower reads only what changed).
    version: i64,
}

impl std::ops::Deref for Store {
    type Target = RunState;

    fn deref(&self) -> &RunState {
        &self.state
    }
}

impl Store {
    /// Writes `state` whole to the database at `path` (replacing what an
    /// earlier opening of the same run wrote) and keeps it there as it
    /// changes.
    pub fn open(state: RunState, path: &Path) -> Result<Store, StateError> {
        let mut conn = connect(path)?;
        let version = write::replace_run(&mut conn, path, &state)?;
        Ok(Store {
            state,
            conn,
            path: path.to_path_buf(),
            dirty: Vec::new(),
            run_dirty: false,
            version,
        })
    }

    /// Changes the story's record (added if new); it is written by the
    /// next commit.
    pub fn change_story<R>(&mut self, id: &str, f: impl FnOnce(&mut StoryState) -> R) -> R {
        let i = self.state.position_or_add(id);
        self.dirty.push(i);
        f(&mut self.state.stories[i])
    }

    /// Changes the run's own fields (not its stories: see
    /// [`Store::change_story`]); written by the next commit.
    pub fn change_run<R>(&mut self, f: impl FnOnce(&mut RunState) -> R) -> R {
        self.run_dirty = true;
        f(&mut self.state)
    }

    /// Writes what changed since the last commit in one transaction: the
    /// changed stories with their attempts, and the run's row.
    pub fn commit(&mut self) -> Result<(), StateError> {
        if self.dirty.is_empty() && !self.run_dirty {
            return Ok(());
        }
        self.dirty.sort_unstable();
        self.dirty.dedup();
        self.state.updated_at = crate::state::now_rfc3339();
        let version = self.version + 1;
        write::commit(
            &mut self.conn,
            &self.path,
            &self.state,
            &self.dirty,
            version,
        )?;
        self.version = version;
        self.dirty.clear();
        self.run_dirty = false;
        Ok(())
    }

    /// The end of the run: what is left uncommitted, and the time it finished.
    pub fn finish(&mut self) -> Result<(), StateError> {
        self.run_dirty = true;
        self.commit()?;
        write::finished(&self.conn, &self.path, &self.state.run_id)
    }
}

impl RunState {
    /// Reads the latest run of the database at `path`; `Ok(None)` when
    /// there is none.
    pub fn load(path: &Path) -> Result<Option<RunState>, StateError> {
        match connect_existing(path)? {
            Some(conn) => read::latest(&conn, path),
            None => Ok(None),
        }
    }

    /// Writes the whole state to the database at `path` as its latest run
    /// (what a run's `Store` does when it opens; for tools and tests that
    /// make a state without running one).
    pub fn save(&mut self, path: &Path) -> Result<(), StateError> {
        self.updated_at = crate::state::now_rfc3339();
        let mut conn = connect(path)?;
        write::replace_run(&mut conn, path, self).map(|_| ())
    }
}

#[cfg(test)]
mod tests;
