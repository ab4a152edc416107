//! The prompt of every planning step (markdown).
//!
//! Each prompt is self-contained (goal, what is known so far, the exact
//! path(s) to write and their schema), so a step works the same whether the
//! agent continues its earlier session or starts a new one. The paths are
//! also in the environment (`CASCADE_OUTPUT`, `CASCADE_PRD_PATH`, ...).

use std::path::Path;

use crate::design_doc::{Import, ImportKind, SCHEMA as DESIGN_SCHEMA};
use crate::generator::{fix_section, truncate, FixContext};
use crate::session::Session;
use crate::steps::Step;
use crate::strategy::Strategy;

/// Largest imported document or challenge text copied into a prompt.
const MAX_DOC: usize = 32 * 1024;

/// Paths of the session's files, as the prompts name them.
#[derive(Debug, Clone)]
pub struct Paths<'a> {
    pub output: Option<&'a Path>,
    pub prd: &'a Path,
    pub mega: &'a Path,
    pub design_doc: &'a Path,
    pub challenge: &'a Path,
}

const PRD_SCHEMA: &str = r#"```json
{
  "metadata": {"description": "...", "version": "1.0.0"},
  "goal": "what the plan achieves",
  "objectives": ["..."],
  "stories": [
    {"id": "story-001", "title": "short title", "description": "what to do, precisely",
     "priority": "high", "dependencies": [], "status": "pending",
     "acceptance_criteria": ["..."], "context_estimate": "small"}
  ]
}
```
Rules: story ids unique (letters, digits, `-`, `_`, `.`); `priority` high, medium or low;
`dependencies` only name ids of this PRD and form no cycle; every story `pending`; stories
small enough for one agent session each."#;

const MEGA_SCHEMA: &str = r#"```json
{
  "goal": "the project goal",
  "execution_mode": "auto",
  "target_branch": "main",
  "features": [
    {"id": "feature-001", "name": "auth", "title": "Authentication",
     "description": "what the feature delivers", "priority": "high",
     "dependencies": [], "status": "pending"}
  ]
}
```
Rules: feature `name` matches `^[a-z0-9][a-z0-9-]*$`; ids and names unique; dependencies name
other features and form no cycle."#;

fn header(s: &Session, step: Step) -> String {
    format!(
        "# cascade planning: {} step\n\nYou are planning, not implementing: do not change the \
         project's code. Write only the file(s) named below.\n\n## Goal\n\n{}\n\n",
        step,
        s.instruction.trim()
    )
}

/// What discovery and design settled, for the later steps.
fn known_so_far(s: &Session) -> String {
    let mut p = String::new();
    if let Some(strategy) = s.strategy {
        p.push_str(&format!("## Strategy\n\n{}", strategy));
        if let Some(r) = &s.strategy_reasoning {
            p.push_str(&format!(": {r}"));
        }
        p.push_str("\n\n");
    }
    let answered: Vec<_> = s.questions.iter().filter(|q| q.answer.is_some()).collect();
    if !answered.is_empty() {
        p.push_str("## Clarified requirements\n\n");
        for kind in [
            "clarification",
            "scope",
            "technical",
            "priority",
            "constraint",
        ] {
            for q in answered.iter().filter(|q| q.kind.as_str() == kind) {
                p.push_str(&format!(
                    "- ({kind}) {} -> {}\n",
                    q.question,
                    q.answer.as_deref().unwrap_or_default()
                ));
            }
        }
        p.push('\n');
    }
    let decided: Vec<_> = s
        .decisions
        .iter()
        .filter(|d| d.selected_option_id.is_some())
        .collect();
    if !decided.is_empty() {
        p.push_str("## Design decisions (record each as an ADR in design_doc.json)\n\n");
        for d in decided {
            let id = d.selected_option_id.as_deref().unwrap_or_default();
            let name = d.option(id).map(|o| o.name.as_str()).unwrap_or(id);
            p.push_str(&format!("- {}: **{}**", d.topic, name));
            if let Some(r) = d.rationale.as_deref().filter(|r| !r.is_empty()) {
                p.push_str(&format!(" (rationale: {r})"));
            }
            p.push('\n');
        }
        p.push('\n');
    }
    if let Some(summary) = &s.design_summary {
        p.push_str(&format!("## Design summary\n\n{summary}\n\n"));
    }
    if !s.rejections.is_empty() {
        p.push_str("## Earlier plans were rejected by the person, because\n\n");
        for r in &s.rejections {
            p.push_str(&format!("- {r}\n"));
        }
        p.push('\n');
    }
    p
}

pub fn strategy(s: &Session, paths: &Paths<'_>) -> String {
    let mut p = header(s, Step::Strategy);
    p.push_str(&format!(
        "## What to write\n\nAssess the task (read the repository as needed) and write your \
         self-assessment as JSON to `{}` (also `CASCADE_OUTPUT`):\n\n```json\n{{\n  \
         \"task_analysis\": {{\"functional_areas\": [\"auth\", \"api\"], \"estimated_stories\": 5,\n    \
         \"has_dependencies\": true, \"requires_architecture_decisions\": true,\n    \
         \"risk_level\": \"medium\", \"parallelization_benefit\": \"significant\"}},\n  \
         \"strategy_decision\": {{\"strategy\": \"HYBRID_AUTO\", \"confidence\": 0.85, \
         \"reasoning\": \"...\"}}\n}}\n```\n\n`strategy` is one of: DIRECT (a single small change: \
         one story), HYBRID_AUTO (a feature: several stories with a design doc), HYBRID_WORKTREE \
         (the same, but risky or experimental enough to be built on its own branch), MEGA_PLAN \
         (a project: several features, each later planned as its own PRD).\n",
        paths.output.map(|o| o.display().to_string()).unwrap_or_default()
    ));
    p
}

