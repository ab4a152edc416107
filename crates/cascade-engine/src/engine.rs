//! The orchestrator: [`Engine::run`] takes a PRD from "approved" to "merged".
//!
//! Preparation (all before anything runs, each failure an [`EngineError`]):
//! cascade's own files are put in `info/exclude`, the lock is taken, the PRD
//! is loaded and validated, the agents and gates are configured, every
//! story's agent is resolved (so an unknown or missing agent stops the run
//! before it starts), and a dirty tree is refused. Then the state is set up
//! (fresh, or resumed: stories already merged into the target branch are
//! complete, whatever the run state says) and the [`Scheduler`] hands out
//! stories to tasks (the `story` module) under the parallelism limit. The
//! main loop is the only place that talks to the scheduler; tasks report back
//! through their join handles. At a batch boundary the run pauses, asks, or
//! goes on, according to the mode and [`Pause`].

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cascade_agents::{AgentsConfig, Detector, Overrides, Phase, Resolver};
use cascade_gates::GateCache;
use cascade_git::RepoPaths;
use cascade_plan::{Prd, Status, ValidPlan};
use cascade_process::{AbortOnDrop, CancelToken};
use tokio::task::JoinSet;

use crate::config::{EngineConfig, Mode, Pause, ProjectConfig, RunOptions};
use crate::error::EngineError;
use crate::events::{Event, EventSink, FallbackNote, RunStatus, StoryCounts, StorySummary};
use crate::lock::RunLock;
use crate::progress::ProgressLog;
use crate::scheduler::{NodeState, Scheduler};
use crate::state::{RunState, StoryState, StoryStatus};
use crate::story::{self, StoryEnd};

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub run_id: String,
    pub status: RunStatus,
    pub counts: StoryCounts,
    pub stories: Vec<StorySummary>,
    pub duration_ms: u64,
}

/// One story of a dry run: what would run it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlannedStory {
    pub story: String,
    pub title: String,
    pub agent: String,
    pub reason: String,
    pub fallbacks: Vec<FallbackNote>,
}

/// The schedule a run would follow, with agents (`--dry-run`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DryRun {
    pub target_branch: String,
    pub schedule: String,
    pub parallel: usize,
    /// Stories complete already.
    pub complete: Vec<String>,
    pub batches: Vec<Vec<PlannedStory>>,
    /// What the files accept but probably do not mean (the notices a run
    /// would start with).
    pub notices: Vec<String>,
}

/// Runs PRDs.
#[derive(Debug, Clone)]
pub struct Engine {
    config: EngineConfig,
}

/// Everything a story task needs, shared by all of them.
pub(crate) struct Ctx {
    pub paths: RepoPaths,
    /// Where prompts and logs of agents go.
    pub artifacts_dir: PathBuf,
    pub project_root: PathBuf,
    pub target_branch: String,
    pub feature: Option<String>,
    pub agents: AgentsConfig,
    pub detector: Detector,
    /// The gates and verification rules of each base commit.
    pub judging: crate::judging::Judging,
    pub gate_cache: GateCache,
    pub project: ProjectConfig,
    pub options: RunOptions,
    pub prd_path: PathBuf,
    pub prd: Mutex<Prd>,
    /// The run state, committed at every transition (see the `store` module).
    pub state_path: PathBuf,
    pub state: Mutex<crate::store::Store>,
    /// Group commit of `prd` (see the `persist` module).
    pub prd_writer: crate::persist::GroupWriter,
    /// The serial merge queue: one merge (or group) into the target branch at a time.
    pub merge_queue: crate::steps::merge::MergeQueue,
    /// Idle story worktrees, reused from story to story.
    pub pool: crate::pool::WorktreePool,
    /// Skills and design context for every prompt (the retry part is added per attempt).
    pub prompt: cascade_agents::prompt::PromptContext,
    /// What the verify and review steps of every attempt use.
    pub checks: crate::checks::Checks,
    pub sink: EventSink,
    /// The work's cancellation: fired by the caller's token (Ctrl-C). Agents
    /// run under `control.agents_cancel`, which a hard budget fires too.
    pub cancel: CancelToken,
    /// Budgets, rate limits, gate jobs, the memory guard, ports, caches.
    pub control: crate::control::Controls,
    /// Set when a write failed for want of disk space: the run stops and
    /// ends with [`EngineError::DiskFull`] (the first such failure).
    pub halt: Mutex<Option<crate::error::DiskFull>>,
}

impl Ctx {
    pub fn emit(&self, event: Event) {
        self.emit_ref(&event);
    }

    /// [`Ctx::emit`] of an event the caller keeps.
    pub fn emit_ref(&self, event: &Event) {
        (self.sink)(event);
    }

    pub fn overrides(&self) -> Overrides {
        overrides(&self.options)
    }

    /// Stops the run when `error`, met writing `path`, says that the disk
    /// is full: retrying would fail the same way and charge every story an
    /// attempt for it. The work is cancelled as on Ctrl-C (agents and gates
    /// stopped, stories back to pending) and the run ends with
    /// [`EngineError::DiskFull`] naming the disk. Returns whether it did.
    pub fn halt_if_disk_full(&self, path: &Path, error: &str) -> bool {
        if !cascade_fs::mentions_disk_full(error) {
            return false;
        }
        let mut halt = self.halt.lock().unwrap_or_else(|e| e.into_inner());
        if halt.is_none() {
            let candidates = [path, &self.state_path, &self.paths.common_dir];
            let disk = cascade_fs::Disk::fullest(candidates).map(|d| d.to_string());
            let full = crate::error::DiskFull {
                path: path.to_path_buf(),
                disk,
                error: error.to_string(),
            };
            let message = format!("stopping the run: {full}");
            *halt = Some(full);
            drop(halt);
            self.cancel.cancel();
            self.control.agents_cancel.cancel();
            self.emit(Event::Notice { message });
        }
        true
    }

