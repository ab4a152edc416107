//! Racing agents on a story: what a race is (the run's `--race`, a story's
//! `"race"` in prd.json), who its contestants are and the rule that picks
//! the winner. Running the contestants is the `steps::race` module: each
//! one is an attempt of its own, in its own worktree and branch
//! (`cascade/<story>/race-<agent>[-n]`), through the same steps.
//!
//! The winner rule is deterministic, in this order: passes verification
//! and every required gate (a contestant that failed a step never wins);
//! then the review verdict (`pass` before a review without a marker);
//! then fewer findings; then the smaller change (lines added + removed);
//! then the lower cost (a known cost before an unknown one); then the
//! earlier finish.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use cascade_agents::AgentsConfig;
use cascade_plan::{Prd, Story};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a run races its stories (`--race`, `--race-until`, `--race-keep`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaceOptions {
    /// `--race`: who races every story (a story's `"race"` takes its place).
    /// `None`: only stories with a `"race"` of their own race.
    pub spec: Option<RaceSpec>,
    pub until: RaceUntil,
    pub keep: RaceKeep,
}

/// The contestants of a race, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RaceSpec {
    /// These agents (an agent named twice races twice).
    Agents(Vec<String>),
    /// This many runs of the agent the story resolves to.
    Runs(u32),
}

/// `--race-until`: when a race stops (`first` | `all` in events and the
/// state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RaceUntil {
    /// As soon as one contestant passes everything: the others are stopped.
    First,
    /// When every contestant is done; then they are compared.
    #[default]
    All,
}

/// `--race-keep`: what becomes of the losers' branches (`all` | `none`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RaceKeep {
    /// Kept for inspection.
    #[default]
    All,
    /// Deleted once the winner is chosen.
    None,
}

impl RaceUntil {
    pub fn as_str(self) -> &'static str {
        match self {
            RaceUntil::First => "first",
            RaceUntil::All => "all",
        }
    }
}

impl RaceKeep {
    pub fn as_str(self) -> &'static str {
        match self {
            RaceKeep::All => "all",
            RaceKeep::None => "none",
        }
    }
}

/// Where a contestant stands: `running` until its
/// `race_contestant_finished`, then `passed` (every step), `failed`,
/// `stopped` (`--race-until first`: another passed first) or `not_started`
/// (the story's budget would not cover it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContestantStatus {
    Running,
    Passed,
    Failed,
    Stopped,
    NotStarted,
}

impl ContestantStatus {
    /// As the events and the state spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ContestantStatus::Running => "running",
            ContestantStatus::Passed => "passed",
            ContestantStatus::Failed => "failed",
            ContestantStatus::Stopped => "stopped",
            ContestantStatus::NotStarted => "not_started",
        }
    }
}

impl std::fmt::Display for RaceUntil {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The most contestants one race may have.
pub const MAX_CONTESTANTS: u32 = 16;

/// A race that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RaceError {
    /// `--race` is not a comma list of agents nor a number.
    #[error("--race {given:?}: {why}")]
    Spec {
        given: String,
        #[source]
        why: SpecProblem,
    },
    /// A story's `"race"` is malformed.
    #[error("{}: story '{story}': \"race\" {why}", path.display())]
    Story {
        path: PathBuf,
        story: String,
        #[source]
        why: SpecProblem,
    },
    /// A contestant names an agent agents.json does not configure.
    #[error("unknown agent '{agent}' in {place} (known agents: {known})")]
    UnknownAgent {
        agent: String,
        place: String,
        known: String,
    },
}

/// What is wrong with a race as written (`--race` or a story's `"race"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecProblem {
    #[error("must be a whole number of runs (got {0})")]
    NotWhole(String),
    #[error("must list agent names (strings)")]
    NotNames,
    #[error("must be a list of agent names or a number of runs (got {0})")]
    NotARace(String),
    #[error("a race needs 2 to {MAX_CONTESTANTS} contestants (got {0})")]
    Runs(u32),
    #[error("names an empty agent")]
    EmptyAgent,
    #[error("a race needs 1 to {MAX_CONTESTANTS} agents (got {0})")]
    Agents(usize),
}

