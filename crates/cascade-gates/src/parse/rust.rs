//! cargo/rustc/clippy (`--message-format=json` lines and the human text),
//! `cargo test` failures and `cargo fmt --check` diffs.

use serde_json::Value;

use crate::report::{GateError, Severity};

pub(super) fn parse(stdout: &str, stderr: &str) -> Vec<GateError> {
    let mut out = Vec::new();
    let mut saw_json = false;
    for line in stdout.lines() {
        let t = line.trim_start();
        if !t.starts_with('{') {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(t) else {
            continue;
        };
        if v.get("reason").and_then(Value::as_str) == Some("compiler-message") {
            saw_json = true;
            if let Some(e) = v.get("message").and_then(json_message) {
                out.push(e);
            }
        } else if v.get("$message_type").and_then(Value::as_str) == Some("diagnostic") {
            // rustc --error-format=json prints the message object itself.
            saw_json = true;
            if let Some(e) = json_message(&v) {
                out.push(e);
            }
        }
    }
    if !saw_json {
        out.extend(text_diagnostics(stderr));
        out.extend(text_diagnostics(stdout));
    }
    out.extend(test_failures(stdout));
    out.extend(fmt_diffs(stdout));
    dedup(out)
}

fn dedup(v: Vec<GateError>) -> Vec<GateError> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter()
        .filter(|e| seen.insert((e.file.clone(), e.line, e.column, e.message.clone())))
        .collect()
}

/// Rustc's `aborting due to ...` / `could not compile` lines are not errors of their own.
fn is_noise(msg: &str) -> bool {
    msg.starts_with("aborting due to")
        || msg.starts_with("could not compile")
        || msg.contains("warning emitted")
        || msg.contains("warnings emitted")
        || msg.starts_with("build failed")
}

