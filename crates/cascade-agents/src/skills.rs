//! Skills: short best-practice notes injected into prompts.
//!
//! Built-in skills (`builtin-skills/<name>/SKILL.md`, compiled in so the
//! binary works anywhere) apply when the project has their marker files
//! (Cargo.toml -> rust, package.json -> typescript, pyproject.toml /
//! requirements.txt -> python, go.mod -> go). Users add or replace skills in
//! `.cascade/skills.json`:
//!
//! ```json
//! {"skills": [
//!   {"name": "rust", "priority": 10, "file": "docs/our-rust-style.md"},
//!   {"name": "house-rules", "content": "Never touch vendor/.", "when": ["Cargo.toml"]},
//!   {"name": "python", "priority": 10, "enabled": false}
//! ]}
//! ```
//!
//! On the same name the higher priority wins (built-ins have priority 0, user
//! skills 10 unless they say otherwise); a winning entry with
//! `"enabled": false` removes the skill. `file` is relative to the project
//! root; `when` lists marker files (any present => applies; absent => always).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Priority of built-in skills.
pub const BUILTIN_PRIORITY: i64 = 0;
/// Priority of user skills that do not give one.
pub const USER_DEFAULT_PRIORITY: i64 = 10;
/// A skill longer than this is cut (prompts must stay small).
pub const MAX_SKILL_BYTES: usize = 16 * 1024;

/// Where a skill came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillSource {
    BuiltIn,
    /// `.cascade/skills.json` (the path of that file).
    User(PathBuf),
}

/// One skill chosen for a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub priority: i64,
    /// Markdown.
    pub content: String,
    pub source: SkillSource,
}

struct Builtin {
    name: &'static str,
    markers: &'static [&'static str],
    content: &'static str,
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "rust",
        markers: &["Cargo.toml"],
        content: include_str!("../../../builtin-skills/rust/SKILL.md"),
    },
    Builtin {
        name: "typescript",
        markers: &["package.json", "tsconfig.json"],
        content: include_str!("../../../builtin-skills/typescript/SKILL.md"),
    },
    Builtin {
        name: "python",
        markers: &[
            "pyproject.toml",
            "requirements.txt",
            "setup.py",
            "setup.cfg",
            "Pipfile",
        ],
        content: include_str!("../../../builtin-skills/python/SKILL.md"),
    },
    Builtin {
        name: "go",
        markers: &["go.mod"],
        content: include_str!("../../../builtin-skills/go/SKILL.md"),
    },
];

/// Names of the built-in skills.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTINS.iter().map(|b| b.name).collect()
}

/// A problem with `.cascade/skills.json`.
#[derive(Debug, thiserror::Error)]
pub enum SkillsError {
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
    #[error("{}: {key}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
}

/// The skills for a project: built-ins by marker files, merged with
/// `<cascade_dir>/skills.json` when it exists. Sorted by priority (highest
/// first), then name.
pub fn select_skills(project_root: &Path, cascade_dir: &Path) -> Result<Vec<Skill>, SkillsError> {
    let mut skills: Vec<Skill> = Vec::new();
    // Candidates: (skill, enabled).
    let mut candidates: Vec<(Skill, bool)> = BUILTINS
        .iter()
        .filter(|b| b.markers.iter().any(|m| project_root.join(m).exists()))
        .map(|b| {
            (
                Skill {
                    name: b.name.to_string(),
                    priority: BUILTIN_PRIORITY,
                    content: b.content.trim_end().to_string(),
                    source: SkillSource::BuiltIn,
                },
                true,
            )
        })
        .collect();
    let user_file = cascade_dir.join("skills.json");
    if user_file.is_file() {
        candidates.extend(load_user_skills(&user_file, project_root)?);
    }
    // For each name the highest priority wins; on equal priority the later
    // entry (user over built-in, later in the file) wins.
    let mut winners: Vec<(Skill, bool)> = Vec::new();
    for (skill, enabled) in candidates {
        match winners.iter_mut().find(|(w, _)| w.name == skill.name) {
            Some(slot) if skill.priority >= slot.0.priority => *slot = (skill, enabled),
            Some(_) => {}
            None => winners.push((skill, enabled)),
        }
    }
    skills.extend(winners.into_iter().filter(|(_, e)| *e).map(|(s, _)| s));
    skills.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
    Ok(skills)
}

