//! What `cascade validate` says about the files a run reads besides the plan:
//! agents.json, the gate config (`.cascade/gates.json` or the PRD's
//! `quality_gates`) and `.cascade/config.json`.
//!
//! Each file is read exactly as a run reads it (the same loaders), so what
//! validate reports is what a run would refuse (errors) or accept with a
//! note (warnings: unknown fields, each naming the closest known one).
//! When those pass, [`check_run_inputs`] asks the engine the question
//! `approve` and its dry run ask ([`Engine::check_inputs`]): verify.json,
//! the acceptance checks, the prompt context and the rest a run reads.

use std::path::Path;

use cascade_agents::AgentsConfig;
use cascade_engine::config::{ProjectConfig, RunOptions};
use cascade_engine::engine::Engine;
use cascade_gates::GateSet;

/// Errors and warnings, each one line of text.
#[derive(Debug, Default)]
pub struct Findings {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

impl Findings {
    fn add<T>(&mut self, result: Result<T, String>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors.push(e);
                None
            }
        }
    }
}

/// Checks agents.json (`--agents`, or the usual lookup from `cwd`), the gate
/// config and config.json of the repository containing `cwd`.
/// `quality_gates` is the PRD's section, when a PRD was read.
pub fn check(
    agents: Option<&Path>,
    cwd: &Path,
    quality_gates: Option<&serde_json::Value>,
) -> Findings {
    let mut f = Findings::default();
    match AgentsConfig::load(agents, cwd) {
        Ok(loaded) => {
            let source = loaded.source.to_string();
            f.warnings
                .extend(loaded.warnings.iter().map(|w| format!("{source}: {w}")));
        }
        Err(e) => {
            // An invalid file's unknown fields too (a typo is often why).
            if let cascade_agents::ConfigError::Invalid { file, warnings, .. } = &e {
                f.warnings
                    .extend(warnings.iter().map(|w| format!("{file}: {w}")));
            }
            f.errors.push(e.to_string());
        }
    }
    let root = cascade_git::RepoPaths::discover(cwd)
        .map(|p| p.main_root)
        .unwrap_or_else(|_| cwd.to_path_buf());
    let cascade_dir = root.join(cascade_git::repo::CASCADE_DIR);
    let gates = GateSet::resolve(quality_gates, &cascade_dir, cwd).map_err(|e| e.to_string());
    let _ = f.add(gates);
    f.warnings
        .extend(GateSet::unknown_field_warnings(quality_gates, &cascade_dir));
    match ProjectConfig::load(&cascade_dir) {
        Ok(project) => f.warnings.extend(project.warnings),
        Err(e) => {
            f.errors.push(e.to_string());
            f.warnings
                .extend(ProjectConfig::unknown_field_warnings(&cascade_dir));
        }
    }
    f
}

/// What refuses a run of the PRD at `prd` beyond the files [`check`]
/// reads, as `approve` finds it; `None` when a run would start (or the
/// plan cannot be prepared: [`check`] and the plan's own validation
/// report why).
pub fn check_run_inputs(g: &super::Global, cwd: &Path, prd: &Path) -> Option<String> {
    let engine = Engine::new(super::run_cmd::engine_config(g, cwd, prd.to_path_buf()));
    let prepared = engine.prepare().ok()?;
    engine
        .check_inputs(&prepared, &RunOptions::default())
        .err()
        .map(|e| e.to_string())
}
