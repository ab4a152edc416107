//! A headless Chromium driven over WebDriver, for the dashboard's browser
//! tests: finds `chromium` and `chromedriver` (or says why the test skips),
//! starts chromedriver on a free 127.0.0.1 port in its own process group,
//! opens one session with a fresh profile, and kills the whole group when
//! dropped (also when a test panics).
//!
//! The WebDriver client is a few JSON calls over plain std networking, like
//! `mock_http`: chromedriver is the only peer, on loopback, and answers every
//! command with one small JSON body. A client crate would cost more than it
//! saves here: fantoccini or thirtyfour bring an async HTTP client with TLS
//! (tens of crates into a cold test build), and even hyper's client, already
//! in Cargo.lock for the server, would turn on features that make `cargo
//! test` rebuild the server stack and the binary apart from `cargo build`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// The key WebDriver uses for element references.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session; dropping it ends the session and kills chromedriver
/// with every process it started.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

/// A found element (its WebDriver reference).
#[derive(Clone, Debug)]
pub struct Element(String);

/// Where the browser and its driver are, or why they are not usable.
pub fn locate() -> Result<(PathBuf, PathBuf), String> {
    let find = |var: &str, defaults: &[&str]| -> Result<PathBuf, String> {
        if let Some(p) = std::env::var_os(var) {
            let p = PathBuf::from(p);
            return if p.exists() {
                Ok(p)
            } else {
                Err(format!("{var}={} does not exist", p.display()))
            };
        }
        defaults
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or_else(|| {
                format!(
                    "none of {} is installed (or set {var})",
                    defaults.join(", ")
                )
            })
    };
    let chromium = find(
        "CASCADE_TEST_CHROMIUM",
        &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
    )?;
    let driver = find("CASCADE_TEST_CHROMEDRIVER", &["/usr/bin/chromedriver"])?;
    Ok((chromium, driver))
}

