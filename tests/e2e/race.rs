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
/// Writes a function whose body is only `pass`: verification's
/// `py-stub-body` finding.
const STUB: &str = "echo small > s1.txt; printf 'def s1():\\n    pass\\n' > s1.py";

/// The four qualities of contestant, by name: what each one's agent does.
const QUALITIES: [(&str, &str); 4] = [
    ("stub", STUB),
    ("gate", BROKEN),
    ("large", BIG),
    ("small", SMALL),
];

/// Every combination of two or more qualities racing, the winner the rule
/// must pick (`None`: nobody passes, the story fails) and its reason.
const COMBINATIONS: &[(&[&str], Option<&str>, &str)] = &[
    (&["stub", "gate"], None, ""),
    (&["stub", "large"], Some("large"), ONLY),
    (&["stub", "small"], Some("small"), ONLY),
    (&["gate", "large"], Some("large"), ONLY),
    (&["gate", "small"], Some("small"), ONLY),
    (&["large", "small"], Some("small"), SMALLER),
    (&["stub", "gate", "large"], Some("large"), ONLY),
    (&["stub", "gate", "small"], Some("small"), ONLY),
    (&["stub", "large", "small"], Some("small"), SMALLER),
    (&["gate", "large", "small"], Some("small"), SMALLER),
    (&["stub", "gate", "large", "small"], Some("small"), SMALLER),
];
const ONLY: &str = "the only contestant to pass verification and every required gate";
const SMALLER: &str = "smaller change (1 vs 40 lines)";

/// How each losing quality fails.
fn failure_of(quality: &str) -> Option<&'static str> {
    match quality {
        "stub" => Some("verification"),
        "gate" => Some("quality_gate"),
        _ => None,
    }
}

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
fn every_combination_of_contestant_qualities_picks_the_right_winner() {
    for (racing, winner, reason) in COMBINATIONS {
        let r = Race::new(json!({}));
        let agents: Vec<(&str, &str)> = QUALITIES
            .iter()
            .copied()
            .filter(|(name, _)| racing.contains(name))
            .collect();
        r.agents(&agents);
        let out = r.approve(&["--race", &racing.join(",")]);
        let case = format!("{racing:?}: {}", explain(&out));
        let ev = events(&out);
        let won = of_kind(&ev, "race_won");
        match winner {
            Some(w) => {
                assert_eq!(code(&out), 0, "{case}");
                assert_eq!(won.len(), 1, "{case}");
                assert_eq!(won[0]["winner"], *w, "{case}");
                assert_eq!(won[0]["reason"], *reason, "{case}");
                let expected = if *w == "small" { "small\n" } else { "" };
                let merged = r.on_main("s1.txt").unwrap_or_default();
                assert!(
                    merged.starts_with(expected) && r.merges_of_s1() == 1,
                    "{case}"
                );
                assert_eq!(r.on_main("s1.py"), None, "the stub merged: {case}");
                assert_eq!(
                    r.on_main("broken.txt"),
                    None,
                    "the gate loser merged: {case}"
                );
            }
            None => {
                assert_eq!(code(&out), 1, "{case}");
                assert!(won.is_empty(), "{case}");
                assert_eq!(r.merges_of_s1(), 0, "{case}");
            }
        }
        for quality in *racing {
            let result = contestant(&ev, quality);
            match failure_of(quality) {
                Some(kind) => {
                    assert_eq!(result["status"], "failed", "{quality} in {case}");
                    assert_eq!(result["error_type"], kind, "{quality} in {case}");
                }
                None => assert_eq!(result["status"], "passed", "{quality} in {case}"),
            }
        }
        // `status --json` keeps the race side by side, as the events said.
        let race = status_race(r.repo());
        assert_eq!(race["winner"].as_str(), *winner, "{race}");
        let names: Vec<&str> = race["contestants"]
            .as_array()
            .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, *racing, "{race}");
    }
}

/// `status --json`'s race of story `s1`.
fn status_race(repo: &Path) -> Value {
    let out = cascade(repo)
        .args(["status", "--json"])
        .output()
        .expect("status runs");
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let st: Value = serde_json::from_slice(&out.stdout).expect("status is JSON");
    st["stories"]["s1"]["race"].clone()
}

