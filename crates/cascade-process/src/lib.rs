//! Supervised child processes for cascade: one place that knows how to run an
//! agent or a gate command safely.
//!
//! What it owns:
//! - **argv only.** A [`Spec`] is a program plus argument vector; nothing here
//!   ever goes through `sh -c`, so user text cannot be reinterpreted.
//! - **process groups.** Every child is the leader of its own process group, so
//!   a timeout, a cancellation or a drop kills the child *and everything it
//!   forked* (SIGTERM to the group, a grace period, then SIGKILL), the way
//!   cargo-nextest does. After the leader exits, any member of its group that is
//!   still alive (a leaked grandchild) is killed too and reported as `leaked`.
//! - **descendants that left the group.** A child and everything it starts
//!   carry a token in their environment; when the child is done, whatever
//!   carries it or descends from it is killed as well (`setsid`, daemons),
//!   and a process that called [`become_subreaper`] also adopts and kills
//!   orphans that escaped both (see the `supervise` module). [`kill_all`]
//!   kills everything this process supervises at once (a second Ctrl-C).
//! - **output.** stdout and stderr are read concurrently, appended to an optional
//!   log file limited in size ([`CappedLog`]: head and tail kept, the middle
//!   dropped with a marker), kept in memory only as a bounded tail (huge
//!   output cannot blow the memory), and stdout can be fed line by line to a
//!   callback (used to parse agents' JSON event streams as they arrive).
//!
//! ```no_run
//! # async fn demo() -> Result<(), cascade_process::SpawnError> {
//! use cascade_process::{CancelToken, Spec};
//! use std::time::Duration;
//! let spec = Spec::new("cargo")
//!     .args(["test", "--quiet"])
//!     .cwd("/tmp/project")
//!     .timeout(Duration::from_secs(600));
//! let outcome = spec.spawn()?.wait(&CancelToken::new()).await;
//! println!("success: {}", outcome.success());
//! # Ok(()) }
//! ```

mod cancel;
mod log;
mod output;
pub mod procs;
pub mod resources;
pub mod sandbox;
mod supervise;
mod task;

