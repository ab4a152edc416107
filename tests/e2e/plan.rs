//! End-to-end tests: `cascade batches`, `cascade deps`, `cascade validate`.
//!
//! Plans are written into temp dirs; every command, error and exit code of
//! the plan area is covered, including malformed JSON, an empty plan, a
//! 3-cycle, a self-cycle, an unknown id and the `--json` shapes.

use std::path::Path;

use predicates::prelude::*;
use serde_json::{json, Value};

use crate::common::*;

fn story(id: &str, deps: &[&str]) -> Value {
    json!({"id": id, "title": format!("Do {id}"), "priority": "medium", "dependencies": deps, "status": "pending"})
}

fn write_prd(dir: &Path, stories: Vec<Value>) {
    write_json(
        &dir.join("prd.json"),
        &json!({"metadata": {"version": "1.0"}, "goal": "test", "objectives": [], "stories": stories}),
    );
}

fn sample(dir: &Path) {
    write_prd(
        dir,
        vec![
            json!({"id": "story-001", "title": "Schema", "priority": "low", "dependencies": [], "status": "pending"}),
            json!({"id": "story-002", "title": "API", "priority": "high", "dependencies": ["story-001"], "status": "pending"}),
            json!({"id": "story-003", "title": "UI", "priority": "medium", "dependencies": ["story-001"], "status": "pending"}),
            json!({"id": "story-004", "title": "Docs", "priority": "high", "dependencies": [], "status": "pending"}),
            json!({"id": "story-005", "title": "E2E", "dependencies": ["story-002", "story-003"], "status": "pending"}),
        ],
    );
}

fn stdout_json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// ------------------------------------------------------------ batches

#[test]
fn batches_json_shape_and_order() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path());
    let out = cascade(dir.path())
        .args(["batches", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout_json(&out),
        json!({"batches": [["story-004", "story-001"], ["story-002", "story-003"], ["story-005"]],
            "plan_file": "prd.json", "plan_source": "project"})
    );
}

#[test]
fn batches_text_shows_batches_priorities_and_critical_path() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path());
    let out = cascade(dir.path()).arg("batches").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("prd.json: 5 stories, 5 to do in 3 batches"),
        "{text}"
    );
    assert!(
        text.contains("Batch 1 (2 stories, can run in parallel)"),
        "{text}"
    );
    assert!(text.contains("Batch 3 (1 story)"), "{text}");
    assert!(text.contains("[high]"), "{text}");
    assert!(text.contains("* story-001"), "critical path marked: {text}");
    assert!(
        text.contains("critical path (3 stories): story-001 -> story-002 -> story-005"),
        "{text}"
    );
    assert!(text.contains("(after story-002, story-003)"), "{text}");
    assert!(!text.contains('\x1b'), "no colour when not a terminal");
    insta::assert_snapshot!("batches_text", text);
}

#[test]
fn batches_with_prd_flag_and_dash_c() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("plans");
    std::fs::create_dir_all(&sub).unwrap();
    write_json(
        &sub.join("my.json"),
        &json!({"stories": [story("b", &["a"]), story("a", &[])]}),
    );
    let out = cascade(dir.path())
        .args(["batches", "--json", "--prd", "plans/my.json"])
        .output()
        .unwrap();
    assert_eq!(stdout_json(&out)["batches"], json!([["a"], ["b"]]));
    let out = cascade(Path::new("/"))
        .arg("-C")
        .arg(&sub)
        .args(["batches", "--json", "--prd", "my.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["batches"], json!([["a"], ["b"]]));
}

#[test]
fn batches_skip_complete_stories() {
    let dir = tempfile::tempdir().unwrap();
    write_prd(
        dir.path(),
        vec![
            json!({"id": "a", "title": "A", "status": "completed"}),
            json!({"id": "b", "title": "B", "dependencies": ["a"], "status": "inprogress"}),
            json!({"id": "c", "title": "C", "dependencies": ["b"]}),
        ],
    );
    let out = cascade(dir.path())
        .args(["batches", "--json"])
        .output()
        .unwrap();
    assert_eq!(stdout_json(&out)["batches"], json!([["b"], ["c"]]));
    let out = cascade(dir.path()).arg("batches").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("already complete (1): a"), "{text}");
}

#[test]
fn batches_empty_plan() {
    let dir = tempfile::tempdir().unwrap();
    write_prd(dir.path(), vec![]);
    cascade(dir.path())
        .args(["batches", "--json"])
        .assert()
        .code(0)
        .stdout("{\"batches\":[],\"plan_file\":\"prd.json\",\"plan_source\":\"project\"}\n");
    cascade(dir.path())
        .arg("batches")
        .assert()
        .code(0)
        .stdout(predicate::str::contains("the PRD has no stories"));
}

