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
//! Every transition is saved to `.cascade/mega-state.json`, so a killed run
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
use super::events::{MegaEvent, MegaStep};
use super::feature::run_feature;
use super::findings;
use super::land::{cleanup_feature, merge_feature, run_target_gates};
use super::ports::MegaPorts;
use super::state::{now, FailureKind, FeatureFailure, FeatureStatus, MegaRunStatus, MegaState};
use crate::lock::RunLock;
use crate::progress::ProgressLog;

/// Receives every event of the mega run (from any thread, in order per feature).
pub type MegaSink = Arc<dyn Fn(&MegaEvent) + Send + Sync>;
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
    pub status: MegaRunStatus,
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
    pub(super) sink: MegaSink,
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
    pub(super) fn emit(&self, step: MegaStep) {
        if let Some(line) = progress_line(&step) {
            self.progress.append(&line);
        }
        (self.sink)(&MegaEvent::Mega(step));
    }

    /// Applies `f` to the feature's state and saves.
    pub(super) fn update(&self, name: &str, f: impl FnOnce(&mut super::state::FeatureState)) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(fs) = s.feature_mut(name) {
            f(fs);
        }
        if let Err(e) = s.save(&self.cascade_dir) {
            drop(s);
            self.emit(MegaStep::MegaNotice {
                message: format!("could not save the mega state: {e}"),
            });
        }
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
        self.emit(MegaStep::FeatureFailed {
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
        Some(s) if s.status == MegaRunStatus::Closed => (fresh(), false),
        Some(s) if s.plan != plan.path => {
            if s.status == MegaRunStatus::Completed {
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
pub async fn run_mega<P: MegaPorts>(
    ports: Arc<P>,
    plan: PlanInput,
    opts: MegaOptions,
    sink: MegaSink,
    confirm: Option<Confirm>,
    cancel: CancelToken,
) -> Result<MegaSummary, MegaError> {
    let started = Instant::now();
    let Checked { paths, target } = check(&plan, &opts.start_dir, opts.allow_dirty)?;
    let cascade_dir = paths.cascade_dir();
    // The run starts: from here on cascade writes.
    let (lock, note) = RunLock::acquire(&cascade_dir.join(RUN_LOCK), "mega approve")?;
    if let Some(message) = note {
        sink(&MegaStep::MegaNotice { message }.into());
    }
    // All of cascade's own files at once, before the feature engines start:
    // they then find nothing to add (concurrent writers of info/exclude race).
    let own = own_patterns(&plan, &opts.start_dir);
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
        sink(&MegaStep::MegaNotice { message }.into());
    }
    // Half-done writes of the state file by a killed run: stale under the
    // lock (no other writer of it can be running).
    for tmp in cascade_fs::leftover_write_temps(&MegaState::path(&cascade_dir)) {
        let _ = std::fs::remove_file(tmp);
    }
    // Read again under the lock (a run that ended meanwhile changed it).
    let (mut state, resumed) = choose_state(MegaState::load(&cascade_dir)?, &plan, &target)?;
    if resumed {
        reconcile(&mut state, &plan);
    }
    state.status = MegaRunStatus::Running;
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
        cascade_dir: cascade_dir.clone(),
        paths,
        target: target.clone(),
        goal: plan.goal.clone(),
        specs: plan
            .features
            .iter()
            .map(|f| (f.name.clone(), f.clone()))
            .collect(),
        state: Mutex::new(state),
        sink,
        cancel: cancel.clone(),
        parallel,
        slots: Arc::new(Semaphore::new(parallel)),
        integration: opts.integration,
    });
    ctx.emit(MegaStep::MegaStarted {
        plan: plan.path.clone(),
        target_branch: target.clone(),
        features: plan.features.len(),
        batches: plan.batches.len(),
        parallel,
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
                Some(feature) => MegaEvent::Feature(super::events::FeatureEvent { feature, event }),
                None => MegaEvent::Run(event),
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

    let mut status = None;
    let mut worked_batches = 0usize;
    let mut gates_broken: Option<usize> = None;
    for (bi, batch) in plan.batches.iter().enumerate() {
        let batch_no = bi + 1;
        let open: Vec<String> = {
            let s = ctx.snapshot();
            batch
                .iter()
                .filter(|n| s.feature(n).is_some_and(|f| !f.status.is_final()))
                .cloned()
                .collect()
        };
        if open.is_empty() {
            continue;
        }
        if let Some(message) = ctx.ports.budget_exhausted() {
            ctx.emit(MegaStep::MegaNotice {
                message: format!("no feature of batch {batch_no} starts: {message}"),
            });
            status = Some(MegaRunStatus::BudgetExhausted);
            break;
        }
        if !held_while_paused(&ctx, opts.steering.as_ref(), batch_no).await {
            status = Some(MegaRunStatus::Interrupted);
            break;
        }
        if worked_batches > 0 && !opts.auto_run {
            let go_on = confirm.as_ref().is_some_and(|c| c(batch_no, &open));
            if !go_on {
                ctx.emit(MegaStep::MegaPaused {
                    next_batch: batch_no,
                    reason: "stopped after a batch; run `cascade mega approve` again (or with --auto-run) to continue".into(),
                });
                status = Some(MegaRunStatus::Paused);
                break;
            }
        }
        worked_batches += 1;
        ctx.emit(MegaStep::FeatureBatchStarted {
            batch: batch_no,
            of: plan.batches.len(),
            features: open.clone(),
        });

        // Block what cannot run; start the rest in parallel.
        let mut runnable = Vec::new();
        for name in &open {
            if let Some(by) = blocker(&ctx, name, gates_broken) {
                ctx.update(name, |f| {
                    f.status = FeatureStatus::Blocked;
                    f.blocked_by = Some(by.clone());
                    f.failure = None;
                });
                ctx.emit(MegaStep::FeatureBlocked {
                    feature: name.clone(),
                    blocked_by: by,
                });
            } else {
                runnable.push(name.clone());
            }
        }
        // `--parallel` bounds features x stories: every feature of the batch
        // starts (a worktree each); their story attempts and PRD agents share
        // the run's `slots`, so a feature that finishes early leaves its
        // slots to the others instead of a fixed share standing idle.
        let mut tasks = tokio::task::JoinSet::new();
        for name in &runnable {
            let ctx = ctx.clone();
            let name = name.clone();
            tasks.spawn(async move {
                let end = run_feature(&ctx, &name).await;
                (name, end)
            });
        }
        let mut ends: HashMap<String, TaskEnd> = HashMap::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((name, end)) => {
                    ends.insert(name, end);
                }
                Err(e) => {
                    ctx.emit(MegaStep::MegaNotice {
                        message: format!("a feature task ended abnormally: {e}"),
                    });
                }
            }
        }
        for name in &runnable {
            if !ends.contains_key(name) {
                ctx.fail(
                    name,
                    FailureKind::Error,
                    "the feature's task ended abnormally (a bug in cascade); its branch and worktree are kept".into(),
                    vec![],
                );
            }
        }
        if cancel.is_cancelled() || ends.values().any(|e| matches!(e, TaskEnd::Interrupted)) {
            status = Some(MegaRunStatus::Interrupted);
            break;
        }
        // Out of budget: what is ready still merges below; nothing new starts.
        if ends.values().any(|e| matches!(e, TaskEnd::Budget)) {
            status = Some(MegaRunStatus::BudgetExhausted);
        }

        // Merge in batch order, serially.
        let mut merged_any = false;
        for name in &runnable {
            if matches!(ends.get(name), Some(TaskEnd::Ready)) && merge_feature(&ctx, name).await {
                merged_any = true;
            }
        }
        if merged_any {
            let verdict = run_target_gates(&ctx, batch_no).await;
            if verdict == Some(false) {
                gates_broken = Some(batch_no);
            }
        }
        for name in &runnable {
            let done = ctx
                .snapshot()
                .feature(name)
                .is_some_and(|f| f.status == FeatureStatus::Complete);
            if done {
                cleanup_feature(&ctx, name).await;
            }
        }
        if cancel.is_cancelled() {
            status = Some(MegaRunStatus::Interrupted);
            break;
        }
        if status.is_some() {
            break;
        }
    }

    let final_status = status.unwrap_or_else(|| {
        let s = ctx.snapshot();
        let all_done = s
            .features
            .values()
            .all(|f| f.status == FeatureStatus::Complete);
        if all_done && gates_broken.is_none() {
            MegaRunStatus::Completed
        } else {
            MegaRunStatus::Failed
        }
    });
    let state = {
        let mut s = ctx.state.lock().unwrap_or_else(|p| p.into_inner());
        s.status = final_status;
        s.save(&ctx.cascade_dir)?;
        s.clone()
    };
    ctx.emit(MegaStep::MegaFinished {
        status: final_status,
        features: state.counts(),
        duration_ms: started.elapsed().as_millis() as u64,
    });
    drop(lock);
    Ok(MegaSummary {
        status: final_status,
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
    ctx.emit(MegaStep::MegaNotice {
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
fn progress_line(step: &MegaStep) -> Option<String> {
    let first = |t: &str| t.lines().next().unwrap_or("").trim().to_string();
    Some(match step {
        MegaStep::FeatureStarted {
            feature, branch, ..
        } => format!("feature {feature}: [START] on {branch}"),
        MegaStep::PrdReady {
            feature, stories, ..
        } => format!("feature {feature}: [PRD] {stories} stories"),
        MegaStep::PrdInvalid {
            feature,
            attempt,
            problems,
        } => format!(
            "feature {feature}: [PRD INVALID] attempt {attempt}: {}",
            problems.first().map(|p| first(p)).unwrap_or_default()
        ),
        MegaStep::FeatureMerged {
            feature,
            target_branch,
            ..
        } => format!("feature {feature}: [COMPLETE] merged into {target_branch}"),
        MegaStep::FeatureFailed {
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
        MegaStep::FeatureBlocked {
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

/// Why `name` cannot run: the first dependency that did not land.
fn blocker<P: MegaPorts>(ctx: &Ctx<P>, name: &str, gates_broken: Option<usize>) -> Option<String> {
    let s = ctx.snapshot();
    let spec = ctx.specs.get(name)?;
    for dep in &spec.dependencies {
        if s.feature(dep)
            .map_or(true, |f| f.status != FeatureStatus::Complete)
        {
            return Some(dep.clone());
        }
    }
    gates_broken.map(|b| format!("the gates failing on the target branch after batch {b}"))
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
}
