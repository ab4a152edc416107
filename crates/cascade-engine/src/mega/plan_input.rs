//! From `mega-plan.json` to the runner's [`PlanInput`]: load, validate with
//! cascade-plan (every problem at once) and batch the features with the same
//! analyzer as stories, then speak in feature *names* (branches, worktrees,
//! state) rather than ids.

use std::collections::HashMap;
use std::path::Path;

use super::error::MegaError;
use super::run::{FeatureSpec, PlanInput};

/// Loads and validates the mega-plan at `path` (made absolute by the caller).
pub fn load_plan(path: &Path) -> Result<PlanInput, MegaError> {
    let mega = cascade_plan::load_mega(path).map_err(|e| MegaError::Plan(e.to_string()))?;
    let valid = cascade_plan::validate_mega(&mega)
        .map_err(|e| MegaError::Plan(format!("'{}' is an {e}", path.display())))?;
    if mega.features.is_empty() {
        return Err(MegaError::Plan(format!(
            "'{}' has no features; add at least one to `features`",
            path.display()
        )));
    }
    let by_id: HashMap<&str, &cascade_plan::Feature> =
        mega.features.iter().map(|f| (f.id.trim(), f)).collect();
    let name_of = |dep: &str| -> String {
        by_id
            .get(dep.trim())
            .map(|f| f.name.trim().to_string())
            .unwrap_or_else(|| dep.trim().to_string())
    };
    // Features already complete in the plan have landed: not run, and no
    // dependency on them blocks anything.
    let features: Vec<FeatureSpec> = mega
        .features
        .iter()
        .filter(|f| !f.is_complete())
        .map(|f| FeatureSpec {
            id: f.id.trim().to_string(),
            name: f.name.trim().to_string(),
            title: f.title.clone(),
            description: f.description.clone(),
            priority: f.priority.as_str().to_string(),
            dependencies: f
                .dependency_ids()
                .filter(|d| by_id.get(d.trim()).map_or(true, |f| !f.is_complete()))
                .map(name_of)
                .collect(),
        })
        .collect();
    let batches: Vec<Vec<String>> = valid
        .batches()
        .into_iter()
        .map(|batch| batch.iter().map(|id| name_of(id.as_str())).collect())
        .filter(|b: &Vec<String>| !b.is_empty())
        .collect();
    Ok(PlanInput {
        path: path.to_path_buf(),
        goal: mega.goal.clone(),
        target_branch: mega.target_branch.clone().filter(|t| !t.trim().is_empty()),
        features,
        batches,
        execution_mode: mega.execution_mode.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_by_name_and_complete_features_drop_out() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("mega-plan.json");
        std::fs::write(
            &path,
            r#"{"goal": "g", "target_branch": "main", "features": [
              {"id": "f1", "name": "auth", "title": "Auth", "dependencies": []},
              {"id": "f2", "name": "api", "title": "API", "dependencies": ["f1", "f0"]},
              {"id": "f0", "name": "base", "title": "Base", "status": "complete"},
              {"id": "f3", "name": "ui", "title": "UI", "dependencies": ["f2"]}
            ]}"#,
        )
        .unwrap();
        let plan = load_plan(&path).unwrap();
        assert_eq!(plan.batches, vec![vec!["auth"], vec!["api"], vec!["ui"]]);
        let api = plan.features.iter().find(|f| f.name == "api").unwrap();
        assert_eq!(api.dependencies, vec!["auth"]);
        assert_eq!(plan.target_branch.as_deref(), Some("main"));
        assert_eq!(plan.features.len(), 3);
        assert!(!plan.auto_mode());
    }

    #[test]
    fn execution_mode_auto_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("mega-plan.json");
        for (mode, auto) in [
            ("\"auto\"", true),
            ("\"AUTO\"", true),
            ("\"manual\"", false),
        ] {
            std::fs::write(
                &path,
                format!(
                    r#"{{"goal": "g", "execution_mode": {mode}, "features": [
                      {{"id": "f1", "name": "auth", "title": "Auth", "dependencies": []}}]}}"#
                ),
            )
            .unwrap();
            assert_eq!(load_plan(&path).unwrap().auto_mode(), auto, "{mode}");
        }
    }

    #[test]
    fn invalid_plans_name_every_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("mega-plan.json");
        std::fs::write(
            &path,
            r#"{"features": [
              {"id": "f1", "name": "Auth", "title": "A", "dependencies": ["f2"]},
              {"id": "f2", "name": "api", "title": "B", "dependencies": ["f1"]}
            ]}"#,
        )
        .unwrap();
        let err = load_plan(&path).unwrap_err().to_string();
        assert!(err.contains("Auth"), "{err}");
        assert!(err.contains("->"), "{err}");
    }
}