    /// Whether the run was stopped by [`Ctx::halt_if_disk_full`].
    pub fn halted(&self) -> bool {
        self.halt.lock().map(|h| h.is_some()).unwrap_or(true)
    }

    /// Applies `f` to the story's record and returns once the change is on
    /// disk (one transaction of the run database: see the `store` module),
    /// with every amendment made
    /// before it. A write failure is reported as a notice and never stops
    /// the work.
    pub fn update_story(&self, id: &str, f: impl FnOnce(&mut StoryState)) {
        self.commit_state(|st| st.change_story(id, f));
    }

    /// Like [`Ctx::update_story`] for the run's own fields (not its stories).
    pub fn update_state(&self, f: impl FnOnce(&mut RunState)) {
        self.commit_state(|st| st.change_run(f));
    }

    fn commit_state(&self, f: impl FnOnce(&mut crate::store::Store)) {
        let result = match self.state.lock() {
            Ok(mut st) => {
                f(&mut st);
                st.commit()
            }
            Err(_) => return,
        };
        if let Err(e) = result {
            self.state_write_failed(&e);
        }
    }

    /// A state write failed: a notice, and the end of the run when the disk
    /// is full (the file keeps its last complete content).
    fn state_write_failed(&self, e: &crate::state::StateError) {
        let text = e.to_string();
        if !self.halt_if_disk_full(&self.state_path, &text) {
            self.emit(Event::Notice {
                message: format!("could not save the run state: {text}"),
            });
        }
    }

    /// A prd.json write failed: as [`Ctx::state_write_failed`].
    fn prd_write_failed(&self, e: &cascade_plan::PlanError) {
        let text = e.to_string();
        if !self.halt_if_disk_full(&self.prd_path, &text) {
            self.emit(Event::Notice {
                message: format!("could not update {}: {text}", self.prd_path.display()),
            });
        }
    }

    /// Commits what is left and stamps the run finished (the end of the run).
    fn finish_state(&self) {
        let result = match self.state.lock() {
            Ok(mut st) => st.finish(),
            Err(_) => return,
        };
        if let Err(e) = result {
            self.state_write_failed(&e);
        }
    }

    /// Writes what changes wait for a periodic flush (prd.json).
    fn flush_due(&self) {
        if self.prd_writer.due() {
            self.flush_prd();
        }
    }

    /// Changes a story's record in memory only; it reaches the disk with the
    /// next transition (for details such as log paths and gate results that
    /// always precede one).
    pub fn amend_story(&self, id: &str, f: impl FnOnce(&mut StoryState)) {
        if let Ok(mut st) = self.state.lock() {
            st.change_story(id, f);
        }
    }

    /// Changes the run's own fields in memory only (reaches the disk with
    /// the next transition, like [`Ctx::amend_story`]).
    pub fn amend_state(&self, f: impl FnOnce(&mut RunState)) {
        if let Ok(mut st) = self.state.lock() {
            st.change_run(f);
        }
    }

    /// Writes every prd.json change not written yet (the end of the run).
    pub fn flush_prd(&self) {
        if let Err(e) = self.prd_writer.flush(|| self.write_prd()) {
            self.prd_write_failed(&e);
        }
    }

    /// Saves prd.json with the statuses of the in-memory copy.
    fn write_prd(&self) -> Result<(), cascade_plan::PlanError> {
        let copy = match self.prd.lock() {
            Ok(prd) => prd.clone(),
            Err(_) => return Ok(()),
        };
        // The user may have edited prd.json during the run (a story
        // added, the goal reworded): carry cascade's statuses into what
        // is on disk rather than overwrite it with the copy read at the
        // start. A file that does not parse right now (being edited) is
        // left alone; the run state keeps the statuses meanwhile.
        match cascade_plan::load_prd(&self.prd_path) {
            Ok(mut on_disk) => {
                for s in &copy.stories {
                    if let Some(d) = on_disk.story_mut(&s.id) {
                        if d.status != s.status {
                            d.set_status(s.status);
                        }
                    }
                }
                on_disk.save(&self.prd_path)
            }
            Err(cascade_plan::PlanError::NotFound { .. }) => copy.save(&self.prd_path),
            Err(e) => Err(e),
        }
    }

    /// Sets a story's status in prd.json and saves it (atomic; fields kept;
    /// nothing is written when the status does not change; the lock is not
    /// held while writing). The caller does not wait when a write is in
    /// progress (that write's thread writes again before it stops; the run
    /// ends with [`Ctx::flush_prd`]): prd.json is not what resume trusts for
    /// merged stories (git is), and it is only ever written behind the facts.
    pub fn set_prd_status(&self, id: &str, status: Status) {
        let ticket = match self.prd.lock() {
            Ok(mut prd) => match prd.story_mut(id) {
                Some(s) if s.status != status => {
                    s.set_status(status);
                    self.prd_writer.changed()
                }
                _ => return,
            },
            Err(_) => return,
        };
        let result = self.prd_writer.persist(ticket, false, || self.write_prd());
        if let Err(e) = result {
            self.prd_write_failed(&e);
        }
    }
}

fn overrides(o: &RunOptions) -> Overrides {
    Overrides {
        agent: o.agent.clone(),
        impl_agent: o.impl_agent.clone(),
        retry_agent: o.retry_agent.clone(),
        prd_agent: None,
        review_agent: o.review_agent.clone(),
        no_fallback: o.no_fallback,
    }
}

/// A run that passed [`Engine::check`]: what [`Engine::start`] takes.
pub struct CheckedRun {
    p: Prepared,
    inputs: Inputs,
    previous: Option<RunState>,
    state_path: PathBuf,
    /// A killed run's merge to finish before the cleanliness check.
    half_merged: bool,
}

impl CheckedRun {
    /// The PRD the run will work on, as loaded.
    pub fn prd(&self) -> &Prd {
        &self.p.prd
    }

