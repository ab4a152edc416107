//! One story, from a fresh worktree to a merge: the attempt loop.
//!
//! Each attempt: resolve the agent (implementation phase first, then the
//! retry phase), put a worktree on the branch `cascade/<id>` at the current
//! tip of the target branch (leased from the run's pool, see the `pool`
//! module; a retry resets the one the story holds), prepare it (copy files,
//! setup commands), build the prompt (with the previous attempt's error,
//! failing gates and output on a retry), run the agent, commit what it
//! changed (`<id>: <title>`), run the gates in the worktree, and merge
//! through the serial merge queue. A failure at any step is classified; the
//! retry manager decides whether and when the next attempt runs. Every
//! transition is recorded in the state first, then announced as an event;
//! it is on disk at once, except a start or a merge, which follow within a
//! fraction of a second (`Ctx::note_story`: resume restarts a started story
//! anyway, and a merged story's branch, deleted only at the end of the run,
//! tells resume it was merged).
//!
//! Attempt numbers count the story's whole history: a resumed story goes on
//! after the attempts recorded by earlier runs (so the logs and prompts of
//! every attempt are kept), while the retry budget (`--max-retries`) is per
//! run: an attempt interrupted by a kill or Ctrl-C costs no retry. An agent
//! that committed its work itself is fine: its commits on the story branch
//! beyond the base are the work. A merge refused because the user's
//! uncommitted changes (`--allow-dirty`) would be overwritten fails the story
//! once (`target_dirty`), without re-running the agent.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cascade_agents::exec::{execute, AgentRequest, ExecError};
use cascade_agents::prompt::{build_prompt, PromptContext, RetryContext};
use cascade_agents::{Phase, Resolver};
use cascade_gates::{GateEvent, GateReport};
use cascade_git::merge::{MergeOptions, MergeOutcome};
use cascade_git::worktree;
use cascade_plan::{Status, Story};
use cascade_process::Spec;

use crate::engine::Ctx;
use crate::events::{Event, FallbackNote, GateSummary};
use crate::retry::{classify_agent_exit, FailureKind};
use crate::state::{now_rfc3339, AttemptRecord, StoryStatus};

/// How a story's task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoryEnd {
    Merged,
    Failed,
    Interrupted,
}

/// One failed attempt, carried into the next prompt.
#[derive(Debug, Clone)]
struct Failure {
    kind: FailureKind,
    error: String,
    gate_summary: String,
    output_excerpt: String,
}

impl Failure {
    fn new(kind: FailureKind, error: impl Into<String>) -> Failure {
        Failure {
            kind,
            error: error.into(),
            gate_summary: String::new(),
            output_excerpt: String::new(),
        }
    }
}

/// What one attempt came to.
enum Attempt {
    Merged { commit: String, fast_forward: bool },
    Failed(Failure),
    Interrupted,
}

