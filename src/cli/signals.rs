//! The signals that stop a long-running command (`approve`, `resume`,
//! `mega approve`): SIGINT (Ctrl-C), SIGTERM (`kill`, a CI job being
//! cancelled, `timeout`) and SIGHUP (the terminal went away).
//!
//! All three are handled alike. The first one cancels the run: scheduling
//! stops, running agents and gates are stopped (SIGTERM to their process
//! groups, a grace period, SIGKILL), state is saved, and the command exits
//! with 128 + the signal number (130 for Ctrl-C, as CLI.md says). A second
//! one escalates ([`leave`]): SIGKILL to every agent and gate group and to
//! everything they started, and cascade exits once they are gone (waiting a
//! few seconds at most), so no agent that ignores SIGTERM goes on as an
//! orphan. A failed write to stdout or stderr stops a run like a first
//! signal ([`stop_for_output`]).

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;

use cascade_process::CancelToken;
use tokio::signal::unix::{signal, SignalKind};

use super::EXIT_INTERRUPTED;

/// Set by the first stopping signal; read by code that blocks outside the
/// async runtime (the confirmation prompt between batches).
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Set when the output (stdout or stderr) could not be written.
static OUTPUT_BROKEN: AtomicBool = AtomicBool::new(false);
/// Set when a run was stopped because of that, not by a signal.
static STOPPED_BY_OUTPUT: AtomicBool = AtomicBool::new(false);

/// How long the second signal waits for the killed processes to be gone.
const KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The cancel tokens of the runs watching signals (one per command, but a
/// mega run or `plan --run` may start another).
fn runs() -> std::sync::MutexGuard<'static, Vec<CancelToken>> {
    static RUNS: std::sync::Mutex<Vec<CancelToken>> = std::sync::Mutex::new(Vec::new());
    RUNS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a stopping signal has arrived.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
}

/// Whether the command was stopped because its output failed.
pub fn stopped_by_output() -> bool {
    STOPPED_BY_OUTPUT.load(Ordering::SeqCst)
}

/// The output cannot be written (see the `out` module): a running command
/// stops as on a first signal, so that it ends soon with the output error's
/// exit code instead of working on unseen.
pub fn stop_for_output() {
    OUTPUT_BROKEN.store(true, Ordering::SeqCst);
    let runs = runs();
    if !runs.is_empty() {
        stop_run_for_output(&runs);
    }
}

fn stop_run_for_output(runs: &[CancelToken]) {
    STOPPED_BY_OUTPUT.store(true, Ordering::SeqCst);
    STOP_REQUESTED.store(true, Ordering::SeqCst);
    for cancel in runs {
        cancel.cancel();
    }
}

/// Kills every process cascade supervises (agents, gates, setup and notify
/// commands, and what they started), says on stderr what it stopped
/// (`why` leads the line: "second interrupt", a worker's "third signal"),
/// and exits with `code` once they are gone, waiting [`KILL_WAIT`] at most.
/// What may still be alive then is named too.
pub fn leave(code: i32, why: &str) -> ! {
    let killed = cascade_process::kill_all(KILL_WAIT);
    errln!("{why}: {}", stopped_line(&killed.groups));
    if !killed.left.is_empty() {
        let pids: Vec<String> = killed.left.iter().map(u32::to_string).collect();
        errln!(
            "warning: processes {} did not end after SIGKILL within {}s",
            pids.join(", "),
            KILL_WAIT.as_secs()
        );
    }
    std::process::exit(code)
}

/// Most names [`stopped_line`] lists of one kind.
const NAMED: usize = 8;

/// "stopped 2 agent process groups (a, b) and 1 gate process group
/// (tests)": what [`leave`] killed, by kind (the groups come sorted by
/// kind, see [`cascade_process::kill_all`]).
fn stopped_line(groups: &[cascade_process::Label]) -> String {
    if groups.is_empty() {
        return "no agent or gate was running".to_string();
    }
    let mut parts: Vec<String> = Vec::new();
    for kind in groups.chunk_by(|a, b| a.kind == b.kind) {
        let names: Vec<String> = kind
            .iter()
            .take(NAMED)
            .map(|l| super::report::printable_line(&l.name).into_owned())
            .collect();
        let more = match kind.len().saturating_sub(NAMED) {
            0 => String::new(),
            n => format!(", and {n} more"),
        };
        parts.push(format!(
            "{} {} process group{} ({}{more})",
            kind.len(),
            kind[0].kind,
            if kind.len() == 1 { "" } else { "s" },
            names.join(", ")
        ));
    }
    let last = parts.pop().unwrap_or_default();
    let list = match parts.is_empty() {
        true => last,
        false => format!("{} and {last}", parts.join(", ")),
    };
    format!("stopped {list}")
}

