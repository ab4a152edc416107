//! Tests of agents.json loading and validation.

use super::*;

fn invalid(text: &str) -> Vec<String> {
    match AgentsConfig::parse(text, "agents.json") {
        Err(ConfigError::Invalid { file, problems, .. }) => problems
            .iter()
            .map(|p| format!("{file}: {}: {}", p.key, p.message))
            .collect(),
        other => panic!("expected invalid config, got {other:?}"),
    }
}

#[test]
fn builtin_config_is_valid_and_complete() {
    let c = AgentsConfig::builtin().unwrap();
    assert_eq!(c.default_agent, "claude-code");
    for name in [
        "claude-code",
        "codex",
        "aider",
        "amp-code",
        "cursor-agent",
        "gemini",
    ] {
        assert!(c.agent(name).is_some(), "missing {name}");
    }
    let claude = c.agent("claude-code").unwrap();
    assert_eq!(claude.kind, AgentKind::TaskTool);
    assert_eq!(claude.command, "claude");
    assert!(claude.args.iter().any(|a| a == "stream-json"));
    assert!(c
        .agent("codex")
        .unwrap()
        .args
        .starts_with(&["exec".to_string()]));
    // No shipped `merge` default on purpose: without one, the story's own
    // agent resolves its merge conflicts.
    for phase in Phase::ALL.into_iter().filter(|p| *p != Phase::Merge) {
        assert!(c.phase(phase).is_some(), "missing phase {phase}");
    }
    assert!(c.phase(Phase::Merge).is_none());
    let imp = c.phase(Phase::Implementation).unwrap();
    assert_eq!(imp.default_agent.as_deref(), Some("claude-code"));
    assert_eq!(imp.fallback_chain, ["codex", "aider"]);
    assert_eq!(imp.override_for("bugfix"), Some("codex"));
    assert_eq!(imp.override_for("refactor"), Some("aider"));
}

#[test]
fn plan_cascade_minimal_file_loads() {
    let text = r#"{
      "default_agent": "claude-code",
      "agents": {
        "claude-code": {"type": "task-tool", "subagent_type": "general-purpose"},
        "codex": {"type": "cli", "command": "codex", "args": ["--prompt", "{prompt}"],
                  "working_dir": "{working_dir}", "timeout": 600, "env": {}},
        "aider": {"type": "cli", "command": "aider"},
        "amp-code": {"type": "cli", "command": "amp", "timeout": 1.5}
      },
      "phase_defaults": {
        "implementation": {"default_agent": "claude-code", "fallback_chain": ["codex", "aider"],
          "story_type_overrides": {"refactor": "aider", "bugfix": "codex"}}
      },
      "story_type_defaults": {"feature": "claude-code"},
      "verification_gate": {"enabled": true}
    }"#;
    let c = AgentsConfig::parse(text, "agents.json").unwrap();
    assert_eq!(c.names(), ["claude-code", "codex", "aider", "amp-code"]);
    assert_eq!(
        c.agent("amp-code").unwrap().timeout(),
        Duration::from_secs(2)
    );
    let claude = c.agent("claude-code").unwrap();
    assert_eq!(claude.command, "claude");
    assert!(claude.args.contains(&"{prompt}".to_string()));
    let codex = c.agent("codex").unwrap();
    assert_eq!(codex.timeout(), Duration::from_secs(600));
    assert_eq!(codex.working_dir.as_deref(), Some("{working_dir}"));
    assert_eq!(c.agent("aider").unwrap().timeout(), DEFAULT_AGENT_TIMEOUT);
}

#[test]
fn claude_code_is_implied_when_named_but_not_defined() {
    let c = AgentsConfig::parse(
        r#"{"agents": {"codex": {"type": "cli", "command": "codex"}}}"#,
        "agents.json",
    )
    .unwrap();
    assert_eq!(c.default_agent, "claude-code");
    assert_eq!(c.agent("claude-code").unwrap().kind, AgentKind::TaskTool);
}

#[test]
fn unknown_agent_in_a_chain_names_file_and_key_path() {
    let errs = invalid(
        r#"{"agents": {"codex": {"type": "cli", "command": "codex"}},
            "phase_defaults": {"retry": {"default_agent": "codex", "fallback_chain": ["codex", "foo"]}}}"#,
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with(
            "agents.json: phase_defaults.retry.fallback_chain[1]: unknown agent 'foo'"
        ),
        "{}",
        errs[0]
    );
    assert!(errs[0].contains("known: codex, claude-code"), "{}", errs[0]);
}