/// Runs `story` until it is merged, fails for good, or the run is cancelled.
pub(crate) async fn run_story(ctx: Arc<Ctx>, story: Story) -> StoryEnd {
    let id = story.id.clone();
    let branch = worktree::branch_name(ctx.feature.as_deref(), &id);
    // The worktree this story holds (leased from the pool by its first attempt).
    let mut held: Option<PathBuf> = None;
    // Attempts of earlier (interrupted or failed) runs stay in the history
    // and numbering goes on after them (logs are never overwritten), but
    // they do not use up this run's budget: a resumed story gets the full
    // `--max-retries` again, so an interrupted attempt costs no retry.
    let earlier = ctx
        .state
        .lock()
        .map(|st| st.story(&id).map_or(0, |s| s.attempts.len() as u32))
        .unwrap_or(0);
    let max = earlier.saturating_add(ctx.options.retry.max_attempts());
    let story_started = Instant::now();
    ctx.set_prd_status(&id, Status::InProgress);
    // Written with the agent's pid (or the attempt's failure): one state
    // write per story start instead of two.
    ctx.amend_story(&id, |s| {
        s.status = StoryStatus::Running;
        s.branch = Some(branch.clone());
        s.worktree = None;
        s.error = None;
        s.error_type = None;
        s.blocked_by.clear();
    });

    let mut previous: Option<(String, Failure)> = None;
    let mut attempt = earlier + 1;
    loop {
        // The first attempt of this run implements; later ones retry with
        // the previous failure in their prompt.
        let phase = if previous.is_none() {
            Phase::Implementation
        } else {
            Phase::Retry
        };
        let attempt_started = Instant::now();
        let (agent, outcome) = run_attempt(
            &ctx,
            &story,
            &branch,
            &mut held,
            attempt,
            max,
            phase,
            previous.as_ref(),
        )
        .await;
        let duration_ms = attempt_started.elapsed().as_millis() as u64;
        match outcome {
            Attempt::Merged {
                commit,
                fast_forward,
            } => {
                // Not waited for: until the run state is on disk, the
                // story's branch (deleted at the end of the run) tells
                // resume that it was merged.
                ctx.note_story(&id, |s| {
                    s.status = StoryStatus::Complete;
                    s.merge_commit = Some(commit.clone());
                    s.agent = Some(agent.clone());
                    if let Some(a) = s.attempts.last_mut() {
                        a.outcome = Some("passed".into());
                        a.finished_at = Some(now_rfc3339());
                        a.duration_ms = Some(duration_ms);
                    }
                });
                ctx.set_prd_status(&id, Status::Complete);
                // The worktree returns to the pool for the next story.
                if let Some(p) = held.take() {
                    let c = Arc::clone(&ctx);
                    let q = p.clone();
                    let back = tokio::task::spawn_blocking(move || c.pool.give_back(&q)).await;
                    if let Ok(Err(e)) = back {
                        ctx.emit(Event::Notice {
                            message: format!(
                                "{id}: could not reuse worktree '{}': {e}",
                                p.display()
                            ),
                        });
                    }
                }
                let attempts = ctx
                    .state
                    .lock()
                    .map(|st| st.story(&id).map_or(0, |s| s.attempts.len() as u32))
                    .unwrap_or(attempt);
                ctx.emit(Event::StoryMerged {
                    story: id.clone(),
                    agent,
                    attempts,
                    commit,
                    fast_forward,
                    target_branch: ctx.target_branch.clone(),
                    duration_ms: story_started.elapsed().as_millis() as u64,
                });
                return StoryEnd::Merged;
            }
            Attempt::Interrupted => {
                ctx.update_story(&id, |s| {
                    s.status = StoryStatus::Pending;
                    if let Some(a) = s.attempts.last_mut() {
                        if a.outcome.is_none() {
                            a.outcome = Some("interrupted".into());
                            a.finished_at = Some(now_rfc3339());
                            a.duration_ms = Some(duration_ms);
                        }
                    }
                });
                ctx.set_prd_status(&id, Status::Pending);
                return StoryEnd::Interrupted;
            }
            Attempt::Failed(failure) => {
                ctx.update_story(&id, |s| {
                    s.error = Some(failure.error.clone());
                    s.error_type = Some(failure.kind);
                    s.agent = Some(agent.clone());
                    if let Some(a) = s.attempts.last_mut() {
                        a.outcome = Some("failed".into());
                        a.finished_at = Some(now_rfc3339());
                        a.duration_ms = Some(duration_ms);
                        a.error = Some(failure.error.clone());
                        a.error_type = Some(failure.kind);
                    }
                });
                ctx.emit(Event::AttemptFailed {
                    story: id.clone(),
                    agent: agent.clone(),
                    attempt,
                    error_type: failure.kind,
                    error: failure.error.clone(),
                });
                if ctx.cancel.is_cancelled() {
                    ctx.update_story(&id, |s| s.status = StoryStatus::Pending);
                    ctx.set_prd_status(&id, Status::Pending);
                    return StoryEnd::Interrupted;
                }
                if !ctx
                    .options
                    .retry
                    .should_retry(attempt - earlier, failure.kind)
                {
                    // The worktree is kept for inspection, under the story's
                    // own name when that is free (it leaves the pool).
                    let kept = match held.take() {
                        Some(p) => {
                            let c = Arc::clone(&ctx);
                            let (q, b) = (p.clone(), branch.clone());
                            tokio::task::spawn_blocking(move || {
                                let to = worktree::path_for(&c.paths, &b);
                                worktree::relocate(&c.paths, &q, &to)
                            })
                            .await
                            .ok()
                            .and_then(Result::ok)
                            .unwrap_or(p)
                        }
                        None => worktree::path_for(&ctx.paths, &branch),
                    };
                    let kept = kept.display().to_string();
                    ctx.update_story(&id, |s| {
                        s.status = StoryStatus::Failed;
                        s.worktree = Some(kept.clone());
                    });
                    ctx.set_prd_status(&id, Status::Pending);
                    ctx.emit(Event::StoryFailed {
                        story: id.clone(),
                        agent,
                        attempts: attempt,
                        error_type: failure.kind,
                        error: failure.error,
                        branch: branch.clone(),
                        worktree: kept,
                    });
                    return StoryEnd::Failed;
                }
                let next_agent = Resolver::new(&ctx.agents, &ctx.detector, ctx.overrides())
                    .resolve(&story, Phase::Retry)
                    .map(|a| a.agent)
                    .unwrap_or_else(|_| agent.clone());
                let delay = ctx.options.retry.delay(attempt - earlier);
                ctx.emit(Event::RetryScheduled {
                    story: id.clone(),
                    attempt: attempt + 1,
                    max_attempts: max,
                    agent: next_agent,
                    error_type: failure.kind,
                    delay_ms: delay.as_millis() as u64,
                });
                if !delay.is_zero() {
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = ctx.cancel.cancelled() => {
                            ctx.update_story(&id, |s| s.status = StoryStatus::Pending);
                            ctx.set_prd_status(&id, Status::Pending);
                            return StoryEnd::Interrupted;
                        }
                    }
                }
                previous = Some((agent, failure));
                attempt += 1;
            }
        }
    }
}

