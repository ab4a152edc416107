//! The state a run starts from: fresh, or the previous run's (resume), with
//! every story whose work is already on the target branch complete
//! (whatever the run state says: this is what makes a `kill -9` between a
//! merge and its record safe), what a killed run left running pending
//! again, and prd.json brought in line.
//!
//! One pass over the plan, whatever its size: stories are found through
//! indexes ([`RunState::story`], [`cascade_plan::Prd::story_mut`]), the story
//! branches are listed once, and one walk of the target's history tells
//! which of the candidate commits are already merged
//! ([`cascade_git::merge::reachable_from`]).

use std::collections::{HashMap, HashSet};

use cascade_git::GitError;
use cascade_plan::{Prd, Status};
use git2::Oid;

use crate::config::{EngineConfig, RunOptions};
use crate::ctx::story_branch;
use crate::error::EngineError;
use crate::prepared::Prepared;
use crate::scheduler::NodeSpec;
use crate::state::{RunPhase, RunState, StoryState, StoryStatus};

/// Where a run starts.
pub(crate) struct Start {
    pub state: RunState,
    /// Stories found merged already, with why (announced as `story_skipped`).
    pub skipped: Vec<(String, String)>,
}

/// The run's starting state (see the module doc). `p.prd` is updated (and
/// saved when it changed): stories found merged are complete, stories left
/// in progress pending. `previous` is the state on disk, taken over whole
/// when resuming (not copied).
pub(crate) fn starting_state(
    config: &EngineConfig,
    p: &mut Prepared,
    previous: Option<RunState>,
    options: &RunOptions,
    run_id: impl FnOnce() -> String,
) -> Result<Start, EngineError> {
    // A finished earlier run's commits do not mark stories complete: a
    // user who reset a story in prd.json wants it done again.
    let previous = previous.filter(|st| {
        options.resume || !matches!(st.status, RunPhase::Completed | RunPhase::Failed)
    });
    // `earlier`: an unfinished run this one does not continue (`approve`
    // over it), read for the commits it recorded.
    let (mut state, earlier) = match previous {
        Some(prev) if options.resume => (resumed(prev, p), None),
        earlier => (
            RunState::new(
                run_id(),
                config.prd_path.display().to_string(),
                p.target_branch.clone(),
                config.project_root.display().to_string(),
                p.prd.stories.iter().map(|s| s.id.clone()),
            ),
            earlier,
        ),
    };
    if let Some(flags) = &options.remember {
        state.options = Some(flags.clone());
    }
    // The commits recorded by the run being continued, or by the one
    // before it.
    let recorded = if options.resume {
        Some(&state)
    } else {
        earlier.as_ref()
    };
    let merged = merged_already(config, p, recorded)?;

    let mut skipped = Vec::new();
    // Plan position `i` is where the story's record is (see
    // `RunState::position_hinted`), unless the plan changed since.
    for (i, story) in p.prd.stories.iter().enumerate() {
        let id = story.id.as_str();
        let at = state.position_hinted_or_add(i, id);
        let rec = &mut state.stories[at];
        // The type the resolver routes by (the plan's, else inferred), so
        // `cascade history` and learned routing group by what routed it.
        rec.story_type = Some(cascade_agents::infer_story_type(story).as_str().to_string());
        if story.is_complete() {
            rec.status = StoryStatus::Complete;
        } else if let Some(reason) = merged.get(id) {
            rec.status = StoryStatus::Complete;
            if let Some(prev) = earlier.as_ref().and_then(|st| st.story_hinted(i, id)) {
                rec.commit = rec.commit.clone().or(prev.commit.clone());
            }
            skipped.push((id.to_string(), reason.clone()));
        } else {
            // Running (killed), failed or blocked before: try again.
            rec.status = StoryStatus::Pending;
            rec.blocked_by.clear();
        }
    }
    sync_prd(&mut p.prd, &p.prd_path, &skipped)?;
    Ok(Start { state, skipped })
}

