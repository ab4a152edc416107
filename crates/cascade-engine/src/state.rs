//! The run state store: `.cascade/state.json`.
//!
//! One JSON document with a schema version, the run id, and per story its
//! status (pending | running | complete | failed | blocked), agent, every
//! attempt with its error and classification, branch, worktree and merge
//! commit. It is written atomically (temp file in the same directory,
//! rename), so a `kill -9` at any moment leaves either the old or the new
//! document, never half of one. A small plan's document is rewritten at
//! every transition; a large plan's transitions are appended to a journal
//! beside it (`state.journal`, see the `journal` module) and folded into
//! the document from time to time, so a transition costs the same at
//! 100,000 stories as at 10. [`RunState::load`] reads both: `cascade
//! status`, `cascade resume` and the dashboard see every transition.
//!
//! Stories are looked up by id through an index ([`cascade_plan::IdIndex`],
//! built on the first lookup), never by scanning the list.
//!
//! The document's shape is [`RunDoc`], over what is read of each story:
//! the whole record ([`StoryState`]; a [`RunState`] is what a run works
//! on), or a [`StoryBrief`] that borrows its strings from the file's text
//! ([`read_brief`]: `cascade status` reads a 100,000-story state without
//! making a million small strings of it).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use cascade_plan::{IdIndex, IndexStats};

use crate::events::{GateSummary, RunStatus, StoryCounts};

mod brief;
use crate::retry::FailureKind;
pub use brief::{AttemptTally, StoryBrief, Text};

/// Version of the document layout; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// Plans with more stories than this get a compact (unindented) state file,
/// and their transitions go to a journal (see the `journal` module).
pub const COMPACT_ABOVE: usize = 200;

/// Where a story stands in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoryStatus {
    Pending,
    Running,
    Complete,
    Failed,
    Blocked,
}

impl StoryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StoryStatus::Pending => "pending",
            StoryStatus::Running => "running",
            StoryStatus::Complete => "complete",
            StoryStatus::Failed => "failed",
            StoryStatus::Blocked => "blocked",
        }
    }
}

/// The state of a run, or of the last one, with every story's whole record.
pub type RunState = RunDoc<StoryState>;

/// A state document, with what is read of each story (`S`): the whole
/// record ([`RunState`]) or a [`StoryBrief`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunDoc<S> {
    pub schema_version: u32,
    pub run_id: String,
    /// The PRD that was run (as given).
    pub prd: String,
    /// The branch stories merge into.
    pub target_branch: String,
    /// The directory the run started in.
    pub project_root: String,
    /// running while a process works on it; otherwise how it ended.
    pub status: RunPhase,
    pub pid: u32,
    pub started_at: String,
    pub updated_at: String,
    /// The options the run was started with (`resume` continues with them),
    /// as the binary that owns the flags recorded them (an object keyed by
    /// option); absent in the files of older cascades and of runs started
    /// without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<serde_json::Value>,
    /// Agents put in a rate-limit cooldown by this run (the latest per agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cooldowns: Vec<CooldownRecord>,
    /// The generation of the journal that continues this document (0: none;
    /// see the `journal` module).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub journal: u64,
    /// In plan order. Add stories with [`RunState::story_mut`] and remove
    /// them with [`RunState::retain_stories`] (the index follows either way).
    pub stories: Vec<S>,
    /// The stories by id.
    #[serde(skip)]
    index: IdIndex,
    /// Where the record of each plan position is, when the records are
    /// not in the plan's order (see [`RunDoc::follow_plan_order`]).
    #[serde(skip)]
    order: PlanOrder,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The record positions of a plan's stories, in plan order (empty: the
/// records are in the plan's order). Only ever a hint: what it points at is
/// checked by id, so a stale one costs a lookup, never a wrong record; two
/// states are equal whatever their hints.
#[derive(Debug, Clone, Default)]
struct PlanOrder(Vec<u32>);

impl PartialEq for PlanOrder {
    fn eq(&self, _: &PlanOrder) -> bool {
        true
    }
}

impl PlanOrder {
    /// Where the record of plan position `i` most likely is.
    fn at(&self, i: usize) -> usize {
        self.0.get(i).map_or(i, |&p| p as usize)
    }
}

/// A story's record as a state document holds it, read whole or in part.
pub trait StoryRecord {
    fn id(&self) -> &str;
    fn status(&self) -> StoryStatus;
    /// A pending story's record (one new to the state).
    fn pending(id: String) -> Self;
}

