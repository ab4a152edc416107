//! End-to-end test of `cascade demo`, the README's first command: a scratch
//! repository, the bundled plan and the offline agent, a real run with gates.

use crate::common::*;

/// Runs `cascade demo <args> --dir <tmp>/demo`; asserts success and
/// returns the directory (kept alive by the temp dir) and stdout.
fn run_demo(tmp: &tempfile::TempDir, args: &[&str]) -> (std::path::PathBuf, String) {
    let dir = tmp.path().join("demo");
    let out = cascade(tmp.path())
        .arg("demo")
        .args(args)
        .arg("--dir")
        .arg(&dir)
        .timeout(std::time::Duration::from_secs(600))
        .output()
        .expect("cascade demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "demo {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, stdout)
}

#[test]
fn demo_runs_the_whole_pipeline() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (dir, stdout) = run_demo(&tmp, &["--json"]);
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("every JSON line parses"))
        .collect();
    let last = events.last().expect("events");
    assert_eq!(last["event"], "run_finished");
    assert_eq!(last["status"], "completed");
    assert_eq!(last["stories"]["complete"], 6);
    assert_eq!(last["stories"]["failed"], 0);

    // story-004 fails its gate on the first attempt and passes on the retry.
    let retries: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "retry_scheduled")
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0]["story"], "story-004");
    let merged: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "story_merged")
        .filter_map(|e| e["story"].as_str())
        .collect();
    assert_eq!(merged.len(), 6);
    assert_eq!(merged[0], "story-001");
    assert_eq!(merged[5], "story-006");

    // Every story landed on main, the tree is clean and no worktree is left.
    let log = git(&dir, &["log", "--format=%s", "main"]);
    for id in 1..=6 {
        assert!(log.contains(&format!("story-00{id}")), "{log}");
    }
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");
    assert_eq!(git(&dir, &["worktree", "list"]).lines().count(), 1);
    let progress = std::fs::read_to_string(dir.join("progress.txt")).expect("progress.txt");
    assert!(progress.contains("story-004: [RETRY]"), "{progress}");
}

#[test]
fn demo_plan_goes_from_the_goal_to_merged_code() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (dir, stdout) = run_demo(&tmp, &["--plan"]);
    // The planner and a different challenger ran, with one revision.
    assert!(
        stdout.contains("planner: demo, challenger: demo-reviewer"),
        "{stdout}"
    );
    assert!(
        stdout.contains("challenge 1 by demo-reviewer: NEEDS_REVISION"),
        "{stdout}"
    );
    assert!(
        stdout.contains("challenge 2 by demo-reviewer: APPROVED"),
        "{stdout}"
    );
    // The revision is in the plan that ran, and every story landed on main.
    let prd = std::fs::read_to_string(dir.join("prd.json")).expect("prd.json");
    assert!(
        prd.contains("report(\\\"\\\") is a valid markdown document"),
        "{prd}"
    );
    let log = git(&dir, &["log", "--format=%s", "main"]);
    for id in 1..=6 {
        assert!(log.contains(&format!("story-00{id}")), "{log}");
    }
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");
}
