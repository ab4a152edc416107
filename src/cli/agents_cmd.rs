//! `cascade agents list|resolve`: configured agents and the resolver's choices.
//!
//! `list` shows every configured agent, whether its command is on PATH, where,
//! and its version (from `<command> --version`, run through cascade-process
//! with a short timeout, in parallel); an api agent, its endpoint and
//! whether its key variable is set. `resolve` shows which agent every story
//! of a PRD gets in a phase, why, and the fallbacks taken, as text or as
//! CLI.md's `{"assignments": [...]}`. Config problems, unknown phases and
//! unknown agents given to `--agent` & co. exit 2; so does a story no agent
//! can take (with every candidate tried and why). `check` is in
//! [`super::agents_check`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::anyhow;
use cascade_agents::{
    AgentsConfig, Assignment, Detector, LoadedConfig, Overrides, Phase, ResolveError, Resolver,
};
use cascade_process::{CancelToken, Spec};
use clap::{Args, Subcommand};
use serde::Serialize;

use super::{CliResult, Failure, Global, EXIT_OK, EXIT_USAGE};

/// How long `<command> --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// List configured agents, whether they are installed, their path and version
    List(ListArgs),
    /// Show which agent every story of a PRD resolves to, and why
    Resolve(ResolveArgs),
    /// Check installed agents: version, that their argv flags exist, login
    Check(super::agents_check::CheckArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Ignore the cached detection results
    #[arg(long)]
    pub refresh: bool,
}

#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The PRD to read (default: ./prd.json, else the project's Plan Cascade data directory)
    #[arg(long, value_name = "PATH")]
    pub prd: Option<PathBuf>,
    /// Phase to resolve for (planning, implementation, retry, refactor, review)
    #[arg(long, value_name = "NAME", default_value = "implementation")]
    pub phase: String,
    /// Use this agent for every story
    #[arg(long, value_name = "A")]
    pub agent: Option<String>,
    /// Agent for the implementation phase
    #[arg(long, value_name = "A")]
    pub impl_agent: Option<String>,
    /// Agent for the retry phase
    #[arg(long, value_name = "A")]
    pub retry_agent: Option<String>,
    /// Agent for the planning phase (PRD generation)
    #[arg(long, value_name = "A")]
    pub prd_agent: Option<String>,
    /// Take the first candidate only (it must be installed; its flags are
    /// not checked), never another
    #[arg(long)]
    pub no_fallback: bool,
    /// Ignore the cached detection results
    #[arg(long)]
    pub refresh: bool,
    /// How stories find their agent: `learned` puts what this repository's
    /// history chose per story type first (as `approve --route learned`)
    #[arg(long, value_enum, value_name = "HOW", default_value_t = super::run_flags::RouteArg::Configured)]
    pub route: super::run_flags::RouteArg,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn run(g: &Global, c: AgentsCommand) -> CliResult {
    match c {
        AgentsCommand::List(a) => list(g, a),
        AgentsCommand::Resolve(a) => resolve(g, a),
        AgentsCommand::Check(a) => super::agents_check::check(g, a),
    }
}

fn cwd() -> Result<PathBuf, Failure> {
    std::env::current_dir()
        .map_err(|e| Failure::failed(anyhow!("cannot read the current directory: {e}")))
}

/// Loads agents.json (exit 2 on any problem) and prints its warnings.
fn load_config(g: &Global, cwd: &Path) -> Result<LoadedConfig, Failure> {
    let loaded = AgentsConfig::load(g.agents.as_deref(), cwd).map_err(Failure::usage)?;
    for w in &loaded.warnings {
        errln!("warning: {}: {w}", loaded.source);
    }
    Ok(loaded)
}

/// A detector on `$PATH`, caching in the repository's `.cascade/` when there is one.
fn detector(cwd: &Path, refresh: bool) -> Detector {
    let mut d = Detector::from_env();
    if let Ok(paths) = cascade_git::repo::RepoPaths::discover(cwd) {
        // Keep `.cascade/` out of `git status`; a failure only costs the cache.
        if paths.ensure_excluded(&["/.cascade/"]).is_ok() {
            d = d.cache_dir(paths.cascade_dir());
        }
    }
    if refresh {
        d.refresh();
    }
    d
}

#[derive(Debug, Serialize)]
struct AgentRow {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    command: String,
    found: bool,
    path: Option<PathBuf>,
    version: Option<String>,
    timeout: u64,
    default: bool,
    /// An api agent's base_url.
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
    /// The variable holding an api agent's key.
    #[serde(skip_serializing_if = "Option::is_none")]
    api_key_env: Option<String>,
}

#[derive(Debug, Serialize)]
struct ListOutput {
    source: String,
    default_agent: String,
    agents: Vec<AgentRow>,
}

