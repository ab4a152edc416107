//! What a run is asked to do: [`EngineConfig`] (where: repository, plan,
//! branch, state files) and [`RunOptions`] (how: agents, retries,
//! parallelism, schedule, modes, pausing), plus the project's worktree setup
//! from `.cascade/config.json`.
//!
//! A mega-plan run reuses the engine inside a feature worktree by giving the
//! feature's directory as `project_root`, its branch as `target_branch`, a
//! `feature` namespace for story branches, its own state/progress paths and
//! `take_lock: false` (the mega run holds the repository's lock).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::retry::RetryPolicy;
use crate::scheduler::Discipline;

/// Where a run happens.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The directory cascade runs in (a worktree root or a directory inside one).
    pub project_root: PathBuf,
    /// The PRD to run (relative paths are relative to `project_root`).
    pub prd_path: PathBuf,
    /// `--agents PATH`.
    pub agents_path: Option<PathBuf>,
    /// The branch stories merge into; `None`: the branch checked out at `project_root`.
    pub target_branch: Option<String>,
    /// Namespace of story branches (`cascade/<feature>.<story>`); `None` for a plain run.
    pub feature: Option<String>,
    /// The run database; `None`: `<.cascade>/cascade.db`.
    pub state_path: Option<PathBuf>,
    /// progress.txt; `None`: `<project_root>/progress.txt`.
    pub progress_path: Option<PathBuf>,
    /// Where agent prompts and logs go (`prompts/`, `logs/`); `None`: `.cascade/`.
    /// Feature runs of a mega-plan give their own, as story ids repeat across features.
    pub artifacts_dir: Option<PathBuf>,
    /// Take `.cascade/lock` for the run (false when a caller holds it).
    pub take_lock: bool,
    /// Files cascade writes for itself, kept out of git through `info/exclude`.
    pub excluded: Vec<String>,
}

/// cascade's own files at a repository root, never part of the user's changes.
pub const OWN_FILES: &[&str] = &[
    "/.cascade/",
    "/prd.json",
    "/mega-plan.json",
    "/progress.txt",
    "/findings.md",
    "/mega-findings.md",
    "/design_doc.json",
];

impl EngineConfig {
    /// A plain run of `prd_path` in `project_root`.
    pub fn new(project_root: impl Into<PathBuf>, prd_path: impl Into<PathBuf>) -> EngineConfig {
        EngineConfig {
            project_root: project_root.into(),
            prd_path: prd_path.into(),
            agents_path: None,
            target_branch: None,
            feature: None,
            state_path: None,
            progress_path: None,
            artifacts_dir: None,
            take_lock: true,
            excluded: OWN_FILES.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The PRD path, resolved against the project root.
    pub fn prd_file(&self) -> PathBuf {
        if self.prd_path.is_absolute() {
            self.prd_path.clone()
        } else {
            self.project_root.join(&self.prd_path)
        }
    }
}

/// When the run stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Until every story is complete or out of retries.
    UntilComplete,
    /// After this many batches (scheduling rounds).
    MaxIterations(u32),
    /// After the current batch.
    BatchComplete,
}

/// Asks whether to run the next batch: (1-based next batch, batches, its story ids) -> go on?
pub type ConfirmFn = Arc<dyn Fn(usize, usize, &[String]) -> bool + Send + Sync>;

/// What happens at a batch boundary when batches are not run automatically.
#[derive(Clone, Default)]
pub enum Pause {
    /// Run every batch (`--auto-run`, `--yes`).
    #[default]
    Never,
    /// Stop after one batch (no terminal to ask on).
    AfterBatch,
    /// Ask before each next batch: called with the 1-based number of the next
    /// batch, the number of batches and its story ids; `true` continues.
    Confirm(ConfirmFn),
}

impl std::fmt::Debug for Pause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pause::Never => f.write_str("Never"),
            Pause::AfterBatch => f.write_str("AfterBatch"),
            Pause::Confirm(_) => f.write_str("Confirm(..)"),
        }
    }
}