impl RaceSpec {
    /// `--race` as written: `N` (2 or more runs of the resolved agent) or a
    /// comma list of agent names.
    pub fn parse(given: &str) -> Result<RaceSpec, RaceError> {
        let bad = |why| RaceError::Spec {
            given: given.to_string(),
            why,
        };
        let text = given.trim();
        if let Ok(n) = text.parse::<u32>() {
            return RaceSpec::runs(n).map_err(bad);
        }
        let agents: Vec<String> = text.split(',').map(|a| a.trim().to_string()).collect();
        RaceSpec::agents(agents).map_err(bad)
    }

    /// A story's `"race"`: a list of agent names, or a number of runs.
    pub fn from_json(v: &Value) -> Result<RaceSpec, SpecProblem> {
        match v {
            Value::Number(n) => {
                let n = n
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| SpecProblem::NotWhole(n.to_string()))?;
                RaceSpec::runs(n)
            }
            Value::Array(items) => {
                let agents = items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string))
                    .collect::<Option<Vec<String>>>()
                    .ok_or(SpecProblem::NotNames)?;
                RaceSpec::agents(agents)
            }
            other => Err(SpecProblem::NotARace(other.to_string())),
        }
    }

    fn runs(n: u32) -> Result<RaceSpec, SpecProblem> {
        if !(2..=MAX_CONTESTANTS).contains(&n) {
            return Err(SpecProblem::Runs(n));
        }
        Ok(RaceSpec::Runs(n))
    }

    fn agents(agents: Vec<String>) -> Result<RaceSpec, SpecProblem> {
        if agents.iter().any(String::is_empty) {
            return Err(SpecProblem::EmptyAgent);
        }
        // One agent alone is no race, but `["codex"]` on a story is a
        // clear wish: it runs once, as a race of one, rather than failing.
        if agents.is_empty() || agents.len() > MAX_CONTESTANTS as usize {
            return Err(SpecProblem::Agents(agents.len()));
        }
        Ok(RaceSpec::Agents(agents))
    }

    /// The agents this spec names (none for `N` runs).
    fn named(&self) -> &[String] {
        match self {
            RaceSpec::Agents(a) => a,
            RaceSpec::Runs(_) => &[],
        }
    }
}

/// The race of `story`, if it races: its own `"race"`, else the run's.
pub fn story_spec(story: &Story, options: &RaceOptions) -> Result<Option<RaceSpec>, SpecProblem> {
    match story.extra.get("race") {
        Some(Value::Null) | None => Ok(options.spec.clone()),
        Some(v) => RaceSpec::from_json(v).map(Some),
    }
}

/// Checks every pending story's race and `--race` against agents.json:
/// what a run refuses before it starts (exit 2).
pub fn check(
    prd: &Prd,
    prd_path: &Path,
    agents: &AgentsConfig,
    options: &RaceOptions,
) -> Result<(), RaceError> {
    let known = |agent: &str, place: &str| -> Result<(), RaceError> {
        match agents.agent(agent) {
            Some(_) => Ok(()),
            None => Err(RaceError::UnknownAgent {
                agent: agent.to_string(),
                place: place.to_string(),
                known: agents.names().join(", "),
            }),
        }
    };
    if let Some(spec) = &options.spec {
        for a in spec.named() {
            known(a, "--race")?;
        }
    }
    for story in prd.stories.iter().filter(|s| !s.is_complete()) {
        let Some(v) = story.extra.get("race").filter(|v| !v.is_null()) else {
            continue;
        };
        let spec = RaceSpec::from_json(v).map_err(|why| RaceError::Story {
            path: prd_path.to_path_buf(),
            story: story.id.clone(),
            why,
        })?;
        for a in spec.named() {
            known(a, &format!("story '{}' \"race\"", story.id))?;
        }
    }
    Ok(())
}

/// One contestant of a race.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contestant {
    /// The agent it runs.
    pub agent: String,
    /// Its name in the race: the agent, with `-n` when the agent races
    /// more than once (the branch is `<story branch>/race-<name>`).
    pub name: String,
}

/// The contestants of `spec`; `resolved` is the agent the story resolves
/// to (what `N` runs repeat).
pub fn contestants(spec: &RaceSpec, resolved: &str) -> Vec<Contestant> {
    let agents: Vec<String> = match spec {
        RaceSpec::Agents(a) => a.clone(),
        RaceSpec::Runs(n) => vec![resolved.to_string(); *n as usize],
    };
    let mut seen: std::collections::HashMap<&str, u32> = Default::default();
    agents
        .iter()
        .map(|agent| {
            let times = agents.iter().filter(|a| *a == agent).count();
            let n = seen.entry(agent.as_str()).or_insert(0);
            *n += 1;
            let name = if times > 1 {
                format!("{}-{n}", branch_safe(agent))
            } else {
                branch_safe(agent)
            };
            Contestant {
                agent: agent.clone(),
                name,
            }
        })
        .collect()
}

