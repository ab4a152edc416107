//! Prompt building: one markdown document per agent invocation.
//!
//! Sections, in a fixed order and only when they have content: the story
//! (id, priority, type, description), acceptance criteria, the plan's goal,
//! completed dependencies with their titles, files named by the story, the
//! design context (components and decisions mapped to the story in
//! `design_doc.json`), the retry context (previous agent, error, failing
//! gates, output excerpt), the skills, and the instructions for the phase.
//! The output is a pure function of its inputs (no times, no absolute paths
//! other than those given), so it can be tested and diffed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cascade_plan::{Prd, Story};

use crate::design::{DesignDoc, DesignDocError, StoryDesign};
use crate::phase::Phase;
use crate::skills::{self, Skill, SkillsError};
use crate::story_type;

/// What a retry prompt says about the previous attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryContext {
    /// The attempt about to run (2 for the first retry).
    pub attempt: u32,
    pub max_attempts: u32,
    /// The agent of the failed attempt.
    pub previous_agent: String,
    /// What went wrong (e.g. "quality gate 'tests' failed").
    pub error: String,
    /// The failing gates' structured errors (`GateReport::summary_for_prompt`).
    pub gate_summary: String,
    /// The end of the previous attempt's output.
    pub output_excerpt: String,
    /// What verification or the review found in the previous attempt
    /// (`file:line: [rule] message` lines, or the reviewer's words).
    pub findings: String,
}

/// Everything besides the plan that goes into a prompt.
#[derive(Debug, Clone, Default)]
pub struct PromptContext {
    /// The project (repository) root, for relative paths in the text.
    pub project_root: PathBuf,
    pub phase: Option<Phase>,
    pub design_doc: Option<DesignDoc>,
    pub skills: Vec<Skill>,
    pub retry: Option<RetryContext>,
}

