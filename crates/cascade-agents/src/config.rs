//! agents.json: the model, the lookup order of CLI.md, the built-in default
//! and validation with the file and key path of every problem.
//!
//! The schema is Plan Cascade's, unchanged: `default_agent`,
//! `agents{name:{type, command, args[], timeout, env{}}}` and
//! `phase_defaults{phase:{default_agent, fallback_chain[], story_type_overrides{}}}`.
//! `story_type_defaults{type:agent}` (Plan Cascade's per-type agent, for
//! every story phase) is honoured: the resolver proposes it right after the
//! phase's own `story_type_overrides`; an unknown story type or agent in it
//! is a problem like any other. Fields cascade does not use
//! (`description`, `subagent_type`, `verification_gate`, ...) are accepted
//! and ignored.
//! The file is read as a JSON value first and then walked by hand, so every
//! problem can name its key path (`phase_defaults.retry.fallback_chain[1]`)
//! and all of them are reported at once.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cascade_plan::strict::Tracked;
use serde_json::Value;

use crate::phase::Phase;
use crate::placeholders;

mod api;

pub use api::{ApiSettings, MissingKey, Provider, DEFAULT_MAX_TOKENS, DEFAULT_MAX_TURNS};

/// The agents.json that ships with cascade, used when no file is found.
pub const BUILTIN_AGENTS_JSON: &str = include_str!("../../../agents.json");

/// Timeout of an agent whose definition has none (Plan Cascade's default).
pub const DEFAULT_AGENT_TIMEOUT: Duration = Duration::from_secs(600);

/// The agent every config knows, even when its file does not define it:
/// Plan Cascade treats `claude-code` as always configured.
pub const CLAUDE_CODE: &str = "claude-code";

/// How a `task-tool` agent is run: Claude Code's Task tool only exists inside
/// Claude Code, so outside of it the same work goes through the `claude` CLI.
const TASK_TOOL_COMMAND: &str = "claude";
const TASK_TOOL_ARGS: [&str; 6] = [
    "-p",
    "{prompt}",
    "--output-format",
    "stream-json",
    "--verbose",
    "--dangerously-skip-permissions",
];

/// Plan Cascade's agent types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    /// An external command-line agent.
    Cli,
    /// Claude Code's Task tool, run through the `claude` CLI.
    TaskTool,
    /// A model API called by cascade itself, with cascade's own tools
    /// (see [`crate::api`]); its settings are [`AgentDef::api`].
    Api,
}

impl AgentKind {
    /// The name used in agents.json.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Cli => "cli",
            AgentKind::TaskTool => "task-tool",
            AgentKind::Api => "api",
        }
    }
}

/// One configured agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDef {
    /// Its key in `agents`.
    pub name: String,
    pub kind: AgentKind,
    /// The program (looked up on PATH unless it contains a slash).
    pub command: String,
    /// argv after the program, with placeholders.
    pub args: Vec<String>,
    /// Seconds before the agent's process group is killed.
    pub timeout_secs: Option<u64>,
    /// Extra environment (values may use placeholders), in file order.
    pub env: Vec<(String, String)>,
    /// Working directory template (Plan Cascade writes `{working_dir}`).
    pub working_dir: Option<String>,
    pub description: Option<String>,
    /// argv used instead of `args` to continue the agent's earlier session
    /// (placeholders also `{session_id}`, `{session_index}`); `None` when the
    /// CLI cannot resume, and then every call starts a new session.
    pub resume_args: Option<Vec<String>>,
    /// argv whose output lists the agent's sessions (gemini's
    /// `--list-sessions`: `  N. <preview> (<age>) [<uuid>]`), used to turn a
    /// stored session id into `{session_index}`.
    pub list_sessions_args: Option<Vec<String>>,
    /// argv that prints the agent's version (`version_args`); without it,
    /// only the known CLIs are asked (`--version`): a custom script may do
    /// real work when run with an argument it does not understand.
    pub version_args: Option<Vec<String>>,
    /// How a `type: "api"` agent reaches its model (`None` for the others,
    /// whose `command` is a program).
    pub api: Option<ApiSettings>,
    /// What the agent's CLI needs beyond the story's sandbox.
    pub sandbox: AgentSandbox,
}

/// `agents.<name>.sandbox`: what a CLI needs besides its worktree when
/// cascade confines it (its own state and login, such as `~/.claude`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentSandbox {
    /// Writable paths: absolute, or `~/...` under `$HOME`.
    pub write: Vec<String>,
    /// The TCP ports the agent connects to (its model API); empty: those
    /// of [`DEFAULT_NET_PORTS`]. See [`AgentSandbox::connect_ports`].
    pub net_ports: Vec<u16>,
}

