//! A race round: every contestant of a racing story (see `crate::race`)
//! runs as an attempt of its own, in its own worktree on its own branch
//! (`<story branch>/race-<name>`), through the same steps as any attempt
//! (agent, commit, verify, gates, review when asked), up to `--parallel`
//! of them at once. In the fleet each contestant is a job of its own
//! (`steps::remote`): a worker runs those steps and its commit is fetched
//! onto the contestant's branch. The rule picks the winner among those that passed;
//! only the winner goes to the merge queue. The losers' worktrees go back
//! to the pool with their branches kept (deleted with `--race-keep none`).
//!
//! A round is one step of the story's retry loop (the `story` module):
//! when no contestant passes, the story retries as usual and every
//! contestant's next prompt carries its own previous failure. Every
//! contestant's tokens and cost are its attempt's, so the story's and the
//! run's spend count them all; with a story budget (`--max-story-cost`, a
//! story's `budget`), a contestant whose start would take the story past
//! it (its spend so far plus the costliest contestant's cost this round)
//! is not started, and its `race_contestant_finished` says so.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cascade_agents::{Phase, Resolver};
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::commit::Committed;
use super::prepare_worktree::Worktree;
use super::remote::RemoteWork;
use super::{Attempt, AttemptEnd, Failure, Stop};
use crate::ctx::Ctx;
use crate::events::{Event, GateSummary};
use crate::race::{Contestant, ContestantStatus, RaceKeep, RaceRecord, RaceSpec, RaceUntil, Score};
use crate::retry::FailureKind;
use crate::state::{now_rfc3339, RunState, INTERRUPTED};

/// A racing story's contestants and what each one's last attempt failed with.
pub(crate) struct Race {
    spec: RaceSpec,
    /// Decided by the first round (`N` runs repeat the resolved agent).
    contestants: Vec<Contestant>,
    previous: Vec<Option<Failure>>,
}

/// What a round came to, for the story's loop.
pub(crate) struct Round {
    /// The winner's agent, or the agent the failure is charged to.
    pub agent: String,
    /// The fleet worker that ran the winner (fleet runs).
    pub worker: Option<String>,
    pub end: AttemptEnd,
    /// The attempt the end belongs to (the winner's, or the first failure's).
    pub number: u32,
    /// Attempt numbers the round used (one per contestant).
    pub used: u32,
}

/// One contestant's run.
enum Ran<'a> {
    NotStarted {
        index: usize,
        why: String,
    },
    Done {
        index: usize,
        attempt: Box<Attempt<'a>>,
        /// Boxed: a finished contestant's work is large beside a refusal.
        result: Box<Result<Work, Stop>>,
        duration_ms: u64,
    },
}

/// What a contestant that passed every step made: here, in a worktree of
/// this machine; or by a fleet worker, fetched onto its branch.
enum Work {
    Local(Worktree, Committed),
    Remote(RemoteWork),
}

impl Work {
    /// Its base, its commit, and a checkout of the repository that has both.
    fn span(&self, ctx: &Ctx) -> (PathBuf, String, String) {
        match self {
            Work::Local(wt, c) => (wt.path.clone(), wt.base.clone(), c.commit.clone()),
            Work::Remote(w) => (
                ctx.paths.workdir.clone(),
                w.base.clone(),
                w.committed.commit.clone(),
            ),
        }
    }
}

/// A contestant that passed every step, waiting for the rule.
struct Passed<'a> {
    index: usize,
    attempt: Box<Attempt<'a>>,
    work: Work,
    score: Score,
}

impl Race {
    /// The race of `story`, when it races (here or in the fleet: there
    /// every contestant is a job of its own).
    pub fn for_story(ctx: &Ctx, story: &cascade_plan::Story) -> Option<Race> {
        // Checked before the run started (`crate::race::check`).
        let spec = crate::race::story_spec(story, &ctx.options.race).ok()??;
        Some(Race {
            spec,
            contestants: Vec::new(),
            previous: Vec::new(),
        })
    }

