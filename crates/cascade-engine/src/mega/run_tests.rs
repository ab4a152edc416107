//! The mega runner with fake ports over a real temp repository: batching,
//! the `--parallel` share, target gates that fail, blocking.

use std::path::Path;
use std::sync::{Arc, Mutex};

use cascade_process::CancelToken;

use super::events::{MegaEvent, MegaStep};
use super::ports::{FeatureEventFn, FeatureOutcome, FeatureRun, GatesVerdict, MegaPorts};
use super::prd_gen::{AuthorError, PrdCheck};
use super::run::{run_mega, FeatureSpec, MegaOptions, PlanInput};
use super::state::{FeatureStatus, MegaRunStatus};
use crate::events::{RunStatus, StoryCounts};

#[derive(Default)]
struct Fake {
    shares: Mutex<Vec<(String, usize)>>,
    gates_pass: bool,
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
        std::fs::write(prd_path, "{}").map_err(|e| AuthorError::Failed(e.to_string()))
    }

    async fn run_feature(
        &self,
        run: FeatureRun,
        _events: FeatureEventFn,
        _cancel: CancelToken,
    ) -> FeatureOutcome {
        self.shares
            .lock()
            .unwrap()
            .push((run.feature.clone(), run.parallel));
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
        _dir: &Path,
        _cancel: &CancelToken,
    ) -> Result<GatesVerdict, String> {
        Ok(GatesVerdict {
            passed: self.gates_pass,
            summary: if self.gates_pass { "" } else { "tests failed" }.into(),
        })
    }
}

fn git(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
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

async fn run(fake: Arc<Fake>, root: &Path, parallel: usize) -> (MegaRunStatus, Vec<MegaEvent>) {
    let plan = PlanInput {
        path: root.join("mega-plan.json"),
        goal: "g".into(),
        target_branch: None,
        features: vec![spec("a", &[]), spec("b", &[]), spec("c", &["a"])],
        batches: vec![vec!["a".into(), "b".into()], vec!["c".into()]],
    };
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let events = events.clone();
        Arc::new(move |e: &MegaEvent| events.lock().unwrap().push(e.clone()))
    };
    let opts = MegaOptions {
        start_dir: root.to_path_buf(),
        auto_run: true,
        parallel,
        allow_dirty: false,
    };
    let summary = run_mega(fake, plan, opts, sink, None, CancelToken::new())
        .await
        .unwrap();
    let events = events.lock().unwrap().clone();
    (summary.status, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_is_shared_and_everything_lands() {
    let tmp = repo();
    let fake = Arc::new(Fake {
        gates_pass: true,
        ..Default::default()
    });
    let (status, events) = run(fake.clone(), tmp.path(), 4).await;
    assert_eq!(status, MegaRunStatus::Completed);
    let mut shares = fake.shares.lock().unwrap().clone();
    shares.sort();
    // Two features in batch 1 share 4 slots; c runs alone with all of them.
    assert_eq!(
        shares,
        vec![("a".into(), 2), ("b".into(), 2), ("c".into(), 4)]
    );
    let merged: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            MegaEvent::Mega(MegaStep::FeatureMerged { feature, .. }) => Some(feature.clone()),
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
    assert_eq!(status, MegaRunStatus::Failed);
    let state = super::MegaState::load(&tmp.path().join(".cascade"))
        .unwrap()
        .unwrap();
    assert_eq!(state.feature("a").unwrap().status, FeatureStatus::Complete);
    let c = state.feature("c").unwrap();
    assert_eq!(c.status, FeatureStatus::Blocked);
    assert!(c.blocked_by.as_deref().unwrap().contains("gates failing"));
    assert_eq!(state.target_gates.len(), 1);
    assert!(!state.target_gates[0].passed);
    // --parallel 1: one feature at a time, one story slot each.
    assert!(fake.shares.lock().unwrap().iter().all(|(_, p)| *p == 1));
    assert!(events.iter().any(|e| matches!(
        e,
        MegaEvent::Mega(MegaStep::TargetGatesFinished { passed: false, .. })
    )));
}
