//! Every run control in every run mode: `approve`, `resume` after Ctrl-C
//! (with none of the flags given again), `mega approve` and `mega resume`
//! (and, with the fleet, `approve --fleet` and `mega approve --fleet`, in
//! tests/e2e/fleet.rs), each run with review, a story budget, one gate job,
//! notify, a remote cache, no-resolve and the eager schedule at once; the
//! events (and the files the scripts and the store leave) show that each
//! control took effect.
//!
//! The scene: stories `c1` and `c2` write the same file from the same base
//! (they wait for each other, so the second merge conflicts), `d1` depends
//! on `c1`, `b1` fails after reporting $0.70 (over the $0.50 story budget:
//! its retry is refused as `budget`), `e1` plain. The gate notes when two
//! gates overlap; the reviewer passes everything.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{cascade, code, events, explain, git, init_repo, of_kind, script, write_json};

/// The run flags every mode gets (and `resume` must restore).
pub const CONTROLS: &[&str] = &[
    "--auto-run",
    "--review",
    "--review-agent",
    "reviewer",
    "--impl-agent",
    "impl",
    "--max-story-cost",
    "0.5",
    "--gate-jobs",
    "1",
    "--no-resolve",
    "--schedule",
    "eager",
    "--parallel",
    "3",
    "--max-retries",
    "1",
    "--retry-delay",
    "0",
];

/// The implementation agent (see the module doc). A `hold` file in the
/// tools dir makes the first story wait (for a Ctrl-C) after saying `held`.
const IMPL: &str = r#"T='@T@'
id="$CASCADE_STORY_ID"
echo "$id" >> "$T/impl.calls"
if [ -f "$T/hold" ]; then
  touch "$T/held"
  i=0; while [ -f "$T/hold" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
fi
case "$id" in
  *c1|*c2)
    touch "$T/started-${id##*.}"
    i=0; while { [ ! -f "$T/started-c1" ] || [ ! -f "$T/started-c2" ]; } && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
    echo "line from $id" >> shared.txt ;;
  *b1)
    echo '{"type":"result","is_error":true,"subtype":"error","result":"gave up","total_cost_usd":0.7}'
    exit 3 ;;
esac
echo "done by $id" > "$(echo "$id" | tr '.' '_').txt"
"#;

/// The gate: passes, noting any overlap with another gate of the same
/// process's `--gate-jobs` pool (with the fleet, a worker's gates run in its
/// `.../fleet/<id>/` directory, and the coordinator's integration gates beside
/// the repository: separate machines in a real fleet, each its own pool).
const GATE: &str = r#"T='@T@'
pool=$(pwd | grep -o 'fleet/[^/]*' | head -n 1 | tr / -)
lock="$T/gate-lock-${pool:-here}"
if mkdir "$lock" 2>/dev/null; then :; else echo "overlap in $(pwd)" >> "$T/overlaps"; fi
echo "gate in $(pwd)" >> "$T/gates"
sleep 0.2
rmdir "$lock" 2>/dev/null
exit 0
"#;

/// A repository, a tools dir (agents, their notes, the remote store).
pub struct Scene {
    pub repo: tempfile::TempDir,
    pub tools: tempfile::TempDir,
}

