//! [`LivePorts`]: the real [`MegaPorts`]: cascade-plan validates PRDs,
//! cascade-agents runs the PRD agent, the [`crate::engine::Engine`] runs each
//! feature's stories, cascade-gates checks the merged target.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cascade_agents::config::AgentsConfig;
use cascade_agents::detect::Detector;
use cascade_agents::exec::{execute, AgentRequest, AgentRun, ExecError};
use cascade_agents::phase::Phase;
use cascade_agents::resolve::{Overrides, Resolver};
use cascade_process::CancelToken;

use super::error::MegaError;
use super::ports::{AgentCharge, FeatureOutcome, FeatureRun, GatesVerdict, MegaPorts};
use super::prd_gen::{AuthorError, PrdCheck};
use crate::config::{EngineConfig, Pause, RunOptions};
use crate::control::budget::Spend;
use crate::engine::Engine;
use crate::events::{EventSink, StoryCounts};

/// The real services of a mega run.
pub struct LivePorts {
    agents_path: Option<PathBuf>,
    agents: AgentsConfig,
    detector: Detector,
    overrides: Overrides,
    cascade_dir: PathBuf,
    /// Options every feature's engine run starts from.
    template: RunOptions,
    /// The limit of the PRD agents' logs (`.cascade/config.json`).
    log_limit: cascade_process::LogLimit,
    /// Per feature: what its PRD agent calls spent (earlier invocations
    /// included), and the latest call's charge until it is announced.
    prd_spend: Mutex<HashMap<String, (Spend, Option<AgentCharge>)>>,
}

/// The budget pool's part of a feature's PRD agent (its engine's is the
/// feature's name).
fn prd_part(feature: &str) -> String {
    format!("{feature} (PRD agent)")
}

impl LivePorts {
    /// Loads the agents configuration (as the engine does) and checks that
    /// every agent named on the command line exists.
    pub fn new(
        start_dir: &Path,
        agents_path: Option<PathBuf>,
        overrides: Overrides,
        mut template: RunOptions,
    ) -> Result<LivePorts, MegaError> {
        let paths = cascade_git::RepoPaths::discover(start_dir)
            .map_err(|e| MegaError::Git(e.to_string()))?;
        let cascade_dir = paths.cascade_dir();
        // One set of gate slots and memory guard, one cooldown per agent and
        // one budget for every feature's engine: the run's limits hold for
        // all its features together.
        let project = crate::config::ProjectConfig::load(&cascade_dir)
            .map_err(|e| MegaError::Plan(e.to_string()))?;
        if template.pools.is_none() {
            template.pools = Some(crate::control::RunPools::new(&template, &project));
        }
        let loaded = AgentsConfig::load(agents_path.as_deref(), start_dir)
            .map_err(|e| MegaError::Agents(e.to_string()))?;
        let detector = Detector::from_env().cache_dir(&cascade_dir);
        // Feature engines start in their worktrees, where an untracked
        // ./agents.json of the main worktree is missing: give them the file
        // this run resolved, so every phase uses the same configuration.
        let agents_path = agents_path.or_else(|| {
            loaded.source.path().map(|p| {
                if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    start_dir.join(p)
                }
            })
        });
        let ports = LivePorts {
            agents_path,
            agents: loaded.config,
            detector,
            overrides,
            cascade_dir,
            template,
            log_limit: project.resources.log_limit(),
            prd_spend: Mutex::new(HashMap::new()),
        };
        Resolver::new(&ports.agents, &ports.detector, ports.overrides.clone())
            .check_overrides()
            .map_err(|e| MegaError::Agents(e.to_string()))?;
        Ok(ports)
    }
}

impl LivePorts {
    /// Sends every feature's story attempts to `executor` (the fleet's
    /// coordinator); `None`: they run here.
    pub fn set_executor(&mut self, executor: Option<crate::executor::ExecutorHandle>) {
        self.template.executor = executor;
    }
}

impl MegaPorts for LivePorts {
    fn check_prd(&self, path: &Path) -> PrdCheck {
        cascade_planning::check::check_prd(path)
    }

