//! The options of a run, defined once.
//!
//! [`RunFlags`] is the one clap struct every command that starts or
//! continues a run flattens: `approve`, `resume`, `mega approve`, `mega
//! resume`, `demo` and (through `--fleet`) the fleet coordinator. A new run
//! option is a new field here and nothing else: clap gives it to every mode,
//! serde records it in the run state, [`restore`] brings it back on resume
//! and [`describe`] names it in the resume notice, all derived from the
//! field. Defaults live in the clap attributes only ([`RunFlags::default`]
//! parses an empty command line).
//!
//! What is recorded (see [`record`]): every field, plus the agents file
//! (`--agents`, made absolute). What only concerns one invocation
//! (`--dry-run`, `--json`) is in [`Invocation`], beside the run flags. A URL carrying credentials
//! (`scheme://user:pass@host`) is never written to disk.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use cascade_engine::config::{
    BaseFailures, Integration, Mode, Pause, ReviewMode, Route, RunOptions,
};
use cascade_engine::confine::SandboxMode;
use cascade_engine::race::{RaceKeep, RaceOptions, RaceSpec, RaceUntil};
use cascade_engine::scheduler::Discipline;
use cascade_engine::RetryPolicy;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, FromArgMatches, ValueEnum};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Failure;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleArg {
    /// A batch starts when the previous one is finished
    Batch,
    /// A story starts as soon as its dependencies are merged
    Eager,
}

/// `--integration gate|trust`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IntegrationArg {
    /// Gate a merge that is not a fast-forward on the merged tree first
    Gate,
    /// Merge on the strength of the story's own gates
    Trust,
}

/// `--race-until first|all`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RaceUntilArg {
    /// Stop the other contestants as soon as one passes everything
    First,
    /// Let every contestant finish, then compare them
    All,
}

/// `--route configured|learned`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouteArg {
    /// agents.json's chain (and the agent flags) choose each story's agent
    Configured,
    /// Each story type goes first to the agent that passed most of this
    /// repository's judged attempts of that type (`cascade history agents`)
    Learned,
}

/// `--race-keep all|none`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RaceKeepArg {
    /// Keep the losers' branches for inspection
    All,
    /// Delete the losers' branches once the winner is chosen
    None,
}

/// `--base-failures stop|known`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BaseFailuresArg {
    /// Stop the run before any agent runs (exit 2), naming the gate
    Stop,
    /// Go on; judge each story on that gate by its test census
    Known,
}

/// `--sandbox required|best-effort|off`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxArg {
    /// Confined by the kernel, or the run does not start
    Required,
    /// Confined where the kernel can, else unconfined with a warning
    BestEffort,
    /// Never confined
    Off,
}