/// The ports a confined agent may connect to when its definition names
/// none: HTTPS, where every model API is.
pub const DEFAULT_NET_PORTS: &[u16] = &[443];

/// The proxy variables whose port a confined agent may connect to as
/// well: behind a proxy, an HTTPS client connects to the proxy's port.
pub const PROXY_VARS: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "HTTP_PROXY",
    "http_proxy",
];

impl AgentSandbox {
    /// The TCP ports the agent may connect to: its `net_ports` (else
    /// [`DEFAULT_NET_PORTS`]), and the port of each proxy that `var` (the
    /// environment cascade runs in) names in [`PROXY_VARS`].
    pub fn connect_ports(&self, var: impl Fn(&str) -> Option<String>) -> Vec<u16> {
        let mut ports = if self.net_ports.is_empty() {
            DEFAULT_NET_PORTS.to_vec()
        } else {
            self.net_ports.clone()
        };
        let proxies = PROXY_VARS.iter().filter_map(|v| var(v));
        for port in proxies.filter_map(|url| proxy_port(&url)) {
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        ports
    }

    /// The story's `policy` with what this agent declares: its writable
    /// paths (`~/` under `$HOME`; without one, those entries are left out)
    /// and its TCP ports ([`AgentSandbox::connect_ports`]).
    pub fn policy(
        &self,
        policy: &cascade_process::sandbox::Policy,
    ) -> cascade_process::sandbox::Policy {
        use cascade_process::sandbox::{expand_home, home};
        let home = home();
        let declared = self
            .write
            .iter()
            .filter_map(|p| expand_home(p, home.as_deref()));
        policy
            .with_write(declared)
            .with_connect_ports(self.connect_ports(|v| std::env::var(v).ok()))
    }
}

/// The port of a proxy URL (`http://proxy:3128`, `socks5://h:1080`; its
/// scheme's port when it names none), if it parses.
fn proxy_port(url: &str) -> Option<u16> {
    let url = url.trim();
    if url.is_empty() {
        return None;
    }
    // `proxy:3128` without a scheme is how curl and most tools take it too.
    let parsed = reqwest::Url::parse(url)
        .ok()
        .filter(|u| u.has_host())
        .or_else(|| reqwest::Url::parse(&format!("http://{url}")).ok())?;
    parsed.port_or_known_default()
}

impl AgentDef {
    /// The timeout from the definition, or [`DEFAULT_AGENT_TIMEOUT`].
    pub fn timeout(&self) -> Duration {
        self.timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_AGENT_TIMEOUT)
    }

    /// A plain CLI agent for tests: every optional field empty (one place
    /// to add a new field, not one per test module).
    #[cfg(test)]
    pub(crate) fn test_cli(name: &str, command: &str, args: &[&str]) -> AgentDef {
        AgentDef {
            name: name.into(),
            kind: AgentKind::Cli,
            command: command.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            timeout_secs: None,
            env: Vec::new(),
            working_dir: None,
            description: None,
            resume_args: None,
            list_sessions_args: None,
            version_args: None,
            api: None,
            sandbox: AgentSandbox::default(),
        }
    }

    /// The built-in `claude-code` definition (task tool through the claude CLI).
    pub fn claude_code() -> AgentDef {
        AgentDef {
            name: CLAUDE_CODE.to_string(),
            kind: AgentKind::TaskTool,
            command: TASK_TOOL_COMMAND.to_string(),
            args: TASK_TOOL_ARGS.iter().map(|s| s.to_string()).collect(),
            timeout_secs: None,
            env: Vec::new(),
            working_dir: None,
            description: Some("Claude Code through the claude CLI".to_string()),
            resume_args: None,
            list_sessions_args: None,
            version_args: None,
            api: None,
            sandbox: AgentSandbox {
                write: vec!["~/.claude".into(), "~/.claude.json".into()],
                net_ports: vec![443],
            },
        }
    }

    /// The argv that asks this agent's CLI for its version: its own
    /// `version_args`, else `--version` for the CLIs cascade knows; `None`:
    /// not asked (a custom script, an api agent).
    pub fn version_probe(&self) -> Option<Vec<String>> {
        if self.api.is_some() {
            return None;
        }
        match &self.version_args {
            Some(argv) => Some(argv.clone()),
            None if crate::watch::CliFamily::of_command(&self.command)
                != crate::watch::CliFamily::Other =>
            {
                Some(vec!["--version".to_string()])
            }
            None => None,
        }
    }

