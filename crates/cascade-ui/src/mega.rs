//! The mega run on the page: `GET /api/mega` (its features in batch order
//! with their progress, and each feature's stories as its engine's state
//! `.cascade/mega/features/<name>/cascade.db` and the live run's events say
//! them), and what a Retry of a finished mega run's story needs to hold
//! before `cascade mega resume --yes` is started for it. Steering a live
//! mega run goes through the live channel like a plain run's (see `api`).

use std::path::Path;

use axum::http::StatusCode;
use cascade_engine::mega::run::{feature_dir, valid_feature_name};
use cascade_engine::mega::state::{FeatureState, MegaState, StoryCounts};
use cascade_engine::state::{RunState, StoryStatus};
use serde_json::{json, Value};

use crate::hub::Status;
use crate::snapshot::{story_state, SeenMap, Summary};

/// The engine state of feature `name` (`None`: its stories have not run).
fn feature_state(cascade_dir: &Path, name: &str) -> Option<RunState> {
    RunState::load(&cascade_engine::store::db_path(&feature_dir(
        cascade_dir,
        name,
    )))
    .ok()
    .flatten()
}

/// `GET /api/mega`: the mega run with its features and their stories;
/// `live` and `paused` when the live run is this mega run.
pub(crate) fn view(cascade_dir: &Path, said: &Summary, status: &Status) -> Value {
    let state = match MegaState::load(cascade_dir) {
        Ok(Some(s)) => s,
        Ok(None) => return json!({ "features": [] }),
        Err(e) => return json!({ "features": [], "error": e.to_string() }),
    };
    let live = status.live
        && status
            .run_id
            .as_deref()
            .is_some_and(crate::live::is_mega_run);
    let plan = cascade_plan::load_mega(&state.plan).ok();
    let features: Vec<Value> = state
        .ordered_features()
        .map(|(name, f)| {
            let p = plan
                .as_ref()
                .and_then(|p| p.features.iter().find(|x| x.name == *name));
            let events = said.stories(Some(name));
            let stories = stories(cascade_dir, name, f, events);
            let c = counts(&stories).unwrap_or(f.stories);
            json!({
                "name": name,
                "title": p.map(|p| p.title.clone()),
                "status": f.status,
                "batch": f.batch,
                "depends_on": p.map(|p| p.dependencies.clone()).unwrap_or_default(),
                "stories_total": c.total,
                "stories_done": c.done,
                "failed": c.failed,
                "blocked": c.blocked,
                "branch": f.branch,
                "merge_commit": f.merge_commit,
                "failure": f.failure.as_ref().map(|x| json!({"kind": x.kind, "message": x.message})),
                "started_at": f.started_at,
                "finished_at": f.finished_at,
                "stories": stories,
            })
        })
        .collect();
    json!({
        "goal": state.goal,
        "status": state.status,
        "target_branch": state.target_branch,
        "batches": state.batches,
        "live": live,
        "paused": live && status.paused,
        "features": features,
    })
}

/// A feature's stories in its PRD's order (else its state's): `{id, title,
/// state, agent, attempt, failure_kind, error, blocked_by}`, `state` as in
/// the run snapshot.
fn stories(
    cascade_dir: &Path,
    name: &str,
    f: &FeatureState,
    events: Option<&SeenMap>,
) -> Vec<Value> {
    let state = feature_state(cascade_dir, name);
    // In its worktree while the feature runs; kept beside its state once
    // the feature landed and its worktree was removed.
    let prd = f
        .prd
        .clone()
        .filter(|p| p.is_file())
        .or_else(|| Some(feature_dir(cascade_dir, name).join("prd.json")))
        .and_then(|p| cascade_plan::load_prd(p).ok());
    let listed: Vec<(String, Option<String>)> = match (&prd, &state) {
        (Some(p), _) => p
            .stories
            .iter()
            .map(|s| (s.id.clone(), Some(s.title.clone())))
            .collect(),
        (None, Some(st)) => st.stories.iter().map(|s| (s.id.clone(), None)).collect(),
        (None, None) => Vec::new(),
    };
    listed
        .into_iter()
        .map(|(id, title)| {
            let s = state.as_ref().and_then(|st| st.story(&id));
            let said = events.and_then(|e| e.get(id.as_str()));
            let stands = s.filter(|s| s.status != StoryStatus::Complete);
            json!({
                "state": story_state(s.map(|s| (s.status, s.error_type)), said.is_some_and(|x| x.skipped), said.is_some_and(|x| x.merging)),
                "agent": s.and_then(|s| s.agent.clone()),
                "attempt": s.and_then(|s| s.attempts.last()).map(|a| a.attempt),
                "failure_kind": stands.and_then(|s| s.error_type).map(|k| k.as_str()),
                "error": stands.and_then(|s| s.error.clone()),
                "blocked_by": s.map(|s| s.blocked_by.clone()).unwrap_or_default(),
                "id": id,
                "title": title,
            })
        })
        .collect()
}

/// A feature's story counts as its stories stand now (`None` without
/// stories): the mega state's counters follow the events, which do not say
/// which stories a retry let wait again.
fn counts(stories: &[Value]) -> Option<StoryCounts> {
    if stories.is_empty() {
        return None;
    }
    let mut c = StoryCounts {
        total: stories.len(),
        ..StoryCounts::default()
    };
    for s in stories {
        match s["state"].as_str() {
            Some("complete" | "skipped") => c.done += 1,
            Some("failed" | "cancelled") => c.failed += 1,
            Some("blocked") => c.blocked += 1,
            _ => {}
        }
    }
    Some(c)
}

/// Whether story `story` of feature `feature` of the (finished) mega run
/// can be retried: it failed or is blocked. `Err((status, why))` otherwise.
pub(crate) fn retryable(
    cascade_dir: &Path,
    feature: &str,
    story: &str,
) -> Result<(), (StatusCode, String)> {
    let unknown = || {
        (
            StatusCode::NOT_FOUND,
            format!("no feature '{feature}' in the mega run"),
        )
    };
    if !valid_feature_name(feature) {
        return Err(unknown());
    }
    let mega = MegaState::load(cascade_dir)
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .ok_or_else(|| {
            (
                StatusCode::CONFLICT,
                "there is no mega run to retry a story of".to_string(),
            )
        })?;
    mega.feature(feature).ok_or_else(unknown)?;
    let state = feature_state(cascade_dir, feature).ok_or_else(|| {
        (
            StatusCode::CONFLICT,
            format!("feature '{feature}' has not run its stories yet"),
        )
    })?;
    match state.story(story).map(|s| s.status) {
        None => Err((
            StatusCode::NOT_FOUND,
            format!("no story '{story}' in feature '{feature}'"),
        )),
        Some(StoryStatus::Failed | StoryStatus::Blocked) => Ok(()),
        Some(other) => Err((
            StatusCode::CONFLICT,
            format!(
                "{story} of {feature} is {}: only a failed story can be retried",
                other.as_str()
            ),
        )),
    }
}
