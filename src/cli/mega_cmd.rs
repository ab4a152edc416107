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
use cascade_engine::config::RunOptions;
use cascade_engine::mega::events::{MegaEvent, MegaStep};
use cascade_engine::mega::live::LivePorts;
use cascade_engine::mega::run::{run_mega, Confirm, MegaOptions, MegaSink};
use cascade_engine::mega::{FeatureStatus, MegaError, MegaRunStatus, MegaState};
use cascade_engine::RetryPolicy;
use cascade_plan::paths::PlanKind;
use cascade_process::CancelToken;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use super::{CliResult, Failure, Global, EXIT_FAILED, EXIT_OK};

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

#[derive(Debug, Args)]
pub struct MegaApproveArgs {
    /// The mega-plan to run (default: ./mega-plan.json, else the project's
    /// Plan Cascade data directory)
    #[arg(long, value_name = "PATH")]
    pub mega: Option<PathBuf>,
    /// Run every batch without asking
    #[arg(long)]
    pub auto_run: bool,
    /// Use this agent for everything
    #[arg(long, value_name = "A")]
    pub agent: Option<String>,
    /// Agent that writes missing feature PRDs
    #[arg(long, value_name = "A")]
    pub prd_agent: Option<String>,
    /// Agent for the implementation phase
    #[arg(long, value_name = "A")]
    pub impl_agent: Option<String>,
    /// Agent for retries
    #[arg(long, value_name = "A")]
    pub retry_agent: Option<String>,
    /// Use the named agents even if they are not installed
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
    /// Units of work (features x stories) running at once
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub parallel: usize,
    /// Run even if the working tree has uncommitted changes
    #[arg(long)]
    pub allow_dirty: bool,
    /// Do not ask before each batch (same as --auto-run)
    #[arg(long)]
    pub yes: bool,
    /// Print NDJSON events instead of text
    #[arg(long)]
    pub json: bool,
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
}

