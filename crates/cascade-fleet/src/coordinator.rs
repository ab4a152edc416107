//! The coordinator: an [`Executor`] for cascade-engine that sends each
//! attempt to the fleet. The engine's scheduler, state, retries and merge
//! queue are unchanged; for one attempt this:
//!
//! 1. adopts the story's job still out from before a restart (same run and
//!    base: the ledger), or checks that a live worker can run it (agent,
//!    labels; none after a grace period: the attempt fails as
//!    `agent_unavailable`; no worker at all: it waits, saying so), pushes
//!    the base commit to the shared remote (`refs/cascade/base/<sha>`) and
//!    publishes the job (de-duplicated by its id);
//! 2. waits for the job's result (live, or the last one stored for the job
//!    when adopting), announcing the worker that took it;
//! 3. fetches the pushed branch `cascade/<key>/a<n>` onto the local story
//!    branch and checks that it descends from the base; the engine merges it.
//!
//! Jobs are keyed by the story's key (`<feature>.<story>` in a mega-plan
//! feature: story ids repeat across features), and a race's contestant by
//! the story's key and its name (`Job::job_key`: the contestants of a story
//! are out at once, each on its own attempt branch). The bases it pushed and the
//! branches workers pushed are deleted from the remote when no longer
//! needed (the `refs` module).
//!
//! NATS unreachable for longer than `down_after`: the run is stopped (the
//! caller's token; exit 130, resumable) with an event saying why; jobs out
//! stay in JetStream and the next `cascade resume --fleet` adopts them.
//! Results of a job already handled (a redelivered job run twice) are
//! ignored.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{kv, stream};
use cascade_engine::events::Event;
use cascade_engine::executor::{
    ExecContext, ExecFuture, Executed, Executor, Job, JobFailure, JobOutcome,
};
use cascade_engine::FailureKind;
use cascade_process::{AbortOnDrop, CancelToken};
use tokio::sync::mpsc;

use crate::error::FleetError;
use crate::git;
use crate::ledger::{Ledger, Out};
use crate::nats::Fleet;
use crate::protocol::*;
use crate::refs::RemoteRefs;
use crate::registry;

/// How the coordinator is set up.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// `--fleet`.
    pub url: String,
    /// `--remote` (default: the repository's `origin`).
    pub remote: Option<String>,
    /// The repository (its work tree root).
    pub repo: PathBuf,
    /// `.cascade/` of the repository (the ledger lives there).
    pub cascade_dir: PathBuf,
    /// Stopped (by the coordinator) when NATS stays unreachable.
    pub stop: CancelToken,
    /// How long a job that no live worker can run waits for one.
    pub worker_grace: Duration,
    /// How long NATS may be unreachable before the run stops.
    pub down_after: Duration,
}

impl CoordinatorConfig {
    pub fn new(url: &str, repo: PathBuf, cascade_dir: PathBuf, stop: CancelToken) -> Self {
        CoordinatorConfig {
            url: url.to_string(),
            remote: None,
            repo,
            cascade_dir,
            stop,
            worker_grace: env_secs("CASCADE_FLEET_WORKER_GRACE_SECS", 15),
            down_after: env_secs("CASCADE_FLEET_DOWN_AFTER_SECS", 10),
        }
    }
}

fn env_secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// The fleet executor of one coordinator process.
pub struct Coordinator {
    fleet: Fleet,
    cfg: CoordinatorConfig,
    remote: String,
    /// The repository (git2 side).
    paths: cascade_git::RepoPaths,
    repo_key: String,
    results: stream::Stream,
    workers: kv::Store,
    /// The live workers as last read, and when.
    seen: Mutex<Option<(Instant, Vec<Heartbeat>)>>,
    router: Arc<Router>,
    ledger: Arc<Ledger>,
    /// Bases and workers' branches on the shared remote.
    refs: Arc<RemoteRefs>,
    /// When the connection went down (None: up).
    down_since: Arc<Mutex<Option<Instant>>>,
    stopped: AtomicBool,
    _tasks: Vec<AbortOnDrop>,
}

