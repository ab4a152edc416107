//! The engine's own overhead, and how close its schedules get to the
//! critical-path bound.
//!
//! Criterion groups (quick: `cargo bench --bench engine -- --quick`):
//! - `git`: the per-story git work in isolation: creating and removing a
//!   story worktree (alone, and eight at once), handing a pooled worktree
//!   to the next story (what the engine does instead: detach, new branch,
//!   check out only the difference, clear leftovers; on 200 and on 10,000
//!   files), committing an agent's change,
//!   merging a story branch into the checked-out main branch (fast-forward and
//!   true merge).
//! - `engine`: whole runs of a flat plan with instant agents (a tiny `/bin/sh`
//!   script that writes one file), `--parallel 8`, eager schedule; throughput
//!   in stories per second. `CASCADE_BENCH_STORIES` sets the plan size
//!   (default 50).
//!
//! One-shot report (`CASCADE_BENCH_REPORT=1 cargo bench --bench engine -- --quick report`,
//! printed to stderr, not a criterion measurement):
//! - a 1,000-story run (`CASCADE_BENCH_REPORT_STORIES`) with `--parallel 8`:
//!   stories/s and the mean time per story split into worktree creation (until
//!   the agent starts), the agent, commit, and merge + bookkeeping (commit
//!   until merged), taken from the engine's own events;
//! - makespan of a plan whose agents sleep known durations, for `batch` and
//!   `eager`, against the critical-path bound;
//! - the engine against a bare git worktree loop doing the same work by hand
//!   (`git worktree add -b`, the agent, `git add -A` + `git commit`, `git
//!   merge` into the checked-out main, `git worktree remove`, one story after
//!   the other) at `CASCADE_BENCH_LOOP_STORIES` (200) instant stories:
//!   alternated pairs, median ratio engine / loop; and the engine's time per
//!   story at 200 and at the 1,000 stories above (flat means no growth).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cascade_engine::config::{EngineConfig, RunOptions};
use cascade_engine::engine::Engine;
use cascade_engine::scheduler::Discipline;
use cascade_engine::{Event, EventSink, RunStatus};
use cascade_git::merge::{merge_into, MergeOptions};
use cascade_git::{commit, worktree, RepoPaths};
use cascade_process::CancelToken;
use criterion::{criterion_group, BatchSize, Criterion, Throughput};

#[macro_use]
#[path = "support/mod.rs"]
mod support;

// ---------------------------------------------------------------------------
// Fixtures

/// A repository on `main` with a small source tree committed and cascade's
/// files excluded, like a user's project.
fn project(dir: &Path, files: usize) -> RepoPaths {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    for i in 0..files {
        std::fs::write(
            dir.join(format!("src/m{i}.rs")),
            format!("pub fn f{i}() -> u32 {{ {i} }}\n"),
        )
        .unwrap();
    }
    std::fs::write(dir.join("README.md"), "bench\n").unwrap();
    commit::init_repository(dir, "main").unwrap();
    commit::commit_all(dir, "init").unwrap();
    let paths = RepoPaths::discover(dir).unwrap();
    paths
        .ensure_excluded(cascade_engine::config::OWN_FILES)
        .unwrap();
    paths
}

fn script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An agents.json (outside the repository) with one agent running `script`.
fn agents(dir: &Path, script_path: &Path, env: serde_json::Value) -> PathBuf {
    let path = dir.join("agents.json");
    let value = serde_json::json!({
        "default_agent": "bench",
        "agents": {"bench": {"type": "cli", "command": script_path, "args": [], "timeout": 120, "env": env}},
        "phase_defaults": {}
    });
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    path
}

/// A prd.json of `deps.len()` stories `s0000`, ... with the given dependencies
/// (indices) and no gates.
fn prd(root: &Path, deps: &[Vec<usize>]) {
    let stories: Vec<serde_json::Value> = deps
        .iter()
        .enumerate()
        .map(|(i, d)| {
            serde_json::json!({
                "id": format!("s{i:04}"),
                "title": format!("story {i}"),
                "description": "bench",
                "priority": "medium",
                "dependencies": d.iter().map(|j| format!("s{j:04}")).collect::<Vec<_>>(),
                "status": "pending",
                "acceptance_criteria": ["done"]
            })
        })
        .collect();
    let value = serde_json::json!({
        "metadata": {"version": "1.0"},
        "goal": "bench",
        "objectives": [],
        "stories": stories,
        "quality_gates": {"enabled": false, "gates": []}
    });
    std::fs::write(
        root.join("prd.json"),
        serde_json::to_string(&value).unwrap(),
    )
    .unwrap();
}

