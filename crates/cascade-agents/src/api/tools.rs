//! The api agent's tools: `Read`, `Write`, `Edit`, `Glob`, `Grep` and
//! `RunGates`, with Claude Code's names and input fields (so prompts and
//! mocks written for Claude Code carry over), and nothing else: there is no
//! command tool, so the agent is sandboxed by construction. Every path goes
//! through the [`Sandbox`]; a refusal, a missing file or a bad input is a
//! tool error the model reads, never a failure of the run.
//!
//! `RunGates` is not cascade-agents' to run (it knows nothing of gates): the
//! caller injects it as a [`GateHook`] (the engine: "run this story's gates
//! in its worktree and give their parsed errors"); without one the model is
//! not offered the tool.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::sandbox::Sandbox;

/// Most characters of one tool result sent back to the model.
const MAX_RESULT: usize = 100 * 1024;
/// Most paths `Glob` lists.
const MAX_GLOB: usize = 500;
/// Most matching lines `Grep` lists, and how much of each.
const MAX_GREP: usize = 200;
const MAX_GREP_LINE: usize = 300;
/// Files larger than this are not searched by `Grep`.
const MAX_GREP_FILE: u64 = 4 * 1024 * 1024;

/// What RunGates gives: the report the model reads.
pub type GateFuture = Pin<Box<dyn Future<Output = String> + Send>>;

/// The caller's "run the gates" capability (see the module doc).
#[derive(Clone)]
pub struct GateHook(pub Arc<dyn Fn() -> GateFuture + Send + Sync>);

impl std::fmt::Debug for GateHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GateHook(..)")
    }
}

/// One input field of a tool (all are strings).
struct Param {
    name: &'static str,
    description: &'static str,
}

/// A tool as offered to the model.
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    params: &'static [Param],
}

/// Every tool, in the order offered.
const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "Read",
        description: "Read a text file. Returns its whole content (long files are cut off, saying so).",
        params: &[Param {
            name: "file_path",
            description: "Absolute path of the file (or relative to the working directory)",
        }],
    },
    ToolSpec {
        name: "Write",
        description: "Write a file, replacing it if it exists; missing directories are created.",
        params: &[
            Param {
                name: "file_path",
                description: "Absolute path of the file (or relative to the working directory)",
            },
            Param {
                name: "content",
                description: "The whole new content of the file",
            },
        ],
    },
    ToolSpec {
        name: "Edit",
        description: "Replace one exact occurrence of old_string in a file with new_string. old_string must occur exactly once: include enough surrounding lines to make it unique.",
        params: &[
            Param {
                name: "file_path",
                description: "Absolute path of the file (or relative to the working directory)",
            },
            Param {
                name: "old_string",
                description: "The exact text to replace (whitespace included)",
            },
            Param {
                name: "new_string",
                description: "The text to put in its place",
            },
        ],
    },
    ToolSpec {
        name: "Glob",
        description: "List the files matching a glob pattern such as \"**/*.rs\" or \"src/*.py\", relative to the working directory (files git ignores are left out).",
        params: &[Param {
            name: "pattern",
            description: "The glob pattern",
        }],
    },
    ToolSpec {
        name: "Grep",
        description: "Search file contents for a regular expression; lists path:line: text of every matching line.",
        params: &[
            Param {
                name: "pattern",
                description: "The regular expression (Rust regex syntax)",
            },
            Param {
                name: "path",
                description: "File or directory to search (default: the working directory)",
            },
        ],
    },
    ToolSpec {
        name: "RunGates",
        description: "Run the project's quality gates (build, lint, tests) on the working directory as it is now, and return their result with the errors they found. Run it before you finish and fix what it reports.",
        params: &[],
    },
];

impl ToolSpec {
    /// The JSON schema of the tool's input.
    pub fn input_schema(&self) -> Value {
        let properties: Map<String, Value> = self
            .params
            .iter()
            .map(|p| {
                (
                    p.name.to_string(),
                    json!({"type": "string", "description": p.description}),
                )
            })
            .collect();
        // Grep's path is optional; every other field is required.
        let required: Vec<&str> = self
            .params
            .iter()
            .filter(|p| !(self.name == "Grep" && p.name == "path"))
            .map(|p| p.name)
            .collect();
        json!({"type": "object", "properties": properties, "required": required})
    }
}

/// What one tool call gave.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolOutput {
    fn ok(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: cap(content.into()),
            is_error: false,
        }
    }

    fn error(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: cap(content.into()),
            is_error: true,
        }
    }
}

