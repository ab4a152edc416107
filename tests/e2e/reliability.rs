//! End-to-end tests of cascade at the edges (issue 25): no process it
//! started survives a double Ctrl-C, a daemon started by an agent, a gate,
//! a setup or a notify command is gone when its attempt ends, a failing
//! stdout or stderr ends the command without an abort, agent logs stay
//! within their limit with bounded memory, and a full disk stops a run
//! cleanly and resumably. The api agent (`type: "api"`, against
//! `mock_model`) is held to the same: its log within the limit, and the
//! gates its `RunGates` tool runs supervised like any other.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{
    alive, cascade, cascade_command, code, explain, git, pids, script, temp_files, write_json,
};
use crate::mock_model::{self, Mode, Model, Wire};

/// A repository with a PRD, a scripted agent and a tools directory for the
/// files the scripts leave (pids, markers).
struct Fixture {
    repo: PathBuf,
    tools: tempfile::TempDir,
    _repo_dir: Option<tempfile::TempDir>,
}

impl Fixture {
    /// A fresh repository in a temp dir; `agent` is the body of the agent
    /// script, which starts with `T=<tools dir>`.
    fn new(stories: Value, gates: Value, agent: &str) -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let f = Fixture::at(dir.path().to_path_buf(), stories, gates, agent);
        Fixture {
            _repo_dir: Some(dir),
            ..f
        }
    }

    /// The same in `repo` (an existing, empty directory).
    fn at(repo: PathBuf, stories: Value, gates: Value, agent: &str) -> Fixture {
        for args in [
            &["init", "-q", "-b", "main"][..],
            &["config", "user.name", "test"],
            &["config", "user.email", "test@example.com"],
            &["config", "commit.gpgsign", "false"],
        ] {
            git(&repo, args);
        }
        std::fs::write(repo.join("README.md"), "# test\n").expect("write");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "init"]);
        let f = Fixture {
            repo,
            tools: tempfile::tempdir().expect("tools dir"),
            _repo_dir: None,
        };
        write_json(
            &f.repo.join("prd.json"),
            &json!({
                "metadata": {"version": "1.0"},
                "goal": "reliability",
                "stories": stories,
                "quality_gates": {"enabled": true, "fail_fast": false, "use_cache": true, "gates": gates},
            }),
        );
        f.script("agent.sh", agent);
        write_json(
            &f.t("agents.json"),
            &json!({"default_agent": "scripted", "agents": {"scripted": {
                "type": "cli", "command": f.t("agent.sh").display().to_string(), "args": [], "timeout": 300
            }}}),
        );
        f
    }

    fn t(&self, name: &str) -> PathBuf {
        self.tools.path().join(name)
    }

    /// An executable script in the tools dir, starting with `T=<tools dir>`.
    fn script(&self, name: &str, body: &str) -> String {
        let t = self.tools.path().display();
        script(&self.t(name), &format!("T='{t}'\n{body}"))
            .display()
            .to_string()
    }

    /// `cascade <args> --agents ...` (bounded by a timeout) in the repo.
    fn cascade(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = cascade(&self.repo);
        cmd.args(args)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .env(crate::api_agent::KEY_ENV, mock_model::KEY)
            .timeout(Duration::from_secs(300));
        cmd
    }

    /// The same as a plain command, for the caller to start and wait for.
    fn background(&self, args: &[&str]) -> StdCommand {
        let mut cmd = cascade_command(&self.repo);
        cmd.args(args)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .env(crate::api_agent::KEY_ENV, mock_model::KEY)
            .stdin(Stdio::null());
        cmd
    }

    /// Makes the agent an api agent of `model` (Chat Completions) instead
    /// of the script.
    fn use_api_agent(&self, model: &Model) {
        write_json(
            &self.t("agents.json"),
            &json!({"default_agent": "model", "agents": {
                "model": crate::api_agent::api(model, Wire::OpenAi, json!({"timeout": 300}))
            }}),
        );
    }

    /// `.cascade/gates.json` with one gate running the script `name`.
    fn gate(&self, name: &str, body: &str) {
        let gate = self.script(name, body);
        write_json(
            &self.repo.join(".cascade/gates.json"),
            &json!({"gates": [{"name": "scripted", "type": "test", "command": gate}]}),
        );
    }

    fn prd_status(&self, id: &str) -> String {
        let prd: Value =
            serde_json::from_str(&std::fs::read_to_string(self.repo.join("prd.json")).unwrap())
                .unwrap();
        prd["stories"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .and_then(|s| s["status"].as_str())
            .unwrap_or("")
            .to_string()
    }
}