#[test]
fn batches_missing_prd_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    cascade(dir.path())
        .arg("batches")
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::starts_with("error: prd.json not found"))
        .stderr(predicate::str::contains("--prd PATH"));
}

#[test]
fn batches_missing_prd_hints_at_mega_plan() {
    let dir = tempfile::tempdir().unwrap();
    write_json(&dir.path().join("mega-plan.json"), &json!({"features": []}));
    cascade(dir.path())
        .arg("batches")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "cascade deps --mega mega-plan.json",
        ));
}

#[test]
fn malformed_json_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prd.json"),
        "{\n  \"stories\": [\n    {\"id\": \"a\" \"title\": \"x\"}\n  ]\n}\n",
    )
    .unwrap();
    for cmd in [
        vec!["batches"],
        vec!["deps"],
        vec!["validate"],
        vec!["batches", "--json"],
    ] {
        let out = cascade(dir.path()).args(&cmd).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        let err = stderr(&out);
        assert!(err.starts_with("error: prd.json:3:16: "), "{cmd:?}: {err}");
        assert!(err.contains("fix the JSON"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(out.stdout.is_empty());
        // Every command says it in the same words.
        insta::assert_snapshot!("malformed_prd_error", err);
    }
}

#[test]
fn wrong_field_type_is_reported_with_position() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prd.json"),
        "{\"stories\": [\n{\"id\": \"a\", \"title\": \"t\", \"dependencies\": 5}]}",
    )
    .unwrap();
    cascade(dir.path())
        .arg("batches")
        .assert()
        .code(2)
        .stderr(predicate::str::starts_with("error: prd.json:2:"))
        .stderr(predicate::str::contains("invalid type"));
}

#[test]
fn three_cycle_fails_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    write_prd(
        dir.path(),
        vec![
            story("story-001", &["story-003"]),
            story("story-002", &["story-001"]),
            story("story-003", &["story-002"]),
        ],
    );
    for cmd in [
        vec!["batches"],
        vec!["batches", "--json"],
        vec!["deps"],
        vec!["validate"],
    ] {
        let out = cascade(dir.path()).args(&cmd).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        let err = stderr(&out);
        assert!(
            err.starts_with("error: prd.json: invalid PRD (1 problem):"),
            "{err}"
        );
        assert!(
            err.contains("dependency cycle: story-001 -> story-003 -> story-002 -> story-001"),
            "{err}"
        );
        assert!(err.contains("remove one of these dependencies"), "{err}");
        assert!(out.stdout.is_empty(), "{cmd:?}");
        if let [command] = cmd[..] {
            insta::assert_snapshot!(format!("cycle_error_{command}"), err);
        }
    }
}

#[test]
fn self_cycle_fails() {
    let dir = tempfile::tempdir().unwrap();
    write_prd(dir.path(), vec![story("a", &["a"]), story("b", &[])]);
    cascade(dir.path())
        .arg("batches")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "story 'a' depends on itself (a -> a)",
        ));
}

#[test]
fn unknown_dependency_names_both_ids() {
    let dir = tempfile::tempdir().unwrap();
    write_prd(dir.path(), vec![story("story-001", &["story-999"])]);
    let out = cascade(dir.path())
        .args(["batches", "--json"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains(
            "story 'story-001' depends on unknown story 'story-999'",
        ));
    insta::assert_snapshot!("unknown_dependency_error", stderr(out.get_output()));
}

#[test]
fn every_problem_listed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    write_prd(
        dir.path(),
        vec![
            json!({"title": "no id"}),
            json!({"id": "dup", "title": "one"}),
            json!({"id": "dup", "title": ""}),
            json!({"id": "has space", "title": "x"}),
            story("x", &["ghost"]),
        ],
    );
    let out = cascade(dir.path()).arg("validate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("invalid PRD (5 problems)"), "{err}");
    for needle in [
        "stories[0] has no \"id\"",
        "story 'dup' has an empty title",
        "id 'dup' is used by stories[1] and stories[2]",
        "stories[3] has an invalid id 'has space'",
        "story 'x' depends on unknown story 'ghost'",
        "run `cascade validate` again",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in {err}");
    }
    insta::assert_snapshot!("every_problem_error", err);
}

// ------------------------------------------------------------ validate

#[test]
fn validate_ok() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path());
    cascade(dir.path())
        .arg("validate")
        .assert()
        .code(0)
        .stdout("prd.json is valid: 5 stories (5 to do), 4 dependencies, 3 batches\n");
}

