//! `--json`: every event as one JSON object per line, flushed at once, so a
//! consumer reading the pipe sees each step as it happens. The engine's last
//! event of a run is `run_finished` (CLI.md).

use std::io::Write;

use cascade_engine::Event;

/// Writes events as NDJSON to `out`.
pub struct NdjsonReporter<W: Write> {
    out: W,
    broken: bool,
}

impl<W: Write> NdjsonReporter<W> {
    pub fn new(out: W) -> Self {
        NdjsonReporter { out, broken: false }
    }

    /// Writes one line. A closed pipe (`cascade approve --json | head`) stops
    /// the output but never the run.
    pub fn report(&mut self, event: &Event) {
        if self.broken {
            return;
        }
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        if self
            .out
            .write_all(&line)
            .and_then(|_| self.out.flush())
            .is_err()
        {
            self.broken = true;
        }
    }

    /// The writer (tests).
    #[cfg(test)]
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_engine::{RunStatus, StoryCounts};

    #[test]
    fn one_flat_object_per_line() {
        let mut r = NdjsonReporter::new(Vec::new());
        r.report(&Event::StoryCommitted {
            story: "story-001".into(),
            attempt: 1,
            commit: "abc".into(),
        });
        r.report(&Event::RunFinished {
            status: RunStatus::Completed,
            stories: StoryCounts {
                complete: 1,
                ..Default::default()
            },
            duration_ms: 10,
            summary: vec![],
            integration: None,
        });
        let text = String::from_utf8(r.into_inner()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(first["event"], "story_committed");
        assert_eq!(first["story"], "story-001");
        let last: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(last["event"], "run_finished");
        assert_eq!(last["status"], "completed");
        assert_eq!(last["stories"]["complete"], 1);
        assert_eq!(last["stories"]["failed"], 0);
        assert!(text.ends_with('\n'));
    }

    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_not_fatal() {
        let mut r = NdjsonReporter::new(Closed);
        for _ in 0..3 {
            r.report(&Event::Notice {
                message: "x".into(),
            });
        }
        assert!(r.broken);
    }
}
