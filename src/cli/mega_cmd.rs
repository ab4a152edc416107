//! `cascade mega approve|resume|status|complete`: multi-feature plans.
//!
//! The work happens in `cascade_engine::mega`; this module parses the flags,
//! renders the mega run's events and state (text or JSON) and maps the result
//! to the exit codes of CLI.md.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::anyhow;
use cascade_agents::resolve::Overrides;
use cascade_engine::mega::live::LivePorts;
use cascade_engine::mega::run::{run_mega, Confirm, MegaOptions, MegaSummary, PlanInput};
use cascade_engine::mega::{FeatureStatus, MegaError, MegaState};
use cascade_engine::{Event, EventSink, RunStatus};
use cascade_plan::paths::PlanKind;
use cascade_process::CancelToken;
use clap::{ArgMatches, Args, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::report::terminal;
use super::run_flags::{self, Invocation, ModeArg, RunFlags, RUN_AFTER_HELP};
use super::{CliResult, Failure, Global, EXIT_OK};

#[derive(Debug, Subcommand)]
pub enum MegaCommand {
    /// Run the features of a mega-plan in dependency batches
    Approve(MegaApproveArgs),
    /// Continue an interrupted or killed mega run (same as approving it again)
    Resume(MegaApproveArgs),
    /// Show the state of the mega-plan run
    Status(MegaStatusArgs),
    /// Final cleanup after every feature has landed
    Complete(MegaCompleteArgs),
}

/// `mega approve` and `mega resume`: the mega-plan and the run flags.
#[derive(Debug, Args)]
#[command(after_help = RUN_AFTER_HELP)]
pub struct MegaApproveArgs {
    /// The mega-plan to run (default: ./mega-plan.json, else the project's
    /// Plan Cascade data directory)
    #[arg(long, value_name = "PATH")]
    pub mega: Option<PathBuf>,
    #[command(flatten)]
    pub run: MegaRunFlags,
    #[command(flatten)]
    pub call: Invocation,
}

/// How a mega run goes: every run flag ([`RunFlags`]: budgets, review,
/// gate jobs, notify, remote cache, fleet... for all features at once),
/// and the agent that writes missing feature PRDs. Recorded in the mega
/// state; `mega resume` restores it.
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[serde(default)]
pub struct MegaRunFlags {
    /// Agent that writes missing feature PRDs
    #[arg(long, value_name = "A")]
    pub prd_agent: Option<String>,
    #[command(flatten)]
    #[serde(flatten)]
    pub flags: RunFlags,
}

impl Default for MegaRunFlags {
    fn default() -> Self {
        run_flags::defaults()
    }
}

#[derive(Debug, Args)]
pub struct MegaCompleteArgs {
    /// Also remove the branches and worktrees of features that did not land
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct MegaStatusArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Print the status again every second until the mega run ends (on a
    /// terminal the screen is redrawn; elsewhere a block is printed only
    /// when something changed)
    #[arg(long)]
    pub watch: bool,
}

/// `matches`: the `mega` subcommand's parsed flags (`mega resume` asks which
/// were given explicitly: those override the recorded options).
pub fn run(g: &Global, c: MegaCommand, matches: Option<&ArgMatches>) -> CliResult {
    match c {
        MegaCommand::Approve(a) => approve(g, a, None),
        MegaCommand::Resume(a) => approve(
            g,
            a,
            Some(matches.and_then(|m| m.subcommand_matches("resume"))),
        ),
        MegaCommand::Status(a) => status(g, a),
        MegaCommand::Complete(a) => complete(g, a),
    }
}

fn mega_failure(e: MegaError) -> Failure {
    if e.is_usage() {
        Failure::usage(e)
    } else {
        Failure::failed(e)
    }
}

fn current_dir() -> Result<PathBuf, Failure> {
    std::env::current_dir()
        .map_err(|e| Failure::usage(anyhow!("cannot read the current directory: {e}")))
}

/// `mega approve` / `mega resume` (`resume`: `Some`, with `resume`'s
/// parsed flags when there are any). Phases: the options (restored on
/// resume), the plan, what can refuse the run ([`open_run`], the agents),
/// then the run itself ([`run_live`]) and its exit code.
fn approve(g: &Global, mut a: MegaApproveArgs, resume: Option<Option<&ArgMatches>>) -> CliResult {
    // `--fleet` in a build without the fleet: say so before anything else.
    super::fleet_cmd::check(&a.run.flags.fleet)?;
    let cwd = current_dir()?;
    let mut g = g.clone();
    let notice = match resume {
        Some(matches) => restore(&mut a, &mut g.agents, &cwd, matches)?,
        None => None,
    };
    let plan = load_approved_plan(&a, &cwd)?;
    let mut setup = Setup::new(&g, &a, &cwd)?;
    // Everything that can refuse the run first, writing nothing: the
    // repository, the plan's state, agents.json and the agent flags (a dry
    // run of a dirty tree or another plan's run is still shown).
    let opened = if a.call.dry_run {
        None
    } else {
        Some(open_run(&plan, &cwd, &a.run.flags, &mut setup)?)
    };
    // The agents that write the features' PRDs and implement them must work
    // (with --fleet the stories run on the workers: only the PRD agent here).
    let phases: &[cascade_agents::Phase] = if a.run.flags.fleet.fleet.is_some() {
        &[cascade_agents::Phase::Planning]
    } else {
        &[
            cascade_agents::Phase::Planning,
            cascade_agents::Phase::Implementation,
        ]
    };
    super::agents_check::before_run(
        &g,
        &cwd,
        &setup.overrides,
        &[&cascade_plan::Story::new("mega-plan", "mega-plan features")],
        phases,
        !a.call.dry_run,
    )?;
    let Some(opened) = opened else {
        let Setup {
            template,
            overrides,
            agents_path,
        } = setup;
        return dry_run(&plan, &cwd, agents_path, &overrides, &template, a.call.json);
    };
    let (summary, stop) = run_live(&a, plan, cwd, &setup, opened, notice)?;
    if !a.call.json {
        out!("{}", status_text(&summary.state));
    }
    print_failures(&summary.state);
    Ok(super::run_cmd::exit_code(summary.status, &stop))
}

/// The mega-plan `mega approve` runs: `--mega`, else the one found, loaded
/// and validated; refuses flags that only a plain run has.
fn load_approved_plan(a: &MegaApproveArgs, cwd: &Path) -> Result<PlanInput, Failure> {
    let flags = &a.run.flags;
    if flags.mode != ModeArg::UntilComplete || flags.max_iterations.is_some() {
        return Err(Failure::usage(anyhow!(
            "--mode and --max-iterations are for `approve`/`resume`: a mega run runs every feature to its end (stop between feature batches by leaving out --auto-run)"
        )));
    }
    let found =
        super::plan_file::Project::of(cwd.to_path_buf()).find(PlanKind::Mega, a.mega.as_deref())?;
    let plan_path = if found.path.is_absolute() {
        found.path.clone()
    } else {
        cwd.join(&found.path)
    };
    let plan_path = plan_path.canonicalize().map_err(|e| {
        Failure::usage(anyhow!(
            "cannot read mega-plan '{}': {e} (pass --mega PATH)",
            found.path.display()
        ))
    })?;
    cascade_engine::mega::plan_input::load_plan(&plan_path).map_err(mega_failure)
}

/// What every feature's engine and the PRD agent start from.
struct Setup {
    /// Every feature's engine starts from these options; the pause between
    /// batches is the mega run's own (feature engines never pause).
    template: cascade_engine::config::RunOptions,
    overrides: Overrides,
    /// Feature runs start in their worktrees: a relative --agents is the user's cwd's.
    agents_path: Option<PathBuf>,
}

impl Setup {
    fn new(g: &Global, a: &MegaApproveArgs, cwd: &Path) -> Result<Setup, Failure> {
        let mut template = a.run.flags.run_options(false)?;
        template.pause = cascade_engine::config::Pause::Never;
        if template.route == cascade_engine::config::Route::Learned {
            // Every feature routes by the repository's history (its
            // database, not a feature's).
            let db = cascade_git::RepoPaths::discover(cwd)
                .map(|p| cascade_engine::store::db_path(&p.cascade_dir()))
                .map_err(Failure::usage)?;
            template.learned =
                Some(cascade_engine::routes::learned_at(&db).map_err(Failure::failed)?);
        }
        Ok(Setup {
            template,
            overrides: Overrides {
                prd_agent: a.run.prd_agent.clone(),
                ..a.run.flags.overrides()
            },
            agents_path: g.agents.as_ref().map(|p| {
                if p.is_absolute() {
                    p.clone()
                } else {
                    cwd.join(p)
                }
            }),
        })
    }
}

/// A mega run that may start: its ports, its live channel and the repository.
struct Opened {
    ports: LivePorts,
    live: super::live::Live,
    repo: Option<cascade_git::RepoPaths>,
}

/// What can refuse the run ([`cascade_engine::mega::run::check`]), then the
/// live channel for `cascade ui` (.cascade/live.sock, runs/) and its
/// steering: pause and resume of the whole run, cancel and retry of a
/// feature's story (every feature engine gets the steering through the
/// template). The channel opens with the first event: starting it writes nothing.
fn open_run(
    plan: &PlanInput,
    cwd: &Path,
    flags: &RunFlags,
    setup: &mut Setup,
) -> Result<Opened, Failure> {
    cascade_engine::mega::run::check(plan, cwd, flags.allow_dirty).map_err(mega_failure)?;
    let repo = cascade_git::RepoPaths::discover(cwd).ok();
    let cascade_dir = repo.as_ref().map(|r| r.cascade_dir());
    let live = super::live::Live::start(cascade_dir.as_deref(), Some(&mut setup.template));
    let ports = LivePorts::new(
        cwd,
        setup.agents_path.clone(),
        setup.overrides.clone(),
        setup.template.clone(),
    )
    .map_err(mega_failure)?;
    Ok(Opened { ports, live, repo })
}

/// Runs the mega-plan: its events printed (NDJSON or lines), notified and
/// published on the live channel, Ctrl-C and the other stop signals
/// cancelling it, the stories on the fleet with `--fleet`.
fn run_live(
    a: &MegaApproveArgs,
    plan: PlanInput,
    cwd: PathBuf,
    setup: &Setup,
    Opened { ports, live, repo }: Opened,
    notice: Option<String>,
) -> Result<(MegaSummary, super::signals::StopSignals), Failure> {
    let flags = &a.run.flags;
    // `execution_mode: "auto"` in the plan runs every batch, as --auto-run does.
    let auto = flags.unattended() || plan.auto_mode();
    let confirm: Option<Confirm> =
        if !auto && std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
            Some(Arc::new(confirm_on_terminal))
        } else {
            None
        };
    let opts = MegaOptions {
        remember: Some(run_flags::record(
            &a.run,
            setup.agents_path.as_deref(),
            &cwd,
        )),
        start_dir: cwd,
        auto_run: auto,
        parallel: flags.parallel,
        allow_dirty: flags.allow_dirty,
        steering: setup.template.steering.clone(),
        integration: flags.integration_mode(),
    };
    let rt = super::runtime()?;
    let printer = Printer::new(a.call.json);
    let notifier = super::notify::Notifier::for_run(flags, &opts.start_dir)?;
    let sink = super::run_cmd::note_after_start(
        notifier.wrap(Arc::new(move |e: &Event| printer.print(e))),
        notice,
    );
    let cancel = CancelToken::new();
    let (result, stop) = rt.block_on(async {
        // SIGINT, SIGTERM, SIGHUP: cancel the run (a second signal leaves at once).
        let stop = super::signals::StopSignals::watch(cancel.clone());
        let mut ports = ports;
        // With --fleet, every feature's stories go to the workers.
        #[cfg(feature = "fleet")]
        if let Some(repo) = &repo {
            match super::fleet_cmd::coordinator(&flags.fleet, repo, cancel.clone()).await {
                Ok(executor) => ports.set_executor(executor),
                Err(f) => return (Err(f), stop),
            }
        }
        let _ = (&mut ports, &repo);
        let live = Arc::new(live);
        let sink: EventSink = {
            let live = Arc::clone(&live);
            Arc::new(move |e: &Event| {
                if let Some(note) = live.publish(e) {
                    errln!("warning: {note}");
                }
                sink(e)
            })
        };
        let result = run_mega(Arc::new(ports), plan, opts, sink, confirm, cancel.clone()).await;
        if let Ok(live) = Arc::try_unwrap(live) {
            live.finish().await;
        }
        (result.map_err(mega_failure), stop)
    });
    notifier.finish();
    rt.shutdown_timeout(Duration::from_secs(5));
    Ok((result?, stop))
}

/// `mega approve --dry-run`: every feature's schedule with its agents, in
/// feature batches (a feature whose PRD the PRD agent would write says
/// which agent); runs and writes nothing of the run.
fn dry_run(
    plan: &PlanInput,
    cwd: &Path,
    agents: Option<PathBuf>,
    overrides: &Overrides,
    template: &cascade_engine::config::RunOptions,
    json: bool,
) -> CliResult {
    let paths = cascade_git::RepoPaths::discover(cwd).map_err(Failure::usage)?;
    let state = MegaState::load(&paths.cascade_dir())
        .ok()
        .flatten()
        .filter(|s| s.plan == plan.path && s.status != RunStatus::Closed);
    let plan_dir = plan.path.parent().unwrap_or(cwd);
    let loaded =
        cascade_agents::AgentsConfig::load(agents.as_deref(), cwd).map_err(Failure::usage)?;
    let detector = cascade_agents::Detector::from_env();
    let resolver = cascade_agents::Resolver::new(&loaded.config, &detector, overrides.clone());
    resolver.check_overrides().map_err(Failure::usage)?;
    let mut out_batches = Vec::new();
    let mut lines = Vec::new();
    for (i, batch) in plan.batches.iter().enumerate() {
        lines.push(format!("Feature batch {}:", i + 1));
        let mut features = Vec::new();
        for name in batch {
            let branch = cascade_engine::mega::state::feature_branch(name);
            let recorded = state.as_ref().and_then(|s| s.feature(name));
            let status = recorded.map_or("pending", |f| f.status.as_str());
            let prd = recorded
                .and_then(|f| f.prd.clone())
                .filter(|p| p.is_file())
                .or_else(|| {
                    Some(plan_dir.join("features").join(name).join("prd.json"))
                        .filter(|p| p.is_file())
                });
            let mut entry = json!({"feature": name, "branch": branch, "status": status});
            match &prd {
                Some(prd) => {
                    let mut config = cascade_engine::config::EngineConfig::new(cwd, prd);
                    config.agents_path = agents.clone();
                    config.target_branch = Some(branch.clone());
                    config.feature = Some(name.clone());
                    let planned = cascade_engine::engine::Engine::new(config)
                        .dry_run(template)
                        .map_err(|e| {
                            let f = super::run_cmd::engine_failure(e);
                            Failure {
                                code: f.code,
                                error: f.error.context(format!("feature '{name}'")),
                            }
                        })?;
                    lines.push(format!(
                        "  {name} ({branch}, {status}): PRD {}",
                        prd.display()
                    ));
                    lines.extend(super::run_cmd::dry_run_lines(&planned, "    "));
                    entry["prd"] = prd.display().to_string().into();
                    entry["batches"] = serde_json::to_value(&planned.batches).unwrap_or_default();
                    entry["complete"] = planned.complete.clone().into();
                }
                None => {
                    let story =
                        cascade_plan::Story::new(format!("prd-{name}"), format!("PRD for {name}"));
                    let author = resolver
                        .resolve(&story, cascade_agents::Phase::Planning)
                        .map(|a| a.agent)
                        .map_err(|e| Failure::usage(anyhow!("feature '{name}': {e}")))?;
                    lines.push(format!(
                        "  {name} ({branch}, {status}): no PRD yet; agent '{author}' writes it when the feature starts"
                    ));
                    entry["prd_agent"] = author.into();
                }
            }
            features.push(entry);
        }
        out_batches.push(features);
    }
    let schedule = match template.schedule {
        cascade_engine::scheduler::Discipline::Batch => "batch",
        cascade_engine::scheduler::Discipline::Eager => "eager",
    };
    if json {
        outln!(
            "{}",
            json!({
                "mega": plan.path.display().to_string(),
                "target_branch": plan.target_branch,
                "schedule": schedule,
                "parallel": template.parallel,
                "batches": out_batches,
            })
        );
    } else {
        outln!(
            "Dry run of {}: {} features in {} batch(es) ({schedule} schedule inside features, --parallel {} across them); nothing will run.",
            plan.path.display(),
            plan.features.len(),
            plan.batches.len(),
            template.parallel
        );
        for line in lines {
            outln!("{line}");
        }
    }
    Ok(EXIT_OK)
}

/// `mega resume`: the mega-plan and the options the run was started with
/// (from its state), under the flags given here; the notice that says which
/// are in effect.
fn restore(
    a: &mut MegaApproveArgs,
    agents: &mut Option<PathBuf>,
    cwd: &Path,
    matches: Option<&ArgMatches>,
) -> Result<Option<String>, Failure> {
    let Ok(paths) = cascade_git::RepoPaths::discover(cwd) else {
        return Ok(None); // the run says what is wrong
    };
    let state = MegaState::load(&paths.cascade_dir()).map_err(mega_failure)?;
    let Some(state) = state.filter(|s| s.status != RunStatus::Closed) else {
        return Err(Failure::usage(anyhow!(
            "there is no mega run to resume in '{}'; start one with `cascade mega approve`",
            paths.main_root.display()
        )));
    };
    let mut r = match &state.options {
        Some(recorded) => run_flags::restore(&mut a.run, agents, recorded, matches)?,
        None => run_flags::Restored::default(),
    };
    // The run's own plan, wherever it was found when it started.
    if a.mega.is_none() && state.plan.is_file() {
        r.used.insert(0, format!("--mega {}", state.plan.display()));
        a.mega = Some(state.plan.clone());
    }
    Ok(r.message())
}

/// Asks on the terminal whether to run the next batch (default yes).
fn confirm_on_terminal(batch: usize, features: &[String]) -> bool {
    super::signals::ask_yes_no(&format!(
        "Run feature batch {batch} ({})?",
        features.join(", ")
    ))
}

/// On stderr: each failed feature, why, and where its branch and worktree are.
fn print_failures(s: &MegaState) {
    for (name, f) in s.ordered_features() {
        if f.status != FeatureStatus::Failed {
            continue;
        }
        let (kind, first, rest) = match &f.failure {
            Some(x) => {
                let mut lines = x.message.lines();
                let first = lines.next().unwrap_or("").to_string();
                (
                    x.kind.as_str(),
                    first,
                    lines.map(str::to_string).collect::<Vec<_>>(),
                )
            }
            None => ("error", String::new(), Vec::new()),
        };
        let wt = f
            .worktree
            .as_ref()
            .map(|w| format!(", worktree {}", w.display()))
            .unwrap_or_default();
        errln!(
            "error: feature '{name}' failed ({kind}: {first}); branch {}{wt}",
            f.branch
        );
        for line in rest {
            errln!("    {}", line.trim_start());
        }
    }
}

/// Renders mega events: NDJSON on stdout, or one plain line per step.
#[derive(Clone)]
struct Printer {
    json: bool,
    out: Arc<Mutex<crate::cli::out::Out>>,
}

impl Printer {
    fn new(json: bool) -> Printer {
        Printer {
            json,
            out: Arc::new(Mutex::new(crate::cli::out::stdout())),
        }
    }

    fn print(&self, e: &Event) {
        let line = if self.json {
            serde_json::to_string(e).ok()
        } else {
            describe(e)
        };
        if let Some(line) = line {
            let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// The plain text line of a mega event (a feature's engine events as a
/// plain run prints them, prefixed by the feature).
fn describe(e: &Event) -> Option<String> {
    Some(match e {
        Event::Feature(f) => {
            return terminal::describe(&f.event, false).map(|l| format!("[{}] {l}", f.feature));
        }
        Event::MegaStarted {
            plan,
            target_branch,
            features,
            batches,
            parallel,
            resumed,
        } => format!(
            "{} mega-plan {}: {features} features in {batches} batches into '{target_branch}', parallel {parallel}",
            if *resumed { "resuming" } else { "running" },
            plan.display()
        ),
        Event::FeatureBatchStarted { batch, of, features } => {
            format!("feature batch {batch}/{of}: {}", features.join(", "))
        }
        Event::FeatureStarted { feature, branch, worktree, reused } => format!(
            "[{feature}] {} worktree {} on {branch}",
            if *reused { "reusing" } else { "created" },
            worktree.display()
        ),
        Event::PrdReady { feature, path, source, stories } => format!(
            "[{feature}] PRD {} ({stories} stories, {})",
            path.display(),
            match source {
                cascade_engine::mega::state::PrdSource::Worktree => "found in the worktree",
                cascade_engine::mega::state::PrdSource::PlanFolder => "from the plan's folder",
                cascade_engine::mega::state::PrdSource::Generated => "written by the PRD agent",
            }
        ),
        Event::PrdGenerationStarted { feature, attempt, max_attempts } => {
            format!("[{feature}] PRD agent writing the PRD (attempt {attempt}/{max_attempts})")
        }
        Event::PrdAgentFinished { feature, attempt, agent, cost_usd, .. } => format!(
            "[{feature}] PRD agent '{agent}' finished attempt {attempt}, spent {}",
            cost_usd.map_or_else(|| "an unknown amount".to_string(), |c| format!("${c:.2}"))
        ),
        Event::PrdInvalid { feature, attempt, problems } => format!(
            "[{feature}] PRD attempt {attempt} rejected:\n{}",
            problems.iter().map(|p| format!("    - {p}")).collect::<Vec<_>>().join("\n")
        ),
        Event::FeatureStoriesFinished { feature, stories } => format!(
            "[{feature}] stories: {}/{} complete, {} failed, {} blocked",
            stories.done, stories.total, stories.failed, stories.blocked
        ),
        Event::FeatureMerged { feature, branch, target_branch, commit } => format!(
            "[{feature}] merged {branch} into '{target_branch}' ({})",
            &commit[..commit.len().min(10)]
        ),
        Event::FeatureFailed { feature, kind, error, branch, worktree, .. } => format!(
            "[{feature}] FAILED ({}): {}\n    branch {branch}{}",
            kind.as_str(),
            error.lines().collect::<Vec<_>>().join("\n    "),
            worktree.as_ref().map(|w| format!(", worktree {}", w.display())).unwrap_or_default()
        ),
        Event::FeatureBlocked { feature, blocked_by } => {
            format!("[{feature}] blocked by {blocked_by}")
        }
        Event::FeatureIntegrationStarted { feature, merged_since, target_branch } => format!(
            "[{feature}] gating its merge into '{target_branch}' (merged meanwhile: {})",
            merged_since.join(", ")
        ),
        Event::FeatureIntegrationFinished { feature, passed, summary } => format!(
            "[{feature}] gates on the merge: {}{}",
            if *passed { "passed" } else { "FAILED" },
            if summary.is_empty() { String::new() } else { format!("\n{summary}") }
        ),
        Event::TargetGatesFinished { batch, passed, summary } => format!(
            "gates on the target after batch {batch}: {}{}",
            if *passed { "passed" } else { "FAILED" },
            if summary.is_empty() { String::new() } else { format!("\n{summary}") }
        ),
        Event::FeatureCleanedUp { feature } => {
            format!("[{feature}] worktree and branch removed")
        }
        Event::MegaNotice { message } => format!("note: {message}"),
        Event::MegaPaused { next_batch, reason } => {
            format!("paused before feature batch {next_batch}: {reason}")
        }
        Event::MegaFinished { status, features, .. } => format!(
            "mega run {status}: {} complete, {} failed, {} blocked, {} pending{}{}",
            features.complete,
            features.failed,
            features.blocked,
            features.pending,
            // Features an interruption (or a budget) left half done.
            match features.running {
                0 => String::new(),
                n => format!(", {n} unfinished"),
            },
            super::report::continued_by(*status, "cascade mega resume")
        ),
        // The engine's own events are said as a plain run says them.
        other => return terminal::describe(other, false),
    })
}

/// `mega complete`: removes what is left of the mega run's worktrees and branches.
fn complete(_g: &Global, a: MegaCompleteArgs) -> CliResult {
    let cwd = current_dir()?;
    let paths = cascade_git::RepoPaths::discover(&cwd).map_err(Failure::usage)?;
    let dir = paths.cascade_dir();
    let mut state = load_state(&dir)?;
    // Never clean up under a running cascade (the lock names its pid).
    let (_lock, _) = cascade_engine::lock::RunLock::acquire(
        &dir.join(cascade_engine::mega::run::RUN_LOCK),
        "mega complete",
    )
    .map_err(Failure::usage)?;
    let open: Vec<String> = state
        .ordered_features()
        .filter(|(_, f)| f.status != FeatureStatus::Complete)
        .map(|(n, f)| format!("{n} ({})", f.status.as_str()))
        .collect();
    if !open.is_empty() && !a.force {
        return Err(Failure::failed(anyhow!(
            "not every feature has landed: {}; run `cascade mega resume` to finish them, or `cascade mega complete --force` to discard their branches and worktrees",
            open.join(", ")
        )));
    }
    let names: Vec<String> = state.features.keys().cloned().collect();
    let mut removed = Vec::new();
    let worktrees = cascade_git::worktree::list(&paths).map_err(Failure::failed)?;
    for wt in worktrees {
        let Some(branch) = wt.branch.as_deref() else {
            continue;
        };
        if wt.is_cascade && names.iter().any(|n| owned_by(branch, n)) {
            cascade_git::worktree::remove(&paths, &wt.path, true).map_err(Failure::failed)?;
            removed.push(format!("worktree {}", wt.path.display()));
        }
    }
    for b in cascade_git::worktree::cascade_branches(&paths).map_err(Failure::failed)? {
        if names.iter().any(|n| owned_by(&b.name, n))
            && cascade_git::worktree::delete_branch(&paths, &b.name).map_err(Failure::failed)?
        {
            removed.push(format!("branch {}", b.name));
        }
    }
    for f in state.features.values_mut() {
        f.worktree = None;
    }
    state.status = RunStatus::Closed;
    state.pid = None;
    state.save(&dir).map_err(Failure::failed)?;
    for r in &removed {
        outln!("removed {r}");
    }
    outln!(
        "mega run of {} closed ({} feature(s) landed on '{}')",
        state.plan.display(),
        state.counts().complete,
        state.target_branch
    );
    Ok(EXIT_OK)
}

/// Whether `branch` is the feature's branch or one of its story branches
/// (or the mega run's own throwaway branch for the target's gates).
fn owned_by(branch: &str, feature: &str) -> bool {
    let b = branch.strip_prefix("refs/heads/").unwrap_or(branch);
    if b == cascade_engine::mega::run::TARGET_GATES_BRANCH {
        return true;
    }
    let fb = format!("cascade/{feature}");
    b == fb || b.starts_with(&format!("{fb}."))
}

/// The repository's `.cascade/` directory, from the current directory.
fn cascade_dir() -> Result<PathBuf, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(anyhow!("cannot read the current directory: {e}")))?;
    let paths = cascade_git::RepoPaths::discover(&cwd).map_err(Failure::usage)?;
    Ok(paths.cascade_dir())
}

fn load_state(dir: &Path) -> Result<MegaState, Failure> {
    match MegaState::load(dir) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(Failure::usage(anyhow!(
            "no mega run in this repository (start one with `cascade mega approve --mega mega-plan.json`)"
        ))),
        Err(e) => Err(Failure::usage(e)),
    }
}

/// The status to show: a `running` state whose process is gone was killed.
fn effective_status(s: &MegaState) -> RunStatus {
    match (s.status, s.pid) {
        (RunStatus::Running, Some(pid)) if !cascade_process::pid_alive(pid) => {
            RunStatus::Interrupted
        }
        (st, _) => st,
    }
}

fn status(_g: &Global, a: MegaStatusArgs) -> CliResult {
    let dir = cascade_dir()?;
    if a.watch {
        return super::status_cmd::watch_blocks(a.json, |block| status_block(block, &dir, a.json));
    }
    let mut block = Vec::new();
    status_block(&mut block, &dir, a.json)?;
    // A failed write is recorded by `out`: the exit code tells it.
    let _ = super::out::stdout().write_all(&block);
    Ok(EXIT_OK)
}

/// `mega status` once, into `out`: whether the mega run is going on (its
/// state says running and its process lives).
fn status_block(out: &mut Vec<u8>, dir: &Path, json: bool) -> Result<bool, Failure> {
    // No mega run yet is an answer, not an error (like `cascade status`).
    let state = match MegaState::load(dir) {
        Ok(Some(s)) => s,
        Ok(None) => {
            let _ = writeln!(out, "{}", no_mega_run(json));
            return Ok(false);
        }
        Err(e) => return Err(Failure::usage(e)),
    };
    let _ = match json {
        true => writeln!(out, "{}", status_json(&state)),
        false => write!(out, "{}", status_text(&state)),
    };
    Ok(effective_status(&state) == RunStatus::Running)
}

/// What `mega status` says without a mega run: naming the plan `mega
/// approve` would run, wherever it is kept (JSON: [`status_json_none`]).
fn no_mega_run(json: bool) -> String {
    if json {
        return status_json_none().to_string();
    }
    let next = current_dir()
        .ok()
        .and_then(|cwd| super::plan_file::Project::of(cwd).peek(PlanKind::Mega));
    match next {
        Some(p) => format!(
            "No mega-plan run here yet: start one with `cascade mega approve` (it would run {}).",
            p.display()
        ),
        None => "No mega-plan run here yet: start one with `cascade mega approve --mega mega-plan.json`.".to_string(),
    }
}

/// `mega status --json`: the state with features in batch order.
pub fn status_json(s: &MegaState) -> Value {
    let mut features = Map::new();
    for (name, f) in s.ordered_features() {
        let mut v = serde_json::to_value(f).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.insert("name".into(), json!(name));
        }
        features.insert(name.clone(), v);
    }
    json!({
        "status": effective_status(s).as_str(),
        "plan": s.plan,
        "goal": s.goal,
        "target_branch": s.target_branch,
        "batches": s.batches,
        "features": features,
        "counts": s.counts(),
        "target_gates": s.target_gates,
        "started_at": s.started_at,
        "updated_at": s.updated_at,
    })
}

