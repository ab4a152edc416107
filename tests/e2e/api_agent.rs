//! End-to-end: the api agent (`type: "api"`), against the scripted model of
//! `mock_model` behind mock Messages and Chat Completions servers, with a
//! PATH that holds no agent CLI (only git, sh and grep): `plan --auto --run`
//! through every planning step to merged code, each failure class, the
//! three path escapes, a retry that continues the conversation, and
//! `agents list` / `agents check`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{cascade, code, events, explain, git, init_repo, of_kind, script, write_json};
use crate::mock_model::{self, Mode, Model, Wire, KEY};

/// The variable the agents read their key from.
pub const KEY_ENV: &str = "MOCK_MODEL_KEY";

/// The gate every story must pass: no `*.txt` file may still hold "draft".
const NO_DRAFTS: &str = r#"if grep -l draft *.txt 2>/dev/null; then echo "a file still holds a draft" >&2; exit 1; fi
exit 0"#;

/// A repository, a tools directory (agents.json, the gate) outside it and
/// a PATH directory with only git, sh and grep.
struct Setup {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let s = Setup {
            repo: init_repo(),
            tools: tempfile::tempdir().expect("tools"),
        };
        let bin = s.tools().join("bin");
        std::fs::create_dir_all(&bin).expect("bin");
        for tool in ["git", "sh", "grep"] {
            let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join(tool))
                .find(|p| p.is_file())
                .unwrap_or_else(|| panic!("{tool} not found on PATH"));
            std::os::unix::fs::symlink(found, bin.join(tool)).expect("link");
        }
        script(&s.tools().join("no-drafts.sh"), NO_DRAFTS);
        // cascade's own directory stays out of `git status`.
        std::fs::write(s.repo().join(".git/info/exclude"), "/.cascade/\n").expect("exclude");
        s
    }

    fn repo(&self) -> &Path {
        self.repo.path()
    }

    fn tools(&self) -> &Path {
        self.tools.path()
    }

    fn gate(&self) -> Value {
        json!([{"name": "no-drafts", "type": "test", "required": true,
                "command": self.tools().join("no-drafts.sh")}])
    }

    /// agents.json with these agents, every phase defaulting to `default`.
    fn agents(&self, agents: Value, default: &str) -> PathBuf {
        let path = self.tools().join("agents.json");
        write_json(&path, &json!({"default_agent": default, "agents": agents}));
        path
    }

    /// A one-story prd.json with the no-drafts gate, committed.
    fn prd(&self) {
        write_json(
            &self.repo().join("prd.json"),
            &json!({"metadata": {"version": "1.0.0"}, "goal": "greet", "objectives": [],
                "stories": [{"id": "story-001", "title": "Hello file", "description": "write it",
                    "priority": "high", "dependencies": [], "status": "pending",
                    "acceptance_criteria": ["the file exists"]}],
                "quality_gates": {"enabled": true, "use_cache": false, "gates": self.gate()}}),
        );
        git(self.repo(), &["add", "-A"]);
        git(self.repo(), &["commit", "-q", "-m", "plan"]);
    }

    /// `cascade ARGS --agents <agents.json>` with the bare PATH and the key.
    fn run(&self, args: &[&str]) -> std::process::Output {
        cascade(self.repo())
            .env("PATH", self.tools().join("bin"))
            .env(KEY_ENV, KEY)
            .args(args)
            .arg("--agents")
            .arg(self.tools().join("agents.json"))
            .timeout(Duration::from_secs(240))
            .output()
            .expect("cascade runs")
    }

    /// `approve --auto-run --json` of the one-story plan.
    fn approve(&self, extra: &[&str]) -> (std::process::Output, Vec<Value>) {
        let mut args = vec!["approve", "--auto-run", "--json", "--retry-delay", "0"];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        let evs = events(&out);
        (out, evs)
    }
}

/// An api agent of `model` speaking `wire`.
pub fn api(model: &Model, wire: Wire, extra: Value) -> Value {
    let mut a = json!({"type": "api",
        "provider": match wire { Wire::Anthropic => "anthropic", Wire::OpenAi => "openai" },
        "model": "mock-model", "base_url": model.url, "api_key_env": KEY_ENV,
        "max_tokens": 2048, "max_turns": 20, "timeout": 60,
        "price": {"input": 3.0, "output": 15.0}});
    if let (Some(m), Some(e)) = (a.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            m.insert(k.clone(), v.clone());
        }
    }
    a
}

