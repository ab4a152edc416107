//! Where a job's time goes on a worker: the moments its phases end (the
//! base checked out, the agent started, the commit made...), turned into
//! one duration per phase for the job's `job_done` line, so a slow hand-off
//! between a story's end and its dependent's start can be found from the
//! workers' output, without a profiler.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The milestones of one job, from the moment the worker took it.
#[derive(Debug)]
pub struct Timeline {
    start: Instant,
    /// Time the job waited in the stream before this worker took it.
    queued: Option<Duration>,
    marks: Mutex<Vec<(&'static str, Instant)>>,
}

impl Timeline {
    /// Starts now; `queued`: how long the job was in the stream before.
    pub fn new(queued: Option<Duration>) -> Self {
        Timeline {
            start: Instant::now(),
            queued,
            marks: Mutex::new(Vec::new()),
        }
    }

    /// The phase `name` ended now (its first end counts: events repeat, e.g.
    /// one `gate_finished` per gate, and the last one is marked by the
    /// step after it).
    pub fn mark(&self, name: &'static str) {
        let now = Instant::now();
        if let Ok(mut m) = self.marks.lock() {
            if !m.iter().any(|(n, _)| *n == name) {
                m.push((name, now));
            }
        }
    }

    /// Each phase and its milliseconds, in order: from the end of the phase
    /// before (or the job taken) to its own end; `queued` first when known.
    pub fn phases(&self) -> Vec<(String, u64)> {
        let mut marks = self.marks.lock().map(|m| m.clone()).unwrap_or_default();
        marks.sort_by_key(|(_, at)| *at);
        let mut out: Vec<(String, u64)> = self
            .queued
            .map(|q| ("queued".to_string(), q.as_millis() as u64))
            .into_iter()
            .collect();
        let mut from = self.start;
        for (name, at) in marks {
            out.push((name.to_string(), at.duration_since(from).as_millis() as u64));
            from = at;
        }
        out
    }
}

/// `fetch 80 ms, setup 120 ms, ...` (empty: nothing measured).
pub fn describe(phases: &[(String, u64)]) -> String {
    phases
        .iter()
        .map(|(name, ms)| format!("{name} {ms} ms"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_run_from_mark_to_mark_in_time_order() {
        let t = Timeline::new(Some(Duration::from_millis(7)));
        t.mark("fetch");
        std::thread::sleep(Duration::from_millis(20));
        t.mark("agent");
        t.mark("fetch"); // a repeat does not move the first end
        let p = t.phases();
        let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["queued", "fetch", "agent"]);
        assert_eq!(p[0].1, 7);
        assert!(p[2].1 >= 20, "{p:?}");
        assert_eq!(
            describe(&p[..1]),
            "queued 7 ms",
            "one phase, in the job_done line's words"
        );
    }
}
