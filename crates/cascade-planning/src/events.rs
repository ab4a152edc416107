//! Typed events of a planning session; the binary renders them as text or
//! as the NDJSON of `cascade plan --json` (one object per line with an
//! `"event"` field).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::session::{Decision, Question};

/// Something that happened in a planning session.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum PlanEvent {
    PlanStarted {
        session_id: String,
        instruction: String,
        status: String,
        resumed: bool,
    },
    /// The strategy was chosen (assessed by the agent or forced).
    Strategy {
        strategy: String,
        source: String,
        confidence: Option<f64>,
        reasoning: String,
    },
    /// The agents the session uses.
    Agents {
        generator: String,
        reviewer: String,
        note: Option<String>,
    },
    StepStarted {
        step: String,
        agent: String,
        attempt: u32,
        resumed_session: bool,
    },
    StepFinished {
        step: String,
        agent: String,
        ok: bool,
        model: Option<String>,
        tokens_in: u64,
        tokens_out: u64,
        cost: Option<f64>,
        duration_ms: u64,
        total_cost: f64,
    },
    /// A question to answer (and, once known, its answer and who gave it).
    Question {
        #[serde(flatten)]
        question: Question,
        index: usize,
        total: usize,
        answered_by: Option<String>,
    },
    Decision {
        #[serde(flatten)]
        decision: Decision,
        index: usize,
        total: usize,
        decided_by: Option<String>,
    },
    /// What local validation found in a draft.
    Validation {
        ok: bool,
        problems: Vec<String>,
    },
    /// A self-review marker or a challenge verdict.
    Verdict {
        kind: String,
        verdict: String,
        round: u32,
        agent: String,
    },
    /// The person's review of the plan.
    Review {
        answer: String,
        reason: Option<String>,
        reject_count: u32,
    },
    Warning {
        message: String,
    },
    /// The session waits for a person: `waiting_for` keys, and where to put them.
    Paused {
        session_id: String,
        status: String,
        waiting_for: Vec<String>,
        answers_file: String,
    },
    PlanFinished {
        session_id: String,
        status: String,
        strategy: Option<String>,
        outputs: BTreeMap<String, String>,
        total_cost: f64,
        error: Option<String>,
    },
}
