//! The dashboard's side of the live channel: connect to a running
//! process, receive its records, send it requests.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::{Hello, Line, Record, Reply, Request};

/// How long a connected run has to send its hello.
const HELLO_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>;

/// A connection to a live run.
pub struct LiveClient {
    write: tokio::sync::Mutex<OwnedWriteHalf>,
    waiting: Waiting,
    next_id: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for LiveClient {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Where the live socket of `cascade_dir` is: the default path, or the one
/// `.cascade/live.json` names.
pub fn socket_of(cascade_dir: &Path) -> PathBuf {
    let default = super::socket_path(cascade_dir);
    if super::fits(&default) {
        return default;
    }
    std::fs::read(cascade_dir.join(super::POINTER))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("socket").and_then(|s| s.as_str()).map(PathBuf::from))
        .unwrap_or(default)
}

impl LiveClient {
    /// Connects to the live run of `cascade_dir`: its hello, and its records
    /// (replay, then live) on the receiver until it ends (then the receiver
    /// closes).
    pub async fn connect(
        cascade_dir: &Path,
    ) -> std::io::Result<(LiveClient, Hello, mpsc::UnboundedReceiver<Record>)> {
        let stream = UnixStream::connect(socket_of(cascade_dir)).await?;
        let (read, write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        // A run that accepted but never greets (stopped, or not cascade)
        // would otherwise hold the dashboard's watch forever: it gives up
        // and tries again.
        let first = tokio::time::timeout(HELLO_WITHIN, lines.next_line())
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the live run did not greet in time",
                )
            })??
            .unwrap_or_default();
        let hello = match serde_json::from_str::<Line>(&first) {
            Ok(Line::Hello(h)) => h,
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the live socket did not greet as cascade does",
                ))
            }
        };
        let waiting: Waiting = Arc::default();
        let (tx, rx) = mpsc::unbounded_channel();
        let reader = {
            let waiting = Arc::clone(&waiting);
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    match serde_json::from_str::<Line>(&line) {
                        // The dashboard went away: stop reading.
                        Ok(Line::Record(r)) => {
                            let gone = tx.send(r).is_err();
                            if gone {
                                break;
                            }
                        }
                        Ok(Line::Reply(r)) => {
                            let w = waiting.lock().ok().and_then(|mut m| m.remove(&r.reply));
                            if let Some(w) = w {
                                let _ = w.send(r);
                            }
                        }
                        _ => {}
                    }
                }
                // Whoever waits for a reply learns the run went away.
                if let Ok(mut m) = waiting.lock() {
                    m.clear();
                }
            })
        };
        Ok((
            LiveClient {
                write: tokio::sync::Mutex::new(write),
                waiting,
                next_id: AtomicU64::new(1),
                reader,
            },
            hello,
            rx,
        ))
    }

    /// Sends a request (about `story` of `feature` in a mega run) and waits
    /// for its reply; `Err` when the run is gone.
    pub async fn request(
        &self,
        action: &str,
        story: Option<&str>,
        feature: Option<&str>,
        by: &str,
    ) -> std::io::Result<Reply> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut m) = self.waiting.lock() {
            m.insert(id, tx);
        }
        let req = Request {
            id,
            action: action.to_string(),
            story: story.map(str::to_string),
            feature: feature.map(str::to_string),
            by: by.to_string(),
        };
        let mut bytes = serde_json::to_vec(&req).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        self.write.lock().await.write_all(&bytes).await?;
        rx.await.map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the run ended before it answered",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that takes the connection and says nothing (a stopped run)
    /// is given up on, so the dashboard's watch tries again.
    #[tokio::test(start_paused = true)]
    async fn a_run_that_never_greets_is_given_up_on() {
        let dir = tempfile::tempdir().unwrap();
        let listener =
            tokio::net::UnixListener::bind(super::super::socket_path(dir.path())).unwrap();
        let held = tokio::spawn(async move { listener.accept().await.map(|(s, _)| s) });
        let err = match LiveClient::connect(dir.path()).await {
            Ok(_) => panic!("connected to a run that never greeted"),
            Err(e) => e,
        };
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        drop(held);
    }
}
