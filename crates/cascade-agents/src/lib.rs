//! cascade-agents: which agent works on a story, and running it.
//!
//! What it owns: the agents.json model (Plan Cascade's schema, with a
//! built-in default), story-type inference, the seven-level priority/fallback
//! resolver, availability detection (`which`, cached in `.cascade/`), the
//! agent process executor (on `cascade-process`: argv only, process groups,
//! timeouts, logs) and the api agent (a model API called in a tool loop),
//! parsing of agents' JSON event streams (final text,
//! session, usage, cost, review verdict), and prompt building with
//! design-doc context and skills. It knows nothing about gates or worktrees,
//! and it never prints.
//!
//! # API summary (what the engine and the binary code against)
//!
//! - Config: [`AgentsConfig::load`]`(explicit: Option<&Path>, cwd) ->
//!   Result<`[`LoadedConfig`]`{config, source, warnings}, `[`ConfigError`]`>`
//!   (lookup: `--agents`, `./agents.json`, `$XDG_CONFIG_HOME/cascade/agents.json`
//!   or `~/.config/cascade/agents.json`, built-in). `config.agent(name) ->
//!   Option<&`[`AgentDef`]`>`, `config.names()`, `config.phase(Phase)`.
//!   `AgentDef { name, kind, command, args, timeout_secs, env, working_dir,
//!   description }`, `.timeout()`.
//! - [`Phase`]`::{Planning, Implementation, Retry, Refactor, Review}` (`FromStr`,
//!   `as_str`). [`infer_story_type`]`(&Story) -> `[`StoryType`]; [`story_type::infer`]
//!   also gives the evidence.
//! - [`Detector`]: `from_env()` / `with_path(PATH, cwd)`, `.cache_dir(".cascade")`
//!   (1 h TTL, keyed by PATH, atomic writes), `.refresh()`, `.detect(cmd) ->
//!   Detection{command, path, checked_at}`, `.is_available(&AgentDef)`.
//! - Resolver: [`Resolver::new`]`(&config, &detector, `[`Overrides`]`{agent,
//!   impl_agent, retry_agent, prd_agent, no_fallback})`;
//!   `.check_overrides()` (unknown `--agent` names => [`ResolveError::UnknownAgent`],
//!   exit 2); `.resolve(&Story, Phase) -> Result<`[`Assignment`]`{agent, reason,
//!   level, fallbacks: Vec<`[`Fallback`]`{from, to, why}>, story_type, checked},
//!   ResolveError>`. `Fallback`'s Display is progress.txt's
//!   `aider -> claude-code: CLI 'aider' not found`.
//!   [`ResolveError::NoneAvailable`] lists every candidate and why.
//! - Executor: [`execute`]`(&AgentDef, `[`AgentRequest`]`{story_id, attempt, phase,
//!   prompt, workdir, cascade_dir, extra_env, timeout_override}, on_spawn:
//!   impl FnOnce(u32), &CancelToken).await -> Result<`[`AgentRun`]`, `[`ExecError`]`>`;
//!   `AgentRun { agent, outcome: cascade_process::Outcome, log_path, prompt_path,
//!   usage: Option<`[`Usage`]`{input_tokens, output_tokens, cached_input_tokens,
//!   cost_usd}>, final_text, session_id, review: Option<`[`ReviewVerdict`]`>,
//!   reported_error }`. Non-zero exit, timeout and cancellation are `Ok` runs;
//!   [`ExecError::Unavailable`] is a missing command (`agent_unavailable`).
//!   Files: `<cascade_dir>/prompts/<story>-<phase>-<attempt>.md` and
//!   `<cascade_dir>/logs/<story>-<phase>-<attempt>.log`. [`invocation`] shows the
//!   argv/env/cwd without running (dry runs).
//! - Prompts: [`PromptContext::load`]`(project_root, cascade_dir, design_dir)`
//!   (skills + `design_doc.json`), then set `.phase` / `.retry =
//!   Some(`[`RetryContext`]`{attempt, max_attempts, previous_agent, error,
//!   gate_summary, output_excerpt})`; [`build_prompt`]`(&Prd, &Story, &ctx) -> String`.
//! - Live failures: [`Watcher`] (used by the executor) classifies provider
//!   trouble from both output streams into [`FailureSignal`]s on
//!   [`AgentRun::signal`] and stops the agent on auth or repeated retries;
//!   [`telling_lines`] picks the lines of output that say what went wrong;
//!   [`classify_text`] reads a rate limit (and its Retry-After) from plain text.
//! - Spend: [`PriceTable`] (`AgentsConfig::prices`: shipped list prices per
//!   model, `prices` in agents.json over them) turns reported tokens into USD
//!   when an agent reports no cost.
//! - Checks: [`check_agents`]`(&[(AgentDef, Option<PathBuf>)], Option<&`[`CheckCache`]`>,
//!   refresh, &CancelToken).await -> Vec<`[`AgentCheck`]`>` (version, flags of
//!   `args`/`resume_args` against the CLI's `--help`, login, root), cached in
//!   `.cascade/agent-checks.json`; a [`Detector`] with a cache dir reports
//!   failed checks through `check_failure`, and the resolver falls back.
//! - Api agents ([`api`]): an agent of `type: "api"` ([`AgentDef::api`]:
//!   [`ApiSettings`]) goes through the same [`execute`] and gives the same
//!   [`AgentRun`]: cascade calls the model API (Anthropic Messages or Chat
//!   Completions, streamed) in a tool loop with its own sandboxed tools
//!   (Read, Write, Edit, Glob, Grep, RunGates). `AgentRequest.tools`
//!   ([`ToolAccess`]) limits the files it may write and injects RunGates
//!   ([`GateHook`]); its conversation is kept under `<cascade_dir>/sessions/`
//!   and continued through `AgentRequest.resume`. An api agent is available
//!   when its key variable is set ([`Detector::is_available`]).
//! - Streams: [`StreamParser`] (`feed_line`, `summary`) for callers that run
//!   agents themselves.
//!
//! ```no_run
//! # async fn demo(prd: cascade_plan::Prd) -> Result<(), Box<dyn std::error::Error>> {
//! use cascade_agents::*;
//! use std::path::Path;
//! let root = Path::new("/repo");
//! let loaded = AgentsConfig::load(None, root)?;
//! let detector = Detector::from_env().cache_dir(root.join(".cascade"));
//! let resolver = Resolver::new(&loaded.config, &detector, Overrides::default());
//! let story = &prd.stories[0];
//! let assignment = resolver.resolve(story, Phase::Implementation)?;
//! let ctx = PromptContext::load(root, &root.join(".cascade"), root)?;
//! let prompt = build_prompt(&prd, story, &ctx);
//! let agent = loaded.config.agent(&assignment.agent).expect("resolved agents exist");
//! let req = AgentRequest::new(&story.id, 1, Phase::Implementation, prompt, root, root.join(".cascade"));
//! let run = execute(agent, req, |pid| println!("pid {pid}"), &cascade_process::CancelToken::new()).await?;
//! println!("{}", run.outcome.describe());
//! # Ok(()) }
//! ```

