//! A failed attempt: how it is classified, what it says, and what the next
//! prompt shows of it. The one type a step stops with, a retry carries into
//! its prompt, and a fleet job carries both ways
//! ([`JobFailure`](crate::executor::JobFailure) on the wire).

use serde::{Deserialize, Serialize};

use crate::retry::FailureKind;

/// One failed attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// The agent the failure is charged to: set when the attempt ends
    /// ([`Failure::charged_to`]); empty while a step builds it. (A boxed
    /// `str`: a step's `Result` stays small.)
    #[serde(default)]
    pub agent: Box<str>,
    pub kind: FailureKind,
    pub error: String,
    #[serde(default)]
    pub gate_summary: String,
    #[serde(default)]
    pub output_excerpt: String,
    /// What verification or the review found, for the next prompt.
    #[serde(default)]
    pub findings: String,
}

impl Failure {
    pub fn new(kind: FailureKind, error: impl Into<String>) -> Failure {
        Failure {
            agent: Box::default(),
            kind,
            error: error.into(),
            gate_summary: String::new(),
            output_excerpt: String::new(),
            findings: String::new(),
        }
    }

    /// The same failure with the output excerpt the retry prompt shows.
    pub fn with_excerpt(mut self, excerpt: impl Into<String>) -> Failure {
        self.output_excerpt = excerpt.into();
        self
    }

    /// The same failure charged to `agent`.
    pub fn charged_to(mut self, agent: &str) -> Failure {
        self.agent = agent.into();
        self
    }
}