/// How a run goes.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `--agent`: this agent for every story and phase.
    pub agent: Option<String>,
    /// `--impl-agent`.
    pub impl_agent: Option<String>,
    /// `--retry-agent`.
    pub retry_agent: Option<String>,
    /// `--no-fallback`.
    pub no_fallback: bool,
    /// `--review-agent`: the agent that reviews each story.
    pub review_agent: Option<String>,
    /// `--review[=strict]`; `None`: as prd.json says (`verification_gate`, `review`).
    pub review: Option<ReviewMode>,
    /// `--prove-tests` / `--no-prove-tests`: run a story's new or changed
    /// tests against its base commit with only the test changes applied; a
    /// test that passes there is a finding. `None`: on where the test census
    /// knows a gate's runner (unless `.cascade/config.json` says
    /// `prove_tests.enabled: false`), and always with a strict review.
    pub prove_tests: Option<bool>,
    pub retry: RetryPolicy,
    pub parallel: usize,
    pub schedule: Discipline,
    pub fail_fast: bool,
    pub allow_dirty: bool,
    pub mode: Mode,
    pub pause: Pause,
    /// Continue the previous run (keep its id and attempt history).
    pub resume: bool,
    /// The options to record in the run state for `resume`, as the caller
    /// (the binary, which owns the flags) writes them; the engine keeps them
    /// without reading them. `None`: the state keeps what it has.
    pub remember: Option<serde_json::Value>,
    /// Use the gate cache.
    pub use_gate_cache: bool,
    /// `--remote-cache` / `--remote-cache-mode` (the environment and
    /// gates.json fill in what they leave out).
    pub remote_cache: cascade_gates::RemoteRequest,
    /// Overrides every agent's own timeout.
    pub agent_timeout: Option<Duration>,
    /// Bytes of agent output kept for the retry prompt.
    pub excerpt_bytes: usize,
    /// A limit shared with other engines (a mega run gives every feature
    /// engine the same semaphore of `--parallel` permits, so features x
    /// stories never exceed it and a feature that finishes early leaves its
    /// slots to the others). A story holds a permit while its worktree is
    /// prepared, its agent runs and its gates run; not during the retry
    /// backoff nor while it waits for the (serial) merge queue. `None`: only
    /// `parallel` applies.
    pub slots: Option<Arc<tokio::sync::Semaphore>>,
    /// `--gate-jobs`: gate processes at once across the run's stories
    /// (`None`: half the cores, at least one).
    pub gate_jobs: Option<usize>,
    /// The memory guard's threshold in MiB (`None`: `.cascade/config.json`
    /// `resources.min_available_memory_mb`, else 512; 0 turns it off).
    pub min_available_memory_mb: Option<u64>,
    /// `--max-cost`, `--max-story-cost`, `--max-duration`, `--hard-budget`.
    pub budget: crate::control::budget::Budget,
    /// `--no-resolve`: a merge conflict fails the attempt without asking an
    /// agent to resolve it.
    pub no_resolve: bool,
    /// `--integration`: whether a merge that is not a fast-forward is gated
    /// as merged before the target moves.
    pub integration: Integration,
    /// `--base-failures`: what a required gate that already fails on the
    /// base does (stop the run before any agent, or judge by the census).
    pub base_failures: BaseFailures,
    /// Gate slots, rate limits and the run budget shared with other engines
    /// (a mega run gives every feature engine the same, see
    /// [`crate::control::RunPools`]). `None`: the run makes its own.
    pub pools: Option<crate::control::RunPools>,
    /// This engine's name in `pools`' budget (a feature's name).
    pub pool_part: Option<String>,
    /// Where attempts run (`None`: here, in local worktrees; the fleet's
    /// coordinator sets one, see the `executor` module).
    pub executor: Option<crate::executor::ExecutorHandle>,
    /// Requests from outside the run (pause, resume, cancel, retry), see
    /// `control::steer`. `None`: nobody steers it.
    pub steering: Option<crate::control::steer::Steering>,
    /// `--sandbox`; `None`: the base's `sandbox.mode`, else best-effort.
    pub sandbox: Option<crate::confine::SandboxMode>,
    /// `--race`, `--race-until`, `--race-keep` (see [`crate::race`]).
    pub race: crate::race::RaceOptions,
    /// `--route`: how stories find their agent.
    pub route: Route,
    /// With [`Route::Learned`]: the routes the run database gives, read by
    /// [`crate::Engine::learned_routes`] before the run is checked.
    pub learned: Option<cascade_agents::LearnedRoutes>,
}