    /// [`Prepared::pending_kinds`]: the kinds the check resolved (not
    /// inferred again).
    pub fn pending_kinds(&self) -> Vec<&cascade_plan::Story> {
        self.p.pending_kinds()
    }
}

/// What preparation produced: the plan loaded and checked, the agents
/// configured, the target branch ([`Engine::prepare`]). A dry run and a run
/// take it, so that a caller that reads the plan too (the agents check
/// before a run) reads the one copy.
pub struct Prepared {
    pub(crate) paths: RepoPaths,
    pub(crate) cascade_dir: PathBuf,
    pub(crate) prd_path: PathBuf,
    pub(crate) prd: Prd,
    pub(crate) plan: ValidPlan,
    pub(crate) agents: AgentsConfig,
    pub(crate) detector: Detector,
    pub(crate) target_branch: String,
    pub(crate) notices: Vec<String>,
    /// [`Prepared::pending_kinds`], found on first use.
    pub(crate) kinds: std::sync::OnceLock<Vec<usize>>,
}

impl Prepared {
    /// The PRD as loaded.
    pub fn prd(&self) -> &Prd {
        &self.prd
    }

    /// The first pending story of each kind, in plan order
    /// ([`cascade_agents::resolve::story_kinds`]): resolving these resolves
    /// every pending story. Inferring every story's type is most of the
    /// cost of a check at 100,000 stories, so it is done once, here, for
    /// the engine's check and the caller's agent check alike.
    pub fn pending_kinds(&self) -> Vec<&cascade_plan::Story> {
        let stories = &self.prd.stories;
        let kinds = self.kinds.get_or_init(|| {
            cascade_agents::resolve::story_kind_positions(stories, |s| !s.is_complete())
        });
        kinds.iter().filter_map(|&i| stories.get(i)).collect()
    }
}

