//! Tests of supervised children with small scripts written to temp dirs.

use super::*;

#[path = "../tests/support/mod.rs"]
pub(crate) mod support;
use support::script;

async fn wait_dead(pid: u32) -> bool {
    for _ in 0..50 {
        if procs::dead(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn wait_group_gone(pgid: u32) -> bool {
    for _ in 0..50 {
        if !group_alive(pgid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn success_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let ok = script(dir.path(), "ok", "echo hello; echo oops >&2; exit 0");
    let out = Spec::new(&ok).run(&CancelToken::new()).await.unwrap();
    assert!(out.success());
    assert!(!out.leaked);
    assert_eq!(out.stdout.text_lossy(), "hello\n");
    assert_eq!(out.stderr.text_lossy(), "oops\n");

    let bad = script(dir.path(), "bad", "exit 7");
    let out = Spec::new(&bad).run(&CancelToken::new()).await.unwrap();
    assert!(!out.success());
    assert_eq!(out.exit_code, Some(7));
    assert_eq!(out.describe(), "exit code 7");
}

#[tokio::test]
async fn argv_reaches_the_child_intact() {
    let dir = tempfile::tempdir().unwrap();
    let echo = script(
        dir.path(),
        "echo-args",
        r#"for a in "$@"; do printf '%s\0' "$a"; done"#,
    );
    let nasty = [
        "$(touch pwned)",
        "a b  c",
        "'single' \"double\" `tick`",
        "; rm -rf / #",
        "line1\nline2",
        "*",
    ];
    let out = Spec::new(&echo)
        .args(nasty)
        .cwd(dir.path())
        .run(&CancelToken::new())
        .await
        .unwrap();
    let got: Vec<String> = out
        .stdout
        .text_lossy()
        .split('\0')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(got, nasty);
    assert!(!dir.path().join("pwned").exists());
}

#[tokio::test]
async fn a_held_slot_is_given_back_when_the_group_is_killed_not_after_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    // The leader hangs past its timeout; a process that left its group
    // holds stdout open, so the wait goes on through the leak window and
    // the sweep after the group is killed.
    let hang = script(dir.path(), "hang", "setsid sleep 30 & sleep 30");
    let mut running = Spec::new(&hang)
        .timeout(Duration::from_millis(200))
        .grace(Duration::from_millis(100))
        .spawn()
        .unwrap();
    let (slot, released) = tokio::sync::oneshot::channel::<()>();
    running.hold_until_exit(slot);
    let cancel = CancelToken::new();
    let wait = running.wait(&cancel);
    tokio::pin!(wait);
    // The slot comes back first; the outcome after it.
    tokio::select! {
        biased;
        out = &mut wait => panic!("the wait ended before the slot was given back: {out:?}"),
        r = released => assert!(r.is_err(), "the slot is dropped, never sent"),
    }
    let out = wait.await;
    assert!(out.timed_out);
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild.pid");
    let hang = script(
        dir.path(),
        "hang",
        &format!("sleep 300 & echo $! > {}; wait", pidfile.display()),
    );
    // Long enough for a loaded machine to start the shell and write the pid.
    let out = Spec::new(&hang)
        .timeout(Duration::from_millis(1500))
        .grace(Duration::from_millis(200))
        .run(&CancelToken::new())
        .await
        .unwrap();
    assert!(out.timed_out);
    assert!(!out.success());
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_dead(grandchild).await,
        "grandchild {grandchild} survived"
    );
    assert!(wait_group_gone(out.pid).await);
}

#[tokio::test]
async fn term_ignoring_child_is_killed_after_grace() {
    let dir = tempfile::tempdir().unwrap();
    let stubborn = script(
        dir.path(),
        "stubborn",
        "trap '' TERM; while :; do sleep 0.05; done",
    );
    let out = Spec::new(&stubborn)
        .timeout(Duration::from_millis(200))
        .grace(Duration::from_millis(200))
        .run(&CancelToken::new())
        .await
        .unwrap();
    assert!(out.timed_out);
    assert_eq!(out.signal, Some(libc::SIGKILL));
    assert!(wait_group_gone(out.pid).await);
}

#[tokio::test]
async fn cancellation_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let hang = script(dir.path(), "hang", "sleep 300");
    let cancel = CancelToken::new();
    let running = Spec::new(&hang).spawn().unwrap();
    let pid = running.pid();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let out = running.wait(&cancel).await;
    assert!(out.cancelled);
    assert!(wait_dead(pid).await);
}

#[tokio::test]
async fn leaked_grandchild_is_killed_after_leader_exits() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("leak.pid");
    let leak = script(
        dir.path(),
        "leak",
        &format!("sleep 300 & echo $! > {}; exit 0", pidfile.display()),
    );
    let out = Spec::new(&leak).run(&CancelToken::new()).await.unwrap();
    assert!(out.success());
    assert!(out.leaked);
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_dead(grandchild).await);
}

