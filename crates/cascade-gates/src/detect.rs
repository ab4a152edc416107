//! Project detection and the default gates per project type.
//!
//! The root and its direct sub-folders (except hidden, vendored and build
//! folders) are checked for `Cargo.toml`, `package.json`,
//! `pyproject.toml`/`setup.py`/`requirements.txt` and `go.mod`. Every detected
//! project gets its default gates, running in its own folder; in a repository
//! with more than one project the gate names carry the folder and type
//! (`web/node-eslint`). A Cargo workspace member below a root `Cargo.toml` is
//! not a separate project.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::{Gate, GateKind, DEFAULT_TIMEOUT};

/// A detected project type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProjectType {
    Rust,
    Python,
    Node,
    Go,
}

impl ProjectType {
    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            ProjectType::Rust => "rust",
            ProjectType::Python => "python",
            ProjectType::Node => "node",
            ProjectType::Go => "go",
        }
    }

    /// File extensions that matter to this type's tools (incremental runs).
    pub fn extensions(self) -> &'static [&'static str] {
        match self {
            ProjectType::Rust => &["rs"],
            ProjectType::Python => &["py", "pyi"],
            ProjectType::Node => &["ts", "tsx", "js", "jsx", "mjs", "cjs", "mts", "cts"],
            ProjectType::Go => &["go"],
        }
    }
}

/// One detected project: its folder (relative, `.` for the root) and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    pub dir: String,
    pub kind: ProjectType,
}

const SKIP_DIRS: &[&str] = &[
    "node_modules",
    "target",
    "vendor",
    "dist",
    "build",
    "venv",
    "__pycache__",
    "out",
];

/// Detects projects in `root` and its direct sub-folders.
pub fn detect_projects(root: &Path) -> Vec<Project> {
    let mut out = Vec::new();
    let root_types = types_in(root);
    for kind in &root_types {
        out.push(Project {
            dir: ".".into(),
            kind: *kind,
        });
    }
    let mut subdirs: Vec<String> = match std::fs::read_dir(root) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| !n.starts_with('.') && !SKIP_DIRS.contains(&n.as_str()))
            .collect(),
        Err(_) => Vec::new(),
    };
    subdirs.sort();
    for dir in subdirs {
        for kind in types_in(&root.join(&dir)) {
            // Members of a root Cargo workspace (or a root Go module / npm
            // workspace of the same type) are covered by the root's gates.
            if root_types.contains(&kind) {
                continue;
            }
            out.push(Project {
                dir: dir.clone(),
                kind,
            });
        }
    }
    out
}

fn types_in(dir: &Path) -> Vec<ProjectType> {
    let has = |f: &str| dir.join(f).is_file();
    let mut v = Vec::new();
    if has("Cargo.toml") {
        v.push(ProjectType::Rust);
    }
    if has("pyproject.toml") || has("setup.py") || has("requirements.txt") {
        v.push(ProjectType::Python);
    }
    if has("package.json") {
        v.push(ProjectType::Node);
    }
    if has("go.mod") {
        v.push(ProjectType::Go);
    }
    v
}

/// The default gates of every project detected under `root`.
pub fn default_gates(root: &Path) -> Vec<Gate> {
    let projects = detect_projects(root);
    let qualify = projects.len() > 1;
    let mut gates = Vec::new();
    for p in &projects {
        for (suffix, kind, program, args, parser, fail_on_output) in defaults_for(root, p) {
            let name = if qualify {
                if p.dir == "." {
                    format!("{}-{suffix}", p.kind.name())
                } else {
                    format!("{}/{}-{suffix}", p.dir, p.kind.name())
                }
            } else {
                suffix.to_string()
            };
            gates.push(Gate {
                name,
                kind,
                required: true,
                program: program.to_string(),
                args: args.iter().map(|s| s.to_string()).collect(),
                timeout: DEFAULT_TIMEOUT,
                env: BTreeMap::new(),
                incremental: false,
                extensions: p.kind.extensions().iter().map(|s| s.to_string()).collect(),
                inputs: Vec::new(),
                inputs_set: None,
                cache_failures: false,
                working_dir: p.dir.clone(),
                fail_on_output,
                parser: Some(parser.to_string()),
                toolchain: None,
            });
        }
    }
    gates
}

type Default = (
    &'static str,
    GateKind,
    &'static str,
    Vec<&'static str>,
    &'static str,
    bool,
);

