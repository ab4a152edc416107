//! The plan model: `prd.json` ([`Prd`], [`Story`]) and `mega-plan.json`
//! ([`MegaPlan`], [`Feature`]) in Plan Cascade's schema, plus loading and
//! atomic saving.
//!
//! Reading is lenient where Plan Cascade's files vary (`completed` and
//! `inprogress` statuses, acceptance criteria as strings or `{description}`
//! objects, `type` or `story_type`, unknown priorities) and strict where a
//! guess would be wrong (a field of the wrong JSON type is a parse error with
//! file, line and column). Ids are plain strings here; [`crate::validate_prd`]
//! checks them and produces [`crate::StoryId`]s.
//!
//! Nothing is lost on a rewrite: unknown fields are kept in
//! `extra`, and each object remembers (in its [`Source`]) the order its keys
//! were written in and the exact spelling of its priority and status, so
//! [`Prd::save`] writes the file back as it was apart from what changed. The
//! (de)serialization itself lives in `wire.rs`.

use std::fmt;
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::PlanError;
use crate::index::{IdIndex, IndexStats};
use crate::text::spelled;
use crate::vocabulary::{self, PlanWarning};

fn story_key(s: &Story) -> &str {
    &s.id
}

/// How an object was written in its file: key order and the original spelling
/// of keywords. Kept so that saving rewrites the file faithfully; objects built
/// in code use `Source::default()` and are written in the canonical order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Source {
    /// Key order: known-field numbers, or `wire::EXTRA` for "the next key of `extra`".
    pub(crate) keys: Box<[u8]>,
    /// The priority as written, when it was not the canonical spelling.
    pub(crate) priority: Option<Box<Value>>,
    /// The status as written, when it was not the canonical spelling.
    pub(crate) status: Option<Box<Value>>,
}

impl Source {
    /// Whether the file had the known field number `field`.
    pub(crate) fn has_key(&self, field: u8) -> bool {
        self.keys.contains(&field)
    }
}

/// A story's or feature's priority. Anything unknown counts as `Medium`
/// (reading the file warns about it; see `vocabulary.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Priority {
    /// Scheduled first within a batch.
    High,
    /// The default.
    #[default]
    Medium,
    /// Scheduled last within a batch.
    Low,
}