impl Scene {
    /// The scene as one PRD (`mega`: false) or as a mega-plan of two
    /// features, `one` (c1, c2, d1) and `two` (b1, e1).
    pub fn new(mega: bool) -> Scene {
        let s = Scene {
            repo: init_repo(),
            tools: tempfile::tempdir().expect("tools"),
        };
        let t = s.tools.path().display().to_string();
        let imp = script(&s.t("impl.sh"), &IMPL.replace("@T@", &t));
        let reviewer = script(
            &s.t("reviewer.sh"),
            &format!("echo reviewed >> '{t}/reviews'\necho 'Looks right. <review>PASS</review>'"),
        );
        script(
            &s.t("notify.sh"),
            &format!("echo \"$CASCADE_EVENT\" >> '{t}/notified'"),
        );
        let gate = script(&s.t("gate.sh"), &GATE.replace("@T@", &t));
        let agents = |cmd: &Path| json!({"type": "cli", "command": cmd, "args": [], "timeout": 60});
        write_json(
            &s.t("agents.json"),
            &json!({
                "default_agent": "impl",
                "agents": {"impl": agents(&imp), "reviewer": agents(&reviewer)},
                "phase_defaults": {"review": {"default_agent": "reviewer"}},
            }),
        );
        let gates = json!({"enabled": true, "fail_fast": false, "use_cache": true,
            "gates": [{"name": "check", "type": "test", "command": gate, "required": true}]});
        let story = |id: &str, deps: &[&str]| {
            json!({"id": id, "title": format!("Title {id}"), "description": format!("do {id}"),
                   "priority": "medium", "dependencies": deps, "status": "pending",
                   "acceptance_criteria": ["done"]})
        };
        let prd = |stories: Vec<Value>| {
            json!({"metadata": {"version": "1.0"}, "goal": "compose", "objectives": [],
                   "stories": stories, "quality_gates": gates})
        };
        if mega {
            let root = s.repo.path();
            write_json(
                &root.join("plans/features/one/prd.json"),
                &prd(vec![
                    story("c1", &[]),
                    story("c2", &[]),
                    story("d1", &["c1"]),
                ]),
            );
            write_json(
                &root.join("plans/features/two/prd.json"),
                &prd(vec![story("b1", &[]), story("e1", &[])]),
            );
            let feature = |id: &str, name: &str| {
                json!({"id": id, "name": name, "title": name, "description": name,
                       "priority": "high", "dependencies": [], "status": "pending"})
            };
            write_json(
                &root.join("plans/mega-plan.json"),
                &json!({"goal": "compose", "execution_mode": "auto",
                        "features": [feature("f1", "one"), feature("f2", "two")]}),
            );
            // The plans are the user's files: committed, so the tree is clean.
            git(root, &["add", "-A"]);
            git(root, &["commit", "-q", "-m", "plans"]);
        } else {
            write_json(
                &s.repo.path().join("prd.json"),
                &prd(vec![
                    story("c1", &[]),
                    story("c2", &[]),
                    story("b1", &[]),
                    story("d1", &["c1"]),
                    story("e1", &[]),
                ]),
            );
        }
        s
    }

