//! Step (the merge queue's turn, with integration gating): the merge train.
//!
//! Zuul's dependent pipeline. The stories waiting for the turn form a line
//! in the order they came, each merged in memory onto the candidate of the
//! one ahead of it (tip+A, tip+A+B, tip+A+B+C), and every candidate that
//! is a new merge commit is checked out in a scratch worktree and gated at
//! once, within `--gate-jobs`; a fast-forward to a story's own work was
//! gated as it is. A story that reaches the queue while the line is being
//! gated boards it there and then, on top of the last candidate, instead of
//! waiting for the gates ahead of it to end: a run whose stories finish a
//! little apart pays one integration gate, not one per group that met in
//! the queue.
//!
//! The target moves as soon as the stories at the head of the line have
//! passed, to the end of them. A candidate that fails leaves the chain:
//! the stories behind it are merged again without it and gated again, any
//! gating of theirs in progress stopped first (its gates killed, its
//! scratch worktree gone). It fails as `integration` once it is at the
//! head, or is gated again if a story ahead of it fails too, since its
//! failure may have been theirs. A story that conflicts leaves the line at
//! once: the merge queue resolves or fails it (see the `line` module).
//!
//! Only [`cascade_git::merge::advance_to`] moves the target, and only to a
//! tree that passed as merged onto the target's tip: a process killed
//! anywhere in a train leaves the target at a gated tip, and `resume`
//! redoes the stories not on it.

mod line;

use std::sync::Arc;

use cascade_process::CancelToken;
use git2::Oid;

use super::{integrate, Failure, Stop};
use crate::ctx::Ctx;
use crate::events::Event;
use crate::merge_queue::{Gated, Landing, Waiting};
use line::Line;

/// Gates and merges `first` and every story that reaches the queue while
/// they are gated (each gets its answer), until the line is empty and no
/// one waits, or a conflict's resolution waits for the turn.
pub(super) async fn run(ctx: &Arc<Ctx>, first: Vec<Waiting>) {
    let mut boarding = first;
    while !boarding.is_empty() {
        if ctx.cancel.is_cancelled() {
            for w in boarding {
                let _ = w.reply.send(Landing::Interrupted);
            }
            return;
        }
        let Some(mut line) = Line::on_target(ctx, boarding).await else {
            return;
        };
        drive(ctx, &mut line).await;
        boarding = if ctx.merge_queue.may_board() {
            super::merge::take_waiting(ctx)
        } else {
            Vec::new()
        };
    }
}

/// The line, until it is empty: land what passed at its head, rebuild
/// what a failure ahead invalidated, then wait for a verdict, a story
/// boarding, or the run's end.
async fn drive(ctx: &Arc<Ctx>, line: &mut Line) {
    let queue = &ctx.merge_queue;
    loop {
        line.settle().await;
        if line.is_empty() {
            return;
        }
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => {
                line.interrupt().await;
                return;
            }
            done = line.next_verdict() => line.record(done),
            _ = queue.arrived.notified(), if queue.may_board() => {
                line.board(super::merge::take_waiting(ctx));
            }
        }
    }
}

/// What the gates said of one candidate.
enum Verdict {
    Passed,
    Failed(Failure),
    /// Its gating was stopped: the run was cancelled, or a story ahead of
    /// it failed, so its tree is not the one to merge.
    Stopped,
}

/// One candidate: the stories in its tree that are not on the target yet
/// (`members`, in line order, ending with its own) and what it must fit
/// with (the stories merged since its base, and those ahead of it).
struct Candidate {
    gated: Gated,
    base: String,
    tip: Oid,
    at: Oid,
    members: Vec<String>,
}

/// One candidate's gates until `stop` fires, announced by
/// `integration_started` and `integration_finished` with the stories
/// gated together (verdict `superseded` for a gating a failure ahead
/// stopped; none when the run was cancelled).
async fn gate_one(ctx: &Arc<Ctx>, c: Candidate, stop: &CancelToken) -> Verdict {
    let story = c.gated.story.clone();
    let mut with = integrate::merged_since(ctx, &story, &c.base).await;
    with.extend(c.members.iter().filter(|m| **m != story).cloned());
    ctx.emit(Event::IntegrationStarted {
        story: story.clone(),
        members: c.members.clone(),
        merged_since: with.clone(),
        target_branch: ctx.target_branch.clone(),
    });
    let report = match integrate::gate_merge(ctx, &c.gated, c.tip, c.at, stop).await {
        Ok(report) => report,
        Err(Stop::Failed(f)) => return Verdict::Failed(f),
        Err(Stop::Interrupted) => return Verdict::Stopped,
    };
    if ctx.cancel.is_cancelled() {
        return Verdict::Stopped;
    }
    let (failed, message) = super::gates::failed_required(&report);
    let verdict = if stop.is_cancelled() {
        Verdict::Stopped
    } else if report.passed {
        Verdict::Passed
    } else {
        let f = integrate::failure(&ctx.target_branch, &with, &message, &report);
        Verdict::Failed(f)
    };
    let (name, failed) = match &verdict {
        Verdict::Stopped => ("superseded", Vec::new()),
        Verdict::Passed => ("passed", failed),
        Verdict::Failed(_) => ("failed", failed),
    };
    ctx.emit(Event::IntegrationFinished {
        story,
        members: c.members,
        verdict: name.to_string(),
        failed_gates: failed,
    });
    verdict
}
