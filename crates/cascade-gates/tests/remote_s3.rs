//! The remote cache against a real S3 API: `moto_server` (PyPI
//! `moto[server]`, installed by `.ci/run`) started on a free 127.0.0.1 port.
//! Skipped, saying why, when it is not installed. Also: an S3 endpoint that
//! accepts connections and never answers costs the request timeout, and the
//! gate still runs.
//!
//! Needs the `remote-cloud` feature (`.ci/run` runs it with that feature).
#![cfg(feature = "remote-cloud")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cascade_gates::{
    run_gates, CacheSource, GateCache, GateReport, GateSet, RemoteCache, RemoteConfig, RemoteMode,
    RemoteRequest, RemoteSettings, RunOptions,
};
use cascade_process::CancelToken;
use cascade_test_support::git;
use serde_json::json;

/// Kills the emulator when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `moto_server` and waits (bounded) until it accepts connections;
/// `None` (with the reason printed) when it is not installed.
fn start_moto() -> Option<(Server, u16)> {
    let port = free_port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            println!("skipped: moto_server is not installed ({e}); `pip install 'moto[server]'` to run this test");
            return None;
        }
    };
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some((server, port));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("skipped: moto_server did not start listening on 127.0.0.1:{port} within 30s");
    None
}

/// `PUT /<bucket>`: moto takes any credentials.
fn create_bucket(port: u16, bucket: &str) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "create bucket: {reply}");
}

fn repo(tmp: &Path, name: &str) -> PathBuf {
    let repo = tmp.join(name);
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("lib.txt"), "same\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    repo
}

fn remote(endpoint: &str, url: &str, mode: RemoteMode, timeout_ms: u64) -> RemoteCache {
    let env = |k: &str| -> Option<String> {
        match k {
            "CASCADE_CACHE_SECRET" => Some("s3-secret".into()),
            _ => None,
        }
    };
    let req = RemoteRequest {
        url: Some(url.into()),
        mode: Some(mode),
    };
    let cfg = RemoteConfig {
        timeout_ms: Some(timeout_ms),
        ..Default::default()
    };
    // The S3 builder reads its endpoint and credentials from the process
    // environment, as it would for a user.
    std::env::set_var("AWS_ENDPOINT", endpoint);
    std::env::set_var("AWS_ALLOW_HTTP", "true");
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    std::env::set_var("AWS_REGION", "us-east-1");
    let s = RemoteSettings::resolve_with(&req, Some(&cfg), env)
        .unwrap()
        .unwrap();
    RemoteCache::connect(s).unwrap()
}

fn run(repo: &Path, set: &GateSet, cache: &GateCache) -> GateReport {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let opts = RunOptions {
        workdir: repo.to_path_buf(),
        use_cache: true,
        ..RunOptions::default()
    };
    let r = rt.block_on(async {
        let r = run_gates(set, &opts, cache, |_| {}, &CancelToken::new()).await;
        cache.flush_remote(None).await;
        r
    });
    rt.shutdown_background();
    r
}

/// One test: the S3 builder's settings live in the process environment.
#[test]
fn s3_publish_hit_create_only_and_a_silent_endpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs.log");
    let cfg = json!({"gates": [{"name": "check", "type": "test", "command": "sh",
        "args": ["-c", format!("echo run >> '{}'", runs.display())], "toolchain": []}]});
    let set = GateSet::resolve(Some(&cfg), &tmp.path().join("none"), tmp.path()).unwrap();
    let count = || {
        std::fs::read_to_string(&runs)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let (a, b, c) = (
        repo(tmp.path(), "a"),
        repo(tmp.path(), "b"),
        repo(tmp.path(), "c"),
    );

    // 1. A silent endpoint (accepts, never answers): bounded, local-only.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        // Hold the accepted connections open without a word.
        let mut conns = Vec::new();
        for s in silent.incoming().take(8).flatten() {
            conns.push(s);
        }
        std::thread::sleep(Duration::from_secs(5));
    });
    let cache = GateCache::open(&c.join(".cascade")).with_remote(Some(remote(
        &silent_url,
        "s3://silent/prefix",
        RemoteMode::Read,
        400,
    )));
    let r = run(&c, &set, &cache);
    assert!(r.passed, "a silent remote never fails a gate");
    assert_eq!(r.gates[0].cache, CacheSource::Miss);
    assert_eq!(count(), 1);
    let note = cache.explain()[0].remote.clone().unwrap();
    assert_eq!(note.outcome, "timeout", "{note:?}");
    drop(held);

    // 2. The real S3 API.
    let Some((_server, port)) = start_moto() else {
        return;
    };
    create_bucket(port, "gates");
    let endpoint = format!("http://127.0.0.1:{port}");
    let url = "s3://gates/team/cache";
    let ca = GateCache::open(&a.join(".cascade")).with_remote(Some(remote(
        &endpoint,
        url,
        RemoteMode::ReadWrite,
        5000,
    )));
    let r = run(&a, &set, &ca);
    assert_eq!(r.gates[0].cache, CacheSource::Miss);
    assert_eq!(count(), 2);
    assert_eq!(ca.stats().uploads, 1, "published to S3");

    let cb = GateCache::open(&b.join(".cascade")).with_remote(Some(remote(
        &endpoint,
        url,
        RemoteMode::ReadWrite,
        5000,
    )));
    let r = run(&b, &set, &cb);
    assert_eq!(r.gates[0].cache, CacheSource::Remote, "{:?}", r.gates[0]);
    assert_eq!(count(), 2, "b did not run the gate");

    // Create-only: c publishes the same key again; the first entry stays.
    let cc = GateCache::open(&tmp.path().join("c2")).with_remote(Some(remote(
        &endpoint,
        url,
        RemoteMode::ReadWrite,
        5000,
    )));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt.block_on(async {
        let parts = cascade_gates::KeyParts {
            fingerprint: "f".repeat(64),
            gate: "x".into(),
            command: "sh".into(),
            args: vec![],
            working_dir: ".".into(),
            env: Default::default(),
            inputs: vec![],
            toolchain: String::new(),
        };
        let result = r.gates[0].clone();
        cc.store(&parts, &result);
        cc.flush_remote(None).await;
        cc.store(&parts, &result);
        cc.flush_remote(None).await.unwrap()
    });
    assert_eq!(
        (report.uploaded, report.already_present),
        (1, 1),
        "the second identical write is a no-op"
    );
}
