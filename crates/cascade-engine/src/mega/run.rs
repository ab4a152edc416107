//! The mega run: features in dependency batches, each in its own worktree,
//! merged into the target branch in batch order.
//!
//! Per batch: every runnable feature gets a worktree on `cascade/<name>` from
//! the current tip of the target branch (which already holds the earlier
//! batches), a PRD (found, copied from the plan's folder, or written by the PRD
//! agent) and an engine run of that PRD inside the worktree; features of the
//! batch run in parallel and share `--parallel` slots. Then the successful
//! features are merged into the target with `--no-ff` merge commits, in batch
//! order; the gates are re-run on the merged target; landed features' worktrees
//! and branches are removed. A feature that fails keeps its branch and worktree
//! and blocks only the features that depend on it.
//!
//! Every transition is saved to the run database (`.cascade/cascade.db`), so a killed run
//! resumes: landed features are skipped, a feature whose branch is already in
//! the target is not merged twice, a feature that was running continues in its
//! worktree (the engine resumes its own state).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cascade_git::RepoPaths;
use cascade_process::CancelToken;
use tokio::sync::Semaphore;

use super::error::MegaError;
use super::feature::run_feature;
use super::findings;
use super::land::{cleanup_feature, merge_feature, run_target_gates};
use super::ports::MegaPorts;
use super::state::{now, FailureKind, FeatureFailure, FeatureStatus, MegaState};
use crate::events::{Event, EventSink, RunStatus};
use crate::lock::RunLock;
use crate::progress::ProgressLog;
use crate::scheduler::{Discipline, NodeSpec, NodeState, Scheduler};

/// Asked before each next batch when not `--auto-run`: `(batch, features) -> go on?`.
pub type Confirm = Arc<dyn Fn(usize, &[String]) -> bool + Send + Sync>;

/// The repository's run lock under `.cascade/`: a mega run holds the same
/// lock as a plain run (its feature engines run without taking it), so no
/// `approve` or `worktree prune` can interfere with it.
pub const RUN_LOCK: &str = "lock";
/// Directory under `.cascade/` with per-feature state, kept PRDs and findings.
pub const MEGA_DIR: &str = "mega";
/// The branch of the throwaway worktree the target's gates run in when the
/// target branch is not checked out anywhere (`_` is never in a feature name).
pub const TARGET_GATES_BRANCH: &str = "cascade/_target-gates";
/// A feature of the mega-plan, as the runner needs it.
#[derive(Debug, Clone)]
pub struct FeatureSpec {
    pub id: String,
    /// `^[a-z0-9][a-z0-9-]*$`: the branch is `cascade/<name>`.
    pub name: String,
    pub title: String,
    pub description: String,
    pub priority: String,
    /// Names of the features it depends on.
    pub dependencies: Vec<String>,
}

/// A validated mega-plan: features and their batches (by name).
#[derive(Debug, Clone)]
pub struct PlanInput {
    /// The mega-plan file (absolute).
    pub path: PathBuf,
    pub goal: String,
    /// `target_branch` of the plan; `None`: the current branch.
    pub target_branch: Option<String>,
    pub features: Vec<FeatureSpec>,
    pub batches: Vec<Vec<String>>,
    /// `execution_mode` of the plan: `auto` runs every batch without asking
    /// (like `--auto-run`); anything else asks between batches.
    pub execution_mode: Option<String>,
}