/// The story-level failure events (`story_failed`, else `attempt_failed`).
fn failure(evs: &[Value]) -> Value {
    ["story_failed", "attempt_failed"]
        .iter()
        .find_map(|kind| of_kind(evs, kind).first().map(|v| (*v).clone()))
        .unwrap_or_else(|| panic!("no failure in {evs:#?}"))
}

/// The latest prompt (user text) of a recorded request.
fn last_prompt(body: &Value, wire: Wire) -> String {
    prompts(body, wire).pop().unwrap_or_default()
}

/// All user prompts a request carries, in order.
fn prompts(body: &Value, wire: Wire) -> Vec<String> {
    mock_model::conversation(body, wire)
        .messages
        .iter()
        .filter(|m| m.role == "user")
        .flat_map(|m| m.items.iter())
        .filter_map(|i| match i {
            mock_model::Item::Text(t) if !t.is_empty() => Some(t.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn plan_auto_run_goes_from_goal_to_merged_code_with_api_agents_only() {
    let s = Setup::new();
    let planner = mock_model::start(Wire::Anthropic, Mode::Work);
    let reviewer = mock_model::start(Wire::OpenAi, Mode::Work);
    s.agents(
        json!({"planner": api(&planner, Wire::Anthropic, json!({})),
               "reviewer": api(&reviewer, Wire::OpenAi, json!({}))}),
        "planner",
    );
    // The review phase (the challenge) goes to the other provider.
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(s.tools().join("agents.json")).unwrap())
            .unwrap();
    cfg["phase_defaults"] = json!({"review": {"default_agent": "reviewer"}});
    write_json(&s.tools().join("agents.json"), &cfg);
    write_json(
        &s.repo().join(".cascade/gates.json"),
        &json!({"gates": s.gate()}),
    );
    let out = s.run(&["plan", "Write greeting files", "--auto", "--run"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    // The terminal says what ran: no process, so no "pid 0, exit code 0".
    let shown = explain(&out);
    assert!(shown.contains("attempt 1/"), "{shown}");
    assert!(shown.contains(", model API)"), "{shown}");
    assert!(shown.contains("(answered by anthropic model "), "{shown}");
    assert!(
        !shown.contains("pid 0") && !shown.contains("exit code 0"),
        "{shown}"
    );

    // Both stories merged, each fixed after RunGates reported its draft.
    for id in ["story-001", "story-002"] {
        let text = git(s.repo(), &["show", &format!("main:{id}.txt")]);
        assert_eq!(text, format!("{id} fixed\n"));
    }
    let results = planner.tool_results(Wire::Anthropic);
    assert!(
        results
            .iter()
            .any(|(r, _)| r.starts_with("- gate 'no-drafts' (required) failed")),
        "{results:#?}"
    );
    assert!(results
        .iter()
        .any(|(r, _)| r == "All quality gates passed."));

    // Every planning step ran through the api agents, with usage and cost.
    let plans = s.repo().join(".cascade/plans");
    let dir = std::fs::read_dir(&plans)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let session: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("session.json")).unwrap()).unwrap();
    assert_eq!(session["status"], "approved", "{session:#}");
    let steps: Vec<&str> = session["llm_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "strategy",
            "discovery",
            "design",
            "generate",
            "self-review",
            "challenge",
            "revise",
            "challenge"
        ]
    );
    for call in session["llm_calls"].as_array().unwrap() {
        assert_eq!(call["model"], "mock-model", "{call}");
        assert!(call["tokens_in"].as_u64().unwrap() > 0, "{call}");
        assert!(call["cost"].as_f64().unwrap() > 0.0, "{call}");
    }
    assert!(session["total_cost"].as_f64().unwrap() > 0.0);
    assert_eq!(
        session["agent_sessions"]["planner"]
            .as_str()
            .map(|s| s.starts_with("api-")),
        Some(true)
    );

    // Self-review and revise resent the generator's conversation; the
    // challenges went to the other provider, as new conversations.
    let bodies = planner.bodies();
    for step in ["self-review", "revise"] {
        let body = bodies
            .iter()
            .find(|b| {
                last_prompt(b, Wire::Anthropic)
                    .starts_with(&format!("# cascade planning: {step} step"))
            })
            .unwrap_or_else(|| panic!("no {step} request"));
        let earlier = prompts(body, Wire::Anthropic);
        assert!(
            earlier
                .iter()
                .any(|p| p.starts_with("# cascade planning: generate step")),
            "{step} did not continue the generator's conversation: {earlier:#?}"
        );
    }
    let challenges: Vec<Value> = reviewer
        .bodies()
        .into_iter()
        .filter(|b| last_prompt(b, Wire::OpenAi).starts_with("# cascade planning: challenge step"))
        .collect();
    assert!(challenges.len() >= 2, "{}", challenges.len());
    // The system prompt names the working directory; planning may write
    // only its own files.
    let system = bodies[0]["system"].as_str().unwrap();
    let root = std::fs::canonicalize(s.repo()).unwrap();
    assert!(
        system.contains(&format!("Primary working directory: {}", root.display())),
        "{system}"
    );
    assert!(system.contains("write only these files"), "{system}");
    assert!(
        !system.contains("RunGates"),
        "planning has no RunGates: {system}"
    );

    // The story runs kept their session, their log and their usage.
    let state: Value = crate::common::run_state(s.repo());
    let attempt = &state["stories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|st| st["id"] == "story-001")
        .unwrap()["attempts"][0];
    assert!(
        attempt["session_id"].as_str().unwrap().starts_with("api-"),
        "{attempt}"
    );
    assert!(attempt["cost_usd"].as_f64().unwrap() > 0.0, "{attempt}");
    let log = std::fs::read_to_string(attempt["log"].as_str().unwrap()).unwrap();
    assert!(
        log.contains("[tool] Write") && log.contains("[tool] RunGates"),
        "{log}"
    );
    assert!(log.contains("story-001: done, the gates pass"), "{log}");
}

#[test]
fn the_openai_wire_implements_a_story_with_the_tools() {
    let s = Setup::new();
    let model = mock_model::start(Wire::OpenAi, Mode::Work);
    s.agents(
        json!({"local": api(&model, Wire::OpenAi, json!({}))}),
        "local",
    );
    s.prd();
    let (out, evs) = s.approve(&[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(
        git(s.repo(), &["show", "main:story-001.txt"]),
        "story-001 fixed\n"
    );
    let finished = of_kind(&evs, "agent_finished");
    assert_eq!(finished[0]["success"], true);
    // Usage from the API's own fields: 1000 uncached + 200 cached per turn.
    assert!(
        finished[0]["input_tokens"].as_u64().unwrap() >= 1000,
        "{}",
        finished[0]
    );
    assert!(finished[0]["cost_usd"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_refused_key_fails_as_auth_at_once() {
    let s = Setup::new();
    let model = mock_model::start(Wire::Anthropic, Mode::Unauthorized);
    s.agents(json!({"a": api(&model, Wire::Anthropic, json!({}))}), "a");
    s.prd();
    let (_, evs) = s.approve(&["--max-retries", "2"]);
    let failed = failure(&evs);
    assert_eq!(failed["error_type"], "auth", "{failed}");
    assert_eq!(failed["attempts"], 1, "auth is not retried");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("HTTP 401") && error.contains(KEY_ENV),
        "{error}"
    );
    assert_eq!(model.bodies().len(), 1);
}

#[test]
fn a_rate_limit_cools_the_agent_down_and_costs_no_attempt() {
    let s = Setup::new();
    let model = mock_model::start(Wire::OpenAi, Mode::RateLimitedOnce);
    s.agents(json!({"a": api(&model, Wire::OpenAi, json!({}))}), "a");
    s.prd();
    let (out, evs) = s.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let cooldown = of_kind(&evs, "agent_cooldown");
    assert_eq!(cooldown.len(), 1, "{evs:#?}");
    assert_eq!(cooldown[0]["retry_after"], true);
    assert!(cooldown[0]["message"]
        .as_str()
        .unwrap()
        .contains("rate limit"));
    assert_eq!(
        of_kind(&evs, "attempt_failed")[0]["error_type"],
        "rate_limited"
    );
}

#[test]
fn server_errors_and_overload_fail_as_provider_error() {
    for (mode, said) in [
        (Mode::ServerError, "HTTP 500"),
        (Mode::Overloaded, "Overloaded"),
    ] {
        let s = Setup::new();
        let model = mock_model::start(Wire::Anthropic, mode.clone());
        s.agents(json!({"a": api(&model, Wire::Anthropic, json!({}))}), "a");
        s.prd();
        let (out, evs) = s.approve(&["--max-retries", "0"]);
        assert_eq!(code(&out), 1, "{}", explain(&out));
        let failed = failure(&evs);
        assert_eq!(failed["error_type"], "provider_error", "{mode:?}: {failed}");
        assert!(failed["error"].as_str().unwrap().contains(said), "{failed}");
    }
}

#[test]
fn a_server_that_never_answers_ends_at_the_agents_timeout() {
    let s = Setup::new();
    let model = mock_model::start(Wire::OpenAi, Mode::Hang);
    s.agents(
        json!({"a": api(&model, Wire::OpenAi, json!({"timeout": 2}))}),
        "a",
    );
    s.prd();
    let (out, evs) = s.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let failed = failure(&evs);
    assert_eq!(failed["error_type"], "timeout", "{failed}");
    assert_eq!(of_kind(&evs, "agent_finished")[0]["timed_out"], true);
}

#[test]
fn a_malformed_reply_is_a_clear_error_with_the_raw_excerpt() {
    let s = Setup::new();
    let model = mock_model::start(Wire::Anthropic, Mode::Malformed);
    s.agents(json!({"a": api(&model, Wire::Anthropic, json!({}))}), "a");
    s.prd();
    let (out, evs) = s.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let failed = failure(&evs);
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("malformed response") && error.contains("<html>upstream garbage</html>"),
        "{error}"
    );
}

#[test]
fn path_escapes_are_refused_as_tool_errors_and_write_nothing() {
    let s = Setup::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "the outside secret\n").unwrap();
    // A symlink in the repository that leads out of every worktree.
    std::os::unix::fs::symlink(outside.path(), s.repo().join("escape")).unwrap();
    let shown = outside.path().display().to_string();
    let model = mock_model::start(Wire::Anthropic, Mode::Escape(shown));
    s.agents(json!({"a": api(&model, Wire::Anthropic, json!({}))}), "a");
    s.prd();
    let (out, _) = s.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let results = model.tool_results(Wire::Anthropic);
    let refused: Vec<&(String, bool)> = results.iter().take(4).collect();
    assert_eq!(refused.len(), 4, "{results:#?}");
    for (content, is_error) in &refused {
        assert!(*is_error && content.starts_with("refused"), "{content}");
    }
    assert!(refused[0].0.contains("'..'"), "{}", refused[0].0);
    assert!(
        refused[1].0.contains("outside the working directory"),
        "{}",
        refused[1].0
    );
    assert!(
        refused[2].0.contains("outside the working directory"),
        "{}",
        refused[2].0
    );
    assert!(!outside.path().join("pwned.txt").exists());
    for body in model.bodies() {
        assert!(
            !body.to_string().contains("the outside secret"),
            "the secret leaked"
        );
    }
    // The story itself was done.
    assert_eq!(
        git(s.repo(), &["show", "main:story-001.txt"]),
        "story-001 fixed\n"
    );
}

/// The one-story plan run by `mode`'s model on `wire` with one retry:
/// the first attempt fails its gate, the retry fixes the file on main.
fn retried(wire: Wire, mode: Mode) -> (Setup, Model) {
    let s = Setup::new();
    let model = mock_model::start(wire, mode);
    s.agents(json!({"a": api(&model, wire, json!({}))}), "a");
    s.prd();
    let (out, evs) = s.approve(&["--max-retries", "1"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(
        of_kind(&evs, "attempt_failed")[0]["error_type"],
        "quality_gate"
    );
    assert_eq!(
        git(s.repo(), &["show", "main:story-001.txt"]),
        "story-001 fixed\n"
    );
    (s, model)
}

#[test]
fn a_retry_continues_the_conversation() {
    let (s, model) = retried(Wire::OpenAi, Mode::Retry);
    // The retry's first request carries the first attempt's prompt, its
    // Write call and the result, then the retry prompt.
    let bodies = model.bodies();
    let retry = bodies
        .iter()
        .find(|b| prompts(b, Wire::OpenAi).len() == 2)
        .expect("a request with both prompts");
    let said = prompts(retry, Wire::OpenAi);
    assert!(said[0].starts_with("# Story story-001:") && said[1].starts_with("# Story story-001:"));
    assert!(said[1].contains("quality gate"), "{}", said[1]);
    assert!(retry.to_string().contains("story-001 draft"), "{retry}");
    let state: Value = crate::common::run_state(s.repo());
    let attempts = state["stories"][0]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["session_id"], attempts[1]["session_id"]);
}

#[test]
fn an_empty_reply_after_tool_use_ends_the_turn_and_the_retry_still_continues() {
    // Every text answer is `content: []`; the mock refuses, as the live
    // API does, any request that resends an empty message. The first
    // attempt ends "done, nothing said" and fails its gate; the retry
    // continues the same conversation and fixes the file.
    let (_s, model) = retried(Wire::Anthropic, Mode::EmptyFinal);
    let bodies = model.bodies();
    assert!(
        bodies
            .iter()
            .any(|b| prompts(b, Wire::Anthropic).len() == 2),
        "no request continued the conversation"
    );
    for body in &bodies {
        for m in body["messages"].as_array().unwrap() {
            assert!(
                !m["content"].as_array().is_some_and(Vec::is_empty),
                "an empty message was sent: {body}"
            );
        }
    }
}

#[test]
fn agents_list_and_check_show_api_agents() {
    let s = Setup::new();
    let model = mock_model::start(Wire::Anthropic, Mode::Work);
    let mut wrong = api(
        &model,
        Wire::Anthropic,
        json!({"api_key_env": "MOCK_WRONG_KEY"}),
    );
    wrong["model"] = json!("mock-model");
    s.agents(
        json!({"good": api(&model, Wire::Anthropic, json!({})),
               "keyless": api(&model, Wire::Anthropic, json!({"api_key_env": "MOCK_UNSET_KEY"})),
               "wrong": wrong}),
        "good",
    );
    let list = |args: &[&str]| {
        let mut c = cascade(s.repo());
        c.env("PATH", s.tools().join("bin"))
            .env(KEY_ENV, KEY)
            .env("MOCK_WRONG_KEY", "not-the-key")
            .env_remove("MOCK_UNSET_KEY")
            .args(args)
            .arg("--agents")
            .arg(s.tools().join("agents.json"));
        c.output().unwrap()
    };
    let out = list(&["agents", "list", "--json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |name: &str| {
        v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(row("good")["type"], "api");
    assert_eq!(row("good")["found"], true);
    assert_eq!(row("good")["command"], "anthropic:mock-model");
    assert_eq!(row("good")["endpoint"], model.url);
    assert_eq!(row("keyless")["found"], false);
    let text = list(&["agents", "list"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("MOCK_UNSET_KEY is not set"), "{text}");

    let out = list(&["agents", "check", "--json"]);
    assert_eq!(code(&out), 1, "the wrong key fails: {}", explain(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = |name: &str| {
        v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(check("good")["status"], "ok", "{v:#}");
    assert_eq!(check("keyless")["status"], "missing");
    assert_eq!(check("keyless")["problems"][0]["kind"], "api_key");
    assert_eq!(check("wrong")["status"], "failed");
    assert!(check("wrong")["problems"][0]["message"]
        .as_str()
        .unwrap()
        .contains("HTTP 401"));

    // A run with only the keyless agent says which variable to set.
    s.agents(
        json!({"keyless": api(&model, Wire::Anthropic, json!({"api_key_env": "MOCK_UNSET_KEY"}))}),
        "keyless",
    );
    s.prd();
    let out = list(&["approve", "--auto-run"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("API key variable MOCK_UNSET_KEY is not set"),
        "{err}"
    );
}
