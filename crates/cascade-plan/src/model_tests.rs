//! Unit tests of the plan model: lenient reading, faithful rewriting, errors.

use std::path::Path;

use serde_json::json;

use crate::*;

const PRD: &str = r#"{
  "metadata": {"version": "1.0", "created_at": "2026-01-01"},
  "goal": "Build it",
  "custom_top": [1, 2],
  "objectives": ["one", "two"],
  "stories": [
    {
      "id": "story-001",
      "x-first": true,
      "title": "First",
      "description": "do a",
      "priority": "High",
      "dependencies": [],
      "status": "completed",
      "acceptance_criteria": ["works", {"description": "is fast", "id": "ac-2"}],
      "type": "feature",
      "context_estimate": "small",
      "notes": {"a": 1}
    },
    {
      "title": "Second",
      "id": "story-002",
      "priority": "urgent",
      "dependencies": ["story-001"],
      "status": "inprogress",
      "story_type": "bugfix",
      "agent": "codex",
      "tags": ["t"],
      "files": ["src/a.rs"],
      "context_estimate": 3
    },
    {
      "id": "story-003",
      "title": "Third",
      "dependencies": null,
      "status": "failed"
    }
  ],
  "quality_gates": {"enabled": true, "gates": []}
}
"#;

fn prd() -> Prd {
    Prd::from_json(PRD.as_bytes(), Path::new("prd.json")).unwrap()
}

#[test]
fn reads_plan_cascade_variants() {
    let p = prd();
    assert_eq!(p.goal, "Build it");
    assert_eq!(p.objectives, vec!["one", "two"]);
    assert_eq!(p.stories.len(), 3);
    let s1 = &p.stories[0];
    assert_eq!(s1.priority, Priority::High);
    assert_eq!(s1.status, Status::Complete);
    assert_eq!(s1.status_label(), "completed");
    assert_eq!(s1.acceptance_criteria[0].text(), "works");
    assert_eq!(s1.acceptance_criteria[1].text(), "is fast");
    assert_eq!(s1.story_type.as_deref(), Some("feature"));
    assert_eq!(s1.weight(), None);
    assert_eq!(s1.extra.get("notes"), Some(&json!({"a": 1})));
    let s2 = &p.stories[1];
    assert_eq!(
        s2.priority,
        Priority::Medium,
        "unknown priority counts as medium"
    );
    assert_eq!(s2.status, Status::InProgress);
    assert_eq!(s2.story_type.as_deref(), Some("bugfix"));
    assert_eq!(s2.agent.as_deref(), Some("codex"));
    assert_eq!(s2.weight(), Some(3));
    let s3 = &p.stories[2];
    assert!(s3.dependencies.is_empty());
    assert_eq!(s3.status, Status::Pending);
    assert_eq!(s3.status_label(), "failed");
    assert!(p.quality_gates.is_some());
    assert_eq!(p.extra.get("custom_top"), Some(&json!([1, 2])));
}

#[test]
fn rewrite_loses_nothing_and_keeps_order() {
    let p = prd();
    let out = String::from_utf8(p.to_json().unwrap()).unwrap();
    let mut before: serde_json::Value = serde_json::from_str(PRD).unwrap();
    // The one normalization: a null list is written as an empty list.
    before["stories"][2]["dependencies"] = json!([]);
    let after: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(before, after);
    // Key order is the file's order, including unknown keys between known ones.
    let keys =
        |v: &serde_json::Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys(&before), keys(&after));
    for i in 0..3 {
        assert_eq!(keys(&before["stories"][i]), keys(&after["stories"][i]));
    }
    // Same output as the pretty-printed input.
    assert_eq!(out, serde_json::to_string_pretty(&before).unwrap() + "\n");
}

#[test]
fn the_plan_around_one_story_keeps_the_header_and_that_story_only() {
    let p = prd();
    let one = p.with_stories(vec![p.stories[1].clone()]);
    let mut expected: serde_json::Value = serde_json::from_str(PRD).unwrap();
    let second = expected["stories"][1].clone();
    expected["stories"] = json!([second]);
    let got: serde_json::Value = serde_json::from_slice(&one.to_json().unwrap()).unwrap();
    assert_eq!(got, expected);
    assert_eq!(
        one.story("story-002").map(|s| s.title.as_str()),
        Some("Second")
    );
    assert!(one.story("story-001").is_none());
}

#[test]
fn changed_status_is_written_canonically_and_new_fields_appear() {
    let mut p = prd();
    let s = p.story_mut("story-003").unwrap();
    s.set_status(Status::Complete);
    s.agent = Some("aider".into());
    p.story_mut("story-001")
        .unwrap()
        .set_status(Status::Complete);
    let v: serde_json::Value = serde_json::from_slice(&p.to_json().unwrap()).unwrap();
    assert_eq!(v["stories"][2]["status"], "complete");
    assert_eq!(v["stories"][2]["agent"], "aider");
    assert_eq!(
        v["stories"][0]["status"], "completed",
        "unchanged status keeps its spelling"
    );
    assert_eq!(v["stories"][1]["priority"], "urgent");
}