#[test]
fn every_problem_is_reported_at_once() {
    let errs = invalid(
        r#"{"default_agent": "nope",
            "agents": {
              "a": {"type": "cli"},
              "b": {"type": "cli", "command": "b", "args": ["{promt}", 3], "timeout": "10", "env": {"X": []}},
              "c": {"type": "robot", "command": "c"}
            },
            "phase_defaults": {"review": {"story_type_overrides": {"bugfix": "zzz"}}}}"#,
    );
    let all = errs.join("\n");
    for needle in [
        "agents.json: agents.a.command: missing command",
        "agents.json: agents.b.args[0]: unknown placeholder '{promt}'",
        "agents.json: agents.b.args[1]: expected a string, found a number",
        "agents.json: agents.b.timeout: expected a positive number of seconds",
        "agents.json: agents.b.env.X: expected a string value",
        "agents.json: agents.c.type: unknown agent type 'robot'",
        "agents.json: default_agent: unknown agent 'nope'",
        "agents.json: phase_defaults.review.story_type_overrides.bugfix: unknown agent 'zzz'",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    // The Display of the error carries them all, one per line.
    let err = AgentsConfig::parse(r#"{"default_agent": 5}"#, "x/agents.json").unwrap_err();
    assert_eq!(
        err.to_string(),
        "x/agents.json: default_agent: expected a string, found a number"
    );
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let err = AgentsConfig::parse("{\n  \"agents\": {,}\n}", "agents.json").unwrap_err();
    match &err {
        ConfigError::Syntax { line, column, .. } => {
            assert_eq!(*line, 2);
            assert!(*column > 0);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().starts_with("agents.json:2:"), "{err}");
}

#[test]
fn unknown_phases_are_warnings() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agents.json"),
        r#"{"phase_defaults": {"deploy": {"default_agent": "claude-code"}}}"#,
    )
    .unwrap();
    let loaded = AgentsConfig::load_with(None, dir.path(), None).unwrap();
    assert_eq!(loaded.warnings.len(), 1);
    assert!(loaded.warnings[0].contains("unknown phase 'deploy'"));
}

#[test]
fn unknown_fields_are_warnings_naming_the_closest_known_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agents.json"),
        r#"{"$schema": "./agents.schema.json", "description": "Plan Cascade's",
            "verification_gate": {"enabled": true}, "defualt_agent": "codex",
            "agents": {"codex": {"type": "cli", "command": "codex", "timout": 5,
                                 "subagent_type": "general-purpose"}},
            "phase_defaults": {"implementation": {"default_agent": "codex",
                                                  "fallback_chian": ["codex"]}}}"#,
    )
    .unwrap();
    let loaded = AgentsConfig::load_with(None, dir.path(), None).unwrap();
    assert_eq!(
        loaded.warnings,
        [
            "agents.codex.timout: unknown field (did you mean 'timeout'?); it is ignored",
            "phase_defaults.implementation.fallback_chian: unknown field (did you mean 'fallback_chain'?); it is ignored",
            "defualt_agent: unknown field (did you mean 'default_agent'?); it is ignored",
        ]
    );
    // The shipped file uses no field cascade does not know.
    let shipped = AgentsConfig::load_with(None, &dir.path().join("none"), None).unwrap();
    assert!(shipped.warnings.is_empty(), "{:?}", shipped.warnings);
}

#[test]
fn lookup_order_explicit_project_user_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("proj");
    let user = dir.path().join("xdg");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(user.join("cascade")).unwrap();
    let one = |name: &str| format!(r#"{{"agents": {{"{name}": {{"command": "{name}"}}}}}}"#);

    // Nothing on disk: built in.
    let l = AgentsConfig::load_with(None, &cwd, Some(&user)).unwrap();
    assert_eq!(l.source, ConfigSource::BuiltIn);
    assert!(l.config.agent("codex").is_some());

    std::fs::write(user.join("cascade/agents.json"), one("useragent")).unwrap();
    let l = AgentsConfig::load_with(None, &cwd, Some(&user)).unwrap();
    assert!(matches!(l.source, ConfigSource::User(_)));
    assert!(l.config.agent("useragent").is_some());

    std::fs::write(cwd.join("agents.json"), one("projagent")).unwrap();
    let l = AgentsConfig::load_with(None, &cwd, Some(&user)).unwrap();
    assert!(matches!(l.source, ConfigSource::Project(_)));
    assert!(l.config.agent("projagent").is_some());

    std::fs::write(dir.path().join("mine.json"), one("mine")).unwrap();
    let l = AgentsConfig::load_with(Some(Path::new("../mine.json")), &cwd, Some(&user)).unwrap();
    assert!(matches!(l.source, ConfigSource::Explicit(_)));
    assert!(l.config.agent("mine").is_some());

    let err = AgentsConfig::load_with(Some(Path::new("missing.json")), &cwd, None).unwrap_err();
    assert!(matches!(err, ConfigError::NotFound { .. }));
    assert!(err.to_string().contains("missing.json"));
}

