//! Plan Cascade's `design_doc.json`: the part relevant to one story.
//!
//! The document maps stories to components and architectural decisions
//! (`story_mappings.<story>.components / decisions / interfaces`); the prompt
//! carries only what the story's mapping names, looked up in
//! `architecture.components[]` and `decisions[]`. Unknown fields are ignored
//! and missing ones are simply left out, so any version of the file works.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A loaded design document.
#[derive(Debug, Clone, PartialEq)]
pub struct DesignDoc {
    value: Value,
}

/// A problem reading `design_doc.json`.
#[derive(Debug, thiserror::Error)]
pub enum DesignDocError {
    #[error("cannot read '{}': {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: invalid JSON: {message}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

/// A component named by a story's mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    pub name: String,
    pub description: String,
    pub responsibilities: Vec<String>,
    pub files: Vec<String>,
}

/// A decision named by a story's mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub id: String,
    pub title: String,
    pub decision: String,
    pub rationale: String,
}

/// What the design document says about one story.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoryDesign {
    pub components: Vec<Component>,
    pub decisions: Vec<Decision>,
    /// Interface ids or names, as written.
    pub interfaces: Vec<String>,
}

impl StoryDesign {
    pub fn is_empty(&self) -> bool {
        self.components.is_empty() && self.decisions.is_empty() && self.interfaces.is_empty()
    }
}

impl DesignDoc {
    /// Wraps an already parsed document.
    pub fn from_value(value: Value) -> DesignDoc {
        DesignDoc { value }
    }

    /// Reads `path`; a missing file is `Ok(None)`.
    pub fn load(path: &Path) -> Result<Option<DesignDoc>, DesignDocError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(DesignDocError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let value = serde_json::from_str(&text).map_err(|e| DesignDocError::Syntax {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        Ok(Some(DesignDoc { value }))
    }

    /// The components, decisions and interfaces mapped to `story_id`.
    pub fn for_story(&self, story_id: &str) -> StoryDesign {
        let Some(mapping) = self
            .value
            .get("story_mappings")
            .and_then(|m| m.get(story_id))
        else {
            return StoryDesign::default();
        };
        let names = |key: &str| -> Vec<String> {
            mapping
                .get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(as_text).collect())
                .unwrap_or_default()
        };
        let all_components = self
            .value
            .get("architecture")
            .and_then(|a| a.get("components"))
            .or_else(|| self.value.get("components"))
            .and_then(Value::as_array);
        let components = names("components")
            .into_iter()
            .map(|name| {
                let found = all_components.and_then(|list| {
                    list.iter()
                        .find(|c| c.get("name").and_then(Value::as_str) == Some(name.as_str()))
                });
                Component {
                    description: field(found, "description"),
                    responsibilities: list(found, "responsibilities"),
                    files: list(found, "files"),
                    name,
                }
            })
            .collect();
        let all_decisions = self
            .value
            .get("decisions")
            .or_else(|| self.value.get("architectural_decisions"))
            .and_then(Value::as_array);
        let decisions = names("decisions")
            .into_iter()
            .map(|id| {
                let found = all_decisions.and_then(|list| {
                    list.iter()
                        .find(|d| d.get("id").and_then(Value::as_str) == Some(id.as_str()))
                });
                Decision {
                    title: field(found, "title"),
                    decision: field(found, "decision"),
                    rationale: field(found, "rationale"),
                    id,
                }
            })
            .collect();
        StoryDesign {
            components,
            decisions,
            interfaces: names("interfaces"),
        }
    }
}

fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn field(obj: Option<&Value>, key: &str) -> String {
    obj.and_then(|o| o.get(key))
        .and_then(as_text)
        .unwrap_or_default()
}

fn list(obj: Option<&Value>, key: &str) -> Vec<String> {
    obj.and_then(|o| o.get(key))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(as_text).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_story_to_components_and_decisions() {
        let doc = DesignDoc::from_value(serde_json::json!({
            "architecture": {"components": [
                {"name": "Store", "description": "Persists state", "responsibilities": ["save"], "files": ["src/store.rs"]},
                {"name": "Other", "description": "unrelated"}
            ]},
            "decisions": [{"id": "ADR-001", "title": "Atomic writes", "decision": "temp+rename", "rationale": "crash safety"}],
            "story_mappings": {"story-001": {"components": ["Store", "Ghost"], "decisions": ["ADR-001"], "interfaces": ["API-1"]}}
        }));
        let d = doc.for_story("story-001");
        assert_eq!(d.components.len(), 2);
        assert_eq!(d.components[0].files, ["src/store.rs"]);
        assert_eq!(d.components[1].description, "");
        assert_eq!(d.decisions[0].decision, "temp+rename");
        assert_eq!(d.interfaces, ["API-1"]);
        assert!(doc.for_story("story-002").is_empty());
    }

    #[test]
    fn missing_file_is_none_and_bad_json_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(DesignDoc::load(&dir.path().join("design_doc.json"))
            .unwrap()
            .is_none());
        std::fs::write(dir.path().join("design_doc.json"), "{").unwrap();
        assert!(DesignDoc::load(&dir.path().join("design_doc.json")).is_err());
    }
}
