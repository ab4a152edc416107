//! `cascade approve`, `cascade resume`, `cascade status`: running a PRD.
//!
//! The commands turn flags into an [`EngineConfig`] and [`RunOptions`], wire
//! the reporter (`--json`: NDJSON on stdout; else the terminal view), the
//! Ctrl-C handler (first: cancel, state saved, exit 130; second: exit at
//! once) and the confirmation between batches (asked on the terminal; without
//! one and without `--yes`, the run stops after one batch), and map the
//! result to the exit codes of CLI.md. The flags a run starts with are
//! recorded in its state; `resume` restores them, a flag given to it winning.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cascade_engine::config::{EngineConfig, Mode, Pause, RunOptions};
use cascade_engine::engine::{DryRun, Engine};
use cascade_engine::lock::RunLock;
use cascade_engine::scheduler::Discipline;
use cascade_engine::state::{RunFlags, RunPhase, RunState};
use cascade_engine::{Event, EventSink, RetryPolicy, RunStatus};
use cascade_process::CancelToken;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, ValueEnum};

use super::plan_file::Project;
use super::report::Reporter;
use super::signals::StopSignals;
use super::{CliResult, Failure, Global, EXIT_FAILED, EXIT_OK};
use cascade_plan::paths::PlanKind;

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

/// Shown after `approve --help` / `resume --help`.
const RUN_AFTER_HELP: &str = "\
Failure kinds (events, status, progress.txt): timeout, exit_code, no_changes, quality_gate,
verification, review, merge_conflict, process_crash, agent_unavailable, auth, rate_limited
(never counted as an attempt; the agent cools down for every story), provider_error,
budget (a story over its budget; not retried).

Run status budget_exhausted (exit 1): the run budget ran out with work left; resume with a
higher --max-cost / --max-duration. Exit codes: 0 done, 1 something failed, 2 bad input,
3 paused for a person, 130 interrupted. Details: docs/control.md.";

#[derive(Debug, Args)]
#[command(after_help = RUN_AFTER_HELP)]
pub struct RunArgs {
    /// The PRD to run (default: ./prd.json, else the project's Plan Cascade
    /// data directory; `resume`: the run's own PRD)
    #[arg(long, value_name = "PATH")]
    pub prd: Option<PathBuf>,
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
    /// A second agent reviews each story after its gates (strict: a review
    /// without a <review> marker fails; off: not even when prd.json asks)
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1, require_equals = true, default_missing_value = "on")]
    pub review: Option<ReviewArg>,
    /// Agent for reviews (default: the review phase's, another than the author's)
    #[arg(long, value_name = "A")]
    pub review_agent: Option<String>,
    #[command(flatten)]
    pub remote: super::remote_args::RemoteCacheArgs,
    #[command(flatten)]
    pub fleet: super::fleet_cmd::FleetArgs,
    /// Spend limit of the run in USD: no attempt starts once it is spent; the
    /// run ends as budget_exhausted (exit 1) and `cascade resume
    /// --max-cost <higher>` continues it
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub max_cost: Option<f64>,
    /// Spend limit per story in USD: a story over it fails as `budget` (not retried)
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub max_story_cost: Option<f64>,
    /// Time limit of the run in seconds (wall clock, this invocation); like --max-cost
    #[arg(long, value_name = "SECS")]
    pub max_duration: Option<u64>,
    /// On an exhausted run budget, stop running agents too instead of letting them finish
    #[arg(long)]
    pub hard_budget: bool,
    /// Gate runs at once, separately from --parallel agents (default: cores / 2, at least 1)
    #[arg(long, value_name = "N")]
    pub gate_jobs: Option<usize>,
    /// Do not ask an agent to resolve merge conflicts (a conflict fails the attempt as merge_conflict)
    #[arg(long)]
    pub no_resolve: bool,
    /// Run this command (argv, no shell; the event JSON on its stdin) when the
    /// run finishes, a story fails for good, the budget is exhausted or the run
    /// pauses; the values up to the next flag form the command
    #[arg(long, value_name = "CMD", num_args = 1.., value_terminator = ";")]
    pub notify: Option<Vec<String>>,
}

/// `--review[=strict]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReviewArg {
    On,
    Strict,
    Off,
}

