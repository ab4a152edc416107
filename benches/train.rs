//! What integration gating costs a run: eight independent stories, each
//! writing its own file (instant scripted agent), one required gate that
//! takes a second (`sleep 1`), `--parallel 8 --gate-jobs 8`, a whole engine
//! run each time (worktrees, agents, commits, verification, gates, merges).
//!
//! - `train/trust`: `--integration trust`, every story merged on the
//!   strength of its own gate;
//! - `train/gate`: the default, every merge that is not a fast-forward
//!   gated as merged first (the merge train: stories waiting together are
//!   gated at once within `--gate-jobs`).
//!
//! Issue 46 asks the gated makespan to stay within 1.5x of trust.
//! `cargo bench --bench train -- --quick`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cascade_engine::config::{EngineConfig, Integration, RunOptions};
use cascade_engine::scheduler::Discipline;
use criterion::{criterion_group, BatchSize, Criterion};

#[macro_use]
#[path = "support/mod.rs"]
mod support;

/// Stories in the run, all ready at once.
const STORIES: usize = 8;

/// A repository on `main` with the stories and the gate, and an agents.json
/// (outside it) whose agent writes `<story>.txt`.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("README.md"), "bench\n").unwrap();
    let stories: Vec<serde_json::Value> = (1..=STORIES)
        .map(|i| {
            serde_json::json!({"id": format!("s{i}"), "title": format!("story {i}"),
                "description": "bench", "priority": "medium", "dependencies": [],
                "status": "pending", "acceptance_criteria": ["done"]})
        })
        .collect();
    let prd = serde_json::json!({
        "metadata": {"version": "1.0"}, "goal": "bench", "objectives": [],
        "stories": stories,
        "quality_gates": {"enabled": true, "fail_fast": false, "use_cache": false,
            "gates": [{"name": "slow", "type": "test", "command": "sleep",
                "args": ["1"], "required": true}]}
    });
    std::fs::write(root.join("prd.json"), prd.to_string()).unwrap();
    cascade_git::commit::init_repository(&root, "main").unwrap();
    cascade_git::commit::commit_all(&root, "init").unwrap();
    cascade_git::RepoPaths::discover(&root)
        .unwrap()
        .ensure_excluded(cascade_engine::config::OWN_FILES)
        .unwrap();
    let agent = tmp.path().join("agent.sh");
    support::write_script(
        &agent,
        "printf '%s\\n' \"$CASCADE_STORY_ID\" > \"$CASCADE_STORY_ID.txt\"",
    );
    let agents_path = tmp.path().join("agents.json");
    let doc = serde_json::json!({"default_agent": "writer", "agents": {
        "writer": {"type": "cli", "command": agent, "args": [], "timeout": 60}}});
    std::fs::write(&agents_path, doc.to_string()).unwrap();
    (tmp, root, agents_path)
}

/// One whole run of the stories with `integration`.
fn run(root: &Path, agents_path: &Path, integration: Integration) {
    let mut config = EngineConfig::new(root, "prd.json");
    config.agents_path = Some(agents_path.to_path_buf());
    let options = RunOptions {
        parallel: STORIES,
        gate_jobs: Some(STORIES),
        schedule: Discipline::Eager,
        integration,
        ..RunOptions::default()
    };
    support::run_to_completion(config, options);
}

fn train(c: &mut Criterion) {
    let mut g = c.benchmark_group("train");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(30));
    for (name, integration) in [("trust", Integration::Trust), ("gate", Integration::Gate)] {
        g.bench_function(name, |b| {
            b.iter_batched(
                setup,
                |(_tmp, root, agents_path)| run(&root, &agents_path, integration),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, train);
bench_main!(benches);