impl Priority {
    /// Plan Cascade's priorities, exactly: nothing else is guessed at.
    pub const SPELLINGS: &'static [(&'static str, Priority)] = &[
        ("high", Priority::High),
        ("medium", Priority::Medium),
        ("low", Priority::Low),
    ];

    /// Parses one of [`Priority::SPELLINGS`] (case and surrounding blanks
    /// ignored); `None` if unknown.
    pub fn parse(text: &str) -> Option<Priority> {
        spelled(Self::SPELLINGS, text)
    }

    /// The canonical spelling: `high`, `medium` or `low`.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Medium => "medium",
            Priority::Low => "low",
        }
    }

    /// Sort rank: 0 for high, 1 for medium, 2 for low.
    pub fn rank(self) -> u8 {
        match self {
            Priority::High => 0,
            Priority::Medium => 1,
            Priority::Low => 2,
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Priority {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A story's or feature's status. A story's status must be one of
/// [`Status::SPELLINGS`] (anything else is an error when the file is read:
/// a typo must never skip a story or run a finished one); a feature's
/// other Plan Cascade statuses (`prd_generated`, ...) count as `Pending`
/// and are written back as they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Status {
    /// Not done: `pending`, and Plan Cascade's `failed` and `skipped`
    /// (a story a run did not finish is run again).
    #[default]
    Pending,
    /// Being worked on (`in_progress`, also `inprogress`).
    InProgress,
    /// Done (`complete`, also `completed`).
    Complete,
}

impl Status {
    /// Plan Cascade's story statuses as it writes them, and what each means
    /// here. Nothing else is accepted.
    pub const SPELLINGS: &'static [(&'static str, Status)] = &[
        ("pending", Status::Pending),
        ("in_progress", Status::InProgress),
        ("inprogress", Status::InProgress),
        ("complete", Status::Complete),
        ("completed", Status::Complete),
        ("failed", Status::Pending),
        ("skipped", Status::Pending),
    ];

    /// Parses one of [`Status::SPELLINGS`] (case and surrounding blanks
    /// ignored); `None` if unknown.
    pub fn parse(text: &str) -> Option<Status> {
        spelled(Self::SPELLINGS, text)
    }

    /// The canonical spelling: `pending`, `in_progress` or `complete`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::InProgress => "in_progress",
            Status::Complete => "complete",
        }
    }

    /// Whether the work is done.
    pub fn is_complete(self) -> bool {
        self == Status::Complete
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One acceptance criterion: a string, or an object with a `description`
/// (and whatever else the file had, kept as is).
#[derive(Debug, Clone, PartialEq)]
pub enum Criterion {
    /// `"Login form validates email"`.
    Text(String),
    /// `{"description": "...", ...}` (boxed: most criteria are strings, and
    /// plans can hold hundreds of thousands).
    Object(Box<Map<String, Value>>),
}

impl Criterion {
    /// The criterion's text: the string, or the object's `description`
    /// (falling back to `criterion`, `title` or `text`, else empty).
    pub fn text(&self) -> &str {
        match self {
            Criterion::Text(t) => t,
            Criterion::Object(m) => ["description", "criterion", "title", "text"]
                .iter()
                .find_map(|k| m.get(*k).and_then(Value::as_str))
                .unwrap_or(""),
        }
    }
}

impl From<&str> for Criterion {
    fn from(t: &str) -> Self {
        Criterion::Text(t.to_owned())
    }
}

/// One story of a `prd.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Story {
    /// The id, as written (validation checks it; see [`crate::StoryId`]).
    pub id: String,
    /// One-line title.
    pub title: String,
    /// What to build.
    pub description: String,
    /// Scheduling priority within a batch.
    pub priority: Priority,
    /// Ids of the stories this one needs first.
    pub dependencies: Vec<String>,
    /// Progress.
    pub status: Status,
    /// What must hold when the story is done.
    pub acceptance_criteria: Vec<Criterion>,
    /// The agent to use for this story, if pinned.
    pub agent: Option<String>,
    /// The story type (`type` or `story_type` in the file), e.g. `feature`, `bugfix`.
    pub story_type: Option<String>,
    /// Free-form tags.
    pub tags: Vec<String>,
    /// Files the story is expected to touch.
    pub files: Vec<String>,
    /// Size estimate (Plan Cascade writes `small`/`medium`/`large`; numbers are
    /// used as critical-path weights).
    pub context_estimate: Option<Value>,
    /// Unknown fields, in file order.
    pub extra: Map<String, Value>,
    /// How the story was written in the file (key order, original spellings).
    pub source: Source,
}

impl Story {
    /// A pending, medium-priority story.
    pub fn new(id: impl Into<String>, title: impl Into<String>) -> Story {
        Story {
            id: id.into(),
            title: title.into(),
            ..Story::default()
        }
    }

    /// Sets the status (the original spelling is dropped if it no longer applies).
    pub fn set_status(&mut self, status: Status) {
        if self.status != status {
            self.source.status = None;
        }
        self.status = status;
    }

    /// Sets the priority (the original spelling is dropped if it no longer applies).
    pub fn set_priority(&mut self, priority: Priority) {
        if self.priority != priority {
            self.source.priority = None;
        }
        self.priority = priority;
    }

    /// Whether the story is already done.
    pub fn is_complete(&self) -> bool {
        self.status.is_complete()
    }

    /// The status as written in the file (e.g. `completed`), else canonical.
    pub fn status_label(&self) -> &str {
        label(self.source.status.as_deref(), self.status.as_str())
    }

    /// The critical-path weight: `context_estimate` when it is a non-negative
    /// number (or a string holding one), else `None`.
    pub fn weight(&self) -> Option<u64> {
        numeric_weight(self.context_estimate.as_ref())
    }

