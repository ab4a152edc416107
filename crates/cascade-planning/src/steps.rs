//! The planning steps, their names, and reading what discovery and design wrote.
//!
//! Agents write `questions.json` and `decisions.json` in the shapes of
//! CLI.md; they are read leniently (options may be strings or objects, ids
//! may be missing) and normalised: cascade numbers questions `q-1..` and
//! decisions `d-1..` itself, so answers keys never depend on the agent.

use std::path::Path;

use serde_json::Value;

use crate::error::PlanningError;
use crate::session::{Decision, DecisionOption, Question, QuestionType, Tradeoffs};

/// The steps of CLI.md, as `CASCADE_PLAN_STEP` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Strategy,
    Discovery,
    Design,
    Generate,
    SelfReview,
    Fix,
    Challenge,
    Revise,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Strategy => "strategy",
            Step::Discovery => "discovery",
            Step::Design => "design",
            Step::Generate => "generate",
            Step::SelfReview => "self-review",
            Step::Fix => "fix",
            Step::Challenge => "challenge",
            Step::Revise => "revise",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads a JSON file; syntax errors carry line and column.
pub fn read_json(path: &Path) -> Result<Value, PlanningError> {
    let text = std::fs::read_to_string(path).map_err(|source| PlanningError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| PlanningError::json(path, &e))
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.trim().to_string(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| match i {
                Value::Object(_) => {
                    let label = text(i.get("label").or(i.get("name")).or(i.get("title")));
                    let desc = text(i.get("description"));
                    match (label.is_empty(), desc.is_empty()) {
                        (false, false) => format!("{label}: {desc}"),
                        (false, true) => label,
                        _ => desc,
                    }
                }
                other => text(Some(other)),
            })
            .filter(|s| !s.is_empty())
            .collect(),
        Some(Value::String(s)) if !s.trim().is_empty() => vec![s.trim().to_string()],
        _ => Vec::new(),
    }
}

/// Reads `questions.json`: at most `max` questions, numbered `q-1..`.
pub fn read_questions(path: &Path, max: usize) -> Result<Vec<Question>, PlanningError> {
    let value = read_json(path)?;
    let list = value
        .get("questions")
        .or(if value.is_array() { Some(&value) } else { None })
        .and_then(Value::as_array)
        .ok_or_else(|| PlanningError::Shape {
            path: path.to_path_buf(),
            message: "expected {\"questions\": [...]}".into(),
        })?;
    let mut out = Vec::new();
    for q in list {
        let question = text(q.get("question").or(q.get("text")));
        if question.is_empty() {
            continue;
        }
        out.push(Question {
            id: format!("q-{}", out.len() + 1),
            kind: QuestionType::parse(&text(q.get("type"))),
            question,
            context: text(q.get("context")),
            options: strings(q.get("options")),
            assumption: Some(text(q.get("assumption").or(q.get("default"))))
                .filter(|s| !s.is_empty()),
            answer: None,
            answered_at: None,
        });
        if out.len() >= max {
            break;
        }
    }
    Ok(out)
}

