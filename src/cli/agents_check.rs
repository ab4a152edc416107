//! `cascade agents check [--json] [--refresh]` and the same check before a
//! run (`approve`, `resume`, `mega approve`) for the agents the run will use.
//!
//! The check itself (version, flags against `--help`, login, root; for an
//! api agent its key and its server) lives in `cascade_agents::check`;
//! this module renders it and decides the exit code: 0 when every
//! installed agent passed (warnings included), 1 when an installed agent
//! failed, 2 when none of the configured agents is installed. Before a
//! run, a chosen agent that fails its check makes the stories fall back
//! along their chain (said on stderr, and in the events' fallbacks); when
//! no candidate is left, or with `--no-fallback`, the run stops before any
//! story starts with exit 2 and the report. A failure read from the cache
//! is checked again once before it makes a run fall back or stop.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use cascade_agents::{
    check_agents, AgentCheck, AgentDef, AgentsConfig, CheckCache, CheckStatus, CliFamily, Detector,
    Overrides, Phase, ResolveError, Resolver,
};
use cascade_plan::Story;
use cascade_process::CancelToken;
use clap::Args;
use serde::Serialize;

use super::{CliResult, Failure, Global, EXIT_FAILED, EXIT_OK, EXIT_USAGE};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Check again even when the cached result still applies
    #[arg(long)]
    pub refresh: bool,
}

#[derive(Debug, Serialize)]
struct CheckOutput<'a> {
    source: String,
    passed: bool,
    agents: &'a [AgentCheck],
}

/// `cascade agents check`.
pub fn check(g: &Global, a: CheckArgs) -> CliResult {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::failed(anyhow!("cannot read the current directory: {e}")))?;
    let loaded = AgentsConfig::load(g.agents.as_deref(), &cwd).map_err(Failure::usage)?;
    for w in &loaded.warnings {
        errln!("warning: {}: {w}", loaded.source);
    }
    let (detector, cache) = detector(&cwd, true);
    if a.refresh {
        detector.refresh();
    }
    let defs: Vec<AgentDef> = loaded.config.agents.clone();
    let checks = run_checks(&defs, &detector, cache.as_ref(), a.refresh)?;
    let any_installed = checks.iter().any(|c| c.status != CheckStatus::Missing);
    let any_failed = checks.iter().any(AgentCheck::failed);
    if a.json {
        let out = CheckOutput {
            source: loaded.source.to_string(),
            passed: any_installed && !any_failed,
            agents: &checks,
        };
        let text = serde_json::to_string_pretty(&out)
            .map_err(|e| Failure::failed(anyhow!("cannot encode JSON: {e}")))?;
        outln!("{text}");
    } else {
        out!("agents from {}\n{}", loaded.source, render(&checks));
    }
    if !any_installed {
        errln!(
            "error: none of the configured agents is installed; tried: {} (install one: see docs/agents/)",
            checks
                .iter()
                .map(|c| format!("{} ({})", c.agent, c.command))
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(EXIT_USAGE);
    }
    Ok(if any_failed { EXIT_FAILED } else { EXIT_OK })
}

/// The report as text: one line per agent, then its problems with fixes.
pub fn render(checks: &[AgentCheck]) -> String {
    let width = checks.iter().map(|c| c.agent.len()).max().unwrap_or(0);
    let mut text = String::new();
    for c in checks {
        let version = c.version.as_deref().unwrap_or("");
        let cached = if c.cached { " (cached)" } else { "" };
        text.push_str(&format!(
            "  {:<width$}  {:<7}  {}{cached}\n",
            c.agent,
            c.status.as_str(),
            if version.is_empty() {
                c.command.clone()
            } else {
                format!("{} {version}", c.command)
            }
        ));
        for p in &c.problems {
            let mark = if p.fatal { "error" } else { "note" };
            text.push_str(&format!("  {:<width$}    {mark}: {}\n", "", p.message));
            if let Some(fix) = &p.fix {
                text.push_str(&format!("  {:<width$}      fix: {fix}\n", ""));
            }
        }
    }
    text
}

/// A detector on `$PATH` caching in the repository's `.cascade/` (when in
/// one), and the check cache next to it. `writes` false: both are only read
/// (a dry run writes nothing).
fn detector(cwd: &Path, writes: bool) -> (Detector, Option<CheckCache>) {
    let mut d = Detector::from_env();
    let mut cache = None;
    if let Ok(paths) = cascade_git::repo::RepoPaths::discover(cwd) {
        if !writes || paths.ensure_excluded(&["/.cascade/"]).is_ok() {
            let dir = paths.cascade_dir();
            d = d.cache_dir(&dir);
            let c = CheckCache::new(&dir);
            cache = Some(if writes { c } else { c.read_only() });
            if !writes {
                d = d.read_only();
            }
        }
    }
    (d, cache)
}

