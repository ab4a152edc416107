//! cascade-verify's corpus through a default `approve`, end to end: every
//! case of `crates/cascade-verify/tests/corpus/*.txt` (read by the same
//! reader as that crate's own corpus test) becomes a repository holding the
//! case's base, a one-story plan and a scripted agent that makes the case's
//! change in the story's worktree; a plain `approve` (no retries) must fail
//! a fake case's story as `verification` with exactly the rules the case
//! expects, and merge a legitimate one.
//!
//! Cheap per case: one template repository is built once and copied, and
//! the cases run on as many threads as the machine has cores. The test
//! prints the corpus figures and the time it took.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{
    cascade, code, events, git, init_repo, of_kind, script, write_json, APPROVE_NOW,
};

#[path = "../../crates/cascade-verify/tests/support/cases.rs"]
mod cases;

use cases::Case;

/// What one case's run came to.
struct Outcome {
    exit: i32,
    /// The rule ids of the findings that failed the story.
    rules: BTreeSet<String>,
    /// The story's status at the end (`complete`, `failed`, ...).
    status: String,
    /// Events, for the message when the case is judged wrongly.
    why: String,
}

/// The repository every case starts from: `README.md` and a plan of one
/// story with no gates of its own (a case's `.cascade/gates.json` brings
/// its own), committed.
fn template() -> tempfile::TempDir {
    let repo = init_repo();
    write_json(
        &repo.path().join("prd.json"),
        &json!({
            "goal": "corpus", "objectives": [],
            "stories": [{"id": "s1", "title": "Change the code", "description": "Make the change the plan asks for",
                "priority": "high", "dependencies": [], "status": "pending",
                "acceptance_criteria": ["done"]}],
            "quality_gates": {"enabled": false, "gates": []}
        }),
    );
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "plan"]);
    repo
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().expect("a file in a directory")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// Shell-quoted for the agent's script (single quotes).
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs one case in `work` (a fresh directory): the template copied, the
/// case's base committed, an agent that writes the case's new texts and
/// removes what it removes, and `approve`.
fn run_case(template: &Path, work: &Path, case: &Case) -> Outcome {
    let repo = work.join("repo");
    std::fs::create_dir_all(work).expect("mkdir");
    let out = Command::new("cp")
        .arg("-a")
        .arg(template)
        .arg(&repo)
        .output()
        .expect("cp runs");
    assert!(out.status.success(), "cp -a: {out:?}");
    for (path, text) in case.base() {
        write(&repo, path, text);
    }
    git(&repo, &["add", "-A", "-f"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "base"]);

    let change = work.join("change");
    std::fs::create_dir_all(&change).expect("mkdir");
    for (path, text) in case.written() {
        write(&change, path, text);
    }
    let removed: Vec<String> = case.removed().map(quoted).collect();
    let mut body = String::new();
    if !removed.is_empty() {
        body.push_str(&format!("rm -f -- {}\n", removed.join(" ")));
    }
    body.push_str(&format!(
        "cp -R {}/. .\n",
        quoted(&change.display().to_string())
    ));
    let agent = script(&work.join("agent.sh"), &body);
    let agents = work.join("agents.json");
    write_json(
        &agents,
        &json!({"default_agent": "a", "agents": {"a": {"type": "cli", "command": agent.display().to_string(), "args": [], "timeout": 60}}}),
    );
    let out = cascade(&repo)
        .args(APPROVE_NOW)
        .arg("--json")
        .arg("--agents")
        .arg(&agents)
        .timeout(Duration::from_secs(180))
        .output()
        .expect("cascade runs");
    let events = events(&out);
    let rules = of_kind(&events, "verification_finished")
        .iter()
        .flat_map(|e| e["findings"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f["rule"].as_str().map(str::to_string))
        .collect();
    let status = of_kind(&events, "story_merged")
        .first()
        .map(|_| "complete")
        .or_else(|| of_kind(&events, "story_failed").first().map(|_| "failed"))
        .unwrap_or("neither merged nor failed")
        .to_string();
    let why = events
        .iter()
        .filter(|e| {
            matches!(
                e["event"].as_str(),
                Some("verification_finished" | "story_failed" | "notice" | "run_finished")
            )
        })
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    Outcome {
        exit: code(&out),
        rules,
        status,
        why: format!("{why}\nstderr: {}", String::from_utf8_lossy(&out.stderr)),
    }
}

/// What is wrong with a case's outcome, if anything.
fn judge(case: &Case, o: &Outcome) -> Option<String> {
    let label = format!("{}: '{}'", case.area, case.name);
    match &case.expect {
        Some(expect) if o.exit != 1 || o.status != "failed" || &o.rules != expect => Some(format!(
            "{label} (fake): expected a failed story with {expect:?}, got exit {} ({}) with {:?}\n{}",
            o.exit, o.status, o.rules, o.why
        )),
        None if o.exit != 0 || o.status != "complete" || !o.rules.is_empty() => Some(format!(
            "{label} (legitimate): expected a merge, got exit {} ({}) with {:?}\n{}",
            o.exit, o.status, o.rules, o.why
        )),
        _ => None,
    }
}

#[test]
fn every_corpus_case_is_judged_right_by_a_default_approve() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/cascade-verify/tests/corpus");
    let cases = cases::all(&dir);
    assert!(
        cases.iter().filter(|c| c.expect.is_none()).count() >= 20,
        "fewer than 20 legitimate cases"
    );
    let template = template();
    let scratch = tempfile::tempdir().expect("temp dir");
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = AtomicUsize::new(0);
    let problems = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let work = scratch.path().join(i.to_string());
                let outcome = run_case(template.path(), &work, case);
                if let Some(p) = judge(case, &outcome) {
                    problems.lock().expect("no thread panicked").push(p);
                }
                // Each case's repository is done with: free the disk.
                let _ = std::fs::remove_dir_all(&work);
            });
        }
    });
    let took = started.elapsed();
    let problems = problems.into_inner().expect("no thread panicked");
    let fake = cases.iter().filter(|c| c.expect.is_some()).count();
    let legit = cases.len() - fake;
    let wrong_fake = problems.iter().filter(|p| p.contains("(fake)")).count();
    let wrong_legit = problems.len() - wrong_fake;
    println!(
        "corpus through approve: {}/{fake} fake changes failed with the expected findings, {}/{legit} legitimate changes merged; {} cases on {threads} threads in {:.1} s ({:.0} ms a case)",
        fake - wrong_fake,
        legit - wrong_legit,
        cases.len(),
        took.as_secs_f64(),
        took.as_millis() as f64 / cases.len().max(1) as f64,
    );
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
