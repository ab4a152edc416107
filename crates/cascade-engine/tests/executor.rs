//! The executor seam without any transport: a fake executor plays the
//! worker (it commits the story's work on a child of the job's base, onto
//! the story branch) and the engine's own scheduler, merge queue and state
//! do the rest. The fleet's real transport is tested end to end in
//! `tests/e2e/fleet.rs`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use cascade_engine::config::{EngineConfig, RunOptions};
use cascade_engine::engine::Engine;
use cascade_engine::executor::{
    ExecContext, ExecFuture, Executed, Executor, ExecutorHandle, Job, JobFailure, JobOutcome,
    JobReport,
};
use cascade_engine::{Event, FailureKind, RetryPolicy, RunStatus};
use cascade_process::CancelToken;
use cascade_test_support::git;

fn repo_with_plan() -> tempfile::TempDir {
    let stories = serde_json::json!([
        {"id": "s1", "title": "one", "description": "", "priority": "high", "dependencies": [], "status": "pending", "acceptance_criteria": []},
        {"id": "s2", "title": "two", "description": "", "priority": "high", "dependencies": ["s1"], "status": "pending", "acceptance_criteria": []}
    ]);
    repo_with_stories(stories)
}

fn repo_with_stories(stories: serde_json::Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    git(p, &["init", "-q", "-b", "main"]);
    git(p, &["config", "user.name", "t"]);
    git(p, &["config", "user.email", "t@example.com"]);
    std::fs::write(p.join("README.md"), "x\n").unwrap();
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "init"]);
    let prd = serde_json::json!({
        "goal": "g",
        "x-team": "kept",
        "stories": stories,
        "quality_gates": {"enabled": false, "gates": []}
    });
    std::fs::write(p.join("prd.json"), serde_json::to_vec_pretty(&prd).unwrap()).unwrap();
    dir
}

/// Commits `<story>.txt` on a child of the job's base, onto the story branch.
struct FakeWorker {
    fail_with: Option<FailureKind>,
    jobs: Mutex<Vec<Job>>,
}

impl FakeWorker {
    async fn work(&self, job: Job, cx: ExecContext) -> Executed {
        self.jobs.lock().unwrap().push(job.clone());
        if let Some(kind) = self.fail_with {
            return Executed::NotRun(JobFailure {
                agent: "none".into(),
                kind,
                error: "no live worker can run it".into(),
                gate_summary: String::new(),
                output_excerpt: String::new(),
                findings: String::new(),
            });
        }
        let repo = git2::Repository::open(&cx.repo).unwrap();
        let base = repo
            .find_commit(git2::Oid::from_str(&job.base).unwrap())
            .unwrap();
        let blob = repo.blob(format!("{}\n", job.story).as_bytes()).unwrap();
        let mut tb = repo.treebuilder(Some(&base.tree().unwrap())).unwrap();
        tb.insert(format!("{}.txt", job.story), blob, 0o100644)
            .unwrap();
        let tree = repo.find_tree(tb.write().unwrap()).unwrap();
        let sig = git2::Signature::now("w", "w@example.com").unwrap();
        let msg = format!("{}: {}", job.story, job.title);
        let oid = repo
            .commit(None, &sig, &sig, &msg, &tree, &[&base])
            .unwrap();
        repo.reference(
            &format!("refs/heads/{}", cx.story_branch),
            oid,
            true,
            "fake worker",
        )
        .unwrap();
        Executed::Ran {
            worker: "fake-1".into(),
            report: JobReport {
                agent: "scripted".into(),
                outcome: JobOutcome::Passed {
                    commit: oid.to_string(),
                },
                gates: vec![],
                input_tokens: Some(10),
                output_tokens: Some(5),
                cost_usd: Some(0.01),
                duration_ms: 1,
                judged: None,
            },
        }
    }
}

impl Executor for FakeWorker {
    fn execute(&self, job: Job, cx: ExecContext) -> ExecFuture<'_> {
        Box::pin(self.work(job, cx))
    }
}

async fn run(dir: &Path, worker: Arc<FakeWorker>) -> (RunStatus, Vec<Event>) {
    run_watched(dir, worker, 2, |_| {}).await
}

