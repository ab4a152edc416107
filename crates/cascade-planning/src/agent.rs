//! Running one planning step with an agent: the generator and challenger
//! choice, the step's environment and writable files, continuing the
//! generator's own session (`resume_args`, with gemini's `--list-sessions`
//! index lookup; an api agent resends its kept conversation), and the
//! usage/cost record of every call.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cascade_agents::{
    execute, AgentDef, AgentRequest, AgentRun, AgentsConfig, Detector, ExecError, Overrides, Phase,
    Resolver, ResumeSession,
};
use cascade_process::{CancelToken, Spec};

use crate::error::PlanningError;
use crate::session::{now, LlmCall, Session};
use crate::steps::Step;

/// How long a `list_sessions_args` command may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// The two agents of a session and what to tell the user about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentChoice {
    pub generator: String,
    pub reviewer: String,
    /// Why the reviewer is the generator too, when it is.
    pub note: Option<String>,
}

/// Picks the generator (`--agent`, else the planning phase's resolution)
/// and the challenger (`--review-agent`, else the review phase's, and
/// another installed agent when that is the generator).
pub fn choose(
    config: &AgentsConfig,
    detector: &Detector,
    session: &Session,
) -> Result<AgentChoice, PlanningError> {
    let story = cascade_plan::Story::new("plan", session.instruction.clone());
    // A stored choice is kept (its session ids belong to it) while configured.
    let stored =
        |name: &Option<String>| name.as_ref().filter(|n| config.agent(n).is_some()).cloned();
    let generator = match (&session.options.agent, stored(&session.generator_agent)) {
        (None, Some(g)) => g,
        _ => {
            let r = Resolver::new(
                config,
                detector,
                Overrides {
                    prd_agent: session.options.agent.clone(),
                    ..Overrides::default()
                },
            );
            r.check_overrides()?;
            r.resolve(&story, Phase::Planning)?.agent
        }
    };
    let r = Resolver::new(
        config,
        detector,
        Overrides {
            review_agent: session.options.review_agent.clone(),
            ..Overrides::default()
        },
    );
    r.check_overrides()?;
    let mut reviewer = r.resolve(&story, Phase::Review)?.agent;
    let mut note = None;
    if reviewer == generator {
        if session.options.review_agent.is_some() {
            note = Some(format!(
                "--review-agent names the generator '{generator}': the plan is challenged by the agent that wrote it"
            ));
        } else {
            let mut candidates: Vec<String> = Vec::new();
            for phase in [Phase::Review, Phase::Planning, Phase::Implementation] {
                if let Some(pc) = config.phase(phase) {
                    candidates.extend(pc.default_agent.iter().cloned());
                    candidates.extend(pc.fallback_chain.iter().cloned());
                }
            }
            candidates.extend(config.names().into_iter().map(str::to_string));
            let other = candidates.into_iter().find(|c| {
                *c != generator
                    && config
                        .agent(c)
                        .is_some_and(|def| detector.is_available(def))
            });
            match other {
                Some(o) => reviewer = o,
                None => {
                    note = Some(format!(
                        "no other agent is available, so '{generator}' challenges its own plan (install another agent or name one with --review-agent)"
                    ))
                }
            }
        }
    }
    Ok(AgentChoice {
        generator,
        reviewer,
        note,
    })
}

/// Where a step runs and keeps its files.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The repository root: the agents' working directory.
    pub root: PathBuf,
    /// The session directory: prompts and logs go under it.
    pub session_dir: PathBuf,
    pub cancel: CancelToken,
    /// The size limit of each agent log.
    pub log_limit: cascade_process::LogLimit,
}

/// One call to make.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    pub step: Step,
    pub agent: &'a AgentDef,
    pub prompt: String,
    /// The step's extra environment (CASCADE_PLAN_*, paths).
    pub env: Vec<(String, String)>,
    /// The files the step may write (an api agent is held to them).
    pub writes: Vec<PathBuf>,
}

/// What the call gave.
#[derive(Debug)]
pub struct CallResult {
    pub run: AgentRun,
    pub record: LlmCall,
    /// The session it continued, if any.
    pub resumed: Option<String>,
}