/// A port nobody listens on right now (the OS picks it).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session, or says why not
    /// (the caller prints the reason and skips).
    pub fn start() -> Result<Browser, String> {
        let (chromium, driver_path) = locate()?;
        let port = free_port();
        let driver = Command::new(&driver_path)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: chromium and its helpers join it, and one
            // killpg ends them all.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", driver_path.display()))?;
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        browser.wait_ready()?;
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--disable-crash-reporter",
            "--disable-breakpad",
            "--window-size=1400,1000",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([format!(
            "--user-data-dir={}",
            browser._profile.path().display()
        )])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let v = browser
            .http("POST", "/session", Some(&caps))
            .map_err(|e| format!("chromedriver could not start chromium: {e}"))?;
        browser.session = v["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no sessionId in {v}"))?
            .to_string();
        Ok(browser)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(v) = self.http("GET", "/status", None) {
                if v["ready"] == true {
                    return Ok(());
                }
            }
            if let Ok(Some(status)) = self.driver.try_wait() {
                return Err(format!("chromedriver exited at start: {status}"));
            }
            if Instant::now() > deadline {
                return Err("chromedriver did not answer /status within 15 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One WebDriver command: `value` of the answer, or the error's message.
    fn http(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        conn.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        // chromedriver keeps the connection open: read the head, then as
        // many bytes as it announces.
        let mut raw = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        let (head, body_start) = loop {
            let n = read_some(&mut conn, &mut buf)?;
            if n == 0 {
                return Err(format!(
                    "connection closed: {}",
                    String::from_utf8_lossy(&raw)
                ));
            }
            raw.extend_from_slice(&buf[..n]);
            if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break (
                    String::from_utf8_lossy(&raw[..i]).to_ascii_lowercase(),
                    i + 4,
                );
            }
        };
        let length = head.lines().find_map(|l| {
            l.strip_prefix("content-length:")
                .and_then(|v| v.trim().parse::<usize>().ok())
        });
        let payload = match length {
            Some(len) => {
                while raw.len() < body_start + len {
                    let n = read_some(&mut conn, &mut buf)?;
                    if n == 0 {
                        break;
                    }
                    raw.extend_from_slice(&buf[..n]);
                }
                raw[body_start..(body_start + len).min(raw.len())].to_vec()
            }
            None => {
                conn.read_to_end(&mut raw).map_err(|e| e.to_string())?;
                if head.contains("transfer-encoding: chunked") {
                    dechunk(&raw[body_start..])
                } else {
                    raw[body_start..].to_vec()
                }
            }
        };
        let payload = String::from_utf8_lossy(&payload);
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let v: Value = serde_json::from_str(&payload)
            .map_err(|e| format!("HTTP {status}, not JSON ({e}): {payload}"))?;
        if status != 200 {
            return Err(format!(
                "{} {}: {}",
                status, v["value"]["error"], v["value"]["message"]
            ));
        }
        Ok(v["value"].clone())
    }

    fn cmd(&self, method: &str, rel: &str, body: Option<Value>) -> Result<Value, String> {
        let path = format!("/session/{}{rel}", self.session);
        self.http(method, &path, body.as_ref())
    }

    /// Opens `url` and waits for the page's load event.
    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })))
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub fn js(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Waits until `script` returns a truthy value; panics with `what`, the
    /// last value and the page's text when it does not within `secs`.
    pub fn wait_js(&self, what: &str, secs: u64, script: &str) -> Value {
        self.wait_js_or(what, secs, script, String::new)
    }

    /// [`Browser::wait_js`], with `context()` (what else the test knows,
    /// such as a background run's output) in the panic's message.
    pub fn wait_js_or(
        &self,
        what: &str,
        secs: u64,
        script: &str,
        context: impl Fn() -> String,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.js(script, json!([]));
            let truthy = !(v.is_null()
                || v == false
                || v == ""
                || v == 0
                || v.as_array().is_some_and(|a| a.is_empty()));
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                let text = self.js("return document.body.innerText", json!([]));
                panic!(
                    "waited {secs} s for {what}; last value {v}\npage text:\n{}\n{}",
                    text.as_str().unwrap_or_default(),
                    context()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The first element matching the CSS selector, if any.
    pub fn find(&self, css: &str) -> Option<Element> {
        self.try_find(css).ok()
    }

    fn try_find(&self, css: &str) -> Result<Element, String> {
        let v = self.cmd(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        )?;
        v[ELEMENT]
            .as_str()
            .map(|s| Element(s.to_string()))
            .ok_or_else(|| format!("no element reference in {v}"))
    }

    /// Like `find`, waiting up to `secs` for it to appear.
    pub fn wait_find(&self, css: &str, secs: u64) -> Element {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let err = match self.try_find(css) {
                Ok(e) => return e,
                Err(e) => e,
            };
            if Instant::now() > deadline {
                let text = self.js("return document.body.innerText", json!([]));
                panic!(
                    "no element {css} after {secs} s ({err}); page text:\n{}",
                    text.as_str().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks the element `css` selects, finding it again when the page
    /// redrew it between the find and the click (a live page does).
    pub fn click_css(&self, css: &str, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let el = self.wait_find(css, secs);
            let err = match self.cmd("POST", &format!("/element/{}/click", el.0), Some(json!({}))) {
                Ok(_) => return,
                Err(e) => e,
            };
            if !err.contains("stale element") || Instant::now() > deadline {
                panic!("click {css}: {err}");
            }
        }
    }

    /// Replaces the text of an input with `text`.
    pub fn type_into(&self, el: &Element, text: &str) {
        self.cmd("POST", &format!("/element/{}/clear", el.0), Some(json!({})))
            .unwrap_or_else(|e| panic!("clear: {e}"));
        self.cmd(
            "POST",
            &format!("/element/{}/value", el.0),
            Some(json!({ "text": text })),
        )
        .unwrap_or_else(|e| panic!("type: {e}"));
    }

    /// Saves a PNG of the viewport to `path` (directories created).
    pub fn screenshot(&self, path: &Path) {
        let v = self
            .cmd("GET", "/screenshot", None)
            .unwrap_or_else(|e| panic!("screenshot: {e}"));
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("screenshot is base64");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            // Lets chromium close its profile; the kill below is the guarantee.
            let _ = self.http("DELETE", &format!("/session/{}", self.session), None);
        }
        let pgid = self.driver.id() as libc::pid_t;
        // SAFETY: killpg with a group id we created (process_group(0) made
        // chromedriver its leader); no memory is involved.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
        let _ = self.driver.wait();
    }
}

/// One `read`, again when a signal interrupted it (other tests of this
/// binary start and stop processes: SIGCHLD arrives at any time).
fn read_some(conn: &mut TcpStream, buf: &mut [u8]) -> Result<usize, String> {
    loop {
        match conn.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other.map_err(|e| e.to_string()),
        }
    }
}

/// Decodes a chunked HTTP body.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&rest[..eol]);
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        let tail = &rest[eol + 2..];
        if n == 0 || tail.len() < n {
            break;
        }
        out.extend_from_slice(&tail[..n]);
        rest = tail[n..].strip_prefix(b"\r\n").unwrap_or(&tail[n..]);
    }
    out
}