#[test]
fn invalid_file_names_its_path() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agents.json"),
        r#"{"agents": {"x": {"type": "cli", "command": ""}}}"#,
    )
    .unwrap();
    let err = AgentsConfig::load_with(None, dir.path(), None).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("agents.json: agents.x.command: must not be empty"),
        "{text}"
    );
    assert!(
        text.starts_with(&dir.path().display().to_string()),
        "{text}"
    );
}

#[test]
fn a_rejected_agent_is_not_reported_again_as_unknown() {
    // The agent is defined but broken: one problem (its command), not a
    // second, misleading "unknown agent" for every place that names it.
    let errs = invalid(
        r#"{"default_agent": "ok", "agents": {"ok": {"type": "cli"}},
            "phase_defaults": {"implementation": {"default_agent": "ok", "fallback_chain": ["ok", "zzz"]}}}"#,
    );
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0].contains("agents.ok.command: missing command"),
        "{errs:?}"
    );
    assert!(
        errs[1].contains("fallback_chain[1]: unknown agent 'zzz'"),
        "{errs:?}"
    );
}

#[test]
fn explicit_directory_is_not_called_missing() {
    let dir = tempfile::tempdir().unwrap();
    let err = AgentsConfig::load_with(Some(dir.path()), dir.path(), None).unwrap_err();
    assert!(matches!(err, ConfigError::NotAFile { .. }), "{err:?}");
    assert!(err.to_string().contains("is a directory"), "{err}");
}

#[test]
fn absurd_timeouts_are_config_errors() {
    for t in ["1e30", "18446744073709551615", "2592001"] {
        let errs = invalid(&format!(
            r#"{{"default_agent": "a", "agents": {{"a": {{"command": "x", "timeout": {t}}}}}}}"#
        ));
        assert!(
            errs.iter()
                .any(|e| e.contains("agents.a.timeout: at most 2592000 seconds")),
            "{t}: {errs:?}"
        );
    }
    let ok = AgentsConfig::parse(
        r#"{"default_agent": "a", "agents": {"a": {"command": "x", "timeout": 2592000}}}"#,
        "agents.json",
    )
    .unwrap();
    assert_eq!(ok.agent("a").unwrap().timeout_secs, Some(2_592_000));
}

#[test]
fn a_byte_order_mark_is_accepted() {
    let c = AgentsConfig::parse(
        "\u{feff}{\"default_agent\": \"a\", \"agents\": {\"a\": {\"command\": \"x\"}}}",
        "agents.json",
    )
    .unwrap();
    assert_eq!(c.default_agent, "a");
}

#[test]
fn resume_and_list_sessions_args_are_read_and_checked() {
    let text = r#"{
      "agents": {
        "g": { "type": "cli", "command": "gemini", "args": ["-p", "{prompt}"],
               "resume_args": ["--resume", "{session_index}", "-p", "{prompt}"],
               "list_sessions_args": ["--list-sessions"] },
        "plain": { "type": "cli", "command": "x" }
      }
    }"#;
    let c = AgentsConfig::parse(text, "agents.json").unwrap();
    let g = c.agent("g").unwrap();
    assert_eq!(
        g.resume_args.as_deref(),
        Some(
            &[
                "--resume".to_string(),
                "{session_index}".into(),
                "-p".into(),
                "{prompt}".into()
            ][..]
        )
    );
    assert_eq!(
        g.list_sessions_args.as_deref(),
        Some(&["--list-sessions".to_string()][..])
    );
    assert_eq!(c.agent("plain").unwrap().resume_args, None);

    let problems = invalid(
        r#"{"agents": {"b": {"command": "b", "resume_args": ["{sesion_id}"], "list_sessions_args": "x"}}}"#,
    );
    assert!(
        problems.iter().any(|p| p.starts_with(
            "agents.json: agents.b.resume_args[0]: unknown placeholder '{sesion_id}'"
        )),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p == "agents.json: agents.b.list_sessions_args: expected an array of strings"),
        "{problems:?}"
    );
    // `{session_id}` belongs in resume_args only.
    let problems = invalid(r#"{"agents": {"b": {"command": "b", "args": ["{session_id}"]}}}"#);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("unknown placeholder '{session_id}'")),
        "{problems:?}"
    );
}