    /// Whether a later call can continue this agent's session: a CLI with
    /// `resume_args`, or an api agent (which resends its conversation).
    pub fn can_resume(&self) -> bool {
        self.resume_args.is_some() || self.api.is_some()
    }
}

/// `phase_defaults.<phase>`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhaseConfig {
    pub default_agent: Option<String>,
    pub fallback_chain: Vec<String>,
    /// story type name -> agent, in file order.
    pub story_type_overrides: Vec<(String, String)>,
}

impl PhaseConfig {
    /// The override for a story type name, if any.
    pub fn override_for(&self, story_type: &str) -> Option<&str> {
        self.story_type_overrides
            .iter()
            .find(|(t, _)| t.eq_ignore_ascii_case(story_type))
            .map(|(_, a)| a.as_str())
    }
}

/// A validated agents.json.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentsConfig {
    /// The last resort of the resolver.
    pub default_agent: String,
    /// Agents in file order.
    pub agents: Vec<AgentDef>,
    pub phase_defaults: BTreeMap<Phase, PhaseConfig>,
    /// `story_type_defaults`: story type name -> agent for the story phases
    /// (implementation, retry, refactor), below the phase's own
    /// `story_type_overrides`; in file order.
    pub story_type_defaults: Vec<(String, String)>,
    /// `prices`: USD per million tokens by model or agent name, over the
    /// shipped table (see [`crate::pricing`]).
    pub prices: crate::pricing::PriceTable,
}

/// Where a config came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `--agents PATH`.
    Explicit(PathBuf),
    /// `./agents.json`.
    Project(PathBuf),
    /// `$XDG_CONFIG_HOME/cascade/agents.json` or `~/.config/cascade/agents.json`.
    User(PathBuf),
    /// The agents.json compiled into cascade.
    BuiltIn,
}

impl ConfigSource {
    /// The file, unless built in.
    pub fn path(&self) -> Option<&Path> {
        match self {
            ConfigSource::Explicit(p) | ConfigSource::Project(p) | ConfigSource::User(p) => Some(p),
            ConfigSource::BuiltIn => None,
        }
    }
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path() {
            Some(p) => write!(f, "{}", p.display()),
            None => f.write_str("built-in agents.json"),
        }
    }
}

/// The longest agent `timeout` accepted, in seconds (30 days).
pub const MAX_TIMEOUT_SECS: u64 = 30 * 24 * 3600;

/// A config and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: AgentsConfig,
    pub source: ConfigSource,
    /// Things that are accepted but probably not meant (unknown phase names).
    pub warnings: Vec<String>,
}

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Key path, e.g. `phase_defaults.retry.fallback_chain[1]`.
    pub key: String,
    pub message: String,
}

/// Why a config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--agents PATH` names a file that does not exist.
    #[error("agents file '{}' does not exist (check --agents)", path.display())]
    NotFound { path: PathBuf },
    /// `--agents PATH` names a directory.
    #[error("agents file '{}' is a directory (pass the agents.json inside it to --agents)", path.display())]
    NotAFile { path: PathBuf },
    /// The file exists but could not be read.
    #[error("cannot read agents file '{}': {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("{file}:{line}:{column}: invalid JSON: {message} (fix the syntax of the file)")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// The JSON does not describe a usable config.
    #[error("{}", format_problems(file, problems))]
    Invalid {
        file: String,
        problems: Vec<ConfigProblem>,
        /// The warnings of the same walk (unknown fields), so `cascade
        /// validate` lists them beside the problems.
        warnings: Vec<String>,
    },
}

fn format_problems(file: &str, problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(|p| format!("{file}: {}: {}", p.key, p.message))
        .collect::<Vec<_>>()
        .join("\n")
}

impl AgentsConfig {
    /// No agents yet; `claude-code` as the last resort (where the walk starts).
    fn empty() -> AgentsConfig {
        AgentsConfig {
            default_agent: CLAUDE_CODE.to_string(),
            agents: Vec::new(),
            phase_defaults: BTreeMap::new(),
            story_type_defaults: Vec::new(),
            prices: crate::pricing::PriceTable::default(),
        }
    }

