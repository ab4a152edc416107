//! End-to-end tests of the remote gate cache through the binary, on the
//! local-directory backend: CI publishes, a laptop hits; the URL from the
//! flag, the environment or gates.json; bad settings exit 2; a remote that
//! never answers costs the timeout and the run still passes.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{cascade, init_repo, script, write_json};

const SECRET: &str = "e2e-secret";

/// `cascade gates run --json` with a clean remote-cache environment.
fn gates_run(
    repo: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (i32, serde_json::Value, String) {
    let mut cmd = cascade(repo);
    cmd.args(["gates", "run", "--json"]).args(extra);
    for k in [
        "CASCADE_REMOTE_CACHE",
        "CASCADE_REMOTE_CACHE_MODE",
        "CASCADE_CACHE_SECRET",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v = serde_json::from_str(stdout.trim()).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v, stderr)
}

fn json_of(repo: &Path, args: &[&str]) -> serde_json::Value {
    let out = cascade(repo)
        .args(args)
        .env_remove("CASCADE_REMOTE_CACHE")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Two repositories with the same tree and the same gate (a script outside
/// both that logs where it ran).
struct Pair {
    a: tempfile::TempDir,
    b: tempfile::TempDir,
    shared: tempfile::TempDir,
}

impl Pair {
    fn new(extra_config: serde_json::Value) -> Pair {
        let (a, b, shared) = (init_repo(), init_repo(), tempfile::tempdir().unwrap());
        let log = shared.path().join("runs.log");
        let gate = script(
            &shared.path().join("bin/check.sh"),
            &format!("pwd >> '{}'", log.display()),
        );
        for repo in [a.path(), b.path()] {
            let mut cfg = serde_json::json!({"gates": [
                {"name": "check", "type": "test", "command": gate, "toolchain": []}]});
            if let (Some(o), Some(extra)) = (cfg.as_object_mut(), extra_config.as_object()) {
                o.extend(extra.clone());
            }
            write_json(&repo.join(".cascade/gates.json"), &cfg);
        }
        Pair { a, b, shared }
    }
    fn url(&self) -> String {
        format!("file://{}", self.shared.path().join("remote").display())
    }
    fn runs(&self) -> usize {
        std::fs::read_to_string(self.shared.path().join("runs.log"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

#[test]
fn ci_publishes_and_a_laptop_hits() {
    let p = Pair::new(serde_json::json!({}));
    let url = p.url();
    // CI: the one command, with the secret: read-write.
    let (code, v, stderr) = gates_run(
        p.a.path(),
        &["--remote-cache", &url],
        &[("CASCADE_CACHE_SECRET", SECRET)],
    );
    assert_eq!(code, 0, "{v} {stderr}");
    assert_eq!(v["gates"][0]["cache"], "miss");
    assert_eq!(v["remote_cache"]["mode"], "read-write");
    assert_eq!(v["remote_cache"]["uploads"]["uploaded"], 1, "{v}");
    assert_eq!(p.runs(), 1);

    // A laptop: URL from the environment, read-only, verifying.
    let (code, v, stderr) = gates_run(
        p.b.path(),
        &["--remote-cache-mode", "read"],
        &[
            ("CASCADE_REMOTE_CACHE", &url),
            ("CASCADE_CACHE_SECRET", SECRET),
        ],
    );
    assert_eq!(code, 0, "{v} {stderr}");
    assert_eq!(v["gates"][0]["cache"], "remote", "{v}");
    assert_eq!(v["gates"][0]["cached"], true);
    assert_eq!(p.runs(), 1, "the laptop did not run the gate");

    let stats = json_of(p.b.path(), &["gates", "cache", "stats", "--json"]);
    assert_eq!(stats["remote_hits"], 1, "{stats}");
    assert_eq!(stats["hits"], 1);
    assert!(stats["bytes_downloaded"].as_u64().unwrap() > 0, "{stats}");
    let stats = json_of(p.a.path(), &["gates", "cache", "stats", "--json"]);
    assert_eq!(stats["uploads"], 1, "{stats}");

    // Now local on the laptop, even with the remote gone.
    let (_, v, _) = gates_run(p.b.path(), &[], &[]);
    assert_eq!(v["gates"][0]["cache"], "local");
}

#[test]
fn explain_says_whether_the_remote_was_consulted() {
    let p = Pair::new(serde_json::json!({}));
    let url = p.url();
    // Read-only with a secret, empty remote: consulted, not found.
    gates_run(
        p.a.path(),
        &["--remote-cache", &url, "--remote-cache-mode", "read"],
        &[("CASCADE_CACHE_SECRET", SECRET)],
    );
    let ex = json_of(p.a.path(), &["gates", "cache", "explain", "--json"]);
    let remote = &ex["misses"][0]["remote"];
    assert_eq!(remote["consulted"], true, "{ex}");
    assert_eq!(remote["outcome"], "not_found");
    // No remote configured: explain says so.
    gates_run(p.b.path(), &[], &[]);
    let ex = json_of(p.b.path(), &["gates", "cache", "explain", "--json"]);
    assert_eq!(
        ex["misses"][0]["remote"]["outcome"], "not_configured",
        "{ex}"
    );
    let text = cascade(p.b.path())
        .args(["gates", "cache", "explain"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    // Said once, with why (the reason carries the remote's answer).
    assert_eq!(text.matches("not consulted").count(), 1, "{text}");
    assert!(text.contains("  remote not consulted: "), "{text}");
}

#[test]
fn settings_that_cannot_work_exit_2_with_what_to_do() {
    let p = Pair::new(serde_json::json!({}));
    let url = p.url();
    let (code, _, stderr) = gates_run(
        p.a.path(),
        &["--remote-cache", &url, "--remote-cache-mode", "write"],
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("error:") && stderr.contains("CASCADE_CACHE_SECRET"),
        "{stderr}"
    );
    let (code, _, stderr) = gates_run(p.a.path(), &["--remote-cache", "not a url"], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("invalid remote cache URL"), "{stderr}");
    let (code, _, stderr) = gates_run(p.a.path(), &["--remote-cache-mode", "sideways"], &[]);
    assert_eq!(code, 2, "{stderr}");
    // `off` overrides a configured remote for one run.
    let (code, v, _) = gates_run(p.a.path(), &["--remote-cache", "off"], &[]);
    assert_eq!(code, 0);
    assert!(v.get("remote_cache").is_none(), "{v}");
}

#[test]
fn a_remote_that_never_answers_costs_the_timeout_and_the_run_passes() {
    let p = Pair::new(serde_json::json!({}));
    let url = p.url();
    gates_run(
        p.a.path(),
        &["--remote-cache", &url],
        &[("CASCADE_CACHE_SECRET", SECRET)],
    );
    // Make every entry a FIFO nobody writes: reads block like a silent server.
    let mut fifos = Vec::new();
    let mut stack = vec![p.shared.path().join("remote")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                std::fs::remove_file(e.path()).unwrap();
                let c = std::ffi::CString::new(e.path().to_string_lossy().as_bytes()).unwrap();
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
                fifos.push(c);
            }
        }
    }
    assert_eq!(fifos.len(), 1);
    // The URL and a short timeout from gates.json this time.
    write_json(
        &p.b.path().join(".cascade/gates.json"),
        &serde_json::json!({
            "gates": [{"name": "check", "type": "test",
                       "command": p.shared.path().join("bin/check.sh"), "toolchain": []}],
            "remote_cache": {"url": url, "mode": "read", "timeout_ms": 300}
        }),
    );
    let started = Instant::now();
    let (code, v, stderr) = gates_run(p.b.path(), &[], &[("CASCADE_CACHE_SECRET", SECRET)]);
    assert_eq!(code, 0, "{v} {stderr}");
    assert_eq!(v["gates"][0]["cache"], "miss");
    assert_eq!(p.runs(), 2, "the gate ran locally");
    assert!(
        stderr.contains("warning: remote gate cache:") && stderr.contains("no answer within 300ms"),
        "{stderr}"
    );
    // Not a timing assertion: a guard that the run ended instead of hanging.
    assert!(started.elapsed() < Duration::from_secs(120));
    for c in fifos {
        unsafe {
            let fd = libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK);
            if fd >= 0 {
                libc::close(fd);
            }
        }
    }
}

/// Writes `<dir>/agents.json` with one agent, `scripted`, that writes
/// `<story id>.txt`.
fn scripted_agents(dir: &Path) {
    let agent = script(
        &dir.join("agent.sh"),
        r#"printf '%s\n' "$CASCADE_STORY_ID" > "$CASCADE_STORY_ID.txt""#,
    );
    write_json(
        &dir.join("agents.json"),
        &serde_json::json!({"default_agent": "scripted",
            "agents": {"scripted": {"type": "cli", "command": agent, "args": [], "timeout": 60}}}),
    );
}

/// `approve --auto-run --json` in `repo` with the agents of `tools` and
/// `--remote-cache URL --remote-cache-mode MODE` (`remote`), the secret set;
/// asserts exit 0 and returns stdout.
fn approve_with_remote(repo: &Path, tools: &Path, remote: &[&str; 2]) -> String {
    let out = cascade(repo)
        .args(["approve", "--auto-run", "--retry-delay", "0", "--json"])
        .args([
            "--remote-cache",
            remote[0],
            "--remote-cache-mode",
            remote[1],
        ])
        .arg("--agents")
        .arg(tools.join("agents.json"))
        .env("CASCADE_CACHE_SECRET", SECRET)
        .env_remove("CASCADE_REMOTE_CACHE")
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `approve` in two repositories with the same plan and agent: the second
/// one's story gate comes from the remote, and the events say so.
#[test]
fn approve_shares_gate_verdicts_and_events_carry_the_source() {
    let shared = tempfile::tempdir().unwrap();
    let log = shared.path().join("gate-runs.log");
    let gate = script(
        &shared.path().join("gate.sh"),
        &format!("pwd >> '{}'", log.display()),
    );
    scripted_agents(shared.path());
    let url = format!("file://{}", shared.path().join("remote").display());
    let prd = serde_json::json!({
        "goal": "share gates", "objectives": [],
        "stories": [{"id": "story-001", "title": "One", "description": "d", "priority": "high",
                     "dependencies": [], "status": "pending", "acceptance_criteria": ["ok"]}],
        "quality_gates": {"enabled": true, "gates": [
            {"name": "check", "type": "test", "command": gate, "toolchain": []}]}
    });
    let mut gate_events = Vec::new();
    for (repo, mode) in [(init_repo(), "read-write"), (init_repo(), "read")] {
        write_json(&repo.path().join("prd.json"), &prd);
        crate::common::git(repo.path(), &["add", "-A"]);
        crate::common::git(repo.path(), &["commit", "-q", "-m", "plan"]);
        let stdout = approve_with_remote(repo.path(), shared.path(), &[&url, mode]);
        let finished: Vec<serde_json::Value> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["event"] == "gate_finished")
            .collect();
        assert_eq!(finished.len(), 1, "{stdout}");
        gate_events.push(finished[0].clone());
        // `resume` continues with the same remote (the URL carries no credential).
        let state: serde_json::Value = crate::common::run_state(repo.path());
        assert_eq!(state["options"]["remote_cache"], url.as_str(), "{state}");
        assert_eq!(state["options"]["remote_cache_mode"], mode, "{state}");
    }
    assert_eq!(gate_events[0]["cache"], "miss", "{:?}", gate_events);
    assert_eq!(gate_events[1]["cache"], "remote", "{:?}", gate_events);
    assert_eq!(gate_events[1]["cached"], true);
    let runs = std::fs::read_to_string(&log).unwrap_or_default();
    // In the first repository only: on its base (judged before the agent)
    // and on the story's work; the second one reads both from the remote.
    assert_eq!(runs.lines().count(), 2, "the gate ran twice in all: {runs}");
}

/// An unusable `file://` root (a file, a FIFO, a directory that cannot be
/// created) is a store that is down: a warning, and the gates run, for
/// `gates run` and for `approve` (issue 23).
#[test]
fn an_unusable_file_root_is_a_warning_and_the_gates_run() {
    let p = Pair::new(serde_json::json!({}));
    let file = p.shared.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let fifo = p.shared.path().join("a-fifo");
    let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: mkfifo on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let roots = [file.clone(), fifo, file.join("below-a-file")];
    for (i, root) in roots.iter().enumerate() {
        let url = format!("file://{}", root.display());
        // A miss every time: the local cache is emptied between runs.
        let _ = std::fs::remove_dir_all(p.a.path().join(".cascade/gate-cache"));
        let (code, v, stderr) = gates_run(
            p.a.path(),
            &["--remote-cache", &url],
            &[("CASCADE_CACHE_SECRET", SECRET)],
        );
        assert_eq!(code, 0, "{url}: {v} {stderr}");
        assert_eq!(v["passed"], true, "{v}");
        assert_eq!(p.runs(), i + 1, "{url}: the gate ran");
        assert!(
            stderr.contains("warning: remote gate cache:") && stderr.contains("cannot be used"),
            "{url}: {stderr}"
        );
        assert!(!stderr.contains("error:"), "{stderr}");
    }
    // approve: the story's gate runs and the run completes.
    let repo = p.a.path();
    scripted_agents(p.shared.path());
    write_json(
        &repo.join("prd.json"),
        &serde_json::json!({"goal": "g", "stories": [{"id": "s1", "title": "One",
            "dependencies": [], "status": "pending"}]}),
    );
    crate::common::git(repo, &["add", "-A"]);
    crate::common::git(repo, &["commit", "-q", "-m", "plan"]);
    let _ = std::fs::remove_dir_all(repo.join(".cascade/gate-cache"));
    let url = format!("file://{}", file.display());
    let stdout = approve_with_remote(repo, p.shared.path(), &[&url, "read-write"]);
    assert!(stdout.contains("cannot be used"), "{stdout}");
    // The base's gate (judged before the agent) and the story's ran.
    assert_eq!(p.runs(), roots.len() + 2, "the story's gate ran");
}

/// A wrongly signed entry (planted by someone without the secret) is
/// ignored by readers and replaced by the next writer that has the secret,
/// so the key is not blocked for good (issue 23).
#[test]
fn a_forged_entry_is_replaced_by_a_writer_with_the_secret() {
    let p = Pair::new(serde_json::json!({}));
    let url = p.url();
    // The forger publishes a "pass" under the real key, with its own secret.
    let (code, v, stderr) = gates_run(
        p.b.path(),
        &["--remote-cache", &url],
        &[("CASCADE_CACHE_SECRET", "the-forgers-own")],
    );
    assert_eq!(
        (code, &v["remote_cache"]["uploads"]["uploaded"]),
        (0, &serde_json::json!(1)),
        "{v} {stderr}"
    );
    // CI with the real secret: the entry is rejected, the gate runs, and
    // the forgery is replaced by a validly signed entry.
    let (code, v, stderr) = gates_run(
        p.a.path(),
        &["--remote-cache", &url],
        &[("CASCADE_CACHE_SECRET", SECRET)],
    );
    assert_eq!(code, 0, "{v} {stderr}");
    assert_eq!(v["gates"][0]["cache"], "miss", "{v}");
    assert_eq!(p.runs(), 2);
    assert!(stderr.contains("wrongly signed"), "{stderr}");
    assert!(stderr.contains("replaced the remote entry"), "{stderr}");
    assert_eq!(v["remote_cache"]["uploads"]["uploaded"], 1, "{v}");
    // A laptop with the secret now hits the remote.
    std::fs::remove_dir_all(p.b.path().join(".cascade/gate-cache")).ok();
    let (code, v, stderr) = gates_run(
        p.b.path(),
        &["--remote-cache", &url, "--remote-cache-mode", "read"],
        &[("CASCADE_CACHE_SECRET", SECRET)],
    );
    assert_eq!(code, 0, "{v} {stderr}");
    assert_eq!(v["gates"][0]["cache"], "remote", "{v} {stderr}");
    assert_eq!(p.runs(), 2, "not run again");
}
