//! End-to-end tests against the real agent CLIs. The real `claude` CLI (Claude Code), talking to
//! the mock Messages API of `mock_anthropic` on 127.0.0.1, through the
//! shipped agents.json `claude-code` entry (its argv as shipped; only the
//! timeout is shortened for the hang test).
//!
//! The CLI is taken from `CASCADE_TEST_CLAUDE` (a path to the binary), else
//! from `PATH`. When it is not installed the tests print why and pass, so a
//! machine without npm still runs the suite; `.ci/run` installs it from the
//! npm registry when npm is there. Nothing leaves 127.0.0.1: the base URL
//! points at the mock and claude's non-essential traffic is switched off.
//!
//! The same for the real `codex` CLI (`CASCADE_TEST_CODEX` or `PATH`)
//! against `mock_openai` (the Responses API), configured as a custom model
//! provider in a temporary `$CODEX_HOME/config.toml`, so the shipped argv is
//! used unchanged.
//!
//! Both run inside cascade's sandbox, whose TCP rules let an agent connect
//! only to the ports its definition names: each test adds its mock's port
//! to the shipped entry's `sandbox.net_ports`, as a user pointing a CLI at
//! a local model server would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{cascade, git, init_repo, write_json};
use crate::mock_anthropic::{self, Mode, WRITTEN_FILE, WRITTEN_TEXT};

/// The shipped agents.json, as the binary has it built in.
const SHIPPED: &str = include_str!("../../agents.json");

fn find_claude() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CASCADE_TEST_CLAUDE") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("claude"))
            .find(|p| p.is_file())
    })
}

/// The claude CLI, or `None` after printing why the test is skipped.
fn claude_or_skip(test: &str) -> Option<PathBuf> {
    match find_claude() {
        Some(p) => Some(p),
        None => {
            eprintln!(
                "skipping {test}: the claude CLI is not installed (npm install -g @anthropic-ai/claude-code, or set CASCADE_TEST_CLAUDE to its path)"
            );
            None
        }
    }
}

/// The shipped entry of agent `name`, allowed to connect to the port of
/// the mock API at `api` too (`http://127.0.0.1:PORT[/...]`).
fn shipped_entry(name: &str, api: &str) -> Value {
    let shipped: Value = serde_json::from_str(SHIPPED).expect("shipped agents.json parses");
    let mut entry = shipped["agents"][name].clone();
    let authority = api
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("the mock's URL");
    let port: u16 = authority
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("the mock's port");
    let ports = entry["sandbox"]["net_ports"]
        .as_array_mut()
        .expect("the shipped entry names its ports");
    ports.push(json!(port));
    entry
}

/// A repository with a one-story PRD, no gates, and a project agents.json
/// holding the shipped claude-code entry (timeout as given) allowed to
/// reach the mock API at `api`.
fn project(timeout_secs: u64, api: &str) -> tempfile::TempDir {
    let repo = init_repo();
    let dir = repo.path();
    let mut entry = shipped_entry("claude-code", api);
    assert_eq!(entry["command"], "claude");
    entry["timeout"] = json!(timeout_secs);
    write_json(
        &dir.join("agents.json"),
        &json!({"default_agent": "claude-code", "agents": {"claude-code": entry}}),
    );
    write_json(
        &dir.join("prd.json"),
        &json!({"metadata": {"version": "1.0.0"}, "goal": "greet", "objectives": [],
            "stories": [{"id": "story-001", "title": "Write the greeting file",
                "description": format!("Create {WRITTEN_FILE}."), "priority": "high",
                "dependencies": [], "status": "pending", "acceptance_criteria": ["the file exists"]}],
            "quality_gates": {"enabled": false, "gates": []}}),
    );
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "plan"]);
    repo
}