    /// Finds and loads the config in CLI.md's lookup order: `explicit`,
    /// `<cwd>/agents.json`, `$XDG_CONFIG_HOME/cascade/agents.json` (or
    /// `~/.config/cascade/agents.json`), else the built-in default.
    pub fn load(explicit: Option<&Path>, cwd: &Path) -> Result<LoadedConfig, ConfigError> {
        Self::load_with(explicit, cwd, user_config_dir().as_deref())
    }

    /// [`AgentsConfig::load`] with the user config directory given
    /// (`<dir>/cascade/agents.json` is looked at), for tests.
    pub fn load_with(
        explicit: Option<&Path>,
        cwd: &Path,
        user_config_dir: Option<&Path>,
    ) -> Result<LoadedConfig, ConfigError> {
        let source = if let Some(path) = explicit {
            let path = if path.is_absolute() {
                path.to_path_buf()
            } else {
                cwd.join(path)
            };
            if path.is_dir() {
                return Err(ConfigError::NotAFile { path });
            }
            if !path.is_file() {
                return Err(ConfigError::NotFound { path });
            }
            ConfigSource::Explicit(path)
        } else if cwd.join("agents.json").is_file() {
            ConfigSource::Project(cwd.join("agents.json"))
        } else if let Some(user) = user_config_dir
            .map(|d| d.join("cascade").join("agents.json"))
            .filter(|p| p.is_file())
        {
            ConfigSource::User(user)
        } else {
            ConfigSource::BuiltIn
        };
        let text = match source.path() {
            Some(path) => std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
                path: path.to_path_buf(),
                source: e,
            })?,
            None => BUILTIN_AGENTS_JSON.to_string(),
        };
        let (config, warnings) = Self::parse_with_warnings(&text, &source.to_string())?;
        Ok(LoadedConfig {
            config,
            source,
            warnings,
        })
    }

    /// The built-in default configuration.
    pub fn builtin() -> Result<AgentsConfig, ConfigError> {
        Self::parse(BUILTIN_AGENTS_JSON, "built-in agents.json")
    }

    /// Parses and validates agents.json text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<AgentsConfig, ConfigError> {
        Self::parse_with_warnings(text, file).map(|(c, _)| c)
    }

    fn parse_with_warnings(
        text: &str,
        file: &str,
    ) -> Result<(AgentsConfig, Vec<String>), ConfigError> {
        // A UTF-8 byte order mark (some editors write one) is not JSON.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let value: Value = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
            file: file.to_string(),
            line: e.line(),
            column: e.column(),
            message: strip_position(&e.to_string()),
        })?;
        let mut walk = Walk::default();
        let config = walk.config(&value);
        if walk.problems.is_empty() {
            Ok((config, walk.warnings))
        } else {
            Err(ConfigError::Invalid {
                file: file.to_string(),
                problems: walk.problems,
                warnings: walk.warnings,
            })
        }
    }

    /// The agent called `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentDef> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// Agent names in file order.
    pub fn names(&self) -> Vec<&str> {
        self.agents.iter().map(|a| a.name.as_str()).collect()
    }

    /// `phase_defaults.<phase>`, if configured.
    pub fn phase(&self, phase: Phase) -> Option<&PhaseConfig> {
        self.phase_defaults.get(&phase)
    }

    /// The `story_type_defaults` agent of a story type, if any.
    pub fn story_type_default(&self, story_type: &str) -> Option<&str> {
        self.story_type_defaults
            .iter()
            .find(|(t, _)| {
                t.parse::<crate::story_type::StoryType>()
                    .is_ok_and(|k| k.as_str() == story_type)
            })
            .map(|(_, a)| a.as_str())
    }
}

/// `$XDG_CONFIG_HOME`, else `$HOME/.config`.
fn user_config_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|h| PathBuf::from(h).join(".config"))
}

/// serde_json appends " at line L column C"; the error shows them in front.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

/// The validating walk over the JSON value.
#[derive(Default)]
struct Walk {
    problems: Vec<ConfigProblem>,
    warnings: Vec<String>,
}

impl Walk {
    fn problem(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.problems.push(ConfigProblem {
            key: key.into(),
            message: message.into(),
        });
    }

    fn config(&mut self, value: &Value) -> AgentsConfig {
        let Some(root) = value.as_object() else {
            self.problem("(root)", "expected a JSON object");
            return AgentsConfig::empty();
        };
        let root = Tracked::new(root);
        let config = self.config_fields(&root);
        self.warnings
            .extend(root.unknown("", &["$schema", "description", "verification_gate"]));
        config
    }