/// One attempt; returns the agent that ran it (or was meant to) and the result.
#[allow(clippy::too_many_arguments)]
async fn run_attempt(
    ctx: &Arc<Ctx>,
    story: &Story,
    branch: &str,
    held: &mut Option<PathBuf>,
    attempt: u32,
    max: u32,
    phase: Phase,
    previous: Option<&(String, Failure)>,
) -> (String, Attempt) {
    let id = story.id.as_str();
    // 0. A slot of the limit shared with other engines (mega runs), held
    // through worktree, agent and gates, given back before the merge queue.
    let slot = match ctx.options.acquire_slot(&ctx.cancel).await {
        Ok(slot) => slot,
        Err(()) => {
            let agent = previous.map_or_else(|| "none".to_string(), |p| p.0.clone());
            return (agent, Attempt::Interrupted);
        }
    };
    // 1. The agent.
    let resolver = Resolver::new(&ctx.agents, &ctx.detector, ctx.overrides());
    let assignment = match resolver.resolve(story, phase) {
        Ok(a) => a,
        Err(e) => {
            let agent = previous
                .map(|p| p.0.clone())
                .unwrap_or_else(|| "none".to_string());
            record_attempt(ctx, id, attempt, &agent, phase);
            return (
                agent,
                Attempt::Failed(Failure::new(FailureKind::AgentUnavailable, e.to_string())),
            );
        }
    };
    let agent = assignment.agent.clone();
    let fallbacks: Vec<FallbackNote> = assignment
        .fallbacks
        .iter()
        .map(|f| FallbackNote {
            from: f.from.clone(),
            to: f.to.clone(),
            why: f.why.clone(),
        })
        .collect();
    for f in &fallbacks {
        ctx.emit(Event::AgentFallback {
            story: id.to_string(),
            from: f.from.clone(),
            to: f.to.clone(),
            why: f.why.clone(),
        });
    }
    record_attempt(ctx, id, attempt, &agent, phase);
    let Some(def) = ctx.agents.agent(&agent).cloned() else {
        return (
            agent.clone(),
            Attempt::Failed(Failure::new(
                FailureKind::AgentUnavailable,
                format!("agent '{agent}' is not configured"),
            )),
        );
    };
    if ctx.cancel.is_cancelled() {
        return (agent, Attempt::Interrupted);
    }

    // 2. A fresh worktree from the current tip of the target branch.
    let base = match cascade_git::merge::branch_tip(&ctx.paths, &ctx.target_branch) {
        Ok(Some(oid)) => oid.to_string(),
        Ok(None) => {
            return (
                agent,
                Attempt::Failed(Failure::new(
                    FailureKind::Setup,
                    format!("target branch '{}' does not exist", ctx.target_branch),
                )),
            )
        }
        Err(e) => {
            return (
                agent,
                Attempt::Failed(Failure::new(FailureKind::Setup, e.to_string())),
            )
        }
    };
    let wt_buf = {
        let c = Arc::clone(ctx);
        let current = held.clone();
        let (b, from) = (branch.to_string(), base.clone());
        let leased = tokio::task::spawn_blocking(move || match &current {
            Some(p) => c.pool.restart(p, &b, &from),
            None => c.pool.lease(&b, &from),
        })
        .await;
        let err = match leased {
            Ok(Ok(p)) => {
                *held = Some(p.clone());
                let shown = p.display().to_string();
                ctx.amend_story(id, |s| s.worktree = Some(shown));
                Ok(p)
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match err {
            Ok(p) => p,
            Err(e) => {
                return (
                    agent,
                    Attempt::Failed(Failure::new(
                        FailureKind::Setup,
                        format!("cannot prepare a worktree for branch '{branch}': {e}"),
                    )),
                );
            }
        }
    };
    let wt_path = wt_buf.as_path();
    if let Err(f) = prepare_worktree(ctx, wt_path).await {
        if ctx.cancel.is_cancelled() {
            return (agent, Attempt::Interrupted);
        }
        return (agent, Attempt::Failed(f));
    }
    // The run's findings files, for the agent to read and append to.
    let (findings, problems) = crate::mega::findings::seed_story(&ctx.paths.workdir, wt_path);
    for e in problems {
        ctx.emit(Event::Notice {
            message: format!("{id}: findings not shared: {e}"),
        });
    }

    // 3. The prompt.
    let prompt = {
        let retry = previous.map(|(prev_agent, f)| RetryContext {
            attempt,
            max_attempts: max,
            previous_agent: prev_agent.clone(),
            error: f.error.clone(),
            gate_summary: f.gate_summary.clone(),
            output_excerpt: f.output_excerpt.clone(),
        });
        let pctx = PromptContext {
            project_root: wt_path.to_path_buf(),
            phase: Some(phase),
            retry,
            ..ctx.prompt.clone()
        };
        match ctx.prd.lock() {
            Ok(prd) => build_prompt(&prd, story, &pctx) + &findings.prompt_section(),
            Err(_) => String::new(),
        }
    };

    // 4. The agent.
    let mut req = AgentRequest::new(id, attempt, phase, prompt, wt_path, &ctx.artifacts_dir);
    req.timeout_override = ctx.options.agent_timeout;
    req.extra_env
        .push(("CASCADE_TARGET_BRANCH".into(), ctx.target_branch.clone()));
    req.extra_env.extend(findings.env());
    let on_spawn = {
        let ctx = Arc::clone(ctx);
        let (agent, id) = (agent.clone(), id.to_string());
        let (title, branch, wt) = (
            story.title.clone(),
            branch.to_string(),
            wt_path.display().to_string(),
        );
        let fallbacks = fallbacks.clone();
        move |pid: u32| {
            ctx.note_story(&id, |s| {
                if let Some(a) = s.attempts.last_mut() {
                    a.pid = Some(pid);
                }
            });
            ctx.emit(Event::StoryStarted {
                story: id.clone(),
                title,
                agent,
                attempt,
                max_attempts: max,
                phase: phase.as_str().to_string(),
                fallbacks,
                pid,
                branch,
                worktree: wt,
            });
        }
    };
    let run = match execute(&def, req, on_spawn, &ctx.cancel).await {
        Ok(run) => run,
        Err(e) => {
            let kind = match e {
                ExecError::Unavailable { .. } | ExecError::NotExecutable { .. } => {
                    FailureKind::AgentUnavailable
                }
                ExecError::Spawn { .. } => FailureKind::ProcessCrash,
                _ => FailureKind::Setup,
            };
            return (agent, Attempt::Failed(Failure::new(kind, e.to_string())));
        }
    };
    // What the agent appended to findings.md outlives its worktree.
    let heading = format!(
        "{id}: {}",
        story.title.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    if let Err(e) = findings.collect(&heading) {
        ctx.emit(Event::Notice {
            message: format!("{id}: could not collect findings.md: {e}"),
        });
    }
    let usage = run.usage.clone();
    ctx.amend_story(id, |s| {
        if let Some(a) = s.attempts.last_mut() {
            a.log = Some(run.log_path.display().to_string());
            if let Some(u) = &usage {
                a.input_tokens = Some(u.input_tokens);
                a.output_tokens = Some(u.output_tokens);
                a.cost_usd = u.cost_usd;
            }
        }
    });
    ctx.emit(Event::AgentFinished {
        story: id.to_string(),
        agent: agent.clone(),
        attempt,
        success: run.success(),
        outcome: run.outcome.describe(),
        exit_code: run.outcome.exit_code,
        timed_out: run.outcome.timed_out,
        duration_ms: run.outcome.duration.as_millis() as u64,
        input_tokens: usage.as_ref().map(|u| u.input_tokens),
        output_tokens: usage.as_ref().map(|u| u.output_tokens),
        cost_usd: usage.as_ref().and_then(|u| u.cost_usd),
        log: run.log_path.display().to_string(),
    });
    if run.outcome.cancelled || ctx.cancel.is_cancelled() {
        return (agent, Attempt::Interrupted);
    }
    let excerpt = run.outcome.output_excerpt(ctx.options.excerpt_bytes);
    if !run.success() {
        let kind = classify_agent_exit(
            run.outcome.timed_out,
            run.outcome.exit_code,
            run.outcome.signal,
        );
        let mut f = Failure::new(kind, format!("agent '{agent}' {}", run.outcome.describe()));
        // The agent's own last word says more than an exit code.
        let said = run.reported_error.clone().or_else(|| {
            last_line(&run.outcome.stderr.text_lossy())
                .or_else(|| last_line(&run.outcome.stdout.text_lossy()))
        });
        if let Some(said) = said {
            f.error.push_str(&format!(": {said}"));
        }
        f.output_excerpt = excerpt;
        return (agent, Attempt::Failed(f));
    }

    // 5. Commit what the agent changed.
    let message = format!("{id}: {}", story.title);
    let committed = {
        let p = wt_path.to_path_buf();
        tokio::task::spawn_blocking(move || cascade_git::commit::commit_all(&p, &message)).await
    };
    // An agent that committed its work itself leaves nothing to commit: its
    // commits on the branch beyond the base are the work.
    let own_commits = match &committed {
        Ok(Ok(None)) => match cascade_git::merge::branch_tip(&ctx.paths, branch) {
            Ok(Some(tip)) if tip.to_string() != base => Some(tip.to_string()),
            _ => None,
        },
        _ => None,
    };
    let commit = match committed {
        Ok(Ok(Some(oid))) => oid.to_string(),
        Ok(Ok(None)) if own_commits.is_some() => own_commits.unwrap_or_default(),
        Ok(Ok(None)) => {
            let mut f = Failure::new(
                FailureKind::NoChanges,
                format!("no changes: agent '{agent}' exited 0 but changed no file"),
            );
            f.output_excerpt = excerpt;
            return (agent, Attempt::Failed(f));
        }
        Ok(Err(e)) => {
            return (
                agent,
                Attempt::Failed(Failure::new(FailureKind::Setup, e.to_string())),
            )
        }
        Err(e) => {
            return (
                agent,
                Attempt::Failed(Failure::new(FailureKind::Setup, e.to_string())),
            )
        }
    };
    // In memory only: until the merge is recorded (written before the branch
    // is deleted), the branch tip is what tells resume the story was merged.
    ctx.amend_story(id, |s| s.commit = Some(commit.clone()));
    ctx.emit(Event::StoryCommitted {
        story: id.to_string(),
        attempt,
        commit: commit.clone(),
    });

    // 6. The gates, in the worktree (the cache is shared by all worktrees).
    let report = run_gates(ctx, id, wt_path, &base).await;
    if ctx.cancel.is_cancelled() {
        return (agent, Attempt::Interrupted);
    }
    let gates: Vec<GateSummary> = report
        .gates
        .iter()
        .map(|g| GateSummary {
            name: g.name.clone(),
            passed: g.passed,
            cached: g.cached,
            flaky: g.flaky,
        })
        .collect();
    ctx.amend_story(id, |s| s.gates = gates);
    if !report.passed {
        let failed: Vec<&str> = report
            .failed()
            .filter(|g| g.required)
            .map(|g| g.name.as_str())
            .collect();
        let error = match failed.as_slice() {
            [one] => format!("quality gate '{one}' failed"),
            [] => "quality gates failed".to_string(),
            many => format!(
                "quality gates {} failed",
                many.iter()
                    .map(|n| format!("'{n}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut f = Failure::new(FailureKind::QualityGate, error);
        f.gate_summary = report.summary_for_prompt(20);
        f.output_excerpt = excerpt;
        return (agent, Attempt::Failed(f));
    }

    // 7. Merge, one story at a time.
    drop(slot);
    let _turn = ctx.merge_lock.lock().await;
    let merged = {
        let paths = ctx.paths.clone();
        let (target, b) = (ctx.target_branch.clone(), branch.to_string());
        let msg = format!("Merge {b}: {id}: {}", story.title);
        tokio::task::spawn_blocking(move || {
            cascade_git::merge::merge_into(&paths, &target, &b, &msg, &MergeOptions::default())
        })
        .await
    };
    match merged {
        Ok(Ok(MergeOutcome::FastForward(oid))) => (
            agent,
            Attempt::Merged {
                commit: oid.to_string(),
                fast_forward: true,
            },
        ),
        Ok(Ok(MergeOutcome::Merged(oid))) => (
            agent,
            Attempt::Merged {
                commit: oid.to_string(),
                fast_forward: false,
            },
        ),
        Ok(Ok(MergeOutcome::UpToDate)) => (
            agent,
            Attempt::Merged {
                commit: commit.clone(),
                fast_forward: true,
            },
        ),
        Ok(Ok(MergeOutcome::Conflict { files })) => {
            ctx.emit(Event::MergeConflict {
                story: id.to_string(),
                branch: branch.to_string(),
                files: files.clone(),
            });
            let mut f = Failure::new(
                FailureKind::MergeConflict,
                format!(
                    "merge conflict with '{}' in {}",
                    ctx.target_branch,
                    files.join(", ")
                ),
            );
            f.output_excerpt = format!(
                "Your previous change conflicted with work merged meanwhile into '{}' in: {}. Start from the current code and integrate with it.",
                ctx.target_branch,
                files.join(", ")
            );
            (agent, Attempt::Failed(f))
        }
        // The user's uncommitted changes (--allow-dirty) are in the way: the
        // agent's work passed its gates and stays on its branch; nothing of
        // the user's was touched. Not retried (see FailureKind::TargetDirty).
        Ok(Err(e @ cascade_git::merge::MergeError::TargetDirty { .. })) => (
            agent,
            Attempt::Failed(Failure::new(
                FailureKind::TargetDirty,
                format!(
                    "{e}; the story's work passed its gates and is kept on branch '{branch}' (after committing or stashing, merge it with `git merge {branch}`)"
                ),
            )),
        ),
        Ok(Err(e)) => (
            agent,
            Attempt::Failed(Failure::new(FailureKind::Setup, e.to_string())),
        ),
        Err(e) => (
            agent,
            Attempt::Failed(Failure::new(FailureKind::Setup, e.to_string())),
        ),
    }
}

/// The last non-empty line of some output, shortened.
fn last_line(text: &str) -> Option<String> {
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    let mut out: String = line.chars().take(200).collect();
    if line.chars().count() > 200 {
        out.push_str("...");
    }
    Some(out)
}

/// Adds the attempt's record (running) to the state; it is written with the
/// agent's pid once the agent started (or with the attempt's failure).
fn record_attempt(ctx: &Ctx, id: &str, attempt: u32, agent: &str, phase: Phase) {
    ctx.amend_story(id, |s| {
        s.agent = Some(agent.to_string());
        s.attempts.push(AttemptRecord {
            attempt,
            agent: agent.to_string(),
            phase: phase.as_str().to_string(),
            started_at: now_rfc3339(),
            finished_at: None,
            pid: None,
            outcome: None,
            error_type: None,
            error: None,
            duration_ms: None,
            log: None,
            input_tokens: None,
            output_tokens: None,
            cost_usd: None,
        });
    });
}

/// Copies the configured files into the worktree and runs the setup commands.
async fn prepare_worktree(ctx: &Ctx, wt_path: &Path) -> Result<(), Failure> {
    let setup = &ctx.project.worktree;
    for rel in &setup.copy {
        let from = ctx.project_root.join(rel);
        if !from.exists() {
            continue;
        }
        let to = wt_path.join(rel);
        if let Some(dir) = to.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::copy(&from, &to).map_err(|e| {
            Failure::new(
                FailureKind::Setup,
                format!("cannot copy '{}' into the worktree: {e}", from.display()),
            )
        })?;
    }
    let timeout = Duration::from_secs(setup.timeout_seconds.unwrap_or(600));
    for argv in &setup.setup {
        let Some((program, args)) = argv.split_first() else {
            continue;
        };
        let spec = Spec::new(program).args(args).cwd(wt_path).timeout(timeout);
        let outcome = spec.run(&ctx.cancel).await.map_err(|e| {
            Failure::new(
                FailureKind::Setup,
                format!(
                    "worktree setup command '{}' could not start: {e}",
                    argv.join(" ")
                ),
            )
        })?;
        if !outcome.success() {
            let mut f = Failure::new(
                FailureKind::Setup,
                format!(
                    "worktree setup command '{}' failed: {}",
                    argv.join(" "),
                    outcome.describe()
                ),
            );
            f.output_excerpt = outcome.output_excerpt(2000);
            return Err(f);
        }
    }
    Ok(())
}

/// Runs the gates in the worktree, forwarding their events.
async fn run_gates(ctx: &Arc<Ctx>, id: &str, wt_path: &Path, base: &str) -> GateReport {
    let opts = cascade_gates::RunOptions {
        workdir: wt_path.to_path_buf(),
        repo_root: Some(wt_path.to_path_buf()),
        base_commit: Some(base.to_string()),
        use_cache: ctx.options.use_gate_cache,
        rerun_failures: true,
        fail_fast: ctx.gates.fail_fast,
    };
    let sink = Arc::clone(ctx);
    let story = id.to_string();
    let on_event = move |e: GateEvent| match e {
        GateEvent::Started { name, .. } => sink.emit(Event::GateStarted {
            story: story.clone(),
            gate: name,
        }),
        GateEvent::Finished(r) => sink.emit(Event::GateFinished {
            story: story.clone(),
            gate: r.name.clone(),
            passed: r.passed,
            required: r.required,
            cached: r.cached,
            cache: r.cache.as_str().to_string(),
            flaky: r.flaky,
            skipped: r.skipped,
            duration_ms: r.duration_ms,
            errors: r.errors.len(),
        }),
        GateEvent::CacheUnavailable { reason } => sink.emit(Event::Notice {
            message: format!("{story}: gate cache unavailable: {reason}"),
        }),
        GateEvent::RemoteWarning { message } => sink.emit(Event::Notice {
            message: format!("remote gate cache: {message}"),
        }),
    };
    cascade_gates::run_gates(&ctx.gates, &opts, &ctx.gate_cache, on_event, &ctx.cancel).await
}
