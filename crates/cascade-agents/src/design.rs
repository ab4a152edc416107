//! Plan Cascade's `design_doc.json`: the part relevant to one story.
//!
//! The document maps stories to components and architectural decisions
//! (`story_mappings.<story>.components / decisions / interfaces`); the prompt
//! carries only what the story's mapping names (Plan Cascade's context
//! filter), looked up in `architecture.components[]`, `decisions[]` and
//! `architecture.patterns[]`. A feature document of a mega-plan names its
//! project document in `metadata.parent_design_doc`: what the feature does
//! not define is looked up there, and the patterns and decisions listed in
//! its `inherited_context` apply to every mapped story. Unknown fields are
//! ignored and missing ones are simply left out, so any version of the file
//! works.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A loaded design document.
#[derive(Debug, Clone, PartialEq)]
pub struct DesignDoc {
    value: Value,
    /// The project document named by `metadata.parent_design_doc`.
    parent: Option<Box<DesignDoc>>,
}

/// How many `parent_design_doc` links are followed (a cycle stops here).
const MAX_PARENTS: usize = 3;

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

/// A pattern named by a story's mapping (or inherited by its feature).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub name: String,
    pub description: String,
    pub rationale: String,
}

/// What the design document says about one story.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoryDesign {
    pub components: Vec<Component>,
    pub decisions: Vec<Decision>,
    /// Interface ids or names, as written.
    pub interfaces: Vec<String>,
    pub patterns: Vec<Pattern>,
}

impl StoryDesign {
    pub fn is_empty(&self) -> bool {
        self.components.is_empty()
            && self.decisions.is_empty()
            && self.interfaces.is_empty()
            && self.patterns.is_empty()
    }
}

impl DesignDoc {
    /// Wraps an already parsed document.
    pub fn from_value(value: Value) -> DesignDoc {
        DesignDoc {
            value,
            parent: None,
        }
    }

    /// Sets the project document things not found here are looked up in.
    pub fn with_parent(mut self, parent: DesignDoc) -> DesignDoc {
        self.parent = Some(Box::new(parent));
        self
    }

    /// Reads `path` and the parent documents it names; a missing file is
    /// `Ok(None)` (a missing or broken parent is left out).
    pub fn load(path: &Path) -> Result<Option<DesignDoc>, DesignDocError> {
        Self::load_at(path, 0)
    }

    fn load_at(path: &Path, depth: usize) -> Result<Option<DesignDoc>, DesignDocError> {
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
        let mut doc = DesignDoc::from_value(value);
        let parent = doc
            .value
            .pointer("/metadata/parent_design_doc")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(|p| path.parent().unwrap_or(Path::new(".")).join(p));
        if let Some(parent) = parent.filter(|_| depth < MAX_PARENTS) {
            if let Ok(Some(p)) = Self::load_at(&parent, depth + 1) {
                doc.parent = Some(Box::new(p));
            }
        }
        Ok(Some(doc))
    }

    /// The entry of `list` (a section of this document, else of a parent)
    /// whose `key` is `name`.
    fn find(&self, list: Section, key: &str, name: &str) -> Option<&Value> {
        list(&self.value)
            .and_then(|l| {
                l.iter()
                    .find(|c| c.get(key).and_then(Value::as_str) == Some(name))
            })
            .or_else(|| self.parent.as_ref().and_then(|p| p.find(list, key, name)))
    }

    /// The components, decisions, patterns and interfaces mapped to `story_id`.
    pub fn for_story(&self, story_id: &str) -> StoryDesign {
        let Some(mapping) = self
            .value
            .get("story_mappings")
            .and_then(|m| m.get(story_id))
        else {
            return StoryDesign::default();
        };
        let names = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| a.iter().filter_map(as_text).collect())
                .unwrap_or_default()
        };
        // What the feature inherits from the project applies to each story.
        let inherited = self.value.get("inherited_context");
        let mut decision_ids = names(mapping.get("decisions"));
        let mut pattern_names = names(mapping.get("patterns"));
        for (into, key) in [
            (&mut decision_ids, "decisions"),
            (&mut pattern_names, "patterns"),
        ] {
            for n in names(inherited.and_then(|i| i.get(key))) {
                if !into.contains(&n) {
                    into.push(n);
                }
            }
        }
        let components = names(mapping.get("components"))
            .into_iter()
            .map(|name| {
                let found = self.find(components_of, "name", &name);
                Component {
                    description: field(found, "description"),
                    responsibilities: list(found, "responsibilities"),
                    files: list(found, "files"),
                    name,
                }
            })
            .collect();
        let decisions = decision_ids
            .into_iter()
            .map(|id| {
                let found = self.find(decisions_of, "id", &id);
                Decision {
                    title: field(found, "title"),
                    decision: field(found, "decision"),
                    rationale: field(found, "rationale"),
                    id,
                }
            })
            .collect();
        let patterns = pattern_names
            .into_iter()
            .map(|name| {
                let found = self.find(patterns_of, "name", &name);
                Pattern {
                    description: field(found, "description"),
                    rationale: field(found, "rationale"),
                    name,
                }
            })
            .collect();
        StoryDesign {
            components,
            decisions,
            interfaces: names(mapping.get("interfaces")),
            patterns,
        }
    }
}

/// Where a document keeps one kind of entry.
type Section = fn(&Value) -> Option<&Vec<Value>>;

fn components_of(v: &Value) -> Option<&Vec<Value>> {
    v.get("architecture")
        .and_then(|a| a.get("components"))
        .or_else(|| v.get("components"))
        .and_then(Value::as_array)
}

fn decisions_of(v: &Value) -> Option<&Vec<Value>> {
    v.get("decisions")
        .or_else(|| v.get("architectural_decisions"))
        .and_then(Value::as_array)
}

fn patterns_of(v: &Value) -> Option<&Vec<Value>> {
    v.get("architecture")
        .and_then(|a| a.get("patterns"))
        .or_else(|| v.get("patterns"))
        .and_then(Value::as_array)
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
    fn patterns_and_the_parent_documents_context_are_inherited() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("design_doc.json"),
            r#"{"architecture": {"patterns": [{"name": "Layers", "description": "ui over core", "rationale": "testable"}]},
                "decisions": [{"id": "ADR-001", "title": "JWT", "decision": "stateless tokens"}],
                "feature_mappings": {}}"#,
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("auth")).unwrap();
        std::fs::write(
            dir.path().join("auth/design_doc.json"),
            r#"{"metadata": {"parent_design_doc": "../design_doc.json"},
                "inherited_context": {"patterns": ["Layers"], "decisions": ["ADR-001"]},
                "architecture": {"components": [{"name": "Login"}], "patterns": [{"name": "Retry"}]},
                "story_mappings": {"story-001": {"components": ["Login"], "patterns": ["Retry"]},
                                   "story-002": {"components": []}}}"#,
        )
        .unwrap();
        let doc = DesignDoc::load(&dir.path().join("auth/design_doc.json"))
            .unwrap()
            .unwrap();
        let d = doc.for_story("story-001");
        let names: Vec<_> = d.patterns.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["Retry", "Layers"]);
        assert_eq!(d.patterns[1].rationale, "testable");
        assert_eq!(d.decisions[0].decision, "stateless tokens");
        // A story that maps nothing itself still gets what its feature inherits.
        assert_eq!(doc.for_story("story-002").decisions.len(), 1);
        // Unmapped stories get nothing.
        assert!(doc.for_story("story-404").is_empty());
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