/// `cascade` in `dir` with claude's directory first on PATH, its settings
/// in `home` (not the repository under test), and the Anthropic API at
/// the mock `api`: nothing claude sends leaves 127.0.0.1.
fn with_claude(dir: &Path, claude: &Path, api: &str, home: &Path) -> assert_cmd::Command {
    let bin_dir = claude.parent().expect("claude has a directory");
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let mut cmd = cascade(dir);
    cmd.env("HOME", home)
        .env("PATH", path)
        .env("ANTHROPIC_BASE_URL", api)
        .env("ANTHROPIC_API_KEY", "sk-ant-test-key")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env_remove("CLAUDE_CODE_OAUTH_TOKEN")
        // CI runs as root: claude accepts --dangerously-skip-permissions
        // there only inside a declared sandbox.
        .env("IS_SANDBOX", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .timeout(Duration::from_secs(240));
    cmd
}

/// `cascade approve` with claude pointed at the mock.
fn approve(
    dir: &Path,
    claude: &Path,
    api: &str,
    extra: &[&str],
) -> (Option<i32>, Vec<Value>, String) {
    let mut args = vec!["approve", "--auto-run", "--json", "--retry-delay", "0"];
    args.extend_from_slice(extra);
    let home = tempfile::tempdir().expect("home");
    let out = with_claude(dir, claude, api, home.path())
        .args(&args)
        .output()
        .expect("cascade runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    (
        out.status.code(),
        events,
        format!(
            "{stdout}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn event<'a>(events: &'a [Value], name: &str) -> Option<&'a Value> {
    events.iter().find(|e| e["event"] == name)
}

/// Whether any live process is in the process group `pgid`.
fn group_alive(pgid: u64) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .any(|stat| {
            let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.len() > 2 && f[2].parse::<u64>().ok() == Some(pgid) && f[0] != "Z" && f[0] != "X"
        })
}

#[test]
fn real_claude_writes_the_story_and_cascade_merges_it_with_its_cost() {
    let Some(claude) = claude_or_skip("real_claude_writes_the_story") else {
        return;
    };
    let api = mock_anthropic::start(Mode::Work);
    let repo = project(180, &api.url);
    let dir = repo.path();
    let (code, events, all) = approve(dir, &claude, &api.url, &[]);
    assert_eq!(code, Some(0), "{all}");
    let finished = event(&events, "agent_finished").expect("agent_finished");
    assert_eq!(finished["success"], true, "{all}");
    let cost = finished["cost_usd"].as_f64().unwrap_or(-1.0);
    assert!(
        cost > 0.0,
        "claude's cost parsed from its result event: {all}"
    );
    assert!(finished["output_tokens"].as_u64().unwrap_or(0) > 0, "{all}");
    assert!(event(&events, "story_merged").is_some(), "{all}");
    // The Write tool call of the first turn, merged into main.
    assert_eq!(
        std::fs::read_to_string(dir.join(WRITTEN_FILE)).expect("merged file"),
        WRITTEN_TEXT
    );
    assert!(
        api.messages.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "two turns"
    );
    let last = events.last().expect("events");
    assert_eq!(last["event"], "run_finished");
    assert_eq!(last["status"], "completed");
}

#[test]
fn real_claude_with_a_rejected_key_fails_at_once_as_auth_without_retry() {
    let Some(claude) = claude_or_skip("real_claude_with_a_rejected_key") else {
        return;
    };
    let api = mock_anthropic::start(Mode::Unauthorized);
    let repo = project(600, &api.url);
    let dir = repo.path();
    let (code, events, all) = approve(dir, &claude, &api.url, &["--max-retries", "2"]);
    assert_eq!(code, Some(1), "{all}");
    let failed = event(&events, "story_failed").expect("story_failed");
    assert_eq!(failed["error_type"], "auth", "{all}");
    assert_eq!(failed["attempts"], 1, "auth is not retried: {all}");
    let error = failed["error"].as_str().unwrap_or("");
    assert!(
        error.contains("401") && error.contains("ANTHROPIC_API_KEY"),
        "{error}"
    );
    let started = event(&events, "story_started").expect("story_started");
    assert!(
        !group_alive(started["pid"].as_u64().unwrap()),
        "claude's group was stopped"
    );
    let finished = event(&events, "agent_finished").expect("agent_finished");
    assert_eq!(
        finished["timed_out"], false,
        "stopped by the watcher, not the timeout: {all}"
    );
    eprintln!(
        "401: agent stopped after {} ms: {error}",
        finished["duration_ms"]
    );
}

#[test]
fn real_claude_rate_limited_or_failing_provider_is_classified() {
    let Some(claude) = claude_or_skip("real_claude_rate_limited") else {
        return;
    };
    // A rate limit is not counted as an attempt: the run cools the agent
    // down and tries again, so a time budget ends this one.
    for (mode, kind, extra) in [
        (
            Mode::RateLimited,
            "rate_limited",
            ["--max-retries", "0", "--max-duration", "20"],
        ),
        (
            Mode::ServerError,
            "provider_error",
            ["--max-retries", "0", "--max-duration", "600"],
        ),
    ] {
        let api = mock_anthropic::start(mode);
        let repo = project(600, &api.url);
        let dir = repo.path();
        let (code, events, all) = approve(dir, &claude, &api.url, &extra);
        assert_eq!(code, Some(1), "{all}");
        let failed = event(&events, "attempt_failed").expect("attempt_failed");
        assert_eq!(failed["error_type"], kind, "{all}");
        let finished = event(&events, "agent_finished").expect("agent_finished");
        assert_eq!(
            finished["timed_out"], false,
            "stopped by the watcher: {all}"
        );
        for started in events.iter().filter(|e| e["event"] == "story_started") {
            assert!(!group_alive(started["pid"].as_u64().unwrap()));
        }
    }
}

#[test]
fn real_claude_against_a_hanging_api_is_killed_by_the_timeout_with_nothing_left() {
    let Some(claude) = claude_or_skip("real_claude_against_a_hanging_api") else {
        return;
    };
    let api = mock_anthropic::start(Mode::Hang);
    let repo = project(8, &api.url);
    let dir = repo.path();
    let (code, events, all) = approve(dir, &claude, &api.url, &["--max-retries", "0"]);
    assert_eq!(code, Some(1), "{all}");
    let failed = event(&events, "story_failed").expect("story_failed");
    assert_eq!(failed["error_type"], "timeout", "{all}");
    let finished = event(&events, "agent_finished").expect("agent_finished");
    assert_eq!(finished["timed_out"], true);
    let started = event(&events, "story_started").expect("story_started");
    assert!(
        !group_alive(started["pid"].as_u64().unwrap()),
        "no process of claude's group is left"
    );
}

/// `agents check --json --refresh` of the project's agents.json with the
/// real claude: (exit code, claude-code's check, everything for messages).
fn check_claude(dir: &Path, claude: &Path, api: &str) -> (Option<i32>, Value, String) {
    let home = tempfile::tempdir().expect("home");
    let out = with_claude(dir, claude, api, home.path())
        .args(["agents", "check", "--json", "--refresh"])
        .output()
        .expect("cascade runs");
    let all = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("agents check --json: {e}: {all}"));
    let check = v["agents"][0].clone();
    assert_eq!(check["agent"], "claude-code", "{all}");
    (out.status.code(), check, all)
}

/// Issue 45 item 6 with the real CLI: the shipped claude-code entry passes
/// `agents check` (its flags, version and login), and a flag Claude Code
/// does not have, appended to it, is caught by the probe that runs the
/// argv with an empty prompt: claude's own "unknown option" and the fix.
/// Neither calls a model: the Messages API (the mock, where
/// ANTHROPIC_BASE_URL points) sees no request.
#[test]
fn real_claude_passes_agents_check_as_shipped_and_the_probe_catches_a_made_up_flag() {
    let Some(claude) = claude_or_skip("real_claude_passes_agents_check") else {
        return;
    };
    let api = mock_anthropic::start(Mode::Work);
    let repo = project(180, &api.url);
    let dir = repo.path();
    let (code, check, all) = check_claude(dir, &claude, &api.url);
    assert_eq!(code, Some(0), "{all}");
    assert_eq!(check["status"], "ok", "{all}");
    let kinds: Vec<&Value> = check["problems"]
        .as_array()
        .map(|p| p.iter().map(|p| &p["kind"]).collect())
        .unwrap_or_default();
    assert!(
        !kinds.contains(&&json!("missing_flag")) && !kinds.contains(&&json!("unlisted_flag")),
        "{all}"
    );

    let shipped: Value = serde_json::from_str(SHIPPED).expect("shipped agents.json parses");
    let mut entry = shipped["agents"]["claude-code"].clone();
    entry["args"]
        .as_array_mut()
        .expect("args")
        .push(json!("--no-such-flag"));
    write_json(
        &dir.join("agents.json"),
        &json!({"default_agent": "claude-code", "agents": {"claude-code": entry}}),
    );
    let (code, check, all) = check_claude(dir, &claude, &api.url);
    assert_eq!(code, Some(1), "{all}");
    assert_eq!(check["status"], "failed", "{all}");
    let missing = check["problems"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["kind"] == "missing_flag"))
        .unwrap_or_else(|| panic!("no missing_flag: {all}"));
    let message = missing["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("--no-such-flag") && message.contains("unknown option"),
        "claude's own words: {message}"
    );
    assert!(
        missing["fix"]
            .as_str()
            .unwrap_or_default()
            .contains("agents.json"),
        "{all}"
    );
    assert_eq!(
        api.messages.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a check called the model"
    );
}