impl StoryRecord for StoryState {
    fn id(&self) -> &str {
        &self.id
    }
    fn status(&self) -> StoryStatus {
        self.status
    }
    fn pending(id: String) -> Self {
        StoryState::new(id, StoryStatus::Pending)
    }
}

fn story_key<S: StoryRecord>(s: &S) -> &str {
    s.id()
}

/// An agent's rate-limit cooldown, as `cascade status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CooldownRecord {
    pub agent: String,
    /// RFC 3339 time the cooldown ends.
    pub until: String,
    /// Stories that may run the agent at once after it.
    pub concurrency: usize,
    /// The provider's words.
    pub message: String,
}

/// A run's overall status as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunPhase {
    Running,
    Completed,
    Failed,
    Interrupted,
    Paused,
    BudgetExhausted,
}

impl RunPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            RunPhase::Running => "running",
            RunPhase::Completed => "completed",
            RunPhase::Failed => "failed",
            RunPhase::Interrupted => "interrupted",
            RunPhase::Paused => "paused",
            RunPhase::BudgetExhausted => "budget_exhausted",
        }
    }
}

impl From<RunStatus> for RunPhase {
    fn from(s: RunStatus) -> Self {
        match s {
            RunStatus::Completed => RunPhase::Completed,
            RunStatus::Failed => RunPhase::Failed,
            RunStatus::Interrupted => RunPhase::Interrupted,
            RunStatus::Paused => RunPhase::Paused,
            RunStatus::BudgetExhausted => RunPhase::BudgetExhausted,
            RunStatus::Running => RunPhase::Running,
            // Only a mega run is closed, and only after it completed.
            RunStatus::Closed => RunPhase::Completed,
        }
    }
}

/// One story's record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoryState {
    pub id: String,
    pub status: StoryStatus,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub attempts: Vec<AttemptRecord>,
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub worktree: Option<String>,
    /// The story's own commit on its branch (last attempt).
    #[serde(default)]
    pub commit: Option<String>,
    /// The target-branch commit after merging (the merge or fast-forward tip).
    #[serde(default)]
    pub merge_commit: Option<String>,
    #[serde(default)]
    pub blocked_by: Vec<String>,
    #[serde(default)]
    pub error_type: Option<FailureKind>,
    #[serde(default)]
    pub error: Option<String>,
    /// Gate results of the last attempt that ran gates.
    #[serde(default)]
    pub gates: Vec<GateSummary>,
    /// What local verification found in the last attempt it checked
    /// (`file:line: [rule] message`; empty: nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verification: Vec<String>,
    /// What the story's `verify_allow` let go in that attempt (same form).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verification_allowed: Vec<String>,
    /// The last review of the story.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewRecord>,
}

/// A review's outcome, as kept in the state.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReviewRecord {
    pub agent: String,
    /// `pass` | `needs_revision` | `missing` (no marker)
    pub verdict: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub findings: String,
    /// Why the author reviewed its own work, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl StoryState {
    /// Attempts charged to the story: all but those its provider's rate
    /// limit ended (`rate_limited` is never counted as an attempt) and those
    /// an interruption ended (Ctrl-C, a killed run: the work was stopped,
    /// not judged). They stay in the history, numbered, with their logs.
    pub fn charged_attempts(&self) -> u32 {
        self.attempts
            .iter()
            .filter(|a| charged(a.error_type, a.outcome.as_deref()))
            .count() as u32
    }

    /// The record of attempt `number` (the latest one so numbered): the
    /// contestants of a race run at once, so the last record need not be
    /// the attempt at hand.
    pub fn attempt_mut(&mut self, number: u32) -> Option<&mut AttemptRecord> {
        self.attempts.iter_mut().rev().find(|a| a.attempt == number)
    }

    /// Marks the attempts that never finished as interrupted: the run that
    /// made them is gone (killed), so none of them is still going.
    pub fn close_unfinished_attempts(&mut self) {
        for a in self.attempts.iter_mut().filter(|a| a.outcome.is_none()) {
            a.outcome = Some(INTERRUPTED.to_string());
        }
    }
}

/// The outcome of an attempt an interruption ended.
pub const INTERRUPTED: &str = "interrupted";

/// Whether an attempt that ended so (`outcome` `None`: still going) is
/// charged to its story (see [`StoryState::charged_attempts`]).
fn charged(error_type: Option<FailureKind>, outcome: Option<&str>) -> bool {
    error_type != Some(FailureKind::RateLimited) && outcome != Some(INTERRUPTED)
}