/// Event times per story, recorded by the sink.
struct Timeline {
    started: Instant,
    events: Vec<(Duration, Event)>,
}

fn run_engine(
    root: &Path,
    agents_path: &Path,
    parallel: usize,
    schedule: Discipline,
) -> (Duration, Arc<Mutex<Timeline>>) {
    let mut config = EngineConfig::new(root, "prd.json");
    config.agents_path = Some(agents_path.to_path_buf());
    let engine = Engine::new(config);
    let options = RunOptions {
        parallel,
        schedule,
        ..RunOptions::default()
    };
    let timeline = Arc::new(Mutex::new(Timeline {
        started: Instant::now(),
        events: Vec::new(),
    }));
    let sink: EventSink = {
        let t = Arc::clone(&timeline);
        Arc::new(move |e: &Event| {
            let mut t = t.lock().unwrap();
            let at = t.started.elapsed();
            t.events.push((at, e.clone()));
        })
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let start = Instant::now();
    let summary = rt
        .block_on(engine.run(options, sink, &CancelToken::new()))
        .unwrap();
    let took = start.elapsed();
    assert_eq!(summary.status, RunStatus::Completed, "{:?}", summary.counts);
    (took, timeline)
}

/// A fresh repository with a flat plan of `n` stories and an instant agent.
fn flat_setup(n: usize) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    project(&root, 20);
    prd(&root, &vec![Vec::new(); n]);
    let agent = tmp.path().join("agent.sh");
    script(
        &agent,
        "echo \"$CASCADE_STORY_ID\" > \"$CASCADE_STORY_ID.txt\"",
    );
    let agents_path = agents(tmp.path(), &agent, serde_json::json!({}));
    (tmp, root, agents_path)
}

// ---------------------------------------------------------------------------
// Criterion groups

/// Benchmarks handing the pooled worktree of `paths` from story to story.
fn reuse_bench(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    paths: &RepoPaths,
    name: &str,
) {
    g.bench_function(name, |b| {
        let slot = worktree::slot_path(paths, None, 1);
        worktree::create(paths, &slot, "cascade/reuse-0", "main").unwrap();
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            std::fs::write(slot.join("leftover.txt"), format!("{i}")).unwrap();
            worktree::detach(paths, &slot, true).unwrap();
            worktree::reuse(paths, &slot, &format!("cascade/reuse-{i}"), "main").unwrap();
        });
        worktree::remove(paths, &slot, true).unwrap();
    });
}

