//! The events of a mega run.
//!
//! Mega-level steps are [`MegaStep`]s (`{"event": "feature_merged", ...}`);
//! the engine's story events of a feature are passed through unchanged with a
//! `"feature"` field added ([`FeatureEvent`]), so `mega approve --json` is one
//! NDJSON stream whose last line is `{"event": "mega_finished", ...}`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::state::{FailureKind, FeatureCounts, MegaRunStatus, PrdSource, StoryCounts};
use crate::events::Event;

/// One line of a mega run's event stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum MegaEvent {
    Mega(MegaStep),
    Feature(FeatureEvent),
    /// An engine event about the mega run as a whole, without a feature:
    /// the `control` answer to a pause or resume of every feature.
    Run(Event),
}

/// An engine event of one feature's PRD run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FeatureEvent {
    pub feature: String,
    #[serde(flatten)]
    pub event: Event,
}

/// A step of the mega run itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum MegaStep {
    MegaStarted {
        plan: PathBuf,
        target_branch: String,
        features: usize,
        batches: usize,
        parallel: usize,
        resumed: bool,
    },
    FeatureBatchStarted {
        batch: usize,
        of: usize,
        features: Vec<String>,
    },
    /// The feature's worktree is ready on its branch.
    FeatureStarted {
        feature: String,
        branch: String,
        worktree: PathBuf,
        /// Whether an existing branch was reused (resume).
        reused: bool,
    },
    /// The feature's PRD is known.
    PrdReady {
        feature: String,
        path: PathBuf,
        source: PrdSource,
        stories: usize,
    },
    /// The PRD agent is called.
    PrdGenerationStarted {
        feature: String,
        attempt: u32,
        max_attempts: u32,
    },
    /// A call of the PRD agent ended: what it spent (charged to the run's
    /// budget, like a story's agent). `None`s: it reported nothing.
    PrdAgentFinished {
        feature: String,
        attempt: u32,
        agent: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input_tokens: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_tokens: Option<u64>,
    },
    /// What the PRD agent wrote was rejected.
    PrdInvalid {
        feature: String,
        attempt: u32,
        problems: Vec<String>,
    },
    /// The engine finished the feature's stories.
    FeatureStoriesFinished {
        feature: String,
        stories: StoryCounts,
    },
    FeatureMerged {
        feature: String,
        branch: String,
        target_branch: String,
        commit: String,
    },
    /// The feature failed for good; its branch and worktree are kept.
    FeatureFailed {
        feature: String,
        kind: FailureKind,
        error: String,
        branch: String,
        worktree: Option<PathBuf>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        conflict_files: Vec<String>,
    },
    FeatureBlocked {
        feature: String,
        blocked_by: String,
    },
    /// Integration gating of a feature's merge: the target moved since the
    /// feature started (`merged_since`: the features landed meanwhile), so
    /// the merge is checked out in a scratch worktree and the target's
    /// gates run on it before the target moves.
    FeatureIntegrationStarted {
        feature: String,
        merged_since: Vec<String>,
        target_branch: String,
    },
    /// The merged tree's gates ended: `passed` (the target moves to it) or
    /// not (nothing moved; the feature fails as `integration`).
    FeatureIntegrationFinished {
        feature: String,
        passed: bool,
        summary: String,
    },
    /// The gates ran on the target branch after a batch was merged.
    TargetGatesFinished {
        batch: usize,
        passed: bool,
        summary: String,
    },
    /// A landed feature's worktree and branch were removed.
    FeatureCleanedUp {
        feature: String,
    },
    /// Something worth knowing that changes nothing.
    MegaNotice {
        message: String,
    },
    /// Stopped after a batch (no `--auto-run`); approving again continues.
    MegaPaused {
        next_batch: usize,
        reason: String,
    },
    MegaFinished {
        status: MegaRunStatus,
        features: FeatureCounts,
        duration_ms: u64,
    },
}

impl From<MegaStep> for MegaEvent {
    fn from(s: MegaStep) -> Self {
        MegaEvent::Mega(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::RunStatus;

    #[test]
    fn feature_events_are_flat_with_the_feature_added() {
        let e = MegaEvent::Feature(FeatureEvent {
            feature: "auth".into(),
            event: Event::RunPaused { reason: "x".into() },
        });
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "run_paused");
        assert_eq!(v["feature"], "auth");
        let e: MegaEvent = MegaStep::MegaFinished {
            status: MegaRunStatus::Completed,
            features: FeatureCounts::default(),
            duration_ms: 1,
        }
        .into();
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "mega_finished");
        assert_eq!(v["status"], "completed");
        let _ = RunStatus::Completed;
    }
}