#[test]
fn prices_are_read_and_bad_ones_named() {
    let c = AgentsConfig::parse(
        r#"{"agents": {"a": {"type": "cli", "command": "a"}},
            "prices": {"gpt-5": {"input": 1.25, "output": 10, "cached_input": 0.125}}}"#,
        "agents.json",
    )
    .unwrap();
    assert_eq!(c.prices.overrides.len(), 1);
    assert_eq!(c.prices.overrides[0].0, "gpt-5");
    assert_eq!(c.prices.overrides[0].1.cached_input, Some(0.125));
    let err = AgentsConfig::parse(
        r#"{"agents": {"a": {"type": "cli", "command": "a"}},
            "prices": {"m": {"input": -1, "output": "x"}, "n": 3}}"#,
        "agents.json",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("prices.m.input"), "{err}");
    assert!(err.contains("prices.m.output"), "{err}");
    assert!(err.contains("prices.n"), "{err}");
}

#[test]
fn api_agents_load_with_defaults_per_provider() {
    let text = r#"{"default_agent": "claude-api", "agents": {
        "claude-api": {"type": "api", "provider": "anthropic", "model": "claude-sonnet-4-5",
                       "price": {"input": 3, "output": 15}},
        "gpt": {"type": "api", "provider": "openai", "model": "gpt-5", "max_turns": 10, "timeout": 90},
        "local": {"type": "api", "provider": "openai", "model": "qwen", "base_url": "http://127.0.0.1:11434/v1/"},
        "keyed-local": {"type": "api", "provider": "openai", "model": "qwen",
                        "base_url": "http://127.0.0.1:8000", "api_key_env": "VLLM_KEY"},
        "no-key": {"type": "api", "provider": "anthropic", "model": "m", "api_key_env": null}}}"#;
    let c = AgentsConfig::parse(text, "agents.json").unwrap();
    let a = c.agent("claude-api").unwrap();
    assert_eq!(a.kind, AgentKind::Api);
    assert_eq!(a.command, "anthropic:claude-sonnet-4-5");
    assert!(a.can_resume());
    let api = a.api.as_ref().unwrap();
    assert_eq!(
        api.endpoint("messages"),
        "https://api.anthropic.com/v1/messages"
    );
    assert_eq!(api.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
    assert_eq!(
        (api.max_tokens, api.max_turns),
        (DEFAULT_MAX_TOKENS, DEFAULT_MAX_TURNS)
    );
    assert_eq!(api.price.unwrap().output, 15.0);
    let gpt = c.agent("gpt").unwrap();
    assert_eq!(gpt.timeout_secs, Some(90));
    let gpt = gpt.api.as_ref().unwrap();
    assert_eq!(gpt.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
    assert_eq!(gpt.max_turns, 10);
    // A server of one's own needs no key unless it says so; `/v1` is not doubled.
    let local = c.agent("local").unwrap().api.as_ref().unwrap();
    assert_eq!(local.api_key_env, None);
    assert_eq!(
        local.endpoint("chat/completions"),
        "http://127.0.0.1:11434/v1/chat/completions"
    );
    assert_eq!(local.key(), Ok(None));
    let keyed = c.agent("keyed-local").unwrap().api.as_ref().unwrap();
    assert_eq!(keyed.api_key_env.as_deref(), Some("VLLM_KEY"));
    assert_eq!(
        c.agent("no-key").unwrap().api.as_ref().unwrap().api_key_env,
        None
    );
}

#[test]
fn api_agent_problems_name_their_field() {
    let problems = invalid(
        r#"{"default_agent": "a", "agents": {
        "a": {"type": "api", "model": "m"},
        "b": {"type": "api", "provider": "gemini", "model": "m"},
        "c": {"type": "api", "provider": "openai"},
        "d": {"type": "api", "provider": "openai", "model": "m", "base_url": "localhost:11434"},
        "e": {"type": "api", "provider": "openai", "model": "m", "max_turns": 0, "max_tokens": -1},
        "f": {"type": "api", "provider": "openai", "model": "m", "price": {"input": 1}},
        "g": {"type": "web"}}}"#,
    );
    let joined = problems.join("\n");
    for needle in [
        "agents.a.provider: missing provider",
        "agents.b.provider: unknown provider 'gemini'",
        "agents.c.model: missing model",
        "agents.d.base_url: 'localhost:11434' is not an http:// or https:// URL",
        "agents.e.max_tokens: expected a whole number above 0",
        "agents.e.max_turns: expected a whole number above 0",
        "agents.f.price.output",
        "agents.g.type: unknown agent type 'web' (expected \"cli\", \"task-tool\" or \"api\")",
    ] {
        assert!(joined.contains(needle), "missing {needle:?} in:\n{joined}");
    }
}

