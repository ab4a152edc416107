//! Step: prove the story's new or changed tests (on by default where the
//! test census knows a gate's runner; `--prove-tests` proves whatever the
//! runner, `--no-prove-tests` or config.json `prove_tests.enabled: false`
//! turn the default off; each run bounded by `prove_tests.timeout_seconds`): run them on a copy of the base commit with
//! only the test changes applied (cascade-verify's `prove`); a test that
//! passes there tests nothing the story built and fails the attempt as
//! `verification` (`unproven-test`, which a story may allow). It runs after
//! the gates passed (the tests pass on the story's code), before the review.
//! A runner that is missing or times out is a notice, not the agent's fault.

use std::time::Instant;

use super::commit::Committed;
use super::prepare_worktree::Worktree;
use super::{Attempt, Stop};
use crate::checks::{intent_of, Proving};
use crate::events::Event;

pub(super) async fn run(a: &Attempt<'_>, wt: &Worktree, committed: &Committed) -> Result<(), Stop> {
    let ctx = a.ctx;
    if !wanted(ctx, wt) || !wt.judges.rules.enabled {
        return Ok(());
    }
    let started = Instant::now();
    let files = {
        let (path, base, head) = (wt.path.clone(), wt.base.clone(), committed.commit.clone());
        tokio::task::spawn_blocking(move || {
            cascade_git::diff::diff_lines(&path, &base, Some(&head))
        })
        .await
    };
    let files = match files {
        Ok(Ok(files)) => files,
        Ok(Err(e)) => return notice(a, &format!("could not read the change: {e}")),
        Err(e) => return notice(a, &e.to_string()),
    };
    let mut opts = cascade_verify::prove::ProveOptions::new(&wt.path);
    opts.env = a.env.to_vec();
    opts.timeout = ctx.project.prove_tests.timeout();
    // Rust: a target directory nobody else builds in right now.
    let target = ctx.control.cargo_target(&wt.path);
    opts.cargo_target_dir = target.as_ref().map(|t| t.path());
    opts.sandbox = wt.sandbox.policy.clone();
    let proof = cascade_verify::prove::prove(
        &wt.path,
        &wt.base,
        &files,
        &wt.judges.rules,
        &opts,
        &ctx.cancel,
    )
    .await;
    drop(target);
    a.check_cancel()?;
    let proof = match proof {
        Ok(p) => p,
        Err(e) => return notice(a, &e.to_string()),
    };
    if proof.tests.is_empty() {
        return Ok(());
    }
    let intent = intent_of(a.story);
    let (waived, findings): (Vec<_>, Vec<_>) = proof
        .findings
        .into_iter()
        .partition(|f| intent.allows(&wt.judges.rules, f));
    let found: Vec<String> = findings.iter().map(ToString::to_string).collect();
    let allowed: Vec<String> = waived.iter().map(ToString::to_string).collect();
    let number = a.number;
    ctx.amend_story(a.id(), move |s| {
        let noted = found.len() + allowed.len();
        s.verification = found;
        s.verification_allowed.extend(allowed);
        s.note_findings(number, noted);
    });
    ctx.emit(Event::TestsProved {
        story: a.id().to_string(),
        attempt: a.number,
        passed: findings.is_empty(),
        tests: proof.ran as u32,
        findings: findings.clone(),
        notes: proof.notes,
        duration_ms: started.elapsed().as_millis() as u64,
    });
    if findings.is_empty() {
        return Ok(());
    }
    Err(super::verify::failure(&findings).into())
}

/// Whether this run proves the story's tests: asked for, or by default
/// where a gate of the base runs a runner the test census knows (a project
/// whose tests cascade cannot read is not made to pay for proving).
fn wanted(ctx: &crate::ctx::Ctx, wt: &Worktree) -> bool {
    match ctx.checks.prove_tests {
        Proving::Off => false,
        Proving::Asked => true,
        Proving::ByDefault => {
            ctx.project.prove_tests.enabled != Some(false)
                && wt.judges.gates.enabled
                && wt
                    .judges
                    .gates
                    .gates
                    .iter()
                    .any(|g| cascade_gates::census::runner_of(&g.program, &g.args).is_some())
        }
    }
}

/// cascade's own trouble proving is not the agent's fault: a notice.
fn notice(a: &Attempt<'_>, what: &str) -> Result<(), Stop> {
    a.ctx.emit(Event::Notice {
        message: format!("{}: tests could not be proven on the base: {what}", a.id()),
    });
    Ok(())
}
