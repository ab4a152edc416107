//! `cascade approve`, `cascade resume`: running a PRD (`cascade status` is
//! `status_cmd`).
//!
//! The commands turn the run flags ([`RunFlags`], shared with every mode)
//! into an [`EngineConfig`] and run options, wire the reporter (`--json`:
//! NDJSON on stdout; else the terminal view), the Ctrl-C handler (first:
//! cancel, state saved, exit 130; second: exit at once) and the
//! confirmation between batches (asked on the terminal; without one and
//! without `--yes`, the run stops after one batch), and map the result to
//! the exit codes of CLI.md. The flags a run starts with are recorded in its
//! state; `resume` restores them, a flag given to it winning.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cascade_engine::config::EngineConfig;
use cascade_engine::engine::{DryRun, Engine};
use cascade_engine::state::RunState;
use cascade_engine::{Event, EventSink, RunStatus};
use cascade_process::CancelToken;
use clap::{ArgMatches, Args};

use super::plan_file::Project;
use super::report::Reporter;
use super::run_flags::{self, Invocation, RunFlags, RUN_AFTER_HELP};
use super::signals::StopSignals;
use super::{CliResult, Failure, Global, EXIT_FAILED, EXIT_OK};
use cascade_plan::paths::PlanKind;

/// `approve` and `resume`: the PRD and the run flags.
#[derive(Debug, Args)]
#[command(after_help = RUN_AFTER_HELP)]
pub struct RunArgs {
    /// The PRD to run (default: ./prd.json, else the project's Plan Cascade
    /// data directory; `resume`: the run's own PRD)
    #[arg(long, value_name = "PATH")]
    pub prd: Option<PathBuf>,
    #[command(flatten)]
    pub flags: RunFlags,
    #[command(flatten)]
    pub call: Invocation,
}

pub fn approve(g: &Global, a: RunArgs) -> CliResult {
    run(g, a, false, None)
}

/// `matches`: `resume`'s parsed flags; those given explicitly override the
/// options the run was started with, the others are restored from its state.
pub fn resume(g: &Global, a: RunArgs, matches: Option<&ArgMatches>) -> CliResult {
    run(g, a, true, matches)
}