/// A run with `parallel` slots whose events also go to `watch` (called on
/// the emitting thread, before the event is kept).
async fn run_watched(
    dir: &Path,
    worker: Arc<FakeWorker>,
    parallel: usize,
    watch: impl Fn(&Event) + Send + Sync + 'static,
) -> (RunStatus, Vec<Event>) {
    let engine = Engine::new(EngineConfig::new(dir, dir.join("prd.json")));
    let options = RunOptions {
        parallel,
        retry: RetryPolicy {
            max_retries: 0,
            base_delay: std::time::Duration::ZERO,
            ..RetryPolicy::default()
        },
        executor: Some(ExecutorHandle(worker)),
        ..RunOptions::default()
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink: cascade_engine::EventSink = {
        let seen = Arc::clone(&seen);
        Arc::new(move |e: &Event| {
            watch(e);
            seen.lock().unwrap().push(e.clone())
        })
    };
    let summary = engine
        .run(options, sink, &CancelToken::new())
        .await
        .unwrap();
    let events = seen.lock().unwrap().clone();
    (summary.status, events)
}

#[tokio::test]
async fn an_executor_does_the_work_and_the_engine_merges_it_in_dependency_order() {
    let dir = repo_with_plan();
    let worker = Arc::new(FakeWorker {
        fail_with: None,
        jobs: Mutex::new(Vec::new()),
    });
    let (status, events) = run(dir.path(), Arc::clone(&worker)).await;
    assert_eq!(status, RunStatus::Completed, "{events:#?}");
    assert_eq!(git(dir.path(), &["show", "main:s1.txt"]), "s1");
    assert_eq!(git(dir.path(), &["show", "main:s2.txt"]), "s2");
    let jobs = worker.jobs.lock().unwrap().clone();
    assert_eq!(jobs.len(), 2);
    // s2's job starts from a base that holds s1 (merged first), and its
    // PRD holds only s2, without the dependency.
    assert_eq!(jobs[1].story, "s2");
    let base_has_s1 = git(dir.path(), &["ls-tree", "--name-only", &jobs[1].base]);
    assert!(base_has_s1.lines().any(|l| l == "s1.txt"), "{base_has_s1}");
    let stories = jobs[1].prd["stories"].as_array().unwrap();
    assert_eq!(stories.len(), 1);
    assert_eq!(stories[0]["id"], "s2");
    assert_eq!(stories[0]["dependencies"], serde_json::json!([]));
    assert_eq!(stories[0]["status"], "pending");
    // The plan around it travels whole, unknown fields too.
    assert_eq!(jobs[1].prd["goal"], "g");
    assert_eq!(jobs[1].prd["x-team"], "kept");
    assert_eq!(jobs[1].prd["quality_gates"]["enabled"], false);
    let merged: Vec<Option<String>> = events
        .iter()
        .filter_map(|e| match e {
            Event::StoryMerged { worker, .. } => Some(worker.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        merged,
        vec![Some("fake-1".to_string()), Some("fake-1".to_string())]
    );
}

#[tokio::test]
async fn a_job_no_worker_can_run_fails_the_story_and_blocks_its_dependents() {
    let dir = repo_with_plan();
    let worker = Arc::new(FakeWorker {
        fail_with: Some(FailureKind::AgentUnavailable),
        jobs: Mutex::new(Vec::new()),
    });
    let (status, events) = run(dir.path(), worker).await;
    assert_eq!(status, RunStatus::Failed);
    let failed: Vec<FailureKind> = events
        .iter()
        .filter_map(|e| match e {
            Event::StoryFailed { error_type, .. } => Some(*error_type),
            _ => None,
        })
        .collect();
    assert_eq!(failed, vec![FailureKind::AgentUnavailable]);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::StoryBlocked { story, .. } if story == "s2")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stories_waiting_for_the_merge_queue_together_merge_in_one_turn() {
    const N: usize = 6;
    let stories: Vec<serde_json::Value> = (1..=N)
        .map(|i| serde_json::json!({"id": format!("s{i}"), "title": format!("story {i}"), "description": "", "priority": "high", "dependencies": [], "status": "pending", "acceptance_criteria": []}))
        .collect();
    let dir = repo_with_stories(serde_json::Value::Array(stories));
    let worker = Arc::new(FakeWorker {
        fail_with: None,
        jobs: Mutex::new(Vec::new()),
    });
    // The first turn's merge waits (in the event sink, before it starts)
    // until every other story has its work and queues behind it: they
    // then wait together for the next turn.
    let committed = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
    let first_turn = std::sync::Once::new();
    let watch = {
        let committed = Arc::clone(&committed);
        move |e: &Event| match e {
            Event::StoryCommitted { .. } => {
                *committed.0.lock().unwrap() += 1;
                committed.1.notify_all();
            }
            Event::MergeStarted { .. } => first_turn.call_once(|| {
                let all = committed.0.lock().unwrap();
                let _ =
                    committed
                        .1
                        .wait_timeout_while(all, std::time::Duration::from_secs(20), |n| *n < N);
            }),
            _ => {}
        }
    };
    let moves_before = git(dir.path(), &["reflog", "show", "--format=%H", "main"])
        .lines()
        .count();
    let (status, events) = run_watched(dir.path(), Arc::clone(&worker), N, watch).await;
    assert_eq!(status, RunStatus::Completed, "{events:#?}");
    // Every story is merged, with its own merge commit (or the first's
    // fast-forward) on main's first-parent line, its merge announced first.
    for i in 1..=N {
        let story = format!("s{i}");
        assert_eq!(
            git(dir.path(), &["show", &format!("main:{story}.txt")]),
            story
        );
        let at = |want: fn(&Event) -> Option<&str>| {
            events.iter().position(|e| want(e) == Some(story.as_str()))
        };
        let started = at(|e| match e {
            Event::MergeStarted { story, .. } => Some(story),
            _ => None,
        });
        let merged = at(|e| match e {
            Event::StoryMerged { story, .. } => Some(story),
            _ => None,
        });
        assert!(
            started.is_some() && started < merged,
            "{story}: {events:#?}"
        );
    }
    let line = git(
        dir.path(),
        &["log", "--first-parent", "--format=%s", "main"],
    );
    let merges = line
        .lines()
        .filter(|l| l.starts_with("Merge cascade/"))
        .count();
    assert!(merges >= N - 1, "{line}");
    // ...yet main moved fewer times than there are stories: the stories
    // that waited together merged in one turn.
    let moves = git(dir.path(), &["reflog", "show", "--format=%H", "main"])
        .lines()
        .count()
        - moves_before;
    assert!(moves < N, "main moved {moves} times for {N} stories");
}