/// The discovery step's answer, as the prompt shows it.
const QUESTIONS_EXAMPLE: &str = r#"{"questions": [{"id": "q-1", "type": "scope", "question": "...", "context": "...", "options": ["...", "..."], "assumption": "..."}]}"#;
/// The same when nothing needs asking.
const NO_QUESTIONS: &str = r#"{"questions": []}"#;

pub fn discovery(s: &Session, paths: &Paths<'_>) -> String {
    let mut p = header(s, Step::Discovery);
    p.push_str(&known_so_far(s));
    p.push_str(&format!(
        "## What to write\n\nList at most {} questions whose answers would change the plan \
         (ask nothing you can find out by reading the repository). Each has a `type`: \
         clarification, scope, technical, priority or constraint; the `context` (why it \
         matters); `options` the person can pick from; and your `assumption` (what you will \
         assume if nobody answers). Write JSON to `{}` (also `CASCADE_OUTPUT`):\n\n```json\n\
         {QUESTIONS_EXAMPLE}\n```\nWrite `{NO_QUESTIONS}` when nothing needs asking.\n",
        s.options.max_questions,
        paths
            .output
            .map(|o| o.display().to_string())
            .unwrap_or_default()
    ));
    p
}

/// The design step's answer, as the prompt shows it.
const DECISIONS_EXAMPLE: &str = r#"{"decisions": [{"id": "d-1", "topic": "Session storage", "context": "...",
  "options": [{"id": "opt-a", "name": "JWT", "description": "...", "tradeoffs": {"pros": ["..."], "cons": ["..."]}}],
  "recommendation": "opt-a"}],
 "summary": "the design in a few sentences"}"#;

pub fn design(s: &Session, paths: &Paths<'_>) -> String {
    let mut p = header(s, Step::Design);
    p.push_str(&known_so_far(s));
    p.push_str(&format!(
        "## What to write\n\nName the design decisions this goal needs (architecture, data, \
         interfaces, libraries). For each give the options with pros and cons and your \
         recommendation; the person picks. Write JSON to `{}` (also `CASCADE_OUTPUT`):\n\n\
         ```json\n{DECISIONS_EXAMPLE}\n```\n",
        paths
            .output
            .map(|o| o.display().to_string())
            .unwrap_or_default()
    ));
    p
}

/// What a design document converted from the person's text says of itself.
const CONVERTED: &str = r#""metadata": {"source": "converted"}"#;