impl PlanInput {
    /// Whether the plan asks for its batches to run without confirmation.
    pub fn auto_mode(&self) -> bool {
        self.execution_mode
            .as_deref()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("auto"))
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct MegaOptions {
    /// Where cascade was started (any directory of the repository).
    pub start_dir: PathBuf,
    /// Run every batch without asking.
    pub auto_run: bool,
    /// Units of work (features x stories) at once.
    pub parallel: usize,
    /// Run even if the main worktree has uncommitted changes.
    pub allow_dirty: bool,
    /// The options to record in the mega state for `mega resume` (the
    /// binary's; kept without being read). `None`: keep what it has.
    pub remember: Option<serde_json::Value>,
    /// The live run's steering (the dashboard's pause and resume of the
    /// whole run; the feature engines get it through their options): the
    /// run answers pause and resume, and starts no feature batch while
    /// paused. `None`: nobody steers it.
    pub steering: Option<crate::control::steer::Steering>,
    /// `--integration`: whether a feature's merge into a target that moved
    /// since the feature started is gated as merged before the target moves.
    pub integration: crate::config::Integration,
}

/// How the run ended.
#[derive(Debug, Clone)]
pub struct MegaSummary {
    pub status: RunStatus,
    pub state: MegaState,
}

/// Where feature `name`'s engine keeps its state (`cascade.db`), progress
/// and findings: `.cascade/mega/features/<name>/` (`cascade_dir` is `.cascade/`).
pub fn feature_dir(cascade_dir: &Path, name: &str) -> PathBuf {
    cascade_dir.join(MEGA_DIR).join("features").join(name)
}

/// Whether `name` can be a feature name (and so a branch and path component).
pub fn valid_feature_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The shared pieces every feature task uses.
pub(super) struct Ctx<P> {
    pub(super) ports: Arc<P>,
    /// `progress.txt` where cascade was started: feature steps, and every
    /// story line as `<feature>/<story>` (each feature's own engine log is
    /// under `.cascade/mega/features/<name>/progress.txt`).
    pub(super) progress: ProgressLog,
    pub(super) paths: RepoPaths,
    pub(super) cascade_dir: PathBuf,
    pub(super) plan_dir: PathBuf,
    pub(super) target: String,
    pub(super) goal: String,
    pub(super) specs: HashMap<String, FeatureSpec>,
    pub(super) state: Mutex<MegaState>,
    pub(super) sink: EventSink,
    pub(super) cancel: CancelToken,
    /// `--parallel`: each feature engine's own limit.
    pub(super) parallel: usize,
    /// The one semaphore of `parallel` permits that every story attempt (of
    /// every feature) and every PRD agent run holds while it works.
    pub(super) slots: Arc<Semaphore>,
    /// `--integration` (see [`MegaOptions::integration`]).
    pub(super) integration: crate::config::Integration,
}

impl<P: MegaPorts> Ctx<P> {
    pub(super) fn emit(&self, event: Event) {
        if let Some(line) = progress_line(&event) {
            self.progress.append(&line);
        }
        (self.sink)(&event);
    }

    /// Applies `f` to the feature's state and saves.
    pub(super) fn update(&self, name: &str, f: impl FnOnce(&mut super::state::FeatureState)) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(fs) = s.feature_mut(name) {
            f(fs);
        }
        if let Err(e) = s.save(&self.cascade_dir) {
            drop(s);
            self.emit(Event::MegaNotice {
                message: format!("could not save the mega state: {e}"),
            });
        }
    }

    /// Whether feature `name` is merged into the target.
    pub(super) fn landed(&self, name: &str) -> bool {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.feature(name)
            .is_some_and(|f| f.status == FeatureStatus::Complete)
    }

