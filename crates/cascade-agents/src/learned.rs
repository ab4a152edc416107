//! Learned routing (`--route learned`): which agent this repository's own
//! history says does best on each story type.
//!
//! The run database records every attempt with its agent, the story's type
//! and whether it passed. [`LearnedRoutes::from_outcomes`] turns those
//! tallies into one choice per type by a fixed rule, so the same history
//! always gives the same routes:
//!
//! 1. an agent counts for a type once it has at least [`MIN_JUDGED`] judged
//!    attempts of that type (attempts that ended in a verdict; rate limits,
//!    an unavailable CLI and budget stops judge nothing);
//! 2. among those, the lowest expected cost of a passing result wins (the
//!    cost of its judged attempts over the ones that passed), compared when
//!    both agents reported a cost; otherwise, and on a tie, the higher pass
//!    rate; then more judged attempts (more evidence); then the name;
//! 3. a winner whose pass rate is under one half is no route at all: the
//!    configured chain decides, as without `--route learned`.
//!
//! The resolver places a learned route after what the user named (`--agent`,
//! the phase flags, `story.agent` in the PRD) and before agents.json's
//! type and phase defaults; the chosen agent must still be usable, else
//! the chain falls back as always.

use std::collections::HashMap;

use crate::story_type::StoryType;

/// Judged attempts an agent needs on a type before its record counts.
pub const MIN_JUDGED: u32 = 3;

/// One agent's record on one story type, as the run database tallies it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub agent: String,
    pub story_type: StoryType,
    /// Attempts that ended in a verdict.
    pub judged: u32,
    /// Of those, the ones that passed.
    pub passed: u32,
    /// Their total cost in USD, when every one of them reported it.
    pub cost_usd: Option<f64>,
}

impl Outcome {
    fn rate(&self) -> f64 {
        f64::from(self.passed) / f64::from(self.judged.max(1))
    }

    /// What a passing result costs on average; `None` without a reported
    /// cost (a spend of 0 is an agent that reports none) or a pass.
    fn cost_per_pass(&self) -> Option<f64> {
        let cost = self.cost_usd.filter(|c| *c > 0.0)?;
        (self.passed > 0).then(|| cost / f64::from(self.passed))
    }
}

/// The agent history chose for a story type, and the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnedRoute {
    pub agent: String,
    pub judged: u32,
    pub passed: u32,
}

impl LearnedRoute {
    /// The resolver's reason for the route.
    pub fn reason(&self, story_type: StoryType) -> String {
        format!(
            "learned: {} passed {} of {} judged '{story_type}' attempts in this repository (--route learned)",
            self.agent, self.passed, self.judged
        )
    }
}

/// One learned route per story type that has one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LearnedRoutes {
    routes: HashMap<StoryType, LearnedRoute>,
}

impl LearnedRoutes {
    /// The routes the rule in this module's documentation gives for `outcomes`.
    pub fn from_outcomes(outcomes: impl IntoIterator<Item = Outcome>) -> LearnedRoutes {
        let mut best: HashMap<StoryType, Outcome> = HashMap::new();
        for o in outcomes.into_iter().filter(|o| o.judged >= MIN_JUDGED) {
            match best.get(&o.story_type) {
                Some(current) if !better(&o, current) => {}
                _ => {
                    best.insert(o.story_type, o);
                }
            }
        }
        let routes = best
            .into_iter()
            .filter(|(_, o)| 2 * o.passed >= o.judged)
            .map(|(t, o)| {
                let route = LearnedRoute {
                    agent: o.agent,
                    judged: o.judged,
                    passed: o.passed,
                };
                (t, route)
            })
            .collect();
        LearnedRoutes { routes }
    }

    /// The route for `story_type`, if history gives one.
    pub fn route(&self, story_type: StoryType) -> Option<&LearnedRoute> {
        self.routes.get(&story_type)
    }

