//! The test census: which tests a test gate ran and how each ended
//! (passed, failed, skipped), read from reports cascade asks the runner for,
//! never from what the change looks like.
//!
//! A gate is census-aware when its command is a runner cascade knows:
//! pytest (`pytest`, `python -m pytest`: a JUnit XML report with
//! `--junitxml=<path>` in a fresh private directory of cascade's for each
//! run, outside the worktree: [`crate::runner::private_report_dir`]),
//! `cargo test` (libtest's `test NAME ... ok|ignored|FAILED` lines, with
//! `--format=pretty` added when the gate is quiet; the `Running ...` lines
//! on stderr say which test binary each block came from), `go test`
//! (`-json` added; the events are turned back into go's text for the error
//! parser), and vitest and jest (`vitest`, `jest`, `npx vitest|jest`: their
//! JSON report in a private directory as pytest's). [`instrument`] adds
//! cascade's arguments, [`read`] reads the outcome, [`compare`] tells what
//! a change lost against its base.
//!
//! The census of a gate travels in its [`crate::GateResult`] (and so in the
//! gate cache): a cached result answers the census too.

mod gotest;
mod jsreport;
mod libtest;
mod pytest;

pub use jsreport::SEPARATOR as JS_SEPARATOR;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The runners the census reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CensusRunner {
    Pytest,
    Cargo,
    Go,
    Vitest,
    Jest,
}

impl CensusRunner {
    pub fn name(self) -> &'static str {
        match self {
            CensusRunner::Pytest => "pytest",
            CensusRunner::Cargo => "cargo test",
            CensusRunner::Go => "go test",
            CensusRunner::Vitest => "vitest",
            CensusRunner::Jest => "jest",
        }
    }
}

/// How one test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestOutcome {
    Passed,
    Failed,
    /// Skipped, ignored, xfailed: collected but not run to a verdict.
    Skipped,
}

impl TestOutcome {
    /// Of two reports of one test, the one that stands: a failure over a
    /// skip over a pass.
    fn worse(self, other: TestOutcome) -> TestOutcome {
        use TestOutcome::*;
        match (self, other) {
            (Failed, _) | (_, Failed) => Failed,
            (Skipped, _) | (_, Skipped) => Skipped,
            _ => Passed,
        }
    }
}

/// The tests one gate run reported, by id (pytest `tests.test_a.TestK.test_p[1]`,
/// cargo `src/lib.rs[calc]::tests::adds`, go `example.com/calc.TestAdd`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Census {
    pub runner: CensusRunner,
    pub tests: BTreeMap<String, TestOutcome>,
    /// What in the runner's report does not add up (a test reported
    /// twice, lines the runner's own counts disagree with): read from
    /// output the tests can write to as well, the census may have been
    /// forged. Only for what is read from output (cargo test, go test).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub doubts: Vec<String>,
}

impl Census {
    pub fn new(runner: CensusRunner) -> Census {
        Census {
            runner,
            tests: BTreeMap::new(),
            doubts: Vec::new(),
        }
    }

    /// Records test `id` as ended with `outcome`. A test reported before
    /// is a doubt (read from output a test can write to, one report may be
    /// forged), and the worse of its two outcomes stands.
    fn record(&mut self, id: String, outcome: TestOutcome) {
        if let Some(was) = self.tests.insert(id.clone(), outcome) {
            self.doubts.push(format!("test '{id}' is reported twice"));
            self.tests.insert(id, was.worse(outcome));
        }
    }

    /// Tests that ran to a verdict (passed or failed).
    pub fn ran(&self) -> usize {
        self.tests
            .values()
            .filter(|o| **o != TestOutcome::Skipped)
            .count()
    }

    /// Ids of the tests with outcome `o`.
    pub fn with(&self, o: TestOutcome) -> impl Iterator<Item = &str> {
        self.tests
            .iter()
            .filter(move |(_, v)| **v == o)
            .map(|(k, _)| k.as_str())
    }
}

/// A gate's command with cascade's census arguments added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instrumented {
    pub runner: CensusRunner,
    pub args: Vec<String>,
    /// The report file the runner writes (pytest), to be read after it.
    pub report: Option<PathBuf>,
}

/// The runner `program args` is, when the census knows it.
pub fn runner_of(program: &str, args: &[String]) -> Option<CensusRunner> {
    let base = Path::new(program).file_name()?.to_str()?;
    let first = args
        .iter()
        .find(|a| !a.starts_with('-'))
        .map(String::as_str);
    match base {
        "pytest" | "py.test" => Some(CensusRunner::Pytest),
        b if b.starts_with("python") => args
            .windows(2)
            .any(|w| w[0] == "-m" && w[1] == "pytest")
            .then_some(CensusRunner::Pytest),
        "cargo" if first == Some("test") => Some(CensusRunner::Cargo),
        "go" if first == Some("test") => Some(CensusRunner::Go),
        "vitest" => Some(CensusRunner::Vitest),
        "jest" => Some(CensusRunner::Jest),
        "npx" => match first {
            Some("vitest") => Some(CensusRunner::Vitest),
            Some("jest") => Some(CensusRunner::Jest),
            _ => None,
        },
        _ => None,
    }
}