#[test]
fn status_shows_the_race_side_by_side_in_text_and_json() {
    let r = Race::new(json!({}));
    let costly = r#"echo small > s1.txt
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","total_cost_usd":0.02,"usage":{"input_tokens":1000,"output_tokens":100}}'"#;
    r.agents(&[("broken", BROKEN), ("big", BIG), ("small", costly)]);
    r.won(&["--race", "broken,big,small", "--parallel", "1"]);
    let race = status_race(r.repo());
    assert_eq!(race["winner"], "small");
    assert_eq!(race["reason"], SMALLER);
    assert_eq!(race["runners_up"], json!(["big"]));
    let by_name = |n: &str| {
        race["contestants"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == n))
            .cloned()
            .unwrap_or_else(|| panic!("no {n} in {race}"))
    };
    let small = by_name("small");
    assert_eq!(small["status"], "passed");
    assert_eq!(small["branch"], "cascade/s1/race-small");
    assert_eq!(small["lines_changed"], 1);
    assert_eq!(small["cost_usd"], 0.02);
    assert_eq!(small["gates"][0]["name"], "check");
    assert_eq!(small["gates"][0]["passed"], true);
    let broken = by_name("broken");
    assert_eq!(broken["status"], "failed");
    assert_eq!(broken["error_type"], "quality_gate");
    assert_eq!(broken["gates"][0]["passed"], false);
    assert_eq!(by_name("big")["lines_changed"], 40);
    // The text: the stories table, then the race (redacted: the run id).
    let out = cascade(r.repo())
        .arg("status")
        .output()
        .expect("status runs");
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let races = text
        .split_once("Races:\n")
        .map(|(_, r)| r.to_string())
        .unwrap_or_else(|| panic!("no race in:\n{text}"));
    insta::assert_snapshot!(races);
    // The summary printed at the end of a run says the same (a run in
    // text mode, so the terminal reporter prints it).
    let r = Race::new(json!({}));
    r.agents(&[("broken", BROKEN), ("big", BIG), ("small", SMALL)]);
    let mut cmd = cascade(r.repo());
    cmd.args(APPROVE_NOW)
        .args(["--race", "broken,big,small", "--parallel", "1", "--agents"])
        .arg(r.t("agents.json"))
        .timeout(Duration::from_secs(120));
    let out = cmd.output().expect("cascade runs");
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        all.contains("races:\n  s1: race won by small over big: smaller change (1 vs 40 lines)\n"),
        "{all}"
    );
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

#[cfg(feature = "ui")]
#[test]
fn the_dashboard_shows_the_contestants_side_by_side_with_their_diffs() {
    use crate::ui_browser::{browser_or_skip, screenshot_path, start_ui};
    let Some(b) =
        browser_or_skip("the_dashboard_shows_the_contestants_side_by_side_with_their_diffs")
    else {
        return;
    };
    let r = Race::new(json!({}));
    r.agents(&[("broken", BROKEN), ("big", BIG), ("small", SMALL)]);
    r.won(&["--race", "broken,big,small", "--parallel", "1"]);
    let agents = r.t("agents.json").display().to_string();
    let (_ui, url) = start_ui(r.repo(), &["--agents", &agents]);
    b.goto(&format!("{url}#/story/s1"));
    b.wait_js(
        "the race's three contestants",
        20,
        "return document.querySelectorAll('#race .contestant').length === 3",
    );
    let shown = b.js(
        "return [...document.querySelectorAll('#race .contestant')].map(c => [c.dataset.contestant, c.dataset.status, c.classList.contains('winner'), c.querySelector('.contestant-lines').textContent, c.querySelector('.contestant-gates').textContent, c.querySelector('.contestant-branch').textContent])",
        json!([]),
    );
    assert_eq!(
        shown,
        json!([
            [
                "broken",
                "failed",
                false,
                "-",
                "check ✘",
                "cascade/s1/race-broken"
            ],
            [
                "big",
                "passed",
                false,
                "40 lines",
                "check ✔",
                "cascade/s1/race-big"
            ],
            [
                "small",
                "passed",
                true,
                "1 lines",
                "check ✔",
                "cascade/s1/race-small"
            ],
        ])
    );
    let outcome = b.js(
        "return document.querySelector('#race .race-outcome').textContent",
        json!([]),
    );
    assert_eq!(
        outcome,
        "Won by small over big: smaller change (1 vs 40 lines)"
    );
    // The loser's link opens the diff of its branch: forty lines of s1.txt.
    b.click_css("#race .contestant[data-contestant=big] a.race-diff", 5);
    let diff = b.wait_js(
        "the big contestant's diff to open",
        5,
        "var a = document.querySelector('#race .contestant[data-contestant=big] a.race-diff'); var d = document.getElementById('diff-' + a.dataset.attempt); return d && d.closest('details').open && d.textContent;",
    );
    let diff = diff.as_str().unwrap_or_default();
    assert!(diff.contains("s1.txt") && diff.contains("+40"), "{diff}");
    b.screenshot(&screenshot_path("race"));
}

/// Racing in the fleet (real nats-server, a worker with two slots): each
/// contestant is a job of its own with its own agent and attempt, the
/// winner is chosen by the same rule from what the workers made, and only
/// it merges.
#[cfg(feature = "fleet")]
mod fleet {
    use serde_json::{json, Value};

    use crate::common::{code, events, explain, git, of_kind, other_branches, script, write_json};
    use crate::fleet::real::{story, Fleet};

