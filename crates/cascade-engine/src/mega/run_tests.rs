//! The mega runner with fake ports over a real temp repository: batching,
//! one shared `--parallel` limit, target gates that fail, blocking, a
//! pause that holds the next feature batch.

use std::path::Path;
use std::sync::{Arc, Mutex};

use cascade_process::CancelToken;
use tokio::sync::{Notify, Semaphore};

use super::ports::{FeatureOutcome, FeatureRun, GatesVerdict, MegaPorts};
use super::prd_gen::{AuthorError, PrdCheck};
use super::run::{run_mega, FeatureSpec, MegaOptions, PlanInput};
use super::state::FeatureStatus;
use crate::control::steer::{Action, Steering};
use crate::events::{Event, RunStatus, StoryCounts};
use cascade_test_support::git;

#[derive(Default)]
struct Fake {
    /// Per feature run: its name, its engine's own limit and the shared slots.
    shares: Mutex<Vec<(String, usize, Arc<Semaphore>)>>,
    gates_pass: bool,
    /// Where the target's gates ran, and whether `target.txt` was there.
    gate_dirs: Mutex<Vec<(std::path::PathBuf, bool)>>,
    /// Feature `a` says it started (first) and waits to be released (second).
    hold_a: Option<(Arc<Notify>, Arc<Notify>)>,
    /// The feature whose stories fail.
    failing: Option<&'static str>,
    /// PRDs written; with `spent_by_prd`, the first one spends the run's
    /// budget (as a PRD agent's charge over `--max-cost` does).
    prds: std::sync::atomic::AtomicUsize,
    spent_by_prd: bool,
}

impl MegaPorts for Fake {
    fn check_prd(&self, _path: &Path) -> PrdCheck {
        Ok(1)
    }

    async fn write_prd(
        &self,
        _feature: &str,
        _worktree: &Path,
        _attempt: u32,
        _prompt: &str,
        prd_path: &Path,
        _cancel: &CancelToken,
    ) -> Result<(), AuthorError> {
        self.prds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::fs::write(prd_path, "{}").map_err(|e| AuthorError::Failed(e.to_string()))
    }

    fn budget_exhausted(&self) -> Option<String> {
        let written = self.prds.load(std::sync::atomic::Ordering::SeqCst);
        (self.spent_by_prd && written > 0).then(|| "the run spent its budget".to_string())
    }

    async fn run_feature(
        &self,
        run: FeatureRun,
        _events: crate::events::EventSink,
        _cancel: CancelToken,
    ) -> FeatureOutcome {
        self.shares
            .lock()
            .unwrap()
            .push((run.feature.clone(), run.parallel, run.slots.clone()));
        if let (Some((started, release)), "a") = (&self.hold_a, run.feature.as_str()) {
            started.notify_one();
            release.notified().await;
        }
        if self.failing == Some(run.feature.as_str()) {
            return FeatureOutcome {
                status: RunStatus::Failed,
                stories: StoryCounts {
                    failed: 1,
                    ..Default::default()
                },
                failures: vec!["story-001: quality gate 'tests' failed".into()],
                error: None,
            };
        }
        std::fs::write(run.worktree.join(format!("{}.txt", run.feature)), "x").unwrap();
        cascade_git::commit::commit_all(&run.worktree, &run.feature).unwrap();
        FeatureOutcome {
            status: RunStatus::Completed,
            stories: StoryCounts {
                complete: 1,
                ..Default::default()
            },
            failures: vec![],
            error: None,
        }
    }

    async fn target_gates(
        &self,
        dir: &Path,
        _cancel: &CancelToken,
    ) -> Result<GatesVerdict, String> {
        self.gate_dirs
            .lock()
            .unwrap()
            .push((dir.to_path_buf(), dir.join("a.txt").is_file()));
        Ok(GatesVerdict {
            passed: self.gates_pass,
            summary: if self.gates_pass { "" } else { "tests failed" }.into(),
        })
    }
}

fn repo() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    git(p, &["init", "-q", "-b", "main"]);
    git(p, &["config", "user.name", "t"]);
    git(p, &["config", "user.email", "t@t"]);
    std::fs::write(p.join("README.md"), "x").unwrap();
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "init"]);
    tmp
}

fn spec(name: &str, deps: &[&str]) -> FeatureSpec {
    FeatureSpec {
        id: name.into(),
        name: name.into(),
        title: name.to_uppercase(),
        description: String::new(),
        priority: "medium".into(),
        dependencies: deps.iter().map(|d| d.to_string()).collect(),
    }
}

async fn run(fake: Arc<Fake>, root: &Path, parallel: usize) -> (RunStatus, Vec<Event>) {
    run_into(fake, root, parallel, None).await
}