/// One attempt of a story.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AttemptRecord {
    pub attempt: u32,
    pub agent: String,
    /// implementation | retry
    pub phase: String,
    pub started_at: String,
    #[serde(default)]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub pid: Option<u32>,
    /// passed | failed | interrupted (None while running)
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub error_type: Option<FailureKind>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub log: Option<String>,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// Whether `cost_usd` was estimated from the tokens at the price table
    /// (the agent reported none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_estimated: Option<bool>,
    /// The agent's session (its id, or an api agent's kept conversation),
    /// which a retry by the same api agent continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// What its processes were confined by: "landlock abi 7", or "none".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<String>,
}

impl AttemptRecord {
    /// An attempt that has just started: nothing known of it yet but its
    /// number, agent, phase and start time.
    pub fn started(attempt: u32, agent: String, phase: String, started_at: String) -> Self {
        AttemptRecord {
            attempt,
            agent,
            phase,
            started_at,
            finished_at: None,
            pid: None,
            outcome: None,
            error_type: None,
            error: None,
            duration_ms: None,
            log: None,
            input_tokens: None,
            output_tokens: None,
            cost_usd: None,
            cost_estimated: None,
            session_id: None,
            confinement: None,
        }
    }
}

/// Reading or writing the state file failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot {op} run state '{}': {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("run state '{}' is not valid JSON ({source}); delete it to start over", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("run state '{}' has schema version {found}, newer than this cascade understands ({SCHEMA_VERSION}); upgrade cascade", path.display())]
    NewerSchema { path: PathBuf, found: u32 },
}

impl<S: StoryRecord> RunDoc<S> {
    /// The story's record (indexed).
    pub fn story(&self, id: &str) -> Option<&S> {
        self.stories.get(self.position(id)?)
    }

    /// Where the story's record is in [`RunState::stories`].
    pub fn position(&self, id: &str) -> Option<usize> {
        self.index.position(&self.stories, id, story_key)
    }

    /// [`RunDoc::position`], looking at `hint` (a plan position) first: a
    /// state keeps its plan's order (a fresh one always, a resumed one
    /// unless the plan changed, and then [`RunDoc::follow_plan_order`] says
    /// where each plan position's record is), so the record is found there
    /// and the index is neither used nor built. Ids are unique in a state.
    pub fn position_hinted(&self, hint: usize, id: &str) -> Option<usize> {
        let at = self.order.at(hint);
        match self.stories.get(at) {
            Some(s) if s.id() == id => Some(at),
            _ => self.position(id),
        }
    }

    /// The story's record, looked for at `hint` first ([`RunDoc::position_hinted`]).
    pub fn story_hinted(&self, hint: usize, id: &str) -> Option<&S> {
        self.stories.get(self.position_hinted(hint, id)?)
    }

    /// [`RunDoc::position_or_add`], looking at `hint` first.
    pub fn position_hinted_or_add(&mut self, hint: usize, id: &str) -> usize {
        let at = self.order.at(hint);
        match self.stories.get(at) {
            Some(s) if s.id() == id => at,
            _ => self.position_or_add(id),
        }
    }