impl SandboxArg {
    fn mode(self) -> SandboxMode {
        match self {
            SandboxArg::Required => SandboxMode::Required,
            SandboxArg::BestEffort => SandboxMode::BestEffort,
            SandboxArg::Off => SandboxMode::Off,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModeArg {
    /// Retry until every story is complete or out of retries
    UntilComplete,
    /// Stop after --max-iterations scheduling rounds
    MaxIterations,
    /// Stop after the current batch completes
    BatchComplete,
}

/// `--review[=strict]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReviewArg {
    On,
    Strict,
    Off,
}

impl ReviewArg {
    fn mode(self) -> ReviewMode {
        match self {
            ReviewArg::On => ReviewMode::On,
            ReviewArg::Strict => ReviewMode::Strict,
            ReviewArg::Off => ReviewMode::Off,
        }
    }
}

/// Shown after the `--help` of every command that runs stories.
pub const RUN_AFTER_HELP: &str = "\
Failure kinds (events, status, progress.txt): timeout, exit_code, no_changes, quality_gate,
verification, review, merge_conflict, process_crash, agent_unavailable, auth, rate_limited
(never counted as an attempt; the agent cools down for every story), provider_error,
budget (a story over its budget; not retried).

Run status budget_exhausted (exit 1): the run budget ran out with work left; resume with a
higher --max-cost / --max-duration. `resume` continues with the options the run was started
with (agents file included); flags given to it replace those. Exit codes: 0 done, 1 something
failed, 2 bad input, 3 paused for a person, 130 interrupted. Details: docs/control.md.";

/// How a run goes: every option of `approve`, `resume`, `mega approve`,
/// `mega resume` and `demo`. Field names are the recorded keys (and the
/// clap ids `resume` asks about), so renaming one is a state-format change.
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[serde(default)]
pub struct RunFlags {
    /// Run every batch without asking
    #[arg(long)]
    pub auto_run: bool,
    /// Do not ask before each batch
    #[arg(long)]
    pub yes: bool,
    /// Use this agent for every story
    #[arg(long, value_name = "A")]
    pub agent: Option<String>,
    /// Agent for the implementation phase
    #[arg(long, value_name = "A")]
    pub impl_agent: Option<String>,
    /// Agent for retries
    #[arg(long, value_name = "A")]
    pub retry_agent: Option<String>,
    /// Take the first candidate agent only (it must be installed; its flags
    /// are not checked), never another
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
    /// Stories running at once (a mega run: across all its features)
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub parallel: usize,
    /// Scheduling discipline (a mega run: inside each feature)
    #[arg(long, value_enum, default_value_t = ScheduleArg::Batch)]
    pub schedule: ScheduleArg,
    /// Stop scheduling new stories after the first failure
    #[arg(long)]
    pub fail_fast: bool,
    /// Run even if the working tree has uncommitted changes
    #[arg(long)]
    pub allow_dirty: bool,
    /// When the run stops (not for mega runs, which run every feature to its end)
    #[arg(long, value_enum, default_value_t = ModeArg::UntilComplete)]
    pub mode: ModeArg,
    /// Iterations for --mode max-iterations
    #[arg(long, value_name = "N")]
    pub max_iterations: Option<u32>,
    /// A second agent reviews each story after its gates (strict: a review
    /// without a <review> marker fails; off: not even when prd.json asks)
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1, require_equals = true, default_missing_value = "on")]
    pub review: Option<ReviewArg>,
    /// Agent for reviews (default: the review phase's, another than the author's)
    #[arg(long, value_name = "A")]
    pub review_agent: Option<String>,
    /// Run a story's new or changed tests against its base commit: tests
    /// that already pass there prove nothing (default: on where the test
    /// census knows a gate's runner, pytest, cargo test, go test; given, for
    /// any runner; off with --no-prove-tests or .cascade/config.json
    /// `"prove_tests": {"enabled": false}`)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub prove_tests: Option<bool>,
    /// Do not prove a story's new tests on its base (what --prove-tests=false says)
    #[arg(long, conflicts_with = "prove_tests")]
    pub no_prove_tests: bool,
    /// Spend limit of the run in USD (a mega run: of all its features
    /// together): no attempt starts once it is spent; the run ends as
    /// budget_exhausted (exit 1) and `resume --max-cost <higher>` continues it
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
    /// How a story that is not a fast-forward of the target's tip merges:
    /// `gate` builds the merge in a scratch worktree and runs the required
    /// gates on it first (only a passing merge moves the target; a failing
    /// one is failure `integration`, retried from the new tip); `trust`
    /// merges on the strength of the story's own gates
    #[arg(long, value_enum, default_value_t = IntegrationArg::Gate)]
    pub integration: IntegrationArg,
    /// What a required gate that already fails on the base (judged once,
    /// before the first agent) does: `stop` ends the run there (exit 2,
    /// naming the gate and its errors); `known` goes on and judges each
    /// story on that gate by its test census (it fails a story only for a
    /// test that passed on the base and no longer passes, or a new failure)
    #[arg(long, value_enum, value_name = "MODE", default_value_t = BaseFailuresArg::Stop)]
    pub base_failures: BaseFailuresArg,
    /// Confinement of every process a story starts (Landlock): `required`
    /// refuses to run without it (exit 2), `best-effort` runs unconfined with
    /// a warning where the kernel has none, `off` never confines (default:
    /// `.cascade/config.json` `sandbox.mode`, else best-effort)
    #[arg(long, value_enum, value_name = "MODE")]
    pub sandbox: Option<SandboxArg>,
    /// Race agents on every story: a comma list of agents, or N runs of the
    /// story's resolved agent; each contestant works on its own branch
    /// (cascade/<story>/race-<agent>[-n]) and only the winner merges (a
    /// story's "race" in prd.json takes the place of this)
    #[arg(long, value_name = "AGENTS|N")]
    pub race: Option<String>,
    /// When a race ends: `first` stops the others once one passes
    /// everything; `all` lets every contestant finish and compares them
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = RaceUntilArg::All)]
    pub race_until: RaceUntilArg,
    /// What becomes of the losers' branches: kept (`all`) or deleted (`none`)
    #[arg(long, value_enum, value_name = "WHICH", default_value_t = RaceKeepArg::All)]
    pub race_keep: RaceKeepArg,
    /// How stories find their agent: `configured` (agents.json and the agent
    /// flags) or `learned` (this repository's history first, per story type,
    /// after --agent/--impl-agent/story.agent; see docs/agents.md)
    #[arg(long, value_enum, value_name = "HOW", default_value_t = RouteArg::Configured)]
    pub route: RouteArg,
    /// Run this command (argv, no shell; the event JSON on its stdin) when the
    /// run finishes, a story fails for good, the budget is exhausted or the run
    /// pauses; the values up to the next flag form the command
    #[arg(long, value_name = "CMD", num_args = 1.., value_terminator = ";")]
    pub notify: Option<Vec<String>>,
    /// One more argument of the --notify command, taken as is even when it
    /// starts with '-' (repeat it: --notify ./post.sh --notify-arg --channel
    /// --notify-arg builds)
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        requires = "notify"
    )]
    pub notify_arg: Vec<String>,
    #[command(flatten)]
    #[serde(flatten)]
    pub remote: super::remote_args::RemoteCacheArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub fleet: super::fleet_cmd::FleetArgs,
}

