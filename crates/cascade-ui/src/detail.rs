//! `GET /api/stories/{id}`: one story with every attempt: its prompt, the
//! agent's output (its log), what confined its processes, the gate
//! results with parsed errors, the verification and review findings, why
//! it was retried, and how the merge went; the story's diff.

use std::path::Path;

use cascade_engine::state::{StoryState, StoryStatus};
use cascade_plan::Story;
use serde_json::{json, Value};

/// Most bytes of a prompt or log sent (the end of a log is kept).
pub(crate) const TEXT_MAX: usize = 256 * 1024;
/// Most bytes of a diff sent.
const DIFF_MAX: usize = 512 * 1024;

/// A text file, at most [`TEXT_MAX`] bytes of it (the end when `tail`).
pub(crate) fn read_text(path: &Path, tail: bool) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let cut = if bytes.len() <= TEXT_MAX {
        &bytes[..]
    } else if tail {
        &bytes[bytes.len() - TEXT_MAX..]
    } else {
        &bytes[..TEXT_MAX]
    };
    let mut text = String::from_utf8_lossy(cut).into_owned();
    if bytes.len() > TEXT_MAX {
        let note = format!("[{} bytes left out]", bytes.len() - TEXT_MAX);
        text = if tail {
            format!("{note}\n{text}")
        } else {
            format!("{text}\n{note}")
        };
    }
    Some(text)
}

/// Where the engine keeps things of an attempt.
pub(crate) struct Artifacts<'a> {
    /// `.cascade/` (prompts/, logs/, gate-results/).
    pub dir: &'a Path,
    /// Any directory of the repository (for the diff).
    pub repo: &'a Path,
}