/// The state of a resumed run: `prev`, running again, holding the plan's
/// stories (those gone from it dropped, new ones pending), with the
/// attempts a killed run left open closed.
fn resumed(mut st: RunState, p: &Prepared) -> RunState {
    st.status = RunPhase::Running;
    st.pid = std::process::id();
    st.target_branch = p.target_branch.clone();
    // The usual case: the plan has the same stories in the same order.
    let same = st.stories.len() == p.prd.stories.len()
        && st
            .stories
            .iter()
            .zip(&p.prd.stories)
            .all(|(a, b)| a.id == b.id);
    if !same {
        let keep: HashSet<&str> = p.prd.stories.iter().map(|s| s.id.as_str()).collect();
        st.retain_stories(|s| keep.contains(s.id.as_str()));
        st.follow_plan_order(p.prd.stories.iter().map(|s| s.id.as_str()));
    }
    // Attempts a killed run left open were interrupted, not judged.
    for s in &mut st.stories {
        s.close_unfinished_attempts();
    }
    st
}

/// A pending story that may be merged already: its id, the commit its
/// record names, and its own branch with that branch's tip.
type Candidate<'a> = (&'a str, Option<Oid>, Option<(String, Oid)>);

/// The pending stories whose work is on the target branch already, with
/// why: their recorded commit, or the tip of their branch (a commit of
/// their own, titled `<id>: ...`), is the target's tip or an ancestor.
fn merged_already(
    config: &EngineConfig,
    p: &Prepared,
    previous: Option<&RunState>,
) -> Result<HashMap<String, String>, EngineError> {
    let target = &p.target_branch;
    let Some(tip) = cascade_git::merge::branch_tip(&p.paths, target)? else {
        return Ok(HashMap::new());
    };
    let repo = p.paths.open()?;
    // The story branches, listed once (not looked up per story).
    let list = GitError::git("list the story branches");
    let mut branches: HashMap<String, Oid> = HashMap::new();
    for r in repo.references_glob("refs/heads/cascade/*").map_err(list)? {
        let r = r.map_err(GitError::git("list the story branches"))?;
        if let (Some(name), Some(tip)) = (r.shorthand(), r.target()) {
            branches.insert(name.to_string(), tip);
        }
    }
    // What could show each pending story merged.
    let mut candidates: Vec<Candidate<'_>> = Vec::new();
    for (i, story) in p.prd.stories.iter().enumerate() {
        if story.is_complete() {
            continue;
        }
        let id = story.id.as_str();
        let recorded = previous
            .and_then(|st| st.story_hinted(i, id))
            .and_then(|s: &StoryState| s.commit.as_deref())
            .and_then(|c| Oid::from_str(c).ok());
        // (Not named at all when there are no story branches.)
        let branch = if branches.is_empty() {
            String::new()
        } else {
            story_branch(config, id)
        };
        let own_tip = branches.get(&branch).copied().filter(|&t| {
            repo.find_commit(t).is_ok_and(|c| {
                c.summary()
                    .is_some_and(|s| s.strip_prefix(id).is_some_and(|r| r.starts_with(": ")))
            })
        });
        if recorded.is_some() || own_tip.is_some() {
            candidates.push((id, recorded, own_tip.map(|t| (branch, t))));
        }
    }
    let wanted: HashSet<Oid> = candidates
        .iter()
        .flat_map(|(_, r, b)| r.iter().copied().chain(b.iter().map(|(_, t)| *t)))
        .collect();
    let on_target = cascade_git::merge::reachable_from(&repo, tip, &wanted)?;
    let mut out = HashMap::new();
    for (id, recorded, own) in candidates {
        let reason = match (recorded, own) {
            (Some(c), _) if on_target.contains(&c) => {
                format!("commit {} is already on '{target}'", short(&c.to_string()))
            }
            (_, Some((branch, t))) if on_target.contains(&t) => format!(
                "branch '{branch}' ({}) is already merged into '{target}'",
                short(&t.to_string())
            ),
            _ => continue,
        };
        out.insert(id.to_string(), reason);
    }
    Ok(out)
}

