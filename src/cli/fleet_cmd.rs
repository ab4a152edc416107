//! The fleet's commands and flags: `cascade worker`, `cascade fleet status`,
//! and `--fleet URL` / `--remote GIT_URL` of every command that runs stories
//! (the coordinator). The work is in the cascade-fleet crate, behind the cargo
//! feature `fleet` (on by default); in a `--no-default-features` build the
//! commands and flags still parse and exit 2 saying how to get the fleet.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{CliResult, Failure, Global};

/// `--fleet` / `--remote`, part of the run flags (`run_flags::RunFlags`).
#[derive(Debug, Clone, Default, PartialEq, Args, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct FleetArgs {
    /// Run the stories on fleet workers through NATS JetStream
    /// (nats://HOST:PORT); this process schedules, merges and keeps the state
    #[arg(long, value_name = "URL")]
    pub fleet: Option<String>,
    /// The git remote shared with the workers (default: the repository's origin)
    #[arg(long, value_name = "GIT_URL", requires = "fleet")]
    pub remote: Option<String>,
}

/// `cascade worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The fleet's NATS server (nats://HOST:PORT)
    #[arg(long, value_name = "URL", env = "CASCADE_FLEET")]
    pub fleet: String,
    /// The shared git remote as this machine reaches it (default: the URL each job names)
    #[arg(long, value_name = "GIT_URL")]
    pub remote: Option<String>,
    /// Jobs run at once
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub slots: usize,
    /// Labels of this worker (jobs of stories with "labels" need all of theirs)
    #[arg(long, value_name = "a,b", value_delimiter = ',')]
    pub labels: Vec<String>,
    /// This worker's id in `fleet status` and events, and its directory's name
    /// (default: the first of HOST-1, HOST-2, ... no running worker uses)
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Where workers keep their clones and job files, each in DIR/ID, locked while it
    /// runs (default: $XDG_CACHE_HOME/cascade/fleet, else ~/.cache/cascade/fleet)
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Print NDJSON events instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Live workers (id, labels, slots, agents, jobs), queue depth, jobs in flight
    Status(FleetStatusArgs),
}

#[derive(Debug, Args)]
pub struct FleetStatusArgs {
    /// The fleet's NATS server (nats://HOST:PORT)
    #[arg(
        long,
        value_name = "URL",
        env = "CASCADE_FLEET",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub fleet: String,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[cfg(not(feature = "fleet"))]
fn not_built() -> Failure {
    Failure::usage(anyhow::anyhow!(
        "this cascade was built without the fleet (--no-default-features); the default build has it: `cargo install --path .`, or add `--features fleet`"
    ))
}

/// Refuses `--fleet` in a build without the fleet.
#[cfg(not(feature = "fleet"))]
pub fn check(a: &FleetArgs) -> Result<(), Failure> {
    match a.fleet {
        Some(_) => Err(not_built()),
        None => Ok(()),
    }
}

#[cfg(feature = "fleet")]
pub fn check(_a: &FleetArgs) -> Result<(), Failure> {
    Ok(())
}

#[cfg(not(feature = "fleet"))]
pub fn worker(_g: &Global, _a: WorkerArgs) -> CliResult {
    Err(not_built())
}

#[cfg(not(feature = "fleet"))]
pub fn run(_g: &Global, _c: FleetCommand) -> CliResult {
    Err(not_built())
}

#[cfg(feature = "fleet")]
pub use with_fleet::{coordinator, run, worker};

#[cfg(feature = "fleet")]
mod with_fleet {
    use std::sync::Arc;
    use std::time::Duration;

    use cascade_engine::executor::ExecutorHandle;
    use cascade_engine::Event;
    use cascade_fleet::{Coordinator, CoordinatorConfig, FleetError, WorkerConfig, WorkerEvent};
    use cascade_process::CancelToken;

    use super::*;
    use crate::cli::EXIT_OK;

    fn fleet_failure(e: FleetError) -> Failure {
        if e.is_usage() {
            Failure::usage(e)
        } else {
            Failure::failed(e)
        }
    }

