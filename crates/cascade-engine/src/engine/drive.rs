//! The run's loop: the only place that talks to the scheduler. It starts
//! ready stories as tasks (under the parallelism and batch limits), takes
//! each task's end back, applies steering requests between two decisions,
//! and at a batch boundary pauses, asks or goes on, according to the mode
//! and [`Pause`]. A story whose retry waits for running stories to end
//! lends its slot meanwhile ([`crate::owner::Ask`]); the loop gives it one
//! back, before any new story starts, once they have ended. Files a
//! story's merge conflicted in join its files for the scheduler.

use std::collections::HashSet;
use std::sync::Arc;

use cascade_process::{AbortOnDrop, CancelToken};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use super::run::Recovered;
use crate::config::{Pause, RunOptions};
use crate::ctx::Ctx;
use crate::error::EngineError;
use crate::events::Event;
use crate::owner::Ask;
use crate::scheduler::NodeState;
use crate::story::{self, StoryEnd};

/// How the loop ended, for the epilogue.
pub(super) struct Driven {
    /// The base was judged red before any story ran (see `steps::base`).
    pub red_base: Option<EngineError>,
}

/// The loop's own bookkeeping besides the scheduler.
struct Loop {
    tasks: JoinSet<(usize, StoryEnd)>,
    started_layers: HashSet<usize>,
    finished_layers: HashSet<usize>,
    layer_count: usize,
    /// Stories waiting for others to end, their slots lent, in the order
    /// they lent them.
    lent: Vec<Lent>,
}

/// A story waiting, its slot lent: node `node` resumes once none of
/// `until` runs and a slot is free.
struct Lent {
    node: usize,
    until: Vec<usize>,
    resume: oneshot::Sender<()>,
}

/// Runs the stories until the scheduler has nothing more to hand out, the
/// run is stopped, or a batch boundary pauses it.
pub(super) async fn drive(
    mut run: Recovered,
    options: &RunOptions,
    cancel: &CancelToken,
) -> Result<(Recovered, Driven), EngineError> {
    let ctx = Arc::clone(&run.ctx);
    let _flusher = flusher(&ctx);
    // `--max-duration`: the run's time budget runs out by itself.
    let _clock = ctx.control.budget.time_left().map(|left| {
        let c = Arc::clone(&ctx);
        AbortOnDrop(tokio::spawn(async move {
            tokio::time::sleep(left).await;
            crate::spend::recheck_run_budget(&c);
        }))
    });
    crate::spend::check_run_budget(&ctx, &run.owner.store);
    // The base is judged before any agent: a required gate red there
    // stops the run (see steps::base).
    let pending = run
        .owner
        .store
        .stories
        .iter()
        .any(|s| s.status != crate::state::StoryStatus::Complete);
    let judged = crate::steps::judge_base(&ctx, pending);
    let red_base = run.owner.serve_while(&ctx, judged).await.err();
    if red_base.is_some() {
        run.sched.stop();
    }
    let mut l = Loop {
        tasks: JoinSet::new(),
        started_layers: HashSet::new(),
        finished_layers: HashSet::new(),
        layer_count: run.sched.layers().len(),
        lent: Vec::new(),
    };
    run_loop(&mut run, &mut l, options, cancel).await?;
    Ok((run, Driven { red_base }))
}

