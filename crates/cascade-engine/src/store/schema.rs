//! The tables of the run database and the migrations between their
//! versions (`PRAGMA user_version`), documented for people who query them
//! in docs/state.md.

use rusqlite::Connection;

use crate::state::StateError;

/// The version of the run state's own layout (`schema_version` of a
/// [`crate::state::RunState`], as `status --json` shows it).
pub const SCHEMA_VERSION: u32 = 1;

/// The newest layout of the database this cascade writes
/// (`PRAGMA user_version`): one step per migration.
pub const DB_VERSION: u32 = MIGRATIONS.len() as u32;

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
    // 1 -> 2: mega runs (the whole state in `record`) and their features.
    "CREATE TABLE mega_runs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        started_at TEXT NOT NULL,
        plan TEXT NOT NULL,
        goal TEXT NOT NULL,
        target_branch TEXT NOT NULL,
        status TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        record TEXT NOT NULL,
        UNIQUE (started_at, plan)
    );
    CREATE TABLE features (
        mega_run INTEGER NOT NULL REFERENCES mega_runs(seq) ON DELETE CASCADE,
        name TEXT NOT NULL,
        batch INTEGER NOT NULL,
        status TEXT NOT NULL,
        branch TEXT NOT NULL,
        merge_commit TEXT,
        failure_kind TEXT,
        PRIMARY KEY (mega_run, name)
    );",
];

/// Brings the database to [`DB_VERSION`], one transaction per step;
/// refuses a database a newer cascade wrote.
pub fn migrate(conn: &mut Connection, path: &std::path::Path) -> Result<(), StateError> {
    let db = |source| StateError::db(path, source);
    let found: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(db)?;
    if found > DB_VERSION {
        return Err(StateError::NewerSchema {
            path: path.to_path_buf(),
            found,
            understood: DB_VERSION,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A database an earlier cascade made (version 1, a run in it) is
    /// brought to the current layout with its run kept.
    #[test]
    fn an_earlier_database_is_migrated_and_keeps_its_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cascade.db");
        let mut conn = Connection::open(&path).unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO runs (id, prd, target_branch, project_root, status, pid, started_at, updated_at)
             VALUES ('r1', 'prd.json', 'main', '/p', 'completed', 1, 't', 't')",
            [],
        )
        .unwrap();
        migrate(&mut conn, &path).unwrap();
        let version: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, DB_VERSION);
        let runs: i64 = conn
            .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
            .unwrap();
        let megas: i64 = conn
            .query_row("SELECT count(*) FROM mega_runs", [], |r| r.get(0))
            .unwrap();
        assert_eq!((runs, megas), (1, 0));
        // Migrating again changes nothing.
        migrate(&mut conn, &path).unwrap();
    }
}
