//! `cascade approve`, `cascade resume`, `cascade status`: running a PRD.
//!
//! The commands turn flags into an [`EngineConfig`] and [`RunOptions`], wire
//! the reporter (`--json`: NDJSON on stdout; else the terminal view), the
//! Ctrl-C handler (first: cancel, state saved, exit 130; second: exit at
//! once) and the confirmation between batches (asked on the terminal; without
//! one and without `--yes`, the run stops after one batch), and map the
//! result to the exit codes of CLI.md.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cascade_engine::config::{EngineConfig, Mode, Pause, RunOptions};
use cascade_engine::engine::{DryRun, Engine};
use cascade_engine::lock::RunLock;
use cascade_engine::scheduler::Discipline;
use cascade_engine::state::{RunPhase, RunState};
use cascade_engine::{RetryPolicy, RunStatus};
use cascade_process::CancelToken;
use clap::{Args, ValueEnum};

use super::report::Reporter;
use super::signals::StopSignals;
use super::{CliResult, Failure, Global, EXIT_FAILED, EXIT_OK};

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ScheduleArg {
    /// A batch starts when the previous one is finished
    Batch,
    /// A story starts as soon as its dependencies are merged
    Eager,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ModeArg {
    /// Retry until every story is complete or out of retries
    UntilComplete,
    /// Stop after --max-iterations scheduling rounds
    MaxIterations,
    /// Stop after the current batch completes
    BatchComplete,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The PRD to run
    #[arg(long, value_name = "PATH", default_value = "prd.json")]
    pub prd: PathBuf,
    /// Run every batch without asking
    #[arg(long)]
    pub auto_run: bool,
    /// Use this agent for every story
    #[arg(long, value_name = "A")]
    pub agent: Option<String>,
    /// Agent for the implementation phase
    #[arg(long, value_name = "A")]
    pub impl_agent: Option<String>,
    /// Agent for retries
    #[arg(long, value_name = "A")]
    pub retry_agent: Option<String>,
    /// Use the named agent even if it is not installed
    #[arg(long)]
    pub no_fallback: bool,
    /// Retries per story after the first attempt
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub max_retries: u32,
    /// Base delay of the exponential retry backoff, in seconds (0: retry at once)
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 2.0,
        allow_negative_numbers = true
    )]
    pub retry_delay: f64,
    /// Stories running at once
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub parallel: usize,
    /// Scheduling discipline
    #[arg(long, value_enum, default_value_t = ScheduleArg::Batch)]
    pub schedule: ScheduleArg,
    /// Stop scheduling new stories after the first failure
    #[arg(long)]
    pub fail_fast: bool,
    /// Run even if the working tree has uncommitted changes
    #[arg(long)]
    pub allow_dirty: bool,
    /// When the run stops
    #[arg(long, value_enum, default_value_t = ModeArg::UntilComplete)]
    pub mode: ModeArg,
    /// Iterations for --mode max-iterations
    #[arg(long, value_name = "N")]
    pub max_iterations: Option<u32>,
    /// Print the schedule with agents and fallbacks; run nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask before each batch
    #[arg(long)]
    pub yes: bool,
    /// Print NDJSON events instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn approve(g: &Global, a: RunArgs) -> CliResult {
    run(g, a, false)
}

pub fn resume(g: &Global, a: RunArgs) -> CliResult {
    run(g, a, true)
}

/// Turns the flags into run options (usage errors for inconsistent ones).
pub fn run_options(a: &RunArgs, resume: bool) -> Result<RunOptions, Failure> {
    if !a.retry_delay.is_finite() || a.retry_delay < 0.0 {
        return Err(Failure::usage(anyhow::anyhow!(
            "--retry-delay must be a number of seconds >= 0 (got {})",
            a.retry_delay
        )));
    }
    if a.parallel == 0 {
        return Err(Failure::usage(anyhow::anyhow!(
            "--parallel must be at least 1"
        )));
    }
    let mode = match (a.mode, a.max_iterations) {
        (ModeArg::MaxIterations, None) => {
            return Err(Failure::usage(anyhow::anyhow!(
                "--mode max-iterations needs --max-iterations N"
            )))
        }
        (_, Some(0)) => {
            return Err(Failure::usage(anyhow::anyhow!(
                "--max-iterations must be at least 1"
            )))
        }
        (ModeArg::MaxIterations, Some(n)) | (ModeArg::UntilComplete, Some(n)) => {
            Mode::MaxIterations(n)
        }
        (ModeArg::UntilComplete, None) => Mode::UntilComplete,
        (ModeArg::BatchComplete, _) => Mode::BatchComplete,
    };
    // Checked above to be finite and >= 0; beyond a day it is surely a slip.
    let base = Duration::try_from_secs_f64(a.retry_delay)
        .ok()
        .filter(|d| *d <= Duration::from_secs(24 * 3600))
        .ok_or_else(|| {
            Failure::usage(anyhow::anyhow!(
                "--retry-delay {:?} is too long (at most 86400 seconds)",
                a.retry_delay
            ))
        })?;
    let pause = if a.auto_run || a.yes {
        Pause::Never
    } else if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        Pause::Confirm(Arc::new(confirm_on_terminal))
    } else {
        Pause::AfterBatch
    };
    Ok(RunOptions {
        agent: a.agent.clone(),
        impl_agent: a.impl_agent.clone(),
        retry_agent: a.retry_agent.clone(),
        no_fallback: a.no_fallback,
        retry: RetryPolicy {
            max_retries: a.max_retries,
            base_delay: base,
            max_delay: Duration::from_secs(60).max(base),
            ..RetryPolicy::default()
        },
        parallel: a.parallel,
        schedule: match a.schedule {
            ScheduleArg::Batch => Discipline::Batch,
            ScheduleArg::Eager => Discipline::Eager,
        },
        fail_fast: a.fail_fast,
        allow_dirty: a.allow_dirty,
        mode,
        pause,
        resume,
        ..RunOptions::default()
    })
}

