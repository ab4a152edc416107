//! Agents that a killed run left running.
//!
//! Every agent runs in its own process group, so that a timeout or Ctrl-C can
//! kill it with everything it forked. The flip side is that `kill -9` of
//! cascade does not reach it: it lives on and keeps writing into its worktree.
//! Before a run reuses the worktrees of a killed run, the agents the state
//! recorded as running (an attempt with a pid and no outcome) are stopped:
//! SIGTERM to the group, a grace period, then SIGKILL. Only a process that
//! provably is that agent is touched: alive, and carrying the
//! `CASCADE_STORY_ID` cascade gave it in its environment, so a pid the system
//! has since given to another process is left alone. (Where `/proc` does not
//! exist nothing can be proven and nothing is killed.)
//!
//! The pid reaches the run state a fraction of a second after the agent
//! started (state writes are grouped), so an agent started in the last
//! moments before a `kill -9` may not be recorded. [`scan`] finds those too:
//! a process group leader whose environment carries `CASCADE_STORY_ID` of
//! one of the run's stories and a `CASCADE_WORKDIR` inside this repository's
//! `.cascade/` is an agent of a cascade run here; with the run lock held by
//! the resuming run, no live run owns it.
//!
//! A fleet worker's clones are the same case: a `kill -9` of `cascade
//! worker` leaves its agent writing into a slot that the restarted worker
//! (same directory, its lock taken over) reuses for the next job. The worker
//! stops every agent under its directory on start ([`stop_agents_under`]),
//! and each job stops any under its slot's `.cascade/` before the slot's
//! worktree is reused.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::state::RunState;

/// An agent the state recorded as running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub story: String,
    pub pid: u32,
}

/// The attempts of `state` that were running when their run ended.
pub fn recorded(state: &RunState) -> Vec<Leftover> {
    state
        .stories
        .iter()
        .flat_map(|s| {
            s.attempts
                .iter()
                .filter(|a| a.outcome.is_none())
                .filter_map(|a| a.pid)
                .map(|pid| Leftover {
                    story: s.id.clone(),
                    pid,
                })
        })
        .collect()
}

/// Agents of `stories` running in worktrees under `cascade_dir` that no
/// state recorded (see the module doc); only process group leaders.
pub fn scan(stories: &[String], cascade_dir: &Path, known: &[Leftover]) -> Vec<Leftover> {
    let stories: std::collections::HashSet<&str> = stories.iter().map(String::as_str).collect();
    agents_under(cascade_dir, known, |story| stories.contains(story))
}

/// Agents of any story running in a worktree under `dir`: what a fleet
/// worker stops before it reuses the clones of the worker it replaces (its
/// directory's lock proves no live worker owns them).
pub fn scan_under(dir: &Path) -> Vec<Leftover> {
    agents_under(dir, &[], |_| true)
}

/// Stops every agent running in a worktree under `dir` (see [`scan_under`]);
/// returns one notice per agent stopped.
pub fn stop_agents_under(dir: &Path, grace: Duration) -> Vec<String> {
    stop(&scan_under(dir), grace)
}

