//! Sweeps after a child ended: daemons that left the group, descendants
//! that cleared their environment, pipes held open by a daemon.

use std::time::Duration;

use crate::tests::support::{no_proc, pids_in, script};
use crate::{procs, CancelToken, Outcome, Spec};

/// Runs the script `body` (in which `{pids}` names a file the script writes
/// the pids of what it leaves behind to), set up by `spec`; the outcome and
/// those pids, which must all be dead by then.
async fn leaves_nothing(body: &str, spec: impl FnOnce(Spec) -> Spec) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let body = body.replace("{pids}", &pids.display().to_string());
    let s = script(dir.path(), "child", &body);
    let out = spec(Spec::new(&s)).run(&CancelToken::new()).await.unwrap();
    for pid in pids_in(&pids, 1) {
        assert!(
            procs::dead(pid),
            "{pid} outlived its child ({})",
            out.describe()
        );
    }
    out
}

#[tokio::test]
async fn a_daemon_in_its_own_session_dies_with_its_child() {
    if no_proc() {
        return;
    }
    // Output redirected: the daemon does not hold the pipes, so only the
    // token can find it.
    let out = leaves_nothing(
        "setsid sleep 300 >/dev/null 2>&1 </dev/null & echo $! > {pids}; exit 0",
        |s| s,
    )
    .await;
    assert!(out.success() && out.leaked, "{}", out.describe());
}

#[tokio::test]
async fn a_daemon_holding_the_output_pipe_does_not_hang_the_wait() {
    if no_proc() {
        return;
    }
    // `nohup` keeps a pipe as it is: the daemon holds stdout open.
    let out = leaves_nothing(
        "echo before; setsid nohup sleep 300 & echo $! > {pids}; exit 0",
        |s| s.timeout(Duration::from_secs(120)),
    )
    .await;
    assert!(out.success() && out.leaked, "{}", out.describe());
    assert_eq!(out.stdout.text_lossy(), "before\n");
}

#[tokio::test]
async fn descendants_are_found_through_their_parents_when_they_clear_the_token() {
    if no_proc() {
        return;
    }
    // A setsid'd helper (carrying the token) runs a process with an empty
    // environment and waits for it: the inner one is found as the helper's
    // child.
    let out = leaves_nothing(
        "setsid sh -c 'env -i sleep 300 & echo $! > {pids}; wait' >/dev/null 2>&1 & \
         while [ ! -s {pids} ]; do sleep 0.01; done; exit 0",
        |s| s,
    )
    .await;
    assert!(out.success(), "{}", out.describe());
}

#[tokio::test]
async fn a_timed_out_child_takes_its_daemons_along() {
    if no_proc() {
        return;
    }
    let out = leaves_nothing(
        "trap '' TERM; setsid sleep 300 >/dev/null 2>&1 & echo $! > {pids}; while :; do sleep 0.05; done",
        |s| {
            s.timeout(Duration::from_millis(300))
                .grace(Duration::from_millis(100))
        },
    )
    .await;
    assert!(out.timed_out);
}

#[tokio::test]
async fn the_token_reaches_the_child_even_from_an_empty_environment() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "show",
        &format!("echo \"${}\"", super::OWNER_VAR),
    );
    let out = Spec::new(&s)
        .env_clear()
        .env(super::OWNER_VAR, "forged")
        .run(&CancelToken::new())
        .await
        .unwrap();
    let seen = out.stdout.text_lossy();
    let (pid, n) = seen.trim().split_once('.').unwrap();
    assert_eq!(pid, std::process::id().to_string());
    assert!(n.parse::<u64>().is_ok(), "{seen}");
}
