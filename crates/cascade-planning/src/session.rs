//! The planning session: what `session.json` holds and how it is stored.
//!
//! A session lives in `.cascade/plans/planning-<uuid>/` and is rewritten
//! atomically (temp file + rename) after every answer, decision and agent
//! call, so a session killed at any point resumes at the same question or
//! step. The field names are the contract of CLI.md ("Planning"); fields this
//! crate adds for its own bookkeeping (`options`, `progress`, ...) sit beside
//! them, and unknown fields are tolerated when reading.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::PlanningError;
use crate::strategy::Strategy;

/// Version of the `session.json` layout written by this crate.
pub const SCHEMA_VERSION: u32 = 1;
/// The session file's name inside the session directory.
pub const SESSION_FILE: &str = "session.json";
/// Answers the person left for the session (read on every resume).
pub const ANSWERS_FILE: &str = "answers.json";
/// After this many rejections by the person the session is cancelled.
pub const MAX_REJECTIONS: u32 = 3;

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Discovery,
    Design,
    Review,
    Approved,
    Cancelled,
    Failed,
}

impl PlanStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PlanStatus::Discovery => "discovery",
            PlanStatus::Design => "design",
            PlanStatus::Review => "review",
            PlanStatus::Approved => "approved",
            PlanStatus::Cancelled => "cancelled",
            PlanStatus::Failed => "failed",
        }
    }

    /// Approved and cancelled sessions are done; a failed one can be resumed.
    pub fn is_final(self) -> bool {
        matches!(self, PlanStatus::Approved | PlanStatus::Cancelled)
    }
}

impl std::fmt::Display for PlanStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The five kinds of discovery questions (ADR types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionType {
    Clarification,
    Scope,
    Technical,
    Priority,
    Constraint,
}

impl QuestionType {
    /// Reads an agent's spelling; anything unknown is a clarification.
    pub fn parse(s: &str) -> QuestionType {
        match s.trim().to_ascii_lowercase().as_str() {
            "scope" => QuestionType::Scope,
            "technical" | "tech" => QuestionType::Technical,
            "priority" => QuestionType::Priority,
            "constraint" | "constraints" => QuestionType::Constraint,
            _ => QuestionType::Clarification,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            QuestionType::Clarification => "clarification",
            QuestionType::Scope => "scope",
            QuestionType::Technical => "technical",
            QuestionType::Priority => "priority",
            QuestionType::Constraint => "constraint",
        }
    }
}

/// A discovery question and, once given, its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// `q-1`, `q-2`, ... (assigned by cascade, whatever the agent wrote).
    pub id: String,
    #[serde(rename = "type")]
    pub kind: QuestionType,
    pub question: String,
    #[serde(default)]
    pub context: String,
    #[serde(default)]
    pub options: Vec<String>,
    /// What the agent assumes when nobody answers (used by `--auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assumption: Option<String>,
    #[serde(default)]
    pub answer: Option<String>,
    #[serde(default)]
    pub answered_at: Option<String>,
}

/// Pros and cons of a decision option.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tradeoffs {
    #[serde(default)]
    pub pros: Vec<String>,
    #[serde(default)]
    pub cons: Vec<String>,
}

/// One option of a design decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionOption {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tradeoffs: Tradeoffs,
}

/// A design decision point and, once made, the choice and its rationale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `d-1`, `d-2`, ...
    pub id: String,
    pub topic: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context: String,
    pub options: Vec<DecisionOption>,
    /// The recommended option's id.
    #[serde(default)]
    pub recommendation: Option<String>,
    #[serde(default)]
    pub selected_option_id: Option<String>,
    #[serde(default)]
    pub rationale: Option<String>,
    #[serde(default)]
    pub decided_at: Option<String>,
}

impl Decision {
    pub fn option(&self, id: &str) -> Option<&DecisionOption> {
        self.options
            .iter()
            .find(|o| o.id.eq_ignore_ascii_case(id.trim()))
    }
}

/// One agent call: usage and cost as the agent reported them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmCall {
    pub step: String,
    pub agent: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub tokens_in: u64,
    #[serde(default)]
    pub tokens_out: u64,
    #[serde(default)]
    pub duration_ms: u64,
    /// US dollars, when the agent reports a cost.
    #[serde(default)]
    pub cost: Option<f64>,
    pub timestamp: String,
}