    /// Gives every story of the plan (`ids`, in plan order) a record (new
    /// ones pending, at the end) and remembers where each one is: a plan
    /// whose stories are in another order than the records looks each one
    /// up once here, and its plan positions find them after
    /// ([`RunDoc::position_hinted`]). The records keep their order.
    pub fn follow_plan_order<'i>(&mut self, ids: impl IntoIterator<Item = &'i str>) {
        self.order = PlanOrder(Vec::new());
        let mut order = Vec::new();
        let mut in_order = true;
        for (i, id) in ids.into_iter().enumerate() {
            let at = self.position_hinted_or_add(i, id);
            in_order &= at == i;
            order.push(at as u32);
        }
        if !in_order {
            self.order = PlanOrder(order);
        }
    }

    /// The story's record, added (pending) if it is new to the state.
    pub fn story_mut(&mut self, id: &str) -> &mut S {
        let i = self.position_or_add(id);
        &mut self.stories[i]
    }

    /// The position of the story's record, added (pending) if it is new.
    pub fn position_or_add(&mut self, id: &str) -> usize {
        if let Some(i) = self.index.position_mut(&self.stories, id, story_key) {
            return i;
        }
        self.stories.push(S::pending(id.to_string()));
        self.index.pushed(&self.stories, story_key);
        self.stories.len() - 1
    }

    /// Keeps only the stories `keep` says yes to.
    pub fn retain_stories(&mut self, keep: impl FnMut(&S) -> bool) {
        self.stories.retain(keep);
        self.index.clear();
        self.order = PlanOrder::default();
    }

    /// Puts a whole story record in place of the one with its id (or adds it).
    pub fn put_story(&mut self, record: S) {
        let i = self.position_or_add(record.id());
        self.stories[i] = record;
    }

    /// How the story index has been used (tests prove with it that a code
    /// path does no linear search per story).
    pub fn index_stats(&self) -> IndexStats {
        self.index.stats()
    }

    /// Stories by status (running counts as pending).
    pub fn counts(&self) -> StoryCounts {
        let mut c = StoryCounts::default();
        for s in &self.stories {
            match s.status() {
                StoryStatus::Complete => c.complete += 1,
                StoryStatus::Failed => c.failed += 1,
                StoryStatus::Blocked => c.blocked += 1,
                StoryStatus::Pending | StoryStatus::Running => c.pending += 1,
            }
        }
        c
    }

    /// Takes the run's own fields from `run` (a journal's run record),
    /// keeping the stories and the journal generation.
    pub(crate) fn take_run_fields(&mut self, mut run: RunDoc<S>) {
        run.journal = self.journal;
        std::mem::swap(&mut run.stories, &mut self.stories);
        std::mem::swap(&mut run.index, &mut self.index);
        std::mem::swap(&mut run.order, &mut self.order);
        *self = run;
    }
}

impl RunState {
    /// A fresh state for the given stories (all pending).
    pub fn new(
        run_id: String,
        prd: String,
        target_branch: String,
        project_root: String,
        story_ids: impl IntoIterator<Item = String>,
    ) -> RunState {
        let now = now_rfc3339();
        RunState {
            schema_version: SCHEMA_VERSION,
            run_id,
            prd,
            target_branch,
            project_root,
            status: RunPhase::Running,
            pid: std::process::id(),
            started_at: now.clone(),
            updated_at: now,
            options: None,
            cooldowns: Vec::new(),
            journal: 0,
            stories: story_ids
                .into_iter()
                .map(|id| StoryState::new(id, StoryStatus::Pending))
                .collect(),
            index: IdIndex::default(),
            order: PlanOrder::default(),
        }
    }

    /// Reads a state file and the journal that continues it (see the
    /// `journal` module); `Ok(None)` when there is none.
    pub fn load(path: &Path) -> Result<Option<RunState>, StateError> {
        RunState::load_with_offset(path).map(|(state, _)| state)
    }

    /// Writes the state atomically (temp + rename), stamping `updated_at`.
    pub fn save(&mut self, path: &Path) -> Result<(), StateError> {
        let bytes = self.snapshot(path)?;
        write_snapshot(path, &bytes)
    }

    /// Stamps `updated_at` and serializes the state (for writing outside a
    /// lock): indented for people to read, compact when the plan is large
    /// (the document is rewritten per transition; indentation nearly doubles it).
    pub fn snapshot(&mut self, path: &Path) -> Result<Vec<u8>, StateError> {
        self.updated_at = now_rfc3339();
        let bytes = if self.stories.len() > COMPACT_ABOVE {
            serde_json::to_vec(self)
        } else {
            serde_json::to_vec_pretty(self)
        };
        bytes.map_err(|e| StateError::Io {
            op: "serialize",
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })
    }
}

impl<S: StoryRecord + serde::de::DeserializeOwned> RunDoc<S> {
    /// [`RunState::load`] for any owned view of a story's record, and how
    /// far into the journal it read.
    pub(crate) fn load_with_offset(path: &Path) -> Result<(Option<RunDoc<S>>, u64), StateError> {
        let read = read_consistent(path, |document, journal| {
            let mut state = RunDoc::<S>::parse(path, document)?;
            Ok(match crate::journal::replay(journal, &mut state) {
                crate::journal::Replay::Current(offset) => Some((state, offset)),
                crate::journal::Replay::Newer => None,
            })
        })?;
        Ok(match read {
            Some((state, offset)) => (Some(state), offset),
            None => (None, 0),
        })
    }
}

