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
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{cascade, code, events, explain, git, init_repo, of_kind, script, write_json};

/// A repository with lib.py / main.py, the gate and a scripted agent.
struct Fixture {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

/// The required gate: imports every top-level module and calls its `run()`,
/// so a call of a function that no longer exists fails it.
pub(crate) const CHECK_PY: &str = r#"import glob, importlib, os, sys
sys.path.insert(0, os.getcwd())
for path in sorted(glob.glob("*.py")):
    module = importlib.import_module(path[:-3])
    if hasattr(module, "run"):
        module.run()
print("all modules import and run")
"#;

/// Seeds `repo` (a repository on `main`) with lib.py / main.py (committed)
/// and a PRD of `stories` gated by the import gate, and `tools` with the gate
/// and the scripted agent ([`write_agent`]); the fleet's tests seed their
/// repository with it too.
pub(crate) fn seed(repo: &Path, tools: &Path, stories: &[&str]) {
    std::fs::write(repo.join("lib.py"), "def f():\n    return 1\n").expect("lib.py");
    std::fs::write(
        repo.join("main.py"),
        "import lib\n\n\ndef run():\n    return lib.f()\n",
    )
    .expect("main.py");
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "lib and main"]);
    std::fs::write(tools.join("check.py"), CHECK_PY).expect("check.py");
    let gate = write_gate(tools);
    let story = |id: &&str| {
        json!({"id": id, "title": format!("story {id}"), "description": id, "priority": "medium",
               "dependencies": [], "status": "pending", "acceptance_criteria": ["the gate passes"]})
    };
    write_json(
        &repo.join("prd.json"),
        &json!({
            "metadata": {"version": "1.0"},
            "goal": "integration gating",
            "objectives": [],
            "stories": stories.iter().map(story).collect::<Vec<_>>(),
            "quality_gates": {"enabled": true, "fail_fast": false, "use_cache": true, "gates": [
                {"name": "imports", "type": "test", "command": gate.display().to_string(), "required": true}
            ]}
        }),
    );
    write_agent(repo, tools);
}

/// The required gate: [`CHECK_PY`] in the tree it runs in. It marks that it
/// ran (`gated-<name>`, its worktree's branch without `cascade/`: the story
/// id, or `integration-<id>` for a merge gated as merged; the directory's
/// name where there is no branch; its pid goes in `pid-<name>` and is added
/// to `pids-<name>`). When `hold-<name>` names a marker on its first line,
/// the first gating of that name waits for it, then for as many seconds as
/// the second line says (3 when it says none), before it answers: how a
/// test makes stories board a train while a merge ahead is gated.
fn write_gate(tools: &Path) -> PathBuf {
    let t = tools.display().to_string();
    script(
        &tools.join("gate.sh"),
        &format!(
            r#"T='{t}'
python3 "$T/check.py"; rc=$?
w=$(git rev-parse --abbrev-ref HEAD 2>/dev/null); w=${{w#cascade/}}
case "$w" in ""|HEAD) w=$(basename "$(pwd -P)") ;; esac
echo $$ > "$T/pid-$w"
echo $$ >> "$T/pids-$w"
touch "$T/gated-$w"
if [ -f "$T/hold-$w" ] && [ ! -e "$T/held-$w" ]; then
  touch "$T/held-$w"
  marker=$(head -n 1 "$T/hold-$w"); secs=$(sed -n 2p "$T/hold-$w")
  i=0; while [ ! -e "$T/$marker" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  # The marker is often a story's own gate; its merge queues right after.
  sleep "${{secs:-3}}"
fi
exit $rc"#
        ),
    )
}

/// The agent. `rename` renames f to g and updates main.py. `caller2` waits
/// until the rename is on main, then calls whichever of g/f its tree's
/// lib.py defines (so a retry from the new tip fixes itself), or always f
/// when the `stubborn` marker exists (an agent that cannot fix it). A
/// `clash*` story appends a line naming it to `shared.txt` (two of them from
/// one base conflict; one from a tip holding the other merges). Any
/// other story writes `<id>.py`, which fits with everything. A story waits
/// first for what `after-<id>` names: `main:<file>` (a file on main) or a
/// marker in the tools directory.
fn write_agent(repo: &Path, tools: &Path) {
    let (t, r) = (tools.display().to_string(), repo.display().to_string());
    script(
        &tools.join("agent.sh"),
        &format!(
            r#"T='{t}'
R='{r}'
id="$CASCADE_STORY_ID"
cp "$CASCADE_PROMPT_FILE" "$T/prompt-$id-$CASCADE_ATTEMPT.md" 2>/dev/null
ready() {{
  case "$1" in
  main:*) git -C "$R" show "$1" >/dev/null 2>&1 ;;
  *) [ -e "$T/$1" ] ;;
  esac
}}
if [ -f "$T/after-$id" ]; then
  i=0; while ! ready "$(cat "$T/after-$id")" && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
fi
case "$id" in
rename)
  printf 'def g():
    return 1
' > lib.py
  printf 'import lib


def run():
    return lib.g()
' > main.py ;;
caller2)
  i=0
  while [ ! -f "$T/after-$id" ] && ! git -C "$R" show main:lib.py 2>/dev/null | grep -q 'def g' && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  fn=f
  if [ ! -f "$T/stubborn" ] && grep -q 'def g' lib.py; then fn=g; fi
  printf 'import lib


def run():
    return lib.%s()
' "$fn" > caller2.py ;;
clash*)
  echo "line from $id" >> shared.txt ;;
