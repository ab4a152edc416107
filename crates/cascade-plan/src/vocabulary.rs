//! The words a plan file may use for a story's `status` and an item's
//! `priority`, held strictly after the lenient read.
//!
//! The model's reader (`wire.rs`) keeps a keyword's original spelling when
//! it is not the canonical one; [`check`] looks at those few and decides:
//! - a story status outside [`Status::SPELLINGS`] is an error
//!   ([`PlanError::Vocabulary`]): read as "pending" it would run a finished
//!   story, read as "complete" it would skip one, and cascade must do neither
//!   on a guess;
//! - a priority outside [`Priority::SPELLINGS`] is a [`PlanWarning`] (it
//!   counts as medium, which only changes an order).
//!
//! Each names its `file:line:column`. The positions come from a second,
//! structural look at the text ([`Locator`]), paid only when something is
//! unknown.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::PlanError;
use crate::model::{Priority, Status};
use crate::text::{closest, printable_line, suggestion};

/// Something a plan file says that cascade accepts but that is probably not
/// what was meant (an unknown priority read as medium).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanWarning {
    /// The plan file.
    pub path: PathBuf,
    /// 1-based line of the value.
    pub line: usize,
    /// 1-based column of the value.
    pub column: usize,
    /// What is odd and what cascade does about it.
    pub message: String,
}

impl fmt::Display for PlanWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.path.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

/// One item's keywords as read: the original spelling when it was not the
/// canonical one (`None` when it was, or when the key was absent).
pub(crate) struct Spelling<'a> {
    pub id: &'a str,
    /// `None` for items whose status is not checked (features).
    pub status: Option<&'a Value>,
    pub priority: Option<&'a Value>,
}

/// Which array of the file the items are, and what one is called.
pub(crate) struct Items {
    /// The top-level key holding the items (`stories`, `features`).
    pub list: &'static str,
    /// `story`, `feature`.
    pub noun: &'static str,
}

pub(crate) const STORIES: Items = Items {
    list: "stories",
    noun: "story",
};
pub(crate) const FEATURES: Items = Items {
    list: "features",
    noun: "feature",
};

/// Whether a keyword as written is unknown: a string that `parse` rejects,
/// or a value that is not a string at all (JSON `null` means "not given").
fn unknown<T>(raw: Option<&Value>, parse: fn(&str) -> Option<T>) -> Option<&Value> {
    match raw? {
        Value::Null => None,
        Value::String(s) if parse(s).is_some() => None,
        other => Some(other),
    }
}

/// How a value is quoted in a message (a string as `'text'`, safe to print).
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("'{}'", printable_line(s)),
        other => printable_line(&other.to_string()).into_owned(),
    }
}

fn words<T: Copy>(
    table: &'static [(&'static str, T)],
) -> impl Iterator<Item = &'static str> + Clone {
    table.iter().map(|(w, _)| *w)
}

/// Checks the items' keywords: `Err` naming every unknown story status,
/// else the warnings for unknown priorities. `bytes` is the file's JSON
/// text (for positions), `path` its name in messages.
pub(crate) fn check<'a>(
    bytes: &[u8],
    path: &Path,
    items: &Items,
    spellings: impl Iterator<Item = Spelling<'a>>,
) -> Result<Vec<PlanWarning>, PlanError> {
    let mut statuses = Vec::new();
    let mut priorities = Vec::new();
    for (index, s) in spellings.enumerate() {
        if let Some(v) = unknown(s.status, Status::parse) {
            statuses.push((index, s.id, v));
        }
        if let Some(v) = unknown(s.priority, Priority::parse) {
            priorities.push((index, s.id, v));
        }
    }
    if statuses.is_empty() && priorities.is_empty() {
        return Ok(Vec::new());
    }
    let locator = Locator::new(bytes, items.list);
    let who = |index: usize, id: &str| {
        if id.trim().is_empty() {
            format!("{}[{index}]", items.list)
        } else {
            format!("{} '{}'", items.noun, printable_line(id.trim()))
        }
    };
    let warnings: Vec<PlanWarning> = priorities
        .iter()
        .map(|&(index, id, v)| {
            let (line, column) = locator.position(index, "priority");
            let hint = suggestion(v.as_str().unwrap_or(""), words(Priority::SPELLINGS));
            PlanWarning {
                path: path.to_path_buf(),
                line,
                column,
                message: format!(
                    "{} has unknown priority {} ({hint}); it counts as medium",
                    who(index, id),
                    shown(v)
                ),
            }
        })
        .collect();
    if statuses.is_empty() {
        return Ok(warnings);
    }
    let accepted: Vec<&str> = words(Status::SPELLINGS).collect();
    let problems = statuses
        .iter()
        .map(|&(index, id, v)| {
            let (line, column) = locator.position(index, "status");
            let hint = v
                .as_str()
                .and_then(|s| closest(s, words(Status::SPELLINGS)))
                .map(|w| format!(" (did you mean '{w}'?)"))
                .unwrap_or_default();
            format!(
                "{}:{line}:{column}: {} has unknown status {}{hint}; accepted: {} (cascade never guesses whether a story is done: fix the status)",
                path.display(),
                who(index, id),
                shown(v),
                accepted.join(", "),
            )
        })
        .collect();
    Err(PlanError::Vocabulary {
        path: path.to_path_buf(),
        problems,
        warnings,
    })
}

/// Finds where a field of an item of the file's top-level array starts, in
/// text already known to be valid JSON: a structural scan (strings skipped
/// with their escapes, nesting followed) that stops at the item.
struct Locator<'b> {
    bytes: &'b [u8],
    /// Offset of each item's first byte (`{`), in order.
    items: Vec<usize>,
}