/// Registers `n` linked worktrees of `paths` as `git worktree add
/// --no-checkout -b cascade/kept-<i>` would (their admin entries and `.git`
/// files, written directly: quicker than `n` real ones, the same to read).
fn keep_worktrees(paths: &RepoPaths, n: usize) {
    let repo = git2::Repository::open(&paths.main_root).unwrap();
    let tip = repo.refname_to_id("refs/heads/main").unwrap();
    let root = worktree::root(paths);
    for i in 0..n {
        let branch = format!("cascade/kept-{i}");
        repo.reference(&format!("refs/heads/{branch}"), tip, true, "kept")
            .unwrap();
        let dir = root.join(format!("kept-{i}"));
        let admin = paths.common_dir.join("worktrees").join(format!("kept-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&admin).unwrap();
        std::fs::write(admin.join("HEAD"), format!("ref: refs/heads/{branch}\n")).unwrap();
        std::fs::write(admin.join("commondir"), "../..\n").unwrap();
        std::fs::write(
            admin.join("gitdir"),
            format!("{}\n", dir.join(".git").display()),
        )
        .unwrap();
        std::fs::write(dir.join(".git"), format!("gitdir: {}\n", admin.display())).unwrap();
    }
}

fn git_ops(c: &mut Criterion) {
    let mut g = c.benchmark_group("git");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(5));

    let tmp = tempfile::tempdir().unwrap();
    let paths = project(&tmp.path().join("repo"), 200);
    let repo = git2::Repository::open(&paths.main_root).unwrap();
    let base = repo.refname_to_id("refs/heads/main").unwrap();

    g.bench_function("worktree_create_remove_200_files", |b| {
        let path = worktree::path_for(&paths, "cascade/bench");
        b.iter(|| {
            worktree::create(&paths, &path, "cascade/bench", "main").unwrap();
            worktree::remove(&paths, &path, true).unwrap();
        })
    });

    // Eight stories starting at once, as with `--parallel 8`: checkouts and
    // deletions run outside cascade-git's bookkeeping lock.
    g.bench_function("worktree_create_remove_8_parallel_200_files", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                for i in 0..8 {
                    let paths = &paths;
                    s.spawn(move || {
                        let branch = format!("cascade/par{i}");
                        let path = worktree::path_for(paths, &branch);
                        worktree::create(paths, &path, &branch, "main").unwrap();
                        worktree::remove(paths, &path, true).unwrap();
                    });
                }
            })
        })
    });

    // A pooled worktree passed from story to story: the previous story left
    // an untracked file; the next one starts at the tip of main. On 200
    // files, and on 10,000 (what a reuse costs as the tree grows: one
    // status scan of it).
    reuse_bench(&mut g, &paths, "worktree_reuse_200_files");
    let large_tmp = tempfile::tempdir().unwrap();
    let large = project(&large_tmp.path().join("repo"), 10_000);
    reuse_bench(&mut g, &large, "worktree_reuse_10000_files");

    // The same among 1,000 worktrees that failed stories kept (a long run
    // keeps every failed story's worktree): what a story pays for each.
    let kept_tmp = tempfile::tempdir().unwrap();
    let kept = project(&kept_tmp.path().join("repo"), 20);
    keep_worktrees(&kept, 1_000);
    reuse_bench(&mut g, &kept, "worktree_reuse_among_1000_kept_worktrees");

    let wt_path = worktree::path_for(&paths, "cascade/commits");
    worktree::create(&paths, &wt_path, "cascade/commits", "main").unwrap();
    let mut n = 0u64;
    g.bench_function("commit_all_one_changed_file", |b| {
        b.iter(|| {
            n += 1;
            std::fs::write(wt_path.join("src/m0.rs"), format!("// {n}\n")).unwrap();
            commit::commit_all(&wt_path, "change").unwrap().unwrap();
        })
    });
    worktree::remove(&paths, &wt_path, true).unwrap();

    // A story branch with one new file on top of `parent`, made without a worktree.
    let k = std::cell::Cell::new(0u64);
    let story_branch = |parent: git2::Oid| -> String {
        k.set(k.get() + 1);
        let i = k.get();
        let parent = repo.find_commit(parent).unwrap();
        let blob = repo.blob(format!("story {i}\n").as_bytes()).unwrap();
        let mut tb = git2::build::TreeUpdateBuilder::new();
        tb.upsert(format!("stories/s{i}.txt"), blob, git2::FileMode::Blob);
        let tree = tb.create_updated(&repo, &parent.tree().unwrap()).unwrap();
        let tree = repo.find_tree(tree).unwrap();
        let sig = git2::Signature::now("b", "b@b").unwrap();
        let oid = repo
            .commit(None, &sig, &sig, "story", &tree, &[&parent])
            .unwrap();
        let name = format!("cascade/m{i}");
        repo.branch(&name, &repo.find_commit(oid).unwrap(), true)
            .unwrap();
        name
    };
    g.bench_function("merge_fast_forward_checked_out", |b| {
        b.iter_batched(
            || story_branch(repo.refname_to_id("refs/heads/main").unwrap()),
            |branch| {
                let out =
                    merge_into(&paths, "main", &branch, "m", &MergeOptions::default()).unwrap();
                assert!(out.new_tip().is_some());
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("merge_true_merge_checked_out", |b| {
        b.iter_batched(
            || story_branch(base),
            |branch| {
                let out =
                    merge_into(&paths, "main", &branch, "m", &MergeOptions::default()).unwrap();
                assert!(out.new_tip().is_some());
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn engine_overhead(c: &mut Criterion) {
    let n: usize = std::env::var("CASCADE_BENCH_STORIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function(format!("flat_{n}_stories_instant_agents_parallel_8"), |b| {
        b.iter_batched(
            || flat_setup(n),
            |(_tmp, root, agents_path)| {
                run_engine(&root, &agents_path, 8, Discipline::Eager);
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

// ---------------------------------------------------------------------------
// One-shot report

fn mean(xs: &[Duration]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.iter().map(Duration::as_secs_f64).sum::<f64>() / xs.len() as f64 * 1000.0
}

/// Per-story phases from the engine's events: agent (started -> finished),
/// commit (finished -> committed) and merge (committed -> merged, including
/// the wait in the serial merge queue). The engine emits no event when it
/// starts preparing a story, so worktree creation, prompt building and state
/// bookkeeping are what remains of each story's share of the slots.
fn breakdown(timeline: &Timeline, took: Duration, n: usize, parallel: usize) {
    let mut started: HashMap<String, Duration> = HashMap::new();
    let mut agent_done: HashMap<String, Duration> = HashMap::new();
    let mut committed: HashMap<String, Duration> = HashMap::new();
    let (mut agent, mut commit_t, mut merge_t) = (Vec::new(), Vec::new(), Vec::new());
    for (at, e) in &timeline.events {
        match e {
            Event::StoryStarted { story, .. } => {
                started.insert(story.clone(), *at);
            }
            Event::AgentFinished { story, .. } => {
                if let Some(s) = started.get(story) {
                    agent.push(*at - *s);
                }
                agent_done.insert(story.clone(), *at);
            }
            Event::StoryCommitted { story, .. } => {
                if let Some(s) = agent_done.get(story) {
                    commit_t.push(*at - *s);
                }
                committed.insert(story.clone(), *at);
            }
            Event::StoryMerged { story, .. } => {
                if let Some(s) = committed.get(story) {
                    merge_t.push(*at - *s);
                }
            }
            _ => {}
        }
    }
    let per_story_slot = took.as_secs_f64() * 1000.0 * parallel as f64 / n as f64;
    let (a, c, m) = (mean(&agent), mean(&commit_t), mean(&merge_t));
    eprintln!(
        "  {n} stories in {:.2}s = {:.1} stories/s (parallel {parallel})",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    eprintln!(
        "  per story (mean, ms): agent process {a:.1}, commit {c:.1}, merge incl. queue wait {m:.1}; \
         slot time per story {per_story_slot:.1} => worktree creation + prompt + bookkeeping ~{:.1}",
        (per_story_slot - a - c - m).max(0.0)
    );
}

/// Longest path through `deps` with node weights `w`.
fn critical_path(deps: &[Vec<usize>], w: &[f64]) -> f64 {
    let mut finish = vec![0.0f64; deps.len()];
    for i in 0..deps.len() {
        let start = deps[i].iter().map(|&d| finish[d]).fold(0.0, f64::max);
        finish[i] = start + w[i];
    }
    finish.into_iter().fold(0.0, f64::max)
}

fn makespan(schedule: Discipline, deps: &[Vec<usize>], secs: &[f64]) -> f64 {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    project(&root, 5);
    prd(&root, deps);
    let durations = tmp.path().join("durations");
    std::fs::create_dir(&durations).unwrap();
    for (i, s) in secs.iter().enumerate() {
        std::fs::write(durations.join(format!("s{i:04}")), format!("{s}")).unwrap();
    }
    let agent = tmp.path().join("agent.sh");
    script(
        &agent,
        "sleep \"$(cat \"$DURATIONS/$CASCADE_STORY_ID\")\"\necho \"$CASCADE_STORY_ID\" > \"$CASCADE_STORY_ID.txt\"",
    );
    let agents_path = agents(
        tmp.path(),
        &agent,
        serde_json::json!({"DURATIONS": durations}),
    );
    let (took, _) = run_engine(&root, &agents_path, 8, schedule);
    took.as_secs_f64()
}

/// The bare loop: every story of a flat plan done with the git CLI, one
/// after the other, in a repository set up like [`flat_setup`]'s.
fn bare_git_loop(n: usize) -> Duration {
    let (tmp, root, _) = flat_setup(n);
    let agent = tmp.path().join("agent.sh");
    let git = support::git;
    let start = Instant::now();
    for i in 0..n {
        let id = format!("s{i:04}");
        let branch = format!("cascade/{id}");
        let wt = tmp.path().join(format!("wt-{id}"));
        let wt_arg = wt.to_string_lossy().into_owned();
        git(
            &root,
            &["worktree", "add", "-q", "-b", &branch, &wt_arg, "main"],
        );
        let ok = std::process::Command::new(&agent)
            .current_dir(&wt)
            .env("CASCADE_STORY_ID", &id)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "agent");
        git(&wt, &["add", "-A"]);
        git(&wt, &["commit", "-q", "-m", &id]);
        git(&root, &["merge", "-q", "--no-edit", &branch]);
        git(&root, &["worktree", "remove", "--force", &wt_arg]);
    }
    start.elapsed()
}

/// The engine (eager, `--parallel 8`) against [`bare_git_loop`] at `n`
/// stories, alternated `pairs` times; prints the median ratio.
fn engine_vs_loop(n: usize, pairs: usize) -> f64 {
    let mut ratios = Vec::new();
    let mut engine_ms = Vec::new();
    for _ in 0..pairs {
        let (_tmp, root, agents_path) = flat_setup(n);
        let (took, _) = run_engine(&root, &agents_path, 8, Discipline::Eager);
        let bare = bare_git_loop(n);
        eprintln!(
            "  pair: engine {:.2}s, bare loop {:.2}s => {:.2}x",
            took.as_secs_f64(),
            bare.as_secs_f64(),
            took.as_secs_f64() / bare.as_secs_f64()
        );
        ratios.push(took.as_secs_f64() / bare.as_secs_f64());
        engine_ms.push(took.as_secs_f64() * 1000.0 / n as f64);
    }
    ratios.sort_by(f64::total_cmp);
    engine_ms.sort_by(f64::total_cmp);
    eprintln!(
        "  median engine / bare loop at {n} stories: {:.2}x (min {:.2}, max {:.2}); engine {:.1} ms per story (median)",
        ratios[pairs / 2],
        ratios[0],
        ratios[pairs - 1],
        engine_ms[pairs / 2]
    );
    engine_ms[pairs / 2]
}

fn report(c: &mut Criterion) {
    // Registered as a (trivial) criterion function so `-- report` selects it.
    c.bench_function("report_marker", |b| b.iter(|| 1 + 1));
    if std::env::var_os("CASCADE_BENCH_REPORT").is_none() {
        return;
    }
    let n: usize = std::env::var("CASCADE_BENCH_REPORT_STORIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    eprintln!("\nengine overhead, flat plan, instant agents, eager, --parallel 8:");
    let (_tmp, root, agents_path) = flat_setup(n);
    let (took, timeline) = run_engine(&root, &agents_path, 8, Discipline::Eager);
    breakdown(&timeline.lock().unwrap(), took, n, 8);
    let big_per_story = took.as_secs_f64() * 1000.0 / n as f64;

    let loop_n: usize = std::env::var("CASCADE_BENCH_LOOP_STORIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    eprintln!("\nengine vs a bare git worktree loop, flat plan, instant agents:");
    let small_per_story = engine_vs_loop(loop_n, 3);
    eprintln!(
        "  engine per story: {small_per_story:.1} ms at {loop_n} stories, {big_per_story:.1} ms at {n} ({:.2}x)",
        big_per_story / small_per_story
    );

    // Two chains: a long one of two 1.2s stories and a short one of five
    // 0.3s stories. Batches pair them up layer by layer (1.2 + 1.2 + 3 x 0.3
    // = 3.3s); eager runs the chains side by side (bound: 2.4s).
    let deps = vec![vec![], vec![0], vec![], vec![2], vec![3], vec![4], vec![5]];
    let secs = [1.2, 1.2, 0.3, 0.3, 0.3, 0.3, 0.3];
    let bound = critical_path(&deps, &secs);
    eprintln!(
        "\nmakespan, sleeping agents (critical-path bound {bound:.2}s, parallelism not limiting):"
    );
    for (name, d) in [("batch", Discipline::Batch), ("eager", Discipline::Eager)] {
        let m = makespan(d, &deps, &secs);
        eprintln!(
            "  {name:5}: {m:.2}s = {:.0}% of the bound ({:+.0}%)",
            m / bound * 100.0,
            (m / bound - 1.0) * 100.0
        );
    }
}

criterion_group!(benches, git_ops, engine_overhead, report);
bench_main!(benches);
