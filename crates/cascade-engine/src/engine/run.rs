//! [`Engine::start`] in its phases: **acquire** the repository (the lock,
//! cascade's files kept out of git, what a killed run left half done),
//! **recover** the state (fresh, or resumed with what git says is merged)
//! and build the scheduler and the stories' context, **clear** what a killed
//! run left running, **drive** the scheduler loop (the `drive` module) and
//! **finish** (the `finish` module). Each phase hands the next what it
//! built; none reaches back.

use std::sync::Arc;
use std::time::Instant;

use cascade_process::{AbortOnDrop, CancelToken};

use super::{CheckedRun, Engine, Prepared, RunParts, RunSummary};
use crate::config::{Mode, Pause, RunOptions};
use crate::ctx::Ctx;
use crate::error::EngineError;
use crate::events::{Event, EventSink};
use crate::lock::RunLock;
use crate::owner::Owner;
use crate::progress::ProgressLog;
use crate::scheduler::Scheduler;

/// What [`Engine::recover`] built: the context the stories share, the
/// scheduler the loop drives, and the tasks that tie the run's tokens
/// together (dropped with it).
pub(super) struct Recovered {
    pub ctx: Arc<Ctx>,
    /// The state's store and the event sink: only the loop writes and
    /// announces (see the `owner` module).
    pub owner: Owner,
    pub sched: Scheduler,
    /// The stories' ids by plan position (the stories themselves are in
    /// `ctx.prd`, not copied).
    pub ids: Vec<String>,
    pub run_id: String,
    /// Stories found merged already, with why (announced once started).
    pub skipped: Vec<(String, String)>,
    /// The number of batches the loop may start before it stops for the
    /// mode (`--mode batch-complete`, `--max-iterations`).
    pub mode_limit: usize,
    /// The batches the loop may start now (raised at each boundary the
    /// pause setting lets it pass).
    pub limit: usize,
    /// The scheduler's keys of the files stories hold.
    pub file_keys: crate::start::FileKeys,
    /// Stories complete when the run starts.
    already_complete: usize,
    _links: [AbortOnDrop; 2],
}

impl Engine {
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
        let sink = self.recorded(sink);
        let _lock = self.acquire(&checked.p, &options, &sink)?;
        self.repair(&checked, &options, &sink)?;
        let run = self.recover(checked, &options, sink, cancel)?;
        self.announce_start(&run, &options);
        let mut run = run;
        let recorded = crate::leftover::recorded(&run.owner.store);
        let cleared = clear_leftovers(&run.ctx, &run.ids, recorded, self.config.take_lock);
        run.owner.serve_while(&run.ctx, cleared).await;
        let (run, driven) = super::drive::drive(run, &options, cancel).await?;
        super::finish::finish(self, run, driven, &options, cancel, started).await
    }

    /// `sink` with every event also written to progress.txt.
    fn recorded(&self, sink: EventSink) -> EventSink {
        let progress = ProgressLog::new(self.progress_file());
        Arc::new(move |e: &Event| {
            progress.record(e);
            sink(e);
        })
    }

    /// The run's hold on the repository: its lock (unless the caller holds
    /// one), cascade's files in `info/exclude`, the detector's cache
    /// writable.
    fn acquire(
        &self,
        p: &Prepared,
        options: &RunOptions,
        sink: &EventSink,
    ) -> Result<Option<RunLock>, EngineError> {
        let lock = if self.config.take_lock {
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
        Ok(lock)
    }

    /// What a killed run left half done, under the lock: a merge into the
    /// target (finished, then the tree checked for the user's changes) and
    /// the temp files of PRD and state writes. Also announces what the files
    /// accept but probably do not mean.
    fn repair(
        &self,
        checked: &CheckedRun,
        options: &RunOptions,
        sink: &EventSink,
    ) -> Result<(), EngineError> {
        let (p, inputs) = (&checked.p, &checked.inputs);
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
        if checked.half_merged {
            self.refuse_user_changes(options, &p.prd_path)?;
        }
        // The unknown fields of the gates that judge the first stories.
        let gate_warnings = cascade_git::merge::branch_tip(&p.paths, &p.target_branch)
            .ok()
            .flatten()
            .and_then(|tip| inputs.judging.at(&tip.to_string()).ok())
            .map(|j| j.gates.warnings.clone())
            .unwrap_or_default();
        for message in p
            .notices
            .iter()
            .chain(&gate_warnings)
            .chain(&inputs.project.warnings)
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
            .chain(cascade_fs::leftover_write_temps(&checked.state_path));
        for tmp in stale {
            let _ = std::fs::remove_file(tmp);
        }
        Ok(())
    }

    /// The state the run starts from (resumed or fresh; stories already
    /// merged are complete), its store, the scheduler over it and the
    /// context the stories share.
    fn recover(
        &self,
        checked: CheckedRun,
        options: &RunOptions,
        sink: EventSink,
        cancel: &CancelToken,
    ) -> Result<Recovered, EngineError> {
        let CheckedRun {
            mut p,
            inputs,
            previous,
            state_path,
            ..
        } = checked;
        let crate::start::Start { state, skipped } = crate::start::starting_state(
            &self.config,
            &mut p,
            previous,
            options,
            super::new_run_id,
        )?;
        let run_id = state.run_id.clone();
        let store = crate::store::Store::open(state, &state_path)?;
        let already_complete = complete_count(&store);
        let mut file_keys = crate::start::FileKeys::default();
        let nodes = crate::start::scheduler_nodes(&p, &store, &mut file_keys);
        let mut sched =
            Scheduler::new(nodes, options.schedule, options.parallel, options.fail_fast);
        let mode_limit = match options.mode {
            Mode::UntilComplete => usize::MAX,
            Mode::MaxIterations(n) => (n as usize).max(1),
            Mode::BatchComplete => 1,
        };
        let limit = match options.pause {
            Pause::Never => mode_limit,
            Pause::AfterBatch | Pause::Confirm(_) => 1.min(mode_limit),
        };
        sched.set_layer_limit(limit);
        let ids: Vec<String> = p.prd.stories.iter().map(|s| s.id.clone()).collect();
        let parts = RunParts {
            options: options.clone(),
            store,
            state_path,
            sink,
            cancel: CancelToken::new(),
            run_id: run_id.clone(),
        };
        let (ctx, owner) = self.context(p, inputs, parts)?;
        let ctx = Arc::new(ctx);
        let links = link_tokens(cancel, &ctx.cancel, &ctx.control);
        Ok(Recovered {
            ctx,
            owner,
            already_complete,
            file_keys,
            sched,
            ids,
            run_id,
            skipped,
            mode_limit,
            limit,
            _links: links,
        })
    }

    /// `run_started`, and the stories found merged already.
    fn announce_start(&self, run: &Recovered, options: &RunOptions) {
        let ctx = &run.ctx;
        ctx.emit(Event::RunStarted {
            run_id: run.run_id.clone(),
            prd: self.config.prd_path.display().to_string(),
            target_branch: ctx.target_branch.clone(),
            total: run.ids.len(),
            already_complete: run.already_complete,
            schedule: super::discipline_name(options),
            parallel: options.parallel,
            batches: run.sched.layers().len(),
            resumed: options.resume,
        });
        for (story, reason) in &run.skipped {
            ctx.emit(Event::StorySkipped {
                story: story.clone(),
                reason: reason.clone(),
            });
        }
    }
}

