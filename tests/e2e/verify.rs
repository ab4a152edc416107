//! End-to-end tests of verification and review: scripted agents that cheat
//! (a stub that compiles, a failing test switched off) are caught by local
//! verification and pass on the retry with real code; a scripted reviewer
//! asks for a revision that the retry makes; a reviewer without a marker is
//! a warning (a failure with `--review=strict`); an acceptance criterion's
//! `check` runs as the story's own gate; `cascade verify` for a person.
//!
//! The gates are real (`python3 -m py_compile`, `python3 -m unittest`); on a
//! machine without python3 the tests say so and pass.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{cascade, events, explain, git, init_repo, of_kind as of, script, write_json};

/// A repository with committed files, a tools dir (agents.json, scripts,
/// copies of the prompts) and a PRD of one story.
struct Fx {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

/// Whether python3 runs here; the tests that need it skip (and say why) without.
fn have_python() -> bool {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipping: python3 is not installed (the gates of these tests run it)");
    }
    ok
}

impl Fx {
    /// `files`: committed into the repository; `story_extra`: merged into the story.
    fn new(files: &[(&str, &str)], gates: Value, story_extra: Value) -> Fx {
        let repo = init_repo();
        for (path, text) in files {
            std::fs::write(repo.path().join(path), text).unwrap();
        }
        git(repo.path(), &["add", "-A"]);
        git(
            repo.path(),
            &["commit", "-q", "--allow-empty", "-m", "project"],
        );
        let fx = Fx {
            repo,
            tools: tempfile::tempdir().unwrap(),
        };
        let mut story = json!({
            "id": "s1", "title": "Sum the items", "description": "calc.total(xs) returns the sum of xs",
            "priority": "high", "dependencies": [], "status": "pending",
            "acceptance_criteria": ["total([1, 2, 3]) == 6"]
        });
        if let (Some(s), Some(extra)) = (story.as_object_mut(), story_extra.as_object()) {
            for (k, v) in extra {
                s.insert(k.clone(), v.clone());
            }
        }
        write_json(
            &fx.repo().join("prd.json"),
            &json!({
                "goal": "calc", "objectives": [], "stories": [story],
                "quality_gates": {"enabled": true, "gates": gates}
            }),
        );
        fx
    }

    fn repo(&self) -> &Path {
        self.repo.path()
    }

    fn t(&self, name: &str) -> PathBuf {
        self.tools.path().join(name)
    }

    /// The author agent: `attempt1` / `later` are shell lines run in the
    /// worktree on the first / later attempts; it keeps a copy of each prompt.
    fn author(&self, attempt1: &str, later: &str) {
        let t = self.tools.path().display();
        script(
            &self.t("author.sh"),
            &format!(
                "cp \"$CASCADE_PROMPT_FILE\" '{t}/prompt-'\"$CASCADE_ATTEMPT\"'.md'\n\
                 if [ \"$CASCADE_ATTEMPT\" = 1 ]; then\n{attempt1}\nelse\n{later}\nfi"
            ),
        );
    }

    /// The reviewer agent: `body` runs in the worktree; it notes its phase.
    fn reviewer(&self, body: &str) {
        let t = self.tools.path().display();
        script(
            &self.t("reviewer.sh"),
            &format!(
                "echo \"$CASCADE_PHASE\" >> '{t}/reviewer-phases'\n\
                 cp \"$CASCADE_PROMPT_FILE\" '{t}/review-prompt-'\"$CASCADE_ATTEMPT\"'.md'\n{body}"
            ),
        );
    }

    /// agents.json: `author` writes the code (default agent), `reviewer` exists.
    fn agents(&self) {
        self.agents_priced(json!({}));
    }

    /// [`Fx::agents`] with agents.json's `prices`.
    fn agents_priced(&self, prices: Value) {
        let agent = |name: &str| json!({"type": "cli", "command": self.t(name).display().to_string(), "args": [], "timeout": 60});
        write_json(
            &self.t("agents.json"),
            &json!({"default_agent": "author", "agents": {"author": agent("author.sh"), "reviewer": agent("reviewer.sh")},
                    "prices": prices}),
        );
    }

    fn approve(&self, extra: &[&str]) -> std::process::Output {
        self.approve_plain(&[&["--json"], extra].concat())
    }

    /// `approve` with the human output (no `--json` unless in `extra`).
    fn approve_plain(&self, extra: &[&str]) -> std::process::Output {
        cascade(self.repo())
            .args(["approve", "--auto-run", "--retry-delay", "0"])
            .args(extra)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap()
    }

