//! End-to-end tests: `cascade mega approve|resume|status|complete` with
//! scripted agents (small /bin/sh scripts) and a scripted PRD agent that
//! writes a PRD to `$CASCADE_PRD_PATH`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{
    alive, cascade, dead_pid, git, init_repo, other_branches, script, temp_files, write_json,
};

/// A temp repository with a mega-plan, plus a directory (outside the repo)
/// holding the scripted agents, their agents.json and their notes.
struct Mega {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Mega {
    fn root(&self) -> &Path {
        self.repo.path()
    }
    fn tools(&self) -> &Path {
        self.tools.path()
    }
    fn agents(&self) -> PathBuf {
        self.tools().join("agents.json")
    }
    /// `cascade --agents ... mega <args>` in the repo.
    fn cmd(&self, args: &[&str]) -> assert_cmd::Command {
        let mut c = cascade(self.root());
        c.arg("--agents").arg(self.agents()).arg("mega").args(args);
        c.timeout(Duration::from_secs(120));
        c
    }
    fn approve(&self, extra: &[&str]) -> std::process::Output {
        let mut args = crate::common::APPROVE_NOW.to_vec();
        args.extend_from_slice(extra);
        self.cmd(&args).output().expect("cascade runs")
    }
    fn status_json(&self) -> Value {
        let out = self.cmd(&["status", "--json"]).output().expect("runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status is JSON")
    }
    fn note(&self, name: &str) -> String {
        std::fs::read_to_string(self.tools().join(name)).unwrap_or_default()
    }
}

/// The implementation agent: writes `<story>.txt` in its worktree; a story
/// whose id starts with `fail-` fails; `api-*` stories check that auth's
/// work is already on their branch; `slow-*` stories hang once (kill test);
/// `pi-*` / `pw-*` stories log start/end markers to `par.log`, and a `pw-<g><n>`
/// story waits (at most 60 s) until its partner `pw-<g><3-n>` has started;
/// `note-*` stories note what findings they see and append one.
const IMPL: &str = r#"
set -e
T="$(dirname "$0")"
case "$CASCADE_STORY_ID" in
  *-pi-*|*-pw-*)
    echo "start $CASCADE_STORY_ID" >> "$T/par.log"
    case "$CASCADE_STORY_ID" in
      *-pw-*)
        me="${CASCADE_STORY_ID##*-pw-}"; g="${me%?}"; n="${me#?}"
        partner="${CASCADE_STORY_ID%-pw-*}-pw-$g$((3 - n))"
        i=0
        while ! grep -qx "start $partner" "$T/par.log" && [ $i -lt 1200 ]; do
          sleep 0.05; i=$((i + 1))
        done ;;
    esac
    echo "end $CASCADE_STORY_ID" >> "$T/par.log" ;;
esac
case "$CASCADE_STORY_ID" in
  *note-*)
    {
      echo "env=$CASCADE_FINDINGS"
      echo "--- findings.md"; cat findings.md 2>/dev/null || true
      echo "--- mega-findings.md $(stat -c %a mega-findings.md 2>/dev/null || echo missing)"
      cat mega-findings.md 2>/dev/null || true
      echo "--- prompt"; grep '^## Findings' "$CASCADE_PROMPT_FILE" || true
    } > "$T/seen.$CASCADE_STORY_ID"
    echo "note from $CASCADE_STORY_ID" >> "$CASCADE_FINDINGS" ;;
esac
case "$CASCADE_STORY_ID" in
  *fail-*) echo "cannot do $CASCADE_STORY_ID" >&2; exit 3 ;;
esac
case "$CASCADE_STORY_ID" in
  *api-*) test -f auth-1.txt || { echo "auth work missing" >&2; exit 4; } ;;
esac
case "$CASCADE_STORY_ID" in
  *conflict-*) echo "written by $CASCADE_STORY_ID" > shared.txt ;;
esac
case "$CASCADE_STORY_ID" in
  *slow-*)
    if [ ! -f "$T/resumed" ]; then
      echo $$ > "$T/slow.pid"
      touch "$T/slow.started"
      sleep 60
    fi ;;
esac
echo "$CASCADE_STORY_ID" >> "$T/impl.calls"
echo "done by $CASCADE_STORY_ID" > "$(echo "$CASCADE_STORY_ID" | tr '.' '_' | sed 's/.*_//').txt"
"#;

/// The PRD agent: one story named after the feature; notes what it saw.
const PRD_GOOD: &str = r#"
T="$(dirname "$0")"
f="${CASCADE_STORY_ID#prd-}"
echo "$f" >> "$T/prd.calls"
cp "$CASCADE_PROMPT_FILE" "$T/prd.prompt.$f"
echo "finding from $f" > findings.md
[ -n "$CASCADE_PRD_PATH" ] && echo "path=$CASCADE_PRD_PATH" >> "$T/prd.env"
[ -f mega-findings.md ] && [ "$(stat -c %a mega-findings.md)" = 444 ] && echo "findings read-only" >> "$T/prd.env"
cat > "$CASCADE_PRD_PATH" <<JSON
{"goal": "$f", "stories": [{"id": "$f-1", "title": "build $f", "description": "d", "priority": "high", "dependencies": [], "status": "pending"}]}
JSON
"#;

/// The good PRD agent reporting what the call cost, as Claude Code does.
const PRD_PAID: &str = r#"
T="$(dirname "$0")"
sh "$T/prd.sh"
printf '%s\n' '{"type":"result","result":"wrote the PRD","total_cost_usd":2.0,"usage":{"input_tokens":1000,"output_tokens":100}}'
"#;

