//! Step: a second agent reviews the change (with `--review`, or when
//! prd.json asks). The agent resolved for the review phase, another than
//! the one that wrote the code when another is available, gets the story, its
//! acceptance criteria, the gate results and the diff, and answers
//! `<review>PASS</review>` or `<review>NEEDS_REVISION</review>` with findings
//! (read by cascade-agents' one marker parser, from plain text or
//! stream-json). NEEDS_REVISION fails the attempt as `review` with the
//! findings for the retry prompt; no marker is a warning and a pass, unless
//! `--review=strict`. The review's tokens and cost count toward the story's.

use std::fmt::Write as _;
use std::time::Instant;

use cascade_agents::exec::execute;
use cascade_agents::{AgentDef, AgentRun, Level, Phase, Resolver, ReviewVerdict};
use cascade_gates::GateReport;

use super::commit::Committed;
use super::prepare_worktree::Worktree;
use super::{Attempt, Failure, Stop};
use crate::config::ReviewMode;
use crate::events::Event;
use crate::retry::FailureKind;
use crate::state::ReviewRecord;

/// The part of the diff a review prompt carries.
const MAX_DIFF_BYTES: usize = 200 * 1024;
/// The part of the reviewer's findings kept for the retry prompt.
const MAX_FINDINGS_CHARS: usize = 6000;

pub(super) async fn run(
    a: &Attempt<'_>,
    wt: &Worktree,
    committed: &Committed,
    gates: &GateReport,
) -> Result<(), Stop> {
    let mode = a.ctx.checks.review;
    if mode == ReviewMode::Off {
        return Ok(());
    }
    let (agent, def, note) = reviewer(a)?;
    a.ctx.emit(Event::ReviewStarted {
        story: a.id().to_string(),
        attempt: a.number,
        agent: agent.clone(),
        author: a.agent.clone(),
        note: note.clone(),
    });
    let started = Instant::now();
    let answer = ask(a, &agent, &def, wt, committed, gates).await?;
    judge(a, &agent, note, mode, answer, started)
}

/// What the reviewer said.
struct Answer {
    verdict: Option<ReviewVerdict>,
    findings: String,
    cost_usd: Option<f64>,
    log: String,
}

/// Runs the reviewer in the worktree and reads its answer (charging its
/// usage to the attempt). A reviewer that could not run or failed without
/// a verdict is a notice and an answer without a marker.
async fn ask(
    a: &Attempt<'_>,
    agent: &str,
    def: &AgentDef,
    wt: &Worktree,
    committed: &Committed,
    gates: &GateReport,
) -> Result<Answer, Stop> {
    let ctx = a.ctx;
    let id = a.id();
    let story = id.to_string();
    let allowed = ctx
        .state
        .read(move |st| st.story(&story).map(|s| s.verification_allowed.clone()))
        .await
        .flatten()
        .unwrap_or_default();
    let prompt = prompt(a, wt, committed, gates, &allowed);
    let req = a.agent_request(Phase::Review, prompt, wt);
    let ran = execute(def, req, |_| {}, &ctx.cancel).await;
    // The reviewer's reported cost, else its tokens at its model's price.
    let cost = ran.as_ref().ok().and_then(|run| {
        run.usage
            .as_ref()
            .and_then(|u| ctx.agents.prices.cost(def, u))
            .map(|(usd, _)| usd)
    });
    if let Ok(run) = &ran {
        charge(a, run, cost);
    }
    a.check_cancel()?;
    // What was reviewed is what merges: a reviewer that committed on the
    // story branch changed the work it was asked to judge.
    if let Ok(Some(tip)) = cascade_git::merge::branch_tip(&ctx.paths, a.branch) {
        if tip.to_string() != committed.commit {
            return Err(Failure::new(
                FailureKind::Review,
                format!(
                    "review agent '{agent}' committed on branch '{}' (reviewers must not change the code); the reviewed commit was {}",
                    a.branch, committed.commit
                ),
            )
            .into());
        }
    }
    match ran {
        Ok(run) => {
            if run.outcome.cancelled {
                return Err(Stop::Interrupted);
            }
            if !run.success() && run.review.is_none() {
                ctx.emit(Event::Notice {
                    message: format!(
                        "{id}: review agent '{agent}' {} without a verdict",
                        run.outcome.describe()
                    ),
                });
            }
            Ok(Answer {
                verdict: run.review,
                findings: findings_of(&run),
                cost_usd: cost,
                log: run.log_path.display().to_string(),
            })
        }
        Err(e) => {
            ctx.emit(Event::Notice {
                message: format!("{id}: the review could not run: {e}"),
            });
            Ok(Answer {
                verdict: None,
                findings: String::new(),
                cost_usd: None,
                log: String::new(),
            })
        }
    }
}

