//! How planning events and sessions look: one line of text per event on
//! stdout, or the event as one NDJSON line with `--json`; the pause
//! message that says exactly how to continue; `plan list` and `plan show`.

use std::fmt::Write as _;
use std::io::Write;

use cascade_planning::{PlanEvent, Session, SessionStore};

use crate::cli::report::printable;

/// Prints one event (text or NDJSON). A closed stdout is not an error here.
pub fn event(e: &PlanEvent, json: bool) {
    let mut out = crate::cli::out::stdout();
    if json {
        // The command prints the pause itself, with the command that continues.
        if matches!(e, PlanEvent::Paused { .. }) {
            return;
        }
        if let Ok(line) = serde_json::to_string(e) {
            let _ = writeln!(out, "{line}");
        }
        return;
    }
    if let PlanEvent::Warning { message } = e {
        errln!("warning: {}", printable(message));
        return;
    }
    // A pause is rendered by the command once the planner returns.
    let Some(line) = step_line(e).or_else(|| answer_line(e)) else {
        return;
    };
    // Questions, titles and verdicts are agents' text.
    let _ = writeln!(out, "{}", printable(&line));
}

/// The session's course: its start, strategy, agents, steps and end.
fn step_line(e: &PlanEvent) -> Option<String> {
    let line = match e {
        PlanEvent::PlanStarted {
            session_id,
            instruction,
            resumed,
            status,
            plan_output,
        } => {
            let mut l = if *resumed {
                format!("resuming planning session {session_id} ({status}): {instruction}")
            } else {
                format!("planning session {session_id}: {instruction}")
            };
            if let Some(o) = plan_output {
                l.push_str(&format!("\nplan files: {}", o.description));
            }
            l
        }
        PlanEvent::Strategy {
            strategy,
            source,
            confidence,
            reasoning,
        } => {
            let mut l = format!("strategy: {strategy} ({source}");
            if let Some(c) = confidence {
                l.push_str(&format!(", confidence {c:.2}"));
            }
            l.push(')');
            if !reasoning.is_empty() {
                l.push_str(&format!(": {reasoning}"));
            }
            l
        }
        PlanEvent::Agents {
            generator,
            reviewer,
            ..
        } => format!("planner: {generator}, challenger: {reviewer}"),
        PlanEvent::StepStarted {
            step,
            agent,
            resumed_session,
            ..
        } => format!(
            "-> {step} via {agent}{}",
            if *resumed_session {
                " (continuing its session)"
            } else {
                ""
            }
        ),
        PlanEvent::StepFinished {
            step,
            ok,
            tokens_in,
            tokens_out,
            cost,
            duration_ms,
            total_cost,
            ..
        } => {
            let mut l = format!(
                "   {step} {} in {:.1}s",
                if *ok { "done" } else { "failed" },
                *duration_ms as f64 / 1000.0
            );
            if tokens_in + tokens_out > 0 {
                l.push_str(&format!(", {tokens_in} tokens in / {tokens_out} out"));
            }
            if let Some(c) = cost {
                l.push_str(&format!(", ${c:.4} (session ${total_cost:.4})"));
            }
            l
        }
        PlanEvent::PlanFinished {
            status, total_cost, ..
        } => format!("planning {status} (cost ${total_cost:.4})"),
        _ => return None,
    };
    Some(line)
}

