//! The agent executor: one agent invocation in a working directory.
//!
//! The prompt is written to `<cascade_dir>/prompts/`, the placeholders of the
//! agent's argv are filled in element by element (never a shell string; a
//! prompt too long for the OS to pass as an argument is handed over as a
//! pointer to the prompt file plus the whole prompt on stdin), the
//! CASCADE_* environment of CLI.md is added to the agent's own `env` and the
//! caller's extra variables, and the process runs under `cascade-process`:
//! its own process group, killed as a group on timeout or cancellation, its
//! stdout and stderr appended to `<cascade_dir>/logs/` as they arrive (within
//! [`AgentRequest::log_limit`]: head and tail kept, the middle dropped with a
//! marker) and only a bounded tail kept in memory. stdout is parsed line by line
//! ([`crate::stream`]) for the final text, session id, usage and review
//! verdict, and both streams are read by the [`crate::watch::Watcher`],
//! which stops the agent's process group early (`Outcome::stopped`) when
//! its provider refused the key or keeps rate limiting; the classified
//! signal is on [`AgentRun::signal`]. An api agent (`type: "api"`) starts
//! no process: [`execute`] hands it to [`crate::api`], which gives the same
//! [`AgentRun`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cascade_process::{CancelToken, LogLimit, Outcome, SpawnError, Spec};

use crate::config::AgentDef;
use crate::phase::Phase;
use crate::placeholders::{self, Values};
use crate::stream::{ReviewVerdict, StreamParser, Usage};
use crate::watch::Watcher;

/// Linux refuses a single argv element longer than this (MAX_ARG_STRLEN).
const MAX_ARG_BYTES: usize = 128 * 1024;

/// The whole command line and environment must stay under the OS limit
/// (`ARG_MAX`); this much of it is left for what the invocation does not
/// count exactly (pointers, alignment).
const ARG_MAX_MARGIN: usize = 64 * 1024;

/// One invocation to run.
#[derive(Debug, Clone)]
pub struct AgentRequest {
    /// The story (used for file names, `{story_id}` and CASCADE_STORY_ID).
    pub story_id: String,
    /// 1-based attempt number (`{attempt}`, CASCADE_ATTEMPT).
    pub attempt: u32,
    pub phase: Phase,
    pub prompt: String,
    /// Where the agent runs (the story's worktree): cwd, `{working_dir}`, CASCADE_WORKDIR.
    pub workdir: PathBuf,
    /// `.cascade/`: prompts and logs go under it.
    pub cascade_dir: PathBuf,
    /// More environment, e.g. `CASCADE_PRD_PATH` for PRD generation.
    pub extra_env: Vec<(String, String)>,
    /// Replaces the agent's configured timeout.
    pub timeout_override: Option<Duration>,
    /// Continue this earlier session of the agent: its `resume_args` are
    /// used instead of `args` (an agent without `resume_args` starts anew).
    pub resume: Option<ResumeSession>,
    /// Gets every line of the agent's stdout and stderr as it arrives (a
    /// live view of the run); `None`: nobody watches.
    pub on_output: Option<OutputLines>,
    /// The size limit of the log (default 16 MiB; head and tail are kept).
    pub log_limit: LogLimit,
    /// What an api agent's tools may do (writable files, RunGates).
    pub tools: crate::api::ToolAccess,
    /// The story's confinement; the agent's own `sandbox` (writable paths,
    /// TCP ports) is added to it when the CLI starts. `None`: unconfined.
    pub sandbox: Option<std::sync::Arc<cascade_process::sandbox::Policy>>,
}

/// The function behind [`OutputLines`].
pub type LineFn = dyn Fn(&[u8]) + Send + Sync;

/// A callback for an agent's output lines (see [`AgentRequest::on_output`]).
#[derive(Clone)]
pub struct OutputLines(pub std::sync::Arc<LineFn>);

