//! Step (the merge queue's turn, with integration gating): the merge train.
//!
//! The stories waiting for the turn are merged in memory one onto the other
//! in the order they came (tip+A, tip+A+B, tip+A+B+C: Zuul's speculative
//! shape). Every candidate that is a new merge commit is checked out in a
//! scratch worktree and gated, all of them at once within `--gate-jobs`; a
//! fast-forward to a story's own work was gated as it is. The target then
//! moves once, to the end of the longest prefix whose candidates all
//! passed. The first failing candidate fails as `integration`, naming the
//! stories merged since its base and those ahead of it in the train; the
//! ones behind it are merged again without it onto the new tip and gated
//! again (the gate cache answers for trees it saw). A story that conflicts
//! leaves the train at once: the merge queue resolves or fails it.
//!
//! Only [`cascade_git::merge::advance_to`] moves the target, and only to a
//! tree that passed as merged: a process killed anywhere in a train leaves
//! the target at a gated tip, and `resume` redoes the stories not on it.

use std::sync::Arc;

use cascade_git::merge::{
    advance_to, branch_tip, merge_preview_onto, GroupMember, MergeError, MergeOptions, MergeOutcome,
};
use git2::Oid;

use super::integrate;
use super::merge::refused;
use super::{Failure, Stop};
use crate::ctx::Ctx;
use crate::events::Event;
use crate::merge_queue::{Landing, Waiting};
use crate::retry::FailureKind;

/// Gates and merges `waiting` (every story gets its answer), round after
/// round until no story is left behind a failing one.
pub(super) async fn run(ctx: &Arc<Ctx>, mut waiting: Vec<Waiting>) {
    while !waiting.is_empty() {
        waiting = round(ctx, waiting).await;
    }
}

/// A story in the train and where the train stands after it.
struct Car {
    waiting: Waiting,
    outcome: MergeOutcome,
    at: Oid,
}

/// What the gates said of one candidate.
enum Verdict {
    Passed,
    Failed(Failure),
    Interrupted,
}

/// One train: built, gated, its passing prefix landed. Returns the stories
/// behind the first failing candidate, to go again without it.
async fn round(ctx: &Arc<Ctx>, waiting: Vec<Waiting>) -> Vec<Waiting> {
    let Some((tip, train)) = build(ctx, waiting).await else {
        return Vec::new();
    };
    let verdicts = gate_all(ctx, tip, &train).await;
    let k = verdicts
        .iter()
        .position(|v| !matches!(v, Verdict::Passed))
        .unwrap_or(train.len());
    let mut cars = train.into_iter();
    let prefix: Vec<Car> = cars.by_ref().take(k).collect();
    let failing = cars.next();
    let behind: Vec<Waiting> = cars.map(|c| c.waiting).collect();
    land(ctx, tip, prefix).await;
    if let (Some(car), Some(verdict)) = (failing, verdicts.into_iter().nth(k)) {
        let landing = match verdict {
            _ if ctx.cancel.is_cancelled() => Landing::Interrupted,
            Verdict::Failed(f) => Landing::Failed(f),
            Verdict::Passed | Verdict::Interrupted => Landing::Interrupted,
        };
        let _ = car.waiting.reply.send(landing);
    }
    if ctx.cancel.is_cancelled() {
        for w in behind {
            let _ = w.reply.send(Landing::Interrupted);
        }
        return Vec::new();
    }
    behind
}

/// The train in memory on the target's tip; a story that conflicts (or
/// whose merge cannot be made) gets its answer now and leaves the train.
async fn build(ctx: &Arc<Ctx>, waiting: Vec<Waiting>) -> Option<(Oid, Vec<Car>)> {
    let members: Vec<GroupMember> = waiting.iter().map(|w| w.member.clone()).collect();
    let (paths, target) = (ctx.paths.clone(), ctx.target_branch.clone());
    let built = tokio::task::spawn_blocking(move || chain(&paths, &target, &members))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    let (tip, outcomes) = match built {
        Ok(built) => built,
        Err(e) => {
            for w in waiting {
                let f = Failure::new(FailureKind::Setup, format!("merge train: {e}"));
                let _ = w.reply.send(Landing::Failed(f));
            }
            return None;
        }
    };
    let mut train = Vec::with_capacity(waiting.len());
    let mut at = tip;
    for (waiting, outcome) in waiting.into_iter().zip(outcomes) {
        match outcome {
            Ok(MergeOutcome::Conflict { files }) => {
                let conflict = Ok(MergeOutcome::Conflict { files });
                let _ = waiting.reply.send(Landing::Merge(conflict));
            }
            Ok(outcome) => {
                at = outcome.new_tip().unwrap_or(at);
                train.push(Car {
                    waiting,
                    outcome,
                    at,
                });
            }
            Err(e) => {
                let _ = waiting.reply.send(Landing::Merge(Err(e)));
            }
        }
    }
    Some((tip, train))
}

