//! End-to-end tests of racing agents on a story (`--race`, a story's
//! `"race"`): scripted contestants of different quality (one fails the
//! gate, one passes with a large change, one with a small one, a slow one,
//! a costly one), the winner rule, `--race-until first`, `--race-keep
//! none`, the story budget refusing a contestant, and resume after kill -9.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{
    alive_after_grace, cascade, cascade_command, code, events, explain, git, init_repo, of_kind,
    other_branches, script, write_json, APPROVE_NOW,
};

/// Writes one line to `s1.txt`.
const SMALL: &str = "echo small > s1.txt";
/// Writes forty lines to `s1.txt`.
const BIG: &str = "seq 1 40 > s1.txt";
/// Leaves the file the gate refuses.
const BROKEN: &str = "echo small > s1.txt; echo oops > broken.txt";

/// A repository whose prd.json holds story `s1` (with `extra` fields) and
/// a required gate that fails when `broken.txt` exists; agents are scripts
/// in a tools directory outside the repository.
struct Race {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Race {
    fn new(extra: Value) -> Race {
        let r = Race {
            repo: init_repo(),
            tools: tempfile::tempdir().expect("tools dir"),
        };
        let gate = script(&r.t("check.sh"), "test ! -f broken.txt");
        let mut story = json!({
            "id": "s1", "title": "Title s1", "description": "Implement s1",
            "priority": "medium", "dependencies": [], "status": "pending",
            "acceptance_criteria": ["it works"]
        });
        if let (Some(s), Some(extra)) = (story.as_object_mut(), extra.as_object()) {
            s.extend(extra.clone());
        }
        write_json(
            &r.repo().join("prd.json"),
            &json!({
                "metadata": {"version": "1.0"}, "goal": "race", "objectives": [],
                "stories": [story],
                "quality_gates": {"enabled": true, "fail_fast": false, "use_cache": false,
                    "gates": [{"name": "check", "type": "test", "command": gate, "required": true}]},
            }),
        );
        r
    }

    fn repo(&self) -> &Path {
        self.repo.path()
    }

    fn t(&self, name: &str) -> PathBuf {
        self.tools.path().join(name)
    }

    /// agents.json with these agents (`name`, sh body; `T` is the tools
    /// dir, `name` the agent's; `$$` recorded in `T/<name>.pids`); the
    /// first is the default.
    fn agents(&self, agents: &[(&str, &str)]) {
        let t = self.tools.path().display();
        let mut map = serde_json::Map::new();
        for (name, body) in agents {
            let path = script(
                &self.t(&format!("{name}.sh")),
                &format!("T='{t}'\nname='{name}'\necho $$ >> \"$T/{name}.pids\"\n{body}"),
            );
            map.insert(
                name.to_string(),
                json!({"type": "cli", "command": path, "args": [], "timeout": 60}),
            );
        }
        let default = agents.first().map_or("none", |a| a.0);
        write_json(
            &self.t("agents.json"),
            &json!({"default_agent": default, "agents": map}),
        );
    }

    /// `approve` at once with `--json` and `extra`.
    fn approve(&self, extra: &[&str]) -> std::process::Output {
        let mut cmd = cascade(self.repo());
        cmd.args(APPROVE_NOW)
            .arg("--json")
            .args(extra)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .timeout(Duration::from_secs(120));
        cmd.output().expect("cascade runs")
    }

    /// The winner's `race_won`, after a run that passed.
    fn won(&self, extra: &[&str]) -> (Vec<Value>, Value) {
        let out = self.approve(extra);
        assert_eq!(code(&out), 0, "{}", explain(&out));
        let ev = events(&out);
        let won = of_kind(&ev, "race_won");
        assert_eq!(won.len(), 1, "{}", explain(&out));
        let won = won[0].clone();
        (ev, won)
    }

    /// How many commits on main say they merged `s1`.
    fn merges_of_s1(&self) -> usize {
        git(self.repo(), &["log", "--format=%s", "main"])
            .lines()
            .filter(|l| l.starts_with("s1:"))
            .count()
    }

    fn on_main(&self, file: &str) -> Option<String> {
        std::process::Command::new("git")
            .args(["show", &format!("main:{file}")])
            .current_dir(self.repo())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    }
}

/// The `race_contestant_finished` of `name`.
fn contestant<'a>(ev: &'a [Value], name: &str) -> &'a Value {
    of_kind(ev, "race_contestant_finished")
        .into_iter()
        .find(|e| e["contestant"] == name)
        .unwrap_or_else(|| panic!("no result for {name} in {ev:?}"))
}