/// prd.json after the starting state: stories found merged are complete,
/// stories a killed run left in progress pending again (saved once, when
/// anything changed).
fn sync_prd(
    prd: &mut Prd,
    path: &std::path::Path,
    skipped: &[(String, String)],
) -> Result<(), EngineError> {
    let mut changed = false;
    for (id, _) in skipped {
        if let Some(s) = prd.story_mut(id) {
            s.set_status(Status::Complete);
            changed = true;
        }
    }
    for s in prd.stories.iter_mut() {
        if s.status == Status::InProgress {
            s.set_status(Status::Pending);
            changed = true;
        }
    }
    if changed {
        prd.save(path)?;
    }
    Ok(())
}

pub(crate) fn short(sha: &str) -> &str {
    &sha[..sha.len().min(10)]
}

/// The scheduler's keys of file paths: one per distinct path.
#[derive(Debug, Default)]
pub(crate) struct FileKeys(HashMap<String, u32>);

impl FileKeys {
    /// The key of `path` (a new one the first time it is asked for).
    pub fn key(&mut self, path: &str) -> u32 {
        let next = self.0.len() as u32;
        *self.0.entry(path.to_string()).or_insert(next)
    }
}

/// The scheduler's view of the plan: node `i` is the plan's story `i`
/// (positions are prd.json's), done when its record is complete, holding
/// the story's declared `files` and those its merges conflicted in (as
/// `keys`).
pub(crate) fn scheduler_nodes(
    p: &Prepared,
    state: &RunState,
    keys: &mut FileKeys,
) -> Vec<NodeSpec> {
    p.plan
        .nodes()
        .map(|node| {
            let record = state.story_hinted(node.position(), node.id_str());
            let declared = p.prd.stories.get(node.position()).map(|s| &s.files[..]);
            NodeSpec {
                files: file_keys(declared, record, keys),
                deps: node
                    .dependency_positions()
                    .iter()
                    .map(|&d| d as usize)
                    .collect(),
                priority: node.priority().rank(),
                file_index: node.position(),
                remaining_path: node.remaining_path_len(),
                done: record.is_some_and(|s| s.status == StoryStatus::Complete),
            }
        })
        .collect()
}

