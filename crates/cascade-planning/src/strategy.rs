//! Strategy: how big the plan is and where it lives.
//!
//! With `--strategy auto` the planning agent writes Plan Cascade's
//! self-assessment (`{"task_analysis": {...}, "strategy_decision":
//! {"strategy", "confidence", "reasoning"}}`) and cascade takes its
//! `strategy`; the user can force one instead.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::PlanningError;

/// Plan Cascade's four execution strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Strategy {
    /// One story: a prd.json with a single story.
    Direct,
    /// prd.json + design_doc.json in the repository.
    HybridAuto,
    /// The same, on a new branch in its own worktree, completed by merging it.
    HybridWorktree,
    /// mega-plan.json + a project design_doc.json, run by `cascade mega approve`.
    MegaPlan,
}

impl Strategy {
    /// Plan Cascade's name (`DIRECT`, `HYBRID_AUTO`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Direct => "DIRECT",
            Strategy::HybridAuto => "HYBRID_AUTO",
            Strategy::HybridWorktree => "HYBRID_WORKTREE",
            Strategy::MegaPlan => "MEGA_PLAN",
        }
    }

    /// Reads a `--strategy` value (`direct|hybrid|worktree|mega`) or a Plan
    /// Cascade name, any case, `-` or `_`.
    pub fn parse(s: &str) -> Option<Strategy> {
        let norm = s.trim().to_ascii_lowercase().replace('-', "_");
        match norm.as_str() {
            "direct" => Some(Strategy::Direct),
            "hybrid" | "hybrid_auto" => Some(Strategy::HybridAuto),
            "worktree" | "hybrid_worktree" => Some(Strategy::HybridWorktree),
            "mega" | "mega_plan" => Some(Strategy::MegaPlan),
            _ => None,
        }
    }

    /// Writes a mega-plan rather than a prd.
    pub fn is_mega(self) -> bool {
        self == Strategy::MegaPlan
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the self-assessment said.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    pub strategy: Strategy,
    pub confidence: Option<f64>,
    pub reasoning: String,
    pub task_analysis: Value,
}

/// Reads `strategy.json` as the agent wrote it.
pub fn read_assessment(path: &Path) -> Result<Assessment, PlanningError> {
    let value = crate::steps::read_json(path)?;
    let shape = |message: String| PlanningError::Shape {
        path: path.to_path_buf(),
        message,
    };
    let decision = value
        .get("strategy_decision")
        .ok_or_else(|| shape("no \"strategy_decision\" object".into()))?;
    let name = decision
        .get("strategy")
        .and_then(Value::as_str)
        .ok_or_else(|| shape("\"strategy_decision.strategy\" is missing".into()))?;
    let strategy = Strategy::parse(name).ok_or_else(|| {
        shape(format!(
            "unknown strategy \"{name}\" (expected DIRECT, HYBRID_AUTO, HYBRID_WORKTREE or MEGA_PLAN)"
        ))
    })?;
    Ok(Assessment {
        strategy,
        confidence: decision.get("confidence").and_then(Value::as_f64),
        reasoning: decision
            .get("reasoning")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        task_analysis: value.get("task_analysis").cloned().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_flags() {
        for (s, want) in [
            ("auto_x", None),
            ("direct", Some(Strategy::Direct)),
            ("hybrid", Some(Strategy::HybridAuto)),
            ("HYBRID_WORKTREE", Some(Strategy::HybridWorktree)),
            ("worktree", Some(Strategy::HybridWorktree)),
            ("mega-plan", Some(Strategy::MegaPlan)),
        ] {
            assert_eq!(Strategy::parse(s), want, "{s}");
        }
        assert_eq!(
            serde_json::to_string(&Strategy::HybridAuto).unwrap(),
            "\"HYBRID_AUTO\""
        );
    }

    #[test]
    fn reads_the_self_assessment() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("strategy.json");
        std::fs::write(
            &p,
            r#"{"task_analysis": {"functional_areas": ["auth"], "estimated_stories": 3},
               "strategy_decision": {"strategy": "MEGA_PLAN", "confidence": 0.8, "reasoning": "big"}}"#,
        )
        .unwrap();
        let a = read_assessment(&p).unwrap();
        assert_eq!(a.strategy, Strategy::MegaPlan);
        assert_eq!(a.confidence, Some(0.8));
        assert_eq!(a.reasoning, "big");
        std::fs::write(&p, r#"{"strategy_decision": {"strategy": "HUGE"}}"#).unwrap();
        let e = read_assessment(&p).unwrap_err().to_string();
        assert!(e.contains("unknown strategy \"HUGE\""), "{e}");
    }
}
