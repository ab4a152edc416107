//! What the verify and review steps of every attempt use, decided once per
//! run: whether, and how strictly, a second agent reviews each story,
//! whether its new tests are proven against its base, and the gates of its
//! acceptance criteria. (The verification rules come from each story's base
//! commit: see the `judging` module.)
//!
//! Review is on with `--review` (`--review=strict`), or when prd.json says so:
//! `"verification_gate": {"enabled": true}` (Plan Cascade's key; `"strict":
//! true` inside it for strict) or `"review": true | "strict"`. A flag given
//! on the command line wins over the file. A story allows verification rules
//! with `"verify_allow": ["rule-id", ...]`, and an acceptance criterion
//! object with a `check` (an argv) adds a gate for that story only.

use std::collections::HashMap;
use std::time::Duration;

use cascade_gates::Gate;
use cascade_plan::{Criterion, Prd, Story};
use cascade_verify::Intent;
use serde_json::Value;

use crate::config::{ReviewMode, RunOptions};
use crate::error::EngineError;

/// The run's review mode, test proving and acceptance gates.
#[derive(Debug, Clone)]
pub(crate) struct Checks {
    pub review: ReviewMode,
    /// Whether a story's new or changed tests run on its base.
    pub prove_tests: Proving,
    /// Per story: the gates its acceptance criteria's `check`s make.
    pub criteria: HashMap<String, Vec<Gate>>,
}

impl Checks {
    pub fn load(prd: &Prd, options: &RunOptions) -> Result<Checks, EngineError> {
        let review = options
            .review
            .or_else(|| review_in_prd(prd))
            .unwrap_or(ReviewMode::Off);
        let prove_tests = match options.prove_tests {
            Some(false) => Proving::Off,
            Some(true) => Proving::Asked,
            None if review == ReviewMode::Strict => Proving::Asked,
            None => Proving::ByDefault,
        };
        let mut criteria = HashMap::new();
        for story in prd.stories.iter().filter(|s| !s.is_complete()) {
            let gates = criteria_gates(story)?;
            if !gates.is_empty() {
                criteria.insert(story.id.clone(), gates);
            }
        }
        Ok(Checks {
            review,
            prove_tests,
            criteria,
        })
    }
}

/// Whether the tests a story adds or changes are proven on its base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proving {
    /// `--no-prove-tests` (`--prove-tests=false`).
    Off,
    /// `--prove-tests`, or a strict review: whatever the runner.
    Asked,
    /// Neither: where the test census knows a gate's runner, unless
    /// `.cascade/config.json` turns it off (`prove_tests.enabled: false`).
    ByDefault,
}

/// The gates of a story's acceptance criteria that carry a `check`: an argv
/// (`["cargo", "test", "login"]`) or a command line split into words without
/// a shell (`"pytest -k login"`), optionally with `check_timeout_seconds`.
/// Named `criterion-<n>` (1-based position among the criteria).
pub fn criteria_gates(story: &Story) -> Result<Vec<Gate>, EngineError> {
    let mut out = Vec::new();
    for (i, c) in story.acceptance_criteria.iter().enumerate() {
        let Criterion::Object(m) = c else {
            continue;
        };
        let Some(check) = m.get("check") else {
            continue;
        };
        let origin = format!(
            "prd.json story '{}' acceptance_criteria[{i}].check",
            story.id
        );
        let bad = |message: String| EngineError::Criterion {
            origin: origin.clone(),
            message,
        };
        let argv: Vec<String> = match check {
            Value::Array(words) => words
                .iter()
                .map(|w| {
                    w.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| bad(format!("every word must be a string, found {w}")))
                })
                .collect::<Result<_, _>>()?,
            Value::String(line) => {
                cascade_gates::config::split_words(line).map_err(|e| bad(e.to_string()))?
            }
            other => {
                return Err(bad(format!(
                    "must be an argv array like [\"cargo\", \"test\", \"name\"] or a command string, found {other}"
                )))
            }
        };
        let timeout = m
            .get("check_timeout_seconds")
            .and_then(Value::as_u64)
            .map(Duration::from_secs);
        let gate = Gate::from_argv(&format!("criterion-{}", i + 1), &argv, timeout, &origin)
            .map_err(|e| bad(e.to_string()))?;
        out.push(gate);
    }
    Ok(out)
}

/// The review mode prd.json asks for, if it says anything.
pub fn review_in_prd(prd: &Prd) -> Option<ReviewMode> {
    let from = |v: &Value| -> Option<ReviewMode> {
        match v {
            Value::Bool(true) => Some(ReviewMode::On),
            Value::Bool(false) => Some(ReviewMode::Off),
            Value::String(s) if s.eq_ignore_ascii_case("strict") => Some(ReviewMode::Strict),
            Value::String(s) if s.eq_ignore_ascii_case("off") => Some(ReviewMode::Off),
            Value::String(_) => Some(ReviewMode::On),
            Value::Object(m) => {
                let enabled = m.get("enabled").and_then(Value::as_bool).unwrap_or(true);
                let strict = m.get("strict").and_then(Value::as_bool).unwrap_or(false)
                    || m.get("mode").and_then(Value::as_str) == Some("strict");
                Some(match (enabled, strict) {
                    (false, _) => ReviewMode::Off,
                    (true, true) => ReviewMode::Strict,
                    (true, false) => ReviewMode::On,
                })
            }
            _ => None,
        }
    };
    prd.extra
        .get("review")
        .and_then(from)
        .or_else(|| prd.extra.get("verification_gate").and_then(from))
}

