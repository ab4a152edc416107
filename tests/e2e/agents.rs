//! End-to-end tests: `cascade agents list` and `cascade agents resolve`, with
//! a fake PATH holding stub executables instead of real agent CLIs.

use std::path::{Path, PathBuf};

use predicates::prelude::*;
use serde_json::{json, Value};

use crate::common::{cascade, script, write_json};

/// A directory of stub agent commands, to be used as the whole PATH.
fn fake_path(root: &Path, stubs: &[(&str, &str)]) -> PathBuf {
    let bin = root.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, body) in stubs {
        script(&bin.join(name), body);
    }
    bin
}

fn prd(dir: &Path) {
    write_json(
        &dir.join("prd.json"),
        &json!({
            "metadata": {"version": "1.0.0"},
            "goal": "demo",
            "objectives": [],
            "stories": [
                {"id": "story-001", "title": "User profile page", "description": "Show the profile.",
                 "priority": "high", "dependencies": [], "status": "pending", "acceptance_criteria": []},
                {"id": "story-002", "title": "Fix the login crash", "description": "It panics.",
                 "priority": "medium", "dependencies": ["story-001"], "status": "pending", "acceptance_criteria": []},
                {"id": "story-003", "title": "Anything", "description": "", "agent": "aider",
                 "priority": "low", "dependencies": [], "status": "pending", "acceptance_criteria": []}
            ]
        }),
    );
}

