//! pytest's JUnit XML report (`--junitxml`): one `<testcase classname name>`
//! per collected test, with a `<skipped>` child for skips and xfails and a
//! `<failure>` or `<error>` child for failures. A module skipped at
//! collection is one test case named after the module.

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

use super::{Census, CensusRunner, TestOutcome};

/// The census of a report; unreadable XML ends the reading where it is.
pub(super) fn parse_junit(xml: &str) -> Census {
    let mut census = Census::new(CensusRunner::Pytest);
    let mut reader = Reader::from_str(xml);
    // The open test case: its id and its outcome so far.
    let mut open: Option<(String, TestOutcome)> = None;
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) if e.name().as_ref() == b"testcase" => {
                open = Some((case_id(&e), TestOutcome::Passed));
            }
            Ok(Event::Empty(e)) if e.name().as_ref() == b"testcase" => {
                census.tests.insert(case_id(&e), TestOutcome::Passed);
            }
            Ok(Event::Start(e) | Event::Empty(e)) => {
                if let Some((_, outcome)) = open.as_mut() {
                    match e.name().as_ref() {
                        b"skipped" => *outcome = TestOutcome::Skipped,
                        b"failure" | b"error" => *outcome = TestOutcome::Failed,
                        _ => {}
                    }
                }
            }
            Ok(Event::End(e)) if e.name().as_ref() == b"testcase" => {
                if let Some((id, outcome)) = open.take() {
                    // A test that failed and then errored in teardown is
                    // reported twice: the worse outcome stays.
                    let slot = census.tests.entry(id).or_insert(outcome);
                    if outcome == TestOutcome::Failed {
                        *slot = outcome;
                    }
                }
            }
            Ok(Event::Eof) | Err(_) => break,
            Ok(_) => {}
        }
    }
    census
}

/// `classname.name` (or `name` alone when the class name is empty).
fn case_id(e: &BytesStart<'_>) -> String {
    let attr = |key: &[u8]| {
        e.try_get_attribute(key)
            .ok()
            .flatten()
            .and_then(|a| a.normalized_value(XmlVersion::default()).ok())
            .map(|v| v.into_owned())
            .unwrap_or_default()
    };
    let (class, name) = (attr(b"classname"), attr(b"name"));
    if class.is_empty() {
        name
    } else {
        format!("{class}.{name}")
    }
}