/// The branch of contestant `name` of the story on `story_branch`.
pub fn branch(story_branch: &str, name: &str) -> String {
    format!("{story_branch}/race-{name}")
}

/// An agent name as a piece of a branch name (what git refuses becomes `-`).
fn branch_safe(agent: &str) -> String {
    agent
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// A racing story's last round as the run state keeps it (the story's
/// `race`): every contestant side by side, then the winner. Written as the
/// round goes (`status` and the dashboard read it while it runs); a resumed
/// race starts a new record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RaceRecord {
    pub until: RaceUntil,
    pub keep: RaceKeep,
    pub contestants: Vec<ContestantRecord>,
    /// The winner's name, once the rule chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winner: Option<String>,
    /// What decided it against the runner-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The other contestants that passed, best first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runners_up: Vec<String>,
}

/// One contestant of a [`RaceRecord`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContestantRecord {
    pub name: String,
    pub agent: String,
    pub attempt: u32,
    pub branch: String,
    pub status: ContestantStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<crate::retry::FailureKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The review's verdict (`pass`, `needs_revision`, `missing`), when
    /// one reviewed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// Verification and review findings it passed with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findings: Option<usize>,
    /// Its gates' results (none when it stopped before the gates).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<crate::events::GateSummary>,
    /// Lines added plus removed, base to its commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines_changed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// What its work started from and its commit (its branch's diff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

impl RaceRecord {
    /// A round that starts: every contestant running.
    pub fn started(
        options: &RaceOptions,
        contestants: &[Contestant],
        branches: &[String],
        first: u32,
    ) -> RaceRecord {
        RaceRecord {
            until: options.until,
            keep: options.keep,
            contestants: contestants
                .iter()
                .zip(branches)
                .enumerate()
                .map(|(i, (c, branch))| ContestantRecord {
                    name: c.name.clone(),
                    agent: c.agent.clone(),
                    attempt: first + i as u32,
                    branch: branch.clone(),
                    status: ContestantStatus::Running,
                    error_type: None,
                    error: None,
                    verdict: None,
                    findings: None,
                    gates: Vec::new(),
                    lines_changed: None,
                    cost_usd: None,
                    base: None,
                    commit: None,
                })
                .collect(),
            winner: None,
            reason: None,
            runners_up: Vec::new(),
        }
    }

    /// The contestant named `name`.
    pub fn contestant_mut(&mut self, name: &str) -> Option<&mut ContestantRecord> {
        self.contestants.iter_mut().find(|c| c.name == name)
    }
}

/// What the rule knows of a contestant that passed every step.
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    /// The contestant's name.
    pub name: String,
    /// Whether a review said `pass` (`false`: no review, or no marker).
    pub review_passed: bool,
    /// Findings of verification and review the attempt still passed with.
    pub findings: usize,
    /// Lines added plus lines removed.
    pub lines: u64,
    pub cost_usd: Option<f64>,
    /// 0 for the first contestant to finish, 1 for the next...
    pub finished: usize,
}

/// The criteria after "passes everything", in the rule's order: how two
/// scores compare on each, and how the reason names a win on it.
fn criteria(a: &Score, b: &Score) -> [(Ordering, String); 5] {
    let cost = |s: &Score| s.cost_usd.unwrap_or(f64::INFINITY);
    let usd = |s: &Score| s.cost_usd.map_or("unknown".into(), |c| format!("${c:.4}"));
    [
        (
            b.review_passed.cmp(&a.review_passed),
            "its review passed".into(),
        ),
        (
            a.findings.cmp(&b.findings),
            format!("fewer findings ({} vs {})", a.findings, b.findings),
        ),
        (
            a.lines.cmp(&b.lines),
            format!("smaller change ({} vs {} lines)", a.lines, b.lines),
        ),
        (
            cost(a).total_cmp(&cost(b)),
            format!("lower cost ({} vs {})", usd(a), usd(b)),
        ),
        (a.finished.cmp(&b.finished), "earlier finish".into()),
    ]
}

