//! `go test -json`'s events: one JSON object a line with `Action`
//! (`run`, `pass`, `fail`, `skip`, `output`...), `Package`, `Test` and
//! `Output`. Lines that are not events (a build failure's text) are kept
//! as text.

use std::collections::HashSet;

use serde::Deserialize;

use super::{Census, CensusRunner, TestOutcome};

#[derive(Deserialize)]
struct GoEvent {
    #[serde(rename = "Action")]
    action: String,
    #[serde(rename = "Package", default)]
    package: String,
    #[serde(rename = "Test", default)]
    test: Option<String>,
    #[serde(rename = "Output", default)]
    output: Option<String>,
}

/// The census of `go test -json`'s events. test2json makes them from the
/// test binary's text, which a test can print to as well (`--- PASS:
/// TestGone` in a test's output is a `pass` of `TestGone` for go 1.19's
/// test2json), so a test that ends without having been started (`run`)
/// or ends twice is a doubt ([`Census::doubts`]).
pub(super) fn parse(stdout: &str) -> Census {
    let mut census = Census::new(CensusRunner::Go);
    let mut started = HashSet::new();
    for line in stdout.lines() {
        let Ok(e) = serde_json::from_str::<GoEvent>(line) else {
            continue;
        };
        let Some(test) = e.test else { continue };
        let id = format!("{}.{test}", e.package);
        let outcome = match e.action.as_str() {
            "run" => {
                started.insert(id);
                continue;
            }
            "pass" => TestOutcome::Passed,
            "fail" => TestOutcome::Failed,
            "skip" => TestOutcome::Skipped,
            _ => continue,
        };
        if !started.contains(&id) {
            census
                .doubts
                .push(format!("test '{id}' ended without having started"));
        }
        census.record(id, outcome);
    }
    census
}

/// The text `go test` would have printed without `-json`.
pub(super) fn plain_text(stdout: &str) -> String {
    let mut out = String::with_capacity(stdout.len() / 3);
    for line in stdout.lines() {
        match serde_json::from_str::<GoEvent>(line) {
            Ok(e) => out.push_str(e.output.as_deref().unwrap_or("")),
            Err(_) => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}
