//! Plan Cascade's `design_doc.json` as planning writes and checks it, and
//! the import of an external design document (`--design-doc`).
//!
//! The two-level schema: a project document (for a mega-plan) maps features
//! in `feature_mappings`; a feature document (for a prd) maps every story in
//! `story_mappings` to `components` (names in `architecture.components[]`),
//! `decisions` (ids in `decisions[]`), `interfaces` and `patterns` (names in
//! `architecture.patterns[]`), and may name its `metadata.parent_design_doc`.
//! The checks here are what planning's local validation adds to
//! cascade-plan's: every mapping names real stories and real
//! components/decisions/patterns, and every story is mapped.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::PlanningError;

/// The schema shown to agents (Plan Cascade's two-level design doc).
pub const SCHEMA: &str = r#"```json
{
  "metadata": {"created_at": "ISO-8601", "version": "1.0.0",
               "source": "ai-generated", "level": "feature",
               "prd_reference": "prd.json",
               "parent_design_doc": "path of the project design_doc.json (feature docs of a mega-plan only)"},
  "overview": {"title": "...", "summary": "...", "goals": ["..."], "non_goals": ["..."]},
  "architecture": {
    "components": [{"name": "AuthService", "description": "...", "responsibilities": ["..."],
                    "dependencies": ["..."], "files": ["src/auth.rs"]}],
    "data_flow": "...",
    "patterns": [{"name": "Repository", "description": "...", "rationale": "..."}]
  },
  "interfaces": {"apis": [{"id": "API-001", "method": "POST", "path": "/login", "description": "..."}],
                 "data_models": [{"name": "User", "fields": {"id": "uuid"}}]},
  "decisions": [{"id": "ADR-001", "title": "...", "context": "...", "decision": "...",
                 "rationale": "...", "alternatives_considered": ["..."], "status": "accepted"}],
  "story_mappings": {"story-001": {"components": ["AuthService"], "decisions": ["ADR-001"],
                                   "interfaces": ["API-001"], "patterns": ["Repository"]}}
}
```
A project-level document (for a mega-plan) has `"level": "project"` and
`feature_mappings` (`{"feature-001": {"components": [...], "patterns": [...], "decisions": [...]}}`)
instead of `story_mappings`."#;

fn names(doc: &Value, section: &[&str], key: &str) -> BTreeSet<String> {
    let mut v = Some(doc);
    for s in section {
        v = v.and_then(|x| x.get(*s));
    }
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| match c {
            Value::String(s) => Some(s.clone()),
            other => other.get(key).and_then(Value::as_str).map(str::to_string),
        })
        .collect()
}

fn listed(mapping: &Value, key: &str) -> Vec<String> {
    match mapping.get(key) {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// Checks a design doc against the ids of the plan it belongs to.
/// `mappings_key`: `story_mappings` (prd) or `feature_mappings` (mega-plan);
/// `ids`: the plan's story ids or feature ids (a feature may be named by id
/// or name, so both are passed for mega-plans). Returns every problem.
pub fn check(doc: &Value, mappings_key: &str, ids: &[Vec<String>]) -> Vec<String> {
    let mut problems = Vec::new();
    if !doc.is_object() {
        return vec!["design_doc.json: the document must be a JSON object".into()];
    }
    let components = names(doc, &["architecture", "components"], "name");
    let patterns = names(doc, &["architecture", "patterns"], "name");
    let decisions = names(doc, &["decisions"], "id");
    let interfaces: BTreeSet<String> = ["apis", "data_models"]
        .iter()
        .flat_map(|k| {
            let mut s = names(doc, &["interfaces", k], "id");
            s.extend(names(doc, &["interfaces", k], "name"));
            s.extend(names(doc, &["interfaces", k], "path"));
            s
        })
        .collect();
    let Some(mappings) = doc.get(mappings_key).and_then(Value::as_object) else {
        problems.push(format!(
            "design_doc.json: \"{mappings_key}\" is missing (it must map every {} to its components and decisions)",
            if mappings_key == "story_mappings" { "story" } else { "feature" }
        ));
        return problems;
    };
    let known = |k: &str| ids.iter().any(|alts| alts.iter().any(|a| a == k));
    for (key, mapping) in mappings {
        if !known(key) {
            problems.push(format!(
                "design_doc.json: {mappings_key} names '{key}', which is not in the plan"
            ));
            continue;
        }
        for (field, set, what) in [
            ("components", &components, "architecture.components"),
            ("decisions", &decisions, "decisions"),
            ("patterns", &patterns, "architecture.patterns"),
        ] {
            for name in listed(mapping, field) {
                if !set.contains(&name) {
                    problems.push(format!(
                        "design_doc.json: {mappings_key}.{key}.{field} names '{name}', which is not in {what}"
                    ));
                }
            }
        }
        // Interfaces are free text in many documents: only checked when the
        // document declares some.
        if !interfaces.is_empty() {
            for name in listed(mapping, "interfaces") {
                if !interfaces.contains(&name) {
                    problems.push(format!(
                        "design_doc.json: {mappings_key}.{key}.interfaces names '{name}', which is not in interfaces"
                    ));
                }
            }
        }
    }
    for alts in ids {
        if !alts.iter().any(|a| mappings.contains_key(a)) {
            problems.push(format!(
                "design_doc.json: '{}' has no entry in {mappings_key} (map every {} to its components and decisions)",
                alts[0],
                if mappings_key == "story_mappings" { "story" } else { "feature" }
            ));
        }
    }
    problems
}

/// The kind of an imported document, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportKind {
    Json,
    Markdown,
    Html,
}

/// An external design document given with `--design-doc`.
#[derive(Debug, Clone)]
pub struct Import {
    pub path: PathBuf,
    pub kind: ImportKind,
    pub text: String,
    /// For JSON: the parsed document (validated as is).
    pub json: Option<Value>,
}

/// Reads `path`: `.json` is parsed (syntax errors with line and column) and
/// must be an object; `.md`/`.markdown` and `.html`/`.htm` are kept as text
/// for the agent to convert.
pub fn import(path: &Path) -> Result<Import, PlanningError> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let kind = match ext.as_str() {
        "json" => ImportKind::Json,
        "md" | "markdown" => ImportKind::Markdown,
        "html" | "htm" => ImportKind::Html,
        _ => {
            return Err(PlanningError::Usage(format!(
                "--design-doc '{}': unsupported file type (use a .json, .md or .html document)",
                path.display()
            )))
        }
    };
    let text = std::fs::read_to_string(path).map_err(|source| PlanningError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let json = match kind {
        ImportKind::Json => {
            let v: Value =
                serde_json::from_str(&text).map_err(|e| PlanningError::json(path, &e))?;
            if !v.is_object() {
                return Err(PlanningError::Shape {
                    path: path.to_path_buf(),
                    message: "a design doc must be a JSON object".into(),
                });
            }
            Some(v)
        }
        _ => None,
    };
    Ok(Import {
        path: path.to_path_buf(),
        kind,
        text,
        json,
    })
}

/// Sets `metadata.source` (and creates `metadata` when missing).
pub fn set_source(doc: &mut Value, source: &str) {
    if let Some(obj) = doc.as_object_mut() {
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(m) = meta.as_object_mut() {
            m.insert("source".into(), Value::String(source.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "architecture": {"components": [{"name": "Auth"}, {"name": "Db"}],
                             "patterns": [{"name": "Repo"}]},
            "decisions": [{"id": "ADR-001"}],
            "story_mappings": {
                "story-001": {"components": ["Auth"], "decisions": ["ADR-001"], "patterns": ["Repo"]},
                "story-002": {"components": ["Cache"], "decisions": ["ADR-009"]},
                "story-404": {"components": []}
            }
        })
    }

    #[test]
    fn names_every_mapping_problem() {
        let ids: Vec<Vec<String>> = ["story-001", "story-002", "story-003"]
            .iter()
            .map(|s| vec![s.to_string()])
            .collect();
        let p = check(&doc(), "story_mappings", &ids);
        let all = p.join("\n");
        assert!(
            all.contains("story_mappings.story-002.components names 'Cache'"),
            "{all}"
        );
        assert!(
            all.contains("story_mappings.story-002.decisions names 'ADR-009'"),
            "{all}"
        );
        assert!(
            all.contains("names 'story-404', which is not in the plan"),
            "{all}"
        );
        assert!(
            all.contains("'story-003' has no entry in story_mappings"),
            "{all}"
        );
        assert_eq!(p.len(), 4, "{all}");
    }

    #[test]
    fn a_clean_document_passes_and_missing_mappings_are_named() {
        let mut d = doc();
        d["story_mappings"] = json!({"story-001": {"components": ["Auth", "Db"]}});
        assert!(check(&d, "story_mappings", &[vec!["story-001".into()]]).is_empty());
        let p = check(&json!({}), "feature_mappings", &[vec!["f1".into()]]);
        assert!(p[0].contains("\"feature_mappings\" is missing"));
    }

    #[test]
    fn imports_by_extension() {
        let tmp = tempfile::tempdir().unwrap();
        let md = tmp.path().join("d.md");
        std::fs::write(&md, "# Design\n").unwrap();
        assert_eq!(import(&md).unwrap().kind, ImportKind::Markdown);
        let js = tmp.path().join("d.json");
        std::fs::write(&js, "{\n \"a\": }").unwrap();
        let e = import(&js).unwrap_err().to_string();
        assert!(e.contains("d.json:2:"), "{e}");
        let txt = tmp.path().join("d.txt");
        std::fs::write(&txt, "x").unwrap();
        assert!(import(&txt).unwrap_err().is_usage());
        let mut v = json!({});
        set_source(&mut v, "converted");
        assert_eq!(v["metadata"]["source"], "converted");
    }
}