/// What a story allows, for verification: its `verify_allow` (rule ids,
/// and files it may change although they judge it), and the tests its
/// title, description and acceptance criteria ask to remove.
pub fn intent_of(story: &Story) -> Intent {
    let allow = story
        .extra
        .get("verify_allow")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut words = vec![story.title.as_str(), story.description.as_str()];
    words.extend(story.acceptance_criteria.iter().map(|c| c.text()));
    Intent {
        allow,
        ..Intent::default()
    }
    .with_words(&words.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criteria_checks_become_gates_and_bad_ones_are_named() {
        let p = prd(
            r#"{"goal": "g", "stories": [{"id": "s1", "title": "t", "acceptance_criteria": [
                "plain text",
                {"description": "login works", "check": ["cargo", "test", "login works"]},
                {"description": "lint", "check": "ruff check 'src dir'", "check_timeout_seconds": 30}
            ]}]}"#,
        );
        let gates = criteria_gates(&p.stories[0]).unwrap();
        assert_eq!(gates.len(), 2);
        assert_eq!(gates[0].name, "criterion-2");
        assert_eq!(
            (gates[0].program.as_str(), gates[0].args.clone()),
            ("cargo", vec!["test".to_string(), "login works".to_string()])
        );
        assert!(gates[0].required);
        assert_eq!(gates[1].args, ["check", "src dir"]);
        assert_eq!(gates[1].timeout, Duration::from_secs(30));
        for bad in [r#"[]"#, r#"[1, 2]"#, r#"{"x": 1}"#] {
            let p = prd(&format!(
                r#"{{"goal": "g", "stories": [{{"id": "s9", "title": "t", "acceptance_criteria": [{{"description": "d", "check": {bad}}}]}}]}}"#
            ));
            let e = criteria_gates(&p.stories[0]).unwrap_err().to_string();
            assert!(e.contains("story 's9' acceptance_criteria[0].check"), "{e}");
        }
    }

    fn prd(json: &str) -> Prd {
        Prd::from_json(json.as_bytes(), std::path::Path::new("prd.json")).unwrap()
    }

    #[test]
    fn review_mode_comes_from_the_flag_or_the_prd() {
        let base = r#"{"goal": "g", "stories": []"#;
        let p = |extra: &str| prd(&format!("{base}{extra}}}"));
        assert_eq!(review_in_prd(&p("")), None);
        assert_eq!(
            review_in_prd(&p(r#", "review": true"#)),
            Some(ReviewMode::On)
        );
        assert_eq!(
            review_in_prd(&p(r#", "review": "strict""#)),
            Some(ReviewMode::Strict)
        );
        assert_eq!(
            review_in_prd(&p(r#", "verification_gate": {"enabled": true}"#)),
            Some(ReviewMode::On)
        );
        assert_eq!(
            review_in_prd(&p(r#", "verification_gate": {"enabled": false}"#)),
            Some(ReviewMode::Off)
        );
        let opts = RunOptions {
            review: Some(ReviewMode::Off),
            ..RunOptions::default()
        };
        let c = Checks::load(&p(r#", "review": true"#), &opts).unwrap();
        assert_eq!(c.review, ReviewMode::Off, "the flag wins");
        assert_eq!(c.prove_tests, Proving::ByDefault);
        // Proving tests is on with a strict review, unless said otherwise.
        let c = Checks::load(&p(r#", "review": "strict""#), &RunOptions::default()).unwrap();
        assert_eq!(c.prove_tests, Proving::Asked);
        let opts = RunOptions {
            prove_tests: Some(false),
            ..RunOptions::default()
        };
        assert_eq!(
            Checks::load(&p(r#", "review": "strict""#), &opts)
                .unwrap()
                .prove_tests,
            Proving::Off
        );
    }

    #[test]
    fn intent_reads_verify_allow() {
        let p = prd(
            r#"{"goal": "g", "stories": [{"id": "s1", "title": "Add CI", "description": "d",
                "files": [".github/workflows/ci.yml"], "verify_allow": ["py-stub-body"],
                "acceptance_criteria": ["runs pytest.ini options"]}]}"#,
        );
        let i = intent_of(&p.stories[0]);
        assert_eq!(i.allow, ["py-stub-body"]);
        assert!(criteria_gates(&p.stories[0]).unwrap().is_empty());
    }
}