impl Coordinator {
    /// Connects, sets up the streams and bucket, and starts reading results.
    pub async fn connect(cfg: CoordinatorConfig) -> Result<Coordinator, FleetError> {
        let probe = CancelToken::new();
        let remote = match &cfg.remote {
            Some(r) => r.clone(),
            None => git::origin_url(&cfg.repo, &probe)
                .await
                .ok_or(FleetError::NoRemote)?,
        };
        let paths = cascade_git::RepoPaths::discover(&cfg.repo).map_err(|e| FleetError::Git {
            command: "open the repository".into(),
            message: e.to_string(),
        })?;
        let fleet = Fleet::connect(&cfg.url, "cascade-coordinator").await?;
        fleet.jobs_stream().await?;
        let results = fleet.results_stream().await?;
        let workers = fleet.workers_kv().await?;
        let repo_key = repo_key(&remote);
        let router = Arc::new(Router::default());
        // New results of this repository, live (results stored before now
        // are read per job when a job is adopted).
        let filter = results_filter(&repo_key);
        let feed = crate::live::open(&fleet, &results, &filter).await?;
        let reader = {
            let router = Arc::clone(&router);
            crate::live::spawn(fleet.clone(), results.clone(), filter, feed, move |r| {
                router.deliver(r)
            })
        };

        let down_since = Arc::new(Mutex::new(None));
        let watcher = {
            let (client, down) = (fleet.clone(), Arc::clone(&down_since));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(250));
                loop {
                    tick.tick().await;
                    let up = client.connected();
                    if let Ok(mut d) = down.lock() {
                        match (up, d.is_some()) {
                            (true, _) => *d = None,
                            (false, false) => *d = Some(Instant::now()),
                            (false, true) => {}
                        }
                    }
                }
            })
        };
        let ledger = Arc::new(Ledger::open(cfg.cascade_dir.join("fleet-jobs.json")));
        let refs = Arc::new(RemoteRefs::new(
            cfg.repo.clone(),
            remote.clone(),
            Arc::clone(&ledger),
        ));
        let pusher = refs.pusher();
        let bases = crate::bases::serve(
            fleet.client.clone(),
            bases_subject(&repo_key),
            cfg.repo.clone(),
            Arc::clone(&refs),
        );
        Ok(Coordinator {
            fleet,
            remote,
            paths,
            repo_key,
            results,
            workers,
            seen: Mutex::new(None),
            router,
            ledger,
            refs,
            down_since,
            stopped: AtomicBool::new(false),
            _tasks: vec![
                AbortOnDrop(reader),
                AbortOnDrop(watcher),
                AbortOnDrop(pusher),
                AbortOnDrop(bases),
            ],
            cfg,
        })
    }

    /// The shared git remote jobs are pushed to.
    pub fn remote(&self) -> &str {
        &self.remote
    }

    /// Jobs out (published, no result yet), per the ledger.
    pub fn jobs_out(&self) -> usize {
        self.ledger.len()
    }

    /// NATS has been unreachable for too long: stop the run (once).
    fn down_too_long(&self, sink: &cascade_engine::EventSink) -> bool {
        let since = self.down_since.lock().ok().and_then(|d| *d);
        let Some(since) = since else { return false };
        if since.elapsed() < self.cfg.down_after {
            return false;
        }
        if !self.stopped.swap(true, Ordering::SeqCst) {
            sink(&Event::FleetWaiting {
                reason: format!(
                    "NATS at {} has been unreachable for {}s: stopping the run (nothing is lost: jobs out stay in JetStream); continue with `cascade resume --fleet {}` once it is back",
                    self.cfg.url,
                    since.elapsed().as_secs(),
                    self.cfg.url
                ),
            });
            self.cfg.stop.cancel();
        }
        true
    }

    async fn run(&self, job: Job, cx: ExecContext) -> Executed {
        let sink = Arc::clone(&cx.sink);
        // The story's job still out from before a restart of the same run
        // is adopted whatever the target tip and the attempt number are now
        // (a stop by Ctrl-C or NATS counts the attempt again): the worker
        // built on the base it was given (checked against that base), and
        // the merge queue merges it onto today's tip as it does any story.
        let adopted = self
            .ledger
            .get(&job.job_key())
            .filter(|o| o.run_id == job.run_id);
        let mut job = job;
        let (job_id, attempt) = match &adopted {
            Some(o) => {
                job.base = o.base.clone();
                self.refs.adopt_base(&job.base, &job.target_branch);
                (o.job_id.clone(), o.attempt)
            }
            None => (job_id(&job), job.attempt),
        };
        let mut rx = self.router.register(&job_id);
        let subject = results_subject(&self.repo_key, &job_id);
        if adopted.is_some() {
            sink(&Event::Notice {
                message: format!(
                    "{}: attempt {attempt}'s job is still out from before the restart: waiting for its result instead of publishing it again",
                    job.story
                ),
            });
        }
        // A result stored while no coordinator listened, or one a killed
        // coordinator read but never merged (it had crossed the job off its
        // ledger): the job ran, so it is not published again (the stream's
        // de-duplication would drop the same id anyway, and nothing would
        // ever answer).
        let stored = match self.results.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => serde_json::from_slice::<ResultMsg>(&m.payload).ok(),
            Err(_) => None,
        };
        match stored {
            Some(r) => self.router.deliver(r),
            None if adopted.is_none() => {
                if let Err(end) = self.publish(&job, &job_id, &cx).await {
                    self.router.forget(&job_id);
                    return end;
                }
            }
            None => {}
        }
        // The result.
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                r = rx.recv() => {
                    let Some(r) = r else { return Executed::Interrupted };
                    match r.kind {
                        ResultKind::Started { agent } => sink(&Event::JobStarted {
                            story: job.story.clone(),
                            attempt,
                            worker: r.worker,
                            agent,
                        }),
                        ResultKind::Progress { event } => sink(&event),
                        ResultKind::Finished(done) => {
                            self.router.done(&job_id);
                            let ended = self.finished(&job, &job_id, attempt, r.worker, done, &cx).await;
                            self.refs.release_base(&job.base);
                            return ended;
                        }
                    }
                }
                _ = cx.cancel.cancelled() => {
                    self.router.forget(&job_id);
                    return Executed::Interrupted;
                }
                _ = tick.tick() => {
                    if self.down_too_long(&sink) {
                        self.router.forget(&job_id);
                        return Executed::Interrupted;
                    }
                }
            }
        }
    }

    /// Waits for a worker able to run the job, has its base pushed,
    /// publishes it.
    async fn publish(&self, job: &Job, job_id: &str, cx: &ExecContext) -> Result<(), Executed> {
        self.wait_for_worker(job, cx).await?;
        // The base is pushed once per commit, without waiting: the worker
        // asks this coordinator for it meanwhile (the `bases` module). The
        // work a resolution starts from is on the remote first: its worker
        // fetches it.
        let pushed = match job.resolve {
            None => {
                self.refs.take_base(job);
                Ok(())
            }
            Some(_) => self.refs.use_base(job, &cx.cancel).await,
        };
        match pushed {
            Ok(()) => {}
            Err(FleetError::Cancelled) => return Err(Executed::Interrupted),
            Err(e) => {
                return Err(Executed::NotRun(failure(
                    FailureKind::Setup,
                    format!("cannot push the job's base to the shared remote: {e}"),
                )))
            }
        }
        let published = self.send(job, job_id, cx).await;
        if published.is_err() {
            self.refs.release_base(&job.base);
        }
        published
    }

    /// Publishes the job (its base is on the remote) and records it.
    async fn send(&self, job: &Job, job_id: &str, cx: &ExecContext) -> Result<(), Executed> {
        let sink = &cx.sink;
        let subject = jobs_subject(&self.repo_key, &job.run_id);
        let msg = JobMsg {
            id: job_id.to_string(),
            remote: self.remote.clone(),
            results: results_subject(&self.repo_key, job_id),
            job: job.clone(),
        };
        let payload = match serde_json::to_vec(&msg) {
            Ok(p) => p,
            Err(e) => return Err(Executed::NotRun(failure(FailureKind::Setup, e.to_string()))),
        };
        // The ledger records the job after the stream stored it; a kill in
        // between publishes the same id again on resume (same base), which
        // the stream's de-duplication (Nats-Msg-Id) drops. From another base
        // it is another job; the first one's result is then ignored.
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", publish_id(&self.repo_key, job_id).as_str());
        loop {
            let sent = async {
                let ack = self
                    .fleet
                    .js
                    .publish_with_headers(subject.clone(), headers.clone(), payload.clone().into())
                    .await
                    .map_err(|e| e.to_string())?;
                ack.await.map_err(|e| e.to_string())
            };
            let refused = match tokio::time::timeout(Duration::from_secs(5), sent).await {
                Ok(Ok(_)) => break,
                Ok(Err(e)) => Some(e),
                Err(_) => None,
            };
            if cx.cancel.is_cancelled() || self.down_too_long(sink) {
                return Err(Executed::Interrupted);
            }
            if let Some(e) = refused.filter(|_| self.fleet.connected()) {
                // JetStream refused it with the connection up.
                return Err(Executed::NotRun(failure(
                    FailureKind::Setup,
                    format!("cannot publish the job to {}: {e}", self.cfg.url),
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let out = Out {
            job_id: job_id.to_string(),
            run_id: job.run_id.clone(),
            attempt: job.attempt,
            base: job.base.clone(),
            published_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        };
        if let Err(e) = self.ledger.put(&job.job_key(), out) {
            sink(&Event::Notice {
                message: format!("fleet: {e}"),
            });
        }
        sink(&Event::JobPublished {
            story: job.story.clone(),
            attempt: job.attempt,
            base: job.base.clone(),
            subject,
        });
        Ok(())
    }

    /// Until a live worker can run `job`: no worker at all waits (saying
    /// so once); workers that all lack its agent or labels fail it as
    /// `agent_unavailable` after the grace period.
    async fn wait_for_worker(&self, job: &Job, cx: &ExecContext) -> Result<(), Executed> {
        let started = Instant::now();
        let mut said_none = false;
        let mut fresh = false;
        loop {
            let seen = self.live_workers(fresh).await;
            fresh = true;
            match seen {
                Ok(workers) if workers.iter().any(|w| registry::can_run(w, job)) => return Ok(()),
                Ok(workers) if workers.is_empty() => {
                    if !said_none {
                        said_none = true;
                        (cx.sink)(&Event::FleetWaiting {
                            reason: format!(
                                "no live worker on {}: waiting for one (start one with `cascade worker --fleet {}`)",
                                self.cfg.url, self.cfg.url
                            ),
                        });
                    }
                }
                Ok(workers) => {
                    if started.elapsed() >= self.cfg.worker_grace {
                        let mut f = failure(
                            FailureKind::AgentUnavailable,
                            registry::why_not(&workers, job),
                        );
                        f.agent = job
                            .agents
                            .candidates
                            .first()
                            .map_or_else(|| "none".into(), |a| a.as_str().into());
                        return Err(Executed::NotRun(f));
                    }
                }
                Err(_) => {
                    if self.down_too_long(&cx.sink) {
                        return Err(Executed::Interrupted);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = cx.cancel.cancelled() => return Err(Executed::Interrupted),
            }
            if self.down_too_long(&cx.sink) {
                return Err(Executed::Interrupted);
            }
        }
    }

    /// The live workers: as seen less than a heartbeat ago (one view for
    /// every job published meanwhile), or read now (`fresh`).
    async fn live_workers(&self, fresh: bool) -> Result<Vec<Heartbeat>, registry::RegistryError> {
        if !fresh {
            if let Ok(seen) = self.seen.lock() {
                if let Some((at, workers)) = seen.as_ref() {
                    if at.elapsed() < HEARTBEAT_EVERY {
                        return Ok(workers.clone());
                    }
                }
            }
        }
        let workers = registry::live_workers(&self.workers).await?;
        if let Ok(mut seen) = self.seen.lock() {
            *seen = Some((Instant::now(), workers.clone()));
        }
        Ok(workers)
    }

    /// A finished job: crossed off the ledger and announced; a passed one's
    /// work taken onto the story branch and checked.
    async fn finished(
        &self,
        job: &Job,
        job_id: &str,
        attempt: u32,
        worker: String,
        done: Finished,
        cx: &ExecContext,
    ) -> Executed {
        let Finished {
            branch,
            report,
            pack,
        } = done;
        let mut report = *report;
        // Work not in the result was pushed (deleted once the story merged).
        let pushed = (matches!(report.outcome, JobOutcome::Passed { .. }) && pack.is_none())
            .then_some(branch.as_str());
        if let Err(e) = self
            .ledger
            .done((&job.job_key(), &job.key()), job_id, pushed)
        {
            (cx.sink)(&Event::Notice {
                message: format!("fleet: {e}"),
            });
        }
        (cx.sink)(&Event::JobFinished {
            story: job.story.clone(),
            attempt,
            worker: worker.clone(),
            agent: report.agent.clone(),
            status: report.outcome.status().to_string(),
            error: report.outcome.error(),
            duration_ms: report.duration_ms,
        });
        if let JobOutcome::Passed { commit } = &report.outcome {
            if let Err(message) = self.take_work(job, &branch, commit, pack, cx).await {
                if cx.cancel.is_cancelled() {
                    return Executed::Interrupted;
                }
                let mut f = failure(FailureKind::ProcessCrash, message);
                f.agent = report.agent.as_str().into();
                report.outcome = JobOutcome::Failed { failure: f };
            }
        }
        Executed::Ran { worker, report }
    }

    /// Brings the worker's commit onto the story branch: from the pack in
    /// its result, else fetched from its branch on the shared remote. The
    /// commit must be the reported one and descend from the job's base.
    async fn take_work(
        &self,
        job: &Job,
        branch: &str,
        commit: &str,
        pack: Option<String>,
        cx: &ExecContext,
    ) -> Result<(), String> {
        use base64::Engine as _;
        use cascade_git::transfer::{self, TransferError};
        let pack = match pack {
            Some(p) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(p)
                    .map_err(|e| format!("the result's pack cannot be read: {e}"))?,
            ),
            None => {
                git::fetch_objects(&self.cfg.repo, &self.remote, branch, &cx.cancel)
                    .await
                    .map_err(|e| format!("cannot fetch the worker's branch '{branch}': {e}"))?;
                None
            }
        };
        let paths = self.paths.clone();
        let (into, tip, base) = (
            cx.story_branch.clone(),
            commit.to_string(),
            job.base.clone(),
        );
        let taken = tokio::task::spawn_blocking(move || match pack {
            Some(pack) => transfer::import_onto(&paths, &pack, &into, &tip, &base),
            None => transfer::set_branch_checked(&paths, &into, &tip, &base),
        })
        .await
        .map_err(|e| e.to_string())?;
        taken.map_err(|e| match e {
            TransferError::Missing { .. } => format!(
                "branch '{branch}' does not hold the reported commit {commit} (pushed over by another run of the job?)"
            ),
            TransferError::NotOnBase { .. } => format!(
                "the worker's commit {commit} does not descend from the job's base {}",
                job.base
            ),
            e => format!("cannot take the worker's work: {e}"),
        })
    }
}

impl Executor for Coordinator {
    fn execute(&self, job: Job, cx: ExecContext) -> ExecFuture<'_> {
        Box::pin(self.run(job, cx))
    }

    fn merged(&self, key: &str, target: &str, tip: &str) {
        self.refs.merged(key, target, tip);
    }

    fn finish<'a>(&'a self, target: &'a str) -> ExecFuture<'a, Vec<String>> {
        Box::pin(self.refs.finish(target))
    }
}

fn failure(kind: FailureKind, error: String) -> JobFailure {
    JobFailure::new(kind, error).charged_to("none")
}

/// Routes results to the attempts waiting for them.
#[derive(Default)]
struct Router {
    inner: Mutex<Routes>,
}

#[derive(Default)]
struct Routes {
    waiting: HashMap<String, mpsc::UnboundedSender<ResultMsg>>,
    /// Results that came before their attempt asked (bounded).
    early: HashMap<String, Vec<ResultMsg>>,
    /// Jobs handled: later results for them are duplicates.
    done: HashSet<String>,
}

const EARLY_MAX: usize = 10_000;

impl Router {
    fn register(&self, job_id: &str) -> mpsc::UnboundedReceiver<ResultMsg> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut r) = self.inner.lock() {
            for m in r.early.remove(job_id).unwrap_or_default() {
                let _ = tx.send(m);
            }
            r.waiting.insert(job_id.to_string(), tx);
        }
        rx
    }

    fn deliver(&self, m: ResultMsg) {
        let Ok(mut r) = self.inner.lock() else { return };
        if r.done.contains(&m.job_id) {
            return; // a duplicate of a handled job
        }
        if let Some(tx) = r.waiting.get(&m.job_id) {
            let _ = tx.send(m);
            return;
        }
        if r.early.len() < EARLY_MAX {
            r.early.entry(m.job_id.clone()).or_default().push(m);
        }
    }

    fn done(&self, job_id: &str) {
        if let Ok(mut r) = self.inner.lock() {
            r.waiting.remove(job_id);
            r.early.remove(job_id);
            r.done.insert(job_id.to_string());
        }
    }

    fn forget(&self, job_id: &str) {
        if let Ok(mut r) = self.inner.lock() {
            r.waiting.remove(job_id);
        }
    }
}
