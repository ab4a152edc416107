//! `cascade demo`: a scratch repository, the bundled plan and offline agent, a real run.
//!
//! Everything the demo needs is compiled into the binary (`include_str!` of
//! `examples/demo/`), so `cascade demo` works from any directory, offline and
//! without an API key:
//! - the project: `textkit`, a dependency-free Rust library whose modules
//!   start as empty stubs ([`PROJECT`]);
//! - `prd.json`: six stories in a diamond (001 -> 002, 003, 005; 002 + 003 ->
//!   004; 004 + 005 -> 006) with a `cargo test` quality gate;
//! - the offline agent: this binary's hidden `__demo-agent` subcommand, which
//!   writes the prepared files of the story it is run for ([`STORIES`]).
//!   Story 004's first attempt is deliberately wrong (a unit test fails), so
//!   the run shows a failed gate, a retry with the error in the prompt, and
//!   the fix.
//!
//! The run itself is the real one: `demo` calls `run_cmd::approve` with
//! `--auto-run`, exactly what `cascade approve --auto-run` does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::run_cmd::RunArgs;
use super::run_flags::RunFlags;

mod plan_agent;
use super::{CliResult, Failure, Global};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to create the scratch repository (default: a new temp dir, kept afterwards)
    // Its own id: `dir` is the global `-C DIR`'s.
    #[arg(long = "dir", id = "demo_dir", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print NDJSON events instead of text
    #[arg(long)]
    pub json: bool,
    /// Start from the goal: plan with `cascade plan --auto --run` (offline planner and challenger), then build
    #[arg(long)]
    pub plan: bool,
    /// The run's options, as for `approve` (the demo runs every batch)
    #[command(flatten)]
    pub flags: RunFlags,
}

/// Arguments of the hidden offline demo agent (filled in from agents.json placeholders).
#[derive(Debug, Args)]
pub struct DemoAgentArgs {
    /// Everything after the subcommand, as the demo's agents.json passes it
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub rest: Vec<String>,
}

/// A file of the demo, by path relative to the project root.
type DemoFile = (&'static str, &'static str);

/// The project as it is before any story ran.
pub const PROJECT: &[DemoFile] = &[
    (
        "Cargo.toml",
        include_str!("../../examples/demo/project/Cargo.toml"),
    ),
    (
        "Cargo.lock",
        include_str!("../../examples/demo/project/Cargo.lock"),
    ),
    (
        ".gitignore",
        include_str!("../../examples/demo/project/.gitignore"),
    ),
    (
        "README.md",
        include_str!("../../examples/demo/project/README.md"),
    ),
    (
        "src/lib.rs",
        include_str!("../../examples/demo/project/src/lib.rs"),
    ),
    (
        "src/words.rs",
        include_str!("../../examples/demo/project/src/words.rs"),
    ),
    (
        "src/freq.rs",
        include_str!("../../examples/demo/project/src/freq.rs"),
    ),
    (
        "src/case.rs",
        include_str!("../../examples/demo/project/src/case.rs"),
    ),
    (
        "src/summary.rs",
        include_str!("../../examples/demo/project/src/summary.rs"),
    ),
    (
        "src/slug.rs",
        include_str!("../../examples/demo/project/src/slug.rs"),
    ),
    (
        "src/report.rs",
        include_str!("../../examples/demo/project/src/report.rs"),
    ),
];

/// The demo plan (its gates get `CARGO_TARGET_DIR` added at setup).
pub const PRD: &str = include_str!("../../examples/demo/prd.json");