#[test]
fn a_contestant_failing_its_gate_loses_and_keeps_its_branch() {
    let r = Race::new(json!({}));
    r.agents(&[("broken", BROKEN), ("small", SMALL)]);
    let (ev, won) = r.won(&["--race", "broken,small"]);
    let started = of_kind(&ev, "race_started");
    assert_eq!(started[0]["contestants"], json!(["broken", "small"]));
    assert_eq!(won["winner"], "small");
    assert_eq!(won["branch"], "cascade/s1/race-small");
    assert_eq!(
        won["reason"],
        "the only contestant to pass verification and every required gate"
    );
    let lost = contestant(&ev, "broken");
    assert_eq!(lost["status"], "failed");
    assert_eq!(lost["error_type"], "quality_gate");
    assert_eq!(r.on_main("s1.txt").as_deref(), Some("small\n"));
    assert_eq!(r.on_main("broken.txt"), None, "only the winner merges");
    assert_eq!(r.merges_of_s1(), 1);
    let branches = other_branches(r.repo());
    assert!(
        branches.contains(&"cascade/s1/race-broken".to_string()),
        "{branches:?}"
    );
    let progress = std::fs::read_to_string(r.repo().join("progress.txt")).unwrap();
    assert!(
        progress.contains("s1: [RACE] broken vs small")
            && progress.contains("s1: [RACE] won by small: the only contestant"),
        "{progress}"
    );
    // Both contestants are attempts of the story, with their own agents.
    let state: Value = crate::common::run_state(r.repo());
    let s1 = state["stories"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["id"] == "s1"))
        .unwrap();
    let agents: Vec<&str> = s1["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["agent"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(agents, ["broken", "small"]);
}

#[test]
fn when_both_pass_the_smaller_change_wins_and_the_story_keeps_its_race() {
    // The race comes from prd.json this time.
    let r = Race::new(json!({"race": ["big", "small"]}));
    r.agents(&[("big", BIG), ("small", SMALL)]);
    let (ev, won) = r.won(&[]);
    assert_eq!(won["winner"], "small");
    assert_eq!(won["reason"], "smaller change (1 vs 40 lines)");
    assert_eq!(won["runners_up"], json!(["big"]));
    assert_eq!(contestant(&ev, "big")["lines_changed"], 40);
    assert_eq!(r.on_main("s1.txt").as_deref(), Some("small\n"));
    // prd.json was rewritten (s1 complete) with its race kept.
    let prd: Value =
        serde_json::from_slice(&std::fs::read(r.repo().join("prd.json")).unwrap()).unwrap();
    assert_eq!(prd["stories"][0]["status"], "complete");
    assert_eq!(prd["stories"][0]["race"], json!(["big", "small"]));
}

#[test]
fn race_n_runs_the_resolved_agent_n_times_and_merges_once() {
    let r = Race::new(json!({}));
    r.agents(&[("small", SMALL)]);
    let (ev, won) = r.won(&["--race", "2"]);
    let started = of_kind(&ev, "race_started");
    assert_eq!(started[0]["contestants"], json!(["small-1", "small-2"]));
    assert_eq!(
        started[0]["branches"],
        json!(["cascade/s1/race-small-1", "cascade/s1/race-small-2"])
    );
    // Equal in everything else: the earlier finish wins.
    assert_eq!(won["reason"], "earlier finish");
    assert_eq!(r.merges_of_s1(), 1);
    assert_eq!(r.on_main("s1.txt").as_deref(), Some("small\n"));
}

#[test]
fn race_until_first_stops_the_others_and_leaves_no_process() {
    let r = Race::new(json!({}));
    // `fast` finishes once `slow` runs, so `slow` is surely stopped midway.
    let wait_slow = r#"while [ ! -f "$T/slow.pids" ]; do sleep 0.05; done; echo fast > s1.txt"#;
    r.agents(&[
        ("fast", wait_slow),
        ("slow", "sleep 30; echo slow > s1.txt"),
    ]);
    let (ev, won) = r.won(&[
        "--race",
        "slow,fast",
        "--race-until",
        "first",
        "--parallel",
        "2",
    ]);
    assert_eq!(won["winner"], "fast");
    let slow = contestant(&ev, "slow");
    assert_eq!(slow["status"], "stopped");
    assert!(
        alive_after_grace(&r.t("slow.pids")).is_empty(),
        "the stopped contestant's agent still runs"
    );
    assert_eq!(r.on_main("s1.txt").as_deref(), Some("fast\n"));
}