/// The loop proper: until nothing is left to start, the run is stopped, or
/// a batch boundary pauses it (the stories left are then pending).
async fn run_loop(
    run: &mut Recovered,
    l: &mut Loop,
    options: &RunOptions,
    cancel: &CancelToken,
) -> Result<(), EngineError> {
    let ctx = Arc::clone(&run.ctx);
    // Requests from outside (dashboard): pause, resume, cancel, retry.
    let steer = ctx.options.steering.clone();
    let _attached = steer.as_ref().map(crate::control::steer::Attached::new);
    loop {
        crate::control::steer::apply(steer.as_ref(), &ctx.state, &mut run.sched, &run.ids);
        run.owner.drain(&ctx);
        let held = steer.as_ref().is_some_and(|s| s.is_paused());
        if cancel.is_cancelled() || ctx.halted() || ctx.control.budget.exhausted().is_some() {
            run.sched.stop();
        }
        take_asks(run, l);
        resume_lent(run, l);
        if !held {
            spawn_ready(run, l);
        }
        // A steering request, or nothing when nobody steers.
        let woken = async {
            match &steer {
                Some(s) => s.woken().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(woken);
        if l.tasks.is_empty() {
            let sched = &run.sched;
            // Paused with work left: wait for the next request.
            if held && !sched.is_stopped() && sched.waiting() > 0 && steer.is_some() {
                let waited = async {
                    tokio::select! {
                        _ = &mut woken => {}
                        _ = cancel.cancelled() => {}
                    }
                };
                run.owner.serve_while(&ctx, waited).await;
                continue;
            }
            if cancel.is_cancelled() || ctx.halted() || sched.is_stopped() || sched.held_back() == 0
            {
                return Ok(());
            }
            if !next_batch(run, l, options).await {
                return Ok(());
            }
            continue;
        }
        // The tasks' changes are applied as they come; a task's end or a
        // request is the next decision.
        let joined = loop {
            tokio::select! {
                biased;
                Some(change) = run.owner.next() => {
                    run.owner.apply(&ctx, change);
                    // A slot lent (another story may start in it), or
                    // files a running story now holds.
                    if run.owner.has_asks() {
                        break None;
                    }
                }
                j = l.tasks.join_next() => break j,
                _ = &mut woken => break None,
            }
        };
        let Some(joined) = joined else {
            continue;
        };
        let (i, end) = joined.map_err(|e| EngineError::Internal(format!("story task: {e}")))?;
        // What the task sent before it ended comes first (its story's
        // events before those of the stories it blocks).
        run.owner.drain(&ctx);
        story_ended(run, l, i, end);
    }
}

/// Starts every story the scheduler hands out now, announcing each batch
/// as its first story starts.
fn spawn_ready(run: &mut Recovered, l: &mut Loop) {
    let ctx = &run.ctx;
    while let Some(i) = run.sched.next_ready() {
        let sched = &run.sched;
        let layer = sched.layer_of(i);
        if l.started_layers.insert(layer) {
            ctx.emit(Event::BatchStarted {
                batch: layer + 1,
                of: l.layer_count,
                stories: sched.layers()[layer]
                    .iter()
                    .filter(|&&j| sched.state(j) != NodeState::Blocked)
                    .map(|&j| run.ids[j].clone())
                    .collect(),
            });
        }
        // Node `i` is the plan's story `i`: prd.json's position `i`.
        let story = ctx.prd.lock().unwrap_or_else(|e| e.into_inner()).stories[i].clone();
        let earlier = run
            .owner
            .store
            .story(&story.id)
            .map_or(0, |s| s.attempts.len() as u32);
        let c = Arc::clone(ctx);
        l.tasks
            .spawn(async move { (i, story::run_story(c, story, earlier).await) });
    }
}

/// What the story tasks asked since the last look: slots lent (the
/// scheduler lets other stories run in them), files that conflicted.
fn take_asks(run: &mut Recovered, l: &mut Loop) {
    let position = |id: &str| run.ids.iter().position(|s| s == id);
    for ask in run.owner.take_asks() {
        match ask {
            Ask::Lend { id, until, resume } => {
                let Some(node) = position(&id) else {
                    let _ = resume.send(());
                    continue;
                };
                run.sched.lend(node);
                l.lent.push(Lent {
                    node,
                    until: until.iter().filter_map(|u| position(u)).collect(),
                    resume,
                });
            }
            Ask::Touches { id, files } => {
                if let Some(node) = position(&id) {
                    let keys: Vec<u32> = files.iter().map(|f| run.file_keys.key(f)).collect();
                    run.sched.add_files(node, &keys);
                }
            }
        }
    }
}

/// Gives a slot back to each waiting story none of whose stories runs
/// any more, while slots are free (before any new story starts).
fn resume_lent(run: &mut Recovered, l: &mut Loop) {
    let sched = &mut run.sched;
    let mut k = 0;
    while k < l.lent.len() {
        let w = &l.lent[k];
        let ended = w
            .until
            .iter()
            .all(|&u| sched.state(u) != NodeState::Running);
        if ended && sched.reclaim(w.node) {
            let _ = l.lent.remove(k).resume.send(());
        } else {
            k += 1;
        }
    }
}

/// A story's task ended: the scheduler learns how (a failure blocks its
/// dependents), and a batch whose last story ended is announced.
fn story_ended(run: &mut Recovered, l: &mut Loop, i: usize, end: StoryEnd) {
    // Stopped while it waited: its slot was lent, nothing to give back.
    l.lent.retain(|w| w.node != i);
    let (ctx, sched) = (&run.ctx, &mut run.sched);
    match end {
        StoryEnd::Merged => sched.complete(i),
        StoryEnd::Failed => {
            let blocked = sched.fail(i);
            ctx.state.blocked(sched, &run.ids, &blocked);
        }
        StoryEnd::Interrupted => {
            sched.release(i);
            sched.stop();
        }
    }
    let layer = sched.layer_of(i);
    if sched.layer_finished(layer) && l.finished_layers.insert(layer) {
        ctx.emit(Event::BatchFinished {
            batch: layer + 1,
            of: l.layer_count,
        });
    }
}

/// A batch boundary with work held back: whether the loop goes on into
/// the next batch (the mode's limit not reached and the pause setting, or
/// the user asked, says so). Raises the scheduler's limit when it does.
async fn next_batch(run: &mut Recovered, l: &Loop, options: &RunOptions) -> bool {
    let next_layer = run.limit;
    if run.limit >= run.mode_limit {
        return false;
    }
    let go_on = match &options.pause {
        Pause::Never => true,
        Pause::AfterBatch => false,
        Pause::Confirm(ask) => {
            let sched = &run.sched;
            let ids: Vec<String> = sched
                .layers()
                .get(next_layer)
                .map(|m| {
                    m.iter()
                        .filter(|&&j| sched.state(j) == NodeState::Waiting)
                        .map(|&j| run.ids[j].clone())
                        .collect()
                })
                .unwrap_or_default();
            let ask = Arc::clone(ask);
            let total = l.layer_count;
            let asked = tokio::task::spawn_blocking(move || ask(next_layer + 1, total, &ids));
            let ctx = Arc::clone(&run.ctx);
            run.owner.serve_while(&ctx, asked).await.unwrap_or(false)
        }
    };
    if go_on {
        run.limit += 1;
        run.sched.set_layer_limit(run.limit);
    }
    go_on
}

/// prd.json follows the run's changes (see the `persist` module).
fn flusher(ctx: &Arc<Ctx>) -> AbortOnDrop {
    let c = Arc::clone(ctx);
    AbortOnDrop(tokio::spawn(async move {
        loop {
            tokio::time::sleep(c.prd_writer.pause()).await;
            if c.prd_writer.pending() {
                let c = Arc::clone(&c);
                let _ = tokio::task::spawn_blocking(move || c.flush_prd()).await;
            }
        }
    }))
}