impl std::fmt::Debug for OutputLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputLines(..)")
    }
}

/// An earlier session of an agent to continue (`{session_id}`,
/// `{session_index}` in `resume_args`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumeSession {
    /// The id the agent printed (stream-json `session_id`, codex `thread_id`).
    pub session_id: String,
    /// Its 1-based position in the agent's `list_sessions_args` listing, when
    /// the caller looked it up (gemini resumes by index).
    pub session_index: Option<u32>,
}

impl AgentRequest {
    /// A request with no extra environment and the agent's own timeout.
    pub fn new(
        story_id: impl Into<String>,
        attempt: u32,
        phase: Phase,
        prompt: impl Into<String>,
        workdir: impl Into<PathBuf>,
        cascade_dir: impl Into<PathBuf>,
    ) -> AgentRequest {
        AgentRequest {
            story_id: story_id.into(),
            attempt,
            phase,
            prompt: prompt.into(),
            workdir: workdir.into(),
            cascade_dir: cascade_dir.into(),
            extra_env: Vec::new(),
            timeout_override: None,
            resume: None,
            on_output: None,
            log_limit: LogLimit::default(),
            tools: crate::api::ToolAccess::default(),
            sandbox: None,
        }
    }

    /// `<cascade_dir>/prompts/<story>-<phase>-<attempt>.md`.
    pub fn prompt_path(&self) -> PathBuf {
        self.cascade_dir
            .join("prompts")
            .join(format!("{}.md", self.file_stem()))
    }

    /// `<cascade_dir>/logs/<story>-<phase>-<attempt>.log`.
    pub fn log_path(&self) -> PathBuf {
        self.cascade_dir
            .join("logs")
            .join(format!("{}.log", self.file_stem()))
    }

    fn file_stem(&self) -> String {
        format!(
            "{}-{}-{}",
            safe_component(&self.story_id),
            self.phase,
            self.attempt
        )
    }
}

/// A story id made safe as a file name (ids are validated by cascade-plan;
/// this is a second line of defence for ids that come from elsewhere).
fn safe_component(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let s = s.trim_start_matches('.');
    if s.is_empty() {
        "story".to_string()
    } else {
        s.to_string()
    }
}

/// The exact process an invocation starts (what `--dry-run` can show).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// Variables added to the inherited environment, in the order applied
    /// (later wins): agent `env`, CASCADE_*, extra.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// The prompt is too long for the OS to pass as an argument: `{prompt}`
    /// stands for a short pointer to the prompt file instead, and the whole
    /// prompt goes to the agent's stdin.
    pub prompt_on_stdin: bool,
}

/// What `{prompt}` becomes when the prompt is too long for the command line.
fn prompt_pointer(prompt_file: &str) -> String {
    format!(
        "Your task is in the file {prompt_file} (too long for the command line; it is also on standard input). Read that file first and do what it says."
    )
}

/// Whether a command line with `args` and the added `env` can not be
/// started by the OS: one string over `MAX_ARG_STRLEN`, or everything
/// (the inherited environment included) over `ARG_MAX`.
fn too_long_for_exec(program: &str, args: &[String], env: &[(String, String)]) -> bool {
    let one_too_long = args.iter().any(|a| a.len() >= MAX_ARG_BYTES)
        || env
            .iter()
            .any(|(k, v)| k.len() + v.len() + 1 >= MAX_ARG_BYTES);
    if one_too_long {
        return true;
    }
    // SAFETY: sysconf only reads a system constant.
    let arg_max = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    let arg_max = usize::try_from(arg_max).unwrap_or(2 * 1024 * 1024);
    let inherited: usize = std::env::vars_os()
        .map(|(k, v)| k.len() + v.len() + 2)
        .sum();
    let total = program.len()
        + args.iter().map(|a| a.len() + 1).sum::<usize>()
        + env
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum::<usize>()
        + inherited;
    total + ARG_MAX_MARGIN >= arg_max
}

