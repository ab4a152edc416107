//! Every level of the chain and its fallbacks, with a fake PATH of stubs.

use super::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const CONFIG: &str = r#"{
  "default_agent": "claude-code",
  "agents": {
    "claude-code": {"type": "task-tool"},
    "codex": {"type": "cli", "command": "codex"},
    "aider": {"type": "cli", "command": "aider"},
    "amp-code": {"type": "cli", "command": "amp"},
    "gemini": {"type": "cli", "command": "gemini"}
  },
  "phase_defaults": {
    "implementation": {"default_agent": "amp-code", "fallback_chain": ["codex", "aider"],
                        "story_type_overrides": {"bugfix": "gemini", "refactor": "aider"}},
    "retry": {"default_agent": "aider", "fallback_chain": ["codex"]},
    "review": {"default_agent": "codex"}
  }
}"#;

struct World {
    _dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    config: AgentsConfig,
}

impl World {
    fn new(installed: &[&str]) -> World {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        for cmd in installed {
            let p = bin.join(cmd);
            std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        World {
            config: AgentsConfig::parse(CONFIG, "agents.json").unwrap(),
            bin,
            _dir: dir,
        }
    }

    fn detector(&self) -> Detector {
        Detector::with_path(&self.bin, Path::new("/"))
    }

    fn resolve(
        &self,
        story: &Story,
        phase: Phase,
        o: Overrides,
    ) -> Result<Assignment, ResolveError> {
        let d = self.detector();
        Resolver::new(&self.config, &d, o).resolve(story, phase)
    }
}

const ALL: &[&str] = &["claude", "codex", "aider", "amp", "gemini"];

fn story(title: &str) -> Story {
    Story::new("story-001", title)
}

fn with_agent(title: &str, agent: &str) -> Story {
    let mut s = story(title);
    s.agent = Some(agent.to_string());
    s
}

#[test]
fn level1_cli_agent_beats_everything() {
    let w = World::new(ALL);
    let o = Overrides {
        agent: Some("codex".into()),
        impl_agent: Some("aider".into()),
        ..Default::default()
    };
    let a = w
        .resolve(&with_agent("Fix crash", "gemini"), Phase::Implementation, o)
        .unwrap();
    assert_eq!(a.agent, "codex");
    assert_eq!(a.level, Level::CliAgent);
    assert_eq!(a.reason, "--agent");
    assert!(a.fallbacks.is_empty());
}

#[test]
fn level2_phase_override_only_for_its_phase() {
    let w = World::new(ALL);
    let o = Overrides {
        impl_agent: Some("aider".into()),
        retry_agent: Some("gemini".into()),
        prd_agent: Some("codex".into()),
        ..Default::default()
    };
    let s = with_agent("Thing", "amp-code");
    let a = w.resolve(&s, Phase::Implementation, o.clone()).unwrap();
    assert_eq!(
        (a.agent.as_str(), a.level, a.reason.as_str()),
        ("aider", Level::PhaseOverride, "--impl-agent")
    );
    let a = w.resolve(&s, Phase::Retry, o.clone()).unwrap();
    assert_eq!(
        (a.agent.as_str(), a.reason.as_str()),
        ("gemini", "--retry-agent")
    );
    let a = w.resolve(&s, Phase::Planning, o.clone()).unwrap();
    assert_eq!(
        (a.agent.as_str(), a.reason.as_str()),
        ("codex", "--prd-agent")
    );
    // Review has no override given: the review phase's default comes before
    // story.agent (which names the author).
    let a = w.resolve(&s, Phase::Review, o).unwrap();
    assert_eq!((a.agent.as_str(), a.level), ("codex", Level::PhaseDefault));
}

#[test]
fn the_chosen_reviewer_comes_before_the_authors_agent() {
    let w = World::new(ALL);
    let s = story("Thing");
    // --review-agent beats --agent in the review phase only.
    let o = Overrides {
        agent: Some("aider".into()),
        review_agent: Some("gemini".into()),
        ..Default::default()
    };
    let a = w.resolve(&s, Phase::Review, o.clone()).unwrap();
    assert_eq!(
        (a.agent.as_str(), a.level, a.reason.as_str()),
        ("gemini", Level::PhaseOverride, "--review-agent")
    );
    let a = w.resolve(&s, Phase::Implementation, o).unwrap();
    assert_eq!((a.agent.as_str(), a.level), ("aider", Level::CliAgent));
    // Without --review-agent, agents.json's review phase (codex) beats --agent.
    let o = Overrides {
        agent: Some("aider".into()),
        ..Default::default()
    };
    let a = w.resolve(&s, Phase::Review, o).unwrap();
    assert_eq!(
        (a.agent.as_str(), a.level, a.reason.as_str()),
        ("codex", Level::PhaseDefault, "review phase default")
    );
}

#[test]
fn level3_story_agent_beats_type_override() {
    let w = World::new(ALL);
    let a = w
        .resolve(
            &with_agent("Fix the crash", "codex"),
            Phase::Implementation,
            Overrides::default(),
        )
        .unwrap();
    assert_eq!((a.agent.as_str(), a.level), ("codex", Level::StoryAgent));
    assert_eq!(a.story_type, StoryType::Bugfix);
}

#[test]
fn level4_story_type_override() {
    let w = World::new(ALL);
    let a = w
        .resolve(
            &story("Fix the login crash"),
            Phase::Implementation,
            Overrides::default(),
        )
        .unwrap();
    assert_eq!((a.agent.as_str(), a.level), ("gemini", Level::StoryType));
    assert_eq!(
        a.reason,
        "story type 'bugfix' (keywords: fix, crash) override for implementation"
    );
    let mut s = story("Something");
    s.story_type = Some("refactor".into());
    let a = w
        .resolve(&s, Phase::Implementation, Overrides::default())
        .unwrap();
    assert_eq!(
        (a.agent.as_str(), a.reason.as_str()),
        (
            "aider",
            "story type 'refactor' (explicit) override for implementation"
        )
    );
    // Overrides belong to their phase: retry has none.
    let a = w
        .resolve(
            &story("Fix the login crash"),
            Phase::Retry,
            Overrides::default(),
        )
        .unwrap();
    assert_eq!((a.agent.as_str(), a.level), ("aider", Level::PhaseDefault));
}

#[test]
fn level5_phase_default() {
    let w = World::new(ALL);
    let a = w
        .resolve(
            &story("User profile page"),
            Phase::Implementation,
            Overrides::default(),
        )
        .unwrap();
    assert_eq!(
        (a.agent.as_str(), a.level, a.reason.as_str()),
        (
            "amp-code",
            Level::PhaseDefault,
            "implementation phase default"
        )
    );
}

#[test]
fn level6_fallback_chain_with_notes() {
    // amp (phase default) and codex (chain #1) missing: aider (chain #2).
    let w = World::new(&["aider", "claude"]);
    let a = w
        .resolve(
            &story("User profile page"),
            Phase::Implementation,
            Overrides::default(),
        )
        .unwrap();
    assert_eq!((a.agent.as_str(), a.level), ("aider", Level::FallbackChain));
    assert_eq!(a.reason, "implementation fallback chain #2");
    let notes: Vec<String> = a.fallbacks.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        notes,
        [
            "amp-code -> aider: CLI 'amp' not found",
            "codex -> aider: CLI 'codex' not found"
        ]
    );
}