/// What the offline agent writes for a story: `(story, only on this attempt,
/// files)`. The first entry that matches the story and attempt wins.
pub const STORIES: &[(&str, Option<u32>, &[DemoFile])] = &[
    (
        "story-001",
        None,
        &[(
            "src/words.rs",
            include_str!("../../examples/demo/stories/story-001/src/words.rs"),
        )],
    ),
    (
        "story-002",
        None,
        &[(
            "src/freq.rs",
            include_str!("../../examples/demo/stories/story-002/src/freq.rs"),
        )],
    ),
    (
        "story-003",
        None,
        &[(
            "src/case.rs",
            include_str!("../../examples/demo/stories/story-003/src/case.rs"),
        )],
    ),
    (
        "story-004",
        Some(1),
        &[(
            "src/summary.rs",
            include_str!("../../examples/demo/stories/story-004/attempt-1/src/summary.rs"),
        )],
    ),
    (
        "story-004",
        None,
        &[(
            "src/summary.rs",
            include_str!("../../examples/demo/stories/story-004/src/summary.rs"),
        )],
    ),
    (
        "story-005",
        None,
        &[(
            "src/slug.rs",
            include_str!("../../examples/demo/stories/story-005/src/slug.rs"),
        )],
    ),
    (
        "story-006",
        None,
        &[(
            "src/report.rs",
            include_str!("../../examples/demo/stories/story-006/src/report.rs"),
        )],
    ),
];

/// The branch the demo repository starts on.
const MAIN: &str = "main";

/// `cascade demo`.
pub fn run(g: &Global, a: DemoArgs) -> CliResult {
    // The plan's run is `plan --run`'s own: run flags do not reach it.
    if a.plan && a.flags != RunFlags::default() {
        return Err(Failure::usage(anyhow::anyhow!(
            "`cascade demo --plan` takes no run flags besides --json (the planned run uses the demo's own); drop them, or run `cascade demo` without --plan"
        )));
    }
    let exe = std::env::current_exe()
        .context("cannot find the running cascade executable for the demo agent")
        .map_err(Failure::failed)?;
    if !on_path("cargo") {
        return Err(Failure::usage(anyhow::anyhow!(
            "`cascade demo` needs `cargo` on PATH: its project is a small Rust crate checked with `cargo test` (install Rust from https://rustup.rs)"
        )));
    }
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => fresh_temp_dir().map_err(Failure::failed)?,
    };
    let dir = setup(&dir, &exe).map_err(Failure::usage)?;
    let say = |line: String| {
        // Stdout carries only NDJSON with --json.
        if a.json {
            errln!("{line}");
        } else {
            outln!("{line}");
        }
    };
    say(format!(
        "cascade demo: scratch repository at {} (kept)\n  6 stories of prd.json, agent `{} __demo-agent` (offline), gate `cargo test`; story-004 fails its gate once on purpose\n",
        dir.display(),
        exe.display()
    ));
    std::env::set_current_dir(&dir)
        .with_context(|| format!("cannot change to '{}'", dir.display()))
        .map_err(Failure::failed)?;
    let global = Global {
        agents: Some(dir.join("agents.json")),
        dir: None,
        color: g.color,
    };
    let _ = g;
    let result = if a.plan {
        // The planner writes prd.json: start without the prepared one.
        let _ = std::fs::remove_file(dir.join("prd.json"));
        say("planning first: `cascade plan --auto --run` with the offline planner (demo) and challenger (demo-reviewer)\n".to_string());
        let goal = serde_json::from_str::<serde_json::Value>(PRD)
            .ok()
            .and_then(|p| p["goal"].as_str().map(str::to_string))
            .unwrap_or_else(|| "Build textkit".to_string());
        let mut argv = vec!["plan", goal.as_str(), "--auto", "--run"];
        if a.json {
            argv.push("--json");
        }
        let args = super::planning_cmd::parse_args::<super::planning_cmd::PlanArgs>("plan", &argv)?;
        super::planning_cmd::run(&global, args)
    } else {
        super::run_cmd::approve(&global, run_args(a.flags.clone(), a.json))
    };
    say(format!(
        "\nthe demo repository is kept at {dir}\n  git -C {dir} log --oneline --graph --all   # the merged stories\n  cascade -C {dir} status                     # the run state\n  cascade -C {dir} worktree list              # worktrees left for inspection\n  ls {dir}/.cascade/logs                       # each attempt's agent output (story-004's retry was given the failing test)",
        dir = dir.display()
    ));
    result
}

/// Whether an executable `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(name))
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
    })
}

