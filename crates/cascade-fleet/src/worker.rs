//! The worker: `cascade worker` pulls jobs from the shared consumer and runs
//! each with cascade-engine's own attempt steps (`Engine::run_job`) in a
//! clone of the shared remote, then pushes the work to
//! `cascade/<story>/a<attempt>` and publishes the result.
//!
//! The worker's own directory is `<workdir>/<id>` (the `workdir` module:
//! locked while it runs, so workers never share one). Each of the `slots`
//! runs one job at a time in its own clone (`<dir>/<repo>/slot-<n>`,
//! created once, fetched per job; its story
//! worktrees are reused from job to job). While a job runs its message is
//! kept alive with in-progress acks; it is acked once the result is
//! published (a worker killed before that: JetStream redelivers the job
//! after the ack wait and another worker runs it again; the same branch
//! name is force-pushed). A job whose labels this worker lacks goes back
//! at once (nak) for another worker.
//!
//! Stopping: `drain` (SIGTERM, first Ctrl-C) takes no new job and lets the
//! running ones finish; `kill` (a second signal) stops them and naks their
//! jobs so another worker takes them at once. The heartbeat (every
//! [`HEARTBEAT_EVERY`]) carries id, labels, slots, agents found on PATH and
//! the running jobs; it is removed when the worker exits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::kv;
use async_nats::jetstream::AckKind;
use cascade_engine::config::EngineConfig;
use cascade_engine::control::RunPools;
use cascade_engine::engine::Engine;
use cascade_engine::events::Event;
use cascade_engine::executor::{Job, JobFailure, JobOutcome, JobReport};
use cascade_engine::FailureKind;
use cascade_process::CancelToken;
use futures_util::StreamExt;

use crate::error::FleetError;
use crate::git;
use crate::nats::{max_deliveries, progress_every, Fleet};
use crate::protocol::*;
use crate::timing::Timeline;

/// How a worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub url: String,
    /// `--remote`: the shared remote's URL as this machine reaches it
    /// (default: the one each job names).
    pub remote: Option<String>,
    /// `--agents` (absolute), else the built-in lookup.
    pub agents_path: Option<PathBuf>,
    pub slots: usize,
    pub labels: Vec<String>,
    /// `--id` (default: the first free `<host>-<n>`, see the `workdir` module).
    pub id: Option<String>,
    /// The root of the workers' directories (each worker's clones and job
    /// files go to `<workdir>/<id>`).
    pub workdir: PathBuf,
}

/// What a worker tells its caller (the binary prints it).
#[derive(Debug, Clone)]
pub enum WorkerEvent {
    Ready {
        id: String,
        /// The worker's own (locked) directory.
        dir: PathBuf,
        slots: usize,
        labels: Vec<String>,
        agents: Vec<String>,
    },
    JobTaken {
        story: String,
        attempt: u32,
        job_id: String,
        delivery: u64,
    },
    /// An engine event of a running job.
    Engine(Event),
    JobDone {
        story: String,
        attempt: u32,
        status: String,
        error: Option<String>,
        duration_ms: u64,
        /// Where the job's time went on this worker: each phase and its
        /// milliseconds, in order (see the `timing` module).
        phases: Vec<(String, u64)>,
    },
    /// A job handed back (labels missing, or stopped by a second signal).
    JobReturned {
        story: String,
        attempt: u32,
        why: String,
    },
    Draining {
        running: usize,
    },
    Problem {
        message: String,
    },
}

pub type WorkerSink = Arc<dyn Fn(WorkerEvent) + Send + Sync>;

/// Shared by the slots and the heartbeat.
struct Shared {
    cfg: WorkerConfig,
    /// The worker's id and its own directory.
    id: String,
    dir: PathBuf,
    fleet: Fleet,
    consumer: PullConsumer,
    store: kv::Store,
    agents: Vec<String>,
    running: Mutex<Vec<RunningJob>>,
    done: AtomicU64,
    draining: AtomicBool,
    started_at: String,
    sink: WorkerSink,
    drain: CancelToken,
    kill: CancelToken,
    /// Heartbeats one at a time, and `true` once the worker left: a
    /// heartbeat of a job's end (sent without holding the slot up) that
    /// landed after the worker purged its entry would list a worker that is
    /// gone until the entry expired.
    left: tokio::sync::Mutex<bool>,
    /// Gate slots and cooldowns shared by the slots' jobs, per `--gate-jobs`
    /// the jobs name.
    pools: Mutex<HashMap<Option<usize>, RunPools>>,
}

