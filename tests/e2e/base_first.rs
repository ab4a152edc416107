//! End-to-end tests of judging the base first: a required gate that already
//! fails on the target branch stops `approve` before any agent runs (exit 2,
//! the gate named, a `base_judged` event; also under `--base-failures known`
//! when the gate has no test census), and `resume` runs the stories once the
//! base is fixed. With `--base-failures known`, a real pytest gate that
//! already fails one test on the base judges each story by its census: a
//! story that breaks nothing merges, one that breaks a test that passed on
//! the base fails. Without pytest that test says so and returns.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{
    cascade, code, events, explain, git, have, init_repo, of_kind, script, write_json,
};

/// A repository holding `files` and a plan of `stories` (id, description)
/// gated by one required gate `tests` (argv `gate`), and a scripted agent
/// that logs each call to `calls` (outside the repository) and runs
/// `change` (shell lines; `$id` is the story) in the worktree.
struct Project {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Project {
    fn new(
        files: &[(&str, &str)],
        gate: &[&str],
        stories: &[(&str, &str)],
        change: &str,
    ) -> Project {
        let repo = init_repo();
        let tools = tempfile::tempdir().expect("tools dir");
        for (path, text) in files {
            let p = repo.path().join(path);
            std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        }
        let calls = tools.path().join("calls");
        let agent = script(
            &tools.path().join("agent.sh"),
            &format!(
                "id=\"$CASCADE_STORY_ID\"\necho \"$id\" >> '{}'\n{change}",
                calls.display()
            ),
        );
        write_json(
            &tools.path().join("agents.json"),
            &json!({"default_agent": "a", "agents": {"a": {"type": "cli",
                "command": agent.display().to_string(), "args": [], "timeout": 60}}}),
        );
        let stories: Vec<Value> = stories
            .iter()
            .map(|(id, description)| {
                json!({"id": id, "title": format!("Story {id}"), "description": description,
                    "priority": "high", "dependencies": [], "status": "pending",
                    "acceptance_criteria": ["done"]})
            })
            .collect();
        write_json(
            &repo.path().join("prd.json"),
            &json!({
                "goal": "g", "objectives": [], "stories": stories,
                "quality_gates": {"enabled": true, "gates": [{"name": "tests", "type": "test",
                    "command": gate[0], "args": &gate[1..], "required": true}]}
            }),
        );
        git(repo.path(), &["add", "-A"]);
        git(repo.path(), &["commit", "-q", "-m", "project"]);
        Project { repo, tools }
    }

    fn repo(&self) -> &Path {
        self.repo.path()
    }

    /// `cascade <command> --auto-run --retry-delay 0 --max-retries 0 --json <extra>`.
    fn run(&self, command: &str, extra: &[&str]) -> std::process::Output {
        cascade(self.repo())
            .args([
                command,
                "--auto-run",
                "--retry-delay",
                "0",
                "--max-retries",
                "0",
                "--json",
            ])
            .args(extra)
            .arg("--agents")
            .arg(self.tools.path().join("agents.json"))
            .timeout(Duration::from_secs(300))
            .output()
            .expect("cascade runs")
    }

