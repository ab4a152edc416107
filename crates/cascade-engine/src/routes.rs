//! `--route learned`: the routes the run database's judged attempts give
//! (the rule is `cascade_agents::learned`'s; this reads its input).

use std::path::Path;
use std::str::FromStr;

use cascade_agents::{LearnedRoutes, Outcome, StoryType};

use crate::config::{Route, RunOptions};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::state::StateError;

impl Engine {
    /// The learned routes for a run with `options`: `None` unless
    /// `--route learned`; empty when the repository has no history yet
    /// (every story then goes by the configured chain).
    pub fn learned_routes(
        &self,
        options: &RunOptions,
    ) -> Result<Option<LearnedRoutes>, EngineError> {
        if options.route != Route::Learned {
            return Ok(None);
        }
        Ok(Some(learned_at(&self.state_path()?)?))
    }
}

/// The learned routes of the run database at `db` (empty: no database, or
/// no story type with enough judged attempts).
pub fn learned_at(db: &Path) -> Result<LearnedRoutes, StateError> {
    let rows = crate::store::history::agents(db)?;
    let outcomes = rows.into_iter().filter_map(|r| {
        let story_type = StoryType::from_str(r.story_type.as_deref()?).ok()?;
        Some(Outcome {
            agent: r.agent,
            story_type,
            judged: u32::try_from(r.attempts).unwrap_or(u32::MAX),
            passed: u32::try_from(r.passed).unwrap_or(u32::MAX),
            cost_usd: Some(r.cost_usd),
        })
    });
    Ok(LearnedRoutes::from_outcomes(outcomes))
}