/// Records and announces the answer, and fails the attempt on
/// NEEDS_REVISION (or on a missing marker when strict).
fn judge(
    a: &Attempt<'_>,
    agent: &str,
    note: Option<String>,
    mode: ReviewMode,
    answer: Answer,
    started: Instant,
) -> Result<(), Stop> {
    let ctx = a.ctx;
    let id = a.id();
    let Answer {
        verdict,
        findings,
        cost_usd,
        log,
    } = answer;
    let (name, passed) = match verdict {
        Some(ReviewVerdict::Pass) => ("pass", true),
        Some(ReviewVerdict::NeedsRevision) => ("needs_revision", false),
        None => ("missing", mode != ReviewMode::Strict),
    };
    if verdict.is_none() && passed {
        ctx.emit(Event::Notice {
            message: format!(
                "{id}: the review by '{agent}' has no <review>PASS</review> or <review>NEEDS_REVISION</review> marker; counted as a pass (--review=strict fails it)"
            ),
        });
    }
    let record = ReviewRecord {
        agent: agent.to_string(),
        verdict: name.to_string(),
        findings: findings.clone(),
        note: note.clone(),
    };
    let (number, noted) = (a.number, usize::from(!findings.trim().is_empty()));
    ctx.amend_story(id, move |s| {
        if let Some(c) = s.contestant_at(number) {
            c.verdict = Some(record.verdict.clone());
        }
        s.note_findings(number, noted);
        s.review = Some(record);
    });
    ctx.emit(Event::ReviewFinished {
        story: id.to_string(),
        attempt: a.number,
        agent: agent.to_string(),
        verdict: name.to_string(),
        passed,
        strict: mode == ReviewMode::Strict,
        findings: findings.clone(),
        cost_usd,
        duration_ms: started.elapsed().as_millis() as u64,
        log,
    });
    if passed {
        return Ok(());
    }
    let error = match verdict {
        None => format!("review by '{agent}' gave no <review> marker (--review=strict)"),
        Some(_) => match findings.lines().map(str::trim).find(|l| !l.is_empty()) {
            Some(first) => format!("review by '{agent}': NEEDS_REVISION: {first}"),
            None => format!("review by '{agent}': NEEDS_REVISION"),
        },
    };
    let mut f = Failure::new(FailureKind::Review, error);
    f.findings = if findings.trim().is_empty() {
        "The reviewer asked for a revision without saying why; check every acceptance criterion again.".into()
    } else {
        format!("The reviewer ({agent}) found:\n\n{findings}")
    };
    Err(f.into())
}

/// The review agent: the review phase's, or another available agent when
/// that one wrote the code (unless the user named it as the reviewer). The note
/// says why the author reviews its own work, when it does.
fn reviewer(a: &Attempt<'_>) -> Result<(String, AgentDef, Option<String>), Stop> {
    let ctx = a.ctx;
    let resolver = Resolver::new(&ctx.agents, &ctx.detector, ctx.overrides());
    let chosen = resolver.resolve(a.story, Phase::Review).map_err(|e| {
        Failure::new(
            FailureKind::AgentUnavailable,
            format!("no agent can review: {e}"),
        )
    })?;
    let def_of = |name: &str| {
        ctx.agents.agent(name).cloned().ok_or_else(|| {
            Stop::from(Failure::new(
                FailureKind::AgentUnavailable,
                format!("review agent '{name}' is not configured"),
            ))
        })
    };
    if chosen.agent != a.agent {
        return Ok((chosen.agent.clone(), def_of(&chosen.agent)?, None));
    }
    // The author reviews its own work only when the user named it as the
    // reviewer; `--agent` names the author, not the reviewer.
    let named_by = match chosen.level {
        Level::PhaseOverride => Some("--review-agent"),
        Level::StoryType | Level::PhaseDefault => Some("agents.json's review phase"),
        _ => None,
    };
    if let Some(by) = named_by {
        let note = format!(
            "{by} names '{}', the agent that wrote the code: it reviews its own work",
            a.agent
        );
        return Ok((chosen.agent.clone(), def_of(&chosen.agent)?, Some(note)));
    }
    let (candidates, _) = resolver.candidates(a.story, Phase::Review);
    let mut names: Vec<String> = candidates.into_iter().map(|c| c.agent).collect();
    names.extend(ctx.agents.names().into_iter().map(str::to_string));
    for name in names.iter().filter(|n| **n != a.agent) {
        let Some(def) = ctx.agents.agent(name) else {
            continue;
        };
        if ctx.options.no_fallback || ctx.detector.is_available(def) {
            return Ok((name.clone(), def.clone(), None));
        }
    }
    let note = format!(
        "no other agent is available: '{}' reviews the code it wrote",
        a.agent
    );
    Ok((chosen.agent.clone(), def_of(&chosen.agent)?, Some(note)))
}

