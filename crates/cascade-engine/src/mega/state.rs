//! The mega run's state: which features exist, in which batch, where their
//! worktree and branch are, how far their stories got and why a feature
//! failed. It lives in the run database (`.cascade/cascade.db`, see
//! [`crate::store::mega`]) and is written in one transaction after every
//! transition, so a `kill -9` at any moment leaves the previous or the next
//! version, never half of one; `mega approve` resumes from it and `mega
//! status` reads it without taking the run lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::MegaError;
use crate::events::RunStatus;

/// Version of the state's layout; bumped on incompatible changes.
pub const MEGA_STATE_SCHEMA: u32 = 1;
/// File name under `.cascade/` of the mega state an older cascade kept
/// (imported once into the run database).
pub const MEGA_STATE_FILE: &str = "mega-state.json";

/// Where a feature is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureStatus {
    /// Not started (its batch has not come yet).
    Pending,
    /// The PRD agent is writing (or fixing) the feature's PRD.
    GeneratingPrd,
    /// The engine is running the feature's stories in its worktree.
    Running,
    /// The feature branch is being merged into the target branch.
    Merging,
    /// Merged into the target branch.
    Complete,
    /// Failed for good (see `failure`); its branch and worktree are kept.
    Failed,
    /// Not run because a feature it depends on failed or was blocked.
    Blocked,
}

impl FeatureStatus {
    /// The status as written in the state file and in `mega status`.
    pub fn as_str(self) -> &'static str {
        match self {
            FeatureStatus::Pending => "pending",
            FeatureStatus::GeneratingPrd => "generating_prd",
            FeatureStatus::Running => "running",
            FeatureStatus::Merging => "merging",
            FeatureStatus::Complete => "complete",
            FeatureStatus::Failed => "failed",
            FeatureStatus::Blocked => "blocked",
        }
    }
}

/// Why a feature failed: the engine's one failure classification.
pub use crate::retry::FailureKind;

/// What went wrong with a feature, for the state file and the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureFailure {
    pub kind: FailureKind,
    /// One human sentence (or several lines for validation errors).
    pub message: String,
    /// Conflicting files of a merge conflict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflict_files: Vec<String>,
}

/// Stories of a feature's PRD: how many there are and how many are merged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoryCounts {
    pub done: usize,
    pub total: usize,
    #[serde(default)]
    pub failed: usize,
    #[serde(default)]
    pub blocked: usize,
}

/// Where a feature's PRD came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrdSource {
    /// `prd.json` already present in the feature worktree (on the branch).
    Worktree,
    /// `features/<name>/prd.json` next to the mega-plan.
    PlanFolder,
    /// Written by the PRD agent.
    Generated,
}

/// Everything the run knows about one feature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureState {
    pub status: FeatureStatus,
    /// 1-based index of the feature's batch.
    pub batch: usize,
    /// `cascade/<name>`.
    pub branch: String,
    /// The feature worktree, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<PathBuf>,
    /// The PRD the engine runs, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prd: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prd_source: Option<PrdSource>,
    /// Calls of the PRD agent made for this feature.
    #[serde(default)]
    pub prd_attempts: u32,
    /// What those calls reported spending (USD, reported or priced), and
    /// how many said nothing: counted toward the run's budget on resume.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prd_cost_usd: f64,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub prd_unknown_spend: u32,
    #[serde(default)]
    pub stories: StoryCounts,
    /// The merge commit on the target branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FeatureFailure>,
    /// For a blocked feature: the dependency that failed or was blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<String>,
    /// Where the feature's `findings.md` was kept after its worktree was removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findings: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

impl FeatureState {
    /// What the feature's PRD agent calls spent, as a budget counts it.
    pub fn prd_spend(&self) -> crate::control::budget::Spend {
        crate::control::budget::Spend {
            known_usd: self.prd_cost_usd,
            unknown: self.prd_unknown_spend,
        }
    }

    /// A pending feature of batch `batch` on branch `branch`.
    pub fn pending(batch: usize, branch: String) -> Self {
        FeatureState {
            status: FeatureStatus::Pending,
            batch,
            branch,
            worktree: None,
            prd: None,
            prd_source: None,
            prd_attempts: 0,
            prd_cost_usd: 0.0,
            prd_unknown_spend: 0,
            stories: StoryCounts::default(),
            merge_commit: None,
            failure: None,
            blocked_by: None,
            findings: None,
            started_at: None,
            finished_at: None,
        }
    }
}