pub mod api;
pub mod check;
pub mod config;
pub mod design;
pub mod detect;
pub mod exec;
pub mod learned;
pub mod phase;
pub mod placeholders;
pub mod pricing;
pub mod prompt;
pub mod resolve;
pub mod signal;
pub mod signal_text;
pub mod skills;
pub mod story_type;
pub mod stream;
pub mod watch;

pub use api::{GateFuture, GateHook, ToolAccess};
pub use check::{
    check_agent, check_agents, AgentCheck, CheckCache, CheckProblem, CheckStatus, ProblemKind,
};
pub use config::{
    AgentDef, AgentKind, AgentSandbox, AgentsConfig, ApiSettings, ConfigError, ConfigProblem,
    ConfigSource, LoadedConfig, PhaseConfig, Provider, BUILTIN_AGENTS_JSON, DEFAULT_NET_PORTS,
};
pub use design::{DesignDoc, DesignDocError, Pattern, StoryDesign};
pub use detect::{Detection, Detector};
pub use exec::{execute, invocation, AgentRequest, AgentRun, ExecError, Invocation, ResumeSession};
pub use learned::{LearnedRoute, LearnedRoutes, Outcome};
pub use phase::{Phase, UnknownPhase};
pub use pricing::{Price, PriceTable};
pub use prompt::{build_prompt, PromptContext, PromptError, RetryContext};
pub use resolve::{
    Assignment, Candidate, Fallback, Level, Overrides, Rejection, ResolveError, Resolver,
};
pub use signal::{FailureSignal, SignalKind};
pub use signal_text::classify_text;
pub use skills::{select_skills, Skill, SkillSource, SkillsError};
pub use story_type::{infer_story_type, StoryType};
pub use stream::{ReviewScanner, ReviewVerdict, StreamParser, StreamSummary, Usage};
pub use watch::{telling_lines, CliFamily, Watcher, MAX_PROVIDER_RETRIES};