    /// The stories the agent was called for, in order.
    fn calls(&self) -> Vec<String> {
        let path: PathBuf = self.tools.path().join("calls");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// The one `base_judged` event of a run.
fn judged(events: &[Value]) -> Value {
    let found = of_kind(events, "base_judged");
    assert_eq!(found.len(), 1, "{events:?}");
    found[0].clone()
}

#[test]
fn a_red_base_stops_the_run_before_any_agent_and_a_resume_runs_once_it_is_fixed() {
    let broken = "echo 'check.sh:1: the base is broken' >&2\nexit 1\n";
    let p = Project::new(
        &[("check.sh", broken)],
        &["sh", "check.sh"],
        &[("s1", "first"), ("s2", "second")],
        "echo \"$id\" > \"$id.txt\"",
    );
    let out = p.run("approve", &[]);
    let evs = events(&out);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("already fails the required gate 'tests'")
            && stderr.contains("--base-failures known"),
        "{stderr}"
    );
    let base = judged(&evs);
    assert_eq!(base["passed"], false);
    assert_eq!(base["failed"][0]["gate"], "tests");
    assert!(of_kind(&evs, "story_started").is_empty(), "{evs:?}");
    assert!(p.calls().is_empty(), "the agent ran: {:?}", p.calls());
    let last = evs.last().expect("events");
    assert_eq!(last["event"], "run_finished");
    assert_eq!(last["status"], "failed");

    // `known` cannot judge a gate without a test census: still stopped,
    // from the kept report.
    let out = p.run("approve", &["--base-failures", "known"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no test census"),
        "{}",
        explain(&out)
    );
    assert_eq!(judged(&events(&out))["cached"], true);
    assert!(p.calls().is_empty());

    // The base fixed: the run resumes and both stories merge.
    std::fs::write(p.repo().join("check.sh"), "exit 0\n").expect("write");
    git(p.repo(), &["commit", "-q", "-am", "fix the check"]);
    let out = p.run("resume", &[]);
    let evs = events(&out);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(judged(&evs)["passed"], true);
    assert_eq!(of_kind(&evs, "story_merged").len(), 2, "{evs:?}");
    let mut calls = p.calls();
    calls.sort();
    assert_eq!(calls, ["s1", "s2"]);
}

const CALC: &str = "def total(xs):\n    return sum(xs)\n\ndef mul(a, b):\n    return a + b\n";
const TEST_CALC: &str = "from calc import total, mul\n\ndef test_total():\n    assert total([1, 2]) == 3\n\ndef test_empty():\n    assert total([]) == 0\n\ndef test_mul():\n    assert mul(2, 3) == 6\n";

#[test]
fn known_base_failures_judge_each_story_by_new_failures_only() {
    if !have("python3", &["-m", "pytest", "--version"]) {
        return;
    }
    // s1 adds a function with its test; s2 breaks `total`, whose tests
    // passed on the base. `mul` fails on the base all along.
    let change = "if [ \"$id\" = s1 ]; then\n\
        printf '\\ndef neg(x):\\n    return -x\\n' >> calc.py\n\
        printf 'from calc import neg\\n\\ndef test_neg():\\n    assert neg(2) == -2\\n' > tests/test_neg.py\n\
        else\n\
        sed -i 's/return sum(xs)/return sum(xs) + 1/' calc.py\n\
        fi";
    let p = Project::new(
        &[
            ("calc.py", CALC),
            ("tests/__init__.py", ""),
            ("tests/test_calc.py", TEST_CALC),
        ],
        &["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        &[("s1", "add neg"), ("s2", "tune total")],
        change,
    );
    let out = p.run("approve", &["--base-failures", "known"]);
    let evs = events(&out);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let base = judged(&evs);
    assert_eq!(base["passed"], false, "{base}");
    assert_eq!(base["mode"], "known");
    assert_eq!(base["failed"][0]["judged_by_census"], true, "{base}");
    assert_eq!(
        base["failed"][0]["failing_tests"],
        json!(["tests.test_calc.test_mul"]),
        "{base}"
    );
    let merged: Vec<&Value> = of_kind(&evs, "story_merged");
    assert_eq!(merged.len(), 1, "{evs:?}");
    assert_eq!(merged[0]["story"], "s1");
    let failed = of_kind(&evs, "story_failed");
    assert_eq!(failed.len(), 1, "{evs:?}");
    assert_eq!(failed[0]["story"], "s2");
    let why = failed[0].to_string();
    assert!(why.contains("test_total"), "{why}");
    // The new test of s1 was proven on the base (proving is on by default).
    let proved = of_kind(&evs, "tests_proved");
    assert!(
        proved
            .iter()
            .any(|e| e["story"] == "s1" && e["passed"] == true),
        "{evs:?}"
    );
}
