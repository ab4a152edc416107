//! The wire protocol: stream, subject, consumer and bucket names, and the
//! messages (JSON) that travel on them.
//!
//! - Jobs: stream `CASCADE_JOBS` (work-queue retention: a job is removed
//!   when a worker acks it), subject `cascade.jobs.<repo>.<run>` (one per
//!   repository and run), consumed by every worker through one durable pull
//!   consumer `cascade-workers` (explicit ack, `ack_wait` [`ACK_WAIT`],
//!   kept alive by in-progress acks every [`PROGRESS_EVERY`] while the job
//!   runs, so a job is redelivered only when its worker died).
//! - Results: stream `CASCADE_RESULTS` (limits retention, kept
//!   [`RESULTS_MAX_AGE`]), subject `cascade.results.<repo>.<job>`: a
//!   `started` message, the job's story events (`progress`, see
//!   [`relayed`]) and a `finished` message per run of a job. The coordinator
//!   reads new ones live and, for a job it adopts after a restart, the last
//!   one stored for the job's subject.
//! - Bases: subject `cascade.bases.<repo>` (core NATS request-reply, not
//!   stored): a worker asks for its job's base ([`BaseRequest`]), a
//!   coordinator answers with a pack (see the `bases` module).
//! - Workers: key-value bucket `cascade_workers` (entries expire after
//!   [`WORKER_TTL`]), key = worker id, value = its latest [`Heartbeat`].

use std::time::Duration;

use cascade_engine::events::Event;
use cascade_engine::executor::{Job, JobReport};
use serde::{Deserialize, Serialize};

pub const JOBS_STREAM: &str = "CASCADE_JOBS";
pub const RESULTS_STREAM: &str = "CASCADE_RESULTS";
pub const WORKERS_CONSUMER: &str = "cascade-workers";
pub const WORKERS_BUCKET: &str = "cascade_workers";

/// A job not acked (nor progressed) for this long goes to another worker.
pub const ACK_WAIT: Duration = Duration::from_secs(30);
/// How often a worker tells JetStream that a job is still being worked on.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How often a worker publishes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// A worker whose heartbeat is older than this is gone.
pub const WORKER_TTL: Duration = Duration::from_secs(10);
/// How long results stay in the stream (for a coordinator to come back).
pub const RESULTS_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Deliveries after which a job is reported failed instead of run again: a
/// job whose every run kills its worker (out of memory, a crashing agent)
/// must end as a story failure the coordinator can retry or report, not be
/// redelivered for ever.
pub const MAX_DELIVERIES: u64 = 5;
/// A result carries the story's commits as a pack up to this size (bytes,
/// before base64; NATS takes 1 MB messages by default); larger work goes
/// through the shared remote.
pub const MAX_PACK_BYTES: usize = 256 * 1024;

/// The jobs subject of a run of a repository.
pub fn jobs_subject(repo: &str, run: &str) -> String {
    format!("cascade.jobs.{}.{}", token(repo), token(run))
}

/// The results subject of one job.
pub fn results_subject(repo: &str, job_id: &str) -> String {
    format!("cascade.results.{}.{}", token(repo), token(job_id))
}

/// The subject a repository's coordinators answer base requests on.
pub fn bases_subject(repo: &str) -> String {
    format!("cascade.bases.{}", token(repo))
}

/// Every result subject of a repository.
pub fn results_filter(repo: &str) -> String {
    format!("cascade.results.{}.>", token(repo))
}

/// Whether a worker relays `event` of a job to the coordinator, which
/// emits it as its own: what the work of the attempt went through (the
/// agent's fallbacks and end, verification, gates, review). The attempt's
/// start, commit and end are the coordinator's own events.
pub fn relayed(event: &Event) -> bool {
    matches!(
        event,
        Event::AgentFallback { .. }
            | Event::AgentFinished { .. }
            | Event::VerificationFinished { .. }
            | Event::GateStarted { .. }
            | Event::GateFinished { .. }
            | Event::ReviewStarted { .. }
            | Event::ReviewFinished { .. }
    )
}

/// A job's id: run, job key (feature, story, a race's contestant),
/// attempt, base, and whether it resolves a conflict (unique; also the publish de-duplication
/// id, so a retried publish is stored once). The base is in it because a
/// resumed coordinator may publish the same attempt from a newer target tip:
/// that is a new job, which de-duplication must not drop.
pub fn job_id(job: &Job) -> String {
    let base = job.base.get(..12).unwrap_or(&job.base);
    let resolve = if job.resolve.is_some() { "r" } else { "" };
    token(&format!(
        "{}-{}-a{}{resolve}-{base}",
        job.run_id,
        job.job_key(),
        job.attempt
    ))
}

/// The de-duplication id a job is published with (`Nats-Msg-Id`): the job
/// id within its repository. The jobs stream serves every repository, and
/// run ids (time and pid) and bases (commit ids) can repeat across
/// repositories: two projects with the same content started in the same
/// second, as a benchmark does, would lose the second one's job.
pub fn publish_id(repo_key: &str, job_id: &str) -> String {
    format!("{repo_key}.{job_id}")
}

/// A repository's key in subjects: a short stable hash of the shared
/// remote's URL (the same on every machine using that URL).
pub fn repo_key(remote: &str) -> String {
    // FNV-1a, 64 bit: stable across versions and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in remote.trim_end_matches('/').bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("r{h:016x}")
}

/// One subject token: what NATS separates on (`.`), matches on (`*`, `>`)
/// or cannot carry (whitespace) becomes `_`.
pub fn token(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The ref a coordinator pushes a job's base commit to (not a branch: it
/// shows in no branch list and never moves a user's branch).
pub fn base_ref(base: &str) -> String {
    format!("refs/cascade/base/{base}")
}

/// A job as published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobMsg {
    pub id: String,
    /// The shared git remote's URL as the coordinator knows it (a worker's
    /// `--remote` wins).
    pub remote: String,
    /// Where the worker publishes what happens (see [`ResultMsg`]).
    pub results: String,
    pub job: Job,
}

