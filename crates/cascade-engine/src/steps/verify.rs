//! Step: local verification of what the attempt added (cascade-verify: stub
//! macros and bodies, placeholder returns, skipped, removed or emptied tests,
//! assertions that cannot fail, gate/CI edits the story did not ask for).
//! Instant and agent-free, so it runs before the gates: findings fail the
//! attempt as `verification`, with the findings in the retry prompt.

use std::sync::Arc;
use std::time::Instant;

use super::commit::Committed;
use super::prepare_worktree::Worktree;
use super::{Attempt, Failure, Stop};
use crate::checks::intent_of;
use crate::events::{Event, VerifyFinding};
use crate::retry::FailureKind;

pub(super) async fn run(a: &Attempt<'_>, wt: &Worktree, committed: &Committed) -> Result<(), Stop> {
    let ctx = a.ctx;
    if !wt.judges.rules.enabled {
        return Ok(());
    }
    let started = Instant::now();
    let intent = intent_of(a.story);
    let allowed = intent.allow.clone();
    let scanned = {
        let judges = Arc::clone(&wt.judges);
        let (path, base, head) = (wt.path.clone(), wt.base.clone(), committed.commit.clone());
        tokio::task::spawn_blocking(move || {
            cascade_verify::verify_repo(&path, &base, Some(&head), &judges.rules, &intent)
        })
        .await
    };
    let verdict = match scanned {
        Ok(Ok(verdict)) => verdict,
        // cascade's own trouble reading the change is not the agent's fault.
        Ok(Err(e)) => {
            ctx.emit(Event::Notice {
                message: format!("{}: verification could not read the change: {e}", a.id()),
            });
            return Ok(());
        }
        Err(e) => {
            ctx.emit(Event::Notice {
                message: format!("{}: verification did not run: {e}", a.id()),
            });
            return Ok(());
        }
    };
    conclude(a, verdict, allowed, started)
}

/// Records and announces a verdict of the attempt's verification (this
/// step's, or what `git_config` put back); fails the attempt when findings stand.
pub(super) fn conclude(
    a: &Attempt<'_>,
    verdict: cascade_verify::Verdict,
    allowed: Vec<String>,
    started: Instant,
) -> Result<(), Stop> {
    let findings = record(a, verdict, allowed, started);
    if findings.is_empty() {
        return Ok(());
    }
    Err(failure(&findings).into())
}

/// Records a verdict in the story's state and announces it
/// (`verification_finished`); returns the findings that stand.
pub(super) fn record(
    a: &Attempt<'_>,
    verdict: cascade_verify::Verdict,
    allowed: Vec<String>,
    started: Instant,
) -> Vec<VerifyFinding> {
    let ctx = a.ctx;
    let findings: Vec<VerifyFinding> = verdict.findings;
    let lines: Vec<String> = findings.iter().map(ToString::to_string).collect();
    let waived: Vec<String> = verdict.allowed.iter().map(ToString::to_string).collect();
    let kept = lines.clone();
    let number = a.number;
    ctx.amend_story(a.id(), move |s| {
        let noted = kept.len() + waived.len();
        s.verification = kept;
        s.verification_allowed = waived;
        s.note_findings(number, noted);
    });
    ctx.emit(Event::VerificationFinished {
        story: a.id().to_string(),
        attempt: a.number,
        passed: findings.is_empty(),
        findings: findings.clone(),
        allowed,
        waived: verdict.allowed,
        duration_ms: started.elapsed().as_millis() as u64,
    });
    findings
}

/// The attempt's failure for findings: the first in the error, all of them
/// for the next prompt.
pub(super) fn failure(findings: &[VerifyFinding]) -> Failure {
    let first = &findings[0];
    let error = match findings.len() {
        1 => format!("verification: {first}"),
        n => format!("verification found {n} problems, first: {first}"),
    };
    let mut f = Failure::new(FailureKind::Verification, error);
    f.findings = format!(
        "{}\n\n(A rule the story really wants broken can be allowed in prd.json with \"verify_allow\": [\"rule-id\"], a protected file it must change with \"verify_allow\": [\"path\"].)",
        findings
            .iter()
            .map(|l| format!("- {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    f
}
