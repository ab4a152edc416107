//! The live channel: how a running `cascade approve|resume|demo|mega approve` process
//! shares its events with a `cascade ui` process, and takes its requests.
//!
//! The run ([`Publisher`], in the running process) listens on a Unix domain
//! socket, `.cascade/live.sock` (mode 0600: only the user; a path too long
//! for a socket address goes to the temp directory, named in
//! `.cascade/live.json`). The run appends its records (engine events only,
//! not agent output, which the agents' logs keep) to
//! `.cascade/runs/<run_id>/events.jsonl` ([`journal`]) before it sends
//! them, so a finished run can be shown from disk and a client finds the
//! run's history there. A client that connects gets one [`Hello`] line
//! (with the run id, which names the journal), then the [`Record`]s of the
//! run so far that the journal does not hold (replay: the latest agent
//! output, and events made before the journal opened or that it could not
//! take), then the live ones, one JSON object per line; a live record may
//! also be in the journal when the client reads it after connecting (its
//! `seq` says so). It may send [`Request`] lines at any time and gets a
//! [`Reply`] line with the same `id`.
//!
//! A socket left by a killed run is found stale (nobody answers) and
//! replaced by the next run; a clean exit removes it.

pub mod client;
pub mod journal;
mod publisher;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use client::LiveClient;
pub use publisher::Publisher;

/// File name of the socket under `.cascade/`.
pub const SOCKET: &str = "live.sock";
/// Where the socket is when its path is too long to be bound.
pub const POINTER: &str = "live.json";

/// How the run id of a mega run starts (`mega-<time>-<pid>`; a plain run's
/// is the engine's own).
pub const MEGA_RUN_PREFIX: &str = "mega-";

/// Whether `run_id` names a mega run.
pub fn is_mega_run(run_id: &str) -> bool {
    run_id.starts_with(MEGA_RUN_PREFIX)
}

/// The `event` and `run_id` of an event's JSON text (the rest is skipped,
/// not read into values).
pub fn event_head(text: &str) -> (Option<String>, Option<String>) {
    #[derive(Deserialize)]
    struct Head {
        #[serde(default)]
        event: Option<String>,
        #[serde(default)]
        run_id: Option<String>,
    }
    match serde_json::from_str::<Head>(text) {
        Ok(h) => (h.event, h.run_id),
        Err(_) => (None, None),
    }
}

/// A record's line as `serde_json::to_string(&Record)` writes it, from its
/// data as JSON text: an event is serialized once, never turned into a
/// tree of values first (a run's last event lists every story).
pub(crate) fn record_line(seq: u64, t_ms: u64, ts: u64, kind: &str, data: &str) -> String {
    let kind = serde_json::to_string(kind).unwrap_or_default();
    let mut line = String::with_capacity(data.len() + kind.len() + 64);
    use std::fmt::Write;
    let _ = write!(
        line,
        "{{\"seq\":{seq},\"t_ms\":{t_ms},\"ts\":{ts},\"kind\":{kind},\"data\":{data}}}"
    );
    line
}

/// One thing that happened in a run, as stored and sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Position in the run (the SSE `id`), from 1; goes on across resumes.
    pub seq: u64,
    /// Milliseconds since this process started the run.
    pub t_ms: u64,
    /// Wall clock, Unix milliseconds.
    pub ts: u64,
    /// `event` (an engine event, as `approve --json` prints it) or
    /// `agent_output` (`{story, attempt, text}`, and `feature` in a mega run).
    pub kind: String,
    pub data: serde_json::Value,
}

/// The first line a client gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub hello: String,
    pub pid: u32,
    pub run_id: Option<String>,
    pub paused: bool,
}

/// A request from a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    /// `pause`, `resume`, `cancel`, `retry`.
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub story: Option<String>,
    /// The story's feature, in a mega run (story ids repeat across features).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature: Option<String>,
    /// Who asks (`ui`, `cli`).
    pub by: String,
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub reply: u64,
    pub ok: bool,
    pub message: String,
}

/// A line from the run: a record or a reply (a [`Hello`] comes first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Line {
    Reply(Reply),
    Record(Record),
    Hello(Hello),
}

/// The path a socket under `cascade_dir` would have, if short enough to
/// bind (Unix socket addresses hold about 100 bytes).
pub fn socket_path(cascade_dir: &Path) -> PathBuf {
    cascade_dir.join(SOCKET)
}

fn fits(path: &Path) -> bool {
    path.as_os_str().len() < 100
}

