//! The line of a merge train: its cars in the order they boarded, what
//! each was merged onto and where that leads, each one's gating, and the
//! target's tip they stand on.
//!
//! The chain is every car but those whose candidate failed (or whose
//! gating was stopped): each car is merged onto the candidate of the
//! nearest car ahead of it in the chain, or onto the tip. A car merged
//! onto anything else (the car it stood on failed, or landed) is stale and
//! [`Line::settle`] merges it again; a verdict is only taken for a car
//! whose candidate stands on the tip, so a failure is only charged to a
//! story once nothing unmerged is in its tree but its own work.

use std::collections::VecDeque;
use std::sync::Arc;

use cascade_git::merge::{advance_to, branch_tip, merge_preview_onto, MergeOptions, MergeOutcome};
use cascade_process::CancelToken;
use git2::Oid;
use tokio::sync::mpsc;

use super::{gate_one, Candidate, Verdict};
use crate::ctx::Ctx;
use crate::failure::Failure;
use crate::merge_queue::{Landing, Waiting};
use crate::retry::FailureKind;
use crate::steps::merge::refused;

/// The cars of one train, on the target's tip.
pub(super) struct Line {
    ctx: Arc<Ctx>,
    tip: Oid,
    cars: VecDeque<Car>,
    /// Each gating's verdict, by the gating's number (a stopped one's
    /// answer, if it sent one, names a gating no car has any more).
    verdicts: mpsc::UnboundedSender<(u64, Verdict)>,
    answers: mpsc::UnboundedReceiver<(u64, Verdict)>,
    gatings: u64,
}

/// A story in the line.
struct Car {
    waiting: Waiting,
    /// Its merge, once made.
    built: Option<Built>,
    state: State,
}

/// A car's merge: onto what, the outcome, and the commit it leads to.
struct Built {
    onto: Oid,
    outcome: MergeOutcome,
    at: Oid,
}

enum State {
    /// Not merged yet (boarded, or stale).
    Unbuilt,
    Gating(Gating),
    Done(Verdict),
}

/// A gating in progress: stopped by `stop`, over when `task` is.
struct Gating {
    number: u64,
    stop: CancelToken,
    task: tokio::task::JoinHandle<()>,
}

impl Car {
    /// Whether the cars behind it stand on its candidate.
    fn in_chain(&self) -> bool {
        !matches!(
            self.state,
            State::Done(Verdict::Failed(_) | Verdict::Stopped)
        )
    }

    fn answer(self, landing: Landing) {
        let _ = self.waiting.reply.send(landing);
    }
}

impl Line {
    /// A line of `boarding` on the target's tip (none, with every story
    /// told why, when the tip cannot be read).
    pub async fn on_target(ctx: &Arc<Ctx>, boarding: Vec<Waiting>) -> Option<Line> {
        let (paths, target) = (ctx.paths.clone(), ctx.target_branch.clone());
        let tip = tokio::task::spawn_blocking(move || tip_of(&paths, &target))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        let tip = match tip {
            Ok(tip) => tip,
            Err(e) => {
                for w in boarding {
                    let f = Failure::new(FailureKind::Setup, format!("merge train: {e}"));
                    let _ = w.reply.send(Landing::Failed(f));
                }
                return None;
            }
        };
        let (verdicts, answers) = mpsc::unbounded_channel();
        let mut line = Line {
            ctx: Arc::clone(ctx),
            tip,
            cars: VecDeque::new(),
            verdicts,
            answers,
            gatings: 0,
        };
        line.board(boarding);
        Some(line)
    }

    pub fn is_empty(&self) -> bool {
        self.cars.is_empty()
    }

    /// Stories at the back of the line (merged and gated by `settle`).
    pub fn board(&mut self, more: Vec<Waiting>) {
        self.cars.extend(more.into_iter().map(|waiting| Car {
            waiting,
            built: None,
            state: State::Unbuilt,
        }));
    }

    /// The next verdict of a gating (stale or not: see [`Line::record`]).
    pub async fn next_verdict(&mut self) -> Option<(u64, Verdict)> {
        self.answers.recv().await
    }