fn load_user_skills(path: &Path, project_root: &Path) -> Result<Vec<(Skill, bool)>, SkillsError> {
    let text = std::fs::read_to_string(path).map_err(|source| SkillsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| SkillsError::Syntax {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let invalid = |key: String, message: &str| SkillsError::Invalid {
        path: path.to_path_buf(),
        key,
        message: message.to_string(),
    };
    let (list, base) = match &value {
        Value::Array(items) => (items, "skills"),
        Value::Object(o) => match o.get("skills") {
            Some(Value::Array(items)) => (items, "skills"),
            _ => return Err(invalid("skills".into(), "expected an array of skills")),
        },
        _ => return Err(invalid("(root)".into(), "expected {\"skills\": [...]}")),
    };
    let mut out = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let key = format!("{base}[{i}]");
        let Some(obj) = item.as_object() else {
            return Err(invalid(key, "expected an object with a name"));
        };
        let name = match obj.get("name").and_then(Value::as_str) {
            Some(n) if !n.trim().is_empty() => n.trim().to_string(),
            _ => {
                return Err(invalid(
                    format!("{key}.name"),
                    "expected a non-empty string",
                ))
            }
        };
        let priority = match obj.get("priority") {
            None | Some(Value::Null) => USER_DEFAULT_PRIORITY,
            Some(v) => v
                .as_i64()
                .ok_or_else(|| invalid(format!("{key}.priority"), "expected an integer"))?,
        };
        let enabled = match obj.get("enabled") {
            None | Some(Value::Null) => true,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| invalid(format!("{key}.enabled"), "expected true or false"))?,
        };
        if let Some(when) = obj.get("when") {
            let Some(markers) = when.as_array() else {
                return Err(invalid(
                    format!("{key}.when"),
                    "expected an array of file names",
                ));
            };
            let mut any = false;
            for (j, m) in markers.iter().enumerate() {
                let m = m
                    .as_str()
                    .ok_or_else(|| invalid(format!("{key}.when[{j}]"), "expected a file name"))?;
                any |= project_root.join(m).exists();
            }
            if !any {
                continue;
            }
        }
        let content = match (obj.get("content"), obj.get("file")) {
            (Some(Value::String(c)), _) => c.clone(),
            (Some(_), _) => return Err(invalid(format!("{key}.content"), "expected a string")),
            (None, Some(Value::String(f))) => {
                let p = project_root.join(f);
                std::fs::read_to_string(&p)
                    .map_err(|source| SkillsError::Read { path: p, source })?
            }
            (None, Some(_)) => return Err(invalid(format!("{key}.file"), "expected a path")),
            (None, None) if !enabled => String::new(),
            (None, None) => {
                return Err(invalid(
                    key,
                    "needs \"content\" or \"file\" (or \"enabled\": false)",
                ))
            }
        };
        out.push((
            Skill {
                name,
                priority,
                content: cap(content.trim_end()),
                source: SkillSource::User(path.to_path_buf()),
            },
            enabled,
        ));
    }
    Ok(out)
}

fn cap(text: &str) -> String {
    if text.len() <= MAX_SKILL_BYTES {
        return text.to_string();
    }
    let mut end = MAX_SKILL_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n\n(truncated)", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(skills: &[Skill]) -> Vec<&str> {
        skills.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn builtins_follow_marker_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let cascade = root.join(".cascade");
        assert!(select_skills(root, &cascade).unwrap().is_empty());
        std::fs::write(root.join("Cargo.toml"), "").unwrap();
        std::fs::write(root.join("requirements.txt"), "").unwrap();
        let s = select_skills(root, &cascade).unwrap();
        assert_eq!(names(&s), ["python", "rust"]);
        assert!(s[1].content.starts_with("# Rust"));
        std::fs::write(root.join("go.mod"), "").unwrap();
        std::fs::write(root.join("package.json"), "{}").unwrap();
        assert_eq!(
            names(&select_skills(root, &cascade).unwrap()),
            ["go", "python", "rust", "typescript"]
        );
    }

    #[test]
    fn user_skills_override_by_priority() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let cascade = root.join(".cascade");
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::create_dir_all(&cascade).unwrap();
        std::fs::write(root.join("Cargo.toml"), "").unwrap();
        std::fs::write(root.join("pyproject.toml"), "").unwrap();
        std::fs::write(root.join("docs/rust.md"), "Our Rust rules.\n").unwrap();
        std::fs::write(
            cascade.join("skills.json"),
            r#"{"skills": [
              {"name": "rust", "priority": 10, "file": "docs/rust.md"},
              {"name": "python", "priority": 5, "enabled": false},
              {"name": "house", "priority": 20, "content": "Be nice."},
              {"name": "go-extra", "content": "go!", "when": ["go.mod"]},
              {"name": "low", "priority": -5, "content": "low"},
              {"name": "low", "priority": -9, "content": "lower loses"}
            ]}"#,
        )
        .unwrap();
        let s = select_skills(root, &cascade).unwrap();
        assert_eq!(names(&s), ["house", "rust", "low"]);
        assert_eq!(s[1].content, "Our Rust rules.");
        assert!(matches!(s[1].source, SkillSource::User(_)));
        assert_eq!(s[2].content, "low");

        // A lower priority does not replace the built-in.
        std::fs::write(
            cascade.join("skills.json"),
            r#"[{"name": "rust", "priority": -1, "content": "ignored"}]"#,
        )
        .unwrap();
        let s = select_skills(root, &cascade).unwrap();
        assert!(s
            .iter()
            .find(|s| s.name == "rust")
            .unwrap()
            .content
            .starts_with("# Rust"));
    }

    #[test]
    fn bad_skills_file_names_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let cascade = dir.path().join(".cascade");
        std::fs::create_dir_all(&cascade).unwrap();
        std::fs::write(
            cascade.join("skills.json"),
            r#"{"skills": [{"name": "x", "priority": "high", "content": ""}]}"#,
        )
        .unwrap();
        let err = select_skills(dir.path(), &cascade).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("skills.json: skills[0].priority: expected an integer"),
            "{err}"
        );
        std::fs::write(cascade.join("skills.json"), "{").unwrap();
        assert!(matches!(
            select_skills(dir.path(), &cascade),
            Err(SkillsError::Syntax { .. })
        ));
    }
}