fn story(id: &str, deps: &[&str]) -> Value {
    json!({
        "id": id, "title": format!("Title {id}"), "description": format!("Implement {id}"),
        "priority": "medium", "dependencies": deps, "status": "pending",
        "acceptance_criteria": ["it works"]
    })
}

fn wait_for(cond: impl Fn() -> bool, what: &str) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` (killing it after a generous guard, so a hang fails
/// the test instead of blocking it) and returns its exit status.
fn wait_bounded(child: &mut std::process::Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("cascade did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn no_proc() -> bool {
    if !Path::new("/proc/self/stat").exists() {
        println!("skipped: no /proc on this system to check which processes are alive");
        return true;
    }
    false
}

#[test]
fn a_second_sigint_kills_term_ignoring_agents_and_cascade_exits_when_they_are_gone() {
    if no_proc() {
        return;
    }
    // Three agents that ignore SIGTERM and SIGINT, each with a daemon of
    // its own (a session of its own: no group signal reaches it).
    let f = Fixture::new(
        json!([story("a", &[]), story("b", &[]), story("c", &[])]),
        json!([]),
        r#"trap '' TERM INT
setsid sleep 300 >/dev/null 2>&1 </dev/null &
echo "$$ $!" >> "$T/pids"
touch "$T/started-$CASCADE_STORY_ID"
while :; do sleep 0.1; done"#,
    );
    let (status, err) = interrupt_twice(
        &f,
        &["approve", "--auto-run", "--parallel", "3", "--json"],
        || {
            ["a", "b", "c"]
                .iter()
                .all(|s| f.t(&format!("started-{s}")).exists())
                && pids(&f.t("pids")).len() == 6
        },
    );
    assert_eq!(status.code(), Some(130), "{err}");
    assert_nothing_left(&pids(&f.t("pids")), &err);
    assert!(
        err.lines()
            .any(|l| l == "second interrupt: stopped 3 agent process groups (a, b, c)"),
        "{err}"
    );
}

/// Starts `cascade <args>` in a process group of its own (as a shell starts
/// a foreground job), waits until `ready`, sends SIGINT to the group twice,
/// 0.2 s apart (Ctrl-C, Ctrl-C, on a terminal), and waits for cascade to
/// exit: its exit status and stderr.
fn interrupt_twice(
    f: &Fixture,
    args: &[&str],
    ready: impl Fn() -> bool,
) -> (std::process::ExitStatus, String) {
    let stderr = std::fs::File::create(f.t("stderr")).unwrap();
    let mut child = f
        .background(args)
        .stdout(Stdio::null())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .unwrap();
    let group = child.id() as i32;
    wait_for(ready, "the processes to interrupt to start");
    // SAFETY: signals the process group this test created.
    unsafe { libc::kill(-group, libc::SIGINT) };
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: as above.
    unsafe { libc::kill(-group, libc::SIGINT) };
    let status = wait_bounded(&mut child);
    let err = std::fs::read_to_string(f.t("stderr")).unwrap_or_default();
    (status, err)
}

/// Checked the moment cascade is gone: none of `pids` is alive, and
/// cascade did not panic (its stderr is `err`).
fn assert_nothing_left(pids: &[u32], err: &str) {
    let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "still alive after exit: {left:?}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_second_sigint_kills_a_gate_the_api_agents_run_gates_tool_started() {
    if no_proc() {
        return;
    }
    // The model writes its file and calls RunGates; the gate ignores TERM
    // and INT, starts a daemon and never ends (in a worktree: the base's
    // copy, judged before the agent, has no `.git` and passes).
    let model = mock_model::start(Wire::OpenAi, Mode::Work);
    let f = Fixture::new(json!([story("s", &[])]), json!([]), "exit 1");
    f.use_api_agent(&model);
    f.gate(
        "gate.sh",
        r#"[ -e .git ] || exit 0
trap '' TERM INT
setsid sleep 300 >/dev/null 2>&1 </dev/null &
echo "$$ $!" >> "$T/pids"
while :; do sleep 0.1; done"#,
    );
    let (status, err) = interrupt_twice(&f, &["approve", "--auto-run", "--json"], || {
        pids(&f.t("pids")).len() == 2
    });
    assert_eq!(status.code(), Some(130), "{err}");
    assert_nothing_left(&pids(&f.t("pids")), &err);
    let log = String::from_utf8_lossy(&agent_log(&f, "s")).into_owned();
    assert!(
        log.contains("[tool] RunGates"),
        "the tool ran the gate: {log}"
    );
}

#[test]
fn a_daemon_of_a_gate_the_api_agents_run_gates_tool_started_is_gone_when_the_gate_ends() {
    if no_proc() {
        return;
    }
    // The first gate run (RunGates, after the model wrote its file: the
    // gate step comes after the agent) starts a daemon and fails; every
    // later run (the re-run of a failed gate, the gate step) records
    // whether the daemon still lives.
    let model = mock_model::start(Wire::OpenAi, Mode::Work);
    let f = Fixture::new(json!([story("s", &[])]), json!([]), "exit 1");
    f.use_api_agent(&model);
    f.gate(
        "gate.sh",
        r#"if [ ! -f "$T/gate.pid" ]; then
  setsid sleep 300 >/dev/null 2>&1 </dev/null &
  echo $! > "$T/gate.pid"
  echo "gate failed: a draft"; exit 1
fi
s=$(cut -d' ' -f3 "/proc/$(cat "$T/gate.pid")/stat" 2>/dev/null)
if [ -z "$s" ] || [ "$s" = Z ]; then echo dead >> "$T/check"; else echo alive >> "$T/check"; fi"#,
    );
    let out = f
        .cascade(&["approve", "--auto-run", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let check = std::fs::read_to_string(f.t("check")).unwrap_or_default();
    let seen: Vec<&str> = check.lines().collect();
    assert!(
        !seen.is_empty() && seen.iter().all(|s| *s == "dead"),
        "the daemon as later gate runs saw it: {seen:?}"
    );
    let log = String::from_utf8_lossy(&agent_log(&f, "s")).into_owned();
    assert!(log.contains("[tool] RunGates"), "{log}");
    let daemon = pids(&f.t("gate.pid"));
    assert!(!alive(daemon[0]), "the gate's daemon survived");
}

#[test]
fn daemons_of_an_agent_a_gate_a_setup_and_a_notify_command_do_not_outlive_them() {
    if no_proc() {
        return;
    }
    // Story `one` starts a daemon from its agent, its gate and its worktree
    // setup; story `check` runs after `one` merged and records which of
    // those daemons are still alive.
    let f = Fixture::new(
        json!([story("one", &[]), story("check", &["one"])]),
        json!([]),
        r#"state() { s=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null); if [ -z "$s" ] || [ "$s" = Z ]; then echo dead; else echo alive; fi; }
if [ "$CASCADE_STORY_ID" = one ]; then
  setsid sleep 300 >/dev/null 2>&1 </dev/null &
  echo $! > "$T/agent.pid"
else
  for who in agent gate setup; do echo "$who:$(state "$(cat "$T/$who.pid")")" >> "$T/check"; done
fi
echo "$CASCADE_STORY_ID" > "$CASCADE_STORY_ID.txt""#,
    );
    // `nohup` keeps the output pipe it was given: this daemon also holds
    // the setup command's stdout open.
    let setup = f.script(
        "setup.sh",
        r#"if [ ! -f "$T/setup.pid" ]; then setsid nohup sleep 300 & echo $! > "$T/setup.pid"; fi"#,
    );
    let gate = f.script(
        "gate.sh",
        r#"if [ ! -f "$T/gate.pid" ]; then setsid sleep 300 >/dev/null 2>&1 & echo $! > "$T/gate.pid"; fi"#,
    );
    let notify = f.script(
        "notify.sh",
        r#"setsid sleep 300 >/dev/null 2>&1 & echo $! >> "$T/notify.pid"; cat > /dev/null"#,
    );
    write_json(
        &f.repo.join(".cascade/config.json"),
        &json!({"worktree": {"setup": [[setup]]}}),
    );
    write_json(
        &f.repo.join(".cascade/gates.json"),
        &json!({"gates": [{"name": "daemon", "type": "test", "command": gate}]}),
    );
    let out = f
        .cascade(&["approve", "--auto-run", "--json", "--notify", &notify])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let check = std::fs::read_to_string(f.t("check")).unwrap_or_default();
    assert_eq!(
        check.lines().collect::<Vec<_>>(),
        ["agent:dead", "gate:dead", "setup:dead"],
        "seen by the next story's agent"
    );
    let notified = pids(&f.t("notify.pid"));
    assert!(!notified.is_empty(), "the notify command ran");
    for pid in notified {
        assert!(!alive(pid), "the notify command's daemon {pid} survived");
    }
}

#[test]
fn a_daemon_started_by_a_gate_is_gone_after_gates_run() {
    if no_proc() {
        return;
    }
    let f = Fixture::new(json!([story("s", &[])]), json!([]), "exit 0");
    let gate = f.script(
        "gate.sh",
        r#"setsid nohup sleep 300 & echo $! > "$T/gate.pid""#,
    );
    write_json(
        &f.repo.join(".cascade/gates.json"),
        &json!({"gates": [{"name": "daemon", "type": "test", "command": gate}]}),
    );
    let out = f.cascade(&["gates", "run", "--no-cache"]).output().unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let daemon = pids(&f.t("gate.pid"));
    assert_eq!(daemon.len(), 1);
    assert!(!alive(daemon[0]), "the gate's daemon survived");
}

/// `cascade <args>` with stdout and/or stderr on `/dev/full`.
fn to_dev_full(f: &Fixture, args: &[&str], stdout: bool, stderr: bool) -> std::process::Output {
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let mut cmd = f.background(args);
    cmd.stdout(if stdout {
        Stdio::from(full())
    } else {
        Stdio::piped()
    })
    .stderr(if stderr {
        Stdio::from(full())
    } else {
        Stdio::piped()
    });
    cmd.output().unwrap()
}

#[test]
fn a_full_stdout_or_stderr_ends_the_command_with_an_error_not_an_abort() {
    if !Path::new("/dev/full").exists() {
        println!("skipped: no /dev/full on this system");
        return;
    }
    let f = Fixture::new(
        json!([story("a", &[]), story("b", &["a"])]),
        json!([]),
        "exit 0",
    );
    // stdout full: the error is said on stderr, exit 1.
    for args in [
        &["batches"][..],
        &["batches", "--json"],
        &["validate"],
        &["agents", "list"],
        &["completions", "bash"],
        &["approve", "--dry-run"],
    ] {
        let out = to_dev_full(&f, args, true, false);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("error: cannot write"), "{args:?}: {err}");
        assert!(err.contains("No space left on device"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // stderr full while an error is being reported: its exit code, no abort.
    let out = to_dev_full(&f, &["batches", "--prd", "missing.json"], false, true);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    // Both full: a non-zero exit, not a signal.
    for args in [&["batches"][..], &["batches", "--prd", "missing.json"]] {
        let out = to_dev_full(&f, args, true, true);
        let code = out.status.code();
        assert!(matches!(code, Some(1) | Some(2)), "{args:?}: {code:?}");
    }
}

/// `cascade <args>` whose stdout is a pipe nobody reads any more.
fn to_closed_pipe(f: &Fixture, args: &[&str]) -> std::process::Output {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors of `fds`.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the descriptors are fresh and owned here; the read end is
    // closed at once, the write end becomes the child's stdout.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    let mut cmd = f.background(args);
    cmd.stdout(Stdio::from(write)).stderr(Stdio::piped());
    cmd.output().unwrap()
}

#[test]
fn a_closed_pipe_ends_the_command_quietly_and_a_run_stops_resumably() {
    if no_proc() {
        return;
    }
    let f = Fixture::new(
        json!([story("a", &[]), story("b", &["a"])]),
        json!([]),
        r#"echo "$$" >> "$T/pids"; echo "$CASCADE_STORY_ID" > "$CASCADE_STORY_ID.txt""#,
    );
    // `cascade status | head -1`, `cascade batches | head -1`: the reader
    // went away; no message, exit 141 (as for a command SIGPIPE ended).
    for args in [&["batches"][..], &["status"], &["deps"]] {
        let out = to_closed_pipe(&f, args);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {}", explain(&out));
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    }
    // A run whose events cannot be written stops (state saved, nothing
    // left running) and resumes.
    let out = to_closed_pipe(&f, &["approve", "--auto-run", "--json"]);
    assert_eq!(out.status.code(), Some(141), "{}", explain(&out));
    for pid in pids(&f.t("pids")) {
        assert!(!alive(pid), "agent {pid} survived");
    }
    assert_ne!(f.prd_status("b"), "complete");
    let out = f
        .cascade(&["resume", "--auto-run", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.prd_status("b"), "complete");
}

/// Runs `cmd` to its end; its exit code and the peak resident memory (KiB)
/// of it and the children it waited for (`wait4`'s rusage).
// Reaped by wait4 (not `Child::wait`), which also gives its resource usage.
#[allow(clippy::zombie_processes)]
fn run_with_peak_memory(mut cmd: StdCommand) -> (Option<i32>, i64) {
    let child = cmd.spawn().unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; `status` and `usage` are valid.
    let rc = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(rc, child.id() as i32);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, usage.ru_maxrss)
}

fn agent_log(f: &Fixture, story: &str) -> Vec<u8> {
    std::fs::read(
        f.repo
            .join(format!(".cascade/logs/{story}-implementation-1.log")),
    )
    .expect("agent log")
}

#[test]
fn a_100_mb_agent_output_gives_a_capped_log_and_bounded_memory() {
    let f = Fixture::new(
        json!([story("chatty", &[])]),
        json!([]),
        r#"yes 'a very chatty agent prints this line again and again' | head -c 100000000
echo
echo 'the last line the agent printed'
echo done > chatty.txt"#,
    );
    let mut cmd = f.background(&["approve", "--auto-run", "--json"]);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let (code, peak_kib) = run_with_peak_memory(cmd);
    assert_eq!(code, Some(0));
    let log = agent_log(&f, "chatty");
    let limit = 16 * 1024 * 1024;
    assert_eq!(log.len(), limit, "the log fills exactly the default limit");
    let text = String::from_utf8_lossy(&log);
    assert!(
        text.starts_with("== cascade: chatty attempt 1"),
        "{:.200}",
        text
    );
    let marker = text
        .find("\n[cascade: ")
        .expect("a marker where output was dropped");
    let dropped: u64 = text[marker + "\n[cascade: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(dropped > 80_000_000, "{dropped} bytes dropped");
    assert!(
        text.ends_with("\nthe last line the agent printed\n"),
        "the tail is kept"
    );
    println!("peak resident memory of cascade with a 100 MB agent output: {peak_kib} KiB");
    assert!(
        peak_kib < 128 * 1024,
        "peak memory {peak_kib} KiB: the output is not held in memory"
    );
}

#[test]
fn the_log_limit_is_set_in_the_project_config() {
    let f = Fixture::new(
        json!([story("c", &[])]),
        json!([]),
        r#"yes 'line' | head -c 3000000; echo tail-end; echo c > c.txt"#,
    );
    write_json(
        &f.repo.join(".cascade/config.json"),
        &json!({"resources": {"max_log_mb": 1}}),
    );
    let out = f
        .cascade(&["approve", "--auto-run", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let log = agent_log(&f, "c");
    assert_eq!(log.len(), 1024 * 1024);
    let text = String::from_utf8_lossy(&log);
    assert!(
        text.contains("bytes of output dropped here"),
        "{:.300}",
        text
    );
    assert!(text.ends_with("tail-end\n"));
}

#[test]
fn the_api_agents_log_keeps_the_same_limit() {
    // 3 MB of streamed text before the model's answer, 1 MiB of log.
    let model = mock_model::start(Wire::OpenAi, Mode::Chatty(3_000_000));
    let f = Fixture::new(json!([story("c", &[])]), json!([]), "exit 1");
    f.use_api_agent(&model);
    f.gate("gate.sh", "exit 0");
    write_json(
        &f.repo.join(".cascade/config.json"),
        &json!({"resources": {"max_log_mb": 1}}),
    );
    let out = f
        .cascade(&["approve", "--auto-run", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let log = agent_log(&f, "c");
    assert_eq!(log.len(), 1024 * 1024);
    let text = String::from_utf8_lossy(&log);
    assert!(
        text.starts_with("== cascade: c attempt 1 (implementation) via model"),
        "{:.200}",
        text
    );
    assert!(text.contains("[tool] RunGates"), "the head is kept");
    assert!(
        text.contains("bytes of output dropped here"),
        "{:.300}",
        text
    );
    assert!(
        text.ends_with("the model goes on and on about the story\nc: done, the gates pass\n"),
        "the tail is kept: {}",
        String::from_utf8_lossy(&log[log.len() - 200..])
    );
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).map_err(|e| e.to_string())?;
        let out = StdCommand::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs { mount, _dir: dir })
    }

    /// Bytes still free on it.
    fn free(&self) -> u64 {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(self.mount.as_os_str().as_bytes()).unwrap();
        // SAFETY: statvfs fills `st` for a valid path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        st.f_bavail * st.f_frsize
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = StdCommand::new("umount")
            .arg("-l")
            .arg(&self.mount)
            .status();
    }
}

/// An 8 MiB tmpfs with an empty `repo` directory on it, or `None` after
/// saying why the test skips (mounting needs privileges).
fn small_disk() -> Option<(Tmpfs, PathBuf)> {
    let disk = match Tmpfs::mount("8m") {
        Ok(d) => d,
        Err(why) => {
            println!("skipped: cannot mount a small tmpfs here ({why}); the full-disk path is covered by the unit tests of cascade-fs, cascade-git and cascade-engine");
            return None;
        }
    };
    let repo = disk.mount.join("repo");
    std::fs::create_dir(&repo).unwrap();
    Some((disk, repo))
}

#[test]
fn a_full_disk_stops_the_run_naming_the_disk_and_it_resumes_once_space_is_freed() {
    let Some((disk, repo)) = small_disk() else {
        return;
    };
    // While `$T/fill` exists the agent writes more than the disk holds
    // (ignoring the failure, as a careless agent would).
    let f = Fixture::at(
        repo.clone(),
        json!([story("big", &[])]),
        json!([]),
        r#"if [ -f "$T/fill" ]; then head -c 4000000 /dev/urandom > data.bin 2>/dev/null; fi
echo ok > big.txt
exit 0"#,
    );
    std::fs::write(f.t("fill"), "").unwrap();
    // Leave about 1 MiB free: enough to start, not enough for the agent's data.
    let ballast = disk.mount.join("ballast");
    let keep = 1024 * 1024;
    let size = disk.free().saturating_sub(keep);
    std::fs::write(&ballast, vec![0u8; size as usize]).unwrap();

    let out = f
        .cascade(&["approve", "--auto-run", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    assert!(err.starts_with("error: the disk mounted at '"), "{err}");
    assert!(
        err.contains(&disk.mount.display().to_string()),
        "names the disk: {err}"
    );
    assert!(err.contains("is full"), "{err}");
    assert!(err.contains("cascade resume"), "says what to do: {err}");
    assert!(!err.contains("panicked"), "{err}");
    println!("{err}");
    // Nothing half written: the state reads and the PRD parses, no temp file left.
    let state: Value = crate::common::run_state(&repo);
    // The last state committed (the writes after the disk filled up
    // failed): the story is not done, and resume restarts it.
    let status = state["stories"][0]["status"].as_str().unwrap_or("");
    assert!(["pending", "running"].contains(&status), "{state}");
    let prd_status = f.prd_status("big");
    assert!(
        ["pending", "in_progress"].contains(&prd_status.as_str()),
        "{prd_status}"
    );
    let temps = temp_files(&repo);
    assert!(temps.is_empty(), "temp files left: {temps:?}");

    // Space freed: the run resumes and finishes.
    std::fs::remove_file(&ballast).unwrap();
    std::fs::remove_file(f.t("fill")).unwrap();
    let out = f
        .cascade(&["resume", "--auto-run", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.prd_status("big"), "complete");
}

/// Issue 45 item 4, the exact case: a run refused because the disk is
/// already full (not a byte left for its lock, `.git/info/exclude` or its
/// state) leaves no temp file behind, in `.git/info` or anywhere, and runs
/// once there is space again.
#[test]
fn a_run_refused_on_a_full_disk_leaves_no_temp_file() {
    let Some((disk, repo)) = small_disk() else {
        return;
    };
    let f = Fixture::at(
        repo.clone(),
        json!([story("one", &[])]),
        json!([]),
        "echo ok > one.txt",
    );
    // Not a byte left.
    let ballast = disk.mount.join("ballast");
    std::fs::write(&ballast, vec![0u8; disk.free() as usize]).unwrap();
    let mut filler = std::fs::OpenOptions::new()
        .append(true)
        .open(&ballast)
        .unwrap();
    while std::io::Write::write_all(&mut filler, &[0u8; 4096]).is_ok() {}
    drop(filler);
    assert_eq!(disk.free(), 0);

    let out = f
        .cascade(&["approve", "--auto-run", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(code(&out), 1 | 2), "{}", explain(&out));
    // Said as the OS says it (the first write refused is the run lock's).
    assert!(
        err.contains("No space left on device") && !err.contains("panicked"),
        "{err}"
    );
    let temps = temp_files(&repo);
    assert!(temps.is_empty(), "temp files left: {temps:?}");

    std::fs::remove_file(&ballast).unwrap();
    let out = f
        .cascade(&["approve", "--auto-run", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.prd_status("one"), "complete");
    assert!(temp_files(&repo).is_empty(), "{:?}", temp_files(&repo));
}