/// The options the session was started with (kept so `resume` needs none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionOptions {
    /// `--agent`: the planning (generator) agent.
    #[serde(default)]
    pub agent: Option<String>,
    /// `--review-agent`: the challenger.
    #[serde(default)]
    pub review_agent: Option<String>,
    /// `--strategy` other than auto.
    #[serde(default)]
    pub forced_strategy: Option<Strategy>,
    /// `--design-doc`: the imported document, as given.
    #[serde(default)]
    pub design_doc: Option<PathBuf>,
    pub max_questions: u32,
    pub format_iterations: u32,
    pub planning_iterations: u32,
    /// `--auto`: nobody is asked anything.
    #[serde(default)]
    pub auto: bool,
    /// Where the approved plan files go, chosen once when the session
    /// starts (`--out`, the project's Plan Cascade data directory, or the
    /// project) and kept for every resume. `None` in sessions written
    /// before the choice existed: the project root.
    #[serde(default)]
    pub output: Option<cascade_plan::paths::PlanOutput>,
}

impl SessionOptions {
    /// CLI.md's defaults: 5 questions, 2 fix rounds, 2 revision rounds.
    pub fn defaults() -> SessionOptions {
        SessionOptions {
            max_questions: 5,
            format_iterations: 2,
            planning_iterations: 2,
            ..SessionOptions::default()
        }
    }
}

/// How far the steps got (what is done is never redone on resume).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    #[serde(default)]
    pub discovery_done: bool,
    #[serde(default)]
    pub design_done: bool,
    /// The generate (or revise) step and its self-review ran.
    #[serde(default)]
    pub drafted: bool,
    /// Fix rounds used on the current draft.
    #[serde(default)]
    pub fix_rounds: u32,
    /// The current draft passed local validation.
    #[serde(default)]
    pub valid: bool,
    /// Challenges run on this plan so far (1 + revisions).
    #[serde(default)]
    pub challenges: u32,
    /// The last challenge's verdict.
    #[serde(default)]
    pub verdict: Option<String>,
    /// The next draft is a revision after a NEEDS_REVISION challenge.
    #[serde(default)]
    pub revising: bool,
    /// The last self-review marker (PASS / NEEDS_REVISION / none).
    #[serde(default)]
    pub self_review: Option<String>,
    /// The `review` answer of answers.json was used (it counts once).
    #[serde(default)]
    pub review_answer_used: bool,
    /// The phase a failed session goes back to on resume.
    #[serde(default)]
    pub failed_in: Option<PlanStatus>,
    /// The step that failed.
    #[serde(default)]
    pub failed_step: Option<String>,
}

/// `session.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    #[serde(default)]
    pub schema_version: u32,
    pub session_id: String,
    pub instruction: String,
    pub status: PlanStatus,
    #[serde(default)]
    pub strategy: Option<Strategy>,
    /// `forced`, `assessed` or `default` (the assessment was unusable).
    #[serde(default)]
    pub strategy_source: Option<String>,
    #[serde(default)]
    pub strategy_reasoning: Option<String>,
    #[serde(default)]
    pub current_question_index: usize,
    #[serde(default)]
    pub current_decision_index: usize,
    #[serde(default)]
    pub questions: Vec<Question>,
    #[serde(default)]
    pub decisions: Vec<Decision>,
    #[serde(default)]
    pub design_summary: Option<String>,
    #[serde(default)]
    pub reject_count: u32,
    /// The person's reasons, oldest first.
    #[serde(default)]
    pub rejections: Vec<String>,
    #[serde(default)]
    pub error_message: Option<String>,
    /// Agent name -> the session id it printed last (what it said, for
    /// people and tools; continuation reads `role_sessions`).
    #[serde(default)]
    pub agent_sessions: BTreeMap<String, String>,
    /// Role (`generator`, `reviewer`) -> the agent and session that role
    /// last used. Continuation goes by role: when one agent both writes and
    /// challenges the plan, a revise continues the writer's conversation,
    /// not the challenger's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub role_sessions: BTreeMap<String, RoleSession>,
    #[serde(default)]
    pub llm_calls: Vec<LlmCall>,
    #[serde(default)]
    pub total_cost: f64,
    #[serde(default)]
    pub total_tokens_in: u64,
    #[serde(default)]
    pub total_tokens_out: u64,
    /// Name -> path of what the session wrote (drafts, then the approved files).
    #[serde(default)]
    pub outputs: BTreeMap<String, String>,
    #[serde(default)]
    pub generator_agent: Option<String>,
    #[serde(default)]
    pub review_agent: Option<String>,
    #[serde(default)]
    pub warnings: Vec<String>,
    pub options: SessionOptions,
    #[serde(default)]
    pub progress: Progress,
    pub created_at: String,
    pub updated_at: String,
}