/// The stored session to continue, with gemini's index looked up.
/// `Ok(None)`: start a new session (no resume argv or no stored id).
pub async fn resume_for(
    agent: &AgentDef,
    role: crate::session::Role,
    session: &Session,
    ws: &Workspace,
) -> Result<Option<ResumeSession>, PlanningError> {
    if !agent.can_resume() {
        return Ok(None);
    }
    let Some(id) = session.session_to_continue(role, &agent.name) else {
        return Ok(None);
    };
    let id = id.to_string();
    let mut resume = ResumeSession {
        session_id: id.clone(),
        session_index: None,
    };
    if let Some(list_args) = &agent.list_sessions_args {
        let mut spec = Spec::new(&agent.command)
            .args(list_args)
            .cwd(&ws.root)
            .timeout(LIST_TIMEOUT);
        // The agent's own environment (API keys, config dirs) applies here too.
        for (k, v) in &agent.env {
            spec = spec.env(k, v);
        }
        let outcome = spec
            .run(&ws.cancel)
            .await
            .map_err(|e| PlanningError::ListSessions {
                agent: agent.name.clone(),
                status: "could not start".into(),
                output: e.to_string(),
            })?;
        if !outcome.success() {
            return Err(PlanningError::ListSessions {
                agent: agent.name.clone(),
                status: outcome.describe(),
                output: outcome.output_excerpt(4096).trim().to_string(),
            });
        }
        let listing = outcome.stdout.text_lossy();
        match session_index(&listing, &id) {
            Some(i) => resume.session_index = Some(i),
            None => {
                return Err(PlanningError::SessionNotFound {
                    agent: agent.name.clone(),
                    session_id: id,
                })
            }
        }
    }
    Ok(Some(resume))
}

/// The 1-based index of `uuid` in a `--list-sessions` listing whose lines
/// read `  N. <preview> (<age>) [<uuid>]`.
pub fn session_index(listing: &str, uuid: &str) -> Option<u32> {
    listing.lines().find_map(|line| {
        let line = line.trim();
        let (n, rest) = line.split_once('.')?;
        let n: u32 = n.trim().parse().ok()?;
        let open = rest.rfind('[')?;
        let close = rest[open..].find(']')? + open;
        (rest[open + 1..close].trim() == uuid).then_some(n)
    })
}

/// Runs one step and returns its record; `Err` when the agent could not
/// start or did not succeed (the caller marks the session failed).
pub async fn run_call(
    call: Call<'_>,
    resume: Option<ResumeSession>,
    attempt: u32,
    ws: &Workspace,
    on_start: impl FnOnce(bool),
) -> Result<CallResult, PlanningError> {
    let phase = if call.step == Step::Challenge {
        Phase::Review
    } else {
        Phase::Planning
    };
    let mut req = AgentRequest::new(
        call.step.as_str(),
        attempt,
        phase,
        call.prompt,
        &ws.root,
        &ws.session_dir,
    );
    req.extra_env = call.env;
    req.log_limit = ws.log_limit;
    req.tools.write_only = Some(call.writes);
    let resumed = resume.as_ref().map(|r| r.session_id.clone());
    req.resume = resume;
    on_start(resumed.is_some());
    let started = Instant::now();
    let run = execute(call.agent, req, |_| {}, &ws.cancel)
        .await
        .map_err(|e: ExecError| PlanningError::AgentUnavailable {
            step: call.step.to_string(),
            agent: call.agent.name.clone(),
            message: e.to_string(),
        })?;
    let usage = run.usage.clone().unwrap_or_default();
    let record = LlmCall {
        step: call.step.to_string(),
        agent: call.agent.name.clone(),
        model: run.model.clone(),
        tokens_in: usage.input_tokens + usage.cached_input_tokens,
        tokens_out: usage.output_tokens,
        duration_ms: started.elapsed().as_millis() as u64,
        cost: usage.cost_usd,
        timestamp: now(),
    };
    Ok(CallResult {
        run,
        record,
        resumed,
    })
}

/// Why a finished run counts as a failure, if it does.
pub fn failure(run: &AgentRun) -> Option<String> {
    if run.outcome.cancelled {
        return Some("was interrupted".into());
    }
    if !run.success() {
        let excerpt = run.outcome.output_excerpt(600);
        let excerpt = excerpt.trim();
        return Some(if excerpt.is_empty() {
            format!("failed: {}", run.outcome.describe())
        } else {
            format!("failed: {}: {excerpt}", run.outcome.describe())
        });
    }
    run.reported_error
        .as_ref()
        .map(|e| format!("reported an error: {e}"))
}

/// `path` shown relative to `root` when inside it.
pub fn shown(path: &Path, root: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_index_of_a_session_in_gemini_listing() {
        let listing = "Available sessions for this project (3):\n  1. Fix the build (2 days ago) [aaaa-1]\n  2. Add [OAuth] login (1 hour ago) [bbbb-2]\n  3. x (now) [cccc-3]\n";
        assert_eq!(session_index(listing, "bbbb-2"), Some(2));
        assert_eq!(session_index(listing, "cccc-3"), Some(3));
        assert_eq!(session_index(listing, "dddd-4"), None);
        assert_eq!(session_index("", "x"), None);
    }
}