    pub(super) fn snapshot(&self) -> MegaState {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn feature_dir(&self, name: &str) -> PathBuf {
        feature_dir(&self.cascade_dir, name)
    }

    /// Records a failure and tells the sink.
    pub(super) fn fail(
        &self,
        name: &str,
        kind: FailureKind,
        message: String,
        conflict_files: Vec<String>,
    ) {
        let mut branch = String::new();
        let mut worktree = None;
        self.update(name, |f| {
            f.status = FeatureStatus::Failed;
            f.failure = Some(FeatureFailure {
                kind,
                message: message.clone(),
                conflict_files: conflict_files.clone(),
            });
            f.finished_at = Some(now());
            branch = f.branch.clone();
            worktree = f.worktree.clone();
        });
        self.emit(Event::FeatureFailed {
            feature: name.to_string(),
            kind,
            error: message,
            branch,
            worktree,
            conflict_files,
        });
    }
}

/// What a feature task ends with.
pub(super) enum TaskEnd {
    /// Stories complete: ready to merge.
    Ready,
    /// Failed (already recorded).
    Failed,
    /// Ctrl-C: left as it was for resume.
    Interrupted,
    /// The run's budget ran out: left running, for a resume with more.
    Budget,
}

/// What [`check`] found: the repository and the branch features merge into.
pub struct Checked {
    paths: RepoPaths,
    target: String,
}

/// cascade's own files of a mega run, as `info/exclude` patterns: the usual
/// names at the root, and the plan and progress.txt wherever they are
/// (`--mega plans/x.json`).
fn own_patterns(plan: &PlanInput, start_dir: &Path) -> Vec<String> {
    let here = crate::gitops::exclude_patterns(
        start_dir,
        &[plan.path.clone(), start_dir.join("progress.txt")],
    );
    crate::config::OWN_FILES
        .iter()
        .map(|s| s.to_string())
        .chain(here)
        .collect()
}

/// Everything that can refuse a mega run, checked before anything is
/// written (a refused command leaves the repository as it was): feature
/// names, the repository, the user's uncommitted changes, the target
/// branch (a detached HEAD, no commits), a run of another plan in the way.
/// `mega approve` calls it before its agent check; [`run_mega`] again.
pub fn check(plan: &PlanInput, start_dir: &Path, allow_dirty: bool) -> Result<Checked, MegaError> {
    for f in &plan.features {
        if !valid_feature_name(&f.name) {
            return Err(MegaError::BadFeatureName {
                name: f.name.clone(),
            });
        }
    }
    let paths = RepoPaths::discover(start_dir).map_err(|e| MegaError::Repo(e.to_string()))?;
    if !allow_dirty {
        let dirty =
            crate::gitops::user_changes(&paths.main_root, &own_patterns(plan, start_dir), &[], 10)
                .map_err(|e| MegaError::Git(e.to_string()))?;
        if !dirty.is_empty() {
            return Err(MegaError::Dirty {
                dir: paths.main_root.clone(),
                files: dirty,
            });
        }
    }
    let target = match &plan.target_branch {
        Some(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => current_branch(&paths)?,
    };
    if cascade_git::merge::branch_tip(&paths, &target)
        .map_err(|e| MegaError::Git(e.to_string()))?
        .is_none()
    {
        return Err(MegaError::Plan(format!(
            "target branch '{target}' does not exist; create it or fix `target_branch` in '{}'",
            plan.path.display()
        )));
    }
    choose_state(MegaState::load(&paths.cascade_dir())?, plan, &target)?;
    Ok(Checked { paths, target })
}

/// The state to run with: the one of this plan, continued (a completed run
/// of it only picks up features added since), or a fresh one when there is
/// none, the last run was closed (`mega complete`), or a finished run of
/// another plan. An unfinished run of another plan is in the way.
/// `true` when continued.
fn choose_state(
    loaded: Option<MegaState>,
    plan: &PlanInput,
    target: &str,
) -> Result<(MegaState, bool), MegaError> {
    let fresh = || {
        MegaState::new(
            plan.path.clone(),
            plan.goal.clone(),
            target.to_string(),
            plan.batches.clone(),
        )
    };
    Ok(match loaded {
        None => (fresh(), false),
        Some(s) if s.status == RunStatus::Closed => (fresh(), false),
        Some(s) if s.plan != plan.path => {
            if s.status == RunStatus::Completed {
                (fresh(), false)
            } else {
                return Err(MegaError::OtherPlan { existing: s.plan });
            }
        }
        Some(s) => (s, true),
    })
}

/// Runs (or resumes) a mega-plan. Returns how it ended; failing features are
/// in the state, not errors. Errors are what stops the run as a whole.
///
/// Phases: [`check`], [`open_run`] (lock, leftovers, state), the start
/// event and steering, [`drive`] (feature batches on the [`Scheduler`]),
/// [`finish`] (final status, saved, announced).
pub async fn run_mega<P: MegaPorts>(
    ports: Arc<P>,
    plan: PlanInput,
    opts: MegaOptions,
    sink: EventSink,
    confirm: Option<Confirm>,
    cancel: CancelToken,
) -> Result<MegaSummary, MegaError> {
    let started = Instant::now();
    let checked = check(&plan, &opts.start_dir, opts.allow_dirty)?;
    let (lock, ctx, resumed) = open_run(ports, &plan, &opts, checked, sink, cancel).await?;
    ctx.emit(Event::MegaStarted {
        plan: plan.path.clone(),
        target_branch: ctx.target.clone(),
        features: plan.features.len(),
        batches: plan.batches.len(),
        parallel: ctx.parallel,
        resumed,
    });
    // Pause and resume of the whole run are answered here (cancel and
    // retry by the feature engines), while the run goes on.
    // The task keeps no hold on the sink: whoever gave it (the live
    // channel) gets it back whole once the run is over, to drain it.
    let _steered = opts.steering.as_ref().map(|s| {
        let sink = Arc::downgrade(&ctx.sink);
        crate::control::steer::serve_run(s, move |feature, event| {
            let Some(sink) = sink.upgrade() else { return };
            sink(&match feature {
                Some(feature) => Event::in_feature(feature, event),
                None => event,
            })
        })
    });
    // A kill between a feature's merge and its cleanup leaves its worktree.
    let landed: Vec<String> = ctx
        .snapshot()
        .features
        .iter()
        .filter(|(_, f)| f.status == FeatureStatus::Complete && f.worktree.is_some())
        .map(|(n, _)| n.clone())
        .collect();
    for name in landed {
        cleanup_feature(&ctx, &name).await;
    }
    let stopped = drive(&ctx, &plan, &opts, confirm).await;
    let summary = finish(&ctx, stopped, started)?;
    drop(lock);
    Ok(summary)
}

/// Takes the repository's run lock, clears what a killed run left (agents,
/// half-written state files), and opens the state (continued or fresh,
/// saved as running) and the run's shared context. `true`: resumed.
async fn open_run<P: MegaPorts>(
    ports: Arc<P>,
    plan: &PlanInput,
    opts: &MegaOptions,
    Checked { paths, target }: Checked,
    sink: EventSink,
    cancel: CancelToken,
) -> Result<(RunLock, Arc<Ctx<P>>, bool), MegaError> {
    let cascade_dir = paths.cascade_dir();
    // The run starts: from here on cascade writes.
    let (lock, note) = RunLock::acquire(&cascade_dir.join(RUN_LOCK), "mega approve")?;
    if let Some(message) = note {
        sink(&Event::MegaNotice { message });
    }
    // All of cascade's own files at once, before the feature engines start:
    // they then find nothing to add (concurrent writers of info/exclude race).
    let own = own_patterns(plan, &opts.start_dir);
    let own: Vec<&str> = own.iter().map(String::as_str).collect();
    paths
        .ensure_excluded(&own)
        .map_err(|e| MegaError::Git(e.to_string()))?;
    // Agents a killed mega run left (PRD writers, the features' story
    // agents) would keep writing into the worktrees about to be reused:
    // with the repository's run lock held no live run owns any agent
    // working under `.cascade/`, so all of them are stopped.
    let dir = cascade_dir.clone();
    let stopped = tokio::task::spawn_blocking(move || {
        crate::leftover::stop_agents_under(&dir, std::time::Duration::from_secs(2))
    })
    .await
    .unwrap_or_default();
    for message in stopped {
        sink(&Event::MegaNotice { message });
    }
    // Read again under the lock (a run that ended meanwhile changed it).
    let (mut state, resumed) = choose_state(MegaState::load(&cascade_dir)?, plan, &target)?;
    if resumed {
        reconcile(&mut state, plan);
    }
    state.status = RunStatus::Running;
    state.pid = Some(std::process::id());
    state.target_branch = target.clone();
    if let Some(options) = &opts.remember {
        state.options = Some(options.clone());
    }
    state.save(&cascade_dir)?;
    // What the features spent before (earlier invocations) counts toward
    // the run's budget; a running feature's engine reports its own.
    for (name, f) in &state.features {
        if f.status != FeatureStatus::Pending {
            ports.prior_spend(
                name,
                &crate::store::db_path(&feature_dir(&cascade_dir, name)),
            );
        }
        if f.prd_attempts > 0 {
            ports.prior_prd_spend(name, f.prd_spend());
        }
    }
    findings::ensure_mega_findings(&paths.main_root, &plan.goal)?;
    let parallel = opts.parallel.max(1);
    let ctx = Arc::new(Ctx {
        ports,
        progress: ProgressLog::new(opts.start_dir.join("progress.txt")),
        plan_dir: plan
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| paths.main_root.clone()),
        cascade_dir,
        paths,
        target,
        goal: plan.goal.clone(),
        specs: plan
            .features
            .iter()
            .map(|f| (f.name.clone(), f.clone()))
            .collect(),
        state: Mutex::new(state),
        sink,
        cancel,
        parallel,
        slots: Arc::new(Semaphore::new(parallel)),
        integration: opts.integration,
    });
    Ok((lock, ctx, resumed))
}

/// The features as nodes of the engine's [`Scheduler`] (batch discipline:
/// a feature batch starts once the one before it has landed, failed or
/// been blocked), in the plan's batch order, so its layers are the plan's
/// batches. Landed features count as done; every feature of a batch starts
/// at once (`--parallel` bounds their stories through the shared slots).
fn feature_scheduler(plan: &PlanInput, state: &MegaState) -> (Scheduler, Vec<String>) {
    let names: Vec<String> = plan.batches.iter().flatten().cloned().collect();
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut nodes: Vec<NodeSpec> = (0..names.len())
        .map(|i| NodeSpec {
            deps: Vec::new(),
            priority: 0,
            file_index: i,
            remaining_path: 1,
            // Done ones are completed below instead: the layers (batch
            // numbers) stay the plan's on a resume.
            done: false,
            files: Vec::new(),
        })
        .collect();
    for f in &plan.features {
        if let Some(&i) = index.get(f.name.as_str()) {
            nodes[i].deps = (f.dependencies.iter())
                .filter_map(|d| index.get(d.as_str()).copied())
                .collect();
        }
    }
    let mut sched = Scheduler::new(nodes, Discipline::Batch, names.len().max(1), false);
    for (i, name) in names.iter().enumerate() {
        if state
            .feature(name)
            .is_some_and(|f| f.status == FeatureStatus::Complete)
        {
            sched.complete(i);
        }
    }
    (sched, names)
}

/// Runs the feature batches the scheduler hands out until none is left or
/// the run stops: `Some(status)` says why it stopped early (failed: the
/// target's gates failed, and nothing more lands on it).
async fn drive<P: MegaPorts>(
    ctx: &Arc<Ctx<P>>,
    plan: &PlanInput,
    opts: &MegaOptions,
    confirm: Option<Confirm>,
) -> Option<RunStatus> {
    let (mut sched, names) = feature_scheduler(plan, &ctx.snapshot());
    let mut worked_batches = 0usize;
    loop {
        let batch: Vec<usize> = std::iter::from_fn(|| sched.next_ready()).collect();
        let &first = batch.first()?;
        let batch_no = sched.layer_of(first) + 1;
        let open: Vec<String> = batch.iter().map(|&i| names[i].clone()).collect();
        if let Some(status) = may_start(ctx, opts, &confirm, batch_no, &open, worked_batches).await
        {
            return Some(status);
        }
        worked_batches += 1;
        ctx.emit(Event::FeatureBatchStarted {
            batch: batch_no,
            of: plan.batches.len(),
            features: open.clone(),
        });
        let ends = run_batch(ctx, &open).await;
        if ctx.cancel.is_cancelled() || ends.values().any(|e| matches!(e, TaskEnd::Interrupted)) {
            return Some(RunStatus::Interrupted);
        }
        // Out of budget: what is ready still merges below; nothing new starts.
        let budget = ends.values().any(|e| matches!(e, TaskEnd::Budget));
        let gates = land_batch(ctx, &open, &ends, batch_no).await;
        if ctx.cancel.is_cancelled() {
            return Some(RunStatus::Interrupted);
        }
        if budget {
            return Some(RunStatus::BudgetExhausted);
        }
        // What did not land (failed, or not merged) blocks its dependents.
        for (&i, name) in batch.iter().zip(&open) {
            if ctx.landed(name) {
                sched.complete(i);
            } else {
                let blocked = sched.fail(i);
                block(ctx, blocked.iter().map(|&b| names[b].as_str()), None);
            }
        }
        if gates == Some(false) {
            // Nothing more lands on a target whose gates fail.
            sched.stop();
            let waiting = (0..names.len()).filter(|&i| sched.state(i) == NodeState::Waiting);
            block(ctx, waiting.map(|i| names[i].as_str()), Some(batch_no));
            return Some(RunStatus::Failed);
        }
    }
}

/// Whether feature batch `batch_no` may start: the budget, a pause of the
/// whole run, and (after the first batch, without `--auto-run`) the
/// confirmation. `Some(status)`: the run stops with it instead.
async fn may_start<P: MegaPorts>(
    ctx: &Ctx<P>,
    opts: &MegaOptions,
    confirm: &Option<Confirm>,
    batch_no: usize,
    open: &[String],
    worked_batches: usize,
) -> Option<RunStatus> {
    if let Some(message) = ctx.ports.budget_exhausted() {
        ctx.emit(Event::MegaNotice {
            message: format!("no feature of batch {batch_no} starts: {message}"),
        });
        return Some(RunStatus::BudgetExhausted);
    }
    if !held_while_paused(ctx, opts.steering.as_ref(), batch_no).await {
        return Some(RunStatus::Interrupted);
    }
    if worked_batches > 0 && !opts.auto_run {
        let go_on = confirm.as_ref().is_some_and(|c| c(batch_no, open));
        if !go_on {
            ctx.emit(Event::MegaPaused {
                next_batch: batch_no,
                reason: "stopped after a batch; run `cascade mega approve` again (or with --auto-run) to continue".into(),
            });
            return Some(RunStatus::Paused);
        }
    }
    None
}

/// Runs every feature of the batch at once, to "ready to merge" or its end.
/// `--parallel` bounds features x stories: their story attempts and PRD
/// agents share the run's `slots`, so a feature that finishes early leaves
/// its slots to the others instead of a fixed share standing idle.
async fn run_batch<P: MegaPorts>(ctx: &Arc<Ctx<P>>, open: &[String]) -> HashMap<String, TaskEnd> {
    let mut tasks = tokio::task::JoinSet::new();
    for name in open {
        let ctx = ctx.clone();
        let name = name.clone();
        tasks.spawn(async move {
            let end = run_feature(&ctx, &name).await;
            (name, end)
        });
    }
    let mut ends = HashMap::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((name, end)) => {
                ends.insert(name, end);
            }
            Err(e) => ctx.emit(Event::MegaNotice {
                message: format!("a feature task ended abnormally: {e}"),
            }),
        }
    }
    for name in open {
        if !ends.contains_key(name) {
            ctx.fail(
                name,
                FailureKind::Error,
                "the feature's task ended abnormally (a bug in cascade); its branch and worktree are kept".into(),
                vec![],
            );
        }
    }
    ends
}

