//! The phases an agent can be chosen for, as named in agents.json's
//! `phase_defaults` and in `CASCADE_PHASE`.

use std::fmt;
use std::str::FromStr;

/// A phase of the work: each has its own default agent and fallback chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Writing a PRD (mega-plan features): `--prd-agent`.
    Planning,
    /// Implementing a story: `--impl-agent`.
    Implementation,
    /// Re-running a failed story with its error context: `--retry-agent`.
    Retry,
    /// Refactoring work.
    Refactor,
    /// Reviewing a finished story.
    Review,
    /// Resolving a conflict between a story's branch and the target branch.
    Merge,
}

impl Phase {
    /// Every phase, in the order agents.json lists them.
    pub const ALL: [Phase; 6] = [
        Phase::Planning,
        Phase::Implementation,
        Phase::Retry,
        Phase::Refactor,
        Phase::Review,
        Phase::Merge,
    ];

    /// The name used in agents.json and in `CASCADE_PHASE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Planning => "planning",
            Phase::Implementation => "implementation",
            Phase::Retry => "retry",
            Phase::Refactor => "refactor",
            Phase::Review => "review",
            Phase::Merge => "merge",
        }
    }

    /// The command-line flag that overrides the agent of this phase, if any.
    pub fn override_flag(self) -> Option<&'static str> {
        match self {
            Phase::Planning => Some("--prd-agent"),
            Phase::Implementation => Some("--impl-agent"),
            Phase::Retry => Some("--retry-agent"),
            Phase::Review => Some("--review-agent"),
            Phase::Refactor | Phase::Merge => None,
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown phase name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown phase '{0}' (expected one of: planning, implementation, retry, refactor, review, merge)")]
pub struct UnknownPhase(pub String);

impl FromStr for Phase {
    type Err = UnknownPhase;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "planning" | "plan" | "prd" => Ok(Phase::Planning),
            "implementation" | "impl" | "implement" => Ok(Phase::Implementation),
            "retry" => Ok(Phase::Retry),
            "refactor" | "refactoring" => Ok(Phase::Refactor),
            "review" => Ok(Phase::Review),
            "merge" | "merge-conflict" => Ok(Phase::Merge),
            _ => Err(UnknownPhase(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for phase in Phase::ALL {
            assert_eq!(phase.as_str().parse::<Phase>(), Ok(phase));
        }
        assert_eq!("impl".parse::<Phase>(), Ok(Phase::Implementation));
        let err = "deploy".parse::<Phase>().unwrap_err();
        assert!(err.to_string().contains("unknown phase 'deploy'"));
    }
}