/// The arguments of `cascade approve --auto-run` the demo runs with: the
/// user's run flags, with the demo's own choices where the user left the
/// default (a quick retry, three stories at once, no shared gate results).
fn run_args(mut flags: RunFlags, json: bool) -> RunArgs {
    let defaults = RunFlags::default();
    flags.auto_run = true;
    flags.yes = true;
    if flags.max_retries == defaults.max_retries {
        flags.max_retries = 2;
    }
    if flags.retry_delay == defaults.retry_delay {
        flags.retry_delay = 0.5;
    }
    if flags.parallel == defaults.parallel {
        flags.parallel = 3;
    }
    // The demo is a scratch repository: never share its results unless asked.
    if flags.remote.remote_cache.is_none() {
        flags.remote.remote_cache = Some("off".into());
    }
    RunArgs {
        prd: Some(PathBuf::from("prd.json")),
        flags,
        call: super::run_flags::Invocation {
            dry_run: false,
            json,
        },
    }
}

/// A new directory under the system temp dir that is not removed afterwards.
fn fresh_temp_dir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir();
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    for n in 0..100u32 {
        let name = if n == 0 {
            format!("cascade-demo-{stamp}")
        } else {
            format!("cascade-demo-{stamp}-{n}")
        };
        let dir = base.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create '{}'", dir.display())),
        }
    }
    anyhow::bail!(
        "cannot find a free directory name under '{}'; pass --dir DIR",
        base.display()
    )
}

/// Creates the scratch repository in `dir` (new or empty): the project
/// committed on `main` (with an agents.json whose `demo` agent is `exe
/// __demo-agent`), and prd.json beside it, kept out of git. Returns the
/// canonical directory.
pub fn setup(dir: &Path, exe: &Path) -> anyhow::Result<PathBuf> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).with_context(|| format!("cannot read '{}'", dir.display()))?;
        if entries.next().is_some() {
            anyhow::bail!(
                "'{}' is not empty; give `cascade demo --dir` a new or empty directory",
                dir.display()
            );
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create '{}'", dir.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("cannot resolve '{}'", dir.display()))?;
    for (path, text) in PROJECT {
        write(&dir, path, text)?;
    }
    write(&dir, "agents.json", &agents_json(exe)?)?;
    cascade_git::commit::init_repository(&dir, MAIN)?;
    cascade_git::commit::commit_all(&dir, "textkit: the project before the demo plan runs")?;
    let paths = cascade_git::RepoPaths::discover(&dir)?;
    paths.ensure_excluded(cascade_engine::config::OWN_FILES)?;
    let target = paths.cascade_dir().join("demo-target");
    write(&dir, "prd.json", &prd_json(&target)?)?;
    Ok(dir)
}

fn write(root: &Path, rel: &str, text: &str) -> anyhow::Result<()> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create '{}'", parent.display()))?;
    }
    std::fs::write(&path, text).with_context(|| format!("cannot write '{}'", path.display()))
}

/// The demo's agents.json: one `demo` agent, the running binary's hidden
/// offline agent, used for every phase.
pub fn agents_json(exe: &Path) -> anyhow::Result<String> {
    let exe = exe
        .to_str()
        .context("the cascade executable's path is not valid UTF-8")?;
    let value = serde_json::json!({
        "description": "cascade demo: the bundled offline agent writes prepared files per story",
        "default_agent": "demo",
        "agents": {
            "demo": {
                "type": "cli",
                "description": "cascade's offline demo agent (no network, no API key)",
                "command": exe,
                "args": ["__demo-agent", "{story_id}", "{attempt}", "{working_dir}"],
                "timeout": 300,
                "env": {}
            },
            "demo-reviewer": {
                "type": "cli",
                "description": "the offline demo agent as the plan's challenger (`cascade demo --plan`)",
                "command": exe,
                "args": ["__demo-agent", "{story_id}", "{attempt}", "{working_dir}"],
                "timeout": 300,
                "env": {}
            }
        },
        "phase_defaults": {
            "planning": {"default_agent": "demo", "fallback_chain": []},
            "review": {"default_agent": "demo-reviewer", "fallback_chain": []},
            "implementation": {"default_agent": "demo", "fallback_chain": []},
            "retry": {"default_agent": "demo", "fallback_chain": []}
        }
    });
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}