/// A worker's request for a job's base commit: `have`, the commits its
/// clone has (with their whole history), which the answer's pack leaves out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaseRequest {
    pub base: String,
    pub have: Vec<String>,
}

/// A worker's word about a job, on the job's results subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultMsg {
    pub job_id: String,
    pub story: String,
    pub attempt: u32,
    pub worker: String,
    #[serde(flatten)]
    pub kind: ResultKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResultKind {
    /// The worker took the job; its agent is starting.
    Started { agent: String },
    /// The job ended.
    Finished(Finished),
    /// A story event of the job's work ([`relayed`]), in order with the
    /// job's other messages.
    Progress { event: Box<Event> },
}

/// A job's end. On `passed`, `report`'s commit is in `pack` (base64 of a
/// git pack of the commits beyond the job's base) when that is at most
/// [`max_pack_bytes`], else on `branch` of the shared remote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    pub branch: String,
    pub report: Box<JobReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
}

/// The largest story pack a result carries ([`MAX_PACK_BYTES`], or
/// `CASCADE_FLEET_MAX_PACK_BYTES`; 0: never, the work is always pushed).
pub fn max_pack_bytes() -> usize {
    std::env::var("CASCADE_FLEET_MAX_PACK_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_PACK_BYTES)
}

/// A worker's heartbeat (the value of its key in the workers bucket).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub labels: Vec<String>,
    pub slots: usize,
    /// Configured agents whose command is on this worker's PATH.
    pub agents: Vec<String>,
    pub jobs: Vec<RunningJob>,
    /// Stopping: takes no new job.
    pub draining: bool,
    /// RFC 3339, UTC.
    pub at: String,
    pub started_at: String,
    /// Jobs finished since the worker started.
    pub done: u64,
}

/// A job a worker is running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningJob {
    pub job_id: String,
    pub story: String,
    pub attempt: u32,
    pub run: String,
    pub since: String,
}

/// A job for tests: story `story`'s attempt from `base` into `main`.
#[cfg(test)]
pub(crate) fn test_job(feature: Option<&str>, story: &str, attempt: u32, base: &str) -> Job {
    let mut j: Job = serde_json::from_value(serde_json::json!({
            "run_id": "20260101T000000Z-12", "story": story, "title": "t", "attempt": attempt,
            "max_attempts": 3, "phase": "implementation", "base": base, "target_branch": "main",
            "prd": {}, "agents": {"agent": null, "impl_agent": null, "retry_agent": null,
            "review_agent": null, "no_fallback": false, "candidates": []},
            "use_gate_cache": true, "excerpt_bytes": 100
    }))
    .unwrap();
    j.feature = feature.map(str::to_string);
    j
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_job as job;

    #[test]
    fn subjects_are_single_tokens() {
        assert_eq!(token("story.1 x>*"), "story_1_x__");
        let id = job_id(&job(None, "api.v2", 3, "0123456789abcdef"));
        assert!(!id.contains('.'));
        assert!(id.ends_with("-a3-0123456789ab"), "{id}");
        assert_ne!(id, job_id(&job(None, "api.v2", 3, "fedcba9876543210")));
        assert!(results_subject("r1", &id).starts_with("cascade.results.r1."));
        // One job published again is one message; the same job id in
        // another repository is another.
        assert_eq!(publish_id("r1", &id), publish_id("r1", &id));
        assert_ne!(publish_id("r1", &id), publish_id("r2", &id));
        assert_eq!(repo_key("git@h:x.git"), repo_key("git@h:x.git/"));
        assert_ne!(repo_key("a"), repo_key("b"));
    }

    #[test]
    fn stories_of_features_have_their_own_jobs_and_branches() {
        let (a, b) = (
            job(Some("auth"), "story-001", 1, "0123456789abcdef"),
            job(Some("billing"), "story-001", 1, "0123456789abcdef"),
        );
        assert_ne!(job_id(&a), job_id(&b));
        assert_eq!(a.key(), "auth.story-001");
        assert_eq!(a.attempt_branch(), "cascade/auth.story-001/a1");
        let plain = job(None, "story-001", 2, "0123456789abcdef");
        assert_eq!(plain.attempt_branch(), "cascade/story-001/a2");
        let mut resolving = plain.clone();
        resolving.resolve = Some(cascade_engine::executor::JobResolve {
            commit: "c".into(),
            files: vec![],
            agent: "x".into(),
        });
        assert_ne!(job_id(&plain), job_id(&resolving));
    }

    #[test]
    fn contestants_of_one_story_are_jobs_of_their_own_on_the_storys_key() {
        let mut small = job(None, "s1", 1, "0123456789abcdef");
        small.contestant = Some("small".into());
        let mut big = job(None, "s1", 2, "0123456789abcdef");
        big.contestant = Some("big".into());
        // The ledger holds both at once; their branches are the story's.
        assert_eq!(small.job_key(), "s1@small");
        assert_ne!(small.job_key(), big.job_key());
        assert_eq!((small.key(), big.key()), ("s1".into(), "s1".into()));
        assert_ne!(job_id(&small), job_id(&big));
        assert_ne!(small.attempt_branch(), big.attempt_branch());
        // The same attempt of the same story raced by another contestant
        // is another job.
        let mut other = small.clone();
        other.contestant = Some("other".into());
        assert_ne!(job_id(&small), job_id(&other));
        // A story that does not race keeps its key.
        assert_eq!(job(None, "s1", 1, "0").job_key(), "s1");
    }
}
