//! End-to-end tests of the test census: a default `approve` whose story
//! switches a base-passing test off (a module-level skip marker through an
//! alias, a new conftest's `collect_ignore`, a go test renamed to
//! `Testlower`, which go does not collect) fails as `verification` with `test-disappeared`, read
//! from the reports of real pytest / go test runs; a story that deletes dead
//! code with its test is not flagged; a new conftest hook that reports every
//! test as passed is `result-hook`, a test whose first statement is
//! `return` is `emptied-test`; vitest and jest (installed from npm into a
//! temp dir) report a suite switched off through `describe['skip']`. A
//! forged report written before the gates is not believed, and an honest
//! result hook merges once the story allows its file. Without pytest, go
//! or npm a test says so and returns.

use std::path::PathBuf;
use std::sync::OnceLock;
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
    run_story_full(files, gate, description, &[], change, &[])
}

/// [`run_story`] with the story's `verify_allow`.
fn run_story_allowing(
    files: &[(&str, &str)],
    gate: &[&str],
    description: &str,
    allow: &[&str],
    change: &str,
) -> (Vec<Value>, i32, tempfile::TempDir) {
    run_story_full(files, gate, description, allow, change, &[])
}

/// [`run_story`] with more `approve` flags (tests/e2e/docs.rs).
pub(crate) fn run_story_with(
    files: &[(&str, &str)],
    gate: &[&str],
    description: &str,
    change: &str,
    flags: &[&str],
) -> (Vec<Value>, i32, tempfile::TempDir) {
    run_story_full(files, gate, description, &[], change, flags)
}

/// [`run_story`] with the story's `verify_allow` and more `approve` flags.
fn run_story_full(
    files: &[(&str, &str)],
    gate: &[&str],
    description: &str,
    allow: &[&str],
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
                "acceptance_criteria": ["done"], "verify_allow": allow}],
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
    let (events, code, _repo) = run_story(
        &python_files(),
        PYTEST,
        "make total faster",
        SKIP_THROUGH_AN_ALIAS,
    );
    assert_now_skipped(&events, code, "tests.test_calc.test_total");
}