impl Shared {
    /// The pools `job` shares with this worker's other jobs like it.
    fn pools_for(&self, job: &Job) -> RunPools {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pools
            .entry(job.gate_jobs)
            .or_insert_with(|| job.pools(self.cfg.slots))
            .clone()
    }
}

/// Runs the worker until `drain` (and the running jobs finished) or `kill`.
/// Returns the number of jobs it finished.
pub async fn run(
    cfg: WorkerConfig,
    sink: WorkerSink,
    drain: CancelToken,
    kill: CancelToken,
) -> Result<u64, FleetError> {
    let agents = available_agents(cfg.agents_path.as_deref())?;
    let claimed = crate::workdir::claim(&cfg.workdir, cfg.id.as_deref())?;
    if let Some(message) = &claimed.note {
        sink(WorkerEvent::Problem {
            message: format!("{}: {message}", claimed.dir.display()),
        });
    }
    // Agents a killed worker of this directory left running would keep
    // writing into the clones this worker reuses: stopped before any job.
    let dir = claimed.dir.clone();
    let stopped = tokio::task::spawn_blocking(move || {
        cascade_engine::stop_agents_under(&dir, Duration::from_secs(2))
    })
    .await
    .unwrap_or_default();
    for message in stopped {
        sink(WorkerEvent::Problem {
            message: format!("{}: {message}", claimed.dir.display()),
        });
    }
    // With those stopped, no live process writes the clones: the lock files
    // a killed worker (or its agent's git) left would fail every later
    // checkout of that slot ("failed to lock file .git/HEAD.lock").
    for lock in crate::workdir::remove_stale_git_locks(&claimed.dir) {
        sink(WorkerEvent::Problem {
            message: format!("removed {} (left by a stopped writer)", lock.display()),
        });
    }
    let id = claimed.id.clone();
    let fleet = Fleet::connect(&cfg.url, &format!("cascade-worker-{id}")).await?;
    let jobs = fleet.jobs_stream().await?;
    fleet.results_stream().await?;
    let consumer = fleet.workers_consumer(&jobs).await?;
    let store = fleet.workers_kv().await?;
    let shared = Arc::new(Shared {
        agents: agents.clone(),
        running: Mutex::new(Vec::new()),
        done: AtomicU64::new(0),
        left: tokio::sync::Mutex::new(false),
        draining: AtomicBool::new(false),
        started_at: now(),
        sink: Arc::clone(&sink),
        drain: drain.clone(),
        kill: kill.clone(),
        pools: Mutex::new(HashMap::new()),
        fleet,
        consumer,
        store: store.clone(),
        cfg: cfg.clone(),
        id: id.clone(),
        dir: claimed.dir.clone(),
    });
    sink(WorkerEvent::Ready {
        id: id.clone(),
        dir: claimed.dir.clone(),
        slots: cfg.slots,
        labels: cfg.labels.clone(),
        agents,
    });
    beat(&shared, &store).await;
    let heartbeat = {
        let (s, store) = (Arc::clone(&shared), store.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(HEARTBEAT_EVERY);
            loop {
                tick.tick().await;
                beat(&s, &store).await;
            }
        })
    };
    let announce = {
        let s = Arc::clone(&shared);
        let store = store.clone();
        tokio::spawn(async move {
            s.drain.cancelled().await;
            s.draining.store(true, Ordering::SeqCst);
            let running = s.running.lock().map(|r| r.len()).unwrap_or(0);
            (s.sink)(WorkerEvent::Draining { running });
            beat(&s, &store).await;
        })
    };
    let mut slots = tokio::task::JoinSet::new();
    for n in 1..=cfg.slots.max(1) {
        let s = Arc::clone(&shared);
        slots.spawn(async move { slot(n, s).await });
    }
    while slots.join_next().await.is_some() {}
    heartbeat.abort();
    announce.abort();
    // Gone: not listed by `fleet status`, not counted by coordinators
    // (after any heartbeat in flight, and before any later one: see `left`).
    let mut left = shared.left.lock().await;
    *left = true;
    let _ = store.purge(&id).await;
    drop(left);
    drop(claimed);
    Ok(shared.done.load(Ordering::SeqCst))
}

