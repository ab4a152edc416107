//! `go test -json`'s events: one JSON object a line with `Action`
//! (`run`, `pass`, `fail`, `skip`, `output`...), `Package`, `Test` and
//! `Output`. Lines that are not events (a build failure's text) are kept
//! as text.

use std::collections::{HashMap, HashSet};

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
/// test binary's text, which a test can print to as well (`=== RUN
/// TestGone` and `--- PASS: TestGone` in a test's output are a run and a
/// pass of `TestGone` for go 1.19's test2json), so what real output never
/// holds is a doubt ([`Census::doubts`]): a test that ends without having
/// been started, or twice, and what [`Order`] finds out of order.
pub(super) fn parse(stdout: &str) -> Census {
    let mut census = Census::new(CensusRunner::Go);
    let mut started = HashSet::new();
    let mut order: HashMap<String, Order> = HashMap::new();
    for line in stdout.lines() {
        let Ok(e) = serde_json::from_str::<GoEvent>(line) else {
            continue;
        };
        let Some(test) = e.test else { continue };
        let id = format!("{}.{test}", e.package);
        if !test.contains('/') {
            let package = order.entry(e.package.clone()).or_default();
            if let Some(doubt) = package.take(&e.action, &test) {
                census.doubts.push(format!("test '{id}' {doubt}"));
            }
        }
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

/// The order go's testing package runs a package's top-level tests in:
/// one at a time (each to its end, or to its pause when it calls
/// `t.Parallel`), then the paused ones go on (`cont`) side by side, and
/// with `-count` the same again. So no top-level test starts while
/// another runs, and none ends while it is paused or while another runs
/// one at a time: such events come from a test's own output. Subtests
/// (`TestA/sub`) run inside their parent, in any order, and are not
/// judged here.
#[derive(Default)]
struct Order {
    /// The top-level test running one at a time, if any.
    running: Option<String>,
    /// Top-level tests paused and not gone on yet.
    paused: HashSet<String>,
    /// Paused tests that went on and have not ended.
    going: HashSet<String>,
}

impl Order {
    /// Takes in event `action` of top-level test `test`; what is out of
    /// order about it, if anything.
    fn take(&mut self, action: &str, test: &str) -> Option<String> {
        let printed_in = |other: &str| format!("while '{other}' ran: that test printed it");
        match action {
            "run" => {
                let other = (self.running.iter().chain(&self.going)).find(|o| *o != test);
                if let Some(other) = other {
                    return Some(format!("started {}", printed_in(other)));
                }
                self.running = Some(test.to_string());
            }
            "pause" => {
                if self.running.as_deref() == Some(test) {
                    self.running = None;
                }
                self.paused.insert(test.to_string());
            }
            "cont" => {
                self.paused.remove(test);
                self.going.insert(test.to_string());
            }
            "pass" | "fail" | "skip" => {
                if self.paused.contains(test) {
                    return Some("ended while it was paused: a test printed it".into());
                }
                match self.running.as_deref() {
                    Some(r) if r == test => self.running = None,
                    Some(other) => return Some(format!("ended {}", printed_in(other))),
                    None => {
                        self.going.remove(test);
                    }
                }
            }
            _ => {}
        }
        None
    }
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