/// Builds the invocation of `agent` for `req`, with the prompt at
/// `prompt_path`. A prompt too long for the OS to pass in argv or the
/// environment is handed over through the prompt file and stdin instead
/// ([`Invocation::prompt_on_stdin`]), whatever the agent's args say.
pub fn invocation(agent: &AgentDef, req: &AgentRequest, prompt_path: &Path) -> Invocation {
    let prompt = req.prompt.replace('\0', "");
    let inv = invocation_with(agent, req, prompt_path, &prompt);
    if !too_long_for_exec(&inv.program, &inv.args, &inv.env) {
        return inv;
    }
    let pointer = prompt_pointer(&prompt_path.to_string_lossy());
    Invocation {
        prompt_on_stdin: true,
        ..invocation_with(agent, req, prompt_path, &pointer)
    }
}

/// [`invocation`] with `prompt` standing for `{prompt}`.
fn invocation_with(
    agent: &AgentDef,
    req: &AgentRequest,
    prompt_path: &Path,
    prompt: &str,
) -> Invocation {
    let prompt_file = prompt_path.to_string_lossy();
    let working_dir = req.workdir.to_string_lossy();
    let attempt = req.attempt.to_string();
    let (session_id, session_index) = match &req.resume {
        Some(r) => (
            r.session_id.clone(),
            r.session_index.map(|i| i.to_string()).unwrap_or_default(),
        ),
        None => (String::new(), String::new()),
    };
    let values = Values {
        // NUL cannot be passed in argv or the environment (removed above).
        prompt,
        prompt_file: &prompt_file,
        working_dir: &working_dir,
        story_id: &req.story_id,
        attempt: &attempt,
        session_id: &session_id,
        session_index: &session_index,
    };
    // A resumed call uses `resume_args`; an agent that has none starts a new
    // session with its ordinary argv.
    let template = match (&req.resume, &agent.resume_args) {
        (Some(_), Some(resume_args)) => resume_args,
        _ => &agent.args,
    };
    let args = template
        .iter()
        .map(|a| placeholders::substitute(a, &values))
        .collect();
    let cwd = match &agent.working_dir {
        Some(t) => {
            let dir = PathBuf::from(placeholders::substitute(t, &values));
            if dir.is_absolute() {
                dir
            } else {
                req.workdir.join(dir)
            }
        }
        None => req.workdir.clone(),
    };
    let mut env: Vec<(String, String)> = agent
        .env
        .iter()
        .map(|(k, v)| (k.clone(), placeholders::substitute(v, &values)))
        .collect();
    env.extend([
        ("CASCADE_STORY_ID".to_string(), req.story_id.clone()),
        ("CASCADE_PROMPT_FILE".to_string(), prompt_file.to_string()),
        ("CASCADE_WORKDIR".to_string(), working_dir.to_string()),
        ("CASCADE_ATTEMPT".to_string(), attempt.clone()),
        ("CASCADE_PHASE".to_string(), req.phase.to_string()),
    ]);
    env.extend(req.extra_env.iter().cloned());
    Invocation {
        program: agent.command.clone(),
        args,
        cwd,
        env,
        timeout: req.timeout_override.unwrap_or_else(|| agent.timeout()),
        prompt_on_stdin: false,
    }
}

/// The result of one agent run.
#[derive(Debug, Clone)]
pub struct AgentRun {
    /// The agent's name.
    pub agent: String,
    /// Exit code, signal, timeout, cancellation, duration, output tails.
    pub outcome: Outcome,
    pub log_path: PathBuf,
    pub prompt_path: PathBuf,
    pub usage: Option<Usage>,
    /// The agent's final answer, when its output format has one.
    pub final_text: Option<String>,
    pub session_id: Option<String>,
    /// The model the agent reported, if it did.
    pub model: Option<String>,
    pub review: Option<ReviewVerdict>,
    /// An error the agent reported in its event stream (e.g. Claude's
    /// `is_error`), even when it exited 0.
    pub reported_error: Option<String>,
    /// Provider trouble read from the agent's live output (the strongest
    /// one seen: auth over rate limit over provider error).
    pub signal: Option<crate::signal::FailureSignal>,
    /// A known refusal of the CLI to start and the setting that fixes it
    /// (e.g. claude as root: set IS_SANDBOX=1 in the agent's env).
    pub hint: Option<String>,
}