impl<'a, S: StoryRecord + Deserialize<'a>> RunDoc<S> {
    /// Parses a state document's text (read from `path`, named in errors).
    pub(crate) fn parse(path: &Path, bytes: &'a [u8]) -> Result<RunDoc<S>, StateError> {
        let newer = |found: u64| StateError::NewerSchema {
            path: path.to_path_buf(),
            found: found.min(u64::from(u32::MAX)) as u32,
        };
        match cascade_plan::json::from_slice::<RunDoc<S>>(bytes) {
            Ok(st) if st.schema_version > SCHEMA_VERSION => {
                Err(newer(u64::from(st.schema_version)))
            }
            Ok(st) => Ok(st),
            Err(source) => {
                // A newer layout is named as such rather than reported as
                // a parse error.
                #[derive(Deserialize)]
                struct Version {
                    #[serde(default)]
                    schema_version: Option<u64>,
                }
                match serde_json::from_slice::<Version>(bytes) {
                    Ok(Version {
                        schema_version: Some(found),
                    }) if found > u64::from(SCHEMA_VERSION) => Err(newer(found)),
                    _ => Err(StateError::Parse {
                        path: path.to_path_buf(),
                        source,
                    }),
                }
            }
        }
    }
}

/// One consistent reading of the state at `path`: the document's text and
/// the journal's that continues it (empty when there is none), read in that
/// order and handed to `read`. The running process may fold the journal
/// into a new document between the two reads; `read` then answers `None`
/// (its replay found a newer journal) and both are read again, up to five
/// times, before the document is taken alone. `Ok(None)`: no document.
fn read_consistent<T>(
    path: &Path,
    mut read: impl FnMut(&[u8], &[u8]) -> Result<Option<T>, StateError>,
) -> Result<Option<T>, StateError> {
    for _ in 0..5 {
        let Some(document) = read_file(path)? else {
            return Ok(None);
        };
        let journal = read_file(&crate::journal::journal_path(path))
            .ok()
            .flatten()
            .unwrap_or_default();
        if let Some(done) = read(&document, &journal)? {
            return Ok(Some(done));
        }
    }
    match read_file(path)? {
        Some(document) => read(&document, &[]),
        None => Ok(None),
    }
}

/// A story's record left unread: [`RunHead`]'s stories.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unread;

impl<'de> Deserialize<'de> for Unread {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Unread, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Unread)
    }
}

impl StoryRecord for Unread {
    fn id(&self) -> &str {
        ""
    }
    fn status(&self) -> StoryStatus {
        StoryStatus::Pending
    }
    fn pending(_: String) -> Self {
        Unread
    }
}

/// A run as it started, its stories left unread: what `resume` reads
/// before anything else (how the run was started) from the state document
/// alone (the whole state is read by the engine, beside the plan).
pub type RunHead = RunDoc<Unread>;

impl RunHead {
    /// The head of the state at `path`; `Ok(None)` when there is none.
    /// Errors as [`RunState::load`]'s.
    pub fn load(path: &Path) -> Result<Option<RunHead>, StateError> {
        match read_file(path)? {
            Some(bytes) => RunHead::parse(path, &bytes).map(Some),
            None => Ok(None),
        }
    }
}