#[test]
fn cli_fields_on_an_api_agent_are_warned_about() {
    let loaded = AgentsConfig::parse_with_warnings(
        r#"{"default_agent": "a", "phase_defaults": {}, "agents": {"a": {"type": "api", "provider": "openai",
            "model": "m", "command": "ollama", "args": ["run"]}}}"#,
        "agents.json",
    )
    .unwrap();
    assert_eq!(loaded.1.len(), 2, "{:?}", loaded.1);
    assert!(
        loaded.1[0].contains("agents.a.command: ignored"),
        "{:?}",
        loaded.1
    );
    // Every field of an api agent is known to the unknown-field check.
    let (_, warnings) = AgentsConfig::parse_with_warnings(
        r#"{"default_agent": "a", "agents": {"a": {"type": "api", "provider": "anthropic",
            "model": "m", "base_url": "http://127.0.0.1:1", "api_key_env": "K",
            "max_tokens": 10, "max_turns": 3, "timeout": 5, "description": "d",
            "price": {"input": 1, "output": 2}, "max_turn": 4}}}"#,
        "agents.json",
    )
    .unwrap();
    assert_eq!(
        warnings,
        [
            "agents.a.max_turn: unknown field (did you mean 'max_turns'?); it is ignored",
            "no phase_defaults: every phase uses default_agent 'a' (Plan Cascade would pick per phase from its built-in table; see docs/plan-cascade.md)"
        ]
    );
}

#[test]
fn an_agent_connects_to_its_declared_ports_else_443_and_to_its_proxy() {
    let none = |_: &str| None;
    let declared = AgentSandbox {
        net_ports: vec![8443, 443],
        ..AgentSandbox::default()
    };
    assert_eq!(declared.connect_ports(none), [8443, 443]);
    assert_eq!(
        AgentSandbox::default().connect_ports(none),
        DEFAULT_NET_PORTS
    );
    let env = |v: &str| match v {
        "HTTPS_PROXY" => Some("http://user:pw@proxy.corp:3128".to_string()),
        "http_proxy" => Some("proxy.corp:8080".to_string()),
        "ALL_PROXY" => Some("socks5://127.0.0.1".to_string()),
        "all_proxy" => Some("https://proxy.corp".to_string()),
        _ => None,
    };
    // A SOCKS proxy without a port names none that is known: left out.
    assert_eq!(
        AgentSandbox::default().connect_ports(env),
        [443, 3128, 8080]
    );
}

#[test]
fn an_agents_policy_adds_its_writable_paths_and_limits_its_ports() {
    let base = cascade_process::sandbox::Policy {
        write: vec!["/wt".into()],
        ..Default::default()
    };
    let agent = AgentSandbox {
        write: vec!["/opt/state".into()],
        net_ports: vec![8443],
    };
    let p = agent.policy(&base);
    assert_eq!(
        p.write,
        [std::path::PathBuf::from("/wt"), "/opt/state".into()]
    );
    // The declared port, and a proxy's if this environment names one.
    let ports = p.connect_ports.unwrap_or_default();
    assert_eq!(ports.first(), Some(&8443), "{ports:?}");
    assert_eq!(ports, agent.connect_ports(|v| std::env::var(v).ok()));
}