fn list(g: &Global, a: ListArgs) -> CliResult {
    let cwd = cwd()?;
    let loaded = load_config(g, &cwd)?;
    let det = detector(&cwd, a.refresh);
    let config = &loaded.config;
    let mut rows: Vec<AgentRow> = config
        .agents
        .iter()
        .map(|def| {
            // An api agent is available when its key is set; it has no path.
            let (found, path) = match &def.api {
                Some(_) => (det.is_available(def), None),
                None => {
                    let d = det.detect(&def.command);
                    (d.found(), d.path)
                }
            };
            AgentRow {
                name: def.name.clone(),
                kind: def.kind.as_str(),
                command: def.command.clone(),
                found,
                path,
                version: None,
                timeout: def.timeout().as_secs(),
                default: def.name == config.default_agent,
                endpoint: def.api.as_ref().map(|a| a.base_url.clone()),
                api_key_env: def.api.as_ref().and_then(|a| a.api_key_env.clone()),
            }
        })
        .collect();
    // Only the CLIs cascade knows, and agents whose definition says how:
    // a custom script run with `--version` may do real work instead.
    let probes: Vec<(PathBuf, Vec<String>)> = config
        .agents
        .iter()
        .zip(&rows)
        .filter_map(|(def, r)| Some((r.path.clone()?, def.version_probe()?)))
        .collect();
    let versions = probe_versions(probes);
    for r in &mut rows {
        r.version = r
            .path
            .as_ref()
            .and_then(|p| versions.get(p).cloned().flatten());
    }
    if a.json {
        let out = ListOutput {
            source: loaded.source.to_string(),
            default_agent: config.default_agent.clone(),
            agents: rows,
        };
        print_json(&out)?;
    } else {
        let mut text = format!("agents from {}\n", loaded.source);
        let width = rows.iter().map(|r| r.name.len() + 2).max().unwrap_or(0);
        let cmd_width = rows.iter().map(|r| r.command.len()).max().unwrap_or(0);
        for r in &rows {
            let name = if r.default {
                format!("{}*", r.name)
            } else {
                r.name.clone()
            };
            let status = match (&r.path, &r.version, &r.endpoint) {
                (_, _, Some(url)) => match (&r.api_key_env, r.found) {
                    (Some(var), true) => format!("ready  {url}  (key in {var})"),
                    (Some(var), false) => format!("missing  {var} is not set  ({url})"),
                    (None, _) => format!("ready  {url}  (no key)"),
                },
                (Some(p), Some(v), _) => format!("found  {}  ({v})", p.display()),
                (Some(p), None, _) => format!("found  {}", p.display()),
                (None, _, _) => "missing".to_string(),
            };
            text.push_str(&format!(
                "  {name:<width$} {:<10} {:<cmd_width$}  {status}\n",
                r.kind, r.command
            ));
        }
        text.push_str("(* default agent)\n");
        write_stdout(&text);
    }
    Ok(EXIT_OK)
}

/// Runs `<path> <version argv>` for every distinct path, in parallel, each
/// with [`VERSION_TIMEOUT`]; the first non-empty output line is the version.
///
/// The probes run in an empty scratch directory, not the user's checkout: a
/// command that does not understand `--version` (a wrapper script, a
/// scripted agent) may do real work, and it must not leave files in the
/// repository. Output that is not a short printable line is not a version.
fn probe_versions(probes: Vec<(PathBuf, Vec<String>)>) -> BTreeMap<PathBuf, Option<String>> {
    let mut unique = probes;
    unique.sort();
    unique.dedup_by(|a, b| a.0 == b.0);
    let mut out = BTreeMap::new();
    if unique.is_empty() {
        return out;
    }
    let scratch =
        std::env::temp_dir().join(format!("cascade-version-probe-{}", std::process::id()));
    if std::fs::create_dir_all(&scratch).is_err() {
        return out;
    }
    let _cleanup = RemoveOnDrop(scratch.clone());
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return out;
    };
    rt.block_on(async {
        let cancel = CancelToken::new();
        let mut tasks = Vec::new();
        for (path, argv) in unique {
            let spec = Spec::new(path.as_os_str())
                .args(argv)
                .cwd(&scratch)
                .timeout(VERSION_TIMEOUT)
                .grace(Duration::from_millis(200))
                .tail_bytes(4096);
            let cancel = cancel.clone();
            tasks.push((
                path,
                tokio::spawn(async move { spec.run(&cancel).await.ok() }),
            ));
        }
        for (path, task) in tasks {
            let version = match task.await {
                Ok(Some(outcome)) if outcome.success() => {
                    let text = outcome.stdout.text_lossy();
                    let err = outcome.stderr.text_lossy();
                    text.lines()
                        .chain(err.lines())
                        .map(str::trim)
                        .find(|l| !l.is_empty())
                        .and_then(version_line)
                }
                _ => None,
            };
            out.insert(path, version);
        }
    });
    out
}

