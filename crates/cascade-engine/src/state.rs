//! A run's state: [`RunState`] (the run's own fields, and per story its
//! status (pending | running | complete | failed | blocked), agent, every
//! attempt with its error and classification, branch, worktree and merge
//! commit), kept in the run database (see the `store` module, which
//! writes it at every transition and reads it back).
//!
//! Stories are looked up by id through an index ([`cascade_plan::IdIndex`],
//! built on the first lookup), never by scanning the list.
//!
//! [`RunState::load_head`] reads a run's own fields alone (what `resume`
//! reads before the plan, how the run was started).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use cascade_plan::{IdIndex, IndexStats};

use crate::events::{GateSummary, RunStatus, StoryCounts};

use crate::retry::FailureKind;

pub use crate::store::SCHEMA_VERSION;

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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunState {
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
    /// In plan order. Add stories with [`RunState::story_mut`] and remove
    /// them with [`RunState::retain_stories`] (the index follows either way).
    pub stories: Vec<StoryState>,
    /// The stories by id.
    #[serde(skip)]
    pub(crate) index: IdIndex,
    /// Where the record of each plan position is, when the records are
    /// not in the plan's order (see [`RunState::follow_plan_order`]).
    #[serde(skip)]
    pub(crate) order: PlanOrder,
}

/// The record positions of a plan's stories, in plan order (empty: the
/// records are in the plan's order). Only ever a hint: what it points at is
/// checked by id, so a stale one costs a lookup, never a wrong record; two
/// states are equal whatever their hints.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlanOrder(Vec<u32>);

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

fn story_key(s: &StoryState) -> &str {
    &s.id
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
    /// The story's type as the resolver saw it (the plan's `type` /
    /// `story_type`, else inferred from its title, tags and files), which
    /// `cascade history` and `--route learned` group outcomes by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub story_type: Option<String>,
    /// A racing story's last round: its contestants side by side and the
    /// winner (what `status` and the dashboard show; see `crate::race`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub race: Option<crate::race::RaceRecord>,
    /// The files its merges conflicted in during the run: the eager
    /// scheduler keeps it apart from running stories that hold them, also
    /// after a resume (see `crate::scheduler`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicted_files: Vec<String>,
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

/// How an attempt that passed was judged beyond passing: what a race's
/// rule compares (see `crate::race`), and what a fleet worker reports of it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Judged {
    /// The review's verdict, when one reviewed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// Verification's findings, those `verify_allow` let go, and one for a
    /// review that noted findings.
    pub findings: usize,
}

impl Judged {
    /// Whether a review said `pass` (no review, or no marker: no).
    pub fn review_passed(&self) -> bool {
        self.verdict.as_deref() == Some("pass")
    }
}

impl StoryState {
    /// How the last attempt that wrote the story's review and verification
    /// fields was judged.
    pub fn judged(&self) -> Judged {
        let review = self.review.as_ref();
        let noted = review.map_or(0, |r| usize::from(!r.findings.trim().is_empty()));
        Judged {
            verdict: review.map(|r| r.verdict.clone()),
            findings: self.verification.len() + self.verification_allowed.len() + noted,
        }
    }

    /// The race contestant that runs attempt `number`, when the story
    /// races: the steps note there what judged this attempt, which the
    /// story-level fields (the last attempt's to write them) cannot tell
    /// apart while contestants run at once.
    pub fn contestant_at(&mut self, number: u32) -> Option<&mut crate::race::ContestantRecord> {
        self.race
            .as_mut()?
            .contestants
            .iter_mut()
            .find(|c| c.attempt == number)
    }

    /// Counts `n` more findings (kept or waived) against the contestant
    /// running attempt `number`; nothing when the story does not race.
    /// What [`StoryState::judged`] counts, per contestant.
    pub fn note_findings(&mut self, number: u32, n: usize) {
        if let Some(c) = self.contestant_at(number) {
            c.findings = Some(c.findings.unwrap_or(0) + n);
        }
    }

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

/// Reading or writing the run state failed.
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
    #[error("run state '{}' has schema version {found}, newer than this cascade understands ({understood}); upgrade cascade", path.display())]
    NewerSchema {
        path: PathBuf,
        found: u32,
        understood: u32,
    },
    /// The database refused a read or write; a full disk says "No space
    /// left on device" (see [`StateError::is_disk_full`]).
    #[error("run database '{}': {}{source}", path.display(), if *disk_full { "No space left on device: " } else { "" })]
    Db {
        path: PathBuf,
        disk_full: bool,
        #[source]
        source: rusqlite::Error,
    },
}

impl StateError {
    /// A database error met at `path`.
    pub(crate) fn db(path: &Path, source: rusqlite::Error) -> StateError {
        let disk_full = source.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull);
        StateError::Db {
            path: path.to_path_buf(),
            disk_full,
            source,
        }
    }

    /// Whether the disk (or the user's quota) is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StateError::Db { disk_full, .. } => *disk_full,
            StateError::Io { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
            }
            _ => false,
        }
    }
}

impl RunState {
    /// The story's record (indexed).
    pub fn story(&self, id: &str) -> Option<&StoryState> {
        self.stories.get(self.position(id)?)
    }

    /// Where the story's record is in [`RunState::stories`].
    pub fn position(&self, id: &str) -> Option<usize> {
        self.index.position(&self.stories, id, story_key)
    }

