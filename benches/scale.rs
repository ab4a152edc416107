//! The commands around a run at scale: the real `cascade` binary on
//! generated plans (`cascade_plan::synthetic`: ~3 dependencies a story,
//! 1 in 20 complete already) of 1,000 and 10,000 stories, and 100,000 with
//! `CASCADE_BENCH_100K=1` (minutes of setup). Each measurement is one whole
//! process (or one request to a running dashboard), so it includes what a
//! user waits for: reading the files, the work, writing the output.
//!
//! Groups (quick: `cargo bench --bench scale -- --quick`):
//! - `prepare`: `approve --dry-run`; a real run's preparation
//!   (`approve --auto-run --max-cost 0`: the run state, prd.json in line,
//!   merged-story detection, then the budget stops the run before any story
//!   starts); `resume`'s preparation of the state that leaves, and again
//!   once the plan's stories are in another order than the state's.
//! - `status`: `status` and `status --json` on a run state with attempts
//!   (60% of the stories merged, 5% failed twice, 5% blocked).
//! - `dashboard`: a `cascade ui` on that run: `GET /api/run` (the run
//!   snapshot) and the event replay (`GET /api/events` read until its last
//!   record: four records per story that ran); then each of them as the
//!   first request of a dashboard just started (`first ...`: it waits for
//!   the files the dashboard reads when it starts, and the first replay
//!   reads the run's records, which the snapshot does not); and a story's
//!   view (`GET /api/stories/ID`), again and as the first request (it
//!   reads the state's and the plan's records, which the run view does not).
//!
//! The agent is an installed scripted one (`instant-agent`, a shell script
//! that writes one file): without an installed agent, `approve` stops before
//! its preparation.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cascade_plan::synthetic::{prd_json, story_id, Shape};
use criterion::{criterion_group, BatchSize, BenchmarkId, Criterion};
use serde_json::json;

#[macro_use]
#[path = "support/mod.rs"]
mod support;
use support::git;

const CASCADE: &str = env!("CARGO_BIN_EXE_cascade");

/// The plan sizes measured.
fn sizes() -> Vec<usize> {
    let mut sizes = vec![1_000, 10_000];
    if std::env::var_os("CASCADE_BENCH_100K").is_some() {
        sizes.push(100_000);
    }
    sizes
}

/// A repository with a generated `prd.json`, and an installed instant agent.
struct Project {
    _dir: tempfile::TempDir,
    repo: PathBuf,
    agents: PathBuf,
}

impl Project {
    fn new(n: usize) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("README.md"), "scale\n").unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "README.md"]);
        git(&repo, &["commit", "-q", "-m", "init"]);
        std::fs::write(repo.join("prd.json"), prd_json(&Shape::new(n))).unwrap();
        let agent = dir.path().join("instant-agent");
        std::fs::write(
            &agent,
            "#!/bin/sh\nprintf '%s\\n' \"$CASCADE_STORY_ID\" > \"$CASCADE_STORY_ID.txt\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let agents = dir.path().join("agents.json");
        let config = json!({
            "default_agent": "instant",
            "agents": {"instant": {"type": "cli", "command": agent, "args": [], "timeout": 120}},
        });
        std::fs::write(&agents, config.to_string()).unwrap();
        Project {
            _dir: dir,
            repo,
            agents,
        }
    }

    /// `cascade <args> --agents agents.json` in the repository, output
    /// dropped; whether it exited 0.
    fn cascade(&self, args: &[&str]) -> bool {
        let mut cmd = Command::new(CASCADE);
        cmd.current_dir(&self.repo)
            .env("NO_COLOR", "1")
            .args(args)
            .arg("--agents")
            .arg(&self.agents)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.status().is_ok_and(|s| s.success())
    }
}

/// The flags of a preparation that the budget ends before any story starts.
const PREPARE: [&str; 6] = [
    "--auto-run",
    "--yes",
    "--allow-dirty",
    "--max-cost",
    "0",
    "--json",
];

