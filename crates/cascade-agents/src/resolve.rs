//! The resolver: which agent runs a story in a phase, and why.
//!
//! Candidates come in DESIGN.md's order: `--agent`, the phase override
//! (`--prd-agent`, `--impl-agent`, `--retry-agent`), `story.agent`, the
//! learned route of the story type (`--route learned`, the `learned` module),
//! the story-type override of the phase, the top-level `story_type_defaults`
//! (story phases only), the phase default, the phase's fallback
//! chain, then `default_agent`. The first candidate that is configured and
//! whose command is found wins; every candidate passed over becomes a
//! [`Fallback`] note (the engine logs them as `[FALLBACK]` lines). With
//! `--no-fallback` the first candidate is taken without looking for its
//! command, so running it fails clearly instead of silently switching agents.
//! The review phase puts the reviewer the user chose (`--review-agent`, the
//! review phase's story-type override and default) ahead of `--agent`,
//! which names the author.

use std::fmt;

use serde::Serialize;

use cascade_plan::Story;

use crate::config::{AgentDef, AgentsConfig};
use crate::detect::Detector;
use crate::learned::LearnedRoutes;
use crate::phase::Phase;
use crate::story_type::{self, Inferred, StoryType, TypeEvidence};

/// Agent choices made on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--agent`: every story, every phase (in review after a reviewer
    /// the user chose: `--review-agent`, the review phase of agents.json).
    pub agent: Option<String>,
    /// `--impl-agent`: the implementation phase.
    pub impl_agent: Option<String>,
    /// `--retry-agent`: the retry phase.
    pub retry_agent: Option<String>,
    /// `--prd-agent`: the planning phase.
    pub prd_agent: Option<String>,
    /// `--review-agent`: the review phase (story review, plan challenge).
    pub review_agent: Option<String>,
    /// `--no-fallback`: the first candidate or nothing: it must be
    /// installed (else the story has no agent, an error before anything
    /// runs), but its flags and login are not checked, and no other agent
    /// is tried.
    pub no_fallback: bool,
    /// `--route learned`: the routes this repository's history gives (see
    /// the `learned` module); a story type's learned agent comes after
    /// what the user named and before agents.json's type and phase defaults.
    pub learned: Option<LearnedRoutes>,
}

impl Overrides {
    /// The phase override flag and its value for `phase`.
    fn for_phase(&self, phase: Phase) -> Option<(&'static str, &str)> {
        let value = match phase {
            Phase::Planning => self.prd_agent.as_deref(),
            Phase::Implementation => self.impl_agent.as_deref(),
            Phase::Retry => self.retry_agent.as_deref(),
            Phase::Review => self.review_agent.as_deref(),
            Phase::Refactor | Phase::Merge => None,
        }?;
        Some((phase.override_flag()?, value))
    }

    /// Every (flag, agent) given.
    fn named(&self) -> Vec<(&'static str, &str)> {
        [
            ("--agent", self.agent.as_deref()),
            ("--impl-agent", self.impl_agent.as_deref()),
            ("--retry-agent", self.retry_agent.as_deref()),
            ("--prd-agent", self.prd_agent.as_deref()),
            ("--review-agent", self.review_agent.as_deref()),
        ]
        .into_iter()
        .filter_map(|(f, v)| v.map(|v| (f, v)))
        .collect()
    }
}

/// The seven levels of the resolution chain, highest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// `--agent`.
    CliAgent,
    /// `--impl-agent`, `--retry-agent`, `--prd-agent`, `--review-agent`
    /// (the last one ahead of `--agent`).
    PhaseOverride,
    /// `story.agent` in the PRD.
    StoryAgent,
    /// What this repository's history chose for the story's type
    /// (`--route learned`, see the `learned` module).
    Learned,
    /// `phase_defaults.<phase>.story_type_overrides.<type>`.
    StoryType,
    /// `phase_defaults.<phase>.default_agent`.
    PhaseDefault,
    /// `phase_defaults.<phase>.fallback_chain[i]`.
    FallbackChain,
    /// The top-level `default_agent`.
    DefaultAgent,
    /// A chain given from elsewhere ([`Resolver::with_chain`]: a fleet
    /// coordinator's resolution of the story, run on a worker).
    Given,
}

/// One agent the chain proposes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    pub agent: String,
    pub level: Level,
    /// Why it was proposed, e.g. "implementation phase default".
    pub reason: String,
}

/// A candidate passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    pub agent: String,
    pub level: Level,
    pub reason: String,
    pub why: String,
}