fn stdout_json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn list_shows_found_missing_paths_and_versions() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_path(
        dir.path(),
        &[
            ("codex", "echo 'codex-cli 0.42.0'"),
            // Answers --version too slowly: listed without a version.
            ("aider", "exec /bin/sleep 30"),
            ("claude", "echo '' ; echo '1.0.99 (Claude Code)' >&2"),
        ],
    );
    let out = cascade(dir.path())
        .env("PATH", &bin)
        .args(["agents", "list", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stdout_json(&out);
    assert_eq!(v["source"], "built-in agents.json");
    assert_eq!(v["default_agent"], "claude-code");
    let agent = |name: &str| -> Value {
        v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not listed"))
    };
    let codex = agent("codex");
    assert_eq!(codex["found"], true);
    assert_eq!(codex["path"], bin.join("codex").display().to_string());
    assert_eq!(codex["version"], "codex-cli 0.42.0");
    let aider = agent("aider");
    assert_eq!(aider["found"], true);
    assert_eq!(aider["version"], Value::Null);
    let claude = agent("claude-code");
    assert_eq!(claude["type"], "task-tool");
    assert_eq!(claude["version"], "1.0.99 (Claude Code)");
    assert_eq!(claude["default"], true);
    let gemini = agent("gemini");
    assert_eq!(gemini["found"], false);
    assert_eq!(gemini["path"], Value::Null);

    cascade(dir.path())
        .env("PATH", &bin)
        .args(["agents", "list"])
        .assert()
        .success()
        .stdout(predicate::str::contains("agents from built-in agents.json"))
        .stdout(
            predicate::str::is_match(
                r"codex\s+cli\s+codex\s+found\s+\S*fakebin/codex\s+\(codex-cli 0.42.0\)",
            )
            .unwrap(),
        )
        .stdout(predicate::str::is_match(r"gemini\s+cli\s+gemini\s+missing").unwrap());
}

#[test]
fn list_uses_the_project_agents_json_and_reports_config_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_path(dir.path(), &[("mytool", "echo mytool 1")]);
    write_json(
        &dir.path().join("agents.json"),
        &json!({"default_agent": "mine", "agents": {"mine": {"type": "cli", "command": "mytool",
            "version_args": ["--version"]}}}),
    );
    let out = cascade(dir.path())
        .env("PATH", &bin)
        .args(["agents", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v = stdout_json(&out);
    assert!(v["source"].as_str().unwrap().ends_with("agents.json"));
    assert_eq!(v["agents"][0]["name"], "mine");
    assert_eq!(v["agents"][0]["version"], "mytool 1");

    write_json(
        &dir.path().join("bad.json"),
        &json!({"agents": {"codex": {"type": "cli", "command": "codex"}},
                "phase_defaults": {"retry": {"default_agent": "codex", "fallback_chain": ["codex", "foo"]}}}),
    );
    cascade(dir.path())
        .env("PATH", &bin)
        .args(["agents", "list", "--agents", "bad.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "bad.json: phase_defaults.retry.fallback_chain[1]: unknown agent 'foo'",
        ))
        .stderr(predicate::str::starts_with("error: "));

    std::fs::write(dir.path().join("broken.json"), "{\n  \"agents\": [\n").unwrap();
    cascade(dir.path())
        .args(["agents", "list", "--agents", "broken.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("broken.json:3:"));

    cascade(dir.path())
        .args(["agents", "list", "--agents", "nope.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nope.json' does not exist"));
}

#[test]
fn resolve_json_has_reasons_and_fallbacks() {
    let dir = tempfile::tempdir().unwrap();
    prd(dir.path());
    // codex and claude installed; aider missing.
    let bin = fake_path(dir.path(), &[("codex", "exit 0"), ("claude", "exit 0")]);
    let out = cascade(dir.path())
        .env("PATH", &bin)
        .args(["agents", "resolve", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stdout_json(&out);
    let a = v["assignments"].as_array().unwrap();
    assert_eq!(a.len(), 3);
    assert_eq!(a[0]["story"], "story-001");
    assert_eq!(a[0]["agent"], "claude-code");
    assert_eq!(a[0]["reason"], "implementation phase default");
    assert_eq!(a[0]["fallbacks"], json!([]));
    assert_eq!(a[1]["agent"], "codex");
    assert_eq!(a[1]["story_type"], "bugfix");
    assert!(a[1]["reason"]
        .as_str()
        .unwrap()
        .starts_with("story type 'bugfix'"));
    // story.agent = aider is not installed: the phase default takes over.
    assert_eq!(a[2]["agent"], "claude-code");
    assert_eq!(
        a[2]["fallbacks"],
        json!([{"from": "aider", "to": "claude-code", "why": "CLI 'aider' not found"}])
    );
}

#[test]
fn resolve_human_output_and_overrides() {
    let dir = tempfile::tempdir().unwrap();
    prd(dir.path());
    let bin = fake_path(dir.path(), &[("codex", "exit 0"), ("aider", "exit 0")]);
    cascade(dir.path())
        .env("PATH", &bin)
        .args(["agents", "resolve", "--phase", "retry"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "retry phase, agents from built-in agents.json",
        ))
        .stdout(
            predicate::str::is_match(r"story-001\s+aider\s+\(retry fallback chain #1\)").unwrap(),
        )
        .stdout(predicate::str::contains(
            "[FALLBACK] claude-code -> aider: CLI 'claude' not found",
        ));

    let out = cascade(dir.path())
        .env("PATH", &bin)
        .args(["agents", "resolve", "--json", "--impl-agent", "codex"])
        .output()
        .unwrap();
    let v = stdout_json(&out);
    assert!(v["assignments"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["agent"] == "codex" && a["reason"] == "--impl-agent"));
}

#[test]
fn resolve_unknown_agent_exits_2_naming_known_agents() {
    let dir = tempfile::tempdir().unwrap();
    prd(dir.path());
    cascade(dir.path())
        .args(["agents", "resolve", "--agent", "foo"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "unknown agent 'foo' given to --agent",
        ))
        .stderr(predicate::str::contains(
            "claude-code, claude-cli, codex, aider",
        ));
}

#[test]
fn resolve_with_nothing_installed_exits_2_listing_candidates() {
    let dir = tempfile::tempdir().unwrap();
    prd(dir.path());
    let bin = fake_path(dir.path(), &[]);
    let out = cascade(dir.path())
        .env("PATH", &bin)
        .args(["agents", "resolve", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "no agent available is exit 2");
    let v = stdout_json(&out);
    assert_eq!(v["assignments"][0]["agent"], Value::Null);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: no agent available for story-001 (implementation phase); tried:"),
        "{err}"
    );
    assert!(
        err.contains("codex (implementation fallback chain #1): CLI 'codex' not found"),
        "{err}"
    );
    assert!(
        err.contains("claude-code (implementation phase default): CLI 'claude' not found"),
        "{err}"
    );

    // --no-fallback takes the first candidate only: gemini is not
    // installed, so the story has no agent (exit 2), and nothing else was
    // tried. Installed, it is taken without its flags being checked.
    let resolve_gemini = |bin: &Path| {
        let out = cascade(dir.path())
            .env("PATH", bin)
            .args([
                "agents",
                "resolve",
                "--json",
                "--agent",
                "gemini",
                "--no-fallback",
            ])
            .output()
            .unwrap();
        (
            out.status.code(),
            stdout_json(&out),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, v, err) = resolve_gemini(&bin);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(v["assignments"][1]["agent"], Value::Null);
    assert!(
        err.contains("gemini (--agent): CLI 'gemini' not found")
            && err.contains("--no-fallback was given, so no other candidate was tried"),
        "{err}"
    );
    let (code, v, err) = resolve_gemini(&fake_path(dir.path(), &[("gemini", "exit 0")]));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(v["assignments"][1]["agent"], "gemini");
    assert_eq!(
        v["assignments"][1]["reason"],
        "--agent (flags not checked: --no-fallback)"
    );
}

#[test]
fn resolve_bad_inputs_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    cascade(dir.path())
        .args(["agents", "resolve"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("prd.json"));
    prd(dir.path());
    cascade(dir.path())
        .args(["agents", "resolve", "--phase", "deploy"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown phase 'deploy'"));
}

#[test]
fn detection_cache_lives_in_dot_cascade_and_refresh_ignores_it() {
    let repo = crate::common::init_repo();
    let dir = repo.path();
    prd(dir);
    let bin = fake_path(dir, &[("claude", "exit 0")]);
    let resolve_agent = |refresh: bool| -> String {
        let mut cmd = cascade(dir);
        cmd.env("PATH", &bin).args(["agents", "resolve", "--json"]);
        if refresh {
            cmd.arg("--refresh");
        }
        let out = cmd.output().unwrap();
        stdout_json(&out)["assignments"][1]["agent"]
            .as_str()
            .unwrap_or("none")
            .to_string()
    };
    assert_eq!(resolve_agent(false), "claude-code");
    assert!(dir.join(".cascade/agent-detection.json").is_file());
    // Installed after the first lookup: the cached answer holds for the TTL...
    script(&bin.join("codex"), "exit 0");
    assert_eq!(resolve_agent(false), "claude-code");
    // ...until --refresh.
    assert_eq!(resolve_agent(true), "codex");
    // .cascade/ stays out of git status.
    let status = crate::common::git(dir, &["status", "--porcelain"]);
    assert!(!status.contains(".cascade"), "{status}");
}

#[test]
fn list_probes_versions_outside_the_checkout_and_hides_binary_noise() {
    // A wrapper that ignores `--version` and does its usual work (writes a
    // file where it runs, dumps bytes): `agents list` must not leave that
    // file in the user's directory, nor print the bytes as a version.
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_path(
        dir.path(),
        &[
            (
                "wrapper",
                "echo work > made-by-wrapper.txt; echo 'wrapper 2.1'",
            ),
            ("noisy", "printf '\\377\\376\\001garbage\\n'"),
            (
                "script-agent",
                &format!("touch '{}'", dir.path().join("script-ran").display()),
            ),
        ],
    );
    write_json(
        &dir.path().join("agents.json"),
        &json!({"default_agent": "w", "agents": {
            "w": {"type": "cli", "command": "wrapper", "version_args": ["--version"]},
            "n": {"type": "cli", "command": "noisy", "version_args": ["--version"]},
            "s": {"type": "cli", "command": "script-agent"}}}),
    );
    let out = cascade(dir.path())
        .env("PATH", &bin)
        .args(["agents", "list", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stdout_json(&out);
    assert_eq!(v["agents"][0]["version"], "wrapper 2.1");
    assert_eq!(v["agents"][1]["found"], true);
    assert_eq!(v["agents"][1]["version"], Value::Null);
    assert!(
        !dir.path().join("made-by-wrapper.txt").exists(),
        "the probe ran in the user's directory"
    );
    // A custom script without `version_args` is not run at all: listed as
    // found, without a version.
    assert_eq!(v["agents"][2]["found"], true);
    assert_eq!(v["agents"][2]["version"], Value::Null);
    assert!(
        !dir.path().join("script-ran").exists(),
        "the script was run"
    );
}

#[test]
fn config_errors_name_each_problem_once_and_a_directory_is_not_missing() {
    let dir = tempfile::tempdir().unwrap();
    write_json(
        &dir.path().join("agents.json"),
        &json!({"default_agent": "ok", "agents": {"ok": {"type": "cli", "args": ["{prompt}"]}}}),
    );
    let out = cascade(dir.path())
        .args(["agents", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("agents.ok.command: missing command"), "{err}");
    assert!(
        !err.contains("unknown agent 'ok'"),
        "misleading second error: {err}"
    );

    let out = cascade(dir.path())
        .args(["agents", "list", "--agents", "."])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("is a directory"), "{err}");
}

#[test]
fn a_command_that_is_not_executable_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_path(dir.path(), &[("codex", "exit 0")]);
    let plain = dir.path().join("plain-agent.sh");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    prd(dir.path());
    write_json(
        &dir.path().join("agents.json"),
        &json!({"default_agent": "plain", "agents": {
            "plain": {"type": "cli", "command": plain},
            "codex": {"type": "cli", "command": "codex"}},
            "phase_defaults": {"implementation": {"default_agent": "plain", "fallback_chain": ["codex"]}}}),
    );
    let out = cascade(dir.path())
        .env("PATH", &bin)
        .args(["agents", "resolve", "--json"])
        .output()
        .unwrap();
    let v = stdout_json(&out);
    let why = v["assignments"][0]["fallbacks"][0]["why"]
        .as_str()
        .unwrap_or("");
    assert!(why.contains("is not executable"), "{v}");
}