    /// Runs one round from `base` (the story's attempt as its loop made
    /// it: number, phase, slot); `held` gets the winner's worktree once it
    /// merged (the story's loop returns it to the pool).
    pub async fn round(&mut self, mut base: Attempt<'_>, held: &mut Option<PathBuf>) -> Round {
        let ctx = base.ctx;
        let id = base.id().to_string();
        if self.contestants.is_empty() {
            let resolved = Resolver::new(&ctx.agents, &ctx.detector, ctx.overrides())
                .resolve(base.story, Phase::Implementation);
            let agent = match (&self.spec, resolved) {
                (RaceSpec::Runs(_), Err(e)) => {
                    let f = Failure::new(FailureKind::AgentUnavailable, e.to_string());
                    return Round {
                        agent: base.agent.clone(),
                        worker: None,
                        end: AttemptEnd::Failed(f),
                        number: base.number,
                        used: 1,
                    };
                }
                (_, Ok(a)) => a.agent,
                (_, Err(_)) => String::new(),
            };
            self.contestants = crate::race::contestants(&self.spec, &agent);
            self.previous = vec![None; self.contestants.len()];
        }
        let n = self.contestants.len();
        let branches: Vec<String> = self
            .contestants
            .iter()
            .map(|c| crate::race::branch(base.branch, &c.name))
            .collect();
        ctx.emit(Event::RaceStarted {
            story: id.clone(),
            attempt: base.number,
            contestants: self.contestants.iter().map(|c| c.name.clone()).collect(),
            branches: branches.clone(),
            until: ctx.options.race.until,
            keep: ctx.options.race.keep,
        });
        let record =
            RaceRecord::started(&ctx.options.race, &self.contestants, &branches, base.number);
        ctx.update_story(&id, move |s| s.race = Some(record));
        let slot = base.slot.take();
        let mut helds: Vec<Option<PathBuf>> = vec![None; n];
        let (passed, failures, interrupted) = self.run_all(&base, &branches, &mut helds).await;
        let ranked = crate::race::rank(passed.iter().map(|p| p.score.clone()).collect());
        let Some((ranked, reason)) = ranked else {
            drop(passed);
            give_back(ctx, &mut helds, &[]).await;
            return self.lost(&base, failures, interrupted);
        };
        let Some(winner) = passed.into_iter().find(|p| p.score.name == ranked[0].name) else {
            give_back(ctx, &mut helds, &[]).await;
            return self.lost(&base, failures, interrupted);
        };
        let runners_up: Vec<String> = ranked[1..].iter().map(|s| s.name.clone()).collect();
        let losers: Vec<String> = (0..n)
            .filter(|i| *i != winner.index)
            .map(|i| branches[i].clone())
            .collect();
        let won_branch = branches[winner.index].clone();
        let b = won_branch.clone();
        let (w, why, others) = (
            winner.score.name.clone(),
            reason.clone(),
            runners_up.clone(),
        );
        ctx.update_story(&id, move |s| {
            s.branch = Some(b);
            if let Some(r) = s.race.as_mut() {
                r.winner = Some(w);
                r.reason = Some(why);
                r.runners_up = others;
            }
        });
        ctx.emit(Event::RaceWon {
            story: id.clone(),
            winner: winner.score.name.clone(),
            agent: winner.attempt.agent.clone(),
            attempt: winner.attempt.number,
            branch: won_branch,
            reason,
            runners_up,
        });
        let mine = helds[winner.index].take();
        give_back(ctx, &mut helds, &losers).await;
        drop(slot);
        let Passed {
            index,
            mut attempt,
            work,
            ..
        } = winner;
        let merged = match (&work, &ctx.options.executor) {
            (Work::Remote(w), Some(executor)) => {
                super::remote::merge_work(&mut attempt, executor, w).await
            }
            (Work::Local(wt, commit), _) => super::merge::run(&attempt, wt, commit).await,
            (Work::Remote(_), None) => Err(Stop::Failed(Failure::new(
                FailureKind::Setup,
                "a fleet contestant's work without the fleet to merge it".to_string(),
            ))),
        };
        let (agent, number, worker) = (
            attempt.agent.clone(),
            attempt.number,
            attempt.worker.clone(),
        );
        drop((attempt, work));
        let end = match merged {
            Ok(m) => {
                *held = mine;
                AttemptEnd::Merged {
                    commit: m.commit,
                    fast_forward: m.fast_forward,
                }
            }
            Err(stop) => {
                give_back(ctx, &mut [mine], &[]).await;
                match stop {
                    // The winner's merge failed (a conflict no agent
                    // resolved, integration): its next prompt says so.
                    Stop::Failed(f) => {
                        self.previous[index] = Some(f.clone().charged_to(&agent));
                        AttemptEnd::Failed(f)
                    }
                    Stop::Interrupted => AttemptEnd::Interrupted,
                }
            }
        };
        Round {
            agent,
            worker,
            end,
            number,
            used: n as u32,
        }
    }