/// Reads the state at `path` and its journal as [`StoryBrief`]s borrowed
/// from their text, and hands them to `f`; `None` when there is no run yet.
/// What a reader that looks once needs, at a fraction of
/// [`RunState::load`]'s cost.
pub fn read_brief<T>(
    path: &Path,
    f: impl FnOnce(&RunDoc<StoryBrief<'_>>) -> T,
) -> Result<Option<T>, StateError> {
    let mut f = Some(f);
    read_consistent(path, |document, journal| {
        let mut state = RunDoc::<StoryBrief<'_>>::parse(path, document)?;
        Ok(match crate::journal::replay(journal, &mut state) {
            crate::journal::Replay::Current(_) => f.take().map(|f| f(&state)),
            crate::journal::Replay::Newer => None,
        })
    })
}

/// The bytes of the file at `path`; `None` when there is none.
fn read_file(path: &Path) -> Result<Option<Vec<u8>>, StateError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StateError::Io {
            op: "read",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Writes a serialized state atomically.
pub fn write_snapshot(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    // No fsync (see `Durability::Renamed`): the state is rewritten on every
    // transition and merged work is recovered from git anyway.
    cascade_fs::write_atomic(path, bytes, cascade_fs::Durability::Renamed).map_err(|source| {
        StateError::Io {
            op: "write",
            path: path.to_path_buf(),
            source,
        }
    })
}

impl StoryState {
    pub fn new(id: String, status: StoryStatus) -> StoryState {
        StoryState {
            id,
            status,
            agent: None,
            attempts: Vec::new(),
            branch: None,
            worktree: None,
            commit: None,
            merge_commit: None,
            blocked_by: Vec::new(),
            error_type: None,
            error: None,
            gates: Vec::new(),
            verification: Vec::new(),
            verification_allowed: Vec::new(),
            review: None,
        }
    }
}

/// Now, as RFC 3339 in UTC (machine-readable timestamps in state files).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_positions_find_their_records_when_the_plan_was_reordered() {
        let ids = ["a", "b", "c", "d"].map(String::from);
        let mut st = RunState::new("r".into(), "p".into(), "main".into(), "/x".into(), ids);
        st.retain_stories(|s| s.id != "b");
        // The plan now: d, new, a, c.
        st.follow_plan_order(["d", "new", "a", "c"]);
        let kept: Vec<&str> = st.stories.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(kept, ["a", "c", "d", "new"], "records keep their order");
        let looked_up = st.index_stats().lookups;
        for (i, id) in ["d", "new", "a", "c"].into_iter().enumerate() {
            assert_eq!(st.story_hinted(i, id).map(|s| s.id.as_str()), Some(id));
        }
        assert_eq!(st.index_stats().lookups, looked_up, "found by position");
        // A stale hint is only a hint.
        assert_eq!(st.position_hinted(0, "a"), Some(0));
        assert_eq!(st.position_hinted(1, "zz"), None);
        // Back in the plan's order: no hints kept.
        st.follow_plan_order(["a", "c", "d", "new"]);
        assert!(st.order.0.is_empty());
    }

    #[test]
    fn round_trips_atomically_and_counts() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(".cascade/state.json");
        assert!(RunState::load(&path).unwrap().is_none());
        let mut st = RunState::new(
            "r1".into(),
            "prd.json".into(),
            "main".into(),
            "/x".into(),
            ["a".to_string(), "b".to_string(), "c".to_string()],
        );
        st.story_mut("a").status = StoryStatus::Complete;
        st.story_mut("b").status = StoryStatus::Failed;
        st.story_mut("b").attempts.push(AttemptRecord {
            pid: Some(3),
            outcome: Some("failed".into()),
            error_type: Some(FailureKind::QualityGate),
            error: Some("gate 'tests' failed".into()),
            duration_ms: Some(4),
            ..AttemptRecord::started(1, "x".into(), "implementation".into(), now_rfc3339())
        });
        st.save(&path).unwrap();
        let back = RunState::load(&path).unwrap().unwrap();
        assert_eq!(back, st);
        let c = back.counts();
        assert_eq!((c.complete, c.failed, c.pending), (1, 1, 1));
        // No temp file left behind.
        let names: Vec<_> = std::fs::read_dir(tmp.path().join(".cascade"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
        let raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(raw["schema_version"], 1);
        assert_eq!(
            raw["stories"][1]["attempts"][0]["error_type"],
            "quality_gate"
        );
    }

    #[test]
    fn options_are_optional_and_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state.json");
        // A document of an older cascade (no `options`) still loads.
        std::fs::write(
            &path,
            r#"{"schema_version": 1, "run_id": "r", "prd": "prd.json", "target_branch": "main",
                "project_root": "/x", "status": "interrupted", "pid": 1,
                "started_at": "t", "updated_at": "t", "stories": []}"#,
        )
        .unwrap();
        let mut st = RunState::load(&path).unwrap().unwrap();
        assert_eq!(st.options, None);
        st.options = Some(serde_json::json!({
            "agent": "codex", "parallel": 6, "schedule": "eager", "auto_run": true,
        }));
        st.save(&path).unwrap();
        let back = RunState::load(&path).unwrap().unwrap();
        assert_eq!(back.options, st.options);
        let raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(raw["options"]["parallel"], 6);
        assert!(raw["options"].get("impl_agent").is_none());
    }

    #[test]
    fn newer_schema_and_garbage_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state.json");
        std::fs::write(&path, r#"{"schema_version": 99}"#).unwrap();
        let e = RunState::load(&path).unwrap_err().to_string();
        assert!(e.contains("newer"), "{e}");
        std::fs::write(&path, "{nope").unwrap();
        let e = RunState::load(&path).unwrap_err().to_string();
        assert!(e.contains("not valid JSON"), "{e}");
    }
}
