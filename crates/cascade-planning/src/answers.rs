//! Answers given without a terminal: `--answers FILE` and the session's
//! `answers.json`, both `{"q-1": "text", "d-1": {"option": "opt-a",
//! "rationale": "..."}, "review": "approve" | "reject: reason" | "cancel"}`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::PlanningError;
use crate::session::write_atomic;

/// The person's verdict on the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewAnswer {
    Approve,
    Reject(String),
    Cancel,
}

impl ReviewAnswer {
    /// Reads `approve`, `reject: reason` (or `reject reason`), `cancel`.
    pub fn parse(text: &str) -> Option<ReviewAnswer> {
        let t = text.trim();
        let lower = t.to_ascii_lowercase();
        if matches!(lower.as_str(), "approve" | "approved" | "yes" | "y") {
            return Some(ReviewAnswer::Approve);
        }
        if matches!(lower.as_str(), "cancel" | "cancelled") {
            return Some(ReviewAnswer::Cancel);
        }
        let rest = lower.strip_prefix("reject")?;
        let reason = t[t.len() - rest.len()..]
            .trim_start_matches(['e', 'd'])
            .trim_start_matches([':', ' '])
            .trim();
        Some(ReviewAnswer::Reject(reason.to_string()))
    }
}

/// Answers by key (`q-N`, `d-N`, `review`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    map: BTreeMap<String, Value>,
}