pub(super) fn engine_config(g: &Global, cwd: &Path, prd: PathBuf) -> EngineConfig {
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

pub fn engine_failure(e: cascade_engine::error::EngineError) -> Failure {
    if e.is_usage() {
        Failure::usage(e)
    } else {
        Failure::failed(e)
    }
}

fn run(g: &Global, mut a: RunArgs, resume: bool, matches: Option<&ArgMatches>) -> CliResult {
    // `--fleet` in a build without the fleet: say so before anything else.
    super::fleet_cmd::check(&a.flags.fleet)?;
    let project = Project::current()?;
    let mut g = g.clone();
    let mut notice = None;
    let mut recorded = None;
    if resume {
        if let Some(repo) = &project.repo {
            let state_path = cascade_engine::store::db_path(&repo.cascade_dir());
            // Say there is nothing to resume before any other check (a dirty
            // tree, a missing agent): those would send the user fixing things
            // only to learn that there never was a run.
            if !a.call.dry_run && !cascade_engine::store::exists(&state_path) {
                return Err(engine_failure(
                    cascade_engine::error::EngineError::NothingToResume { path: state_path },
                ));
            }
            // Continue the way the run was started (only that is read here:
            // the engine reads the whole state beside the plan). A state
            // that cannot be read is reported by the engine itself, with
            // what to do.
            if let Ok(Some(state)) = &RunState::load_head(&state_path) {
                recorded = recorded_prd(state, &project.cwd);
                if let Some(stored) = &state.options {
                    let mut r = run_flags::restore(&mut a.flags, &mut g.agents, stored, matches)?;
                    // The run's own PRD (kept in the state, wherever discovery
                    // found it) is one of the options it continues with.
                    match (&a.prd, &recorded) {
                        (None, Some(p)) if p != Path::new(cascade_plan::paths::PRD_FILE) => {
                            r.used.insert(0, format!("--prd {}", p.display()));
                        }
                        (Some(given), Some(p)) if given != p => {
                            r.used.insert(0, format!("--prd {}", given.display()));
                            r.replaced.insert(
                                0,
                                (
                                    format!("--prd {}", given.display()),
                                    format!("--prd {}", p.display()),
                                ),
                            );
                        }
                        _ => {}
                    }
                    notice = r.message();
                }
            }
        }
    }
    let prd = choose_prd(&project, &a, recorded)?;
    let engine = Engine::new(engine_config(&g, &project.cwd, prd));
    let mut options = a.flags.run_options(resume)?;
    options.learned = engine.learned_routes(&options).map_err(engine_failure)?;
    options.remember = Some(run_flags::record(
        &a.flags,
        g.agents.as_deref(),
        &project.cwd,
    ));
    // Everything that can refuse the run first, writing nothing; with
    // --fleet the workers resolve the agents, so the check waits for the
    // fleet's executor (below).
    let local = a.flags.fleet.fleet.is_none();
    let checked = if local && !a.call.dry_run {
        Some(engine.check(&options).map_err(engine_failure)?)
    } else {
        None
    };
    // A dry run reads the plan once, for the agents check and itself.
    let prepared = if a.call.dry_run {
        Some(engine.prepare().map_err(engine_failure)?)
    } else {
        None
    };
    // The agents this run will use must accept their argv and be logged in
    // (here; with --fleet they run on the workers). A dry run only reads
    // what earlier checks found.
    if local {
        // The kinds of pending stories the engine found (once, for its
        // check and this one).
        let kinds = checked
            .as_ref()
            .map(|c| c.pending_kinds())
            .or(prepared.as_ref().map(|p| p.pending_kinds()));
        if let Some(kinds) = kinds {
            super::agents_check::before_prd_run(
                &g,
                &kinds,
                a.flags.overrides(),
                a.flags.max_retries > 0,
                !a.call.dry_run,
            )?;
        }
    }
    if let Some(prepared) = prepared {
        let plan = engine
            .dry_run_prepared(prepared, &options)
            .map_err(engine_failure)?;
        print_dry_run(&plan, &engine.config().prd_path, a.call.json);
        return Ok(EXIT_OK);
    }
    let rt = crate::cli::runtime()?;
    let reporter = Reporter::new(a.call.json);
    let notifier = super::notify::Notifier::for_run(&a.flags, &project.cwd)?;
    let cancel = CancelToken::new();
    let (result, stop) = rt.block_on(async {
        // SIGINT, SIGTERM, SIGHUP: stop scheduling, kill running agents and
        // gates, save state (a second signal leaves at once).
        let stop = StopSignals::watch(cancel.clone());
        let sink = notifier.wrap(note_after_start(reporter.sink(), notice));
        #[cfg(feature = "fleet")]
        if let Some(repo) = &project.repo {
            match super::fleet_cmd::coordinator(&a.flags.fleet, repo, cancel.clone()).await {
                Ok(executor) => options.executor = executor,
                Err(f) => return (Err(f), stop),
            }
        }
        // Events and requests for `cascade ui` (.cascade/live.sock, runs/).
        let cascade_dir = project.repo.as_ref().map(|r| r.cascade_dir());
        let live = super::live::Live::start(cascade_dir.as_deref(), Some(&mut options));
        let sink = live.wrap(sink);
        let result = match checked {
            Some(checked) => engine.start(checked, options, sink, &cancel).await,
            None => engine.run(options, sink, &cancel).await,
        };
        live.finish().await;
        (result.map_err(engine_failure), stop)
    });
    notifier.finish();
    // A thread stuck on an unanswering store (a hung network mount under a
    // file:// remote cache) must not keep the process from exiting.
    rt.shutdown_timeout(Duration::from_secs(5));
    reporter.finish();
    let summary = result?;
    Ok(exit_code(summary.status, &stop))
}

/// The exit code of a run (plain or mega) that ended with `status`.
pub(super) fn exit_code(status: RunStatus, stop: &super::signals::StopSignals) -> u8 {
    match status {
        // Ctrl-C at the prompt between batches can end the run as "paused".
        RunStatus::Paused if super::signals::stop_requested() => stop.exit_code(),
        RunStatus::Completed | RunStatus::Paused | RunStatus::Closed => EXIT_OK,
        RunStatus::Failed | RunStatus::BudgetExhausted | RunStatus::Running => EXIT_FAILED,
        RunStatus::Interrupted => stop.exit_code(),
    }
}

/// `sink`, followed by a notice with `message` right after `run_started`
/// (a mega run's: `mega_notice` after `mega_started`): the options restored
/// by `resume`, a line on the terminal, an event in NDJSON.
pub(super) fn note_after_start(sink: EventSink, message: Option<String>) -> EventSink {
    let Some(message) = message else {
        return sink;
    };
    let pending = std::sync::Mutex::new(Some(message));
    Arc::new(move |e: &Event| {
        sink(e);
        let mega = match e {
            Event::RunStarted { .. } => false,
            Event::MegaStarted { .. } => true,
            _ => return,
        };
        if let Some(message) = pending.lock().ok().and_then(|mut m| m.take()) {
            sink(&if mega {
                Event::MegaNotice { message }
            } else {
                Event::Notice { message }
            });
        }
    })
}

/// Prints a dry run (a closed pipe ends it quietly, as `| head` expects).
fn print_dry_run(plan: &DryRun, prd: &Path, json: bool) {
    for n in &plan.notices {
        errln!("warning: {}", super::report::printable(n));
    }
    // One buffered writer: a large plan has a line per story. A failed
    // write is recorded by `out` (the exit code tells it).
    let mut out = std::io::BufWriter::with_capacity(1 << 16, super::out::stdout());
    let _ = write_dry_run(&mut out, plan, prd, json);
}

fn write_dry_run(
    out: &mut impl std::io::Write,
    plan: &DryRun,
    prd: &Path,
    json: bool,
) -> std::io::Result<()> {
    if json {
        let v = serde_json::json!({
            "prd": prd.display().to_string(),
            "target_branch": plan.target_branch,
            "schedule": plan.schedule,
            "parallel": plan.parallel,
            "complete": plan.complete,
            "batches": plan.batches,
        });
        writeln!(out, "{v}")?;
        return out.flush();
    }
    writeln!(
        out,
        "Dry run of {}: {} batch(es) into '{}' ({} schedule, --parallel {}); nothing will run.",
        prd.display(),
        plan.batches.len(),
        plan.target_branch,
        plan.schedule,
        plan.parallel
    )?;
    for line in dry_run_lines(plan, "") {
        writeln!(out, "{line}")?;
    }
    out.flush()
}

/// The stories of a dry run by batch, with their agents and fallbacks, each
/// line starting with `indent` (a mega run's features indent theirs).
pub fn dry_run_lines(plan: &DryRun, indent: &str) -> Vec<String> {
    let p = super::report::printable;
    let mut lines = Vec::new();
    if !plan.complete.is_empty() {
        lines.push(format!(
            "{indent}Already complete: {}",
            plan.complete.join(", ")
        ));
    }
    for (i, batch) in plan.batches.iter().enumerate() {
        lines.push(format!("{indent}Batch {}:", i + 1));
        for s in batch {
            lines.push(format!(
                "{indent}  {}  {}  -> {} ({})",
                s.story,
                super::report::printable_line(&s.title),
                s.agent,
                s.reason
            ));
            for f in &s.fallbacks {
                lines.push(format!(
                    "{indent}      [FALLBACK] {} -> {}: {}",
                    f.from,
                    f.to,
                    p(&f.why)
                ));
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(prd: &str, root: &Path) -> RunState {
        let document = serde_json::json!({
            "schema_version": cascade_engine::state::SCHEMA_VERSION, "run_id": "r",
            "prd": prd, "target_branch": "main", "project_root": root.display().to_string(),
            "status": "interrupted", "pid": 1, "started_at": "t", "updated_at": "t",
            "stories": [{"id": "s1", "status": "pending"}]
        });
        serde_json::from_value(document).unwrap()
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
