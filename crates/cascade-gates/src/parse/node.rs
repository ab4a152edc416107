//! tsc (`file(line,col): error TSxxxx: msg` and the pretty `file:line:col - error`)
//! and eslint (`--format json` and the default "stylish" text).

use serde_json::Value;

use crate::report::{GateError, Severity};

pub(super) fn tsc(stdout: &str, stderr: &str) -> Vec<GateError> {
    let mut out = Vec::new();
    for l in stdout.lines().chain(stderr.lines()) {
        let t = l.trim();
        // Plain: `src/a.ts(3,7): error TS2322: msg`.
        if let Some((file, rest)) = t.split_once('(') {
            if let Some((pos, rest)) = rest.split_once("): ") {
                if let Some((line, col)) = pos.split_once(',') {
                    if let (Ok(line), Ok(col)) = (line.parse::<u32>(), col.parse::<u32>()) {
                        if let Some(e) = ts_message(file, line, col, rest) {
                            out.push(e);
                            continue;
                        }
                    }
                }
            }
        }
        // Pretty: `src/a.ts:3:7 - error TS2322: msg`.
        if let Some((loc, rest)) = t.split_once(" - ") {
            let mut it = loc.rsplitn(3, ':');
            let col = it.next().and_then(|c| c.parse::<u32>().ok());
            let line = it.next().and_then(|c| c.parse::<u32>().ok());
            if let (Some(col), Some(line), Some(file)) = (col, line, it.next()) {
                if let Some(e) = ts_message(file, line, col, rest) {
                    out.push(e);
                }
            }
        }
    }
    out
}

fn ts_message(file: &str, line: u32, col: u32, rest: &str) -> Option<GateError> {
    let (severity, rest) = if let Some(r) = rest.strip_prefix("error ") {
        (Severity::Error, r)
    } else if let Some(r) = rest.strip_prefix("warning ") {
        (Severity::Warning, r)
    } else {
        return None;
    };
    let (code, msg) = rest.split_once(": ")?;
    if !code.starts_with("TS") {
        return None;
    }
    Some(GateError {
        file: Some(file.to_string()),
        line: Some(line),
        column: Some(col),
        code: Some(code.to_string()),
        message: msg.trim().to_string(),
        severity,
    })
}

pub(super) fn eslint(stdout: &str, _stderr: &str) -> Vec<GateError> {
    let trimmed = stdout.trim_start();
    if trimmed.starts_with('[') {
        if let Ok(Value::Array(files)) = serde_json::from_str::<Value>(trimmed) {
            let mut out = Vec::new();
            for f in &files {
                let path = f
                    .get("filePath")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                for m in f
                    .get("messages")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let Some(message) = m.get("message").and_then(Value::as_str) else {
                        continue;
                    };
                    out.push(GateError {
                        file: path.clone(),
                        line: m.get("line").and_then(Value::as_u64).map(|n| n as u32),
                        column: m.get("column").and_then(Value::as_u64).map(|n| n as u32),
                        code: m.get("ruleId").and_then(Value::as_str).map(str::to_string),
                        message: message.to_string(),
                        severity: if m.get("severity").and_then(Value::as_u64) == Some(1) {
                            Severity::Warning
                        } else {
                            Severity::Error
                        },
                    });
                }
            }
            return out;
        }
    }
    eslint_text(stdout)
}

/// Stylish: a file path line, then `  line:col  error|warning  message  rule`.
pub(super) fn eslint_text(stdout: &str) -> Vec<GateError> {
    let mut out = Vec::new();
    let mut file: Option<String> = None;
    for l in stdout.lines() {
        if l.is_empty() {
            continue;
        }
        if !l.starts_with(' ') {
            let t = l.trim();
            file = (t.contains('/') || t.contains('.')).then(|| t.to_string());
            continue;
        }
        let Some(f) = &file else { continue };
        let t = l.trim();
        let Some((pos, rest)) = t.split_once(char::is_whitespace) else {
            continue;
        };
        let Some((line, col)) = pos.split_once(':') else {
            continue;
        };
        let (Ok(line), Ok(col)) = (line.parse::<u32>(), col.parse::<u32>()) else {
            continue;
        };
        let rest = rest.trim_start();
        let (severity, rest) = if let Some(r) = rest.strip_prefix("error") {
            (Severity::Error, r)
        } else if let Some(r) = rest.strip_prefix("warning") {
            (Severity::Warning, r)
        } else {
            continue;
        };
        let rest = rest.trim();
        // The rule id is the last column, separated by two or more spaces.
        let (msg, rule) = match rest.rsplit_once("  ") {
            Some((m, r)) if !r.trim().contains(' ') => (m.trim(), Some(r.trim().to_string())),
            _ => (rest, None),
        };
        out.push(GateError {
            file: Some(f.clone()),
            line: Some(line),
            column: Some(col),
            code: rule,
            message: msg.to_string(),
            severity,
        });
    }
    out
}
