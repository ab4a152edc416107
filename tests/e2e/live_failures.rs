//! End-to-end: failures read from an agent's live output, with scripted
//! agents that print what the real CLIs print (so this runs everywhere; the
//! real claude CLI is exercised in `real_agents.rs` when installed).

use std::path::Path;

use serde_json::{json, Value};

use crate::common::{cascade, git, init_repo, script, write_json};

fn setup(dir: &Path, name: &str, body: &str, extra: &[&str]) -> Vec<Value> {
    // The command's name decides the advice (claude, codex, ...).
    let bin = dir.join(".tools");
    // cascade checks known CLIs (by name) before the run with --version and
    // --help: this stand-in answers those at once and is the agent only
    // when called with no arguments, as agents.json calls it here.
    let cmd = script(&bin.join(name), &format!("[ $# -gt 0 ] && exit 0\n{body}"));
    write_json(
        &dir.join(".tools/agents.json"),
        &json!({"default_agent": "a", "agents": {"a": {"type": "cli", "command": cmd.display().to_string(), "args": [], "timeout": 120}}}),
    );
    write_json(
        &dir.join("prd.json"),
        &json!({"metadata": {"version": "1.0.0"}, "goal": "g", "objectives": [],
            "stories": [{"id": "story-001", "title": "Anything", "description": "d", "priority": "high",
                "dependencies": [], "status": "pending", "acceptance_criteria": []}],
            "quality_gates": {"enabled": false, "gates": []}}),
    );
    std::fs::write(dir.join(".git/info/exclude"), ".tools/\n").unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "plan"]);
    let out = cascade(dir)
        .args(["approve", "--auto-run", "--json", "--retry-delay", "0"])
        .args(extra)
        .arg("--agents")
        .arg(dir.join(".tools/agents.json"))
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn find<'a>(events: &'a [Value], name: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["event"] == name)
        .unwrap_or_else(|| panic!("no {name} in {events:#?}"))
}

#[test]
fn an_auth_retry_event_stops_a_hanging_agent_and_fails_without_retry() {
    let repo = init_repo();
    let dir = repo.path();
    // Like `claude -p --output-format stream-json` with a rejected key: it
    // announces its retry, then would keep trying for minutes.
    let events = setup(
        dir,
        "claude",
        r#"echo '{"type":"system","subtype":"init","session_id":"s-1"}'
echo '{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":500,"error_status":401,"error":"authentication_failed"}'
exec sleep 300"#,
        &["--max-retries", "3"],
    );
    let failed = find(&events, "story_failed");
    assert_eq!(failed["error_type"], "auth");
    assert_eq!(failed["attempts"], 1, "auth is not retried");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("HTTP 401") && error.contains("ANTHROPIC_API_KEY"),
        "{error}"
    );
    let finished = find(&events, "agent_finished");
    assert_eq!(finished["timed_out"], false);
    assert!(finished["outcome"]
        .as_str()
        .unwrap()
        .starts_with("stopped after"));
}

#[test]
fn codex_reconnects_on_429_end_as_rate_limited() {
    let repo = init_repo();
    let dir = repo.path();
    let events = setup(
        dir,
        "codex",
        r#"echo '{"type":"thread.started","thread_id":"t-1"}'
for i in 1 2 3 4 5; do
  echo "{\"type\":\"error\",\"message\":\"Reconnecting... $i/5 (unexpected status 429 Too Many Requests: Rate limit reached, please try again in 20s)\"}"
done
exec sleep 300"#,
        // A rate limit is not counted as an attempt (the agent cools down
        // and runs again): a time budget ends the run.
        &["--max-retries", "0", "--max-duration", "5"],
    );
    let failed = find(&events, "attempt_failed");
    assert_eq!(failed["error_type"], "rate_limited", "{failed}");
    assert!(failed["error"].as_str().unwrap().contains("429"));
}

#[test]
fn a_cli_error_names_the_telling_line_not_the_last_one() {
    let repo = init_repo();
    let dir = repo.path();
    let events = setup(
        dir,
        "codex",
        r#"echo "error: unexpected argument '--full-auto' found" >&2
echo "" >&2
echo "Usage: codex exec [OPTIONS] [PROMPT]" >&2
echo "For more information, try '--help'." >&2
exit 2"#,
        &["--max-retries", "0"],
    );
    let failed = find(&events, "story_failed");
    assert_eq!(failed["error_type"], "exit_code");
    assert_eq!(
        failed["error"],
        "agent 'a' exit code 2: error: unexpected argument '--full-auto' found"
    );
}