/// Merges the batch's ready features in batch order, serially, re-runs the
/// target's gates when anything landed, and removes the landed features'
/// worktrees. Returns the gates' verdict (`None`: nothing landed, or they
/// could not run).
async fn land_batch<P: MegaPorts>(
    ctx: &Arc<Ctx<P>>,
    open: &[String],
    ends: &HashMap<String, TaskEnd>,
    batch_no: usize,
) -> Option<bool> {
    let mut merged_any = false;
    for name in open {
        if matches!(ends.get(name), Some(TaskEnd::Ready)) && merge_feature(ctx, name).await {
            merged_any = true;
        }
    }
    let verdict = if merged_any {
        run_target_gates(ctx, batch_no).await
    } else {
        None
    };
    for name in open {
        if ctx.landed(name) {
            cleanup_feature(ctx, name).await;
        }
    }
    verdict
}

/// Marks `names` blocked: by the first of their dependencies that did not
/// land, or (`gates_broken`) by the target's gates failing after that batch.
fn block<'a, P: MegaPorts>(
    ctx: &Ctx<P>,
    names: impl Iterator<Item = &'a str>,
    gates_broken: Option<usize>,
) {
    for name in names {
        let by = match gates_broken {
            Some(b) => format!("the gates failing on the target branch after batch {b}"),
            // The first dependency not merged into the target.
            None => (ctx.specs.get(name).map(|s| s.dependencies.iter()))
                .and_then(|mut deps| deps.find(|d| !ctx.landed(d)).cloned())
                .unwrap_or_default(),
        };
        ctx.update(name, |f| {
            f.status = FeatureStatus::Blocked;
            f.blocked_by = Some(by.clone());
            f.failure = None;
        });
        ctx.emit(Event::FeatureBlocked {
            feature: name.to_string(),
            blocked_by: by,
        });
    }
}

