//! The read-only context every story task shares: the run's repository,
//! configuration, agents, judging files, caches and controls, and the
//! handles through which tasks change the run state and announce events.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cascade_agents::{AgentsConfig, Detector, Overrides};
use cascade_gates::GateCache;
use cascade_git::RepoPaths;
use cascade_plan::{Prd, Status};
use cascade_process::CancelToken;

use crate::config::{EngineConfig, ProjectConfig, RunOptions};
use crate::events::Event;
use crate::owner::{Change, StateTx, WriteFailed};
use crate::state::{RunState, StoryState};

/// Everything a story task needs, shared by all of them.
pub(crate) struct Ctx {
    pub paths: RepoPaths,
    /// The run's id (a fleet job carries the coordinator's).
    pub run_id: String,
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
    /// The run state's file; the state itself is the run loop's, and
    /// changes and events go to it through `state` (see the `owner` module).
    pub state_path: PathBuf,
    pub state: StateTx,
    /// Writes `prd` behind the run (see the `persist` module).
    pub prd_writer: crate::persist::BehindWriter,
    /// The serial merge queue: one merge (or group) into the target branch at a time.
    pub merge_queue: crate::merge_queue::MergeQueue,
    /// Idle story worktrees, reused from story to story.
    pub pool: crate::pool::WorktreePool,
    /// Skills and design context for every prompt (the retry part is added per attempt).
    pub prompt: cascade_agents::prompt::PromptContext,
    /// What the verify and review steps of every attempt use.
    pub checks: crate::checks::Checks,
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
    /// Announces `event` (by the run's loop, after the changes sent before).
    pub fn emit(&self, event: Event) {
        self.state.emit(event);
    }

    /// Announces the event `make` builds from the state when its turn
    /// comes (after the changes sent before).
    pub fn emit_from(&self, make: impl FnOnce(&RunState) -> Event + Send + 'static) {
        self.state.send(Change::EventFrom(Box::new(make)));
    }

    pub fn overrides(&self) -> Overrides {
        overrides(&self.options)
    }

    /// Stops the run when `error`, met writing `path`, says that the disk
    /// is full (an `ENOSPC`/`EDQUOT` or `StorageFull` I/O error in its source
    /// chain; see [`cascade_fs::is_disk_full`]): retrying would fail the same
    /// way and charge every story an attempt for it. The work is cancelled
    /// as on Ctrl-C (agents and gates stopped, stories back to pending) and
    /// the run ends with [`EngineError::DiskFull`] naming the disk. Returns
    /// whether it did.
    pub fn halt_if_disk_full(
        &self,
        path: &Path,
        error: &(dyn std::error::Error + 'static),
    ) -> bool {
        if !cascade_fs::is_disk_full(error) {
            return false;
        }
        let error = error.to_string();
        let mut halt = self.halt.lock().unwrap_or_else(|e| e.into_inner());
        if halt.is_none() {
            let candidates = [path, &self.state_path, &self.paths.common_dir];
            let disk = cascade_fs::Disk::fullest(candidates).map(|d| d.to_string());
            let full = crate::error::DiskFull {
                path: path.to_path_buf(),
                disk,
                error,
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

    /// Records a transition of the story's record: the run's loop applies
    /// `f` and commits it (one transaction of the run database: see the
    /// `store` module) with every
    /// amendment sent before it. A write failure is reported as a notice and
    /// never stops the work.
    pub fn update_story(&self, id: &str, f: impl FnOnce(&mut StoryState) + Send + 'static) {
        self.state.story(id, f);
    }

    /// One of the story loop's transitions of story `id` (see the
    /// `transition` module), recorded like [`Ctx::update_story`].
    pub fn transition(&self, id: &str, transition: crate::transition::Transition) {
        self.state.transition(id, transition);
    }

    /// Like [`Ctx::update_story`] for the run's own fields (not its stories).
    pub fn update_state(&self, f: impl FnOnce(&mut RunState) + Send + 'static) {
        self.state.send(Change::Run(Box::new(f)));
    }

    /// A step's failure from `error`, met writing under `path`: when that
    /// is a full disk, the run is stopped too (see
    /// [`Ctx::halt_if_disk_full`]; the story's loop then counts the attempt
    /// as interrupted, not failed).
    pub fn write_failed(
        &self,
        path: &Path,
        kind: crate::retry::FailureKind,
        message: String,
        error: &(dyn std::error::Error + 'static),
    ) -> crate::failure::Failure {
        self.halt_if_disk_full(path, error);
        crate::failure::Failure::new(kind, message)
    }

    /// A prd.json write failed: as a state write (see [`WriteFailed`]).
    fn prd_write_failed(&self, e: &cascade_plan::PlanError) {
        if !self.halt_if_disk_full(&self.prd_path, e) {
            self.emit(Event::Notice {
                message: format!("could not update {}: {e}", self.prd_path.display()),
            });
        }
    }

    /// Changes a story's record in memory only; it reaches the disk with the
    /// next transition (for details such as log paths and gate results that
    /// always precede one).
    pub fn amend_story(&self, id: &str, f: impl FnOnce(&mut StoryState) + Send + 'static) {
        self.state.send(Change::AmendStory {
            id: id.to_string(),
            change: Box::new(f),
        });
    }

    /// Changes the run's own fields in memory only (reaches the disk with
    /// the next transition, like [`Ctx::amend_story`]).
    pub fn amend_state(&self, f: impl FnOnce(&mut RunState) + Send + 'static) {
        self.state.send(Change::AmendRun(Box::new(f)));
    }

    /// Writes the prd.json changes not written yet (the flusher, and the
    /// end of the run).
    pub fn flush_prd(&self) {
        if let Err(e) = self.prd_writer.write(|| self.write_prd()) {
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

    /// Sets a story's status in prd.json; the file follows with the next
    /// flush (atomic; fields kept; nothing changes when the status does
    /// not). prd.json is not what resume trusts for merged stories (git
    /// is), and it is only ever written behind the facts.
    pub fn set_prd_status(&self, id: &str, status: Status) {
        if let Ok(mut prd) = self.prd.lock() {
            if let Some(s) = prd.story_mut(id).filter(|s| s.status != status) {
                s.set_status(status);
                self.prd_writer.changed();
            }
        }
    }
}

impl WriteFailed for Ctx {
    /// A notice, and the end of the run when the disk is full (the state
    /// file keeps its last complete content).
    fn state_write_failed(&self, e: &crate::state::StateError) {
        if !self.halt_if_disk_full(&self.state_path, e) {
            self.emit(Event::Notice {
                message: format!("could not save the run state: {e}"),
            });
        }
    }
}

pub(crate) fn overrides(o: &RunOptions) -> Overrides {
    Overrides {
        agent: o.agent.clone(),
        impl_agent: o.impl_agent.clone(),
        retry_agent: o.retry_agent.clone(),
        prd_agent: None,
        review_agent: o.review_agent.clone(),
        no_fallback: o.no_fallback,
        learned: o.learned.clone(),
    }
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

/// The branch of a story in this run.
pub(crate) fn story_branch(config: &EngineConfig, id: &str) -> String {
    cascade_git::worktree::branch_name(config.feature.as_deref(), id)
}
