//! Step (inside the merge queue): let an agent resolve a merge conflict.
//!
//! When the story branch conflicts with the target branch, the target is
//! merged *into* the story's worktree, leaving git's conflict markers; an
//! agent (phase `merge`: the agent that did the story, unless
//! `phase_defaults.merge.default_agent` names another; its `fallback_chain`
//! when the story's agent is gone) gets both sides in the files and the story in
//! its prompt, and resolves them. The merge is concluded as a commit on the
//! story branch (`<id>: merge '<target>' ...`), re-gated, and only then
//! merged into the target branch (now a fast-forward). Any failure (the
//! agent fails, markers remain, a gate fails) puts the story branch back
//! where it was, so the story fails as `merge_conflict` with its branch
//! kept, as without resolution. `--no-resolve` skips this step. The merge
//! queue stays held throughout, so the target cannot move meanwhile.

use std::sync::Arc;

use cascade_agents::exec::execute;
use cascade_agents::prompt::{build_prompt, PromptContext};
use cascade_agents::{Phase, Resolver};
use cascade_git::resolve::{Begun, Concluded};

use super::prepare_worktree::Worktree;
use super::run_agent::AgentOutput;
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::retry::FailureKind;

/// The story branch now contains the target branch, conflicts resolved.
pub(super) struct Resolved {
    pub commit: String,
}

pub(super) async fn run(
    a: &Attempt<'_>,
    wt: &Worktree,
    files: &[String],
) -> Result<Resolved, Stop> {
    let ctx = a.ctx;
    let id = a.id().to_string();
    let agent = merge_agent(a);
    let Some(def) = ctx.agents.agent(&agent).cloned() else {
        return Err(Failure::new(
            FailureKind::MergeConflict,
            format!("no agent to resolve the conflict ('{agent}' is not configured)"),
        )
        .into());
    };
    ctx.emit(Event::MergeResolving {
        story: id.clone(),
        agent: agent.clone(),
        files: files.to_vec(),
    });
    let message = format!(
        "{id}: merge '{}' (conflicts resolved by {agent})",
        ctx.target_branch
    );
    let (p, target, m) = (wt.path.clone(), ctx.target_branch.clone(), message.clone());
    let begun = tokio::task::spawn_blocking(move || cascade_git::resolve::begin(&p, &target, &m))
        .await
        .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?
        .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?;
    let (conflicted, orig_head) = match begun {
        Begun::Clean(oid) => {
            return finish(a, wt, &agent, oid.to_string(), None).await;
        }
        Begun::Conflicted { files, orig_head } => (files, orig_head),
    };
    let outcome = resolve_with_agent(a, wt, &def, &agent, &conflicted, &message).await;
    match outcome {
        Ok(commit) => finish(a, wt, &agent, commit, Some(orig_head)).await,
        Err(stop) => {
            undo(a, wt, orig_head).await;
            Err(stop)
        }
    }
}

/// The story's own agent, unless `phase_defaults.merge.default_agent` (or
/// `--agent`) names one; the merge phase's `fallback_chain` is used when the
/// story's agent is not installed any more.
fn merge_agent(a: &Attempt<'_>) -> String {
    let ctx = a.ctx;
    let named = ctx
        .agents
        .phase(Phase::Merge)
        .is_some_and(|p| p.default_agent.is_some())
        || ctx.options.agent.is_some();
    let installed = ctx
        .agents
        .agent(&a.agent)
        .is_some_and(|d| ctx.options.no_fallback || ctx.detector.is_available(d));
    if !named && installed {
        return a.agent.clone();
    }
    let resolver = Resolver::new(&ctx.agents, &ctx.detector, ctx.overrides());
    resolver
        .resolve(a.story, Phase::Merge)
        .map(|found| found.agent)
        .unwrap_or_else(|_| a.agent.clone())
}

