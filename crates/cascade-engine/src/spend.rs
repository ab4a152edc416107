//! The run's budgets as its loop checks them: the spend is in the run
//! state, which the loop owns, so a story task or a timer asks the loop
//! ([`recheck_run_budget`], [`before_attempt`]) and the loop checks its own
//! ([`check_run_budget`], [`report_unknown_spend`]). The budgets themselves
//! (limits, what counts as spent) are `control::budget`'s.

use std::sync::Arc;

use crate::control::budget;
use crate::ctx::Ctx;
use crate::state::RunState;

/// Checks the run's budget; the first time it is exhausted, says so (and
/// with `--hard-budget` stops the running work). Returns whether it is.
/// `state` is the run's (the loop's own, or what a task reads through it).
pub(crate) fn check_run_budget(ctx: &Ctx, state: &RunState) -> bool {
    let found = ctx.control.budget.check_run(state);
    if let Some(e) = found {
        let whole_run = e.scope == "run";
        ctx.emit(e.event());
        if ctx.control.budget.hard() {
            ctx.control.agents_cancel.cancel();
            if whole_run {
                // Every engine sharing the budget (a mega run's features).
                ctx.control.budget.pool_stop().cancel();
            }
        }
    }
    ctx.control.budget.exhausted().is_some()
}

/// At the end of a run with a cost budget: says when part of the spend is
/// unknown (agents that reported neither cost nor tokens), so a budget that
/// was never reached is not mistaken for money not spent.
pub(crate) fn report_unknown_spend(ctx: &Ctx, state: &RunState) {
    let b = &ctx.control.budget.budget;
    if b.max_cost.is_none() && b.max_story_cost.is_none() {
        return;
    }
    let spend = budget::spend(state, None);
    if spend.unknown > 0 {
        ctx.emit(crate::events::Event::Notice {
            message: format!(
                "budget: spend so far is {}; agents that report no cost or tokens are not held to the budget (set `prices` in agents.json for them)",
                spend.describe()
            ),
        });
    }
}

/// Whether a story may start its next attempt.
pub(crate) enum Go {
    Ahead,
    /// The run's budget is exhausted: the story goes back to pending.
    RunExhausted,
    /// The story's own budget is spent: it fails for good as `budget`.
    StoryExhausted(crate::failure::Failure),
}

/// [`check_run_budget`] by the run's loop, when its turn comes (a task's
/// or a timer's: the spend is in the loop's state).
pub(crate) fn recheck_run_budget(ctx: &Arc<Ctx>) {
    let c = Arc::clone(ctx);
    ctx.state
        .send(crate::owner::Change::Read(Box::new(move |st| {
            check_run_budget(&c, st);
        })));
}

/// The budget check before each attempt of story `id` (asked of the run's
/// loop, which has the spend).
pub(crate) async fn before_attempt(ctx: &Arc<Ctx>, id: &str) -> Go {
    let (c, story) = (Arc::clone(ctx), id.to_string());
    let asked = ctx.state.read(move |st| {
        let run_over = check_run_budget(&c, st);
        (run_over, c.control.budget.check_story(st, &story))
    });
    let Some((run_over, over)) = asked.await else {
        return Go::RunExhausted;
    };
    if run_over {
        return Go::RunExhausted;
    }
    let Some((max, spend, message)) = over else {
        return Go::Ahead;
    };
    ctx.emit(crate::events::Event::BudgetExhausted {
        scope: "story".into(),
        story: Some(id.to_string()),
        limit: "cost".into(),
        limit_usd: Some(max),
        limit_secs: None,
        spent_usd: spend.known(),
        unknown_attempts: spend.unknown,
        message: message.clone(),
    });
    Go::StoryExhausted(crate::failure::Failure::new(
        crate::retry::FailureKind::Budget,
        message,
    ))
}
