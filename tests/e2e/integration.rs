//! End-to-end tests of integration gating (issue 46): two independent
//! stories that each pass the gate alone but break the target together (one
//! renames `lib.f` to `lib.g`, the other adds a caller of `lib.f`). With the
//! default `--integration gate` the second merge is gated as merged and
//! fails as `integration` naming the first; its retry starts from the new
//! tip. With `--integration trust` both merge and the target goes red.
//!
//! Ordering is by a barrier, not by time: the caller story's agent waits
//! until the rename is on `main` before it writes, so the rename always
//! merges first and the caller's merge is never a fast-forward.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{cascade, code, events, explain, git, init_repo, of_kind, script, write_json};

/// A repository with lib.py / main.py, the gate and a scripted agent.
struct Fixture {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

/// The required gate: imports every top-level module and calls its `run()`,
/// so a call of a function that no longer exists fails it.
const CHECK_PY: &str = r#"import glob, importlib, os, sys
sys.path.insert(0, os.getcwd())
for path in sorted(glob.glob("*.py")):
    module = importlib.import_module(path[:-3])
    if hasattr(module, "run"):
        module.run()
print("all modules import and run")
"#;

impl Fixture {
    fn new() -> Option<Fixture> {
        if std::process::Command::new("python3")
            .arg("--version")
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            eprintln!("skipping: python3 is not installed (the gate is a python script)");
            return None;
        }
        let f = Fixture {
            repo: init_repo(),
            tools: tempfile::tempdir().expect("tools dir"),
        };
        let repo = f.repo();
        std::fs::write(repo.join("lib.py"), "def f():\n    return 1\n").expect("lib.py");
        std::fs::write(
            repo.join("main.py"),
            "import lib\n\n\ndef run():\n    return lib.f()\n",
        )
        .expect("main.py");
        git(repo, &["add", "-A"]);
        git(repo, &["commit", "-q", "-m", "lib and main"]);
        std::fs::write(f.t("check.py"), CHECK_PY).expect("check.py");
        let gate = script(
            &f.t("gate.sh"),
            &format!("exec python3 '{}'", f.t("check.py").display()),
        );
        let story = |id: &str, what: &str| {
            json!({"id": id, "title": what, "description": what, "priority": "medium",
                   "dependencies": [], "status": "pending", "acceptance_criteria": ["the gate passes"]})
        };
        write_json(
            &repo.join("prd.json"),
            &json!({
                "metadata": {"version": "1.0"},
                "goal": "integration gating",
                "objectives": [],
                "stories": [story("rename", "rename lib.f to lib.g"), story("caller2", "add caller2.py")],
                "quality_gates": {"enabled": true, "fail_fast": false, "use_cache": true, "gates": [
                    {"name": "imports", "type": "test", "command": gate.display().to_string(), "required": true}
                ]}
            }),
        );
        f.write_agent();
        Some(f)
    }

    fn repo(&self) -> &Path {
        self.repo.path()
    }

    fn t(&self, name: &str) -> PathBuf {
        self.tools.path().join(name)
    }

