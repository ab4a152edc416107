//! End-to-end tests: what an interrupted run says. The closing line of a
//! run stopped by Ctrl-C names the command that continues it (and that
//! command does), and a second Ctrl-C names the process groups it killed
//! (agents by their story, gates by their name and story).
//! A mega run's closing line is tested in tests/e2e/mega.rs.
//!
//! The run is inspect.rs's fixture: a scripted agent that waits for a
//! `release` file, ignoring SIGTERM when a `stubborn` marker is there (so
//! that it is still running when the second signal arrives: the first one
//! gives it a grace period of 2 s before SIGKILL).

use std::time::Duration;

use crate::common::{code, explain};
use crate::inspect::{stdout, wait_until, Run};

/// `approve` of every batch at once, no pause before a retry.
const APPROVE_ALL: [&str; 4] = ["approve", "--auto-run", "--retry-delay", "0"];

/// A background `approve` of `run` whose agents of `stories` all started.
fn started(run: &Run, stories: &[&str], parallel: &str) -> std::process::Child {
    for s in stories {
        std::fs::write(run.t(&format!("wait-{s}")), "").expect("marker");
    }
    let child = run.spawn(&[&APPROVE_ALL[..], &["--parallel", parallel]].concat());
    assert!(
        wait_until(Duration::from_secs(60), || stories
            .iter()
            .all(|s| run.agent_started(s))),
        "the agents never started"
    );
    child
}

fn sigint(child: &std::process::Child) {
    // SAFETY: a plain signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
}

#[test]
fn an_interrupted_run_says_cascade_resume_continues_it_and_it_does() {
    let run = Run::new(&["slow"]);
    let child = started(&run, &["slow"], "1");
    sigint(&child);
    let out = child.wait_with_output().expect("approve ends");
    assert_eq!(code(&out), 130, "{}", explain(&out));
    let text = stdout(&out);
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("run interrupted: 0 complete, 0 failed, 0 blocked, 1 pending in ")
            && last.ends_with("; `cascade resume` continues it"),
        "the closing line: {last:?}\n{}",
        explain(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("second interrupt"), "one signal only: {err}");

    // What the line says works: the same story, continued, lands.
    std::fs::write(run.t("release"), "").expect("release");
    let resumed = run.cascade(&["resume"]);
    assert_eq!(code(&resumed), 0, "{}", explain(&resumed));
    let text = stdout(&resumed);
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.starts_with("run completed: 1 complete")),
        "{}",
        explain(&resumed)
    );
    assert!(
        run.repo().join("slow.txt").is_file(),
        "{}",
        explain(&resumed)
    );
}

/// Ctrl-C twice, 0.2 s apart (within the first signal's grace period, so
/// what ignores SIGTERM is still there), to `child`: it exits 130 and
/// says `line` on stderr, with nothing left alive after SIGKILL.
fn interrupt_twice_says(child: std::process::Child, line: &str) {
    sigint(&child);
    std::thread::sleep(Duration::from_millis(200));
    sigint(&child);
    let out = child.wait_with_output().expect("approve ends");
    assert_eq!(code(&out), 130, "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines().any(|l| l == line),
        "{line:?}:\n{}",
        explain(&out)
    );
    assert!(!err.contains("did not end"), "{}", explain(&out));
}

#[test]
fn a_second_interrupt_says_which_agent_process_groups_it_stopped() {
    let run = Run::new(&["story-a", "story-b"]);
    std::fs::write(run.t("stubborn"), "").expect("marker");
    let child = started(&run, &["story-a", "story-b"], "2");
    interrupt_twice_says(
        child,
        "second interrupt: stopped 2 agent process groups (story-a, story-b)",
    );
}

#[test]
fn a_second_interrupt_names_a_gate_and_its_story() {
    let run = Run::new(&["gated"]);
    std::fs::write(run.t("hang-gate"), "").expect("marker");
    let child = run.spawn(&APPROVE_ALL);
    assert!(
        wait_until(Duration::from_secs(60), || run.t("gate-started").exists()),
        "the story's gate never started"
    );
    interrupt_twice_says(
        child,
        "second interrupt: stopped 1 gate process group (check of gated)",
    );
}