fn run_checks(
    defs: &[AgentDef],
    detector: &Detector,
    cache: Option<&CheckCache>,
    refresh: bool,
) -> Result<Vec<AgentCheck>, Failure> {
    let with_paths: Vec<(AgentDef, Option<PathBuf>)> = defs
        .iter()
        // An api agent has no command to look up: its check asks its server.
        .map(|d| {
            let path = d.api.is_none().then(|| detector.detect(&d.command).path);
            (d.clone(), path.flatten())
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(anyhow!("cannot start the async runtime: {e}")))?;
    Ok(rt.block_on(check_agents(
        &with_paths,
        cache,
        refresh,
        &CancelToken::new(),
    )))
}

/// Before a run: checks the agents `kinds` resolve to in `phases` (cached
/// per agent version, so a second run costs a `stat` per agent). `kinds`
/// are the run's stories one per kind ([`cascade_agents::resolve::story_kinds`]:
/// stories of one kind resolve alike), as the engine found them. An agent
/// that fails makes its stories fall back (said on stderr); the agents
/// fallen back to are checked too. Exit 2 with the report when a story is
/// left without a usable agent, or when `--no-fallback` keeps a failing one.
pub fn before_run(
    g: &Global,
    cwd: &Path,
    overrides: &Overrides,
    kinds: &[&Story],
    phases: &[Phase],
    writes: bool,
) -> Result<(), Failure> {
    // A config or plan problem is reported by the run itself, with its own
    // wording; the check only speaks about agents.
    let Ok(loaded) = AgentsConfig::load(g.agents.as_deref(), cwd) else {
        return Ok(());
    };
    let config = &loaded.config;
    let (_, cache) = detector(cwd, writes);
    if let Some(cache) = &cache {
        recheck_failures(config, cwd, cache, writes)?;
    }
    let mut checked: Vec<AgentCheck> = Vec::new();
    let mut said: BTreeSet<String> = BTreeSet::new();
    // Each round checks the agents chosen so far; a failure changes the
    // choice (the detector reads the failed check), so repeat until stable.
    // Every round removes at least one agent from the chain: bounded.
    for _ in 0..=config.agents.len() {
        let (detector, _) = detector(cwd, writes);
        let resolver = Resolver::new(config, &detector, overrides.clone());
        let mut chosen: BTreeSet<String> = BTreeSet::new();
        for story in kinds {
            for phase in phases {
                match resolver.resolve(story, *phase) {
                    Ok(a) => {
                        for f in &a.fallbacks {
                            if f.why.starts_with("failed `cascade agents check`")
                                && said.insert(format!("{}->{}", f.from, f.to))
                            {
                                errln!(
                                    "warning: agent '{}' {}; falling back to '{}'",
                                    f.from,
                                    f.why,
                                    f.to
                                );
                            }
                        }
                        chosen.insert(a.agent);
                    }
                    // Unknown agents and the like: the run reports them.
                    Err(ResolveError::NoneAvailable { .. })
                        if checked.iter().any(AgentCheck::failed) =>
                    {
                        let e = resolver
                            .resolve(story, *phase)
                            .err()
                            .map(|e| e.to_string())
                            .unwrap_or_default();
                        return Err(Failure::usage(anyhow!(
                            "{e}\nagent check:\n{}",
                            render(&checked).trim_end()
                        )));
                    }
                    Err(_) => {}
                }
            }
        }
        let todo: Vec<AgentDef> = chosen
            .iter()
            .filter(|name| !checked.iter().any(|c| &c.agent == *name))
            .filter_map(|name| config.agent(name).cloned())
            // Only the agent CLIs cascade knows are checked before a run: a
            // custom command's --help says nothing about its argv, and a
            // script may do real work (or hang) when given --version.
            .filter(|d| CliFamily::of_command(&d.command) != CliFamily::Other)
            .collect();
        if todo.is_empty() {
            break;
        }
        let results = run_checks(&todo, &detector, cache.as_ref(), false)?;
        let failed_now: Vec<&AgentCheck> = results.iter().filter(|c| c.failed()).collect();
        if overrides.no_fallback {
            if let Some(f) = failed_now.first() {
                return Err(Failure::usage(anyhow!(
                    "agent '{}' {} (--no-fallback: no other agent is tried)\nagent check:\n{}",
                    f.agent,
                    f.summary(),
                    render(&results).trim_end()
                )));
            }
        }
        let again = !failed_now.is_empty();
        checked.extend(results);
        if !again {
            break;
        }
    }
    Ok(())
}

/// Checks again, once, every agent whose cached check failed, before that
/// verdict can make a run fall back or refuse: the user may have applied
/// the printed fix in a way the cache key does not see (a login the CLI
/// keeps elsewhere, a variable only the CLI reads). Agents that pass are
/// stored as passing; the rest fail as before, now from a fresh check.
fn recheck_failures(
    config: &AgentsConfig,
    cwd: &Path,
    cache: &CheckCache,
    writes: bool,
) -> Result<(), Failure> {
    let (detector, _) = detector(cwd, writes);
    let stale: Vec<AgentDef> = config
        .agents
        .iter()
        .filter(|d| d.api.is_none() && CliFamily::of_command(&d.command) != CliFamily::Other)
        .filter(|d| {
            detector
                .detect(&d.command)
                .path
                .is_some_and(|p| cache.failure(d, &p).is_some())
        })
        .cloned()
        .collect();
    if !stale.is_empty() {
        run_checks(&stale, &detector, Some(cache), true)?;
    }
    Ok(())
}

/// [`before_run`] for a PRD run: `kinds` are the kinds of its pending
/// stories (the engine's [`cascade_engine::engine::Prepared::pending_kinds`],
/// inferred once for its check and this one), in the implementation phase
/// and (when retries are allowed) the retry phase.
pub fn before_prd_run(
    g: &Global,
    kinds: &[&Story],
    overrides: Overrides,
    retries: bool,
    writes: bool,
) -> Result<(), Failure> {
    let Ok(cwd) = std::env::current_dir() else {
        return Ok(());
    };
    let phases: &[Phase] = if retries {
        &[Phase::Implementation, Phase::Retry]
    } else {
        &[Phase::Implementation]
    };
    before_run(g, &cwd, &overrides, kinds, phases, writes)
}