    /// Dependencies, with surrounding whitespace trimmed and empty entries skipped.
    pub fn dependency_ids(&self) -> impl Iterator<Item = &str> {
        self.dependencies
            .iter()
            .map(|d| d.trim())
            .filter(|d| !d.is_empty())
    }
}

fn label<'a>(raw: Option<&'a Value>, canonical: &'a str) -> &'a str {
    raw.and_then(Value::as_str).unwrap_or(canonical)
}

pub(crate) fn numeric_weight(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => weight_of_f64(n.as_f64()?),
        Value::String(s) => weight_of_str(s),
        _ => None,
    }
}

/// A weight from a number: non-negative and finite, rounded up.
pub(crate) fn weight_of_f64(x: f64) -> Option<u64> {
    (x.is_finite() && x >= 0.0).then(|| x.ceil().min(u64::MAX as f64 / 4.0) as u64)
}

/// A weight from a string holding a number (most estimates are words such
/// as `small`, which skip the float parser).
pub(crate) fn weight_of_str(s: &str) -> Option<u64> {
    let t = s.trim();
    if !t.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    weight_of_f64(t.parse::<f64>().ok()?)
}

/// A `prd.json`: a goal and its stories.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prd {
    /// Plan Cascade's `metadata` object (kept as is).
    pub metadata: Option<Value>,
    /// What the whole plan achieves.
    pub goal: String,
    /// Objectives, in order.
    pub objectives: Vec<String>,
    /// The stories, in file order (this order breaks scheduling ties).
    pub stories: Vec<Story>,
    /// Plan Cascade's `quality_gates` section, interpreted by cascade-gates.
    pub quality_gates: Option<Value>,
    /// Unknown top-level fields, in file order.
    pub extra: Map<String, Value>,
    /// How the file was written (key order).
    pub source: Source,
    /// What reading the file accepted but probably was not meant (an
    /// unknown priority, read as medium); never written back.
    pub warnings: Vec<PlanWarning>,
    /// The stories by id (built on the first lookup; see [`IdIndex`]).
    index: IdIndex,
}

impl Prd {
    /// The story with this id (the first one, should the file repeat it),
    /// through an index built once: looking up every story of a large plan
    /// stays linear. Code that renames stories in place calls
    /// [`Prd::reindex`].
    pub fn story(&self, id: &str) -> Option<&Story> {
        self.stories.get(self.position(id)?)
    }

    /// Where the story with this id is in [`Prd::stories`] (indexed, like
    /// [`Prd::story`]).
    pub fn position(&self, id: &str) -> Option<usize> {
        self.index.position(&self.stories, id, story_key)
    }

    /// The story with this id, mutable (indexed, like [`Prd::story`]).
    pub fn story_mut(&mut self, id: &str) -> Option<&mut Story> {
        let i = self.index.position_mut(&self.stories, id, story_key)?;
        self.stories.get_mut(i)
    }

    /// Forgets the story index (after ids were changed in place; adding or
    /// removing stories is noticed without it).
    pub fn reindex(&mut self) {
        self.index.clear();
    }

    /// How the story index has been used (for tests that prove a code path
    /// looks stories up without a scan per lookup).
    pub fn index_stats(&self) -> IndexStats {
        self.index.stats()
    }

    /// Parses a PRD from JSON text; `path` is only used in messages. A
    /// story status outside [`Status::SPELLINGS`] is an error
    /// ([`PlanError::Vocabulary`]); an unknown priority is one of
    /// [`Prd::warnings`].
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<Prd, PlanError> {
        let bytes = json_text(bytes, path, PRD_EXPECTED)?;
        let mut prd: Prd =
            crate::json::from_slice(bytes).map_err(|e| PlanError::parse(path.to_path_buf(), &e))?;
        prd.warnings = vocabulary::check(
            bytes,
            path,
            &vocabulary::STORIES,
            prd.stories.iter().map(|s| vocabulary::Spelling {
                id: &s.id,
                status: s.source.status.as_deref(),
                priority: s.source.priority.as_deref(),
            }),
        )?;
        Ok(prd)
    }

