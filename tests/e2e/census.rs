//! End-to-end tests of the test census: a default `approve` whose story
//! switches a base-passing test off (a module-level skip marker through an
//! alias, a new conftest's `collect_ignore`, a go test renamed to
//! `Testlower`, which go does not collect) fails as `verification` with `test-disappeared`, read
//! from the reports of real pytest / go test runs; a story that deletes dead
//! code with its test is not flagged; a new conftest hook that reports every
//! test as passed is `result-hook`, a test whose first statement is
//! `return` is `emptied-test`. Without pytest or go the test says so
//! and returns.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{
    cascade, events, git, have, init_repo, of_kind, script, write_json, APPROVE_NOW,
};

/// A repository holding `files` and a one-story plan gated by `gate`
/// (argv), and an agent that runs `change` (shell lines) in the worktree;
/// runs `approve` with no retries. Returns the run's events and exit code.
fn run_story(
    files: &[(&str, &str)],
    gate: &[&str],
    description: &str,
    change: &str,
) -> (Vec<Value>, i32, tempfile::TempDir) {
    run_story_with(files, gate, description, change, &[])
}

/// [`run_story`] with more `approve` flags (tests/e2e/docs.rs).
pub(crate) fn run_story_with(
    files: &[(&str, &str)],
    gate: &[&str],
    description: &str,
    change: &str,
    flags: &[&str],
) -> (Vec<Value>, i32, tempfile::TempDir) {
    let repo = init_repo();
    for (path, text) in files {
        let p = repo.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let tools = tempfile::tempdir().unwrap();
    let agent = script(&tools.path().join("agent.sh"), change);
    write_json(
        &tools.path().join("agents.json"),
        &json!({"default_agent": "a", "agents": {"a": {"type": "cli", "command": agent.display().to_string(), "args": [], "timeout": 60}}}),
    );
    write_json(
        &repo.path().join("prd.json"),
        &json!({
            "goal": "g", "objectives": [],
            "stories": [{"id": "s1", "title": "Change it", "description": description,
                "priority": "high", "dependencies": [], "status": "pending",
                "acceptance_criteria": ["done"]}],
            "quality_gates": {"enabled": true, "gates": [{"name": "tests", "type": "test",
                "command": gate[0], "args": &gate[1..], "required": true}]}
        }),
    );
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "project"]);
    let out = cascade(repo.path())
        .args(APPROVE_NOW)
        .arg("--json")
        .args(flags)
        .arg("--agents")
        .arg(tools.path().join("agents.json"))
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    (events(&out), code, repo)
}

/// Why stories failed, for assertion messages.
fn failures(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["event"] == "verification_finished" || e["event"] == "story_failed")
        .map(Value::to_string)
        .collect()
}

/// The `test-disappeared` findings of the run, as text.
fn disappeared(events: &[Value]) -> Vec<String> {
    findings_of(events, "test-disappeared")
}

/// The findings of rule `rule` in the run, as text.
pub(crate) fn findings_of(events: &[Value], rule: &str) -> Vec<String> {
    of_kind(events, "verification_finished")
        .iter()
        .flat_map(|e| e["findings"].as_array().cloned().unwrap_or_default())
        .filter(|f| f["rule"] == rule)
        .map(|f| f["message"].as_str().unwrap_or("").to_string())
        .collect()
}

pub(crate) const CALC: &str = "def total(xs):\n    return sum(xs)\n";
pub(crate) const TEST_CALC: &str =
    "from calc import total\n\ndef test_total():\n    assert total([1, 2]) == 3\n\ndef test_empty():\n    assert total([]) == 0\n";
pub(crate) const PYTEST: &[&str] = &["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"];

pub(crate) fn python_files() -> Vec<(&'static str, &'static str)> {
    vec![
        ("calc.py", CALC),
        ("tests/__init__.py", ""),
        ("tests/test_calc.py", TEST_CALC),
    ]
}

#[test]
fn a_module_level_skip_through_an_alias_is_test_disappeared() {
    if !have("python3", &["-m", "pytest", "--version"]) {
        return;
    }
    let change = "printf 'import pytest as _p\\n_m = _p.mark\\npytestmark = _m.skip(reason=\"later\")\\n' > tests/x.py\n\
                  cat tests/x.py tests/test_calc.py > tests/y.py && mv tests/y.py tests/test_calc.py && rm tests/x.py\n\
                  echo '# faster' >> calc.py";
    let (events, code, _repo) = run_story(&python_files(), PYTEST, "make total faster", change);
    let found = disappeared(&events);
    assert_eq!(code, 1, "{events:?}");
    assert!(
        found
            .iter()
            .any(|m| m.contains("tests.test_calc.test_total") && m.contains("now skipped")),
        "{found:?} {:?}",
        failures(&events)
    );
}

