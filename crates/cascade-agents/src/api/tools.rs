//! The api agent's tools: `Read`, `Write`, `Edit`, `Glob`, `Grep` and
//! `RunGates`, with Claude Code's names and input fields (so prompts and
//! mocks written for Claude Code carry over), and nothing else: there is no
//! command tool, so the agent is sandboxed by construction. Every path goes
//! through the [`Sandbox`]; a refusal, a missing file or a bad input is a
//! tool error the model reads, never a failure of the run.
//!
//! `Read` reads a file in parts (`offset`, `limit`, as Claude Code's does)
//! and only as far as the part it shows: a long file is read on where the
//! last part's note says, and a file of gigabytes costs one part.
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
/// Most lines one `Read` returns (Claude Code's default too): a longer
/// file is read in parts, with `offset`.
const READ_LINES: u64 = 2000;
/// Most bytes of a file one `Read` returns: a result's most, less room for
/// the note saying where the file goes on.
const READ_BYTES: usize = MAX_RESULT - 512;

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

/// One input field of a tool.
struct Param {
    name: &'static str,
    description: &'static str,
    kind: Kind,
    required: bool,
}

/// What a [`Param`] holds, as its JSON schema names it.
#[derive(Clone, Copy)]
enum Kind {
    String,
    Integer,
}

impl Param {
    /// A string field the call must give.
    const fn text(name: &'static str, description: &'static str) -> Param {
        Param {
            name,
            description,
            kind: Kind::String,
            required: true,
        }
    }

    /// The same field, optional.
    const fn optional(self) -> Param {
        Param {
            required: false,
            ..self
        }
    }