/// The run's end: its status (the one it stopped with, else completed when
/// every feature landed, else failed), saved and announced with the
/// features' counts.
fn finish<P: MegaPorts>(
    ctx: &Ctx<P>,
    stopped: Option<RunStatus>,
    started: Instant,
) -> Result<MegaSummary, MegaError> {
    let state = {
        let mut s = ctx.state.lock().unwrap_or_else(|p| p.into_inner());
        let all_done = s
            .features
            .values()
            .all(|f| f.status == FeatureStatus::Complete);
        s.status = stopped.unwrap_or(if all_done {
            RunStatus::Completed
        } else {
            RunStatus::Failed
        });
        s.save(&ctx.cascade_dir)?;
        s.clone()
    };
    ctx.emit(Event::MegaFinished {
        status: state.status,
        features: state.counts(),
        duration_ms: started.elapsed().as_millis() as u64,
    });
    Ok(MegaSummary {
        status: state.status,
        state,
    })
}

/// While scheduling is paused, feature batch `batch_no` waits (said once
/// as a notice). Returns `false` when the run was cancelled meanwhile.
async fn held_while_paused<P: MegaPorts>(
    ctx: &Ctx<P>,
    steering: Option<&crate::control::steer::Steering>,
    batch_no: usize,
) -> bool {
    let Some(steer) = steering.filter(|s| s.is_paused()) else {
        return true;
    };
    ctx.emit(Event::MegaNotice {
        message: format!(
            "scheduling is paused: feature batch {batch_no} starts once it is resumed"
        ),
    });
    tokio::select! {
        _ = steer.unpaused() => !ctx.cancel.is_cancelled(),
        _ = ctx.cancel.cancelled() => false,
    }
}

