//! The base is judged first. A required gate that already fails on the
//! target branch's tip fails every story whatever its agent does (each
//! burning all its attempts), so before the first agent of a run starts,
//! the tip's required gates run once on a scratch copy of its tree — the
//! test census's base run, kept under the tree's id, so a resume or the
//! first story on the same base costs a file read ([`judge_first`]).
//!
//! With `--base-failures stop` (the default) a required gate failing there
//! stops the run before any agent runs (exit 2), naming the gate and its
//! errors. With `--base-failures known` the run goes on, and a gate that
//! fails on its base judges each story by its test census instead
//! ([`judge_known`]): the story fails it only when a test that passed on
//! the base no longer passes, or a test fails that did not fail there. A
//! gate without a census of failing tests (a linter, a build that does not
//! get as far as the tests) cannot be judged that way and still stops the
//! run.

use std::sync::Arc;
use std::time::Instant;

use cascade_gates::census::{compare, TestOutcome};
use cascade_gates::{GateReport, GateResult};

use super::census::{base_gates, BaseRun};
use super::gates::WorkPlace;
use super::Stop;
use crate::config::BaseFailures;
use crate::ctx::Ctx;
use crate::error::EngineError;
use crate::events::{BaseFailure, Event};

/// Errors of a failing base gate shown in the event and the error.
const ERRORS_SHOWN: usize = 5;

/// Judges the run's base before any story starts: `Err(RedBase)` when a
/// required gate fails there and the run must stop. Nothing to judge (no
/// pending story, no required gate, no target branch yet, a cancelled run)
/// and cascade's own trouble running the gates (a notice) let the run go on.
/// `pending`: whether any story is not complete yet.
pub(crate) async fn judge_first(ctx: &Arc<Ctx>, pending: bool) -> Result<(), EngineError> {
    if !pending {
        return Ok(());
    }
    // A missing branch or unreadable gates fail the stories' setup, with
    // their own message.
    let Ok(tip) = super::target_tip(ctx) else {
        return Ok(());
    };
    let Ok(judges) = ctx.judging.at(&tip) else {
        return Ok(());
    };
    if !judges.gates.enabled || !judges.gates.gates.iter().any(|g| g.required) {
        return Ok(());
    }
    let started = Instant::now();
    let kept = match base_gates(ctx, &[], &ctx.paths.main_root, &tip, &judges).await {
        Ok(kept) => kept,
        Err(BaseRun::Cancelled) => return Ok(()),
        Err(BaseRun::Trouble(what)) => {
            ctx.emit(Event::Notice {
                message: format!("the base was not judged before the stories: {what}"),
            });
            return Ok(());
        }
    };
    let mode = ctx.options.base_failures;
    let known = mode == BaseFailures::Known;
    let failed: Vec<BaseFailure> = kept
        .report
        .failed()
        .filter(|g| g.required)
        .map(|g| BaseFailure {
            gate: g.name.clone(),
            errors: errors_of(g),
            failing_tests: failing_tests(g),
            judged_by_census: known && censused(g),
        })
        .collect();
    ctx.emit(Event::BaseJudged {
        commit: tip.clone(),
        passed: failed.is_empty(),
        mode: mode.as_str().to_string(),
        cached: kept.cached,
        failed: failed.clone(),
        duration_ms: started.elapsed().as_millis() as u64,
    });
    let stops: Vec<BaseFailure> = failed.into_iter().filter(|f| !f.judged_by_census).collect();
    if stops.is_empty() {
        return Ok(());
    }
    Err(EngineError::RedBase {
        branch: ctx.target_branch.clone(),
        commit: tip,
        failed: stops,
        known,
    })
}

/// What [`judge_known`] made of the failing required gates of a report.
#[derive(Debug, Default)]
pub(super) struct Known {
    /// Gates accepted: they fail only on tests that failed on the base too
    /// (gate, those tests).
    pub accepted: Vec<(String, Vec<String>)>,
    /// Why the others fail the story (one sentence per gate).
    pub rejected: Vec<String>,
}

/// Under `--base-failures known`: the required gates `report` failed that
/// also fail on `place`'s base are judged by the census; when every failed
/// required gate is accepted, `report.passed` becomes true. Without the
/// mode, with a passing report or without a base report, nothing changes.
pub(super) async fn judge_known(
    ctx: &Arc<Ctx>,
    story: &str,
    env: &[(String, String)],
    place: &WorkPlace,
    report: &mut GateReport,
) -> Result<Known, Stop> {
    let mut known = Known::default();
    if report.passed || ctx.options.base_failures != BaseFailures::Known {
        return Ok(known);
    }
    let base = match base_gates(ctx, env, &place.path, &place.base, &place.judges).await {
        Ok(kept) => kept.report,
        Err(BaseRun::Cancelled) => return Err(Stop::Interrupted),
        Err(BaseRun::Trouble(what)) => {
            ctx.emit(Event::Notice {
                message: format!("{story}: the base's failures are not known: {what}"),
            });
            return Ok(known);
        }
    };
    for g in report.failed().filter(|g| g.required) {
        let before = base.gates.iter().find(|b| b.name == g.name);
        match verdict(g, before) {
            Ok(tests) => known.accepted.push((g.name.clone(), tests)),
            Err(why) => known.rejected.push(format!("'{}' {why}", g.name)),
        }
    }
    if known.rejected.is_empty() {
        report.passed = true;
    }
    Ok(known)
}