    async fn write_prd(
        &self,
        feature: &str,
        worktree: &Path,
        attempt: u32,
        prompt: &str,
        prd_path: &Path,
        cancel: &CancelToken,
    ) -> Result<(), AuthorError> {
        let story =
            cascade_plan::Story::new(format!("prd-{feature}"), format!("PRD for {feature}"));
        let resolver = Resolver::new(&self.agents, &self.detector, self.overrides.clone());
        let assignment = resolver
            .resolve(&story, Phase::Planning)
            .map_err(|e| AuthorError::Unavailable(e.to_string()))?;
        let Some(agent) = self.agents.agent(&assignment.agent) else {
            return Err(AuthorError::Unavailable(format!(
                "agent '{}' is not configured",
                assignment.agent
            )));
        };
        let mut req = AgentRequest::new(
            format!("prd-{feature}"),
            attempt,
            Phase::Planning,
            prompt,
            worktree,
            self.cascade_dir.join(super::run::MEGA_DIR),
        );
        req.log_limit = self.log_limit;
        // The feature's design doc goes next to its PRD (see prd_gen).
        let design_doc = prd_path.with_file_name("design_doc.json");
        req.extra_env
            .push(("CASCADE_PRD_PATH".into(), prd_path.display().to_string()));
        req.extra_env.push((
            "CASCADE_DESIGN_DOC_PATH".into(),
            design_doc.display().to_string(),
        ));
        // An api agent writes these two files and nothing else.
        req.tools.write_only = Some(vec![prd_path.to_path_buf(), design_doc]);
        let (stop, _link) = self.agent_stop(cancel);
        let ran = execute(agent, req, |_| {}, &stop).await;
        if let Ok(run) = &ran {
            self.charge_prd(feature, agent, run);
        }
        match ran {
            Ok(run) if run.outcome.cancelled => Err(AuthorError::Cancelled),
            Ok(run) if run.success() => Ok(()),
            Ok(run) => Err(AuthorError::Failed(format!(
                "agent '{}' {} (log: {}){}",
                run.agent,
                run.outcome.describe(),
                run.log_path.display(),
                excerpt(&run.outcome.output_excerpt(800))
            ))),
            Err(
                e @ (ExecError::Unavailable { .. }
                | ExecError::NotExecutable { .. }
                | ExecError::MissingKey { .. }),
            ) => Err(AuthorError::Unavailable(e.to_string())),
            Err(e) => Err(AuthorError::Failed(e.to_string())),
        }
    }

    async fn run_feature(
        &self,
        run: FeatureRun,
        events: EventSink,
        cancel: CancelToken,
    ) -> FeatureOutcome {
        let state_path = crate::store::db_path(&run.state_dir);
        let mut config = EngineConfig::new(&run.worktree, &run.prd);
        config.agents_path = self.agents_path.clone();
        config.target_branch = Some(run.branch.clone());
        config.feature = Some(run.feature.clone());
        config.progress_path = Some(run.state_dir.join("progress.txt"));
        // Prompts, agent logs and gate results of its own: story ids repeat
        // across features, and features run at the same time.
        config.artifacts_dir = Some(run.state_dir.clone());
        config.take_lock = false;
        let resume = run.resume && crate::store::exists(&state_path);
        config.state_path = Some(state_path);
        let mut options = self.template.clone();
        options.parallel = run.parallel.max(1);
        options.slots = Some(run.slots);
        options.pool_part = Some(run.feature.clone());
        options.resume = resume;
        options.pause = Pause::Never;
        // The run's steering, scoped to this feature's engine.
        options.steering = self
            .template
            .steering
            .as_ref()
            .map(|s| s.for_feature(&run.feature));
        match Engine::new(config).run(options, events, &cancel).await {
            Ok(summary) => FeatureOutcome {
                status: summary.status,
                stories: summary.counts,
                failures: summary
                    .stories
                    .iter()
                    .filter(|s| s.status == "failed" || s.status == "blocked")
                    .map(|s| match &s.error {
                        Some(e) => format!("{} {}: {e}", s.story, s.status),
                        None => format!("{} {}", s.story, s.status),
                    })
                    .collect(),
                error: None,
            },
            Err(e) => FeatureOutcome {
                status: crate::events::RunStatus::Failed,
                stories: StoryCounts::default(),
                failures: vec![],
                error: Some(e.to_string()),
            },
        }
    }

    fn take_prd_charge(&self, feature: &str) -> Option<AgentCharge> {
        let mut spend = self.prd_spend.lock().ok()?;
        spend.get_mut(feature).and_then(|(_, latest)| latest.take())
    }

    fn prior_prd_spend(&self, feature: &str, spend: Spend) {
        if let Ok(mut all) = self.prd_spend.lock() {
            all.entry(feature.to_string()).or_default().0 = spend;
        }
        if let Some(pools) = &self.template.pools {
            pools.budget.record(&prd_part(feature), spend);
        }
    }

