//! The typed events the engine emits while it runs.
//!
//! The engine never prints: everything a reporter (terminal, NDJSON,
//! progress.txt) needs arrives through one callback as an [`Event`]. Every
//! event serializes as a flat JSON object with an `"event"` field in
//! snake_case (`{"event": "story_started", "story": "story-001", ...}`), which
//! is exactly one line of `cascade approve --json`. Fields are plain strings
//! and numbers so reporters need no other cascade crate.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::retry::FailureKind;

/// The reporter hook: called (from any thread) with every event, in order.
pub type EventSink = Arc<dyn Fn(&Event) + Send + Sync>;

/// One step of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The run begins (after validation, locking and the dirty-tree check).
    RunStarted {
        run_id: String,
        /// The PRD being run.
        prd: String,
        /// The branch stories merge into.
        target_branch: String,
        /// Stories in the plan.
        total: usize,
        /// Stories already complete (skipped).
        already_complete: usize,
        /// `batch` or `eager`.
        schedule: String,
        parallel: usize,
        /// Number of batches of the remaining work.
        batches: usize,
        /// A resumed run.
        resumed: bool,
    },
    /// A batch starts (batch schedule; 1-based).
    BatchStarted {
        batch: usize,
        of: usize,
        stories: Vec<String>,
    },
    /// Every story of a batch is done, failed or blocked.
    BatchFinished {
        batch: usize,
        of: usize,
    },
    /// The base was judged before the first agent: the required gates of
    /// the target branch's tip ran once (or their kept report was read).
    /// `failed` lists the required gates that fail there; with `passed`
    /// false and mode `stop` the run stops before any agent runs.
    BaseJudged {
        /// The commit the first stories start from.
        commit: String,
        passed: bool,
        /// `--base-failures`: `stop` or `known`.
        mode: String,
        /// The report was kept from an earlier run on the same tree.
        cached: bool,
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        failed: Vec<BaseFailure>,
        duration_ms: u64,
    },
    /// Something the user should know that changes nothing (stale lock taken
    /// over, schedule adjusted, worktree left behind...).
    Notice {
        message: String,
    },
    /// A story is complete already (in prd.json, or its commit is on the target
    /// branch) and will not run.
    StorySkipped {
        story: String,
        reason: String,
    },
    /// A fallback was used when resolving the story's agent.
    AgentFallback {
        story: String,
        from: String,
        to: String,
        why: String,
    },
    /// The agent process of an attempt started.
    StoryStarted {
        story: String,
        title: String,
        agent: String,
        attempt: u32,
        max_attempts: u32,
        /// `implementation` or `retry`.
        phase: String,
        fallbacks: Vec<FallbackNote>,
        pid: u32,
        branch: String,
        worktree: String,
        /// What the attempt's processes are confined by: "landlock abi 7",
        /// or "none".
        #[serde(default)]
        confinement: String,
    },
    /// The agent process of an attempt ended.
    AgentFinished {
        story: String,
        agent: String,
        attempt: u32,
        success: bool,
        /// "exit code 0", "timed out after 5.0s", ...
        outcome: String,
        exit_code: Option<i32>,
        timed_out: bool,
        duration_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        input_tokens: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        output_tokens: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        cost_usd: Option<f64>,
        log: String,
    },
    /// The agent's changes were committed on the story branch.
    StoryCommitted {
        story: String,
        attempt: u32,
        commit: String,
    },
    /// Untracked dependency or build output the attempt's commit left out
    /// (the files stay in the worktree; the base tracks nothing there).
    CommitLeftOut {
        story: String,
        attempt: u32,
        left_out: Vec<LeftOutDir>,
    },
    /// Local verification checked the lines the attempt added (stubs,
    /// skipped or removed tests, gate/CI edits); `findings` empty: clean.
    VerificationFinished {
        story: String,
        attempt: u32,
        passed: bool,
        findings: Vec<VerifyFinding>,
        /// What the story allows (`verify_allow`: rule ids and files).
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        allowed: Vec<String>,
        /// Findings the story's `verify_allow` let go (an edit of a
        /// protected file it allows, a stub rule it allows).
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        waived: Vec<VerifyFinding>,
        duration_ms: u64,
    },
    /// The story's new or changed tests ran on its base commit with only
    /// the test changes applied (`--prove-tests`); a test that passed
    /// there is a finding (`unproven-test`).
    TestsProved {
        story: String,
        attempt: u32,
        passed: bool,
        /// Tests run on the base.
        tests: u32,
        findings: Vec<VerifyFinding>,
        /// What could not be proven and why (no runner installed...).
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        notes: Vec<String>,
        duration_ms: u64,
    },
    /// A review agent starts on the story's change.
    ReviewStarted {
        story: String,
        attempt: u32,
        agent: String,
        /// The agent that wrote the code.
        author: String,
        /// Why the reviewer is the author, when it is (no other agent available).
        #[serde(skip_serializing_if = "Option::is_none", default)]
        note: Option<String>,
    },
    /// The review's answer: `pass`, `needs_revision`, or `missing` (no
    /// `<review>` marker: a pass with a warning, or a failure with
    /// `--review=strict`).
    ReviewFinished {
        story: String,
        attempt: u32,
        agent: String,
        verdict: String,
        passed: bool,
        strict: bool,
        #[serde(skip_serializing_if = "String::is_empty", default)]
        findings: String,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        cost_usd: Option<f64>,
        duration_ms: u64,
        log: String,
    },
    /// A racing story's round starts: its contestants, their branches.
    RaceStarted {
        story: String,
        /// The first contestant's attempt number (the others follow it).
        attempt: u32,
        contestants: Vec<String>,
        branches: Vec<String>,
        until: crate::race::RaceUntil,
        keep: crate::race::RaceKeep,
    },
    /// One contestant is done (never `running`).
    RaceContestantFinished {
        story: String,
        contestant: String,
        agent: String,
        attempt: u32,
        branch: String,
        status: crate::race::ContestantStatus,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        error_type: Option<FailureKind>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        error: Option<String>,
        /// Lines added plus removed (a contestant that passed).
        #[serde(skip_serializing_if = "Option::is_none", default)]
        lines_changed: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        findings: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        review_passed: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        cost_usd: Option<f64>,
    },
    /// The rule chose: only the winner goes to the merge queue.
    RaceWon {
        story: String,
        winner: String,
        agent: String,
        attempt: u32,
        branch: String,
        /// What decided it against the runner-up.
        reason: String,
        /// The other contestants that passed, best first.
        runners_up: Vec<String>,
    },
    /// A quality gate started in the story's worktree.
    GateStarted {
        story: String,
        gate: String,
    },
    /// A quality gate finished.
    GateFinished {
        story: String,
        gate: String,
        passed: bool,
        required: bool,
        cached: bool,
        /// `local`, `remote`, `miss` or `off` (cache not consulted).
        #[serde(default)]
        cache: String,
        flaky: bool,
        skipped: bool,
        duration_ms: u64,
        errors: usize,
        /// Killed at its timeout: "timed out after N s" (else absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timed_out: Option<String>,
    },
    /// One attempt failed (a retry may follow).
    AttemptFailed {
        story: String,
        agent: String,
        attempt: u32,
        error_type: FailureKind,
        error: String,
    },
    /// The story will be attempted again.
    RetryScheduled {
        story: String,
        /// The attempt about to run.
        attempt: u32,
        max_attempts: u32,
        agent: String,
        error_type: FailureKind,
        delay_ms: u64,
    },
    /// The story's turn in the serial merge queue came: its branch is
    /// being merged into the target branch (`story_merged`, or a
    /// `merge_conflict`, follows).
    MergeStarted {
        story: String,
        attempt: u32,
        branch: String,
        target_branch: String,
    },
    /// The story branch was merged into the target branch.
    StoryMerged {
        story: String,
        agent: String,
        attempts: u32,
        commit: String,
        fast_forward: bool,
        target_branch: String,
        duration_ms: u64,
        /// The fleet worker that ran the story's last attempt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
    },
    /// Integration gating: the story's merge with the target's tip is
    /// built in a scratch worktree and its required gates start on it.
    /// `members`: the stories in the merged tree that this gating checks
    /// together (the story itself); `merged_since`: the stories merged into
    /// the target since the story's base, which it must now fit with.
    IntegrationStarted {
        story: String,
        members: Vec<String>,
        merged_since: Vec<String>,
        target_branch: String,
    },
    /// The merged tree's gates ended: `verdict` is `passed` (the target
    /// moves to it once the stories ahead in the train have landed),
    /// `failed` (nothing moved; `failed_gates` names them) or `superseded`
    /// (stopped: a story ahead failed, so the tree is merged and gated
    /// again without it).
    IntegrationFinished {
        story: String,
        members: Vec<String>,
        verdict: String,
        failed_gates: Vec<String>,
    },
    /// Merging the story branch conflicted; the branch is kept.
    MergeConflict {
        story: String,
        branch: String,
        files: Vec<String>,
    },
    /// The story failed for good.
    StoryFailed {
        story: String,
        agent: String,
        attempts: u32,
        error_type: FailureKind,
        error: String,
        branch: String,
        worktree: String,
        /// The fleet worker that ran the story's last attempt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
    },
    /// Fleet: an attempt was published as a job (`subject`) for workers,
    /// starting from the target branch's commit `base`.
    JobPublished {
        story: String,
        attempt: u32,
        base: String,
        subject: String,
    },
    /// Fleet: a worker took the job and its agent started.
    JobStarted {
        story: String,
        attempt: u32,
        worker: String,
        agent: String,
    },
    /// Fleet: a worker finished the job (`status`: passed | failed | interrupted).
    JobFinished {
        story: String,
        attempt: u32,
        worker: String,
        agent: String,
        status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        duration_ms: u64,
    },
    /// Fleet: the coordinator waits (no live worker yet, the job queue or
    /// NATS unreachable); `reason` says what for.
    FleetWaiting {
        reason: String,
    },
    /// The story cannot run because a dependency failed.
    StoryBlocked {
        story: String,
        /// The failed (or blocked) dependencies.
        blocked_by: Vec<String>,
    },
    /// The run stopped after a batch, waiting for confirmation (`cascade resume`
    /// or `approve` again continues).
    RunPaused {
        reason: String,
    },
    /// A budget ran out. `scope` is `run` (no new attempt starts; the run
    /// ends as `budget_exhausted`) or `story` (that story fails as `budget`).
    /// `spent_usd` is `None` when no agent reported what it spent (and no
    /// price was known): the spend is unknown, not zero.
    BudgetExhausted {
        scope: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        story: Option<String>,
        /// `cost` or `duration`.
        limit: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        limit_usd: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        limit_secs: Option<u64>,
        spent_usd: Option<f64>,
        /// Attempts whose spend nobody reported.
        unknown_attempts: u32,
        message: String,
    },
    /// A new agent or gate waits: available memory is below the threshold.
    WaitingForMemory {
        /// `agent` or `gate`.
        what: String,
        story: String,
        available_mb: u64,
        threshold_mb: u64,
    },
    /// An agent hit its provider's rate limit: every story using it waits
    /// until the cooldown ends; its concurrency drops to `concurrency`.
    AgentCooldown {
        agent: String,
        story: String,
        cooldown_ms: u64,
        /// RFC 3339 time the cooldown ends.
        until: String,
        /// Whether the provider said how long (Retry-After).
        retry_after: bool,
        /// Stories that may run this agent at once now.
        concurrency: usize,
        message: String,
    },
    /// The merge queue asks an agent to resolve a conflict with the target branch.
    MergeResolving {
        story: String,
        agent: String,
        files: Vec<String>,
    },
    /// The agent resolved the conflict; the resolution passed the gates.
    MergeResolved {
        story: String,
        agent: String,
        commit: String,
    },
    /// The run ended.
    /// A request to steer the live run (`control::steer`): pause, resume,
    /// cancel or retry, who asked (`ui`, `cli`), and whether it was taken.
    Control {
        action: String,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        story: Option<String>,
        by: String,
        ok: bool,
        message: String,
    },
    RunFinished {
        status: RunStatus,
        stories: StoryCounts,
        duration_ms: u64,
        /// Per-story results, for the final summary table.
        summary: Vec<StorySummary>,
        /// `--integration` of the run (`gate` or `trust`): whether every
        /// merge was gated as merged before the target moved.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        integration: Option<String>,
    },
    // A mega run's own steps (`cascade mega approve`, `mega::run`); the
    // engine events of its features come as `Feature`.
    MegaStarted {
        plan: std::path::PathBuf,
        target_branch: String,
        features: usize,
        batches: usize,
        parallel: usize,
        resumed: bool,
    },
    FeatureBatchStarted {
        batch: usize,
        of: usize,
        features: Vec<String>,
    },
    /// The feature's worktree is ready on its branch.
    FeatureStarted {
        feature: String,
        branch: String,
        worktree: std::path::PathBuf,
        /// Whether an existing branch was reused (resume).
        reused: bool,
    },
    /// The feature's PRD is known.
    PrdReady {
        feature: String,
        path: std::path::PathBuf,
        source: crate::mega::state::PrdSource,
        stories: usize,
    },
    /// The PRD agent is called.
    PrdGenerationStarted {
        feature: String,
        attempt: u32,
        max_attempts: u32,
    },
    /// A call of the PRD agent ended: what it spent (charged to the run's
    /// budget, like a story's agent). `None`s: it reported nothing.
    PrdAgentFinished {
        feature: String,
        attempt: u32,
        agent: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input_tokens: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_tokens: Option<u64>,
    },
    /// What the PRD agent wrote was rejected.
    PrdInvalid {
        feature: String,
        attempt: u32,
        problems: Vec<String>,
    },
    /// The engine finished the feature's stories.
    FeatureStoriesFinished {
        feature: String,
        stories: crate::mega::StoryCounts,
    },
    FeatureMerged {
        feature: String,
        branch: String,
        target_branch: String,
        commit: String,
    },
    /// The feature failed for good; its branch and worktree are kept.
    FeatureFailed {
        feature: String,
        kind: FailureKind,
        error: String,
        branch: String,
        worktree: Option<std::path::PathBuf>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        conflict_files: Vec<String>,
    },
    FeatureBlocked {
        feature: String,
        blocked_by: String,
    },
    /// Integration gating of a feature's merge: the target moved since the
    /// feature started (`merged_since`: the features landed meanwhile), so
    /// the merge is checked out in a scratch worktree and the target's
    /// gates run on it before the target moves.
    FeatureIntegrationStarted {
        feature: String,
        merged_since: Vec<String>,
        target_branch: String,
    },
    /// The merged tree's gates ended: `passed` (the target moves to it) or
    /// not (nothing moved; the feature fails as `integration`).
    FeatureIntegrationFinished {
        feature: String,
        passed: bool,
        summary: String,
    },
    /// The gates ran on the target branch after a batch was merged.
    TargetGatesFinished {
        batch: usize,
        passed: bool,
        summary: String,
    },
    /// A landed feature's worktree and branch were removed.
    FeatureCleanedUp {
        feature: String,
    },
    /// Something worth knowing that changes nothing.
    MegaNotice {
        message: String,
    },
    /// Stopped after a batch (no `--auto-run`); approving again continues.
    MegaPaused {
        next_batch: usize,
        reason: String,
    },
    MegaFinished {
        status: RunStatus,
        features: crate::mega::state::FeatureCounts,
        duration_ms: u64,
    },

    /// An engine event of one feature of a mega run: on the wire the
    /// event's own fields with `"feature"` added (read back, such a line is
    /// the bare engine event; readers of a mega stream take `feature` from
    /// the JSON).
    #[serde(untagged, skip_deserializing)]
    Feature(FeatureEvent),
}