/// A fallback taken: `from` was wanted, `to` runs instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fallback {
    pub from: String,
    pub to: String,
    pub why: String,
}

/// The agent chosen for a story in a phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assignment {
    pub agent: String,
    /// Why this agent, e.g. "story type 'bugfix' override for implementation".
    pub reason: String,
    pub level: Level,
    /// Candidates passed over before it, in order.
    pub fallbacks: Vec<Fallback>,
    /// The story's (inferred) type.
    pub story_type: StoryType,
    /// False with `--no-fallback`: the command was found, but its flags and
    /// login were not checked.
    pub checked: bool,
}

/// Why no agent could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// An agent named on the command line is not configured.
    #[error("unknown agent '{name}' given to {flag} (known agents: {})", known.join(", "))]
    UnknownAgent {
        name: String,
        flag: String,
        known: Vec<String>,
    },
    /// Every candidate was rejected.
    #[error("{}", describe_none(story, *phase, tried, *no_fallback))]
    NoneAvailable {
        story: String,
        phase: Phase,
        tried: Vec<Rejection>,
        no_fallback: bool,
    },
}

fn describe_none(story: &str, phase: Phase, tried: &[Rejection], no_fallback: bool) -> String {
    let mut s = format!("no agent available for {story} ({phase} phase); tried:");
    for r in tried {
        s.push_str(&format!("\n  - {} ({}): {}", r.agent, r.reason, r.why));
    }
    if no_fallback {
        s.push_str("\n--no-fallback was given, so no other candidate was tried");
    } else {
        s.push_str("\ninstall one of these agents, or name an installed one with --agent");
    }
    s
}

/// Chooses agents for stories.
///
/// Whether an agent can be used is found out once per resolver (its
/// command looked up, its last check read): resolving every story of a
/// large plan asks the disk once per agent, not once per story.
pub struct Resolver<'a> {
    config: &'a AgentsConfig,
    detector: &'a Detector,
    overrides: Overrides,
    /// Per agent name: why it cannot be used (`None`: it can).
    unusable: std::sync::Mutex<std::collections::HashMap<String, Option<String>>>,
    /// A chain decided elsewhere, used instead of this configuration's.
    chain: Option<Vec<String>>,
}

impl<'a> Resolver<'a> {
    pub fn new(config: &'a AgentsConfig, detector: &'a Detector, overrides: Overrides) -> Self {
        Resolver {
            config,
            detector,
            overrides,
            unusable: Default::default(),
            chain: None,
        }
    }

    /// Why the configured agent `def` cannot be used here, if it cannot:
    /// its command is not found, or it is installed but its argv or login
    /// failed its last check. Asked once per agent.
    fn unusable(&self, def: &AgentDef) -> Option<String> {
        let known = self
            .unusable
            .lock()
            .ok()
            .and_then(|m| m.get(&def.name).cloned());
        if let Some(why) = known {
            return why;
        }
        let d = self.detector.detect(&def.command);
        let why = if d.found() {
            self.detector.check_failure(def)
        } else {
            Some(missing_reason(&def.command))
        };
        if let Ok(mut m) = self.unusable.lock() {
            m.insert(def.name.clone(), why.clone());
        }
        why
    }

    /// This resolver with the candidates decided elsewhere (a fleet
    /// coordinator resolved the story with its own agents.json): the first
    /// of `chain` that this configuration has and whose command is found
    /// wins, as for a chain of its own.
    pub fn with_chain(mut self, chain: Vec<String>) -> Self {
        self.chain = Some(chain);
        self
    }

    /// The overrides in use.
    pub fn overrides(&self) -> &Overrides {
        &self.overrides
    }

    /// Checks that every agent named on the command line is configured
    /// (the binary maps this error to exit code 2).
    pub fn check_overrides(&self) -> Result<(), ResolveError> {
        for (flag, name) in self.overrides.named() {
            if self.config.agent(name).is_none() {
                return Err(ResolveError::UnknownAgent {
                    name: name.to_string(),
                    flag: flag.to_string(),
                    known: self.config.names().iter().map(|s| s.to_string()).collect(),
                });
            }
        }
        Ok(())
    }