    fn budget_exhausted(&self) -> Option<String> {
        let pools = self.template.pools.as_ref()?;
        pools.budget.exhausted().map(|e| e.message)
    }

    fn prior_spend(&self, feature: &str, state_file: &Path) {
        let (Some(pools), Ok(Some(state))) = (
            self.template.pools.as_ref(),
            crate::state::RunState::load(state_file),
        ) else {
            return;
        };
        pools
            .budget
            .record(feature, crate::control::budget::spend(&state, None));
    }

    async fn target_gates(&self, dir: &Path, cancel: &CancelToken) -> Result<GatesVerdict, String> {
        let set = cascade_gates::GateSet::resolve(None, &self.cascade_dir, dir)
            .map_err(|e| e.to_string())?;
        if !set.enabled || set.gates.is_empty() {
            return Ok(GatesVerdict {
                passed: true,
                summary: String::new(),
            });
        }
        // The run's remote cache too (a store that cannot be reached only
        // costs the remote tier, as in the feature engines).
        let remote = cascade_gates::RemoteSettings::resolve(
            &self.template.remote_cache,
            set.remote.as_ref(),
        )
        .ok()
        .flatten()
        .and_then(|s| cascade_gates::RemoteCache::connect(s).ok());
        let cache = cascade_gates::GateCache::open(&self.cascade_dir).with_remote(remote);
        let opts = cascade_gates::RunOptions {
            workdir: dir.to_path_buf(),
            use_cache: self.template.use_gate_cache,
            ..Default::default()
        };
        let report = cascade_gates::run_gates(&set, &opts, &cache, |_| {}, cancel).await;
        Ok(GatesVerdict {
            passed: report.passed,
            summary: if report.passed {
                report.summary_line()
            } else {
                report.summary_for_prompt(10)
            },
        })
    }
}

impl LivePorts {
    /// What a PRD agent is stopped by: the run's `cancel` (Ctrl-C), and the
    /// budget pool's hard stop, fired when the run's budget runs out under
    /// `--hard-budget` (by this feature's PRD agent, another's, or a story's
    /// agent), as a story's agent is. The link lives as long as the guard.
    fn agent_stop(&self, cancel: &CancelToken) -> (CancelToken, cascade_process::AbortOnDrop) {
        let stop = CancelToken::new();
        let (run, agent) = (cancel.clone(), stop.clone());
        let pool = self.template.pools.as_ref().map(|p| p.budget.stop_token());
        let link = tokio::spawn(async move {
            match pool {
                Some(pool) => tokio::select! {
                    _ = run.cancelled() => {}
                    _ = pool.cancelled() => {}
                },
                None => run.cancelled().await,
            }
            agent.cancel();
        });
        (stop, cascade_process::AbortOnDrop(link))
    }

    /// Prices a PRD agent call (reported cost, else its tokens at the
    /// model's price) and charges it to the run's budget under the
    /// feature's PRD part; an agent that ran and said nothing is unknown
    /// spend, as for a story's agent. The charge that exhausts the run's
    /// budget under `--hard-budget` stops every running agent of the run
    /// (the other features' PRD agents and story agents).
    fn charge_prd(&self, feature: &str, def: &cascade_agents::AgentDef, run: &AgentRun) {
        let usage = run.usage.as_ref();
        let cost = usage
            .and_then(|u| self.agents.prices.cost(def, u))
            .map(|(usd, _)| usd);
        let Ok(mut all) = self.prd_spend.lock() else {
            return;
        };
        let (spend, latest) = all.entry(feature.to_string()).or_default();
        match cost {
            Some(usd) => spend.known_usd += usd,
            None => spend.unknown += 1,
        }
        let exhausted = self.template.pools.as_ref().and_then(|pools| {
            let e = pools.budget.charge(&prd_part(feature), *spend)?;
            if pools.budget.budget.hard {
                pools.budget.stop_token().cancel();
            }
            Some(e)
        });
        *latest = Some(AgentCharge {
            agent: run.agent.clone(),
            cost_usd: cost,
            input_tokens: usage.map(|u| u.input_tokens),
            output_tokens: usage.map(|u| u.output_tokens),
            exhausted,
        });
    }
}

fn excerpt(text: &str) -> String {
    let t = text.trim();
    if t.is_empty() {
        String::new()
    } else {
        format!(": {t}")
    }
}