/// An engine event of feature `feature` ([`Event::Feature`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureEvent {
    pub feature: String,
    pub event: Box<Event>,
}

/// `{"feature": ..., <the event's fields>}`: a derived flatten of `Event`
/// inside `Event` would be a type without end, so the event's fields are
/// copied from its JSON object.
impl Serialize for FeatureEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap};
        let serde_json::Value::Object(fields) =
            serde_json::to_value(&*self.event).map_err(S::Error::custom)?
        else {
            return Err(S::Error::custom("an event serializes as a JSON object"));
        };
        let mut map = s.serialize_map(Some(fields.len() + 1))?;
        map.serialize_entry("feature", &self.feature)?;
        for (k, v) in fields.iter().filter(|(k, _)| *k != "feature") {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// A fallback taken while resolving an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FallbackNote {
    pub from: String,
    pub to: String,
    pub why: String,
}

/// How a run ended (a plain run's `run_finished`, a mega run's
/// `mega_finished`), or, stored in a mega run's state, where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Every story is complete.
    Completed,
    /// The run ended and some story failed or is blocked.
    Failed,
    /// Ctrl-C: state saved; `cascade resume` continues.
    Interrupted,
    /// Stopped on purpose with work left (after a batch, or the iteration limit).
    Paused,
    /// Stopped on its budget (`--max-cost`, `--max-duration`, prd.json
    /// `metadata.budget`) with work left; resumable with a raised budget.
    BudgetExhausted,
    /// Not ended: a mega run going on (or killed: its pid says which).
    Running,
    /// A finished mega run that `mega complete` cleaned up after.
    Closed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Paused => "paused",
            RunStatus::BudgetExhausted => "budget_exhausted",
            RunStatus::Running => "running",
            RunStatus::Closed => "closed",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Stories by final status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoryCounts {
    pub complete: usize,
    pub failed: usize,
    pub blocked: usize,
    pub pending: usize,
}