pub fn run(g: &Global, c: MegaCommand) -> CliResult {
    match c {
        MegaCommand::Approve(a) | MegaCommand::Resume(a) => approve(g, a),
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

/// `mega approve` / `mega resume`.
fn approve(g: &Global, a: MegaApproveArgs) -> CliResult {
    if a.parallel == 0 {
        return Err(Failure::usage(anyhow!("--parallel must be at least 1")));
    }
    if !a.retry_delay.is_finite() || a.retry_delay < 0.0 {
        return Err(Failure::usage(anyhow!(
            "--retry-delay must be a number of seconds >= 0 (got {})",
            a.retry_delay
        )));
    }
    let cwd = current_dir()?;
    let found =
        super::plan_file::Project::of(cwd.clone()).find(PlanKind::Mega, a.mega.as_deref())?;
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
    let plan = cascade_engine::mega::plan_input::load_plan(&plan_path).map_err(mega_failure)?;
    // Checked above to be finite and >= 0; beyond a day it is surely a slip.
    let base = Duration::try_from_secs_f64(a.retry_delay)
        .ok()
        .filter(|d| *d <= Duration::from_secs(24 * 3600))
        .ok_or_else(|| {
            Failure::usage(anyhow!(
                "--retry-delay {:?} is too long (at most 86400 seconds)",
                a.retry_delay
            ))
        })?;
    let template = RunOptions {
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
        ..RunOptions::default()
    };
    let overrides = Overrides {
        agent: a.agent.clone(),
        impl_agent: a.impl_agent.clone(),
        retry_agent: a.retry_agent.clone(),
        prd_agent: a.prd_agent.clone(),
        review_agent: None,
        no_fallback: a.no_fallback,
    };
    // The agents that write the features' PRDs and implement them must work.
    super::agents_check::before_run(
        g,
        &cwd,
        &overrides,
        &[cascade_plan::Story::new("mega-plan", "mega-plan features")],
        &[
            cascade_agents::Phase::Planning,
            cascade_agents::Phase::Implementation,
        ],
    )?;
    // Feature runs start in their worktrees: a relative --agents is the user's cwd's.
    let agents_path = g.agents.as_ref().map(|p| {
        if p.is_absolute() {
            p.clone()
        } else {
            cwd.join(p)
        }
    });
    let ports = LivePorts::new(&cwd, agents_path, overrides, template).map_err(mega_failure)?;
    // `execution_mode: "auto"` in the plan runs every batch, as --auto-run does.
    let auto = a.auto_run || a.yes || plan.auto_mode();
    let confirm: Option<Confirm> =
        if !auto && std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
            Some(Arc::new(confirm_on_terminal))
        } else {
            None
        };
    let opts = MegaOptions {
        start_dir: cwd,
        auto_run: auto,
        parallel: a.parallel,
        allow_dirty: a.allow_dirty,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(anyhow!("cannot start the async runtime: {e}")))?;
    let printer = Printer::new(a.json);
    let sink: MegaSink = {
        let printer = printer.clone();
        Arc::new(move |e: &MegaEvent| printer.print(e))
    };
    let cancel = CancelToken::new();
    let (result, stop) = rt.block_on(async {
        // SIGINT, SIGTERM, SIGHUP: cancel the run (a second signal leaves at once).
        let stop = super::signals::StopSignals::watch(cancel.clone());
        // Events for `cascade ui` (.cascade/live.sock, runs/).
        let cascade_dir = cascade_git::RepoPaths::discover(&opts.start_dir)
            .ok()
            .map(|r| r.cascade_dir());
        let live = Arc::new(super::live::Live::start(cascade_dir.as_deref(), None));
        let sink: MegaSink = {
            let live = Arc::clone(&live);
            Arc::new(move |e: &MegaEvent| {
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
        (result, stop)
    });
    let summary = result.map_err(mega_failure)?;
    if !a.json {
        out!("{}", status_text(&summary.state));
    }
    print_failures(&summary.state);
    Ok(match summary.status {
        // Ctrl-C at the prompt between batches ends the run as "paused".
        MegaRunStatus::Paused if super::signals::stop_requested() => stop.exit_code(),
        MegaRunStatus::Completed | MegaRunStatus::Paused | MegaRunStatus::Closed => EXIT_OK,
        MegaRunStatus::Interrupted => stop.exit_code(),
        MegaRunStatus::Failed | MegaRunStatus::Running => EXIT_FAILED,
    })
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

    fn print(&self, e: &MegaEvent) {
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

/// The plain text line of a mega event (engine events prefixed by their feature).
fn describe(e: &MegaEvent) -> Option<String> {
    let step = match e {
        MegaEvent::Feature(f) => {
            return describe_story(&f.event).map(|l| format!("[{}] {l}", f.feature));
        }
        MegaEvent::Mega(s) => s,
    };
    Some(match step {
        MegaStep::MegaStarted {
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
        MegaStep::FeatureBatchStarted { batch, of, features } => {
            format!("feature batch {batch}/{of}: {}", features.join(", "))
        }
        MegaStep::FeatureStarted { feature, branch, worktree, reused } => format!(
            "[{feature}] {} worktree {} on {branch}",
            if *reused { "reusing" } else { "created" },
            worktree.display()
        ),
        MegaStep::PrdReady { feature, path, source, stories } => format!(
            "[{feature}] PRD {} ({stories} stories, {})",
            path.display(),
            match source {
                cascade_engine::mega::state::PrdSource::Worktree => "found in the worktree",
                cascade_engine::mega::state::PrdSource::PlanFolder => "from the plan's folder",
                cascade_engine::mega::state::PrdSource::Generated => "written by the PRD agent",
            }
        ),
        MegaStep::PrdGenerationStarted { feature, attempt, max_attempts } => {
            format!("[{feature}] PRD agent writing the PRD (attempt {attempt}/{max_attempts})")
        }
        MegaStep::PrdInvalid { feature, attempt, problems } => format!(
            "[{feature}] PRD attempt {attempt} rejected:\n{}",
            problems.iter().map(|p| format!("    - {p}")).collect::<Vec<_>>().join("\n")
        ),
        MegaStep::FeatureStoriesFinished { feature, stories } => format!(
            "[{feature}] stories: {}/{} complete, {} failed, {} blocked",
            stories.done, stories.total, stories.failed, stories.blocked
        ),
        MegaStep::FeatureMerged { feature, branch, target_branch, commit } => format!(
            "[{feature}] merged {branch} into '{target_branch}' ({})",
            &commit[..commit.len().min(10)]
        ),
        MegaStep::FeatureFailed { feature, kind, error, branch, worktree, .. } => format!(
            "[{feature}] FAILED ({}): {}\n    branch {branch}{}",
            kind.as_str(),
            error.lines().collect::<Vec<_>>().join("\n    "),
            worktree.as_ref().map(|w| format!(", worktree {}", w.display())).unwrap_or_default()
        ),
        MegaStep::FeatureBlocked { feature, blocked_by } => {
            format!("[{feature}] blocked by {blocked_by}")
        }
        MegaStep::TargetGatesFinished { batch, passed, summary } => format!(
            "gates on the target after batch {batch}: {}{}",
            if *passed { "passed" } else { "FAILED" },
            if summary.is_empty() { String::new() } else { format!("\n{summary}") }
        ),
        MegaStep::FeatureCleanedUp { feature } => {
            format!("[{feature}] worktree and branch removed")
        }
        MegaStep::MegaNotice { message } => format!("note: {message}"),
        MegaStep::MegaPaused { next_batch, reason } => {
            format!("paused before feature batch {next_batch}: {reason}")
        }
        MegaStep::MegaFinished { status, features, .. } => format!(
            "mega run {status}: {} complete, {} failed, {} blocked, {} pending",
            features.complete, features.failed, features.blocked, features.pending
        ),
    })
}

/// The plain line of a story event inside a feature (the important ones only;
/// `--json` has them all).
fn describe_story(e: &cascade_engine::Event) -> Option<String> {
    use cascade_engine::Event as E;
    Some(match e {
        E::StoryStarted {
            story,
            agent,
            attempt,
            max_attempts,
            pid,
            ..
        } => {
            format!("{story}: started via {agent} (attempt {attempt}/{max_attempts}, pid {pid})")
        }
        E::AttemptFailed {
            story,
            attempt,
            error,
            ..
        } => {
            format!("{story}: attempt {attempt} failed: {error}")
        }
        E::RetryScheduled {
            story,
            attempt,
            agent,
            ..
        } => {
            format!("{story}: retry {attempt} via {agent}")
        }
        E::StoryMerged {
            story,
            target_branch,
            ..
        } => format!("{story}: merged into {target_branch}"),
        E::MergeConflict { story, files, .. } => {
            format!("{story}: merge conflict in {}", files.join(", "))
        }
        E::StoryFailed {
            story,
            error,
            branch,
            ..
        } => {
            format!("{story}: FAILED: {error} (branch {branch})")
        }
        E::StoryBlocked { story, blocked_by } => {
            format!("{story}: blocked by {}", blocked_by.join(", "))
        }
        E::Notice { message } => format!("note: {message}"),
        _ => return None,
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
        .map(|(n, f)| format!("{n} ({})", f.status))
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
    state.status = MegaRunStatus::Closed;
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
fn effective_status(s: &MegaState) -> MegaRunStatus {
    match (s.status, s.pid) {
        (MegaRunStatus::Running, Some(pid)) if !cascade_process::pid_alive(pid) => {
            MegaRunStatus::Interrupted
        }
        (st, _) => st,
    }
}

fn status(_g: &Global, a: MegaStatusArgs) -> CliResult {
    let dir = cascade_dir()?;
    // No mega run yet is an answer, not an error (like `cascade status`).
    let state = match MegaState::load(&dir) {
        Ok(Some(s)) => s,
        Ok(None) => {
            if a.json {
                outln!("{}", status_json_none());
            } else {
                // Name the plan `mega approve` would run, wherever it is kept.
                let next = current_dir()
                    .ok()
                    .and_then(|cwd| super::plan_file::Project::of(cwd).peek(PlanKind::Mega));
                match next {
                    Some(p) => outln!(
                        "No mega-plan run here yet: start one with `cascade mega approve` (it would run {}).",
                        p.display()
                    ),
                    None => outln!(
                        "No mega-plan run here yet: start one with `cascade mega approve --mega mega-plan.json`."
                    ),
                }
            }
            return Ok(EXIT_OK);
        }
        Err(e) => return Err(Failure::usage(e)),
    };
    if a.json {
        outln!("{}", status_json(&state));
    } else {
        out!("{}", status_text(&state));
    }
    Ok(EXIT_OK)
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
    if st == MegaRunStatus::Interrupted {
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