/// A story's files for the scheduler: what it declares, and what its
/// merges conflicted in before a resume (its `record`).
fn file_keys(
    declared: Option<&[String]>,
    record: Option<&crate::state::StoryState>,
    keys: &mut FileKeys,
) -> Vec<u32> {
    let conflicted = record.map(|s| &s.conflicted_files[..]);
    let mut files: Vec<u32> = (declared.into_iter().flatten())
        .chain(conflicted.into_iter().flatten())
        .map(|f| keys.key(f))
        .collect();
    files.sort_unstable();
    files.dedup();
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::state::AttemptRecord;
    use cascade_plan::synthetic::{prd_json, Shape};

    /// A repository on `main` with `prd` as its prd.json.
    fn repo(root: &std::path::Path, prd: &str) -> (EngineConfig, Engine) {
        std::fs::write(root.join("prd.json"), prd).unwrap();
        std::fs::write(root.join("README.md"), "scale\n").unwrap();
        cascade_git::commit::init_repository(root, "main").unwrap();
        cascade_git::commit::commit_all(root, "init").unwrap();
        let config = EngineConfig::new(root, "prd.json");
        (config.clone(), Engine::new(config))
    }

    /// The plan of `root` with its stories in reverse order.
    fn reverse_plan(root: &std::path::Path) {
        let path = root.join("prd.json");
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        v["stories"].as_array_mut().unwrap().reverse();
        std::fs::write(&path, v.to_string()).unwrap();
    }

    fn resume() -> RunOptions {
        RunOptions {
            resume: true,
            ..RunOptions::default()
        }
    }

    /// Preparation finds stories only by position or through indexes, each
    /// built once: a linear search per story (what made 100,000 stories
    /// take a minute) would show as one build per lookup. Counted, not
    /// timed.
    #[test]
    fn preparation_does_no_linear_search_per_story() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let n = 3000;
        let (config, engine) = repo(root, &prd_json(&Shape::new(n)));

        // A fresh run: its state follows the plan, so every story is found
        // at its plan position and no index is needed.
        let mut p = engine.prepare().unwrap();
        let options = RunOptions::default();
        let Start { mut state, skipped } =
            starting_state(&config, &mut p, None, &options, || "r1".into()).unwrap();
        assert!(skipped.is_empty());
        assert_eq!(state.stories.len(), n);
        let nodes = scheduler_nodes(&p, &state, &mut FileKeys::default());
        let done = nodes.iter().filter(|n| n.done).count();
        assert_eq!(
            done,
            p.prd.stories.iter().filter(|s| s.is_complete()).count()
        );
        assert_eq!(state.index_stats().builds, 0, "{:?}", state.index_stats());

        // Resumed from that state, with commits recorded for a third of the
        // stories (not on main: each is looked up and found not merged).
        for (i, s) in state.stories.iter_mut().enumerate() {
            if i % 3 == 0 {
                s.status = StoryStatus::Failed;
                s.commit = Some(format!("{:040x}", i + 1));
            }
        }
        let mut p = engine.prepare().unwrap();
        let Start { state: resumed, .. } =
            starting_state(&config, &mut p, Some(state.clone()), &resume(), || {
                "r2".into()
            })
            .unwrap();
        let nodes = scheduler_nodes(&p, &resumed, &mut FileKeys::default());
        assert_eq!(nodes.len(), n);
        assert_eq!(
            resumed.index_stats().builds,
            0,
            "{:?}",
            resumed.index_stats()
        );
        assert!(p.prd.index_stats().builds <= 1);
        assert!(resumed
            .stories
            .iter()
            .all(|s| s.status != StoryStatus::Failed));

        // The plan reordered: positions no longer say where a record is. The
        // index is built once and each story looked up once, to learn where
        // its record is; every later look goes straight there.
        reverse_plan(root);
        let mut p = engine.prepare().unwrap();
        let order: Vec<String> = state.stories.iter().map(|s| s.id.clone()).collect();
        let Start { state: resumed, .. } =
            starting_state(&config, &mut p, Some(state), &resume(), || "r3".into()).unwrap();
        let nodes = scheduler_nodes(&p, &resumed, &mut FileKeys::default());
        let stats = resumed.index_stats();
        assert_eq!(stats.lookups, n as u64, "{stats:?}");
        assert!(stats.builds <= 1, "{stats:?}");
        // The records keep their order; each plan position finds its own.
        let kept: Vec<&str> = resumed.stories.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(kept, order);
        for (i, s) in p.prd.stories.iter().enumerate() {
            let found = resumed.story_hinted(i, &s.id).map(|r| r.id.as_str());
            assert_eq!(found, Some(s.id.as_str()));
            assert_eq!(nodes[i].done, s.is_complete());
        }
        assert!(p.prd.index_stats().builds <= 1);
        assert!(resumed
            .stories
            .iter()
            .all(|s| s.status != StoryStatus::Failed));
    }

    /// The kinds the engine resolves and hands to the binary's agent check
    /// are those of the pending stories ([`cascade_agents::resolve::story_kinds`]),
    /// inferred once however often they are asked for.
    #[test]
    fn pending_kinds_are_the_kinds_of_the_pending_stories_found_once() {
        let titles = [
            "Profile page",
            "Fix login crash",
            "Write the README",
            "Add tests",
        ];
        let stories: Vec<serde_json::Value> = (0..6000)
            .map(|i| {
                let mut s = serde_json::json!({
                    "id": format!("s-{i}"),
                    "title": titles[(i / 3 + i % 2) % titles.len()],
                    "status": if i % 7 == 0 { "complete" } else { "pending" },
                });
                if i % 1000 == 999 {
                    s["agent"] = "codex".into();
                }
                s
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let plan = serde_json::json!({"goal": "g", "stories": stories}).to_string();
        let (_, engine) = repo(dir.path(), &plan);
        let p = engine.prepare().unwrap();
        let ids = |kinds: Vec<&cascade_plan::Story>| -> Vec<String> {
            kinds.iter().map(|s| s.id.clone()).collect()
        };
        let pending = p.prd.stories.iter().filter(|s| !s.is_complete());
        let expected = ids(cascade_agents::resolve::story_kinds(pending));
        assert_eq!(ids(p.pending_kinds()), expected);
        assert_eq!(
            expected.len(),
            7,
            "4 types, 3 of them with codex: {expected:?}"
        );
        let found = p.kinds.get().map(|k| k.as_ptr());
        assert_eq!(ids(p.pending_kinds()), expected);
        assert_eq!(p.kinds.get().map(|k| k.as_ptr()), found, "found once");
    }

    /// What a resume keeps of the state it continues (taken over, not
    /// copied): attempts, branches and commits; a story whose recorded
    /// commit is on the target is complete (and so in prd.json), an
    /// attempt a killed run left open is closed as interrupted. The same
    /// whether the plan kept its order or not.
    #[test]
    fn a_resume_keeps_attempts_branches_and_merged_stories() {
        for reordered in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            let (config, engine) = repo(root, &prd_json(&Shape::new(6).all_pending()));
            let tip = cascade_git::merge::branch_tip(&engine.prepare().unwrap().paths, "main")
                .unwrap()
                .unwrap()
                .to_string();
            let mut p = engine.prepare().unwrap();
            let Start { mut state, .. } =
                starting_state(&config, &mut p, None, &RunOptions::default(), || {
                    "r1".into()
                })
                .unwrap();
            let attempt = |n: u32, outcome: Option<&str>| AttemptRecord {
                outcome: outcome.map(str::to_string),
                ..AttemptRecord::started(
                    n,
                    "codex".into(),
                    "implementation".into(),
                    "2026-01-01T00:00:00Z".into(),
                )
            };
            let s0 = state.story_mut("story-000000");
            s0.status = StoryStatus::Failed;
            s0.attempts = vec![attempt(1, Some("failed")), attempt(2, Some("failed"))];
            s0.branch = Some("cascade/story-000000".into());
            s0.commit = Some(format!("{:040x}", 7));
            let s1 = state.story_mut("story-000001");
            s1.status = StoryStatus::Running;
            s1.commit = Some(tip.clone());
            s1.attempts = vec![attempt(1, Some("passed"))];
            let s2 = state.story_mut("story-000002");
            s2.status = StoryStatus::Running;
            s2.attempts = vec![attempt(1, None)];
            state.status = RunPhase::Interrupted;
            if reordered {
                reverse_plan(root);
            }

            let mut p = engine.prepare().unwrap();
            let Start {
                state: resumed,
                skipped,
            } = starting_state(&config, &mut p, Some(state), &resume(), || "r2".into()).unwrap();
            assert_eq!(resumed.run_id, "r1", "the run continues");
            assert_eq!(resumed.status, RunPhase::Running);
            assert_eq!(resumed.stories.len(), 6);
            let s0 = resumed.story("story-000000").unwrap();
            assert_eq!(s0.status, StoryStatus::Pending);
            assert_eq!(s0.attempts.len(), 2);
            assert_eq!(s0.branch.as_deref(), Some("cascade/story-000000"));
            assert_eq!(s0.commit, Some(format!("{:040x}", 7)));
            let s1 = resumed.story("story-000001").unwrap();
            assert_eq!(s1.status, StoryStatus::Complete);
            assert_eq!(s1.commit.as_deref(), Some(tip.as_str()));
            assert_eq!(s1.attempts.len(), 1);
            assert_eq!(skipped.len(), 1, "{skipped:?}");
            assert_eq!(skipped[0].0, "story-000001");
            assert!(skipped[0].1.contains("is already on 'main'"), "{skipped:?}");
            let s2 = resumed.story("story-000002").unwrap();
            assert_eq!(s2.status, StoryStatus::Pending);
            assert_eq!(s2.attempts[0].outcome.as_deref(), Some("interrupted"));
            let on_disk = cascade_plan::load_prd(root.join("prd.json")).unwrap();
            let merged = on_disk.story("story-000001").unwrap();
            assert!(merged.is_complete(), "prd.json in line");
            assert!(!on_disk.story("story-000000").unwrap().is_complete());
        }
    }
}