    fn read(&self, path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    fn progress(&self) -> String {
        self.read(&self.repo().join("progress.txt"))
    }

    fn state(&self) -> Value {
        crate::common::run_state(self.repo())
    }

    /// calc.py on main after the run.
    fn merged_calc(&self) -> String {
        git(self.repo(), &["show", "main:calc.py"])
    }
}

/// Compiles every Python file: green on the base, which has none yet (the
/// base is judged before the first agent, and a red base stops the run).
const COMPILE_GATE: &str = r#"[{"name": "compile", "type": "typecheck", "command": "python3", "args": ["-m", "compileall", "-q", "."]}]"#;

/// A calc.py that passes [`TEST_FILE`]; what an attempt writes to break it,
/// and to fix it again.
const CALC_OK: &str = "def total(xs):\n    return sum(xs)\n";
const BUG: &str = "printf 'def total(xs):\\n    return xs[0]\\n' > calc.py";
const FIX: &str = "printf 'def total(xs):\\n    return sum(xs) if xs else 0\\n' > calc.py";
const TEST_FILE: &str = "import unittest\nfrom calc import total\n\n\nclass TotalTest(unittest.TestCase):\n    def test_sums(self):\n        self.assertEqual(total([1, 2, 3]), 6)\n";

#[test]
fn a_stub_that_passes_the_gates_is_caught_and_the_retry_does_the_work() {
    if !have_python() {
        return;
    }
    let fx = Fx::new(&[], serde_json::from_str(COMPILE_GATE).unwrap(), json!({}));
    fx.author(
        "printf 'def total(xs):\\n    pass\\n' > calc.py",
        "printf 'def total(xs):\\n    return sum(xs)\\n' > calc.py",
    );
    fx.reviewer("exit 0");
    fx.agents();
    let out = fx.approve(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let ev = events(&out);
    let checked = of(&ev, "verification_finished");
    assert_eq!(checked.len(), 2, "{}", explain(&out));
    assert_eq!(checked[0]["passed"], false);
    assert_eq!(checked[0]["findings"][0]["rule"], "py-stub-body");
    assert_eq!(checked[0]["findings"][0]["file"], "calc.py");
    assert_eq!(checked[0]["findings"][0]["line"], 2);
    assert_eq!(checked[1]["passed"], true);
    let failed = of(&ev, "attempt_failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["error_type"], "verification");
    // The gates never ran on the stub: verification comes first.
    let gate_runs = of(&ev, "gate_finished");
    assert_eq!(gate_runs.len(), 1, "gates ran only on the real code");
    // The retry prompt names the finding.
    let retry = fx.read(&fx.t("prompt-2.md"));
    assert!(retry.contains("calc.py:2: [py-stub-body]"), "{retry}");
    assert!(retry.contains("Findings to fix"), "{retry}");
    let progress = fx.progress();
    assert!(
        progress.contains("s1: [VERIFY] FAILED: 1 finding(s): calc.py:2 [py-stub-body]"),
        "{progress}"
    );
    assert!(
        progress.contains("s1: [FAILED] via author: verification"),
        "{progress}"
    );
    assert!(progress.contains("s1: [VERIFY] PASS"), "{progress}");
    assert!(fx.merged_calc().contains("return sum(xs)"));
    // No review was asked for: the reviewer never ran.
    assert!(!fx.t("reviewer-phases").exists());
}

#[test]
fn a_failing_test_switched_off_to_go_green_is_caught() {
    if !have_python() {
        return;
    }
    let gates = json!([{"name": "tests", "type": "test", "command": "python3", "args": ["-m", "unittest", "-q"]}]);
    // The base is green (it is judged before the first agent).
    let fx = Fx::new(
        &[("calc.py", CALC_OK), ("test_calc.py", TEST_FILE)],
        gates,
        json!({}),
    );
    // First attempt: write a bug, skip the test it fails (unittest is then green).
    fx.author(
        &format!("{BUG}\nsed -i 's/^    def test_sums/    @unittest.skip(\"later\")\\n    def test_sums/' test_calc.py"),
        FIX,
    );
    fx.reviewer("exit 0");
    fx.agents();
    let out = fx.approve(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let ev = events(&out);
    let checked = of(&ev, "verification_finished");
    assert_eq!(checked[0]["passed"], false, "{}", explain(&out));
    let rules: Vec<&str> = checked[0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["rule"].as_str())
        .collect();
    assert_eq!(rules, ["py-skip-test"]);
    assert_eq!(checked[0]["findings"][0]["file"], "test_calc.py");
    assert_eq!(of(&ev, "attempt_failed")[0]["error_type"], "verification");
    // The test is not skipped on main, and it passes there.
    let test_on_main = git(fx.repo(), &["show", "main:test_calc.py"]);
    assert!(!test_on_main.contains("skip"), "{test_on_main}");
    assert!(fx.merged_calc().contains("sum(xs)"));
    let gates = of(&ev, "gate_finished");
    assert!(gates.iter().all(|g| g["passed"] == true), "{gates:?}");
}

/// The compile-gated fixture whose author writes `first` as its first
/// attempt and a summing `calc.py` after it; `None` without python.
fn calc_fixture(first: &str) -> Option<Fx> {
    if !have_python() {
        return None;
    }
    let fx = Fx::new(&[], serde_json::from_str(COMPILE_GATE).unwrap(), json!({}));
    fx.author(
        first,
        "printf 'def total(xs):\\n    return sum(xs)\\n' > calc.py",
    );
    Some(fx)
}

#[test]
fn a_review_asking_for_revision_is_fixed_on_retry_and_costs_count() {
    let Some(fx) = calc_fixture("printf 'def total(xs):\\n    return len(xs)\\n' > calc.py") else {
        return;
    };
    // Stream-json like Claude's: the verdict and the cost are in the result event.
    fx.reviewer(
        r#"if grep -q 'len(xs)' calc.py; then
  printf '%s\n' '{"type":"result","result":"It counts instead of summing.\n<review>NEEDS_REVISION</review>\ncalc.py:2: total must sum the items, not count them","total_cost_usd":0.25,"usage":{"input_tokens":100,"output_tokens":20}}'
else
  printf '%s\n' '{"type":"result","result":"Correct.\n<review>PASS</review>","total_cost_usd":0.25,"usage":{"input_tokens":100,"output_tokens":20}}'
fi"#,
    );
    fx.agents();
    let out = fx.approve(&["--review"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let ev = events(&out);
    // The review phase resolves to the author (the default agent); another
    // agent is available, so it reviews.
    let started = of(&ev, "review_started");
    assert_eq!(started.len(), 2, "{}", explain(&out));
    assert_eq!(started[0]["agent"], "reviewer");
    assert_eq!(started[0]["author"], "author");
    assert!(started[0].get("note").is_none());
    let reviews = of(&ev, "review_finished");
    assert_eq!(reviews[0]["verdict"], "needs_revision");
    assert_eq!(reviews[0]["passed"], false);
    assert!(reviews[0]["findings"]
        .as_str()
        .unwrap()
        .contains("total must sum the items"));
    assert_eq!(reviews[1]["verdict"], "pass");
    assert_eq!(of(&ev, "attempt_failed")[0]["error_type"], "review");
    // The reviewer ran in the review phase and got the story, criteria and diff.
    assert_eq!(fx.read(&fx.t("reviewer-phases")), "review\nreview\n");
    let rp = fx.read(&fx.t("review-prompt-1.md"));
    assert!(rp.contains("total([1, 2, 3]) == 6"), "{rp}");
    assert!(rp.contains("+    return len(xs)"), "{rp}");
    assert!(rp.contains("- compile: passed"), "{rp}");
    // The retry prompt carries the reviewer's findings.
    let retry = fx.read(&fx.t("prompt-2.md"));
    assert!(
        retry.contains("calc.py:2: total must sum the items, not count them"),
        "{retry}"
    );
    let progress = fx.progress();
    assert!(
        progress.contains(
            "s1: [REVIEW] NEEDS_REVISION via reviewer: calc.py:2: total must sum the items, not count them"
        ),
        "{progress}"
    );
    assert!(
        progress.contains("s1: [REVIEW] PASS via reviewer"),
        "{progress}"
    );
    assert!(fx.merged_calc().contains("sum(xs)"));
    // Each attempt is charged its review (the author reports no usage).
    let st = fx.state();
    let attempts = st["stories"][0]["attempts"].as_array().unwrap().clone();
    assert_eq!(attempts.len(), 2);
    for a in &attempts {
        assert_eq!(a["cost_usd"], 0.25, "{a}");
        assert_eq!(a["input_tokens"], 100, "{a}");
    }
    assert_eq!(st["stories"][0]["review"]["verdict"], "pass");
    let finished = of(&ev, "run_finished");
    assert_eq!(finished.len(), 1);
}

#[test]
fn a_review_reporting_only_tokens_is_priced_and_charged_to_the_attempt() {
    let Some(fx) = calc_fixture("printf 'def total(xs):\\n    return sum(xs)\\n' > calc.py") else {
        return;
    };
    // Tokens, no cost (as codex and gemini report): priced from agents.json.
    fx.reviewer(
        r#"printf '%s\n' '{"type":"result","result":"Correct.\n<review>PASS</review>","usage":{"input_tokens":100000,"output_tokens":10000}}'"#,
    );
    fx.agents_priced(json!({"reviewer": {"input": 2.0, "output": 10.0}}));
    let out = fx.approve(&["--review"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let ev = events(&out);
    let reviews = of(&ev, "review_finished");
    assert_eq!(reviews.len(), 1, "{}", explain(&out));
    let priced = reviews[0]["cost_usd"]
        .as_f64()
        .expect("the review is priced");
    assert!((priced - 0.3).abs() < 1e-9, "{}", reviews[0]);
    let st = fx.state();
    let attempt = &st["stories"][0]["attempts"][0];
    let charged = attempt["cost_usd"]
        .as_f64()
        .expect("charged to the attempt");
    assert!((charged - 0.3).abs() < 1e-9, "{attempt}");
}

#[test]
fn a_review_without_marker_warns_and_passes_but_fails_when_strict() {
    if !have_python() {
        return;
    }
    let make = || {
        let fx = Fx::new(&[], serde_json::from_str(COMPILE_GATE).unwrap(), json!({}));
        fx.author(
            "printf 'def total(xs):\\n    return sum(xs)\\n' > calc.py",
            "printf 'def total(xs):\\n    return sum(xs)\\n' > calc.py",
        );
        fx.reviewer("echo 'Looks fine to me.'");
        fx.agents();
        fx
    };
    let fx = make();
    let out = fx.approve(&["--review"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let ev = events(&out);
    let reviews = of(&ev, "review_finished");
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0]["verdict"], "missing");
    assert_eq!(reviews[0]["passed"], true);
    assert!(of(&ev, "notice").iter().any(|n| n["message"]
        .as_str()
        .unwrap_or("")
        .contains("no <review>PASS</review>")));
    assert!(fx
        .progress()
        .contains("s1: [REVIEW] PASS via reviewer (no <review> marker)"));

    let fx = make();
    let out = fx.approve(&["--review=strict", "--max-retries", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let ev = events(&out);
    let reviews = of(&ev, "review_finished");
    assert_eq!(reviews.len(), 2);
    assert!(reviews
        .iter()
        .all(|r| r["verdict"] == "missing" && r["passed"] == false && r["strict"] == true));
    let failed = of(&ev, "story_failed");
    assert_eq!(failed[0]["error_type"], "review", "{}", explain(&out));
    assert!(fx.progress().contains(
        "s1: [REVIEW] NEEDS_REVISION via reviewer: no <review> marker (--review=strict)"
    ));
    // The state and `status --json` say what the review found.
    let st = fx.state();
    assert_eq!(st["stories"][0]["review"]["verdict"], "missing");
    assert_eq!(st["stories"][0]["error_type"], "review");
    let out = cascade(fx.repo())
        .args(["status", "--json"])
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        status["stories"]["s1"]["review"]["verdict"], "missing",
        "{status}"
    );
    assert_eq!(status["stories"]["s1"]["review"]["agent"], "reviewer");
    assert_eq!(status["stories"]["s1"]["error_type"], "review");
    // The text summary says it too.
    let out = cascade(fx.repo())
        .args([
            "resume",
            "--auto-run",
            "--retry-delay",
            "0",
            "--max-retries",
            "0",
            "--agents",
        ])
        .arg(fx.t("agents.json"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("s1: review no marker (missing) via reviewer"),
        "{text}"
    );
}

#[test]
fn a_reviewer_that_commits_fails_the_attempt() {
    if !have_python() {
        return;
    }
    let fx = Fx::new(&[], serde_json::from_str(COMPILE_GATE).unwrap(), json!({}));
    fx.author(
        "printf 'def total(xs):\\n    return sum(xs)\\n' > calc.py",
        "printf 'def total(xs):\\n    return sum(xs)\\n' > calc.py",
    );
    fx.reviewer(
        "echo extra > extra.txt && git add extra.txt && git -c user.name=r -c user.email=r@r commit -qm sneaky && echo '<review>PASS</review>'",
    );
    fx.agents();
    let out = fx.approve(&["--review", "--max-retries", "0"]);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let ev = events(&out);
    let failed = of(&ev, "story_failed");
    assert_eq!(failed[0]["error_type"], "review");
    assert!(failed[0]["error"]
        .as_str()
        .unwrap()
        .contains("reviewers must not change the code"));
    // Nothing of it reached main.
    let files = git(fx.repo(), &["ls-tree", "--name-only", "main"]);
    assert!(
        !files.contains("extra.txt") && !files.contains("calc.py"),
        "{files}"
    );
}

#[test]
fn review_from_prd_and_the_author_reviewing_itself_is_said() {
    if !have_python() {
        return;
    }
    let fx = Fx::new(&[], serde_json::from_str(COMPILE_GATE).unwrap(), json!({}));
    // The PRD turns review on (Plan Cascade's verification_gate).
    let mut prd: Value = serde_json::from_str(&fx.read(&fx.repo().join("prd.json"))).unwrap();
    prd["verification_gate"] = json!({"enabled": true});
    write_json(&fx.repo().join("prd.json"), &prd);
    // Only the author exists: it reviews its own work, and the event says so.
    fx.author(
        "if [ \"$CASCADE_PHASE\" = review ]; then echo '<review>PASS</review>'; exit 0; fi\nprintf 'def total(xs):\\n    return sum(xs)\\n' > calc.py",
        "exit 1",
    );
    write_json(
        &fx.t("agents.json"),
        &json!({"default_agent": "author", "agents": {"author": {"type": "cli", "command": fx.t("author.sh").display().to_string(), "args": []}}}),
    );
    let out = fx.approve(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let ev = events(&out);
    let started = of(&ev, "review_started");
    assert_eq!(started[0]["agent"], "author");
    assert!(
        started[0]["note"]
            .as_str()
            .unwrap_or("")
            .contains("no other agent is available"),
        "{started:?}"
    );
    assert_eq!(of(&ev, "review_finished")[0]["verdict"], "pass");
}

/// Two agents that both pass a review: `author` writes calc.py.
fn two_passing_agents() -> Fx {
    let fx = Fx::new(&[], serde_json::from_str(COMPILE_GATE).unwrap(), json!({}));
    fx.author(
        "if [ \"$CASCADE_PHASE\" = review ]; then echo '<review>PASS</review>'; exit 0; fi\nprintf 'def total(xs):\\n    return sum(xs)\\n' > calc.py",
        "exit 1",
    );
    fx.reviewer("echo '<review>PASS</review>'");
    fx.agents();
    fx
}

#[test]
fn review_agent_chooses_the_reviewer_even_with_agent() {
    if !have_python() {
        return;
    }
    let fx = two_passing_agents();
    // `--agent` names the author; `--review-agent` names the reviewer.
    let out = fx.approve(&[
        "--agent",
        "author",
        "--review",
        "--review-agent",
        "reviewer",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let started = of(&events(&out), "review_started")[0].clone();
    assert_eq!(started["agent"], "reviewer", "{started}");
    assert_eq!(started["author"], "author");
    assert!(started.get("note").is_none(), "{started}");
    assert_eq!(fx.read(&fx.t("reviewer-phases")), "review\n");

    // Naming the author as the reviewer keeps it, and the state (so the
    // summary) says so.
    let fx = two_passing_agents();
    // Plain output this time: the summary names the self-review too.
    let out = fx.approve_plain(&["--agent", "author", "--review", "--review-agent", "author"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let said =
        "--review-agent names 'author', the agent that wrote the code: it reviews its own work";
    assert_eq!(fx.state()["stories"][0]["review"]["note"], said);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("s1: review PASS via author ({said})")),
        "{stdout}"
    );
    assert_eq!(fx.read(&fx.t("reviewer-phases")), "");
}

#[test]
fn allowed_rule_and_acceptance_check_gate() {
    if !have_python() {
        return;
    }
    // The story wants a stub (an interface for later) and allows the rule;
    // its criterion's check is a gate of this story only.
    let check = json!({"description": "the placeholder module imports", "check": ["python3", "-c", "import calc"]});
    let fx = Fx::new(
        &[],
        json!([]),
        json!({"verify_allow": ["py-stub-body"], "acceptance_criteria": [check]}),
    );
    fx.author("printf 'def total(xs):\\n    pass\\n' > calc.py", "exit 1");
    fx.reviewer("exit 0");
    fx.agents();
    let out = fx.approve(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let ev = events(&out);
    let checked = of(&ev, "verification_finished");
    assert_eq!(checked[0]["passed"], true);
    assert_eq!(checked[0]["allowed"], json!(["py-stub-body"]));
    let gates = of(&ev, "gate_finished");
    assert!(
        gates
            .iter()
            .any(|g| g["gate"] == "criterion-1" && g["passed"] == true),
        "{gates:?}"
    );

    // A criterion check that fails fails the attempt as a gate.
    let bad = json!({"description": "sums", "check": ["python3", "-c", "import calc; assert calc.total([1, 2]) == 3"]});
    let fx = Fx::new(&[], json!([]), json!({"acceptance_criteria": [bad]}));
    fx.author(
        "printf 'def total(xs):\\n    return len(xs)\\n' > calc.py",
        "printf 'def total(xs):\\n    return sum(xs)\\n' > calc.py",
    );
    fx.reviewer("exit 0");
    fx.agents();
    let out = fx.approve(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let ev = events(&out);
    let crit: Vec<&Value> = of(&ev, "gate_finished")
        .into_iter()
        .filter(|g| g["gate"] == "criterion-1")
        .collect();
    assert_eq!(crit.len(), 2, "{}", explain(&out));
    assert_eq!(crit[0]["passed"], false);
    assert_eq!(crit[1]["passed"], true);
    assert_eq!(
        of(&ev, "attempt_failed")[0]["error"],
        "quality gate 'criterion-1' failed"
    );
}

#[test]
fn bad_check_or_verify_json_exit_2() {
    let fx = Fx::new(
        &[],
        json!([]),
        json!({"acceptance_criteria": [{"description": "d", "check": []}]}),
    );
    fx.author("true", "true");
    fx.reviewer("true");
    fx.agents();
    let out = fx.approve(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("story 's1' acceptance_criteria[0].check"),
        "{err}"
    );

    let fx = Fx::new(&[], json!([]), json!({}));
    fx.author("true", "true");
    fx.reviewer("true");
    fx.agents();
    std::fs::create_dir_all(fx.repo().join(".cascade")).unwrap();
    std::fs::write(
        fx.repo().join(".cascade/verify.json"),
        "{\n  \"rules\": [\n    {\"id\": \"x\"}\n  ]\n}",
    )
    .unwrap();
    let out = fx.approve(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("verify.json:3:"), "{err}");
    let out = cascade(fx.repo()).arg("verify").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A malformed `.cascade/verify.json` or `.cascade/config.json` refuses
/// `approve`, `approve --dry-run` and `validate` alike (exit 2, naming the
/// file), and no agent runs.
#[test]
fn broken_config_refuses_validate_dry_run_and_approve() {
    for (file, text) in [
        (
            "verify.json",
            "{\n  \"rules\": [\n    {\"id\": \"x\"}\n  ]\n}",
        ),
        ("config.json", "{oops"),
    ] {
        let fx = Fx::new(&[], json!([]), json!({}));
        let ran = fx.t("ran");
        fx.author(&format!("touch '{}'", ran.display()), "true");
        fx.reviewer("true");
        fx.agents();
        std::fs::create_dir_all(fx.repo().join(".cascade")).unwrap();
        std::fs::write(fx.repo().join(".cascade").join(file), text).unwrap();
        let agents = fx.t("agents.json");
        let agents = agents.to_str().unwrap();
        for argv in [
            vec!["validate", "--agents", agents],
            vec!["approve", "--dry-run", "--agents", agents],
        ] {
            let out = cascade(fx.repo()).args(&argv).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{argv:?}: {}", explain(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(file), "{argv:?}: {err}");
        }
        let out = fx.approve(&[]);
        assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
        assert!(!ran.exists(), "the agent ran despite a broken {file}");
    }
}

#[test]
fn verify_command_for_a_person() {
    let repo = init_repo();
    let p = repo.path();
    std::fs::write(p.join("lib.rs"), "pub fn f() -> u8 {\n    1\n}\n").unwrap();
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "lib"]);
    // Clean tree: exit 0.
    let out = cascade(p).arg("verify").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    // A stub in the working tree (an untracked file too): exit 1, file:line and rule.
    std::fs::write(p.join("lib.rs"), "pub fn f() -> u8 {\n    todo!()\n}\n").unwrap();
    std::fs::write(p.join("new.py"), "def g():\n    pass\n").unwrap();
    let out = cascade(p).arg("verify").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("lib.rs:2: [rust-stub-macro]"), "{text}");
    assert!(text.contains("new.py:2: [py-stub-body]"), "{text}");
    let out = cascade(p).args(["verify", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["passed"], false);
    assert_eq!(v["findings"].as_array().unwrap().len(), 2);
    // A range of commits.
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "stub"]);
    let out = cascade(p)
        .args(["verify", "--range", "HEAD~1..HEAD", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["range"], "HEAD~1..HEAD");
    assert_eq!(v["findings"][0]["rule"], "rust-stub-macro");
    let out = cascade(p)
        .args(["verify", "--range", "HEAD..HEAD"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // As a story that allows the rule would see it.
    write_json(
        &p.join("prd.json"),
        &json!({"goal": "g", "stories": [{"id": "s1", "title": "t", "verify_allow": ["rust-stub-macro"]}]}),
    );
    let out = cascade(p)
        .args(["verify", "--range", "HEAD~1..HEAD", "--story", "s1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.lines().any(|l| l.starts_with("lib.rs:2:"))
            && text.contains("new.py:2: [py-stub-body]"),
        "{text}"
    );
    // What the story allows is listed apart.
    assert!(
        text.contains("allowed by verify_allow: lib.rs:2: [rust-stub-macro]"),
        "{text}"
    );
    let out = cascade(p)
        .args(["verify", "--story", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown story 'nope'"));
    // Bad input: exit 2.
    for bad in ["HEAD", "nope..HEAD"] {
        let out = cascade(p)
            .args(["verify", "--range", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", explain(&out));
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "));
    }
}

/// The project's committed gate: the unit tests.
const GATES_JSON: &str = r#"{"gates": [{"name": "tests", "type": "test", "command": "python3", "args": ["-m", "unittest", "-q"]}]}"#;
/// What a cheating agent writes instead.
const GATES_TRUE: &str = r#"{"gates": [{"name": "tests", "type": "test", "command": "true"}]}"#;

/// A project whose calc.py passes its test (the base is judged before the
/// first agent, and a red base stops the run), and the test gate committed
/// in `.cascade/gates.json`.
fn committed_gate_project(story_extra: Value) -> Fx {
    let fx = Fx::new(
        &[("calc.py", CALC_OK), ("test_calc.py", TEST_FILE)],
        json!([]),
        story_extra,
    );
    std::fs::create_dir_all(fx.repo().join(".cascade")).unwrap();
    std::fs::write(fx.repo().join(".cascade/gates.json"), GATES_JSON).unwrap();
    git(fx.repo(), &["add", "-f", ".cascade/gates.json"]);
    git(fx.repo(), &["commit", "-q", "-m", "the test gate"]);
    fx
}

#[test]
fn an_agent_that_replaces_the_gate_with_true_fails_verification_and_is_not_merged() {
    if !have_python() {
        return;
    }
    let fx = committed_gate_project(json!({}));
    let cheat = format!("printf '%s' '{GATES_TRUE}' > .cascade/gates.json");
    fx.author(&cheat, &cheat);
    fx.reviewer("exit 0");
    fx.agents();
    let out = fx.approve(&["--max-retries", "0"]);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let ev = events(&out);
    let checked = of(&ev, "verification_finished");
    assert_eq!(checked.len(), 1, "{}", explain(&out));
    assert_eq!(checked[0]["passed"], false);
    let finding = &checked[0]["findings"][0];
    assert_eq!(finding["rule"], "gate-config-edit");
    assert_eq!(finding["file"], ".cascade/gates.json");
    // The message says what changed.
    let message = finding["message"].as_str().unwrap();
    assert!(message.contains("\"command\": \"true\""), "{message}");
    assert!(message.contains("\"command\": \"python3\""), "{message}");
    let failed = of(&ev, "story_failed");
    assert_eq!(failed[0]["error_type"], "verification");
    // No gate ran on it, nothing merged: main keeps the gate that checks.
    assert!(of(&ev, "gate_finished").is_empty());
    assert_eq!(
        git(fx.repo(), &["show", "main:.cascade/gates.json"]),
        GATES_JSON
    );
    assert!(fx
        .progress()
        .contains("s1: [VERIFY] FAILED: 1 finding(s): .cascade/gates.json:1 [gate-config-edit]"));
}

#[test]
fn a_story_that_may_edit_the_gates_is_still_judged_by_the_base_gates() {
    if !have_python() {
        return;
    }
    // The story allows the file: the edit is reported as allowed, and the
    // gate that judges it is still the base's (the bug fails it).
    let fx = committed_gate_project(json!({"verify_allow": [".cascade/gates.json"]}));
    let cheat = format!("printf '%s' '{GATES_TRUE}' > .cascade/gates.json");
    fx.author(&format!("{cheat}\n{BUG}"), &format!("{cheat}\n{FIX}"));
    fx.reviewer("exit 0");
    fx.agents();
    let out = fx.approve(&["--max-retries", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let ev = events(&out);
    let checked = of(&ev, "verification_finished");
    assert_eq!(checked.len(), 2, "{}", explain(&out));
    for c in &checked {
        assert_eq!(c["passed"], true);
        assert_eq!(c["allowed"], json!([".cascade/gates.json"]));
        assert_eq!(c["waived"][0]["rule"], "gate-config-edit", "{c}");
    }
    let gates = of(&ev, "gate_finished");
    assert_eq!(gates.len(), 2, "{}", explain(&out));
    assert!(gates.iter().all(|g| g["gate"] == "tests"));
    assert_eq!(gates[0]["passed"], false, "the base's gate ran, not `true`");
    assert_eq!(gates[1]["passed"], true);
    assert_eq!(of(&ev, "attempt_failed")[0]["error_type"], "quality_gate");
    // Merged with the allowed edit; the state and the summary say so.
    assert_eq!(
        git(fx.repo(), &["show", "main:.cascade/gates.json"]),
        GATES_TRUE
    );
    let st = fx.state();
    let allowed = st["stories"][0]["verification_allowed"][0]
        .as_str()
        .unwrap();
    assert!(
        allowed.starts_with(".cascade/gates.json:1: [gate-config-edit]"),
        "{allowed}"
    );
}

#[test]
fn prove_tests_rejects_a_new_test_that_passes_on_the_base() {
    // (A strict review turns proving on too: see checks.rs's unit test, and
    // the next test.)
    if !have_python() {
        return;
    }
    let gates = json!([{"name": "tests", "type": "test", "command": "python3", "args": ["-m", "unittest", "-q"]}]);
    let fx = Fx::new(
        &[("calc.py", "def total(xs):\n    return xs[0]\n")],
        gates,
        json!({}),
    );
    let fix = "printf 'def total(xs):\\n    return sum(xs)\\n' > calc.py";
    // Attempt 1 tests what the base already does (one item); attempt 2 tests the sum.
    let test = |call: &str, want: u32| {
        format!(
            "printf 'import unittest\\nfrom calc import total\\n\\n\\nclass TotalTest(unittest.TestCase):\\n    def test_total(self):\\n        self.assertEqual(total({call}), {want})\\n' > test_calc.py"
        )
    };
    fx.author(
        &format!("{fix}\n{}", test("[5]", 5)),
        &format!("{fix}\n{}", test("[1, 2, 3]", 6)),
    );
    fx.reviewer("echo '<review>PASS</review>'");
    fx.agents();
    let out = fx.approve(&["--prove-tests"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let ev = events(&out);
    let proved = of(&ev, "tests_proved");
    assert_eq!(proved.len(), 2, "{}", explain(&out));
    assert_eq!(proved[0]["passed"], false);
    assert_eq!(proved[0]["tests"], 1);
    let finding = &proved[0]["findings"][0];
    assert_eq!(finding["rule"], "unproven-test");
    assert_eq!(finding["file"], "test_calc.py");
    assert!(finding["message"]
        .as_str()
        .unwrap()
        .contains("passes on the base commit"));
    assert_eq!(of(&ev, "attempt_failed")[0]["error_type"], "verification");
    assert_eq!(proved[1]["passed"], true);
    // Without a review asked for, nobody reviewed.
    assert!(of(&ev, "review_finished").is_empty());
    let retry = fx.read(&fx.t("prompt-2.md"));
    assert!(retry.contains("[unproven-test]"), "{retry}");
    assert!(fx
        .progress()
        .contains("s1: [PROVE] FAILED: 1 of 1 new test(s) pass on the base: test_calc.py:6"));
    assert!(git(fx.repo(), &["show", "main:test_calc.py"]).contains("[1, 2, 3]"));
}

#[test]
fn a_strict_review_proves_tests_unless_told_not_to() {
    if !have_python() {
        return;
    }
    let gates = json!([{"name": "compile", "type": "typecheck", "command": "python3", "args": ["-m", "py_compile", "calc.py"]}]);
    let make = || {
        let fx = Fx::new(
            &[("calc.py", "def total(xs):\n    return xs[0]\n")],
            gates.clone(),
            json!({}),
        );
        // The new test only checks what the base already does.
        fx.author(
            "printf 'def total(xs):\\n    return sum(xs)\\n' > calc.py\nprintf 'import unittest\\nfrom calc import total\\n\\n\\nclass T(unittest.TestCase):\\n    def test_one(self):\\n        self.assertEqual(total([5]), 5)\\n' > test_calc.py",
            "exit 1",
        );
        fx.reviewer("echo '<review>PASS</review>'");
        fx.agents();
        fx
    };
    let fx = make();
    let out = fx.approve(&["--review=strict", "--max-retries", "0"]);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let ev = events(&out);
    assert_eq!(
        of(&ev, "tests_proved")[0]["passed"],
        false,
        "{}",
        explain(&out)
    );
    assert_eq!(of(&ev, "story_failed")[0]["error_type"], "verification");
    let fx = make();
    let out = fx.approve(&["--review=strict", "--prove-tests=false"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert!(of(&events(&out), "tests_proved").is_empty());
}