/// What one invocation prints and whether it runs anything: not options of
/// the run, so never recorded nor restored.
#[derive(Debug, Clone, Default, Args)]
pub struct Invocation {
    /// Print the schedule with agents and fallbacks; run nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Print NDJSON events instead of text
    #[arg(long)]
    pub json: bool,
}

/// Options that only mean something together: given either on the command
/// line, none of the group is restored (`--mode max-iterations` without its
/// stored `--max-iterations` would be an error; a new `--fleet` with the old
/// `--remote` would point workers at the wrong repository).
pub const LINKED: &[&[&str]] = &[
    &["mode", "max_iterations"],
    &["fleet", "remote"],
    &["prove_tests", "no_prove_tests"],
];

impl Default for RunFlags {
    /// The flags of an empty command line: the defaults are the clap
    /// attributes above, and only there.
    fn default() -> Self {
        defaults::<RunFlags>()
    }
}

/// `T` as an empty command line parses it.
pub fn defaults<T: Args + FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let matches = cmd.get_matches_from(std::iter::empty::<String>());
    // An empty command line satisfies every struct here (no required flags).
    T::from_arg_matches(&matches).unwrap_or_else(|e| unreachable!("defaults do not parse: {e}"))
}

impl RunFlags {
    /// The agent choices as the resolver takes them.
    pub fn overrides(&self) -> cascade_agents::Overrides {
        cascade_agents::Overrides {
            agent: self.agent.clone(),
            impl_agent: self.impl_agent.clone(),
            retry_agent: self.retry_agent.clone(),
            review_agent: self.review_agent.clone(),
            no_fallback: self.no_fallback,
            ..Default::default()
        }
    }

    /// Whether batches run without asking.
    pub fn unattended(&self) -> bool {
        self.auto_run || self.yes
    }