/// A failed gate against the same gate on the base: `Ok` with the known
/// failures it still has, or why it fails the story.
fn verdict(now: &GateResult, before: Option<&GateResult>) -> Result<Vec<String>, String> {
    let Some(before) = before.filter(|b| !b.passed && !b.skipped) else {
        return Err("passes on the base".into());
    };
    let (Some(was), Some(is)) = (before.census.as_ref(), now.census.as_ref()) else {
        return Err("has no test census to tell known failures from new ones".into());
    };
    if now.timed_out || !censused(before) {
        return Err("fails for another reason than the tests the base fails".into());
    }
    let c = compare(was, is);
    if !c.new_failures.is_empty() {
        return Err(format!("has new failing tests: {}", shown(&c.new_failures)));
    }
    if !c.lost.is_empty() {
        let ids: Vec<String> = c.lost.into_iter().map(|(id, _)| id).collect();
        return Err(format!(
            "has tests that passed on the base and no longer pass: {}",
            shown(&ids)
        ));
    }
    if c.known_failures.is_empty() {
        return Err("fails with no failing test (the base fails on its tests)".into());
    }
    Ok(c.known_failures)
}

/// Whether a failed gate's census names failing tests (what `known` judges by).
fn censused(g: &GateResult) -> bool {
    !g.timed_out
        && g.census
            .as_ref()
            .is_some_and(|c| c.with(TestOutcome::Failed).next().is_some())
}

fn failing_tests(g: &GateResult) -> Vec<String> {
    g.census
        .as_ref()
        .map(|c| c.with(TestOutcome::Failed).map(str::to_string).collect())
        .unwrap_or_default()
}

/// `file:line: message` for the first errors, else how the gate ended.
fn errors_of(g: &GateResult) -> Vec<String> {
    let mut out: Vec<String> = g
        .errors
        .iter()
        .take(ERRORS_SHOWN)
        .map(|e| match (&e.file, e.line) {
            (Some(f), Some(l)) => format!("{f}:{l}: {}", e.message),
            (Some(f), None) => format!("{f}: {}", e.message),
            _ => e.message.clone(),
        })
        .collect();
    if out.is_empty() {
        let why = g.outcome.clone().unwrap_or_else(|| {
            let tail: Vec<&str> = g
                .output_excerpt
                .lines()
                .rev()
                .filter(|l| !l.trim().is_empty())
                .take(3)
                .collect();
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        });
        if !why.is_empty() {
            out.push(why);
        }
    }
    out
}

/// Up to five ids, then how many more.
fn shown(ids: &[String]) -> String {
    let mut s = ids.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if ids.len() > 5 {
        s.push_str(&format!(" and {} more", ids.len() - 5));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_gates::census::{Census, CensusRunner};

    fn gate(passed: bool, tests: &[(&str, TestOutcome)]) -> GateResult {
        let mut census = Census::new(CensusRunner::Pytest);
        for (id, o) in tests {
            census.tests.insert(id.to_string(), *o);
        }
        let mut g: GateResult = serde_json::from_value(serde_json::json!({
            "name": "tests", "passed": passed, "required": true, "cached": false, "skipped": false,
            "duration_ms": 1, "command": "pytest", "working_dir": ".", "errors": [],
            "output_excerpt": ""
        }))
        .unwrap();
        g.census = Some(census);
        g
    }

    use TestOutcome::{Failed, Passed};

    #[test]
    fn known_failures_alone_are_accepted() {
        let base = gate(false, &[("a", Passed), ("b", Failed)]);
        let now = gate(false, &[("a", Passed), ("b", Failed), ("c", Passed)]);
        assert_eq!(verdict(&now, Some(&base)), Ok(vec!["b".to_string()]));
    }

    #[test]
    fn a_new_failure_or_a_lost_test_is_rejected() {
        let base = gate(false, &[("a", Passed), ("b", Failed)]);
        let broke = gate(false, &[("a", Failed), ("b", Failed)]);
        let e = verdict(&broke, Some(&base)).unwrap_err();
        assert!(e.contains("new failing tests: a"), "{e}");
        let gone = gate(false, &[("b", Failed)]);
        let e = verdict(&gone, Some(&base)).unwrap_err();
        assert!(e.contains("no longer pass: a"), "{e}");
        let fresh = gate(false, &[("a", Passed), ("b", Failed), ("n", Failed)]);
        assert!(verdict(&fresh, Some(&base)).unwrap_err().contains(": n"));
    }

    #[test]
    fn a_gate_the_base_passes_or_without_failing_tests_is_rejected() {
        let green = gate(true, &[("a", Passed)]);
        let now = gate(false, &[("a", Failed)]);
        assert!(verdict(&now, Some(&green))
            .unwrap_err()
            .contains("passes on the base"));
        assert!(verdict(&now, None).is_err());
        let base = gate(false, &[("a", Passed), ("b", Failed)]);
        let nothing = gate(false, &[]);
        assert!(verdict(&nothing, Some(&base)).is_err());
        let mut blind = gate(false, &[]);
        blind.census = None;
        assert!(verdict(&blind, Some(&base))
            .unwrap_err()
            .contains("no test census"));
    }
}
