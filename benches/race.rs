//! What a race costs over running its slowest contestant alone: one story,
//! instant scripted agents (a `/bin/sh` line that writes 1, 10 or 40
//! lines), one required gate (`test -f README.md`: it must pass on the base,
//! which is judged first), a whole engine run each
//! time (worktree, agent, commit, verification, gate, merge).
//!
//! - `race/slowest_alone`: the story run once by `forty` (the biggest
//!   change: the most to commit, verify and diff);
//! - `race/three_contestants`: `--race one,ten,forty --parallel 3`, the
//!   rule comparing all three (`--race-until all`);
//! - `race/three_until_first`: the same with `--race-until first`.
//!
//! The difference between the first and the others is the race's overhead:
//! two more worktrees, agents, commits and gate runs at once, the scoring
//! (a diff per contestant) and the losers' worktrees going back to the pool.
//! `cargo bench --bench race -- --quick`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cascade_engine::config::{EngineConfig, RunOptions};
use cascade_engine::race::{RaceOptions, RaceSpec, RaceUntil};
use criterion::{criterion_group, BatchSize, Criterion};

#[macro_use]
#[path = "support/mod.rs"]
mod support;

/// The contestants: name and how many lines they write.
const AGENTS: [(&str, u32); 3] = [("one", 1), ("ten", 10), ("forty", 40)];

/// A repository on `main` with story `s1` and its gate, and an agents.json
/// (outside it) with the three instant agents.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("README.md"), "bench\n").unwrap();
    let prd = serde_json::json!({
        "metadata": {"version": "1.0"}, "goal": "bench", "objectives": [],
        "stories": [{"id": "s1", "title": "story", "description": "bench",
            "priority": "medium", "dependencies": [], "status": "pending",
            "acceptance_criteria": ["done"]}],
        "quality_gates": {"enabled": true, "fail_fast": false, "use_cache": false,
            "gates": [{"name": "check", "type": "test", "command": "test",
                "args": ["-f", "README.md"], "required": true}]}
    });
    std::fs::write(root.join("prd.json"), prd.to_string()).unwrap();
    cascade_git::commit::init_repository(&root, "main").unwrap();
    cascade_git::commit::commit_all(&root, "init").unwrap();
    cascade_git::RepoPaths::discover(&root)
        .unwrap()
        .ensure_excluded(cascade_engine::config::OWN_FILES)
        .unwrap();
    let mut agents = serde_json::Map::new();
    for (name, lines) in AGENTS {
        let path = tmp.path().join(format!("{name}.sh"));
        support::write_script(&path, &format!("seq 1 {lines} > s1.txt"));
        agents.insert(
            name.into(),
            serde_json::json!({"type": "cli", "command": path, "args": [], "timeout": 60}),
        );
    }
    let agents_path = tmp.path().join("agents.json");
    let doc = serde_json::json!({"default_agent": "forty", "agents": agents});
    std::fs::write(&agents_path, doc.to_string()).unwrap();
    (tmp, root, agents_path)
}

/// One whole run of `s1` with `race` (none: `forty` alone).
fn run(root: &Path, agents_path: &Path, race: Option<RaceUntil>) {
    let mut config = EngineConfig::new(root, "prd.json");
    config.agents_path = Some(agents_path.to_path_buf());
    let race = match race {
        Some(until) => RaceOptions {
            spec: Some(RaceSpec::Agents(
                AGENTS.iter().map(|(n, _)| n.to_string()).collect(),
            )),
            until,
            ..RaceOptions::default()
        },
        None => RaceOptions::default(),
    };
    let options = RunOptions {
        parallel: AGENTS.len(),
        race,
        ..RunOptions::default()
    };
    support::run_to_completion(config, options);
}

fn race(c: &mut Criterion) {
    let mut g = c.benchmark_group("race");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(15));
    for (name, until) in [
        ("slowest_alone", None),
        ("three_contestants", Some(RaceUntil::All)),
        ("three_until_first", Some(RaceUntil::First)),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                setup,
                |(_tmp, root, agents_path)| run(&root, &agents_path, until),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, race);
bench_main!(benches);
