//! `cascade ui` and the live channel: the access token and the CSRF
//! guard, loopback-only by default, the event stream of a running
//! scripted-agent run (replay, then live), pause/resume/cancel/retry sent
//! through the dashboard reaching the engine (as events and in the state),
//! the same for a mega run's features (the story named by feature), a
//! finished run shown from disk (and a finished mega run resumed by a
//! retry), and a planning question answered through the API exactly as
//! `cascade plan answer` does.
//!
//! The HTTP client is a few lines over `TcpStream` on 127.0.0.1: the tests
//! must send requests a browser library would not (no token, a foreign
//! Origin) and read the event stream as it arrives.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{git, init_repo, script, write_json};

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("cascade")
}

/// A `cascade` child killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `cascade ui`.
pub(crate) struct Ui {
    _proc: Proc,
    port: u16,
    token: String,
    url: String,
}

impl Ui {
    pub(crate) fn start(dir: &Path, agents: Option<&Path>) -> Ui {
        let mut cmd = Command::new(bin());
        cmd.current_dir(dir)
            .env("NO_COLOR", "1")
            .env("HOME", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(a) = agents {
            cmd.arg("--agents").arg(a);
        }
        cmd.args(["ui", "--port", "0"]);
        let mut child = cmd.spawn().expect("cascade ui starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("reads the URL");
        let url = line.trim().to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        let rest = &url["http://127.0.0.1:".len()..];
        let port: u16 = rest.split('/').next().unwrap().parse().expect("port");
        let token = url.split("token=").nth(1).expect("token").to_string();
        Ui {
            _proc: Proc(child),
            port,
            token,
            url,
        }
    }

    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn get(&self, path: &str) -> (u16, Value) {
        let (code, body) = http(
            self.port,
            "GET",
            path,
            &[("X-Cascade-Token", &self.token)],
            None,
        );
        (
            code,
            serde_json::from_str(&body).unwrap_or(Value::String(body)),
        )
    }

    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let origin = self.origin();
        let (code, text) = http(
            self.port,
            "POST",
            path,
            &[("X-Cascade-Token", &self.token), ("Origin", &origin)],
            Some(&body.to_string()),
        );
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

/// One HTTP/1.1 request on 127.0.0.1; status and body.
fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, String) {
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if method == "POST" {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let text = send(port, &req);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (
        code,
        if chunked {
            dechunk(rest)
        } else {
            rest.to_string()
        },
    )
}

/// Sends a whole request as written to 127.0.0.1:`port`; the whole answer.
fn send(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(request.as_bytes()).expect("sends");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("reads");
    String::from_utf8_lossy(&raw).into_owned()
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// One server-sent event.
#[derive(Debug, Clone)]
struct Sse {
    id: Option<u64>,
    event: Option<String>,
    data: Value,
}

/// An open `/api/events` stream: a thread reads the socket; the test
/// takes the bytes apart (HTTP chunked framing, then SSE messages).
struct Events {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    raw: Vec<u8>,
    buf: String,
    /// What came so far (for a failure's message).
    seen: Vec<String>,
    /// Every message so far, in order.
    all: Vec<Sse>,
}

impl Events {
    fn open(ui: &Ui, last_event_id: Option<u64>) -> Events {
        let mut s = TcpStream::connect(("127.0.0.1", ui.port)).expect("connects");
        let extra = last_event_id
            .map(|i| format!("Last-Event-ID: {i}\r\n"))
            .unwrap_or_default();
        let req = format!(
            "GET /api/events?token={} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n{extra}\r\n",
            ui.token, ui.port
        );
        s.write_all(req.as_bytes()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut b = [0u8; 16 * 1024];
            while let Ok(n) = s.read(&mut b) {
                if n == 0 || tx.send(b[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        let mut ev = Events {
            rx,
            raw: Vec::new(),
            buf: String::new(),
            seen: Vec::new(),
            all: Vec::new(),
        };
        // Status line and headers.
        let end = Instant::now() + Duration::from_secs(30);
        let head = loop {
            if let Some(i) = ev.raw.windows(4).position(|w| w == b"\r\n\r\n") {
                let head: Vec<u8> = ev.raw.drain(..i + 4).collect();
                break String::from_utf8_lossy(&head).into_owned();
            }
            assert!(Instant::now() < end, "no response headers");
            if let Ok(b) = ev.rx.recv_timeout(Duration::from_millis(200)) {
                ev.raw.extend(b);
            }
        };
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        ev
    }

    /// Moves whole chunks from `raw` to the text buffer.
    fn dechunk(&mut self) {
        loop {
            let Some(i) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let n = usize::from_str_radix(String::from_utf8_lossy(&self.raw[..i]).trim(), 16)
                .unwrap_or(0);
            if self.raw.len() < i + 2 + n + 2 {
                return;
            }
            let chunk: Vec<u8> = self
                .raw
                .drain(..i + 2 + n + 2)
                .skip(i + 2)
                .take(n)
                .collect();
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The next event, waiting at most `wait`.
    fn next(&mut self, wait: Duration) -> Option<Sse> {
        let end = Instant::now() + wait;
        loop {
            self.dechunk();
            if let Some(i) = self.buf.find("\n\n") {
                let msg: String = self.buf.drain(..i + 2).collect();
                let mut e = Sse {
                    id: None,
                    event: None,
                    data: Value::Null,
                };
                let mut has_data = false;
                for l in msg.lines() {
                    if let Some(v) = l.strip_prefix("id: ") {
                        e.id = v.parse().ok();
                    } else if let Some(v) = l.strip_prefix("event: ") {
                        e.event = Some(v.to_string());
                    } else if let Some(v) = l.strip_prefix("data: ") {
                        e.data = serde_json::from_str(v).expect("data is JSON");
                        has_data = true;
                    }
                }
                if has_data {
                    self.seen.push(format!(
                        "{:?} {} {} {} {}",
                        e.id,
                        e.event.as_deref().unwrap_or(""),
                        e.data["event"].as_str().unwrap_or(""),
                        e.data["feature"].as_str().unwrap_or(""),
                        e.data["story"].as_str().unwrap_or("")
                    ));
                    self.all.push(e.clone());
                    return Some(e);
                }
                continue;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.rx.recv_timeout(left) {
                Ok(b) => self.raw.extend(b),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return None,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// The first message so far that matches `want`, else the next one
    /// that does (panics after `wait`): for events whose order among
    /// themselves is not fixed.
    fn saw(&mut self, wait: Duration, what: &str, want: impl Fn(&Sse) -> bool) -> Sse {
        match self.all.iter().find(|e| want(e)) {
            Some(e) => e.clone(),
            None => self.until(wait, what, want),
        }
    }

    /// Reads until an event matches `want` (panics after `wait`).
    fn until(&mut self, wait: Duration, what: &str, want: impl Fn(&Sse) -> bool) -> Sse {
        let end = Instant::now() + wait;
        while Instant::now() < end {
            if let Some(e) = self.next(Duration::from_millis(500)) {
                if want(&e) {
                    return e;
                }
            }
        }
        panic!(
            "no {what} on the event stream within {wait:?}; it sent:\n{}",
            self.seen.join("\n")
        );
    }
}

fn is(e: &Sse, event: &str, story: &str) -> bool {
    e.event.is_none() && e.data["event"] == event && (story.is_empty() || e.data["story"] == story)
}

/// POSTs `path` and checks that it is refused with `code` and an error
/// that says `says`.
fn refused(ui: &Ui, path: &str, code: u16, says: &str) {
    let (got, body) = ui.post(path, json!({}));
    assert_eq!(got, code, "{path}: {body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains(says), "{path}: {body}");
}

/// Polls `f` until it holds (the state file is written asynchronously).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what} did not happen within 60s");
}

#[test]
fn every_request_needs_the_token_and_actions_need_the_header_and_same_origin() {
    let repo = init_repo();
    let ui = Ui::start(repo.path(), None);
    let p = ui.port;
    assert_eq!(http(p, "GET", "/api/run", &[], None).0, 401);
    assert_eq!(http(p, "GET", "/", &[], None).0, 401);
    assert_eq!(http(p, "GET", "/api/events", &[], None).0, 401);
    assert_eq!(
        http(
            p,
            "GET",
            "/api/run?token=0123456789abcdef0123456789abcdef",
            &[],
            None
        )
        .0,
        401
    );
    assert_eq!(
        http(p, "GET", "/api/run", &[("X-Cascade-Token", "nope")], None).0,
        401
    );
    assert_eq!(
        http(
            p,
            "GET",
            "/api/run",
            &[("Cookie", "cascade_token=nope")],
            None
        )
        .0,
        401
    );
    // The printed URL works and sets the cookie the page then uses.
    let path = &ui.url[ui.origin().len()..];
    let mut s = TcpStream::connect(("127.0.0.1", p)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut head = String::new();
    s.read_to_string(&mut head).unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains(&format!(
            "cascade_token={}; HttpOnly; SameSite=Strict",
            ui.token
        )),
        "{head}"
    );
    let cookie = format!("cascade_token={}", ui.token);
    assert_eq!(
        http(p, "GET", "/api/run", &[("Cookie", &cookie)], None).0,
        200
    );
    let (code, run) = ui.get("/api/run");
    assert_eq!(code, 200);
    assert_eq!(run["run_id"], Value::Null);
    // Actions: the header is required (a cookie or query token is not
    // enough), and a foreign Origin is refused.
    let q = format!("/api/actions/pause?token={}", ui.token);
    assert_eq!(http(p, "POST", &q, &[], Some("{}")).0, 403);
    assert_eq!(
        http(
            p,
            "POST",
            "/api/actions/pause",
            &[("Cookie", &cookie)],
            Some("{}")
        )
        .0,
        403
    );
    let (code, _) = http(
        p,
        "POST",
        "/api/actions/pause",
        &[
            ("X-Cascade-Token", &ui.token),
            ("Origin", "http://evil.example"),
        ],
        Some("{}"),
    );
    assert_eq!(code, 403);
    // Past the guard: no live run to pause.
    let (code, body) = ui.post("/api/actions/pause", json!({}));
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("no run is live"),
        "{body}"
    );
    // Other methods are not accepted.
    assert_eq!(
        http(
            p,
            "DELETE",
            "/api/run",
            &[("X-Cascade-Token", &ui.token)],
            None
        )
        .0,
        405
    );
    let (code, body) = ui.get("/api/stories/nope");
    assert_eq!(code, 404, "{body}");
}

/// The listening sockets of this machine on `port` (Linux /proc), as
/// hexadecimal local addresses.
pub(crate) fn listeners(port: u16) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(f).ok()?;
        for l in text.lines().skip(1) {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let (Some(local), Some(st)) = (cols.get(1), cols.get(3)) else {
                continue;
            };
            let (addr, p) = local.split_once(':').unwrap_or(("", ""));
            if *st == "0A" && u16::from_str_radix(p, 16).ok() == Some(port) {
                out.push(addr.to_string());
            }
        }
    }
    Some(out)
}

#[test]
fn listens_on_loopback_only_by_default() {
    let repo = init_repo();
    let ui = Ui::start(repo.path(), None);
    let Some(found) = listeners(ui.port) else {
        println!("skipped: no /proc/net/tcp on this system to list listening sockets");
        return;
    };
    // 127.0.0.1 in /proc's little-endian hex, and nothing else.
    assert_eq!(
        found,
        vec!["0100007F".to_string()],
        "listening on {found:?}"
    );
}

/// The agent: the first attempt of `story-a` hangs (until cancelled);
/// everything else writes a file and succeeds. Pid files are written whole
/// (renamed into place): the test acts the moment one appears.
const AGENT: &str = r#"id="$CASCADE_STORY_ID"
if [ "$id" = story-a ] && [ "$CASCADE_ATTEMPT" = 1 ]; then
  echo "story-a is thinking"
  echo $$ > "$T/hang.tmp" && mv "$T/hang.tmp" "$T/hang.pid"
  exec sleep 120
fi
echo "working on $id"
printf '%s\n' "$id" > "$id.txt""#;

fn story(id: &str, deps: &[&str]) -> Value {
    json!({"id": id, "title": format!("Title {id}"), "description": format!("Implement {id}"),
        "priority": "medium", "dependencies": deps, "status": "pending",
        "acceptance_criteria": ["it works"]})
}

#[test]
fn steers_a_live_run_and_shows_it_after_it_ended() {
    let repo = init_repo();
    let tools = tempfile::tempdir().unwrap();
    let t = tools.path();
    let agent = script(
        &t.join("agent.sh"),
        &format!("T='{}'\n{AGENT}", t.display()),
    );
    write_json(
        &t.join("agents.json"),
        &json!({"default_agent": "a", "agents": {"a": {"type": "cli", "command": agent, "args": [], "timeout": 300}}}),
    );
    write_json(
        &repo.path().join("prd.json"),
        &json!({"metadata": {"version": "1.0"}, "goal": "steer", "objectives": [],
            "stories": [story("story-a", &[]), story("story-b", &["story-a"]), story("story-c", &[])],
            "quality_gates": {"enabled": false, "gates": []}}),
    );
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "plan"]);
    let ui = Ui::start(repo.path(), Some(&t.join("agents.json")));
    // story-a first (the longer chain), one at a time, no retries of its own.
    let run = Proc(
        crate::common::bare_cascade()
            .current_dir(repo.path())
            .env("HOME", repo.path())
            .args([
                "approve",
                "--auto-run",
                "--json",
                "--parallel",
                "1",
                "--schedule",
                "eager",
            ])
            .args(["--max-retries", "0", "--retry-delay", "0", "--agents"])
            .arg(t.join("agents.json"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("approve starts"),
    );
    eventually("story-a's agent started", || t.join("hang.pid").exists());
    let socket = repo.path().join(".cascade/live.sock");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket)
        .expect("live socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");

    // Replay: what happened before we connected, then live events.
    let mut ev = Events::open(&ui, None);
    // The agent's line may come before or after story_started (the
    // engine announces the start once the agent runs).
    let (mut started, mut output) = (None, false);
    let end = Instant::now() + Duration::from_secs(30);
    while (started.is_none() || !output) && Instant::now() < end {
        let Some(e) = ev.next(Duration::from_millis(500)) else {
            continue;
        };
        if is(&e, "story_started", "story-a") {
            started = Some(e);
        } else if e.event.as_deref() == Some("agent_output")
            && e.data["text"] == "story-a is thinking"
        {
            output = true;
        }
    }
    let started =
        started.unwrap_or_else(|| panic!("no story_started; sent:\n{}", ev.seen.join("\n")));
    assert!(
        output,
        "no agent output line; sent:\n{}",
        ev.seen.join("\n")
    );
    assert!(
        started.id.is_some() && started.data["t_ms"].is_u64(),
        "{started:?}"
    );
    eventually("the dashboard follows the live run", || {
        ui.get("/api/run").1["live"] == true
    });

    // Pause: no new story starts; cancel story-a: its agent is stopped.
    let (code, body) = ui.post("/api/actions/pause", json!({}));
    assert_eq!(code, 200, "{body}");
    let c = ev.until(Duration::from_secs(30), "control pause", |e| {
        is(e, "control", "")
    });
    assert_eq!(
        (
            c.data["action"].clone(),
            c.data["by"].clone(),
            c.data["ok"].clone()
        ),
        (json!("pause"), json!("ui"), json!(true))
    );
    assert_eq!(ui.post("/api/actions/pause", json!({})).0, 409);
    let (code, body) = ui.post("/api/stories/story-a/cancel", json!({}));
    assert_eq!(code, 200, "{body}");
    let failed = ev.until(Duration::from_secs(30), "story-a failed", |e| {
        is(e, "story_failed", "story-a")
    });
    assert_eq!(failed.data["error_type"], "cancelled", "{failed:?}");
    ev.until(Duration::from_secs(30), "story-b blocked", |e| {
        is(e, "story_blocked", "story-b")
    });
    let pid: i32 = std::fs::read_to_string(t.join("hang.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually(
        "the hanging agent is gone",
        || unsafe { libc::kill(pid, 0) } != 0,
    );
    // Paused: story-c waits and the run stays alive.
    let (_, snap) = ui.get("/api/run");
    assert_eq!(snap["paused"], true, "{snap}");
    let state_of = |snap: &Value, id: &str| {
        snap["stories"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()["state"]
            .clone()
    };
    assert_eq!(state_of(&snap, "story-a"), "cancelled", "{snap}");
    assert_eq!(state_of(&snap, "story-b"), "blocked", "{snap}");
    assert_eq!(state_of(&snap, "story-c"), "pending", "{snap}");
    // Refused requests say why, and are events too.
    refused(
        &ui,
        "/api/stories/story-c/retry",
        409,
        "only a failed story",
    );

    // Retry story-a, then resume: everything is merged.
    let (code, body) = ui.post("/api/stories/story-a/retry", json!({}));
    assert_eq!(code, 200, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("story-b"),
        "{body}"
    );
    let (code, body) = ui.post("/api/actions/resume", json!({}));
    assert_eq!(code, 200, "{body}");
    let fin = ev.until(Duration::from_secs(120), "run_finished", |e| {
        is(e, "run_finished", "")
    });
    assert_eq!(fin.data["status"], "completed", "{fin:?}");
    let mut run = run;
    eventually("approve exits", || matches!(run.0.try_wait(), Ok(Some(_))));
    assert_eq!(run.0.try_wait().unwrap().unwrap().code(), Some(0));
    let state: Value = crate::common::run_state(repo.path());
    let a = state["stories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "story-a")
        .unwrap()
        .clone();
    assert_eq!(a["status"], "complete", "{a}");
    assert_eq!(a["attempts"].as_array().unwrap().len(), 2, "{a}");
    assert_eq!(a["attempts"][0]["error_type"], "cancelled", "{a}");

    // The run is over: the socket is gone, the journal keeps it all, and a
    // new dashboard shows the finished run from disk.
    eventually("the live socket is removed", || !socket.exists());
    drop(ev);
    drop(ui);
    let ui = Ui::start(repo.path(), Some(&t.join("agents.json")));
    let (code, snap) = ui.get("/api/run");
    assert_eq!(code, 200);
    assert_eq!(snap["live"], false, "{snap}");
    assert_eq!(snap["status"], "completed", "{snap}");
    assert_eq!(snap["totals"]["merged"], 3, "{snap}");
    assert_eq!(
        snap["batches"],
        json!([["story-a", "story-c"], ["story-b"]]),
        "{snap}"
    );
    assert_eq!(snap["critical_path"][1], "story-b", "{snap}");
    assert_eq!(snap["attempts"].as_array().unwrap().len(), 4, "{snap}");
    let (_, detail) = ui.get("/api/stories/story-a");
    assert_eq!(detail["merge"]["outcome"], "merged", "{detail}");
    // Each attempt says what confined it, as the run state recorded it.
    let confinement = cascade_process::sandbox::describe();
    for a in detail["attempts"].as_array().unwrap() {
        assert_eq!(a["confinement"], confinement.as_str(), "{detail}");
    }
    assert!(
        detail["attempts"][1]["retry_reason"]
            .as_str()
            .unwrap()
            .starts_with("cancelled"),
        "{detail}"
    );
    assert!(
        detail["attempts"][0]["prompt"]
            .as_str()
            .unwrap()
            .contains("story-a"),
        "{detail}"
    );
    assert!(
        detail["diff"].as_str().unwrap().contains("+story-a"),
        "{detail}"
    );
    let mut ev = Events::open(&ui, None);
    let mut actions = Vec::new();
    while let Some(e) = ev.next(Duration::from_secs(2)) {
        if is(&e, "control", "") {
            actions.push(format!(
                "{} {}",
                e.data["action"].as_str().unwrap(),
                e.data["ok"]
            ));
        }
        if is(&e, "run_finished", "") {
            break;
        }
    }
    assert_eq!(
        actions,
        [
            "pause true",
            "pause false",
            "cancel true",
            "retry false",
            "retry true",
            "resume true"
        ]
    );
    // Last-Event-ID: only what came after.
    let last = snap["last_event_id"].as_u64().unwrap();
    assert!(last > 10);
    let mut ev = Events::open(&ui, Some(last - 1));
    let e = ev.until(Duration::from_secs(5), "the last event", |e| e.id.is_some());
    assert_eq!(e.id, Some(last));
}

#[test]
fn a_stale_socket_does_not_stop_the_next_run() {
    let repo = init_repo();
    let tools = tempfile::tempdir().unwrap();
    let t = tools.path();
    let agent = script(
        &t.join("agent.sh"),
        "printf '%s\\n' \"$CASCADE_STORY_ID\" > \"$CASCADE_STORY_ID.txt\"",
    );
    write_json(
        &t.join("agents.json"),
        &json!({"default_agent": "a", "agents": {"a": {"type": "cli", "command": agent, "args": [], "timeout": 60}}}),
    );
    write_json(
        &repo.path().join("prd.json"),
        &json!({"metadata": {}, "goal": "g", "objectives": [], "stories": [story("story-a", &[])],
            "quality_gates": {"enabled": false, "gates": []}}),
    );
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "plan"]);
    // What a kill -9 leaves: a socket file nobody listens on.
    std::fs::create_dir_all(repo.path().join(".cascade")).unwrap();
    let stale =
        std::os::unix::net::UnixListener::bind(repo.path().join(".cascade/live.sock")).unwrap();
    drop(stale);
    let out = Command::new(bin())
        .current_dir(repo.path())
        .env("HOME", repo.path())
        .args(["approve", "--auto-run", "--json", "--agents"])
        .arg(t.join("agents.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("no live view"));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("no live view"));
    assert!(!repo.path().join(".cascade/live.sock").exists());
    let runs: Vec<_> = std::fs::read_dir(repo.path().join(".cascade/runs"))
        .unwrap()
        .collect();
    assert_eq!(runs.len(), 1);
}

/// The agent of the mega run: knows its feature from its branch
/// (`cascade/<feature>.<story>`). `s-hang`'s first attempt waits for
/// `<feature>.go` (or to be killed), `s-fail`'s first attempt fails; every
/// other attempt writes `<feature>-<story>.txt`.
pub(crate) const MEGA_AGENT: &str = r#"b=$(git rev-parse --abbrev-ref HEAD); f=${b#cascade/}; f=${f%%.*}
id="$CASCADE_STORY_ID"
echo "working on $id of $f"
if [ "$id" = s-hang ] && [ "$CASCADE_ATTEMPT" = 1 ]; then
  echo $$ > "$T/$f.hang.tmp" && mv "$T/$f.hang.tmp" "$T/$f.hang.pid"
  i=0
  while [ ! -f "$T/$f.go" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
fi
if [ "$id" = s-fail ] && [ "$CASCADE_ATTEMPT" = 1 ]; then
  echo "$id of $f fails at first" >&2
  exit 3
fi
printf '%s %s\n' "$f" "$id" > "$f-$id.txt""#;

/// `event` of `story` in `feature` (a plain data message).
fn of(e: &Sse, event: &str, feature: &str, story: &str) -> bool {
    is(e, event, story) && e.data["feature"] == feature
}

/// Waits until `event` came for each `(feature, story)`, in any order.
fn saw_each(ev: &mut Events, event: &str, which: &[(&str, &str)]) {
    for (f, story) in which {
        ev.saw(
            Duration::from_secs(60),
            &format!("{event} of {story} in {f}"),
            |e| of(e, event, f, story),
        );
    }
}

/// Polls `get` until it gives `want` (state files are written a moment
/// after the events that change them).
fn eventually_is(what: &str, get: impl Fn() -> Value, want: Value) {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let got = get();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < end,
            "{what}: {got} is not {want} within 60s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The mega view's story `story` of `feature` (from `/api/mega`).
fn mega_story(ui: &Ui, feature: &str, story: &str) -> Value {
    let (code, mega) = ui.get("/api/mega");
    assert_eq!(code, 200, "{mega}");
    mega["features"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["name"] == feature))
        .and_then(|f| f["stories"].as_array())
        .and_then(|ss| ss.iter().find(|s| s["id"] == story))
        .cloned()
        .unwrap_or_else(|| panic!("no {story} of {feature} in {mega}"))
}

/// A story of feature `feature` as its engine's run state has it.
fn feature_story(repo: &Path, feature: &str, story: &str) -> Value {
    let state =
        crate::common::run_state_in(&repo.join(format!(".cascade/mega/features/{feature}")));
    state["stories"]
        .as_array()
        .and_then(|ss| ss.iter().find(|s| s["id"] == story))
        .cloned()
        .unwrap_or_else(|| panic!("no {story} in {state}"))
}

fn pid_in(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid")
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// How the mega tests run it: every story of both features at once,
/// no retries of its own.
pub(crate) const MEGA_APPROVE: &[&str] = &[
    "mega",
    "approve",
    "--auto-run",
    "--json",
    "--parallel",
    "8",
    "--schedule",
    "eager",
    "--max-retries",
    "0",
    "--retry-delay",
    "0",
];

/// A repository with a mega-plan of two features of one batch, `alpha` and
/// `beta`, with the same stories (`s-hang`, `s-fail`, and `s-next` after
/// `s-hang`) run by [`MEGA_AGENT`] from the tools directory `t`; returns it
/// with the agents file.
pub(crate) fn two_feature_mega(t: &Path) -> (tempfile::TempDir, PathBuf) {
    let repo = init_repo();
    let root = repo.path();
    let agent = script(
        &t.join("agent.sh"),
        &format!("T='{}'\n{MEGA_AGENT}", t.display()),
    );
    let agents = t.join("agents.json");
    write_json(
        &agents,
        &json!({"default_agent": "a", "agents": {"a": {"type": "cli", "command": agent, "args": [], "timeout": 300}}}),
    );
    let feature = |name: &str| {
        json!({"id": name, "name": name, "title": format!("Feature {name}"), "description": "d",
               "priority": "high", "dependencies": [], "status": "pending"})
    };
    write_json(
        &root.join("mega-plan.json"),
        &json!({"goal": "two features", "execution_mode": "auto", "target_branch": "main",
                "features": [feature("alpha"), feature("beta")]}),
    );
    for name in ["alpha", "beta"] {
        write_json(
            &root.join("features").join(name).join("prd.json"),
            &json!({"goal": name, "objectives": [],
                "stories": [story("s-hang", &[]), story("s-fail", &[]), story("s-next", &["s-hang"])],
                "quality_gates": {"enabled": false, "gates": []}}),
        );
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "plan"]);
    (repo, agents)
}

#[test]
fn steers_a_live_mega_run_by_feature_and_resumes_it_after_it_ended() {
    let tools = tempfile::tempdir().unwrap();
    let t = tools.path();
    let (repo, agents) = two_feature_mega(t);
    let root = repo.path();
    let ui = Ui::start(root, Some(&agents));
    let log = |name: &str| Stdio::from(std::fs::File::create(t.join(name)).expect("log file"));
    let mut run = Proc(
        crate::common::bare_cascade()
            .current_dir(root)
            .env("HOME", root)
            .arg("--agents")
            .arg(&agents)
            .args(MEGA_APPROVE)
            .stdin(Stdio::null())
            .stdout(log("mega.out"))
            .stderr(log("mega.err"))
            .spawn()
            .expect("mega approve starts"),
    );
    let said = |what: &str| {
        format!(
            "{what}\nmega approve said:\n{}\n{}",
            std::fs::read_to_string(t.join("mega.out")).unwrap_or_default(),
            std::fs::read_to_string(t.join("mega.err")).unwrap_or_default()
        )
    };

    // Phase 1: both features run; their s-hang holds, their s-fail failed.
    let end = Instant::now() + Duration::from_secs(60);
    while !(t.join("alpha.hang.pid").exists() && t.join("beta.hang.pid").exists()) {
        assert!(
            Instant::now() < end,
            "{}",
            said("both s-hang agents did not start within 60s")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut ev = Events::open(&ui, None);
    saw_each(
        &mut ev,
        "story_failed",
        &[("alpha", "s-fail"), ("beta", "s-fail")],
    );
    // Agent output names its feature too.
    ev.saw(Duration::from_secs(30), "alpha's s-hang output", |e| {
        e.event.as_deref() == Some("agent_output")
            && e.data["feature"] == "alpha"
            && e.data["story"] == "s-hang"
    });
    eventually("the mega view follows the live run", || {
        ui.get("/api/mega").1["live"] == true
    });
    let state_of = |f: &'static str, id: &'static str| {
        let ui = &ui;
        move || mega_story(ui, f, id)["state"].clone()
    };
    eventually_is(
        "alpha's s-hang",
        state_of("alpha", "s-hang"),
        json!("running"),
    );
    eventually_is("beta's s-fail", state_of("beta", "s-fail"), json!("failed"));
    assert_eq!(mega_story(&ui, "beta", "s-next")["state"], "pending");

    // Phase 2: pause the whole run.
    let (code, body) = ui.post("/api/actions/pause", json!({}));
    assert_eq!(code, 200, "{body}");
    eventually_is(
        "paused",
        || ui.get("/api/mega").1["paused"].clone(),
        json!(true),
    );
    refused(&ui, "/api/actions/pause", 409, "already paused");

    // Phase 3: retry alpha's failed s-fail (it waits: paused); beta's
    // running s-hang cannot be retried; a feature that is not there
    // refuses.
    let story =
        |f: &str, id: &str, action: &str| format!("/api/mega/features/{f}/stories/{id}/{action}");
    refused(
        &ui,
        &story("beta", "s-hang", "retry"),
        409,
        "s-hang is running: only a failed story",
    );
    let (code, body) = ui.post(&story("alpha", "s-fail", "retry"), json!({}));
    assert_eq!(code, 200, "{body}");
    eventually_is(
        "alpha's s-fail",
        state_of("alpha", "s-fail"),
        json!("pending"),
    );
    refused(
        &ui,
        &story("gamma", "s-hang", "cancel"),
        409,
        "feature 'gamma' runs no stories",
    );

    // Phase 4: cancel alpha's s-hang: its agent is stopped and it fails as
    // cancelled; beta's s-hang (the same id) runs on.
    let (code, body) = ui.post(&story("alpha", "s-hang", "cancel"), json!({}));
    assert_eq!(code, 200, "{body}");
    let failed = ev.saw(Duration::from_secs(60), "alpha's s-hang failed", |e| {
        of(e, "story_failed", "alpha", "s-hang")
    });
    assert_eq!(failed.data["error_type"], "cancelled", "{failed:?}");
    ev.saw(Duration::from_secs(30), "alpha's s-next blocked", |e| {
        of(e, "story_blocked", "alpha", "s-next")
    });
    eventually("alpha's hanging agent is gone", || {
        !alive(pid_in(&t.join("alpha.hang.pid")))
    });
    assert!(
        alive(pid_in(&t.join("beta.hang.pid"))),
        "beta's s-hang was touched"
    );
    eventually_is(
        "alpha's s-hang",
        state_of("alpha", "s-hang"),
        json!("cancelled"),
    );
    eventually_is(
        "alpha's s-next",
        state_of("alpha", "s-next"),
        json!("blocked"),
    );
    let cancelled = feature_story(root, "alpha", "s-hang");
    assert_eq!(cancelled["error_type"], "cancelled", "{cancelled}");
    assert_eq!(mega_story(&ui, "beta", "s-hang")["state"], "running");
    assert_eq!(feature_story(root, "beta", "s-hang")["status"], "running");

    // Phase 5: beta's s-hang finishes and merges (announced first), while
    // paused: neither beta's s-next nor alpha's requeued s-fail starts.
    std::fs::write(t.join("beta.go"), "").unwrap();
    let started = ev.until(Duration::from_secs(60), "beta's s-hang merging", |e| {
        of(e, "merge_started", "beta", "s-hang")
    });
    assert_eq!(started.data["branch"], "cascade/beta.s-hang", "{started:?}");
    assert_eq!(started.data["target_branch"], "cascade/beta", "{started:?}");
    ev.until(Duration::from_secs(60), "beta's s-hang merged", |e| {
        of(e, "story_merged", "beta", "s-hang")
    });
    ev.until(Duration::from_secs(60), "beta's first batch done", |e| {
        e.event.is_none() && e.data["event"] == "batch_finished" && e.data["feature"] == "beta"
    });
    // Each feature engine answers a request between two scheduling
    // decisions: the second of two requests is answered after the decision
    // that would have started the story, and finds it still waiting.
    for (f, id) in [("beta", "s-next"), ("alpha", "s-fail")] {
        for _ in 0..2 {
            refused(
                &ui,
                &story(f, id, "retry"),
                409,
                &format!("{id} is waiting"),
            );
        }
    }
    assert_eq!(mega_story(&ui, "beta", "s-next")["state"], "pending");
    assert_eq!(mega_story(&ui, "alpha", "s-fail")["state"], "pending");
    assert_eq!(feature_story(root, "alpha", "s-fail")["status"], "pending");

    // Phase 6: resume: both start and merge; the run ends (alpha's s-hang
    // cancelled, beta's s-fail failed): exit 1.
    let (code, body) = ui.post("/api/actions/resume", json!({}));
    assert_eq!(code, 200, "{body}");
    let fin = ev.until(Duration::from_secs(120), "mega_finished", |e| {
        is(e, "mega_finished", "")
    });
    ev.saw(Duration::ZERO, "alpha's s-fail again", |e| {
        of(e, "story_started", "alpha", "s-fail") && e.data["attempt"] == 2
    });
    saw_each(
        &mut ev,
        "story_merged",
        &[("beta", "s-next"), ("alpha", "s-fail")],
    );
    assert_eq!(fin.data["status"], "failed", "{fin:?}");
    eventually("mega approve exits", || {
        matches!(run.0.try_wait(), Ok(Some(_)))
    });
    let exit = run.0.try_wait().unwrap().unwrap().code();
    assert_eq!(exit, Some(1), "{}", said("exit code"));
    let a = feature_story(root, "alpha", "s-fail");
    assert_eq!(a["status"], "complete", "{a}");
    assert_eq!(a["attempts"].as_array().unwrap().len(), 2, "{a}");
    assert_eq!(feature_story(root, "alpha", "s-next")["status"], "blocked");
    assert_eq!(feature_story(root, "beta", "s-next")["status"], "complete");
    assert_eq!(feature_story(root, "beta", "s-fail")["status"], "failed");
    // Each feature keeps its own agent logs (the same story ids ran at once).
    for f in ["alpha", "beta"] {
        let log = root.join(format!(
            ".cascade/mega/features/{f}/logs/s-fail-implementation-1.log"
        ));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            text.contains(&format!("s-fail of {f} fails at first")),
            "{}: {text}",
            log.display()
        );
    }
    // Every request that reached the run is a control event, with the
    // feature it named.
    let controls: Vec<String> = ev
        .all
        .iter()
        .filter(|e| is(e, "control", ""))
        .map(|e| {
            format!(
                "{} {} {} {}",
                e.data["action"].as_str().unwrap_or(""),
                e.data["feature"].as_str().unwrap_or("-"),
                e.data["story"].as_str().unwrap_or("-"),
                e.data["ok"]
            )
        })
        .collect();
    assert_eq!(
        controls,
        [
            "pause - - true",
            "pause - - false",
            "retry beta s-hang false",
            "retry alpha s-fail true",
            "cancel gamma s-hang false",
            "cancel alpha s-hang true",
            "retry beta s-next false",
            "retry beta s-next false",
            "retry alpha s-fail false",
            "retry alpha s-fail false",
            "resume - - true",
        ],
        "{}",
        ev.seen.join("\n")
    );

    // Phase 7: the run has ended. A complete story is not retried; a
    // failed one resumes the whole mega run (`cascade mega resume --yes`),
    // which retries every failed story and lands both features.
    eventually("the mega view sees the run ended", || {
        ui.get("/api/mega").1["live"] == false
    });
    refused(
        &ui,
        &story("beta", "s-hang", "retry"),
        409,
        "s-hang of beta is complete",
    );
    refused(
        &ui,
        &story("no-such", "s-hang", "retry"),
        404,
        "no feature 'no-such'",
    );
    refused(&ui, &story("..", "s-hang", "retry"), 404, "no feature '..'");
    // 202 while it runs (its output in `log`), 200 when it ended within
    // the dashboard's short wait (its output in the answer).
    let (code, body) = ui.post(&story("beta", "s-fail", "retry"), json!({}));
    assert!(code == 202 || code == 200, "{code} {body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cascade mega resume --yes"),
        "{body}"
    );
    let resume_said = || match body["log"].as_str() {
        Some(log) => std::fs::read_to_string(log).unwrap_or_default(),
        None => body["output"].as_str().unwrap_or_default().to_string(),
    };
    let mega_status = || Some(crate::common::mega_state(root)["status"].clone());
    let end = Instant::now() + Duration::from_secs(120);
    while mega_status() != Some(json!("completed")) {
        assert!(
            Instant::now() < end,
            "the resumed mega run did not complete; it said:\n{}",
            resume_said()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eventually("the resumed run has let go", || {
        !root.join(".cascade/live.sock").exists()
    });
    for f in ["alpha", "beta"] {
        for id in ["s-hang", "s-fail", "s-next"] {
            assert!(
                root.join(format!("{f}-{id}.txt")).is_file(),
                "{f}-{id}.txt on main"
            );
        }
    }
    // The landed features' stories are still shown, with their titles.
    let landed = mega_story(&ui, "beta", "s-fail");
    assert_eq!(
        (landed["state"].clone(), landed["title"].clone()),
        (json!("complete"), json!("Title s-fail")),
        "{landed}"
    );
    assert_eq!(
        feature_story(root, "beta", "s-fail")["attempts"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// A planner that only gets as far as the questions (strategy, discovery).
const PLANNER: &str = r#"case "$CASCADE_PLAN_STEP" in
strategy)
  printf '{"task_analysis": {}, "strategy_decision": {"strategy": "HYBRID_AUTO", "confidence": 0.9, "reasoning": "small"}}' > "$CASCADE_OUTPUT" ;;
discovery)
  printf '{"questions": [{"id": "q-1", "type": "scope", "question": "Which providers?", "context": "c", "options": ["Google", "GitHub"]}, {"id": "q-2", "type": "technical", "question": "Where do tokens live?", "context": "c", "options": ["cookie", "header"]}]}' > "$CASCADE_OUTPUT" ;;
*) exit 9 ;;
esac
echo done"#;

/// `cascade plan "Add OAuth login"` in `repo` with [`PLANNER`] (agents.json
/// written to `tools`), paused at its questions; returns the agents file.
fn paused_plan(repo: &Path, tools: &Path) -> PathBuf {
    let planner = script(&tools.join("planner.sh"), PLANNER);
    let agents = tools.join("agents.json");
    write_json(
        &agents,
        &json!({"default_agent": "p", "agents": {"p": {"type": "cli", "command": planner, "args": [], "timeout": 60}},
            "phase_defaults": {"planning": {"default_agent": "p"}, "review": {"default_agent": "p"}}}),
    );
    let out = Command::new(bin())
        .current_dir(repo)
        .env("HOME", repo)
        .args(["plan", "Add OAuth login", "--agents"])
        .arg(&agents)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    agents
}

#[test]
fn answers_a_planning_question_as_the_cli_does() {
    let repo = init_repo();
    let tools = tempfile::tempdir().unwrap();
    let agents = paused_plan(repo.path(), tools.path());
    let ui = Ui::start(repo.path(), Some(&agents));
    let (code, list) = ui.get("/api/plans");
    assert_eq!(code, 200);
    let id = list["plans"][0]["id"]
        .as_str()
        .expect("a session")
        .to_string();
    assert_eq!(
        list["plans"][0]["waiting_for"],
        json!(["q-1", "q-2"]),
        "{list}"
    );
    let (code, s) = ui.get(&format!("/api/plans/{id}"));
    assert_eq!(code, 200);
    assert_eq!(s["questions"][0]["question"], "Which providers?", "{s}");
    // Unknown keys are refused with the CLI's words.
    let (code, body) = ui.post(
        &format!("/api/plans/{id}/answer"),
        json!({"key": "q-9", "value": "x"}),
    );
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("no question or decision 'q-9'"),
        "{body}"
    );
    let (code, body) = ui.post(
        &format!("/api/plans/{id}/answer"),
        json!({"key": "q-1", "value": "GitHub"}),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["exit_code"], 3, "{body}");
    let session: Value = serde_json::from_slice(
        &std::fs::read(
            repo.path()
                .join(".cascade/plans")
                .join(&id)
                .join("session.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(session["questions"][0]["answer"], "GitHub", "{session}");
    assert_eq!(session["current_question_index"], 1, "{session}");
    let (_, s) = ui.get(&format!("/api/plans/{id}"));
    assert_eq!(s["waiting_for"], json!(["q-2"]), "{s}");
    assert_eq!(ui.get("/api/plans/planning-nope").0, 404);
}

/// Only requests addressed to the dashboard itself are answered (a
/// DNS-rebinding page sends its own host name), and every answer carries
/// the CSP, X-Frame-Options and nosniff headers (issue 23).
#[test]
fn answers_only_requests_to_its_own_host_with_security_headers() {
    let repo = init_repo();
    let ui = Ui::start(repo.path(), None);
    let get = |host: &str| {
        send(
            ui.port,
            &format!(
                "GET /api/run HTTP/1.1\r\nHost: {host}\r\nX-Cascade-Token: {}\r\nConnection: close\r\n\r\n",
                ui.token
            ),
        )
    };
    let status = |answer: &str| answer.split_whitespace().nth(1).unwrap_or("").to_string();
    let port = ui.port;
    for refused in [
        format!("evil.example:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
        "127.0.0.1:1".to_string(),
        String::new(),
    ] {
        let answer = get(&refused);
        assert_eq!(status(&answer), "421", "Host {refused:?}: {answer}");
        assert!(answer.contains("is refused"), "{answer}");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let answer = get(&host);
        assert_eq!(status(&answer), "200", "Host {host:?}: {answer}");
        let head = answer
            .split("\r\n\r\n")
            .next()
            .unwrap()
            .to_ascii_lowercase();
        for header in [
            "content-security-policy: default-src 'none'; script-src 'self'",
            "frame-ancestors 'none'",
            "x-frame-options: deny",
            "x-content-type-options: nosniff",
        ] {
            assert!(head.contains(header), "missing {header:?} in {head}");
        }
    }
    // The page itself too, and a refused (401) answer.
    let page = send(
        port,
        &format!(
            "GET /?token={} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n",
            ui.token
        ),
    );
    assert_eq!(status(&page), "200");
    assert!(
        page.to_ascii_lowercase().contains("x-frame-options: deny"),
        "{page}"
    );
    let (code, _) = http(port, "GET", "/api/run", &[], None);
    assert_eq!(code, 401);
}

/// A plan answer that looks like a flag is stored as text (it is passed
/// after `--`); an answer over the size bound is refused, at the command
/// (409, what to do) and at the door (413) (issue 23).
#[test]
fn a_dashboard_answer_is_text_even_when_it_looks_like_a_flag_and_is_bounded() {
    let repo = init_repo();
    let tools = tempfile::tempdir().unwrap();
    let agents = paused_plan(repo.path(), tools.path());
    let ui = Ui::start(repo.path(), Some(&agents));
    let (_, list) = ui.get("/api/plans");
    let id = list["plans"][0]["id"]
        .as_str()
        .expect("a session")
        .to_string();
    let answer = format!("/api/plans/{id}/answer");
    let (code, body) = ui.post(
        &answer,
        json!({"key": "q-1", "value": "x".repeat(20 * 1024)}),
    );
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("more than the 16384"),
        "{body}"
    );
    let (code, body) = ui.post(
        &answer,
        json!({"key": "q-1", "value": "x".repeat(200 * 1024)}),
    );
    assert_eq!(code, 413, "{body}");
    let (code, body) = ui.post(&answer, json!({"key": "q-1", "value": "--help"}));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["exit_code"], 3, "{body}");
    let (_, s) = ui.get(&format!("/api/plans/{id}"));
    assert_eq!(s["questions"][0]["answer"], "--help", "{s}");
    assert_eq!(s["waiting_for"], json!(["q-2"]), "{s}");
}
