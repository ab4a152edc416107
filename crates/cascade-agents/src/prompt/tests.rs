//! The prompt is stable markdown: whole-document comparisons.

use super::*;
use crate::skills::SkillSource;

fn prd() -> Prd {
    let json = serde_json::json!({
        "metadata": {"version": "1.0.0"},
        "goal": "A task tracker with a CLI.",
        "objectives": ["fast"],
        "stories": [
            {"id": "story-001", "title": "Task model", "description": "The model.", "priority": "high",
             "dependencies": [], "status": "complete", "acceptance_criteria": ["exists"]},
            {"id": "story-002", "title": "Persist tasks\nto disk", "description": "Save tasks as JSON.\n\nAtomically.",
             "priority": "medium", "dependencies": ["story-001"], "status": "pending",
             "acceptance_criteria": ["Tasks survive a restart", {"description": "Writes are atomic"}],
             "files": ["src/store.rs"]}
        ]
    });
    Prd::from_json(json.to_string().as_bytes(), Path::new("prd.json")).unwrap()
}

#[test]
fn plain_implementation_prompt() {
    let prd = prd();
    let story = prd.story("story-002").unwrap();
    let text = build_prompt(&prd, story, &PromptContext::default());
    let expected = "\
# Story story-002: Persist tasks to disk

You are implementing one story of a larger plan. The working directory is the story's own checkout of the repository (a git worktree); other stories are handled separately.

## Story

- ID: story-002
- Title: Persist tasks to disk
- Priority: medium
- Type: unknown

Save tasks as JSON.

Atomically.

## Acceptance criteria

- [ ] Tasks survive a restart
- [ ] Writes are atomic

## Goal of the plan

A task tracker with a CLI.

## Dependencies (already done and merged)

- story-001: Task model

## Files likely involved

- `src/store.rs`

## Instructions

- Implement only this story, completely: no stubs, placeholders or TODOs.
- Meet every acceptance criterion and add or update tests for the new behaviour.
- Build and run the project's tests and linters before you finish; the quality gates run after you.
- Do not commit, push or switch branches: cascade commits and merges your changes.
- Exit when the work is done.
";
    assert_eq!(text, expected);
    // Same inputs, same bytes.
    assert_eq!(text, build_prompt(&prd, story, &PromptContext::default()));
}

#[test]
fn design_retry_and_skills_sections() {
    let prd = prd();
    let story = prd.story("story-002").unwrap();
    let ctx = PromptContext {
        project_root: PathBuf::from("/repo"),
        phase: None,
        design_doc: Some(DesignDoc::from_value(serde_json::json!({
            "architecture": {"components": [{"name": "Store", "description": "Persists tasks",
                "responsibilities": ["save", "load"], "files": ["src/store.rs"]}]},
            "decisions": [{"id": "ADR-001", "title": "JSON files", "decision": "One file per list",
                "rationale": "simple"}],
            "story_mappings": {"story-002": {"components": ["Store"], "decisions": ["ADR-001"]}}
        }))),
        skills: vec![Skill {
            name: "rust".into(),
            priority: 0,
            content: "# Rust\n\n- Run cargo test.".into(),
            source: SkillSource::BuiltIn,
        }],
        retry: Some(RetryContext {
            attempt: 2,
            max_attempts: 3,
            previous_agent: "codex".into(),
            error: "quality gate 'tests' failed".into(),
            gate_summary: "tests: src/store.rs:10:5: E0308 mismatched types".into(),
            output_excerpt: "error[E0308]: ```weird``` output\n".into(),
            ..RetryContext::default()
        }),
    };
    let text = build_prompt(&prd, story, &ctx);
    let expected_tail = "\
## Design context

### Components

- **Store**: Persists tasks
  - Responsibilities: save; load
  - Files: `src/store.rs`

### Decisions to follow

- **ADR-001** JSON files: One file per list (why: simple)

## Retry: attempt 2 of 3

The previous attempt (by codex) failed: quality gate 'tests' failed
Fix the cause; do not start over unless the previous work is unusable.

### Failing quality gates

tests: src/store.rs:10:5: E0308 mismatched types

### End of the previous output

````text
error[E0308]: ```weird``` output
````

## Best practices

### Rust

- Run cargo test.

## Instructions
";
    assert!(text.contains(expected_tail), "got:\n{text}");
}

#[test]
fn review_prompt_asks_for_a_marker() {
    let prd = prd();
    let story = prd.story("story-001").unwrap();
    let ctx = PromptContext {
        phase: Some(Phase::Review),
        ..Default::default()
    };
    let text = build_prompt(&prd, story, &ctx);
    assert!(text.contains("<review>PASS</review> or <review>NEEDS_REVISION</review>"));
    assert!(!text.contains("## Dependencies"));
}

#[test]
fn context_loads_skills_and_design_doc() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("go.mod"), "module x\n").unwrap();
    std::fs::write(
        dir.path().join("design_doc.json"),
        r#"{"story_mappings": {"story-002": {"interfaces": ["API-7"]}}}"#,
    )
    .unwrap();
    let ctx = PromptContext::load(dir.path(), &dir.path().join(".cascade"), dir.path()).unwrap();
    assert_eq!(ctx.skills.len(), 1);
    let prd = prd();
    let text = build_prompt(&prd, prd.story("story-002").unwrap(), &ctx);
    assert!(text.contains("### Interfaces\n\n- API-7\n"));
    assert!(text.contains("### Go\n"));
}