    fn config_fields(&mut self, root: &Tracked<'_>) -> AgentsConfig {
        let mut config = AgentsConfig::empty();
        if let Some(v) = root.get("default_agent") {
            if let Some(name) = self.string(v, "default_agent") {
                config.default_agent = name;
            }
        }
        match root.get("agents") {
            None | Some(Value::Null) => {}
            Some(Value::Object(agents)) => {
                for (name, def) in agents {
                    if let Some(def) = self.agent(name, def) {
                        config.agents.push(def);
                    }
                }
            }
            Some(_) => self.problem("agents", "expected an object of agent definitions"),
        }
        match root.get("phase_defaults") {
            // A deliberate difference from Plan Cascade (whose built-in
            // table picks an agent per phase): cascade honours the file's
            // `default_agent`, and says so once.
            None | Some(Value::Null) => self.warnings.push(format!(
                "no phase_defaults: every phase uses default_agent '{}' (Plan Cascade would pick per phase from its built-in table; see docs/plan-cascade.md)",
                config.default_agent
            )),
            Some(Value::Object(phases)) => {
                for (name, v) in phases {
                    let key = format!("phase_defaults.{name}");
                    match name.parse::<Phase>() {
                        Ok(phase) if phase.as_str() == name => {
                            let pc = self.phase(v, &key);
                            config.phase_defaults.insert(phase, pc);
                        }
                        _ => self.warnings.push(format!(
                            "{key}: unknown phase '{name}' is ignored (phases: planning, implementation, retry, refactor, review)"
                        )),
                    }
                }
            }
            Some(_) => self.problem("phase_defaults", "expected an object keyed by phase"),
        }
        match root.get("prices") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (name, v) in map {
                    if let Some(price) = self.price(v, &format!("prices.{name}")) {
                        config.prices.overrides.push((name.clone(), price));
                    }
                }
            }
            Some(_) => self.problem(
                "prices",
                "expected an object mapping models or agents to {\"input\": USD, \"output\": USD} per million tokens",
            ),
        }
        match root.get("story_type_defaults") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (t, v) in map {
                    let key = format!("story_type_defaults.{t}");
                    if t.parse::<crate::story_type::StoryType>().is_err() {
                        let known: Vec<&str> = crate::story_type::StoryType::ALL
                            .iter()
                            .map(|k| k.as_str())
                            .collect();
                        self.problem(
                            key,
                            format!(
                                "unknown story type '{t}' (story types: {})",
                                known.join(", ")
                            ),
                        );
                        continue;
                    }
                    if let Some(a) = self.string(v, &key) {
                        config.story_type_defaults.push((t.clone(), a));
                    }
                }
            }
            Some(_) => self.problem(
                "story_type_defaults",
                "expected an object mapping story types to agent names",
            ),
        }
        // Agents that are defined but were rejected above already have their
        // problem reported; naming them elsewhere is not a second problem.
        let defined: Vec<String> = root
            .get("agents")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        self.check_names(&mut config, &defined);
        config
    }

    /// Every agent a phase or `default_agent` names must be defined;
    /// `claude-code` is implied when it is named but not defined.
    fn check_names(&mut self, config: &mut AgentsConfig, defined: &[String]) {
        let mut named: Vec<(String, String)> =
            vec![("default_agent".into(), config.default_agent.clone())];
        for (phase, pc) in &config.phase_defaults {
            let base = format!("phase_defaults.{phase}");
            if let Some(a) = &pc.default_agent {
                named.push((format!("{base}.default_agent"), a.clone()));
            }
            for (i, a) in pc.fallback_chain.iter().enumerate() {
                named.push((format!("{base}.fallback_chain[{i}]"), a.clone()));
            }
            for (t, a) in &pc.story_type_overrides {
                named.push((format!("{base}.story_type_overrides.{t}"), a.clone()));
            }
        }
        for (t, a) in &config.story_type_defaults {
            named.push((format!("story_type_defaults.{t}"), a.clone()));
        }
        if config.agent(CLAUDE_CODE).is_none() && named.iter().any(|(_, a)| a == CLAUDE_CODE) {
            config.agents.push(AgentDef::claude_code());
        }
        for (key, name) in named {
            if config.agent(&name).is_none() && !defined.contains(&name) {
                let known = config.names().join(", ");
                self.problem(
                    key,
                    format!("unknown agent '{name}' (define it under \"agents\"; known: {known})"),
                );
            }
        }
    }

    fn agent(&mut self, name: &str, value: &Value) -> Option<AgentDef> {
        let key = format!("agents.{name}");
        if name.trim().is_empty() {
            self.problem(key, "agent names must not be empty");
            return None;
        }
        let Some(obj) = value.as_object() else {
            self.problem(key, "expected an object with \"type\" and \"command\"");
            return None;
        };
        let obj = Tracked::new(obj);
        // Without a known type the entry cannot be read: its other keys are
        // not judged (they may all be right for the type that was meant).
        let kind = self.agent_kind(&obj, &key)?;
        let def = self.agent_fields(name, kind, &obj, &key);
        self.warnings.extend(obj.unknown(&key, &["subagent_type"]));
        def
    }

    /// `type`: cli (the default), task-tool or api.
    fn agent_kind(&mut self, obj: &Tracked<'_>, key: &str) -> Option<AgentKind> {
        let Some(v) = obj.get("type") else {
            return Some(AgentKind::Cli);
        };
        match self.string(v, &format!("{key}.type"))?.as_str() {
            "cli" => Some(AgentKind::Cli),
            "task-tool" | "task_tool" => Some(AgentKind::TaskTool),
            "api" => Some(AgentKind::Api),
            other => {
                self.problem(
                    format!("{key}.type"),
                    format!(
                        "unknown agent type '{other}' (expected \"cli\", \"task-tool\" or \"api\")"
                    ),
                );
                None
            }
        }
    }

    /// Every field of an agent of `kind`. Each is read even after a problem
    /// (no early return), so the unknown-field check after it knows them all.
    fn agent_fields(
        &mut self,
        name: &str,
        kind: AgentKind,
        obj: &Tracked<'_>,
        key: &str,
    ) -> Option<AgentDef> {
        let key = key.to_string();
        let description = obj
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string);
        if kind == AgentKind::Api {
            return self.api_agent_fields(name, obj, &key, description);
        }
        let command = match obj.get("command") {
            Some(v) => self.string(v, &format!("{key}.command")),
            None => None,
        };
        // (An api agent has returned above.) A problem here is reported,
        // and the other fields are still read (see agent_fields).
        let command = match (command, kind) {
            (Some(c), _) if !c.trim().is_empty() => Some(c),
            (_, AgentKind::TaskTool) => Some(TASK_TOOL_COMMAND.to_string()),
            (Some(_), _) => {
                self.problem(format!("{key}.command"), "must not be empty");
                None
            }
            (None, _) => {
                if !obj.contains_key("command") {
                    self.problem(
                        format!("{key}.command"),
                        "missing command for a \"cli\" agent (add \"command\": \"<program>\")",
                    );
                }
                None
            }
        };
        let args = self.cli_args(obj, &key, kind);
        let timeout_secs = self.timeout(obj, &key);
        let env = self.env_vars(obj, &key);
        let working_dir = match obj.get("working_dir") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let k = format!("{key}.working_dir");
                let s = self.string(v, &k);
                if let Some(s) = &s {
                    self.placeholders(s, &k);
                }
                s
            }
        };
        let resume_args = self.session_argv(obj.get("resume_args"), &format!("{key}.resume_args"));
        let list_sessions_args = self.session_argv(
            obj.get("list_sessions_args"),
            &format!("{key}.list_sessions_args"),
        );
        let version_args =
            self.session_argv(obj.get("version_args"), &format!("{key}.version_args"));
        let sandbox = self.agent_sandbox(obj.get("sandbox"), &format!("{key}.sandbox"));
        Some(AgentDef {
            name: name.to_string(),
            kind,
            command: command?,
            args,
            timeout_secs,
            env,
            working_dir,
            description,
            resume_args,
            list_sessions_args,
            version_args,
            api: None,
            sandbox,
        })
    }

    /// The fields of an `"api"` agent: the model API instead of a command
    /// (a command's fields are ignored, with a warning).
    fn api_agent_fields(
        &mut self,
        name: &str,
        obj: &Tracked<'_>,
        key: &str,
        description: Option<String>,
    ) -> Option<AgentDef> {
        let kind = AgentKind::Api;
        let timeout_secs = self.timeout(obj, key);
        for field in [
            "command",
            "args",
            "resume_args",
            "list_sessions_args",
            "version_args",
        ] {
            if obj.get(field).is_some_and(|v| !v.is_null()) {
                self.warnings.push(format!(
                    "{key}.{field}: ignored for an \"api\" agent (cascade calls the model API itself)"
                ));
            }
        }
        let api = self.api(obj, key)?;
        Some(AgentDef {
            name: name.to_string(),
            kind,
            command: api.label(),
            args: Vec::new(),
            timeout_secs,
            env: Vec::new(),
            working_dir: None,
            description,
            resume_args: None,
            list_sessions_args: None,
            version_args: None,
            api: Some(api),
            sandbox: AgentSandbox::default(),
        })
    }

    /// `args` of a CLI agent (a task-tool agent without them gets Claude
    /// Code's), each checked for placeholders.
    fn cli_args(&mut self, obj: &Tracked<'_>, key: &str, kind: AgentKind) -> Vec<String> {
        match obj.get("args") {
            None | Some(Value::Null) if kind == AgentKind::TaskTool => {
                TASK_TOOL_ARGS.iter().map(|s| s.to_string()).collect()
            }
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut args = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let k = format!("{key}.args[{i}]");
                    if let Some(s) = self.string(item, &k) {
                        self.placeholders(&s, &k);
                        args.push(s);
                    }
                }
                args
            }
            Some(_) => {
                self.problem(format!("{key}.args"), "expected an array of strings");
                Vec::new()
            }
        }
    }

    /// `env` of a CLI agent: names and string (or number, bool) values.
    fn env_vars(&mut self, obj: &Tracked<'_>, key: &str) -> Vec<(String, String)> {
        let mut env = Vec::new();
        match obj.get("env") {
            None | Some(Value::Null) => {}
            Some(Value::Object(vars)) => {
                for (k, v) in vars {
                    let vk = format!("{key}.env.{k}");
                    if k.is_empty() || k.contains('=') || k.contains('\0') {
                        self.problem(vk, "invalid environment variable name");
                        continue;
                    }
                    let value = match v {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        Value::Bool(b) => Some(b.to_string()),
                        _ => {
                            self.problem(vk.clone(), "expected a string value");
                            None
                        }
                    };
                    if let Some(value) = value {
                        self.placeholders(&value, &vk);
                        env.push((k.clone(), value));
                    }
                }
            }
            Some(_) => self.problem(format!("{key}.env"), "expected an object of strings"),
        }
        env
    }

    /// `sandbox`: `{"write": [paths], "net_ports": [ports]}`.
    fn agent_sandbox(&mut self, value: Option<&Value>, key: &str) -> AgentSandbox {
        let mut out = AgentSandbox::default();
        let obj = match value {
            None | Some(Value::Null) => return out,
            Some(Value::Object(o)) => Tracked::new(o),
            Some(_) => {
                self.problem(
                    key,
                    "expected an object like {\"write\": [\"~/.claude\"], \"net_ports\": [443]}",
                );
                return out;
            }
        };
        match obj.get("write") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    let k = format!("{key}.write[{i}]");
                    let Some(p) = self.string(item, &k) else {
                        continue;
                    };
                    if cascade_process::sandbox::expand_home(&p, Some(Path::new("/"))).is_some() {
                        out.write.push(p);
                    } else {
                        self.problem(k, "must be an absolute path or start with '~/'");
                    }
                }
            }
            Some(_) => self.problem(format!("{key}.write"), "expected an array of paths"),
        }
        match obj.get("net_ports") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    match item.as_u64().and_then(|n| u16::try_from(n).ok()) {
                        Some(port) if port > 0 => out.net_ports.push(port),
                        _ => self.problem(
                            format!("{key}.net_ports[{i}]"),
                            "expected a TCP port (1 to 65535)",
                        ),
                    }
                }
            }
            Some(_) => self.problem(format!("{key}.net_ports"), "expected an array of ports"),
        }
        self.warnings.extend(obj.unknown(key, &[]));
        out
    }

    /// `timeout`: whole seconds (a fraction rounds up), at most
    /// [`MAX_TIMEOUT_SECS`].
    fn timeout(&mut self, obj: &Tracked<'_>, key: &str) -> Option<u64> {
        match obj.get("timeout") {
            None | Some(Value::Null) => None,
            // Whole seconds; a fractional value is rounded up.
            // At most MAX_TIMEOUT_SECS: a deadline must stay representable
            // (an absurd value like 1e30 made the executor's clock overflow).
            Some(v) => match v.as_f64().filter(|f| f.is_finite() && *f > 0.0) {
                Some(f) if f <= MAX_TIMEOUT_SECS as f64 => Some(f.ceil() as u64),
                Some(_) => {
                    self.problem(
                        format!("{key}.timeout"),
                        format!("at most {MAX_TIMEOUT_SECS} seconds (30 days)"),
                    );
                    None
                }
                None => {
                    self.problem(
                        format!("{key}.timeout"),
                        "expected a positive number of seconds",
                    );
                    None
                }
            },
        }
    }

    /// `resume_args` / `list_sessions_args`: an optional array of strings
    /// whose placeholders may include the session ones.
    fn session_argv(&mut self, value: Option<&Value>, key: &str) -> Option<Vec<String>> {
        match value {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => {
                let mut argv = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let k = format!("{key}[{i}]");
                    if let Some(s) = self.string(item, &k) {
                        if let Some(name) = placeholders::unknown_session_placeholder(&s) {
                            self.problem(
                                k,
                                format!(
                                    "unknown placeholder '{{{name}}}' (known: {})",
                                    placeholders::PLACEHOLDERS
                                        .iter()
                                        .chain(placeholders::SESSION_PLACEHOLDERS.iter())
                                        .map(|p| format!("{{{p}}}"))
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                ),
                            );
                        }
                        argv.push(s);
                    }
                }
                Some(argv)
            }
            Some(_) => {
                self.problem(key, "expected an array of strings");
                None
            }
        }
    }

    fn phase(&mut self, value: &Value, key: &str) -> PhaseConfig {
        let Some(obj) = value.as_object() else {
            self.problem(
                key,
                "expected an object with default_agent and fallback_chain",
            );
            return PhaseConfig::default();
        };
        let obj = Tracked::new(obj);
        let pc = self.phase_fields(&obj, key);
        self.warnings.extend(obj.unknown(key, &[]));
        pc
    }

    fn phase_fields(&mut self, obj: &Tracked<'_>, key: &str) -> PhaseConfig {
        let mut pc = PhaseConfig::default();
        if let Some(v) = obj.get("default_agent").filter(|v| !v.is_null()) {
            pc.default_agent = self.string(v, &format!("{key}.default_agent"));
        }
        match obj.get("fallback_chain") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    if let Some(s) = self.string(item, &format!("{key}.fallback_chain[{i}]")) {
                        pc.fallback_chain.push(s);
                    }
                }
            }
            Some(_) => self.problem(
                format!("{key}.fallback_chain"),
                "expected an array of agent names",
            ),
        }
        match obj.get("story_type_overrides") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (t, v) in map {
                    if let Some(a) = self.string(v, &format!("{key}.story_type_overrides.{t}")) {
                        pc.story_type_overrides.push((t.clone(), a));
                    }
                }
            }
            Some(_) => self.problem(
                format!("{key}.story_type_overrides"),
                "expected an object mapping story types to agent names",
            ),
        }
        pc
    }

    /// `{"input": n, "output": n, "cached_input": n}` (USD per million tokens).
    fn price(&mut self, value: &Value, key: &str) -> Option<crate::pricing::Price> {
        let Some(obj) = value.as_object() else {
            self.problem(
                key,
                format!(
                    "expected {{\"input\": USD, \"output\": USD}} per million tokens, found {}",
                    json_kind(value)
                ),
            );
            return None;
        };
        let obj = Tracked::new(obj);
        let mut num = |field: &str, required: bool| -> Option<f64> {
            match obj.get(field) {
                None | Some(Value::Null) if !required => None,
                Some(Value::Number(n)) if n.as_f64().is_some_and(|f| f >= 0.0) => n.as_f64(),
                _ => {
                    self.problem(
                        format!("{key}.{field}"),
                        "expected a number >= 0 (USD per million tokens)",
                    );
                    None
                }
            }
        };
        let input = num("input", true);
        let output = num("output", true);
        let cached_input = num("cached_input", false);
        self.warnings.extend(obj.unknown(key, &[]));
        Some(crate::pricing::Price {
            input: input?,
            cached_input,
            output: output?,
        })
    }

    fn string(&mut self, value: &Value, key: &str) -> Option<String> {
        match value {
            Value::String(s) => Some(s.clone()),
            other => {
                self.problem(
                    key,
                    format!("expected a string, found {}", json_kind(other)),
                );
                None
            }
        }
    }

    fn placeholders(&mut self, template: &str, key: &str) {
        if let Some(name) = placeholders::unknown_placeholder(template) {
            self.problem(
                key,
                format!(
                    "unknown placeholder '{{{name}}}' (known: {})",
                    placeholders::PLACEHOLDERS
                        .iter()
                        .map(|p| format!("{{{p}}}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