fn json_message(m: &Value) -> Option<GateError> {
    let message = m.get("message")?.as_str()?.to_string();
    let severity = match m.get("level")?.as_str()? {
        "error" | "error: internal compiler error" => Severity::Error,
        "warning" => Severity::Warning,
        "note" | "help" => Severity::Note,
        _ => return None,
    };
    if is_noise(&message) {
        return None;
    }
    let code = m
        .get("code")
        .and_then(|c| c.get("code"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let spans = m.get("spans").and_then(Value::as_array);
    let span = spans.and_then(|s| {
        s.iter()
            .find(|sp| sp.get("is_primary").and_then(Value::as_bool) == Some(true))
            .or_else(|| s.first())
    });
    Some(GateError {
        file: span
            .and_then(|s| s.get("file_name"))
            .and_then(Value::as_str)
            .map(str::to_string),
        line: span
            .and_then(|s| s.get("line_start"))
            .and_then(Value::as_u64)
            .map(|n| n as u32),
        column: span
            .and_then(|s| s.get("column_start"))
            .and_then(Value::as_u64)
            .map(|n| n as u32),
        code,
        message,
        severity,
    })
}

/// `error[E0308]: mismatched types` followed by ` --> src/main.rs:2:5`.
fn text_diagnostics(text: &str) -> Vec<GateError> {
    let mut out: Vec<GateError> = Vec::new();
    let mut pending: Option<GateError> = None;
    for line in text.lines() {
        let (sev, rest) = if let Some(r) = line.strip_prefix("error") {
            (Severity::Error, r)
        } else if let Some(r) = line.strip_prefix("warning") {
            (Severity::Warning, r)
        } else {
            if let Some(loc) = line.trim_start().strip_prefix("--> ") {
                if let Some(p) = pending.as_mut() {
                    if p.file.is_none() {
                        let mut it = loc.trim().rsplitn(3, ':');
                        let col = it.next().and_then(|c| c.parse().ok());
                        let ln = it.next().and_then(|c| c.parse().ok());
                        if let (Some(file), Some(ln)) = (it.next(), ln) {
                            p.file = Some(file.to_string());
                            p.line = Some(ln);
                            p.column = col;
                        }
                    }
                }
            }
            continue;
        };
        let (code, msg) = if let Some(r) = rest.strip_prefix('[') {
            match r.split_once("]: ") {
                Some((c, m)) => (Some(c.to_string()), m),
                None => continue,
            }
        } else if let Some(m) = rest.strip_prefix(": ") {
            (None, m)
        } else {
            continue;
        };
        if is_noise(msg) {
            continue;
        }
        if let Some(p) = pending.take() {
            out.push(p);
        }
        pending = Some(GateError {
            file: None,
            line: None,
            column: None,
            code,
            message: msg.trim().to_string(),
            severity: sev,
        });
    }
    out.extend(pending);
    out
}

/// At most this many lines of a panic message are kept per failing test.
const MAX_PANIC_LINES: usize = 20;

/// libtest failures: `---- name stdout ----` sections with the panic location.
fn test_failures(stdout: &str) -> Vec<GateError> {
    let mut out = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    let flush = |cur: Option<(String, Vec<String>)>, out: &mut Vec<GateError>| {
        let Some((name, lines)) = cur else { return };
        let mut e = GateError {
            file: None,
            line: None,
            column: None,
            code: Some(name.clone()),
            message: format!("test {name} failed"),
            severity: Severity::Error,
        };
        let mut msg_lines = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            // Rust 1.90+ puts the thread id between the name and `panicked`:
            // `thread 'tests::x' (24109) panicked at src/lib.rs:10:9:`.
            if let Some(rest) = l
                .strip_prefix("thread '")
                .and_then(|r| r.split_once(" panicked at "))
            {
                let at = rest.1;
                // New style: `panicked at src/lib.rs:10:9:` then the message lines.
                // Old style: `panicked at 'msg', src/lib.rs:10:9`.
                let loc = if let Some(stripped) = at.strip_suffix(':') {
                    // The message ends at the hint, or at the backtrace when the
                    // user runs with RUST_BACKTRACE set; a huge assertion diff is
                    // cut so the retry prompt stays readable.
                    msg_lines.extend(
                        lines[i + 1..]
                            .iter()
                            .take_while(|l| {
                                !l.starts_with("note:") && !l.starts_with("stack backtrace:")
                            })
                            .take(MAX_PANIC_LINES)
                            .cloned(),
                    );
                    stripped.to_string()
                } else if let Some((m, loc)) = at.rsplit_once(", ") {
                    msg_lines.push(m.trim_matches('\'').to_string());
                    loc.to_string()
                } else {
                    at.to_string()
                };
                let mut it = loc.rsplitn(3, ':');
                let col = it.next().and_then(|c| c.parse().ok());
                let ln = it.next().and_then(|c| c.parse().ok());
                if let (Some(f), Some(ln)) = (it.next(), ln) {
                    e.file = Some(f.to_string());
                    e.line = Some(ln);
                    e.column = col;
                }
                break;
            }
        }
        let msg = msg_lines.join("\n").trim().to_string();
        if !msg.is_empty() {
            e.message = format!("test {name} failed: {msg}");
        }
        out.push(e);
    };
    for line in stdout.lines() {
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|r| r.strip_suffix(" stdout ----"))
        {
            flush(current.take(), &mut out);
            current = Some((name.to_string(), Vec::new()));
        } else if line == "failures:" || line.starts_with("test result:") {
            flush(current.take(), &mut out);
        } else if let Some((_, lines)) = current.as_mut() {
            lines.push(line.to_string());
        }
    }
    flush(current, &mut out);
    out
}

/// `cargo fmt --check`: `Diff in /abs/src/main.rs at line 1:` (or `:1:` in
/// newer rustfmt).
fn fmt_diffs(stdout: &str) -> Vec<GateError> {
    let mut out: Vec<GateError> = Vec::new();
    for l in stdout.lines() {
        let Some(rest) = l.strip_prefix("Diff in ") else {
            continue;
        };
        let (file, line) = if let Some((f, ln)) = rest.split_once(" at line ") {
            (f.to_string(), ln.trim_end_matches(':').parse().ok())
        } else {
            let r = rest.trim_end_matches(':');
            match r.rsplit_once(':') {
                Some((f, ln)) => (f.to_string(), ln.parse().ok()),
                None => (r.to_string(), None),
            }
        };
        if out.iter().any(|e| e.file.as_deref() == Some(file.as_str())) {
            continue;
        }
        out.push(GateError {
            file: Some(file),
            line,
            column: None,
            code: Some("rustfmt".into()),
            message: "file is not formatted (run `cargo fmt`)".into(),
            severity: Severity::Error,
        });
    }
    out
}