// --- codex -----------------------------------------------------------------

fn find_codex() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CASCADE_TEST_CODEX") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("codex"))
            .find(|p| p.is_file())
    })
}

/// A repository whose project agents.json holds the shipped codex entry,
/// allowed to reach the mock API at `api`.
fn codex_project(api: &str) -> tempfile::TempDir {
    let repo = project(180, api);
    let dir = repo.path();
    let entry = shipped_entry("codex", api);
    assert_eq!(entry["command"], "codex");
    write_json(
        &dir.join("agents.json"),
        &json!({"default_agent": "codex", "agents": {"codex": entry}}),
    );
    git(dir, &["commit", "-q", "-am", "codex"]);
    repo
}

/// `cascade approve` with codex's provider pointed at the mock through
/// `$CODEX_HOME/config.toml` (the shipped argv stays as it is).
fn approve_codex(
    dir: &Path,
    codex: &Path,
    base_url: &str,
    extra: &[&str],
) -> (Option<i32>, Vec<Value>, String) {
    let home = tempfile::tempdir().expect("home");
    let codex_home = home.path().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"{base_url}\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n"
        ),
    )
    .unwrap();
    let bin_dir = codex.parent().expect("codex has a directory");
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let mut args = vec!["approve", "--auto-run", "--json", "--retry-delay", "0"];
    args.extend_from_slice(extra);
    let out = cascade(dir)
        .env("HOME", home.path())
        .env("CODEX_HOME", &codex_home)
        .env("PATH", path)
        .env("OPENAI_API_KEY", "sk-test")
        .env_remove("OPENAI_BASE_URL")
        .timeout(Duration::from_secs(240))
        .args(&args)
        .output()
        .expect("cascade runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    (
        out.status.code(),
        events,
        format!(
            "{stdout}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn real_codex_writes_the_story_through_the_shipped_argv() {
    let Some(codex) = find_codex() else {
        eprintln!("skipping real_codex_writes_the_story: codex is not installed (npm install -g @openai/codex, or set CASCADE_TEST_CODEX)");
        return;
    };
    let api = crate::mock_openai::start(crate::mock_openai::Mode::Work);
    let repo = codex_project(&api.base_url);
    let dir = repo.path();
    let (code, events, all) = approve_codex(dir, &codex, &api.base_url, &[]);
    assert_eq!(code, Some(0), "{all}");
    let finished = event(&events, "agent_finished").expect("agent_finished");
    assert_eq!(finished["success"], true, "{all}");
    assert!(
        finished["output_tokens"].as_u64().unwrap_or(0) > 0,
        "codex usage parsed: {all}"
    );
    assert!(event(&events, "story_merged").is_some(), "{all}");
    assert_eq!(
        std::fs::read_to_string(dir.join(crate::mock_openai::WRITTEN_FILE)).expect("merged file"),
        crate::mock_openai::WRITTEN_TEXT
    );
    assert!(
        api.requests.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "the tool call and the answer after its output"
    );
}

#[test]
fn real_codex_401_is_auth_and_500_is_provider_error() {
    let Some(codex) = find_codex() else {
        eprintln!("skipping real_codex_401: codex is not installed");
        return;
    };
    for (mode, kind) in [
        (crate::mock_openai::Mode::Unauthorized, "auth"),
        (crate::mock_openai::Mode::ServerError, "provider_error"),
    ] {
        let api = crate::mock_openai::start(mode);
        let repo = codex_project(&api.base_url);
        let dir = repo.path();
        let (code, events, all) =
            approve_codex(dir, &codex, &api.base_url, &["--max-retries", "0"]);
        assert_eq!(code, Some(1), "{all}");
        let failed = event(&events, "attempt_failed").expect("attempt_failed");
        assert_eq!(failed["error_type"], kind, "{all}");
        let finished = event(&events, "agent_finished").expect("agent_finished");
        assert_eq!(finished["timed_out"], false, "{all}");
        let started = event(&events, "story_started").expect("story_started");
        assert!(!group_alive(started["pid"].as_u64().unwrap()));
    }
}