    /// Whether history gave no route at all.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// Whether `a` beats `b` for the same type (rule 2).
fn better(a: &Outcome, b: &Outcome) -> bool {
    use std::cmp::Ordering;
    // Lower is better: compared the other way round.
    let by_cost = match (a.cost_per_pass(), b.cost_per_pass()) {
        (Some(x), Some(y)) => y.partial_cmp(&x).unwrap_or(Ordering::Equal),
        _ => Ordering::Equal,
    };
    let by_rate = a.rate().partial_cmp(&b.rate()).unwrap_or(Ordering::Equal);
    let by_evidence = a.judged.cmp(&b.judged);
    let by_name = b.agent.cmp(&a.agent);
    by_cost
        .then(by_rate)
        .then(by_evidence)
        .then(by_name)
        .is_gt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(agent: &str, t: StoryType, judged: u32, passed: u32, cost: Option<f64>) -> Outcome {
        Outcome {
            agent: agent.to_string(),
            story_type: t,
            judged,
            passed,
            cost_usd: cost,
        }
    }

    fn agent(r: &LearnedRoutes, t: StoryType) -> Option<&str> {
        r.route(t).map(|r| r.agent.as_str())
    }

    #[test]
    fn the_best_record_wins_per_type() {
        let r = LearnedRoutes::from_outcomes([
            o("claude-code", StoryType::Feature, 10, 6, Some(8.0)),
            o("codex", StoryType::Feature, 10, 9, Some(9.0)),
            o("claude-code", StoryType::Bugfix, 4, 4, None),
            o("codex", StoryType::Bugfix, 8, 5, Some(1.0)),
        ]);
        assert_eq!(agent(&r, StoryType::Feature), Some("codex"));
        assert_eq!(agent(&r, StoryType::Bugfix), Some("claude-code"));
        assert_eq!(agent(&r, StoryType::Test), None);
        assert_eq!(
            r.route(StoryType::Feature).map(|x| x.reason(StoryType::Feature)),
            Some(
                "learned: codex passed 9 of 10 judged 'feature' attempts in this repository (--route learned)"
                    .to_string()
            )
        );
    }

    #[test]
    fn too_little_evidence_or_a_poor_record_is_no_route() {
        let r = LearnedRoutes::from_outcomes([
            o(
                "codex",
                StoryType::Feature,
                MIN_JUDGED - 1,
                MIN_JUDGED - 1,
                None,
            ),
            o("aider", StoryType::Refactor, 6, 2, Some(1.0)),
        ]);
        assert!(r.is_empty());
    }

    #[test]
    fn the_cheaper_passing_result_wins_when_both_report_a_cost() {
        // 9 of 10 at $9 is $1 a pass; 6 of 10 at $3 is $0.50 a pass.
        let r = LearnedRoutes::from_outcomes([
            o("codex", StoryType::Feature, 10, 9, Some(9.0)),
            o("claude-code", StoryType::Feature, 10, 6, Some(3.0)),
        ]);
        assert_eq!(agent(&r, StoryType::Feature), Some("claude-code"));
        // An agent that reports no spend is judged by its pass rate.
        let r = LearnedRoutes::from_outcomes([
            o("codex", StoryType::Feature, 10, 9, Some(0.0)),
            o("claude-code", StoryType::Feature, 10, 6, Some(3.0)),
        ]);
        assert_eq!(agent(&r, StoryType::Feature), Some("codex"));
    }

    #[test]
    fn ties_go_to_the_pass_rate_then_more_evidence_then_the_name() {
        let r = LearnedRoutes::from_outcomes([
            o("b", StoryType::Feature, 4, 4, None),
            o("a", StoryType::Feature, 8, 8, None),
        ]);
        assert_eq!(agent(&r, StoryType::Feature), Some("a"));
        let r = LearnedRoutes::from_outcomes([
            o("a", StoryType::Feature, 4, 3, None),
            o("c", StoryType::Feature, 4, 4, None),
        ]);
        assert_eq!(agent(&r, StoryType::Feature), Some("c"));
        let r = LearnedRoutes::from_outcomes([
            o("b", StoryType::Feature, 4, 4, None),
            o("a", StoryType::Feature, 4, 4, None),
        ]);
        assert_eq!(agent(&r, StoryType::Feature), Some("a"));
    }
}
