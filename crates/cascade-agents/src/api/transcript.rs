//! What an api run shows of itself, as a CLI run's output would: the model's
//! text as it streams (line by line), a line per tool call and its error,
//! and cascade's own error lines. Every line goes to the run's log under
//! `.cascade/logs/` (a [`CappedLog`], within the request's log limit like a
//! CLI agent's), to the caller's live observer ([`OutputLines`]: the
//! dashboard) and into bounded tails that become the run's
//! `Outcome::stdout` / `stderr` (output excerpts of failures and retries).
//! Memory stays bounded however much the model prints: the tails are
//! bounded, and streamed text without a newline is passed on in pieces of
//! at most [`MAX_LINE`] bytes.

use std::collections::VecDeque;
use std::path::Path;

use cascade_process::{CappedLog, Captured, LogLimit};

use crate::exec::OutputLines;

/// Bytes kept of each stream (the process runner's default).
const TAIL: usize = cascade_process::DEFAULT_TAIL_BYTES;
/// Streamed text longer than this without a newline is passed on as a line.
pub const MAX_LINE: usize = TAIL;

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
    log: Option<CappedLog>,
    watch: Option<OutputLines>,
    out: Tail,
    err: Tail,
    /// Streamed model text not yet ended by a newline.
    partial: String,
}

impl Transcript {
    /// Appends to `log` within `limit` (a failure to open it costs only the
    /// log).
    pub fn new(log: &Path, limit: LogLimit, watch: Option<OutputLines>) -> Transcript {
        Transcript {
            log: CappedLog::append(log, limit).ok(),
            watch,
            out: Tail::default(),
            err: Tail::default(),
            partial: String::new(),
        }
    }

    /// A piece of the model's text as it streams: every line it ends is
    /// passed on, and a line that grows past [`MAX_LINE`] is passed on in
    /// pieces (each byte of `delta` is copied once, whatever its size).
    pub fn text(&mut self, delta: &str) {
        let mut rest = delta;
        loop {
            let room = MAX_LINE.saturating_sub(self.partial.len());
            let (take, ends_line) = match rest.find('\n') {
                Some(i) if i <= room => (i, true),
                _ if rest.len() <= room => {
                    self.partial.push_str(rest);
                    return;
                }
                _ => {
                    let cut = (0..=room).rev().find(|i| rest.is_char_boundary(*i));
                    (cut.unwrap_or(0), false)
                }
            };
            self.partial.push_str(&rest[..take]);
            rest = &rest[take + usize::from(ends_line)..];
            let line = std::mem::take(&mut self.partial);
            self.line(line.trim_end_matches('\r'));
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
            // A full disk costs the log, never the run (the log counts it).
            log.write(line.as_bytes());
            log.write(b"\n");
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
        let mut t = Transcript::new(&log, LogLimit::default(), Some(watch));
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

    #[test]
    fn a_chatty_model_fills_the_log_to_its_limit_and_no_more() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.log");
        std::fs::write(&log, "header\n").unwrap();
        let longest = Arc::new(Mutex::new(0usize));
        let l = Arc::clone(&longest);
        let watch = OutputLines(Arc::new(move |line: &[u8]| {
            let mut m = l.lock().unwrap();
            *m = (*m).max(line.len());
        }));
        let limit = 256 * 1024;
        let mut t = Transcript::new(&log, LogLimit::Bytes(limit), Some(watch));
        // Short lines in odd pieces, then 1 MB without a newline (with
        // multibyte characters), then the last words.
        let chatter = "the model says more\n".repeat(50_000);
        for piece in chatter.as_bytes().chunks(777) {
            t.text(std::str::from_utf8(piece).unwrap());
        }
        t.text(&"é".repeat(500_000));
        t.text("\nthe end");
        t.end_text();
        drop(t);
        let kept = std::fs::read(&log).unwrap();
        assert_eq!(kept.len() as u64, limit);
        let text = String::from_utf8_lossy(&kept);
        assert!(text.starts_with("header\nthe model says more\n"));
        assert!(text.contains("bytes of output dropped here"), "{text:.300}");
        assert!(
            text.ends_with("éé\nthe end\n"),
            "{:?}",
            &kept[kept.len() - 50..]
        );
        assert!(*longest.lock().unwrap() <= MAX_LINE);
    }
}