/// Asks on the terminal whether to run the next batch (default yes).
fn confirm_on_terminal(next: usize, total: usize, stories: &[String]) -> bool {
    super::signals::ask_yes_no(&format!(
        "Run batch {next}/{total} ({})?",
        stories.join(", ")
    ))
}

fn engine_config(g: &Global, a: &RunArgs) -> Result<EngineConfig, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(anyhow::anyhow!("cannot read the current directory: {e}")))?;
    let mut config = EngineConfig::new(cwd, a.prd.clone());
    config.agents_path = g.agents.clone();
    Ok(config)
}

fn engine_failure(e: cascade_engine::error::EngineError) -> Failure {
    if e.is_usage() {
        Failure::usage(e)
    } else {
        Failure::failed(e)
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(anyhow::anyhow!("cannot start the async runtime: {e}")))
}

fn run(g: &Global, a: RunArgs, resume: bool) -> CliResult {
    let options = run_options(&a, resume)?;
    let engine = Engine::new(engine_config(g, &a)?);
    if resume && !a.dry_run {
        // Say there is nothing to resume before any other check (a dirty
        // tree, a missing agent): those would send the user fixing things
        // only to learn that there never was a run.
        if let Ok(state_path) = engine.state_path() {
            if !state_path.exists() {
                return Err(engine_failure(
                    cascade_engine::error::EngineError::NothingToResume { path: state_path },
                ));
            }
        }
    }
    if a.dry_run {
        let plan = engine.dry_run(&options).map_err(engine_failure)?;
        print_dry_run(&plan, a.json);
        return Ok(EXIT_OK);
    }
    let rt = runtime()?;
    let reporter = Reporter::new(a.json);
    let cancel = CancelToken::new();
    let (result, stop) = rt.block_on(async {
        // SIGINT, SIGTERM, SIGHUP: stop scheduling, kill running agents and
        // gates, save state (a second signal leaves at once).
        let stop = StopSignals::watch(cancel.clone());
        (engine.run(options, reporter.sink(), &cancel).await, stop)
    });
    reporter.finish();
    let summary = result.map_err(engine_failure)?;
    Ok(match summary.status {
        // Ctrl-C at the prompt between batches can end the run as "paused".
        RunStatus::Paused if super::signals::stop_requested() => stop.exit_code(),
        RunStatus::Completed | RunStatus::Paused => EXIT_OK,
        RunStatus::Failed => EXIT_FAILED,
        RunStatus::Interrupted => stop.exit_code(),
    })
}

fn print_dry_run(plan: &DryRun, json: bool) {
    if json {
        let v = serde_json::json!({
            "target_branch": plan.target_branch,
            "schedule": plan.schedule,
            "parallel": plan.parallel,
            "complete": plan.complete,
            "batches": plan.batches,
        });
        println!("{v}");
        return;
    }
    println!(
        "Dry run: {} batch(es) into '{}' ({} schedule, --parallel {}); nothing will run.",
        plan.batches.len(),
        plan.target_branch,
        plan.schedule,
        plan.parallel
    );
    if !plan.complete.is_empty() {
        println!("Already complete: {}", plan.complete.join(", "));
    }
    for (i, batch) in plan.batches.iter().enumerate() {
        println!("Batch {}:", i + 1);
        for s in batch {
            println!("  {}  {}  -> {} ({})", s.story, s.title, s.agent, s.reason);
            for f in &s.fallbacks {
                println!("      [FALLBACK] {} -> {}: {}", f.from, f.to, f.why);
            }
        }
    }
}

