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

use crate::common::{cascade, code, events, explain, git, init_repo, of_kind, script, write_json};

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

    /// `approve --auto-run --retry-delay 0 --json` plus `extra`.
    fn approve(&self, extra: &[&str]) -> std::process::Output {
        let mut args = vec!["approve", "--auto-run", "--retry-delay", "0", "--json"];
        args.extend_from_slice(extra);
        self.run(&args)
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
    for flag in ["--retry-delay 0", "--gate-jobs 1", "--max-cost 5"] {
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
    let out = f.approve(&["--max-retries", "0"]);
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
    let out = f.approve(&["--max-retries", "0", "--notify", &notify]);
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

/// Waits (with a generous guard) until `n` files named `started-*` exist in
/// `T`: a barrier so that stories are known to run at the same time.
const BARRIER: &str = r#"touch "$T/started-$id"
i=0; while [ "$(ls "$T" | grep -c '^started-')" -lt "$N" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"#;

#[test]
fn gate_jobs_1_never_overlaps_two_gates_and_stories_get_distinct_ports() {
    let stories = json!([story("g1", &[]), story("g2", &[]), story("g3", &[])]);
    // The gate holds a lock directory while it runs: a second gate starting
    // meanwhile finds it taken and records the overlap.
    let f = Fixture::new(stories.clone(), json!([]));
    let gate = f.agent_script(
        "gate.sh",
        r#"if mkdir "$T/gate-lock" 2>/dev/null; then :; else echo overlap >> "$T/overlaps"; fi
echo "start $CASCADE_PORT_BASE" >> "$T/gates"
sleep 0.3
echo "end $CASCADE_PORT_BASE" >> "$T/gates"
rmdir "$T/gate-lock" 2>/dev/null
exit 0"#,
    );
    f.write_prd(
        "prd.json",
        stories,
        json!([{"name": "check", "type": "test", "command": gate, "required": true}]),
        json!({}),
    );
    let agent = f.agent_script(
        "agent.sh",
        &format!(
            "N=3\n{BARRIER}\necho \"$id $CASCADE_PORT_BASE $CASCADE_PORT_COUNT\" >> \"$T/ports\"\n{WRITE_OWN_FILE}"
        ),
    );
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let out = f.approve(&["--parallel", "3", "--gate-jobs", "1"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.read("overlaps"), "", "two gates ran at once");
    let gates = f.lines("gates");
    // The base's gate (judged once before the agents), three story gates,
    // and two integration gates: the three started from one base, so the
    // second and third merges are not fast-forwards and are gated as merged
    // (within the same single gate slot).
    assert_eq!(gates.len(), 12, "{gates:?}");
    assert_eq!(of_kind(&events(&out), "integration_finished").len(), 2);
    for pair in gates.chunks(2) {
        assert!(
            pair[0].starts_with("start ") && pair[1].starts_with("end "),
            "{gates:?}"
        );
    }
    // The three stories ran at once (barrier) with three port ranges,
    // and each story's gate saw its own.
    let ports: Vec<String> = f
        .lines("ports")
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap_or("").to_string())
        .collect();
    let mut distinct = ports.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{ports:?}");
    assert!(f.lines("ports").iter().all(|l| l.ends_with(" 100")));
    for p in &ports {
        assert!(
            gates.contains(&format!("start {p}")),
            "{p} not in {gates:?}"
        );
    }
}

#[test]
fn a_gate_past_its_timeout_gives_its_slot_to_the_next_storys_gate() {
    let stories = json!([story("h1", &[]), story("h2", &[])]);
    let f = Fixture::new(stories.clone(), json!([]));
    // h1's gate hangs, ignores SIGTERM and leaves a process outside its
    // group holding its output; h2's gate passes.
    let gate = f.agent_script(
        "gate.sh",
        r#"if [ -f h1.txt ]; then
  echo hung >> "$T/gates"
  setsid sleep 60 &
  trap '' TERM
  sleep 60
fi
echo "ran for $(ls *.txt | tr '\n' ' ')" >> "$T/gates"
exit 0"#,
    );
    f.write_prd(
        "prd.json",
        stories,
        json!([{"name": "check", "type": "test", "command": gate, "required": true,
                "timeout_seconds": 2}]),
        json!({}),
    );
    // h2's agent finishes only once h1's gate holds the one slot, so h2's
    // gate has to get that slot from the hung gate.
    let agent = f.agent_script(
        "agent.sh",
        &format!(
            r#"if [ "$id" = h2 ]; then
  i=0; while ! grep -q hung "$T/gates" 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
fi
{WRITE_OWN_FILE}"#
        ),
    );
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let out = f.approve(&["--parallel", "2", "--gate-jobs", "1", "--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    let hung = ev
        .iter()
        .find(|e| e["event"] == "gate_finished" && e["story"] == "h1")
        .unwrap_or_else(|| panic!("no gate_finished for h1: {}", explain(&out)));
    assert_eq!(hung["timed_out"], "timed out after 2 s", "{hung}");
    // The base's run comes first (no story file there), then h1's hang.
    let gates = f.lines("gates");
    assert_eq!(
        gates.first().map(String::as_str),
        Some("ran for "),
        "{gates:?}"
    );
    assert_eq!(gates.get(1).map(String::as_str), Some("hung"), "{gates:?}");
    assert!(
        f.lines("gates").contains(&"ran for h2.txt ".to_string()),
        "{:?}",
        f.lines("gates")
    );
    assert_eq!(git(f.repo(), &["show", "main:h2.txt"]), "h2\n");
    assert_eq!(f.status_json()["stories"]["h1"]["status"], "failed");
}

/// An agent that reports `cost` USD as Claude's stream-json result line.
fn costly_agent(f: &Fixture, cost: &str, then: &str) -> String {
    f.agent_script(
        "agent.sh",
        &format!(
            r#"echo "$id" >> "$T/ran"
{then}
echo '{{"type":"result","subtype":"success","is_error":false,"result":"done","total_cost_usd":{cost},"usage":{{"input_tokens":1000,"output_tokens":100}}}}'"#
        ),
    )
}

#[test]
fn run_budget_stops_new_attempts_then_resume_with_a_higher_budget_finishes() {
    let f = Fixture::new(
        json!([story("c1", &[]), story("c2", &["c1"]), story("c3", &["c2"])]),
        json!([]),
    );
    let agent = costly_agent(&f, "0.6", WRITE_OWN_FILE);
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let out = f.approve(&["--max-cost", "1"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    let last = ev.last().unwrap();
    assert_eq!(last["status"], "budget_exhausted", "{}", explain(&out));
    assert_eq!(last["stories"]["complete"], 2);
    assert_eq!(last["stories"]["pending"], 1);
    let b = of_kind(&ev, "budget_exhausted");
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0]["scope"], "run");
    assert_eq!(b[0]["limit"], "cost");
    assert!(
        (b[0]["spent_usd"].as_f64().unwrap() - 1.2).abs() < 1e-9,
        "{b:?}"
    );
    assert_eq!(f.lines("ran"), ["c1", "c2"]);
    assert_eq!(f.status_json()["status"], "budget_exhausted");
    let progress = std::fs::read_to_string(f.repo().join("progress.txt")).unwrap();
    assert!(progress.contains("[BUDGET]"), "{progress}");
    // The same budget again: nothing new starts.
    let out = f.run(&["resume", "--auto-run", "--json"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    assert_eq!(events(&out).last().unwrap()["status"], "budget_exhausted");
    assert_eq!(f.lines("ran"), ["c1", "c2"]);
    // A raised budget finishes the run.
    let out = f.run(&["resume", "--auto-run", "--max-cost", "5", "--json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(events(&out).last().unwrap()["status"], "completed");
    assert_eq!(f.lines("ran"), ["c1", "c2", "c3"]);
}

#[test]
fn story_budget_fails_the_story_as_budget_without_retrying() {
    let f = Fixture::new(json!([story("s1", &[]), story("s2", &[])]), json!([]));
    // s1 fails after spending; s2 succeeds cheaply.
    let agent = costly_agent(
        &f,
        "0.4",
        r#"if [ "$id" = s1 ]; then echo '{"type":"result","is_error":true,"subtype":"error","total_cost_usd":0.7}'; exit 3; fi
echo "$id" > "$id.txt""#,
    );
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let out = f.approve(&["--max-retries", "3", "--max-story-cost", "0.5"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    let failed = of_kind(&ev, "story_failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["story"], "s1");
    assert_eq!(failed[0]["error_type"], "budget", "{failed:?}");
    assert_eq!(failed[0]["attempts"], 1);
    assert_eq!(
        f.lines("ran").iter().filter(|l| *l == "s1").count(),
        1,
        "retried over its budget"
    );
    assert_eq!(f.status_json()["stories"]["s2"]["status"], "complete");
    assert_eq!(ev.last().unwrap()["status"], "failed");
}

#[test]
fn per_story_and_prd_budgets_and_unknown_spend_are_said() {
    let f = Fixture::new(json!([]), json!([]));
    let mut s1 = story("u1", &[]);
    s1["budget"] = json!(0.01);
    f.write_prd(
        "prd.json",
        json!([s1, story("u2", &[])]),
        json!([]),
        json!({"budget": {"max_cost": 100}}),
    );
    // Reports nothing about its spend: unknown, never $0.
    let agent = f.agent_script("agent.sh", WRITE_OWN_FILE);
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let out = f.approve(&[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let notice = of_kind(&events(&out), "notice")
        .into_iter()
        .filter_map(|e| e["message"].as_str())
        .find(|m| m.starts_with("budget:"))
        .unwrap_or_default()
        .to_string();
    assert!(notice.contains("unknown"), "{}", explain(&out));
    assert!(!notice.contains("$0.00"), "{notice}");
    // A malformed budget is a clear usage error.
    f.write_prd(
        "prd.json",
        json!([story("u3", &[])]),
        json!([]),
        json!({"budget": "a lot"}),
    );
    git(f.repo(), &["status", "--short"]);
    let out = f.approve(&[]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metadata.budget"), "{err}");
}

/// An agent that answers 429 once per story (a marker per story), with
/// `retry_after` lines appended, then works.
fn limited_agent(f: &Fixture, name: &str, limit: &str) -> String {
    f.agent_script(
        name,
        &format!(
            r#"echo "{name} $id" >> "$T/ran"
if [ ! -f "$T/limited-$id" ]; then
  touch "$T/limited-$id"
  printf '%s\n' {limit} >&2
  exit 1
fi
echo "$id" > "$id.txt""#
        ),
    )
}

#[test]
fn rate_limit_with_retry_after_is_not_an_attempt_and_the_cooldown_is_shared() {
    let f = Fixture::new(json!([story("r1", &[]), story("r2", &[])]), json!([]));
    // r1: 429 with Retry-After 2. r2: waits until r1 was limited, then fails
    // for an ordinary reason; its retry must wait for the shared cooldown.
    let agent = f.agent_script(
        "limited.sh",
        r#"echo "$id" >> "$T/ran"
if [ "$id" = r1 ] && [ ! -f "$T/limited" ]; then
  echo "Error: 429 Too Many Requests" >&2
  echo "Retry-After: 2" >&2
  touch "$T/limited"
  exit 1
fi
if [ "$id" = r2 ] && [ ! -f "$T/r2-failed" ]; then
  i=0; while [ ! -f "$T/limited" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
  sleep 0.3
  touch "$T/r2-failed"
  echo "compile error" >&2
  exit 3
fi
echo "$id" > "$id.txt""#,
    );
    f.set_agents("limited", &[("limited", &agent)], json!({}));
    let out = f.approve(&["--parallel", "2", "--max-retries", "1"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    let cooldowns = of_kind(&ev, "agent_cooldown");
    assert_eq!(cooldowns.len(), 1, "{cooldowns:?}");
    assert_eq!(cooldowns[0]["agent"], "limited");
    assert_eq!(cooldowns[0]["retry_after"], true);
    assert_eq!(cooldowns[0]["concurrency"], 1);
    let failed = of_kind(&ev, "attempt_failed");
    assert!(failed
        .iter()
        .any(|e| e["story"] == "r1" && e["error_type"] == "rate_limited"));
    // r2 never hit the limit itself but waited for the agent's cooldown.
    let waited = of_kind(&ev, "notice").into_iter().any(|e| {
        e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("r2: waiting") && m.contains("cool down"))
    });
    assert!(waited, "{}", explain(&out));
    let status = f.status_json();
    assert_eq!(status["stories"]["r1"]["status"], "complete");
    assert_eq!(status["stories"]["r2"]["status"], "complete");
}

#[test]
fn rate_limit_without_retry_after_backs_off_and_costs_no_attempt() {
    let f = Fixture::new(json!([story("x1", &[])]), json!([]));
    let agent = limited_agent(
        &f,
        "limited.sh",
        "'rate_limit_error: overloaded, please slow down'",
    );
    f.set_agents("limited", &[("limited", &agent)], json!({}));
    // No retries at all: the rate-limited attempt must not use up the only one.
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    let c = of_kind(&ev, "agent_cooldown");
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["retry_after"], false);
    assert!(c[0]["cooldown_ms"].as_u64().unwrap() > 0);
    assert_eq!(f.lines("ran"), ["limited.sh x1", "limited.sh x1"]);
    let merged = of_kind(&ev, "story_merged");
    assert_eq!(merged[0]["attempts"], 1, "{merged:?}");
    assert_eq!(f.status_json()["stories"]["x1"]["attempts"], 1);
}

#[test]
fn a_long_cooldown_moves_the_story_to_a_fallback_agent() {
    let f = Fixture::new(json!([story("y1", &[])]), json!([]));
    let limited = limited_agent(
        &f,
        "limited.sh",
        "'HTTP 429 Too Many Requests' 'Retry-After: 600'",
    );
    let spare = f.agent_script(
        "spare.sh",
        &format!("echo \"spare $id\" >> \"$T/ran\"\n{WRITE_OWN_FILE}"),
    );
    f.set_agents(
        "limited",
        &[("limited", &limited), ("spare", &spare)],
        json!({"phase_defaults": {
            "implementation": {"default_agent": "limited", "fallback_chain": ["spare"]},
            "retry": {"default_agent": "limited", "fallback_chain": ["spare"]}
        }}),
    );
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    let fb = of_kind(&ev, "agent_fallback");
    assert!(
        fb.iter().any(|e| e["from"] == "limited"
            && e["to"] == "spare"
            && e["why"].as_str().unwrap_or("").contains("rate limited")),
        "{}",
        explain(&out)
    );
    assert_eq!(f.lines("ran"), ["limited.sh y1", "spare y1"]);
    assert_eq!(of_kind(&ev, "story_merged")[0]["agent"], "spare");
    // Status shows the cooldown that is still on.
    let status = f.status_json();
    assert_eq!(status["cooldowns"][0]["agent"], "limited", "{status}");
    assert_eq!(status["cooldowns"][0]["concurrency"], 2);
    let text = f.run(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Agent 'limited' is cooling down until"),
        "{text}"
    );
}

/// Two stories that both rewrite `shared.txt`, started together (barrier),
/// so the second to merge conflicts with the first.
fn conflicting_fixture(resolver_body: &str) -> Fixture {
    let f = Fixture::new(json!([story("m1", &[]), story("m2", &[])]), json!([]));
    std::fs::write(f.repo().join("shared.txt"), "base\n").unwrap();
    git(f.repo(), &["add", "-A"]);
    git(f.repo(), &["commit", "-q", "-m", "shared file"]);
    let agent = f.agent_script(
        "agent.sh",
        &format!(
            r#"echo "$CASCADE_PHASE $id" >> "$T/ran"
if [ "$CASCADE_PHASE" = merge ]; then
{resolver_body}
fi
N=2
{BARRIER}
echo "line from $id" > shared.txt"#
        ),
    );
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let gate = f.agent_script(
        "gate.sh",
        r#"if grep -q '^<<<<<<<' shared.txt; then exit 1; fi
cat shared.txt | tr '\n' ' ' >> "$T/gates"; echo >> "$T/gates""#,
    );
    f.write_prd(
        "prd.json",
        json!([story("m1", &[]), story("m2", &[])]),
        json!([{"name": "markers", "type": "test", "command": gate, "required": true}]),
        json!({}),
    );
    f
}

/// Keeps both sides: drops git's conflict markers from every conflicted file.
const RESOLVE_BOTH: &str = r#"  echo "$CASCADE_CONFLICTS" | while read -r file; do
    grep -v -e '^<<<<<<<' -e '^=======' -e '^>>>>>>>' "$file" > "$file.tmp" && mv "$file.tmp" "$file"
  done
  exit 0"#;

#[test]
fn a_merge_conflict_is_resolved_by_an_agent_regated_and_merged() {
    let f = conflicting_fixture(RESOLVE_BOTH);
    let out = f.approve(&["--parallel", "2", "--max-retries", "0"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    assert_eq!(of_kind(&ev, "merge_conflict").len(), 1, "{}", explain(&out));
    let resolving = of_kind(&ev, "merge_resolving");
    assert_eq!(resolving.len(), 1);
    assert_eq!(resolving[0]["files"], json!(["shared.txt"]));
    let resolved = of_kind(&ev, "merge_resolved");
    assert_eq!(resolved.len(), 1);
    let story = resolved[0]["story"].as_str().unwrap().to_string();
    assert_eq!(f.lines("ran").last().unwrap(), &format!("merge {story}"));
    // Both sides are on main, and the resolution was gated like any work.
    let shared = std::fs::read_to_string(f.repo().join("shared.txt")).unwrap();
    assert!(
        shared.contains("line from m1") && shared.contains("line from m2"),
        "{shared}"
    );
    assert!(!shared.contains("<<<<<<<"), "{shared}");
    let log = git(f.repo(), &["log", "--format=%s", "main"]);
    assert!(
        log.contains(&format!(
            "{story}: merge 'main' (conflicts resolved by scripted)"
        )),
        "{log}"
    );
    let status = f.status_json();
    assert_eq!(status["stories"]["m1"]["status"], "complete");
    assert_eq!(status["stories"]["m2"]["status"], "complete");
    // The base's gate (judged before the agents), each story's gates, then
    // the resolution's, on the merged content.
    let gates = f.lines("gates");
    assert_eq!(gates.len(), 4, "{gates:?}");
    assert!(
        gates[3].contains("line from m1") && gates[3].contains("line from m2"),
        "{gates:?}"
    );
}

#[test]
fn an_unresolved_conflict_fails_as_merge_conflict_with_the_branch_kept() {
    // The agent "resolves" by leaving the markers in place.
    let f = conflicting_fixture("  exit 0");
    let out = f.approve(&["--parallel", "2", "--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    assert_eq!(of_kind(&ev, "merge_resolving").len(), 1);
    let failed = of_kind(&ev, "story_failed");
    assert_eq!(failed.len(), 1, "{}", explain(&out));
    assert_eq!(failed[0]["error_type"], "merge_conflict");
    let error = failed[0]["error"].as_str().unwrap();
    assert!(error.contains("conflict markers remain"), "{error}");
    // The branch is kept as the story left it: its own commit, no half merge.
    let story = failed[0]["story"].as_str().unwrap();
    let branch = format!("cascade/{story}");
    let subject = git(f.repo(), &["log", "-1", "--format=%s", &branch]);
    assert_eq!(subject.trim(), format!("{story}: Title {story}"));
    let main = std::fs::read_to_string(f.repo().join("shared.txt")).unwrap();
    assert!(!main.contains("<<<<<<<"), "{main}");
}

#[test]
fn no_resolve_fails_the_conflict_without_asking_an_agent() {
    let f = conflicting_fixture(RESOLVE_BOTH);
    let out = f.approve(&["--parallel", "2", "--max-retries", "0", "--no-resolve"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    assert!(of_kind(&ev, "merge_resolving").is_empty());
    assert_eq!(
        of_kind(&ev, "story_failed")[0]["error_type"],
        "merge_conflict"
    );
    assert!(!f.lines("ran").iter().any(|l| l.starts_with("merge ")));
}

#[test]
fn hard_budget_stops_running_agents_and_the_run_resumes_later() {
    let f = Fixture::new(json!([story("h1", &[]), story("h2", &[])]), json!([]));
    // h1 spends the whole budget at once; h2 would run for a long time.
    let agent = costly_agent(
        &f,
        "2.0",
        r#"if [ "$id" = h2 ]; then
  touch "$T/h2-started"
  i=0; while [ ! -f "$T/h2-go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
  touch "$T/h2-outlived"
fi
if [ "$id" = h1 ]; then
  i=0; while [ ! -f "$T/h2-started" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
fi
echo "$id" > "$id.txt""#,
    );
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let out = f.approve(&["--parallel", "2", "--max-cost", "1", "--hard-budget"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    assert_eq!(ev.last().unwrap()["status"], "budget_exhausted");
    let b = of_kind(&ev, "budget_exhausted");
    assert!(b[0]["message"].as_str().unwrap().contains("--hard-budget"));
    // h2's agent was stopped, not waited for.
    assert!(!f.t("h2-outlived").exists(), "{}", explain(&out));
    let status = f.status_json();
    assert_eq!(status["stories"]["h1"]["status"], "complete");
    assert_eq!(status["stories"]["h2"]["status"], "pending");
    std::fs::write(f.t("h2-go"), "").unwrap();
    let out = f.run(&["resume", "--auto-run", "--max-cost", "10", "--json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.status_json()["stories"]["h2"]["status"], "complete");
}

#[test]
fn max_duration_lets_the_running_story_finish_and_starts_nothing_new() {
    let f = Fixture::new(json!([story("d1", &[]), story("d2", &["d1"])]), json!([]));
    let agent = f.agent_script(
        "agent.sh",
        &format!(
            "echo \"$id\" >> \"$T/ran\"\nif [ \"$id\" = d1 ]; then sleep 2; fi\n{WRITE_OWN_FILE}"
        ),
    );
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let out = f.approve(&["--max-duration", "1"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    assert_eq!(ev.last().unwrap()["status"], "budget_exhausted");
    let b = of_kind(&ev, "budget_exhausted");
    assert_eq!(b[0]["limit"], "duration");
    assert_eq!(b[0]["limit_secs"], 1);
    assert_eq!(f.status_json()["stories"]["d1"]["status"], "complete");
    assert_eq!(f.lines("ran"), ["d1"]);
    let out = f.run(&["resume", "--auto-run", "--max-duration", "600", "--json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.lines("ran"), ["d1", "d2"]);
}

#[test]
fn low_memory_holds_back_a_new_agent_until_the_running_one_is_done() {
    let f = Fixture::new(json!([story("k1", &[]), story("k2", &[])]), json!([]));
    // A threshold no machine meets: the first agent starts (nothing of the
    // run is running), the second waits for it.
    write_json(
        &f.repo().join(".cascade/config.json"),
        &json!({"resources": {"min_available_memory_mb": 1_000_000_000u64}}),
    );
    let agent = f.agent_script(
        "agent.sh",
        &format!("echo \"start $id\" >> \"$T/timeline\"\nsleep 0.3\necho \"end $id\" >> \"$T/timeline\"\n{WRITE_OWN_FILE}"),
    );
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let out = f.approve(&["--parallel", "2"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    let waits = of_kind(&ev, "waiting_for_memory");
    assert!(!waits.is_empty(), "{}", explain(&out));
    assert_eq!(waits[0]["what"], "agent");
    assert_eq!(waits[0]["threshold_mb"], 1_000_000_000u64);
    let tl = f.lines("timeline");
    assert_eq!(tl.len(), 4, "{tl:?}");
    // Never two at once: each start follows the previous end.
    assert!(
        tl[0].starts_with("start ") && tl[1].starts_with("end "),
        "{tl:?}"
    );
    assert!(
        tl[2].starts_with("start ") && tl[3].starts_with("end "),
        "{tl:?}"
    );
}

#[test]
fn resume_stops_an_agent_whose_pid_never_reached_the_state_file() {
    let f = Fixture::new(json!([story("o1", &[])]), json!([]));
    // The first agent waits (up to 30 s) for a marker that never comes.
    let agent = f.agent_script(
        "agent.sh",
        &format!(
            r#"if [ ! -f "$T/first" ]; then
  touch "$T/first"; echo $$ > "$T/pid"
  i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
  touch "$T/outlived"
fi
{WRITE_OWN_FILE}"#
        ),
    );
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let mut child = crate::common::bare_cascade()
        .current_dir(f.repo())
        .env("NO_COLOR", "1")
        .env("HOME", f.repo())
        .args([
            "approve",
            "--auto-run",
            "--retry-delay",
            "0",
            "--json",
            "--agents",
        ])
        .arg(f.t("agents.json"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let guard = std::time::Instant::now();
    // The agent writes its pid: wait for the whole number, not the file.
    while f.read("pid").trim().parse::<i32>().is_err() && guard.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid: i32 = f.read("pid").trim().parse().expect("agent pid");
    // Wait until the run state holds the attempt, then kill -9 cascade and
    // take the pid out of the state: the kill landed before it was written.
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let mut state: Value = crate::common::run_state(f.repo());
    for s in state["stories"].as_array_mut().unwrap() {
        for a in s["attempts"].as_array_mut().unwrap() {
            a.as_object_mut().unwrap().remove("pid");
        }
    }
    crate::common::save_run_state(f.repo(), &state);
    // SAFETY: signal 0 only checks that the process exists.
    assert_eq!(
        unsafe { libc::kill(pid, 0) },
        0,
        "the agent should outlive cascade"
    );

    let out = f.run(&["resume", "--auto-run", "--retry-delay", "0", "--json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let stopped = of_kind(&events(&out), "notice").into_iter().any(|e| {
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("pid {pid}")))
    });
    assert!(stopped, "{}", explain(&out));
    assert!(!f.t("outlived").exists());
    assert!(f.repo().join("o1.txt").exists());
}

#[test]
fn rust_gates_share_a_cargo_target_directory_under_cascade() {
    let f = Fixture::new(json!([]), json!([]));
    std::fs::write(
        f.repo().join("Cargo.toml"),
        "[package]\nname = \"x\"\nversion = \"0.1.0\"\n",
    )
    .unwrap();
    git(f.repo(), &["add", "-A"]);
    git(f.repo(), &["commit", "-q", "-m", "a Rust project"]);
    let gate = f.agent_script("gate.sh", r#"echo "$CARGO_TARGET_DIR" >> "$T/targets""#);
    f.write_prd(
        "prd.json",
        json!([story("t1", &[]), story("t2", &["t1"])]),
        json!([{"name": "build", "type": "test", "command": gate, "required": true}]),
        json!({}),
    );
    let agent = f.agent_script("agent.sh", WRITE_OWN_FILE);
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    let out = f.approve(&[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let targets = f.lines("targets");
    // The base's gate (judged before the agents), then the two stories'.
    assert_eq!(targets.len(), 3, "{targets:?}");
    // One after the other: each run finds the previous one's directory.
    assert!(targets.iter().all(|t| *t == targets[0]), "{targets:?}");
    assert!(
        targets[0].ends_with("/.cascade/cache/cargo-target/job-0"),
        "{targets:?}"
    );
}

#[test]
fn bad_control_flags_are_usage_errors_saying_what_is_wrong() {
    let f = Fixture::new(json!([story("b1", &[])]), json!([]));
    let agent = f.agent_script("agent.sh", WRITE_OWN_FILE);
    f.set_agents("scripted", &[("scripted", &agent)], json!({}));
    for (args, says) in [
        (
            vec!["--max-cost", "-1"],
            "--max-cost must be a number of USD >= 0",
        ),
        (
            vec!["--max-story-cost", "NaN"],
            "--max-story-cost must be a number of USD >= 0",
        ),
        (vec!["--gate-jobs", "0"], "--gate-jobs must be at least 1"),
        (
            vec!["--max-duration", "0"],
            "--max-duration must be at least 1 second",
        ),
    ] {
        let out = f.approve(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", explain(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