/// One row of the final summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorySummary {
    pub story: String,
    /// pending | running | complete | failed | blocked
    pub status: String,
    pub agent: Option<String>,
    pub attempts: u32,
    /// Gates that ran (or came from the cache) on the last attempt.
    pub gates: Vec<GateSummary>,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// What the story's `verify_allow` let go in the last attempt checked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verification_allowed: Vec<String>,
    /// What local verification found in the last attempt it checked.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub verification: Vec<String>,
    /// The last review: `pass`, `needs_revision` or `missing`, and by whom.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub review: Option<crate::state::ReviewRecord>,
    /// What confined the last attempt: "landlock abi 7", or "none".
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub confinement: Option<String>,
    /// A racing story's last round (contestants, winner, runners-up).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub race: Option<crate::race::RaceRecord>,
}

/// One finding of local verification (`{rule, file, line, message, text}`).
pub use cascade_verify::Finding as VerifyFinding;

/// A directory a story's commit left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOutDir {
    /// Repository path of the directory, no trailing `/`.
    pub dir: String,
    /// How many files under it were left out.
    pub files: usize,
    /// Why (`dependency or build output`).
    pub reason: String,
}

/// A required gate that fails on the base (in [`Event::BaseJudged`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseFailure {
    pub gate: String,
    /// Its first parsed errors (`file:line: message`), or how it ended.
    pub errors: Vec<String>,
    /// The tests its census saw failing there (the known failures).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub failing_tests: Vec<String>,
    /// With `--base-failures known`: the census judges stories on this gate
    /// (false when the gate has no census of failing tests to judge by).
    pub judged_by_census: bool,
}

