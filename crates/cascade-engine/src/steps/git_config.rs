//! Step (around the agent's run and the attempt's checks): git's own files
//! as they were before the attempt. What an agent, a gate or a review agent
//! left there that makes git run a program (`core.hooksPath`, a filter, a
//! hook, see [`cascade_verify::gitconfig`]) is put back, and is a
//! `git-config-changed` finding that fails the attempt as `verification`.
//!
//! Checked twice: right after the agent (before its work is committed and
//! gated) and at the end of the attempt's checks, whatever they came to (a
//! gate or a review agent runs code the agent wrote).

use std::time::Instant;

use cascade_verify::gitconfig::GitState;
use cascade_verify::Verdict;

use super::prepare_worktree::Worktree;
use super::{Attempt, Stop};
use crate::checks::intent_of;
use crate::events::Event;

/// git's files before the attempt (none when they could not be read:
/// cascade's own trouble, said in a notice, is not the agent's fault).
pub(super) struct Recorded(Option<GitState>);

/// Records git's files of the worktree `wt` (before the agent runs).
pub(super) async fn record(a: &Attempt<'_>, wt: &Worktree) -> Recorded {
    let path = wt.path.clone();
    let why = match tokio::task::spawn_blocking(move || GitState::record(&path)).await {
        Ok(Ok(state)) => return Recorded(Some(state)),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    notice(a, format!("cannot record git's configuration: {why}"));
    Recorded(None)
}

/// Puts back what changed since [`record`], then: `done` as it is when
/// nothing did (or the run is being cancelled), else the attempt fails with
/// the findings (the output excerpt of a failure it replaces kept).
pub(super) async fn settle<T>(
    a: &Attempt<'_>,
    wt: &Worktree,
    recorded: &Recorded,
    done: Result<T, Stop>,
) -> Result<T, Stop> {
    let Some(state) = recorded.0.clone() else {
        return done;
    };
    let started = Instant::now();
    let why = match tokio::task::spawn_blocking(move || state.restore()).await {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let found = match why {
        Ok(found) => found,
        Err(why) => {
            notice(a, format!("cannot put git's configuration back: {why}"));
            return done;
        }
    };
    if found.is_empty() || matches!(done, Err(Stop::Interrupted)) {
        return done;
    }
    let intent = intent_of(a.story);
    let rules = &wt.judges.rules;
    let (allowed, findings) = found.into_iter().partition(|f| intent.allows(rules, f));
    let verdict = Verdict { findings, allowed };
    match super::verify::conclude(a, verdict, intent.allow, started) {
        Ok(()) => done,
        Err(Stop::Failed(mut f)) => {
            if let Err(Stop::Failed(replaced)) = done {
                f.output_excerpt = replaced.output_excerpt;
            }
            Err(f.into())
        }
        Err(stop) => Err(stop),
    }
}

fn notice(a: &Attempt<'_>, message: String) {
    a.ctx.emit(Event::Notice {
        message: format!("{}: {message}", a.id()),
    });
}
