//! The run database's round trips, one-time import of an older state,
//! follower, and what a kill leaves.

use super::*;
use crate::retry::FailureKind;
use crate::state::{now_rfc3339, AttemptRecord, RunPhase, StoryStatus};

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
    let head = RunState::load_head(&path).unwrap().unwrap();
    assert_eq!((head.run_id.as_str(), head.stories.len()), ("r1", 0));
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
    let mut follower = StateFollower::new(&path);
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

#[test]
fn history_counts_runs_stories_and_agents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    assert!(history::runs(&path).unwrap().is_empty());
    let passed = |agent: &str, ms| AttemptRecord {
        outcome: Some("passed".into()),
        duration_ms: Some(ms),
        cost_usd: Some(0.5),
        ..AttemptRecord::started(2, agent.into(), "retry".into(), now_rfc3339())
    };
    let mut first = fresh(2);
    first.run_id = "old".into();
    let s0 = first.story_mut("s0");
    s0.status = StoryStatus::Complete;
    s0.story_type = Some("feature".into());
    s0.attempts = vec![failed_attempt(), passed("codex", 3000)];
    first.save(&path).unwrap();
    let mut second = fresh(1);
    second.run_id = "new".into();
    let s0 = second.story_mut("s0");
    s0.story_type = Some("bugfix".into());
    s0.attempts = vec![
        passed("codex", 1000),
        AttemptRecord {
            outcome: Some(crate::state::INTERRUPTED.into()),
            ..AttemptRecord::started(3, "codex".into(), "retry".into(), now_rfc3339())
        },
    ];
    second.save(&path).unwrap();

    let runs = history::runs(&path).unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["new", "old"], "newest first");
    assert_eq!(
        (runs[1].stories, runs[1].complete, runs[1].attempts),
        (2, 1, 2)
    );
    assert_eq!(runs[1].cost_usd, 0.75);

    let (id, stories) = history::stories(&path, None).unwrap().unwrap();
    assert_eq!((id.as_str(), stories.len()), ("new", 1));
    let (_, old) = history::stories(&path, Some("old")).unwrap().unwrap();
    assert_eq!(old[0].attempts.len(), 2);
    assert_eq!(
        old[0].attempts[0].error_type.as_deref(),
        Some("quality_gate")
    );
    assert!(old[1].attempts.is_empty());
    assert!(history::stories(&path, Some("nope")).unwrap().is_none());

    // Judged attempts only (the interrupted one is not), per agent and type.
    let agents = history::agents(&path).unwrap();
    let seen: Vec<_> = agents
        .iter()
        .map(|a| {
            (
                a.agent.as_str(),
                a.story_type.as_deref(),
                a.attempts,
                a.passed,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("codex", Some("bugfix"), 1, 1),
            ("codex", Some("feature"), 2, 1)
        ]
    );
    assert_eq!(agents[1].success_rate, 0.5);
    assert_eq!(agents[1].mean_duration_ms, Some(1502.0));
}