/// `--route configured|learned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Route {
    /// agents.json's chain (and the command line) decide.
    #[default]
    Configured,
    /// Each story type goes first to the agent this repository's history
    /// says does best on it (see `cascade_agents::learned`).
    Learned,
}

impl RunOptions {
    /// Waits for a permit of the shared limit. `Ok(None)` without one;
    /// `Err(())` when `cancel` fires first (or the semaphore was closed).
    pub(crate) async fn acquire_slot(
        &self,
        cancel: &cascade_process::CancelToken,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ()> {
        let Some(slots) = &self.slots else {
            return Ok(None);
        };
        tokio::select! {
            permit = Arc::clone(slots).acquire_owned() => permit.map(Some).map_err(|_| ()),
            _ = cancel.cancelled() => Err(()),
        }
    }
}

/// How the merge queue treats a story whose branch is not a fast-forward
/// of the target's tip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Integration {
    /// The merge is built in a scratch worktree and its required gates run
    /// on it; only a passing merge moves the target (failure `integration`).
    #[default]
    Gate,
    /// The story's own gates are trusted: the merge moves the target as is.
    Trust,
}

impl Integration {
    pub fn as_str(self) -> &'static str {
        match self {
            Integration::Gate => "gate",
            Integration::Trust => "trust",
        }
    }
}

/// What a required gate failing on the run's base does (`--base-failures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BaseFailures {
    /// The run stops before any agent runs (exit 2), naming the gate.
    #[default]
    Stop,
    /// The run goes on; that gate judges each story by its test census: it
    /// fails a story only for a test that passed on the base and no longer
    /// passes, or a test that fails and did not fail on the base.
    Known,
}

impl BaseFailures {
    pub fn as_str(self) -> &'static str {
        match self {
            BaseFailures::Stop => "stop",
            BaseFailures::Known => "known",
        }
    }
}

/// Whether a second agent reviews each story after its gates pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewMode {
    Off,
    /// A review without a `<review>` marker is a warning and passes.
    On,
    /// A review without a marker fails the attempt.
    Strict,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            agent: None,
            impl_agent: None,
            retry_agent: None,
            no_fallback: false,
            review_agent: None,
            review: None,
            prove_tests: None,
            retry: RetryPolicy::default(),
            parallel: 4,
            schedule: Discipline::Batch,
            fail_fast: false,
            allow_dirty: false,
            mode: Mode::UntilComplete,
            pause: Pause::Never,
            resume: false,
            remember: None,
            use_gate_cache: true,
            remote_cache: Default::default(),
            agent_timeout: None,
            excerpt_bytes: 4000,
            slots: None,
            gate_jobs: None,
            min_available_memory_mb: None,
            budget: crate::control::budget::Budget::default(),
            no_resolve: false,
            integration: Integration::Gate,
            base_failures: BaseFailures::Stop,
            pools: None,
            pool_part: None,
            executor: None,
            steering: None,
            sandbox: None,
            race: Default::default(),
            route: Route::Configured,
            learned: None,
        }
    }
}