/// The configured agents this machine can run (command installed, or an
/// api agent's key set).
fn available_agents(agents_path: Option<&Path>) -> Result<Vec<String>, FleetError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let loaded =
        cascade_agents::AgentsConfig::load(agents_path, &cwd).map_err(|e| FleetError::Agents {
            message: e.to_string(),
        })?;
    let detector = cascade_agents::Detector::from_env();
    Ok(loaded
        .config
        .agents
        .iter()
        .filter(|a| detector.is_available(a))
        .map(|a| a.name.clone())
        .collect())
}

async fn beat(s: &Shared, store: &kv::Store) {
    let left = s.left.lock().await;
    if *left {
        return;
    }
    let hb = Heartbeat {
        id: s.id.clone(),
        host: cascade_engine::lock::hostname(),
        pid: std::process::id(),
        labels: s.cfg.labels.clone(),
        slots: s.cfg.slots,
        agents: s.agents.clone(),
        jobs: s.running.lock().map(|r| r.clone()).unwrap_or_default(),
        draining: s.draining.load(Ordering::SeqCst),
        at: now(),
        started_at: s.started_at.clone(),
        done: s.done.load(Ordering::SeqCst),
    };
    if let Ok(bytes) = serde_json::to_vec(&hb) {
        let _ = store.put(&s.id, bytes.into()).await;
    }
}

/// A heartbeat now, without holding up the caller (a job's start or end).
fn beat_soon(s: &Arc<Shared>) {
    let s = Arc::clone(s);
    tokio::spawn(async move { beat(&s, &s.store).await });
}

