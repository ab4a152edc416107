//! The demo agent's planning steps (`cascade demo --plan`): offline answers
//! to every `CASCADE_PLAN_STEP`, so the whole planning workflow runs without
//! a model: a self-assessment, two questions, one decision, the demo's
//! prd.json and design_doc.json, a self-review marker, and a challenge that
//! asks for one revision before it approves.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::json;

/// The design doc the demo planner writes (story_mappings for all six stories).
pub const DESIGN_DOC: &str = include_str!("../../../examples/demo/design_doc.json");

/// What the challenger asks for in its first round (and the revision adds).
const MISSING_CRITERION: &str = "report(\"\") is a valid markdown document";

fn env_path(var: &str) -> anyhow::Result<PathBuf> {
    std::env::var_os(var).map(PathBuf::from).with_context(|| {
        format!("{var} is not set (the demo agent is run by `cascade demo --plan`)")
    })
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write '{}'", path.display()))?;
    outln!("demo planner: wrote {}", path.display());
    Ok(())
}

/// Runs planning step `step` in `workdir`.
pub fn run(step: &str, workdir: &Path) -> anyhow::Result<()> {
    match step {
        "strategy" => write(
            &env_path("CASCADE_OUTPUT")?,
            &json!({
                "task_analysis": {"functional_areas": ["tokenizing", "statistics", "formatting"],
                    "estimated_stories": 6, "has_dependencies": true,
                    "requires_architecture_decisions": true, "risk_level": "low",
                    "parallelization_benefit": "significant"},
                "strategy_decision": {"strategy": "HYBRID_AUTO", "confidence": 0.9,
                    "reasoning": "one library, six modules with dependencies between them: a PRD with a design doc"}
            })
            .to_string(),
        ),
        "discovery" => write(
            &env_path("CASCADE_OUTPUT")?,
            &json!({"questions": [
                {"id": "q-1", "type": "scope", "question": "Should the library handle Unicode word boundaries?",
                 "context": "full segmentation needs a dependency", "options": ["alphanumeric runs only", "full Unicode segmentation"],
                 "assumption": "alphanumeric runs only"},
                {"id": "q-2", "type": "constraint", "question": "May the library use third-party crates?",
                 "context": "decides how words and case are implemented", "options": ["standard library only", "small well-known crates"],
                 "assumption": "standard library only"}
            ]})
            .to_string(),
        ),
        "design" => write(
            &env_path("CASCADE_OUTPUT")?,
            &json!({"decisions": [
                {"id": "d-1", "topic": "How ties in word frequencies are ordered", "context": "top_words must be deterministic",
                 "options": [
                    {"id": "opt-a", "name": "Alphabetically", "description": "most frequent first, ties alphabetical",
                     "tradeoffs": {"pros": ["stable output", "easy to test"], "cons": ["not first-seen order"]}},
                    {"id": "opt-b", "name": "First seen", "description": "ties in order of first occurrence",
                     "tradeoffs": {"pros": ["reads naturally"], "cons": ["needs positions"]}}],
                 "recommendation": "opt-a"}],
             "summary": "Six small modules over one word splitter, standard library only, pure functions with unit tests."})
            .to_string(),
        ),
        "generate" | "fix" | "revise" => {
            let cascade_dir = cascade_git::RepoPaths::discover(workdir)?.cascade_dir();
            let mut prd: serde_json::Value =
                serde_json::from_str(&super::prd_json(&cascade_dir.join("demo-target"))?)?;
            if step == "revise" {
                if let Some(criteria) = prd
                    .pointer_mut("/stories/5/acceptance_criteria")
                    .and_then(|c| c.as_array_mut())
                {
                    criteria.push(MISSING_CRITERION.into());
                }
            }
            write(
                &env_path("CASCADE_PRD_PATH")?,
                &serde_json::to_string_pretty(&prd)?,
            )?;
            write(&env_path("CASCADE_DESIGN_DOC_PATH")?, DESIGN_DOC)
        }
        "self-review" => {
            outln!("demo planner: every story has a module, tests and a design mapping");
            outln!("<review>PASS</review>");
            Ok(())
        }
        "challenge" => {
            let round: u32 = std::env::var("CASCADE_ATTEMPT")
                .ok()
                .and_then(|a| a.parse().ok())
                .unwrap_or(1);
            let prd = std::fs::read_to_string(env_path("CASCADE_PRD_PATH")?).unwrap_or_default();
            let text = if round == 1 && !prd.contains(MISSING_CRITERION) {
                format!(
                    "# Challenge\n\n- story-006 (Markdown report) does not say what the report of an empty text is; add the criterion `{MISSING_CRITERION}`.\n- The rest is sound: the diamond of dependencies matches the data flow of the design doc.\n\nVerdict: NEEDS_REVISION\n"
                )
            } else {
                "# Challenge\n\n- story-006 now covers the empty text.\n- Stories are small, ordered and testable; every story maps to its component.\n\nVerdict: APPROVED\n".to_string()
            };
            write(&env_path("CASCADE_OUTPUT")?, &text)
        }
        other => anyhow::bail!("the demo planner does not know the planning step '{other}'"),
    }
}
