//! Local validation of what a generate/fix/revise step wrote: the same
//! validator as `cascade validate` (schema, ids, unknown dependencies,
//! cycles) plus the design-doc checks of [`crate::design_doc::check`].

use std::path::Path;

use cascade_plan::{load_mega, load_prd, validate_mega, validate_prd};

use crate::design_doc;
use crate::generator::PlanCheck;
use crate::strategy::Strategy;

/// The files a plan consists of.
#[derive(Debug, Clone)]
pub struct PlanFiles<'a> {
    /// prd.json (DIRECT / HYBRID_*) or mega-plan.json (MEGA_PLAN).
    pub plan: &'a Path,
    pub design_doc: &'a Path,
}

/// Checks a prd alone (what mega-plan feature PRDs need): the count of
/// stories or every problem.
pub fn check_prd(path: &Path) -> PlanCheck {
    let prd = load_prd(path).map_err(|e| vec![e.to_string()])?;
    validate_prd(&prd).map_err(|e| e.messages())?;
    if prd.stories.is_empty() {
        return Err(vec![no_items(path, "stories")]);
    }
    Ok(prd.stories.len())
}

/// Checks the plan file and its design doc for `strategy`.
pub fn check_plan(strategy: Strategy, files: &PlanFiles<'_>) -> PlanCheck {
    let mut problems = Vec::new();
    let (ids, key, count) = if strategy.is_mega() {
        match load_mega(files.plan) {
            Err(e) => return Err(vec![e.to_string()]),
            Ok(mega) => {
                if let Err(e) = validate_mega(&mega) {
                    problems.extend(e.messages());
                }
                if mega.features.is_empty() {
                    problems.push(no_items(files.plan, "features"));
                }
                let ids: Vec<Vec<String>> = mega
                    .features
                    .iter()
                    .map(|f| {
                        let mut alts = vec![f.id.clone()];
                        if !f.name.is_empty() && f.name != f.id {
                            alts.push(f.name.clone());
                        }
                        alts
                    })
                    .collect();
                (ids, "feature_mappings", mega.features.len())
            }
        }
    } else {
        match load_prd(files.plan) {
            Err(e) => return Err(vec![e.to_string()]),
            Ok(prd) => {
                if let Err(e) = validate_prd(&prd) {
                    problems.extend(e.messages());
                }
                if prd.stories.is_empty() {
                    problems.push(no_items(files.plan, "stories"));
                }
                if strategy == Strategy::Direct && prd.stories.len() != 1 {
                    problems.push(format!(
                        "{}: the DIRECT strategy is a one-story plan, but it has {} stories",
                        files.plan.display(),
                        prd.stories.len()
                    ));
                }
                let ids = prd.stories.iter().map(|s| vec![s.id.clone()]).collect();
                (ids, "story_mappings", prd.stories.len())
            }
        }
    };
    match crate::steps::read_json(files.design_doc) {
        Ok(doc) => problems.extend(design_doc::check(&doc, key, &ids)),
        Err(e) => problems.push(e.to_string()),
    }
    if problems.is_empty() {
        Ok(count)
    } else {
        Err(problems)
    }
}

fn no_items(path: &Path, what: &str) -> String {
    format!(
        "{}: the plan has no {what} (write at least one)",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prd_and_design_doc_problems_are_all_listed() {
        let tmp = tempfile::tempdir().unwrap();
        let prd = tmp.path().join("prd.json");
        let dd = tmp.path().join("design_doc.json");
        std::fs::write(
            &prd,
            r#"{"goal": "g", "stories": [
              {"id": "story-001", "title": "A", "dependencies": ["story-009"]},
              {"id": "story-002", "title": "B"}]}"#,
        )
        .unwrap();
        std::fs::write(
            &dd,
            r#"{"architecture": {"components": [{"name": "Auth"}]},
                "story_mappings": {"story-001": {"components": ["Auth"]}}}"#,
        )
        .unwrap();
        let files = PlanFiles {
            plan: &prd,
            design_doc: &dd,
        };
        let p = check_plan(Strategy::HybridAuto, &files)
            .unwrap_err()
            .join("\n");
        assert!(p.contains("story-009"), "{p}");
        assert!(
            p.contains("'story-002' has no entry in story_mappings"),
            "{p}"
        );
        let p = check_plan(Strategy::Direct, &files).unwrap_err().join("\n");
        assert!(p.contains("one-story plan, but it has 2 stories"), "{p}");
        std::fs::write(&prd, "{\"stories\": [").unwrap();
        let p = check_plan(Strategy::HybridAuto, &files)
            .unwrap_err()
            .join("\n");
        assert!(p.contains("prd.json:1:"), "{p}");
    }

    #[test]
    fn a_valid_mega_plan_with_feature_mappings_passes() {
        let tmp = tempfile::tempdir().unwrap();
        let mega = tmp.path().join("mega-plan.json");
        let dd = tmp.path().join("design_doc.json");
        std::fs::write(
            &mega,
            r#"{"goal": "g", "features": [
              {"id": "feature-001", "name": "auth", "title": "Auth"},
              {"id": "feature-002", "name": "api", "title": "API", "dependencies": ["feature-001"]}]}"#,
        )
        .unwrap();
        std::fs::write(
            &dd,
            r#"{"architecture": {"patterns": [{"name": "Layers"}]},
                "feature_mappings": {"feature-001": {"patterns": ["Layers"]}, "api": {}}}"#,
        )
        .unwrap();
        let files = PlanFiles {
            plan: &mega,
            design_doc: &dd,
        };
        assert_eq!(check_plan(Strategy::MegaPlan, &files), Ok(2));
        assert!(check_prd(&mega).is_err());
    }
}
