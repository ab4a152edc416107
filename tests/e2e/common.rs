//! Helpers shared by the end-to-end tests: the binary, temp repositories, scripts.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

/// The `cascade` binary, with a clean environment for reproducible output.
/// `approve` that runs at once and fails at once: no confirmation, no
/// pause between attempts, no retries (what most end-to-end runs start with).
pub const APPROVE_NOW: [&str; 6] = [
    "approve",
    "--auto-run",
    "--retry-delay",
    "0",
    "--max-retries",
    "0",
];

pub fn cascade(dir: &Path) -> assert_cmd::Command {
    assert_cmd::Command::from_std(cascade_command(dir))
}

/// The same as a plain command, for tests that start it in the background
/// (the caller sets stdio, signals it, waits for it).
pub fn cascade_command(dir: &Path) -> StdCommand {
    let mut cmd = bare_cascade();
    cmd.current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", dir);
    cmd
}

/// The `cascade` binary with nothing set but the one sandbox allowance
/// every scripted run needs: its agents and gates record what they saw in
/// tools directories beside the repository, so the temp directory is theirs
/// to write, and everything else of the sandbox (hidden paths, the rest of
/// the system) still applies. tests/e2e/sandbox.rs runs without it.
pub fn bare_cascade() -> StdCommand {
    let mut cmd = StdCommand::new(assert_cmd::cargo::cargo_bin("cascade"));
    cmd.env(cascade_engine::confine::WRITE_VAR, std::env::temp_dir());
    cmd
}

/// Whether `program args` runs here; prints why the test skips when not.
pub fn have(program: &str, args: &[&str]) -> bool {
    let ok = StdCommand::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: `{program} {}` does not run here", args.join(" "));
    }
    ok
}

/// The mega run of the repository at `repo` as its state reads (what the
/// run database holds), `null` when there is none.
pub fn mega_state(repo: &Path) -> serde_json::Value {
    let state = cascade_engine::mega::MegaState::load(&repo.join(".cascade"))
        .expect("the mega state reads");
    serde_json::to_value(state).expect("a mega state is JSON")
}

/// Runs git in `dir` and panics with its output on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = StdCommand::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh repository on branch `main` with one commit holding `README.md`.
pub fn init_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = dir.path();
    git(p, &["init", "-q", "-b", "main"]);
    git(p, &["config", "user.name", "test"]);
    git(p, &["config", "user.email", "test@example.com"]);
    git(p, &["config", "commit.gpgsign", "false"]);
    std::fs::write(p.join("README.md"), "# test\n").expect("write");
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "init"]);
    dir
}

/// Writes an executable `#!/bin/sh` script and returns its path.
pub fn script(path: &Path, body: &str) -> PathBuf {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.to_path_buf()
}

/// Writes `value` as pretty JSON.
pub fn write_json(path: &Path, value: &serde_json::Value) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, serde_json::to_string_pretty(value).expect("json")).expect("write");
}

/// The latest run of the run database in `cascade_dir` (a repository's
/// `.cascade/`, or a mega feature's directory), as the JSON its state
/// serializes to (`stories[]` with their `attempts[]`, `options`, ...).
pub fn run_state_in(cascade_dir: &Path) -> serde_json::Value {
    let db = cascade_engine::store::db_path(cascade_dir);
    let state = cascade_engine::state::RunState::load(&db)
        .unwrap_or_else(|e| panic!("{}: {e}", db.display()))
        .unwrap_or_else(|| panic!("no run in {}", db.display()));
    serde_json::to_value(&state).expect("a state serializes")
}

/// [`run_state_in`] of the repository at `repo`.
pub fn run_state(repo: &Path) -> serde_json::Value {
    run_state_in(&repo.join(".cascade"))
}

/// Writes `state` (as [`run_state`] reads it) as the repository's latest run.
pub fn save_run_state(repo: &Path, state: &serde_json::Value) {
    let mut st: cascade_engine::state::RunState =
        serde_json::from_value(state.clone()).expect("a run state");
    st.save(&cascade_engine::store::db_path(&repo.join(".cascade")))
        .expect("the run state saved");
}

/// The NDJSON events of a run's stdout (`--json`).
pub fn events(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

/// The events named `kind` (`"event": kind`).
pub fn of_kind<'a>(events: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

/// The exit code, -1 for a signal.
pub fn code(out: &std::process::Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// Exit code, stdout and stderr, for assertion messages.
pub fn explain(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether `pid` is a live process (a zombie counts as dead: it is gone,
/// only not reaped yet by its parent).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// The pids written to `path` (whitespace separated).
pub fn pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// The pids of `path` (see [`pids`]) that are still alive, after giving
/// each up to 5 s to go: a process being stopped (SIGTERM, a grace period,
/// SIGKILL) is gone within that, one left running is not.
pub fn alive_after_grace(path: &Path) -> Vec<u32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let all = pids(path);
    while all.iter().any(|p| alive(*p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    all.into_iter().filter(|p| alive(*p)).collect()
}

/// The local branches of the repository at `dir` other than `main`.
pub fn other_branches(dir: &Path) -> Vec<String> {
    git(
        dir,
        &["for-each-ref", "--format=%(refname:short)", "refs/heads"],
    )
    .lines()
    .filter(|b| *b != "main")
    .map(str::to_string)
    .collect()
}

/// Files under `dir` whose names say they are temporary writes.
pub fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else if name.ends_with(".tmp")
                || name.starts_with("tmp_")
                || name.contains(".tmp-")
                || name.contains("cascade-tmp")
            {
                found.push(p);
            }
        }
    }
    found
}

/// A pid no process has: a child's, after it was reaped.
pub fn dead_pid() -> u32 {
    let mut child = StdCommand::new("true").spawn().expect("true runs");
    let pid = child.id();
    child.wait().expect("reaped");
    pid
}

/// `cascade <args> --agents <agents>` in `dir`, run to its end (two
/// minutes at most): what a fixture with its own agents.json runs.
pub fn run_with_agents(dir: &Path, agents: &Path, args: &[&str]) -> std::process::Output {
    cascade(dir)
        .args(args)
        .arg("--agents")
        .arg(agents)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .expect("cascade runs")
}