    /// Runs every contestant (up to `--parallel` at once; with
    /// `--race-until first` the others stop as soon as one passes).
    /// Returns those that passed, the failures by contestant, and whether
    /// the run is being cancelled.
    async fn run_all<'a>(
        &'a self,
        base: &Attempt<'a>,
        branches: &'a [String],
        helds: &mut [Option<PathBuf>],
    ) -> (Vec<Passed<'a>>, Vec<Option<Failure>>, bool) {
        let ctx = base.ctx;
        let id = base.id();
        let n = self.contestants.len();
        let permits = tokio::sync::Semaphore::new(ctx.options.parallel.max(1));
        // The costliest contestant of the round so far: what one more costs.
        let estimate = Mutex::new(0.0f64);
        let mut running = FuturesUnordered::new();
        for (index, held) in helds.iter_mut().enumerate() {
            let attempt = self.contestant_attempt(base, branches, index);
            let (permits, estimate) = (&permits, &estimate);
            running.push(async move {
                let _permit = permits.acquire().await;
                let guess = estimate.lock().map_or(0.0, |e| *e);
                if let Some(why) = over_budget(ctx, id, guess).await {
                    return Ran::NotStarted { index, why };
                }
                let mut attempt = Box::new(attempt);
                let started = Instant::now();
                let result = match &ctx.options.executor {
                    Some(executor) => super::remote::work(&mut attempt, executor)
                        .await
                        .map(Work::Remote),
                    None => super::checked_work(&mut attempt, held)
                        .await
                        .map(|(wt, c)| Work::Local(wt, c)),
                };
                let cost = cost_of(ctx, id, attempt.number).await;
                if let (Some(c), Ok(mut e)) = (cost, estimate.lock()) {
                    *e = e.max(c);
                }
                Ran::Done {
                    index,
                    attempt,
                    result: Box::new(result),
                    duration_ms: started.elapsed().as_millis() as u64,
                }
            });
        }
        let mut passed = Vec::new();
        let mut failures: Vec<Option<Failure>> = vec![None; n];
        let mut finished = vec![false; n];
        let mut interrupted = false;
        // In the fleet, `--race-until first` cannot stop a worker's job:
        // the others are waited for (so the coordinator records what their
        // workers pushed, and cleans it up) and count as stopped.
        let mut decided = false;
        while let Some(ran) = running.next().await {
            if decided {
                continue;
            }
            match ran {
                Ran::NotStarted { index, why } => {
                    finished[index] = true;
                    self.announce(
                        base,
                        index,
                        &branches[index],
                        ContestantStatus::NotStarted,
                        None,
                        &why,
                    );
                    failures[index] = Some(Failure::new(FailureKind::Budget, why));
                }
                Ran::Done {
                    index,
                    attempt,
                    result,
                    duration_ms,
                } => {
                    finished[index] = true;
                    match *result {
                        Ok(work) => {
                            let score = self.score(&attempt, index, &work, passed.len());
                            let (score, verdict) = score.await;
                            let (_, from, to) = work.span(ctx);
                            self.announce_passed(&attempt, &branches[index], &score, duration_ms);
                            self.keep_passed(&attempt, &score, verdict, (from, to));
                            passed.push(Passed {
                                index,
                                attempt,
                                work,
                                score,
                            });
                            if ctx.options.race.until == RaceUntil::First {
                                if ctx.options.executor.is_none() {
                                    break;
                                }
                                decided = true;
                            }
                        }
                        Err(Stop::Failed(f)) => {
                            record(ctx, id, attempt.number, Some(&f), duration_ms);
                            self.announce(
                                base,
                                index,
                                &branches[index],
                                ContestantStatus::Failed,
                                Some(&f),
                                &f.error,
                            );
                            failures[index] = Some(f);
                        }
                        Err(Stop::Interrupted) => interrupted = true,
                    }
                }
            }
        }
        // Dropping the others stops them: their agents and gates are killed
        // with their process groups.
        drop(running);
        self.stop_unfinished(base, branches, &finished, interrupted);
        (passed, failures, interrupted || ctx.cancel.is_cancelled())
    }

    /// Contestant `index`'s attempt of the round that `base` starts.
    fn contestant_attempt<'a>(
        &'a self,
        base: &Attempt<'a>,
        branches: &'a [String],
        index: usize,
    ) -> Attempt<'a> {
        Attempt {
            ctx: base.ctx,
            story: base.story,
            branch: &branches[index],
            number: base.number + index as u32,
            max: base.max + self.contestants.len() as u32 - 1,
            phase: match self.previous[index] {
                Some(_) => Phase::Retry,
                None => base.phase,
            },
            previous: self.previous[index].as_ref(),
            agent: self.contestants[index].agent.clone(),
            env: base.env,
            worker: None,
            job: None,
            slot: None,
            contestant: Some(self.contestants[index].agent.clone()),
        }
    }

    /// The contestants that did not finish: their attempts interrupted,
    /// and (unless the run is stopping) announced as stopped by a winner.
    fn stop_unfinished(
        &self,
        base: &Attempt<'_>,
        branches: &[String],
        finished: &[bool],
        interrupted: bool,
    ) {
        let (ctx, id) = (base.ctx, base.id());
        for index in (0..finished.len()).filter(|i| !finished[*i]) {
            let number = base.number + index as u32;
            ctx.update_story(id, move |s| {
                if let Some(r) = s.attempt_mut(number).filter(|r| r.outcome.is_none()) {
                    r.outcome = Some(INTERRUPTED.into());
                    r.finished_at = Some(now_rfc3339());
                }
            });
            if !interrupted {
                let why = "stopped: another contestant passed first (--race-until first)";
                self.announce(
                    base,
                    index,
                    &branches[index],
                    ContestantStatus::Stopped,
                    None,
                    why,
                );
            }
        }
    }

    /// Nobody won: the round fails with the first contestant's failure
    /// (each contestant's own is kept for its next prompt).
    fn lost(
        &mut self,
        base: &Attempt<'_>,
        failures: Vec<Option<Failure>>,
        interrupted: bool,
    ) -> Round {
        let used = self.contestants.len() as u32;
        let mut first: Option<(usize, Failure)> = None;
        for (index, f) in failures.into_iter().enumerate() {
            if let Some(f) = f {
                self.previous[index] = Some(f.clone().charged_to(&self.contestants[index].agent));
                first.get_or_insert((index, f));
            }
        }
        let end = match first.clone() {
            _ if interrupted => AttemptEnd::Interrupted,
            Some((_, f)) => AttemptEnd::Failed(f),
            None => AttemptEnd::Interrupted,
        };
        let index = first.map_or(0, |(i, _)| i);
        Round {
            agent: self.contestants[index].agent.clone(),
            worker: None,
            end,
            number: base.number + index as u32,
            used,
        }
    }

    /// What the rule knows of a contestant that passed.
    async fn score(
        &self,
        a: &Attempt<'_>,
        index: usize,
        work: &Work,
        finished: usize,
    ) -> (Score, Option<String>) {
        let (dir, from, to) = work.span(a.ctx);
        let lines =
            tokio::task::spawn_blocking(move || cascade_git::diff::lines_changed(&dir, &from, &to))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(u64::MAX);
        let (id, number) = (a.id().to_string(), a.number);
        let judged = match work {
            // What the worker judged.
            Work::Remote(w) => Some(w.judged.clone()),
            // What its own steps noted in its contestant record (the
            // story-level fields may be another contestant's by now).
            Work::Local(..) => {
                let id = id.clone();
                a.ctx
                    .state
                    .read(move |st| {
                        let c = st.story(&id)?.race.as_ref()?;
                        let c = c.contestants.iter().find(|c| c.attempt == number)?;
                        Some(crate::state::Judged {
                            verdict: c.verdict.clone(),
                            findings: c.findings.unwrap_or(0),
                        })
                    })
                    .await
                    .flatten()
            }
        };
        let judged = judged.unwrap_or_default();
        let cost_usd = cost_of(a.ctx, &id, number).await;
        let score = Score {
            name: self.contestants[index].name.clone(),
            review_passed: judged.review_passed(),
            findings: judged.findings,
            lines,
            cost_usd,
            finished,
        };
        (score, judged.verdict)
    }

    /// A passed contestant in the story's race record: its verdict, gates,
    /// size, cost and the work its branch holds.
    fn keep_passed(
        &self,
        a: &Attempt<'_>,
        score: &Score,
        verdict: Option<String>,
        (from, to): (String, String),
    ) {
        let gates = gates_of(a.ctx, a.id(), a.number);
        let (name, score) = (score.name.clone(), score.clone());
        a.ctx.update_story(a.id(), move |s| {
            if let Some(c) = s.race.as_mut().and_then(|r| r.contestant_mut(&name)) {
                c.status = ContestantStatus::Passed;
                c.verdict = verdict;
                c.findings = Some(score.findings);
                c.gates = gates;
                c.lines_changed = (score.lines != u64::MAX).then_some(score.lines);
                c.cost_usd = score.cost_usd;
                c.base = Some(from);
                c.commit = Some(to);
            }
        });
    }

    fn announce_passed(&self, a: &Attempt<'_>, branch: &str, score: &Score, duration_ms: u64) {
        // "lost" until the rule says otherwise: the story's loop records
        // the winner's attempt as passed once it merged.
        record_outcome(a.ctx, a.id(), a.number, "lost", duration_ms);
        a.ctx.emit(Event::RaceContestantFinished {
            story: a.id().to_string(),
            contestant: score.name.clone(),
            agent: a.agent.clone(),
            attempt: a.number,
            branch: branch.to_string(),
            status: ContestantStatus::Passed,
            error_type: None,
            error: None,
            lines_changed: (score.lines != u64::MAX).then_some(score.lines),
            findings: Some(score.findings),
            review_passed: Some(score.review_passed),
            cost_usd: score.cost_usd,
        });
    }

    fn announce(
        &self,
        base: &Attempt<'_>,
        index: usize,
        branch: &str,
        status: ContestantStatus,
        failure: Option<&Failure>,
        why: &str,
    ) {
        let number = base.number + index as u32;
        let story = base.id().to_string();
        let mut finished = Event::RaceContestantFinished {
            story: story.clone(),
            contestant: self.contestants[index].name.clone(),
            agent: self.contestants[index].agent.clone(),
            attempt: number,
            branch: branch.to_string(),
            status,
            error_type: failure.map(|f| f.kind),
            error: Some(why.to_string()),
            lines_changed: None,
            findings: None,
            review_passed: None,
            cost_usd: None,
        };
        let (name, kept) = (self.contestants[index].name.clone(), status);
        let (kind, error) = (failure.map(|f| f.kind), why.to_string());
        let gates = gates_of(base.ctx, &story, number);
        base.ctx.update_story(&story, move |s| {
            let cost = s
                .attempts
                .iter()
                .rev()
                .find(|r| r.attempt == number)
                .and_then(|r| r.cost_usd);
            if let Some(c) = s.race.as_mut().and_then(|r| r.contestant_mut(&name)) {
                c.status = kept;
                c.error_type = kind;
                c.error = Some(error);
                c.gates = gates;
                c.cost_usd = cost;
            }
        });
        // The cost its attempt's record has when the event's turn comes.
        base.ctx.emit_from(move |st| {
            if let Event::RaceContestantFinished { cost_usd, .. } = &mut finished {
                *cost_usd = cost_in(st, &story, number);
            }
            finished
        });
    }
}