impl Artifacts<'_> {
    pub fn prompt(&self, story: &str, phase: &str, attempt: u32) -> Option<String> {
        read_text(
            &self
                .dir
                .join("prompts")
                .join(format!("{story}-{phase}-{attempt}.md")),
            false,
        )
    }

    pub fn gates(&self, story: &str, attempt: u32) -> Option<Value> {
        let bytes = std::fs::read(
            self.dir
                .join("gate-results")
                .join(format!("{story}-{attempt}.json")),
        )
        .ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// The gate results of an attempt in the API's shape.
fn gates_of(report: Option<Value>) -> Vec<Value> {
    let Some(report) = report else {
        return Vec::new();
    };
    report
        .get("gates")
        .and_then(Value::as_array)
        .map(|gates| {
            gates
                .iter()
                .map(|g| {
                    json!({
                        "name": g.get("name"),
                        "passed": g.get("passed"),
                        "required": g.get("required"),
                        "cached": g.get("cached"),
                        "skipped": g.get("skipped"),
                        "flaky": g.get("flaky"),
                        "timed_out": g.get("timed_out"),
                        "duration_ms": g.get("duration_ms"),
                        "original_duration_ms": g.get("original_duration_ms"),
                        "command": g.get("command"),
                        "outcome": g.get("outcome"),
                        "output_excerpt": g.get("output_excerpt"),
                        "errors": g.get("errors").cloned().unwrap_or(json!([])),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Verification and review findings of each attempt, from the story's
/// event records.
fn findings(events: &[Value]) -> std::collections::HashMap<u64, Vec<Value>> {
    let mut out: std::collections::HashMap<u64, Vec<Value>> = Default::default();
    for d in events {
        let attempt = d.get("attempt").and_then(Value::as_u64).unwrap_or(0);
        match d.get("event").and_then(Value::as_str) {
            Some("verification_finished") => {
                for f in d
                    .get("findings")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    out.entry(attempt).or_default().push(json!({
                        "kind": "verification",
                        "severity": "error",
                        "rule": f.get("rule"),
                        "file": f.get("file"),
                        "line": f.get("line"),
                        "message": f.get("message"),
                        "text": f.get("text"),
                    }));
                }
            }
            Some("review_finished") => {
                let text = d.get("findings").and_then(Value::as_str).unwrap_or("");
                let passed = d.get("passed") == Some(&Value::Bool(true));
                if !text.is_empty() || !passed {
                    out.entry(attempt).or_default().push(json!({
                        "kind": "review",
                        "severity": if passed { "note" } else { "error" },
                        "verdict": d.get("verdict"),
                        "agent": d.get("agent"),
                        "file": null,
                        "line": null,
                        "message": text,
                    }));
                }
            }
            _ => {}
        }
    }
    out
}

/// The diff of the race contestant that ran attempt `attempt` (its
/// branch's work: its base to its commit), the target of the race panel's
/// links.
fn contestant_diff(
    race: &cascade_engine::race::RaceRecord,
    attempt: u32,
    art: &Artifacts<'_>,
) -> Option<String> {
    let c = race.contestants.iter().find(|c| c.attempt == attempt)?;
    let (base, commit) = (c.base.as_deref()?, c.commit.as_deref()?);
    cascade_git::diff::diff_patch(art.repo, base, Some(commit), DIFF_MAX).ok()
}

/// The story document, or `None` for an id the plan and the state do not
/// know (`s` and `plan`: the story's record in the state and in the plan). `events` are the data of the story's event records, in order.
pub(crate) fn build(
    id: &str,
    s: Option<&StoryState>,
    plan: Option<&Story>,
    events: &[Value],
    art: &Artifacts<'_>,
) -> Option<Value> {
    if plan.is_none() && s.is_none() {
        return None;
    }
    let found = findings(events);
    let conflict: Option<Vec<Value>> = events
        .iter()
        .rfind(|d| d.get("event").and_then(Value::as_str) == Some("merge_conflict"))
        .and_then(|d| d.get("files").and_then(Value::as_array).cloned());
    let race = s.and_then(|s| s.race.as_ref());
    let mut attempts = Vec::new();
    let mut previous: Option<(Option<&'static str>, Option<String>)> = None;
    for a in s.map(|s| s.attempts.as_slice()).unwrap_or_default() {
        let log = a.log.as_deref().map(Path::new);
        let retry_reason = previous.as_ref().map(|(kind, error)| {
            format!(
                "{}{}",
                kind.map(|k| format!("{k}: ")).unwrap_or_default(),
                error.clone().unwrap_or_default()
            )
        });
        attempts.push(json!({
            "attempt": a.attempt,
            "agent": a.agent,
            "phase": a.phase,
            "started_at": a.started_at,
            "finished_at": a.finished_at,
            "duration_ms": a.duration_ms,
            "outcome": a.outcome,
            "failure_kind": a.error_type.map(|k| k.as_str()),
            "error": a.error,
            "retry_reason": retry_reason,
            "tokens_in": a.input_tokens,
            "tokens_out": a.output_tokens,
            "cost_usd": a.cost_usd,
            "cost_estimated": a.cost_estimated,
            "confinement": a.confinement,
            "prompt": art.prompt(id, &a.phase, a.attempt),
            "output": log.and_then(|l| read_text(l, true)),
            "log": a.log,
            "gates": gates_of(art.gates(id, a.attempt)),
            "findings": found.get(&u64::from(a.attempt)).cloned().unwrap_or_default(),
            "diff": race.and_then(|r| contestant_diff(r, a.attempt, art)),
        }));
        previous = Some((a.error_type.map(|k| k.as_str()), a.error.clone()));
    }
    let diff = s.and_then(|s| s.commit.as_deref()).and_then(|c| {
        cascade_git::diff::diff_patch(art.repo, &format!("{c}^"), Some(c), DIFF_MAX).ok()
    });
    let merge = match s {
        Some(s) if s.status == StoryStatus::Complete => json!({
            "outcome": "merged",
            "commit": s.merge_commit,
            "conflict_files": [],
        }),
        Some(s)
            if conflict.is_some()
                || s.error_type == Some(cascade_engine::FailureKind::MergeConflict) =>
        {
            json!({
                "outcome": "conflict",
                "commit": null,
                "conflict_files": conflict.unwrap_or_default(),
            })
        }
        _ => json!({ "outcome": null, "commit": null, "conflict_files": [] }),
    };
    let state_name = match s.map(|s| s.status) {
        Some(StoryStatus::Failed)
            if s.and_then(|s| s.error_type) == Some(cascade_engine::FailureKind::Cancelled) =>
        {
            "cancelled"
        }
        Some(x) => x.as_str(),
        None => "pending",
    };
    Some(json!({
        "id": id,
        "title": plan.map(|p| p.title.clone()),
        "description": plan.map(|p| p.description.clone()),
        "acceptance_criteria": plan.map(|p| p.acceptance_criteria.iter().map(|c| c.text().to_string()).collect::<Vec<_>>()).unwrap_or_default(),
        "depends_on": plan.map(|p| p.dependencies.clone()).unwrap_or_default(),
        "state": state_name,
        "agent": s.and_then(|s| s.agent.clone()),
        "failure_kind": s.and_then(|s| s.error_type).map(|k| k.as_str()),
        "error": s.and_then(|s| s.error.clone()),
        "blocked_by": s.map(|s| s.blocked_by.clone()).unwrap_or_default(),
        "branch": s.and_then(|s| s.branch.clone()),
        "worktree": s.and_then(|s| s.worktree.clone()),
        "verification": s.map(|s| s.verification.clone()).unwrap_or_default(),
        "review": s.and_then(|s| s.review.clone()),
        "attempts": attempts,
        "race": race,
        "merge": merge,
        "diff": diff,
    }))
}