    /// Turns the flags into the engine's run options (usage errors for
    /// values out of range or that contradict each other).
    pub fn run_options(&self, resume: bool) -> Result<RunOptions, Failure> {
        self.check()?;
        let mode = match (self.mode, self.max_iterations) {
            (ModeArg::MaxIterations, None) => {
                return Err(usage("--mode max-iterations needs --max-iterations N"))
            }
            (_, Some(0)) => return Err(usage("--max-iterations must be at least 1")),
            (ModeArg::MaxIterations | ModeArg::UntilComplete, Some(n)) => Mode::MaxIterations(n),
            (ModeArg::UntilComplete, None) => Mode::UntilComplete,
            (ModeArg::BatchComplete, _) => Mode::BatchComplete,
        };
        let base = self.retry_base()?;
        let pause = if self.unattended() {
            Pause::Never
        } else if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
            Pause::Confirm(Arc::new(confirm_on_terminal))
        } else {
            Pause::AfterBatch
        };
        Ok(RunOptions {
            agent: self.agent.clone(),
            impl_agent: self.impl_agent.clone(),
            retry_agent: self.retry_agent.clone(),
            no_fallback: self.no_fallback,
            review_agent: self.review_agent.clone(),
            review: self.review.map(ReviewArg::mode),
            prove_tests: if self.no_prove_tests {
                Some(false)
            } else {
                self.prove_tests
            },
            retry: RetryPolicy {
                max_retries: self.max_retries,
                base_delay: base,
                max_delay: Duration::from_secs(60).max(base),
                ..RetryPolicy::default()
            },
            parallel: self.parallel,
            schedule: match self.schedule {
                ScheduleArg::Batch => Discipline::Batch,
                ScheduleArg::Eager => Discipline::Eager,
            },
            fail_fast: self.fail_fast,
            allow_dirty: self.allow_dirty,
            mode,
            pause,
            resume,
            remote_cache: self.remote.request(),
            gate_jobs: self.gate_jobs,
            budget: cascade_engine::control::budget::Budget {
                max_cost: self.max_cost,
                max_story_cost: self.max_story_cost,
                max_duration: self.max_duration.map(Duration::from_secs),
                hard: self.hard_budget,
            },
            no_resolve: self.no_resolve,
            integration: self.integration_mode(),
            base_failures: match self.base_failures {
                BaseFailuresArg::Stop => BaseFailures::Stop,
                BaseFailuresArg::Known => BaseFailures::Known,
            },
            sandbox: self.sandbox_mode(),
            race: self.race_options()?,
            route: match self.route {
                RouteArg::Configured => Route::Configured,
                RouteArg::Learned => Route::Learned,
            },
            ..RunOptions::default()
        })
    }

    /// `--integration` as the engine (and the mega runner) takes it.
    pub fn integration_mode(&self) -> Integration {
        match self.integration {
            IntegrationArg::Gate => Integration::Gate,
            IntegrationArg::Trust => Integration::Trust,
        }
    }

    /// The range checks every mode shares.
    fn check(&self) -> Result<(), Failure> {
        if !self.retry_delay.is_finite() || self.retry_delay < 0.0 {
            return Err(usage(format!(
                "--retry-delay must be a number of seconds >= 0 (got {})",
                self.retry_delay
            )));
        }
        if self.parallel == 0 {
            return Err(usage("--parallel must be at least 1"));
        }
        if self.gate_jobs == Some(0) {
            return Err(usage("--gate-jobs must be at least 1"));
        }
        for (flag, v) in [
            ("--max-cost", self.max_cost),
            ("--max-story-cost", self.max_story_cost),
        ] {
            if let Some(v) = v.filter(|v| !v.is_finite() || *v < 0.0) {
                return Err(usage(format!(
                    "{flag} must be a number of USD >= 0 (got {v})"
                )));
            }
        }
        if self.max_duration == Some(0) {
            return Err(usage("--max-duration must be at least 1 second"));
        }
        if self
            .notify
            .as_ref()
            .is_some_and(|n| n.iter().all(|s| s.trim().is_empty()))
        {
            return Err(usage(
                "--notify needs a command (an argv: program and arguments)",
            ));
        }
        Ok(())
    }

    /// `--race`, `--race-until` and `--race-keep` as the engine takes them.
    fn race_options(&self) -> Result<RaceOptions, Failure> {
        let spec = match &self.race {
            Some(given) => Some(RaceSpec::parse(given).map_err(usage)?),
            None => None,
        };
        Ok(RaceOptions {
            spec,
            until: match self.race_until {
                RaceUntilArg::First => RaceUntil::First,
                RaceUntilArg::All => RaceUntil::All,
            },
            keep: match self.race_keep {
                RaceKeepArg::All => RaceKeep::All,
                RaceKeepArg::None => RaceKeep::None,
            },
        })
    }

    /// `--sandbox`, if given.
    pub fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.sandbox.map(SandboxArg::mode)
    }

    /// The `--notify` command's argv: its values, then every `--notify-arg`.
    pub fn notify_argv(&self) -> Option<Vec<String>> {
        self.notify
            .as_ref()
            .map(|cmd| cmd.iter().chain(&self.notify_arg).cloned().collect())
    }

    /// `--retry-delay` as a duration (checked to be finite and >= 0; beyond
    /// a day it is surely a slip).
    fn retry_base(&self) -> Result<Duration, Failure> {
        Duration::try_from_secs_f64(self.retry_delay)
            .ok()
            .filter(|d| *d <= Duration::from_secs(24 * 3600))
            .ok_or_else(|| {
                usage(format!(
                    "--retry-delay {:?} is too long (at most 86400 seconds)",
                    self.retry_delay
                ))
            })
    }
}