/// `args` with what the census needs from the runner; `report` is where a
/// report file goes (a path in cascade's private directory, outside the
/// worktree). `None` when the runner is not one the census reads.
pub fn instrument(program: &str, args: &[String], report: &Path) -> Option<Instrumented> {
    let runner = runner_of(program, args)?;
    let mut out = args.to_vec();
    let mut report_file = None;
    match runner {
        CensusRunner::Pytest => {
            // After the gate's own arguments: the last `--junitxml` wins.
            out.push(format!("--junitxml={}", report.display()));
            report_file = Some(report.to_path_buf());
        }
        CensusRunner::Cargo => {
            let quiet = args.iter().any(|a| a == "-q" || a == "--quiet");
            if quiet {
                if !out.iter().any(|a| a == "--") {
                    out.push("--".into());
                }
                out.push("--format=pretty".into());
            }
        }
        CensusRunner::Go => {
            if !out.iter().any(|a| a == "-json") {
                let at = out.iter().position(|a| a == "test").map_or(0, |i| i + 1);
                out.insert(at, "-json".into());
            }
        }
        // The person's reporter stays on the terminal; the JSON one goes
        // to cascade's file (the last `--outputFile` wins).
        CensusRunner::Vitest => {
            if !args.iter().any(|a| a.starts_with("--reporter")) {
                out.push("--reporter=default".into());
            }
            out.push("--reporter=json".into());
            out.push(format!("--outputFile.json={}", report.display()));
            report_file = Some(report.to_path_buf());
        }
        CensusRunner::Jest => {
            out.push("--json".into());
            out.push(format!("--outputFile={}", report.display()));
            report_file = Some(report.to_path_buf());
        }
    }
    Some(Instrumented {
        runner,
        args: out,
        report: report_file,
    })
}

/// The census of a run of an instrumented gate in `root` (where it ran). A
/// report that should be there and is not (or cannot be read) is an empty
/// census: nothing is known to have run.
pub fn read(plan: &Instrumented, stdout: &str, stderr: &str, root: &Path) -> Census {
    let report = || {
        plan.report
            .as_deref()
            .and_then(read_report)
            .unwrap_or_default()
    };
    match plan.runner {
        CensusRunner::Pytest => pytest::parse_junit(&report()),
        CensusRunner::Cargo => libtest::parse(stdout, stderr),
        CensusRunner::Go => gotest::parse(stdout),
        CensusRunner::Vitest | CensusRunner::Jest => jsreport::parse(plan.runner, &report(), root),
    }
}

/// The census of a vitest or jest JSON report `json` of a run in `root`
/// (what test proving reads too).
pub fn read_js_report(runner: CensusRunner, json: &str, root: &Path) -> Census {
    jsreport::parse(runner, json, root)
}

/// The text of a report file the runner wrote: a regular file (a link put
/// in its place by the run is not followed).
fn read_report(path: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// The output as the gate's error parser expects it (go's `-json` events
/// back into go's text); unchanged for other runners.
pub fn plain_output<'a>(plan: &Instrumented, stdout: &'a str) -> std::borrow::Cow<'a, str> {
    match plan.runner {
        CensusRunner::Go => std::borrow::Cow::Owned(gotest::plain_text(stdout)),
        _ => std::borrow::Cow::Borrowed(stdout),
    }
}

/// What a change's census shows against its base's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Passed on the base, and now missing (`None`) or not passing.
    pub lost: Vec<(String, Option<TestOutcome>)>,
    /// Fail now and did not fail on the base (new tests included).
    pub new_failures: Vec<String>,
    /// Failed on the base and still fail.
    pub known_failures: Vec<String>,
    pub ran_before: usize,
    pub ran_now: usize,
}

/// Compares the census of a change with its base's.
pub fn compare(base: &Census, now: &Census) -> Comparison {
    let mut c = Comparison {
        ran_before: base.ran(),
        ran_now: now.ran(),
        ..Default::default()
    };
    for id in base.with(TestOutcome::Passed) {
        match now.tests.get(id) {
            Some(TestOutcome::Passed) => {}
            other => c.lost.push((id.to_string(), other.copied())),
        }
    }
    for id in now.with(TestOutcome::Failed) {
        if base.tests.get(id) == Some(&TestOutcome::Failed) {
            c.known_failures.push(id.to_string());
        } else {
            c.new_failures.push(id.to_string());
        }
    }
    c
}

#[cfg(test)]
mod tests;