/// One slot: pulls and runs jobs one at a time.
async fn slot(n: usize, s: Arc<Shared>) {
    loop {
        if s.drain.is_cancelled() || s.kill.is_cancelled() {
            return;
        }
        let batch = s
            .consumer
            .fetch()
            .max_messages(1)
            .expires(Duration::from_secs(1))
            .messages()
            .await;
        let mut batch = match batch {
            Ok(b) => b,
            Err(_) => {
                // NATS unreachable: the client reconnects; try again.
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let Some(Ok(msg)) = batch.next().await else {
            continue;
        };
        let job: JobMsg = match serde_json::from_slice(&msg.payload) {
            Ok(j) => j,
            Err(e) => {
                (s.sink)(WorkerEvent::Problem {
                    message: format!("dropped a job that cannot be read: {e}"),
                });
                let _ = msg.ack_with(AckKind::Term).await;
                continue;
            }
        };
        if let Some(missing) = job.job.labels.iter().find(|l| !s.cfg.labels.contains(l)) {
            (s.sink)(WorkerEvent::JobReturned {
                story: job.job.story.clone(),
                attempt: job.job.attempt,
                why: format!("this worker lacks label '{missing}'"),
            });
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
            continue;
        }
        run_one(n, &s, msg, job).await;
    }
}

/// Runs one job: keeps its message alive, runs the engine, pushes, reports.
async fn run_one(n: usize, s: &Arc<Shared>, msg: async_nats::jetstream::Message, m: JobMsg) {
    let job = &m.job;
    let info = msg.info().ok();
    let delivery = info.as_ref().map(|i| i.delivered as u64).unwrap_or(1);
    // In the stream since (the server's clock: meaningful when it and this
    // machine agree, as on one host).
    let queued = info.as_ref().and_then(|i| {
        let ms = (time_now_ms() - i.published.unix_timestamp_nanos() / 1_000_000).max(0);
        Some(Duration::from_millis(u64::try_from(ms).ok()?))
    });
    let timeline = Arc::new(Timeline::new(queued));
    (s.sink)(WorkerEvent::JobTaken {
        story: job.story.clone(),
        attempt: job.attempt,
        job_id: m.id.clone(),
        delivery,
    });
    if delivery > max_deliveries() {
        report_poison(s, &msg, &m, delivery).await;
        return;
    }
    if let Ok(mut r) = s.running.lock() {
        r.push(RunningJob {
            job_id: m.id.clone(),
            story: job.story.clone(),
            attempt: job.attempt,
            run: job.run_id.clone(),
            since: now(),
        });
    }
    // Seen by `fleet status` at once, not at the next beat.
    beat_soon(s);
    let msg = Arc::new(msg);
    let progress = {
        let msg = Arc::clone(&msg);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(progress_every());
            tick.tick().await;
            loop {
                tick.tick().await;
                let _ = msg.ack_with(AckKind::Progress).await;
            }
        })
    };
    let remote = s.cfg.remote.clone().unwrap_or_else(|| m.remote.clone());
    let started = std::time::Instant::now();
    let (report, pack) = execute(n, s, &m, &remote, &timeline).await;
    progress.abort();
    if let Ok(mut r) = s.running.lock() {
        r.retain(|j| j.job_id != m.id);
    }
    beat_soon(s);
    if matches!(report.outcome, JobOutcome::Interrupted) {
        // Stopped by a second signal: another worker takes it at once.
        let _ = msg.ack_with(AckKind::Nak(None)).await;
        (s.sink)(WorkerEvent::JobReturned {
            story: job.story.clone(),
            attempt: job.attempt,
            why: "the worker is stopping".into(),
        });
        return;
    }
    let (status, error) = (report.outcome.status(), report.outcome.error());
    let result = ResultMsg {
        job_id: m.id.clone(),
        story: job.story.clone(),
        attempt: job.attempt,
        worker: s.id.clone(),
        kind: ResultKind::Finished(Finished {
            branch: job.attempt_branch(),
            report: Box::new(report.clone()),
            pack,
        }),
    };
    // The result first, then the ack: a worker killed in between runs the
    // job twice, never zero times (the coordinator ignores the duplicate).
    if publish_result(s, &m.results, &result).await {
        timeline.mark("publish");
        let _ = msg.double_ack().await;
    } else {
        (s.sink)(WorkerEvent::Problem {
            message: format!(
                "{}: could not publish the result; the job will be redelivered",
                job.story
            ),
        });
    }
    s.done.fetch_add(1, Ordering::SeqCst);
    (s.sink)(WorkerEvent::JobDone {
        story: job.story.clone(),
        attempt: job.attempt,
        status: status.into(),
        error,
        duration_ms: started.elapsed().as_millis() as u64,
        phases: timeline.phases(),
    });
}

/// Ends a job that was delivered more than [`max_deliveries`] times without
/// a result (each worker that took it died): a `process_crash` failure, so
/// the coordinator's retry policy decides, instead of another delivery.
async fn report_poison(
    s: &Arc<Shared>,
    msg: &async_nats::jetstream::Message,
    m: &JobMsg,
    delivery: u64,
) {
    let job = &m.job;
    let error = format!(
        "job delivered {delivery} times: every worker that took it stopped without a result \
         (killed, out of memory, or a crash); not run again"
    );
    let report = failed_report(job, FailureKind::ProcessCrash, error.clone(), 0);
    let result = ResultMsg {
        job_id: m.id.clone(),
        story: job.story.clone(),
        attempt: job.attempt,
        worker: s.id.clone(),
        kind: ResultKind::Finished(Finished {
            branch: job.attempt_branch(),
            report: Box::new(report),
            pack: None,
        }),
    };
    if publish_result(s, &m.results, &result).await {
        let _ = msg.double_ack().await;
    }
    (s.sink)(WorkerEvent::JobDone {
        story: job.story.clone(),
        attempt: job.attempt,
        status: "failed".into(),
        error: Some(error),
        duration_ms: 0,
        phases: Vec::new(),
    });
}