/// What every attempt of a run reads: the judging files (gates and
/// verification rules, per base commit), the remote gate cache, the project
/// settings, review and acceptance checks, the prompt context.
pub(crate) struct Inputs {
    pub judging: crate::judging::Judging,
    pub remote_cache: Option<cascade_gates::RemoteCache>,
    pub project: ProjectConfig,
    pub checks: crate::checks::Checks,
    pub prompt: cascade_agents::prompt::PromptContext,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Engine {
        Engine { config }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The run database of this engine's runs.
    pub fn state_path(&self) -> Result<PathBuf, EngineError> {
        if let Some(p) = &self.config.state_path {
            return Ok(p.clone());
        }
        let paths = RepoPaths::discover(&self.config.project_root)?;
        Ok(crate::store::db_path(&paths.cascade_dir()))
    }

    /// cascade's own files of this run, as `info/exclude` patterns: the
    /// usual names at the root, and the exact files this run uses wherever
    /// the user keeps them (`--prd plans/next/prd.json`).
    pub(crate) fn excluded_patterns(&self) -> Vec<String> {
        let root = &self.config.project_root;
        let own_here = crate::gitops::exclude_patterns(
            root,
            &[
                self.config.prd_file(),
                self.progress_file(),
                root.join("findings.md"),
            ],
        );
        self.config
            .excluded
            .iter()
            .cloned()
            .chain(own_here)
            .collect()
    }

    fn progress_file(&self) -> PathBuf {
        self.config
            .progress_path
            .clone()
            .unwrap_or_else(|| self.config.project_root.join("progress.txt"))
    }

    /// Loads and checks everything a run (or a dry run) needs. Writes
    /// nothing: a refused command leaves no trace (the detector only reads
    /// its cache until [`Engine::run`] starts).
    pub fn prepare(&self) -> Result<Prepared, EngineError> {
        let paths = RepoPaths::discover(&self.config.project_root)?;
        let prd_path = self.config.prd_file();
        let cascade_dir = paths.cascade_dir();
        let prd = cascade_plan::load_prd(&prd_path)?;
        let plan = cascade_plan::validate_prd(&prd).map_err(|source| EngineError::Invalid {
            path: prd_path.clone(),
            source,
        })?;
        let loaded = AgentsConfig::load(
            self.config.agents_path.as_deref(),
            &self.config.project_root,
        )?;
        // What the files accept but probably do not mean, shown when the
        // run starts: unknown priorities, unknown agents.json fields.
        let notices = prd
            .warnings
            .iter()
            .map(ToString::to_string)
            .chain(
                loaded
                    .warnings
                    .iter()
                    .map(|w| format!("{}: {w}", loaded.source)),
            )
            .collect();
        let agents = loaded.config;
        let detector = Detector::from_env().cache_dir(&cascade_dir).read_only();
        let target_branch = match &self.config.target_branch {
            Some(b) => b.clone(),
            None => crate::gitops::current_branch(&self.config.project_root)?.ok_or_else(|| {
                let dir = self.config.project_root.clone();
                if crate::gitops::head_unborn(&dir) {
                    EngineError::NoCommits { dir }
                } else {
                    EngineError::DetachedHead { dir }
                }
            })?,
        };
        Ok(Prepared {
            paths,
            cascade_dir,
            prd_path,
            prd,
            plan,
            agents,
            detector,
            target_branch,
            notices,
            kinds: std::sync::OnceLock::new(),
        })
    }

    /// Refuses the run when the user has uncommitted changes (unless
    /// `--allow-dirty`). cascade's own files are not theirs: the PRD,
    /// progress.txt, findings.md, the root files of [`OWN_FILES`], and the
    /// temp files a killed write of the PRD left.
    ///
    /// [`OWN_FILES`]: crate::config::OWN_FILES
    fn refuse_user_changes(
        &self,
        options: &RunOptions,
        prd_path: &Path,
    ) -> Result<(), EngineError> {
        if options.allow_dirty {
            return Ok(());
        }
        let mut own = vec![
            prd_path.to_path_buf(),
            self.progress_file(),
            self.config.project_root.join("findings.md"),
        ];
        own.extend(cascade_fs::leftover_write_temps(prd_path));
        let files = crate::gitops::user_changes(
            &self.config.project_root,
            &self.config.excluded,
            &own,
            10,
        )?;
        if files.is_empty() {
            Ok(())
        } else {
            Err(EngineError::Dirty {
                dir: self.config.project_root.clone(),
                files,
            })
        }
    }

    /// Loads what every attempt reads (see [`Inputs`]).
    pub(crate) fn inputs(&self, p: &Prepared, options: &RunOptions) -> Result<Inputs, EngineError> {
        let judging = crate::judging::Judging::new(
            &p.paths,
            &self.config.project_root,
            p.prd.quality_gates.as_ref(),
        )?;
        // What judges the first stories (the target's tip) must be usable
        // before anything runs: a bad file stops here (exit 2).
        let Some(tip) = cascade_git::merge::branch_tip(&p.paths, &p.target_branch)? else {
            return Err(EngineError::NoCommits {
                dir: self.config.project_root.clone(),
            });
        };
        let first = judging.at(&tip.to_string())?;
        crate::confine::check_available(options.sandbox, &first.sandbox)?;
        let gates = &first.gates;
        // The remote gate cache: a bad configuration stops here (exit 2); a
        // store that is down later only costs warnings.
        let remote_cache =
            cascade_gates::RemoteSettings::resolve(&options.remote_cache, gates.remote.as_ref())
                .map_err(cascade_gates::GateConfigError::from)?
                .map(cascade_gates::RemoteCache::connect)
                .transpose()
                .map_err(cascade_gates::GateConfigError::from)?;
        let project = ProjectConfig::load(&p.cascade_dir)?;
        let checks = crate::checks::Checks::load(&p.prd, options)?;
        let prompt = cascade_agents::prompt::PromptContext::load(
            &self.config.project_root,
            &p.cascade_dir,
            &design_dir(&p.prd_path, &self.config.project_root),
        )?;
        Ok(Inputs {
            judging,
            remote_cache,
            project,
            checks,
            prompt,
        })
    }

    /// Loads every file besides the plan and agents.json that can refuse a
    /// run (gates, verify.json, config.json, the remote cache settings, the
    /// acceptance checks, the prompt context) and drops what it read. The
    /// one check `approve` (through [`Engine::check`]), its dry run and
    /// `cascade validate` share, so none of them accepts what another refuses.
    pub fn check_inputs(&self, p: &Prepared, options: &RunOptions) -> Result<(), EngineError> {
        match self.inputs(p, options) {
            // A dry run may look at a branch that does not exist yet (a mega
            // feature's, before its run): what judges it is checked when it
            // starts; the files that do not depend on the tip are checked here.
            Err(EngineError::NoCommits { .. }) => {
                ProjectConfig::load(&p.cascade_dir)?;
                crate::checks::Checks::load(&p.prd, options)?;
                cascade_agents::prompt::PromptContext::load(
                    &self.config.project_root,
                    &p.cascade_dir,
                    &design_dir(&p.prd_path, &self.config.project_root),
                )?;
                Ok(())
            }
            other => other.map(drop),
        }
    }

    /// The schedule with agents and fallbacks; runs nothing, writes nothing.
    pub fn dry_run(&self, options: &RunOptions) -> Result<DryRun, EngineError> {
        self.dry_run_prepared(self.prepare()?, options)
    }

    /// [`Engine::dry_run`] of what [`Engine::prepare`] loaded.
    pub fn dry_run_prepared(
        &self,
        p: Prepared,
        options: &RunOptions,
    ) -> Result<DryRun, EngineError> {
        let resolver = Resolver::new(&p.agents, &p.detector, overrides(options));
        resolver
            .check_overrides()
            .map_err(EngineError::UnknownAgent)?;
        crate::race::check(&p.prd, &p.prd_path, &p.agents, &options.race)?;
        // A file the real run would refuse refuses the dry run too (exit 2).
        self.check_inputs(&p, options)?;
        let mut batches = Vec::new();
        // Positions in the plan are positions in prd.json: no lookup by id.
        for batch in p.plan.batch_positions() {
            let mut planned = Vec::with_capacity(batch.len());
            for &pos in batch {
                let Some(story) = p.prd.stories.get(pos as usize) else {
                    continue;
                };
                let a = resolver
                    .resolve(story, Phase::Implementation)
                    .map_err(|source| EngineError::NoAgent {
                        story: story.id.clone(),
                        source,
                    })?;
                planned.push(PlannedStory {
                    story: story.id.clone(),
                    title: story.title.clone(),
                    agent: a.agent,
                    reason: a.reason,
                    fallbacks: a
                        .fallbacks
                        .into_iter()
                        .map(|f| FallbackNote {
                            from: f.from,
                            to: f.to,
                            why: f.why,
                        })
                        .collect(),
                });
            }
            batches.push(planned);
        }
        Ok(DryRun {
            target_branch: p.target_branch,
            schedule: discipline_name(options),
            parallel: options.parallel,
            complete: p
                .prd
                .stories
                .iter()
                .filter(|s| s.is_complete())
                .map(|s| s.id.clone())
                .collect(),
            batches,
            notices: p.notices,
        })
    }

    /// Runs the PRD: [`Engine::check`], then [`Engine::start`]. `sink` gets
    /// every event (also written to progress.txt). Returns how the run
    /// ended; `Err` only when it could not start (or the engine itself broke).
    pub async fn run(
        &self,
        options: RunOptions,
        sink: EventSink,
        cancel: &CancelToken,
    ) -> Result<RunSummary, EngineError> {
        let checked = self.check(&options)?;
        self.start(checked, options, sink, cancel).await
    }

    /// Everything that can refuse a run with `options`, checked before
    /// anything is written (a refused command leaves the repository as it
    /// was): the plan, agents.json, the target branch, an agent for every
    /// pending story (here; with an executor, the workers resolve against
    /// their own PATH), the gates and project settings, the state to
    /// resume, the user's uncommitted changes. Only a checked run starts.
    pub fn check(&self, options: &RunOptions) -> Result<CheckedRun, EngineError> {
        self.check_with_state(options, None)
    }

    /// [`Engine::check`] with the run state the caller has read already
    /// (`resume` reads it for the options the run started with): `Some`
    /// is what [`RunState::load`] returned, used instead of reading the
    /// file again; `None` reads it.
    pub fn check_with_state(
        &self,
        options: &RunOptions,
        state: Option<Option<RunState>>,
    ) -> Result<CheckedRun, EngineError> {
        let (p, read) = match (state, self.state_path()) {
            // The state (tens of megabytes at 100,000 stories) is read while
            // the plan is (on another thread).
            (None, Ok(path)) => {
                let (p, read) = std::thread::scope(|s| {
                    let reading = s.spawn(|| RunState::load(&path));
                    let p = self.prepare();
                    let read = reading.join().unwrap_or_else(|_| {
                        Err(crate::state::StateError::Io {
                            op: "read",
                            path: path.clone(),
                            source: std::io::Error::other("the reading thread failed"),
                        })
                    });
                    (p, read)
                });
                (p?, Some(read))
            }
            (state, _) => (self.prepare()?, state.map(Ok)),
        };
        let state_path = match &self.config.state_path {
            Some(s) => s.clone(),
            None => crate::store::db_path(&p.cascade_dir),
        };
        if options.executor.is_none() {
            let resolver = Resolver::new(&p.agents, &p.detector, overrides(options));
            resolver
                .check_overrides()
                .map_err(EngineError::UnknownAgent)?;
            crate::race::check(&p.prd, &p.prd_path, &p.agents, &options.race)?;
            // Stories of one kind resolve alike: each kind is resolved once.
            for story in p.pending_kinds() {
                resolver
                    .resolve(story, Phase::Implementation)
                    .map_err(|source| EngineError::NoAgent {
                        story: story.id.clone(),
                        source,
                    })?;
            }
        }
        let inputs = self.inputs(&p, options)?;
        let previous = match read {
            Some(read) => read?,
            None => RunState::load(&state_path)?,
        };
        if options.resume && previous.is_none() {
            return Err(EngineError::NothingToResume { path: state_path });
        }
        // A merge a killed run left half done changes files the cleanliness
        // check would count: it is finished (under the lock) first.
        let half_merged = cascade_git::merge::interrupted_merge_pending(&p.paths, &p.target_branch);
        if !half_merged {
            self.refuse_user_changes(options, &p.prd_path)?;
        }
        Ok(CheckedRun {
            p,
            inputs,
            previous,
            state_path,
            half_merged,
        })
    }

    /// Starts a checked run: from here on cascade writes (its lock, its own
    /// files kept out of git, caches, state). See [`Engine::run`].
    pub async fn start(
        &self,
        checked: CheckedRun,
        options: RunOptions,
        sink: EventSink,
        cancel: &CancelToken,
    ) -> Result<RunSummary, EngineError> {
        let started = Instant::now();
        let CheckedRun {
            mut p,
            inputs,
            previous,
            state_path,
            half_merged,
        } = checked;
        let Inputs {
            judging,
            remote_cache,
            project,
            checks,
            prompt,
        } = inputs;
        let progress = ProgressLog::new(self.progress_file());
        let sink: EventSink = {
            let outer = sink;
            Arc::new(move |e: &Event| {
                progress.record(e);
                outer(e);
            })
        };
        let _lock = if self.config.take_lock {
            let (lock, note) = RunLock::acquire(
                &p.cascade_dir.join("lock"),
                if options.resume { "resume" } else { "approve" },
            )?;
            if let Some(message) = note {
                sink(&Event::Notice { message });
            }
            Some(lock)
        } else {
            None
        };
        let excluded = self.excluded_patterns();
        let excluded: Vec<&str> = excluded.iter().map(String::as_str).collect();
        p.paths.ensure_excluded(&excluded)?;
        p.detector.allow_writes();
        match cascade_git::merge::finish_interrupted_merge(&p.paths, &p.target_branch) {
            Ok(Some(tip)) => sink(&Event::Notice {
                message: format!(
                    "completed a merge into '{}' that an interrupted run left half done ({})",
                    p.target_branch,
                    crate::start::short(&tip.to_string())
                ),
            }),
            Ok(None) => {}
            Err(e) => sink(&Event::Notice {
                message: format!("could not complete an interrupted merge: {e}"),
            }),
        }
        if half_merged {
            self.refuse_user_changes(&options, &p.prd_path)?;
        }
        // The unknown fields of the gates that judge the first stories.
        let gate_warnings = cascade_git::merge::branch_tip(&p.paths, &p.target_branch)
            .ok()
            .flatten()
            .and_then(|tip| judging.at(&tip.to_string()).ok())
            .map(|j| j.gates.warnings.clone())
            .unwrap_or_default();
        for message in p
            .notices
            .iter()
            .chain(&gate_warnings)
            .chain(&project.warnings)
        {
            sink(&Event::Notice {
                message: message.clone(),
            });
        }
        // PRD and state writes a killed run left half done: under the lock
        // no other write of these files can be under way, so their temp
        // files are stale (they would otherwise make the tree look dirty).
        let stale = cascade_fs::leftover_write_temps(&p.prd_path)
            .into_iter()
            .chain(cascade_fs::leftover_write_temps(&state_path));
        for tmp in stale {
            let _ = std::fs::remove_file(tmp);
        }

        // State: resumed or fresh; stories already merged are complete.
        let crate::start::Start { state, skipped } =
            crate::start::starting_state(&self.config, &mut p, previous, &options, new_run_id)?;
        let store = crate::store::Store::open(state, &state_path)?;
        let prd = p.prd;

        let nodes = crate::start::scheduler_nodes(&p.plan, &store);
        let mut sched =
            Scheduler::new(nodes, options.schedule, options.parallel, options.fail_fast);
        let layer_count = sched.layers().len();
        let mode_limit = match options.mode {
            Mode::UntilComplete => usize::MAX,
            Mode::MaxIterations(n) => (n as usize).max(1),
            Mode::BatchComplete => 1,
        };
        let mut limit = match options.pause {
            Pause::Never => mode_limit,
            Pause::AfterBatch | Pause::Confirm(_) => 1.min(mode_limit),
        };
        sched.set_layer_limit(limit);

        let control = crate::control::Controls::new(&options, &project, &p.cascade_dir, &prd)
            .map_err(|message| EngineError::Budget {
                path: p.prd_path.clone(),
                message,
            })?;
        // The work stops on the caller's token; agents also stop on their
        // own when a hard budget runs out (the run then ends as
        // budget_exhausted, not interrupted).
        let work_cancel = CancelToken::new();
        let _link = {
            let (outer, inner) = (cancel.clone(), work_cancel.clone());
            let agents = control.agents_cancel.clone();
            AbortOnDrop(tokio::spawn(async move {
                outer.cancelled().await;
                inner.cancel();
                agents.cancel();
            }))
        };
        // A shared budget (a mega run's) that runs out under --hard-budget
        // stops this engine's agents too, whichever engine noticed.
        let _pool_link = {
            let (pool, agents) = (control.budget.pool_stop(), control.agents_cancel.clone());
            AbortOnDrop(tokio::spawn(async move {
                pool.cancelled().await;
                agents.cancel();
            }))
        };
        // The stories' ids by plan position (the stories themselves are
        // in `ctx.prd`, not copied).
        let ids: Vec<String> = prd.stories.iter().map(|s| s.id.clone()).collect();
        let pool = crate::pool::WorktreePool::new(p.paths.clone(), self.config.feature.clone());
        let ctx = Arc::new(Ctx {
            paths: p.paths,
            gate_cache: GateCache::open(&p.cascade_dir).with_remote(remote_cache),
            artifacts_dir: self
                .config
                .artifacts_dir
                .clone()
                .unwrap_or_else(|| p.cascade_dir.clone()),
            project_root: self.config.project_root.clone(),
            target_branch: p.target_branch.clone(),
            feature: self.config.feature.clone(),
            agents: p.agents,
            detector: p.detector,
            judging,
            project,
            options: options.clone(),
            prd_path: p.prd_path,
            prd: Mutex::new(prd),
            state_path: state_path.clone(),
            state: Mutex::new(store),
            prd_writer: crate::persist::GroupWriter::default(),
            merge_queue: Default::default(),
            pool,
            prompt,
            checks,
            sink,
            cancel: work_cancel,
            control,
            halt: Mutex::new(None),
        });

        let (run_id, resumed) = {
            let st = ctx.state.lock().map_err(|_| poisoned())?;
            (st.run_id.clone(), options.resume)
        };
        ctx.emit(Event::RunStarted {
            run_id: run_id.clone(),
            prd: self.config.prd_path.display().to_string(),
            target_branch: ctx.target_branch.clone(),
            total: ids.len(),
            already_complete: complete_count(&ctx),
            schedule: discipline_name(&options),
            parallel: options.parallel,
            batches: layer_count,
            resumed,
        });
        for (story, reason) in skipped {
            ctx.emit(Event::StorySkipped { story, reason });
        }
        // Agents a killed run left running would keep writing into worktrees
        // that are about to be reused: stop them first.
        let mut leftovers = match ctx.state.lock() {
            Ok(st) => crate::leftover::recorded(&st),
            Err(_) => Vec::new(),
        };
        // Agents started too late to be recorded. Only with the run lock held
        // here: then no live run of this repository owns an agent in it.
        if self.config.take_lock {
            let found = crate::leftover::scan(&ids, ctx.paths.cascade_dir().as_path(), &leftovers);
            leftovers.extend(found);
        }
        if !leftovers.is_empty() {
            let stopped = tokio::task::spawn_blocking(move || {
                crate::leftover::stop(&leftovers, std::time::Duration::from_secs(2))
            })
            .await
            .unwrap_or_default();
            for message in stopped {
                ctx.emit(Event::Notice { message });
            }
        }
        // Idle worktrees a killed run left are reused, not left behind.
        let notes = {
            let c = Arc::clone(&ctx);
            tokio::task::spawn_blocking(move || c.pool.adopt_leftovers())
                .await
                .unwrap_or_default()
        };
        for message in notes {
            ctx.emit(Event::Notice { message });
        }

        // Changes not waited for reach the disk within a fraction of a second.
        let flusher = {
            let c = Arc::clone(&ctx);
            AbortOnDrop(tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tick.tick().await;
                    if c.prd_writer.due() {
                        let c = Arc::clone(&c);
                        let _ = tokio::task::spawn_blocking(move || c.flush_due()).await;
                    }
                }
            }))
        };

        let mut tasks: JoinSet<(usize, StoryEnd)> = JoinSet::new();
        let mut started_layers: HashSet<usize> = HashSet::new();
        let mut finished_layers: HashSet<usize> = HashSet::new();
        let mut paused = false;
        // `--max-duration`: the run's time budget runs out by itself.
        let _clock = ctx.control.budget.time_left().map(|left| {
            let c = Arc::clone(&ctx);
            AbortOnDrop(tokio::spawn(async move {
                tokio::time::sleep(left).await;
                crate::control::check_run_budget(&c);
            }))
        });
        crate::control::check_run_budget(&ctx);
        // The base is judged before any agent: a required gate red there
        // stops the run (see steps::base).
        let red_base = crate::steps::judge_base(&ctx).await.err();
        if red_base.is_some() {
            sched.stop();
        }
        // Requests from outside (dashboard): pause, resume, cancel, retry.
        let steer = ctx.options.steering.clone();
        let _attached = steer.as_ref().map(crate::control::steer::Attached::new);
        loop {
            crate::control::steer::apply(&ctx, &mut sched, &ids);
            let held = steer.as_ref().is_some_and(|s| s.is_paused());
            if cancel.is_cancelled() || ctx.halted() || ctx.control.budget.exhausted().is_some() {
                sched.stop();
            }
            while let Some(i) = (!held).then(|| sched.next_ready()).flatten() {
                let layer = sched.layer_of(i);
                if started_layers.insert(layer) {
                    ctx.emit(Event::BatchStarted {
                        batch: layer + 1,
                        of: layer_count,
                        stories: sched.layers()[layer]
                            .iter()
                            .filter(|&&j| sched.state(j) != NodeState::Blocked)
                            .map(|&j| ids[j].clone())
                            .collect(),
                    });
                }
                // Node `i` is the plan's story `i`: prd.json's position `i`.
                let story = ctx.prd.lock().unwrap_or_else(|e| e.into_inner()).stories[i].clone();
                let c = Arc::clone(&ctx);
                tasks.spawn(async move { (i, story::run_story(c, story).await) });
            }
            if tasks.is_empty() {
                // Paused with work left: wait for the next request.
                if let (true, Some(s)) =
                    (held && !sched.is_stopped() && sched.waiting() > 0, &steer)
                {
                    tokio::select! {
                        _ = s.woken() => {}
                        _ = cancel.cancelled() => {}
                    }
                    continue;
                }
                if cancel.is_cancelled()
                    || ctx.halted()
                    || sched.is_stopped()
                    || sched.held_back() == 0
                {
                    break;
                }
                // A batch boundary with work held back.
                let next_layer = limit;
                if limit >= mode_limit {
                    paused = true;
                    break;
                }
                let go_on = match &options.pause {
                    Pause::Never => true,
                    Pause::AfterBatch => false,
                    Pause::Confirm(ask) => {
                        let ids: Vec<String> = sched
                            .layers()
                            .get(next_layer)
                            .map(|m| {
                                m.iter()
                                    .filter(|&&j| sched.state(j) == NodeState::Waiting)
                                    .map(|&j| ids[j].clone())
                                    .collect()
                            })
                            .unwrap_or_default();
                        let ask = Arc::clone(ask);
                        let total = layer_count;
                        tokio::task::spawn_blocking(move || ask(next_layer + 1, total, &ids))
                            .await
                            .unwrap_or(false)
                    }
                };
                if !go_on {
                    paused = true;
                    break;
                }
                limit += 1;
                sched.set_layer_limit(limit);
                continue;
            }
            let joined = match &steer {
                Some(s) => tokio::select! {
                    j = tasks.join_next() => j,
                    _ = s.woken() => continue,
                },
                None => tasks.join_next().await,
            };
            let Some(joined) = joined else {
                continue;
            };
            let (i, end) = joined.map_err(|e| EngineError::Internal(format!("story task: {e}")))?;
            let id = ids[i].clone();
            match end {
                StoryEnd::Merged => sched.complete(i),
                StoryEnd::Failed => {
                    let blocked = sched.fail(i);
                    announce_blocked(&ctx, &sched, &ids, &blocked);
                }
                StoryEnd::Interrupted => {
                    sched.release(i);
                    sched.stop();
                }
            }
            let _ = id;
            let layer = sched.layer_of(i);
            if sched.layer_finished(layer) && finished_layers.insert(layer) {
                ctx.emit(Event::BatchFinished {
                    batch: layer + 1,
                    of: layer_count,
                });
            }
        }

        // The pool's idle worktrees go (merged stories leave nothing behind).
        let notes = {
            let c = Arc::clone(&ctx);
            tokio::task::spawn_blocking(move || c.pool.drain())
                .await
                .unwrap_or_default()
        };
        for message in notes {
            ctx.emit(Event::Notice { message });
        }

        // How it ended.
        let interrupted = cancel.is_cancelled() || ctx.halted();
        let (counts, summary) = {
            let st = ctx.state.lock().map_err(|_| poisoned())?;
            (st.counts(), summaries(&st))
        };
        let over_budget = ctx.control.budget.exhausted().is_some() && counts.pending > 0;
        let status = if red_base.is_some() && !interrupted {
            RunStatus::Failed
        } else if interrupted {
            RunStatus::Interrupted
        } else if over_budget {
            RunStatus::BudgetExhausted
        } else if counts.failed > 0 || counts.blocked > 0 {
            RunStatus::Failed
        } else if counts.pending > 0 || paused {
            if counts.pending > 0 {
                RunStatus::Paused
            } else {
                RunStatus::Completed
            }
        } else {
            RunStatus::Completed
        };
        if status == RunStatus::Paused {
            ctx.emit(Event::RunPaused {
                reason: match options.mode {
                    Mode::BatchComplete => "the batch is complete (--mode batch-complete)".into(),
                    Mode::MaxIterations(n) => format!("reached --max-iterations {n}"),
                    Mode::UntilComplete => {
                        "stopped after the batch; run `cascade resume` to continue".into()
                    }
                },
            });
        }
        crate::control::report_unknown_spend(&ctx);
        drop(flusher);
        ctx.flush_prd();
        ctx.update_state(|st| st.status = status.into());
        ctx.finish_state();
        // The state (on disk now) records every merge: the branches of
        // complete stories go (also those an interrupted run left).
        {
            let branches: Vec<String> = match ctx.state.lock() {
                Ok(st) => st
                    .stories
                    .iter()
                    .filter(|s| s.status == StoryStatus::Complete)
                    .map(|s| story_branch(&self.config, &s.id))
                    .collect(),
                Err(_) => Vec::new(),
            };
            let c = Arc::clone(&ctx);
            let deleted = tokio::task::spawn_blocking(move || {
                cascade_git::worktree::delete_merged_branches(&c.paths, &branches, &c.target_branch)
            })
            .await;
            if let Ok(Err(e)) = deleted {
                ctx.emit(Event::Notice {
                    message: format!("could not delete merged branches: {e}"),
                });
            }
        }
        // What the executor keeps elsewhere for merged stories goes too.
        if let Some(executor) = &ctx.options.executor {
            for message in executor.0.finish(&ctx.target_branch).await {
                ctx.emit(Event::Notice { message });
            }
        }
        // Remote uploads still running get a short, bounded wait.
        if let Some(f) = ctx.gate_cache.flush_remote(None).await {
            for message in ctx.gate_cache.take_remote_warnings() {
                ctx.emit(Event::Notice {
                    message: format!("remote gate cache: {message}"),
                });
            }
            if f.uploaded + f.failed + f.abandoned > 0 {
                ctx.emit(Event::Notice {
                    message: format!(
                        "remote gate cache: {} published, {} already there, {} failed, {} abandoned",
                        f.uploaded, f.already_present, f.failed, f.abandoned
                    ),
                });
            }
        }
        let duration_ms = started.elapsed().as_millis() as u64;
        let finished = Event::RunFinished {
            status,
            stories: counts,
            duration_ms,
            summary,
            integration: Some(ctx.options.integration.as_str().to_string()),
        };
        ctx.emit_ref(&finished);
        // The rows go to the caller too, not copied (one per story).
        let summary = match finished {
            Event::RunFinished { summary, .. } => summary,
            _ => Vec::new(),
        };
        // Stopped for want of disk space: an error, so that nobody mistakes
        // it for a Ctrl-C (the state says interrupted; resume continues).
        let halt = ctx.halt.lock().ok().and_then(|mut h| h.take());
        if let Some(full) = halt {
            return Err(EngineError::DiskFull(full));
        }
        if let Some(red) = red_base {
            return Err(red);
        }
        Ok(RunSummary {
            run_id,
            status,
            counts,
            stories: summary,
            duration_ms,
        })
    }
}