/// `.cascade/config.json`: project settings of the engine.
///
/// ```json
/// {"worktree": {"copy": [".env"], "setup": [["npm", "ci"]]}}
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct ProjectConfig {
    #[serde(default)]
    pub worktree: WorktreeSetup,
    #[serde(default)]
    pub resources: ResourceSettings,
    #[serde(default)]
    pub commit: CommitSettings,
    #[serde(default)]
    pub prove_tests: ProveSettings,
    /// What a story's processes may touch (see the `confine` module). The
    /// copy that applies is the story's base commit's; this one is checked.
    #[serde(default)]
    pub sandbox: crate::confine::SandboxSettings,
    /// Unknown fields of the file, each naming the closest known one (they
    /// are ignored).
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// `resources` in `.cascade/config.json`: the machine's limits.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct ResourceSettings {
    /// Do not start an agent or gate while less memory than this is
    /// available (MiB; default 512; 0 turns the guard off).
    #[serde(default)]
    pub min_available_memory_mb: Option<u64>,
    /// Share Cargo target directories between worktrees (default true).
    #[serde(default)]
    pub shared_build_cache: Option<bool>,
    /// The size limit of each agent log in MiB (default 16; 0: no limit).
    /// Past it the log keeps its first and last halves with a marker.
    #[serde(default)]
    pub max_log_mb: Option<u64>,
}

impl ResourceSettings {
    /// The limit of each agent log.
    pub fn log_limit(&self) -> cascade_process::LogLimit {
        self.max_log_mb
            .map(cascade_process::LogLimit::from_mib)
            .unwrap_or_default()
    }
}

/// `commit` in `.cascade/config.json`: what a story's commit may hold.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct CommitSettings {
    /// The size limit of one committed file in MiB (default 5; 0: none).
    /// A larger file the story's `files` does not name fails the attempt.
    #[serde(default)]
    pub max_file_mb: Option<u64>,
}

impl CommitSettings {
    /// The limit in MiB (0: none).
    pub fn max_file_mb(&self) -> u64 {
        self.max_file_mb
            .unwrap_or(cascade_verify::build_output::DEFAULT_MAX_FILE_MB)
    }
}

/// `prove_tests` in `.cascade/config.json`: proving a story's new and
/// changed tests on its base, on by default where the test census knows
/// the gates' runner.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct ProveSettings {
    /// `false` turns the default off (`--prove-tests` still proves).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Limit of each runner's run on the base in seconds (default 300);
    /// past it the tests are not proven (a notice, not the story's fault).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

impl ProveSettings {
    /// Default of [`ProveSettings::timeout_seconds`].
    pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(
            self.timeout_seconds
                .unwrap_or(Self::DEFAULT_TIMEOUT_SECONDS)
                .max(1),
        )
    }
}

/// How a fresh story worktree is prepared before the agent runs.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct WorktreeSetup {
    /// Files (relative to the project root) copied into the worktree when they
    /// exist (untracked files such as `.env` are not in a fresh checkout).
    #[serde(default)]
    pub copy: Vec<String>,
    /// Commands run in the worktree, in order; each an argv list (never a shell string).
    #[serde(default)]
    pub setup: Vec<Vec<String>>,
    /// Timeout of each setup command in seconds (default 600).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

/// `.cascade/config.json` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ProjectConfigError {
    #[error("cannot read '{}': {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("'{}' is invalid: {source}; expected {{\"worktree\": {{\"copy\": [paths], \"setup\": [[argv...]]}}}}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("'{}': worktree.setup[{index}] is an empty command; give an argv list like [\"npm\", \"ci\"]", path.display())]
    EmptyCommand { path: PathBuf, index: usize },
    #[error("'{}': worktree.copy entry '{entry}' must be a relative path inside the project", path.display())]
    BadCopy { path: PathBuf, entry: String },
    #[error("'{}': sandbox.{key} entry '{entry}' must be an absolute path or start with '~/'", path.display())]
    BadSandboxPath {
        path: PathBuf,
        key: &'static str,
        entry: String,
    },
}