/// Current time as RFC 3339 (UTC, seconds).
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The conversation a planning role continues (see `Session::role_sessions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleSession {
    pub agent: String,
    pub session_id: String,
}

/// The planning roles whose conversations are kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Writes the plan: strategy, discovery, design, generate, self-review, fix, revise.
    Generator,
    /// Challenges it.
    Reviewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Generator => "generator",
            Role::Reviewer => "reviewer",
        }
    }
}

impl Session {
    /// The session `agent` continues in `role`: the role's own, only when
    /// the same agent holds it. A session file written before roles were
    /// kept falls back to the agent's last session.
    pub fn session_to_continue(&self, role: Role, agent: &str) -> Option<&str> {
        if self.role_sessions.is_empty() {
            return self.agent_sessions.get(agent).map(String::as_str);
        }
        self.role_sessions
            .get(role.as_str())
            .filter(|r| r.agent == agent)
            .map(|r| r.session_id.as_str())
    }

    /// Records the session `agent` printed while acting as `role`.
    pub fn record_session(&mut self, role: Role, agent: &str, session_id: &str) {
        self.agent_sessions
            .insert(agent.to_string(), session_id.to_string());
        self.role_sessions.insert(
            role.as_str().to_string(),
            RoleSession {
                agent: agent.to_string(),
                session_id: session_id.to_string(),
            },
        );
    }
}

impl Session {
    /// A new session in `discovery` with a fresh id.
    pub fn new(instruction: &str, options: SessionOptions) -> Result<Session, PlanningError> {
        let now = now();
        Ok(Session {
            schema_version: SCHEMA_VERSION,
            session_id: format!("planning-{}", uuid::Uuid::new_v4()),
            instruction: instruction.trim().to_string(),
            status: PlanStatus::Discovery,
            strategy: options.forced_strategy,
            strategy_source: options.forced_strategy.map(|_| "forced".to_string()),
            strategy_reasoning: None,
            current_question_index: 0,
            current_decision_index: 0,
            questions: Vec::new(),
            decisions: Vec::new(),
            design_summary: None,
            reject_count: 0,
            rejections: Vec::new(),
            error_message: None,
            agent_sessions: BTreeMap::new(),
            role_sessions: BTreeMap::new(),
            llm_calls: Vec::new(),
            total_cost: 0.0,
            total_tokens_in: 0,
            total_tokens_out: 0,
            outputs: BTreeMap::new(),
            generator_agent: None,
            review_agent: None,
            warnings: Vec::new(),
            options,
            progress: Progress::default(),
            created_at: now.clone(),
            updated_at: now,
        })
    }

    /// Records an agent call and updates the totals.
    pub fn record_call(&mut self, call: LlmCall) {
        self.total_tokens_in += call.tokens_in;
        self.total_tokens_out += call.tokens_out;
        if let Some(c) = call.cost {
            self.total_cost += c;
        }
        self.llm_calls.push(call);
    }

    /// Questions not answered yet, from the current index on.
    pub fn open_questions(&self) -> impl Iterator<Item = &Question> {
        self.questions
            .iter()
            .skip(self.current_question_index)
            .filter(|q| q.answer.is_none())
    }

    /// Decisions not made yet, from the current index on.
    pub fn open_decisions(&self) -> impl Iterator<Item = &Decision> {
        self.decisions
            .iter()
            .skip(self.current_decision_index)
            .filter(|d| d.selected_option_id.is_none())
    }
}

/// The `.cascade/plans/` directory and the sessions in it.
#[derive(Debug, Clone)]
pub struct SessionStore {
    plans_dir: PathBuf,
}

impl SessionStore {
    /// `cascade_dir`: the repository's `.cascade/`.
    pub fn new(cascade_dir: &Path) -> SessionStore {
        SessionStore {
            plans_dir: cascade_dir.join("plans"),
        }
    }

    pub fn plans_dir(&self) -> &Path {
        &self.plans_dir
    }

    /// The directory of session `id`.
    pub fn dir(&self, id: &str) -> PathBuf {
        self.plans_dir.join(id)
    }

    /// The session's answers file.
    pub fn answers_path(&self, id: &str) -> PathBuf {
        self.dir(id).join(ANSWERS_FILE)
    }

    /// Writes `session.json` atomically, stamping `updated_at`.
    pub fn save(&self, session: &mut Session) -> Result<(), PlanningError> {
        session.updated_at = now();
        session.schema_version = SCHEMA_VERSION;
        let path = self.dir(&session.session_id).join(SESSION_FILE);
        let mut text = serde_json::to_string_pretty(session).map_err(|e| PlanningError::Io {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        text.push('\n');
        write_atomic(&path, text.as_bytes())
    }

    /// Reads session `id`. An id that is not a session directory is
    /// [`PlanningError::UnknownSession`].
    pub fn load(&self, id: &str) -> Result<Session, PlanningError> {
        if !valid_id(id) {
            return Err(PlanningError::UnknownSession {
                id: id.to_string(),
                known: self.ids(),
            });
        }
        let path = self.dir(id).join(SESSION_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(PlanningError::UnknownSession {
                    id: id.to_string(),
                    known: self.ids(),
                })
            }
            Err(source) => return Err(PlanningError::Io { path, source }),
        };
        let session: Session =
            serde_json::from_str(&text).map_err(|e| PlanningError::json(&path, &e))?;
        if session.schema_version > SCHEMA_VERSION {
            return Err(PlanningError::NewerSchema {
                path,
                version: session.schema_version,
            });
        }
        Ok(session)
    }

    /// Ids of the stored sessions (unsorted).
    fn ids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.plans_dir) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join(SESSION_FILE).is_file())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| valid_id(n))
            .collect()
    }

    /// Every readable session, newest first (by `created_at`, then id).
    /// Unreadable ones are returned as `(id, error)` so a list can say so.
    pub fn list(&self) -> (Vec<Session>, Vec<(String, PlanningError)>) {
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for id in self.ids() {
            match self.load(&id) {
                Ok(s) => good.push(s),
                Err(e) => bad.push((id, e)),
            }
        }
        good.sort_by(|a: &Session, b: &Session| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| b.updated_at.cmp(&a.updated_at))
                .then_with(|| a.session_id.cmp(&b.session_id))
        });
        (good, bad)
    }
}

/// `planning-` followed by a uuid-like tail of hex digits and dashes: safe as
/// a directory name (no `/`, no `..`).
pub fn valid_id(id: &str) -> bool {
    id.strip_prefix("planning-").is_some_and(|rest| {
        !rest.is_empty() && rest.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
    })
}

/// Replaces `path` atomically and fsynced (see `cascade_fs::write_atomic`),
/// the error as a [`PlanningError`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), PlanningError> {
    cascade_fs::write_atomic(path, bytes, cascade_fs::Durability::Synced).map_err(|source| {
        PlanningError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_uuid_shaped_and_checked() {
        let s = Session::new("goal", SessionOptions::defaults()).unwrap();
        assert!(valid_id(&s.session_id), "{}", s.session_id);
        assert_eq!(s.session_id.len(), "planning-".len() + 36);
        assert_eq!(&s.session_id[9 + 14..9 + 15], "4");
        assert!(!valid_id("planning-../x"));
        assert!(!valid_id("planning-"));
        assert!(!valid_id("other-abc"));
    }

    #[test]
    fn save_load_round_trip_and_list_newest_first() {
        let tmp = tempfile::tempdir().unwrap();
        let store = SessionStore::new(tmp.path());
        let mut a = Session::new("first", SessionOptions::defaults()).unwrap();
        a.created_at = "2026-01-01T00:00:00Z".into();
        store.save(&mut a).unwrap();
        let mut b = Session::new("second", SessionOptions::defaults()).unwrap();
        b.created_at = "2026-02-01T00:00:00Z".into();
        b.record_call(LlmCall {
            step: "strategy".into(),
            agent: "x".into(),
            model: None,
            tokens_in: 10,
            tokens_out: 5,
            duration_ms: 1,
            cost: Some(0.25),
            timestamp: now(),
        });
        store.save(&mut b).unwrap();
        let loaded = store.load(&b.session_id).unwrap();
        assert_eq!(loaded.total_cost, 0.25);
        assert_eq!(loaded.total_tokens_in, 10);
        assert_eq!(loaded.llm_calls.len(), 1);
        let (list, bad) = store.list();
        assert!(bad.is_empty());
        let order: Vec<_> = list.iter().map(|s| s.instruction.as_str()).collect();
        assert_eq!(order, ["second", "first"]);
        // The contract's field names are what is on disk.
        let text = std::fs::read_to_string(store.dir(&b.session_id).join(SESSION_FILE)).unwrap();
        for key in [
            "\"session_id\"",
            "\"instruction\"",
            "\"status\": \"discovery\"",
            "\"current_question_index\"",
            "\"current_decision_index\"",
            "\"reject_count\"",
            "\"agent_sessions\"",
            "\"llm_calls\"",
            "\"total_cost\"",
            "\"outputs\"",
            "\"schema_version\": 1",
        ] {
            assert!(text.contains(key), "{key} missing in {text}");
        }
    }

    #[test]
    fn unknown_and_broken_sessions_are_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let store = SessionStore::new(tmp.path());
        let err = store.load("planning-abc").unwrap_err();
        assert!(matches!(err, PlanningError::UnknownSession { .. }));
        std::fs::create_dir_all(store.dir("planning-abc")).unwrap();
        std::fs::write(store.dir("planning-abc").join(SESSION_FILE), "{\n  oops").unwrap();
        let err = store.load("planning-abc").unwrap_err().to_string();
        assert!(err.contains("session.json:2:"), "{err}");
        let (_, bad) = store.list();
        assert_eq!(bad.len(), 1);
    }
}