impl AgentRun {
    /// Exited 0 within its time.
    pub fn success(&self) -> bool {
        self.outcome.success()
    }
}

/// Why an agent could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The agent's command is not installed (the engine's `agent_unavailable`).
    #[error("agent '{agent}' is not available: command '{command}' not found on PATH (install it or pick another agent with --agent)")]
    Unavailable { agent: String, command: String },
    /// An api agent's key variable is not set.
    #[error("agent '{agent}' needs an API key: set the environment variable {var} (its api_key_env in agents.json), or pick another agent with --agent")]
    MissingKey { agent: String, var: String },
    /// The command exists but cannot be executed.
    #[error("agent '{agent}': command '{command}' is not executable (check its permissions)")]
    NotExecutable { agent: String, command: String },
    /// The working directory is missing.
    #[error("agent '{agent}': working directory '{}' does not exist", dir.display())]
    NoWorkingDir { agent: String, dir: PathBuf },
    /// An argument is longer than the OS allows (never the prompt itself,
    /// which then goes through the prompt file and stdin).
    #[error("agent '{agent}': argument {index} is {len} bytes, more than the {max} the OS accepts (shorten it in the agent's args)")]
    ArgumentTooLong {
        agent: String,
        index: usize,
        len: usize,
        max: usize,
    },
    /// The prompt or log file could not be written.
    #[error("cannot write '{}': {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Any other spawn failure.
    #[error("agent '{agent}' could not be started: {source}")]
    Spawn {
        agent: String,
        #[source]
        source: SpawnError,
    },
}