    /// The plan's header (goal, objectives, metadata, gates, unknown
    /// fields) around `stories` alone: what a fleet job carries for its one
    /// story, built without copying the other stories.
    pub fn with_stories(&self, stories: Vec<Story>) -> Prd {
        Prd {
            metadata: self.metadata.clone(),
            goal: self.goal.clone(),
            objectives: self.objectives.clone(),
            stories,
            quality_gates: self.quality_gates.clone(),
            extra: self.extra.clone(),
            source: self.source.clone(),
            warnings: Vec::new(),
            index: IdIndex::default(),
        }
    }

    /// The PRD as pretty JSON (two-space indent, keys in their original order).
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        to_pretty(self)
    }

    /// Writes the PRD to `path` atomically (temp file + rename), keeping
    /// unknown fields and the original key order.
    pub fn save(&self, path: &Path) -> Result<(), PlanError> {
        let bytes = self.to_json().map_err(|source| PlanError::Serialize {
            path: path.to_path_buf(),
            source,
        })?;
        save_file(path, &bytes)
    }
}

/// A `mega-plan.json`: features with dependencies, each later getting its own PRD.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MegaPlan {
    /// What the whole project achieves.
    pub goal: String,
    /// Plan Cascade's `execution_mode` (e.g. `auto`, `manual`).
    pub execution_mode: Option<String>,
    /// The branch finished features merge into.
    pub target_branch: Option<String>,
    /// The features, in file order.
    pub features: Vec<Feature>,
    /// Unknown top-level fields, in file order.
    pub extra: Map<String, Value>,
    /// How the file was written (key order).
    pub source: Source,
    /// What reading the file accepted but probably was not meant (an
    /// unknown priority, read as medium); never written back.
    pub warnings: Vec<PlanWarning>,
}

impl MegaPlan {
    /// The feature with this id (linear scan).
    pub fn feature(&self, id: &str) -> Option<&Feature> {
        self.features.iter().find(|f| f.id == id)
    }

    /// The feature with this id, mutable (linear scan).
    pub fn feature_mut(&mut self, id: &str) -> Option<&mut Feature> {
        self.features.iter_mut().find(|f| f.id == id)
    }

    /// Parses a mega-plan from JSON text; `path` is only used in messages.
    /// An unknown priority is one of [`MegaPlan::warnings`] (a feature's
    /// status may be any of Plan Cascade's feature statuses).
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<MegaPlan, PlanError> {
        let bytes = json_text(bytes, path, "a mega-plan object with \"features\"")?;
        let mut mega: MegaPlan =
            crate::json::from_slice(bytes).map_err(|e| PlanError::parse(path.to_path_buf(), &e))?;
        mega.warnings = vocabulary::check(
            bytes,
            path,
            &vocabulary::FEATURES,
            mega.features.iter().map(|f| vocabulary::Spelling {
                id: &f.id,
                status: None,
                priority: f.source.priority.as_deref(),
            }),
        )?;
        Ok(mega)
    }

    /// The mega-plan as pretty JSON (keys in their original order).
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        to_pretty(self)
    }

    /// Writes the mega-plan to `path` atomically, keeping unknown fields.
    pub fn save(&self, path: &Path) -> Result<(), PlanError> {
        let bytes = self.to_json().map_err(|source| PlanError::Serialize {
            path: path.to_path_buf(),
            source,
        })?;
        save_file(path, &bytes)
    }
}

/// One feature of a mega-plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Feature {
    /// The id, as written (e.g. `feature-001`).
    pub id: String,
    /// Short name used for branches and directories (`^[a-z0-9][a-z0-9-]*$`).
    pub name: String,
    /// One-line title.
    pub title: String,
    /// What the feature is.
    pub description: String,
    /// Scheduling priority within a batch.
    pub priority: Priority,
    /// Ids (or names) of the features this one needs first.
    pub dependencies: Vec<String>,
    /// Progress (Plan Cascade's other feature statuses such as `prd_generated`
    /// read as `Pending` and are written back unchanged; see [`Feature::status_label`]).
    pub status: Status,
    /// Unknown fields, in file order.
    pub extra: Map<String, Value>,
    /// How the feature was written in the file.
    pub source: Source,
}