fn defaults_for(root: &Path, p: &Project) -> Vec<Default> {
    let dir = root.join(&p.dir);
    match p.kind {
        ProjectType::Rust => vec![
            (
                "fmt",
                GateKind::Format,
                "cargo",
                vec!["fmt", "--check"],
                "cargo",
                false,
            ),
            (
                "clippy",
                GateKind::Lint,
                "cargo",
                vec!["clippy", "--all-targets", "--message-format=json"],
                "cargo",
                false,
            ),
            (
                "test",
                GateKind::Test,
                "cargo",
                vec!["test", "--message-format=json"],
                "cargo",
                false,
            ),
        ],
        ProjectType::Python => vec![
            (
                "ruff",
                GateKind::Lint,
                "ruff",
                vec!["check", "--output-format=json", "."],
                "ruff",
                false,
            ),
            (
                "mypy",
                GateKind::Typecheck,
                "mypy",
                vec!["--show-column-numbers", "--show-error-codes", "."],
                "mypy",
                false,
            ),
            (
                "pytest",
                GateKind::Test,
                "pytest",
                vec!["-q"],
                "pytest",
                false,
            ),
        ],
        ProjectType::Node => {
            let mut v = Vec::new();
            if dir.join("tsconfig.json").is_file() {
                v.push((
                    "tsc",
                    GateKind::Typecheck,
                    "npx",
                    vec!["--no-install", "tsc", "--noEmit", "--pretty", "false"],
                    "tsc",
                    false,
                ));
            }
            v.push((
                "eslint",
                GateKind::Lint,
                "npx",
                vec!["--no-install", "eslint", "--format", "json", "."],
                "eslint",
                false,
            ));
            let has_test_script = std::fs::read_to_string(dir.join("package.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|v| v.pointer("/scripts/test").is_some());
            if has_test_script {
                v.push(("test", GateKind::Test, "npm", vec!["test"], "node", false));
            }
            v
        }
        ProjectType::Go => vec![
            (
                "gofmt",
                GateKind::Format,
                "gofmt",
                vec!["-l", "."],
                "gofmt",
                true,
            ),
            (
                "vet",
                GateKind::Lint,
                "go",
                vec!["vet", "./..."],
                "go",
                false,
            ),
            (
                "test",
                GateKind::Test,
                "go",
                vec!["test", "./..."],
                "go",
                false,
            ),
        ],
    }
}

/// Extensions an incremental gate filters by, guessed from its program.
pub fn extensions_for_program(program: &str) -> Vec<String> {
    let base = Path::new(program)
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or(program);
    let kind = match base {
        "cargo" | "rustc" | "rustfmt" | "clippy-driver" => Some(ProjectType::Rust),
        "ruff" | "mypy" | "pytest" | "python" | "python3" | "black" | "flake8" | "pylint" => {
            Some(ProjectType::Python)
        }
        "tsc" | "eslint" | "npx" | "npm" | "node" | "prettier" | "pnpm" | "yarn" => {
            Some(ProjectType::Node)
        }
        "go" | "gofmt" | "golangci-lint" => Some(ProjectType::Go),
        _ => None,
    };
    kind.map(|k| k.extensions().iter().map(|s| s.to_string()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_repository_gets_gates_per_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path();
        std::fs::write(r.join("Cargo.toml"), "[workspace]").unwrap();
        std::fs::create_dir_all(r.join("crates/a")).unwrap();
        std::fs::write(r.join("crates/a/Cargo.toml"), "").unwrap();
        std::fs::create_dir_all(r.join("web")).unwrap();
        std::fs::write(r.join("web/package.json"), r#"{"scripts": {"test": "x"}}"#).unwrap();
        std::fs::write(r.join("web/tsconfig.json"), "{}").unwrap();
        std::fs::create_dir_all(r.join("svc")).unwrap();
        std::fs::write(r.join("svc/go.mod"), "module x").unwrap();
        std::fs::create_dir_all(r.join("node_modules/p")).unwrap();
        std::fs::write(r.join("node_modules/p/package.json"), "{}").unwrap();
        let projects = detect_projects(r);
        assert_eq!(
            projects,
            vec![
                Project {
                    dir: ".".into(),
                    kind: ProjectType::Rust
                },
                Project {
                    dir: "svc".into(),
                    kind: ProjectType::Go
                },
                Project {
                    dir: "web".into(),
                    kind: ProjectType::Node
                },
            ]
        );
        let gates = default_gates(r);
        let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "rust-fmt",
                "rust-clippy",
                "rust-test",
                "svc/go-gofmt",
                "svc/go-vet",
                "svc/go-test",
                "web/node-tsc",
                "web/node-eslint",
                "web/node-test"
            ]
        );
        let vet = gates.iter().find(|g| g.name == "svc/go-vet").unwrap();
        assert_eq!(vet.working_dir, "svc");
        assert!(
            gates
                .iter()
                .find(|g| g.name == "svc/go-gofmt")
                .unwrap()
                .fail_on_output
        );
    }

    #[test]
    fn single_project_has_plain_names() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("pyproject.toml"), "").unwrap();
        let names: Vec<String> = default_gates(tmp.path())
            .into_iter()
            .map(|g| g.name)
            .collect();
        assert_eq!(names, vec!["ruff", "mypy", "pytest"]);
        assert!(default_gates(&tmp.path().join("nothing")).is_empty());
    }
}