    /// [`RunState::position`], looking at `hint` (a plan position) first: a
    /// state keeps its plan's order (a fresh one always, a resumed one
    /// unless the plan changed, and then [`RunState::follow_plan_order`] says
    /// where each plan position's record is), so the record is found there
    /// and the index is neither used nor built. Ids are unique in a state.
    pub fn position_hinted(&self, hint: usize, id: &str) -> Option<usize> {
        let at = self.order.at(hint);
        match self.stories.get(at) {
            Some(s) if s.id == id => Some(at),
            _ => self.position(id),
        }
    }

    /// The story's record, looked for at `hint` first ([`RunState::position_hinted`]).
    pub fn story_hinted(&self, hint: usize, id: &str) -> Option<&StoryState> {
        self.stories.get(self.position_hinted(hint, id)?)
    }

    /// [`RunState::position_or_add`], looking at `hint` first.
    pub fn position_hinted_or_add(&mut self, hint: usize, id: &str) -> usize {
        let at = self.order.at(hint);
        match self.stories.get(at) {
            Some(s) if s.id == id => at,
            _ => self.position_or_add(id),
        }
    }

    /// Gives every story of the plan (`ids`, in plan order) a record (new
    /// ones pending, at the end) and remembers where each one is: a plan
    /// whose stories are in another order than the records looks each one
    /// up once here, and its plan positions find them after
    /// ([`RunState::position_hinted`]). The records keep their order.
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
    pub fn story_mut(&mut self, id: &str) -> &mut StoryState {
        let i = self.position_or_add(id);
        &mut self.stories[i]
    }

    /// The position of the story's record, added (pending) if it is new.
    pub fn position_or_add(&mut self, id: &str) -> usize {
        if let Some(i) = self.index.position_mut(&self.stories, id, story_key) {
            return i;
        }
        self.stories
            .push(StoryState::new(id.to_string(), StoryStatus::Pending));
        self.index.pushed(&self.stories, story_key);
        self.stories.len() - 1
    }

    /// Keeps only the stories `keep` says yes to.
    pub fn retain_stories(&mut self, keep: impl FnMut(&StoryState) -> bool) {
        self.stories.retain(keep);
        self.index.clear();
        self.order = PlanOrder::default();
    }

    /// Puts a whole story record in place of the one with its id (or adds it).
    pub fn put_story(&mut self, record: StoryState) {
        let i = self.position_or_add(&record.id);
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
            match s.status {
                StoryStatus::Complete => c.complete += 1,
                StoryStatus::Failed => c.failed += 1,
                StoryStatus::Blocked => c.blocked += 1,
                StoryStatus::Pending | StoryStatus::Running => c.pending += 1,
            }
        }
        c
    }

    /// Takes the run's own fields from `head`, keeping the stories.
    pub(crate) fn take_run_fields(&mut self, mut head: RunState) {
        std::mem::swap(&mut head.stories, &mut self.stories);
        std::mem::swap(&mut head.index, &mut self.index);
        std::mem::swap(&mut head.order, &mut self.order);
        *self = head;
    }

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
            stories: story_ids
                .into_iter()
                .map(|id| StoryState::new(id, StoryStatus::Pending))
                .collect(),
            index: IdIndex::default(),
            order: PlanOrder::default(),
        }
    }
}

impl RunState {
    /// The latest run of the database at `path`, its stories left unread
    /// (`stories` is empty); `Ok(None)` when there is none. Errors as
    /// [`RunState::load`]'s.
    pub fn load_head(path: &Path) -> Result<Option<RunState>, StateError> {
        match crate::store::connect_existing(path)? {
            Some(conn) => crate::store::latest_head(&conn, path),
            None => Ok(None),
        }
    }
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
            story_type: None,
            race: None,
            conflicted_files: Vec::new(),
        }
    }
}

/// Now, as RFC 3339 in UTC (machine-readable timestamps of the run state).
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
    fn racing_contestants_keep_their_own_findings_and_verdict() {
        use crate::race::{Contestant, RaceOptions, RaceRecord};
        let mut story = StoryState::new("s".into(), StoryStatus::Pending);
        let runners = ["a", "b"].map(|n| Contestant {
            agent: n.into(),
            name: n.into(),
        });
        let branches = ["cascade/s/race-a", "cascade/s/race-b"].map(String::from);
        story.race = Some(RaceRecord::started(
            &RaceOptions::default(),
            &runners,
            &branches,
            1,
        ));
        // Attempt 1 passes its review clean; attempt 2, running beside it,
        // writes the story-level fields last with a finding.
        story.note_findings(1, 0);
        story.contestant_at(1).expect("attempt 1").verdict = Some("pass".into());
        story.note_findings(2, 1);
        story.note_findings(2, 2);
        story.note_findings(3, 5);
        let race = story.race.as_ref().expect("the race");
        assert_eq!(race.contestants[0].findings, Some(0));
        assert_eq!(race.contestants[0].verdict.as_deref(), Some("pass"));
        assert_eq!(race.contestants[1].findings, Some(3));
        assert_eq!(race.contestants[1].verdict, None);
        // A story that does not race has no contestant to note.
        let mut plain = StoryState::new("t".into(), StoryStatus::Pending);
        plain.note_findings(1, 4);
        assert!(plain.contestant_at(1).is_none());
    }
}