#[test]
fn level7_default_agent_and_phases_without_config() {
    let w = World::new(&["claude"]);
    let a = w
        .resolve(
            &story("User profile page"),
            Phase::Implementation,
            Overrides::default(),
        )
        .unwrap();
    assert_eq!(
        (a.agent.as_str(), a.level, a.reason.as_str()),
        ("claude-code", Level::DefaultAgent, "default_agent")
    );
    assert_eq!(a.fallbacks.len(), 3);
    // No phase_defaults.refactor: straight to default_agent.
    let a = w
        .resolve(&story("x"), Phase::Refactor, Overrides::default())
        .unwrap();
    assert_eq!(
        (a.agent.as_str(), a.level),
        ("claude-code", Level::DefaultAgent)
    );
    assert!(a.fallbacks.is_empty());
}

#[test]
fn missing_overrides_fall_back_with_notes() {
    let w = World::new(&["claude", "amp"]);
    let o = Overrides {
        agent: Some("codex".into()),
        ..Default::default()
    };
    let a = w
        .resolve(&with_agent("x", "gemini"), Phase::Implementation, o)
        .unwrap();
    assert_eq!(a.agent, "amp-code");
    let from: Vec<&str> = a.fallbacks.iter().map(|f| f.from.as_str()).collect();
    assert_eq!(from, ["codex", "gemini"]);
    assert!(a.fallbacks.iter().all(|f| f.to == "amp-code"));
}