    pub fn t(&self, name: &str) -> PathBuf {
        self.tools.path().join(name)
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.t(name)).unwrap_or_default()
    }

    /// `file://` URL of the remote gate store.
    pub fn store_url(&self) -> String {
        format!("file://{}", self.t("store").display())
    }

    /// The notify flag (its command ends at the `;`).
    pub fn notify_args(&self) -> Vec<String> {
        vec![
            "--notify".into(),
            self.t("notify.sh").display().to_string(),
            ";".into(),
        ]
    }

    /// Every control, the agents file and the remote store: the flags a
    /// mode starts with.
    pub fn start_args(&self) -> Vec<String> {
        let mut v: Vec<String> = vec![
            "--agents".into(),
            self.t("agents.json").display().to_string(),
        ];
        v.extend(CONTROLS.iter().map(|s| s.to_string()));
        v.extend(self.notify_args());
        v.extend(["--remote-cache".into(), self.store_url()]);
        v.push("--json".into());
        v
    }

    /// `cascade <args>` in the repository, with a secret that signs (so
    /// the remote store is written).
    pub fn cascade(&self, args: &[String]) -> assert_cmd::Command {
        let mut c = cascade(self.repo.path());
        c.args(args)
            .env("CASCADE_CACHE_SECRET", "modes-secret")
            .env_remove("CASCADE_REMOTE_CACHE")
            .timeout(Duration::from_secs(180));
        c
    }

    /// The same, as a child process (for Ctrl-C).
    pub fn spawn(&self, args: &[String]) -> Child {
        crate::common::bare_cascade()
            .current_dir(self.repo.path())
            .env("NO_COLOR", "1")
            .env("HOME", self.repo.path())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("CASCADE_REMOTE_CACHE")
            .env("CASCADE_CACHE_SECRET", "modes-secret")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cascade starts")
    }

    /// Files in the remote store (published gate results).
    pub fn published(&self) -> usize {
        fn count(dir: &Path) -> usize {
            std::fs::read_dir(dir)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| {
                            let p = e.path();
                            if p.is_dir() {
                                count(&p)
                            } else {
                                1
                            }
                        })
                        .sum()
                })
                .unwrap_or(0)
        }
        count(&self.t("store"))
    }

    /// Checks, in the events `ev` of one run, that every control took
    /// effect; `finished` is the run's last event (`run_finished` or
    /// `mega_finished`).
    pub fn assert_controls(&self, ev: &[Value], finished: &str, out: &std::process::Output) {
        let why = explain(out);
        // Eager schedule: every engine (each feature's too) ran eagerly.
        let started = of_kind(ev, "run_started");
        assert!(!started.is_empty(), "{why}");
        for s in &started {
            assert_eq!(s["schedule"], "eager", "{s}\n{why}");
        }
        // Agent choice: every story started on `impl`.
        for s in of_kind(ev, "story_started") {
            assert_eq!(s["agent"], "impl", "{s}\n{why}");
        }
        // Review: the reviewer judged the stories that passed their gates.
        let reviews = of_kind(ev, "review_finished");
        assert!(reviews.len() >= 3, "{why}");
        assert!(self.read("reviews").lines().count() >= 3, "{why}");
        // Story budget: b1 spent $0.70 of $0.50, its retry refused.
        let b1 = of_kind(ev, "story_failed")
            .into_iter()
            .find(|e| e["story"].as_str().is_some_and(|s| s.ends_with("b1")))
            .unwrap_or_else(|| panic!("b1 did not fail: {why}"));
        assert_eq!(b1["error_type"], "budget", "{b1}\n{why}");
        assert!(
            of_kind(ev, "budget_exhausted")
                .iter()
                .any(|e| e["scope"] == "story"),
            "{why}"
        );
        // No resolve: the conflict failed the attempt, no agent asked.
        assert!(!of_kind(ev, "merge_conflict").is_empty(), "{why}");
        assert!(of_kind(ev, "merge_resolving").is_empty(), "{why}");
        // One gate job: gates ran, never two at once.
        assert!(self.read("gates").lines().count() >= 4, "{why}");
        assert_eq!(
            self.read("overlaps"),
            "",
            "two gates overlapped; gates:\n{}\n{why}",
            self.read("gates")
        );
        // Remote cache: the passes were published to the store.
        assert!(self.published() >= 1, "nothing published\n{why}");
        // Notify: the story failure and the run's end were told.
        let told = self.read("notified");
        assert!(told.lines().any(|l| l == "story_failed"), "{told}\n{why}");
        assert!(told.lines().any(|l| l == finished), "{told}\n{why}");
        assert_eq!(
            ev.last().map(|e| e["event"].clone()),
            Some(json!(finished)),
            "{why}"
        );
        // Everything but b1 merged; c2 on its retry, both lines kept.
        let shared =
            std::fs::read_to_string(self.repo.path().join("shared.txt")).unwrap_or_default();
        assert!(
            shared.contains("c1") && shared.contains("c2") && !shared.contains("<<<<"),
            "{shared}\n{why}"
        );
    }
}