pub use cancel::CancelToken;
pub use log::{CappedLog, LogLimit, DEFAULT_LOG_LIMIT};
pub use output::Captured;
pub use procs::{group_alive, kill_group, pid_alive};
pub use supervise::{
    become_subreaper, is_subreaper, kill_all, stopping, KilledAll, Label, Swept, OWNER_VAR,
};
pub use task::AbortOnDrop;

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// Called with every complete stdout line (without the trailing newline).
pub type LineCallback = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// Default number of bytes of each stream kept in memory.
pub const DEFAULT_TAIL_BYTES: usize = 64 * 1024;
/// Default time between SIGTERM and SIGKILL when a group is stopped.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
/// How long the output pipes may stay open after the leader exited before the
/// remaining group members are considered leaked and killed.
const LEAK_WINDOW: Duration = Duration::from_millis(200);
/// How long the pipes may stay open after everything found was killed (a
/// holder out of reach) before reading stops with what arrived.
const DRAIN_WINDOW: Duration = Duration::from_secs(2);
/// A stdout line longer than this is delivered in pieces rather than buffered forever.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Everything needed to start one child process.
#[derive(Clone)]
pub struct Spec {
    program: OsString,
    args: Vec<OsString>,
    cwd: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    env_clear: bool,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    grace: Duration,
    log: Option<PathBuf>,
    log_limit: LogLimit,
    tail_bytes: usize,
    on_stdout_line: Option<LineCallback>,
    on_stderr_line: Option<LineCallback>,
    stop: Option<CancelToken>,
    sandbox: Option<Arc<sandbox::Policy>>,
    label: Option<Label>,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("timeout", &self.timeout)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl Spec {
    /// A spec running `program` (looked up on the child's PATH when it has no slash).
    pub fn new(program: impl Into<OsString>) -> Self {
        Spec {
            program: program.into(),
            args: Vec::new(),
            cwd: None,
            env: Vec::new(),
            env_clear: false,
            stdin: None,
            timeout: None,
            grace: DEFAULT_GRACE,
            log: None,
            log_limit: LogLimit::default(),
            tail_bytes: DEFAULT_TAIL_BYTES,
            on_stdout_line: None,
            on_stderr_line: None,
            stop: None,
            sandbox: None,
            label: None,
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// The working directory of the child.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Sets one environment variable for the child (added to the inherited environment).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Starts the child from an empty environment (then adds what [`Spec::env`] set).
    pub fn env_clear(mut self) -> Self {
        self.env_clear = true;
        self
    }

    /// Bytes written to the child's stdin (which is otherwise `/dev/null`).
    pub fn stdin_bytes(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Kills the process group when the child runs longer than this.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Same as [`Spec::timeout`] but optional.
    pub fn maybe_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Time between SIGTERM and SIGKILL when the group is stopped.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Appends stdout and stderr, as they arrive, to this file (created with
    /// its parents), within [`Spec::log_limit`].
    pub fn log(mut self, path: impl Into<PathBuf>) -> Self {
        self.log = Some(path.into());
        self
    }

    /// The size limit of the log (default [`DEFAULT_LOG_LIMIT`]): past it,
    /// the head and the tail are kept with a marker in between.
    pub fn log_limit(mut self, limit: LogLimit) -> Self {
        self.log_limit = limit;
        self
    }

    /// How many bytes of each stream to keep in memory (the tail).
    pub fn tail_bytes(mut self, bytes: usize) -> Self {
        self.tail_bytes = bytes;
        self
    }

    /// Feeds every stdout line to `callback` while the child runs.
    pub fn on_stdout_line(mut self, callback: LineCallback) -> Self {
        self.on_stdout_line = Some(callback);
        self
    }

    /// Feeds every stderr line to `callback` while the child runs.
    pub fn on_stderr_line(mut self, callback: LineCallback) -> Self {
        self.on_stderr_line = Some(callback);
        self
    }

    /// A second, private cancellation: when `token` fires the group is
    /// stopped like on cancellation, but the outcome says
    /// [`Outcome::stopped`] instead of `cancelled`. Used by a watcher of the
    /// output (a line callback) that decided the child cannot succeed, so
    /// that its decision is not mistaken for the user's Ctrl-C.
    pub fn stop_token(mut self, token: CancelToken) -> Self {
        self.stop = Some(token);
        self
    }

    /// Confines the child (and all it starts) to `policy`, applied between
    /// fork and exec (see the `sandbox` module).
    pub fn sandbox(mut self, policy: Arc<sandbox::Policy>) -> Self {
        self.sandbox = Some(policy);
        self
    }

    /// What the child is for (`agent` of story `a`, `gate` `tests`): named
    /// by [`kill_all`] when it stops the child's group.
    pub fn label(mut self, kind: impl Into<String>, name: impl Into<String>) -> Self {
        self.label = Some(Label {
            kind: kind.into(),
            name: name.into(),
        });
        self
    }

    /// The program, as given.
    pub fn program(&self) -> &OsStr {
        &self.program
    }

    /// The arguments, as given.
    pub fn get_args(&self) -> &[OsString] {
        &self.args
    }

    /// Starts the child in its own process group.
    ///
    /// Must be called inside a tokio runtime.
    pub fn spawn(&self) -> Result<Running, SpawnError> {
        let log = match &self.log {
            Some(path) => Some(Arc::new(Mutex::new(
                CappedLog::append(path, self.log_limit).map_err(|source| SpawnError::Log {
                    path: path.clone(),
                    source,
                })?,
            ))),
            None => None,
        };
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Own process group: the group id is the child's pid, so the
            // whole tree it forks can be signalled at once.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        if self.env_clear {
            cmd.env_clear();
        }
        // Before the spec's own environment, which may choose otherwise.
        for (k, v) in self.sandbox.iter().flat_map(|p| p.env()) {
            cmd.env(k, v);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        // Last, so that nothing given above can take it away: what the
        // child and its descendants carry to be found when it is done.
        if let Some(policy) = &self.sandbox {
            let mut prepared = policy.prepare().map_err(SpawnError::Sandbox)?;
            // SAFETY: `apply` only makes syscalls (no allocation, no lock),
            // which is what may run in the forked child before exec.
            unsafe {
                cmd.pre_exec(move || prepared.apply());
            }
        }
        let token = supervise::new_token();
        cmd.env(OWNER_VAR, &token);
        let started = Instant::now();
        let label = self.label.clone().unwrap_or_else(|| Label {
            kind: "other".into(),
            name: self.program.to_string_lossy().into_owned(),
        });
        let (mut child, pid) = supervise::spawn_registered(&token, label, || {
            let child = cmd.spawn()?;
            let pid = child.id().unwrap_or(0);
            Ok((child, pid))
        })
        .map_err(|source| {
            if let Some(dir) = &self.cwd {
                if !dir.is_dir() {
                    return SpawnError::NoWorkingDir { dir: dir.clone() };
                }
            }
            SpawnError::from_io(&self.program, source)
        })?;
        let start_ticks = procs::stat(pid).map(|p| p.start);
        if let (Some(bytes), Some(mut stdin)) = (self.stdin.clone(), child.stdin.take()) {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                // A child that does not read its stdin is not an error.
                let _ = stdin.write_all(&bytes).await;
            });
        }
        let drain = CancelToken::new();
        let stdout = child.stdout.take().map(|pipe| {
            tokio::spawn(output::pump(
                pipe,
                self.tail_bytes,
                log.clone(),
                self.on_stdout_line.clone(),
                drain.clone(),
            ))
        });
        let stderr = child.stderr.take().map(|pipe| {
            tokio::spawn(output::pump(
                pipe,
                self.tail_bytes,
                log.clone(),
                self.on_stderr_line.clone(),
                drain.clone(),
            ))
        });
        Ok(Running {
            child,
            pid,
            token,
            start_ticks,
            started,
            timeout: self.timeout,
            grace: self.grace,
            stdout,
            stderr,
            drain,
            log,
            stop: self.stop.clone(),
            finished: false,
            held: None,
        })
    }

    /// Spawns and waits in one call.
    pub async fn run(&self, cancel: &CancelToken) -> Result<Outcome, SpawnError> {
        Ok(self.spawn()?.wait(cancel).await)
    }
}

/// Why a child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The program does not exist (not on PATH, or the path is wrong).
    #[error("command '{program}' not found")]
    NotFound { program: String },
    /// The program exists but may not be executed.
    #[error("command '{program}' is not executable")]
    PermissionDenied { program: String },
    /// The working directory does not exist.
    #[error("working directory '{}' does not exist", dir.display())]
    NoWorkingDir { dir: PathBuf },
    /// The log file could not be opened.
    #[error("cannot open log file '{}': {source}", path.display())]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The sandbox policy could not be turned into a kernel ruleset.
    #[error("cannot confine the child: {0}")]
    Sandbox(#[source] sandbox::SandboxError),
    /// Any other spawn failure.
    #[error("cannot start '{program}': {source}")]
    Io {
        program: String,
        source: std::io::Error,
    },
}

impl SpawnError {
    fn from_io(program: &OsStr, source: std::io::Error) -> Self {
        let program = program.to_string_lossy().into_owned();
        match source.kind() {
            std::io::ErrorKind::NotFound => SpawnError::NotFound { program },
            std::io::ErrorKind::PermissionDenied => SpawnError::PermissionDenied { program },
            _ => SpawnError::Io { program, source },
        }
    }
}

/// A started child. Dropping it before [`Running::wait`] finishes kills its group.
pub struct Running {
    child: Child,
    pid: u32,
    /// What the child and its descendants carry in their environment.
    token: String,
    /// The child's start time (`/proc`), when known.
    start_ticks: Option<u64>,
    started: Instant,
    timeout: Option<Duration>,
    grace: Duration,
    stdout: Option<tokio::task::JoinHandle<Captured>>,
    stderr: Option<tokio::task::JoinHandle<Captured>>,
    /// Stops the readers when a pipe stays open past every kill.
    drain: CancelToken,
    log: Option<Arc<Mutex<CappedLog>>>,
    stop: Option<CancelToken>,
    finished: bool,
    /// Dropped as soon as the leader is gone and its group killed (see
    /// [`Running::hold_until_exit`]).
    /// (In a mutex only so that `Running` stays `Sync` whatever it holds.)
    held: Option<Mutex<Box<dyn std::any::Any + Send>>>,
}

/// How the wait ended, before the outcome is assembled.
enum Ending {
    Exited(std::process::ExitStatus),
    TimedOut,
    Cancelled,
    Stopped,
}

impl Running {
    /// The child's pid, which is also its process-group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Keeps `guard` (a gate slot) until the child has exited or its group
    /// was killed, not until [`Running::wait`] returns: what follows (the
    /// leak window, the sweep, draining pipes a stray process holds) must
    /// not keep others waiting for the slot past the timeout and grace.
    pub fn hold_until_exit(&mut self, guard: impl Send + 'static) {
        self.held = Some(Mutex::new(Box::new(guard)));
    }

    /// Waits for the child, enforcing the timeout and watching `cancel`.
    /// On timeout or cancellation the whole process group is stopped
    /// (SIGTERM, grace period, SIGKILL).
    pub async fn wait(mut self, cancel: &CancelToken) -> Outcome {
        // A timeout too large to add to the clock (a config saying "forever")
        // means no deadline rather than an overflow panic.
        let deadline = self.timeout.and_then(|t| self.started.checked_add(t));
        let ending = tokio::select! {
            status = self.child.wait() => match status {
                Ok(status) => Ending::Exited(status),
                // Waiting failed (should not happen); treat it as a crash below.
                Err(_) => Ending::Cancelled,
            },
            _ = sleep_until(deadline) => Ending::TimedOut,
            _ = cancel.cancelled() => Ending::Cancelled,
            _ = stop_requested(self.stop.clone()) => Ending::Stopped,
        };
        let (status, timed_out, cancelled, stopped) = match ending {
            Ending::Exited(status) => (Some(status), false, false, false),
            Ending::TimedOut => (self.stop_group().await, true, false, false),
            Ending::Cancelled => (self.stop_group().await, false, true, false),
            Ending::Stopped => (self.stop_group().await, false, false, true),
        };
        drop(self.held.take());
        // The leader is gone. Members of its group may still hold the pipes
        // open (a leaked grandchild): give them a moment to finish by
        // themselves. Then everything the child left behind is killed (its
        // group, whatever carries its token or descends from it), which
        // also closes pipes a daemon held; a pipe held past that (by a
        // process out of reach) stops being read after a bounded wait.
        let exited_by_itself = !timed_out && !cancelled && !stopped;
        let stdout = self.stdout.take();
        let stderr = self.stderr.take();
        let collect = async {
            let out = match stdout {
                Some(h) => h.await.unwrap_or_default(),
                None => Captured::default(),
            };
            let err = match stderr {
                Some(h) => h.await.unwrap_or_default(),
                None => Captured::default(),
            };
            (out, err)
        };
        tokio::pin!(collect);
        let early = tokio::time::timeout(LEAK_WINDOW, &mut collect).await.ok();
        let swept = self.sweep().await;
        let held_open = early.is_none();
        let (stdout, stderr) = match early {
            Some(pair) => pair,
            None => match tokio::time::timeout(DRAIN_WINDOW, &mut collect).await {
                Ok(pair) => pair,
                Err(_) => {
                    self.drain.cancel();
                    collect.await
                }
            },
        };
        let leaked = exited_by_itself && (held_open || !swept.killed.is_empty());
        if let Some(log) = &self.log {
            if let Ok(mut log) = log.lock() {
                log.finish();
            }
        }
        self.finished = true;
        let (exit_code, signal) = match status {
            Some(status) => {
                use std::os::unix::process::ExitStatusExt;
                (status.code(), status.signal())
            }
            None => (None, None),
        };
        Outcome {
            pid: self.pid,
            exit_code,
            signal,
            timed_out,
            cancelled,
            stopped,
            leaked,
            duration: self.started.elapsed(),
            stdout,
            stderr,
        }
    }

    /// SIGTERM to the group, wait up to the grace period, then SIGKILL.
    async fn stop_group(&mut self) -> Option<std::process::ExitStatus> {
        kill_group(self.pid, libc::SIGTERM);
        match tokio::time::timeout(self.grace, self.child.wait()).await {
            Ok(Ok(status)) => {
                // The leader obeyed; make sure its children did too.
                kill_group(self.pid, libc::SIGKILL);
                Some(status)
            }
            _ => {
                kill_group(self.pid, libc::SIGKILL);
                self.child.wait().await.ok()
            }
        }
    }
}

impl Running {
    /// Kills what the child left behind (see the `supervise` module), on a
    /// blocking thread: it reads `/proc` and waits for the deaths.
    async fn sweep(&self) -> Swept {
        let (pid, token, start) = (self.pid, self.token.clone(), self.start_ticks);
        tokio::task::spawn_blocking(move || supervise::finish(pid, &token, start))
            .await
            .unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.finished {
            kill_group(self.pid, libc::SIGKILL);
            // Dropped before the end of `wait` (its task was aborted): the
            // sweep still runs, on a thread of its own since this may be
            // any context.
            let (pid, token, start) = (self.pid, self.token.clone(), self.start_ticks);
            let spawned = std::thread::Builder::new()
                .name("cascade-sweep".into())
                .spawn(move || {
                    supervise::finish(pid, &token, start);
                });
            if spawned.is_err() {
                supervise::forget(pid);
            }
        }
    }
}

async fn stop_requested(token: Option<CancelToken>) {
    match token {
        Some(t) => t.cancelled().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The result of one supervised run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The child's pid (and process-group id).
    pub pid: u32,
    /// Exit code when the child exited normally.
    pub exit_code: Option<i32>,
    /// Signal number when the child was killed by a signal.
    pub signal: Option<i32>,
    /// The timeout expired and the group was killed.
    pub timed_out: bool,
    /// The cancel token fired and the group was killed.
    pub cancelled: bool,
    /// The stop token ([`Spec::stop_token`]) fired and the group was killed.
    pub stopped: bool,
    /// Some process of the group outlived the leader and was killed.
    pub leaked: bool,
    /// Wall time from spawn to the end of the wait.
    pub duration: Duration,
    /// The tail of stdout.
    pub stdout: Captured,
    /// The tail of stderr.
    pub stderr: Captured,
}

impl Outcome {
    /// Exited by itself with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled && !self.stopped
    }

    /// A short human description: "exit code 3", "killed by signal 9", "timed out after 5s".
    pub fn describe(&self) -> String {
        if self.timed_out {
            format!("timed out after {:.1}s", self.duration.as_secs_f64())
        } else if self.cancelled {
            "cancelled".to_string()
        } else if self.stopped {
            format!("stopped after {:.1}s", self.duration.as_secs_f64())
        } else if let Some(code) = self.exit_code {
            format!("exit code {code}")
        } else if let Some(sig) = self.signal {
            format!("killed by signal {sig}")
        } else {
            "ended without an exit status".to_string()
        }
    }

    /// The last `max_bytes` of stdout followed by stderr, lossily decoded.
    pub fn output_excerpt(&self, max_bytes: usize) -> String {
        let mut text = self.stdout.text_lossy();
        let err = self.stderr.text_lossy();
        if !err.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&err);
        }
        output::tail_str(&text, max_bytes).to_string()
    }
}

/// Writes `bytes` to the shared log. Failures are counted by the log, not
/// returned: a full disk must not turn into a failed agent or gate.
fn write_log(log: &Option<Arc<Mutex<CappedLog>>>, bytes: &[u8]) {
    if let Some(log) = log {
        if let Ok(mut file) = log.lock() {
            file.write(bytes);
        }
    }
}

#[cfg(test)]
mod tests;