impl ReviewArg {
    fn mode(self) -> cascade_engine::config::ReviewMode {
        use cascade_engine::config::ReviewMode;
        match self {
            ReviewArg::On => ReviewMode::On,
            ReviewArg::Strict => ReviewMode::Strict,
            ReviewArg::Off => ReviewMode::Off,
        }
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn approve(g: &Global, a: RunArgs) -> CliResult {
    run(g, a, false, None)
}

/// `matches`: `resume`'s parsed flags; those given explicitly override the
/// options the run was started with, the others are restored from its state.
pub fn resume(g: &Global, a: RunArgs, matches: Option<&ArgMatches>) -> CliResult {
    run(g, a, true, matches)
}

/// The options worth remembering, as recorded in the run state.
fn remembered(a: &RunArgs) -> RunFlags {
    RunFlags {
        agent: a.agent.clone(),
        impl_agent: a.impl_agent.clone(),
        retry_agent: a.retry_agent.clone(),
        no_fallback: Some(a.no_fallback),
        max_retries: Some(a.max_retries),
        retry_delay: Some(a.retry_delay),
        parallel: Some(a.parallel),
        schedule: a
            .schedule
            .to_possible_value()
            .map(|v| v.get_name().to_string()),
        fail_fast: Some(a.fail_fast),
        allow_dirty: Some(a.allow_dirty),
        mode: a.mode.to_possible_value().map(|v| v.get_name().to_string()),
        max_iterations: a.max_iterations,
        auto_run: Some(a.auto_run),
        yes: Some(a.yes),
        review: a.review.map(flag_name),
        review_agent: a.review_agent.clone(),
        max_cost: a.max_cost,
        max_story_cost: a.max_story_cost,
        max_duration: a.max_duration,
        hard_budget: Some(a.hard_budget),
        gate_jobs: a.gate_jobs,
        no_resolve: Some(a.no_resolve),
        notify: a.notify.clone(),
        // A URL with user info would store a credential: not remembered.
        remote_cache: a.remote.remote_cache.clone().filter(|u| !has_user_info(u)),
        remote_cache_mode: a.remote.remote_cache_mode.map(flag_name),
    }
}

/// `scheme://user:pass@host/...`.
fn has_user_info(url: &str) -> bool {
    url.split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or("").contains('@'))
        .unwrap_or(false)
}

/// What [`restore`] did, as flags for the user to read.
#[derive(Debug, Default)]
struct Restored {
    /// Stored values now in effect (those differing from the defaults).
    restored: Vec<String>,
    /// Stored values a flag given to `resume` replaced.
    overridden: Vec<String>,
}

impl Restored {
    /// The line saying so, or `None` when nothing differs from the defaults.
    fn message(&self) -> Option<String> {
        if self.restored.is_empty() && self.overridden.is_empty() {
            return None;
        }
        let mut text = if self.restored.is_empty() {
            "resuming with the default options".to_string()
        } else {
            format!(
                "resuming with the options the run was started with: {}",
                self.restored.join(" ")
            )
        };
        if !self.overridden.is_empty() {
            text.push_str(&format!(
                " (given here instead: {})",
                self.overridden.join(" ")
            ));
        }
        Some(text)
    }
}

/// Applies the options stored in the run state to `a`, except those given
/// explicitly on the command line (`matches`). `--mode` and
/// `--max-iterations` go together: either given keeps both stored ones out.
fn restore(a: &mut RunArgs, stored: &RunFlags, matches: Option<&ArgMatches>) -> Restored {
    let explicit = |id: &str| {
        matches.is_some_and(|m| matches!(m.value_source(id), Some(ValueSource::CommandLine)))
    };
    let mut out = Restored::default();
    let mut note = |given: bool, shown: Option<String>| {
        if let Some(shown) = shown {
            if given {
                out.overridden.push(shown);
            } else {
                out.restored.push(shown);
            }
        }
    };
    // `$shown`: the value as the user would type it after the flag ("" for a
    // switch), or `None` when it is the default and not worth a word.
    macro_rules! take {
        ($field:ident, $flag:literal, $shown:expr) => {
            if let Some(v) = stored.$field.clone() {
                let given = explicit(stringify!($field));
                let shown: Option<String> = ($shown)(&v);
                note(
                    given,
                    shown.map(|s| {
                        if s.is_empty() {
                            $flag.to_string()
                        } else {
                            format!("{} {s}", $flag)
                        }
                    }),
                );
                if !given {
                    a.$field = v.into();
                }
            }
        };
    }
    take!(agent, "--agent", |v: &String| Some(v.clone()));
    take!(impl_agent, "--impl-agent", |v: &String| Some(v.clone()));
    take!(retry_agent, "--retry-agent", |v: &String| Some(v.clone()));
    take!(review_agent, "--review-agent", |v: &String| Some(v.clone()));
    if let Some(v) = stored
        .review
        .as_deref()
        .and_then(|v| ReviewArg::from_str(v, false).ok())
    {
        let given = explicit("review");
        note(given, Some(format!("--review={}", flag_name(v))));
        if !given {
            a.review = Some(v);
        }
    }
    take!(no_fallback, "--no-fallback", |v: &bool| v.then(String::new));
    take!(max_retries, "--max-retries", |v: &u32| (*v != 3)
        .then(|| v.to_string()));
    take!(retry_delay, "--retry-delay", |v: &f64| (*v != 2.0)
        .then(|| v.to_string()));
    take!(parallel, "--parallel", |v: &usize| (*v != 4)
        .then(|| v.to_string()));
    take!(fail_fast, "--fail-fast", |v: &bool| v.then(String::new));
    take!(allow_dirty, "--allow-dirty", |v: &bool| v.then(String::new));
    take!(auto_run, "--auto-run", |v: &bool| v.then(String::new));
    take!(yes, "--yes", |v: &bool| v.then(String::new));
    take!(max_cost, "--max-cost", |v: &f64| Some(v.to_string()));
    take!(max_story_cost, "--max-story-cost", |v: &f64| Some(
        v.to_string()
    ));
    take!(max_duration, "--max-duration", |v: &u64| Some(
        v.to_string()
    ));
    take!(hard_budget, "--hard-budget", |v: &bool| v.then(String::new));
    take!(gate_jobs, "--gate-jobs", |v: &usize| Some(v.to_string()));
    take!(no_resolve, "--no-resolve", |v: &bool| v.then(String::new));
    take!(notify, "--notify", |v: &Vec<String>| Some(v.join(" ")));
    // Stored as their flag spellings; one this cascade does not know is left out.
    if let Some(v) = stored
        .schedule
        .as_deref()
        .and_then(|v| ScheduleArg::from_str(v, false).ok())
    {
        let given = explicit("schedule");
        note(
            given,
            (v != ScheduleArg::Batch).then(|| format!("--schedule {}", flag_name(v))),
        );
        if !given {
            a.schedule = v;
        }
    }
    let stored_mode = stored
        .mode
        .as_deref()
        .and_then(|v| ModeArg::from_str(v, false).ok());
    if stored_mode.is_some() || stored.max_iterations.is_some() {
        let given = explicit("mode") || explicit("max_iterations");
        let mut shown = Vec::new();
        if let Some(m) = stored_mode.filter(|m| *m != ModeArg::UntilComplete) {
            shown.push(format!("--mode {}", flag_name(m)));
        }
        if let Some(n) = stored.max_iterations {
            shown.push(format!("--max-iterations {n}"));
        }
        note(given, (!shown.is_empty()).then(|| shown.join(" ")));
        if !given {
            a.mode = stored_mode.unwrap_or(ModeArg::UntilComplete);
            a.max_iterations = stored.max_iterations;
        }
    }
    if let Some(url) = stored.remote_cache.clone() {
        let given = explicit("remote_cache");
        note(given, Some(format!("--remote-cache {url}")));
        if !given {
            a.remote.remote_cache = Some(url);
        }
    }
    if let Some(m) = stored
        .remote_cache_mode
        .as_deref()
        .and_then(|v| super::remote_args::RemoteModeArg::from_str(v, false).ok())
    {
        let given = explicit("remote_cache_mode");
        note(given, Some(format!("--remote-cache-mode {}", flag_name(m))));
        if !given {
            a.remote.remote_cache_mode = Some(m);
        }
    }
    out
}

/// A value's spelling on the command line.
fn flag_name(v: impl ValueEnum) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
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
    if a.gate_jobs == Some(0) {
        return Err(Failure::usage(anyhow::anyhow!(
            "--gate-jobs must be at least 1"
        )));
    }
    for (flag, v) in [
        ("--max-cost", a.max_cost),
        ("--max-story-cost", a.max_story_cost),
    ] {
        if let Some(v) = v.filter(|v| !v.is_finite() || *v < 0.0) {
            return Err(Failure::usage(anyhow::anyhow!(
                "{flag} must be a number of USD >= 0 (got {v})"
            )));
        }
    }
    if a.max_duration == Some(0) {
        return Err(Failure::usage(anyhow::anyhow!(
            "--max-duration must be at least 1 second"
        )));
    }
    if a.notify
        .as_ref()
        .is_some_and(|n| n.iter().all(|s| s.trim().is_empty()))
    {
        return Err(Failure::usage(anyhow::anyhow!(
            "--notify needs a command (an argv: program and arguments)"
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
        review_agent: a.review_agent.clone(),
        review: a.review.map(ReviewArg::mode),
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
        remote_cache: a.remote.request(),
        gate_jobs: a.gate_jobs,
        budget: cascade_engine::control::budget::Budget {
            max_cost: a.max_cost,
            max_story_cost: a.max_story_cost,
            max_duration: a.max_duration.map(Duration::from_secs),
            hard: a.hard_budget,
        },
        no_resolve: a.no_resolve,
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

fn engine_config(g: &Global, cwd: &Path, prd: PathBuf) -> EngineConfig {
    let mut config = EngineConfig::new(cwd, prd);
    config.agents_path = g.agents.clone();
    config
}

/// The PRD a run works on: `--prd`; for `resume`, the file the run was
/// started on (`recorded`); else the file discovery picks (`./prd.json`,
/// then the project's Plan Cascade data directory). Outside a repository
/// nothing is looked up: the engine says what is wrong.
fn choose_prd(
    project: &Project,
    a: &RunArgs,
    recorded: Option<PathBuf>,
) -> Result<PathBuf, Failure> {
    if let (None, Some(path)) = (&a.prd, recorded) {
        return Ok(path);
    }
    match project.find(PlanKind::Prd, a.prd.as_deref()) {
        Ok(plan) => Ok(plan.path),
        Err(_) if project.repo.is_none() => Ok(PathBuf::from(cascade_plan::paths::PRD_FILE)),
        Err(e) => Err(e),
    }
}

/// The PRD a stored run was started on, when it is still there: as
/// recorded when that is relative to the directory resumed from, else
/// absolute (a file in Plan Cascade's data directory is recorded absolute).
fn recorded_prd(state: &RunState, cwd: &Path) -> Option<PathBuf> {
    let recorded = PathBuf::from(&state.prd);
    if state.prd.is_empty() {
        return None;
    }
    let started_in = Path::new(&state.project_root);
    let full = if recorded.is_absolute() {
        recorded.clone()
    } else {
        started_in.join(&recorded)
    };
    if !full.is_file() {
        return None;
    }
    Some(if recorded.is_relative() && started_in == cwd {
        recorded
    } else {
        full
    })
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

fn run(g: &Global, mut a: RunArgs, resume: bool, matches: Option<&ArgMatches>) -> CliResult {
    // `--fleet` in a build without the fleet: say so before anything else.
    super::fleet_cmd::check(&a.fleet)?;
    let project = Project::current()?;
    let mut restored = None;
    let mut recorded = None;
    if resume {
        if let Some(repo) = &project.repo {
            let state_path = repo.cascade_dir().join("state.json");
            // Say there is nothing to resume before any other check (a dirty
            // tree, a missing agent): those would send the user fixing things
            // only to learn that there never was a run.
            if !a.dry_run && !state_path.exists() {
                return Err(engine_failure(
                    cascade_engine::error::EngineError::NothingToResume { path: state_path },
                ));
            }
            // Continue the way the run was started. A state that cannot be
            // read is reported by the engine itself, with what to do.
            if let Ok(Some(state)) = RunState::load(&state_path) {
                let mut r = match &state.options {
                    Some(stored) => restore(&mut a, stored, matches),
                    None => Restored::default(),
                };
                recorded = recorded_prd(&state, &project.cwd);
                // The run's own PRD (kept in the state, wherever discovery
                // found it) is one of the options it continues with.
                match (&a.prd, &recorded) {
                    (None, Some(p)) if p != Path::new(cascade_plan::paths::PRD_FILE) => {
                        r.restored.insert(0, format!("--prd {}", p.display()));
                    }
                    (Some(given), Some(p)) if given != p => {
                        r.overridden.insert(0, format!("--prd {}", p.display()));
                    }
                    _ => {}
                }
                restored = r.message();
            }
        }
    }
    let prd = choose_prd(&project, &a, recorded)?;
    let engine = Engine::new(engine_config(g, &project.cwd, prd));
    let mut options = run_options(&a, resume)?;
    options.remember = Some(remembered(&a));
    // The agents this run will use must accept their argv and be logged in
    // (here; with --fleet they run on the workers).
    if a.fleet.fleet.is_none() {
        super::agents_check::before_prd_run(
            g,
            &engine.config().prd_path,
            cascade_agents::Overrides {
                agent: a.agent.clone(),
                impl_agent: a.impl_agent.clone(),
                retry_agent: a.retry_agent.clone(),
                no_fallback: a.no_fallback,
                ..Default::default()
            },
            a.max_retries > 0,
        )?;
    }
    if a.dry_run {
        let plan = engine.dry_run(&options).map_err(engine_failure)?;
        print_dry_run(&plan, &engine.config().prd_path, a.json);
        return Ok(EXIT_OK);
    }
    let rt = runtime()?;
    let reporter = Reporter::new(a.json);
    let notifier = super::notify::Notifier::new(a.notify.clone());
    let cancel = CancelToken::new();
    let (result, stop) = rt.block_on(async {
        // SIGINT, SIGTERM, SIGHUP: stop scheduling, kill running agents and
        // gates, save state (a second signal leaves at once).
        let stop = StopSignals::watch(cancel.clone());
        let sink = notifier.wrap(note_after_start(reporter.sink(), restored));
        #[cfg(feature = "fleet")]
        if let Some(repo) = &project.repo {
            match super::fleet_cmd::coordinator(&a.fleet, repo, cancel.clone()).await {
                Ok(executor) => options.executor = executor,
                Err(f) => return (Err(f), stop),
            }
        }
        // Events and requests for `cascade ui` (.cascade/live.sock, runs/).
        let cascade_dir = project.repo.as_ref().map(|r| r.cascade_dir());
        let live = super::live::Live::start(cascade_dir.as_deref(), Some(&mut options));
        let sink = live.wrap(sink);
        let result = engine.run(options, sink, &cancel).await;
        live.finish().await;
        (result.map_err(engine_failure), stop)
    });
    notifier.finish();
    // A thread stuck on an unanswering store (a hung network mount under a
    // file:// remote cache) must not keep the process from exiting.
    rt.shutdown_timeout(Duration::from_secs(5));
    reporter.finish();
    let summary = result?;
    Ok(match summary.status {
        // Ctrl-C at the prompt between batches can end the run as "paused".
        RunStatus::Paused if super::signals::stop_requested() => stop.exit_code(),
        RunStatus::Completed | RunStatus::Paused => EXIT_OK,
        RunStatus::Failed | RunStatus::BudgetExhausted => EXIT_FAILED,
        RunStatus::Interrupted => stop.exit_code(),
    })
}

/// `sink`, followed by a notice with `message` right after `run_started`
/// (the options restored by `resume`: a line on the terminal, an event in NDJSON).
fn note_after_start(sink: EventSink, message: Option<String>) -> EventSink {
    let Some(message) = message else {
        return sink;
    };
    let pending = std::sync::Mutex::new(Some(message));
    Arc::new(move |e: &Event| {
        sink(e);
        if matches!(e, Event::RunStarted { .. }) {
            let message = pending.lock().ok().and_then(|mut m| m.take());
            if let Some(message) = message {
                sink(&Event::Notice { message });
            }
        }
    })
}

fn print_dry_run(plan: &DryRun, prd: &Path, json: bool) {
    for n in &plan.notices {
        eprintln!("warning: {}", super::report::printable(n));
    }
    if json {
        let v = serde_json::json!({
            "prd": prd.display().to_string(),
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
        "Dry run of {}: {} batch(es) into '{}' ({} schedule, --parallel {}); nothing will run.",
        prd.display(),
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
            println!(
                "  {}  {}  -> {} ({})",
                s.story,
                super::report::printable_line(&s.title),
                s.agent,
                s.reason
            );
            for f in &s.fallbacks {
                println!(
                    "      [FALLBACK] {} -> {}: {}",
                    f.from,
                    f.to,
                    super::report::printable(&f.why)
                );
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
    let Some(mut state) = state else {
        // Say which plan `approve` would run (quietly: no plan is no error here).
        let next = Project::of(cwd.clone()).peek(PlanKind::Prd);
        if a.json {
            let prd = next.as_ref().map(|p| p.display().to_string());
            println!(
                "{}",
                serde_json::json!({"status": "none", "stories": {}, "prd": prd})
            );
        } else {
            match &next {
                Some(p) => println!(
                    "No run yet: start one with `cascade approve` (it would run {}).",
                    p.display()
                ),
                None => println!("No run yet: start one with `cascade approve`."),
            }
        }
        return Ok(EXIT_OK);
    };
    // A state that says "running" without a live lock holder was killed:
    // its open attempts were interrupted and are not charged.
    let live = RunLock::holder(&paths.cascade_dir().join("lock"));
    if live.is_none() {
        for s in &mut state.stories {
            s.close_unfinished_attempts();
        }
    }
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
            o.insert("attempts".into(), s.charged_attempts().into());
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
            if !s.verification.is_empty() {
                o.insert("verification".into(), s.verification.clone().into());
            }
            if let Some(r) = &s.review {
                o.insert(
                    "review".into(),
                    serde_json::to_value(r).unwrap_or(serde_json::Value::Null),
                );
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
            "cooldowns": active_cooldowns(&state).iter().map(|c| serde_json::json!({
                "agent": c.agent, "until": c.until, "concurrency": c.concurrency, "message": c.message,
            })).collect::<Vec<_>>(),
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
    for c in active_cooldowns(&state) {
        println!(
            "Agent '{}' is cooling down until {} (rate limited: {}); then at most {} at once",
            c.agent,
            c.until,
            super::report::printable(&c.message),
            c.concurrency
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
            s.charged_attempts(),
            detail
        );
    }
    if status == "interrupted" || status == "paused" {
        println!("Continue with `cascade resume`.");
    }
    if status == "budget_exhausted" {
        println!(
            "The run's budget ran out: continue with `cascade resume --max-cost <higher>` (or `--max-duration <more>`)."
        );
    }
    Ok(EXIT_OK)
}

/// The cooldowns of `state` that have not ended yet.
fn active_cooldowns(state: &RunState) -> Vec<&cascade_engine::state::CooldownRecord> {
    let now = chrono::Utc::now();
    state
        .cooldowns
        .iter()
        .filter(|c| {
            chrono::DateTime::parse_from_rfc3339(&c.until)
                .is_ok_and(|t| t.with_timezone(&chrono::Utc) > now)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(prd: &str, root: &Path) -> RunState {
        RunState::new(
            "r".into(),
            prd.into(),
            "main".into(),
            root.display().to_string(),
            Vec::<String>::new(),
        )
    }

    #[test]
    fn recorded_prd_is_the_file_the_run_started_on() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(root.join("prd.json"), "{}").unwrap();
        std::fs::write(data.join("prd.json"), "{}").unwrap();
        // Relative, resumed where it started: as recorded.
        let st = state("prd.json", &root);
        assert_eq!(recorded_prd(&st, &root), Some(PathBuf::from("prd.json")));
        // Resumed from elsewhere: the full path of the same file.
        assert_eq!(recorded_prd(&st, &data), Some(root.join("prd.json")));
        // Absolute (a Plan Cascade data directory): as recorded.
        let abs = data.join("prd.json");
        let st = state(&abs.display().to_string(), &root);
        assert_eq!(recorded_prd(&st, &root), Some(abs.clone()));
        // Gone, or never recorded: discovery decides.
        std::fs::remove_file(&abs).unwrap();
        assert_eq!(recorded_prd(&st, &root), None);
        assert_eq!(recorded_prd(&state("", &root), &root), None);
    }
}