/// Process group leaders not in `known` whose environment carries a
/// `CASCADE_STORY_ID` that `wanted` accepts and a `CASCADE_WORKDIR` under
/// `dir` (compared canonically: a worker may be given a relative or linked
/// directory).
fn agents_under(dir: &Path, known: &[Leftover], wanted: impl Fn(&str) -> bool) -> Vec<Leftover> {
    let me = std::process::id();
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let known: std::collections::HashSet<u32> = known.iter().map(|l| l.pid).collect();
    let mut found = Vec::new();
    for proc in cascade_process::procs::list() {
        let pid = proc.pid;
        if pid == me || known.contains(&pid) || proc.pgrp != pid || !proc.alive() {
            continue;
        }
        let Some(environ) = cascade_process::procs::environ(pid) else {
            continue;
        };
        let var = |name: &str| {
            cascade_process::procs::env_var(&environ, name)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        let (Some(story), Some(workdir)) = (var("CASCADE_STORY_ID"), var("CASCADE_WORKDIR")) else {
            continue;
        };
        let workdir = Path::new(&workdir);
        let inside = workdir.starts_with(&dir)
            || std::fs::canonicalize(workdir).is_ok_and(|w| w.starts_with(&dir));
        if wanted(&story) && inside {
            found.push(Leftover { story, pid });
        }
    }
    found
}

/// Stops every leftover that is still alive and provably that story's agent;
/// returns one notice per agent stopped.
pub fn stop(leftovers: &[Leftover], grace: Duration) -> Vec<String> {
    let ours: Vec<&Leftover> = leftovers.iter().filter(|l| is_agent_of(l)).collect();
    for l in &ours {
        cascade_process::kill_group(l.pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    ours.iter()
        .map(|l| {
            while cascade_process::group_alive(l.pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            cascade_process::kill_group(l.pid, libc::SIGKILL);
            format!(
                "stopped the agent of story '{}' that the interrupted run left running (pid {})",
                l.story, l.pid
            )
        })
        .collect()
}

/// Whether `l.pid` is alive and its environment names `l.story`.
fn is_agent_of(l: &Leftover) -> bool {
    if l.pid == 0 || !cascade_process::pid_alive(l.pid) {
        return false;
    }
    cascade_process::procs::environ(l.pid).is_some_and(|env| {
        cascade_process::procs::env_var(&env, "CASCADE_STORY_ID") == Some(l.story.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn spawn_sleeper(story: &str) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        Command::new("sleep")
            .arg("300")
            .env("CASCADE_STORY_ID", story)
            .process_group(0)
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// A sleeping stand-in for an agent of `story` working in `workdir`.
    fn spawn(story: &str, workdir: &Path) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        Command::new("sleep")
            .arg("300")
            .env("CASCADE_STORY_ID", story)
            .env("CASCADE_WORKDIR", workdir)
            .process_group(0)
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    #[test]
    fn scan_finds_unrecorded_agents_in_this_repository_only() {
        let tmp = tempfile::tempdir().unwrap();
        let cascade_dir = tmp.path().join(".cascade");
        let mut ours = spawn("s1", &cascade_dir.join("worktrees/slot-0"));
        let mut elsewhere = spawn("s1", &tmp.path().join("other/.cascade/worktrees/slot-0"));
        let mut not_a_story = spawn("zz", &cascade_dir.join("worktrees/slot-1"));
        let stories = vec!["s1".to_string(), "s2".to_string()];
        let found = scan(&stories, &cascade_dir, &[]);
        assert_eq!(
            found,
            vec![Leftover {
                story: "s1".into(),
                pid: ours.id()
            }]
        );
        // Already recorded: not found twice.
        assert!(scan(&stories, &cascade_dir, &found).is_empty());
        let notes = stop(&found, Duration::from_secs(2));
        assert_eq!(notes.len(), 1);
        assert!(!ours.wait().unwrap().success());
        for c in [&mut elsewhere, &mut not_a_story] {
            assert!(
                c.try_wait().unwrap().is_none(),
                "another process was killed"
            );
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    #[test]
    fn stop_agents_under_stops_any_storys_agent_in_that_directory_only() {
        let tmp = tempfile::tempdir().unwrap();
        let worker = tmp.path().join("w1");
        let mut inside = spawn(
            "any-story",
            &worker.join("repo/slot-1/.cascade/worktrees/slot-0"),
        );
        let mut outside = spawn("any-story", &tmp.path().join("w2/repo/slot-1"));
        let notes = stop_agents_under(&worker, Duration::from_secs(2));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("'any-story'"), "{notes:?}");
        assert!(!inside.wait().unwrap().success());
        assert!(
            outside.try_wait().unwrap().is_none(),
            "an agent of another directory was killed"
        );
        outside.kill().unwrap();
        outside.wait().unwrap();
    }

    #[test]
    fn stops_only_the_agent_it_can_prove_is_ours() {
        let mut ours = spawn_sleeper("s1");
        let mut other = spawn_sleeper("someone-else");
        let leftovers = vec![
            Leftover {
                story: "s1".into(),
                pid: ours.id(),
            },
            // Same pid as a live process, but not that story's agent.
            Leftover {
                story: "s2".into(),
                pid: other.id(),
            },
            // A pid nobody has.
            Leftover {
                story: "s3".into(),
                pid: u32::MAX - 1,
            },
        ];
        let notes = stop(&leftovers, Duration::from_secs(2));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("'s1'"));
        let status = ours.wait().unwrap();
        assert!(!status.success());
        assert!(
            other.try_wait().unwrap().is_none(),
            "another process was killed"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
