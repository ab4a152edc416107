//! Error parsers: tool output into [`GateError`]s.
//!
//! Each parser reads the formats its tool really prints (JSON where the
//! default gates ask for it, the human text otherwise) and never fails: lines
//! it does not understand are skipped, and when nothing at all is recognised
//! in a failing gate's output the runner keeps the raw tail (see
//! [`fallback`]). Absolute paths under the gate's folder are made relative.

mod go;
mod node;
mod python;
mod rust;

use std::path::Path;

use crate::report::{GateError, Severity};

/// Which parser reads a gate's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parser {
    /// cargo/rustc/clippy JSON messages and text, `cargo test` failures, `cargo fmt --check`.
    Cargo,
    Pytest,
    Mypy,
    Ruff,
    Tsc,
    Eslint,
    /// go build / vet / test.
    Go,
    /// `gofmt -l`: every listed file is unformatted.
    Gofmt,
    /// `npm test` and friends: tsc/eslint-looking lines, else generic.
    Node,
    /// Generic `file:line:col: message` lines.
    Generic,
}

impl Parser {
    /// By name (`cargo`, `clippy`, `rustc`, `pytest`, `mypy`, `ruff`, `tsc`,
    /// `eslint`, `go`, `gofmt`, `node`, anything else: generic).
    pub fn by_name(name: &str) -> Parser {
        match name.to_ascii_lowercase().as_str() {
            "cargo" | "rust" | "rustc" | "clippy" => Parser::Cargo,
            "pytest" => Parser::Pytest,
            "mypy" => Parser::Mypy,
            "ruff" => Parser::Ruff,
            "tsc" | "typescript" => Parser::Tsc,
            "eslint" => Parser::Eslint,
            "go" => Parser::Go,
            "gofmt" => Parser::Gofmt,
            "node" | "npm" | "jest" | "vitest" => Parser::Node,
            _ => Parser::Generic,
        }
    }

    /// Chosen from the program and its arguments (`npx tsc`, `python -m pytest`).
    pub fn for_command(program: &str, args: &[String]) -> Parser {
        let base = |s: &str| {
            Path::new(s)
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or(s)
                .to_string()
        };
        let prog = base(program);
        let first_tool = args
            .iter()
            .find(|a| !a.starts_with('-') && a.as_str() != "run" && a.as_str() != "exec")
            .map(|s| base(s))
            .unwrap_or_default();
        match prog.as_str() {
            "npx" | "pnpm" | "yarn" | "bunx" | "uv" | "poetry" | "pipx" => {
                let p = Parser::by_name(&first_tool);
                if p == Parser::Generic && matches!(prog.as_str(), "pnpm" | "yarn") {
                    Parser::Node
                } else {
                    p
                }
            }
            "python" | "python3" => {
                if args.iter().any(|a| a == "pytest") {
                    Parser::Pytest
                } else if args.iter().any(|a| a == "mypy") {
                    Parser::Mypy
                } else if args.iter().any(|a| a == "ruff") {
                    Parser::Ruff
                } else {
                    Parser::Generic
                }
            }
            "cargo" | "rustc" | "cargo-clippy" => Parser::Cargo,
            "npm" | "node" | "bun" => Parser::Node,
            other => Parser::by_name(other),
        }
    }
}

/// Parses a gate's output. `base` is the folder it ran in (absolute paths
/// below it become relative).
pub fn parse(parser: Parser, stdout: &str, stderr: &str, base: Option<&Path>) -> Vec<GateError> {
    let mut errors = match parser {
        Parser::Cargo => rust::parse(stdout, stderr),
        Parser::Pytest => python::pytest(stdout, stderr),
        Parser::Mypy => python::mypy(stdout, stderr),
        Parser::Ruff => python::ruff(stdout, stderr),
        Parser::Tsc => node::tsc(stdout, stderr),
        Parser::Eslint => node::eslint(stdout, stderr),
        Parser::Go => go::go(stdout, stderr),
        Parser::Gofmt => go::gofmt(stdout),
        Parser::Node => {
            let mut v = node::tsc(stdout, stderr);
            v.extend(node::eslint_text(stdout));
            if v.is_empty() {
                v = generic(stdout, stderr);
            }
            v
        }
        Parser::Generic => generic(stdout, stderr),
    };
    if let Some(base) = base {
        for e in &mut errors {
            if let Some(f) = &e.file {
                if let Ok(rel) = Path::new(f).strip_prefix(base) {
                    e.file = Some(rel.to_string_lossy().into_owned());
                }
            }
        }
    }
    errors
}

/// The single error kept when nothing was recognised: the last lines of output.
pub fn fallback(stdout: &str, stderr: &str, max_bytes: usize) -> GateError {
    let mut text = String::new();
    text.push_str(stdout.trim_end());
    if !stderr.trim().is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(stderr.trim_end());
    }
    let start = text.len().saturating_sub(max_bytes);
    let start = (start..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    let tail = text[start..].trim_start().to_string();
    GateError::message(
        Severity::Error,
        if tail.is_empty() {
            "no output".to_string()
        } else {
            tail
        },
    )
}

/// Generic `file:line[:col]: [severity:] message` lines.
pub fn generic(stdout: &str, stderr: &str) -> Vec<GateError> {
    stdout
        .lines()
        .chain(stderr.lines())
        .filter_map(|l| {
            let (file, line, column, rest) = location(l.trim())?;
            let (severity, message) = split_severity(rest);
            Some(GateError {
                file: Some(file.to_string()),
                line: Some(line),
                column,
                code: None,
                message: message.to_string(),
                severity,
            })
        })
        .collect()
}

/// `path:line[:col]: rest`, requiring the path to look like a file.
pub(crate) fn location(s: &str) -> Option<(&str, u32, Option<u32>, &str)> {
    let mut parts = s.splitn(4, ':');
    let file = parts.next()?;
    if file.is_empty() || file.contains(' ') || !file.contains('.') {
        return None;
    }
    let line: u32 = parts.next()?.trim().parse().ok()?;
    let third = parts.next()?;
    match third.trim().parse::<u32>() {
        Ok(col) => Some((file, line, Some(col), parts.next().unwrap_or("").trim())),
        Err(_) => {
            // No column: `third` (and anything after) is the message.
            let rest_start = file.len() + 1 + s[file.len() + 1..].find(':')? + 1;
            Some((file, line, None, s[rest_start..].trim()))
        }
    }
}

/// `error: msg` / `warning: msg` / `note: msg` -> (severity, msg).
pub(crate) fn split_severity(s: &str) -> (Severity, &str) {
    for (prefix, sev) in [
        ("error:", Severity::Error),
        ("warning:", Severity::Warning),
        ("note:", Severity::Note),
        ("info:", Severity::Note),
    ] {
        if let Some(rest) = s.strip_prefix(prefix) {
            return (sev, rest.trim());
        }
    }
    (Severity::Error, s)
}

#[cfg(test)]
mod tests;
