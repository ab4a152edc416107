//! End-to-end tests of the run controls: resume restoring every option,
//! gate concurrency (`--gate-jobs`), the memory guard, per-story port bases,
//! notifications, budgets, rate limits and merge-conflict resolution.
//!
//! Agents are small scripts written per test into a tools directory outside
//! the repository; they record what they saw in files there. Ordering is
//! asserted on recorded start/end marks, never on durations.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{cascade, git, init_repo, script, write_json};

/// A repository with a PRD, and a tools dir with agents.json and scripts.
struct Fixture {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Fixture {
    fn new(stories: Value, gates: Value) -> Fixture {
        let f = Fixture {
            repo: init_repo(),
            tools: tempfile::tempdir().expect("tools dir"),
        };
        f.write_prd("prd.json", stories, gates, json!({}));
        f
    }

    fn write_prd(&self, rel: &str, stories: Value, gates: Value, metadata: Value) {
        let mut meta = json!({"version": "1.0"});
        if let (Some(m), Some(extra)) = (meta.as_object_mut(), metadata.as_object()) {
            for (k, v) in extra {
                m.insert(k.clone(), v.clone());
            }
        }
        write_json(
            &self.repo().join(rel),
            &json!({
                "metadata": meta,
                "goal": "test the controls",
                "objectives": [],
                "stories": stories,
                "quality_gates": {"enabled": true, "fail_fast": false, "use_cache": false, "gates": gates},
            }),
        );
    }

    fn repo(&self) -> &Path {
        self.repo.path()
    }

    fn t(&self, name: &str) -> PathBuf {
        self.tools.path().join(name)
    }

    /// An agent script `name` with `body` (sh), `T` set to the tools dir.
    fn agent_script(&self, name: &str, body: &str) -> String {
        let t = self.tools.path().display().to_string();
        script(
            &self.t(name),
            &format!("T='{t}'\nid=\"$CASCADE_STORY_ID\"\n{body}"),
        )
        .display()
        .to_string()
    }

    /// agents.json with `agents` ({name: command path}) and `extra` top-level keys.
    fn set_agents(&self, default: &str, agents: &[(&str, &str)], extra: Value) {
        let mut map = serde_json::Map::new();
        for (name, cmd) in agents {
            map.insert(
                name.to_string(),
                json!({"type": "cli", "command": cmd, "args": [], "timeout": 60}),
            );
        }
        let mut cfg = json!({"default_agent": default, "agents": map});
        if let (Some(c), Some(extra)) = (cfg.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                c.insert(k.clone(), v.clone());
            }
        }
        write_json(&self.t("agents.json"), &cfg);
    }

    fn cascade(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = cascade(self.repo());
        cmd.args(args)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .timeout(Duration::from_secs(120));
        cmd
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.cascade(args).output().expect("cascade runs")
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.t(name)).unwrap_or_default()
    }

    fn lines(&self, name: &str) -> Vec<String> {
        self.read(name).lines().map(str::to_string).collect()
    }

    fn status_json(&self) -> Value {
        let out = self.run(&["status", "--json"]);
        assert!(out.status.success(), "{}", explain(&out));
        serde_json::from_slice(&out.stdout).expect("status json")
    }
}

fn story(id: &str, deps: &[&str]) -> Value {
    json!({
        "id": id, "title": format!("Title {id}"), "description": format!("Implement {id}"),
        "priority": "medium", "dependencies": deps, "status": "pending",
        "acceptance_criteria": ["it works"]
    })
}