    /// The chain of candidates for `story` in `phase`, highest first,
    /// without duplicates, with the inferred story type.
    pub fn candidates(&self, story: &Story, phase: Phase) -> (Vec<Candidate>, Inferred) {
        let inferred = story_type::infer(story);
        if let Some(chain) = &self.chain {
            let given = chain
                .iter()
                .enumerate()
                .map(|(i, a)| Candidate {
                    agent: a.clone(),
                    level: Level::Given,
                    reason: format!("the coordinator's candidate #{} for {phase}", i + 1),
                })
                .collect();
            return (given, inferred);
        }
        let mut out: Vec<Candidate> = Vec::new();
        let mut push = |agent: &str, level: Level, reason: String| {
            if !out.iter().any(|c| c.agent == agent) {
                out.push(Candidate {
                    agent: agent.to_string(),
                    level,
                    reason,
                });
            }
        };
        let pc = self.config.phase(phase);
        let phase_override = self
            .overrides
            .for_phase(phase)
            .map(|(flag, a)| (a, Level::PhaseOverride, flag.to_string()));
        let type_override = pc
            .and_then(|pc| pc.override_for(inferred.story_type.as_str()))
            .map(|a| {
                let why = format!(
                    "story type '{}' ({}) override for {phase}",
                    inferred.story_type,
                    evidence_text(&inferred.evidence)
                );
                (a, Level::StoryType, why)
            });
        let phase_default = pc
            .and_then(|pc| pc.default_agent.as_deref())
            .map(|a| (a, Level::PhaseDefault, format!("{phase} phase default")));
        // A reviewer the user chose (`--review-agent`, or agents.json's
        // review phase) comes before `--agent`: `--agent` names the author,
        // and a review by the author defeats the review. (Later pushes of
        // the same agent are no-ops.)
        if phase == Phase::Review {
            for (a, level, why) in [&phase_override, &type_override, &phase_default]
                .into_iter()
                .flatten()
            {
                push(a, *level, why.clone());
            }
        }
        if let Some(a) = &self.overrides.agent {
            push(a, Level::CliAgent, "--agent".to_string());
        }
        if let Some((a, level, why)) = phase_override {
            push(a, level, why);
        }
        if let Some(a) = story.agent.as_deref().filter(|a| !a.trim().is_empty()) {
            push(a, Level::StoryAgent, "story.agent in the PRD".to_string());
        }
        let story_phase = matches!(
            phase,
            Phase::Implementation | Phase::Retry | Phase::Refactor
        );
        if let Some(route) = self
            .overrides
            .learned
            .as_ref()
            .and_then(|l| l.route(inferred.story_type))
            .filter(|_| story_phase)
        {
            push(
                &route.agent,
                Level::Learned,
                route.reason(inferred.story_type),
            );
        }
        if let Some((a, level, why)) = type_override {
            push(a, level, why);
        }
        if let Some(a) = self
            .config
            .story_type_default(inferred.story_type.as_str())
            .filter(|_| story_phase)
        {
            push(
                a,
                Level::StoryType,
                format!(
                    "story type '{}' ({}) default (story_type_defaults)",
                    inferred.story_type,
                    evidence_text(&inferred.evidence)
                ),
            );
        }
        if let Some((a, level, why)) = phase_default {
            push(a, level, why);
        }
        if let Some(pc) = pc {
            for (i, a) in pc.fallback_chain.iter().enumerate() {
                push(
                    a,
                    Level::FallbackChain,
                    format!("{phase} fallback chain #{}", i + 1),
                );
            }
        }
        push(
            &self.config.default_agent,
            Level::DefaultAgent,
            "default_agent".to_string(),
        );
        (out, inferred)
    }

    /// Chooses the agent for `story` in `phase`.
    pub fn resolve(&self, story: &Story, phase: Phase) -> Result<Assignment, ResolveError> {
        self.check_overrides()?;
        let (candidates, inferred) = self.candidates(story, phase);
        let mut rejected: Vec<Rejection> = Vec::new();
        for c in candidates {
            let why = match self.config.agent(&c.agent) {
                None => Some(format!(
                    "agent '{}' is not configured in agents.json",
                    c.agent
                )),
                // An api agent runs if its key is there (with or without
                // --no-fallback: nothing else can say it is usable).
                Some(def) if def.api.is_some() => def
                    .api
                    .as_ref()
                    .and_then(|api| api.key().err())
                    .map(|missing| missing.to_string()),
                // The first candidate or nothing: it must be installed.
                Some(def) if self.overrides.no_fallback => {
                    (!self.detector.detect(&def.command).found())
                        .then(|| missing_reason(&def.command))
                }
                Some(def) => self.unusable(def),
            };
            match why {
                None => {
                    let fallbacks = rejected
                        .iter()
                        .map(|r| Fallback {
                            from: r.agent.clone(),
                            to: c.agent.clone(),
                            why: r.why.clone(),
                        })
                        .collect();
                    let mut reason = c.reason.clone();
                    if self.overrides.no_fallback {
                        reason.push_str(" (flags not checked: --no-fallback)");
                    }
                    return Ok(Assignment {
                        agent: c.agent,
                        reason,
                        level: c.level,
                        fallbacks,
                        story_type: inferred.story_type,
                        checked: !self.overrides.no_fallback,
                    });
                }
                Some(why) => {
                    rejected.push(Rejection {
                        agent: c.agent,
                        level: c.level,
                        reason: c.reason,
                        why,
                    });
                    if self.overrides.no_fallback {
                        break;
                    }
                }
            }
        }
        Err(ResolveError::NoneAvailable {
            story: story.id.clone(),
            phase,
            tried: rejected,
            no_fallback: self.overrides.no_fallback,
        })
    }
}