    /// A gating's verdict, for its car if it still has that gating.
    pub fn record(&mut self, done: Option<(u64, Verdict)>) {
        let Some((number, verdict)) = done else {
            return;
        };
        let car = self
            .cars
            .iter_mut()
            .find(|c| matches!(&c.state, State::Gating(g) if g.number == number));
        if let Some(car) = car {
            car.state = State::Done(verdict);
        }
    }

    /// Lands and answers what the head's verdicts allow and merges again
    /// what is stale, until the head is being gated or the line is empty.
    pub async fn settle(&mut self) {
        loop {
            self.land_head().await;
            self.rebuild().await;
            match self.cars.front().map(|c| &c.state) {
                None | Some(State::Gating(_)) => return,
                Some(_) => {}
            }
        }
    }

    /// Every gating stopped and every story told the run was cancelled.
    pub async fn interrupt(&mut self) {
        for i in 0..self.cars.len() {
            self.stop(i).await;
        }
        for car in self.cars.drain(..) {
            car.answer(Landing::Interrupted);
        }
    }

    /// The cars at the head whose candidates stand on the tip: the passing
    /// ones land together; a failing one is answered.
    async fn land_head(&mut self) {
        loop {
            let passed = self.passed_at_head();
            if passed > 0 {
                self.land(passed).await;
                continue;
            }
            let on_tip = |c: &Car| c.built.as_ref().is_some_and(|b| b.onto == self.tip);
            if !self
                .cars
                .front()
                .is_some_and(|c| on_tip(c) && !c.in_chain())
            {
                return;
            }
            let cancelled = self.ctx.cancel.is_cancelled();
            let Some(car) = self.cars.pop_front() else {
                return;
            };
            let landing = match car.state {
                State::Done(Verdict::Failed(f)) if !cancelled => Landing::Failed(f),
                _ => Landing::Interrupted,
            };
            let _ = car.waiting.reply.send(landing);
        }
    }

    /// How many cars at the head passed, each on the one before it and the
    /// first on the tip.
    fn passed_at_head(&self) -> usize {
        let mut at = self.tip;
        let mut n = 0;
        for car in &self.cars {
            match (&car.state, &car.built) {
                (State::Done(Verdict::Passed), Some(b)) if b.onto == at => {
                    at = b.at;
                    n += 1;
                }
                _ => break,
            }
        }
        n
    }

    /// Moves the target over the first `n` cars (at once) and tells their
    /// stories. A target that could not move is read again.
    async fn land(&mut self, n: usize) {
        let cars: Vec<Car> = self.cars.drain(..n).collect();
        // Every car taken is answered below, whatever happens here.
        let end = cars
            .iter()
            .rev()
            .find_map(|c| c.built.as_ref())
            .map_or(self.tip, |b| b.at);
        let (paths, target, tip) = (
            self.ctx.paths.clone(),
            self.ctx.target_branch.clone(),
            self.tip,
        );
        let moved = if end == tip {
            Ok(Ok(()))
        } else {
            tokio::task::spawn_blocking(move || advance_to(&paths, &target, tip, end)).await
        };
        match &moved {
            Ok(Ok(())) => self.tip = end,
            _ => self.read_tip().await,
        }
        for car in cars {
            let landing = match (&moved, car.built.as_ref()) {
                (Ok(Ok(())), Some(b)) => Landing::Merge(Ok(b.outcome.clone())),
                (Ok(Err(e)), _) => {
                    self.ctx.halt_if_disk_full(&self.ctx.paths.common_dir, e);
                    Landing::Failed(refused(e, &car.waiting.member.source_branch))
                }
                (Err(e), _) => Landing::Failed(Failure::new(FailureKind::Setup, e.to_string())),
                (Ok(Ok(())), None) => Landing::Interrupted,
            };
            car.answer(landing);
        }
    }

    /// The tip as the branch has it now (after a move that failed: someone
    /// else may have moved it); kept as it was when it cannot be read.
    async fn read_tip(&mut self) {
        let (paths, target) = (self.ctx.paths.clone(), self.ctx.target_branch.clone());
        if let Ok(Ok(tip)) = tokio::task::spawn_blocking(move || tip_of(&paths, &target)).await {
            self.tip = tip;
        }
    }