    /// The coordinator executor for `approve|resume --fleet`.
    pub async fn coordinator(
        a: &FleetArgs,
        repo: &cascade_git::RepoPaths,
        stop: CancelToken,
    ) -> Result<Option<ExecutorHandle>, Failure> {
        let Some(url) = &a.fleet else {
            return Ok(None);
        };
        let mut cfg = CoordinatorConfig::new(url, repo.workdir.clone(), repo.cascade_dir(), stop);
        cfg.remote = a.remote.clone();
        let c = Coordinator::connect(cfg).await.map_err(|e| match e {
            // NATS down at the start: nothing ran; exit 1 saying so.
            e @ FleetError::Connect { .. } => Failure::failed(e),
            e => fleet_failure(e),
        })?;
        Ok(Some(ExecutorHandle(Arc::new(c))))
    }

    /// `cascade worker`: until SIGTERM/SIGINT (drain: finish the running
    /// jobs, take no new one); a second signal stops the running jobs and
    /// hands them back; a third leaves at once.
    pub fn worker(g: &Global, a: WorkerArgs) -> CliResult {
        if a.slots == 0 {
            return Err(Failure::usage(anyhow::anyhow!(
                "--slots must be at least 1"
            )));
        }
        let cwd = std::env::current_dir().map_err(|e| {
            Failure::usage(anyhow::anyhow!("cannot read the current directory: {e}"))
        })?;
        // `--agents`, else ./agents.json, else the built-in lookup.
        let agents_path = match &g.agents {
            Some(p) => Some(cwd.join(p)),
            None => Some(cwd.join("agents.json")).filter(|p| p.is_file()),
        };
        if let Some(p) = agents_path.as_ref().filter(|p| !p.is_file()) {
            return Err(Failure::usage(anyhow::anyhow!(
                "agents file '{}' not found (check --agents)",
                p.display()
            )));
        }
        let workdir = a
            .workdir
            .clone()
            .map(|d| cwd.join(d))
            .unwrap_or_else(default_workdir);
        let cfg = WorkerConfig {
            url: a.fleet.clone(),
            remote: a.remote.clone(),
            agents_path,
            slots: a.slots,
            labels: a
                .labels
                .iter()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect(),
            id: a.id.clone(),
            workdir,
        };
        let json = a.json;
        let sink: cascade_fleet::WorkerSink = Arc::new(move |e: WorkerEvent| print_event(&e, json));
        let rt = crate::cli::runtime()?;
        let (drain, kill) = (CancelToken::new(), CancelToken::new());
        let result = rt.block_on(async {
            watch_signals(drain.clone(), kill.clone());
            cascade_fleet::worker::run(cfg, sink, drain.clone(), kill.clone()).await
        });
        rt.shutdown_timeout(Duration::from_secs(2));
        let done = result.map_err(fleet_failure)?;
        if !json {
            errln!("worker stopped after {done} job(s)");
        }
        Ok(EXIT_OK)
    }

    /// First signal: drain; second: stop the running jobs; third: leave.
    fn watch_signals(drain: CancelToken, kill: CancelToken) {
        crate::cli::signals::on_stop_signals(move |press, number| match press {
            0 => drain.cancel(),
            1 => kill.cancel(),
            _ => crate::cli::signals::leave(128 + number, "third signal"),
        });
    }

    fn default_workdir() -> PathBuf {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        cache.join("cascade").join("fleet")
    }