impl Answers {
    /// Reads an answers file; a missing file is empty.
    pub fn load(path: &Path) -> Result<Answers, PlanningError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Answers::default()),
            Err(source) => {
                return Err(PlanningError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let value: Value =
            serde_json::from_str(&text).map_err(|e| PlanningError::json(path, &e))?;
        let Value::Object(obj) = value else {
            return Err(PlanningError::Shape {
                path: path.to_path_buf(),
                message: "answers must be a JSON object like {\"q-1\": \"text\", \"d-1\": {\"option\": \"opt-a\", \"rationale\": \"...\"}, \"review\": \"approve\"}".into(),
            });
        };
        let answers = Answers {
            map: obj.into_iter().collect(),
        };
        answers.check(path)?;
        Ok(answers)
    }

    /// Every value must have a usable shape (so a typo fails now, not later).
    fn check(&self, path: &Path) -> Result<(), PlanningError> {
        let bad = |key: &str, message: &str| PlanningError::Shape {
            path: path.to_path_buf(),
            message: format!("\"{key}\": {message}"),
        };
        for (key, value) in &self.map {
            if key == "review" {
                let ok = value.as_str().and_then(ReviewAnswer::parse).is_some();
                if !ok {
                    return Err(bad(
                        key,
                        "expected \"approve\", \"reject: REASON\" or \"cancel\"",
                    ));
                }
            } else if key.starts_with("d-") {
                if decision_of(value).is_none() {
                    return Err(bad(
                        key,
                        "expected {\"option\": \"OPTION-ID\", \"rationale\": \"...\"} or \"OPTION-ID\"",
                    ));
                }
            } else if key.starts_with("q-") && !matches!(value, Value::String(_)) {
                return Err(bad(key, "expected the answer as a string"));
            }
        }
        Ok(())
    }

    /// Adds `other`'s answers; they win over these.
    pub fn merge(&mut self, other: Answers) {
        self.map.extend(other.map);
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn question(&self, id: &str) -> Option<String> {
        self.map
            .get(id)
            .and_then(Value::as_str)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// `(option id, rationale)`.
    pub fn decision(&self, id: &str) -> Option<(String, Option<String>)> {
        self.map.get(id).and_then(decision_of)
    }

    pub fn review(&self) -> Option<ReviewAnswer> {
        self.map
            .get("review")
            .and_then(Value::as_str)
            .and_then(ReviewAnswer::parse)
    }

    /// Sets one answer as `cascade plan answer ID KEY VALUE` gives it: for a
    /// decision, `OPTION` or `OPTION: rationale`.
    pub fn set_text(&mut self, key: &str, value: &str) -> Result<(), PlanningError> {
        let v = if key == "review" {
            if ReviewAnswer::parse(value).is_none() {
                return Err(PlanningError::Usage(format!(
                    "'{value}' is not a review answer: use approve, \"reject: REASON\" or cancel"
                )));
            }
            Value::String(value.trim().to_string())
        } else if key.starts_with("d-") {
            let (option, rationale) = match value.split_once(':') {
                Some((o, r)) => (o.trim(), r.trim()),
                None => (value.trim(), ""),
            };
            serde_json::json!({"option": option, "rationale": rationale})
        } else if key.starts_with("q-") {
            Value::String(value.trim().to_string())
        } else {
            return Err(PlanningError::Usage(format!(
                "unknown answer key '{key}': use a question id (q-1), a decision id (d-1) or review"
            )));
        };
        self.map.insert(key.to_string(), v);
        Ok(())
    }

    /// Removes an answer (a used review answer, for instance).
    pub fn remove(&mut self, key: &str) {
        self.map.remove(key);
    }

    /// Writes the answers atomically.
    pub fn save(&self, path: &Path) -> Result<(), PlanningError> {
        let obj: serde_json::Map<String, Value> = self.map.clone().into_iter().collect();
        let mut text = serde_json::to_string_pretty(&Value::Object(obj)).unwrap_or_default();
        text.push('\n');
        write_atomic(path, text.as_bytes())
    }
}

fn decision_of(v: &Value) -> Option<(String, Option<String>)> {
    match v {
        Value::String(s) if !s.trim().is_empty() => match s.split_once(':') {
            Some((o, r)) => Some((o.trim().to_string(), Some(r.trim().to_string()))),
            None => Some((s.trim().to_string(), None)),
        },
        Value::Object(o) => {
            let option = o
                .get("option")
                .or(o.get("selected_option_id"))
                .and_then(Value::as_str)?
                .trim()
                .to_string();
            let rationale = o
                .get("rationale")
                .and_then(Value::as_str)
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty());
            Some((option, rationale))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_answers() {
        assert_eq!(ReviewAnswer::parse("approve"), Some(ReviewAnswer::Approve));
        assert_eq!(
            ReviewAnswer::parse("reject: Too big"),
            Some(ReviewAnswer::Reject("Too big".into()))
        );
        assert_eq!(
            ReviewAnswer::parse("Rejected: no"),
            Some(ReviewAnswer::Reject("no".into()))
        );
        assert_eq!(ReviewAnswer::parse("cancel"), Some(ReviewAnswer::Cancel));
        assert_eq!(ReviewAnswer::parse("maybe"), None);
    }

    #[test]
    fn reads_merges_and_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.json");
        std::fs::write(
            &p,
            r#"{"q-1": "Google", "d-1": {"option": "opt-b", "rationale": "simple"}, "d-2": "opt-a", "review": "reject: split it"}"#,
        )
        .unwrap();
        let mut a = Answers::load(&p).unwrap();
        assert_eq!(a.question("q-1").as_deref(), Some("Google"));
        assert_eq!(
            a.decision("d-1"),
            Some(("opt-b".into(), Some("simple".into())))
        );
        assert_eq!(a.decision("d-2"), Some(("opt-a".into(), None)));
        assert_eq!(a.review(), Some(ReviewAnswer::Reject("split it".into())));
        let mut b = Answers::default();
        b.set_text("q-1", "GitHub").unwrap();
        b.set_text("d-3", "opt-c: fastest").unwrap();
        assert!(b.set_text("x-1", "?").is_err());
        a.merge(b);
        assert_eq!(a.question("q-1").as_deref(), Some("GitHub"));
        assert_eq!(a.decision("d-3").unwrap().1.as_deref(), Some("fastest"));
        a.save(&p).unwrap();
        assert_eq!(Answers::load(&p).unwrap(), a);
        assert!(Answers::load(&tmp.path().join("none.json"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn bad_shapes_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.json");
        std::fs::write(&p, r#"{"review": "perhaps"}"#).unwrap();
        let e = Answers::load(&p).unwrap_err().to_string();
        assert!(e.contains("\"review\": expected"), "{e}");
        std::fs::write(&p, "[1]").unwrap();
        assert!(Answers::load(&p).is_err());
    }
}