/// The gates attempt `number` of story `id` ran, from the results the
/// gates step kept (none: it stopped before the gates).
fn gates_of(ctx: &Ctx, id: &str, number: u32) -> Vec<GateSummary> {
    let path = super::gates::gate_report_path(&ctx.artifacts_dir, id, number);
    let report: Option<cascade_gates::GateReport> = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    report
        .map(|r| r.gates.iter().map(GateSummary::of).collect())
        .unwrap_or_default()
}

/// Why a contestant may not start: the story's spend so far plus `guess`
/// (what one contestant costs) would pass its budget.
async fn over_budget(ctx: &Ctx, id: &str, guess: f64) -> Option<String> {
    let max = ctx.control.budget.story_limit(id)?;
    let story = id.to_string();
    let spent = ctx
        .state
        .read(move |st| crate::control::budget::spend(st, Some(&story)).known_usd)
        .await
        .unwrap_or(0.0);
    (spent >= max || spent + guess > max).then(|| {
        format!(
            "not started: story '{id}' has spent ${spent:.4} of its ${max:.2} budget and a contestant costs about ${guess:.4}"
        )
    })
}

/// The cost recorded for attempt `number` of story `id` (asked of the run's loop).
async fn cost_of(ctx: &Ctx, id: &str, number: u32) -> Option<f64> {
    let id = id.to_string();
    ctx.state
        .read(move |st| cost_in(st, &id, number))
        .await
        .flatten()
}