#[tokio::test]
async fn huge_output_keeps_a_bounded_tail_and_a_full_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("logs/out.log");
    // 4 MiB of output.
    let big = script(
        dir.path(),
        "big",
        "head -c 4194304 /dev/zero | tr '\\0' 'x'; echo END",
    );
    let out = Spec::new(&big)
        .tail_bytes(1024)
        .log(&log)
        .run(&CancelToken::new())
        .await
        .unwrap();
    assert!(out.success());
    assert_eq!(out.stdout.total_bytes, 4 * 1024 * 1024 + 4);
    assert_eq!(out.stdout.tail.len(), 1024);
    assert!(out.stdout.truncated());
    assert!(out.stdout.text_lossy().ends_with("xEND\n"));
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 4 * 1024 * 1024 + 4);
}

#[tokio::test]
async fn invalid_utf8_is_decoded_lossily() {
    let dir = tempfile::tempdir().unwrap();
    let bin = script(dir.path(), "bin", r"printf 'ok \377\376 done\n'");
    let out = Spec::new(&bin).run(&CancelToken::new()).await.unwrap();
    assert_eq!(out.stdout.tail, b"ok \xff\xfe done\n");
    assert_eq!(out.stdout.text_lossy(), "ok \u{fffd}\u{fffd} done\n");
}

#[tokio::test]
async fn stdout_lines_reach_the_callback() {
    let dir = tempfile::tempdir().unwrap();
    let lines = script(dir.path(), "lines", r"printf 'one\r\ntwo\nthree'");
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = seen.clone();
    let out = Spec::new(&lines)
        .on_stdout_line(Arc::new(move |l: &[u8]| {
            sink.lock()
                .unwrap()
                .push(String::from_utf8_lossy(l).into_owned())
        }))
        .run(&CancelToken::new())
        .await
        .unwrap();
    assert!(out.success());
    assert_eq!(*seen.lock().unwrap(), ["one", "two", "three"]);
}

#[tokio::test]
async fn env_cwd_and_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "envy",
        r#"printf '%s|%s|' "$CASCADE_X" "$(pwd)"; cat"#,
    );
    let out = Spec::new(&s)
        .env("CASCADE_X", "x y")
        .cwd(dir.path())
        .stdin_bytes("from stdin")
        .run(&CancelToken::new())
        .await
        .unwrap();
    let canon = dir.path().canonicalize().unwrap();
    assert_eq!(
        out.stdout.text_lossy(),
        format!("x y|{}|from stdin", canon.display())
    );
}

#[tokio::test]
async fn missing_program_and_dir_are_typed_errors() {
    let err = Spec::new("cascade-no-such-program-xyz")
        .spawn()
        .err()
        .unwrap();
    assert!(matches!(err, SpawnError::NotFound { .. }), "{err}");
    let err = Spec::new("true")
        .cwd("/nonexistent/cascade/dir")
        .spawn()
        .err()
        .unwrap();
    assert!(matches!(err, SpawnError::NoWorkingDir { .. }), "{err}");
}

#[test]
fn pid_alive_checks() {
    assert!(pid_alive(std::process::id()));
    assert!(!pid_alive(0));
    assert!(!pid_alive(u32::MAX));
}

#[tokio::test]
async fn an_enormous_timeout_means_no_deadline() {
    let out = Spec::new("true")
        .timeout(Duration::from_secs(u64::MAX))
        .run(&CancelToken::new())
        .await
        .unwrap();
    assert!(out.success());
    assert!(!out.timed_out);
}

#[tokio::test]
async fn a_stderr_watcher_can_stop_the_group_without_it_reading_as_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    // The child forks a sleeper (same group), then reports a fatal problem
    // on stderr and keeps running, as a CLI that retries forever does.
    let s = script(
        dir.path(),
        "retrying",
        "sleep 300 & echo 'fatal: bad key' >&2; sleep 300",
    );
    let stop = CancelToken::new();
    let trigger = stop.clone();
    let out = Spec::new(&s)
        .on_stderr_line(Arc::new(move |l: &[u8]| {
            if l.starts_with(b"fatal") {
                trigger.cancel();
            }
        }))
        .stop_token(stop)
        .timeout(Duration::from_secs(120))
        .run(&CancelToken::new())
        .await
        .unwrap();
    assert!(out.stopped);
    assert!(!out.cancelled && !out.timed_out && !out.success());
    assert!(
        out.describe().starts_with("stopped after"),
        "{}",
        out.describe()
    );
    assert_eq!(out.stderr.text_lossy(), "fatal: bad key\n");
    assert!(
        wait_group_gone(out.pid).await,
        "the forked sleeper is gone too"
    );
}