    /// Merges every car that is not on the candidate it should stand on
    /// (stopping its gating first) and starts its gating; a car that
    /// conflicts, or whose merge cannot be made, is answered and leaves.
    async fn rebuild(&mut self) {
        let mut onto = self.tip;
        let mut ahead: Vec<String> = Vec::new();
        let mut i = 0;
        while i < self.cars.len() {
            if self.cars[i].built.as_ref().map(|b| b.onto) != Some(onto) {
                self.stop(i).await;
                if let Err(landing) = self.build(i, onto, &ahead).await {
                    if let Some(car) = self.cars.remove(i) {
                        car.answer(landing);
                    }
                    continue;
                }
            }
            let car = &self.cars[i];
            if let (true, Some(b)) = (car.in_chain(), &car.built) {
                onto = b.at;
                ahead.push(car.waiting.story.clone());
            }
            i += 1;
        }
    }

    /// Car `i` merged onto `onto` and, when that is a new merge commit,
    /// its gating started; a fast-forward or a merge that changes nothing
    /// passes as it is. `ahead`: the unmerged stories it stands on.
    async fn build(&mut self, i: usize, onto: Oid, ahead: &[String]) -> Result<(), Landing> {
        let member = self.cars[i].waiting.member.clone();
        let (paths, target) = (self.ctx.paths.clone(), self.ctx.target_branch.clone());
        let merged = tokio::task::spawn_blocking(move || {
            merge_preview_onto(&paths, &target, onto, &member, &MergeOptions::default())
        })
        .await;
        let outcome = match merged {
            Err(e) => {
                let f = Failure::new(FailureKind::Setup, format!("merge train: {e}"));
                return Err(Landing::Failed(f));
            }
            Ok(Err(e)) => return Err(Landing::Merge(Err(e))),
            Ok(Ok(conflict @ MergeOutcome::Conflict { .. })) => {
                return Err(Landing::Merge(Ok(conflict)))
            }
            Ok(Ok(outcome)) => outcome,
        };
        let at = outcome.new_tip().unwrap_or(onto);
        let state = match outcome {
            MergeOutcome::Merged(_) => State::Gating(self.gate(i, at, ahead)),
            _ => State::Done(Verdict::Passed),
        };
        let car = &mut self.cars[i];
        car.built = Some(Built { onto, outcome, at });
        car.state = state;
        Ok(())
    }

    /// Starts gating car `i`'s candidate `at`; its verdict comes through
    /// `answers` (a gating that panicked fails its candidate).
    fn gate(&mut self, i: usize, at: Oid, ahead: &[String]) -> Gating {
        self.gatings += 1;
        let number = self.gatings;
        let w = &self.cars[i].waiting;
        let mut members = ahead.to_vec();
        members.push(w.story.clone());
        let candidate = Candidate {
            gated: w.gated.clone(),
            base: w.base.clone(),
            tip: self.tip,
            at,
            members,
        };
        let stop = CancelToken::new();
        let (ctx, tx, token) = (Arc::clone(&self.ctx), self.verdicts.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let gating = tokio::spawn(async move { gate_one(&ctx, candidate, &token).await });
            let verdict = gating.await.unwrap_or_else(|e| {
                let why = format!("integration gating stopped: {e}");
                Verdict::Failed(Failure::new(FailureKind::Setup, why))
            });
            let _ = tx.send((number, verdict));
        });
        Gating { number, stop, task }
    }

    /// Car `i`'s gating, if it has one, stopped and over (its gates killed,
    /// its scratch worktree gone): the car is to be merged again.
    async fn stop(&mut self, i: usize) {
        let car = &mut self.cars[i];
        car.built = None;
        if let State::Gating(g) = std::mem::replace(&mut car.state, State::Unbuilt) {
            g.stop.cancel();
            let _ = g.task.await;
        }
    }
}

/// The target's tip (a target without commits is an error here: the
/// merge queue only runs once a story's base came from it).
fn tip_of(
    paths: &cascade_git::RepoPaths,
    target: &str,
) -> Result<Oid, cascade_git::merge::MergeError> {
    branch_tip(paths, target)?.ok_or_else(|| cascade_git::merge::MergeError::NoSuchBranch {
        branch: target.to_string(),
    })
}