#[test]
fn race_keep_none_deletes_the_losers_branches() {
    let r = Race::new(json!({}));
    r.agents(&[("big", BIG), ("small", SMALL)]);
    let (_, won) = r.won(&["--race", "big,small", "--race-keep", "none"]);
    assert_eq!(won["winner"], "small");
    let branches = other_branches(r.repo());
    assert!(
        !branches.iter().any(|b| b == "cascade/s1/race-big"),
        "{branches:?}"
    );
}

#[test]
fn a_contestant_the_story_budget_cannot_cover_is_not_started() {
    let r = Race::new(json!({}));
    let costly = r#"echo paid > s1.txt
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","total_cost_usd":0.04,"usage":{"input_tokens":1000,"output_tokens":100}}'"#;
    r.agents(&[("c1", costly), ("c2", costly)]);
    let (ev, won) = r.won(&[
        "--race",
        "c1,c2",
        "--parallel",
        "1",
        "--max-story-cost",
        "0.05",
    ]);
    let results = of_kind(&ev, "race_contestant_finished");
    let statuses: Vec<&str> = results
        .iter()
        .map(|e| e["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["passed", "not_started"], "{results:?}");
    assert!(
        results[1]["error"]
            .as_str()
            .unwrap_or("")
            .contains("not started: story 's1' has spent $0.0400 of its $0.05 budget"),
        "{results:?}"
    );
    assert_eq!(won["winner"], results[0]["contestant"]);
    // Only the contestant that ran was paid for.
    let started = std::fs::read_to_string(r.t("c1.pids")).unwrap_or_default()
        + &std::fs::read_to_string(r.t("c2.pids")).unwrap_or_default();
    assert_eq!(started.lines().count(), 1);
}

#[test]
fn a_race_killed_midway_resumes_and_merges_its_winner_once() {
    let r = Race::new(json!({}));
    // Both contestants wait for `release` (never given to the killed run).
    let wait = r#"touch "$T/started-$name"; while [ ! -f "$T/release" ]; do sleep 0.05; done"#;
    r.agents(&[
        ("big", &format!("{wait}\n{BIG}")),
        ("small", &format!("{wait}\n{SMALL}")),
    ]);
    let mut child = cascade_command(r.repo())
        .args(APPROVE_NOW)
        .args(["--race", "big,small", "--parallel", "2", "--agents"])
        .arg(r.t("agents.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for name in ["big", "small"] {
        crate::modes::wait_for(&r.t(&format!("started-{name}")));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // A crash takes the agents too: each leads its own process group.
    for pid in crate::common::pids(&r.t("big.pids"))
        .into_iter()
        .chain(crate::common::pids(&r.t("small.pids")))
    {
        // SAFETY: kills the process group of an agent this test started.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
    std::fs::write(r.t("release"), "go").unwrap();
    let mut resume = cascade(r.repo());
    resume
        .args(["resume", "--auto-run", "--retry-delay", "0", "--json"])
        .timeout(Duration::from_secs(120));
    let out = resume.output().unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    // The race was recorded with the run and resumed as a race.
    let won = of_kind(&ev, "race_won");
    assert_eq!(won.len(), 1, "{}", explain(&out));
    assert_eq!(won[0]["winner"], "small");
    assert_eq!(r.merges_of_s1(), 1);
    assert_eq!(r.on_main("s1.txt").as_deref(), Some("small\n"));
}

#[test]
fn bad_races_are_usage_errors_naming_what_is_wrong() {
    let r = Race::new(json!({"race": "codex"}));
    r.agents(&[("small", SMALL)]);
    let out = r.approve(&[]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("story 's1': \"race\" must be a list of agent names or a number of runs"),
        "{err}"
    );
    let r = Race::new(json!({}));
    r.agents(&[("small", SMALL)]);
    for (args, says) in [
        (
            vec!["--race", "small,nope"],
            "unknown agent 'nope' in --race",
        ),
        (
            vec!["--race", "1"],
            "a race needs 2 to 16 contestants (got 1)",
        ),
    ] {
        let out = r.approve(&args);
        assert_eq!(code(&out), 2, "{}", explain(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
