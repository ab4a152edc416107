//! vitest's and jest's JSON report (vitest `--reporter=json
//! --outputFile.json=<path>`, jest `--json --outputFile=<path>`; vitest
//! writes jest's shape): `testResults[]`, one per test file with its
//! absolute `name`, each with `assertionResults[]` of `ancestorTitles`,
//! `title` and `status` (`passed`, `failed`, `skipped`, `pending`, `todo`,
//! `disabled`).
//!
//! A test's id is its file relative to where the gate ran, its describe
//! blocks and its title: `src/calc.test.js > total > sums` (the file's
//! absolute path differs between the base's copy and a worktree).

use std::path::Path;

use serde::Deserialize;

use super::{Census, CensusRunner, TestOutcome};

#[derive(Deserialize)]
struct Report {
    #[serde(rename = "testResults", default)]
    files: Vec<FileResult>,
}

#[derive(Deserialize)]
struct FileResult {
    #[serde(default)]
    name: String,
    #[serde(rename = "assertionResults", default)]
    tests: Vec<TestResult>,
}

#[derive(Deserialize)]
struct TestResult {
    #[serde(rename = "ancestorTitles", default)]
    ancestors: Vec<String>,
    #[serde(default)]
    title: String,
    #[serde(default)]
    status: String,
}

/// What separates a test id's parts.
pub const SEPARATOR: &str = " > ";

/// The census of a report written by a run in `root`; an unreadable report
/// is an empty census.
pub(super) fn parse(runner: CensusRunner, json: &str, root: &Path) -> Census {
    let mut census = Census::new(runner);
    let Ok(report) = serde_json::from_str::<Report>(json) else {
        return census;
    };
    let canonical = std::fs::canonicalize(root).ok();
    for file in report.files {
        let path = Path::new(&file.name);
        let rel = path
            .strip_prefix(root)
            .ok()
            .or_else(|| canonical.as_deref().and_then(|c| path.strip_prefix(c).ok()))
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned();
        for t in file.tests {
            let outcome = match t.status.as_str() {
                "passed" => TestOutcome::Passed,
                "failed" => TestOutcome::Failed,
                _ => TestOutcome::Skipped,
            };
            let mut id = rel.clone();
            for part in t.ancestors.iter().chain(std::iter::once(&t.title)) {
                id.push_str(SEPARATOR);
                id.push_str(part);
            }
            census.tests.insert(id, outcome);
        }
    }
    census
}