    /// `rename` renames f to g and updates main.py. `caller2` waits until the
    /// rename is on main, then calls whichever of g/f its tree's lib.py
    /// defines (so a retry from the new tip fixes itself), or always f when
    /// the `stubborn` marker exists (an agent that cannot fix it).
    fn write_agent(&self) {
        let t = self.tools.path().display().to_string();
        script(
            &self.t("agent.sh"),
            &format!(
                r#"T='{t}'
cp "$CASCADE_PROMPT_FILE" "$T/prompt-$CASCADE_STORY_ID-$CASCADE_ATTEMPT.md" 2>/dev/null
case "$CASCADE_STORY_ID" in
rename)
  printf 'def g():\n    return 1\n' > lib.py
  printf 'import lib\n\n\ndef run():\n    return lib.g()\n' > main.py ;;
caller2)
  i=0
  while ! git show main:lib.py 2>/dev/null | grep -q 'def g' && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  fn=f
  if [ ! -f "$T/stubborn" ] && grep -q 'def g' lib.py; then fn=g; fi
  printf 'import lib\n\n\ndef run():\n    return lib.%s()\n' "$fn" > caller2.py ;;
esac"#
            ),
        );
        write_json(
            &self.t("agents.json"),
            &json!({"default_agent": "scripted", "agents": {
                "scripted": {"type": "cli", "command": self.t("agent.sh").display().to_string(), "args": [], "timeout": 120}
            }}),
        );
    }

    fn approve(&self, extra: &[&str]) -> Output {
        let mut cmd = cascade(self.repo());
        cmd.args([
            "approve",
            "--auto-run",
            "--retry-delay",
            "0",
            "--json",
            "--parallel",
            "2",
        ])
        .args(extra)
        .arg("--agents")
        .arg(self.t("agents.json"))
        .timeout(Duration::from_secs(180));
        cmd.output().expect("cascade runs")
    }

    /// Runs the gate on main's tree as committed (a fresh checkout, so
    /// nothing but the branch decides), returning whether it passed.
    fn main_is_green(&self) -> (bool, String) {
        let dir = tempfile::tempdir().expect("checkout dir");
        git(
            self.repo(),
            &[
                "worktree",
                "add",
                "-q",
                "--detach",
                &dir.path().join("tree").display().to_string(),
                "main",
            ],
        );
        let out = std::process::Command::new("python3")
            .arg(self.t("check.py"))
            .current_dir(dir.path().join("tree"))
            .output()
            .expect("python3 runs");
        git(
            self.repo(),
            &[
                "worktree",
                "remove",
                "--force",
                &dir.path().join("tree").display().to_string(),
            ],
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn status_json(&self) -> Value {
        let out = cascade(self.repo())
            .args(["status", "--json"])
            .output()
            .expect("status runs");
        assert!(out.status.success(), "{}", explain(&out));
        serde_json::from_slice(&out.stdout).expect("status json")
    }
}

/// The `attempt_failed` events of `story`.
fn failures<'a>(ev: &'a [Value], story: &str) -> Vec<&'a Value> {
    of_kind(ev, "attempt_failed")
        .into_iter()
        .filter(|e| e["story"] == story)
        .collect()
}

/// Asserts caller2's first attempt failed as `integration` naming `rename`,
/// with the gating events saying so.
fn assert_first_attempt_is_an_integration_failure(ev: &[Value], out: &Output) {
    let failed = failures(ev, "caller2");
    let first = failed
        .first()
        .unwrap_or_else(|| panic!("no failure: {}", explain(out)));
    assert_eq!(first["attempt"], 1, "{first}");
    assert_eq!(first["error_type"], "integration", "{first}");
    let error = first["error"].as_str().unwrap_or_default();
    assert!(error.contains("rename"), "{error}");
    let started = of_kind(ev, "integration_started");
    assert!(
        started
            .iter()
            .any(|e| e["story"] == "caller2" && e["merged_since"] == json!(["rename"])),
        "{started:?}"
    );
    assert!(
        of_kind(ev, "integration_finished")
            .iter()
            .any(|e| e["story"] == "caller2"
                && e["verdict"] == "failed"
                && e["failed_gates"] == json!(["imports"])),
        "{}",
        explain(out)
    );
    // The rename never needed gating as merged: it was a fast-forward.
    assert!(!started.iter().any(|e| e["story"] == "rename"));
}