/// Two PRD agents at once: the first one for `late` notes its pid and a
/// child's of its process group and sleeps (it would write its PRD a
/// minute later; a later one writes it at once); the one for any other
/// feature waits until `late`'s has started, then writes its PRD and
/// reports $2. Written PRDs are noted in `prd.calls` (by prd.sh).
const PRD_RACE: &str = r#"
T="$(dirname "$0")"
f="${CASCADE_STORY_ID#prd-}"
if [ "$f" = late ]; then
  if [ ! -f "$T/late-prd.pid" ]; then
    echo $$ > "$T/late-prd.pid"
    sleep 60 &
    echo $! > "$T/late-prd-child.pid"
    wait
  fi
  sh "$T/prd.sh"
  exit 0
fi
i=0
while [ ! -f "$T/late-prd-child.pid" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
sh "$T/prd.sh"
printf '%s\n' '{"type":"result","result":"wrote the PRD","total_cost_usd":2.0,"usage":{"input_tokens":1000,"output_tokens":100}}'
"#;

/// A PRD agent that always writes a PRD with an unknown dependency.
const PRD_BAD: &str = r#"
T="$(dirname "$0")"
n=$(cat "$T/bad.count" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$T/bad.count"
cp "$CASCADE_PROMPT_FILE" "$T/bad.prompt.$n"
cat > "$CASCADE_PRD_PATH" <<JSON
{"stories": [{"id": "s1", "title": "one", "dependencies": ["ghost-story"]}]}
JSON
"#;

/// One feature: (id, name, deps by id, whether a PRD is supplied in features/<name>/).
type F<'a> = (&'a str, &'a str, &'a [&'a str], bool);

fn setup(features: &[F], stories_of: impl Fn(&str) -> Vec<String>) -> Mega {
    let repo = init_repo();
    let tools = tempfile::tempdir().expect("tempdir");
    let t = tools.path();
    script(&t.join("impl.sh"), IMPL);
    script(&t.join("prd.sh"), PRD_GOOD);
    script(&t.join("prd-bad.sh"), PRD_BAD);
    script(&t.join("prd-paid.sh"), PRD_PAID);
    script(&t.join("prd-race.sh"), PRD_RACE);
    let agent = |cmd: &Path| json!({"type": "cli", "command": cmd.display().to_string(), "args": [], "timeout": 120});
    write_json(
        &t.join("agents.json"),
        &json!({
            "default_agent": "impl",
            "agents": {
                "impl": agent(&t.join("impl.sh")),
                "prd": agent(&t.join("prd.sh")),
                "prd-bad": agent(&t.join("prd-bad.sh")),
                "prd-paid": agent(&t.join("prd-paid.sh")),
                "prd-race": agent(&t.join("prd-race.sh")),
            },
            "phase_defaults": {"planning": {"default_agent": "prd", "fallback_chain": []}}
        }),
    );
    let root = repo.path();
    let feats: Vec<Value> = features
        .iter()
        .map(|(id, name, deps, _)| {
            json!({"id": id, "name": name, "title": format!("Feature {name}"),
                   "description": format!("Build {name}."), "priority": "high",
                   "dependencies": deps, "status": "pending"})
        })
        .collect();
    write_json(
        &root.join("mega-plan.json"),
        &json!({"goal": "a small app", "execution_mode": "auto", "target_branch": "main", "features": feats}),
    );
    for (_, name, _, has_prd) in features {
        if !has_prd {
            continue;
        }
        let stories: Vec<Value> = stories_of(name)
            .iter()
            .map(|id| {
                json!({"id": id, "title": format!("story {id}"), "description": "d",
                             "priority": "medium", "dependencies": [], "status": "pending",
                             "acceptance_criteria": ["file exists"]})
            })
            .collect();
        write_json(
            &root.join("features").join(name).join("prd.json"),
            &json!({"goal": name, "stories": stories}),
        );
    }
    std::fs::write(root.join("design_doc.md"), "Keep it simple.\n").expect("write");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "plan"]);
    Mega { repo, tools }
}

fn first_parent_subjects(root: &Path) -> Vec<String> {
    git(root, &["log", "--first-parent", "--format=%s", "main"])
        .lines()
        .map(str::to_string)
        .collect()
}

fn cascade_branches(root: &Path) -> Vec<String> {
    git(
        root,
        &["branch", "--list", "cascade/*", "--format=%(refname:short)"],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

fn text(out: &std::process::Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn three_features_land_in_order_with_merge_commits_and_a_generated_prd() {
    // auth <- api <- ui; ui has no PRD: the PRD agent writes it.
    let m = setup(
        &[
            ("f1", "auth", &[], true),
            ("f2", "api", &["f1"], true),
            ("f3", "ui", &["f2"], false),
        ],
        |name| vec![format!("{name}-1")],
    );
    // A prd.json committed on the target is no feature's PRD: every feature
    // worktree has it, and ui must still get its own from the PRD agent.
    write_json(
        &m.root().join("prd.json"),
        &json!({"goal": "old", "stories": [{"id": "old-1", "title": "old", "dependencies": []}]}),
    );
    git(m.root(), &["add", "prd.json"]);
    git(m.root(), &["commit", "-q", "-m", "an old prd"]);
    let out = m.approve(&["--prd-agent", "prd"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!m.root().join("old-1.txt").exists(), "{}", text(&out));

    // Merge commits on the target, in batch order, naming the features.
    let subjects = first_parent_subjects(m.root());
    let pos = |f: &str| {
        subjects
            .iter()
            .position(|s| s.starts_with(&format!("Merge feature '{f}'")))
            .unwrap_or_else(|| panic!("no merge of {f} in {subjects:?}"))
    };
    assert!(
        pos("ui") < pos("api") && pos("api") < pos("auth"),
        "{subjects:?}"
    );
    let merges = git(
        m.root(),
        &["rev-list", "--first-parent", "--merges", "main"],
    );
    assert_eq!(merges.lines().count(), 3, "{subjects:?}");
    // The work is in the main worktree (its branch moved) and nothing is left over.
    for f in ["auth-1.txt", "api-1.txt", "ui-1.txt"] {
        assert!(m.root().join(f).is_file(), "{f} missing; {}", text(&out));
    }
    assert!(
        cascade_branches(m.root()).is_empty(),
        "{:?}",
        cascade_branches(m.root())
    );
    assert_eq!(git(m.root(), &["status", "--porcelain"]), "");

    // The PRD agent ran once, for ui, with CASCADE_PRD_PATH and the shared
    // findings read-only in its worktree.
    assert_eq!(m.note("prd.calls").trim(), "ui");
    let env = m.note("prd.env");
    assert!(env.contains("path=") && env.contains("prd.json"), "{env}");
    assert!(env.contains("findings read-only"), "{env}");
    // Its prompt carries the feature, what it builds on and the design doc.
    let prompt = m.note("prd.prompt.ui");
    assert!(
        prompt.contains("Feature ui") && prompt.contains("Build ui."),
        "{prompt}"
    );
    assert!(prompt.contains("`api`: Feature api"), "{prompt}");
    assert!(prompt.contains("Keep it simple."), "{prompt}");
    assert!(prompt.contains("CASCADE_PRD_PATH"), "{prompt}");

    // ui's findings.md is kept and shared with later features.
    let kept = m.root().join(".cascade/mega/features/ui/findings.md");
    assert_eq!(
        std::fs::read_to_string(kept).unwrap().trim(),
        "finding from ui"
    );
    let shared = std::fs::read_to_string(m.root().join("mega-findings.md")).unwrap();
    assert!(
        shared.contains("## Feature ui") && shared.contains("finding from ui"),
        "{shared}"
    );
    // progress.txt tells the story per feature.
    let progress = std::fs::read_to_string(m.root().join("progress.txt")).unwrap();
    assert!(
        progress.contains("feature auth: [COMPLETE] merged into main"),
        "{progress}"
    );
    assert!(
        progress.contains("auth/auth-1: [START] via impl"),
        "{progress}"
    );

    let st = m.status_json();
    assert_eq!(st["status"], "completed", "{st}");
    for f in ["auth", "api", "ui"] {
        assert_eq!(st["features"][f]["status"], "complete", "{st}");
        assert_eq!(st["features"][f]["stories"]["done"], 1, "{st}");
    }
    assert_eq!(st["features"]["ui"]["prd_source"], "generated");
    assert_eq!(st["features"]["auth"]["prd_source"], "plan_folder");
    let human = m.cmd(&["status"]).output().unwrap();
    assert!(String::from_utf8_lossy(&human.stdout).contains("3 complete"));

    // Approving a completed plan again changes nothing.
    let again = m.approve(&[]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert_eq!(first_parent_subjects(m.root()), subjects);

    // `mega complete` closes the run.
    let done = m.cmd(&["complete"]).output().unwrap();
    assert_eq!(done.status.code(), Some(0), "{}", text(&done));
    assert_eq!(m.status_json()["status"], "closed");
}

#[test]
fn json_stream_ends_with_mega_finished() {
    let m = setup(&[("f1", "auth", &[], true)], |n| vec![format!("{n}-1")]);
    let out = m.approve(&["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    let last = lines.last().expect("events");
    assert_eq!(last["event"], "mega_finished");
    assert_eq!(last["status"], "completed");
    assert!(lines
        .iter()
        .any(|e| e["event"] == "story_merged" && e["feature"] == "auth"));
    assert!(lines.iter().any(|e| e["event"] == "feature_merged"));
}

#[test]
fn the_prd_agents_spend_is_announced_and_charged_to_max_cost() {
    // api builds on auth; neither has a PRD. Writing auth's costs $2 of a
    // $1 budget: no later feature starts, not even its PRD agent.
    let m = setup(
        &[("f1", "auth", &[], false), ("f2", "api", &["f1"], false)],
        |_| vec![],
    );
    let out = m.approve(&["--prd-agent", "prd-paid", "--max-cost", "1", "--json"]);
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    let charged: Vec<&Value> = lines
        .iter()
        .filter(|e| e["event"] == "prd_agent_finished")
        .collect();
    assert_eq!(charged.len(), 1, "{}", text(&out));
    assert_eq!(charged[0]["feature"], "auth");
    assert_eq!(charged[0]["agent"], "prd-paid");
    assert_eq!(charged[0]["cost_usd"], 2.0);
    assert_eq!(charged[0]["input_tokens"], 1000);
    assert_eq!(m.note("prd.calls").trim(), "auth", "{}", text(&out));
    let last = lines.last().expect("events");
    assert_eq!(last["event"], "mega_finished", "{}", text(&out));
    assert_eq!(last["status"], "budget_exhausted", "{}", text(&out));
    // The spend is kept: a resume with the same budget starts nothing new.
    let out = m
        .cmd(&["resume", "--auto-run", "--max-cost", "1", "--json"])
        .output()
        .unwrap();
    let last: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no events: {}", text(&out)));
    assert_eq!(last["status"], "budget_exhausted", "{}", text(&out));
    assert_eq!(m.note("prd.calls").trim(), "auth", "{}", text(&out));
}

#[test]
fn a_prd_charge_over_a_hard_budget_stops_the_other_prd_agents_and_starts_no_feature() {
    // auth and late are one batch, both without a PRD: their PRD agents run
    // at once. auth's costs $2 of a $1 hard budget while late's still runs.
    let m = setup(
        &[("f1", "auth", &[], false), ("f2", "late", &[], false)],
        |_| vec![],
    );
    let started = Instant::now();
    let out = m.approve(&[
        "--prd-agent",
        "prd-race",
        "--parallel",
        "2",
        "--max-cost",
        "1",
        "--hard-budget",
        "--json",
    ]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let lines = json_lines(&out);
    let last = lines.last().expect("events");
    assert_eq!(last["event"], "mega_finished", "{}", text(&out));
    assert_eq!(last["status"], "budget_exhausted", "{}", text(&out));
    let exhausted: Vec<&Value> = lines
        .iter()
        .filter(|e| e["event"] == "budget_exhausted")
        .collect();
    assert_eq!(exhausted.len(), 1, "{}", text(&out));
    assert_eq!(exhausted[0]["scope"], "run", "{}", exhausted[0]);
    assert_eq!(exhausted[0]["spent_usd"], 2.0, "{}", exhausted[0]);
    // late's PRD agent and the child of its process group were stopped,
    // not left to sleep their minute.
    for note in ["late-prd.pid", "late-prd-child.pid"] {
        let pid: u32 = m.note(note).trim().parse().expect("a pid");
        assert!(!alive(pid), "{note}: {pid} still running");
    }
    assert!(took < Duration::from_secs(45), "took {took:?}");
    // No feature started its stories: no implementation agent ran.
    assert_eq!(m.note("impl.calls"), "", "{}", text(&out));
    assert!(
        lines.iter().all(|e| e["event"] != "run_started"),
        "{}",
        text(&out)
    );
    let st = m.status_json();
    assert_eq!(st["status"], "budget_exhausted", "{st}");

    // Resumable: with a budget that holds, auth keeps its PRD (its agent is
    // not run again), late's is written this time, and both land.
    let out = m
        .cmd(&[
            "resume",
            "--auto-run",
            "--retry-delay",
            "0",
            "--max-cost",
            "100",
            "--prd-agent",
            "prd-race",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let calls = m.note("prd.calls");
    assert_eq!(calls.matches("auth").count(), 1, "{calls}");
    assert_eq!(calls.matches("late").count(), 1, "{calls}");
    for f in ["auth-1.txt", "late-1.txt"] {
        assert!(m.root().join(f).is_file(), "{f} missing; {}", text(&out));
    }
    assert_eq!(m.status_json()["status"], "completed");
    assert_eq!(other_branches(m.root()), Vec::<String>::new());
}

#[test]
fn invalid_generated_prd_is_retried_with_the_errors_then_fails_the_feature() {
    let m = setup(&[("f1", "broken", &[], false)], |_| vec![]);
    let out = m.approve(&["--prd-agent", "prd-bad"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // First try plus two fixes, each fix prompt quoting the validation error.
    assert_eq!(m.note("bad.count").trim(), "3");
    let second = m.note("bad.prompt.2");
    assert!(second.contains("ghost-story"), "{second}");
    assert!(second.contains("attempt 2 of 3"), "{second}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("feature 'broken' failed (prd_invalid"),
        "{stderr}"
    );
    assert!(stderr.contains("cascade/broken"), "{stderr}");
    let st = m.status_json();
    assert_eq!(st["features"]["broken"]["status"], "failed");
    assert_eq!(st["features"]["broken"]["failure"]["kind"], "prd_invalid");
    assert!(st["features"]["broken"]["failure"]["message"]
        .as_str()
        .unwrap()
        .contains("ghost-story"));
    // The branch is kept for inspection.
    assert_eq!(cascade_branches(m.root()), vec!["cascade/broken"]);

    // With a PRD agent that writes a valid PRD, resuming finishes the feature.
    let out = m
        .cmd(&[
            "resume",
            "--auto-run",
            "--prd-agent",
            "prd",
            "--retry-delay",
            "0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(m.status_json()["features"]["broken"]["status"], "complete");
    assert!(m.root().join("broken-1.txt").is_file());
}

#[test]
fn merge_conflict_fails_the_feature_and_keeps_its_branch() {
    // Two independent features of one batch write the same file differently:
    // the first lands, the second conflicts.
    let m = setup(
        &[("f1", "left", &[], true), ("f2", "right", &[], true)],
        |name| vec![format!("{name}-conflict-1")],
    );
    let out = m.approve(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let st = m.status_json();
    assert_eq!(st["features"]["left"]["status"], "complete", "{st}");
    let right = &st["features"]["right"];
    assert_eq!(right["status"], "failed", "{st}");
    assert_eq!(right["failure"]["kind"], "merge_conflict");
    assert_eq!(right["failure"]["conflict_files"], json!(["shared.txt"]));
    // Never reported as success, and the branch (with its work) survives.
    assert!(cascade_branches(m.root()).contains(&"cascade/right".to_string()));
    let on_branch = git(m.root(), &["show", "cascade/right:shared.txt"]);
    assert!(on_branch.contains("right-conflict-1"), "{on_branch}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("feature 'right' failed (merge_conflict"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(m.root().join("shared.txt"))
            .unwrap()
            .trim(),
        "written by left-conflict-1"
    );
}

#[test]
fn execution_mode_auto_runs_every_batch_without_auto_run() {
    let m = setup(
        &[("f1", "auth", &[], true), ("f2", "api", &["f1"], true)],
        |name| vec![format!("{name}-1")],
    );
    // The fixture's plan says `"execution_mode": "auto"`.
    let out = m.cmd(&["approve", "--retry-delay", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let st = m.status_json();
    assert_eq!(st["status"], "completed", "{st}");
    assert_eq!(st["features"]["api"]["status"], "complete");
}

#[test]
fn without_auto_run_it_stops_after_one_batch_and_continues_later() {
    let m = setup(
        &[("f1", "auth", &[], true), ("f2", "api", &["f1"], true)],
        |name| vec![format!("{name}-1")],
    );
    // A plan that asks to be confirmed between batches (`execution_mode`
    // other than "auto"), no terminal and no --auto-run: one batch, then a
    // pause (exit 0).
    let plan_path = m.root().join("mega-plan.json");
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan_path).unwrap()).unwrap();
    plan["execution_mode"] = json!("manual");
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    git(m.root(), &["commit", "-qam", "confirm between batches"]);
    let out = m.cmd(&["approve", "--retry-delay", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let st = m.status_json();
    assert_eq!(st["status"], "paused", "{st}");
    assert_eq!(st["features"]["auth"]["status"], "complete");
    assert_eq!(st["features"]["api"]["status"], "pending");
    let out = m.approve(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(m.status_json()["features"]["api"]["status"], "complete");
}

#[test]
fn failing_feature_blocks_its_dependents_only() {
    // api fails; ui depends on api (blocked); docs depends on auth only (lands).
    let m = setup(
        &[
            ("f1", "auth", &[], true),
            ("f2", "api", &["f1"], true),
            ("f3", "ui", &["f2"], true),
            ("f4", "docs", &["f1"], true),
        ],
        |name| match name {
            "api" => vec!["api-fail-1".to_string()],
            n => vec![format!("{n}-1")],
        },
    );
    let out = m.approve(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let st = m.status_json();
    assert_eq!(st["status"], "failed");
    assert_eq!(st["features"]["auth"]["status"], "complete", "{st}");
    assert_eq!(st["features"]["docs"]["status"], "complete", "{st}");
    assert_eq!(st["features"]["api"]["status"], "failed", "{st}");
    assert_eq!(st["features"]["api"]["failure"]["kind"], "stories_failed");
    assert_eq!(st["features"]["ui"]["status"], "blocked");
    assert_eq!(st["features"]["ui"]["blocked_by"], "api");
    // The failed feature's branch and worktree are kept and named.
    let wt = st["features"]["api"]["worktree"]
        .as_str()
        .expect("worktree kept");
    assert!(Path::new(wt).is_dir());
    assert!(cascade_branches(m.root()).contains(&"cascade/api".to_string()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("feature 'api' failed (stories_failed") && stderr.contains(wt),
        "{stderr}"
    );
    let subjects = first_parent_subjects(m.root());
    assert!(subjects
        .iter()
        .any(|s| s.starts_with("Merge feature 'docs'")));
    assert!(!subjects
        .iter()
        .any(|s| s.starts_with("Merge feature 'api'")));

    // `worktree prune` removes cascade's leftovers and nothing of the user's.
    git(m.root(), &["branch", "mine"]);
    let user_wt = m.tools().join("user-wt");
    git(
        m.root(),
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "user-branch",
            user_wt.to_str().unwrap(),
        ],
    );
    let out = cascade(m.root())
        .args(["worktree", "prune"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        cascade_branches(m.root()).is_empty(),
        "{:?}",
        cascade_branches(m.root())
    );
    assert!(!Path::new(wt).exists());
    let branches = git(m.root(), &["branch", "--format=%(refname:short)"]);
    assert!(
        branches.contains("mine") && branches.contains("user-branch"),
        "{branches}"
    );
    assert!(user_wt.join("README.md").is_file());
}

#[test]
fn kill_9_then_resume_merges_each_feature_once() {
    let m = setup(
        &[("f1", "auth", &[], true), ("f2", "api", &["f1"], true)],
        |name| match name {
            "api" => vec!["api-slow-1".to_string()],
            n => vec![format!("{n}-1")],
        },
    );
    let mut child = started_slow(&m, &crate::common::APPROVE_NOW);
    child.kill().expect("kill -9"); // SIGKILL
    child.wait().expect("reaped");
    // The orphaned agent (its own process group) lives on, for the resume
    // to stop; so does a half-done write of a killed writer.
    let pid: u32 = m
        .note("slow.pid")
        .trim()
        .parse()
        .expect("the slow agent's pid");
    assert!(alive(pid), "the agent did not outlive the killed run");
    std::fs::write(m.tools().join("resumed"), "").unwrap();
    let dead = dead_pid();
    let stale = m.root().join(format!(".git/info/.exclude.{dead}.0.tmp"));
    std::fs::write(stale, "half").unwrap();

    let st = m.status_json();
    assert_eq!(st["status"], "interrupted", "{st}");
    assert_eq!(st["features"]["auth"]["status"], "complete", "{st}");

    let out = m
        .cmd(&[
            "resume",
            "--auto-run",
            "--retry-delay",
            "0",
            "--max-retries",
            "0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let subjects = first_parent_subjects(m.root());
    for f in ["auth", "api"] {
        let n = subjects
            .iter()
            .filter(|s| s.starts_with(&format!("Merge feature '{f}'")))
            .count();
        assert_eq!(n, 1, "{f} merged {n} times: {subjects:?}");
    }
    // auth's story ran exactly once.
    let calls = m.note("impl.calls");
    assert_eq!(calls.matches("auth-1").count(), 1, "{calls}");
    assert!(m.root().join("api-slow-1.txt").is_file(), "{}", text(&out));
    assert_eq!(m.status_json()["status"], "completed");
    // The resume stopped the killed run's agent, said so, and left no
    // temp file, process or branch behind.
    assert!(!alive(pid), "the killed run's agent {pid} is still running");
    assert!(
        text(&out)
            .lines()
            .any(|l| l.contains("stopped the agent of story") && l.contains("api-slow-1")),
        "{}",
        text(&out)
    );
    assert_eq!(temp_files(m.root()), Vec::<PathBuf>::new());
    assert_eq!(other_branches(m.root()), Vec::<String>::new());
}

#[test]
fn status_without_a_run_exits_0_and_says_how_to_start_one() {
    let repo = init_repo();
    let out = cascade(repo.path())
        .args(["mega", "status"])
        .output()
        .unwrap();
    // Like `cascade status`: nothing to show is an answer, exit 0.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("No mega-plan run here yet") && stdout.contains("cascade mega approve"),
        "{stdout}"
    );
    let out = cascade(repo.path())
        .args(["mega", "status", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "none", "{v}");
    assert_eq!(v["features"], json!({}), "{v}");
    assert_eq!(v["batches"], json!([]), "{v}");
    assert_eq!(v["counts"]["complete"], 0, "{v}");
}

#[test]
fn ctrl_c_stops_the_agents_saves_state_and_exits_130() {
    let m = setup(&[("f1", "auth", &[], true)], |_| {
        vec!["auth-slow-1".to_string()]
    });
    let child = started_slow(&m, &APPROVE_ALL);
    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    let out = child.wait_with_output().expect("exits");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    // The closing line names the command that continues the run.
    let closing = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("mega run "))
        .map(str::to_string);
    assert_eq!(
        closing.as_deref(),
        Some("mega run interrupted: 0 complete, 0 failed, 0 blocked, 0 pending, 1 unfinished; `cascade mega resume` continues it"),
        "{}",
        text(&out)
    );
    // The hanging agent was stopped with its process group.
    let agent = m.note("slow.pid");
    let alive = std::process::Command::new("kill")
        .args(["-0", agent.trim()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(!alive, "agent {agent} still running");
    let st = m.status_json();
    assert_eq!(st["status"], "interrupted", "{st}");
    assert_eq!(st["features"]["auth"]["status"], "running", "{st}");
    // And it does: the slow story goes through this time.
    std::fs::write(m.tools().join("resumed"), "").expect("marker");
    let resumed = m.cmd(&["resume"]).output().expect("runs");
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed));
    assert_eq!(m.status_json()["status"], "completed");
}

/// `cascade mega <args>` of `m` in the background, once its slow story's
/// agent has started (stdout and stderr piped).
fn started_slow(m: &Mega, args: &[&str]) -> std::process::Child {
    let mut child = crate::common::cascade_command(m.root())
        .arg("--agents")
        .arg(m.agents())
        .arg("mega")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn cascade");
    let started = m.tools().join("slow.started");
    let deadline = Instant::now() + Duration::from_secs(90);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the slow story never started");
        if let Ok(Some(status)) = child.try_wait() {
            panic!("cascade exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// What the Ctrl-C tests start: a mega run of every batch.
const APPROVE_ALL: [&str; 4] = ["approve", "--auto-run", "--retry-delay", "0"];

#[test]
fn mega_status_watch_prints_changes_until_the_mega_run_ends() {
    use std::io::{BufRead, Read};
    let m = setup(&[("f1", "auth", &[], true)], |_| {
        vec!["auth-slow-1".to_string()]
    });
    let run = started_slow(&m, &APPROVE_ALL);
    let mut watch = crate::common::cascade_command(m.root())
        .args(["mega", "status", "--watch"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn mega status --watch");
    // The watcher's first block shows the run going on; only then it ends
    // (interrupted: the slow story would take a minute).
    let mut lines = std::io::BufReader::new(watch.stdout.take().expect("piped"));
    let mut first = String::new();
    lines.read_line(&mut first).expect("a first line");
    assert!(first.trim_end().ends_with(": running"), "{first}");
    // SAFETY: a plain signal to our own child.
    unsafe { libc::kill(run.id() as i32, libc::SIGINT) };
    let out = run.wait_with_output().expect("exits");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    // The watcher ends by itself once the run has ended.
    let mut rest = String::new();
    lines.read_to_string(&mut rest).expect("the rest");
    assert!(watch.wait().expect("ends").success());
    let all = first + &rest;
    let blocks: Vec<&str> = all.split("\n\n").collect();
    assert!(blocks.len() >= 2, "{all}");
    assert!(
        blocks
            .last()
            .and_then(|b| b.lines().next())
            .is_some_and(|l| l.ends_with(": interrupted")),
        "the last block is the run's end:\n{all}"
    );
    for pair in blocks.windows(2) {
        assert_ne!(pair[0], pair[1], "a block repeated unchanged:\n{all}");
    }
    assert!(!all.contains('\x1b'), "no terminal, no escapes:\n{all}");
    // On a run that has ended: the one block of `mega status`, and it returns.
    let once = m
        .cmd(&["status", "--watch", "--json"])
        .output()
        .expect("runs");
    assert_eq!(once.status.code(), Some(0), "{}", text(&once));
    let lines: Vec<Value> = json_lines(&once);
    assert_eq!(lines.len(), 1, "{}", text(&once));
    assert_eq!(lines[0], m.status_json());
}

#[test]
fn invalid_plan_and_dirty_tree_are_refused_with_exit_2() {
    let m = setup(
        &[("f1", "auth", &["f2"], true), ("f2", "api", &["f1"], true)],
        |n| vec![format!("{n}-1")],
    );
    let out = m.approve(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error:") && stderr.contains("->"),
        "{stderr}"
    );

    let m = setup(&[("f1", "auth", &[], true)], |n| vec![format!("{n}-1")]);
    std::fs::write(m.root().join("README.md"), "changed\n").unwrap();
    let out = m.approve(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("README.md") && stderr.contains("--allow-dirty"),
        "{stderr}"
    );
}

/// The largest number of agents running at once, from the order of the
/// start/end markers in `par.log` (not from timings).
fn overlaps(log: &str) -> usize {
    let mut running: Vec<&str> = Vec::new();
    let mut max = 0;
    for line in log.lines() {
        match line.split_once(' ') {
            Some(("start", id)) => {
                running.push(id);
                max = max.max(running.len());
            }
            Some(("end", id)) => running.retain(|r| *r != id),
            _ => {}
        }
    }
    max
}

#[test]
fn parallel_is_one_limit_shared_by_the_features_of_a_batch() {
    // --parallel 2 for two features of one batch. `left` has two instant
    // stories; `right` has two pairs whose stories only finish once their
    // partner has started, so each pair needs both slots at once: with a
    // fixed share of one slot per feature they could not overlap.
    let m = setup(
        &[("f1", "left", &[], true), ("f2", "right", &[], true)],
        |name| match name {
            "left" => vec!["left-pi-1".into(), "left-pi-2".into()],
            _ => vec![
                "right-pw-a1".into(),
                "right-pw-a2".into(),
                "right-pw-b1".into(),
                "right-pw-b2".into(),
            ],
        },
    );
    let out = m.approve(&["--parallel", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let log = m.note("par.log");
    assert_eq!(log.lines().count(), 12, "{log}");
    let max = overlaps(&log);
    assert!(max <= 2, "more than 2 agents at once:\n{log}");
    // Each pair really ran side by side: `right` alone used both slots
    // (so `left` used none), which a fixed per-feature share of 2 / 2 = 1
    // would never allow.
    let mut running: Vec<&str> = Vec::new();
    let mut pairs = Vec::new();
    for line in log.lines() {
        match line.split_once(' ') {
            Some(("start", id)) => {
                running.push(id);
                for g in ["a", "b"] {
                    let (x, y) = (format!("right-pw-{g}1"), format!("right-pw-{g}2"));
                    if running.contains(&x.as_str()) && running.contains(&y.as_str()) {
                        pairs.push(g);
                    }
                }
            }
            Some(("end", id)) => running.retain(|r| *r != id),
            _ => {}
        }
    }
    assert_eq!(pairs, ["a", "b"], "{log}");
    let st = m.status_json();
    assert_eq!(st["features"]["left"]["stories"]["done"], 2, "{st}");
    assert_eq!(st["features"]["right"]["stories"]["done"], 4, "{st}");
}

#[test]
fn parallel_one_runs_one_agent_at_a_time_across_features() {
    let m = setup(
        &[("f1", "left", &[], true), ("f2", "right", &[], true)],
        |name| (1..=3).map(|i| format!("{name}-pi-{i}")).collect(),
    );
    let out = m.approve(&["--parallel", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let log = m.note("par.log");
    assert_eq!(log.lines().count(), 12, "{log}");
    assert_eq!(overlaps(&log), 1, "{log}");
}

#[test]
fn story_agents_read_the_findings_and_their_notes_are_kept() {
    // core: note-1 then note-2 (dependent); web (next batch) after core.
    let m = setup(
        &[("f1", "core", &[], true), ("f2", "web", &["f1"], true)],
        |name| vec![format!("{name}-note-1")],
    );
    let root = m.root();
    write_json(
        &root.join("features/core/prd.json"),
        &json!({"goal": "core", "stories": [
            {"id": "core-note-1", "title": "first", "description": "d", "priority": "high",
             "dependencies": [], "status": "pending"},
            {"id": "core-note-2", "title": "second", "description": "d", "priority": "high",
             "dependencies": ["core-note-1"], "status": "pending"}]}),
    );
    git(root, &["commit", "-q", "-am", "two core stories"]);
    let out = m.approve(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // The first story got the shared file read-only and the prompt section.
    let first = m.note("seen.core-note-1");
    assert!(first.contains("--- mega-findings.md 444"), "{first}");
    assert!(first.contains("Goal: a small app"), "{first}");
    assert!(first.contains("## Findings"), "{first}");
    assert!(
        first.contains("env=/") && first.contains("findings.md"),
        "{first}"
    );
    // The second story of the feature reads what the first one noted.
    let second = m.note("seen.core-note-2");
    let (own, _) = second.split_once("--- mega-findings.md").unwrap();
    assert!(own.contains("note from core-note-1"), "{second}");
    // The feature's findings.md (kept after cleanup) holds both notes, under
    // headings naming the stories, and went into mega-findings.md ...
    let kept = std::fs::read_to_string(root.join(".cascade/mega/features/core/findings.md"))
        .expect("core's findings kept");
    assert!(
        kept.contains("## core-note-1: first\n\nnote from core-note-1")
            && kept.contains("## core-note-2: second\n\nnote from core-note-2"),
        "{kept}"
    );
    assert_eq!(kept.matches("note from core-note-1").count(), 1, "{kept}");
    let shared = std::fs::read_to_string(root.join("mega-findings.md")).unwrap();
    assert!(
        shared.contains("## Feature core") && shared.contains("note from core-note-2"),
        "{shared}"
    );
    // ... which the next batch's story agents read.
    let web = m.note("seen.web-note-1");
    let (_, mega) = web.split_once("--- mega-findings.md").unwrap();
    assert!(mega.contains("note from core-note-2"), "{web}");
    // Nothing of it was committed.
    let tracked = git(root, &["ls-files"]);
    assert!(!tracked.contains("findings.md"), "{tracked}");
    assert_eq!(git(root, &["status", "--porcelain"]), "");
}

#[test]
fn plain_run_story_notes_land_in_the_root_findings() {
    let repo = init_repo();
    let root = repo.path();
    let tools = tempfile::tempdir().unwrap();
    let t = tools.path();
    script(
        &t.join("impl.sh"),
        r#"echo "$CASCADE_STORY_ID" > "$CASCADE_STORY_ID.txt"
cp findings.md "$(dirname "$0")/seen.$CASCADE_STORY_ID" 2>/dev/null || true
echo "note from $CASCADE_STORY_ID" >> findings.md"#,
    );
    write_json(
        &t.join("agents.json"),
        &json!({"default_agent": "impl", "agents": {"impl": {"type": "cli",
            "command": t.join("impl.sh").display().to_string(), "args": [], "timeout": 60}}}),
    );
    std::fs::write(root.join("findings.md"), "# Findings\n\nearlier note\n").unwrap();
    write_json(
        &root.join("prd.json"),
        &json!({"goal": "g", "stories": [
            {"id": "s1", "title": "one", "description": "d", "priority": "high",
             "dependencies": [], "status": "pending"},
            {"id": "s2", "title": "two", "description": "d", "priority": "high",
             "dependencies": ["s1"], "status": "pending"}]}),
    );
    let out = cascade(root)
        .arg("--agents")
        .arg(t.join("agents.json"))
        .args(["approve", "--auto-run", "--retry-delay", "0"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let seen = std::fs::read_to_string(t.join("seen.s2")).expect("s2 saw findings.md");
    assert!(
        seen.contains("earlier note") && seen.contains("note from s1"),
        "{seen}"
    );
    let all = std::fs::read_to_string(root.join("findings.md")).unwrap();
    assert_eq!(
        all,
        "# Findings\n\nearlier note\n\n## s1: one\n\nnote from s1\n\n## s2: two\n\nnote from s2\n"
    );
    assert_eq!(git(root, &["status", "--porcelain"]), "");
}

/// `cascade show` and `cascade logs` name a mega run's story as
/// FEATURE/STORY, or by its id alone when one feature has it.
#[test]
fn show_and_logs_find_a_features_story() {
    let m = setup(&[("f1", "auth", &[], true)], |name| {
        vec![format!("{name}-1")]
    });
    let out = m.approve(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let run = |args: &[&str]| crate::common::run_with_agents(m.root(), &m.agents(), args);
    for name in ["auth/auth-1", "auth-1"] {
        let show = run(&["show", name, "--json"]);
        assert_eq!(show.status.code(), Some(0), "{}", text(&show));
        let v: Value = serde_json::from_slice(&show.stdout).expect("show --json is JSON");
        assert_eq!(v["story"], "auth/auth-1", "{v:#}");
        assert_eq!(v["feature"], "auth");
        assert_eq!(v["status"], "complete");
        assert_eq!(v["attempts"][0]["outcome"], "passed", "{v:#}");
    }
    let logs = run(&["logs", "auth/auth-1"]);
    assert_eq!(logs.status.code(), Some(0), "{}", text(&logs));
    assert!(!logs.stdout.is_empty(), "{}", text(&logs));
    // --json: the same lines, each an object naming the feature's story.
    let json = run(&["logs", "auth/auth-1", "--json"]);
    assert_eq!(json.status.code(), Some(0), "{}", text(&json));
    let lines = json_lines(&json);
    let texts: Vec<&str> = lines.iter().filter_map(|l| l["text"].as_str()).collect();
    assert_eq!(
        texts.join("\n") + "\n",
        String::from_utf8_lossy(&logs.stdout),
        "{}",
        text(&json)
    );
    for l in &lines {
        assert_eq!(l["story"], "auth/auth-1", "{l}");
        assert_eq!(l["attempt"], 1);
        assert_eq!(l["phase"], "implementation");
        let path = l["path"].as_str().unwrap_or_default();
        assert!(
            path.contains("/mega/features/auth/logs/auth-1-implementation-1.log"),
            "{path}"
        );
    }
    let wrong = run(&["show", "api/auth-1"]);
    assert_eq!(wrong.status.code(), Some(2), "{}", text(&wrong));
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("did you mean 'auth/auth-1'?"),
        "{}",
        text(&wrong)
    );
}

/// The NDJSON events of `out`.
fn json_lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_mega_run_races_its_stories_and_its_resume_races_them_too() {
    let m = setup(
        &[("f1", "auth", &[], true), ("f2", "api", &["f1"], true)],
        |name| vec![format!("{name}-1")],
    );
    // Confirm between batches: the first run stops after auth's batch.
    let plan_path = m.root().join("mega-plan.json");
    let mut plan: Value =
        serde_json::from_str(&std::fs::read_to_string(&plan_path).unwrap()).unwrap();
    plan["execution_mode"] = json!("manual");
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    git(m.root(), &["commit", "-qam", "confirm between batches"]);
    let out = m
        .cmd(&["approve", "--retry-delay", "0", "--race", "2", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let won = |ev: &[Value], feature: &str| -> Vec<Value> {
        ev.iter()
            .filter(|e| e["event"] == "race_won" && e["feature"] == feature)
            .cloned()
            .collect()
    };
    let ev = json_lines(&out);
    let auth = won(&ev, "auth");
    assert_eq!(auth.len(), 1, "{}", text(&out));
    assert_eq!(auth[0]["story"], "auth-1");
    // Two runs of one agent make the same change: the earlier finish
    // decides, and which run finishes first is the machine's choice.
    assert_eq!(auth[0]["reason"], "earlier finish", "{}", text(&out));
    let branch = auth[0]["branch"].as_str().unwrap_or_default();
    assert!(
        [
            "cascade/auth.auth-1/race-impl-1",
            "cascade/auth.auth-1/race-impl-2"
        ]
        .contains(&branch),
        "{branch}"
    );
    assert_eq!(m.status_json()["features"]["api"]["status"], "pending");
    // `mega resume` without --race: the recorded race goes on for api.
    let out = m
        .cmd(&["resume", "--auto-run", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let ev = json_lines(&out);
    let started: Vec<&Value> = ev
        .iter()
        .filter(|e| e["event"] == "race_started" && e["feature"] == "api")
        .collect();
    assert_eq!(started.len(), 1, "{}", text(&out));
    assert_eq!(started[0]["contestants"], json!(["impl-1", "impl-2"]));
    assert_eq!(won(&ev, "api").len(), 1, "{}", text(&out));
    assert!(won(&ev, "auth").is_empty(), "auth raced again");
    // Each story merged once, by its winner.
    let log = git(m.root(), &["log", "--format=%s", "main"]);
    for story in ["auth-1", "api-1"] {
        let merges = log
            .lines()
            .filter(|l| l.starts_with(&format!("{story}:")))
            .count();
        assert_eq!(merges, 1, "{story} in:\n{log}");
    }
    assert_eq!(m.status_json()["status"], "completed");
}
