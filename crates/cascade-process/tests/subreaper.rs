//! The process-wide guarantees: a subreaper kills adopted orphans when
//! nothing supervised runs, and `kill_all` leaves nothing alive. Its own
//! test binary (one process) because both change the whole process: the
//! subreaper flag, and `kill_all` refusing new children afterwards.

mod support;

use std::time::Duration;

use cascade_process::{procs, CancelToken, Spec};
use support::{pids_in, script};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_adopted_and_kill_all_leaves_nothing_alive() {
    let me = std::process::id();
    if procs::stat(me).is_none() || !cascade_process::become_subreaper() {
        println!("skipped: no /proc or no PR_SET_CHILD_SUBREAPER on this system");
        return;
    }
    assert!(cascade_process::is_subreaper());
    let dir = tempfile::tempdir().unwrap();

    // 1. A child leaves a daemon with an empty environment (no token) in a
    //    session of its own, then exits: only adoption can find it. With
    //    nothing else supervised running, it is killed when the child is done.
    let orphan_file = dir.path().join("orphan.pid");
    let leaver = script(
        dir.path(),
        "leaver",
        &format!(
            // Waits until the daemon is `sleep` (so past `env -i` and
            // `setsid`: without the token, in a session and group of its
            // own), so that the sweep of this child cannot find it by
            // token or group. An empty environment alone is seen already
            // while `setsid` has not yet left this child's group, and the
            // group kill then took the orphan (CI, under load).
            "env -i setsid sleep 300 >/dev/null 2>&1 </dev/null & d=$!; i=0; \
             while [ \"$(cat /proc/$d/comm 2>/dev/null)\" != sleep ] && [ $i -lt 3000 ]; do i=$((i+1)); sleep 0.01; done; \
             echo $d >> {}; exit 0",
            orphan_file.display()
        ),
    );
    let out = Spec::new(&leaver).run(&CancelToken::new()).await.unwrap();
    assert!(out.success());
    let orphan = pids_in(&orphan_file, 1)[0];
    assert!(procs::dead(orphan), "adopted orphan {orphan} survived");

    // 2. While another child runs (so no sweep of orphans follows), a child
    //    leaves a daemon in a session of its own, with the token, and exits:
    //    the child's sweep finds it among this process's descendants (it
    //    was adopted; a subreaper's sweep reads only its own tree), and a
    //    grandchild that cleared its token below a live daemon through its
    //    parent link.
    let blocker = Spec::new("sleep").arg("300").spawn().unwrap();
    let daemon_file = dir.path().join("daemon.pid");
    let daemonizer = script(
        dir.path(),
        "daemonizer",
        &format!(
            "setsid sh -c 'env -i sleep 300 & echo $$ $! >> {f}; wait' >/dev/null 2>&1 </dev/null & \
             while [ \"$(wc -w < {f} 2>/dev/null)\" != 2 ]; do sleep 0.01; done; exit 0",
            f = daemon_file.display()
        ),
    );
    let out = Spec::new(&daemonizer)
        .run(&CancelToken::new())
        .await
        .unwrap();
    assert!(out.success() && out.leaked, "{}", out.describe());
    for pid in pids_in(&daemon_file, 2) {
        assert!(
            procs::dead(pid),
            "{pid} outlived its child under a subreaper"
        );
    }
    drop(blocker);

    // 3. Three children that ignore TERM and INT, each with a daemon, and
    //    one more orphan left while they run (so it is not swept at once).
    let pids_file = dir.path().join("pids");
    let stubborn = script(
        dir.path(),
        "stubborn",
        &format!(
            "trap '' TERM INT; setsid sleep 300 >/dev/null 2>&1 & echo $$ $! >> {}; while :; do sleep 0.05; done",
            pids_file.display()
        ),
    );
    let running: Vec<_> = (0..3)
        .map(|i| {
            Spec::new(&stubborn)
                .label("agent", format!("story-{i}"))
                .spawn()
                .unwrap()
        })
        .collect();
    let mut pids = pids_in(&pids_file, 6);
    let out = Spec::new(&leaver).run(&CancelToken::new()).await.unwrap();
    assert!(out.success());
    let second_orphan = pids_in(&orphan_file, 2)[1];
    let adopted = procs::stat(second_orphan).expect("the orphan runs");
    assert!(adopted.alive());
    assert_eq!(adopted.ppid, me, "the orphan was adopted by this process");
    pids.push(second_orphan);

    let killed = tokio::task::spawn_blocking(|| cascade_process::kill_all(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(killed.left.is_empty(), "still alive: {:?}", killed.left);
    // The groups it stopped are named as their specs labelled them.
    let named: Vec<(&str, &str)> = killed
        .groups
        .iter()
        .map(|l| (l.kind.as_str(), l.name.as_str()))
        .collect();
    assert_eq!(
        named,
        [
            ("agent", "story-0"),
            ("agent", "story-1"),
            ("agent", "story-2")
        ]
    );
    for pid in &pids {
        assert!(procs::dead(*pid), "{pid} survived kill_all");
    }
    assert!(cascade_process::stopping());
    assert!(
        Spec::new("true").spawn().is_err(),
        "a child started after kill_all"
    );
    drop(running);
}