    /// An optional whole-number field.
    const fn number(name: &'static str, description: &'static str) -> Param {
        Param {
            name,
            description,
            kind: Kind::Integer,
            required: false,
        }
    }
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
        description: "Read a text file. Returns its content, at most 2000 lines or 100 KB at a time: a longer file ends with a note saying where it goes on, to be read on with offset.",
        params: &[
            Param::text(
                "file_path",
                "Absolute path of the file (or relative to the working directory)",
            ),
            Param::number(
                "offset",
                "The line number to start reading from (1 is the first line); only for a file too long to read at once",
            ),
            Param::number("limit", "How many lines to read (default and most: 2000)"),
        ],
    },
    ToolSpec {
        name: "Write",
        description: "Write a file, replacing it if it exists; missing directories are created.",
        params: &[
            Param::text("file_path", "Absolute path of the file (or relative to the working directory)"),
            Param::text("content", "The whole new content of the file"),
        ],
    },
    ToolSpec {
        name: "Edit",
        description: "Replace one exact occurrence of old_string in a file with new_string. old_string must occur exactly once: include enough surrounding lines to make it unique.",
        params: &[
            Param::text("file_path", "Absolute path of the file (or relative to the working directory)"),
            Param::text("old_string", "The exact text to replace (whitespace included)"),
            Param::text("new_string", "The text to put in its place"),
        ],
    },
    ToolSpec {
        name: "Glob",
        description: "List the files matching a glob pattern such as \"**/*.rs\" or \"src/*.py\", relative to the working directory (files git ignores are left out).",
        params: &[Param::text("pattern", "The glob pattern")],
    },
    ToolSpec {
        name: "Grep",
        description: "Search file contents for a regular expression; lists path:line: text of every matching line.",
        params: &[
            Param::text("pattern", "The regular expression (Rust regex syntax)"),
            Param::text("path", "File or directory to search (default: the working directory)")
                .optional(),
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
                let kind = match p.kind {
                    Kind::String => "string",
                    Kind::Integer => "integer",
                };
                (
                    p.name.to_string(),
                    json!({"type": kind, "description": p.description}),
                )
            })
            .collect();
        let required: Vec<&str> = self
            .params
            .iter()
            .filter(|p| p.required)
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
            "Read" => arg("file_path").and_then(|p| {
                let from = line_number(input, "offset")?.unwrap_or(1).max(1);
                let lines =
                    line_number(input, "limit")?.map_or(READ_LINES, |n| n.clamp(1, READ_LINES));
                Ok(self.read(p, from, lines))
            }),
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

    /// Up to `lines` lines of the file at `path` from line `from` (1-based)
    /// on, and at most [`READ_BYTES`] bytes of them, read as far as needed
    /// and no further, a line at most [`MAX_RESULT`] bytes at a time: a
    /// file of gigabytes (or a binary one without line ends) costs what is
    /// shown. What is not shown is said, with the `offset` to read on from.
    fn read(&self, path: &str, from: u64, lines: u64) -> ToolOutput {
        let real = match self.sandbox.readable(path) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        let cannot = |e: std::io::Error| ToolOutput::error(format!("cannot read '{path}': {e}"));
        // Opened without waiting for a writer (a FIFO would block the open
        // itself), then refused below unless it is a file.
        let opened = std::os::unix::fs::OpenOptionsExt::custom_flags(
            std::fs::OpenOptions::new().read(true),
            libc::O_NONBLOCK,
        )
        .open(&real);
        let file = match opened {
            Ok(f) => f,
            Err(e) => return cannot(e),
        };
        let size = match file.metadata() {
            Ok(m) if m.is_dir() => {
                return ToolOutput::error(format!(
                    "'{path}' is a directory (use Glob to list files)"
                ))
            }
            // A pipe or a device may never end: only files are read.
            Ok(m) if !m.is_file() => {
                return ToolOutput::error(format!("'{path}' is not a regular file"))
            }
            Ok(m) => m.len(),
            Err(e) => return cannot(e),
        };
        let mut lines_of = Lines::new(std::io::BufReader::new(file));
        match Part::take(&mut lines_of, from, lines) {
            Ok(part) => part.said(path, size, from),
            Err(Unread::Io(e)) => cannot(e),
            Err(Unread::NotText) => ToolOutput::error(format!(
                "'{path}' is not a text file ({size} bytes, not UTF-8)"
            )),
        }
    }

    fn write(&self, path: &str, content: &str) -> ToolOutput {
        let real = match self.sandbox.writable(path) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(e.to_string()),
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
            Err(e) => return ToolOutput::error(e.to_string()),
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
                Err(e) => return ToolOutput::error(e.to_string()),
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

/// The part of a file one `Read` shows.
struct Part {
    shown: String,
    /// Lines read (all of the file's when it was read to its end).
    read: u64,
    /// The last line shown (0: none).
    last: u64,
    /// Why the file is not shown to its end (`None`: it is).
    cut: Option<String>,
}

/// Why a [`Part`] could not be taken.
enum Unread {
    Io(std::io::Error),
    /// A line to show is not UTF-8.
    NotText,
}

impl Part {
    /// Up to `lines` lines from line `from` on, and at most [`READ_BYTES`]
    /// bytes of them (at least the start of one line).
    fn take<R: std::io::BufRead>(
        lines_of: &mut Lines<R>,
        from: u64,
        lines: u64,
    ) -> Result<Part, Unread> {
        let mut part = Part {
            shown: String::new(),
            read: 0,
            last: 0,
            cut: None,
        };
        while let Some(whole) = lines_of.next().map_err(Unread::Io)? {
            part.read += 1;
            let number = part.read;
            if number < from {
                continue;
            }
            if number - from == lines {
                part.cut = Some(format!("{lines} lines shown"));
                break;
            }
            let text = match std::str::from_utf8(&lines_of.line) {
                Ok(t) => t,
                // A line cut inside a character: up to that character.
                Err(e) if !whole && e.error_len().is_none() => {
                    std::str::from_utf8(&lines_of.line[..e.valid_up_to()]).unwrap_or_default()
                }
                Err(_) => return Err(Unread::NotText),
            };
            if whole && part.shown.len() + text.len() <= READ_BYTES {
                part.shown.push_str(text);
                part.last = number;
                continue;
            }
            if part.last > 0 {
                part.cut = Some("as much as one Read returns shown".to_string());
                break;
            }
            // One line longer than a whole result: its start.
            let mut end = text.len().min(READ_BYTES);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            part.shown.push_str(&text[..end]);
            part.last = number;
            part.cut = Some(format!(
                "line {number} is longer than one Read returns, its first {end} bytes shown"
            ));
            break;
        }
        Ok(part)
    }

    /// What the model reads of the part of the file at `path` (of `size`
    /// bytes) asked for from line `from` on: the text, and where the file
    /// goes on when it does.
    fn said(mut self, path: &str, size: u64, from: u64) -> ToolOutput {
        let (read, last) = (self.read, self.last);
        if read == 0 {
            return ToolOutput::ok("(the file is empty)");
        }
        if read < from {
            return ToolOutput::error(format!(
                "'{path}' has {read} lines: offset {from} is past its end"
            ));
        }
        match self.cut {
            None if from == 1 => ToolOutput::ok(self.shown),
            None => ToolOutput::ok(format!(
                "{}\n(lines {from}-{last} shown: the end of the file)",
                self.shown
            )),
            Some(why) => {
                if !self.shown.ends_with('\n') {
                    self.shown.push('\n');
                }
                ToolOutput::ok(format!(
                    "{}(lines {from}-{last} of a file of {size} bytes, {why}: it goes on; Read with offset {} for more)",
                    self.shown,
                    last + 1
                ))
            }
        }
    }
}

/// A file's lines one at a time, each read into `line` up to
/// [`MAX_RESULT`] + 1 bytes. The rest of a longer line is passed over
/// unkept, and only when the next line is asked for: a reader that stops
/// at a long line reads no further.
struct Lines<R> {
    reader: R,
    line: Vec<u8>,
    /// The last line given was not whole: its rest comes first.
    rest: bool,
}

impl<R: std::io::BufRead> Lines<R> {
    fn new(reader: R) -> Lines<R> {
        Lines {
            reader,
            line: Vec::new(),
            rest: false,
        }
    }

    /// The next line into `line`: `Some(true)` whole (its line end
    /// included, or the file's last), `Some(false)` longer than what was
    /// kept, `None` at the end of the file.
    fn next(&mut self) -> std::io::Result<Option<bool>> {
        use std::io::{BufRead, Read};
        if self.rest {
            self.pass_line()?;
            self.rest = false;
        }
        self.line.clear();
        let room = MAX_RESULT as u64 + 1;
        let n = (&mut self.reader)
            .take(room)
            .read_until(b'\n', &mut self.line)?;
        if n == 0 {
            return Ok(None);
        }
        let whole = self.line.ends_with(b"\n") || (n as u64) < room;
        self.rest = !whole;
        Ok(Some(whole))
    }

    /// Reads past the end of the line begun.
    fn pass_line(&mut self) -> std::io::Result<()> {
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.reader.consume(i + 1);
                    return Ok(());
                }
                None => {
                    let all = buf.len();
                    self.reader.consume(all);
                }
            }
        }
    }
}

