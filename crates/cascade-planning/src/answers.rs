//! Answers given without a terminal: `--answers FILE` and the session's
//! `answers.json`, both `{"q-1": "text", "d-1": {"option": "opt-a",
//! "rationale": "..."}, "review": "approve" | "reject: reason" | "cancel"}`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::PlanningError;
use crate::session::write_atomic;

/// The most an answer (or a rejection's reason, or a decision's rationale)
/// may hold, in bytes. Answers go into every later planning prompt: a huge
/// one (10 MB pasted by mistake) would make each of them fail.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// An error for an answer to `key` longer than [`MAX_ANSWER_BYTES`].
pub fn check_size(key: &str, value: &str) -> Result<(), PlanningError> {
    if value.len() > MAX_ANSWER_BYTES {
        return Err(PlanningError::Usage(format!(
            "the answer to {key} has {} bytes, more than the {MAX_ANSWER_BYTES} an answer may hold (answers go into every later prompt): shorten it, or put the detail in a file of the project and name that file",
            value.len()
        )));
    }
    Ok(())
}

/// The person's verdict on the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewAnswer {
    Approve,
    Reject(String),
    Cancel,
}

impl ReviewAnswer {
    /// Reads `approve`, `reject: reason` (or `reject reason`), `cancel`.
    /// A rejection needs its reason (it goes into the next design and
    /// generation prompts): a bare `reject` is not an answer.
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
        if reason.is_empty() {
            return None;
        }
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
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Answers::default()),
            Err(source) => {
                return Err(PlanningError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        // Text that is not UTF-8 is bad input (exit 2), like bad JSON.
        let text = String::from_utf8(bytes).map_err(|e| PlanningError::Shape {
            path: path.to_path_buf(),
            message: format!(
                "not UTF-8 text (invalid byte at offset {}): save the answers as UTF-8 JSON",
                e.utf8_error().valid_up_to()
            ),
        })?;
        let value: Value =
            serde_json::from_str(&text).map_err(|e| PlanningError::json(path, &e))?;
        let Value::Object(obj) = value else {
            let (line, column) = first_char_position(&text);
            return Err(PlanningError::Json {
                path: path.to_path_buf(),
                line,
                column,
                message: "answers must be a JSON object like {\"q-1\": \"text\", \"d-1\": {\"option\": \"opt-a\", \"rationale\": \"...\"}, \"review\": \"approve\"}".into(),
            });
        };
        let answers = Answers {
            map: obj.into_iter().collect(),
        };
        answers.check(path, &text)?;
        Ok(answers)
    }

    /// Every key and value must have a usable shape (so a typo fails now,
    /// not later), reported at the key's line and column.
    fn check(&self, path: &Path, text: &str) -> Result<(), PlanningError> {
        let bad = |key: &str, message: &str| {
            let (line, column) = key_position(text, key);
            PlanningError::Json {
                path: path.to_path_buf(),
                line,
                column,
                message: format!("\"{key}\": {message}"),
            }
        };
        for (key, value) in &self.map {
            if value.to_string().len() > MAX_ANSWER_BYTES {
                return Err(bad(
                    key,
                    &format!("longer than the {MAX_ANSWER_BYTES} bytes an answer may hold (answers go into every later prompt)"),
                ));
            }
            if !is_answer_key(key) {
                return Err(bad(
                    key,
                    "not an answer key: use a question id (q-1), a decision id (d-1) or \"review\"",
                ));
            }
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
            } else if !matches!(value, Value::String(_)) {
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
        check_size(key, value)?;
        if value.trim().is_empty() {
            return Err(PlanningError::Usage(format!(
                "the answer to {key} is empty: give the answer text (or, for a decision, OPTION-ID: rationale)"
            )));
        }
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
        } else if is_answer_key(key) {
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

/// `q-N`, `d-N` (N a positive number) or `review`.
pub fn is_answer_key(key: &str) -> bool {
    if key == "review" {
        return true;
    }
    match key.strip_prefix("q-").or_else(|| key.strip_prefix("d-")) {
        Some(n) => !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0'),
        None => false,
    }
}

/// The 1-based line and column of the first non-blank character (where a
/// value of the wrong kind starts).
fn first_char_position(text: &str) -> (usize, usize) {
    let at = text.len() - text.trim_start().len();
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The 1-based line and column of `"key"` as an object key in `text`
/// (serde_json does not keep positions); 1:1 when it cannot be found.
fn key_position(text: &str, key: &str) -> (usize, usize) {
    let quoted = serde_json::to_string(key).unwrap_or_else(|_| format!("\"{key}\""));
    let mut from = 0;
    while let Some(i) = text[from..].find(&quoted) {
        let at = from + i;
        let after = text[at + quoted.len()..].trim_start();
        if after.starts_with(':') {
            let before = &text[..at];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            return (line, column);
        }
        from = at + quoted.len();
    }
    (1, 1)
}

fn decision_of(v: &Value) -> Option<(String, Option<String>)> {
    match v {
        Value::String(s) if !s.trim().is_empty() => match s.split_once(':') {
            Some((o, _)) if o.trim().is_empty() => None,
            Some((o, r)) => Some((o.trim().to_string(), Some(r.trim().to_string()))),
            None => Some((s.trim().to_string(), None)),
        },
        Value::Object(o) => {
            let option = o
                .get("option")
                .or(o.get("selected_option_id"))
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|o| !o.is_empty())?
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
        // A rejection without a reason is no answer.
        assert_eq!(ReviewAnswer::parse("reject"), None);
        assert_eq!(ReviewAnswer::parse("reject:  "), None);
        assert_eq!(ReviewAnswer::parse("rejected"), None);
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

    #[test]
    fn bad_keys_and_values_are_reported_at_their_line_and_column() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.json");
        std::fs::write(&p, "{\"q-1\": \"ok\",\n   \"zz\": \"typo\"}\n").unwrap();
        let e = Answers::load(&p).unwrap_err();
        assert!(e.is_usage());
        let e = e.to_string();
        assert!(e.contains("a.json:2:4: \"zz\": not an answer key"), "{e}");
        std::fs::write(&p, "{\n\"d-1\": {\"option\": \"\", \"rationale\": \"\"}}").unwrap();
        let e = Answers::load(&p).unwrap_err().to_string();
        assert!(e.contains("a.json:2:1: \"d-1\": expected"), "{e}");
        for key in ["q-0", "q-", "d-x", "q-01", "Q-1"] {
            assert!(!is_answer_key(key), "{key}");
        }
        for key in ["q-1", "d-12", "review"] {
            assert!(is_answer_key(key), "{key}");
        }
    }

    #[test]
    fn empty_answers_are_refused() {
        let mut a = Answers::default();
        assert!(a.set_text("q-1", "  ").is_err());
        assert!(a.set_text("d-1", "").is_err());
        assert!(a.is_empty());
    }
}