/// The contestants that passed, best first (the rule), and why the first
/// beat the second (or that it was the only one to pass). `None`: nobody
/// passed.
pub fn rank(mut passed: Vec<Score>) -> Option<(Vec<Score>, String)> {
    passed.sort_by(|a, b| {
        criteria(a, b)
            .into_iter()
            .map(|(o, _)| o)
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    });
    let reason = match passed.as_slice() {
        [] => return None,
        [_] => "the only contestant to pass verification and every required gate".to_string(),
        [first, second, ..] => criteria(first, second)
            .into_iter()
            .find(|(o, _)| o.is_ne())
            .map_or_else(|| "earlier finish".to_string(), |(_, why)| why),
    };
    Some((passed, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(name: &str, lines: u64, finished: usize) -> Score {
        Score {
            name: name.into(),
            review_passed: false,
            findings: 0,
            lines,
            cost_usd: None,
            finished,
        }
    }

    fn winner(scores: Vec<Score>) -> (String, String) {
        let (ranked, why) = rank(scores).expect("someone passed");
        (ranked[0].name.clone(), why)
    }

    #[test]
    fn parses_a_list_a_number_and_refuses_nonsense() {
        assert_eq!(
            RaceSpec::parse("codex, claude-code").unwrap(),
            RaceSpec::Agents(vec!["codex".into(), "claude-code".into()])
        );
        assert_eq!(RaceSpec::parse("3").unwrap(), RaceSpec::Runs(3));
        let e = RaceSpec::parse("1").unwrap_err().to_string();
        assert!(e.contains("2 to 16 contestants (got 1)"), "{e}");
        let e = RaceSpec::parse("codex,,aider").unwrap_err().to_string();
        assert!(e.contains("empty agent"), "{e}");
        let e = RaceSpec::from_json(&serde_json::json!({"a": 1})).unwrap_err();
        assert!(e.to_string().contains("list of agent names"), "{e}");
        let e = RaceSpec::from_json(&serde_json::json!(["a", 2])).unwrap_err();
        assert_eq!(e, SpecProblem::NotNames);
        assert!(e.to_string().contains("strings"), "{e}");
    }

    #[test]
    fn contestants_are_named_after_their_agent_numbered_when_repeated() {
        let names: Vec<String> = contestants(&RaceSpec::Runs(2), "codex")
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["codex-1", "codex-2"]);
        let spec = RaceSpec::Agents(vec!["a.b".into(), "c".into(), "a.b".into()]);
        let names: Vec<String> = contestants(&spec, "x")
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["a-b-1", "c", "a-b-2"]);
        assert_eq!(branch("cascade/s1", "c"), "cascade/s1/race-c");
    }

    #[test]
    fn the_rule_goes_review_findings_size_cost_finish() {
        assert_eq!(rank(vec![]), None);
        let (w, why) = winner(vec![score("big", 40, 0), score("small", 3, 1)]);
        assert_eq!(
            (w.as_str(), why.as_str()),
            ("small", "smaller change (3 vs 40 lines)")
        );

        let mut reviewed = score("reviewed", 40, 1);
        reviewed.review_passed = true;
        let (w, why) = winner(vec![score("small", 3, 0), reviewed]);
        assert_eq!(
            (w.as_str(), why.as_str()),
            ("reviewed", "its review passed")
        );

        let mut found = score("found", 1, 0);
        found.findings = 2;
        let (w, why) = winner(vec![found, score("clean", 9, 1)]);
        assert_eq!(
            (w.as_str(), why.as_str()),
            ("clean", "fewer findings (0 vs 2)")
        );

        let mut cheap = score("cheap", 5, 1);
        cheap.cost_usd = Some(0.01);
        let (w, why) = winner(vec![score("unknown", 5, 0), cheap]);
        assert_eq!(w, "cheap");
        assert!(why.starts_with("lower cost ($0.0100 vs unknown"), "{why}");

        let (w, why) = winner(vec![score("late", 5, 1), score("early", 5, 0)]);
        assert_eq!((w.as_str(), why.as_str()), ("early", "earlier finish"));

        let (w, why) = winner(vec![score("alone", 500, 3)]);
        assert_eq!(w, "alone");
        assert!(why.starts_with("the only contestant"), "{why}");
    }
}
