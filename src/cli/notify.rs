//! `--notify CMD...` and desktop notifications: a consumer of the engine's
//! events like the reporters.
//!
//! On the events a person wants to hear about when nobody watches the run
//! (the run finished, a story failed for good, the budget ran out, the run
//! paused) the command runs as an argv vector (never a shell), in its own
//! process group, with the event's JSON on its stdin and `CASCADE_EVENT` set
//! to the event's name; it is killed after [`NOTIFY_TIMEOUT`]. A failing
//! command is a warning on stderr and never changes the run. When
//! `notify-send` is on PATH and a graphical session is there (`DISPLAY` or
//! `WAYLAND_DISPLAY`), a desktop notification says the same in one line.
//! Notifications run off the engine's thread; [`Notifier::finish`] waits for
//! them before the process exits.
//!
//! The command runs confined by the run's sandbox mode like a story's
//! processes, under [`cascade_engine::confine::hook_policy`]: it writes only
//! a private temp directory (its `TMPDIR`), reads everything but the hidden
//! paths, and keeps the network. `notify-send` (a system program given
//! cascade's own text) is not confined: a desktop bus may be an abstract
//! socket, which the sandbox scopes away.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use cascade_engine::confine::{AttemptSandbox, AttemptSandboxError};
use cascade_engine::{Event, EventSink};
use cascade_process::{CancelToken, Spec};

use super::run_flags::RunFlags;
use super::Failure;

/// How long a notification command may run.
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the notifications of one run.
#[derive(Clone, Default)]
pub struct Notifier {
    argv: Option<Vec<String>>,
    /// The command's confinement (its policy and temp directory, kept as
    /// long as a notification may run).
    sandbox: Arc<AttemptSandbox>,
    desktop: Option<std::path::PathBuf>,
    pending: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Notifier {
    /// The notifications of a run with `flags` started in `cwd`: the
    /// `--notify` command confined by the run's `--sandbox` and the
    /// `sandbox` section of `.cascade/config.json` at HEAD (as `sandbox
    /// check` reads it), and desktop notifications when available.
    pub fn for_run(flags: &RunFlags, cwd: &Path) -> Result<Notifier, Failure> {
        let argv = flags.notify_argv();
        let sandbox = match &argv {
            Some(_) => {
                let settings = super::sandbox_cmd::settings_at_head(cwd)?;
                AttemptSandbox::for_hooks(flags.sandbox_mode(), &settings).map_err(|e| match e {
                    AttemptSandboxError::Unavailable(_) => Failure::usage(e),
                    AttemptSandboxError::TempDir(_) => Failure::failed(e),
                })?
            }
            None => AttemptSandbox::default(),
        };
        let mut notifier = Notifier::new(argv);
        notifier.sandbox = Arc::new(sandbox);
        Ok(notifier)
    }

    /// `argv`: `--notify`'s command (unconfined); desktop notifications when available.
    fn new(argv: Option<Vec<String>>) -> Notifier {
        let graphical = ["DISPLAY", "WAYLAND_DISPLAY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
        let desktop = if graphical {
            on_path("notify-send")
        } else {
            None
        };
        Notifier {
            argv: argv.filter(|a| !a.is_empty()),
            sandbox: Arc::default(),
            desktop,
            pending: Arc::default(),
        }
    }

    /// `sink` followed by the notifications its events call for. A failing
    /// notification command is said on stderr (after `run_finished` the
    /// NDJSON stream on stdout must stay closed).
    pub fn wrap(&self, sink: EventSink) -> EventSink {
        if self.argv.is_none() && self.desktop.is_none() {
            return sink;
        }
        let me = self.clone();
        Arc::new(move |e: &Event| {
            sink(e);
            if let Some(text) = headline(e) {
                me.send(e, text);
            }
        })
    }

    fn send(&self, event: &impl serde::Serialize, text: String) {
        let json = serde_json::to_vec(event).unwrap_or_default();
        let name = serde_json::to_value(event)
            .ok()
            .and_then(|v| v["event"].as_str().map(str::to_string))
            .unwrap_or_default();
        let argv = self.argv.clone();
        let sandbox = Arc::clone(&self.sandbox);
        let desktop = self.desktop.clone();
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Some(argv) = argv {
                    if let Some(problem) = run(&argv, &name, json, &sandbox).await {
                        errln!("warning: --notify command {problem}");
                    }
                }
                if let Some(cmd) = desktop {
                    let spec = Spec::new(cmd)
                        .args(["--app-name=cascade", "cascade", text.as_str()])
                        .timeout(Duration::from_secs(5));
                    let _ = spec.run(&CancelToken::new()).await;
                }
            });
        });
        if let Ok(mut p) = self.pending.lock() {
            p.push(handle);
        }
    }

    /// Waits for the notifications started so far.
    pub fn finish(&self) {
        let handles: Vec<JoinHandle<()>> = match self.pending.lock() {
            Ok(mut p) => p.drain(..).collect(),
            Err(_) => return,
        };
        for h in handles {
            let _ = h.join();
        }
    }
}

/// `name` as found on PATH (an executable file), if it is there.
fn on_path(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Runs the command (confined when `sandbox` has a policy); what went
/// wrong, if anything.
async fn run(
    argv: &[String],
    event: &str,
    json: Vec<u8>,
    sandbox: &AttemptSandbox,
) -> Option<String> {
    let (program, args) = argv.split_first()?;
    let mut spec = Spec::new(program)
        .args(args)
        .env("CASCADE_EVENT", event)
        .stdin_bytes(json)
        .timeout(NOTIFY_TIMEOUT);
    if let Some(policy) = &sandbox.policy {
        spec = spec.sandbox(Arc::clone(policy));
    }
    match spec.run(&CancelToken::new()).await {
        Ok(outcome) if outcome.success() => None,
        Ok(outcome) => Some(format!("'{}' {}", argv.join(" "), outcome.describe())),
        Err(e) => Some(format!("'{}' could not start: {e}", argv.join(" "))),
    }
}

/// The one-line text of an event worth a notification, if it is one.
pub fn headline(e: &Event) -> Option<String> {
    Some(match e {
        Event::RunFinished {
            status, stories, ..
        } => format!(
            "run {status}: {} complete, {} failed, {} blocked, {} pending",
            stories.complete, stories.failed, stories.blocked, stories.pending
        ),
        Event::StoryFailed {
            story,
            error_type,
            error,
            ..
        } => format!(
            "{story} failed ({error_type}): {}",
            error.lines().next().unwrap_or("")
        ),
        Event::BudgetExhausted { message, .. } => format!("budget exhausted: {message}"),
        Event::RunPaused { reason } | Event::MegaPaused { reason, .. } => {
            format!("paused: {reason}")
        }
        // A feature's own end is not news in a mega run: the run's is.
        Event::Feature(f) => match &*f.event {
            Event::RunFinished { .. } | Event::RunPaused { .. } => return None,
            other => format!("{}: {}", f.feature, headline(other)?),
        },
        Event::MegaFinished {
            status, features, ..
        } => format!(
            "mega run {status}: {} features complete, {} failed, {} blocked, {} pending",
            features.complete, features.failed, features.blocked, features.pending
        ),
        _ => return None,
    })
}