#[test]
fn a_new_conftest_collect_ignore_is_test_disappeared() {
    if !have("python3", &["-m", "pytest", "--version"]) {
        return;
    }
    let change = "printf 'collect_ignore = [\"test_calc.py\"]\\n' > tests/conftest.py\n\
                  printf 'from calc import total\\n\\ndef test_other():\\n    assert total([2]) == 2\\n' > tests/test_other.py";
    let (events, code, _repo) = run_story(&python_files(), PYTEST, "add a test", change);
    assert_eq!(code, 1, "{events:?}");
    // The diff rule `test-config-edit` sees the new conftest's
    // `collect_ignore` first (verification runs before the gates); without
    // it the census names the test that disappeared.
    let found = disappeared(&events);
    let config = findings_of(&events, "test-config-edit");
    assert!(
        found
            .iter()
            .any(|m| m.contains("tests.test_calc.test_empty") && m.contains("no longer collected"))
            || config.iter().any(|m| m.contains("conftest.py")),
        "{found:?} {config:?} {:?}",
        failures(&events)
    );
}

/// Runs a python story (`change`) through a default approve with real
/// pytest and asserts it fails with a `rule` finding that mentions `needle`.
/// Without pytest it says so and returns.
fn python_story_fails_with(change: &str, rule: &str, needle: &str) {
    if !have("python3", &["-m", "pytest", "--version"]) {
        println!("skipped: python3 -m pytest is not installed");
        return;
    }
    let (events, code, _repo) = run_story(&python_files(), PYTEST, "make total faster", change);
    let found = findings_of(&events, rule);
    assert_eq!(code, 1, "{events:?}");
    assert!(
        found.iter().any(|m| m.contains(needle)),
        "{found:?} {:?}",
        failures(&events)
    );
}

#[test]
fn a_conftest_hook_forcing_passed_is_result_hook() {
    // The story breaks `total` and adds a hook that reports every test as
    // passed: pytest (and so the census) would say all is well.
    let change = "printf 'def total(xs):\\n    return 0\\n' > calc.py\n\
                  printf 'import pytest\\n\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n    outcome = yield\\n    outcome.get_result().outcome = \"passed\"\\n' > tests/conftest.py";
    python_story_fails_with(change, "result-hook", "pytest_runtest_makereport");
}

#[test]
fn a_test_that_returns_first_is_emptied_test() {
    // The tests still run and pass (the census sees nothing wrong): only
    // the body's first `return` tells.
    let change = "printf 'def total(xs):\\n    return 0\\n' > calc.py\n\
                  sed -i 's/^def test_total():$/def test_total():\\n    return/' tests/test_calc.py";
    python_story_fails_with(change, "emptied-test", "test_total");
}

#[test]
fn dead_code_deleted_with_its_test_is_not_flagged() {
    if !have("python3", &["-m", "pytest", "--version"]) {
        return;
    }
    let mut files = python_files();
    files.push(("legacy.py", "def old_total(xs):\n    return 0\n"));
    files.push((
        "tests/test_legacy.py",
        "from legacy import old_total\n\ndef test_old_total():\n    assert old_total([]) == 0\n",
    ));
    let change = "git rm -q legacy.py tests/test_legacy.py";
    let (events, code, repo) = run_story(&files, PYTEST, "delete the unused legacy module", change);
    assert_eq!(code, 0, "{events:?}");
    assert!(disappeared(&events).is_empty());
    // The base's census is kept under its tree: the next story costs nothing.
    let kept = std::fs::read_dir(repo.path().join(".cascade/census"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(kept >= 1, "no census kept in .cascade/census");
}

#[test]
fn a_go_test_renamed_out_of_collection_is_test_disappeared() {
    if !have("go", &["version"]) {
        return;
    }
    let files = [
        ("go.mod", "module example.com/calc\n\ngo 1.19\n"),
        ("calc.go", "package calc\n\nfunc Add(a, b int) int { return a + b }\n"),
        (
            "calc_test.go",
            "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"add\")\n\t}\n}\n\nfunc TestAddZero(t *testing.T) {\n\tif Add(0, 0) != 0 {\n\t\tt.Fatal(\"zero\")\n\t}\n}\n",
        ),
    ];
    let change = "sed -i 's/func TestAddZero/func Testaddzero/' calc_test.go";
    // Under the temp dir, which the tests' sandbox lets gates write (the
    // target directory it does not).
    let gocache = std::env::temp_dir().join("cascade-census-gocache");
    std::env::set_var("GOCACHE", &gocache);
    let (events, code, _repo) =
        run_story(&files, &["go", "test", "./..."], "tidy the tests", change);
    // The diff rule `removed-test` sees this rename first (verification
    // runs before the gates); either way the story fails naming the test.
    let why = failures(&events).join("\n");
    assert_eq!(code, 1, "{events:?}");
    let found = disappeared(&events);
    assert!(
        why.contains("TestAddZero") && why.contains("\"error_type\":\"verification\""),
        "{found:?} {:?}",
        failures(&events)
    );
}