/// Unix milliseconds now.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_engine::control::steer::Steering;
    use cascade_engine::{Event, EventSink};
    use std::sync::{Arc, Mutex};

    #[test]
    fn an_event_serialized_once_makes_the_same_line_as_its_record() {
        let finished: Event = serde_json::from_value(serde_json::json!({
            "event": "run_finished", "status": "failed",
            "stories": {"complete": 1, "failed": 1, "blocked": 0, "pending": 0},
            "duration_ms": 12,
            "summary": [
                {"story": "a\"\n\u{e9}\u{1}", "status": "failed", "agent": null, "attempts": 2,
                 "gates": [], "duration_ms": 5, "cost_usd": 0.1 , "input_tokens": 7},
                {"story": "b", "status": "complete", "agent": "x", "attempts": 1,
                 "gates": [], "duration_ms": 1000, "cost_usd": 1e-7}
            ]
        }))
        .expect("a run_finished event");
        for e in [started("r-1"), finished] {
            let text = serde_json::to_string(&e).unwrap();
            let record = Record {
                seq: 7,
                t_ms: 8,
                ts: 9,
                kind: "event".into(),
                data: serde_json::to_value(&e).unwrap(),
            };
            assert_eq!(
                record_line(7, 8, 9, "event", &text),
                serde_json::to_string(&record).unwrap()
            );
        }
        let (event, run_id) = event_head(&serde_json::to_string(&started("r-2")).unwrap());
        assert_eq!(
            (event.as_deref(), run_id.as_deref()),
            (Some("run_started"), Some("r-2"))
        );
        assert_eq!(event_head("not json"), (None, None));
    }

    fn started(run_id: &str) -> Event {
        Event::RunStarted {
            run_id: run_id.into(),
            prd: "prd.json".into(),
            target_branch: "main".into(),
            total: 1,
            already_complete: 0,
            schedule: "batch".into(),
            parallel: 1,
            batches: 1,
            resumed: true,
        }
    }

    #[tokio::test]
    async fn replays_journals_and_answers_requests() {
        let dir = tempfile::tempdir().unwrap();
        let cascade = dir.path().join(".cascade");
        // A resumed run: its journal already holds two records.
        let path = journal::path(&cascade, "run-1").unwrap();
        let mut w = journal::Writer::open(&path).unwrap();
        for seq in 1..=2 {
            w.append(&Record {
                seq,
                t_ms: 0,
                ts: 0,
                kind: "event".into(),
                data: serde_json::json!({"event": "notice", "message": "earlier"}),
            })
            .unwrap();
        }
        drop(w);
        let publisher = Publisher::start(&cascade, Steering::new()).unwrap();
        let seen: Arc<Mutex<Vec<Event>>> = Arc::default();
        let inner: EventSink = {
            let seen = Arc::clone(&seen);
            Arc::new(move |e: &Event| seen.lock().unwrap().push(e.clone()))
        };
        let sink = publisher.wrap(inner);
        sink(&Event::Notice {
            message: "before the start".into(),
        });
        // Before the start there is no journal: a client gets the early
        // event in its replay.
        let (_early, hello, mut early_rx) = LiveClient::connect(&cascade).await.unwrap();
        assert_eq!(hello.run_id, None);
        let first = early_rx.recv().await.unwrap();
        assert_eq!(
            (first.seq, first.data["message"].as_str()),
            (1, Some("before the start"))
        );
        sink(&started("run-1"));
        // The reporter behind still gets every event.
        assert_eq!(seen.lock().unwrap().len(), 2);
        // Numbering goes on after the journal, the early notice included.
        let journaled = || -> Vec<(u64, serde_json::Value)> {
            journal::read(&path)
                .unwrap()
                .into_iter()
                .map(|r| (r.seq, r.data))
                .collect()
        };
        let seqs: Vec<u64> = journaled().iter().map(|r| r.0).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4]);
        assert_eq!(journaled()[2].1["message"], "before the start");
        assert_eq!(early_rx.recv().await.unwrap().seq, 4, "live: run_started");

        // A client that connects now finds the run's history in the
        // journal its hello names, and nothing of it twice: no replay of
        // journaled events, and live from here on.
        let (client, hello, mut rx) = LiveClient::connect(&cascade).await.unwrap();
        assert_eq!(hello.run_id.as_deref(), Some("run-1"));
        assert!(!hello.paused);
        sink(&Event::Notice {
            message: "live".into(),
        });
        for rx in [&mut rx, &mut early_rx] {
            let live = rx.recv().await.unwrap();
            assert_eq!((live.seq, live.data["message"].as_str()), (5, Some("live")));
        }
        assert_eq!(journaled().last().map(|r| r.0), Some(5));
        // No engine takes requests: refused, with the reason.
        let reply = client.request("pause", None, None, "ui").await.unwrap();
        assert!(!reply.ok);
        assert!(reply.message.contains("no run"), "{}", reply.message);
        let reply = client.request("cancel", None, None, "ui").await.unwrap();
        assert_eq!(reply.message, "'cancel' needs a story");
        let reply = client.request("explode", None, None, "ui").await.unwrap();
        assert!(reply.message.starts_with("unknown action 'explode'"));
        // Private to the user; gone with the publisher.
        use std::os::unix::fs::PermissionsExt;
        let socket = client::socket_of(&cascade);
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(publisher);
        assert!(!socket.exists());
        assert!(LiveClient::connect(&cascade).await.is_err());
    }

    #[tokio::test]
    async fn events_the_journal_cannot_take_are_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let cascade = dir.path().join(".cascade");
        // `runs` is a file: no journal can be made under it.
        std::fs::create_dir_all(&cascade).unwrap();
        std::fs::write(journal::runs_dir(&cascade), "not a directory").unwrap();
        let publisher = Publisher::start(&cascade, Steering::new()).unwrap();
        let sink = publisher.wrap(Arc::new(|_: &Event| {}));
        sink(&started("run-1"));
        sink(&Event::Notice {
            message: "after".into(),
        });
        let (_client, hello, mut rx) = LiveClient::connect(&cascade).await.unwrap();
        assert_eq!(hello.run_id.as_deref(), Some("run-1"));
        let mut replayed = Vec::new();
        for _ in 0..2 {
            let r = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
                .await
                .expect("the replay in time")
                .unwrap();
            replayed.push((r.seq, r.data["event"].as_str().map(str::to_string)));
        }
        assert_eq!(
            replayed,
            vec![(1, Some("run_started".into())), (2, Some("notice".into()))]
        );
    }

    #[test]
    fn a_busy_socket_is_not_taken_over() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let first = Publisher::start(dir.path(), Steering::new()).unwrap();
            let second = Publisher::start(dir.path(), Steering::new());
            assert_eq!(second.err().unwrap().kind(), std::io::ErrorKind::AddrInUse);
            drop(first);
        });
    }
}