#[test]
fn new_story_written_in_canonical_order() {
    let mut s = Story::new("s-1", "Title");
    s.story_type = Some("test".into());
    s.dependencies.push("s-0".into());
    let v = serde_json::to_value(&s).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    assert_eq!(
        keys,
        ["id", "title", "priority", "dependencies", "status", "type"]
    );
    assert_eq!(v["priority"], "medium");
    assert_eq!(v["status"], "pending");
}

#[test]
fn save_is_atomic_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("prd.json");
    std::fs::write(&path, PRD).unwrap();
    let mut p = load_prd(&path).unwrap();
    p.save(&path).unwrap();
    let mut again = load_prd(&path).unwrap();
    // The same warning, at its place in the rewritten (pretty) file.
    assert_eq!(again.warnings.len(), 1);
    assert!(again.warnings[0].message.contains("'urgent'"));
    (again.warnings, p.warnings) = (Vec::new(), Vec::new());
    assert_eq!(again, p);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "no temp file left behind");
}

#[test]
fn save_through_a_symlink_updates_the_target_and_keeps_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("plans").join("real-prd.json");
    std::fs::create_dir(real.parent().unwrap()).unwrap();
    std::fs::write(&real, PRD).unwrap();
    let link = dir.path().join("prd.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut p = load_prd(&link).unwrap();
    p.stories[1].status = Status::Complete;
    p.save(&link).unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(load_prd(&real).unwrap().stories[1].status, Status::Complete);
    assert_eq!(
        std::fs::read_dir(real.parent().unwrap()).unwrap().count(),
        1,
        "no temp file left"
    );
}

#[test]
fn malformed_json_names_file_line_column() {
    let text = "{\n  \"stories\": [\n    {\"id\": \"a\",}\n  ]\n}";
    let err = Prd::from_json(text.as_bytes(), Path::new("dir/prd.json")).unwrap_err();
    match &err {
        PlanError::Parse { line, column, .. } => {
            assert_eq!(*line, 3);
            assert!(*column > 0);
        }
        other => panic!("unexpected {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.starts_with("dir/prd.json:3:"), "{msg}");
    assert!(!msg.contains(" at line "), "{msg}");
}

#[test]
fn wrong_type_is_a_parse_error_with_position() {
    let text = "{\"stories\": [{\"id\": \"a\", \"dependencies\": \"b\"}]}";
    let err = Prd::from_json(text.as_bytes(), Path::new("prd.json")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("prd.json:1:"), "{msg}");
    assert!(msg.contains("invalid type"), "{msg}");
}

#[test]
fn missing_file_is_not_found() {
    let err = load_prd("/nonexistent/dir/prd.json").unwrap_err();
    assert!(matches!(err, PlanError::NotFound { .. }));
    assert!(err.to_string().contains("--prd"));
}

#[test]
fn empty_file_says_it_is_empty() {
    for text in ["", "  \n\t\n", "\u{feff}"] {
        let err = Prd::from_json(text.as_bytes(), Path::new("prd.json")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("prd.json:1:1: the file is empty"), "{msg}");
        let err = MegaPlan::from_json(text.as_bytes(), Path::new("mega-plan.json")).unwrap_err();
        assert!(err.to_string().contains("the file is empty"), "{err}");
    }
}

#[test]
fn utf8_byte_order_mark_is_accepted() {
    let text = "\u{feff}{\"stories\": [{\"id\": \"a\", \"title\": \"A\"}]}";
    let prd = Prd::from_json(text.as_bytes(), Path::new("prd.json")).unwrap();
    assert_eq!(prd.stories.len(), 1);
    let text = "\u{feff}{\"features\": []}";
    assert!(MegaPlan::from_json(text.as_bytes(), Path::new("mega-plan.json")).is_ok());
}

#[test]
fn unreadable_path_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let err = load_prd(dir.path()).unwrap_err();
    assert!(matches!(err, PlanError::Read { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("pass the path of a readable JSON file"),
        "{err}"
    );
}

#[test]
fn mega_plan_round_trip() {
    let text = r#"{
  "goal": "g",
  "execution_mode": "auto",
  "target_branch": "main",
  "features": [
    {"id": "feature-001", "name": "user-auth", "title": "Auth", "priority": "high",
     "dependencies": [], "status": "prd_generated", "extra_field": 1}
  ],
  "version": "1"
}"#;
    let m = MegaPlan::from_json(text.as_bytes(), Path::new("mega-plan.json")).unwrap();
    assert_eq!(m.features[0].status, Status::Pending);
    assert_eq!(m.features[0].status_label(), "prd_generated");
    assert_eq!(m.target_branch.as_deref(), Some("main"));
    let back: serde_json::Value = serde_json::from_slice(&m.to_json().unwrap()).unwrap();
    let orig: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(back, orig);
    let mut m = m;
    m.features[0].set_status_label("approved");
    assert_eq!(m.features[0].status_label(), "approved");
    m.features[0].set_status(Status::Complete);
    let v: serde_json::Value = serde_json::from_slice(&m.to_json().unwrap()).unwrap();
    assert_eq!(v["features"][0]["status"], "complete");
}