/// The whole number in `input`'s field `field` (a JSON number, or a string
/// of digits as some models send), `None` when absent or null.
fn line_number(input: &Value, field: &str) -> Result<Option<u64>, ToolOutput> {
    let bad = || {
        ToolOutput::error(format!(
            "'{field}' must be a whole number of lines, not {}",
            input[field]
        ))
    };
    match input.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(bad),
        Some(Value::String(t)) => t.trim().parse().map(Some).map_err(|_| bad()),
        Some(_) => Err(bad()),
    }
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

    /// The note a cut `Read` ends with, and the offset it names.
    fn goes_on(r: &ToolOutput) -> (String, u64) {
        assert!(!r.is_error, "{r:?}");
        let at = r.content.rfind("(lines ").expect("a note");
        let offset = r.content[at..]
            .split("offset ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        (r.content[..at].to_string(), offset)
    }

    #[test]
    fn a_long_lines_rest_is_read_only_when_the_next_line_is_asked_for() {
        /// Counts the bytes read through it.
        struct Counted<'a>(&'a [u8], std::rc::Rc<std::cell::Cell<usize>>);
        impl std::io::Read for Counted<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.read(buf)?;
                self.1.set(self.1.get() + n);
                Ok(n)
            }
        }
        let mut text = b"head\n".to_vec();
        text.resize(8 << 20, b'x');
        text.extend_from_slice(b"\nnext\n");
        let read = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut lines = Lines::new(std::io::BufReader::new(Counted(&text, read.clone())));
        assert_eq!(lines.next().unwrap(), Some(true));
        assert_eq!(lines.line, b"head\n");
        assert_eq!(lines.next().unwrap(), Some(false));
        assert_eq!(lines.line.len(), MAX_RESULT + 1);
        // Kept, and a buffer beyond: not the 8 MB line.
        assert!(
            read.get() < MAX_RESULT + 64 * 1024,
            "{} bytes read",
            read.get()
        );
        assert_eq!(lines.next().unwrap(), Some(true));
        assert_eq!(lines.line, b"next\n");
        assert_eq!(lines.next().unwrap(), None);
    }

    #[tokio::test]
    async fn a_long_file_is_read_in_parts_and_no_further_than_shown() {
        let dir = tempfile::tempdir().unwrap();
        let t = tools(dir.path(), None);
        // 4,500 lines: two parts of 2,000 and the end, which together are
        // the file.
        let text: String = (1..=4500).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.path().join("long.txt"), &text).unwrap();
        let r = call(&t, "Read", json!({"file_path": "long.txt"})).await;
        let (first, next) = goes_on(&r);
        assert!(r.content.contains("(lines 1-2000 of a file of"), "{r:?}");
        assert_eq!(next, 2001);
        let r = call(&t, "Read", json!({"file_path": "long.txt", "offset": next})).await;
        let (second, next) = goes_on(&r);
        assert_eq!(next, 4001);
        let r = call(&t, "Read", json!({"file_path": "long.txt", "offset": next})).await;
        assert!(!r.is_error, "{r:?}");
        let third = r
            .content
            .strip_suffix("\n(lines 4001-4500 shown: the end of the file)")
            .expect("the end said");
        assert_eq!(format!("{first}{second}{third}"), text);
        // A limit, given as a string as some models do.
        let r = call(
            &t,
            "Read",
            json!({"file_path": "long.txt", "offset": "5", "limit": 3}),
        )
        .await;
        let (part, next) = goes_on(&r);
        assert_eq!((part.as_str(), next), ("line 5\nline 6\nline 7\n", 8));
        // A file read whole says nothing more (as before).
        std::fs::write(dir.path().join("short.txt"), "a\nb").unwrap();
        let r = call(&t, "Read", json!({"file_path": "short.txt", "limit": 2})).await;
        assert_eq!(r.content, "a\nb");
        // Bad numbers, an offset past the end, not a regular file.
        for (input, says) in [
            (
                json!({"file_path": "short.txt", "offset": -1}),
                "whole number",
            ),
            (
                json!({"file_path": "short.txt", "offset": "x"}),
                "whole number",
            ),
            (
                json!({"file_path": "short.txt", "limit": 1.5}),
                "whole number",
            ),
            (
                json!({"file_path": "short.txt", "offset": 3}),
                "has 2 lines",
            ),
            (json!({"file_path": "."}), "directory"),
        ] {
            let r = call(&t, "Read", input.clone()).await;
            assert!(r.is_error && r.content.contains(says), "{input}: {r:?}");
        }
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let r = call(&t, "Read", json!({"file_path": "fifo"})).await;
            assert!(
                r.is_error && r.content.contains("not a regular file"),
                "{r:?}"
            );
        }

        // Bytes: lines of 1,000 bytes stop before a result is full, and
        // the note still fits whole.
        let wide: String = (0..300).map(|i| format!("{i:0>999}\n")).collect();
        std::fs::write(dir.path().join("wide.txt"), &wide).unwrap();
        let r = call(&t, "Read", json!({"file_path": "wide.txt"})).await;
        let (part, next) = goes_on(&r);
        assert!(
            part.len() <= READ_BYTES && !r.content.contains("cut off"),
            "{r:?}"
        );
        assert_eq!(part.len(), 1000 * (next as usize - 1));
        assert!(wide.starts_with(&part));

        // One line longer than a result (cut inside a two-byte character),
        // then another: the first's start, then the next line from its
        // offset.
        let long_line = format!("{}\nnext\n", "é".repeat(MAX_RESULT));
        std::fs::write(dir.path().join("one.txt"), &long_line).unwrap();
        let r = call(&t, "Read", json!({"file_path": "one.txt"})).await;
        let (part, next) = goes_on(&r);
        assert!(
            r.content.contains("line 1 is longer than one Read returns"),
            "{r:?}"
        );
        assert!(part.len() >= READ_BYTES - 2 && part.trim_end().chars().all(|c| c == 'é'));
        assert_eq!(next, 2);
        let r = call(&t, "Read", json!({"file_path": "one.txt", "offset": 2})).await;
        assert_eq!(r.content, "next\n\n(lines 2-2 shown: the end of the file)");

        // A file of 4 GB (sparse: all but its first line zeros, one line
        // without an end): its first line and the start of the next, read
        // without reading the file whole.
        let huge = std::fs::File::create(dir.path().join("huge.bin")).unwrap();
        std::io::Write::write_all(&mut &huge, b"head\n").unwrap();
        huge.set_len(4 << 30).unwrap();
        let r = call(&t, "Read", json!({"file_path": "huge.bin", "limit": 1})).await;
        let (part, next) = goes_on(&r);
        assert_eq!((part.as_str(), next), ("head\n", 2));
        let r = call(&t, "Read", json!({"file_path": "huge.bin"})).await;
        let (part, next) = goes_on(&r);
        assert_eq!((part.as_str(), next), ("head\n", 2), "{r:?}");

        // Not text where it is shown: an error, as before; nothing: said.
        std::fs::write(dir.path().join("bin"), b"ok\n\xff\xfe\n").unwrap();
        let r = call(&t, "Read", json!({"file_path": "bin"})).await;
        assert!(
            r.is_error && r.content.contains("not a text file (6 bytes"),
            "{r:?}"
        );
        std::fs::write(dir.path().join("empty"), "").unwrap();
        let r = call(&t, "Read", json!({"file_path": "empty"})).await;
        assert_eq!(r.content, "(the file is empty)");
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
        let read = TOOLS
            .iter()
            .find(|t| t.name == "Read")
            .unwrap()
            .input_schema();
        assert_eq!(read["required"], json!(["file_path"]));
        assert_eq!(read["properties"]["offset"]["type"], "integer");
        assert_eq!(read["properties"]["limit"]["type"], "integer");
        assert_eq!(read["properties"]["file_path"]["type"], "string");
        assert!(cap("é".repeat(MAX_RESULT)).contains("cut off"));
    }
}