#[test]
fn unconfigured_story_agent_is_a_fallback_note() {
    let w = World::new(ALL);
    let a = w
        .resolve(
            &with_agent("x", "cursor-cli"),
            Phase::Implementation,
            Overrides::default(),
        )
        .unwrap();
    assert_eq!(a.agent, "amp-code");
    assert_eq!(
        a.fallbacks[0].why,
        "agent 'cursor-cli' is not configured in agents.json"
    );
}

#[test]
fn unknown_cli_agent_is_an_error_naming_known_agents() {
    let w = World::new(ALL);
    let o = Overrides {
        impl_agent: Some("nope".into()),
        ..Default::default()
    };
    let err = w.resolve(&story("x"), Phase::Review, o).unwrap_err();
    assert!(matches!(err, ResolveError::UnknownAgent { .. }));
    assert_eq!(
        err.to_string(),
        "unknown agent 'nope' given to --impl-agent (known agents: claude-code, codex, aider, amp-code, gemini)"
    );
}

#[test]
fn no_fallback_takes_the_first_candidate_if_it_is_installed() {
    let w = World::new(&["codex", "gemini"]);
    let o = Overrides {
        agent: Some("codex".into()),
        no_fallback: true,
        ..Default::default()
    };
    let a = w.resolve(&story("x"), Phase::Implementation, o).unwrap();
    assert_eq!(a.agent, "codex");
    assert!(!a.checked);
    assert_eq!(a.reason, "--agent (flags not checked: --no-fallback)");
    // Without overrides the first candidate of the chain.
    let o = Overrides {
        no_fallback: true,
        ..Default::default()
    };
    let a = w
        .resolve(&story("Fix crash"), Phase::Implementation, o.clone())
        .unwrap();
    assert_eq!(a.agent, "gemini");
    // A first candidate that is not installed, or not configured, cannot
    // be run: an error, nothing else tried (aider would be installed here).
    let w = World::new(&["aider"]);
    for s in [with_agent("x", "ghost"), with_agent("x", "codex")] {
        let err = w.resolve(&s, Phase::Implementation, o.clone()).unwrap_err();
        match &err {
            ResolveError::NoneAvailable {
                tried, no_fallback, ..
            } => {
                assert_eq!(tried.len(), 1);
                assert!(no_fallback);
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("--no-fallback"));
    }
}

#[test]
fn nothing_available_lists_every_candidate_and_why() {
    let w = World::new(&[]);
    let err = w
        .resolve(
            &with_agent("Fix crash", "ghost"),
            Phase::Implementation,
            Overrides::default(),
        )
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(
        text,
        "no agent available for story-001 (implementation phase); tried:\n\
         \x20 - ghost (story.agent in the PRD): agent 'ghost' is not configured in agents.json\n\
         \x20 - gemini (story type 'bugfix' (keywords: fix, crash) override for implementation): CLI 'gemini' not found\n\
         \x20 - amp-code (implementation phase default): CLI 'amp' not found\n\
         \x20 - codex (implementation fallback chain #1): CLI 'codex' not found\n\
         \x20 - aider (implementation fallback chain #2): CLI 'aider' not found\n\
         \x20 - claude-code (default_agent): CLI 'claude' not found\n\
         install one of these agents, or name an installed one with --agent"
    );
}

#[test]
fn duplicates_are_tried_once() {
    let w = World::new(&["claude"]);
    let (c, _) = {
        let d = w.detector();
        let r = Resolver::new(
            &w.config,
            &d,
            Overrides {
                agent: Some("codex".into()),
                ..Default::default()
            },
        );
        r.candidates(&with_agent("x", "codex"), Phase::Retry)
    };
    let names: Vec<&str> = c.iter().map(|c| c.agent.as_str()).collect();
    assert_eq!(names, ["codex", "aider", "claude-code"]);
}

#[test]
fn a_command_path_that_is_not_executable_says_so() {
    let w = World::new(&["codex"]);
    let stub = w.bin.join("plain-file");
    std::fs::write(&stub, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o644)).unwrap();
    let text = format!(
        r#"{{"agents": {{"plain": {{"command": "{}"}}, "dir": {{"command": "{}"}},
             "codex": {{"command": "codex"}}}},
            "phase_defaults": {{"implementation": {{"default_agent": "plain",
             "fallback_chain": ["dir", "codex"]}}}}}}"#,
        stub.display(),
        w.bin.display()
    );
    let config = AgentsConfig::parse(&text, "agents.json").unwrap();
    let d = w.detector();
    let a = Resolver::new(&config, &d, Overrides::default())
        .resolve(&story("Add a button"), Phase::Implementation)
        .unwrap();
    assert_eq!(a.agent, "codex");
    assert!(
        a.fallbacks[0].why.contains("is not executable"),
        "{:?}",
        a.fallbacks
    );
    assert!(
        a.fallbacks[1].why.contains("is a directory"),
        "{:?}",
        a.fallbacks
    );
}

