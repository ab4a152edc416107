//! The tables of the run database and the migrations between their
//! versions (`PRAGMA user_version`), documented for people who query them
//! in docs/state.md.

use rusqlite::Connection;

use crate::state::StateError;

/// The newest layout this cascade writes.
pub const SCHEMA_VERSION: u32 = 1;

/// Each migration takes the database from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: runs, their stories and the stories' attempts.
    "CREATE TABLE runs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL DEFAULT 'single',
        parent TEXT,
        prd TEXT NOT NULL,
        target_branch TEXT NOT NULL,
        project_root TEXT NOT NULL,
        status TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        finished_at TEXT,
        options TEXT,
        cooldowns TEXT NOT NULL DEFAULT '[]',
        opened INTEGER NOT NULL DEFAULT 0,
        version INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE stories (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        id TEXT NOT NULL,
        position INTEGER NOT NULL,
        status TEXT NOT NULL,
        agent TEXT,
        attempts INTEGER NOT NULL,
        error_type TEXT,
        story_type TEXT,
        record TEXT NOT NULL,
        version INTEGER NOT NULL,
        PRIMARY KEY (run_id, id)
    );
    CREATE INDEX stories_by_position ON stories (run_id, position);
    CREATE INDEX stories_by_version ON stories (run_id, version);
    CREATE TABLE attempts (
        run_id TEXT NOT NULL,
        story TEXT NOT NULL,
        seq INTEGER NOT NULL,
        number INTEGER NOT NULL,
        agent TEXT NOT NULL,
        phase TEXT NOT NULL,
        outcome TEXT,
        error_type TEXT,
        input_tokens INTEGER,
        output_tokens INTEGER,
        cost_usd REAL,
        duration_ms INTEGER,
        confinement TEXT,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        PRIMARY KEY (run_id, story, seq),
        FOREIGN KEY (run_id, story) REFERENCES stories(run_id, id) ON DELETE CASCADE
    );",
];

/// Brings the database to [`SCHEMA_VERSION`], one transaction per step;
/// refuses a database a newer cascade wrote.
pub fn migrate(conn: &mut Connection, path: &std::path::Path) -> Result<(), StateError> {
    let db = |source| StateError::db(path, source);
    let found: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(db)?;
    if found > SCHEMA_VERSION {
        return Err(StateError::NewerSchema {
            path: path.to_path_buf(),
            found,
        });
    }
    for (from, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction().map_err(db)?;
        tx.execute_batch(sql).map_err(db)?;
        tx.pragma_update(None, "user_version", from as u32 + 1)
            .map_err(db)?;
        tx.commit().map_err(db)?;
    }
    Ok(())
}