fn poisoned() -> EngineError {
    EngineError::Internal("state lock poisoned".into())
}

/// Where design_doc.json is read from: beside the PRD when it is there, else
/// the project (Plan Cascade's default mode keeps prd.json in its user data
/// directory but the design document in the project).
pub(crate) fn design_dir(prd_path: &Path, project_root: &Path) -> PathBuf {
    prd_path
        .parent()
        .filter(|d| d.join("design_doc.json").is_file())
        .map_or_else(|| project_root.to_path_buf(), Path::to_path_buf)
}

/// Records and announces the stories a failure blocked (`blocked`, from
/// [`Scheduler::fail`]; `stories` are the ids in scheduler order), each with
/// the dependencies that block it.
pub(crate) fn announce_blocked(
    ctx: &Ctx,
    sched: &Scheduler,
    stories: &[String],
    blocked: &[usize],
) {
    for &b in blocked {
        let by: Vec<String> = sched
            .deps(b)
            .iter()
            .filter(|&&d| matches!(sched.state(d), NodeState::Failed | NodeState::Blocked))
            .map(|&d| stories[d].clone())
            .collect();
        ctx.update_story(&stories[b], |s| {
            s.status = StoryStatus::Blocked;
            s.blocked_by = by.clone();
        });
        ctx.emit(Event::StoryBlocked {
            story: stories[b].clone(),
            blocked_by: by,
        });
    }
}

