//! `go test -json`'s events: one JSON object a line with `Action`
//! (`run`, `pass`, `fail`, `skip`, `output`...), `Package`, `Test` and
//! `Output`. Lines that are not events (a build failure's text) are kept
//! as text.

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

pub(super) fn parse(stdout: &str) -> Census {
    let mut census = Census::new(CensusRunner::Go);
    for line in stdout.lines() {
        let Ok(e) = serde_json::from_str::<GoEvent>(line) else {
            continue;
        };
        let Some(test) = e.test else { continue };
        let outcome = match e.action.as_str() {
            "pass" => TestOutcome::Passed,
            "fail" => TestOutcome::Failed,
            "skip" => TestOutcome::Skipped,
            _ => continue,
        };
        census
            .tests
            .insert(format!("{}.{test}", e.package), outcome);
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