#[test]
fn story_type_defaults_are_honoured_below_phase_overrides() {
    let text = CONFIG.replacen(
        "\"phase_defaults\"",
        "\"story_type_defaults\": {\"docs\": \"codex\", \"bugfix\": \"aider\"},\n  \"phase_defaults\"",
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for cmd in ALL {
        let p = bin.join(cmd);
        std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = AgentsConfig::parse(&text, "agents.json").unwrap();
    let d = Detector::with_path(&bin, Path::new("/"));
    let r = Resolver::new(&config, &d, Overrides::default());
    let mut docs = story("Something");
    docs.story_type = Some("documentation".into());
    // Implementation has no override for documentation: the default applies.
    let a = r.resolve(&docs, Phase::Implementation).unwrap();
    assert_eq!((a.agent.as_str(), a.level), ("codex", Level::StoryType));
    assert!(a.reason.contains("story_type_defaults"), "{}", a.reason);
    // Retry too (a story phase), above its phase default.
    assert_eq!(r.resolve(&docs, Phase::Retry).unwrap().agent, "codex");
    // Review is not a story phase: its own default.
    assert_eq!(r.resolve(&docs, Phase::Review).unwrap().agent, "codex");
    // The phase's own story_type_overrides win over the top-level default.
    let a = r
        .resolve(&story("Fix the login crash"), Phase::Implementation)
        .unwrap();
    assert_eq!(a.agent, "gemini");
    assert_eq!(
        r.resolve(&story("Fix the login crash"), Phase::Retry)
            .unwrap()
            .agent,
        "aider"
    );
}

#[test]
fn story_type_defaults_with_unknown_types_or_agents_are_rejected() {
    let bad = CONFIG.replacen(
        "\"phase_defaults\"",
        "\"story_type_defaults\": {\"poetry\": \"codex\", \"bugfix\": \"nobody\"},\n  \"phase_defaults\"",
        1,
    );
    let err = AgentsConfig::parse(&bad, "agents.json")
        .unwrap_err()
        .to_string();
    assert!(err.contains("story_type_defaults.poetry"), "{err}");
    assert!(err.contains("unknown story type 'poetry'"), "{err}");
    assert!(err.contains("story_type_defaults.bugfix"), "{err}");
    assert!(err.contains("unknown agent 'nobody'"), "{err}");
    let bad = CONFIG.replacen(
        "\"phase_defaults\"",
        "\"story_type_defaults\": [\"codex\"],\n  \"phase_defaults\"",
        1,
    );
    let err = AgentsConfig::parse(&bad, "agents.json")
        .unwrap_err()
        .to_string();
    assert!(err.contains("story_type_defaults"), "{err}");
}

#[test]
fn a_given_chain_replaces_this_configurations_and_skips_what_is_missing_here() {
    // The coordinator wanted "ghost" (not configured here), then "aider"
    // (configured, not installed), then "codex".
    let w = World::new(&["codex", "amp"]);
    let d = w.detector();
    let chain = vec![
        "ghost".to_string(),
        "aider".to_string(),
        "codex".to_string(),
    ];
    let r = Resolver::new(&w.config, &d, Overrides::default()).with_chain(chain.clone());
    let a = r
        .resolve(&story("Add a page"), Phase::Implementation)
        .unwrap();
    // Not amp-code, this configuration's own implementation default.
    assert_eq!(a.agent, "codex");
    assert_eq!(a.level, Level::Given);
    assert_eq!(
        a.reason,
        "the coordinator's candidate #3 for implementation"
    );
    let from: Vec<&str> = a.fallbacks.iter().map(|f| f.from.as_str()).collect();
    assert_eq!(from, ["ghost", "aider"]);
    assert!(
        a.fallbacks[0].why.contains("not configured"),
        "{:?}",
        a.fallbacks
    );
    // None of the chain here: an error naming what was tried.
    let r = Resolver::new(&w.config, &d, Overrides::default())
        .with_chain(vec!["ghost".into(), "aider".into()]);
    let e = r
        .resolve(&story("Add a page"), Phase::Implementation)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ghost") && e.contains("aider"), "{e}");
}

#[test]
fn an_api_agent_is_available_when_its_key_is_set_not_by_path() {
    // A variable no other test touches.
    let var = "CASCADE_RESOLVE_TEST_API_KEY";
    let config = AgentsConfig::parse(
        &format!(
            r#"{{"default_agent": "codex", "agents": {{
                "codex": {{"type": "cli", "command": "codex"}},
                "model": {{"type": "api", "provider": "anthropic", "model": "m", "api_key_env": "{var}"}},
                "local": {{"type": "api", "provider": "openai", "model": "m", "base_url": "http://127.0.0.1:1"}}}},
              "phase_defaults": {{"implementation": {{"default_agent": "model", "fallback_chain": ["local"]}}}}}}"#
        ),
        "agents.json",
    )
    .unwrap();
    let w = World::new(&[]);
    let d = w.detector();
    std::env::remove_var(var);
    let r = Resolver::new(&config, &d, Overrides::default());
    let a = r.resolve(&story("Thing"), Phase::Implementation).unwrap();
    // No key: the keyless local server is next, with the reason.
    assert_eq!(a.agent, "local");
    assert_eq!(
        a.fallbacks[0].why,
        format!("API key variable {var} is not set")
    );
    assert!(!d.is_available(config.agent("model").unwrap()));
    std::env::set_var(var, "k");
    let a = r.resolve(&story("Thing"), Phase::Implementation).unwrap();
    assert_eq!((a.agent.as_str(), a.fallbacks.len()), ("model", 0));
    assert!(d.is_available(config.agent("model").unwrap()));
    std::env::remove_var(var);
}

