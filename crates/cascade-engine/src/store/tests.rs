//! The run database's round trips, one-time import of an older state,
//! follower, and what a kill leaves.

use super::*;
use crate::retry::FailureKind;
use crate::state::{now_rfc3339, AttemptRecord, RunHead, RunPhase, StoryBrief, StoryStatus};

fn fresh(n: usize) -> RunState {
    RunState::new(
        "r1".into(),
        "prd.json".into(),
        "main".into(),
        "/x".into(),
        (0..n).map(|i| format!("s{i}")),
    )
}

fn failed_attempt() -> AttemptRecord {
    AttemptRecord {
        pid: Some(3),
        outcome: Some("failed".into()),
        error_type: Some(FailureKind::QualityGate),
        error: Some("gate 'tests' failed".into()),
        duration_ms: Some(4),
        input_tokens: Some(10),
        cost_usd: Some(0.25),
        ..AttemptRecord::started(1, "codex".into(), "implementation".into(), now_rfc3339())
    }
}

#[test]
fn every_commit_reads_back_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir.path().join(".cascade"));
    assert!(RunState::load(&path).unwrap().is_none());
    assert!(!path.exists(), "a reader creates no database");
    let mut store = Store::open(fresh(3), &path).unwrap();
    store.change_story("s0", |s| s.status = StoryStatus::Complete);
    store.change_story("s1", |s| {
        s.status = StoryStatus::Failed;
        s.attempts.push(failed_attempt());
    });
    store.change_story("new", |s| s.agent = Some("aider".into()));
    store.change_run(|st| {
        st.status = RunPhase::Paused;
        st.options = Some(serde_json::json!({"parallel": 6}));
    });
    store.commit().unwrap();
    let back = RunState::load(&path).unwrap().unwrap();
    assert_eq!(back, *store);
    let c = back.counts();
    assert_eq!((c.complete, c.failed, c.pending), (1, 1, 2));
    assert_eq!(back.status, RunPhase::Paused);
    assert_eq!(back.options.as_ref().unwrap()["parallel"], 6);
    // The attempts are rows people can query.
    let conn = Connection::open(&path).unwrap();
    let (agent, kind, cost): (String, String, f64) = conn
        .query_row(
            "SELECT agent, error_type, cost_usd FROM attempts WHERE story = 's1'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (agent.as_str(), kind.as_str(), cost),
        ("codex", "quality_gate", 0.25)
    );
    let head = RunHead::load(&path).unwrap().unwrap();
    assert_eq!((head.run_id.as_str(), head.stories.len()), ("r1", 0));
    // The brief reads the same records.
    let briefs = crate::state::read_brief(&path, |st| {
        st.stories
            .iter()
            .map(|s: &StoryBrief<'_>| (s.id.to_string(), s.status))
            .collect::<Vec<_>>()
    })
    .unwrap()
    .unwrap();
    assert_eq!(briefs.len(), 4);
    assert_eq!(briefs[1], ("s1".to_string(), StoryStatus::Failed));
    store.finish().unwrap();
    let finished: Option<String> = conn
        .query_row("SELECT finished_at FROM runs WHERE id = 'r1'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(finished.is_some());
}

#[test]
fn a_new_run_is_the_latest_and_the_old_one_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let mut first = Store::open(fresh(2), &path).unwrap();
    first.change_story("s0", |s| s.status = StoryStatus::Complete);
    first.commit().unwrap();
    drop(first);
    let mut second = fresh(1);
    second.run_id = "r2".into();
    let store = Store::open(second, &path).unwrap();
    assert_eq!(RunState::load(&path).unwrap().unwrap(), *store);
    let conn = Connection::open(&path).unwrap();
    let runs: i64 = conn
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 2);
    // Reopening a run (resume) replaces its stories: one removed from the
    // state is gone from the database too.
    let mut resumed = RunState::load(&path).unwrap().unwrap();
    resumed.retain_stories(|_| false);
    resumed.story_mut("other");
    drop(store);
    let store = Store::open(resumed, &path).unwrap();
    assert_eq!(RunState::load(&path).unwrap().unwrap(), *store);
}

