//! The live channel: how a running `cascade approve|resume|demo` process
//! shares its events with a `cascade ui` process, and takes its requests.
//!
//! The run ([`Publisher`], in the running process) listens on a Unix domain
//! socket, `.cascade/live.sock` (mode 0600: only the user; a path too long
//! for a socket address goes to the temp directory, named in
//! `.cascade/live.json`). A client that connects gets one [`Hello`] line,
//! then every [`Record`] of the run so far (replay), then the live ones, one
//! JSON object per line; it may send [`Request`] lines at any time and gets
//! a [`Reply`] line with the same `id`. The run also appends its records
//! (engine events only, not agent output, which the agents' logs keep) to
//! `.cascade/runs/<run_id>/events.jsonl` ([`journal`]), so a finished run
//! can be shown from disk.
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
    /// `agent_output` (`{story, attempt, text}`).
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