/// A `--version` output line as shown to the user, or `None` when it is not
/// a short line of printable text (binary noise, a whole document).
fn version_line(line: &str) -> Option<String> {
    let printable = |c: char| !c.is_control() && c != char::REPLACEMENT_CHARACTER;
    (line.chars().count() <= 120 && line.chars().all(printable)).then(|| line.to_string())
}

/// Removes a scratch directory when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug, Serialize)]
struct ResolveRow {
    story: String,
    title: String,
    status: String,
    agent: Option<String>,
    reason: Option<String>,
    story_type: Option<String>,
    level: Option<cascade_agents::Level>,
    fallbacks: Vec<cascade_agents::Fallback>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct ResolveOutput {
    phase: String,
    source: String,
    assignments: Vec<ResolveRow>,
    /// The PRD read, and where it was found (flag|project|data_dir).
    plan_file: String,
    plan_source: &'static str,
}

/// The routes `--route learned` takes from this repository's run database.
fn learned_routes(
    cwd: &std::path::Path,
    route: super::run_flags::RouteArg,
) -> Result<Option<cascade_agents::LearnedRoutes>, Failure> {
    if route != super::run_flags::RouteArg::Learned {
        return Ok(None);
    }
    let paths = cascade_git::RepoPaths::discover(cwd).map_err(Failure::usage)?;
    let db = cascade_engine::store::db_path(&paths.cascade_dir());
    cascade_engine::routes::learned_at(&db)
        .map(Some)
        .map_err(Failure::failed)
}

fn resolve(g: &Global, a: ResolveArgs) -> CliResult {
    let cwd = cwd()?;
    let phase: Phase = a.phase.parse().map_err(Failure::usage)?;
    let loaded = load_config(g, &cwd)?;
    let found = super::plan_file::find_prd(a.prd.as_deref())?;
    let prd = cascade_plan::load_prd(&found.path).map_err(Failure::usage)?;
    let det = detector(&cwd, a.refresh);
    let overrides = Overrides {
        agent: a.agent,
        impl_agent: a.impl_agent,
        retry_agent: a.retry_agent,
        prd_agent: a.prd_agent,
        review_agent: None,
        no_fallback: a.no_fallback,
        learned: learned_routes(&cwd, a.route)?,
    };
    let resolver = Resolver::new(&loaded.config, &det, overrides);
    resolver.check_overrides().map_err(Failure::usage)?;
    let mut rows = Vec::new();
    let mut failed = false;
    for story in &prd.stories {
        let row = match resolver.resolve(story, phase) {
            Ok(Assignment {
                agent,
                reason,
                level,
                fallbacks,
                story_type,
                ..
            }) => ResolveRow {
                story: story.id.clone(),
                title: story.title.clone(),
                status: story.status_label().to_string(),
                agent: Some(agent),
                reason: Some(reason),
                story_type: Some(story_type.to_string()),
                level: Some(level),
                fallbacks,
                error: None,
            },
            Err(e @ ResolveError::UnknownAgent { .. }) => return Err(Failure::usage(e)),
            Err(e) => {
                failed = true;
                ResolveRow {
                    story: story.id.clone(),
                    title: story.title.clone(),
                    status: story.status_label().to_string(),
                    agent: None,
                    reason: None,
                    story_type: Some(cascade_agents::infer_story_type(story).to_string()),
                    level: None,
                    fallbacks: Vec::new(),
                    error: Some(e.to_string()),
                }
            }
        };
        rows.push(row);
    }
    for r in &rows {
        if let Some(e) = &r.error {
            errln!("error: {e}");
        }
    }
    if a.json {
        print_json(&ResolveOutput {
            phase: phase.to_string(),
            source: loaded.source.to_string(),
            assignments: rows,
            plan_file: found.path.display().to_string(),
            plan_source: found.source.as_str(),
        })?;
    } else {
        let mut text = format!(
            "{phase} phase, agents from {}, stories of {}\n",
            loaded.source,
            found.path.display()
        );
        let width = rows.iter().map(|r| r.story.len()).max().unwrap_or(0);
        for r in &rows {
            match (&r.agent, &r.reason) {
                (Some(agent), Some(reason)) => {
                    text.push_str(&format!("  {:<width$}  {agent}  ({reason})\n", r.story))
                }
                _ => text.push_str(&format!("  {:<width$}  (no agent)\n", r.story)),
            }
            for f in &r.fallbacks {
                text.push_str(&format!("  {:<width$}    [FALLBACK] {f}\n", ""));
            }
        }
        write_stdout(&text);
    }
    // A story no agent can take is CLI.md's "no agent available": exit 2,
    // with what was tried (printed above).
    Ok(if failed { EXIT_USAGE } else { EXIT_OK })
}

fn print_json<T: Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::failed(anyhow!("cannot encode JSON: {e}")))?;
    write_stdout(&format!("{text}\n"));
    Ok(())
}

/// Writes to stdout, ignoring a closed pipe (`cascade agents list | head`).
fn write_stdout(text: &str) {
    use std::io::Write;
    let mut out = super::out::stdout();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}