fn usage(message: impl std::fmt::Display) -> Failure {
    Failure::usage(anyhow!("{message}"))
}

/// Asks on the terminal whether to run the next batch (default yes).
fn confirm_on_terminal(next: usize, total: usize, stories: &[String]) -> bool {
    super::signals::ask_yes_no(&format!(
        "Run batch {next}/{total} ({})?",
        stories.join(", ")
    ))
}

/// The recorded key of the agents file (`--agents`, a global flag).
const AGENTS_KEY: &str = "agents";

/// What a run records of `flags` for `resume`: every recorded field, and
/// the agents file the run uses (absolute, so a resume from another
/// directory finds it). Values that carry credentials are left out.
pub fn record<T: Serialize>(flags: &T, agents: Option<&Path>, cwd: &Path) -> Value {
    let mut map = match serde_json::to_value(flags) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    if let Some(path) = agents {
        let abs = if path.is_absolute() {
            path.to_path_buf()
        } else {
            cwd.join(path)
        };
        map.insert(AGENTS_KEY.into(), abs.display().to_string().into());
    }
    map.retain(|_, v| !carries_credentials(v));
    Value::Object(map)
}

/// `scheme://user[:pass]@host/...`: a URL with user info.
fn carries_credentials(v: &Value) -> bool {
    v.as_str()
        .and_then(|s| s.split_once("://"))
        .is_some_and(|(_, rest)| rest.split('/').next().unwrap_or("").contains('@'))
}

/// What [`restore`] did, for the notice `resume` prints.
#[derive(Debug, Default, PartialEq)]
pub struct Restored {
    /// Every option in effect that differs from its default, as flags
    /// (`--parallel 6`), in the order `--help` lists them.
    pub used: Vec<String>,
    /// The options given on this command line that replaced recorded ones:
    /// (given, recorded).
    pub replaced: Vec<(String, String)>,
}