#[test]
fn a_follower_reads_what_was_committed_since() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let mut follower: StateFollower = StateFollower::new(&path);
    assert!(follower.refresh().unwrap().is_none());
    let mut store = Store::open(fresh(50), &path).unwrap();
    assert_eq!(follower.refresh().unwrap(), Some(&*store));
    for i in 0..20 {
        store.change_story(&format!("s{i}"), |s| s.status = StoryStatus::Running);
        store.change_run(|st| st.pid = i);
        store.commit().unwrap();
        if i % 7 == 0 {
            assert_eq!(follower.refresh().unwrap(), Some(&*store));
        }
    }
    assert_eq!(follower.refresh().unwrap(), Some(&*store));
    // Reopened with fewer stories: read whole again.
    let mut state = store.clone();
    state.retain_stories(|s| s.id != "s3");
    drop(store);
    let store = Store::open(state, &path).unwrap();
    assert_eq!(follower.refresh().unwrap(), Some(&*store));
}

#[test]
fn an_older_state_and_its_journal_are_imported_once() {
    let dir = tempfile::tempdir().unwrap();
    let cascade = dir.path();
    let mut old = fresh(3);
    old.story_mut("s0").status = StoryStatus::Complete;
    let mut doc = serde_json::to_value(&old).unwrap();
    doc["journal"] = 4.into();
    std::fs::write(cascade.join("state.json"), doc.to_string()).unwrap();
    let failed = serde_json::to_string(&crate::state::StoryState {
        status: StoryStatus::Failed,
        attempts: vec![failed_attempt()],
        ..crate::state::StoryState::new("s1".into(), StoryStatus::Pending)
    })
    .unwrap();
    std::fs::write(
        cascade.join("state.journal"),
        format!(
            "{{\"journal\": 4}}\n{{\"story\": {failed}}}\n{{\"story\": {{\"id\": \"s2\", \"sta"
        ),
    )
    .unwrap();
    let path = db_path(cascade);
    let back = RunState::load(&path).unwrap().unwrap();
    assert_eq!(back.story("s0").unwrap().status, StoryStatus::Complete);
    assert_eq!(back.story("s1").unwrap().status, StoryStatus::Failed);
    assert_eq!(back.story("s1").unwrap().attempts.len(), 1);
    assert_eq!(
        back.story("s2").unwrap().status,
        StoryStatus::Pending,
        "torn line skipped"
    );
    assert!(!cascade.join("state.json").exists());
    assert!(cascade.join("state.json.imported").exists());
    assert!(cascade.join("state.journal.imported").exists());
    // Once: a later change is not undone by a second import.
    let mut store = Store::open(back, &path).unwrap();
    store.change_story("s2", |s| s.status = StoryStatus::Blocked);
    store.commit().unwrap();
    let again = RunState::load(&path).unwrap().unwrap();
    assert_eq!(again.story("s2").unwrap().status, StoryStatus::Blocked);
}

#[test]
fn newer_layouts_and_garbage_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let e = RunState::load(&path).unwrap_err().to_string();
    assert!(e.contains("newer"), "{e}");
    std::fs::write(
        &path,
        "not a database, just text that is long enough to be read",
    )
    .unwrap();
    let e = RunState::load(&path).unwrap_err().to_string();
    assert!(e.contains("run database"), "{e}");
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("state.json"), "{nope").unwrap();
    let e = RunState::load(&db_path(other.path()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not valid JSON"), "{e}");
}

#[test]
fn a_full_disk_is_recognised_by_its_code() {
    let full =
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL), None);
    let e = StateError::db(Path::new("x.db"), full);
    assert!(e.is_disk_full());
    assert!(cascade_fs::mentions_disk_full(&e.to_string()), "{e}");
    let busy =
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY), None);
    assert!(!StateError::db(Path::new("x.db"), busy).is_disk_full());
}
