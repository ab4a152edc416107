//! Looking into one story of a run from a terminal: `cascade show` ([`show`])
//! and `cascade logs` ([`logs`]).
//!
//! Both name a story as `STORY` or, in a mega run, `FEATURE/STORY`, and read
//! it from the run state the engine writes (`.cascade/cascade.db`, or a
//! feature's `.cascade/mega/features/<name>/cascade.db`) and the artifacts
//! beside it (agent logs, prompts, gate results). [`locate`] is the one
//! place that turns such a name into the story's record; an id no state
//! knows is bad input (exit 2) naming it and the closest ids.

pub mod logs;
pub mod show;

use std::path::{Path, PathBuf};

use cascade_engine::lock::{LockHolder, RunLock};
use cascade_engine::state::{RunState, StoryState};

use super::Failure;

/// A story found in a run's state, with where its artifacts are.
pub struct Located {
    /// The run state's run (single run, or the feature's engine of a mega run).
    pub state: RunState,
    /// Position of the story in `state.stories`.
    pub index: usize,
    /// The feature of a mega run the story belongs to.
    pub feature: Option<String>,
    /// Where the engine kept the story's logs, prompts and gate results.
    pub artifacts: PathBuf,
    /// Any directory of the repository (for git).
    pub repo: PathBuf,
    /// The process running the run now, if one is.
    pub live: Option<LockHolder>,
}

impl Located {
    pub fn story(&self) -> &StoryState {
        &self.state.stories[self.index]
    }

    /// `STORY` or `FEATURE/STORY`, as the user names it.
    pub fn name(&self) -> String {
        match &self.feature {
            Some(f) => format!("{f}/{}", self.story().id),
            None => self.story().id.clone(),
        }
    }

    /// Whether the run that owns the story is going on (a live lock holder
    /// and a state that says running).
    pub fn running(&self) -> bool {
        self.live.is_some() && self.state.status == cascade_engine::state::RunPhase::Running
    }

    /// Reads the state again (a follower's next look), keeping the story's place.
    pub fn reload(&mut self, state_path: &Path) -> Result<(), Failure> {
        if let Some(state) = load(state_path)? {
            if let Some(i) = state.position(&self.story().id) {
                self.state = state;
                self.index = i;
            }
        }
        self.live = RunLock::holder(&cascade_dir(&self.repo)?.join("lock"));
        Ok(())
    }

    /// The run database the story was read from.
    pub fn state_path(&self) -> PathBuf {
        cascade_engine::store::db_path(&self.artifacts)
    }
}

/// The repository's `.cascade/` directory, from any directory in it.
fn cascade_dir(cwd: &Path) -> Result<PathBuf, Failure> {
    Ok(cascade_git::RepoPaths::discover(cwd)
        .map_err(Failure::usage)?
        .cascade_dir())
}

fn load(path: &Path) -> Result<Option<RunState>, Failure> {
    RunState::load(path).map_err(Failure::usage)
}

/// Finds story `name` (`STORY` or `FEATURE/STORY`) in the run of the
/// repository containing the current directory.
pub fn locate(name: &str) -> Result<Located, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(anyhow::anyhow!("cannot read the current directory: {e}")))?;
    let dir = cascade_dir(&cwd)?;
    let live = RunLock::holder(&dir.join("lock"));
    let found = |state: RunState, index, feature, artifacts| Located {
        state,
        index,
        feature,
        artifacts,
        repo: cwd.clone(),
        live: live.clone(),
    };
    let single = match load(&cascade_engine::store::db_path(&dir))? {
        Some(state) => match state.position(name) {
            Some(i) => return Ok(found(state, i, None, dir)),
            None => Some(state),
        },
        None => None,
    };
    let features = feature_states(&dir)?;
    // `FEATURE/STORY`, or a plain id that one feature holds.
    let (feature, id) = match name.split_once('/') {
        Some((f, id)) => (Some(f), id),
        None => (None, name),
    };
    for (fname, state, artifacts) in features.iter() {
        if feature.is_some_and(|f| f != fname) {
            continue;
        }
        if let Some(i) = state.position(id) {
            return Ok(found(
                state.clone(),
                i,
                Some(fname.clone()),
                artifacts.clone(),
            ));
        }
    }
    if single.is_none() && features.is_empty() {
        return Err(Failure::usage(anyhow::anyhow!(
            "no run yet in this repository, so no story '{name}': start one with `cascade approve`"
        )));
    }
    Err(unknown(name, single.as_ref(), &features))
}

/// The features of a mega run with a state of their own: (name, state,
/// artifacts directory), in name order.
fn feature_states(cascade_dir: &Path) -> Result<Vec<(String, RunState, PathBuf)>, Failure> {
    let root = cascade_dir
        .join(cascade_engine::mega::run::MEGA_DIR)
        .join("features");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = entry.path();
        if let Some(state) = load(&cascade_engine::store::db_path(&dir))? {
            out.push((name, state, dir));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Most ids an unknown-story error lists when none is close.
const LISTED: usize = 8;

/// "unknown story 'x': did you mean 'y'?" (or the first ids the run has).
fn unknown(
    name: &str,
    single: Option<&RunState>,
    features: &[(String, RunState, PathBuf)],
) -> Failure {
    let mut known: Vec<String> = single
        .map(|s| s.stories.iter().map(|s| s.id.clone()).collect())
        .unwrap_or_default();
    for (f, state, _) in features {
        known.extend(state.stories.iter().map(|s| format!("{f}/{}", s.id)));
    }
    let hint = match cascade_plan::text::closest(name, known.iter().map(String::as_str)) {
        Some(k) => format!("did you mean '{k}'?"),
        None if known.is_empty() => "the run has no stories".to_string(),
        None => {
            let more = known.len().saturating_sub(LISTED);
            let first = known[..known.len().min(LISTED)].join(", ");
            match more {
                0 => format!("the run has: {first}"),
                n => format!("the run has: {first} (and {n} more; `cascade status` lists them)"),
            }
        }
    };
    Failure::usage(anyhow::anyhow!(
        "unknown story '{}': {hint}",
        super::report::printable_line(name)
    ))
}