impl<'b> Locator<'b> {
    fn new(bytes: &'b [u8], list: &str) -> Locator<'b> {
        let mut scan = Scan { b: bytes, i: 0 };
        let items = scan.array_items(list).unwrap_or_default();
        Locator { bytes, items }
    }

    /// 1-based line and column of `field`'s value in item `index` (the item's
    /// own position when the field cannot be found; 0:0 when neither can).
    fn position(&self, index: usize, field: &str) -> (usize, usize) {
        let Some(&start) = self.items.get(index) else {
            return (0, 0);
        };
        let mut scan = Scan {
            b: self.bytes,
            i: start,
        };
        let at = scan.field_value(field).unwrap_or(start);
        line_column(self.bytes, at)
    }
}

fn line_column(bytes: &[u8], at: usize) -> (usize, usize) {
    let before = &bytes[..at.min(bytes.len())];
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let column = 1 + String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count();
    (line, column)
}

/// A cursor over JSON text. Every method returns `None` on text it does not
/// expect (it was already parsed, so that only happens on odd keys).
struct Scan<'b> {
    b: &'b [u8],
    i: usize,
}

impl<'b> Scan<'b> {
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// A string's raw content (escapes left as written).
    fn string(&mut self) -> Option<&'b [u8]> {
        self.eat(b'"')?;
        let b = self.b;
        let start = self.i;
        loop {
            match *self.b.get(self.i)? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(&b[start..self.i - 1]);
                }
                _ => self.i += 1,
            }
        }
    }

    /// Skips one value of any kind.
    fn value(&mut self) -> Option<()> {
        self.ws();
        match *self.b.get(self.i)? {
            b'"' => self.string().map(drop),
            open @ (b'{' | b'[') => {
                let close = if open == b'{' { b'}' } else { b']' };
                self.i += 1;
                if self.eat(close).is_some() {
                    return Some(());
                }
                loop {
                    if open == b'{' {
                        self.string()?;
                        self.eat(b':')?;
                    }
                    self.value()?;
                    if self.eat(b',').is_none() {
                        return self.eat(close);
                    }
                }
            }
            _ => {
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|c| !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace())
                {
                    self.i += 1;
                }
                Some(())
            }
        }
    }

    /// At an object: moves to the value of `key` and returns its offset.
    fn field_value(&mut self, key: &str) -> Option<usize> {
        self.eat(b'{')?;
        loop {
            let k = self.string()?;
            self.eat(b':')?;
            self.ws();
            if k == key.as_bytes() {
                return Some(self.i);
            }
            self.value()?;
            self.eat(b',')?;
        }
    }

    /// At the top-level object: the offsets of the items of array `key`.
    fn array_items(&mut self, key: &str) -> Option<Vec<usize>> {
        self.field_value(key)?;
        self.eat(b'[')?;
        let mut items = Vec::new();
        if self.eat(b']').is_some() {
            return Some(items);
        }
        loop {
            self.ws();
            items.push(self.i);
            self.value()?;
            if self.eat(b',').is_none() {
                return Some(items);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Prd;

    const PRD: &str = r#"{
  "goal": "g",
  "metadata": {"stories": [{"status": "x"}]},
  "stories": [
    {"id": "a", "title": "A \"quoted\" {", "status": "complete", "priority": "high"},
    {"id": "b", "title": "B", "priority": "urgent",
     "status": "done"},
    {"id": "c", "title": "C", "status": "finished", "priority": "hihg"}
  ]
}"#;

    #[test]
    fn every_unknown_status_is_named_with_its_position() {
        let err = Prd::from_json(PRD.as_bytes(), Path::new("prd.json")).unwrap_err();
        let text = err.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("prd.json:7:16: story 'b' has unknown status 'done'; accepted: pending, in_progress, inprogress, complete, completed, failed, skipped"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("prd.json:8:41: story 'c' has unknown status 'finished'"),
            "{text}"
        );
    }

    #[test]
    fn unknown_priorities_are_warnings_with_the_closest_word() {
        let text = PRD
            .replace("\"done\"", "\"completed\"")
            .replace("\"finished\"", "\"failed\"");
        let prd = Prd::from_json(text.as_bytes(), Path::new("prd.json")).unwrap();
        let shown: Vec<String> = prd.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "prd.json:6:43: story 'b' has unknown priority 'urgent' (known: high, medium, low); it counts as medium",
                "prd.json:8:63: story 'c' has unknown priority 'hihg' (did you mean 'high'?); it counts as medium",
            ]
        );
        assert_eq!(prd.stories[1].priority, Priority::Medium);
        assert!(prd.stories[1].is_complete());
        // Plan Cascade's `failed` is a story still to do, written back as is.
        assert!(!prd.stories[2].is_complete());
        let again = String::from_utf8(prd.to_json().unwrap()).unwrap();
        assert!(again.contains("\"failed\""), "{again}");
    }

    #[test]
    fn odd_values_are_quoted_safely() {
        let text = r#"{"stories": [{"id": "a", "title": "A", "status": 3},
            {"id": "b", "title": "B", "status": "\u001b[2J"}]}"#;
        let err = Prd::from_json(text.as_bytes(), Path::new("p.json"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("story 'a' has unknown status 3;"), "{err}");
        assert!(err.contains("unknown status '\\u{1b}[2J'"), "{err}");
        assert!(!err.contains('\u{1b}'), "{err}");
    }
}