/// The work stops on the caller's token; agents also stop on their own
/// when a hard budget runs out (the run then ends as budget_exhausted, not
/// interrupted), and when a shared budget (a mega run's) runs out under
/// --hard-budget, whichever engine noticed.
fn link_tokens(
    cancel: &CancelToken,
    work: &CancelToken,
    control: &crate::control::Controls,
) -> [AbortOnDrop; 2] {
    let caller = {
        let (outer, inner) = (cancel.clone(), work.clone());
        let agents = control.agents_cancel.clone();
        AbortOnDrop(tokio::spawn(async move {
            outer.cancelled().await;
            inner.cancel();
            agents.cancel();
        }))
    };
    let pool = {
        let (pool, agents) = (control.budget.pool_stop(), control.agents_cancel.clone());
        AbortOnDrop(tokio::spawn(async move {
            pool.cancelled().await;
            agents.cancel();
        }))
    };
    [caller, pool]
}

/// What a killed run left: agents still running would keep writing into
/// worktrees that are about to be reused (stopped first), and idle
/// worktrees (reused, not left behind).
/// `leftovers`: the agents the state records.
async fn clear_leftovers(
    ctx: &Arc<Ctx>,
    ids: &[String],
    mut leftovers: Vec<crate::leftover::Leftover>,
    take_lock: bool,
) {
    // Agents started too late to be recorded. Only with the run lock held
    // here: then no live run of this repository owns an agent in it.
    if take_lock {
        let found = crate::leftover::scan(ids, ctx.paths.cascade_dir().as_path(), &leftovers);
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
    let notes = {
        let c = Arc::clone(ctx);
        tokio::task::spawn_blocking(move || {
            let mut notes = c.pool.adopt_leftovers();
            if take_lock {
                notes.extend(crate::steps::integrate::remove_scratch(&c.paths));
            }
            notes
        })
        .await
        .unwrap_or_default()
    };
    for message in notes {
        ctx.emit(Event::Notice { message });
    }
}

fn complete_count(st: &crate::state::RunState) -> usize {
    st.stories
        .iter()
        .filter(|s| s.status == crate::state::StoryStatus::Complete)
        .count()
}
