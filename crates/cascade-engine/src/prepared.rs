//! What a run is checked with before it starts: the plan loaded and
//! validated with its agents and target branch ([`Prepared`]), the files
//! every attempt reads ([`Inputs`]), and the run that passed every check
//! ([`CheckedRun`]). Types only: the engine makes them, the phases of a
//! run (and the `start` module's state recovery) take them.

use std::path::PathBuf;

use cascade_agents::{AgentsConfig, Detector};
use cascade_git::RepoPaths;
use cascade_plan::{Prd, ValidPlan};

use crate::config::ProjectConfig;
use crate::state::RunState;

/// A run that passed [`Engine::check`](crate::engine::Engine::check): what [`Engine::start`](crate::engine::Engine::start) takes.
pub struct CheckedRun {
    pub(crate) p: Prepared,
    pub(crate) inputs: Inputs,
    pub(crate) previous: Option<RunState>,
    pub(crate) state_path: PathBuf,
    /// A killed run's merge to finish before the cleanliness check.
    pub(crate) half_merged: bool,
}

impl CheckedRun {
    /// The PRD the run will work on, as loaded.
    pub fn prd(&self) -> &Prd {
        &self.p.prd
    }

    /// [`Prepared::pending_kinds`]: the kinds the check resolved (not
    /// inferred again).
    pub fn pending_kinds(&self) -> Vec<&cascade_plan::Story> {
        self.p.pending_kinds()
    }
}

/// What preparation produced: the plan loaded and checked, the agents
/// configured, the target branch ([`Engine::prepare`](crate::engine::Engine::prepare)). A dry run and a run
/// take it, so that a caller that reads the plan too (the agents check
/// before a run) reads the one copy.
pub struct Prepared {
    pub(crate) paths: RepoPaths,
    pub(crate) cascade_dir: PathBuf,
    pub(crate) prd_path: PathBuf,
    pub(crate) prd: Prd,
    pub(crate) plan: ValidPlan,
    pub(crate) agents: AgentsConfig,
    pub(crate) detector: Detector,
    pub(crate) target_branch: String,
    pub(crate) notices: Vec<String>,
    /// [`Prepared::pending_kinds`], found on first use.
    pub(crate) kinds: std::sync::OnceLock<Vec<usize>>,
}

impl Prepared {
    /// The PRD as loaded.
    pub fn prd(&self) -> &Prd {
        &self.prd
    }

    /// The first pending story of each kind, in plan order
    /// ([`cascade_agents::resolve::story_kinds`]): resolving these resolves
    /// every pending story. Inferring every story's type is most of the
    /// cost of a check at 100,000 stories, so it is done once, here, for
    /// the engine's check and the caller's agent check alike.
    pub fn pending_kinds(&self) -> Vec<&cascade_plan::Story> {
        let stories = &self.prd.stories;
        let kinds = self.kinds.get_or_init(|| {
            cascade_agents::resolve::story_kind_positions(stories, |s| !s.is_complete())
        });
        kinds.iter().filter_map(|&i| stories.get(i)).collect()
    }
}

/// What every attempt of a run reads: the judging files (gates and
/// verification rules, per base commit), the remote gate cache, the project
/// settings, review and acceptance checks, the prompt context.
pub(crate) struct Inputs {
    pub judging: crate::judging::Judging,
    pub remote_cache: Option<cascade_gates::RemoteCache>,
    pub project: ProjectConfig,
    pub checks: crate::checks::Checks,
    pub prompt: cascade_agents::prompt::PromptContext,
}