/// That the run failed with test `id` found skipped.
fn assert_now_skipped(events: &[Value], code: i32, id: &str) {
    let found = disappeared(events);
    assert_eq!(code, 1, "{events:?}");
    assert!(
        found
            .iter()
            .any(|m| m.contains(id) && m.contains("now skipped")),
        "{id}: {found:?} {:?}",
        failures(events)
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
    assert_eq!(code, 1, "{events:?}");
    assert_found(&events, rule, needle);
}

/// That the run has a finding of `rule` whose message says `needle`.
fn assert_found(events: &[Value], rule: &str, needle: &str) {
    let found = findings_of(events, rule);
    assert!(
        found.iter().any(|m| m.contains(needle)),
        "{rule}: {found:?} {:?}",
        failures(events)
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
fn a_test_the_description_asks_to_remove_is_not_flagged_and_others_are() {
    if !have("python3", &["-m", "pytest", "--version"]) {
        println!("skipped: python3 -m pytest is not installed");
        return;
    }
    // The change deletes test_empty and nothing else (calc.py stays).
    let change = "printf 'from calc import total\\n\\ndef test_total():\\n    assert total([1, 2]) == 3\\n' > tests/test_calc.py";
    let asked = "Empty input is no longer supported. Remove test_empty.";
    let (events, code, _repo) = run_story(&python_files(), PYTEST, asked, change);
    assert_eq!(code, 0, "{:?}", failures(&events));
    assert!(disappeared(&events).is_empty(), "{events:?}");
    assert!(
        findings_of(&events, "removed-test").is_empty(),
        "{events:?}"
    );
    // The same change under a description that asks for no removal fails,
    // naming the test.
    let (events, code, _repo) = run_story(&python_files(), PYTEST, "tidy the tests", change);
    assert_eq!(code, 1, "{events:?}");
    let named = findings_of(&events, "removed-test")
        .into_iter()
        .chain(disappeared(&events))
        .any(|m| m.contains("test_empty"));
    assert!(named, "{:?}", failures(&events));
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

/// A go module whose `calc_test.go` holds `TestAdd` and `TestAddZero`,
/// when go is here (its build cache under the temp dir, which the tests'
/// sandbox lets gates write; the target directory it does not).
fn go_project() -> Option<[(&'static str, &'static str); 3]> {
    if !have("go", &["version"]) {
        return None;
    }
    std::env::set_var(
        "GOCACHE",
        std::env::temp_dir().join("cascade-census-gocache"),
    );
    Some([
        ("go.mod", "module example.com/calc\n\ngo 1.19\n"),
        ("calc.go", "package calc\n\nfunc Add(a, b int) int { return a + b }\n"),
        (
            "calc_test.go",
            "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"add\")\n\t}\n}\n\nfunc TestAddZero(t *testing.T) {\n\tif Add(0, 0) != 0 {\n\t\tt.Fatal(\"zero\")\n\t}\n}\n",
        ),
    ])
}

#[test]
fn a_go_test_renamed_out_of_collection_is_test_disappeared() {
    let Some(files) = go_project() else {
        return;
    };
    let change = "sed -i 's/func TestAddZero/func Testaddzero/' calc_test.go";
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

/// A build constraint that is never met switches `calc_test.go` off, and a
/// new test prints go's own result lines for the tests it took away. go
/// 1.19's test2json reads them as those tests' passes (never started:
/// `census-mismatch`); a go that tells a test's output from its results
/// leaves them gone (`test-disappeared`). Either way the story fails.
#[test]
fn a_go_test_printing_results_for_tests_it_switched_off_fails() {
    let body = "\\tfmt.Println(\"--- PASS: TestAdd (0.00s)\")\\n\\tfmt.Println(\"--- PASS: TestAddZero (0.00s)\")\\n";
    let Some((mismatch, gone)) = switched_off_and_printed(body) else {
        return;
    };
    let named = |found: &[String]| {
        found
            .iter()
            .any(|m| m.contains("example.com/calc.TestAddZero"))
    };
    assert!(named(&mismatch) || named(&gone), "{mismatch:?} {gone:?}");
}

/// The same with go's start lines printed too (`=== RUN   TestAdd` before
/// each `--- PASS`): for go 1.19's test2json the tests now start and pass,
/// but inside `TestReport`, while it runs, which real output never does
/// (`census-mismatch`); a newer go leaves them gone.
#[test]
fn a_go_test_printing_start_and_pass_lines_for_tests_it_switched_off_fails() {
    let body = "\\tfor _, n := range []string{\"TestAdd\", \"TestAddZero\"} {\\n\\t\\tfmt.Println(\"=== RUN   \" + n)\\n\\t\\tfmt.Println(\"--- PASS: \" + n + \" (0.00s)\")\\n\\t}\\n";
    let Some((mismatch, gone)) = switched_off_and_printed(body) else {
        return;
    };
    let printed = mismatch.iter().any(|m| {
        m.contains("example.com/calc.TestAddZero") && m.contains("while 'TestReport' ran")
    });
    let named = gone
        .iter()
        .any(|m| m.contains("example.com/calc.TestAddZero"));
    // go 1.19 (Debian's) reads the printed lines as results; 1.20 and
    // later as the test's output.
    let version = std::process::Command::new("go").arg("version").output();
    let version = version.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let reads_printed_lines = version.is_ok_and(|v| v.contains("go1.19") || v.contains("go1.18"));
    let caught = printed || (named && !reads_printed_lines);
    assert!(caught, "{mismatch:?} {gone:?}");
}

/// A `TestMain` that prints go's result lines after the tests ran (where
/// they are no test's output): the story adding it fails as
/// `result-hook`, before the census has to judge what go read.
#[test]
fn a_go_test_main_a_story_adds_is_a_result_hook() {
    let Some(files) = go_project() else {
        return;
    };
    let change = "printf 'package calc\\n\\nimport (\\n\\t\"fmt\"\\n\\t\"os\"\\n\\t\"testing\"\\n)\\n\\nfunc TestMain(m *testing.M) {\\n\\tcode := m.Run()\\n\\tfmt.Println(\"--- PASS: TestAdd (0.00s)\")\\n\\tos.Exit(code)\\n}\\n' > main_test.go";
    let (events, code, _repo) = run_story(
        &files,
        &["go", "test", "./..."],
        "speed up the tests",
        change,
    );
    assert_eq!(code, 1, "{events:?}");
    assert_found(&events, "result-hook", "go `TestMain`");
}

/// A story on [`go_project`] that switches `calc_test.go` off with a build
/// constraint never met and adds `TestReport`, whose body (`printf` text)
/// prints go's lines for the tests it took away. The story must fail; its
/// `census-mismatch` and `test-disappeared` findings (`None`: no go here).
fn switched_off_and_printed(body: &str) -> Option<(Vec<String>, Vec<String>)> {
    let files = go_project()?;
    let change = format!(
        "sed -i '1i //go:build later\\n' calc_test.go\n\
         printf 'package calc\\n\\nimport (\\n\\t\"fmt\"\\n\\t\"testing\"\\n)\\n\\nfunc TestReport(t *testing.T) {{\\n{body}}}\\n' > report_test.go"
    );
    // The diff rule `test-config-edit` sees the constraint; allowed, as
    // a trick it does not see would be, the census is left to judge.
    let (events, code, _repo) = run_story_allowing(
        &files,
        &["go", "test", "./..."],
        "tidy the tests",
        &["calc_test.go"],
        &change,
    );
    assert_eq!(code, 1, "{events:?} {:?}", failures(&events));
    Some((
        findings_of(&events, "census-mismatch"),
        disappeared(&events),
    ))
}

/// The alias trick of [`a_module_level_skip_through_an_alias_is_test_disappeared`]:
/// a skip marker the diff rules do not see, which the census does.
const SKIP_THROUGH_AN_ALIAS: &str = "printf 'import pytest as _p\\n_m = _p.mark\\npytestmark = _m.skip(reason=\"later\")\\n' > tests/x.py\n\
     cat tests/x.py tests/test_calc.py > tests/y.py && mv tests/y.py tests/test_calc.py && rm tests/x.py\n\
     echo '# faster' >> calc.py";

#[test]
fn a_forged_report_written_before_the_gates_is_not_believed() {
    if !have("python3", &["-m", "pytest", "--version"]) {
        println!("skipped: python3 -m pytest is not installed");
        return;
    }
    // Besides the skip, the agent writes JUnit reports saying both tests
    // passed where cascade used to keep them (`.cascade/census/s1-1/`) and
    // where it might keep them now (the attempt's private directory, a
    // guessed report directory in it), under both report names.
    let forged = "<testsuites><testsuite><testcase classname=\"tests.test_calc\" name=\"test_total\"/><testcase classname=\"tests.test_calc\" name=\"test_empty\"/></testsuite></testsuites>";
    let change = format!(
        "{SKIP_THROUGH_AN_ALIAS}\n\
         main=$(dirname \"$(git rev-parse --path-format=absolute --git-common-dir)\")\n\
         for d in \"$main/.cascade/census/s1-1\" \"$main/.cascade/tmp/census/s1-1\" \"$main/.cascade/tmp/census/s1-1/census-guess\"; do\n\
           mkdir -p \"$d\" && printf '%s' '{forged}' > \"$d/tests.xml\" && printf '%s' '{forged}' > \"$d/tests.report\"\n\
         done"
    );
    let (events, code, repo) = run_story(&python_files(), PYTEST, "make total faster", &change);
    assert_now_skipped(&events, code, "tests.test_calc.test_total");
    // The forgeries are where the agent left them; what the gates wrote
    // went to a directory of their own, removed once read.
    let private = repo.path().join(".cascade/tmp/census/s1-1");
    assert!(private.join("census-guess/tests.report").is_file());
    let left: Vec<String> = std::fs::read_dir(&private)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("census-") && n != "census-guess")
        .collect();
    assert!(left.is_empty(), "report directories left behind: {left:?}");
}

/// A conftest hook that only sorts the collected tests (it changes no
/// outcome, but a hook like it could).
const SORTING_HOOK: &str = "printf 'def pytest_collection_modifyitems(items):\\n    items.sort(key=lambda item: item.name)\\n' > tests/conftest.py";

#[test]
fn an_honest_result_hook_is_flagged_unless_the_story_allows_it() {
    if !have("python3", &["-m", "pytest", "--version"]) {
        println!("skipped: python3 -m pytest is not installed");
        return;
    }
    let (events, code, _repo) = run_story(
        &python_files(),
        PYTEST,
        "run the tests in name order",
        SORTING_HOOK,
    );
    assert_eq!(code, 1, "{events:?}");
    assert_found(&events, "result-hook", "pytest_collection_modifyitems");
    // The same story allowing its conftest merges, the hook (and the
    // collection edit it also is) reported as waived.
    let (events, code, _repo) = run_story_allowing(
        &python_files(),
        PYTEST,
        "run the tests in name order",
        &["tests/conftest.py"],
        SORTING_HOOK,
    );
    assert_eq!(code, 0, "{:?}", failures(&events));
    let waived: Vec<String> = of_kind(&events, "verification_finished")
        .iter()
        .flat_map(|e| e["waived"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f["rule"].as_str().map(str::to_string))
        .collect();
    assert!(
        waived.iter().any(|r| r == "result-hook") && waived.iter().any(|r| r == "test-config-edit"),
        "{waived:?} {:?}",
        failures(&events)
    );
}

/// vitest and jest from npm, installed once into a directory of the temp
/// dir (later runs reuse it): their `node_modules/.bin`. `None`, saying
/// why, without node or npm or when the install fails (no registry).
fn js_runners() -> Option<PathBuf> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = std::env::temp_dir().join("cascade-e2e-js-runners");
        let bin = dir.join("node_modules/.bin");
        if bin.join("vitest").exists() && bin.join("jest").exists() {
            return Some(bin);
        }
        if !have("node", &["--version"]) || !have("npm", &["--version"]) {
            return None;
        }
        std::fs::create_dir_all(&dir).ok()?;
        std::fs::write(dir.join("package.json"), "{\"private\": true}\n").ok()?;
        let out = std::process::Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .args(["vitest@5", "jest@30"])
            .current_dir(&dir)
            .output()
            .ok()?;
        if !out.status.success() {
            println!(
                "skipped: npm install vitest jest failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        Some(bin)
    })
    .clone()
}

const CALC_JS: &str = "function total(xs) {\n  return xs.reduce((a, b) => a + b, 0);\n}\n\nmodule.exports = { total };\n";
const CALC_TEST_JS: &str = "const { total } = require('./calc');\n\ndescribe('total', () => {\n  test('sums', () => {\n    expect(total([1, 2])).toBe(3);\n  });\n\n  test('empty', () => {\n    expect(total([])).toBe(0);\n  });\n});\n";

/// The story switches the suite off through `describe['skip']`, which no
/// diff rule reads as a skip: the runner's own report says so.
#[test]
fn a_js_suite_skipped_another_way_is_test_disappeared_under_vitest_and_jest() {
    let Some(bin) = js_runners() else {
        println!("skipped: vitest and jest could not be installed (see above)");
        return;
    };
    let files = [
        ("package.json", "{\"name\": \"calc\", \"private\": true}\n"),
        ("src/calc.js", CALC_JS),
        ("src/calc.test.js", CALC_TEST_JS),
    ];
    let change = "sed -i \"s/^describe(/describe['skip'](/\" src/calc.test.js\n\
                  echo '// faster' >> src/calc.js";
    let vitest = bin.join("vitest").display().to_string();
    let jest = bin.join("jest").display().to_string();
    for gate in [
        vec![vitest.as_str(), "run", "--globals"],
        vec![jest.as_str()],
    ] {
        let (events, code, _repo) = run_story(&files, &gate, "make total faster", change);
        assert_now_skipped(&events, code, "src/calc.test.js > total > sums");
    }
}

const CALC_RS: &str = "pub fn total(xs: &[u32]) -> u32 {\n    xs.iter().sum()\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn sums() {\n        assert_eq!(total(&[1, 2]), 3);\n    }\n\n    #[test]\n    fn empty() {\n        assert_eq!(total(&[]), 0);\n    }\n}\n";

/// `#[cfg_attr(test, ignore)]` ignores a test in every test build, and no
/// diff rule reads it as `#[ignore]`: libtest's own lines say so.
#[test]
fn a_rust_test_ignored_through_cfg_attr_is_test_disappeared() {
    let Some(files) = rust_project() else {
        return;
    };
    let (events, code, _repo) =
        run_story(&files, &["cargo", "test"], "document total", IGNORE_EMPTY);
    assert_now_skipped(&events, code, "src/lib.rs[calc]::tests::empty");
}

/// The shell lines that ignore `tests::empty` of [`CALC_RS`] through
/// `cfg_attr` and document `total`.
const IGNORE_EMPTY: &str = "sed -i 's/^    fn empty() {$/    #[cfg_attr(test, ignore)]\\n    fn empty() {/' src/lib.rs\n\
                            sed -i 's/^pub fn total/\\/\\/\\/ The sum.\\npub fn total/' src/lib.rs\n";

/// A cargo project of [`CALC_RS`], when cargo is here (with rustup's and
/// cargo's homes kept: the runs' HOME is their repository).
fn rust_project() -> Option<[(&'static str, &'static str); 2]> {
    if !have("cargo", &["--version"]) {
        println!("skipped: no cargo");
        return None;
    }
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        for (var, dir) in [("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")] {
            if std::env::var_os(var).is_none() && home.join(dir).is_dir() {
                std::env::set_var(var, home.join(dir));
            }
        }
    }
    Some([
        (
            "Cargo.toml",
            "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        ),
        ("src/lib.rs", CALC_RS),
    ])
}

/// The census reads libtest's lines from the gate's output, which a test
/// can write to past libtest's capture (`io::stdout()` is not captured):
/// a test that prints `test tests::empty ... ok` after `empty` was
/// ignored does not make it pass, and the report that no longer adds up
/// is a finding of its own.
#[test]
fn a_rust_test_printing_a_result_line_of_its_own_is_census_mismatch() {
    let Some(files) = rust_project() else {
        return;
    };
    let forge = format!(
        "{IGNORE_EMPTY}cat >> src/lib.rs <<'EOF'\n\
         #[cfg(test)]\nmod report {{\n    #[test]\n    fn reports() {{\n        use std::io::Write;\n        \
         std::io::stdout().write_all(b\"test tests::empty ... ok\\n\").unwrap();\n    }}\n}}\nEOF\n"
    );
    let (events, code, _repo) = run_story(&files, &["cargo", "test"], "document total", &forge);
    assert_now_skipped(&events, code, "src/lib.rs[calc]::tests::empty");
    assert_found(
        &events,
        "census-mismatch",
        "'src/lib.rs[calc]::tests::empty' is reported twice",
    );
}

/// What the census costs a story, from a real pytest run's events: the
/// base's gates run once (`base_judged`, not cached) before the first
/// agent, each story's census step then reads the kept report; a later
/// run on the merged tip finds that tree's report kept (`cached`). The
/// figures are printed (`--nocapture`).
#[test]
fn the_census_costs_one_base_run_and_then_a_kept_report() {
    if !have("python3", &["-m", "pytest", "--version"]) {
        println!("skipped: python3 -m pytest is not installed");
        return;
    }
    let repo = init_repo();
    for (path, text) in python_files() {
        let p = repo.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let tools = tempfile::tempdir().unwrap();
    // Each story adds a module and its test (which fails without it).
    let agent = script(
        &tools.path().join("agent.sh"),
        "id=$CASCADE_STORY_ID\n\
         printf 'def twice(x):\\n    return 2 * x\\n' > \"m_$id.py\"\n\
         printf 'from m_%s import twice\\n\\ndef test_%s():\\n    assert twice(2) == 4\\n' \"$id\" \"$id\" > \"tests/test_$id.py\"",
    );
    let agents = tools.path().join("agents.json");
    write_json(
        &agents,
        &json!({"default_agent": "a", "agents": {"a": {"type": "cli", "command": agent.display().to_string(), "args": [], "timeout": 60}}}),
    );
    let story = |id: &str, deps: &[&str]| {
        json!({"id": id, "title": format!("Test {id}"), "description": "add a test",
            "priority": "high", "dependencies": deps, "status": "pending",
            "acceptance_criteria": ["done"]})
    };
    let prd = |stories: Vec<Value>| {
        json!({"goal": "g", "objectives": [], "stories": stories,
            "quality_gates": {"enabled": true, "gates": [{"name": "tests", "type": "test",
                "command": PYTEST[0], "args": &PYTEST[1..], "required": true}]}})
    };
    write_json(
        &repo.path().join("prd.json"),
        &prd(vec![story("s1", &[]), story("s2", &["s1"])]),
    );
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "project"]);
    let run = || {
        let out = cascade(repo.path())
            .args(APPROVE_NOW)
            .arg("--json")
            .arg("--agents")
            .arg(&agents)
            .timeout(Duration::from_secs(300))
            .output()
            .unwrap();
        (events(&out), out.status.code().unwrap_or(-1))
    };
    let (first, code) = run();
    assert_eq!(code, 0, "{:?}", failures(&first));
    // A third story on the merged tip, in a second run.
    let mut stories: Value =
        serde_json::from_slice(&std::fs::read(repo.path().join("prd.json")).unwrap()).unwrap();
    stories["stories"]
        .as_array_mut()
        .unwrap()
        .push(story("s3", &[]));
    write_json(&repo.path().join("prd.json"), &stories);
    let (second, code) = run();
    assert_eq!(code, 0, "{:?}", failures(&second));

    let base = |events: &[Value]| of_kind(events, "base_judged").first().map(|e| (*e).clone());
    let (b1, b2) = (
        base(&first).expect("base judged"),
        base(&second).expect("base judged"),
    );
    assert_eq!(b1["cached"], false, "{b1}");
    assert_eq!(b2["cached"], true, "the merged tip's report was kept: {b2}");
    // The census step's verdict comes after the story's gates.
    let census_steps = |events: &[Value]| -> Vec<u64> {
        let mut gated = std::collections::HashSet::new();
        let mut out = Vec::new();
        for e in events {
            let story = e["story"].as_str().unwrap_or("").to_string();
            match e["event"].as_str() {
                Some("gate_finished") => {
                    gated.insert(story);
                }
                Some("verification_finished") if gated.contains(&story) => {
                    out.push(e["duration_ms"].as_u64().unwrap_or(0));
                }
                _ => {}
            }
        }
        out
    };
    let steps: Vec<u64> = census_steps(&first)
        .into_iter()
        .chain(census_steps(&second))
        .collect();
    assert_eq!(steps.len(), 3, "one census step per story: {steps:?}");
    let gate_ms: Vec<u64> = of_kind(&first, "gate_finished")
        .iter()
        .filter_map(|e| e["duration_ms"].as_u64())
        .collect();
    println!(
        "census cost per story: base not cached {} ms (one run of the base's gates, base_judged), kept {} ms; census step per story {steps:?} ms; the stories' own pytest gate {gate_ms:?} ms",
        b1["duration_ms"], b2["duration_ms"]
    );
}

/// A story that only refactors tests: both tests of `test_calc.py` become
/// one parametrised test, and a test of another file is renamed. The
/// census sees the old ids gone; their successors ran and passed, and
/// proving does not ask a refactored test to fail on the base.
#[test]
fn tests_parametrised_and_renamed_by_a_refactor_merge() {
    if !have("python3", &["-m", "pytest", "--version"]) {
        println!("skipped: python3 -m pytest is not installed");
        return;
    }
    let mut files = python_files();
    files.push((
        "tests/test_more.py",
        "from calc import total\n\ndef test_one():\n    assert total([5]) == 5\n",
    ));
    let change = "cat > tests/test_calc.py <<'PY'\n\
                  import pytest\n\
                  \n\
                  from calc import total\n\
                  \n\
                  \n\
                  @pytest.mark.parametrize(\"xs, want\", [([1, 2], 3), ([], 0)])\n\
                  def test_total(xs, want):\n\
                  \x20   assert total(xs) == want\n\
                  PY\n\
                  sed -i 's/def test_one/def test_a_single_item/' tests/test_more.py";
    let (events, code, _repo) = run_story(&files, PYTEST, "tidy the tests", change);
    assert_eq!(code, 0, "{:?}", failures(&events));
    assert!(disappeared(&events).is_empty());
    assert!(findings_of(&events, "unproven-test").is_empty());
}