/// Waits for `file` to exist (a script's mark), at most a minute.
pub fn wait_for(file: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !file.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ctrl-C to `child` once `mark` exists; its output once it exited.
fn interrupt_at(child: Child, mark: &Path) -> std::process::Output {
    wait_for(mark);
    // SAFETY: sending a signal to a child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    child.wait_with_output().expect("cascade exits")
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn approve_takes_every_control() {
    let s = Scene::new(false);
    let mut a = args(&["approve"]);
    a.extend(s.start_args());
    let out = s.cascade(&a).output().expect("runs");
    assert_eq!(code(&out), 1, "b1 fails for good: {}", explain(&out));
    s.assert_controls(&events(&out), "run_finished", &out);
}

#[test]
fn resume_after_ctrl_c_restores_every_control_and_the_agents_file() {
    let s = Scene::new(false);
    // A decoy agents.json where discovery would look when --agents is
    // forgotten: its agent must never run.
    let decoy = script(
        &s.t("decoy.sh"),
        &format!("touch '{}'", s.t("decoy-ran").display()),
    );
    let home_agents = s.repo.path().join(".config/cascade/agents.json");
    write_json(
        &home_agents,
        &json!({"default_agent": "impl", "agents": {
            "impl": {"type": "cli", "command": decoy, "args": []},
            "reviewer": {"type": "cli", "command": decoy, "args": []}}}),
    );
    let exclude = s.repo.path().join(".git/info/exclude");
    let mut ex = std::fs::read_to_string(&exclude).unwrap_or_default();
    ex.push_str("/.config/\n");
    std::fs::write(&exclude, ex).expect("exclude");

    std::fs::write(s.t("hold"), "").expect("hold");
    let mut a = args(&["approve"]);
    a.extend(s.start_args());
    let out = interrupt_at(s.spawn(&a), &s.t("held"));
    assert_eq!(code(&out), 130, "{}", explain(&out));
    std::fs::remove_file(s.t("hold")).expect("release");

    // Nothing but --json: the agents file, the agent and every control
    // come from the run state.
    let out = s
        .cascade(&args(&["resume", "--json"]))
        .output()
        .expect("runs");
    assert_eq!(code(&out), 1, "b1 fails for good: {}", explain(&out));
    let ev = events(&out);
    s.assert_controls(&ev, "run_finished", &out);
    assert!(!s.t("decoy-ran").exists(), "the decoy agents.json was used");
    let notice = of_kind(&ev, "notice")
        .into_iter()
        .filter_map(|e| e["message"].as_str())
        .find(|m| m.starts_with("resuming with"))
        .unwrap_or_else(|| panic!("no resume notice: {}", explain(&out)))
        .to_string();
    for flag in [
        format!("--agents {}", s.t("agents.json").display()),
        "--impl-agent impl".into(),
        "--review=on".into(),
        "--review-agent reviewer".into(),
        "--max-story-cost 0.5".into(),
        "--gate-jobs 1".into(),
        "--no-resolve".into(),
        "--schedule eager".into(),
        "--parallel 3".into(),
        format!("--notify {}", s.t("notify.sh").display()),
        format!("--remote-cache {}", s.store_url()),
    ] {
        assert!(notice.contains(&flag), "{flag} missing in: {notice}");
    }
}

#[test]
fn mega_approve_takes_every_control() {
    let s = Scene::new(true);
    let mut a = args(&["mega", "approve", "--mega", "plans/mega-plan.json"]);
    a.extend(s.start_args());
    let out = s.cascade(&a).output().expect("runs");
    assert_eq!(code(&out), 1, "feature two fails (b1): {}", explain(&out));
    let ev = events(&out);
    s.assert_controls(&ev, "mega_finished", &out);
    // Each feature's engine ran eagerly, feature one merged.
    assert_eq!(of_kind(&ev, "run_started").len(), 2, "{}", explain(&out));
    let merged: Vec<&Value> = of_kind(&ev, "feature_merged");
    assert_eq!(merged.len(), 1, "{}", explain(&out));
    assert_eq!(merged[0]["feature"], "one");
    // The options are recorded in the mega state for `mega resume`.
    let state = crate::common::mega_state(s.repo.path());
    assert_eq!(state["options"]["schedule"], "eager", "{state}");
    assert_eq!(state["options"]["gate_jobs"], 1, "{state}");
    assert_eq!(state["options"]["max_story_cost"], 0.5, "{state}");
}

#[test]
fn mega_resume_after_ctrl_c_restores_every_control() {
    let s = Scene::new(true);
    std::fs::write(s.t("hold"), "").expect("hold");
    let mut a = args(&["mega", "approve", "--mega", "plans/mega-plan.json"]);
    a.extend(s.start_args());
    let out = interrupt_at(s.spawn(&a), &s.t("held"));
    assert_eq!(code(&out), 130, "{}", explain(&out));
    std::fs::remove_file(s.t("hold")).expect("release");
    let out = s
        .cascade(&args(&["mega", "resume", "--json"]))
        .output()
        .expect("runs");
    assert_eq!(code(&out), 1, "feature two fails (b1): {}", explain(&out));
    let ev = events(&out);
    s.assert_controls(&ev, "mega_finished", &out);
    let notice = of_kind(&ev, "mega_notice")
        .into_iter()
        .filter_map(|e| e["message"].as_str())
        .find(|m| m.starts_with("resuming with"))
        .unwrap_or_else(|| panic!("no resume notice: {}", explain(&out)))
        .to_string();
    assert!(
        notice.contains("--gate-jobs 1") && notice.contains("--schedule eager"),
        "{notice}"
    );
}

#[test]
fn a_mega_run_spends_from_one_budget_and_resumes_with_more() {
    let s = Scene::new(true);
    // Every story reports $0.40: features one and two together pass $1.00
    // long before either alone would.
    let t = s.tools.path().display().to_string();
    script(
        &s.t("impl.sh"),
        &format!(
            "T='{t}'\nid=\"$CASCADE_STORY_ID\"\necho \"$id\" >> \"$T/impl.calls\"\necho \"line from $id\" >> \"$(echo \"$id\" | tr '.' '_').txt\"\necho '{{\"type\":\"result\",\"is_error\":false,\"subtype\":\"success\",\"result\":\"ok\",\"total_cost_usd\":0.4}}'"
        ),
    );
    let base = [
        "--agents".to_string(),
        s.t("agents.json").display().to_string(),
        "--auto-run".into(),
        "--parallel".into(),
        "1".into(),
        "--retry-delay".into(),
        "0".into(),
        "--json".into(),
    ];
    let mut a = args(&[
        "mega",
        "approve",
        "--mega",
        "plans/mega-plan.json",
        "--max-cost",
        "1",
    ]);
    a.extend(base.iter().cloned());
    let out = s.cascade(&a).output().expect("runs");
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    assert_eq!(
        ev.last().unwrap()["status"],
        "budget_exhausted",
        "{}",
        explain(&out)
    );
    let exhausted = of_kind(&ev, "budget_exhausted");
    assert_eq!(
        exhausted.len(),
        1,
        "said once for the run: {}",
        explain(&out)
    );
    assert_eq!(exhausted[0]["scope"], "run");
    assert_eq!(exhausted[0]["limit_usd"], 1.0);
    // Three stories at $0.40 reach the $1.00: the other two never start.
    let calls = s.read("impl.calls");
    assert_eq!(calls.lines().count(), 3, "{calls}");

    // A higher budget continues what was left, in both features.
    let out = s
        .cascade(&args(&["mega", "resume", "--max-cost", "10", "--json"]))
        .output()
        .expect("runs");
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    assert_eq!(
        ev.last().unwrap()["status"],
        "completed",
        "{}",
        explain(&out)
    );
    assert_eq!(s.read("impl.calls").lines().count(), 5);
    let notice = of_kind(&ev, "mega_notice")
        .into_iter()
        .filter_map(|e| e["message"].as_str())
        .find(|m| m.starts_with("resuming with"))
        .unwrap_or_default()
        .to_string();
    assert!(
        notice.contains("--max-cost 10 given here instead of --max-cost 1"),
        "{notice}"
    );
}

#[test]
fn mega_dry_run_shows_every_features_schedule_and_runs_nothing() {
    let s = Scene::new(true);
    let mut a = args(&[
        "mega",
        "approve",
        "--mega",
        "plans/mega-plan.json",
        "--dry-run",
    ]);
    a.extend(s.start_args());
    let out = s.cascade(&a).output().expect("runs");
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["schedule"], "eager");
    let batches = v["batches"].as_array().expect("batches");
    assert_eq!(batches.len(), 1);
    let one = &batches[0][0];
    assert_eq!(one["feature"], "one");
    assert_eq!(one["batches"][0][0]["story"], "c1");
    assert_eq!(one["batches"][0][0]["agent"], "impl");
    assert_eq!(batches[0][1]["batches"][0][0]["story"], "b1");
    assert_eq!(s.read("impl.calls"), "", "nothing ran");
    assert_eq!(crate::common::mega_state(s.repo.path()), Value::Null);
}

#[test]
fn mega_refuses_mode_and_resume_without_a_run() {
    let s = Scene::new(true);
    let out = s
        .cascade(&args(&[
            "mega",
            "approve",
            "--mega",
            "plans/mega-plan.json",
            "--mode",
            "batch-complete",
        ]))
        .output()
        .expect("runs");
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--mode"));
    let out = s
        .cascade(&args(&["mega", "resume"]))
        .output()
        .expect("runs");
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no mega run to resume"),
        "{}",
        explain(&out)
    );
}
