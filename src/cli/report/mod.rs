//! Reporters: how the engine's [`Event`]s become output.
//!
//! The engine only emits typed events through one callback; these consumers
//! render them (nextest's habit: events out, reporters in):
//! - [`ndjson`]: `--json`, one event per line on stdout, flushed per line
//!   (the last line of a run is `run_finished`, CLI.md);
//! - [`terminal`]: a live view on a terminal (indicatif: a line per running
//!   story with agent, phase and elapsed time, and the batch progress), or
//!   plain lines when stdout/stderr is not a terminal; colour only on a
//!   terminal and never with `NO_COLOR`;
//! - [`summary`]: the final per-story table (agent, attempts, gates with
//!   cached marks, duration, tokens and cost when the agent reported them),
//!   printed by the terminal reporter on `run_finished`.
//!
//! # Plugging it in
//! ```ignore
//! let report = report::Reporter::new(args.json);
//! let sink: EventSink = report.sink();          // Arc<dyn Fn(&Event) + Send + Sync>
//! let summary = engine.run(..., sink, &cancel).await;
//! report.finish();                              // clears live lines if the run ended early
//! ```
//! or just `report::reporter(json)` when nothing needs `finish`.

pub mod ndjson;
pub mod race;
pub mod summary;
pub mod terminal;

/// Text from a plan file or an agent made safe for a terminal (control
/// characters shown as escapes); the one sanitiser of every output, shared
/// with progress.txt. See [`cascade_plan::text`].
pub use cascade_plan::text::{printable, printable_line};

use std::sync::{Arc, Mutex};

use cascade_engine::{Event, EventSink};

/// One of the reporters, shareable across the engine's threads.
#[derive(Clone)]
pub struct Reporter {
    inner: Arc<Mutex<Inner>>,
}

enum Inner {
    Json(ndjson::NdjsonReporter<crate::cli::out::Out>),
    Terminal(terminal::TerminalReporter),
}

impl Reporter {
    /// The NDJSON reporter on stdout when `json`, else the terminal reporter.
    pub fn new(json: bool) -> Reporter {
        let inner = if json {
            Inner::Json(ndjson::NdjsonReporter::new(crate::cli::out::stdout()))
        } else {
            Inner::Terminal(terminal::TerminalReporter::detect())
        };
        Reporter {
            inner: Arc::new(Mutex::new(inner)),
        }
    }

    /// Renders one event.
    pub fn report(&self, event: &Event) {
        // A reporter that panicked once must not take the run down with it.
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *inner {
            Inner::Json(r) => r.report(event),
            Inner::Terminal(r) => r.report(event),
        }
    }

    /// The callback the engine takes.
    pub fn sink(&self) -> EventSink {
        let me = self.clone();
        Arc::new(move |e: &Event| me.report(e))
    }

    /// Prints a line of the command's own (not the engine's) in the
    /// reporter's style: a note on stderr in JSON mode so stdout stays NDJSON.
    #[allow(dead_code)] // for run_cmd's own lines (lock notes, pauses)
    pub fn note(&self, text: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *inner {
            Inner::Json(_) => errln!("{text}"),
            Inner::Terminal(r) => r.note(text),
        }
    }

    /// Clears the live view (running-story lines) if the run ended without a
    /// `run_finished` event (an error or an interruption).
    pub fn finish(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Inner::Terminal(r) = &mut *inner {
            r.finish();
        }
    }
}

/// The reporter as a plain callback: NDJSON when `json`, else the terminal.
#[allow(dead_code)] // the simplest way in; run_cmd may prefer `Reporter`
pub fn reporter(json: bool) -> impl Fn(&Event) + Send + Sync + Clone {
    let r = Reporter::new(json);
    move |e: &Event| r.report(e)
}

/// What the closing line of a run that ended as `status` adds: for an
/// interrupted run, that `command` (`cascade resume`, `cascade mega
/// resume`) continues it; nothing otherwise.
pub fn continued_by(status: cascade_engine::RunStatus, command: &str) -> String {
    match status {
        cascade_engine::RunStatus::Interrupted => format!("; `{command}` continues it"),
        _ => String::new(),
    }
}

/// `1.2s`, `3m05s`, `1h02m`.
pub fn human_duration(ms: u64) -> String {
    let s = ms / 1000;
    if ms < 10_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// `950`, `12.3k`, `1.2M`.
pub fn human_count(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else if n < 1_000_000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        format!("{:.1}M", n as f64 / 1_000_000.0)
    }
}

/// The first 10 characters of a commit id.
pub fn short_oid(oid: &str) -> &str {
    oid.get(..10).unwrap_or(oid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_counts_read_well() {
        assert_eq!(human_duration(0), "0.0s");
        assert_eq!(human_duration(1234), "1.2s");
        assert_eq!(human_duration(42_000), "42s");
        assert_eq!(human_duration(185_000), "3m05s");
        assert_eq!(human_duration(3_720_000), "1h02m");
        assert_eq!(human_count(950), "950");
        assert_eq!(human_count(12_345), "12.3k");
        assert_eq!(human_count(1_234_567), "1.2M");
        assert_eq!(short_oid("0123456789abcdef"), "0123456789");
        assert_eq!(short_oid("abc"), "abc");
    }
}