/// `mega status --json` without a mega run: `"status": "none"`, the other
/// fields of [`status_json`] empty.
fn status_json_none() -> Value {
    json!({
        "status": "none",
        "plan": null,
        "goal": null,
        "target_branch": null,
        "batches": [],
        "features": {},
        "counts": cascade_engine::mega::state::FeatureCounts::default(),
        "target_gates": [],
        "started_at": null,
        "updated_at": null,
    })
}

/// `mega status`: one line per feature, where to look when one failed.
pub fn status_text(s: &MegaState) -> String {
    let mut out = String::new();
    let st = effective_status(s);
    out.push_str(&format!(
        "mega-plan {} -> {}: {}\n",
        s.plan.display(),
        s.target_branch,
        st
    ));
    if st == RunStatus::Interrupted {
        out.push_str("  (interrupted: `cascade mega resume` continues)\n");
    }
    let width = s.features.keys().map(String::len).max().unwrap_or(4).max(4);
    for (i, batch) in s.batches.iter().enumerate() {
        out.push_str(&format!("batch {}/{}\n", i + 1, s.batches.len()));
        for name in batch {
            let Some(f) = s.feature(name) else { continue };
            let stories = if f.stories.total > 0 {
                format!("stories {}/{}", f.stories.done, f.stories.total)
            } else {
                String::new()
            };
            out.push_str(&format!(
                "  {name:<width$}  {:<14}  {stories}",
                f.status.as_str()
            ));
            if let Some(c) = &f.merge_commit {
                out.push_str(&format!("  merged {}", &c[..c.len().min(10)]));
            }
            out.push('\n');
            match f.status {
                FeatureStatus::Failed => {
                    if let Some(fail) = &f.failure {
                        for (j, line) in fail.message.lines().enumerate() {
                            if j == 0 {
                                out.push_str(&format!("      {}: {line}\n", fail.kind.as_str()));
                            } else {
                                out.push_str(&format!("        {}\n", line.trim_start()));
                            }
                        }
                        if !fail.conflict_files.is_empty() {
                            out.push_str(&format!(
                                "      conflicting files: {}\n",
                                fail.conflict_files.join(", ")
                            ));
                        }
                    }
                    out.push_str(&format!("      branch {}", f.branch));
                    if let Some(w) = &f.worktree {
                        out.push_str(&format!(", worktree {}", w.display()));
                    }
                    out.push('\n');
                }
                FeatureStatus::Blocked => {
                    if let Some(by) = &f.blocked_by {
                        out.push_str(&format!("      blocked by {by}\n"));
                    }
                }
                FeatureStatus::GeneratingPrd | FeatureStatus::Running | FeatureStatus::Merging => {
                    out.push_str(&format!("      branch {}", f.branch));
                    if let Some(w) = &f.worktree {
                        out.push_str(&format!(", worktree {}", w.display()));
                    }
                    out.push('\n');
                }
                _ => {}
            }
        }
    }
    let c = s.counts();
    out.push_str(&format!(
        "features: {} complete, {} failed, {} blocked, {} running, {} pending\n",
        c.complete, c.failed, c.blocked, c.running, c.pending
    ));
    out
}