/// Result of re-running the gates on the target branch after a batch merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetGatesRecord {
    pub batch: usize,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
}

/// One mega run's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MegaState {
    pub schema_version: u32,
    /// The mega-plan (absolute path).
    pub plan: PathBuf,
    #[serde(default)]
    pub goal: String,
    pub target_branch: String,
    pub status: RunStatus,
    /// Feature names per batch, in run order.
    pub batches: Vec<Vec<String>>,
    /// Features by name, in plan order.
    pub features: BTreeMap<String, FeatureState>,
    /// Gate results on the target branch, one per merged batch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_gates: Vec<TargetGatesRecord>,
    /// pid of the process running the plan (informational; the lock decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The options the run was started with (`mega resume` continues with
    /// them), as the binary that owns the flags recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<serde_json::Value>,
    pub started_at: String,
    pub updated_at: String,
}

impl MegaState {
    /// A fresh state with every feature pending.
    pub fn new(
        plan: PathBuf,
        goal: String,
        target_branch: String,
        batches: Vec<Vec<String>>,
    ) -> Self {
        let mut features = BTreeMap::new();
        for (i, batch) in batches.iter().enumerate() {
            for name in batch {
                features.insert(
                    name.clone(),
                    FeatureState::pending(i + 1, feature_branch(name)),
                );
            }
        }
        let now = now();
        MegaState {
            schema_version: MEGA_STATE_SCHEMA,
            plan,
            goal,
            target_branch,
            status: RunStatus::Running,
            batches,
            features,
            target_gates: Vec::new(),
            pid: Some(std::process::id()),
            options: None,
            started_at: now.clone(),
            updated_at: now,
        }
    }

    /// Reads the repository's mega run from the run database, `Ok(None)`
    /// when there is none (see [`crate::store::mega`]).
    pub fn load(cascade_dir: &Path) -> Result<Option<MegaState>, MegaError> {
        crate::store::mega::load(cascade_dir)
    }

    /// Writes the state in one transaction, stamping `updated_at`.
    pub fn save(&mut self, cascade_dir: &Path) -> Result<(), MegaError> {
        self.updated_at = now();
        crate::store::mega::save(cascade_dir, self)
    }

    /// The feature's state (every planned feature has one).
    pub fn feature(&self, name: &str) -> Option<&FeatureState> {
        self.features.get(name)
    }

    /// Mutable state of a feature.
    pub fn feature_mut(&mut self, name: &str) -> Option<&mut FeatureState> {
        self.features.get_mut(name)
    }

    /// Feature names in batch order.
    pub fn ordered_features(&self) -> impl Iterator<Item = (&String, &FeatureState)> {
        self.batches
            .iter()
            .flatten()
            .filter_map(|n| self.features.get_key_value(n))
    }

    /// How many features are in each status, in a fixed order.
    pub fn counts(&self) -> FeatureCounts {
        let mut c = FeatureCounts::default();
        for f in self.features.values() {
            match f.status {
                FeatureStatus::Complete => c.complete += 1,
                FeatureStatus::Failed => c.failed += 1,
                FeatureStatus::Blocked => c.blocked += 1,
                FeatureStatus::Pending => c.pending += 1,
                FeatureStatus::GeneratingPrd | FeatureStatus::Running | FeatureStatus::Merging => {
                    c.running += 1
                }
            }
        }
        c
    }
}

/// Features per status (`mega status`, `mega_finished`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureCounts {
    pub complete: usize,
    pub failed: usize,
    pub blocked: usize,
    pub running: usize,
    pub pending: usize,
}

/// `cascade/<feature-name>`: the branch of a feature.
pub fn feature_branch(name: &str) -> String {
    format!("cascade/{name}")
}