impl Restored {
    /// The notice: the options the resumed run uses, and which of them
    /// replace what the run was started with; `None` when it runs with the
    /// defaults and nothing was replaced.
    pub fn message(&self) -> Option<String> {
        if self.used.is_empty() && self.replaced.is_empty() {
            return None;
        }
        let mut text = if self.used.is_empty() {
            "resuming with the default options".to_string()
        } else {
            format!("resuming with {}", self.used.join(" "))
        };
        if !self.replaced.is_empty() {
            let given: Vec<&str> = self.replaced.iter().map(|(g, _)| g.as_str()).collect();
            let was: Vec<&str> = self.replaced.iter().map(|(_, r)| r.as_str()).collect();
            text.push_str(&format!(
                " ({} given here instead of {})",
                given.join(" "),
                was.join(" ")
            ));
        }
        Some(text)
    }
}

/// Overlays the `recorded` options on `flags`, except those given on the
/// command line (`matches`, the subcommand's; [`LINKED`] groups go
/// together), and the recorded agents file on `agents` unless `--agents`
/// was given. Returns what is now in effect for the notice. A recorded
/// value this cascade cannot read (an older or newer format) is left out.
pub fn restore<T>(
    flags: &mut T,
    agents: &mut Option<PathBuf>,
    recorded: &Value,
    matches: Option<&ArgMatches>,
) -> Result<Restored, Failure>
where
    T: Serialize + DeserializeOwned + Args + FromArgMatches,
{
    let explicit = |id: &str| {
        matches.is_some_and(|m| {
            m.try_get_raw(id).is_ok()
                && matches!(m.value_source(id), Some(ValueSource::CommandLine))
        })
    };
    let held_back = |id: &str| {
        explicit(id)
            || LINKED
                .iter()
                .any(|group| group.contains(&id) && group.iter().any(|other| explicit(other)))
    };
    let empty = Map::new();
    let recorded = recorded.as_object().unwrap_or(&empty);
    let given = to_map(&*flags);
    let mut merged = given.clone();
    for (key, value) in recorded {
        if !merged.contains_key(key) || held_back(key) {
            continue;
        }
        let mut trial = merged.clone();
        trial.insert(key.clone(), value.clone());
        if serde_json::from_value::<T>(Value::Object(trial.clone())).is_ok() {
            merged = trial;
        }
    }
    if let Ok(back) = serde_json::from_value::<T>(Value::Object(merged.clone())) {
        *flags = back;
    }

    // The agents file: a run started with --agents continues with it.
    let mut agents_note = None;
    if let Some(path) = recorded.get(AGENTS_KEY).and_then(Value::as_str) {
        let path = PathBuf::from(path);
        if explicit(AGENTS_KEY) {
            if agents.as_deref() != Some(path.as_path()) {
                agents_note = Some(format!("--agents {}", path.display()));
            }
        } else if path.is_file() {
            *agents = Some(path);
        } else {
            return Err(Failure::usage(anyhow!(
                "the run was started with --agents '{}', which is gone; pass --agents PATH to resume with another agents file",
                path.display()
            )));
        }
    }

    // What the notice says, derived from clap's view of `T`.
    let defaults = to_map(&defaults::<T>());
    let cmd = T::augment_args(clap::Command::new("flags"));
    let mut out = Restored::default();
    if let Some(path) = agents
        .as_ref()
        .filter(|_| recorded.contains_key(AGENTS_KEY))
    {
        out.used.push(format!("--agents {}", path.display()));
    }
    if let (Some(was), Some(now)) = (agents_note, agents.as_ref()) {
        out.replaced
            .push((format!("--agents {}", now.display()), was));
    }
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        let now = merged.get(id).unwrap_or(&Value::Null);
        if defaults.get(id).unwrap_or(&Value::Null) != now {
            out.used.extend(shown(arg, now));
        }
        if explicit(id) {
            let was = recorded.get(id).unwrap_or(&Value::Null);
            if was != now {
                if let (Some(g), Some(r)) = (shown(arg, now), shown(arg, was)) {
                    out.replaced.push((g, r));
                }
            }
        }
    }
    Ok(out)
}