pub fn status(_g: &Global, a: StatusArgs) -> CliResult {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(anyhow::anyhow!("cannot read the current directory: {e}")))?;
    let paths = cascade_git::RepoPaths::discover(&cwd).map_err(Failure::usage)?;
    let state_path = paths.cascade_dir().join("state.json");
    let state = RunState::load(&state_path).map_err(Failure::usage)?;
    let Some(state) = state else {
        if a.json {
            println!("{}", serde_json::json!({"status": "none", "stories": {}}));
        } else {
            println!("No run yet: start one with `cascade approve`.");
        }
        return Ok(EXIT_OK);
    };
    // A state that says "running" without a live lock holder was killed.
    let live = RunLock::holder(&paths.cascade_dir().join("lock"));
    let status = match (state.status, &live) {
        (RunPhase::Running, None) => "interrupted",
        (s, _) => s.as_str(),
    };
    // Nothing runs without a live lock holder: a story the killed run left
    // "running" is pending again (`resume` restarts it from a fresh worktree).
    let story_status = |s: &cascade_engine::state::StoryState| -> &'static str {
        match s.status {
            cascade_engine::state::StoryStatus::Running if live.is_none() => "pending",
            other => other.as_str(),
        }
    };
    if a.json {
        let mut stories = serde_json::Map::new();
        for s in &state.stories {
            let mut o = serde_json::Map::new();
            o.insert("status".into(), story_status(s).into());
            o.insert(
                "agent".into(),
                s.agent.clone().map_or(serde_json::Value::Null, Into::into),
            );
            o.insert("attempts".into(), s.attempts.len().into());
            if let Some(b) = &s.branch {
                o.insert("branch".into(), b.clone().into());
            }
            if let Some(w) = &s.worktree {
                o.insert("worktree".into(), w.clone().into());
            }
            if let Some(c) = &s.merge_commit {
                o.insert("merge_commit".into(), c.clone().into());
            }
            if let Some(t) = &s.error_type {
                o.insert("error_type".into(), t.as_str().into());
            }
            if let Some(e) = &s.error {
                o.insert("error".into(), e.clone().into());
            }
            if !s.blocked_by.is_empty() {
                o.insert("blocked_by".into(), s.blocked_by.clone().into());
            }
            stories.insert(s.id.clone(), o.into());
        }
        let c = state.counts();
        let v = serde_json::json!({
            "status": status,
            "run_id": state.run_id,
            "prd": state.prd,
            "target_branch": state.target_branch,
            "started_at": state.started_at,
            "updated_at": state.updated_at,
            "counts": {"complete": c.complete, "failed": c.failed, "blocked": c.blocked, "pending": c.pending},
            "stories": stories,
        });
        println!("{v}");
        return Ok(EXIT_OK);
    }
    let c = state.counts();
    println!(
        "Run {} ({}): {status}; {} complete, {} failed, {} blocked, {} pending; branch '{}'",
        state.run_id, state.prd, c.complete, c.failed, c.blocked, c.pending, state.target_branch
    );
    if let Some(h) = &live {
        println!(
            "Running now: pid {} on {} since {}",
            h.pid, h.host, h.started_at
        );
    }
    let width = state
        .stories
        .iter()
        .map(|s| s.id.len())
        .max()
        .unwrap_or(5)
        .max(5);
    println!(
        "{:<width$}  {:<9}  {:<14}  ATTEMPTS  DETAIL",
        "STORY", "STATUS", "AGENT"
    );
    for s in &state.stories {
        let detail = if !s.blocked_by.is_empty() {
            format!("blocked by {}", s.blocked_by.join(", "))
        } else if s.status == cascade_engine::state::StoryStatus::Failed {
            format!(
                "{}{}",
                super::report::printable(
                    s.error
                        .clone()
                        .unwrap_or_default()
                        .lines()
                        .next()
                        .unwrap_or("")
                ),
                s.worktree
                    .as_ref()
                    .map(|w| format!(" (worktree {w})"))
                    .unwrap_or_default()
            )
        } else {
            s.merge_commit
                .as_ref()
                .map(|m| format!("merged {}", &m[..m.len().min(10)]))
                .unwrap_or_default()
        };
        println!(
            "{:<width$}  {:<9}  {:<14}  {:>8}  {}",
            s.id,
            story_status(s),
            s.agent.as_deref().unwrap_or("-"),
            s.attempts.len(),
            detail
        );
    }
    if status == "interrupted" || status == "paused" {
        println!("Continue with `cascade resume`.");
    }
    Ok(EXIT_OK)
}