/// The cost `st` records for attempt `number` of story `id`.
fn cost_in(st: &RunState, id: &str, number: u32) -> Option<f64> {
    st.story(id)?
        .attempts
        .iter()
        .rev()
        .find(|r| r.attempt == number)?
        .cost_usd
}

/// A failed contestant's attempt record.
fn record(ctx: &Ctx, id: &str, number: u32, failure: Option<&Failure>, duration_ms: u64) {
    record_outcome(ctx, id, number, "failed", duration_ms);
    if let Some(f) = failure {
        let (error, kind) = (f.error.clone(), f.kind);
        ctx.update_story(id, move |s| {
            if let Some(r) = s.attempt_mut(number) {
                r.error = Some(error);
                r.error_type = Some(kind);
            }
        });
    }
}

fn record_outcome(ctx: &Ctx, id: &str, number: u32, outcome: &str, duration_ms: u64) {
    let outcome = outcome.to_string();
    ctx.update_story(id, move |s| {
        if let Some(r) = s.attempt_mut(number) {
            r.outcome = Some(outcome);
            r.finished_at = Some(now_rfc3339());
            r.duration_ms = Some(duration_ms);
        }
    });
}

/// Gives the contestants' worktrees back to the pool (their branches stay)
/// and deletes the branches in `delete` when the run says `--race-keep none`.
async fn give_back(ctx: &Arc<Ctx>, helds: &mut [Option<PathBuf>], delete: &[String]) {
    let paths: Vec<PathBuf> = helds.iter_mut().filter_map(Option::take).collect();
    let delete: Vec<String> = match ctx.options.race.keep {
        RaceKeep::None => delete.to_vec(),
        RaceKeep::All => Vec::new(),
    };
    let c = Arc::clone(ctx);
    let problems = tokio::task::spawn_blocking(move || {
        let mut problems = Vec::new();
        for p in paths {
            if let Err(e) = c.pool.give_back(&p) {
                problems.push(format!("could not reuse worktree '{}': {e}", p.display()));
            }
        }
        for b in delete {
            if let Err(e) = cascade_git::worktree::delete_branch(&c.paths, &b) {
                problems.push(format!("could not delete the losing branch '{b}': {e}"));
            }
        }
        problems
    })
    .await
    .unwrap_or_default();
    for message in problems {
        ctx.emit(Event::Notice { message });
    }
}