fn complete_count(ctx: &Ctx) -> usize {
    ctx.state
        .lock()
        .map(|st| {
            st.stories
                .iter()
                .filter(|s| s.status == StoryStatus::Complete)
                .count()
        })
        .unwrap_or(0)
}

fn discipline_name(o: &RunOptions) -> String {
    match o.schedule {
        crate::scheduler::Discipline::Batch => "batch".into(),
        crate::scheduler::Discipline::Eager => "eager".into(),
    }
}

/// The branch of a story in this run.
pub(crate) fn story_branch(config: &EngineConfig, id: &str) -> String {
    cascade_git::worktree::branch_name(config.feature.as_deref(), id)
}

/// A run id: UTC time and pid (sortable, unique per machine).
fn new_run_id() -> String {
    format!(
        "{}-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
        std::process::id()
    )
}

/// Per-story rows for the final summary, from the state.
pub fn summaries(st: &RunState) -> Vec<StorySummary> {
    st.stories
        .iter()
        .map(|s| {
            let last = s.attempts.last();
            let sum_u64 = |f: fn(&crate::state::AttemptRecord) -> Option<u64>| {
                let v: Vec<u64> = s.attempts.iter().filter_map(f).collect();
                (!v.is_empty()).then(|| v.iter().sum())
            };
            let costs: Vec<f64> = s.attempts.iter().filter_map(|a| a.cost_usd).collect();
            StorySummary {
                story: s.id.clone(),
                status: s.status.as_str().to_string(),
                agent: s.agent.clone().or_else(|| last.map(|a| a.agent.clone())),
                attempts: s.charged_attempts(),
                gates: s.gates.clone(),
                duration_ms: s.attempts.iter().filter_map(|a| a.duration_ms).sum(),
                input_tokens: sum_u64(|a| a.input_tokens),
                output_tokens: sum_u64(|a| a.output_tokens),
                cost_usd: (!costs.is_empty()).then(|| costs.iter().sum()),
                error: s.error.clone(),
                verification: s.verification.clone(),
                verification_allowed: s.verification_allowed.clone(),
                review: s.review.clone(),
                confinement: s.attempts.iter().rev().find_map(|a| a.confinement.clone()),
            }
        })
        .collect()
}
