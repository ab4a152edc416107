//! pytest, mypy (text and `-O json`) and ruff (JSON and concise text).

use serde_json::Value;

use super::{location, split_severity};
use crate::report::{GateError, Severity};

/// pytest: the short summary (`FAILED path::test - msg`, `ERROR path - msg`)
/// with the line taken from the traceback's `path:line: ExcType` lines.
pub(super) fn pytest(stdout: &str, stderr: &str) -> Vec<GateError> {
    let text = format!("{stdout}\n{stderr}");
    let mut locations: Vec<(String, u32, String)> = Vec::new();
    for l in text.lines() {
        if let Some((file, line, None, rest)) = location(l.trim()) {
            if file.ends_with(".py") && !rest.is_empty() && !rest.contains(' ') {
                locations.push((file.to_string(), line, rest.to_string()));
            }
        }
    }
    let mut out = Vec::new();
    for l in text.lines() {
        let (rest, what) = if let Some(r) = l.strip_prefix("FAILED ") {
            (r, "failed")
        } else if let Some(r) = l.strip_prefix("ERROR ") {
            (r, "error")
        } else {
            continue;
        };
        let (id, msg) = match rest.split_once(" - ") {
            Some((id, msg)) => (id.trim(), msg.trim()),
            None => (rest.trim(), ""),
        };
        let file = id.split("::").next().unwrap_or(id).to_string();
        let line = locations
            .iter()
            .find(|(f, _, _)| *f == file)
            .map(|(_, l, _)| *l);
        out.push(GateError {
            file: Some(file),
            line,
            column: None,
            code: Some(id.to_string()),
            message: if msg.is_empty() {
                format!("{id} {what}")
            } else {
                format!("{id} {what}: {msg}")
            },
            severity: Severity::Error,
        });
    }
    out
}

/// mypy: JSON lines (`-O json`) or `file:line[:col]: error: msg  [code]`.
pub(super) fn mypy(stdout: &str, stderr: &str) -> Vec<GateError> {
    let mut out = Vec::new();
    for l in stdout.lines().chain(stderr.lines()) {
        let t = l.trim();
        if t.starts_with('{') {
            let Ok(v) = serde_json::from_str::<Value>(t) else {
                continue;
            };
            let Some(message) = v.get("message").and_then(Value::as_str) else {
                continue;
            };
            out.push(GateError {
                file: v.get("file").and_then(Value::as_str).map(str::to_string),
                line: v.get("line").and_then(Value::as_u64).map(|n| n as u32),
                column: v
                    .get("column")
                    .and_then(Value::as_i64)
                    .filter(|c| *c >= 0)
                    .map(|n| n as u32 + 1),
                code: v.get("code").and_then(Value::as_str).map(str::to_string),
                message: message.to_string(),
                severity: severity_word(
                    v.get("severity").and_then(Value::as_str).unwrap_or("error"),
                ),
            });
            continue;
        }
        let Some((file, line, column, rest)) = location(t) else {
            continue;
        };
        let (severity, msg) = split_severity(rest);
        let (msg, code) = match msg.rsplit_once("  [") {
            Some((m, c)) if c.ends_with(']') => {
                (m.trim(), Some(c.trim_end_matches(']').to_string()))
            }
            _ => (msg, None),
        };
        out.push(GateError {
            file: Some(file.to_string()),
            line: Some(line),
            column,
            code,
            message: msg.to_string(),
            severity,
        });
    }
    out
}

fn severity_word(s: &str) -> Severity {
    match s {
        "warning" => Severity::Warning,
        "note" | "info" => Severity::Note,
        _ => Severity::Error,
    }
}

/// ruff: `--output-format=json` (an array) or concise text
/// `path:row:col: CODE [*] message`.
pub(super) fn ruff(stdout: &str, stderr: &str) -> Vec<GateError> {
    let trimmed = stdout.trim_start();
    if trimmed.starts_with('[') {
        if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(trimmed) {
            return items
                .iter()
                .filter_map(|i| {
                    let loc = i.get("location");
                    Some(GateError {
                        file: i
                            .get("filename")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                        line: loc
                            .and_then(|l| l.get("row"))
                            .and_then(Value::as_u64)
                            .map(|n| n as u32),
                        column: loc
                            .and_then(|l| l.get("column"))
                            .and_then(Value::as_u64)
                            .map(|n| n as u32),
                        code: i.get("code").and_then(Value::as_str).map(str::to_string),
                        message: i.get("message")?.as_str()?.to_string(),
                        severity: Severity::Error,
                    })
                })
                .collect();
        }
    }
    let mut out = Vec::new();
    for l in stdout.lines().chain(stderr.lines()) {
        let Some((file, line, column, rest)) = location(l.trim()) else {
            continue;
        };
        let (code, msg) = match rest.split_once(' ') {
            Some((c, m))
                if c.len() >= 2
                    && c.chars().next().is_some_and(|ch| ch.is_ascii_uppercase())
                    && c.chars().any(|ch| ch.is_ascii_digit()) =>
            {
                (Some(c.to_string()), m.trim_start_matches("[*]").trim())
            }
            _ => (None, rest),
        };
        out.push(GateError {
            file: Some(file.to_string()),
            line: Some(line),
            column,
            code,
            message: msg.to_string(),
            severity: Severity::Error,
        });
    }
    out
}