    /// One line per worker event on stderr (or NDJSON on stdout).
    fn print_event(e: &WorkerEvent, json: bool) {
        if json {
            let v = match e {
                WorkerEvent::Engine(ev) => serde_json::to_value(ev).unwrap_or_default(),
                WorkerEvent::Ready {
                    id,
                    dir,
                    slots,
                    labels,
                    agents,
                } => {
                    serde_json::json!({"event": "worker_ready", "id": id, "dir": dir, "slots": slots, "labels": labels, "agents": agents})
                }
                WorkerEvent::JobTaken {
                    story,
                    attempt,
                    job_id,
                    delivery,
                } => {
                    serde_json::json!({"event": "job_taken", "story": story, "attempt": attempt, "job": job_id, "delivery": delivery})
                }
                WorkerEvent::JobDone {
                    story,
                    attempt,
                    status,
                    error,
                    duration_ms,
                    phases,
                } => {
                    let phases: Vec<_> = phases
                        .iter()
                        .map(|(phase, ms)| serde_json::json!({"phase": phase, "ms": ms}))
                        .collect();
                    serde_json::json!({"event": "job_done", "story": story, "attempt": attempt, "status": status, "error": error, "duration_ms": duration_ms, "phases": phases})
                }
                WorkerEvent::JobReturned {
                    story,
                    attempt,
                    why,
                } => {
                    serde_json::json!({"event": "job_returned", "story": story, "attempt": attempt, "why": why})
                }
                WorkerEvent::Draining { running } => {
                    serde_json::json!({"event": "worker_draining", "running": running})
                }
                WorkerEvent::Problem { message } => {
                    serde_json::json!({"event": "notice", "message": message})
                }
            };
            outln!("{v}");
            return;
        }
        let line = match e {
            WorkerEvent::Ready { id, dir, slots, labels, agents } => format!(
                "worker {id} ready: {slots} slot(s), labels [{}], agents [{}], work directory {}",
                labels.join(", "),
                agents.join(", "),
                dir.display()
            ),
            WorkerEvent::JobTaken { story, attempt, delivery, .. } => {
                let again = if *delivery > 1 { format!(" (delivery {delivery})") } else { String::new() };
                format!("{story}: attempt {attempt} taken{again}")
            }
            WorkerEvent::Engine(Event::StoryStarted { story, agent, .. }) => format!("{story}: agent {agent} started"),
            WorkerEvent::Engine(Event::GateFinished { story, gate, passed, timed_out, .. }) => {
                let verdict = match (passed, timed_out) {
                    (true, _) => "passed".to_string(),
                    (false, Some(why)) => format!("failed: {why}"),
                    (false, None) => "failed".to_string(),
                };
                format!("{story}: gate {gate} {verdict}")
            }
            WorkerEvent::Engine(Event::Notice { message }) => format!("note: {message}"),
            WorkerEvent::Engine(_) => return,
            WorkerEvent::JobDone { story, attempt, status, error, duration_ms, phases } => format!(
                "{story}: attempt {attempt} {status} in {:.1}s{}{}",
                *duration_ms as f64 / 1000.0,
                error.as_ref().map(|e| format!(": {e}")).unwrap_or_default(),
                match phases.is_empty() {
                    true => String::new(),
                    false => format!(" ({})", cascade_fleet::timing::describe(phases)),
                }
            ),
            WorkerEvent::JobReturned { story, attempt, why } => format!("{story}: attempt {attempt} handed back: {why}"),
            WorkerEvent::Draining { running } => format!(
                "draining: finishing {running} running job(s), taking no new one (signal again to stop them and hand them back)"
            ),
            WorkerEvent::Problem { message } => format!("warning: {message}"),
        };
        errln!("{line}");
    }

    /// `cascade fleet status`.
    pub fn run(_g: &Global, c: FleetCommand) -> CliResult {
        let FleetCommand::Status(a) = c;
        let rt = crate::cli::runtime()?;
        let st = rt
            .block_on(cascade_fleet::status::status(&a.fleet))
            .map_err(|e| match e {
                e @ FleetError::Connect { .. } => Failure::failed(e),
                e => fleet_failure(e),
            })?;
        rt.shutdown_timeout(Duration::from_secs(1));
        if a.json {
            outln!("{}", serde_json::to_string(&st).unwrap_or_default());
            return Ok(EXIT_OK);
        }
        let q = st.queue;
        outln!(
            "fleet {}: {} worker(s), {}/{} slot(s) busy; jobs: {} waiting, {} in flight{}",
            st.url,
            st.workers.len(),
            q.busy,
            q.slots,
            q.waiting,
            q.in_flight,
            if q.redelivered > 0 {
                format!(", {} redelivered", q.redelivered)
            } else {
                String::new()
            }
        );
        for w in &st.workers {
            let jobs: Vec<String> = w
                .jobs
                .iter()
                .map(|j| format!("{} (attempt {})", j.story, j.attempt))
                .collect();
            outln!(
                "  {}  host {}  slots {}  labels [{}]  agents [{}]{}  {}",
                w.id,
                w.host,
                w.slots,
                w.labels.join(","),
                w.agents.join(","),
                if w.draining { "  draining" } else { "" },
                if jobs.is_empty() {
                    "idle".to_string()
                } else {
                    format!("running {}", jobs.join(", "))
                }
            );
        }
        Ok(EXIT_OK)
    }
}