/// A gate's result in the final summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateSummary {
    pub name: String,
    pub passed: bool,
    pub cached: bool,
    pub flaky: bool,
}

impl GateSummary {
    /// The summary of one gate's result.
    pub fn of(g: &cascade_gates::GateResult) -> GateSummary {
        GateSummary {
            name: g.name.clone(),
            passed: g.passed,
            cached: g.cached,
            flaky: g.flaky,
        }
    }
}

impl Event {
    /// `event` of feature `feature`'s engine, in a mega run.
    pub fn in_feature(feature: impl Into<String>, event: Event) -> Event {
        Event::Feature(FeatureEvent {
            feature: feature.into(),
            event: Box::new(event),
        })
    }

    /// The story an event is about, if any.
    pub fn story(&self) -> Option<&str> {
        match self {
            Event::StorySkipped { story, .. }
            | Event::AgentFallback { story, .. }
            | Event::StoryStarted { story, .. }
            | Event::AgentFinished { story, .. }
            | Event::StoryCommitted { story, .. }
            | Event::CommitLeftOut { story, .. }
            | Event::VerificationFinished { story, .. }
            | Event::TestsProved { story, .. }
            | Event::ReviewStarted { story, .. }
            | Event::ReviewFinished { story, .. }
            | Event::GateStarted { story, .. }
            | Event::GateFinished { story, .. }
            | Event::AttemptFailed { story, .. }
            | Event::RetryScheduled { story, .. }
            | Event::MergeStarted { story, .. }
            | Event::StoryMerged { story, .. }
            | Event::MergeConflict { story, .. }
            | Event::IntegrationStarted { story, .. }
            | Event::IntegrationFinished { story, .. }
            | Event::StoryFailed { story, .. }
            | Event::StoryBlocked { story, .. }
            | Event::JobPublished { story, .. }
            | Event::JobStarted { story, .. }
            | Event::JobFinished { story, .. }
            | Event::RaceStarted { story, .. }
            | Event::RaceContestantFinished { story, .. }
            | Event::RaceWon { story, .. } => Some(story),
            Event::Feature(f) => f.event.story(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_flat_with_snake_case_tag() {
        let e = Event::RunFinished {
            status: RunStatus::Completed,
            stories: StoryCounts {
                complete: 2,
                ..Default::default()
            },
            duration_ms: 5,
            summary: vec![],
            integration: Some("gate".into()),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "run_finished");
        assert_eq!(v["status"], "completed");
        assert_eq!(v["stories"]["complete"], 2);
        assert_eq!(v["integration"], "gate");
        assert_eq!(v["stories"]["pending"], 0);
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);

        let e = Event::AttemptFailed {
            story: "s".into(),
            agent: "a".into(),
            attempt: 1,
            error_type: FailureKind::QualityGate,
            error: "x".into(),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "attempt_failed");
        assert_eq!(v["error_type"], "quality_gate");
        assert_eq!(e.story(), Some("s"));
    }

    #[test]
    fn a_features_events_are_flat_with_the_feature_added() {
        let e = Event::in_feature(
            "auth",
            Event::StorySkipped {
                story: "s1".into(),
                reason: "done".into(),
            },
        );
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"feature":"auth","event":"story_skipped","story":"s1","reason":"done"}"#
        );
        assert_eq!(e.story(), Some("s1"));
        let e = Event::MegaFinished {
            status: RunStatus::Completed,
            features: crate::mega::state::FeatureCounts::default(),
            duration_ms: 1,
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "mega_finished");
        assert_eq!(v["status"], "completed");
        let e = Event::MegaNotice {
            message: "m".into(),
        };
        assert_eq!(serde_json::to_value(&e).unwrap()["event"], "mega_notice");
    }
}