impl Feature {
    /// A pending, medium-priority feature.
    pub fn new(id: impl Into<String>, name: impl Into<String>) -> Feature {
        Feature {
            id: id.into(),
            name: name.into(),
            ..Feature::default()
        }
    }

    /// Sets the status (the original spelling is dropped if it no longer applies).
    pub fn set_status(&mut self, status: Status) {
        if self.status != status {
            self.source.status = None;
        }
        self.status = status;
    }

    /// Sets the status to an exact label (e.g. `prd_generated`), keeping it
    /// verbatim in the file; `status` becomes what the label parses to.
    pub fn set_status_label(&mut self, label: &str) {
        self.status = Status::parse(label).unwrap_or_default();
        self.source.status =
            (self.status.as_str() != label).then(|| Box::new(Value::String(label.to_owned())));
    }

    /// The status as written in the file (e.g. `prd_generated`), else canonical.
    pub fn status_label(&self) -> &str {
        label(self.source.status.as_deref(), self.status.as_str())
    }

    /// Whether the feature is already done.
    pub fn is_complete(&self) -> bool {
        self.status.is_complete()
    }

    /// Dependencies, trimmed, empty entries skipped.
    pub fn dependency_ids(&self) -> impl Iterator<Item = &str> {
        self.dependencies
            .iter()
            .map(|d| d.trim())
            .filter(|d| !d.is_empty())
    }
}

impl Story {
    /// Sets the status to an exact label (e.g. `completed`), keeping it verbatim.
    pub fn set_status_label(&mut self, label: &str) {
        self.status = Status::parse(label).unwrap_or_default();
        self.source.status =
            (self.status.as_str() != label).then(|| Box::new(Value::String(label.to_owned())));
    }
}

/// Reads and parses a `prd.json`.
pub fn load_prd(path: impl AsRef<Path>) -> Result<Prd, PlanError> {
    let path = path.as_ref();
    let bytes = read(path, "prd")?;
    Prd::from_json(&bytes, path)
}

/// Reads and parses a `mega-plan.json`.
pub fn load_mega(path: impl AsRef<Path>) -> Result<MegaPlan, PlanError> {
    let path = path.as_ref();
    let bytes = read(path, "mega")?;
    MegaPlan::from_json(&bytes, path)
}

/// What a prd.json should hold, for the "file is empty" message.
pub(crate) const PRD_EXPECTED: &str = "a PRD object with \"stories\"";

/// The JSON text of a plan file: a UTF-8 byte order mark (which some editors
/// write) is skipped, and an empty file is reported as such rather than as
/// "EOF while parsing a value" at column 0.
pub(crate) fn json_text<'b>(
    bytes: &'b [u8],
    path: &Path,
    expected: &str,
) -> Result<&'b [u8], PlanError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(PlanError::Parse {
            path: path.to_path_buf(),
            line: 1,
            column: 1,
            message: format!("the file is empty (expected {expected})"),
        });
    }
    Ok(bytes)
}

pub(crate) fn read(path: &Path, flag: &'static str) -> Result<Vec<u8>, PlanError> {
    std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            PlanError::NotFound {
                path: path.to_path_buf(),
                flag,
            }
        } else {
            PlanError::Read {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

fn to_pretty<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = serde_json::to_vec_pretty(value)?;
    out.push(b'\n');
    Ok(out)
}

/// Replaces the plan file atomically (fsynced: plans are edited by people
/// and rebuilt by nothing), following a symbolic link to the real plan.
fn save_file(path: &Path, bytes: &[u8]) -> Result<(), PlanError> {
    cascade_fs::write_atomic(path, bytes, cascade_fs::Durability::Synced).map_err(|source| {
        PlanError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}