/// Why a configured agent's command cannot be used: a path that exists but
/// cannot be executed says so (a missing `chmod +x` is a common slip);
/// anything else is "not found", the wording of Plan Cascade's progress.txt.
fn missing_reason(command: &str) -> String {
    let path = std::path::Path::new(command);
    if command.contains('/') && path.is_file() {
        format!("CLI '{command}' is not executable (chmod +x it)")
    } else if command.contains('/') && path.is_dir() {
        format!("CLI '{command}' is a directory, not a program")
    } else {
        format!("CLI '{command}' not found")
    }
}

/// The first story of each kind in `stories`, in order. Stories of one
/// kind name the same agent (`story.agent`) and have the same inferred
/// type, so a [`Resolver`] gives them the same agent with the same
/// fallbacks in every phase (only the evidence quoted in a reason
/// differs): resolving these checks them all, and the first story that
/// gets no agent is among them. A large plan is checked at the cost of
/// its kinds of stories, not of its stories.
pub fn story_kinds<'s>(stories: impl IntoIterator<Item = &'s Story>) -> Vec<&'s Story> {
    first_of_each_kind(
        stories
            .into_iter()
            .map(|s| (s, s, story_type::infer_story_type(s))),
    )
}

/// [`story_kinds`] of the stories of `plan` that `include` keeps, as
/// positions in `plan`. The types (most of the work) are inferred in
/// parallel on a large plan; the first of each kind is then picked in plan
/// order, so the answer is the same as [`story_kinds`]'.
pub fn story_kind_positions(plan: &[Story], include: impl Fn(&Story) -> bool + Sync) -> Vec<usize> {
    use rayon::prelude::*;
    /// Below this many stories the work is not worth other threads (nor
    /// starting rayon's).
    const PARALLEL_FROM: usize = 4096;
    let infer = |s: &Story| include(s).then(|| story_type::infer_story_type(s));
    let types: Vec<Option<StoryType>> = if plan.len() < PARALLEL_FROM {
        plan.iter().map(infer).collect()
    } else {
        plan.par_iter()
            .with_min_len(PARALLEL_FROM / 4)
            .map(infer)
            .collect()
    };
    first_of_each_kind(
        plan.iter()
            .zip(types)
            .enumerate()
            .filter_map(|(i, (s, t))| Some((i, s, t?))),
    )
}

/// The items (`T`, each with its story and that story's type) whose kind
/// was not met before them, in order.
fn first_of_each_kind<'s, T>(items: impl Iterator<Item = (T, &'s Story, StoryType)>) -> Vec<T> {
    let mut seen: std::collections::HashSet<(Option<&'s str>, StoryType)> = Default::default();
    items
        .filter(|(_, story, t)| {
            let own = story.agent.as_deref().filter(|a| !a.trim().is_empty());
            seen.insert((own, *t))
        })
        .map(|(item, _, _)| item)
        .collect()
}

fn evidence_text(e: &TypeEvidence) -> String {
    match e {
        TypeEvidence::Explicit => "explicit".to_string(),
        TypeEvidence::Tag(t) => format!("tag '{t}'"),
        TypeEvidence::Keywords(words) => format!("keywords: {}", words.join(", ")),
        TypeEvidence::Default => "no keyword".to_string(),
    }
}

impl fmt::Display for Fallback {
    /// `aider -> claude-code: CLI 'aider' not found` (progress.txt's format).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}: {}", self.from, self.to, self.why)
    }
}

#[cfg(test)]
mod tests;
