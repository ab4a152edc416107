//! End-to-end tests: the cases where cascade once decided differently from
//! Plan Cascade 4.0.1 and now decides as it does (docs/plan-cascade.md), run
//! through `cascade agents resolve` as a user would see them.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::{cascade, script, write_json};

/// Three stories: a feature/bugfix keyword tie, no keyword at all, and a
/// plain bug fix.
fn prd(dir: &Path) {
    let story = |id: &str, title: &str| {
        json!({"id": id, "title": title, "description": "", "priority": "medium",
               "dependencies": [], "status": "pending", "acceptance_criteria": []})
    };
    write_json(
        &dir.join("prd.json"),
        &json!({"goal": "parity", "stories": [
            story("tie", "Add crash reporter"),
            story("plain", "Persist tasks to disk"),
            story("bug", "Fix the login crash"),
        ]}),
    );
}

/// agents.json with three installed stub agents `a`, `b`, `c`, plus `extra`.
fn agents(dir: &Path, extra: Value) {
    let bin = dir.join("bin");
    let mut defs = serde_json::Map::new();
    for name in ["a", "b", "c"] {
        let path = script(&bin.join(name), "exit 0");
        defs.insert(
            name.into(),
            json!({"type": "cli", "command": path, "args": []}),
        );
    }
    let mut config = json!({"default_agent": "a", "agents": defs});
    if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    write_json(&dir.join("agents.json"), &config);
}

fn resolve(dir: &Path) -> (Vec<(String, String, String)>, String) {
    let out = cascade(dir)
        .args(["agents", "resolve", "--json"])
        .output()
        .expect("cascade runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = v["assignments"]
        .as_array()
        .expect("assignments")
        .iter()
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap_or_default().to_string();
            (s("story"), s("story_type"), s("agent"))
        })
        .collect();
    (rows, err)
}

fn row(story: &str, story_type: &str, agent: &str) -> (String, String, String) {
    (story.into(), story_type.into(), agent.into())
}

/// A tie goes to feature (Plan Cascade's enum order), a story without a
/// keyword is `unknown` and takes the `unknown` override.
#[test]
fn ties_go_to_feature_and_a_story_without_keywords_is_unknown() {
    let dir = tempfile::tempdir().expect("tempdir");
    prd(dir.path());
    agents(
        dir.path(),
        json!({"phase_defaults": {"implementation": {"default_agent": "a",
            "story_type_overrides": {"bugfix": "b", "unknown": "c"}}}}),
    );
    let (rows, err) = resolve(dir.path());
    assert_eq!(
        rows,
        vec![
            row("tie", "feature", "a"),
            row("plain", "unknown", "c"),
            row("bug", "bugfix", "b"),
        ]
    );
    assert!(!err.contains("no phase_defaults"), "{err}");
}

/// Without `phase_defaults` every phase uses the file's `default_agent`
/// (cascade's deliberate difference), and the user is told once.
#[test]
fn without_phase_defaults_the_default_agent_serves_every_phase_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    prd(dir.path());
    agents(dir.path(), json!({}));
    let (rows, err) = resolve(dir.path());
    assert!(rows.iter().all(|(_, _, agent)| agent == "a"), "{rows:?}");
    let notices = err.matches("no phase_defaults: every phase uses default_agent 'a'");
    assert_eq!(notices.count(), 1, "{err}");
    assert!(err.contains("docs/plan-cascade.md"), "{err}");
}