/// A problem loading the prompt context.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error(transparent)]
    Skills(#[from] SkillsError),
    #[error(transparent)]
    DesignDoc(#[from] DesignDocError),
}

impl PromptContext {
    /// Loads the skills for `project_root` (built-ins by marker files plus
    /// `<cascade_dir>/skills.json`) and `design_doc.json` from `design_dir`
    /// (usually the directory of prd.json) when it exists.
    pub fn load(
        project_root: &Path,
        cascade_dir: &Path,
        design_dir: &Path,
    ) -> Result<PromptContext, PromptError> {
        Ok(PromptContext {
            project_root: project_root.to_path_buf(),
            phase: None,
            design_doc: DesignDoc::load(&design_dir.join("design_doc.json"))?,
            skills: skills::select_skills(project_root, cascade_dir)?,
            retry: None,
        })
    }
}

/// The prompt for `story` of `prd`.
pub fn build_prompt(prd: &Prd, story: &Story, ctx: &PromptContext) -> String {
    let phase = ctx.phase.unwrap_or(if ctx.retry.is_some() {
        Phase::Retry
    } else {
        Phase::Implementation
    });
    let mut out = String::new();
    let title = one_line(&story.title);
    let _ = writeln!(out, "# Story {}: {}", story.id, title);
    out.push('\n');
    let _ = writeln!(out, "{}", intro(phase));
    story_sections(&mut out, prd, story);
    if let Some(design) = ctx.design_doc.as_ref().map(|d| d.for_story(&story.id)) {
        design_section(&mut out, &design);
    }
    if let Some(r) = &ctx.retry {
        retry_section(&mut out, r);
    }
    skills_section(&mut out, &ctx.skills);
    out.push_str("\n## Instructions\n\n");
    for line in instructions(phase) {
        let _ = writeln!(out, "- {line}");
    }
    out
}

/// The story itself: its fields, acceptance criteria, the plan's goal, the
/// dependencies already merged and the files it names.
fn story_sections(out: &mut String, prd: &Prd, story: &Story) {
    let title = one_line(&story.title);
    out.push_str("\n## Story\n\n");
    let _ = writeln!(out, "- ID: {}", story.id);
    let _ = writeln!(out, "- Title: {}", title);
    let _ = writeln!(out, "- Priority: {}", story.priority.as_str());
    let _ = writeln!(out, "- Type: {}", story_type::infer_story_type(story));
    if !story.description.trim().is_empty() {
        out.push('\n');
        let _ = writeln!(out, "{}", story.description.trim());
    }

    let criteria: Vec<&str> = story
        .acceptance_criteria
        .iter()
        .map(|c| c.text().trim())
        .filter(|t| !t.is_empty())
        .collect();
    if !criteria.is_empty() {
        out.push_str("\n## Acceptance criteria\n\n");
        for c in criteria {
            let _ = writeln!(out, "- [ ] {}", one_line(c));
        }
    }

    if !prd.goal.trim().is_empty() {
        out.push_str("\n## Goal of the plan\n\n");
        let _ = writeln!(out, "{}", prd.goal.trim());
    }

    if !story.dependencies.is_empty() {
        out.push_str("\n## Dependencies (already done and merged)\n\n");
        for dep in &story.dependencies {
            match prd.story(dep) {
                Some(d) => {
                    let _ = writeln!(out, "- {}: {}", d.id, one_line(&d.title));
                }
                None => {
                    let _ = writeln!(out, "- {dep}");
                }
            }
        }
    }

    if !story.files.is_empty() {
        out.push_str("\n## Files likely involved\n\n");
        for f in &story.files {
            let _ = writeln!(out, "- `{}`", f);
        }
    }
}

/// What the design document says about this story.
fn design_section(out: &mut String, design: &StoryDesign) {
    if !design.is_empty() {
        out.push_str("\n## Design context\n");
        if !design.components.is_empty() {
            out.push_str("\n### Components\n\n");
            for c in &design.components {
                let _ = write!(out, "- **{}**", c.name);
                if !c.description.is_empty() {
                    let _ = write!(out, ": {}", one_line(&c.description));
                }
                out.push('\n');
                if !c.responsibilities.is_empty() {
                    let _ = writeln!(
                        out,
                        "  - Responsibilities: {}",
                        c.responsibilities.join("; ")
                    );
                }
                if !c.files.is_empty() {
                    let files: Vec<String> = c.files.iter().map(|f| format!("`{f}`")).collect();
                    let _ = writeln!(out, "  - Files: {}", files.join(", "));
                }
            }
        }
        if !design.decisions.is_empty() {
            out.push_str("\n### Decisions to follow\n\n");
            for d in &design.decisions {
                let _ = write!(out, "- **{}**", d.id);
                if !d.title.is_empty() {
                    let _ = write!(out, " {}", one_line(&d.title));
                }
                if !d.decision.is_empty() {
                    let _ = write!(out, ": {}", one_line(&d.decision));
                }
                if !d.rationale.is_empty() {
                    let _ = write!(out, " (why: {})", one_line(&d.rationale));
                }
                out.push('\n');
            }
        }
        if !design.patterns.is_empty() {
            out.push_str("\n### Patterns to use\n\n");
            for p in &design.patterns {
                let _ = write!(out, "- **{}**", p.name);
                if !p.description.is_empty() {
                    let _ = write!(out, ": {}", one_line(&p.description));
                }
                if !p.rationale.is_empty() {
                    let _ = write!(out, " (why: {})", one_line(&p.rationale));
                }
                out.push('\n');
            }
        }
        if !design.interfaces.is_empty() {
            out.push_str("\n### Interfaces\n\n");
            for i in &design.interfaces {
                let _ = writeln!(out, "- {i}");
            }
        }
    }
}

/// Why the previous attempt failed and what to fix.
fn retry_section(out: &mut String, r: &RetryContext) {
    let _ = write!(out, "\n## Retry: attempt {}", r.attempt);
    if r.max_attempts > 0 {
        let _ = write!(out, " of {}", r.max_attempts);
    }
    out.push_str("\n\n");
    let who = if r.previous_agent.is_empty() {
        "The previous attempt".to_string()
    } else {
        format!("The previous attempt (by {})", r.previous_agent)
    };
    if r.error.trim().is_empty() {
        let _ = writeln!(out, "{who} failed.");
    } else {
        let _ = writeln!(out, "{who} failed: {}", r.error.trim());
    }
    out.push_str("Fix the cause; do not start over unless the previous work is unusable.\n");
    if !r.gate_summary.trim().is_empty() {
        out.push_str("\n### Failing quality gates\n\n");
        let _ = writeln!(out, "{}", r.gate_summary.trim_end());
    }
    if !r.findings.trim().is_empty() {
        out.push_str("\n### Findings to fix\n\n");
        out.push_str(
            "Do the real work: do not leave stubs or placeholders, and do not skip, \
             delete or weaken tests or edit the gate/CI configuration to get green.\n\n",
        );
        let _ = writeln!(out, "{}", r.findings.trim_end());
    }
    if !r.output_excerpt.trim().is_empty() {
        out.push_str("\n### End of the previous output\n\n");
        let fence = fence_for(&r.output_excerpt);
        let _ = writeln!(out, "{fence}text\n{}\n{fence}", r.output_excerpt.trim_end());
    }
}

/// The skills' best practices, each under its own heading.
fn skills_section(out: &mut String, skills: &[Skill]) {
    if skills.is_empty() {
        return;
    }
    out.push_str("\n## Best practices\n");
    for s in skills {
        out.push('\n');
        let content = s.content.trim();
        // Skills open with their own heading; demote it under this section.
        if let Some(rest) = content.strip_prefix("# ") {
            let _ = writeln!(out, "### {rest}");
        } else {
            let _ = writeln!(out, "### {}\n\n{content}", s.name);
        }
    }
}

fn intro(phase: Phase) -> &'static str {
    match phase {
        Phase::Review => {
            "You are reviewing the implementation of one story of a larger plan. The working directory is the story's own checkout of the repository."
        }
        Phase::Refactor => {
            "You are refactoring code for one story of a larger plan. The working directory is the story's own checkout of the repository."
        }
        Phase::Planning => {
            "You are planning one part of a larger project. The working directory is the project's own checkout of the repository."
        }
        Phase::Merge => {
            "You are resolving a merge conflict between one story of a larger plan and work merged meanwhile into the target branch. The working directory is a checkout of the story's branch in the middle of merging the target branch into it."
        }
        Phase::Implementation | Phase::Retry => {
            "You are implementing one story of a larger plan. The working directory is the story's own checkout of the repository (a git worktree); other stories are handled separately."
        }
    }
}