/// A kind of story (its own agent, its inferred type) resolves alike in
/// every phase: checking the first story of each kind checks them all.
#[test]
fn stories_of_one_kind_resolve_alike() {
    let w = World::new(&["amp", "codex", "aider", "gemini"]);
    let stories = [
        story("Profile page"),
        story("Fix login crash"),
        story("Settings page"),
        with_agent("Profile export", "codex"),
        story("Fix the parser bug"),
        with_agent("Team page", "codex"),
        with_agent("Team page", " "),
    ];
    let kinds = story_kinds(stories.iter());
    let titles: Vec<&str> = kinds.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(
        titles,
        ["Profile page", "Fix login crash", "Profile export"],
        "a blank story.agent is no agent of its own"
    );
    for phase in [Phase::Implementation, Phase::Retry] {
        for s in &stories {
            let first = kinds
                .iter()
                .find(|k| {
                    story_type::infer_story_type(k) == story_type::infer_story_type(s)
                        && k.agent.as_deref().filter(|a| !a.trim().is_empty())
                            == s.agent.as_deref().filter(|a| !a.trim().is_empty())
                })
                .unwrap();
            let (a, b) = (
                w.resolve(s, phase, Overrides::default()).unwrap(),
                w.resolve(first, phase, Overrides::default()).unwrap(),
            );
            assert_eq!(
                (a.agent, a.fallbacks),
                (b.agent, b.fallbacks),
                "{}",
                s.title
            );
        }
    }
}

/// The kinds of a large plan (types inferred in parallel) are the stories
/// the sequential definition picks, as positions, with the stories left
/// out never chosen.
#[test]
fn kind_positions_are_the_kinds_of_the_included_stories() {
    let titles = [
        "Profile page",
        "Fix login crash",
        "Refactor the parser",
        "Add tests for export",
        "Write the README",
        "Deploy with docker",
    ];
    let agents = [None, Some("codex"), Some(" "), Some("aider")];
    // Past the parallel threshold, with the kinds first met late in the plan.
    let plan: Vec<Story> = (0..10_000)
        .map(|i| {
            let mut s = Story::new(format!("s-{i}"), titles[(i / 7 + i % 5) % titles.len()]);
            s.agent = agents[(i / 1_000) % agents.len()].map(str::to_string);
            s
        })
        .collect();
    let include = |s: &Story| !s.id.ends_with('3');
    let positions = story_kind_positions(&plan, include);
    let expected: Vec<*const Story> = story_kinds(plan.iter().filter(|s| include(s)))
        .into_iter()
        .map(|s| s as *const Story)
        .collect();
    let got: Vec<*const Story> = positions
        .iter()
        .map(|&i| &plan[i] as *const Story)
        .collect();
    assert_eq!(got, expected);
    // Every agent-and-type pair present is a kind: 6 types x 3 own agents.
    assert_eq!(positions.len(), 18);
    assert!(positions.iter().all(|&i| include(&plan[i])));
    assert!(positions.windows(2).all(|w| w[0] < w[1]));
    // A small plan (inferred on this thread) alike.
    let small = &plan[..1500];
    let expected: Vec<*const Story> = story_kinds(small.iter().filter(|s| include(s)))
        .into_iter()
        .map(|s| s as *const Story)
        .collect();
    let got: Vec<*const Story> = story_kind_positions(small, include)
        .iter()
        .map(|&i| &small[i] as *const Story)
        .collect();
    assert_eq!(got, expected);
    assert!(got.len() >= 6);
}