/// The report of a job that failed before or instead of its attempt
/// (setup, too many deliveries): charged to the job's first candidate agent.
fn failed_report(job: &Job, kind: FailureKind, error: String, duration_ms: u64) -> JobReport {
    let agent = job
        .agents
        .candidates
        .first()
        .cloned()
        .unwrap_or_else(|| "none".into());
    JobReport {
        agent: agent.clone(),
        outcome: JobOutcome::Failed {
            failure: JobFailure::new(kind, error).charged_to(&agent),
        },
        gates: Vec::new(),
        input_tokens: None,
        output_tokens: None,
        cost_usd: None,
        duration_ms,
        judged: None,
    }
}

/// Publishes into the results stream, retrying while NATS is away (until
/// the worker is killed).
async fn publish_result(s: &Shared, subject: &str, r: &ResultMsg) -> bool {
    let Ok(payload) = serde_json::to_vec(r) else {
        return false;
    };
    for _ in 0..120 {
        let sent = async {
            s.fleet
                .js
                .publish(subject.to_string(), payload.clone().into())
                .await
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())
        };
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(5), sent).await {
            return true;
        }
        if s.kill.is_cancelled() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// The job's work: clone at the base, the engine's attempt steps, the work
/// delivered (a pack for the result, or pushed).
async fn execute(
    n: usize,
    s: &Arc<Shared>,
    m: &JobMsg,
    remote: &str,
    timeline: &Arc<Timeline>,
) -> (JobReport, Option<String>) {
    let job = &m.job;
    let repo_dir = s.dir.join(repo_key(&m.remote));
    let clone = repo_dir.join(format!("slot-{n}"));
    let job_dir = repo_dir.join("jobs").join(&m.id);
    let started = std::time::Instant::now();
    let fail = |kind: FailureKind, error: String| {
        let report = failed_report(job, kind, error, started.elapsed().as_millis() as u64);
        (report, None)
    };
    let work = job.resolve.as_ref().map(|_| job.attempt_branch());
    let source = git::BaseSource {
        client: &s.fleet.client,
        subject: bases_subject(&repo_key(&m.remote)),
    };
    let prepared = git::prepare_clone(
        &clone,
        remote,
        &job.base,
        work.as_deref(),
        Some(source),
        &s.kill,
    );
    match prepared.await {
        Ok(()) => {}
        Err(FleetError::Cancelled) => return (interrupted(job), None),
        Err(e) => return fail(FailureKind::Setup, format!("worker '{}': {e}", s.id)),
    }
    timeline.mark("base");
    if let Err(e) = write_job_files(&job_dir, m) {
        return fail(FailureKind::Setup, format!("worker '{}': {e}", s.id));
    }
    let mut config = EngineConfig::new(&clone, job_dir.join("prd.json"));
    config.agents_path = s.cfg.agents_path.clone();
    config.target_branch = Some(git::BASE_BRANCH.to_string());
    config.state_path = Some(cascade_engine::store::db_path(&job_dir));
    config.progress_path = Some(job_dir.join("progress.txt"));
    config.artifacts_dir = Some(job_dir.clone());
    config.take_lock = false;
    let engine = Engine::new(config);
    // Engine events go to the caller; the agent's start is also published.
    // Engine events go to the caller; the agent's start and the story
    // events the coordinator shows go to the job's results subject, in order.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let sink: cascade_engine::EventSink = {
        let out = Arc::clone(&s.sink);
        let timeline = Arc::clone(timeline);
        Arc::new(move |e: &Event| {
            if let Some(phase) = phase_ended(e) {
                timeline.mark(phase);
            }
            out(WorkerEvent::Engine(e.clone()));
            if matches!(e, Event::StoryStarted { .. }) || relayed(e) {
                let _ = tx.send(e.clone());
            }
        })
    };
    let forward = {
        let (fleet, subject) = (s.fleet.clone(), m.results.clone());
        let (id, story, attempt, worker) =
            (m.id.clone(), job.story.clone(), job.attempt, s.id.clone());
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let kind = match event {
                    Event::StoryStarted { agent, .. } => ResultKind::Started { agent },
                    event => ResultKind::Progress {
                        event: Box::new(event),
                    },
                };
                let r = ResultMsg {
                    job_id: id.clone(),
                    story: story.clone(),
                    attempt,
                    worker: worker.clone(),
                    kind,
                };
                if let Ok(p) = serde_json::to_vec(&r) {
                    let _ = fleet.js.publish(subject.clone(), p.into()).await;
                }
            }
        })
    };
    let pools = s.pools_for(job);
    let ran = engine.run_job(job, Some(pools), sink, &s.kill).await;
    drop(engine);
    timeline.mark("checks");
    let _ = tokio::time::timeout(Duration::from_secs(2), forward).await;
    timeline.mark("relay");
    let mut report = match ran {
        Ok(r) => r,
        Err(e) => return fail(FailureKind::Setup, format!("worker '{}': {e}", s.id)),
    };
    let mut pack = None;
    if let JobOutcome::Passed { commit } = &report.outcome {
        match deliver(&clone, remote, job, commit, &s.kill).await {
            Ok(p) => {
                pack = p;
                timeline.mark("pack");
            }
            Err(FleetError::Cancelled) => return (interrupted(job), None),
            Err(e) => {
                report.outcome = JobOutcome::Failed {
                    failure: JobFailure::new(
                        FailureKind::Setup,
                        format!("worker '{}' could not push its work: {e}", s.id),
                    )
                    .charged_to(&report.agent),
                };
            }
        }
    }
    // The job's files are kept only while it runs.
    let _ = std::fs::remove_dir_all(&job_dir);
    (report, pack)
}