async fn run_into(
    fake: Arc<Fake>,
    root: &Path,
    parallel: usize,
    target: Option<&str>,
) -> (RunStatus, Vec<Event>) {
    run_steered(fake, root, parallel, target, None, |_| {}).await
}

/// A run steered through `steering`; `watch` sees every event as it comes.
async fn run_steered(
    fake: Arc<Fake>,
    root: &Path,
    parallel: usize,
    target: Option<&str>,
    steering: Option<Steering>,
    watch: impl Fn(&Event) + Send + Sync + 'static,
) -> (RunStatus, Vec<Event>) {
    let plan = PlanInput {
        path: root.join("mega-plan.json"),
        goal: "g".into(),
        target_branch: target.map(str::to_string),
        features: vec![spec("a", &[]), spec("b", &[]), spec("c", &["a"])],
        batches: vec![vec!["a".into(), "b".into()], vec!["c".into()]],
        execution_mode: None,
    };
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let events = events.clone();
        Arc::new(move |e: &Event| {
            events.lock().unwrap().push(e.clone());
            watch(e);
        })
    };
    let opts = MegaOptions {
        start_dir: root.to_path_buf(),
        auto_run: true,
        parallel,
        allow_dirty: false,
        remember: None,
        steering,
        integration: crate::config::Integration::Gate,
    };
    let summary = run_mega(fake, plan, opts, sink, None, CancelToken::new())
        .await
        .unwrap();
    let events = events.lock().unwrap().clone();
    (summary.status, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prd_that_spends_the_budget_starts_no_other_prd_agent_nor_any_feature() {
    let tmp = repo();
    let fake = Arc::new(Fake {
        gates_pass: true,
        spent_by_prd: true,
        ..Default::default()
    });
    // One slot: a and b write their PRDs one after the other.
    let (status, events) = run(fake.clone(), tmp.path(), 1).await;
    assert_eq!(status, RunStatus::BudgetExhausted, "{events:#?}");
    assert_eq!(fake.prds.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(fake.shares.lock().unwrap().is_empty(), "a feature ran");
    let said: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::MegaNotice { message } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        said.iter()
            .any(|m| m.contains("does not start its stories")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|m| m.contains("its PRD agent does not start")),
        "{said:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_is_shared_and_everything_lands() {
    let tmp = repo();
    let fake = Arc::new(Fake {
        gates_pass: true,
        ..Default::default()
    });
    let (status, events) = run(fake.clone(), tmp.path(), 4).await;
    assert_eq!(status, RunStatus::Completed);
    let mut shares = fake.shares.lock().unwrap().clone();
    shares.sort_by(|x, y| x.0.cmp(&y.0));
    let names: Vec<&str> = shares.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    // Every feature engine may run up to 4 stories, and all of them draw
    // from the one semaphore of 4 permits (none held after the run).
    for (name, parallel, slots) in &shares {
        assert_eq!(*parallel, 4, "{name}");
        assert!(Arc::ptr_eq(slots, &shares[0].2), "{name}");
    }
    assert_eq!(shares[0].2.available_permits(), 4);
    let merged: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::FeatureMerged { feature, .. } => Some(feature.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(merged, ["a", "b", "c"]);
    assert!(tmp.path().join("c.txt").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_target_gates_block_later_batches() {
    let tmp = repo();
    let fake = Arc::new(Fake::default());
    let (status, events) = run(fake.clone(), tmp.path(), 1).await;
    assert_eq!(status, RunStatus::Failed);
    let state = super::MegaState::load(&tmp.path().join(".cascade"))
        .unwrap()
        .unwrap();
    assert_eq!(state.feature("a").unwrap().status, FeatureStatus::Complete);
    let c = state.feature("c").unwrap();
    assert_eq!(c.status, FeatureStatus::Blocked);
    assert!(c.blocked_by.as_deref().unwrap().contains("gates failing"));
    assert_eq!(state.target_gates.len(), 1);
    assert!(!state.target_gates[0].passed);
    // --parallel 1: one slot in all.
    assert!(fake
        .shares
        .lock()
        .unwrap()
        .iter()
        .all(|(_, p, s)| *p == 1 && s.available_permits() == 1));
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::TargetGatesFinished { passed: false, .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_not_checked_out_gets_its_gates_in_a_throwaway_worktree() {
    let tmp = repo();
    git(tmp.path(), &["branch", "release"]);
    let fake = Arc::new(Fake {
        gates_pass: true,
        ..Default::default()
    });
    let (status, _) = run_into(fake.clone(), tmp.path(), 2, Some("release")).await;
    assert_eq!(status, RunStatus::Completed);
    let dirs = fake.gate_dirs.lock().unwrap().clone();
    // Once per batch, on the merged target (a is in it), and once on b's
    // merge (integration gating: a landed after b started), never in the
    // main worktree (still on main), and nothing is left behind.
    assert_eq!(dirs.len(), 3, "{dirs:?}");
    assert!(dirs[0].0.ends_with("_integration-b"), "{dirs:?}");
    for (dir, has_a) in &dirs {
        assert!(*has_a, "{dirs:?}");
        assert!(dir.starts_with(tmp.path().join(".cascade")), "{dirs:?}");
        assert!(!dir.exists(), "{dirs:?}");
    }
    assert!(!tmp.path().join("a.txt").exists());
    let branches = std::process::Command::new("git")
        .args(["branch", "--list", "cascade/*"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(branches.stdout.is_empty(), "{branches:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_starts_no_feature_batch_until_resumed() {
    let tmp = repo();
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let fake = Arc::new(Fake {
        gates_pass: true,
        hold_a: Some((started.clone(), release.clone())),
        ..Default::default()
    });
    let steering = Steering::new();
    let waiting = Arc::new(Notify::new());
    let run = {
        let (root, steering, waiting) =
            (tmp.path().to_path_buf(), steering.clone(), waiting.clone());
        tokio::spawn(async move {
            let watch = move |e: &Event| {
                if matches!(e, Event::MegaNotice { message } if message.contains("feature batch 2 starts once it is resumed"))
                {
                    waiting.notify_one();
                }
            };
            run_steered(fake, &root, 2, None, Some(steering), watch).await
        })
    };
    // Batch 1 runs (feature a holds): pause, then let it finish.
    started.notified().await;
    assert!(steering.request(Action::Pause, None, "ui").await.is_ok());
    release.notify_one();
    // Batch 1 lands; batch 2 waits for the resume.
    waiting.notified().await;
    let state = super::MegaState::load(&tmp.path().join(".cascade"))
        .unwrap()
        .unwrap();
    assert_eq!(state.feature("a").unwrap().status, FeatureStatus::Complete);
    assert_eq!(state.feature("c").unwrap().status, FeatureStatus::Pending);
    assert!(steering.request(Action::Resume, None, "ui").await.is_ok());
    let (status, events) = run.await.unwrap();
    assert_eq!(status, RunStatus::Completed);
    // In order: the pause (answered as the run's own control event), batch
    // 1, the wait, the resume, batch 2.
    let said: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Control {
                action, ok: true, ..
            } => Some(action.clone()),
            Event::FeatureBatchStarted { batch, .. } => Some(format!("batch {batch}")),
            Event::MegaNotice { message } if message.contains("paused") => Some("waits".into()),
            _ => None,
        })
        .collect();
    assert_eq!(said, ["batch 1", "pause", "waits", "resume", "batch 2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_feature_blocks_its_dependents_and_their_batch_never_starts() {
    let tmp = repo();
    let fake = Arc::new(Fake {
        gates_pass: true,
        failing: Some("a"),
        ..Default::default()
    });
    let (status, events) = run(fake.clone(), tmp.path(), 2).await;
    assert_eq!(status, RunStatus::Failed);
    let state = super::MegaState::load(&tmp.path().join(".cascade"))
        .unwrap()
        .unwrap();
    let a = state.feature("a").unwrap();
    assert_eq!(a.status, FeatureStatus::Failed);
    assert_eq!(
        a.failure.as_ref().map(|f| f.kind),
        Some(super::FailureKind::StoriesFailed)
    );
    assert_eq!(state.feature("b").unwrap().status, FeatureStatus::Complete);
    let c = state.feature("c").unwrap();
    assert_eq!(
        (c.status, c.blocked_by.as_deref()),
        (FeatureStatus::Blocked, Some("a"))
    );
    // c never ran, and batch 2 (only c) was never started.
    let ran: Vec<String> = fake
        .shares
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.0.clone())
        .collect();
    assert!(!ran.contains(&"c".to_string()), "{ran:?}");
    let said: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::FeatureBatchStarted { batch, .. } => Some(format!("batch {batch}")),
            Event::FeatureFailed { feature, .. } => Some(format!("{feature} failed")),
            Event::FeatureMerged { feature, .. } => Some(format!("{feature} merged")),
            Event::FeatureBlocked {
                feature,
                blocked_by,
            } => Some(format!("{feature} blocked by {blocked_by}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        said,
        ["batch 1", "a failed", "b merged", "c blocked by a"],
        "{said:?}"
    );
}