/// Plan Cascade's `unknown` type: a story without any keyword is routed by
/// a `story_type_overrides.unknown` entry, and without one by the phase.
#[test]
fn a_story_without_keywords_is_unknown_and_its_override_applies() {
    let mut w = World::new(ALL);
    let config = CONFIG.replace(
        r#""refactor": "aider"}"#,
        r#""refactor": "aider", "unknown": "codex"}"#,
    );
    w.config = AgentsConfig::parse(&config, "agents.json").unwrap();
    let a = w
        .resolve(
            &story("Persist tasks to disk"),
            Phase::Implementation,
            Overrides::default(),
        )
        .unwrap();
    assert_eq!(
        (a.agent.as_str(), a.level, a.reason.as_str()),
        (
            "codex",
            Level::StoryType,
            "story type 'unknown' (no keyword) override for implementation"
        )
    );
    // A tie between feature and bugfix keywords is a feature: no override.
    let a = w
        .resolve(
            &story("Add crash reporter"),
            Phase::Implementation,
            Overrides::default(),
        )
        .unwrap();
    assert_eq!(
        (a.agent.as_str(), a.level),
        ("amp-code", Level::PhaseDefault)
    );
}

#[test]
fn a_learned_route_comes_after_what_the_user_named_and_before_the_type_override() {
    let w = World::new(ALL);
    let d = w.detector();
    let routes = crate::LearnedRoutes::from_outcomes([crate::Outcome {
        agent: "codex".into(),
        story_type: StoryType::Bugfix,
        judged: 5,
        passed: 5,
        cost_usd: Some(1.0),
    }]);
    let learned = |o: Overrides| Overrides {
        learned: Some(routes.clone()),
        ..o
    };
    let r = Resolver::new(&w.config, &d, learned(Overrides::default()));
    let bug = story("Fix the login crash");
    // Above implementation's bugfix override (gemini).
    let a = r.resolve(&bug, Phase::Implementation).unwrap();
    assert_eq!((a.agent.as_str(), a.level), ("codex", Level::Learned));
    assert!(
        a.reason.starts_with("learned: codex passed 5 of 5"),
        "{}",
        a.reason
    );
    // Not for review (not a story phase), nor for a type with no route.
    assert_eq!(
        r.resolve(&bug, Phase::Review).unwrap().level,
        Level::PhaseDefault
    );
    let feature = r
        .resolve(&story("Add a page"), Phase::Implementation)
        .unwrap();
    assert_ne!(feature.level, Level::Learned);
    // story.agent and --agent win over history.
    let mut named = story("Fix the login crash");
    named.agent = Some("aider".into());
    assert_eq!(
        r.resolve(&named, Phase::Implementation).unwrap().agent,
        "aider"
    );
    let o = Overrides {
        agent: Some("gemini".into()),
        ..Overrides::default()
    };
    let r = Resolver::new(&w.config, &d, learned(o));
    assert_eq!(
        r.resolve(&bug, Phase::Implementation).unwrap().agent,
        "gemini"
    );
    // A learned agent that is not installed falls back down the chain, noted.
    let w = World::new(&["gemini", "amp", "aider"]);
    let d = w.detector();
    let r = Resolver::new(&w.config, &d, learned(Overrides::default()));
    let a = r.resolve(&bug, Phase::Implementation).unwrap();
    assert_eq!(a.agent, "gemini");
    assert_eq!(a.fallbacks[0].from, "codex");
}