/// Reads one line from stdin, giving up (`None`) when a stopping signal
/// arrives meanwhile: a blocking read would otherwise ignore Ctrl-C at a
/// `[Y/n]` prompt until Enter was pressed.
pub fn read_line_unless_stopped() -> Option<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = std::io::stdin().lock().read_line(&mut line);
        let _ = tx.send(read.ok().filter(|n| *n > 0).map(|_| line));
    });
    loop {
        if stop_requested() {
            return None;
        }
        match rx.recv_timeout(std::time::Duration::from_millis(50)) {
            Ok(line) => return line,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// Asks `question` on stderr and reads the answer (Enter means yes).
/// End of input or a stopping signal at the prompt mean no.
pub fn ask_yes_no(question: &str) -> bool {
    use std::io::Write;
    let mut err = super::out::stderr();
    let _ = write!(err, "{question} [Y/n] ");
    let _ = err.flush();
    // Ctrl-C at the prompt stops the run (a blocking read would ignore it).
    match read_line_unless_stopped() {
        None => false,
        Some(line) => {
            let answer = line.trim().to_ascii_lowercase();
            answer.is_empty() || answer == "y" || answer == "yes"
        }
    }
}

/// Which stopping signal arrived first, if any.
#[derive(Clone, Default)]
pub struct StopSignals {
    first: Arc<AtomicI32>,
}

impl StopSignals {
    /// Starts watching on the current tokio runtime; `cancel` is cancelled
    /// on the first signal. Must be called from inside the runtime.
    pub fn watch(cancel: CancelToken) -> StopSignals {
        let stop = StopSignals::default();
        let first = Arc::clone(&stop.first);
        runs().push(cancel.clone());
        // The output failed before this run started watching.
        if OUTPUT_BROKEN.load(Ordering::SeqCst) {
            stop_run_for_output(std::slice::from_ref(&cancel));
        }
        on_stop_signals(move |press, number| {
            if press == 0 {
                first.store(number, Ordering::SeqCst);
                STOP_REQUESTED.store(true, Ordering::SeqCst);
                cancel.cancel();
            } else {
                // A second signal: kill everything now, leave when it is gone.
                leave(128 + number, "second interrupt");
            }
        });
        stop
    }

    /// The exit code of an interrupted run: 128 + the first signal's number
    /// (130 when none was recorded, e.g. the engine stopped on its own).
    pub fn exit_code(&self) -> u8 {
        match self.first.load(Ordering::SeqCst) {
            n if n > 0 && n < 128 => 128 + n as u8,
            _ => EXIT_INTERRUPTED,
        }
    }
}

/// Calls `handler(press, signal)` for every SIGINT, SIGTERM or SIGHUP, with
/// `press` counting the signals of any of the three from 0. Spawns on the
/// current tokio runtime (must be called inside it). A signal that cannot
/// be watched keeps its default action.
pub fn on_stop_signals(handler: impl Fn(usize, i32) + Send + Sync + 'static) {
    let handler = Arc::new(handler);
    let presses = Arc::new(AtomicUsize::new(0));
    for (kind, number) in [
        (SignalKind::interrupt(), libc::SIGINT),
        (SignalKind::terminate(), libc::SIGTERM),
        (SignalKind::hangup(), libc::SIGHUP),
    ] {
        let Ok(mut stream) = signal(kind) else {
            continue;
        };
        let (handler, presses) = (Arc::clone(&handler), Arc::clone(&presses));
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                handler(presses.fetch_add(1, Ordering::SeqCst), number);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_process::Label;

    fn label(kind: &str, name: &str) -> Label {
        Label {
            kind: kind.into(),
            name: name.into(),
        }
    }

    #[test]
    fn the_second_interrupt_names_what_it_stopped() {
        let many: Vec<Label> = (0..10)
            .map(|i| label("agent", &format!("s{i:02}")))
            .collect();
        let lines = [
            stopped_line(&[]),
            stopped_line(&[label("agent", "story-a")]),
            stopped_line(&[
                label("agent", "story-a"),
                label("agent", "story-b"),
                label("agent", "story-c"),
            ]),
            stopped_line(&[
                label("agent", "story-a"),
                label("gate", "tests"),
                label("other", "git"),
            ]),
            stopped_line(&many),
        ];
        // As `leave` prints them after a second Ctrl-C.
        let lines: Vec<String> = lines
            .iter()
            .map(|l| format!("second interrupt: {l}"))
            .collect();
        insta::assert_snapshot!(lines.join("\n"));
    }
}