/// The current time as RFC 3339 (UTC, seconds).
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Replaces `path` atomically and fsynced (see `cascade_fs::write_atomic`),
/// the error as a [`MegaError`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), MegaError> {
    cascade_fs::write_atomic(path, bytes, cascade_fs::Durability::Synced)
        .map_err(|e| MegaError::io("write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> MegaState {
        MegaState::new(
            PathBuf::from("/tmp/mega-plan.json"),
            "goal".into(),
            "main".into(),
            vec![vec!["auth".into()], vec!["api".into(), "ui".into()]],
        )
    }

    /// The `features` rows of the database in `dir`: name, batch, status,
    /// failure kind, per mega run.
    fn feature_rows(dir: &Path) -> Vec<(i64, String, i64, String, Option<String>)> {
        let conn = rusqlite::Connection::open(crate::store::db_path(dir)).unwrap();
        let mut q = conn
            .prepare("SELECT mega_run, name, batch, status, failure_kind FROM features ORDER BY mega_run, name")
            .unwrap();
        let rows = q
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap();
        rows.map(Result::unwrap).collect()
    }

    #[test]
    fn round_trips_through_the_database_and_the_latest_mega_run_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = sample();
        s.feature_mut("api").unwrap().status = FeatureStatus::Failed;
        s.feature_mut("api").unwrap().failure = Some(FeatureFailure {
            kind: FailureKind::MergeConflict,
            message: "conflict in a.txt".into(),
            conflict_files: vec!["a.txt".into()],
        });
        s.save(tmp.path()).unwrap();
        assert_eq!(MegaState::load(tmp.path()).unwrap().as_ref(), Some(&s));
        // A transition rewrites the same mega run.
        s.feature_mut("auth").unwrap().status = FeatureStatus::Complete;
        s.save(tmp.path()).unwrap();
        assert_eq!(MegaState::load(tmp.path()).unwrap().as_ref(), Some(&s));
        let failed = Some("merge_conflict".to_string());
        assert_eq!(
            feature_rows(tmp.path()),
            vec![
                (1, "api".into(), 2, "failed".into(), failed.clone()),
                (1, "auth".into(), 1, "complete".into(), None),
                (1, "ui".into(), 2, "pending".into(), None),
            ]
        );
        // Another mega-plan's run is the latest; the first stays queryable.
        let mut other = MegaState::new(
            PathBuf::from("/tmp/other-plan.json"),
            "other".into(),
            "main".into(),
            vec![vec!["solo".into()]],
        );
        other.save(tmp.path()).unwrap();
        assert_eq!(MegaState::load(tmp.path()).unwrap(), Some(other));
        assert_eq!(feature_rows(tmp.path()).len(), 4);
        // Nothing but the database is written.
        let names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("cascade.db"))
            .collect();
        assert!(names.is_empty(), "{names:?}");
    }

    #[test]
    fn an_older_cascades_state_file_is_imported_once() {
        let tmp = tempfile::tempdir().unwrap();
        let s = sample();
        let legacy = crate::store::mega::legacy_path(tmp.path());
        std::fs::write(&legacy, serde_json::to_string_pretty(&s).unwrap()).unwrap();
        assert_eq!(MegaState::load(tmp.path()).unwrap().as_ref(), Some(&s));
        assert!(!legacy.exists());
        assert!(tmp.path().join("mega-state.json.imported").is_file());
        // Read from the database from now on.
        assert_eq!(MegaState::load(tmp.path()).unwrap(), Some(s));
    }

    #[test]
    fn missing_state_is_none_and_a_bad_older_file_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(MegaState::load(tmp.path()).unwrap().is_none());
        assert!(
            !crate::store::db_path(tmp.path()).exists(),
            "a read makes no database"
        );
        let legacy = crate::store::mega::legacy_path(tmp.path());
        std::fs::write(&legacy, r#"{"schema_version": 99, "features": {}}"#).unwrap();
        let err = MegaState::load(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("schema version 99"), "{err}");
        std::fs::write(&legacy, "{not json").unwrap();
        let err = MegaState::load(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("mega-state.json"), "{err}");
        assert!(
            legacy.exists(),
            "a file that cannot be read is left as it is"
        );
    }

    #[test]
    fn counts_and_order() {
        let mut s = sample();
        s.feature_mut("auth").unwrap().status = FeatureStatus::Complete;
        s.feature_mut("ui").unwrap().status = FeatureStatus::Blocked;
        s.feature_mut("api").unwrap().status = FeatureStatus::Running;
        let c = s.counts();
        assert_eq!((c.complete, c.blocked, c.running, c.pending), (1, 1, 1, 0));
        let order: Vec<_> = s.ordered_features().map(|(n, _)| n.as_str()).collect();
        assert_eq!(order, ["auth", "api", "ui"]);
    }
}
