//! The signals that stop a long-running command (`approve`, `resume`,
//! `mega approve`): SIGINT (Ctrl-C), SIGTERM (`kill`, a CI job being
//! cancelled, `timeout`) and SIGHUP (the terminal went away).
//!
//! All three are handled alike. The first one cancels the run: scheduling
//! stops, running agents and gates are killed (their process groups), state
//! is saved, and the command exits with 128 + the signal number (130 for
//! Ctrl-C, as CLI.md says). A second one exits at once. Without this, a
//! SIGTERM ended cascade on the spot and left the agents, which run in their
//! own process groups, working on as orphans.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;

use cascade_process::CancelToken;
use tokio::signal::unix::{signal, SignalKind};

use super::EXIT_INTERRUPTED;

/// Set by the first stopping signal; read by code that blocks outside the
/// async runtime (the confirmation prompt between batches).
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Whether a stopping signal has arrived.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
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
    let mut err = std::io::stderr();
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
        on_stop_signals(move |press, number| {
            if press == 0 {
                first.store(number, Ordering::SeqCst);
                STOP_REQUESTED.store(true, Ordering::SeqCst);
                cancel.cancel();
            } else {
                // A second signal: leave now (children were signalled already).
                std::process::exit(128 + number);
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
