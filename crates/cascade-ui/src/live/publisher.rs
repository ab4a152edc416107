//! The running process's side of the live channel: the socket, the replay
//! buffer, the journal, and requests handed to the engine's [`Steering`].

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::lock;
use std::time::Instant;

use cascade_engine::control::steer::{Action, Steering};
use cascade_engine::{Event, EventSink};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::broadcast;

use super::{event_head, journal, record_line, unix_ms, Hello, Line, Record, Reply, Request};

/// Agent output lines kept for a client that connects late.
const OUTPUT_KEPT: usize = 20_000;
/// Longest agent output line sent (longer ones are cut).
const LINE_MAX: usize = 8 * 1024;

struct State {
    run_id: Option<String>,
    next_seq: u64,
    /// Engine events of this run that its journal does not hold (made
    /// before it opened, or not written to it), for the replay. A client
    /// reads the rest from the journal: keeping every event here cost about
    /// 1.7 KB a story, 170 MB over a run of 100,000 stories.
    events: Vec<Arc<str>>,
    /// The latest agent output lines, for the replay.
    output: VecDeque<(u64, Arc<str>)>,
    journal: Option<journal::Writer>,
    /// Records made before the run id was known (notices before `run_started`).
    unjournaled: Vec<Record>,
    /// The first journal error, reported once as a notice.
    journal_error: Option<String>,
}

struct Shared {
    cascade_dir: PathBuf,
    started: Instant,
    state: Mutex<State>,
    /// Lines with their `seq`.
    live: broadcast::Sender<(u64, Arc<str>)>,
    steering: Steering,
    /// How far each connected client got (see [`Publisher::drain`]).
    clients: Mutex<Vec<Arc<Progress>>>,
}

/// A client's progress: the last `seq` written to it, and whether it left.
#[derive(Default)]
struct Progress {
    written: std::sync::atomic::AtomicU64,
    gone: std::sync::atomic::AtomicBool,
}

/// Serves a run's events on `.cascade/live.sock` while it lives.
pub struct Publisher {
    shared: Arc<Shared>,
    socket: PathBuf,
    pointer: Option<PathBuf>,
    accept: tokio::task::JoinHandle<()>,
}