/// The demo plan with `CARGO_TARGET_DIR` set in every gate, so the story
/// worktrees share one build directory outside the worktrees.
pub fn prd_json(target_dir: &Path) -> anyhow::Result<String> {
    let mut prd: serde_json::Value = serde_json::from_str(PRD).context("the bundled prd.json")?;
    let target = target_dir.to_string_lossy().into_owned();
    if let Some(gates) = prd
        .pointer_mut("/quality_gates/gates")
        .and_then(|g| g.as_array_mut())
    {
        for gate in gates {
            if let Some(obj) = gate.as_object_mut() {
                let env = obj.entry("env").or_insert_with(|| serde_json::json!({}));
                if let Some(env) = env.as_object_mut() {
                    env.insert("CARGO_TARGET_DIR".into(), target.clone().into());
                }
            }
        }
    }
    Ok(serde_json::to_string_pretty(&prd)? + "\n")
}

/// The files the agent writes for `story` on `attempt`.
pub fn story_files(story: &str, attempt: u32) -> Option<&'static [DemoFile]> {
    STORIES
        .iter()
        .find(|(id, only, _)| *id == story && only.map_or(true, |n| n == attempt))
        .map(|(_, _, files)| *files)
}

/// What the demo agent was asked to do.
#[derive(Debug, PartialEq, Eq)]
struct AgentJob {
    story: String,
    attempt: u32,
    workdir: PathBuf,
}