fn instructions(phase: Phase) -> &'static [&'static str] {
    match phase {
        Phase::Review => &[
            "Check every acceptance criterion against the code and run the project's tests.",
            "Do not change code; report what is missing or wrong.",
            "End your answer with exactly one verdict: <review>PASS</review> or <review>NEEDS_REVISION</review>.",
        ],
        Phase::Planning => &[
            "Write the plan to the path in the CASCADE_PRD_PATH environment variable, as Plan Cascade's prd.json.",
            "Give every story an id, title, description, priority, dependencies and acceptance criteria.",
            "Exit when the file is written.",
        ],
        Phase::Merge => &[
            "Resolve every conflicted file listed below: keep the intent of both sides (the story's change and the target branch's), and remove every conflict marker (<<<<<<<, =======, >>>>>>>).",
            "Build and run the project's tests; the quality gates run again after you.",
            "Do not commit, abort the merge, push or switch branches: cascade concludes the merge.",
            "Exit when the conflicts are resolved.",
        ],
        Phase::Implementation | Phase::Retry | Phase::Refactor => &[
            "Implement only this story, completely: no stubs, placeholders or TODOs.",
            "Meet every acceptance criterion and add or update tests for the new behaviour.",
            "Build and run the project's tests and linters before you finish; the quality gates run after you.",
            "Do not commit, push or switch branches: cascade commits and merges your changes.",
            "Exit when the work is done.",
        ],
    }
}

/// Collapses line breaks so a title or criterion stays on its markdown line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A code fence longer than any run of backticks inside `text`.
fn fence_for(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

#[cfg(test)]
mod tests;