fn prepare(c: &mut Criterion) {
    let mut g = c.benchmark_group("prepare");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for n in sizes() {
        let p = Project::new(n);
        let dry = [
            "approve",
            "--dry-run",
            "--yes",
            "--allow-dirty",
            "--prd",
            "prd.json",
        ];
        assert!(p.cascade(&dry), "approve --dry-run failed");
        g.bench_with_input(BenchmarkId::new("approve --dry-run", n), &p, |b, p| {
            b.iter(|| p.cascade(&dry))
        });
        let approve: Vec<&str> = ["approve", "--prd", "prd.json"]
            .into_iter()
            .chain(PREPARE)
            .collect();
        // Exits 1: the budget is exhausted before the first story.
        p.cascade(&approve);
        assert!(p.repo.join(".cascade/cascade.db").exists(), "no run state");
        g.bench_with_input(BenchmarkId::new("approve (preparation)", n), &p, |b, p| {
            b.iter(|| p.cascade(&approve))
        });
        let resume: Vec<&str> = ["resume"].into_iter().chain(PREPARE).collect();
        g.bench_with_input(BenchmarkId::new("resume (preparation)", n), &p, |b, p| {
            b.iter(|| p.cascade(&resume))
        });
        // The plan's stories in another order than the state's records:
        // those are then found through the state's index, not by position.
        let path = p.repo.join("prd.json");
        let mut plan: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        plan["stories"].as_array_mut().unwrap().reverse();
        std::fs::write(&path, plan.to_string()).unwrap();
        g.bench_with_input(
            BenchmarkId::new("resume (plan reordered)", n),
            &p,
            |b, p| b.iter(|| p.cascade(&resume)),
        );
    }
    g.finish();
}

/// A run state like one a run of `n` stories leaves (see the module doc),
/// and its event journal, written into `p`'s repository.
fn write_run(p: &Project, n: usize) {
    let run_id = "20260101T000000Z-1";
    let attempt = |i: usize, a: u32, outcome: &str, error: Option<&str>| {
        json!({
            "attempt": a, "agent": "instant",
            "phase": if a == 1 { "implementation" } else { "retry" },
            "started_at": format!("2026-01-01T00:{:02}:{:02}.000Z", i / 60 % 60, i % 60),
            "finished_at": format!("2026-01-01T01:{:02}:{:02}.000Z", i / 60 % 60, i % 60),
            "pid": 1000 + i, "outcome": outcome,
            "error_type": error.map(|_| "quality_gate"), "error": error,
            "duration_ms": 1200, "log": format!(".cascade/logs/{}/attempt-{a}.log", story_id(i)),
            "input_tokens": 1000, "output_tokens": 200, "cost_usd": 0.01,
        })
    };
    let stories: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let id = story_id(i);
            let mut s = json!({"id": id, "status": "pending", "attempts": []});
            match i % 20 {
                0..=11 => {
                    s["status"] = json!("complete");
                    s["agent"] = json!("instant");
                    s["branch"] = json!(format!("cascade/{id}"));
                    s["commit"] = json!(format!("{:040x}", i + 1));
                    s["merge_commit"] = json!(format!("{:040x}", i + 7));
                    s["attempts"] = json!([attempt(i, 1, "passed", None)]);
                    s["gates"] =
                        json!([{"name": "tests", "passed": true, "cached": false, "flaky": false}]);
                }
                12 => {
                    let why = "quality gate 'tests' failed";
                    s["status"] = json!("failed");
                    s["agent"] = json!("instant");
                    s["worktree"] = json!(format!(".cascade/worktrees/{id}"));
                    s["error_type"] = json!("quality_gate");
                    s["error"] = json!(why);
                    s["attempts"] = json!([
                        attempt(i, 1, "failed", Some(why)),
                        attempt(i, 2, "failed", Some(why))
                    ]);
                }
                13 => {
                    s["status"] = json!("blocked");
                    s["blocked_by"] = json!([story_id(i - 1)]);
                }
                _ => {}
            }
            s
        })
        .collect();
    let state = json!({
        "schema_version": 1, "run_id": run_id, "prd": "prd.json", "target_branch": "main",
        "project_root": p.repo, "status": "interrupted", "pid": 1,
        "started_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T02:00:00.000Z",
        "stories": stories,
    });
    let cascade = p.repo.join(".cascade");
    std::fs::create_dir_all(cascade.join("runs").join(run_id)).unwrap();
    // As an older cascade wrote it: the first command that reads it
    // imports it into the run database (not timed: `status` is run once first).
    std::fs::write(cascade.join("state.json"), state.to_string()).unwrap();

    let mut out = std::io::BufWriter::new(
        std::fs::File::create(cascade.join("runs").join(run_id).join("events.jsonl")).unwrap(),
    );
    let mut seq = 0u64;
    let mut record = |kind: &str, data: serde_json::Value| {
        seq += 1;
        let line = json!({"seq": seq, "t_ms": seq * 7, "ts": 1_767_225_600_000u64 + seq * 7, "kind": kind, "data": data});
        writeln!(out, "{line}").unwrap();
    };
    record(
        "event",
        json!({"event": "run_started", "run_id": run_id, "total": n}),
    );
    for i in (0..n).filter(|i| i % 20 <= 12) {
        let id = story_id(i);
        record(
            "event",
            json!({"event": "story_started", "story": id, "agent": "instant", "attempt": 1, "max_attempts": 3}),
        );
        record(
            "agent_output",
            json!({"story": id, "attempt": 1, "text": format!("wrote {id}.txt")}),
        );
        record(
            "event",
            json!({"event": "gate_finished", "story": id, "gate": "tests", "passed": i % 20 != 12, "cached": false}),
        );
        record(
            "event",
            json!({"event": "story_merged", "story": id, "commit": format!("{:040x}", i + 7)}),
        );
    }
    out.flush().unwrap();
}