/// The progress.txt line of a feature step (Plan Cascade's format, with
/// `feature <name>` in place of a story id).
fn progress_line(event: &Event) -> Option<String> {
    let first = |t: &str| t.lines().next().unwrap_or("").trim().to_string();
    Some(match event {
        Event::FeatureStarted {
            feature, branch, ..
        } => format!("feature {feature}: [START] on {branch}"),
        Event::PrdReady {
            feature, stories, ..
        } => format!("feature {feature}: [PRD] {stories} stories"),
        Event::PrdInvalid {
            feature,
            attempt,
            problems,
        } => format!(
            "feature {feature}: [PRD INVALID] attempt {attempt}: {}",
            problems.first().map(|p| first(p)).unwrap_or_default()
        ),
        Event::FeatureMerged {
            feature,
            target_branch,
            ..
        } => format!("feature {feature}: [COMPLETE] merged into {target_branch}"),
        Event::FeatureFailed {
            feature,
            kind,
            error,
            ..
        } => {
            format!(
                "feature {feature}: [FAILED] {}: {}",
                kind.as_str(),
                first(error)
            )
        }
        Event::FeatureBlocked {
            feature,
            blocked_by,
        } => format!("feature {feature}: [BLOCKED] by {blocked_by}"),
        _ => return None,
    })
}