/// Adds the review's tokens and `cost` (reported or priced) to the attempt's.
fn charge(a: &Attempt<'_>, run: &AgentRun, cost: Option<f64>) {
    let Some(u) = run.usage.clone() else {
        return;
    };
    let number = a.number;
    a.ctx.amend_story(a.id(), move |s| {
        if let Some(r) = s.attempt_mut(number) {
            r.input_tokens = Some(r.input_tokens.unwrap_or(0) + u.input_tokens);
            r.output_tokens = Some(r.output_tokens.unwrap_or(0) + u.output_tokens);
            if let Some(c) = cost {
                r.cost_usd = Some(r.cost_usd.unwrap_or(0.0) + c);
            }
        }
    });
}

/// What the reviewer wrote after its marker (or, when nothing follows it,
/// before it): its answer text from stream-json, else its plain output.
fn findings_of(run: &AgentRun) -> String {
    let text = run
        .final_text
        .clone()
        .unwrap_or_else(|| run.outcome.stdout.text_lossy());
    let lower = text.to_ascii_lowercase();
    let body = match lower.rfind("</review>") {
        Some(end) => {
            let after = text[end + "</review>".len()..].trim();
            if after.is_empty() {
                let start = lower[..end].rfind("<review>").unwrap_or(end);
                text[..start].trim()
            } else {
                after
            }
        }
        None => text.trim(),
    };
    let mut out: String = body.chars().take(MAX_FINDINGS_CHARS).collect();
    if body.chars().count() > MAX_FINDINGS_CHARS {
        out.push_str("\n[...]");
    }
    out
}

/// The review prompt: the story, its criteria, the gates, the diff, and how
/// to answer.
/// `allowed`: the findings the story's `verify_allow` waived.
fn prompt(
    a: &Attempt<'_>,
    wt: &Worktree,
    committed: &Committed,
    gates: &GateReport,
    allowed: &[String],
) -> String {
    let story = a.story;
    let mut out = String::new();
    let _ = writeln!(out, "# Review of story {}: {}\n", story.id, story.title);
    let _ = writeln!(
        out,
        "You review a change another coding agent ({}) made for one story of a plan. \
         The change is committed in your working directory (branch `{}`, commit {}). \
         Do not edit, create or delete any file: read, judge, answer.",
        a.agent, a.branch, committed.commit
    );
    out.push_str("\n## Story\n\n");
    let _ = writeln!(out, "{}", story.description.trim());
    if !story.acceptance_criteria.is_empty() {
        out.push_str("\n## Acceptance criteria\n\n");
        for c in &story.acceptance_criteria {
            let _ = writeln!(out, "- {}", c.text());
        }
    }
    out.push_str("\n## Quality gates (all required ones passed)\n\n");
    if gates.gates.is_empty() {
        out.push_str("No gates are configured.\n");
    }
    for g in &gates.gates {
        let state = if g.skipped {
            "skipped"
        } else if g.passed {
            "passed"
        } else if g.required {
            "FAILED"
        } else {
            "failed (optional)"
        };
        let _ = writeln!(
            out,
            "- {}: {state}{}",
            g.name,
            if g.cached { " (cached)" } else { "" }
        );
    }
    if wt.judges.rules.enabled {
        out.push_str(
            "\nLocal verification found no stubs, skipped or removed tests, or gate edits in the added lines.\n",
        );
    }
    if !allowed.is_empty() {
        out.push_str(
            "\nThe story allows these findings (its `verify_allow` in prd.json); check that the change needs them:\n\n",
        );
        for line in allowed {
            let _ = writeln!(out, "- {line}");
        }
    }
    out.push_str("\n## The change\n\n");
    let diff =
        cascade_git::diff::diff_patch(&wt.path, &wt.base, Some(&committed.commit), MAX_DIFF_BYTES)
            .unwrap_or_else(|e| {
                format!(
                    "(the diff could not be read: {e}; run `git diff {}..HEAD`)",
                    wt.base
                )
            });
    let fence = if diff.contains("```") { "````" } else { "```" };
    let _ = writeln!(out, "{fence}diff\n{}\n{fence}", diff.trim_end());
    out.push_str(
        "\n## Your answer\n\n\
         Check that the change really does what the story and each acceptance criterion ask: \
         no stubs or placeholders, no hard-coded answers, no skipped, deleted or weakened tests, \
         nothing left for later, no unrelated changes. Then end your answer with exactly one of\n\n\
         <review>PASS</review>\n\n\
         <review>NEEDS_REVISION</review>\n\n\
         and after NEEDS_REVISION list what must change, one finding per line \
         (`file:line: what is wrong and what to do`).\n",
    );
    out
}