/// What was answered, decided, validated and reviewed.
fn answer_line(e: &PlanEvent) -> Option<String> {
    let line = match e {
        PlanEvent::Question {
            question,
            answered_by: Some(by),
            ..
        } => format!(
            "{} ({}) {} -> {} [{by}]",
            question.id,
            question.kind.as_str(),
            question.question,
            question.answer.as_deref().unwrap_or_default()
        ),
        PlanEvent::Decision {
            decision,
            decided_by: Some(by),
            ..
        } => {
            let id = decision.selected_option_id.as_deref().unwrap_or_default();
            let name = decision.option(id).map(|o| o.name.as_str()).unwrap_or(id);
            format!("{} {} -> {name} [{by}]", decision.id, decision.topic)
        }
        // Unanswered ones are shown by the terminal prompt or the pause message.
        PlanEvent::Question { .. } | PlanEvent::Decision { .. } => return None,
        PlanEvent::Validation { ok: true, .. } => "plan is valid".to_string(),
        PlanEvent::Validation {
            ok: false,
            problems,
        } => format!(
            "plan is invalid:\n{}",
            problems
                .iter()
                .map(|p| format!("  - {p}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
        PlanEvent::Verdict {
            kind,
            verdict,
            round,
            agent,
        } => {
            if kind == "challenge" {
                format!("challenge {round} by {agent}: {verdict}")
            } else {
                format!("self-review by {agent}: {verdict}")
            }
        }
        PlanEvent::Review {
            answer,
            reason,
            reject_count,
        } => match reason {
            Some(r) => format!("review: {answer} ({reject_count} of 3): {r}"),
            None => format!("review: {answer}"),
        },
        _ => return None,
    };
    Some(line)
}

/// The pause message: what waits, and the exact command or file that continues.
pub fn paused(s: &Session, store: &SessionStore, waiting: &[String], json: bool) {
    let id = &s.session_id;
    let answers = store.answers_path(id);
    let how = if waiting.iter().any(|w| w == "review") {
        format!(
            "approve with `cascade plan approve {id}`, reject with `cascade plan reject {id} --reason \"...\"`, or cancel with `cascade plan cancel {id}`"
        )
    } else {
        let first = &waiting[0];
        let example = if first.starts_with("d-") {
            "OPTION-ID: rationale"
        } else {
            "your answer"
        };
        format!(
            "answer with `cascade plan answer {id} {first} \"{example}\"` (one per key), or write {} to {} and run `cascade plan resume {id}`",
            example_json(waiting),
            answers.display()
        )
    };
    if json {
        let e = serde_json::json!({"event": "paused", "session_id": id, "status": s.status.as_str(),
            "waiting_for": waiting, "answers_file": answers.display().to_string(), "continue_with": how});
        outln!("{e}");
        return;
    }
    // What waits is agents' text: written whole, escaped (see `printable`).
    let mut err = String::new();
    let _ = writeln!(
        &mut err,
        "paused: session {id} waits for {}",
        waiting.join(", ")
    );
    for key in waiting {
        if let Some(q) = s.questions.iter().find(|q| &q.id == key) {
            let _ = writeln!(&mut err, "  {} ({}) {}", q.id, q.kind.as_str(), q.question);
            if !q.context.is_empty() {
                let _ = writeln!(&mut err, "      why: {}", q.context);
            }
            if !q.options.is_empty() {
                let _ = writeln!(&mut err, "      options: {}", q.options.join(" | "));
            }
        }
        if let Some(d) = s.decisions.iter().find(|d| &d.id == key) {
            let _ = writeln!(&mut err, "  {} {}", d.id, d.topic);
            for o in &d.options {
                let rec = if d.recommendation.as_deref() == Some(o.id.as_str()) {
                    " (recommended)"
                } else {
                    ""
                };
                let _ = writeln!(&mut err, "      {}: {}{rec}", o.id, o.name);
            }
        }
    }
    if waiting.iter().any(|w| w == "review") {
        let _ = writeln!(&mut err, "{}", review_summary(s, store));
    }
    let _ = writeln!(&mut err, "continue: {how}");
    let _ = write!(crate::cli::out::stderr(), "{}", printable(&err));
}

fn example_json(waiting: &[String]) -> String {
    let parts: Vec<String> = waiting
        .iter()
        .map(|k| {
            if k.starts_with("d-") {
                format!("\"{k}\": {{\"option\": \"...\", \"rationale\": \"...\"}}")
            } else {
                format!("\"{k}\": \"...\"")
            }
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// The summary the person reviews (batches, critical path, decisions, verdict, cost).
pub fn review_summary(s: &Session, store: &SessionStore) -> String {
    let dir = store.dir(&s.session_id);
    let plan = if s.strategy.is_some_and(|x| x.is_mega()) {
        dir.join("mega-plan.json")
    } else {
        dir.join("prd.json")
    };
    let sum = cascade_planning::summarize(
        s,
        &plan,
        &dir.join("design_doc.json"),
        &dir.join("CHALLENGE.md"),
    );
    let mut t = String::new();
    t.push_str(&format!("plan for: {}\n", sum.goal));
    if let Some(st) = sum.strategy {
        t.push_str(&format!("strategy: {st}\n"));
    }
    for (i, b) in sum.batches.iter().enumerate() {
        let items: Vec<String> = b
            .iter()
            .map(|(id, title)| format!("{id} {title}"))
            .collect();
        t.push_str(&format!("  batch {}: {}\n", i + 1, items.join("; ")));
    }
    if !sum.critical_path.is_empty() {
        t.push_str(&format!(
            "critical path: {}\n",
            sum.critical_path.join(" -> ")
        ));
    }
    for (topic, choice, why) in &sum.decisions {
        match why {
            Some(w) => t.push_str(&format!("decision: {topic}: {choice} ({w})\n")),
            None => t.push_str(&format!("decision: {topic}: {choice}\n")),
        }
    }
    if let Some(v) = &sum.verdict {
        t.push_str(&format!("challenge verdict: {v}"));
        if let Some(f) = &sum.challenge_file {
            t.push_str(&format!(" (see {})", f.display()));
        }
        t.push('\n');
    }
    t.push_str(&format!(
        "files: {} and {}\ncost so far: ${:.4} in {} agent calls",
        sum.plan_file.display(),
        sum.design_doc_file.display(),
        sum.total_cost,
        sum.calls
    ));
    if sum.reject_count > 0 {
        t.push_str(&format!("; rejected {} of 3 times", sum.reject_count));
    }
    printable(&t).into_owned()
}

/// One line of `plan list`.
pub fn list_line(s: &Session) -> String {
    format!(
        "{}  {:<9}  {}  {}  ${:.4}",
        s.session_id,
        s.status.as_str(),
        s.created_at,
        printable(&s.instruction),
        s.total_cost
    )
}

pub fn list_json(s: &Session) -> serde_json::Value {
    serde_json::json!({"session_id": s.session_id, "status": s.status.as_str(),
        "instruction": s.instruction, "strategy": s.strategy, "created_at": s.created_at,
        "updated_at": s.updated_at, "total_cost": s.total_cost})
}

/// `plan show`.
pub fn show(s: &Session, store: &SessionStore) -> String {
    let mut t = format!(
        "session:   {}\ngoal:      {}\nstatus:    {}\n",
        s.session_id, s.instruction, s.status
    );
    if let Some(st) = s.strategy {
        t.push_str(&format!(
            "strategy:  {st} ({})\n",
            s.strategy_source.as_deref().unwrap_or("forced")
        ));
    }
    if let (Some(g), Some(r)) = (&s.generator_agent, &s.review_agent) {
        t.push_str(&format!("agents:    planner {g}, challenger {r}\n"));
    }
    if let Some(o) = &s.options.output {
        t.push_str(&format!("plan files: {}\n", o.describe()));
    }
    if let Some(e) = &s.error_message {
        t.push_str(&format!("error:     {e}\n"));
    }
    for q in &s.questions {
        t.push_str(&format!(
            "{} ({}) {} -> {}\n",
            q.id,
            q.kind.as_str(),
            q.question,
            q.answer.as_deref().unwrap_or("(open)")
        ));
    }
    for d in &s.decisions {
        let chosen = d
            .selected_option_id
            .as_deref()
            .map(|id| {
                d.option(id)
                    .map(|o| o.name.clone())
                    .unwrap_or(id.to_string())
            })
            .unwrap_or_else(|| "(open)".into());
        t.push_str(&format!("{} {} -> {chosen}\n", d.id, d.topic));
    }
    if let Some(v) = &s.progress.verdict {
        t.push_str(&format!(
            "challenge: {v} after {} round(s)\n",
            s.progress.challenges
        ));
    }
    if s.reject_count > 0 {
        t.push_str(&format!("rejected:  {} of 3 times\n", s.reject_count));
    }
    t.push_str(&format!(
        "usage:     {} calls, {} tokens in, {} out, ${:.4}\n",
        s.llm_calls.len(),
        s.total_tokens_in,
        s.total_tokens_out,
        s.total_cost
    ));
    // Columns as wide as their longest entry, so long agent names line up.
    let agent_width = s
        .llm_calls
        .iter()
        .map(|c| c.agent.chars().count())
        .max()
        .unwrap_or(0)
        .max(12);
    for c in &s.llm_calls {
        t.push_str(&format!(
            "  {:<11} {:<agent_width$} {:>6} in {:>6} out {:>7.1}s  {}{}\n",
            c.step,
            c.agent,
            c.tokens_in,
            c.tokens_out,
            c.duration_ms as f64 / 1000.0,
            c.cost
                .map(|x| format!("${x:.4}"))
                .unwrap_or_else(|| "-".into()),
            c.model
                .as_deref()
                .map(|m| format!(" {m}"))
                .unwrap_or_default()
        ));
    }
    for (k, v) in &s.outputs {
        t.push_str(&format!("output:    {k}: {v}\n"));
    }
    t.push_str(&format!(
        "directory: {}\n",
        store.dir(&s.session_id).display()
    ));
    printable(&t).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_planning::{LlmCall, SessionOptions};

    fn call(step: &str, agent: &str) -> LlmCall {
        LlmCall {
            step: step.into(),
            agent: agent.into(),
            model: None,
            tokens_in: 10,
            tokens_out: 2,
            duration_ms: 100,
            cost: None,
            timestamp: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn show_lines_up_usage_columns_with_long_agent_names() {
        let tmp = tempfile::tempdir().unwrap();
        let store = SessionStore::new(tmp.path());
        let mut s = Session::new("goal", SessionOptions::defaults()).unwrap();
        s.llm_calls = vec![
            call("generate", "demo"),
            call("challenge", "a-long-reviewer-name"),
        ];
        let text = show(&s, &store);
        let cols: Vec<usize> = text
            .lines()
            .filter(|l| l.starts_with("  generate") || l.starts_with("  challenge"))
            .map(|l| l.find(" in ").expect("tokens column"))
            .collect();
        assert_eq!(cols.len(), 2, "{text}");
        assert_eq!(cols[0], cols[1], "{text}");
    }
}