/// Reads `decisions.json`: decisions numbered `d-1..` (options keep the
/// agent's ids, or get `opt-a`, `opt-b`, ...), and the summary.
pub fn read_decisions(path: &Path) -> Result<(Vec<Decision>, Option<String>), PlanningError> {
    let value = read_json(path)?;
    let shape = |message: String| PlanningError::Shape {
        path: path.to_path_buf(),
        message,
    };
    let list = value
        .get("decisions")
        .and_then(Value::as_array)
        .ok_or_else(|| shape("expected {\"decisions\": [...], \"summary\": \"...\"}".into()))?;
    let mut out = Vec::new();
    for (n, d) in list.iter().enumerate() {
        let topic = text(d.get("topic").or(d.get("title")).or(d.get("question")));
        let mut options = Vec::new();
        for (i, o) in d
            .get("options")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let letter = (b'a' + (i % 26) as u8) as char;
            let (id, name, description, tradeoffs) = match o {
                Value::Object(_) => {
                    let trade = o.get("tradeoffs").unwrap_or(o);
                    (
                        text(o.get("id")),
                        text(o.get("name").or(o.get("title"))),
                        text(o.get("description")),
                        Tradeoffs {
                            pros: strings(trade.get("pros")),
                            cons: strings(trade.get("cons")),
                        },
                    )
                }
                other => (
                    String::new(),
                    text(Some(other)),
                    String::new(),
                    Tradeoffs::default(),
                ),
            };
            let id = if id.is_empty() {
                format!("opt-{letter}")
            } else {
                id
            };
            let name = if name.is_empty() { id.clone() } else { name };
            options.push(DecisionOption {
                id,
                name,
                description,
                tradeoffs,
            });
        }
        if options.is_empty() {
            return Err(shape(format!(
                "decision {} (\"{topic}\") has no options",
                n + 1
            )));
        }
        let recommendation = Some(text(d.get("recommendation").or(d.get("recommended"))))
            .filter(|r| !r.is_empty())
            .map(|r| {
                // The agent may name the option rather than give its id.
                options
                    .iter()
                    .find(|o| o.id.eq_ignore_ascii_case(&r) || o.name.eq_ignore_ascii_case(&r))
                    .map(|o| o.id.clone())
                    .unwrap_or(r)
            });
        out.push(Decision {
            id: format!("d-{}", n + 1),
            topic: if topic.is_empty() {
                format!("decision {}", n + 1)
            } else {
                topic
            },
            context: text(d.get("context")),
            options,
            recommendation,
            selected_option_id: None,
            rationale: None,
            decided_at: None,
        });
    }
    let summary = Some(text(value.get("summary"))).filter(|s| !s.is_empty());
    Ok((out, summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_renumbered_and_capped() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("questions.json");
        std::fs::write(
            &p,
            r#"{"questions": [
              {"id": "x", "type": "scope", "question": "Which providers?", "context": "c",
               "options": ["Google", {"label": "GitHub", "description": "devs"}], "assumption": "Google"},
              {"type": "weird", "question": "Tokens?"},
              {"question": ""},
              {"type": "technical", "question": "Third?"}]}"#,
        )
        .unwrap();
        let qs = read_questions(&p, 2).unwrap();
        assert_eq!(qs.len(), 2);
        assert_eq!(qs[0].id, "q-1");
        assert_eq!(qs[0].kind, QuestionType::Scope);
        assert_eq!(qs[0].options, ["Google", "GitHub: devs"]);
        assert_eq!(qs[0].assumption.as_deref(), Some("Google"));
        assert_eq!(qs[1].id, "q-2");
        assert_eq!(qs[1].kind, QuestionType::Clarification);
    }

    #[test]
    fn decisions_get_ids_and_recommendations_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("decisions.json");
        std::fs::write(
            &p,
            r#"{"decisions": [{"topic": "Sessions", "options": [
                 {"name": "JWT", "tradeoffs": {"pros": ["stateless"], "cons": ["revocation"]}},
                 {"id": "cookie", "name": "Server sessions"}],
                 "recommendation": "jwt"}], "summary": "S"}"#,
        )
        .unwrap();
        let (ds, summary) = read_decisions(&p).unwrap();
        assert_eq!(summary.as_deref(), Some("S"));
        assert_eq!(ds[0].id, "d-1");
        assert_eq!(ds[0].options[0].id, "opt-a");
        assert_eq!(ds[0].options[0].tradeoffs.pros, ["stateless"]);
        assert_eq!(ds[0].options[1].id, "cookie");
        assert_eq!(ds[0].recommendation.as_deref(), Some("opt-a"));
        std::fs::write(&p, r#"{"decisions": [{"topic": "x", "options": []}]}"#).unwrap();
        assert!(read_decisions(&p)
            .unwrap_err()
            .to_string()
            .contains("has no options"));
    }
}