/// The tools of one run.
#[derive(Debug, Clone)]
pub struct Tools {
    sandbox: Sandbox,
    gates: Option<GateHook>,
}

impl Tools {
    pub fn new(sandbox: Sandbox, gates: Option<GateHook>) -> Tools {
        Tools { sandbox, gates }
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The tools offered to the model (RunGates only with a hook).
    pub fn specs(&self) -> impl Iterator<Item = &'static ToolSpec> + '_ {
        TOOLS
            .iter()
            .filter(|t| t.name != "RunGates" || self.gates.is_some())
    }

    /// Runs one call.
    pub async fn call(&self, name: &str, input: &Value) -> ToolOutput {
        let arg = |field: &str| -> Result<&str, ToolOutput> {
            input.get(field).and_then(Value::as_str).ok_or_else(|| {
                ToolOutput::error(format!(
                    "missing string field '{field}' in the input of {name}"
                ))
            })
        };
        let result = match name {
            "Read" => arg("file_path").map(|p| self.read(p)),
            "Write" => arg("file_path").and_then(|p| Ok(self.write(p, arg("content")?))),
            "Edit" => arg("file_path")
                .and_then(|p| Ok(self.edit(p, arg("old_string")?, arg("new_string")?))),
            "Glob" => arg("pattern").map(|p| self.glob(p)),
            "Grep" => arg("pattern").map(|p| {
                let path = input.get("path").and_then(Value::as_str).unwrap_or("");
                self.grep(p, path)
            }),
            "RunGates" => Ok(match &self.gates {
                Some(hook) => ToolOutput::ok((hook.0)().await),
                None => ToolOutput::error("RunGates is not available in this step"),
            }),
            other => Ok(ToolOutput::error(format!(
                "unknown tool '{other}' (the tools are: {})",
                self.specs().map(|t| t.name).collect::<Vec<_>>().join(", ")
            ))),
        };
        result.unwrap_or_else(|e| e)
    }

    fn read(&self, path: &str) -> ToolOutput {
        let real = match self.sandbox.readable(path) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(e),
        };
        if real.is_dir() {
            return ToolOutput::error(format!("'{path}' is a directory (use Glob to list files)"));
        }
        match std::fs::read(&real) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) if text.is_empty() => ToolOutput::ok("(the file is empty)"),
                Ok(text) => ToolOutput::ok(text),
                Err(e) => ToolOutput::error(format!(
                    "'{path}' is not a text file ({} bytes, not UTF-8)",
                    e.as_bytes().len()
                )),
            },
            Err(e) => ToolOutput::error(format!("cannot read '{path}': {e}")),
        }
    }

    fn write(&self, path: &str, content: &str) -> ToolOutput {
        let real = match self.sandbox.writable(path) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(e),
        };
        if let Some(dir) = real.parent() {
            if let Err(e) = std::fs::create_dir_all(dir) {
                return ToolOutput::error(format!("cannot create '{}': {e}", dir.display()));
            }
        }
        match std::fs::write(&real, content) {
            Ok(()) => ToolOutput::ok(format!(
                "wrote {} bytes to {}",
                content.len(),
                real.display()
            )),
            Err(e) => ToolOutput::error(format!("cannot write '{path}': {e}")),
        }
    }

    fn edit(&self, path: &str, old: &str, new: &str) -> ToolOutput {
        let real = match self.sandbox.writable(path) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(e),
        };
        if old.is_empty() {
            return ToolOutput::error("old_string is empty (use Write to create a file)");
        }
        if old == new {
            return ToolOutput::error("old_string and new_string are the same: nothing to change");
        }
        let text = match std::fs::read_to_string(&real) {
            Ok(t) => t,
            Err(e) => return ToolOutput::error(format!("cannot read '{path}': {e}")),
        };
        match text.matches(old).count() {
            0 => ToolOutput::error(format!(
                "old_string was not found in '{path}' (Read the file and copy the text exactly)"
            )),
            1 => match std::fs::write(&real, text.replacen(old, new, 1)) {
                Ok(()) => ToolOutput::ok(format!("edited {}", real.display())),
                Err(e) => ToolOutput::error(format!("cannot write '{path}': {e}")),
            },
            n => ToolOutput::error(format!(
                "old_string occurs {n} times in '{path}'; include more surrounding text so it occurs once"
            )),
        }
    }

    fn glob(&self, pattern: &str) -> ToolOutput {
        let root = self.sandbox.root();
        // An absolute pattern under the working directory is taken from it.
        let relative = Path::new(pattern)
            .strip_prefix(root)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| pattern.to_string());
        if Path::new(&relative).is_absolute() || relative.split('/').any(|c| c == "..") {
            return ToolOutput::error(format!(
                "refused: the pattern '{pattern}' reaches outside the working directory {}",
                root.display()
            ));
        }
        let matcher = match globset::GlobBuilder::new(&relative)
            .literal_separator(true)
            .build()
        {
            Ok(g) => g.compile_matcher(),
            Err(e) => return ToolOutput::error(format!("invalid glob pattern: {e}")),
        };
        let mut found: Vec<String> = files(root)
            .filter(|p| p.strip_prefix(root).is_ok_and(|rel| matcher.is_match(rel)))
            .map(|p| p.display().to_string())
            .collect();
        found.sort();
        if found.is_empty() {
            return ToolOutput::ok(format!("no files match '{pattern}'"));
        }
        let total = found.len();
        found.truncate(MAX_GLOB);
        let mut out = found.join("\n");
        if total > MAX_GLOB {
            out.push_str(&format!(
                "\n({total} files match; the first {MAX_GLOB} are listed)"
            ));
        }
        ToolOutput::ok(out)
    }

    fn grep(&self, pattern: &str, path: &str) -> ToolOutput {
        let re = match regex::Regex::new(pattern) {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("invalid regular expression: {e}")),
        };
        let start = if path.is_empty() {
            self.sandbox.root().to_path_buf()
        } else {
            match self.sandbox.readable(path) {
                Ok(p) => p,
                Err(e) => return ToolOutput::error(e),
            }
        };
        let mut lines = Vec::new();
        let mut more = false;
        for file in files(&start) {
            let small = std::fs::metadata(&file).is_ok_and(|m| m.len() <= MAX_GREP_FILE);
            let Some(text) = small
                .then(|| std::fs::read(&file).ok())
                .flatten()
                .and_then(|b| String::from_utf8(b).ok())
            else {
                continue;
            };
            for (n, line) in text.lines().enumerate() {
                if re.is_match(line) {
                    if lines.len() == MAX_GREP {
                        more = true;
                        break;
                    }
                    let shown: String = line.chars().take(MAX_GREP_LINE).collect();
                    lines.push(format!("{}:{}: {shown}", file.display(), n + 1));
                }
            }
            if more {
                break;
            }
        }
        if lines.is_empty() {
            return ToolOutput::ok(format!("no matches for '{pattern}'"));
        }
        if more {
            lines.push(format!(
                "(more than {MAX_GREP} matching lines; narrow the search)"
            ));
        }
        ToolOutput::ok(lines.join("\n"))
    }
}

