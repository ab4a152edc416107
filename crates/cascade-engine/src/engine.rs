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

mod drive;
mod finish;
mod run;

use std::path::{Path, PathBuf};

use cascade_agents::{AgentsConfig, Detector, Phase, Resolver};
use cascade_git::RepoPaths;
use cascade_process::CancelToken;

use crate::config::{EngineConfig, ProjectConfig, RunOptions};
use crate::ctx::{design_dir, overrides, Ctx};
use crate::error::EngineError;
use crate::events::{EventSink, FallbackNote, RunStatus, StoryCounts, StorySummary};
use crate::prepared::Inputs;
pub use crate::prepared::{CheckedRun, Prepared};
use crate::state::RunState;

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

/// What a run's (or a fleet job's) context is made of besides what
/// preparation loaded: see [`Engine::context`].
pub(crate) struct RunParts {
    pub options: RunOptions,
    /// The state the run starts from, opened.
    pub store: crate::store::Store,
    pub state_path: PathBuf,
    pub sink: EventSink,
    /// What stops the work (a run links the caller's token to it).
    pub cancel: CancelToken,
    pub run_id: String,
}

impl Engine {
    /// The context the stories of a run (or a job) share, and the owner of
    /// its state, which the caller's loop serves (see the `owner` module).
    pub(crate) fn context(
        &self,
        p: Prepared,
        inputs: Inputs,
        parts: RunParts,
    ) -> Result<(Ctx, crate::owner::Owner), EngineError> {
        let control =
            crate::control::Controls::new(&parts.options, &inputs.project, &p.cascade_dir, &p.prd)
                .map_err(|message| EngineError::Budget {
                    path: p.prd_path.clone(),
                    message,
                })?;
        let (state, owner) = crate::owner::channel(parts.store, parts.sink);
        let ctx = Ctx {
            pool: crate::pool::WorktreePool::new(p.paths.clone(), self.config.feature.clone()),
            gate_cache: cascade_gates::GateCache::open(&p.cascade_dir)
                .with_remote(inputs.remote_cache),
            artifacts_dir: self
                .config
                .artifacts_dir
                .clone()
                .unwrap_or_else(|| p.cascade_dir.clone()),
            paths: p.paths,
            run_id: parts.run_id,
            project_root: self.config.project_root.clone(),
            target_branch: p.target_branch,
            feature: self.config.feature.clone(),
            agents: p.agents,
            detector: p.detector,
            judging: inputs.judging,
            project: inputs.project,
            options: parts.options,
            prd_path: p.prd_path,
            prd: std::sync::Mutex::new(p.prd),
            state_path: parts.state_path,
            state,
            prd_writer: crate::persist::BehindWriter::default(),
            merge_queue: Default::default(),
            prompt: inputs.prompt,
            checks: inputs.checks,
            cancel: parts.cancel,
            control,
            halt: std::sync::Mutex::new(None),
        };
        Ok((ctx, owner))
    }

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
}

fn discipline_name(o: &RunOptions) -> String {
    match o.schedule {
        crate::scheduler::Discipline::Batch => "batch".into(),
        crate::scheduler::Discipline::Eager => "eager".into(),
    }
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
                race: s.race.clone(),
            }
        })
        .collect()
}