fn what_to_write(strategy: Strategy, paths: &Paths<'_>, import: Option<&Import>) -> String {
    let mut p = String::from("## What to write\n\n");
    if strategy.is_mega() {
        p.push_str(&format!(
            "1. The mega-plan as JSON to `{}` (also `CASCADE_MEGA_PATH`):\n\n{MEGA_SCHEMA}\n\n",
            paths.mega.display()
        ));
        p.push_str(&format!(
            "2. The project-level design document to `{}` (also `CASCADE_DESIGN_DOC_PATH`), with \
             `feature_mappings` for every feature:\n\n{DESIGN_SCHEMA}\n\n",
            paths.design_doc.display()
        ));
    } else {
        let one = if strategy == Strategy::Direct {
            " The DIRECT strategy means exactly one story."
        } else {
            ""
        };
        p.push_str(&format!(
            "1. The PRD as JSON to `{}` (also `CASCADE_PRD_PATH`).{one}\n\n{PRD_SCHEMA}\n\n",
            paths.prd.display()
        ));
        p.push_str(&format!(
            "2. The design document to `{}` (also `CASCADE_DESIGN_DOC_PATH`), with \
             `story_mappings` for every story naming only components, decisions and patterns \
             the document defines:\n\n{DESIGN_SCHEMA}\n\n",
            paths.design_doc.display()
        ));
    }
    if let Some(import) = import {
        match import.kind {
            ImportKind::Json => p.push_str(&format!(
                "The design document was provided by the person (`{}`) and is already at `{}`: \
                 keep its overview, architecture and decisions as they are; only add the \
                 mappings of your plan to it.\n\n",
                import.path.display(),
                paths.design_doc.display()
            )),
            ImportKind::Markdown | ImportKind::Html => p.push_str(&format!(
                "Convert the person's design document below (`{}`) into the design document's \
                 JSON schema, keeping its content, with `{CONVERTED}`:\n\n````\n{}\n````\n\n",
                import.path.display(),
                truncate(&import.text, MAX_DOC)
            )),
        }
    }
    p
}

/// The generate step (the first draft).
pub fn generate(s: &Session, paths: &Paths<'_>, import: Option<&Import>) -> String {
    let mut p = header(s, Step::Generate);
    p.push_str(&known_so_far(s));
    p.push_str(&what_to_write(
        s.strategy.unwrap_or(Strategy::HybridAuto),
        paths,
        import,
    ));
    p
}

/// The self-review of the draft, in the generator's session.
pub fn self_review(s: &Session, paths: &Paths<'_>) -> String {
    let plan = if s.strategy.is_some_and(Strategy::is_mega) {
        paths.mega
    } else {
        paths.prd
    };
    let mut p = header(s, Step::SelfReview);
    p.push_str(&format!(
        "## What to do\n\nReview the plan you just wrote (`{}` and `{}`) against the goal and \
         the decisions: missing stories, wrong dependencies, stories too big for one session, \
         acceptance criteria that cannot be checked, mappings to components or decisions the \
         design doc does not define. Fix what you find in the files themselves. Then print \
         exactly one line: `<review>PASS</review>` if the plan was good as written, or \
         `<review>NEEDS_REVISION</review>` if you had to change it.\n",
        plan.display(),
        paths.design_doc.display()
    ));
    p
}

/// A fix round after local validation failed.
pub fn fix(s: &Session, paths: &Paths<'_>, fix: &FixContext, import: Option<&Import>) -> String {
    let mut p = header(s, Step::Fix);
    p.push_str(&fix_section(fix));
    p.push_str(&known_so_far(s));
    p.push_str(&what_to_write(
        s.strategy.unwrap_or(Strategy::HybridAuto),
        paths,
        import,
    ));
    p
}

/// The challenge by the review agent.
pub fn challenge(s: &Session, paths: &Paths<'_>, round: u32) -> String {
    let plan = if s.strategy.is_some_and(Strategy::is_mega) {
        paths.mega
    } else {
        paths.prd
    };
    let mut p = header(s, Step::Challenge);
    p.push_str(&known_so_far(s));
    p.push_str(&format!(
        "## What to do (challenge round {round})\n\nYou are the second opinion. Read the plan \
         `{}` and its design document `{}` critically: does it reach the goal, are the stories \
         small, ordered and testable, are the decisions sound, what is missing or risky? Write \
         your findings as markdown to `{}` (also `CASCADE_OUTPUT`), ending with exactly one \
         line:\n\n    Verdict: APPROVED\n    Verdict: NEEDS_REVISION\n    Verdict: REJECTED\n\n\
         APPROVED: good enough to build. NEEDS_REVISION: the findings must be addressed first \
         (the planner revises and you will see it again). REJECTED: the approach is wrong; \
         planning stops.\n",
        plan.display(),
        paths.design_doc.display(),
        paths.challenge.display()
    ));
    p
}

/// The revision after a NEEDS_REVISION challenge.
pub fn revise(s: &Session, paths: &Paths<'_>, challenge_text: &str) -> String {
    let mut p = header(s, Step::Revise);
    p.push_str(&format!(
        "## Revise the plan\n\nA reviewer challenged the plan and asks for a revision. Address \
         every finding of its CHALLENGE.md below by editing the plan files in place.\n\n\
         ````markdown\n{}\n````\n\n",
        truncate(challenge_text, MAX_DOC)
    ));
    p.push_str(&known_so_far(s));
    p.push_str(&what_to_write(
        s.strategy.unwrap_or(Strategy::HybridAuto),
        paths,
        None,
    ));
    p
}