impl ProjectConfig {
    /// The unknown fields of `<cascade_dir>/config.json` (what
    /// [`ProjectConfig::warnings`] holds), also when the file is invalid.
    pub fn unknown_field_warnings(cascade_dir: &Path) -> Vec<String> {
        let path = cascade_dir.join("config.json");
        std::fs::read_to_string(&path)
            .map(|text| unknown_fields(&text, &path))
            .unwrap_or_default()
    }

    /// Reads `<cascade_dir>/config.json`; the default when there is none.
    pub fn load(cascade_dir: &Path) -> Result<ProjectConfig, ProjectConfigError> {
        let path = cascade_dir.join("config.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(ProjectConfig::default())
            }
            Err(source) => return Err(ProjectConfigError::Read { path, source }),
        };
        let mut cfg: ProjectConfig =
            serde_json::from_str(&text).map_err(|source| ProjectConfigError::Parse {
                path: path.clone(),
                source,
            })?;
        cfg.warnings = unknown_fields(&text, &path);
        for (index, cmd) in cfg.worktree.setup.iter().enumerate() {
            if cmd.first().is_none_or_empty() {
                return Err(ProjectConfigError::EmptyCommand { path, index });
            }
        }
        if let Err((key, entry)) = cfg.sandbox.check() {
            return Err(ProjectConfigError::BadSandboxPath { path, key, entry });
        }
        for entry in &cfg.worktree.copy {
            let p = Path::new(entry);
            if p.is_absolute()
                || p.components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return Err(ProjectConfigError::BadCopy {
                    path,
                    entry: entry.clone(),
                });
            }
        }
        Ok(cfg)
    }
}

/// The unknown fields of config.json (top level, `worktree`, `resources`, `commit`, `sandbox`),
/// against the fields their serde types read.
fn unknown_fields(text: &str, path: &Path) -> Vec<String> {
    use cascade_plan::strict::{fields_of, unknown_keys};
    let Ok(serde_json::Value::Object(top)) = serde_json::from_str(text) else {
        return Vec::new();
    };
    let mut found = unknown_keys(&top, "", fields_of::<ProjectConfig>(), &[]);
    let sections: [(&str, &[&str]); 5] = [
        ("worktree", fields_of::<WorktreeSetup>()),
        ("resources", fields_of::<ResourceSettings>()),
        ("commit", fields_of::<CommitSettings>()),
        ("prove_tests", fields_of::<ProveSettings>()),
        ("sandbox", fields_of::<crate::confine::SandboxSettings>()),
    ];
    for (name, known) in sections {
        if let Some(obj) = top.get(name).and_then(serde_json::Value::as_object) {
            found.extend(unknown_keys(obj, name, known, &[]));
        }
    }
    found
        .into_iter()
        .map(|w| format!("{}: {w}", path.display()))
        .collect()
}

trait EmptyCheck {
    fn is_none_or_empty(&self) -> bool;
}

impl EmptyCheck for Option<&String> {
    fn is_none_or_empty(&self) -> bool {
        self.map_or(true, |s| s.trim().is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_config_loads_and_validates() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(
            ProjectConfig::load(tmp.path()).unwrap(),
            ProjectConfig::default()
        );
        std::fs::write(
            tmp.path().join("config.json"),
            r#"{"worktree": {"copy": [".env"], "setup": [["npm", "ci"]]}}"#,
        )
        .unwrap();
        let cfg = ProjectConfig::load(tmp.path()).unwrap();
        assert_eq!(cfg.worktree.copy, vec![".env"]);
        assert_eq!(cfg.worktree.setup, vec![vec!["npm", "ci"]]);
        std::fs::write(
            tmp.path().join("config.json"),
            r#"{"worktree": {"setup": [[]]}}"#,
        )
        .unwrap();
        assert!(ProjectConfig::load(tmp.path())
            .unwrap_err()
            .to_string()
            .contains("empty command"));
        std::fs::write(
            tmp.path().join("config.json"),
            r#"{"worktree": {"copy": ["../x"]}}"#,
        )
        .unwrap();
        assert!(ProjectConfig::load(tmp.path()).is_err());
    }
}