*)
  printf 'def run():
    return 1
' > "$id.py" ;;
esac"#
        ),
    );
    write_json(
        &tools.join("agents.json"),
        &json!({"default_agent": "scripted", "agents": {
            "scripted": {"type": "cli", "command": tools.join("agent.sh").display().to_string(), "args": [], "timeout": 120}
        }}),
    );
}

/// [`seed`] with x, rename, caller2 (stubborn) and other. x merges first
/// (a fast-forward), so rename's merge is gated; the others start one
/// after the other's own gate, so they reach the queue in that order and
/// board one train; caller2 breaks it and cannot fix it.
pub(crate) fn seed_train(repo: &Path, tools: &Path) {
    seed(repo, tools, &["x", "rename", "caller2", "other"]);
    std::fs::write(tools.join("stubborn"), "").expect("marker");
    for (story, after) in [
        ("rename", "main:x.py"),
        ("caller2", "gated-rename"),
        ("other", "gated-caller2"),
    ] {
        std::fs::write(tools.join(format!("after-{story}")), after).expect("after");
    }
}

/// Holds the first gating named `name` (see [`write_gate`]) until the
/// marker `until` exists, then `secs` seconds more.
pub(crate) fn hold(tools: &Path, name: &str, until: &str, secs: u32) {
    std::fs::write(
        tools.join(format!("hold-{name}")),
        format!("{until}\n{secs}\n"),
    )
    .expect("hold");
}

impl Fixture {
    fn new() -> Option<Fixture> {
        Fixture::with(&["rename", "caller2"])
    }

    fn with(stories: &[&str]) -> Option<Fixture> {
        Fixture::seeded(|repo, tools| seed(repo, tools, stories))
    }

    /// [`seed_train`]'s stories.
    fn boarding_in_order() -> Option<Fixture> {
        Fixture::seeded(seed_train)
    }

    /// A repository and tools directory seeded by `seed_with` (`None`,
    /// saying why, without python3).
    fn seeded(seed_with: impl FnOnce(&Path, &Path)) -> Option<Fixture> {
        if !python3() {
            return None;
        }
        let f = Fixture {
            repo: init_repo(),
            tools: tempfile::tempdir().expect("tools dir"),
        };
        seed_with(f.repo(), f.tools.path());
        Some(f)
    }

    fn repo(&self) -> &Path {
        self.repo.path()
    }

    fn t(&self, name: &str) -> PathBuf {
        self.tools.path().join(name)
    }

    fn approve(&self, extra: &[&str]) -> Output {
        self.run("approve", extra)
    }

    /// `cascade <verb>` (approve or resume) unattended, with NDJSON out.
    fn run(&self, verb: &str, extra: &[&str]) -> Output {
        let mut cmd = cascade(self.repo());
        cmd.args([verb, "--auto-run", "--retry-delay", "0", "--json"]);
        // Two stories at once unless the test says how many.
        if !extra.contains(&"--parallel") {
            cmd.args(["--parallel", "2"]);
        }
        cmd.args(extra)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .timeout(Duration::from_secs(180));
        cmd.output().expect("cascade runs")
    }