impl Publisher {
    /// Listens on the repository's live socket (replacing a stale one).
    /// Must be called inside a tokio runtime. Errors: another live process
    /// holds the socket, or it cannot be created.
    pub fn start(cascade_dir: &Path, steering: Steering) -> std::io::Result<Publisher> {
        std::fs::create_dir_all(cascade_dir)?;
        let (socket, pointer) = place(cascade_dir);
        if socket.exists() {
            if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!(
                        "another cascade process serves '{}' (its live view stays with it)",
                        socket.display()
                    ),
                ));
            }
            // Left by a killed run: nobody answers.
            let _ = std::fs::remove_file(&socket);
        }
        // Bound under a temporary name, made private, then moved into
        // place: nobody else can connect in between.
        let tmp = socket.with_extension(format!("{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let listener = UnixListener::bind(&tmp)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&tmp, &socket)?;
        if let Some(p) = &pointer {
            let body = serde_json::json!({ "socket": socket, "pid": std::process::id() });
            cascade_fs::write_atomic(
                p,
                body.to_string().as_bytes(),
                cascade_fs::Durability::Renamed,
            )?;
        }
        let (live, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            cascade_dir: cascade_dir.to_path_buf(),
            started: Instant::now(),
            state: Mutex::new(State {
                run_id: None,
                next_seq: 1,
                events: Vec::new(),
                output: VecDeque::new(),
                journal: None,
                unjournaled: Vec::new(),
                journal_error: None,
            }),
            live,
            steering: steering.clone(),
            clients: Mutex::new(Vec::new()),
        });
        {
            let s = Arc::clone(&shared);
            steering.on_output(Arc::new(move |feature, story, attempt, line| {
                s.output(feature, story, attempt, line)
            }));
        }
        let accept = {
            let s = Arc::clone(&shared);
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(Arc::clone(&s), stream));
                }
            })
        };
        Ok(Publisher {
            shared,
            socket,
            pointer,
            accept,
        })
    }

    /// Waits (at most `max`) until every connected client has been sent
    /// everything published so far: the end of a run must reach the
    /// dashboard before the process exits.
    pub async fn drain(&self, max: std::time::Duration) {
        use std::sync::atomic::Ordering;
        let last = lock(&self.shared.state).next_seq.saturating_sub(1);
        let end = Instant::now() + max;
        while Instant::now() < end {
            let behind = lock(&self.shared.clients)
                .iter()
                .any(|c| !c.gone.load(Ordering::SeqCst) && c.written.load(Ordering::SeqCst) < last);
            if !behind {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `sink`, with every event also published and journaled.
    pub fn wrap(&self, sink: EventSink) -> EventSink {
        let s = Arc::clone(&self.shared);
        Arc::new(move |e: &Event| {
            let note = serde_json::to_string(e).ok().and_then(|t| s.event(t));
            sink(e);
            if let Some(message) = note {
                sink(&Event::Notice { message });
            }
        })
    }
}

impl Publisher {
    /// Publishes and journals one line of another event stream (a mega
    /// run's); returns a notice when the journal cannot be written (once).
    pub fn publish(&self, data: serde_json::Value) -> Option<String> {
        self.shared.event(data.to_string())
    }

    /// [`Publisher::publish`] of an event serialized already (JSON text).
    pub fn publish_text(&self, data: String) -> Option<String> {
        self.shared.event(data)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_file(&self.socket);
        if let Some(p) = &self.pointer {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The socket's path, and the pointer file naming it when it is not the
/// default one.
fn place(cascade_dir: &Path) -> (PathBuf, Option<PathBuf>) {
    let default = super::socket_path(cascade_dir);
    if super::fits(&default) {
        return (default, None);
    }
    let hash = blake_ish(cascade_dir.as_os_str().as_encoded_bytes());
    let socket = std::env::temp_dir().join(format!("cascade-live-{hash:016x}.sock"));
    (socket, Some(cascade_dir.join(super::POINTER)))
}

/// FNV-1a: a stable short name for a long directory path.
fn blake_ish(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

impl Shared {
    fn record(&self, st: &mut State, kind: &str, data: serde_json::Value) -> Record {
        let (seq, t_ms, ts) = self.stamp(st);
        Record {
            seq,
            t_ms,
            ts,
            kind: kind.to_string(),
            data,
        }
    }

    /// The next record's `seq`, `t_ms` and `ts`.
    fn stamp(&self, st: &mut State) -> (u64, u64, u64) {
        let seq = st.next_seq;
        st.next_seq += 1;
        (seq, self.started.elapsed().as_millis() as u64, unix_ms())
    }

    /// Publishes and journals an event (an engine event, or a mega run's
    /// line); returns a notice to show when the journal could not be
    /// written (once). The journal is the first run's of this process: a
    /// PRD run's `run_started`, or a mega run's `mega_started`.
    fn event(&self, data: String) -> Option<String> {
        let mut st = lock(&self.state);
        if st.run_id.is_none() {
            let (event, run_id) = event_head(&data);
            let run_id = match event.as_deref() {
                Some("run_started") => run_id,
                Some("mega_started") => Some(format!(
                    "{}{}-{}",
                    super::MEGA_RUN_PREFIX,
                    chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
                    std::process::id()
                )),
                _ => None,
            };
            if let Some(run_id) = run_id {
                self.open_journal(&mut st, &run_id);
            }
        }
        let (seq, t_ms, ts) = self.stamp(&mut st);
        let line = record_line(seq, t_ms, ts, "event", &data);
        let mut note = None;
        let before_start = st.run_id.is_none();
        let journaled = match st.journal.as_mut() {
            Some(j) => match j.append_line(&line) {
                Ok(()) => true,
                Err(err) => {
                    if st.journal_error.is_none() {
                        let m = format!("live view: cannot append to the event journal: {err}");
                        st.journal_error = Some(m.clone());
                        note = Some(m);
                    }
                    false
                }
            },
            // Early records are few and small (notices before the start).
            None if before_start => {
                st.unjournaled.push(Record {
                    seq,
                    t_ms,
                    ts,
                    kind: "event".into(),
                    data: serde_json::from_str(&data).unwrap_or_default(),
                });
                false
            }
            None => false,
        };
        let line: Arc<str> = line.into();
        if !journaled {
            st.events.push(Arc::clone(&line));
        }
        let _ = self.live.send((seq, line));
        note
    }

    /// Opens the run's journal; the records made before go in first and
    /// every record is renumbered to follow what the journal holds.
    fn open_journal(&self, st: &mut State, run_id: &str) {
        st.run_id = Some(run_id.to_string());
        let Some(path) = journal::path(&self.cascade_dir, run_id) else {
            return;
        };
        match journal::Writer::open(&path) {
            Ok(mut w) => {
                let offset = w.next_seq.saturating_sub(1);
                // The events made so far (all of them early, and all kept
                // for the replay) go into the journal, renumbered to follow
                // it; lines already sent keep their numbers. Only those the
                // journal does not take stay kept, renumbered too.
                let early = std::mem::take(&mut st.unjournaled);
                st.events = early
                    .into_iter()
                    .filter_map(|mut r| {
                        r.seq += offset;
                        w.append(&r)
                            .is_err()
                            .then(|| Arc::from(serde_json::to_string(&r).unwrap_or_default()))
                    })
                    .collect();
                st.next_seq += offset;
                st.journal = Some(w);
            }
            Err(e) => {
                st.journal_error = Some(format!(
                    "live view: cannot open the event journal '{}': {e}",
                    path.display()
                ));
            }
        }
    }

    fn output(&self, feature: Option<&str>, story: &str, attempt: u32, line: &[u8]) {
        let mut text = String::from_utf8_lossy(line).into_owned();
        if text.len() > LINE_MAX {
            let mut cut = LINE_MAX;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        let mut data = serde_json::json!({ "story": story, "attempt": attempt, "text": text });
        if let Some(f) = feature {
            data["feature"] = f.into();
        }
        let mut st = lock(&self.state);
        let r = self.record(&mut st, "agent_output", data);
        let line: Arc<str> = serde_json::to_string(&r).unwrap_or_default().into();
        st.output.push_back((r.seq, Arc::clone(&line)));
        while st.output.len() > OUTPUT_KEPT {
            st.output.pop_front();
        }
        let _ = self.live.send((r.seq, line));
    }

    /// The replay for a new client, in `seq` order, and its live feed
    /// (subscribed under the same lock: nothing is missed or sent twice).
    /// The replay is what the journal does not hold: the events kept (see
    /// [`State::events`]) and the latest agent output. Every event the
    /// journal holds was appended before the feed was subscribed, so the
    /// client finds it there.
    #[allow(clippy::type_complexity)]
    fn replay(
        &self,
    ) -> (
        Hello,
        Vec<(u64, Arc<str>)>,
        broadcast::Receiver<(u64, Arc<str>)>,
    ) {
        let st = lock(&self.state);
        let rx = self.live.subscribe();
        let mut lines: Vec<(u64, Arc<str>)> = st
            .events
            .iter()
            .map(|l| (seq_of(l), Arc::clone(l)))
            .chain(st.output.iter().cloned())
            .collect();
        lines.sort_by_key(|(s, _)| *s);
        let hello = Hello {
            hello: "cascade-live/1".into(),
            pid: std::process::id(),
            run_id: st.run_id.clone(),
            paused: self.steering.is_paused(),
        };
        (hello, lines, rx)
    }
}

fn seq_of(line: &str) -> u64 {
    serde_json::from_str::<Record>(line).map_or(0, |r| r.seq)
}

/// One client: hello, replay, then live records and replies; its requests
/// go to the engine.
async fn serve(shared: Arc<Shared>, stream: UnixStream) {
    let progress = Arc::new(Progress::default());
    lock(&shared.clients).push(Arc::clone(&progress));
    serve_client(&shared, stream, &progress).await;
    progress
        .gone
        .store(true, std::sync::atomic::Ordering::SeqCst);
    lock(&shared.clients).retain(|c| !Arc::ptr_eq(c, &progress));
}

async fn serve_client(shared: &Arc<Shared>, stream: UnixStream, progress: &Progress) {
    use std::sync::atomic::Ordering;
    let (read, mut write) = stream.into_split();
    let (hello, replay, mut rx) = shared.replay();
    let (reply_tx, mut reply_rx) = tokio::sync::mpsc::unbounded_channel::<Reply>();
    let reader = {
        let shared = Arc::clone(shared);
        tokio::spawn(async move {
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let reply = match serde_json::from_str::<Request>(&line) {
                    Ok(req) => answer(&shared.steering, req).await,
                    Err(e) => Reply {
                        reply: 0,
                        ok: false,
                        message: format!("not a request: {e}"),
                    },
                };
                if reply_tx.send(reply).is_err() {
                    break;
                }
            }
        })
    };
    let hello = serde_json::to_string(&Line::Hello(hello)).unwrap_or_default();
    if send_line(&mut write, hello).await.is_err() {
        reader.abort();
        return;
    }
    for (seq, line) in replay {
        if send_line(&mut write, line.to_string()).await.is_err() {
            reader.abort();
            return;
        }
        progress.written.fetch_max(seq, Ordering::SeqCst);
    }
    loop {
        let (seq, text) = tokio::select! {
            r = rx.recv() => match r {
                Ok((seq, line)) => (seq, line.to_string()),
                // A client too slow to keep up loses lines, not the run.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            },
            r = reply_rx.recv() => match r {
                Some(reply) => (0, serde_json::to_string(&reply).unwrap_or_default()),
                None => break,
            },
        };
        if send_line(&mut write, text).await.is_err() {
            break;
        }
        progress.written.fetch_max(seq, Ordering::SeqCst);
    }
    reader.abort();
}

async fn send_line(w: &mut tokio::net::unix::OwnedWriteHalf, text: String) -> std::io::Result<()> {
    let mut bytes = text.into_bytes();
    bytes.push(b'\n');
    w.write_all(&bytes).await
}

async fn answer(steering: &Steering, req: Request) -> Reply {
    let story = || {
        req.story
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("'{}' needs a story", req.action))
    };
    let action = match req.action.as_str() {
        "pause" => Ok(Action::Pause),
        "resume" => Ok(Action::Resume),
        "cancel" => story().map(Action::Cancel),
        "retry" => story().map(Action::Retry),
        other => Err(format!(
            "unknown action '{other}' (pause, resume, cancel, retry)"
        )),
    };
    let by: String = req
        .by
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(16)
        .collect();
    let outcome = match action {
        Ok(a) => {
            let feature = req.feature.as_deref().filter(|f| !f.is_empty());
            steering
                .request(a, feature, if by.is_empty() { "?" } else { &by })
                .await
                .map_err(|refused| refused.to_string())
        }
        Err(e) => Err(e),
    };
    match outcome {
        Ok(message) => Reply {
            reply: req.id,
            ok: true,
            message,
        },
        Err(message) => Reply {
            reply: req.id,
            ok: false,
            message,
        },
    }
}