/// A `cascade ui` on a repository, stopped when dropped.
struct Dashboard {
    child: Child,
    addr: String,
    token: String,
}

impl Dashboard {
    fn start(repo: &Path) -> Dashboard {
        let mut child = Command::new(CASCADE)
            .current_dir(repo)
            .args(["ui", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let url = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| {
                let start = l.find("http://127.0.0.1:")?;
                Some(l[start..].split_whitespace().next()?.to_string())
            })
            .expect("the dashboard prints its URL");
        // Keep reading its output so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let rest = url.trim_start_matches("http://");
        let (addr, query) = rest.split_once("/?token=").expect("a URL with a token");
        Dashboard {
            child,
            addr: addr.to_string(),
            token: query.to_string(),
        }
    }

    /// Sends `GET path` and reads the answer until `done` says it is
    /// complete (or the server closes); returns the bytes read.
    fn get(&self, path: &str, done: impl Fn(&[u8]) -> bool) -> usize {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        let sep = if path.contains('?') { '&' } else { '?' };
        write!(
            s,
            "GET {path}{sep}token={} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.token, self.addr
        )
        .unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut tail: Vec<u8> = Vec::new();
        let mut total = 0;
        loop {
            let k = s.read(&mut buf).unwrap();
            if k == 0 {
                return total;
            }
            total += k;
            tail.extend_from_slice(&buf[..k]);
            if done(&tail) {
                return total;
            }
            let keep = tail.len().saturating_sub(64);
            tail.drain(..keep);
        }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status(c: &mut Criterion) {
    let mut g = c.benchmark_group("status");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for n in sizes() {
        let p = Project::new(n);
        write_run(&p, n);
        assert!(p.cascade(&["status", "--json"]), "status failed");
        g.bench_with_input(BenchmarkId::new("status", n), &p, |b, p| {
            b.iter(|| p.cascade(&["status"]))
        });
        g.bench_with_input(BenchmarkId::new("status --json", n), &p, |b, p| {
            b.iter(|| p.cascade(&["status", "--json"]))
        });
    }
    g.finish();
}

fn dashboard(c: &mut Criterion) {
    let mut g = c.benchmark_group("dashboard");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for n in sizes() {
        let p = Project::new(n);
        write_run(&p, n);
        let ui = Dashboard::start(&p.repo);
        // Read to the end: the server closes the connection after it.
        let snapshot_done = |_: &[u8]| false;
        let bytes = ui.get("/api/run", snapshot_done);
        assert!(bytes > n * 10, "a snapshot of {bytes} bytes");
        g.bench_with_input(BenchmarkId::new("GET /api/run", n), &ui, |b, ui| {
            b.iter(|| ui.get("/api/run", snapshot_done))
        });
        // The last record's id ends the replay.
        let last =
            std::fs::read_to_string(p.repo.join(".cascade/runs/20260101T000000Z-1/events.jsonl"))
                .unwrap()
                .lines()
                .count();
        let marker = format!("id: {last}\n");
        let replayed = |t: &[u8]| t.windows(marker.len()).any(|w| w == marker.as_bytes());
        g.bench_with_input(BenchmarkId::new("event replay", n), &ui, |b, ui| {
            b.iter(|| ui.get("/api/events", replayed))
        });
        // A story's view: the state's and the plan's records are kept
        // (as text) from the first one on.
        let story = format!("/api/stories/{}", story_id(n / 2));
        assert!(ui.get(&story, snapshot_done) > 100, "a story view");
        g.bench_with_input(BenchmarkId::new("GET /api/stories/ID", n), &ui, |b, ui| {
            b.iter(|| ui.get(&story, snapshot_done))
        });
        drop(ui);
        // A dashboard started for each: only its first request is timed.
        let first = |b: &mut criterion::Bencher, path: &str, done: &dyn Fn(&[u8]) -> bool| {
            b.iter_batched_ref(
                || Dashboard::start(&p.repo),
                |ui| ui.get(path, done),
                BatchSize::PerIteration,
            )
        };
        g.bench_function(BenchmarkId::new("first GET /api/run", n), |b| {
            first(b, "/api/run", &snapshot_done)
        });
        g.bench_function(BenchmarkId::new("first event replay", n), |b| {
            first(b, "/api/events", &replayed)
        });
        g.bench_function(BenchmarkId::new("first GET /api/stories/ID", n), |b| {
            first(b, &story, &snapshot_done)
        });
    }
    g.finish();
}

criterion_group!(benches, prepare, status, dashboard);

bench_main!(benches);