#[test]
fn validate_json() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path());
    let out = cascade(dir.path())
        .args(["validate", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = stdout_json(&out);
    assert_eq!(v["valid"], true);
    assert_eq!(v["batches"], 3);
    write_prd(dir.path(), vec![story("a", &["b"])]);
    let out = cascade(dir.path())
        .args(["validate", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v = stdout_json(&out);
    assert_eq!(v["valid"], false);
    assert_eq!(v["problems"].as_array().unwrap().len(), 1);
}

#[test]
fn validate_empty_plan() {
    let dir = tempfile::tempdir().unwrap();
    write_prd(dir.path(), vec![]);
    cascade(dir.path())
        .arg("validate")
        .assert()
        .code(0)
        .stdout(predicate::str::contains("0 stories"));
}

#[test]
fn validate_nothing_to_read() {
    let dir = tempfile::tempdir().unwrap();
    cascade(dir.path())
        .arg("validate")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no prd.json or mega-plan.json in"))
        .stderr(predicate::str::contains("--prd PATH or --mega PATH"));
    cascade(dir.path())
        .args(["validate", "--prd", "nope.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::starts_with("error: nope.json not found"));
}

fn mega(dir: &Path, features: Vec<Value>) {
    write_json(
        &dir.join("mega-plan.json"),
        &json!({"goal": "g", "execution_mode": "auto", "target_branch": "main", "features": features}),
    );
}

#[test]
fn validate_mega_plan_and_bad_names() {
    let dir = tempfile::tempdir().unwrap();
    mega(
        dir.path(),
        vec![
            json!({"id": "feature-001", "name": "user-auth", "title": "Auth", "dependencies": []}),
            json!({"id": "feature-002", "name": "billing", "title": "Billing", "dependencies": ["feature-001"]}),
        ],
    );
    cascade(dir.path())
        .arg("validate")
        .assert()
        .code(0)
        .stdout(predicate::str::contains(
            "mega-plan.json is valid: 2 features",
        ));
    mega(
        dir.path(),
        vec![json!({"id": "feature-001", "name": "User Auth", "title": "Auth"})],
    );
    cascade(dir.path())
        .args(["validate", "--mega", "mega-plan.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("invalid mega-plan (1 problem)"))
        .stderr(predicate::str::contains("invalid name 'User Auth'"));
}

// ------------------------------------------------------------ deps

#[test]
fn deps_json_shape() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path());
    let out = cascade(dir.path())
        .args(["deps", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = stdout_json(&out);
    for key in [
        "nodes",
        "roots",
        "critical_path",
        "cycles",
        "bottlenecks",
        "orphans",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(
        v["nodes"][0],
        json!({"id": "story-001", "dependencies": [], "dependents": ["story-002", "story-003"],
               "depth": 0, "priority": "low", "status": "pending"})
    );
    assert_eq!(v["nodes"][4]["depth"], 2);
    assert_eq!(
        v["nodes"][4]["dependencies"],
        json!(["story-002", "story-003"])
    );
    assert_eq!(v["roots"], json!(["story-001", "story-004"]));
    assert_eq!(
        v["critical_path"],
        json!(["story-001", "story-002", "story-005"])
    );
    assert_eq!(v["cycles"], json!([]));
    assert_eq!(v["bottlenecks"], json!(["story-001"]));
    assert_eq!(v["orphans"], json!(["story-004"]));
}

#[test]
fn deps_text() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path());
    let out = cascade(dir.path()).arg("deps").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("prd.json: 5 stories, 4 dependencies, depth 2"),
        "{text}"
    );
    assert!(
        text.contains("critical path: story-001 -> story-002 -> story-005  (3 steps)"),
        "{text}"
    );
    assert!(
        text.contains("bottlenecks: story-001 (2 dependents)"),
        "{text}"
    );
    assert!(text.contains("orphans: story-004"), "{text}");
    assert!(text.contains("cycles: none"), "{text}");
    assert!(text.contains("story-002, story-003"), "{text}");
    insta::assert_snapshot!("deps_text", text);
}

#[test]
fn deps_no_check_reports_cycles_and_unknown() {
    let dir = tempfile::tempdir().unwrap();
    write_prd(
        dir.path(),
        vec![
            story("a", &["c"]),
            story("b", &["a"]),
            story("c", &["b"]),
            story("d", &["d", "ghost"]),
            story("e", &[]),
        ],
    );
    cascade(dir.path())
        .args(["deps", "--json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("a -> c -> b -> a"));
    let out = cascade(dir.path())
        .args(["deps", "--json", "--no-check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(v["cycles"], json!([["a", "c", "b", "a"], ["d", "d"]]));
    assert_eq!(
        v["unknown_dependencies"],
        json!([{"id": "d", "dependency": "ghost"}])
    );
    assert_eq!(v["nodes"][0]["depth"], Value::Null);
    assert_eq!(v["nodes"][4]["depth"], 0);
    let out = cascade(dir.path())
        .args(["deps", "--no-check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("cycles: 2"), "{text}");
    assert!(text.contains("a -> c -> b -> a"), "{text}");
    assert!(text.contains("unknown dependencies: d -> ghost"), "{text}");
}

#[test]
fn deps_reads_mega_plan_when_only_it_exists() {
    let dir = tempfile::tempdir().unwrap();
    mega(
        dir.path(),
        vec![
            json!({"id": "feature-001", "name": "core", "title": "Core"}),
            json!({"id": "feature-002", "name": "api", "title": "API", "dependencies": ["feature-001"]}),
            json!({"id": "feature-003", "name": "ui", "title": "UI", "dependencies": ["api"]}),
        ],
    );
    let out = cascade(dir.path())
        .args(["deps", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(
        v["critical_path"],
        json!(["feature-001", "feature-002", "feature-003"])
    );
    let out = cascade(dir.path()).arg("deps").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("mega-plan.json: 3 features, 2 dependencies"),
        "{text}"
    );
}

#[test]
fn deps_prefers_prd_and_mega_flag_overrides() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path());
    mega(
        dir.path(),
        vec![json!({"id": "f1", "name": "x", "title": "X"})],
    );
    let out = cascade(dir.path())
        .args(["deps", "--json"])
        .output()
        .unwrap();
    assert_eq!(stdout_json(&out)["nodes"].as_array().unwrap().len(), 5);
    let out = cascade(dir.path())
        .args(["deps", "--json", "--mega", "mega-plan.json"])
        .output()
        .unwrap();
    assert_eq!(stdout_json(&out)["nodes"].as_array().unwrap().len(), 1);
}

#[test]
fn deps_mega_cycle_fails() {
    let dir = tempfile::tempdir().unwrap();
    mega(
        dir.path(),
        vec![
            json!({"id": "f1", "name": "one", "title": "1", "dependencies": ["f2"]}),
            json!({"id": "f2", "name": "two", "title": "2", "dependencies": ["one"]}),
        ],
    );
    cascade(dir.path())
        .arg("deps")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("invalid mega-plan"))
        .stderr(predicate::str::contains("f1 -> f2 -> f1"))
        .stderr(predicate::str::contains("--no-check"));
}

#[test]
fn deps_empty_plan() {
    let dir = tempfile::tempdir().unwrap();
    write_prd(dir.path(), vec![]);
    let out = cascade(dir.path())
        .args(["deps", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = stdout_json(&out);
    assert_eq!(v["nodes"], json!([]));
    assert_eq!(v["critical_path"], json!([]));
    cascade(dir.path())
        .arg("deps")
        .assert()
        .code(0)
        .stdout(predicate::str::contains("the plan has no stories"));
}

#[test]
fn conflicting_flags_are_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    cascade(dir.path())
        .args(["deps", "--prd", "a.json", "--mega", "b.json"])
        .assert()
        .code(2);
}

#[test]
fn unknown_fields_do_not_disturb_commands() {
    let dir = tempfile::tempdir().unwrap();
    write_json(
        &dir.path().join("prd.json"),
        &json!({"version": 3, "stories": [
            {"id": "a", "title": "A", "acceptance_criteria": [{"description": "x", "id": "ac-1"}, "y"],
             "type": "feature", "context_estimate": "small", "custom": {"deep": [1]}},
            {"id": "b", "title": "B", "story_type": "test", "dependencies": ["a"], "priority": "weird"}
        ]}),
    );
    let out = cascade(dir.path())
        .args(["batches", "--json"])
        .output()
        .unwrap();
    assert_eq!(stdout_json(&out)["batches"], json!([["a"], ["b"]]));
}

#[test]
fn unreadable_empty_and_bom_prd_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("adir.json")).unwrap();
    let out = cascade(dir.path())
        .args(["batches", "--prd", "adir.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.starts_with("error: cannot read adir.json"), "{err}");
    assert_eq!(
        err.matches("os error 21").count(),
        1,
        "cause printed twice: {err}"
    );
    assert!(
        err.contains("pass the path of a readable JSON file"),
        "{err}"
    );

    std::fs::write(dir.path().join("empty.json"), "\n").unwrap();
    let out = cascade(dir.path())
        .args(["validate", "--prd", "empty.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("empty.json:1:1: the file is empty"),
        "{}",
        stderr(&out)
    );

    // Some editors save JSON with a UTF-8 byte order mark.
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(br#"{"stories": [{"id": "s1", "title": "One"}]}"#);
    std::fs::write(dir.path().join("bom.json"), bytes).unwrap();
    let out = cascade(dir.path())
        .args(["batches", "--prd", "bom.json", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["batches"], json!([["s1"]]));
}

#[test]
fn a_missing_dash_c_directory_says_what_to_check() {
    let dir = tempfile::tempdir().unwrap();
    let out = cascade(dir.path())
        .args(["-C", "no/such/dir", "batches"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: cannot change to directory 'no/such/dir'"),
        "{err}"
    );
    assert!(err.contains("-C"), "{err}");
}