/// Reads the job from the environment cascade sets (`CASCADE_STORY_ID`,
/// `CASCADE_ATTEMPT`, `CASCADE_WORKDIR`), falling back to the positional
/// arguments `STORY ATTEMPT WORKDIR` and the current directory.
fn agent_job(env: impl Fn(&str) -> Option<String>, args: &[String]) -> anyhow::Result<AgentJob> {
    let pick = |var: &str, pos: usize| {
        env(var)
            .filter(|v| !v.is_empty())
            .or(args.get(pos).cloned())
    };
    let story = pick("CASCADE_STORY_ID", 0).context(
        "no story given: the demo agent reads CASCADE_STORY_ID (it is run by `cascade demo`)",
    )?;
    let attempt = match pick("CASCADE_ATTEMPT", 1) {
        Some(a) => a
            .parse()
            .with_context(|| format!("attempt '{a}' is not a number"))?,
        None => 1,
    };
    let workdir = match pick("CASCADE_WORKDIR", 2) {
        Some(w) => PathBuf::from(w),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    Ok(AgentJob {
        story,
        attempt,
        workdir,
    })
}

/// `cascade __demo-agent`: writes the prepared files of one story.
pub fn agent(_g: &Global, a: DemoAgentArgs) -> CliResult {
    if let Some(step) = std::env::var("CASCADE_PLAN_STEP")
        .ok()
        .filter(|s| !s.is_empty())
    {
        let workdir = std::env::var_os("CASCADE_WORKDIR")
            .map(PathBuf::from)
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_default();
        plan_agent::run(&step, &workdir).map_err(Failure::failed)?;
        return Ok(super::EXIT_OK);
    }
    let job = agent_job(|k| std::env::var(k).ok(), &a.rest).map_err(Failure::usage)?;
    let Some(files) = story_files(&job.story, job.attempt) else {
        return Err(Failure::usage(anyhow::anyhow!(
            "the demo agent only knows the demo plan's stories (story-001 .. story-006), not '{}'",
            job.story
        )));
    };
    outln!(
        "demo agent: {} attempt {} in {}",
        job.story,
        job.attempt,
        job.workdir.display()
    );
    if job.attempt > 1 {
        // Show that the retry prompt carries the previous failure.
        if let Some(prompt) =
            std::env::var_os("CASCADE_PROMPT_FILE").and_then(|p| std::fs::read_to_string(p).ok())
        {
            let hints: Vec<&str> = prompt
                .lines()
                .filter(|l| {
                    let l = l.to_ascii_lowercase();
                    l.contains("fail") || l.contains("error") || l.contains("panicked")
                })
                .take(5)
                .collect();
            for h in hints {
                outln!("demo agent: retry context: {}", h.trim());
            }
        }
    }
    // A little time "thinking", so the live view has something to show.
    let pause = std::env::var("CASCADE_DEMO_AGENT_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    std::thread::sleep(Duration::from_millis(pause));
    for (rel, text) in files {
        write(&job.workdir, rel, text).map_err(Failure::failed)?;
        outln!("demo agent: wrote {rel}");
    }
    Ok(super::EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_story_of_the_plan_has_files_and_004_fails_first() {
        let prd: serde_json::Value = serde_json::from_str(PRD).unwrap();
        let ids: Vec<String> = prd["stories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids.len(), 6);
        for id in &ids {
            let files = story_files(id, 1).unwrap();
            assert!(!files.is_empty());
            // Each story writes only files that exist as stubs in the project,
            // so stories never conflict when they merge.
            for (path, _) in files {
                assert!(PROJECT.iter().any(|(p, _)| p == path), "{id} writes {path}");
            }
        }
        let first = story_files("story-004", 1).unwrap()[0].1;
        let retry = story_files("story-004", 2).unwrap()[0].1;
        assert_ne!(first, retry);
        assert_eq!(story_files("story-001", 1), story_files("story-001", 3));
        assert!(story_files("story-999", 1).is_none());
    }

    #[test]
    fn finds_executables_on_path() {
        assert!(on_path("sh"));
        assert!(!on_path("surely-not-a-command-cascade-knows"));
    }

    #[test]
    fn job_from_env_or_args() {
        let env = |k: &str| match k {
            "CASCADE_STORY_ID" => Some("story-002".to_string()),
            "CASCADE_ATTEMPT" => Some("2".to_string()),
            "CASCADE_WORKDIR" => Some("/w".to_string()),
            _ => None,
        };
        let job = agent_job(env, &[]).unwrap();
        assert_eq!(
            job,
            AgentJob {
                story: "story-002".into(),
                attempt: 2,
                workdir: "/w".into()
            }
        );
        let args = vec!["story-003".to_string(), "1".to_string(), "/x".to_string()];
        let job = agent_job(|_| None, &args).unwrap();
        assert_eq!(job.story, "story-003");
        assert_eq!(job.workdir, PathBuf::from("/x"));
        assert!(agent_job(|_| None, &[]).is_err());
        let bad = vec!["s".to_string(), "two".to_string()];
        assert!(agent_job(|_| None, &bad)
            .unwrap_err()
            .to_string()
            .contains("'two'"));
    }

    #[test]
    fn setup_makes_a_clean_repository_with_the_plan_beside_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("demo");
        let exe = Path::new("/opt/cascade/bin/cascade");
        let root = setup(&dir, exe).unwrap();
        let repo = git2::Repository::open(&root).unwrap();
        assert_eq!(repo.head().unwrap().shorthand(), Some("main"));
        // Nothing shows as changed: prd.json is excluded, everything else committed.
        let mut so = git2::StatusOptions::new();
        so.include_untracked(true);
        assert!(repo.statuses(Some(&mut so)).unwrap().is_empty());
        let prd: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(root.join("prd.json")).unwrap()).unwrap();
        let env = &prd["quality_gates"]["gates"][0]["env"]["CARGO_TARGET_DIR"];
        assert!(env.as_str().unwrap().ends_with(".cascade/demo-target"));
        let agents: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(root.join("agents.json")).unwrap())
                .unwrap();
        assert_eq!(
            agents["agents"]["demo"]["command"],
            "/opt/cascade/bin/cascade"
        );
        assert_eq!(agents["agents"]["demo"]["args"][0], "__demo-agent");
        assert!(root.join("src/words.rs").exists());
        // A second demo into the same (now full) directory is refused.
        let err = setup(&dir, exe).unwrap_err();
        assert!(err.to_string().contains("not empty"));
    }

    #[test]
    fn the_agent_writes_the_story_files() {
        let tmp = tempfile::tempdir().unwrap();
        let args = DemoAgentArgs {
            rest: vec![
                "story-005".into(),
                "1".into(),
                tmp.path().to_string_lossy().into_owned(),
            ],
        };
        std::env::set_var("CASCADE_DEMO_AGENT_DELAY_MS", "0");
        let g = Global {
            agents: None,
            dir: None,
            color: Default::default(),
        };
        assert_eq!(agent(&g, args).unwrap(), 0);
        let text = std::fs::read_to_string(tmp.path().join("src/slug.rs")).unwrap();
        assert!(text.contains("pub fn slugify"));
    }
}