fn to_map<T: Serialize>(v: &T) -> Map<String, Value> {
    match serde_json::to_value(v) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// A value as it is typed after its flag: `--auto-run`, `--parallel 6`,
/// `--notify a b`, `--prove-tests=false`; `None` for an unset option, a
/// switch that is off or an argument without a long name.
fn shown(arg: &clap::Arg, v: &Value) -> Option<String> {
    let long = arg.get_long()?;
    let switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
    // `--review=strict`: a flag whose value must be attached.
    let sep = if arg.is_require_equals_set() {
        "="
    } else {
        " "
    };
    match v {
        Value::Null => None,
        Value::Bool(false) if switch => None,
        Value::Bool(true) if switch => Some(format!("--{long}")),
        Value::Bool(b) => Some(format!("--{long}={b}")),
        Value::String(s) => Some(format!("--{long}{sep}{s}")),
        // As typed: `--max-cost 10`, not serde's `10.0`.
        Value::Number(n) => Some(match n.as_f64().filter(|_| n.is_f64()) {
            Some(f) => format!("--{long}{sep}{f}"),
            None => format!("--{long}{sep}{n}"),
        }),
        Value::Array(items) => Some(format!(
            "--{long}{sep}{}",
            items
                .iter()
                .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(" ")
        )),
        Value::Object(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct Probe {
        #[command(flatten)]
        flags: RunFlags,
        #[arg(long, global = true)]
        agents: Option<PathBuf>,
    }

    fn parse(argv: &[&str]) -> (RunFlags, ArgMatches) {
        let cmd = Probe::command();
        let m = cmd
            .try_get_matches_from(std::iter::once("probe").chain(argv.iter().copied()))
            .unwrap();
        (Probe::from_arg_matches(&m).unwrap().flags, m)
    }

    #[test]
    fn notify_args_starting_with_a_dash_are_given_one_by_one() {
        let (flags, _) = parse(&[
            "--notify",
            "./post.sh",
            "--notify-arg",
            "--channel",
            "--notify-arg=builds",
            "--auto-run",
        ]);
        assert_eq!(
            flags.notify_argv().unwrap(),
            ["./post.sh", "--channel", "builds"]
        );
        assert!(flags.auto_run);
        assert_eq!(RunFlags::default().notify_argv(), None);
        let orphan = Probe::command().try_get_matches_from(["probe", "--notify-arg", "x"]);
        assert!(orphan.is_err(), "--notify-arg needs --notify");
    }

    #[test]
    fn defaults_are_the_clap_attributes() {
        let d = RunFlags::default();
        assert_eq!(d.max_retries, 3);
        assert_eq!(d.parallel, 4);
        assert_eq!(d.retry_delay, 2.0);
        assert_eq!(d.schedule, ScheduleArg::Batch);
        assert_eq!(d.mode, ModeArg::UntilComplete);
        assert_eq!(d.prove_tests, None);
    }

    #[test]
    fn every_recorded_field_round_trips_and_per_invocation_ones_are_not_recorded() {
        let (flags, _) = parse(&[
            "--agent",
            "codex",
            "--parallel",
            "6",
            "--schedule",
            "eager",
            "--review=strict",
            "--prove-tests=false",
            "--max-cost",
            "5",
            "--notify",
            "notify-me",
            "now",
            ";",
            "--remote-cache",
            "file:///tmp/c",
            "--fleet",
            "nats://127.0.0.1:4222",
            "--remote",
            "/srv/repo.git",
        ]);
        let rec = record(&flags, Some(Path::new("team.json")), Path::new("/w"));
        assert_eq!(rec["agents"], "/w/team.json");
        assert_eq!(rec["schedule"], "eager");
        assert_eq!(rec["review"], "strict");
        assert_eq!(rec["prove_tests"], false);
        assert_eq!(rec["remote_cache"], "file:///tmp/c");
        assert_eq!(rec["fleet"], "nats://127.0.0.1:4222");
        let back: RunFlags = serde_json::from_value(rec).unwrap();
        assert_eq!(back, flags);
    }

    #[test]
    fn credentials_are_never_recorded() {
        let (flags, _) = parse(&["--remote-cache", "s3://key:secret@host/b"]);
        let rec = record(&flags, None, Path::new("/"));
        assert!(rec.get("remote_cache").is_none(), "{rec}");
    }

    #[test]
    fn restore_keeps_what_was_given_and_names_what_is_used() {
        let (started, _) = parse(&["--agent", "second", "--parallel", "3", "--auto-run"]);
        let rec = record(&started, Some(Path::new("/t/team.json")), Path::new("/"));
        let (mut now, m) = parse(&["--agent", "scripted", "--parallel", "2"]);
        let mut agents = None;
        // The recorded agents file is gone: an error, never another file.
        let err = restore(&mut now.clone(), &mut agents, &rec, Some(&m)).unwrap_err();
        assert!(
            err.error.to_string().contains("/t/team.json"),
            "{}",
            err.error
        );
        let tmp = tempfile::tempdir().unwrap();
        let team = tmp.path().join("team.json");
        std::fs::write(&team, "{}").unwrap();
        let rec = record(&started, Some(&team), Path::new("/"));
        let r = restore(&mut now, &mut agents, &rec, Some(&m)).unwrap();
        assert_eq!(agents.as_deref(), Some(team.as_path()));
        assert_eq!(now.agent.as_deref(), Some("scripted"));
        assert_eq!(now.parallel, 2);
        assert!(now.auto_run);
        let msg = r.message().unwrap();
        assert!(msg.starts_with("resuming with --agents"), "{msg}");
        assert!(
            msg.contains("--agent scripted") && msg.contains("--parallel 2"),
            "{msg}"
        );
        assert!(
            msg.contains("given here instead of --agent second --parallel 3"),
            "{msg}"
        );
    }

    #[test]
    fn linked_options_are_restored_together_or_not_at_all() {
        let (started, _) = parse(&["--mode", "max-iterations", "--max-iterations", "2"]);
        let rec = record(&started, None, Path::new("/"));
        let (mut now, m) = parse(&["--mode", "batch-complete"]);
        restore(&mut now, &mut None, &rec, Some(&m)).unwrap();
        assert_eq!(now.mode, ModeArg::BatchComplete);
        assert_eq!(now.max_iterations, None);
        let (mut now, m) = parse(&[]);
        restore(&mut now, &mut None, &rec, Some(&m)).unwrap();
        assert_eq!(now.mode, ModeArg::MaxIterations);
        assert_eq!(now.max_iterations, Some(2));
    }

    #[test]
    fn an_unreadable_recorded_value_is_left_out() {
        let rec = serde_json::json!({"parallel": "lots", "schedule": "sideways", "max_retries": 7, "future_flag": 1});
        let (mut now, m) = parse(&[]);
        restore(&mut now, &mut None, &rec, Some(&m)).unwrap();
        assert_eq!(now.parallel, 4);
        assert_eq!(now.schedule, ScheduleArg::Batch);
        assert_eq!(now.max_retries, 7);
    }

    #[test]
    fn the_state_format_of_earlier_cascades_still_restores() {
        // Written by the RunFlags of state.rs before the options were
        // defined once: the same keys and spellings.
        let rec = serde_json::json!({
            "agent": "codex", "no_fallback": false, "max_retries": 1, "retry_delay": 0.0,
            "parallel": 6, "schedule": "eager", "mode": "until-complete", "auto_run": true,
            "yes": false, "review": "strict", "remote_cache_mode": "read-write", "notify": ["n", "x"]
        });
        let (mut now, m) = parse(&[]);
        restore(&mut now, &mut None, &rec, Some(&m)).unwrap();
        assert_eq!(now.parallel, 6);
        assert_eq!(now.schedule, ScheduleArg::Eager);
        assert_eq!(now.review, Some(ReviewArg::Strict));
        assert_eq!(
            now.notify.as_deref(),
            Some(&["n".to_string(), "x".to_string()][..])
        );
        assert_eq!(
            now.remote.remote_cache_mode,
            Some(super::super::remote_args::RemoteModeArg::ReadWrite)
        );
    }
}