    /// agents.json with the two contestants: `small` writes the story's
    /// file, `big` that file and forty more lines beside it.
    fn contestants(f: &Fleet) -> std::path::PathBuf {
        let small = script(
            &f.t("small.sh"),
            r#"printf '%s\n' "$CASCADE_STORY_ID" > "$CASCADE_STORY_ID.txt""#,
        );
        let big = script(
            &f.t("big.sh"),
            r#"printf '%s\n' "$CASCADE_STORY_ID" > "$CASCADE_STORY_ID.txt"; seq 1 40 > big.txt"#,
        );
        let path = f.t("race-agents.json");
        write_json(
            &path,
            &json!({
                "default_agent": "small",
                "agents": {
                    "small": {"type": "cli", "command": small.display().to_string(), "args": []},
                    "big": {"type": "cli", "command": big.display().to_string(), "args": []}
                }
            }),
        );
        path
    }

    #[test]
    fn a_fleet_run_races_each_contestant_as_a_job_and_merges_only_the_winner() {
        let Some(mut f) = Fleet::new("fleet_race", json!([story("s01", &[])])) else {
            return;
        };
        let agents = contestants(&f);
        f.spawn_worker("w1", &["--id", "w1", "--slots", "2"], &[], &agents);
        f.wait_for_workers(1);
        let url = f.nats.url.clone();
        let out = f
            .command_with_agents(
                &[
                    "approve",
                    "--auto-run",
                    "--json",
                    "--race",
                    "big,small",
                    "--fleet",
                    &url,
                ],
                &agents,
            )
            .output()
            .expect("coordinator runs");
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        // One job per contestant: its own attempt, run by its own agent.
        let published = of_kind(&evs, "job_published");
        let mut attempts: Vec<u64> = published
            .iter()
            .filter_map(|e| e["attempt"].as_u64())
            .collect();
        attempts.sort_unstable();
        assert_eq!(attempts, vec![1, 2], "{}", explain(&out));
        let mut agents_run: Vec<&str> = of_kind(&evs, "job_started")
            .iter()
            .filter_map(|e| e["agent"].as_str())
            .collect();
        agents_run.sort_unstable();
        assert_eq!(agents_run, vec!["big", "small"], "{}", explain(&out));
        // Both passed on the worker; the rule picked the smaller change.
        let finished = of_kind(&evs, "race_contestant_finished");
        assert_eq!(finished.len(), 2, "{}", explain(&out));
        assert!(
            finished.iter().all(|e| e["status"] == "passed"),
            "{finished:?}"
        );
        let big = finished
            .iter()
            .find(|e| e["contestant"] == "big")
            .expect("big finished");
        let small = finished
            .iter()
            .find(|e| e["contestant"] == "small")
            .expect("small finished");
        assert_eq!(small["lines_changed"], 1, "{small}");
        assert_eq!(big["lines_changed"], 41, "{big}");
        let won = of_kind(&evs, "race_won");
        assert_eq!(won.len(), 1, "{}", explain(&out));
        assert_eq!(won[0]["winner"], "small");
        assert_eq!(won[0]["reason"], "smaller change (1 vs 41 lines)");
        // Only the winner merged, once, from a worker.
        let merged = of_kind(&evs, "story_merged");
        assert_eq!(merged.len(), 1, "{}", explain(&out));
        assert!(merged[0]["worker"].is_string(), "{}", merged[0]);
        assert_eq!(git(f.repo(), &["show", "main:s01.txt"]).trim(), "s01");
        let tree = git(f.repo(), &["ls-tree", "--name-only", "main"]);
        assert!(!tree.lines().any(|l| l == "big.txt"), "{tree}");
        // The loser's work is kept on its branch here; nothing is left on
        // the shared remote.
        let branches = other_branches(f.repo());
        assert!(
            branches.contains(&"cascade/s01/race-big".to_string()),
            "{branches:?}"
        );
        let kept = git(
            f.repo(),
            &["ls-tree", "--name-only", "cascade/s01/race-big"],
        );
        assert!(kept.lines().any(|l| l == "big.txt"), "{kept}");
        assert_eq!(f.remote_refs(), "", "{}", explain(&out));
        // The state keeps the round as a local race's.
        let status = f
            .command_with_agents(&["status", "--json"], &agents)
            .output()
            .unwrap();
        let st: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
        let race = &st["stories"]["s01"]["race"];
        assert_eq!(race["winner"], "small", "{st}");
        assert_eq!(race["until"], "all", "{race}");
        let statuses: Vec<&str> = race["contestants"]
            .as_array()
            .expect("contestants")
            .iter()
            .filter_map(|c| c["status"].as_str())
            .collect();
        assert_eq!(statuses, vec!["passed", "passed"], "{race}");
    }
}