    fn main_is_green(&self) -> (bool, String) {
        main_is_green(self.repo(), self.tools.path())
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

/// Runs the gate on main's tree as committed (a fresh checkout, so
/// nothing but the branch decides), returning whether it passed.
pub(crate) fn main_is_green(repo: &Path, tools: &Path) -> (bool, String) {
    let dir = tempfile::tempdir().expect("checkout dir");
    let tree = dir.path().join("tree").display().to_string();
    git(repo, &["worktree", "add", "-q", "--detach", &tree, "main"]);
    let out = std::process::Command::new("python3")
        .arg(tools.join("check.py"))
        .current_dir(&tree)
        .output()
        .expect("python3 runs");
    git(repo, &["worktree", "remove", "--force", &tree]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Whether python3 runs (the gate is a python script); says why a test skips.
pub(crate) fn python3() -> bool {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: python3 is not installed (the gate is a python script)");
    }
    ok
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
    assert_eq!(of_kind(&ev, "run_finished")[0]["integration"], "gate");
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
    // The run says it trusted the stories' own gates.
    let finished = of_kind(&ev, "run_finished");
    assert_eq!(finished[0]["integration"], "trust", "{}", explain(&out));
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

/// The merge train is a pipeline: `caller2` and then `other` board it
/// while `rename`'s merge is being gated (both integration gates hold
/// until `other`'s own integration gate ran), each on top of the candidate
/// ahead of it: tip+rename, tip+rename+caller2, tip+rename+caller2+other.
/// Every tree with caller2 fails (it calls the renamed `f`): caller2 fails
/// as `integration`, and other, whose first tree held caller2, is merged
/// again without it and gated again, then lands; it is not charged an
/// attempt for caller2's failure.
#[test]
fn a_train_gates_stories_that_board_it_on_top_and_regates_the_ones_behind_a_failure() {
    let Some(f) = Fixture::boarding_in_order() else {
        return;
    };
    for held in ["rename", "caller2"] {
        hold(
            f.tools.path(),
            &format!("integration-{held}"),
            "gated-integration-other",
            3,
        );
    }
    // Gate slots for the two held integration gates, other's own gate and
    // its integration gate.
    let out = f.approve(&["--max-retries", "0", "--parallel", "4", "--gate-jobs", "4"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    let gated: Vec<(String, Value, String)> = of_kind(&ev, "integration_finished")
        .iter()
        .map(|e| {
            let story = e["story"].as_str().unwrap_or_default().to_string();
            let verdict = e["verdict"].as_str().unwrap_or_default().to_string();
            (story, e["members"].clone(), verdict)
        })
        .collect();
    let has = |story: &str, members: Value, verdict: &str| {
        gated
            .iter()
            .any(|(s, m, v)| s == story && *m == members && v == verdict)
    };
    // rename alone; caller2 on top of it while it was gated.
    assert!(has("rename", json!(["rename"]), "passed"), "{gated:?}");
    let caller2 = json!(["rename", "caller2"]);
    assert!(
        has("caller2", caller2, "failed"),
        "{gated:?}{}",
        explain(&out)
    );
    // other first on top of both (that tree fails, or its gating was
    // stopped when caller2 failed), then gated again without caller2.
    let other = |with_caller2: bool, verdict: &str| {
        gated.iter().any(|(s, m, v)| {
            let members: Vec<&str> = m
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            s == "other"
                && members.last() == Some(&"other")
                && members.contains(&"caller2") == with_caller2
                && v == verdict
        })
    };
    assert!(
        other(true, "failed") || other(true, "superseded"),
        "{gated:?}"
    );
    assert!(other(false, "passed"), "{gated:?}");
    // Only caller2 failed; the one behind it was not charged an attempt.
    let failed = of_kind(&ev, "attempt_failed");
    assert_eq!(failed.len(), 1, "{}", explain(&out));
    assert_eq!(failed[0]["story"], "caller2", "{}", failed[0]);
    assert_eq!(failed[0]["error_type"], "integration", "{}", failed[0]);
    let st = f.status_json();
    for id in ["x", "rename", "other"] {
        assert_eq!(st["stories"][id]["status"], "complete", "{id}: {st}");
    }
    assert_eq!(st["stories"]["other"]["attempts"], 1, "{st}");
    assert_main_is_green_without_caller2(&f);
    assert_no_integration_branch_is_left(&f);
    let tree = git(f.repo(), &["ls-tree", "--name-only", "main"]);
    assert!(tree.lines().any(|l| l == "other.py"), "{tree}");
    #[cfg(feature = "ui")]
    assert_the_dashboard_shows_the_train(&f, &gated);
}

/// The dashboard of the finished run (read from its journal) counts the
/// gatings the events had, keeps the last ones with their members, and
/// has nobody on the train.
#[cfg(feature = "ui")]
fn assert_the_dashboard_shows_the_train(f: &Fixture, gated: &[(String, Value, String)]) {
    let ui = crate::ui::Ui::start(f.repo(), Some(&f.t("agents.json")));
    let (status, snap) = ui.get("/api/run");
    assert_eq!(status, 200, "{snap}");
    let train = &snap["train"];
    assert_eq!(train["cars"], json!([]), "{train}");
    for verdict in ["passed", "failed", "superseded"] {
        let n = gated.iter().filter(|(_, _, v)| v == verdict).count();
        assert_eq!(train[verdict], n, "{verdict}: {train}");
    }
    let recent: Vec<(String, Value, String)> = train["recent"]
        .as_array()
        .expect("the last gatings")
        .iter()
        .map(|g| {
            let s = |k: &str| g[k].as_str().unwrap_or_default().to_string();
            (s("story"), g["members"].clone(), s("verdict"))
        })
        .collect();
    assert_eq!(recent, gated, "{train}");
}

/// A gating is stopped when a story ahead of it fails: `other` boards on
/// top of `rename` and `caller2` while both are gated, and its gate of
/// that tree holds for 8 s; caller2 fails first, so other's gating is
/// stopped (`superseded`, its gate killed) and other is merged again
/// without caller2 and gated again (not held this time), then lands.
#[test]
fn a_gating_on_top_of_a_story_that_fails_is_stopped_and_done_again_without_it() {
    let Some(f) = Fixture::boarding_in_order() else {
        return;
    };
    for (held, secs) in [("rename", 3), ("caller2", 3), ("other", 8)] {
        hold(
            f.tools.path(),
            &format!("integration-{held}"),
            "gated-integration-other",
            secs,
        );
    }
    let out = f.approve(&["--max-retries", "0", "--parallel", "4", "--gate-jobs", "4"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    let finished = of_kind(&ev, "integration_finished");
    let of = |story: &str| -> Vec<(Value, String)> {
        finished
            .iter()
            .filter(|e| e["story"] == story)
            .map(|e| {
                (
                    e["members"].clone(),
                    e["verdict"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        of("caller2"),
        vec![(json!(["rename", "caller2"]), "failed".to_string())],
        "{}",
        explain(&out)
    );
    let other = of("other");
    assert_eq!(other.len(), 2, "{other:?}{}", explain(&out));
    assert_eq!(
        other[0],
        (
            json!(["rename", "caller2", "other"]),
            "superseded".to_string()
        )
    );
    assert_eq!(other[1].1, "passed", "{other:?}");
    assert!(!other[1].0.to_string().contains("caller2"), "{other:?}");
    // Both gatings of other's merge are over: the stopped one was killed.
    let pids = std::fs::read_to_string(f.t("pids-integration-other")).expect("pids");
    let pids: Vec<u32> = pids.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    for pid in pids {
        assert!(!crate::common::alive(pid), "gate {pid} still runs");
    }
    let failed = of_kind(&ev, "attempt_failed");
    assert_eq!(failed.len(), 1, "{}", explain(&out));
    assert_eq!(failed[0]["story"], "caller2", "{}", failed[0]);
    let st = f.status_json();
    assert_eq!(st["stories"]["other"]["status"], "complete", "{st}");
    assert_eq!(st["stories"]["other"]["attempts"], 1, "{st}");
    assert_main_is_green_without_caller2(&f);
    assert_no_integration_branch_is_left(&f);
}

/// Mega: features `renaming` (renames lib.f) and `calling` (adds a caller
/// of lib.f) of one batch each pass their own gates; `renaming` lands
/// first, so `calling`'s merge is gated as merged with the target's gates,
/// fails, and fails the feature as `integration` naming `renaming`; main
/// never moves to the broken tree.
#[test]
fn mega_a_feature_merge_that_breaks_the_target_fails_as_integration() {
    if !python3() {
        return;
    }
    let (repo, tools) = (init_repo(), tempfile::tempdir().expect("tools"));
    let (root, t) = (repo.path(), tools.path());
    seed(root, t, &[]);
    std::fs::remove_file(root.join("prd.json")).expect("no plain PRD");
    // caller2 needs nothing on main first (a marker that exists).
    std::fs::write(t.join("after-caller2"), "check.py").expect("after");
    let gates = json!({"enabled": true, "gates": [{"name": "imports", "type": "test",
        "command": t.join("gate.sh").display().to_string(), "required": true}]});
    write_json(&root.join(".cascade").join("gates.json"), &gates);
    let feature = |id: &str, name: &str, story: &str| {
        write_json(
            &root.join("features").join(name).join("prd.json"),
            &json!({"goal": name, "quality_gates": gates, "stories": [
                {"id": story, "title": format!("story {story}"), "description": "d", "priority": "medium",
                 "dependencies": [], "status": "pending", "acceptance_criteria": ["the gate passes"]}]}),
        );
        json!({"id": id, "name": name, "title": format!("Feature {name}"), "description": name,
               "priority": "high", "dependencies": [], "status": "pending"})
    };
    let features = [
        feature("f1", "renaming", "rename"),
        feature("f2", "calling", "caller2"),
    ];
    write_json(
        &root.join("mega-plan.json"),
        &json!({"goal": "lib", "execution_mode": "auto", "target_branch": "main", "features": features}),
    );
    git(root, &["add", "features", "mega-plan.json"]);
    git(root, &["commit", "-q", "-m", "plan"]);
    let out = cascade(root)
        .arg("--agents")
        .arg(t.join("agents.json"))
        .args([
            "mega",
            "approve",
            "--auto-run",
            "--retry-delay",
            "0",
            "--json",
        ])
        .timeout(Duration::from_secs(180))
        .output()
        .expect("cascade runs");
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    let finished: Vec<&Value> = ev
        .iter()
        .filter(|e| e["event"] == "feature_integration_finished")
        .collect();
    assert_eq!(finished.len(), 1, "{}", explain(&out));
    assert_eq!(finished[0]["feature"], "calling", "{}", finished[0]);
    assert_eq!(finished[0]["passed"], false, "{}", finished[0]);
    let started = ev
        .iter()
        .find(|e| e["event"] == "feature_integration_started")
        .unwrap_or_else(|| panic!("not gated: {}", explain(&out)));
    assert_eq!(started["merged_since"], json!(["renaming"]), "{started}");
    let st: Value = serde_json::from_slice(
        &cascade(root)
            .args(["mega", "status", "--json"])
            .output()
            .expect("status")
            .stdout,
    )
    .expect("status JSON");
    assert_eq!(st["features"]["renaming"]["status"], "complete", "{st}");
    let calling = &st["features"]["calling"];
    assert_eq!(calling["status"], "failed", "{st}");
    assert_eq!(calling["failure"]["kind"], "integration", "{st}");
    let message = calling["failure"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("renaming"), "{message}");
    // The branch keeps the work; main has the rename and is green.
    git(root, &["show", "cascade/calling:caller2.py"]);
    let tree = git(root, &["ls-tree", "--name-only", "main"]);
    assert!(!tree.lines().any(|l| l == "caller2.py"), "{tree}");
    let (green, text) = main_is_green(root, t);
    assert!(green, "main's gate fails after the run: {text}");
    let left = git(root, &["branch", "--list", "cascade/_integration-*"]);
    assert_eq!(left.trim(), "", "integration branches left behind");
}

/// kill -9 of cascade while a merge is gated as merged (the integration
/// gate of caller2 on the tip with rename): the target has not moved to the
/// unchecked tree, and `resume` gates again from the new tip, so each story
/// merges exactly once and main is green.
#[test]
fn kill_9_during_an_integration_gate_then_resume_merges_each_story_once() {
    let Some(f) = Fixture::new() else {
        return;
    };
    // caller2's merge gate waits for a marker that never comes.
    std::fs::write(f.t("hold-integration-caller2"), "never").expect("hold");
    let mut child = crate::common::cascade_command(f.repo())
        .args(["approve", "--auto-run", "--retry-delay", "0", "--json"])
        .args(["--parallel", "2", "--agents"])
        .arg(f.t("agents.json"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("cascade starts");
    let held = f.t("pid-integration-caller2");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !held.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(held.exists(), "the integration gate never started");
    child.kill().expect("kill -9");
    child.wait().expect("reaped");
    let killed_at = git(f.repo(), &["rev-parse", "main"]);
    // A crash takes the gate with it (it leads its own process group).
    let gate: i32 = std::fs::read_to_string(&held)
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .expect("the gate's pid");
    // SAFETY: signals the gate's own process group.
    unsafe {
        libc::kill(-gate, libc::SIGKILL);
    }
    std::fs::remove_file(f.t("hold-integration-caller2")).expect("release");
    // main moved only by rename (a fast-forward), never to the gated merge.
    let tree = git(f.repo(), &["ls-tree", "--name-only", killed_at.trim()]);
    assert!(!tree.lines().any(|l| l == "caller2.py"), "{tree}");
    assert_eq!(f.status_json()["stories"]["rename"]["status"], "complete");

    let out = f.run("resume", &[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let st = f.status_json();
    assert_eq!(st["status"], "completed", "{st}");
    let subjects = git(f.repo(), &["log", "--format=%s", "main"]);
    for id in ["rename", "caller2"] {
        let title = format!("{id}: story {id}");
        let n = subjects.lines().filter(|s| *s == title).count();
        assert_eq!(n, 1, "{id} merged once: {subjects}");
    }
    let (green, text) = f.main_is_green();
    assert!(green, "main is red after the resume: {text}");
    assert_no_integration_branch_is_left(&f);
}