/// The regular files under `start` (or `start` itself), skipping what git
/// ignores, `.git`, and symlinks (which could lead out of the sandbox).
fn files(start: &Path) -> impl Iterator<Item = std::path::PathBuf> {
    ignore::WalkBuilder::new(start)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git")
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(ignore::DirEntry::into_path)
}

/// `text` cut to [`MAX_RESULT`] characters, saying so.
fn cap(text: String) -> String {
    if text.len() <= MAX_RESULT {
        return text;
    }
    let mut end = MAX_RESULT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n(cut off: {} bytes in all, the first {end} shown)",
        &text[..end],
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sandbox::Writable;

    fn tools(dir: &Path, gates: Option<GateHook>) -> Tools {
        Tools::new(Sandbox::new(dir, Writable::Tree).unwrap(), gates)
    }

    async fn call(t: &Tools, name: &str, input: Value) -> ToolOutput {
        t.call(name, &input).await
    }

    #[tokio::test]
    async fn write_read_edit_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let t = tools(dir.path(), None);
        let w = call(
            &t,
            "Write",
            json!({"file_path": "src/a.rs", "content": "fn a() {}\nfn b() {}\n"}),
        )
        .await;
        assert!(!w.is_error, "{w:?}");
        let abs = dir.path().join("src/a.rs").display().to_string();
        let r = call(&t, "Read", json!({"file_path": abs})).await;
        assert_eq!(r.content, "fn a() {}\nfn b() {}\n");
        let e = call(
            &t,
            "Edit",
            json!({"file_path": "src/a.rs", "old_string": "fn b() {}", "new_string": "fn c() {}"}),
        )
        .await;
        assert!(!e.is_error, "{e:?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("src/a.rs")).unwrap(),
            "fn a() {}\nfn c() {}\n"
        );
        // Ambiguous, missing and no-op edits are errors the model reads.
        let e = call(
            &t,
            "Edit",
            json!({"file_path": "src/a.rs", "old_string": "fn", "new_string": "pub fn"}),
        )
        .await;
        assert!(e.is_error && e.content.contains("2 times"), "{e:?}");
        let e = call(
            &t,
            "Edit",
            json!({"file_path": "src/a.rs", "old_string": "zzz", "new_string": "y"}),
        )
        .await;
        assert!(e.is_error && e.content.contains("not found"), "{e:?}");
        let e = call(&t, "Read", json!({"file_path": "nope.txt"})).await;
        assert!(e.is_error, "{e:?}");
        let e = call(&t, "Read", json!({})).await;
        assert!(e.is_error && e.content.contains("file_path"), "{e:?}");
        let e = call(&t, "Bash", json!({"command": "ls"})).await;
        assert!(e.is_error && e.content.contains("unknown tool"), "{e:?}");
    }

    #[tokio::test]
    async fn escapes_are_tool_errors_and_touch_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        let t = tools(dir.path(), None);
        let target = outside.path().join("pwned").display().to_string();
        for input in [
            json!({"file_path": "../../etc/passwd", "content": "x"}),
            json!({"file_path": target, "content": "x"}),
            json!({"file_path": "out/pwned", "content": "x"}),
        ] {
            let w = call(&t, "Write", input.clone()).await;
            assert!(
                w.is_error && w.content.starts_with("refused"),
                "{input}: {w:?}"
            );
            let r = call(&t, "Read", input).await;
            assert!(r.is_error, "{r:?}");
        }
        assert!(!outside.path().join("pwned").exists());
        let g = call(&t, "Glob", json!({"pattern": "../*"})).await;
        assert!(g.is_error, "{g:?}");
        let g = call(&t, "Grep", json!({"pattern": "x", "path": "/etc"})).await;
        assert!(g.is_error, "{g:?}");
    }

    #[tokio::test]
    async fn glob_and_grep_skip_ignored_files_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.rs"), "needle outside\n").unwrap();
        std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
        std::fs::create_dir_all(dir.path().join("target")).unwrap();
        std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
        std::fs::write(dir.path().join("src/a.rs"), "one\nneedle here\n").unwrap();
        std::fs::write(dir.path().join("src/deep/b.rs"), "needle deep\n").unwrap();
        std::fs::write(dir.path().join("target/c.rs"), "needle built\n").unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.rs"),
            dir.path().join("src/l.rs"),
        )
        .unwrap();
        let t = tools(dir.path(), None);
        let g = call(&t, "Glob", json!({"pattern": "src/*.rs"})).await;
        assert!(g.content.ends_with("src/a.rs"), "{g:?}");
        let g = call(&t, "Glob", json!({"pattern": "**/*.rs"})).await;
        assert_eq!(g.content.lines().count(), 2, "{g:?}");
        let found = call(&t, "Grep", json!({"pattern": "needle"})).await;
        assert!(found.content.contains("a.rs:2: needle here"), "{found:?}");
        assert!(found.content.contains("b.rs:1: needle deep"), "{found:?}");
        assert!(
            !found.content.contains("built") && !found.content.contains("outside"),
            "{found:?}"
        );
        let one = call(&t, "Grep", json!({"pattern": "needle", "path": "src/deep"})).await;
        assert_eq!(one.content.lines().count(), 1, "{one:?}");
        let bad = call(&t, "Grep", json!({"pattern": "("})).await;
        assert!(bad.is_error, "{bad:?}");
    }

    #[tokio::test]
    async fn run_gates_is_offered_and_run_only_with_a_hook() {
        let dir = tempfile::tempdir().unwrap();
        let without = tools(dir.path(), None);
        assert!(!without.specs().any(|s| s.name == "RunGates"));
        let r = call(&without, "RunGates", json!({})).await;
        assert!(r.is_error, "{r:?}");
        let hook = GateHook(Arc::new(|| -> GateFuture {
            Box::pin(async { "gate 'tests' failed: 1 error".to_string() })
        }));
        let with = tools(dir.path(), Some(hook));
        assert_eq!(with.specs().count(), 6);
        let r = call(&with, "RunGates", json!({})).await;
        assert_eq!(r.content, "gate 'tests' failed: 1 error");
    }

    #[test]
    fn schemas_have_claude_code_field_names() {
        let edit = TOOLS.iter().find(|t| t.name == "Edit").unwrap();
        let s = edit.input_schema();
        assert_eq!(
            s["required"],
            json!(["file_path", "old_string", "new_string"])
        );
        let grep = TOOLS.iter().find(|t| t.name == "Grep").unwrap();
        assert_eq!(grep.input_schema()["required"], json!(["pattern"]));
        assert!(cap("é".repeat(MAX_RESULT)).contains("cut off"));
    }
}