#[test]
fn a_semantic_break_is_caught_and_the_retry_from_the_new_tip_fixes_it() {
    let Some(f) = Fixture::new() else { return };
    let out = f.approve(&["--max-retries", "1"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    assert_first_attempt_is_an_integration_failure(&ev, &out);
    assert_eq!(failures(&ev, "caller2").len(), 1, "{}", explain(&out));
    // The retry's prompt says what it must now fit with.
    let prompt = std::fs::read_to_string(f.t("prompt-caller2-2.md")).expect("retry prompt");
    assert!(prompt.contains("rename"), "{prompt}");
    let st = f.status_json();
    assert_eq!(st["stories"]["rename"]["status"], "complete", "{st}");
    assert_eq!(st["stories"]["caller2"]["status"], "complete", "{st}");
    assert_eq!(st["stories"]["caller2"]["attempts"], 2, "{st}");
    let caller2 = git(f.repo(), &["show", "main:caller2.py"]);
    assert!(caller2.contains("lib.g()"), "{caller2}");
    assert_no_integration_branch_is_left(&f);
    let (green, text) = f.main_is_green();
    assert!(green, "main's gate fails after the run: {text}");
}

/// Without a retry the story fails for good as `integration`, naming the
/// story it does not fit with; nothing of it reaches main.
#[test]
fn a_break_without_a_retry_fails_for_good_as_integration_and_main_stays_green() {
    let Some(f) = Fixture::new() else { return };
    std::fs::write(f.t("stubborn"), "").expect("marker");
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    assert_first_attempt_is_an_integration_failure(&ev, &out);
    assert_eq!(failures(&ev, "caller2").len(), 1, "{}", explain(&out));
    let st = f.status_json();
    assert_eq!(st["stories"]["rename"]["status"], "complete", "{st}");
    assert_eq!(st["stories"]["caller2"]["status"], "failed", "{st}");
    assert_eq!(
        st["stories"]["caller2"]["error_type"], "integration",
        "{st}"
    );
    assert_main_is_green_without_caller2(&f);
}

/// An agent that cannot fix it: the retry starts from the new tip (which
/// holds the rename), so its own gate already catches the stale call and
/// the story fails for good there; main stays green.
#[test]
fn a_break_the_agent_cannot_fix_fails_its_retry_on_the_new_tip_and_main_stays_green() {
    let Some(f) = Fixture::new() else { return };
    std::fs::write(f.t("stubborn"), "").expect("marker");
    let out = f.approve(&["--max-retries", "1"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    assert_first_attempt_is_an_integration_failure(&ev, &out);
    let kinds: Vec<&Value> = failures(&ev, "caller2")
        .iter()
        .map(|e| &e["error_type"])
        .collect();
    assert_eq!(
        kinds,
        [&json!("integration"), &json!("quality_gate")],
        "{}",
        explain(&out)
    );
    let st = f.status_json();
    assert_eq!(st["stories"]["caller2"]["status"], "failed", "{st}");
    assert_eq!(st["stories"]["caller2"]["attempts"], 2, "{st}");
    assert_main_is_green_without_caller2(&f);
}

/// Nothing of the failed story reached main, and main's gate passes.
fn assert_main_is_green_without_caller2(f: &Fixture) {
    let tree = git(f.repo(), &["ls-tree", "--name-only", "main"]);
    assert!(!tree.lines().any(|l| l == "caller2.py"), "{tree}");
    assert!(tree.lines().any(|l| l == "lib.py"), "{tree}");
    assert_no_integration_branch_is_left(f);
    let (green, text) = f.main_is_green();
    assert!(green, "main's gate fails after the run: {text}");
}

#[test]
fn with_integration_trust_both_merge_and_main_goes_red() {
    let Some(f) = Fixture::new() else { return };
    let out = f.approve(&["--max-retries", "0", "--integration", "trust"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    assert!(
        of_kind(&ev, "integration_started").is_empty(),
        "{}",
        explain(&out)
    );
    assert!(
        of_kind(&ev, "attempt_failed").is_empty(),
        "{}",
        explain(&out)
    );
    let st = f.status_json();
    assert_eq!(st["stories"]["rename"]["status"], "complete", "{st}");
    assert_eq!(st["stories"]["caller2"]["status"], "complete", "{st}");
    // Today's behaviour without gating: each passed alone, together they fail.
    let (green, text) = f.main_is_green();
    assert!(!green, "main's gate passed: {text}");
    assert!(text.contains("no attribute 'f'"), "{text}");
}

/// The scratch worktrees' branches go with them, whatever the verdict.
fn assert_no_integration_branch_is_left(f: &Fixture) {
    let left = git(f.repo(), &["branch", "--list", "cascade/integration-*"]);
    assert_eq!(left.trim(), "", "integration branches left behind");
}