/// A passed job's work for the coordinator: a pack (base64) of its commits
/// beyond the base for the result, when that is small enough; else pushed to
/// the job's branch of the shared remote (`None`).
async fn deliver(
    clone: &Path,
    remote: &str,
    job: &Job,
    commit: &str,
    kill: &CancelToken,
) -> Result<Option<String>, FleetError> {
    use base64::Engine as _;
    let limit = max_pack_bytes();
    if limit > 0 {
        let (dir, tip, base) = (clone.to_path_buf(), commit.to_string(), job.base.clone());
        let packed = tokio::task::spawn_blocking(move || {
            cascade_git::transfer::pack_since(&dir, &tip, &base)
        })
        .await;
        if let Ok(Ok(Some(pack))) = packed {
            if pack.len() <= limit {
                return Ok(Some(base64::engine::general_purpose::STANDARD.encode(pack)));
            }
        }
    }
    let local = format!("cascade/{}", job.story);
    git::push_branch(clone, remote, &local, &job.attempt_branch(), kill).await?;
    Ok(None)
}

fn interrupted(job: &cascade_engine::executor::Job) -> JobReport {
    JobReport {
        agent: job.agents.candidates.first().cloned().unwrap_or_default(),
        outcome: JobOutcome::Interrupted,
        gates: Vec::new(),
        input_tokens: None,
        output_tokens: None,
        cost_usd: None,
        duration_ms: 0,
        judged: None,
    }
}

/// The job's one-story PRD (and design document) where the engine reads them.
fn write_job_files(dir: &Path, m: &JobMsg) -> Result<(), FleetError> {
    let io = |source| FleetError::Io {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let prd = serde_json::to_vec_pretty(&m.job.prd).unwrap_or_default();
    std::fs::write(dir.join("prd.json"), prd).map_err(io)?;
    if let Some(d) = &m.job.design_doc {
        let doc = serde_json::to_vec_pretty(d).unwrap_or_default();
        std::fs::write(dir.join("design_doc.json"), doc).map_err(io)?;
    }
    Ok(())
}

/// The phase of a job that an engine event ends (see `timing`).
fn phase_ended(e: &Event) -> Option<&'static str> {
    Some(match e {
        // Everything from the base checked out to the agent's process:
        // the engine's setup, the worktree, the agent's resolution.
        Event::StoryStarted { .. } => "setup",
        Event::AgentFinished { .. } => "agent",
        Event::StoryCommitted { .. } => "commit",
        Event::VerificationFinished { .. } => "verify",
        // To the first gate's start, and to the first gate's end (the
        // other gates fall in the phase after it).
        Event::GateStarted { .. } => "pre-gates",
        Event::GateFinished { .. } => "gates",
        _ => return None,
    })
}

fn time_now_ms() -> i128 {
    chrono::Utc::now().timestamp_millis() as i128
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
