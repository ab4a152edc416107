//! go build / vet (`./file.go:line:col: msg`), go test (`--- FAIL: TestX` with
//! the `file_test.go:line: msg` lines under it) and `gofmt -l`.

use super::location;
use crate::report::{GateError, Severity};

pub(super) fn go(stdout: &str, stderr: &str) -> Vec<GateError> {
    let mut out = Vec::new();
    let mut current_test: Option<usize> = None;
    for l in stdout.lines().chain(stderr.lines()) {
        let t = l.trim();
        if let Some(rest) = t.strip_prefix("--- FAIL: ") {
            let name = rest.split_whitespace().next().unwrap_or(rest).to_string();
            out.push(GateError {
                file: None,
                line: None,
                column: None,
                code: Some(name.clone()),
                message: format!("test {name} failed"),
                severity: Severity::Error,
            });
            current_test = Some(out.len() - 1);
            continue;
        }
        if t.starts_with("--- PASS") || t.starts_with("=== ") || t.starts_with("ok ") {
            current_test = None;
            continue;
        }
        let t = t.strip_prefix("vet: ").unwrap_or(t);
        let Some((file, line, column, msg)) = location(t) else {
            continue;
        };
        if !file.ends_with(".go") {
            continue;
        }
        let file = file.strip_prefix("./").unwrap_or(file).to_string();
        // A location right under `--- FAIL` belongs to that test.
        if let Some(i) = current_test {
            let e = &mut out[i];
            if e.file.is_none() {
                e.file = Some(file);
                e.line = Some(line);
                e.message = format!("{}: {msg}", e.message);
                continue;
            }
        }
        out.push(GateError {
            file: Some(file),
            line: Some(line),
            column,
            code: None,
            message: msg.to_string(),
            severity: Severity::Error,
        });
    }
    out
}

pub(super) fn gofmt(stdout: &str) -> Vec<GateError> {
    stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.ends_with(".go"))
        .map(|f| GateError {
            file: Some(f.strip_prefix("./").unwrap_or(f).to_string()),
            line: None,
            column: None,
            code: Some("gofmt".into()),
            message: "file is not gofmt-formatted (run `gofmt -w`)".into(),
            severity: Severity::Error,
        })
        .collect()
}
