//! `cascade worktree list|prune`: cascade's own worktrees and branches.
//!
//! Only what cascade created is shown or removed: worktrees under
//! `<repo>/.cascade/worktrees/` and branches named `cascade/...`
//! (`cascade_git::worktree`). Worktrees of failed stories are kept for
//! inspection by the engine; `prune` is how they go. It takes the run lock,
//! so it never pulls a worktree from under a running `approve` or `mega`,
//! and it keeps (and lists) a worktree holding uncommitted changes unless
//! `--force` is given.

use anyhow::Context;
use cascade_git::worktree::{self, BranchInfo, WorktreeInfo};
use cascade_git::RepoPaths;
use clap::Subcommand;

use super::{CliResult, Failure, Global, EXIT_OK};

#[derive(Debug, Subcommand)]
pub enum WorktreeCommand {
    /// Show cascade's worktrees and branches
    List {
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Remove cascade's leftover worktrees and branches (never anything else)
    Prune {
        /// Show what would be removed; remove nothing
        #[arg(long)]
        dry_run: bool,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
        /// Also delete `cascade/...` branches cascade did not create or whose
        /// work is not merged, and worktrees holding uncommitted changes
        /// (without it they are kept and listed)
        #[arg(long)]
        force: bool,
    },
}

pub fn run(_g: &Global, c: WorktreeCommand) -> CliResult {
    let cwd = std::env::current_dir()
        .context("cannot read the current directory")
        .map_err(Failure::usage)?;
    run_in(&cwd, c)
}

/// The command, for the repository that contains `dir`.
fn run_in(dir: &std::path::Path, c: WorktreeCommand) -> CliResult {
    let paths = RepoPaths::discover(dir).map_err(Failure::usage)?;
    match c {
        WorktreeCommand::List { json } => list(&paths, json),
        WorktreeCommand::Prune {
            dry_run,
            json,
            force,
        } => prune(&paths, dry_run, json, force),
    }
}

/// cascade's worktrees and branches, and which branches are merged into the
/// branch checked out in the main worktree.
struct Inventory {
    worktrees: Vec<WorktreeInfo>,
    branches: Vec<BranchInfo>,
    current: Option<String>,
    merged: Vec<bool>,
}

fn inventory(paths: &RepoPaths) -> Result<Inventory, Failure> {
    let worktrees: Vec<WorktreeInfo> = worktree::list(paths)
        .map_err(Failure::failed)?
        .into_iter()
        .filter(|w| w.is_cascade)
        .collect();
    let branches = worktree::cascade_branches(paths).map_err(Failure::failed)?;
    let current = cascade_engine::gitops::current_branch(&paths.main_root).unwrap_or(None);
    let merged = branches
        .iter()
        .map(|b| match &current {
            Some(cur) => cascade_git::merge::is_merged(paths, b.tip, cur).unwrap_or(false),
            None => false,
        })
        .collect();
    Ok(Inventory {
        worktrees,
        branches,
        current,
        merged,
    })
}

fn list(paths: &RepoPaths, json: bool) -> CliResult {
    let inv = inventory(paths)?;
    if json {
        outln!("{}", inventory_json(&inv));
        return Ok(EXIT_OK);
    }
    if inv.worktrees.is_empty() && inv.branches.is_empty() {
        outln!("no cascade worktrees or branches");
        return Ok(EXIT_OK);
    }
    if !inv.worktrees.is_empty() {
        outln!("worktrees:");
        let width = inv
            .worktrees
            .iter()
            .map(|w| w.branch.as_deref().unwrap_or("(detached)").len())
            .max()
            .unwrap_or(0);
        for w in &inv.worktrees {
            let mut notes = Vec::new();
            if w.locked {
                notes.push(match &w.lock_reason {
                    Some(r) => format!("locked: {r}"),
                    None => "locked".to_string(),
                });
            }
            if w.prunable {
                notes.push("directory missing".to_string());
            }
            let notes = if notes.is_empty() {
                String::new()
            } else {
                format!("  ({})", notes.join(", "))
            };
            outln!(
                "  {:width$}  {}{notes}",
                w.branch.as_deref().unwrap_or("(detached)"),
                w.path.display(),
            );
        }
    }
    if !inv.branches.is_empty() {
        outln!("branches:");
        let width = inv.branches.iter().map(|b| b.name.len()).max().unwrap_or(0);
        for (b, merged) in inv.branches.iter().zip(&inv.merged) {
            let state = match (&inv.current, merged) {
                (Some(cur), true) => format!("merged into {cur}"),
                (Some(cur), false) => format!("not merged into {cur}"),
                (None, _) => String::new(),
            };
            let tip = b.tip.to_string();
            let wt = match &b.worktree {
                Some(p) => format!(", worktree {}", p.display()),
                None => String::new(),
            };
            outln!("  {:width$}  {}  {state}{wt}", b.name, &tip[..10]);
        }
    }
    outln!(
        "\n`cascade worktree prune` removes the worktrees and the merged branches cascade created\n(locked worktrees are kept; `--dry-run` shows what it would do)."
    );
    Ok(EXIT_OK)
}

fn inventory_json(inv: &Inventory) -> serde_json::Value {
    serde_json::json!({
        "worktrees": inv.worktrees.iter().map(|w| serde_json::json!({
            "name": w.name,
            "path": w.path,
            "branch": w.branch,
            "head": w.head.map(|o| o.to_string()),
            "locked": w.locked,
            "prunable": w.prunable,
            "uncommitted": worktree::uncommitted_files(&w.path, 5),
        })).collect::<Vec<_>>(),
        "branches": inv.branches.iter().zip(&inv.merged).map(|(b, merged)| serde_json::json!({
            "name": b.name,
            "tip": b.tip.to_string(),
            "worktree": b.worktree,
            "merged": merged,
        })).collect::<Vec<_>>(),
        "current_branch": inv.current,
    })
}

/// What cascade knows of its branches from the run states: the
/// branches they name, and the branch each one's work merges into.
struct Records {
    known: Vec<String>,
    targets: std::collections::HashMap<String, String>,
    /// The mega run's target branch, if there is a mega run.
    mega_target: Option<String>,
    /// The branch checked out in the main worktree.
    current: Option<String>,
}

fn records(paths: &RepoPaths) -> Records {
    let dir = paths.cascade_dir();
    let mut known = Vec::new();
    let mut targets = std::collections::HashMap::new();
    if let Ok(Some(st)) =
        cascade_engine::state::RunState::load(&cascade_engine::store::db_path(&dir))
    {
        for s in &st.stories {
            if let Some(b) = &s.branch {
                known.push(b.clone());
                targets.insert(b.clone(), st.target_branch.clone());
            }
        }
    }
    let mut mega_target = None;
    if let Ok(Some(st)) = cascade_engine::mega::state::MegaState::load(&dir) {
        for f in st.features.values() {
            known.push(f.branch.clone());
            targets.insert(f.branch.clone(), st.target_branch.clone());
        }
        mega_target = Some(st.target_branch.clone());
    }
    let current = cascade_engine::gitops::current_branch(&paths.main_root).unwrap_or(None);
    Records {
        known,
        targets,
        mega_target,
        current,
    }
}

impl Records {
    /// The branch `branch`'s work is merged into: a mega feature's story
    /// merges into the feature branch (while it exists), a story or feature
    /// into its run's target, anything else is checked against the branch
    /// checked out in the main worktree.
    fn target_of(&self, branch: &str, existing: &[String]) -> Option<String> {
        if let Some(t) = self.targets.get(branch) {
            return Some(t.clone());
        }
        if let Some((feature, _)) = branch.split_once('.') {
            if existing.iter().any(|b| b == feature) {
                return Some(feature.to_string());
            }
            if let Some(t) = &self.mega_target {
                return Some(t.clone());
            }
        }
        self.current.clone()
    }
}

/// The branches prune would delete or keep (with why), under `force`.
fn verdicts(
    paths: &RepoPaths,
    force: bool,
    f: impl FnOnce(&worktree::PrunePolicy<'_>) -> CliResult,
) -> CliResult {
    let rec = records(paths);
    let existing: Vec<String> = worktree::cascade_branches(paths)
        .map_err(Failure::failed)?
        .into_iter()
        .map(|b| b.name)
        .collect();
    let target_of = |b: &str| rec.target_of(b, &existing);
    let policy = worktree::PrunePolicy {
        force,
        known: rec.known.clone(),
        target_of: Some(&target_of),
    };
    f(&policy)
}

const FORCE_HINT: &str =
    "`cascade worktree prune --force` deletes kept branches too (their commits are then only in the reflog)";

fn prune(paths: &RepoPaths, dry_run: bool, json: bool, force: bool) -> CliResult {
    if dry_run {
        return verdicts(paths, force, |policy| {
            let inv = inventory(paths)?;
            let branches = worktree::branch_verdicts(paths, policy).map_err(Failure::failed)?;
            if json {
                let mut v = inventory_json(&inv);
                v["branches"] = serde_json::Value::Array(
                    branches
                        .iter()
                        .map(|(b, keep)| {
                            serde_json::json!({
                                "name": b.name,
                                "tip": b.tip.to_string(),
                                "delete": keep.is_none(),
                                "kept_because": keep,
                            })
                        })
                        .collect(),
                );
                outln!("{v}");
            } else if inv.worktrees.is_empty() && branches.is_empty() {
                outln!("nothing to prune");
            } else {
                for w in &inv.worktrees {
                    let dirty = worktree::uncommitted_files(&w.path, 5);
                    if dirty.is_empty() || force {
                        outln!("would remove worktree {}", w.path.display());
                    } else {
                        outln!(
                            "would keep worktree {}: has uncommitted changes ({}); --force removes it anyway",
                            w.path.display(),
                            dirty.join(", ")
                        );
                    }
                }
                for (b, keep) in &branches {
                    match keep {
                        None => outln!("would delete branch {}", b.name),
                        Some(why) => outln!("would keep {}: {why}", b.name),
                    }
                }
            }
            Ok(EXIT_OK)
        });
    }
    // Never prune under a running cascade (a run always has `.cascade/`; when
    // it does not exist, nothing of cascade's is running or stored here).
    let _lock = if paths.cascade_dir().is_dir() {
        let lock_path = paths.cascade_dir().join("lock");
        let (lock, note) =
            cascade_engine::lock::RunLock::acquire(&lock_path, "cascade worktree prune")
                .map_err(Failure::usage)?;
        if let Some(note) = note {
            errln!("note: {note}");
        }
        Some(lock)
    } else {
        None
    };
    verdicts(paths, force, |policy| {
        let report = worktree::prune_all(paths, policy).map_err(Failure::failed)?;
        print_report(&report, json);
        Ok(EXIT_OK)
    })
}

fn print_report(report: &worktree::PruneReport, json: bool) {
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "removed_worktrees": report.worktrees,
                "removed_stale_entries": report.stale_entries,
                "deleted_branches": report.branches,
                "skipped": report.skipped.iter().map(|(what, why)| serde_json::json!({"what": what, "why": why})).collect::<Vec<_>>(),
            })
        );
        return;
    }
    for w in &report.worktrees {
        outln!("removed worktree {}", w.display());
    }
    for e in &report.stale_entries {
        outln!("removed stale worktree entry {e}");
    }
    for b in &report.branches {
        outln!("deleted branch {b}");
    }
    for (what, why) in &report.skipped {
        outln!("kept {what}: {why}");
    }
    let unforced = |why: &str| why.starts_with("not ") || why.starts_with("no branch");
    if report.skipped.iter().any(|(_, why)| unforced(why)) {
        outln!("{FORCE_HINT}");
    }
    if report.worktrees.is_empty()
        && report.stale_entries.is_empty()
        && report.branches.is_empty()
        && report.skipped.is_empty()
    {
        outln!("nothing to prune");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_git::commit;

    fn repo() -> (tempfile::TempDir, RepoPaths) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        commit::init_repository(&root, "main").unwrap();
        commit::commit_all(&root, "init").unwrap();
        let paths = RepoPaths::discover(&root).unwrap();
        (tmp, paths)
    }

    #[test]
    fn prune_removes_only_cascade_worktrees_and_branches() {
        let (_tmp, paths) = repo();
        let wt = worktree::create(
            &paths,
            &worktree::path_for(&paths, "cascade/s1"),
            "cascade/s1",
            "main",
        )
        .unwrap();
        let git = git2::Repository::open(&paths.main_root).unwrap();
        let head = git.head().unwrap().peel_to_commit().unwrap();
        git.branch("user/topic", &head, false).unwrap();

        let list = WorktreeCommand::List { json: true };
        assert_eq!(run_in(&paths.main_root, list).unwrap(), EXIT_OK);
        let dry = WorktreeCommand::Prune {
            dry_run: true,
            json: false,
            force: false,
        };
        assert_eq!(run_in(&paths.main_root, dry).unwrap(), EXIT_OK);
        assert!(wt.path.exists());

        let prune = WorktreeCommand::Prune {
            dry_run: false,
            json: false,
            force: false,
        };
        assert_eq!(run_in(&wt.path, prune).unwrap(), EXIT_OK);
        assert!(!wt.path.exists());
        assert!(git
            .find_branch("cascade/s1", git2::BranchType::Local)
            .is_err());
        assert!(git
            .find_branch("user/topic", git2::BranchType::Local)
            .is_ok());
        assert!(worktree::list(&paths).unwrap().is_empty());
    }

    #[test]
    fn prune_keeps_a_worktree_with_uncommitted_changes_unless_forced() {
        let (_tmp, paths) = repo();
        let wt = worktree::create(
            &paths,
            &worktree::path_for(&paths, "cascade/s1"),
            "cascade/s1",
            "main",
        )
        .unwrap();
        std::fs::write(wt.path.join("a.txt"), "edited by hand").unwrap();
        std::fs::write(wt.path.join("new.txt"), "new").unwrap();
        assert_eq!(
            worktree::uncommitted_files(&wt.path, 5),
            vec!["a.txt".to_string(), "new.txt".to_string()]
        );
        let prune = |force| WorktreeCommand::Prune {
            dry_run: false,
            json: false,
            force,
        };
        assert_eq!(run_in(&paths.main_root, prune(false)).unwrap(), EXIT_OK);
        assert!(wt.path.join("new.txt").exists(), "dirty worktree deleted");
        let git = git2::Repository::open(&paths.main_root).unwrap();
        assert!(git
            .find_branch("cascade/s1", git2::BranchType::Local)
            .is_ok());
        assert_eq!(run_in(&paths.main_root, prune(true)).unwrap(), EXIT_OK);
        assert!(!wt.path.exists());
    }

    #[test]
    fn prune_is_refused_while_a_run_holds_the_lock() {
        let (_tmp, paths) = repo();
        let wt = worktree::create(
            &paths,
            &worktree::path_for(&paths, "cascade/s1"),
            "cascade/s1",
            "main",
        )
        .unwrap();
        let (_held, _) = cascade_engine::lock::RunLock::acquire(
            &paths.cascade_dir().join("lock"),
            "cascade approve",
        )
        .unwrap();
        let prune = WorktreeCommand::Prune {
            dry_run: false,
            json: false,
            force: false,
        };
        let err = run_in(&paths.main_root, prune).unwrap_err();
        assert_eq!(err.code, super::super::EXIT_USAGE);
        assert!(
            format!("{:#}", err.error).contains("pid"),
            "{:#}",
            err.error
        );
        assert!(wt.path.exists());
    }

    #[test]
    fn outside_a_repository_is_a_usage_error() {
        let tmp = tempfile::tempdir().unwrap();
        let err = run_in(tmp.path(), WorktreeCommand::List { json: false }).unwrap_err();
        assert_eq!(err.code, super::super::EXIT_USAGE);
    }
}
