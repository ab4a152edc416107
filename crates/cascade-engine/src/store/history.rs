//! What `cascade history` reads of the run database: the runs it holds
//! (newest first), one run's stories with their attempts, and the judged
//! attempts per agent and story type (success rate, cost, mean duration).

use std::path::Path;

use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

use crate::state::StateError;

/// One run, with its stories counted by status and what its attempts cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    pub id: String,
    pub status: String,
    pub prd: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub stories: u64,
    pub complete: u64,
    pub failed: u64,
    pub blocked: u64,
    pub attempts: u64,
    pub cost_usd: f64,
}

/// One story of a run, with every attempt it had.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoryRow {
    pub id: String,
    pub status: String,
    pub story_type: Option<String>,
    pub agent: Option<String>,
    pub attempts: Vec<AttemptRow>,
}

/// One attempt of a story.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRow {
    pub number: u32,
    pub agent: String,
    pub phase: String,
    pub outcome: Option<String>,
    pub error_type: Option<String>,
    pub duration_ms: Option<u64>,
    pub cost_usd: Option<f64>,
}

/// The judged attempts (passed or failed; not interrupted, not ended by a
/// rate limit) of one agent on stories of one type, across all runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentRow {
    pub agent: String,
    pub story_type: Option<String>,
    pub attempts: u64,
    pub passed: u64,
    /// `passed / attempts`.
    pub success_rate: f64,
    pub cost_usd: f64,
    pub mean_duration_ms: Option<f64>,
}

/// Every run of the database at `path`, newest first (none: no database).
pub fn runs(path: &Path) -> Result<Vec<RunRow>, StateError> {
    let Some(conn) = super::connect_existing(path)? else {
        return Ok(Vec::new());
    };
    let db = |e| StateError::db(path, e);
    let mut st = conn
        .prepare(
            "SELECT r.id, r.status, r.prd, r.started_at, r.finished_at,
                    (SELECT count(*) FROM stories s WHERE s.run_id = r.id),
                    (SELECT count(*) FROM stories s WHERE s.run_id = r.id AND s.status = 'complete'),
                    (SELECT count(*) FROM stories s WHERE s.run_id = r.id AND s.status = 'failed'),
                    (SELECT count(*) FROM stories s WHERE s.run_id = r.id AND s.status = 'blocked'),
                    (SELECT count(*) FROM attempts a WHERE a.run_id = r.id),
                    (SELECT coalesce(sum(a.cost_usd), 0) FROM attempts a WHERE a.run_id = r.id)
             FROM runs r ORDER BY r.seq DESC",
        )
        .map_err(db)?;
    let rows = st
        .query_map([], |r| {
            Ok(RunRow {
                id: r.get(0)?,
                status: r.get(1)?,
                prd: r.get(2)?,
                started_at: r.get(3)?,
                finished_at: r.get(4)?,
                stories: r.get(5)?,
                complete: r.get(6)?,
                failed: r.get(7)?,
                blocked: r.get(8)?,
                attempts: r.get(9)?,
                cost_usd: r.get(10)?,
            })
        })
        .map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

/// The stories of run `run` (`None`: the latest) in plan order, with their
/// attempts; `None` when there is no such run.
pub fn stories(
    path: &Path,
    run: Option<&str>,
) -> Result<Option<(String, Vec<StoryRow>)>, StateError> {
    let Some(conn) = super::connect_existing(path)? else {
        return Ok(None);
    };
    let db = |e| StateError::db(path, e);
    let id = match run {
        Some(id) => conn
            .query_row("SELECT id FROM runs WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(db)?,
        None => super::latest_run_id(&conn).map_err(db)?,
    };
    let Some(id) = id else {
        return Ok(None);
    };
    let mut out: Vec<StoryRow> = stories_of(&conn, &id).map_err(db)?;
    // One pass over the run's attempts, in the stories' order.
    let mut st = conn
        .prepare(
            "SELECT a.story, a.number, a.agent, a.phase, a.outcome, a.error_type,
                    a.duration_ms, a.cost_usd
             FROM attempts a JOIN stories s ON s.run_id = a.run_id AND s.id = a.story
             WHERE a.run_id = ?1 ORDER BY s.position, a.seq",
        )
        .map_err(db)?;
    let mut rows = st.query([&id]).map_err(db)?;
    let mut at = 0;
    while let Some(r) = rows.next().map_err(db)? {
        let story: String = r.get(0).map_err(db)?;
        while out.get(at).is_some_and(|s| s.id != story) {
            at += 1;
        }
        let Some(s) = out.get_mut(at) else { break };
        s.attempts.push(AttemptRow {
            number: r.get(1).map_err(db)?,
            agent: r.get(2).map_err(db)?,
            phase: r.get(3).map_err(db)?,
            outcome: r.get(4).map_err(db)?,
            error_type: r.get(5).map_err(db)?,
            duration_ms: r.get(6).map_err(db)?,
            cost_usd: r.get(7).map_err(db)?,
        });
    }
    Ok(Some((id, out)))
}

fn stories_of(conn: &Connection, run: &str) -> rusqlite::Result<Vec<StoryRow>> {
    let mut st = conn.prepare(
        "SELECT id, status, story_type, agent FROM stories WHERE run_id = ?1 ORDER BY position",
    )?;
    let rows = st.query_map([run], |r| {
        Ok(StoryRow {
            id: r.get(0)?,
            status: r.get(1)?,
            story_type: r.get(2)?,
            agent: r.get(3)?,
            attempts: Vec::new(),
        })
    })?;
    rows.collect()
}

/// The judged attempts of every run per agent and story type.
pub fn agents(path: &Path) -> Result<Vec<AgentRow>, StateError> {
    let Some(conn) = super::connect_existing(path)? else {
        return Ok(Vec::new());
    };
    let db = |e| StateError::db(path, e);
    let mut st = conn
        .prepare(
            "SELECT a.agent, s.story_type, count(*), sum(a.outcome = 'passed'),
                    coalesce(sum(a.cost_usd), 0), avg(a.duration_ms)
             FROM attempts a JOIN stories s ON s.run_id = a.run_id AND s.id = a.story
             WHERE a.outcome IN ('passed', 'failed')
               AND coalesce(a.error_type, '') <> 'rate_limited'
             GROUP BY a.agent, s.story_type ORDER BY a.agent, s.story_type",
        )
        .map_err(db)?;
    let rows = st
        .query_map([], |r| {
            let attempts: u64 = r.get(2)?;
            let passed: u64 = r.get(3)?;
            Ok(AgentRow {
                agent: r.get(0)?,
                story_type: r.get(1)?,
                attempts,
                passed,
                success_rate: passed as f64 / attempts.max(1) as f64,
                cost_usd: r.get(4)?,
                mean_duration_ms: r.get(5)?,
            })
        })
        .map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}
