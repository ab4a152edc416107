//! The end of a run: the pool's idle worktrees go, the run's status is
//! decided and written with the whole state, merged stories' branches and
//! what the executor keeps for them are cleaned up, remote uploads get a
//! bounded wait, and `run_finished` carries the per-story summary.

use std::sync::Arc;
use std::time::Instant;

use cascade_process::CancelToken;

use super::drive::Driven;
use super::run::Recovered;
use super::{Engine, RunSummary};
use crate::config::{Mode, RunOptions};
use crate::ctx::Ctx;
use crate::error::EngineError;
use crate::events::{Event, RunStatus, StoryCounts};
use crate::state::StoryStatus;

/// The epilogue of [`Engine::start`].
pub(super) async fn finish(
    engine: &Engine,
    mut run: Recovered,
    driven: Driven,
    options: &RunOptions,
    cancel: &CancelToken,
    started: Instant,
) -> Result<RunSummary, EngineError> {
    let ctx = Arc::clone(&run.ctx);
    // The pool's idle worktrees go (merged stories leave nothing behind).
    let drained = {
        let c = Arc::clone(&ctx);
        tokio::task::spawn_blocking(move || c.pool.drain())
    };
    let notes = run.owner.serve_while(&ctx, drained).await;
    for message in notes.unwrap_or_default() {
        ctx.emit(Event::Notice { message });
    }
    run.owner.drain(&ctx);
    let interrupted = cancel.is_cancelled() || ctx.halted();
    let st = &run.owner.store;
    let (counts, summary) = (st.counts(), super::summaries(st));
    let status = run_status(&ctx, &driven, interrupted, &counts);
    if status == RunStatus::Paused {
        ctx.emit(Event::RunPaused {
            reason: paused_reason(options.mode),
        });
    }
    crate::spend::report_unknown_spend(&ctx, &run.owner.store);
    ctx.flush_prd();
    ctx.update_state(move |st| st.status = status.into());
    run.owner.finish(&ctx);
    // The state (on disk now) records every merge: the branches of
    // complete stories go (also those an interrupted run left).
    let branches: Vec<String> = run
        .owner
        .store
        .stories
        .iter()
        .filter(|s| s.status == StoryStatus::Complete)
        .map(|s| crate::ctx::story_branch(&engine.config, &s.id))
        .collect();
    run.owner.serve_while(&ctx, clean_up(&ctx, branches)).await;
    let duration_ms = started.elapsed().as_millis() as u64;
    let finished = Event::RunFinished {
        status,
        stories: counts,
        duration_ms,
        summary,
        integration: Some(ctx.options.integration.as_str().to_string()),
    };
    run.owner.announce(&ctx, &finished);
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
    if let Some(red) = driven.red_base {
        return Err(red);
    }
    Ok(RunSummary {
        run_id: run.run_id,
        status,
        counts,
        stories: summary,
        duration_ms,
    })
}

/// How the run ended, from the loop's end and the stories' counts.
fn run_status(ctx: &Ctx, driven: &Driven, interrupted: bool, counts: &StoryCounts) -> RunStatus {
    let over_budget = ctx.control.budget.exhausted().is_some() && counts.pending > 0;
    if driven.red_base.is_some() && !interrupted {
        RunStatus::Failed
    } else if interrupted {
        RunStatus::Interrupted
    } else if over_budget {
        RunStatus::BudgetExhausted
    } else if counts.failed > 0 || counts.blocked > 0 {
        RunStatus::Failed
    } else if counts.pending > 0 {
        RunStatus::Paused
    } else {
        RunStatus::Completed
    }
}

fn paused_reason(mode: Mode) -> String {
    match mode {
        Mode::BatchComplete => "the batch is complete (--mode batch-complete)".into(),
        Mode::MaxIterations(n) => format!("reached --max-iterations {n}"),
        Mode::UntilComplete => "stopped after the batch; run `cascade resume` to continue".into(),
    }
}

/// What the run leaves behind once its state is on disk: `branches` (of
/// complete stories), what the executor keeps elsewhere for merged
/// stories, remote gate-cache uploads still running (a short, bounded wait).
async fn clean_up(ctx: &Arc<Ctx>, branches: Vec<String>) {
    let c = Arc::clone(ctx);
    let deleted = tokio::task::spawn_blocking(move || {
        cascade_git::worktree::delete_merged_branches(&c.paths, &branches, &c.target_branch)
    })
    .await;
    if let Ok(Err(e)) = deleted {
        ctx.emit(Event::Notice {
            message: format!("could not delete merged branches: {e}"),
        });
    }
    if let Some(executor) = &ctx.options.executor {
        for message in executor.0.finish(&ctx.target_branch).await {
            ctx.emit(Event::Notice { message });
        }
    }
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
}
