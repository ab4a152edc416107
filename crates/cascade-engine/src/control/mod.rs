//! Run controls: what keeps an unattended run within its spend, its
//! providers' rate limits and the machine's capacity.
//!
//! - [`budget`]: cost and time budgets of the run and of each story.
//! - [`ratelimit`]: per-agent cooldowns and AIMD concurrency.
//! - [`resources`]: per-story port ranges and shared build caches.
//! - [`steer`]: pause/resume scheduling, cancel and retry stories of a live run.
//!
//! Gate processes are bounded by `--gate-jobs` separately from the agents
//! (`--parallel`), and both agents and gates pass the memory guard
//! (`cascade_process::resources::MemoryGuard`): no new one starts while
//! available memory is below the threshold and something of this run is
//! still running (which is what can give memory back).
//! `Controls` holds all of it for one run; the attempt's steps consult it.

pub mod budget;
pub mod ratelimit;
pub mod resources;
pub mod steer;

use std::path::Path;
use std::sync::Arc;

use cascade_process::resources::{Admission, MemoryGuard};

use crate::config::{ProjectConfig, RunOptions};

/// Memory guard threshold when nothing else is configured: 512 MiB.
pub const DEFAULT_MIN_AVAILABLE_MB: u64 = 512;

/// What the engines of one run share: a mega run makes one and gives it to
/// every feature's engine (through [`RunOptions::pools`]), so gates of all
/// features stay within `--gate-jobs`, an agent's rate-limit cooldown holds
/// for every feature, and `--max-cost` / `--max-duration` bound the whole
/// run. A plain run makes its own.
#[derive(Debug, Clone)]
pub struct RunPools {
    /// `--gate-jobs` slots and the memory guard.
    pub gates: Admission,
    /// Per-agent cooldowns and concurrency.
    pub limits: Arc<ratelimit::Limits>,
    /// The run's budget.
    pub budget: Arc<budget::Pool>,
}

impl RunPools {
    /// The pools `options` ask for, with the project's settings: gate slots
    /// and memory guard, rate limits up to `--parallel`, and the run limits
    /// of `options.budget` (`max_cost`, `max_duration`, `hard`).
    pub fn new(options: &RunOptions, project: &ProjectConfig) -> RunPools {
        RunPools {
            gates: admission(options, project),
            limits: Arc::new(ratelimit::Limits::new(options.parallel)),
            budget: Arc::new(budget::Pool::new(budget::Budget {
                max_story_cost: None,
                ..options.budget.clone()
            })),
        }
    }
}

/// The controls of one run.
#[derive(Debug)]
pub(crate) struct Controls {
    /// What every gate process asks: `--gate-jobs` slots and the memory guard.
    pub gates: Admission,
    /// Shared by agents and gates.
    pub memory: Option<Arc<MemoryGuard>>,
    /// Shared Cargo target directories (`None`: sharing off).
    pub cargo_targets: Option<resources::CargoTargets>,
    pub budget: budget::Tracker,
    pub limits: Arc<ratelimit::Limits>,
    /// What agent processes run under: fired with the run's cancellation
    /// and, under `--hard-budget`, when the budget runs out (then the
    /// running agents stop while finished work still gates and merges).
    pub agents_cancel: cascade_process::CancelToken,
    /// Stories waiting for the ones their conflict is against (`clash`).
    pub waiting: crate::clash::Waiting,
}

impl Controls {
    /// The controls `options` ask for, with the project's settings and the
    /// PRD's budgets (a malformed budget in prd.json is an error).
    pub fn new(
        options: &RunOptions,
        project: &ProjectConfig,
        cascade_dir: &Path,
        prd: &cascade_plan::Prd,
    ) -> Result<Controls, budget::BudgetError> {
        let share = project.resources.shared_build_cache.unwrap_or(true)
            && std::env::var_os("CARGO_TARGET_DIR").is_none();
        let story_limits = budget::story_limits(prd)?;
        let (gates, limits, budget) = match &options.pools {
            // Shared: the run's limits are the pool's; this engine keeps
            // the per-story limit, and its prd.json's run budget becomes
            // its own (a feature's) limit.
            Some(pools) => {
                let own = budget::Budget {
                    max_story_cost: options.budget.max_story_cost,
                    hard: options.budget.hard,
                    ..budget::Budget::default()
                }
                .with_prd(prd.metadata.as_ref())?;
                let part = options.pool_part.as_deref().unwrap_or_default();
                (
                    pools.gates.clone(),
                    Arc::clone(&pools.limits),
                    budget::Tracker::pooled(own, story_limits, Arc::clone(&pools.budget), part),
                )
            }
            None => {
                let budget = options.budget.clone().with_prd(prd.metadata.as_ref())?;
                (
                    admission(options, project),
                    Arc::new(ratelimit::Limits::new(options.parallel)),
                    budget::Tracker::new(budget, story_limits),
                )
            }
        };
        Ok(Controls {
            memory: gates.memory.clone(),
            gates,
            cargo_targets: share.then(|| resources::CargoTargets::new(cascade_dir)),
            budget,
            limits,
            agents_cancel: cascade_process::CancelToken::new(),
            waiting: crate::clash::Waiting::default(),
        })
    }

    /// A shared Cargo target directory nobody else builds in right now, for
    /// a Cargo project in `worktree` (`None`: sharing off, or not Cargo).
    pub fn cargo_target(&self, worktree: &Path) -> Option<resources::TargetLease> {
        self.cargo_targets
            .as_ref()
            .filter(|_| resources::is_cargo_project(worktree))
            .map(|t| t.lease())
    }
}

/// The gate slots (`--gate-jobs`, default half the cores) and the memory
/// guard (threshold from the options, else `.cascade/config.json`, else
/// [`DEFAULT_MIN_AVAILABLE_MB`]) of a run, or of every engine of a mega run.
pub fn admission(options: &RunOptions, project: &ProjectConfig) -> Admission {
    let threshold_mb = options
        .min_available_memory_mb
        .or(project.resources.min_available_memory_mb)
        .unwrap_or(DEFAULT_MIN_AVAILABLE_MB);
    let memory = (threshold_mb > 0)
        .then(|| Arc::new(MemoryGuard::new(threshold_mb.saturating_mul(1024 * 1024))));
    let gate_jobs = options
        .gate_jobs
        .unwrap_or_else(resources::default_gate_jobs)
        .max(1);
    Admission::new(gate_jobs, memory)
}