/// The target's tip, and each member merged onto the tip the members
/// before it left (a conflict leaves that tip as it was).
fn chain(
    paths: &cascade_git::RepoPaths,
    target: &str,
    members: &[GroupMember],
) -> Result<(Oid, Vec<Result<MergeOutcome, MergeError>>), MergeError> {
    let tip = branch_tip(paths, target)?.ok_or_else(|| MergeError::NoSuchBranch {
        branch: target.to_string(),
    })?;
    let mut at = tip;
    let outcomes = members
        .iter()
        .map(|m| {
            let outcome = merge_preview_onto(paths, target, at, m, &MergeOptions::default());
            if let Ok(o) = &outcome {
                at = o.new_tip().unwrap_or(at);
            }
            outcome
        })
        .collect();
    Ok((tip, outcomes))
}

/// Every candidate that is a new merge commit gated at once (the gate
/// slots bound how many run); a verdict per car, in order.
async fn gate_all(ctx: &Arc<Ctx>, tip: Oid, train: &[Car]) -> Vec<Verdict> {
    let ids: Vec<String> = train.iter().map(|c| c.waiting.story.clone()).collect();
    let mut gating = tokio::task::JoinSet::new();
    for (i, car) in train.iter().enumerate() {
        if !matches!(car.outcome, MergeOutcome::Merged(_)) {
            continue;
        }
        let (ctx, gated, at) = (Arc::clone(ctx), car.waiting.gated.clone(), car.at);
        // What the candidate must fit with: the stories merged since its
        // base, and the ones ahead of it in this train.
        let mut with = integrate::merged_since(&ctx, &gated.story, &car.waiting.base).await;
        with.extend(ids[..i].iter().cloned());
        let members = ids[..=i].to_vec();
        gating.spawn(async move { (i, gate_one(&ctx, &gated, tip, at, members, with).await) });
    }
    let mut verdicts: Vec<Verdict> = train.iter().map(|_| Verdict::Passed).collect();
    while let Some(done) = gating.join_next().await {
        match done {
            Ok((i, verdict)) => verdicts[i] = verdict,
            // A gating task that panicked: its candidate is not known to pass.
            Err(e) => {
                if let Some(i) = verdicts.iter().position(|v| matches!(v, Verdict::Passed)) {
                    let why = format!("integration gating stopped: {e}");
                    verdicts[i] = Verdict::Failed(Failure::new(FailureKind::Setup, why));
                }
            }
        }
    }
    verdicts
}

/// One candidate's gates, announced by `integration_started` and
/// `integration_finished` with the stories gated together.
async fn gate_one(
    ctx: &Arc<Ctx>,
    gated: &crate::merge_queue::Gated,
    tip: Oid,
    at: Oid,
    members: Vec<String>,
    with: Vec<String>,
) -> Verdict {
    ctx.emit(Event::IntegrationStarted {
        story: gated.story.clone(),
        members: members.clone(),
        merged_since: with.clone(),
        target_branch: ctx.target_branch.clone(),
    });
    let report = match integrate::gate_merge(ctx, gated, tip, at).await {
        Ok(report) => report,
        Err(Stop::Failed(f)) => return Verdict::Failed(f),
        Err(Stop::Interrupted) => return Verdict::Interrupted,
    };
    let (failed, message) = super::gates::failed_required(&report);
    ctx.emit(Event::IntegrationFinished {
        story: gated.story.clone(),
        members,
        verdict: if report.passed { "passed" } else { "failed" }.to_string(),
        failed_gates: failed,
    });
    if report.passed {
        Verdict::Passed
    } else {
        Verdict::Failed(integrate::failure(
            &ctx.target_branch,
            &with,
            &message,
            &report,
        ))
    }
}

/// Moves the target to the end of the passing prefix and tells its stories.
async fn land(ctx: &Arc<Ctx>, tip: Oid, prefix: Vec<Car>) {
    let Some(end) = prefix.last().map(|c| c.at) else {
        return;
    };
    let moved = if end == tip {
        Ok(Ok(()))
    } else {
        let (paths, target) = (ctx.paths.clone(), ctx.target_branch.clone());
        tokio::task::spawn_blocking(move || advance_to(&paths, &target, tip, end)).await
    };
    for car in prefix {
        let landing = match &moved {
            Ok(Ok(())) => Landing::Merge(Ok(car.outcome)),
            Ok(Err(e)) => {
                ctx.halt_if_disk_full(&ctx.paths.common_dir, e);
                Landing::Failed(refused(e, &car.waiting.member.source_branch))
            }
            Err(e) => Landing::Failed(Failure::new(FailureKind::Setup, e.to_string())),
        };
        let _ = car.waiting.reply.send(landing);
    }
}