/// Runs `agent` for `req`. `on_spawn` gets the child's pid (its process
/// group) as soon as it started, before the wait. A run that starts always
/// returns `Ok` with its outcome (non-zero exit, timeout and cancellation
/// included); `Err` means it never started.
pub async fn execute(
    agent: &AgentDef,
    req: AgentRequest,
    on_spawn: impl FnOnce(u32),
    cancel: &CancelToken,
) -> Result<AgentRun, ExecError> {
    if let Some(api) = &agent.api {
        return crate::api::execute(agent, api, req, on_spawn, cancel).await;
    }
    let prompt_path = req.prompt_path();
    let log_path = req.log_path();
    let inv = invocation(agent, &req, &prompt_path);
    if let Some((index, arg)) = inv
        .args
        .iter()
        .enumerate()
        .find(|(_, a)| a.len() >= MAX_ARG_BYTES)
    {
        return Err(ExecError::ArgumentTooLong {
            agent: agent.name.clone(),
            index,
            len: arg.len(),
            max: MAX_ARG_BYTES - 1,
        });
    }
    // A fresh log per attempt, opened with a header saying what ran.
    let ran = format!(
        "{} {}",
        inv.program,
        inv.args
            .iter()
            .map(|a| shorten(a, 80))
            .collect::<Vec<_>>()
            .join(" ")
    );
    start_files(agent, &req, &ran)?;

    let parser = Arc::new(Mutex::new(StreamParser::new()));
    // The watcher reads both streams as they arrive and fires `stop` when the
    // agent cannot succeed (a refused key, a provider that keeps limiting).
    let watcher = Arc::new(Mutex::new(Watcher::new(&agent.command)));
    let stop = CancelToken::new();
    let feed = {
        let parser = Arc::clone(&parser);
        let watcher = Arc::clone(&watcher);
        let stop = stop.clone();
        let watch = req.on_output.clone();
        Arc::new(move |line: &[u8]| {
            if let Some(w) = &watch {
                (w.0)(line);
            }
            if let Ok(mut p) = parser.lock() {
                p.feed_line(line);
            }
            if let Ok(mut w) = watcher.lock() {
                if w.stdout_line(line) {
                    stop.cancel();
                }
            }
        })
    };
    let feed_err = {
        let watcher = Arc::clone(&watcher);
        let stop = stop.clone();
        let watch = req.on_output.clone();
        Arc::new(move |line: &[u8]| {
            if let Some(w) = &watch {
                (w.0)(line);
            }
            if let Ok(mut w) = watcher.lock() {
                if w.stderr_line(line) {
                    stop.cancel();
                }
            }
        })
    };
    let mut spec = Spec::new(OsString::from(&inv.program))
        .args(&inv.args)
        .cwd(&inv.cwd)
        .timeout(inv.timeout)
        .log(&log_path)
        .log_limit(req.log_limit)
        .on_stdout_line(feed)
        .on_stderr_line(feed_err)
        .stop_token(stop)
        .label("agent", &req.story_id);
    for (k, v) in &inv.env {
        spec = spec.env(k, v);
    }
    if inv.prompt_on_stdin {
        spec = spec.stdin_bytes(req.prompt.replace('\0', ""));
    }
    if let Some(policy) = &req.sandbox {
        spec = spec.sandbox(Arc::new(agent.sandbox.policy(policy)));
    }
    let running = spec.spawn().map_err(|e| match e {
        SpawnError::NotFound { .. } => ExecError::Unavailable {
            agent: agent.name.clone(),
            command: agent.command.clone(),
        },
        SpawnError::PermissionDenied { .. } => ExecError::NotExecutable {
            agent: agent.name.clone(),
            command: agent.command.clone(),
        },
        SpawnError::NoWorkingDir { dir } => ExecError::NoWorkingDir {
            agent: agent.name.clone(),
            dir,
        },
        other => ExecError::Spawn {
            agent: agent.name.clone(),
            source: other,
        },
    })?;
    on_spawn(running.pid());
    let outcome = running.wait(cancel).await;
    let summary = match parser.lock() {
        Ok(p) => p.summary(),
        Err(poisoned) => poisoned.into_inner().summary(),
    };
    let (signal, hint) = {
        let w = match watcher.lock() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        };
        (w.signal().cloned(), w.hint().map(str::to_string))
    };
    Ok(AgentRun {
        agent: agent.name.clone(),
        outcome,
        log_path,
        prompt_path,
        usage: summary.usage,
        final_text: summary.final_text,
        session_id: summary.session_id,
        model: summary.model,
        review: summary.review,
        reported_error: summary.reported_error,
        signal,
        hint,
    })
}

/// Writes the prompt file and starts the attempt's log afresh with a header
/// saying what ran (`ran`: the command, or the api agent's model), for both
/// kinds of agent; the run then appends to the log within its limit.
pub(crate) fn start_files(
    agent: &AgentDef,
    req: &AgentRequest,
    ran: &str,
) -> Result<(), ExecError> {
    let header = format!(
        "== cascade: {} attempt {} ({}) via {}: {ran}\n",
        req.story_id, req.attempt, req.phase, agent.name,
    );
    for (path, bytes) in [
        (req.prompt_path(), req.prompt.as_bytes()),
        (req.log_path(), header.as_bytes()),
    ] {
        cascade_fs::write_atomic(&path, bytes, cascade_fs::Durability::Renamed)
            .map_err(|source| ExecError::Io { path, source })?;
    }
    Ok(())
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max && !s.contains('\n') {
        return s.to_string();
    }
    let head: String = s.chars().take(max).collect::<String>().replace('\n', " ");
    format!("{head}...")
}

#[cfg(test)]
mod tests;