/// Runs the agent on the conflicted worktree and concludes the merge.
async fn resolve_with_agent(
    a: &Attempt<'_>,
    wt: &Worktree,
    def: &cascade_agents::AgentDef,
    agent: &str,
    files: &[String],
    message: &str,
) -> Result<String, Stop> {
    let ctx = a.ctx;
    let id = a.id();
    let mut req = a.agent_request(Phase::Merge, prompt(a, files), wt);
    req.extra_env
        .push(("CASCADE_CONFLICTS".into(), files.join("\n")));
    req.extra_env.extend(a.env.iter().cloned());
    let on_spawn = {
        let (c, id) = (Arc::clone(ctx), id.to_string());
        move |pid: u32| {
            c.update_story(&id, move |s| {
                if let Some(r) = s.attempts.last_mut() {
                    r.pid = Some(pid);
                }
            })
        }
    };
    let run = execute(def, req, on_spawn, &ctx.control.agents_cancel)
        .await
        .map_err(|e| unresolved(agent, files, &e.to_string()))?;
    // What the resolution cost counts toward the attempt (and the budgets).
    if let Some((usd, _)) = run
        .usage
        .as_ref()
        .and_then(|u| ctx.agents.prices.cost(def, u))
    {
        ctx.amend_story(id, move |s| {
            if let Some(r) = s.attempts.last_mut() {
                r.cost_usd = Some(r.cost_usd.unwrap_or(0.0) + usd);
            }
        });
    }
    if run.outcome.cancelled || ctx.cancel.is_cancelled() {
        return Err(Stop::Interrupted);
    }
    if !run.success() {
        return Err(unresolved(agent, files, &run.outcome.describe()));
    }
    let (p, f, m) = (wt.path.clone(), files.to_vec(), message.to_string());
    let concluded = tokio::task::spawn_blocking(move || cascade_git::resolve::conclude(&p, &f, &m))
        .await
        .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?
        .map_err(|e| unresolved(agent, files, &e.to_string()))?;
    match concluded {
        Concluded::Committed(oid) => Ok(oid.to_string()),
        Concluded::Unresolved(left) => Err(unresolved(
            agent,
            files,
            &format!("conflict markers remain in {}", left.join(", ")),
        )),
    }
}

/// The resolution is a commit on the story branch: gate it before it merges.
async fn finish(
    a: &Attempt<'_>,
    wt: &Worktree,
    agent: &str,
    commit: String,
    orig_head: Option<git2::Oid>,
) -> Result<Resolved, Stop> {
    let ctx = a.ctx;
    ctx.amend_story(a.id(), {
        let c = commit.clone();
        move |s| s.commit = Some(c)
    });
    let output = AgentOutput {
        excerpt: String::new(),
    };
    match super::gates::run(a, wt, &output).await {
        Ok(_) => {
            ctx.emit(Event::MergeResolved {
                story: a.id().to_string(),
                agent: agent.to_string(),
                commit: commit.clone(),
            });
            Ok(Resolved { commit })
        }
        Err(stop) => {
            if let Some(orig) = orig_head {
                undo(a, wt, orig).await;
            }
            Err(match stop {
                Stop::Failed(f) => Failure::new(
                    FailureKind::MergeConflict,
                    format!(
                        "merge conflict with '{}': the resolution by '{agent}' failed its gates ({})",
                        ctx.target_branch, f.error
                    ),
                )
                .into(),
                other => other,
            })
        }
    }
}

/// Puts the story branch and worktree back where they were before the merge.
async fn undo(a: &Attempt<'_>, wt: &Worktree, orig_head: git2::Oid) {
    let p = wt.path.clone();
    let undone =
        tokio::task::spawn_blocking(move || cascade_git::resolve::abort(&p, orig_head)).await;
    if !matches!(undone, Ok(Ok(()))) {
        a.ctx.emit(Event::Notice {
            message: format!(
                "{}: could not undo the unresolved merge in '{}'",
                a.id(),
                wt.path.display()
            ),
        });
    }
    a.ctx
        .amend_story(a.id(), move |s| s.commit = Some(orig_head.to_string()));
}

fn unresolved(agent: &str, files: &[String], why: &str) -> Stop {
    Failure::new(
        FailureKind::MergeConflict,
        format!(
            "agent '{agent}' could not resolve the merge conflict in {}: {why}",
            files.join(", ")
        ),
    )
    .into()
}

/// The story, and the conflict: which files, and what each side is.
fn prompt(a: &Attempt<'_>, files: &[String]) -> String {
    let ctx = a.ctx;
    let pctx = PromptContext {
        phase: Some(Phase::Merge),
        retry: None,
        ..ctx.prompt.clone()
    };
    let story = match ctx.prd.lock() {
        Ok(prd) => build_prompt(&prd, a.story, &pctx),
        Err(_) => String::new(),
    };
    let mut out = story;
    out.push_str(&format!(
        "\n## The merge conflict\n\nThis story's branch `{}` (your side, `HEAD`, between `<<<<<<<` and `=======`) conflicts with work merged meanwhile into `{}` (their side, between `=======` and `>>>>>>>`). The target branch is being merged into the story's branch in this working directory. Resolve the conflicts in:\n\n",
        a.branch, ctx.target_branch
    ));
    for f in files {
        out.push_str(&format!("- `{f}`\n"));
    }
    out.push_str("\nKeep what both sides meant: the story's change must still do what the story asks, on top of the other work.\n");
    out
}