fn events(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

fn code(out: &std::process::Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn explain(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

/// An agent that writes `<id>.txt`.
const WRITE_OWN_FILE: &str = r#"echo "$id" > "$id.txt""#;

#[test]
fn resume_restores_prd_and_every_approve_option() {
    let f = Fixture::new(json!([]), json!([]));
    std::fs::create_dir_all(f.repo().join("plans")).unwrap();
    f.write_prd(
        "plans/next.json",
        json!([story("p1", &[]), story("p2", &["p1"])]),
        json!([]),
        json!({}),
    );
    std::fs::remove_file(f.repo().join("prd.json")).unwrap();
    let agent = f.agent_script("agent.sh", WRITE_OWN_FILE);
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    // No terminal, no --auto-run: one batch, then paused.
    let out = f.run(&[
        "approve",
        "--prd",
        "plans/next.json",
        "--retry-delay",
        "0",
        "--gate-jobs",
        "1",
        "--max-cost",
        "5",
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(events(&out).last().unwrap()["status"], "paused");
    // `resume` without --prd: the run's own PRD, and its options.
    let out = f.run(&["resume", "--yes", "--json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    assert_eq!(
        ev.last().unwrap()["status"],
        "completed",
        "{}",
        explain(&out)
    );
    let notice = of_kind(&ev, "notice")
        .into_iter()
        .filter_map(|e| e["message"].as_str())
        .find(|m| m.starts_with("resuming with"))
        .unwrap_or_default()
        .to_string();
    for flag in [
        "--prd plans/next.json",
        "--retry-delay 0",
        "--gate-jobs 1",
        "--max-cost 5",
    ] {
        assert!(notice.contains(flag), "{flag} not restored: {notice}");
    }
    let prd: Value =
        serde_json::from_str(&std::fs::read_to_string(f.repo().join("plans/next.json")).unwrap())
            .unwrap();
    assert_eq!(prd["stories"][1]["status"], "complete");
    assert!(f.repo().join("p2.txt").exists());
}

#[test]
fn worktree_prune_keeps_a_failed_storys_worktree_with_uncommitted_edits() {
    let f = Fixture::new(json!([story("w1", &[])]), json!([]));
    let agent = f.agent_script("agent.sh", "echo half > half.txt\nexit 3");
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let out = f.run(&[
        "approve",
        "--auto-run",
        "--max-retries",
        "0",
        "--retry-delay",
        "0",
        "--json",
    ]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let failed = of_kind(&events(&out), "story_failed")[0].clone();
    let wt = PathBuf::from(failed["worktree"].as_str().unwrap());
    assert!(wt.join("half.txt").exists());
    // The user goes on editing there.
    std::fs::write(wt.join("README.md"), "hand edit\n").unwrap();
    let out = f.run(&["worktree", "prune"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        wt.join("README.md").exists(),
        "dirty worktree removed: {text}"
    );
    assert!(text.contains("uncommitted changes"), "{text}");
    assert!(text.contains("README.md"), "{text}");
    let out = f.run(&["worktree", "prune", "--force"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(!wt.exists());
    let _ = git(f.repo(), &["status", "--short"]);
}

#[test]
fn notify_runs_the_command_with_the_event_json_on_stdin() {
    let f = Fixture::new(json!([story("n1", &[]), story("n2", &[])]), json!([]));
    let agent = f.agent_script(
        "agent.sh",
        r#"if [ "$id" = n2 ]; then echo "no luck" >&2; exit 3; fi
echo "$id" > "$id.txt""#,
    );
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let notify = f.agent_script("notify.sh", r#"cat > "$T/notified-$CASCADE_EVENT-$$.json""#);
    let out = f.run(&[
        "approve",
        "--auto-run",
        "--max-retries",
        "0",
        "--retry-delay",
        "0",
        "--json",
        "--notify",
        &notify,
    ]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let mut got: Vec<Value> = std::fs::read_dir(f.t(""))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("notified-"))
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap())
        .collect();
    got.sort_by_key(|v| v["event"].as_str().unwrap_or("").to_string());
    let kinds: Vec<&str> = got.iter().filter_map(|v| v["event"].as_str()).collect();
    assert_eq!(kinds, ["run_finished", "story_failed"], "{got:?}");
    assert_eq!(got[0]["status"], "failed");
    assert_eq!(got[1]["story"], "n2");
    assert_eq!(got[1]["error_type"], "exit_code");
    // A notify command that fails is a warning, never a different outcome,
    // and the NDJSON stream still ends with run_finished.
    let out = f.run(&[
        "resume",
        "--auto-run",
        "--json",
        "--notify",
        "/nonexistent/notifier",
    ]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    assert_eq!(events(&out).last().unwrap()["event"], "run_finished");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: --notify command '/nonexistent/notifier'"),
        "{stderr}"
    );
}