/// Brings a resumed state in line with the plan: new features pending,
/// failed and blocked features retried, batches as the plan says now.
fn reconcile(state: &mut MegaState, plan: &PlanInput) {
    state.batches = plan.batches.clone();
    state.goal = plan.goal.clone();
    let mut features = std::collections::BTreeMap::new();
    for (i, batch) in plan.batches.iter().enumerate() {
        for name in batch {
            let mut f = state.features.remove(name).unwrap_or_else(|| {
                super::state::FeatureState::pending(i + 1, super::state::feature_branch(name))
            });
            f.batch = i + 1;
            if matches!(f.status, FeatureStatus::Failed | FeatureStatus::Blocked) {
                // Retried on resume; a failed feature keeps its branch and
                // worktree, so it continues where it stopped.
                f.status = if f.worktree.is_some() {
                    FeatureStatus::Running
                } else {
                    FeatureStatus::Pending
                };
                f.failure = None;
                f.blocked_by = None;
                f.finished_at = None;
            }
            features.insert(name.clone(), f);
        }
    }
    state.features = features;
}

/// The branch checked out in the main worktree.
fn current_branch(paths: &RepoPaths) -> Result<String, MegaError> {
    let repo = cascade_git::RepoPaths::discover(&paths.main_root)
        .and_then(|p| p.open())
        .map_err(|e| MegaError::Repo(e.to_string()))?;
    let head = repo.head().map_err(|e| {
        MegaError::Repo(format!(
            "cannot read HEAD of '{}': {} (commit something first, or set `target_branch` in the mega-plan)",
            paths.main_root.display(),
            e.message()
        ))
    })?;
    if !head.is_branch() {
        return Err(MegaError::Repo(format!(
            "'{}' has a detached HEAD; check out a branch or set `target_branch` in the mega-plan",
            paths.main_root.display()
        )));
    }
    head.shorthand()
        .map(str::to_string)
        .ok_or_else(|| MegaError::Git("the current branch name is not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_names() {
        assert!(valid_feature_name("auth"));
        assert!(valid_feature_name("api-v2"));
        assert!(valid_feature_name("2fa"));
        assert!(!valid_feature_name("Auth"));
        assert!(!valid_feature_name("-x"));
        assert!(!valid_feature_name("a/b"));
        assert!(!valid_feature_name(""));
        assert!(!valid_feature_name("a..b"));
    }

    fn spec(name: &str, deps: &[&str]) -> FeatureSpec {
        FeatureSpec {
            id: name.into(),
            name: name.into(),
            title: String::new(),
            description: String::new(),
            priority: "medium".into(),
            dependencies: deps.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn the_feature_scheduler_hands_out_the_plans_batches_and_keeps_their_numbers() {
        let plan = PlanInput {
            path: PathBuf::from("/p/mega-plan.json"),
            goal: "g".into(),
            target_branch: None,
            features: vec![
                spec("a", &[]),
                spec("b", &[]),
                spec("c", &["a"]),
                spec("d", &["c", "b"]),
            ],
            batches: vec![
                vec!["a".into(), "b".into()],
                vec!["c".into()],
                vec!["d".into()],
            ],
            execution_mode: None,
        };
        let mut state = MegaState::new(
            plan.path.clone(),
            "g".into(),
            "main".into(),
            plan.batches.clone(),
        );
        let (mut s, names) = feature_scheduler(&plan, &state);
        let batch: Vec<&str> = std::iter::from_fn(|| s.next_ready())
            .map(|i| names[i].as_str())
            .collect();
        assert_eq!(batch, ["a", "b"]);
        // c waits for the whole first batch, d for c and b.
        s.complete(0);
        assert_eq!(s.next_ready(), None);
        assert_eq!(s.fail(1), vec![3]);
        assert_eq!(s.next_ready(), Some(2));
        assert_eq!(s.layer_of(2), 1);

        // A resume with a and b landed: c is still batch 2 of 3.
        for n in ["a", "b"] {
            state.feature_mut(n).unwrap().status = FeatureStatus::Complete;
        }
        let (mut s, names) = feature_scheduler(&plan, &state);
        let c = s.next_ready().unwrap();
        assert_eq!((names[c].as_str(), s.layer_of(c) + 1), ("c", 2));
        assert_eq!(s.next_ready(), None);
        s.complete(c);
        assert_eq!(s.next_ready().map(|i| s.layer_of(i) + 1), Some(3));
    }
}
