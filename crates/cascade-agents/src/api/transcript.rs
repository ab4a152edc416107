//! What an api run shows of itself, as a CLI run's output would: the model's
//! text as it streams (line by line), a line per tool call and its error,
//! and cascade's own error lines. Every line goes to the run's log under
//! `.cascade/logs/`, to the caller's live observer ([`OutputLines`]: the
//! dashboard) and into bounded tails that become the run's
//! `Outcome::stdout` / `stderr` (output excerpts of failures and retries).

use std::collections::VecDeque;
use std::io::Write as _;

use cascade_process::Captured;

use crate::exec::OutputLines;

/// Bytes kept of each stream (the process runner's default).
const TAIL: usize = cascade_process::DEFAULT_TAIL_BYTES;

#[derive(Debug, Default)]
struct Tail {
    bytes: VecDeque<u8>,
    total: u64,
}

impl Tail {
    fn push(&mut self, line: &str) {
        for chunk in [line.as_bytes(), b"\n"] {
            self.total += chunk.len() as u64;
            self.bytes.extend(chunk);
        }
        if self.bytes.len() > TAIL {
            let excess = self.bytes.len() - TAIL;
            self.bytes.drain(..excess);
        }
    }

    fn captured(&self) -> Captured {
        Captured {
            tail: self.bytes.iter().copied().collect(),
            total_bytes: self.total,
        }
    }
}

/// The output of one api run.
#[derive(Debug)]
pub struct Transcript {
    log: Option<std::fs::File>,
    watch: Option<OutputLines>,
    out: Tail,
    err: Tail,
    /// Streamed model text not yet ended by a newline.
    partial: String,
}

impl Transcript {
    /// Appends to `log` (a failure to open it costs only the log).
    pub fn new(log: &std::path::Path, watch: Option<OutputLines>) -> Transcript {
        Transcript {
            log: std::fs::OpenOptions::new().append(true).open(log).ok(),
            watch,
            out: Tail::default(),
            err: Tail::default(),
            partial: String::new(),
        }
    }

    /// A piece of the model's text as it streams.
    pub fn text(&mut self, delta: &str) {
        self.partial.push_str(delta);
        while let Some(i) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=i).collect();
            self.line(line.trim_end_matches(['\n', '\r']));
        }
    }

    /// Ends the model's streamed text (its last line may lack a newline).
    pub fn end_text(&mut self) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line);
        }
    }

    /// One line of the run's output.
    pub fn line(&mut self, line: &str) {
        self.emit(line);
        self.out.push(line);
    }

    /// One line saying what went wrong.
    pub fn error(&mut self, line: &str) {
        self.end_text();
        self.emit(line);
        self.err.push(line);
    }

    fn emit(&mut self, line: &str) {
        if let Some(log) = &mut self.log {
            // A full disk costs the log, never the run.
            let _ = writeln!(log, "{line}");
        }
        if let Some(w) = &self.watch {
            (w.0)(line.as_bytes());
        }
    }

    /// The tails, as a process's stdout and stderr would be.
    pub fn captured(&self) -> (Captured, Captured) {
        (self.out.captured(), self.err.captured())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn streamed_text_becomes_lines_everywhere() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.log");
        std::fs::write(&log, "header\n").unwrap();
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let s = Arc::clone(&seen);
        let watch = OutputLines(Arc::new(move |l: &[u8]| {
            s.lock()
                .unwrap()
                .push(String::from_utf8_lossy(l).into_owned())
        }));
        let mut t = Transcript::new(&log, Some(watch));
        t.text("hel");
        t.text("lo\nwor");
        t.text("ld");
        t.error("boom");
        t.line("[tool] Read a.rs");
        assert_eq!(
            *seen.lock().unwrap(),
            ["hello", "world", "boom", "[tool] Read a.rs"]
        );
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "header\nhello\nworld\nboom\n[tool] Read a.rs\n"
        );
        let (out, err) = t.captured();
        assert_eq!(out.text_lossy(), "hello\nworld\n[tool] Read a.rs\n");
        assert_eq!(err.text_lossy(), "boom\n");
    }
}
