//! Worktrees and branches that cascade creates for stories and features.
//!
//! Everything cascade creates here is recognisable, so that cleaning up can
//! never touch anything else:
//! - branches are named `cascade/...` ([`BRANCH_PREFIX`]);
//! - worktrees live under `<main root>/.cascade/worktrees/` ([`root`]).
//!
//! # API summary
//! - [`branch_name`]`(feature, id)`: `cascade/<id>`, or `cascade/<feature>.<id>`
//!   for a story of a mega-plan feature (a ref `cascade/<feature>` can not
//!   also be a directory `cascade/<feature>/`, hence the dot).
//! - [`path_for`]`(paths, branch)`: the conventional worktree path of a branch,
//!   `<main root>/.cascade/worktrees/<branch without prefix>`.
//! - [`create`]`(paths, path, branch, from)`: a new worktree at `path` on a new
//!   branch starting at `from` (a branch name, ref or commit id). A stale
//!   cascade worktree or branch of the same name (from a killed run) is replaced
//!   cleanly; a branch checked out in a worktree cascade did not create is
//!   refused ([`WorktreeError::BranchInUse`]).
//! - [`attach`]`(paths, path, branch)`: a worktree for an *existing* cascade
//!   branch, keeping its commits (resuming a feature whose directory is gone).
//! - [`remove`]`(paths, path, delete_branch)`: the directory, git's admin data
//!   and optionally the branch; missing pieces are not an error.
//! - [`delete_branch`]`(paths, branch)`: a cascade branch that no worktree uses.
//! - Reuse (the engine's pool of story worktrees): [`slot_path`]`(paths,
//!   feature, n)` (`<root>/slot-<n>` or `<root>/<feature>.slot-<n>`) and
//!   [`slot_number`]; [`reuse`]`(paths, path, branch, from)`: an existing
//!   cascade worktree on a new (or reset) branch at `from`, with only the
//!   difference checked out, every leftover but ignored files cleared, and
//!   a fresh [`create`] when that is not possible; [`detach`]`(paths, path,
//!   delete_branch)`: HEAD detached (a merged story's worktree back in the
//!   pool); [`relocate`]`(paths, from, to)`: `git worktree move` (a failed
//!   story's worktree kept under its own name); [`delete_merged_branches`]`(paths,
//!   branches, target)`: merged stories' branches, in one pass.
//! - [`list`]`(paths)`: every linked worktree with branch, head, locked,
//!   prunable and whether it is cascade's; [`cascade_branches`]`(paths)`.
//! - [`prune_stale`]`(paths)`: git admin entries of cascade worktrees whose
//!   directory is gone; [`prune_all`]`(paths, policy)`: every cascade worktree
//!   and the branches [`PrunePolicy`] allows (what `cascade worktree prune`
//!   does), skipping locked worktrees and branches checked out elsewhere.
//! - Provenance: every branch [`create`] or [`reuse`] makes is appended to
//!   `.cascade/created-branches` ([`created_branches`]); without `force`,
//!   pruning deletes only those, and only when merged into their target
//!   ([`branch_verdicts`]): a `cascade/...` name alone proves nothing.
//!
//! All functions are synchronous and open the repository per call (a
//! `git2::Repository` is not `Sync`); call them from `spawn_blocking` in async
//! code. Calls from many threads are safe: the bookkeeping that changes
//! worktrees and branches (git's admin entries, refs) is serialised inside the
//! process (libgit2 checks "is this branch checked out" by reading every
//! worktree's admin data, and an entry half-written by another thread makes it
//! answer wrongly), while the slow parts, checking out a new worktree's files
//! and deleting a removed one's, run in parallel outside that lock.

use std::path::{Path, PathBuf};

use git2::{BranchType, Oid, Repository, WorktreeLockStatus};

use crate::repo::RepoPaths;
use crate::GitError;

/// Prefix of every branch cascade creates.
pub const BRANCH_PREFIX: &str = "cascade/";

/// Directory under `.cascade/` that holds cascade's worktrees.
pub const WORKTREES_DIR: &str = "worktrees";

/// A worktree operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// cascade only creates and deletes branches under `cascade/`.
    #[error("branch '{branch}' is not a cascade branch (cascade only manages branches named '{BRANCH_PREFIX}...')")]
    NotCascadeBranch { branch: String },
    /// cascade only creates and removes worktrees under its own directory.
    #[error("'{}' is outside cascade's worktree directory '{}'; cascade only manages worktrees there", path.display(), root.display())]
    OutsideRoot { path: PathBuf, root: PathBuf },
    /// The branch is checked out in a worktree that cascade did not create.
    #[error("branch '{branch}' is checked out in '{}', which cascade did not create; switch that worktree to another branch first", worktree.display())]
    BranchInUse { branch: String, worktree: PathBuf },
    /// The starting point does not resolve to a commit.
    #[error("'{from}' does not name a commit or branch in this repository")]
    UnknownStart { from: String },
    /// The branch does not exist.
    #[error("branch '{branch}' does not exist")]
    NoSuchBranch { branch: String },
    /// Something else failed in git or on disk.
    #[error(transparent)]
    Git(#[from] GitError),
}

/// A linked worktree as git records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeInfo {
    /// Name of git's admin entry (`.git/worktrees/<name>`).
    pub name: String,
    /// The worktree's directory.
    pub path: PathBuf,
    /// Short name of the checked-out branch; `None` when HEAD is detached.
    pub branch: Option<String>,
    /// The commit checked out, when it resolves.
    pub head: Option<Oid>,
    /// Whether the worktree is locked (`git worktree lock`).
    pub locked: bool,
    /// The lock reason, if any was given.
    pub lock_reason: Option<String>,
    /// Whether the directory is gone and the admin entry can be pruned.
    pub prunable: bool,
    /// Whether cascade created it (its directory is under [`root`]).
    pub is_cascade: bool,
}

/// A local `cascade/...` branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchInfo {
    /// Short name (`cascade/story-001`).
    pub name: String,
    /// The commit it points at.
    pub tip: Oid,
    /// The worktree that has it checked out, if any (main or linked).
    pub worktree: Option<PathBuf>,
}

/// What [`prune_all`] removed and what it left alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Worktree directories removed (with their admin entries).
    pub worktrees: Vec<PathBuf>,
    /// Stale admin entries removed (their directory was already gone).
    pub stale_entries: Vec<String>,
    /// Branches deleted.
    pub branches: Vec<String>,
    /// What was left alone and why (`(what, why)`).
    pub skipped: Vec<(String, String)>,
}

/// Serialises worktree changes within the process (see the module docs).
static WORKTREE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serialised() -> std::sync::MutexGuard<'static, ()> {
    // A panic while holding it leaves nothing half-done that a later call
    // does not already handle (stale entries are replaced), so poison is moot.
    WORKTREE_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `<main root>/.cascade/worktrees`: the only place cascade puts worktrees.
pub fn root(paths: &RepoPaths) -> PathBuf {
    paths.cascade_dir().join(WORKTREES_DIR)
}

/// Whether `branch` (short name or `refs/heads/...`) is one of cascade's.
pub fn is_cascade_branch(branch: &str) -> bool {
    short_branch(branch).starts_with(BRANCH_PREFIX)
}

/// The branch of a story or feature: `cascade/<id>`, or
/// `cascade/<feature>.<id>` for a story inside a mega-plan feature.
pub fn branch_name(feature: Option<&str>, id: &str) -> String {
    match feature {
        Some(f) => format!("{BRANCH_PREFIX}{f}.{id}"),
        None => format!("{BRANCH_PREFIX}{id}"),
    }
}

/// The conventional worktree directory of a cascade branch:
/// `<root>/<branch without the prefix>` (a `/` becomes `+`).
pub fn path_for(paths: &RepoPaths, branch: &str) -> PathBuf {
    let short = short_branch(branch);
    let rest = short.strip_prefix(BRANCH_PREFIX).unwrap_or(short);
    root(paths).join(rest.replace('/', "+"))
}

/// Creates a worktree at `path` on a new branch `branch` starting at `from`
/// (a branch name, a ref or a commit id).
///
/// A stale cascade worktree holding `branch` (from a killed run), or a
/// leftover directory at `path`, is removed first and an existing cascade
/// branch of that name is reset to `from`. A branch checked out in a
/// worktree cascade did not create (the main one, typically) is refused.
pub fn create(
    paths: &RepoPaths,
    path: &Path,
    branch: &str,
    from: &str,
) -> Result<WorktreeInfo, WorktreeError> {
    let branch = short_branch(branch).to_string();
    require_cascade_branch(&branch)?;
    let info = {
        let _guard = serialised();
        let repo = open_main(paths)?;
        let start = repo
            .revparse_single(from)
            .and_then(|o| o.peel_to_commit())
            .map_err(|_| WorktreeError::UnknownStart {
                from: from.to_string(),
            })?;
        let path = prepare_path(paths, path)?;
        release_branch(paths, &repo, &branch)?;
        clear_path(paths, &repo, &path)?;
        clear_stale_ref_lock(paths, &branch);
        let reference = repo
            .branch(&branch, &start, true)
            .map_err(GitError::git(format!("create branch '{branch}'")))?
            .into_reference();
        record_created(paths, &branch);
        register(paths, &path, &reference)?
    };
    populate(paths, info)
}

/// Creates a worktree at `path` for the existing cascade branch `branch`,
/// keeping its commits. A stale cascade worktree holding it is replaced.
pub fn attach(paths: &RepoPaths, path: &Path, branch: &str) -> Result<WorktreeInfo, WorktreeError> {
    let branch = short_branch(branch).to_string();
    require_cascade_branch(&branch)?;
    let info = {
        let _guard = serialised();
        let repo = open_main(paths)?;
        if repo.find_branch(&branch, BranchType::Local).is_err() {
            return Err(WorktreeError::NoSuchBranch { branch });
        }
        let path = prepare_path(paths, path)?;
        release_branch(paths, &repo, &branch)?;
        clear_path(paths, &repo, &path)?;
        let reference = repo
            .find_branch(&branch, BranchType::Local)
            .map_err(GitError::git(format!("find branch '{branch}'")))?
            .into_reference();
        register(paths, &path, &reference)?
    };
    populate(paths, info)
}

/// Removes the cascade worktree at `path`: its directory and git's admin
/// entry, and its branch too when `delete_branch` is set. Returns the branch
/// the worktree had checked out. Pieces that are already gone are skipped.
pub fn remove(
    paths: &RepoPaths,
    path: &Path,
    delete_branch_too: bool,
) -> Result<Option<String>, WorktreeError> {
    let root = root(paths);
    let path = absolute(path);
    if !path.starts_with(&root) || path == root {
        return Err(WorktreeError::OutsideRoot { path, root });
    }
    let (branch, trash) = {
        let _guard = serialised();
        let repo = open_main(paths)?;
        let mut branch = None;
        for entry in entries(paths, &repo)? {
            if entry.path == path {
                branch = entry.branch.clone();
                remove_dir(&admin_dir(paths, &entry.name))?;
            }
        }
        let trash = move_aside(&path)?;
        if delete_branch_too {
            if let Some(b) = &branch {
                if is_cascade_branch(b) {
                    delete_branch_locked(paths, b)?;
                }
            }
        }
        (branch, trash)
    };
    // Deleting the files is the slow part; git no longer knows the directory.
    if let Some(trash) = trash {
        remove_dir(&trash)?;
    }
    Ok(branch)
}

/// Deletes the local cascade branch `branch`. Returns `false` when it did not
/// exist. A branch checked out in a worktree (stale cascade ones are released
/// first) is refused.
pub fn delete_branch(paths: &RepoPaths, branch: &str) -> Result<bool, WorktreeError> {
    let _guard = serialised();
    delete_branch_locked(paths, branch)
}

fn delete_branch_locked(paths: &RepoPaths, branch: &str) -> Result<bool, WorktreeError> {
    let branch = short_branch(branch).to_string();
    require_cascade_branch(&branch)?;
    let repo = open_main(paths)?;
    release_branch(paths, &repo, &branch)?;
    let b = match repo.find_branch(&branch, BranchType::Local) {
        Ok(b) => b,
        Err(_) => return Ok(false),
    };
    Unheld::new(&repo).delete(b, &branch)?;
    Ok(true)
}

/// Deletes local branches that no worktree has checked out (the caller has
/// made sure, from every worktree's HEAD): the ref, and the branch's config
/// section when it has one. Not `Branch::delete`, which checks again by
/// opening every linked worktree as a repository (about 0.08 ms each): a
/// deletion cost O(worktrees), paid by every story (its worktree handed on)
/// and by every merged branch a run deletes at its end, and a long run
/// keeps every failed story's worktree.
struct Unheld {
    /// The branches with a `branch.<name>.*` config section (`None`: the
    /// config did not read; libgit2 then deletes every branch itself).
    configured: Option<std::collections::HashSet<String>>,
}

impl Unheld {
    fn new(repo: &Repository) -> Unheld {
        let configured = repo.config().ok().and_then(|config| {
            let mut names = std::collections::HashSet::new();
            config
                .entries(Some("^branch\\."))
                .ok()?
                .for_each(|e| {
                    let sub = e
                        .name()
                        .and_then(|n| n.strip_prefix("branch.")?.rsplit_once('.'));
                    if let Some((sub, _)) = sub {
                        names.insert(sub.to_string());
                    }
                })
                .ok()?;
            Some(names)
        });
        Unheld { configured }
    }

    /// Deletes `branch`, named `name` (its short name).
    fn delete(&self, mut branch: git2::Branch<'_>, name: &str) -> Result<(), GitError> {
        let error = GitError::git(format!("delete branch '{name}'"));
        match &self.configured {
            Some(sections) if !sections.contains(name) => {
                branch.into_reference().delete().map_err(error)
            }
            _ => branch.delete().map_err(error),
        }
    }
}

/// Every linked worktree of the repository (not the main one), cascade's or
/// not, sorted by path.
pub fn list(paths: &RepoPaths) -> Result<Vec<WorktreeInfo>, WorktreeError> {
    let repo = open_main(paths)?;
    let mut out = entries(paths, &repo)?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Every local `cascade/...` branch, sorted by name, with the worktree that
/// has it checked out.
pub fn cascade_branches(paths: &RepoPaths) -> Result<Vec<BranchInfo>, WorktreeError> {
    let repo = open_main(paths)?;
    // Each branch's first holder, by branch.
    let mut holders_by_branch = std::collections::HashMap::new();
    for h in holders(paths, &repo)? {
        if let Some(branch) = h.branch {
            holders_by_branch.entry(branch).or_insert(h.path);
        }
    }
    let mut out = Vec::new();
    let branches = repo
        .branches(Some(BranchType::Local))
        .map_err(GitError::git("list branches"))?;
    for item in branches {
        let (b, _) = item.map_err(GitError::git("list branches"))?;
        let Ok(Some(name)) = b.name() else { continue };
        if !is_cascade_branch(name) {
            continue;
        }
        let Some(tip) = b.get().target() else {
            continue;
        };
        let worktree = holders_by_branch.get(name).cloned();
        out.push(BranchInfo {
            name: name.to_string(),
            tip,
            worktree,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Removes git's admin entries of cascade worktrees whose directory is gone
/// (not locked ones). Returns the entry names removed. Never touches a
/// worktree outside [`root`].
pub fn prune_stale(paths: &RepoPaths) -> Result<Vec<String>, WorktreeError> {
    let _guard = serialised();
    let repo = open_main(paths)?;
    let mut removed = Vec::new();
    for entry in entries(paths, &repo)? {
        if entry.is_cascade && entry.prunable {
            discard(paths, &entry.name, None)?;
            removed.push(entry.name);
        }
    }
    Ok(removed)
}

/// Removes every cascade worktree (directory and admin entry) and the
/// `cascade/...` branches `policy` allows ([`branch_verdicts`]: without
/// `force`, only branches cascade created whose work is merged). Locked
/// worktrees and kept branches are skipped and reported. Nothing outside
/// [`root`] and the `cascade/` branch namespace is touched.
pub fn prune_all(
    paths: &RepoPaths,
    policy: &PrunePolicy<'_>,
) -> Result<PruneReport, WorktreeError> {
    let _guard = serialised();
    let repo = open_main(paths)?;
    let mut report = PruneReport::default();
    for entry in entries(paths, &repo)? {
        if !entry.is_cascade {
            continue;
        }
        if entry.locked {
            let why = match &entry.lock_reason {
                Some(r) => format!("locked: {r}"),
                None => "locked (git worktree unlock to allow pruning)".to_string(),
            };
            report.skipped.push((entry.path.display().to_string(), why));
            continue;
        }
        let existed = entry.path.exists();
        // Work nobody committed (a failed story's worktree the user went on
        // editing) is only ever deleted on purpose.
        if existed && !policy.force {
            let files = uncommitted_files(&entry.path, 5);
            if !files.is_empty() {
                report
                    .skipped
                    .push((entry.path.display().to_string(), dirty_reason(&files)));
                continue;
            }
        }
        discard(paths, &entry.name, Some(&entry.path))?;
        if existed {
            report.worktrees.push(entry.path);
        } else {
            report.stale_entries.push(entry.name);
        }
    }
    // Leftover directories that git no longer knows about.
    if let Ok(dir) = std::fs::read_dir(root(paths)) {
        for item in dir.flatten() {
            let p = item.path();
            let trash = item.file_name().to_string_lossy().starts_with(TRASH_PREFIX);
            if trash {
                // A removal interrupted by a crash: git already forgot it.
                remove_dir(&p)?;
                continue;
            }
            if p.join(".git").is_file() && !report.skipped.iter().any(|(w, _)| Path::new(w) == p) {
                if !policy.force {
                    let files = uncommitted_files(&p, 5);
                    if !files.is_empty() {
                        report
                            .skipped
                            .push((p.display().to_string(), dirty_reason(&files)));
                        continue;
                    }
                }
                remove_dir(&p)?;
                report.worktrees.push(p);
            }
        }
    }
    // Decide for every branch first, then delete: a story branch is judged
    // against its feature branch while that still exists.
    let unheld = Unheld::new(&repo);
    for (b, keep) in verdicts(paths, &repo, policy)? {
        if let Some(why) = keep {
            report.skipped.push((b.name, why));
            continue;
        }
        let branch = repo
            .find_branch(&b.name, BranchType::Local)
            .map_err(GitError::git(format!("find branch '{}'", b.name)))?;
        unheld.delete(branch, &b.name)?;
        report.branches.push(b.name);
    }
    compact_created(paths);
    Ok(report)
}

/// Up to `limit` paths with uncommitted changes (modified, staged, or new
/// and not ignored) in the worktree at `dir`; empty when it is clean or is
/// not a repository git can open (nothing then proves there is work in it).
pub fn uncommitted_files(dir: &Path, limit: usize) -> Vec<String> {
    let Ok(repo) = Repository::open(dir) else {
        return Vec::new();
    };
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(false)
        .include_ignored(false);
    let Ok(statuses) = repo.statuses(Some(&mut opts)) else {
        return Vec::new();
    };
    statuses
        .iter()
        .filter(|e| e.status() != git2::Status::CURRENT)
        .filter_map(|e| e.path().map(str::to_string))
        .filter(|p| !crate::status::is_cascade_path(p.as_bytes()))
        .take(limit)
        .collect()
}

/// Why prune keeps a worktree with uncommitted changes.
fn dirty_reason(files: &[String]) -> String {
    format!(
        "has uncommitted changes ({}); commit or copy them, or `cascade worktree prune --force` removes it anyway",
        files.join(", ")
    )
}

// ---------------------------------------------------------------------------
// Which branches cascade created: a ledger, so that cleaning up never deletes
// a `cascade/...` branch somebody else made (the name alone proves nothing).

/// File under `.cascade/` listing the branches cascade created, one a line.
pub const CREATED_BRANCHES_FILE: &str = "created-branches";

/// Branches already appended to a ledger by this process (ledger path, branch).
static RECORDED: std::sync::Mutex<Option<std::collections::HashSet<(PathBuf, String)>>> =
    std::sync::Mutex::new(None);

fn ledger(paths: &RepoPaths) -> PathBuf {
    paths.cascade_dir().join(CREATED_BRANCHES_FILE)
}

/// Appends `branch` to the ledger (once per process). Best effort: when it
/// cannot be written, the branch merely counts as not cascade's, so cleaning
/// up keeps it (the safe side).
pub(crate) fn record_created(paths: &RepoPaths, branch: &str) {
    use std::io::Write;
    let file = ledger(paths);
    let key = (file.clone(), branch.to_string());
    let mut seen = RECORDED.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(Default::default);
    if seen.contains(&key) {
        return;
    }
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .and_then(|mut f| f.write_all(format!("{branch}\n").as_bytes()));
    if written.is_ok() {
        seen.insert(key);
    }
}

/// The branches the ledger says cascade created (existing or not).
pub fn created_branches(paths: &RepoPaths) -> std::collections::HashSet<String> {
    std::fs::read_to_string(ledger(paths))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Rewrites the ledger with only the branches that still exist.
fn compact_created(paths: &RepoPaths) {
    let Ok(repo) = open_main(paths) else { return };
    let mut keep: Vec<String> = created_branches(paths)
        .into_iter()
        .filter(|b| repo.find_branch(b, BranchType::Local).is_ok())
        .collect();
    keep.sort();
    let text: String = keep.iter().map(|b| format!("{b}\n")).collect();
    let _ = std::fs::write(ledger(paths), text);
    let mut seen = RECORDED.lock().unwrap_or_else(|e| e.into_inner());
    *seen = None;
}

/// Maps a branch to the branch its work is merged into, if known.
pub type TargetOf<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Which `cascade/...` branches [`prune_all`] may delete.
#[derive(Default)]
pub struct PrunePolicy<'a> {
    /// Delete every cascade branch no worktree holds, whoever created it and
    /// whether or not it is merged.
    pub force: bool,
    /// Branches known to be cascade's besides the ledger (the run state files).
    pub known: Vec<String>,
    /// The branch a branch's work is merged into (`None`: nothing to check
    /// against, so the branch is kept).
    pub target_of: Option<TargetOf<'a>>,
}

/// Every `cascade/...` branch with the reason [`prune_all`] keeps it under
/// `policy` (`None`: it would be deleted). A branch is kept when a worktree
/// has it checked out; and, without `force`, when cascade did not create it
/// (neither the ledger nor `policy.known` names it) or its tip is not
/// contained in its target branch.
pub fn branch_verdicts(
    paths: &RepoPaths,
    policy: &PrunePolicy<'_>,
) -> Result<Vec<(BranchInfo, Option<String>)>, WorktreeError> {
    let repo = open_main(paths)?;
    verdicts(paths, &repo, policy)
}

fn verdicts(
    paths: &RepoPaths,
    repo: &Repository,
    policy: &PrunePolicy<'_>,
) -> Result<Vec<(BranchInfo, Option<String>)>, WorktreeError> {
    let created = created_branches(paths);
    let known: std::collections::HashSet<&str> =
        policy.known.iter().map(|k| short_branch(k)).collect();
    let mut out = Vec::new();
    for b in cascade_branches(paths)? {
        let why = branch_keep_reason(repo, &b, &created, &known, policy);
        out.push((b, why));
    }
    Ok(out)
}

fn branch_keep_reason(
    repo: &Repository,
    b: &BranchInfo,
    created: &std::collections::HashSet<String>,
    known: &std::collections::HashSet<&str>,
    policy: &PrunePolicy<'_>,
) -> Option<String> {
    if let Some(w) = &b.worktree {
        return Some(format!("checked out in '{}'", w.display()));
    }
    if policy.force {
        return None;
    }
    if !created.contains(&b.name) && !known.contains(b.name.as_str()) {
        return Some("not created by cascade".to_string());
    }
    let Some(target) = policy.target_of.and_then(|f| f(&b.name)) else {
        return Some("no branch to check it is merged into".to_string());
    };
    let target = short_branch(&target).to_string();
    let Ok(target_tip) = repo.refname_to_id(&format!("refs/heads/{target}")) else {
        return Some(format!(
            "not merged into {target} (that branch does not exist)"
        ));
    };
    let merged =
        b.tip == target_tip || repo.graph_descendant_of(target_tip, b.tip).unwrap_or(false);
    if merged {
        None
    } else {
        Some(format!("not merged into {target}"))
    }
}

// ---------------------------------------------------------------------------
// Reuse: a pool of worktrees (the engine's), so a story does not pay for a
// full checkout of the tree and its deletion.

/// Directory name prefix of pooled worktrees ([`slot_path`]).
pub const SLOT_PREFIX: &str = "slot-";

/// The directory of pooled worktree `n`: `<root>/slot-<n>`, or
/// `<root>/<feature>.slot-<n>` for the stories of a mega-plan feature (a
/// feature name has no `.`, so this never names a feature's worktree).
pub fn slot_path(paths: &RepoPaths, feature: Option<&str>, n: usize) -> PathBuf {
    match feature {
        Some(f) => root(paths).join(format!("{f}.{SLOT_PREFIX}{n}")),
        None => root(paths).join(format!("{SLOT_PREFIX}{n}")),
    }
}

/// The slot number when `path` is a pooled worktree directory of `feature`
/// (see [`slot_path`]).
pub fn slot_number(path: &Path, feature: Option<&str>) -> Option<usize> {
    let name = path.file_name()?.to_str()?;
    let rest = match feature {
        Some(f) => name.strip_prefix(f)?.strip_prefix('.')?,
        None => name,
    };
    let digits = rest.strip_prefix(SLOT_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Points the existing cascade worktree at `path` at the branch `branch`,
/// (re)created at `from`, and makes its files and index exactly `from`'s
/// tree: tracked changes are reverted, untracked files removed, and only
/// ignored files (build outputs such as `target/`: warm caches) are kept.
/// Only the paths that can differ are looked at and written (one status
/// scan finds them), and afterwards those paths are checked again; when
/// anything is left over (or `path` is not a usable cascade worktree), the
/// worktree is made from scratch with [`create`] instead.
pub fn reuse(
    paths: &RepoPaths,
    path: &Path,
    branch: &str,
    from: &str,
) -> Result<WorktreeInfo, WorktreeError> {
    let branch = short_branch(branch).to_string();
    require_cascade_branch(&branch)?;
    let root = absolute(&root(paths));
    let path = absolute(path);
    if !path.starts_with(&root) || path == root {
        return Err(WorktreeError::OutsideRoot { path, root });
    }
    let refname = format!("refs/heads/{branch}");
    // Under the lock: free the branch, detach the worktree at the commit its
    // index and files belong to (the checkout's baseline), and move the
    // branch to the new start.
    let prepared = {
        let _guard = serialised();
        let repo = open_main(paths)?;
        let start = repo
            .revparse_single(from)
            .and_then(|o| o.peel_to_commit())
            .map_err(|_| WorktreeError::UnknownStart {
                from: from.to_string(),
            })?
            .id();
        let entry =
            entry_at(paths, &repo, &path)?.filter(|e| e.is_cascade && !e.locked && !e.prunable);
        match entry.and_then(|e| e.head.map(|h| (e, h))) {
            Some((entry, old)) => {
                release_branch_except(paths, &repo, &branch, Some(&entry.name))?;
                if entry.branch.is_some() {
                    write_head(paths, &entry.name, &format!("{old}\n"))?;
                }
                clear_stale_ref_lock(paths, &branch);
                repo.reference(&refname, start, true, "cascade: start story")
                    .map_err(GitError::git(format!("create branch '{branch}'")))?;
                record_created(paths, &branch);
                Some((entry.name, start))
            }
            None => None,
        }
    };
    let Some((name, start)) = prepared else {
        return create(paths, &path, &branch, from);
    };
    let checked_out = bring_to(&path, start);
    {
        let _guard = serialised();
        write_head(paths, &name, &format!("ref: {refname}\n"))?;
    }
    if !checked_out.is_some_and(|c| c.is_clean()) {
        // Something the checkout could not clear (a nested repository, an
        // unwritable directory): start over from an empty directory.
        return create(paths, &path, &branch, &start.to_string());
    }
    Ok(WorktreeInfo {
        name,
        path,
        branch: Some(branch),
        head: Some(start),
        locked: false,
        lock_reason: None,
        prunable: false,
        is_cascade: true,
    })
}

/// Detaches HEAD of the cascade worktree at `path` at its current commit and,
/// when `delete_branch_too`, deletes the `cascade/...` branch it had checked
/// out (a merged story's). Returns that branch; `None` when the worktree is
/// unknown or already detached. Files are not touched.
pub fn detach(
    paths: &RepoPaths,
    path: &Path,
    delete_branch_too: bool,
) -> Result<Option<String>, WorktreeError> {
    let path = absolute(path);
    let _guard = serialised();
    let repo = open_main(paths)?;
    let Some(entry) = entry_at(paths, &repo, &path)?.filter(|e| e.is_cascade) else {
        return Ok(None);
    };
    let (Some(branch), Some(head)) = (entry.branch, entry.head) else {
        return Ok(None);
    };
    write_head(paths, &entry.name, &format!("{head}\n"))?;
    if delete_branch_too && is_cascade_branch(&branch) {
        delete_branch_locked(paths, &branch)?;
    }
    Ok(Some(branch))
}

/// Deletes those of the `cascade/...` branches in `branches` that cascade
/// created (the ledger says so), that are merged into `target` (their tip is
/// the target's tip or an ancestor of it) and that no worktree has checked
/// out, with one pass over the repository (the engine deletes merged
/// stories' branches together at the end of a run).
/// Returns the branches deleted; the others are left alone.
pub fn delete_merged_branches(
    paths: &RepoPaths,
    branches: &[String],
    target: &str,
) -> Result<Vec<String>, WorktreeError> {
    let _guard = serialised();
    let repo = open_main(paths)?;
    let target_ref = if target.starts_with("refs/") {
        target.to_string()
    } else {
        format!("refs/heads/{target}")
    };
    let Ok(target_tip) = repo.refname_to_id(&target_ref) else {
        return Ok(Vec::new());
    };
    let held: std::collections::HashSet<String> = holders(paths, &repo)?
        .into_iter()
        .filter_map(|h| h.branch)
        .collect();
    let created = created_branches(paths);
    // The branches that may go, then which of them are merged: one walk of
    // the target's history for all of them.
    let mut candidates = Vec::new();
    for name in branches {
        let name = short_branch(name);
        let ours = is_cascade_branch(name) && created.contains(name);
        if !ours || held.contains(name) {
            continue;
        }
        let Ok(b) = repo.find_branch(name, BranchType::Local) else {
            continue;
        };
        let Some(tip) = b.get().target() else {
            continue;
        };
        candidates.push((b, name, tip));
    }
    let tips = candidates.iter().map(|c| c.2).collect();
    let merged = crate::merge::reachable_from(&repo, target_tip, &tips)?;
    let mut deleted = Vec::new();
    let unheld = Unheld::new(&repo);
    for (b, name, tip) in candidates {
        if merged.contains(&tip) {
            unheld.delete(b, name)?;
            deleted.push(name.to_string());
        }
    }
    Ok(deleted)
}

/// Moves the cascade worktree at `from` to `to` (both under [`root`]), the
/// way `git worktree move` does. When `to` is taken (a directory or a
/// registered worktree) nothing moves. Returns the worktree's path after.
pub fn relocate(paths: &RepoPaths, from: &Path, to: &Path) -> Result<PathBuf, WorktreeError> {
    let root = absolute(&root(paths));
    let (from, to) = (absolute(from), absolute(to));
    for p in [&from, &to] {
        if !p.starts_with(&root) || *p == root {
            return Err(WorktreeError::OutsideRoot {
                path: p.clone(),
                root,
            });
        }
    }
    let _guard = serialised();
    let repo = open_main(paths)?;
    let all = entries(paths, &repo)?;
    let Some(entry) = all.iter().find(|e| e.path == from && e.is_cascade) else {
        return Ok(from);
    };
    if from == to || std::fs::symlink_metadata(&to).is_ok() || all.iter().any(|e| e.path == to) {
        return Ok(from);
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(GitError::io("create", parent))?;
    }
    std::fs::rename(&from, &to).map_err(GitError::io("move", &from))?;
    let gitdir = admin_dir(paths, &entry.name).join("gitdir");
    let mut line = to.join(".git").into_os_string().into_encoded_bytes();
    line.push(b'\n');
    if let Err(e) = std::fs::write(&gitdir, line) {
        // Keep git's view and the directory in step.
        let _ = std::fs::rename(&to, &from);
        return Err(GitError::io("write", gitdir)(e).into());
    }
    Ok(to)
}

/// Removes the lock file of the cascade branch `branch` that a killed
/// cascade process left (git refuses to move a branch while its
/// `<ref>.lock` exists). Only called under the process lock, for a branch
/// being made for a story: no other cascade process works in the repository
/// (the run lock), and nobody else writes cascade's story branches.
fn clear_stale_ref_lock(paths: &RepoPaths, branch: &str) {
    if is_cascade_branch(branch) {
        let lock = paths
            .common_dir
            .join("refs/heads")
            .join(format!("{}.lock", short_branch(branch)));
        let _ = std::fs::remove_file(lock);
    }
}

/// Makes the files and index of the worktree at `path` (HEAD detached at
/// the commit they belong to) exactly `start`'s tree but for ignored files;
/// `None` when that failed.
///
/// Only the paths that can differ are checked out: those that differ
/// between HEAD and `start` (a tree diff, which skips equal subtrees) and
/// those a status scan finds changed since HEAD (tracked changes, untracked
/// files and directories). A path outside both has the same content in the
/// worktree, HEAD and `start`. The check afterwards looks at those paths
/// only. So a reuse costs one scan of the tree (the status) and work in the
/// size of the change; a forced checkout of the whole tree and a second
/// scan to check it cost twice as much (on 10,000 files, 79 against 39 ms:
/// `cargo bench --bench engine -- worktree_reuse`). When the status cannot
/// be read, the whole tree is checked out and scanned.
fn bring_to(path: &Path, start: Oid) -> Option<CheckedOut> {
    let repo = Repository::open(path).ok()?;
    let paths = check_out(&repo, start)?;
    Some(CheckedOut { repo, paths })
}

/// [`bring_to`]'s checkout: the paths it wrote (`None`: the whole tree).
fn check_out(repo: &Repository, start: Oid) -> Option<Option<Vec<Vec<u8>>>> {
    let commit = repo.find_commit(start).ok()?;
    let differing = differing_paths(repo, &commit).ok();
    if differing.as_ref().is_some_and(Vec::is_empty) {
        return Some(differing);
    }
    let mut co = git2::build::CheckoutBuilder::new();
    co.force().remove_untracked(true);
    if let Some(paths) = &differing {
        co.disable_pathspec_match(true);
        for p in paths {
            co.path(p.as_slice());
        }
    }
    repo.checkout_tree(commit.as_object(), Some(&mut co))
        .ok()
        .map(|()| differing)
}

/// The paths (as in git: `/`-separated, an untracked directory as `dir/`)
/// whose content in the worktree of `repo` may differ from `target`'s: what
/// differs between HEAD and `target`, and what the status finds changed
/// since HEAD. Sorted, without duplicates.
fn differing_paths(
    repo: &Repository,
    target: &git2::Commit<'_>,
) -> Result<Vec<Vec<u8>>, git2::Error> {
    let head = repo.head()?.peel_to_tree()?;
    let new = target.tree()?;
    let mut out: Vec<Vec<u8>> = crate::treediff::changed_paths(repo, Some(&head), &new)?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let mut so = status_options();
    let statuses = repo.statuses(Some(&mut so))?;
    out.extend(
        statuses
            .iter()
            .filter(|e| e.status() != git2::Status::CURRENT)
            .map(|e| e.path_bytes().to_vec()),
    );
    out.sort();
    out.dedup();
    Ok(out)
}

/// A worktree brought to a commit by [`bring_to`], to be checked once its
/// HEAD names that commit.
struct CheckedOut {
    repo: Repository,
    /// The paths checked out (`None`: the whole tree).
    paths: Option<Vec<Vec<u8>>>,
}

impl CheckedOut {
    /// Whether nothing is left over where the checkout wrote: no change and
    /// no untracked file that is not ignored.
    fn is_clean(&self) -> bool {
        let mut so = status_options();
        if let Some(paths) = &self.paths {
            if paths.is_empty() {
                return true;
            }
            so.disable_pathspec_match(true);
            for p in paths {
                so.pathspec(p.as_slice());
            }
        }
        self.repo
            .statuses(Some(&mut so))
            .map(|s| s.is_empty())
            .unwrap_or(false)
    }
}

/// What a cleanliness check looks at: tracked changes, and untracked files
/// that are not ignored (an untracked directory as one entry).
fn status_options() -> git2::StatusOptions {
    let mut so = git2::StatusOptions::new();
    so.include_untracked(true)
        .recurse_untracked_dirs(false)
        .include_ignored(false)
        .exclude_submodules(true);
    so
}

/// Replaces a linked worktree's HEAD file atomically (temp file + rename),
/// so no reader ever sees half of it.
fn write_head(paths: &RepoPaths, name: &str, content: &str) -> Result<(), GitError> {
    let admin = admin_dir(paths, name);
    let tmp = admin.join("HEAD.cascade-tmp");
    std::fs::write(&tmp, content).map_err(GitError::io("write", &tmp))?;
    let head = admin.join("HEAD");
    std::fs::rename(&tmp, &head).map_err(GitError::io("write", head))
}

// ---------------------------------------------------------------------------

fn open_main(paths: &RepoPaths) -> Result<Repository, GitError> {
    Repository::open(&paths.main_root).map_err(GitError::git("open repository"))
}

/// `refs/heads/x` -> `x`; anything else unchanged.
fn short_branch(branch: &str) -> &str {
    branch.strip_prefix("refs/heads/").unwrap_or(branch)
}

fn require_cascade_branch(branch: &str) -> Result<(), WorktreeError> {
    if is_cascade_branch(branch) && branch.len() > BRANCH_PREFIX.len() {
        Ok(())
    } else {
        Err(WorktreeError::NotCascadeBranch {
            branch: branch.to_string(),
        })
    }
}

/// An absolute path with symlinks of its existing ancestors resolved, so that
/// it compares equal to the canonical [`root`].
fn absolute(path: &Path) -> PathBuf {
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => absolute(parent).join(name),
        _ => path,
    }
}

/// Checks that `path` is under [`root`] and creates its parent directory.
fn prepare_path(paths: &RepoPaths, path: &Path) -> Result<PathBuf, WorktreeError> {
    // `.cascade/` must never show up as a change in the main worktree (the
    // engine also does this at start, so this is normally a read).
    paths.ensure_excluded(&["/.cascade/"])?;
    let root = root(paths);
    std::fs::create_dir_all(&root).map_err(GitError::io("create", &root))?;
    let root = absolute(&root);
    let path = absolute(path);
    if !path.starts_with(&root) || path == root {
        return Err(WorktreeError::OutsideRoot { path, root });
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(GitError::io("create", parent))?;
    }
    Ok(path)
}

/// Every linked worktree's admin entry, read from the common git dir.
/// O(worktrees), each read whole: for listings and for the rare paths
/// (creating a worktree, moving one aside). A story's own steps find their
/// entry with [`entry_at`] and the holders of a branch with [`holders_of`]:
/// a long run keeps every failed story's worktree, and a read of them all
/// per story made each story cost 0.34 ms per kept worktree.
fn entries(paths: &RepoPaths, repo: &Repository) -> Result<Vec<WorktreeInfo>, GitError> {
    #[cfg(test)]
    tests::LISTINGS.with(|n| n.set(n.get() + 1));
    let root = absolute(&root(paths));
    let names = repo.worktrees().map_err(GitError::git("list worktrees"))?;
    Ok(names
        .iter()
        .flatten()
        .filter_map(|name| entry(paths, repo, &root, name))
        .collect())
}

/// The admin entry `name` (`None`: libgit2 cannot open it, and a listing
/// leaves it out). `root` is the canonical [`root`].
fn entry(paths: &RepoPaths, repo: &Repository, root: &Path, name: &str) -> Option<WorktreeInfo> {
    let wt = repo.find_worktree(name).ok()?;
    let path = wt.path().to_path_buf();
    let (locked, lock_reason) = match wt.is_locked() {
        Ok(WorktreeLockStatus::Locked(reason)) => (true, reason.filter(|r| !r.is_empty())),
        _ => (false, None),
    };
    let head_text = std::fs::read_to_string(admin_dir(paths, name).join("HEAD")).ok();
    let (branch, head) = parse_head(repo, head_text.as_deref());
    Some(WorktreeInfo {
        name: name.to_string(),
        prunable: !locked && wt.validate().is_err(),
        is_cascade: path.starts_with(root) && path != root,
        path,
        branch,
        head,
        locked,
        lock_reason,
    })
}

/// The admin entry of the worktree at `path` (absolute, as [`absolute`]
/// makes it) without reading the others: the one the worktree's own `.git`
/// file names (`gitdir: <common dir>/worktrees/<name>`, as git finds it),
/// when that entry names `path` back. When it does not (no `.git` file,
/// another layout, an entry that claims another directory), the first
/// entry of the listing that claims `path`, every entry read.
fn entry_at(
    paths: &RepoPaths,
    repo: &Repository,
    path: &Path,
) -> Result<Option<WorktreeInfo>, GitError> {
    let root = absolute(&root(paths));
    let named = std::fs::read_to_string(path.join(".git"))
        .ok()
        .and_then(|text| {
            let gitdir = Path::new(text.strip_prefix("gitdir:")?.trim());
            let gitdir = absolute(&path.join(gitdir));
            let admin = absolute(&paths.common_dir.join("worktrees"));
            (gitdir.parent() == Some(admin.as_path()))
                .then(|| gitdir.file_name()?.to_str().map(str::to_string))?
        })
        .and_then(|name| entry(paths, repo, &root, &name))
        .filter(|e| e.path == path);
    match named {
        Some(e) => Ok(Some(e)),
        None => Ok(entries(paths, repo)?.into_iter().find(|e| e.path == path)),
    }
}

/// The branch and commit a HEAD file names.
fn parse_head(repo: &Repository, text: Option<&str>) -> (Option<String>, Option<Oid>) {
    let Some(text) = text.map(str::trim) else {
        return (None, None);
    };
    match head_ref(text) {
        Some(r) => (
            Some(short_branch(r).to_string()),
            repo.refname_to_id(r).ok(),
        ),
        None => (None, Oid::from_str(text).ok()),
    }
}

/// The ref a HEAD file's text names (`ref: refs/heads/x` -> `refs/heads/x`);
/// `None` when it is detached (a commit id) or not a HEAD.
fn head_ref(text: &str) -> Option<&str> {
    Some(text.trim().strip_prefix("ref:")?.trim())
}

fn admin_dir(paths: &RepoPaths, name: &str) -> PathBuf {
    paths.common_dir.join("worktrees").join(name)
}

/// A worktree (main or linked) and the branch it has checked out.
#[derive(Clone)]
struct Holder {
    path: PathBuf,
    branch: Option<String>,
    is_cascade: bool,
    name: Option<String>,
}

fn holders(paths: &RepoPaths, repo: &Repository) -> Result<Vec<Holder>, GitError> {
    holders_where(paths, repo, |_| true)
}

/// The worktrees that have `branch` checked out: [`holders`] that name it.
/// Every worktree's HEAD is still read (as `git worktree add` reads them:
/// any worktree may hold any branch), but only a holder's entry is read
/// whole.
fn holders_of(paths: &RepoPaths, repo: &Repository, branch: &str) -> Result<Vec<Holder>, GitError> {
    holders_where(paths, repo, |b| b == Some(branch))
}

/// The main worktree and the linked ones whose HEAD's branch (short name,
/// `None` when detached or unreadable) passes `keep`.
fn holders_where(
    paths: &RepoPaths,
    repo: &Repository,
    keep: impl Fn(Option<&str>) -> bool,
) -> Result<Vec<Holder>, GitError> {
    // The branch a HEAD file names, as `parse_head` names it (without
    // resolving the commit).
    fn branch_of(text: &str) -> Option<&str> {
        head_ref(text).map(short_branch)
    }
    let main_head = std::fs::read_to_string(paths.common_dir.join("HEAD")).ok();
    let main_branch = main_head.as_deref().and_then(branch_of).map(str::to_string);
    let mut out = Vec::new();
    if keep(main_branch.as_deref()) {
        out.push(Holder {
            path: paths.main_root.clone(),
            branch: main_branch,
            is_cascade: false,
            name: None,
        });
    }
    let root = absolute(&root(paths));
    // The admin entries' names from their directory (libgit2's listing
    // looks at three files of each); one whose HEAD does not read is no
    // worktree either way.
    let admin = paths.common_dir.join("worktrees");
    let mut names: Vec<String> = match std::fs::read_dir(&admin) {
        Ok(dir) => dir
            .flatten()
            .filter_map(|d| d.file_name().into_string().ok())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(GitError::io("list", &admin)(e)),
    };
    names.sort_unstable();
    for name in names {
        let Ok(head) = std::fs::read_to_string(admin.join(&name).join("HEAD")) else {
            continue;
        };
        if !keep(branch_of(&head)) {
            continue;
        }
        if let Some(e) = entry(paths, repo, &root, &name) {
            out.push(Holder {
                path: e.path,
                branch: e.branch,
                is_cascade: e.is_cascade,
                name: Some(e.name),
            });
        }
    }
    Ok(out)
}

/// Frees `branch` for reuse: removes stale cascade worktrees that hold it,
/// refuses when any other worktree does.
fn release_branch(paths: &RepoPaths, repo: &Repository, branch: &str) -> Result<(), WorktreeError> {
    release_branch_except(paths, repo, branch, None)
}

/// [`release_branch`], leaving the worktree whose admin entry is `keep` alone.
fn release_branch_except(
    paths: &RepoPaths,
    repo: &Repository,
    branch: &str,
    keep: Option<&str>,
) -> Result<(), WorktreeError> {
    for h in holders_of(paths, repo, branch)? {
        if keep.is_some() && h.name.as_deref() == keep {
            continue;
        }
        match (&h.name, h.is_cascade) {
            (Some(name), true) => discard(paths, name, Some(&h.path))?,
            _ => {
                return Err(WorktreeError::BranchInUse {
                    branch: branch.to_string(),
                    worktree: h.path,
                })
            }
        }
    }
    Ok(())
}

/// Makes sure nothing occupies `path`: a cascade worktree registered there is
/// discarded, a leftover directory removed (it is under [`root`]).
fn clear_path(paths: &RepoPaths, repo: &Repository, path: &Path) -> Result<(), WorktreeError> {
    for e in entries(paths, repo)? {
        if e.path == path {
            if !e.is_cascade {
                return Err(WorktreeError::OutsideRoot {
                    path: e.path,
                    root: root(paths),
                });
            }
            discard(paths, &e.name, Some(&e.path))?;
        }
    }
    remove_dir(path)?;
    Ok(())
}

/// Removes a worktree's directory (when given) and its admin entry.
fn discard(paths: &RepoPaths, name: &str, dir: Option<&Path>) -> Result<(), GitError> {
    if let Some(dir) = dir {
        remove_dir(dir)?;
    }
    remove_dir(&admin_dir(paths, name))
}

fn remove_dir(dir: &Path) -> Result<(), GitError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            // Tools leave read-only directories behind (Go's module cache,
            // `chmod -w` build outputs); entries of a directory can only be
            // unlinked when it is writable. Only our own tree is touched.
            make_writable(dir);
            std::fs::remove_dir_all(dir).or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(GitError::io("remove", dir)(e)),
            })
        }
        Err(e) => Err(GitError::io("remove", dir)(e)),
    }
}

/// Adds owner write permission to `dir` and every directory below it
/// (symlinks are not followed).
fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode();
    if mode & 0o700 != 0o700 {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o700));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            make_writable(&entry.path());
        }
    }
}

/// An unused admin entry name derived from the directory name.
fn admin_name(paths: &RepoPaths, path: &Path) -> String {
    let base: String = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "worktree".to_string())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let base = base.trim_start_matches('.').to_string();
    let base = if base.is_empty() {
        "worktree".to_string()
    } else {
        base
    };
    let mut name = base.clone();
    let mut n = 2;
    while admin_dir(paths, &name).exists() {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

/// Writes git's admin data for a new worktree at `path` (which must not
/// exist) on `reference`, the way `git worktree add` lays it out, and the
/// worktree's `.git` file. The files are checked out by [`populate`], outside
/// the process lock, so worktrees of a large repository are filled in parallel.
fn register(
    paths: &RepoPaths,
    path: &Path,
    reference: &git2::Reference<'_>,
) -> Result<WorktreeInfo, WorktreeError> {
    use std::os::unix::ffi::OsStrExt;

    let refname = reference
        .name()
        .ok_or_else(|| WorktreeError::NoSuchBranch {
            branch: String::from_utf8_lossy(reference.name_bytes()).into_owned(),
        })?
        .to_string();
    let admin_root = paths.common_dir.join("worktrees");
    std::fs::create_dir_all(&admin_root).map_err(GitError::io("create", &admin_root))?;
    let name = admin_name(paths, path);
    let admin = admin_dir(paths, &name);
    std::fs::create_dir(&admin).map_err(GitError::io("create", &admin))?;
    let line = |p: &Path, prefix: &[u8]| -> Vec<u8> {
        let mut v = prefix.to_vec();
        v.extend_from_slice(p.as_os_str().as_bytes());
        v.push(b'\n');
        v
    };
    let write = |file: PathBuf, content: Vec<u8>| -> Result<(), GitError> {
        std::fs::write(&file, content).map_err(GitError::io("write", file))
    };
    let made = (|| -> Result<(), GitError> {
        std::fs::create_dir(path).map_err(GitError::io("create", path))?;
        write(admin.join("gitdir"), line(&path.join(".git"), b""))?;
        write(admin.join("commondir"), b"../..\n".to_vec())?;
        write(admin.join("HEAD"), format!("ref: {refname}\n").into_bytes())?;
        write(path.join(".git"), line(&admin, b"gitdir: "))?;
        Ok(())
    })();
    if let Err(e) = made {
        // Never leave half a worktree behind.
        let _ = discard(paths, &name, Some(path));
        return Err(e.into());
    }
    Ok(WorktreeInfo {
        name,
        path: path.to_path_buf(),
        branch: Some(short_branch(&refname).to_string()),
        head: reference.target(),
        locked: false,
        lock_reason: None,
        prunable: false,
        is_cascade: true,
    })
}

/// Checks out the branch's files and index into a worktree made by
/// [`register`]; on failure the worktree is discarded.
fn populate(paths: &RepoPaths, info: WorktreeInfo) -> Result<WorktreeInfo, WorktreeError> {
    let result = Repository::open(&info.path).and_then(|repo| {
        let mut co = git2::build::CheckoutBuilder::new();
        // The directory is new and empty: write every file of the tree.
        co.force();
        repo.checkout_head(Some(&mut co))
    });
    if let Err(e) = result {
        let _guard = serialised();
        let _ = discard(paths, &info.name, Some(&info.path));
        return Err(
            GitError::git(format!("check out worktree '{}'", info.path.display()))(e).into(),
        );
    }
    Ok(info)
}

/// Renames a directory to a `.trash-*` name beside it (under [`root`]), so
/// it can be deleted outside the lock; `None` when it does not exist.
fn move_aside(path: &Path) -> Result<Option<PathBuf>, GitError> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let trash = path.with_file_name(format!("{TRASH_PREFIX}{base}-{}-{n}", std::process::id()));
    match std::fs::rename(path, &trash) {
        Ok(()) => Ok(Some(trash)),
        Err(_) => {
            // Could not rename (odd file system): delete in place instead.
            remove_dir(path)?;
            Ok(None)
        }
    }
}

/// Name prefix of directories being deleted (see [`move_aside`]).
const TRASH_PREFIX: &str = ".trash-";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::testutil::*;

    thread_local! {
        /// How many times this thread read every worktree's entry.
        pub(super) static LISTINGS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[test]
    fn handing_a_worktree_to_the_next_story_reads_no_listing_of_every_worktree() {
        let (_tmp, _repo, paths) = init_repo();
        for i in 0..3 {
            story_worktree(&paths, &format!("cascade/kept-{i}"));
        }
        let slot = slot_path(&paths, None, 1);
        create(&paths, &slot, "cascade/s0", "main").unwrap();
        LISTINGS.with(|n| n.set(0));
        for i in 1..4 {
            std::fs::write(slot.join("leftover.txt"), "x").unwrap();
            assert_eq!(
                detach(&paths, &slot, true).unwrap().as_deref(),
                Some(format!("cascade/s{}", i - 1).as_str())
            );
            let wt = reuse(&paths, &slot, &format!("cascade/s{i}"), "main").unwrap();
            assert_eq!(wt.branch.as_deref(), Some(format!("cascade/s{i}").as_str()));
            assert!(!slot.join("leftover.txt").exists());
        }
        assert_eq!(LISTINGS.with(|n| n.get()), 0);
        // A slot that is no worktree yet is looked for in every entry.
        let fresh = slot_path(&paths, None, 2);
        reuse(&paths, &fresh, "cascade/fresh", "main").unwrap();
        assert!(LISTINGS.with(|n| n.get()) > 0);
    }

    #[test]
    fn create_makes_a_worktree_on_a_new_branch() {
        let (_tmp, repo, paths) = init_repo();
        let base = head(&repo);
        let path = path_for(&paths, "cascade/story-001");
        let wt = create(&paths, &path, "cascade/story-001", "main").unwrap();
        assert_eq!(wt.branch.as_deref(), Some("cascade/story-001"));
        assert_eq!(wt.head, Some(base));
        assert!(wt.is_cascade);
        assert_eq!(
            std::fs::read_to_string(wt.path.join("README.md")).unwrap(),
            "hello\n"
        );
        assert!(wt
            .path
            .starts_with(paths.main_root.join(".cascade/worktrees")));
        let listed = list(&paths).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].branch.as_deref(), Some("cascade/story-001"));
        assert!(!listed[0].prunable && !listed[0].locked && listed[0].is_cascade);
        // The worktree is a real checkout of the branch.
        let wrepo = Repository::open(&wt.path).unwrap();
        assert_eq!(wrepo.head().unwrap().shorthand(), Some("cascade/story-001"));
        assert!(wrepo.statuses(None).unwrap().is_empty());
    }

    #[test]
    fn create_from_a_commit_id() {
        let (_tmp, repo, paths) = init_repo();
        let first = head(&repo);
        commit_file(&repo, "b.txt", "b", "second");
        let path = path_for(&paths, "cascade/x");
        let wt = create(&paths, &path, "cascade/x", &first.to_string()).unwrap();
        assert_eq!(wt.head, Some(first));
        assert!(!wt.path.join("b.txt").exists());
    }

    #[test]
    fn refuses_non_cascade_branches_paths_and_unknown_starts() {
        let (tmp, _repo, paths) = init_repo();
        let err = create(&paths, &path_for(&paths, "x"), "main", "main").unwrap_err();
        assert!(
            matches!(err, WorktreeError::NotCascadeBranch { .. }),
            "{err}"
        );
        let err = create(&paths, &tmp.path().join("elsewhere"), "cascade/a", "main").unwrap_err();
        assert!(matches!(err, WorktreeError::OutsideRoot { .. }), "{err}");
        let err = create(&paths, &path_for(&paths, "cascade/a"), "cascade/a", "nope").unwrap_err();
        assert!(matches!(err, WorktreeError::UnknownStart { .. }), "{err}");
        assert!(err.to_string().contains("'nope'"));
    }

    #[test]
    fn refuses_a_cascade_branch_checked_out_in_the_main_worktree() {
        let (_tmp, repo, paths) = init_repo();
        let c = repo.head().unwrap().peel_to_commit().unwrap();
        repo.branch("cascade/mine", &c, false).unwrap();
        repo.set_head("refs/heads/cascade/mine").unwrap();
        let err = create(
            &paths,
            &path_for(&paths, "cascade/mine"),
            "cascade/mine",
            "main",
        )
        .unwrap_err();
        assert!(matches!(err, WorktreeError::BranchInUse { .. }), "{err}");
        assert!(repo.find_branch("cascade/mine", BranchType::Local).is_ok());
    }

    #[test]
    fn a_stale_worktree_of_a_killed_run_is_replaced_cleanly() {
        let (_tmp, repo, paths) = init_repo();
        let path = path_for(&paths, "cascade/s");
        let wt = create(&paths, &path, "cascade/s", "main").unwrap();
        // The killed run left work behind on the branch and in the directory.
        std::fs::write(wt.path.join("junk.txt"), "junk").unwrap();
        let wrepo = Repository::open(&wt.path).unwrap();
        commit_file(&wrepo, "old.txt", "old", "old attempt");
        commit_file(&repo, "new.txt", "new", "main moved");
        let again = create(&paths, &path, "cascade/s", "main").unwrap();
        assert_eq!(again.head, Some(head(&repo)));
        assert!(again.path.join("new.txt").exists());
        assert!(!again.path.join("old.txt").exists());
        assert!(!again.path.join("junk.txt").exists());
        assert_eq!(list(&paths).unwrap().len(), 1);
        // Also when the stale worktree sits at another path.
        let other = path_for(&paths, "cascade/s-elsewhere");
        let moved = create(&paths, &other, "cascade/s", "main").unwrap();
        assert_eq!(moved.path, absolute(&other));
        let listed = list(&paths).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(!path.exists());
    }

    #[test]
    fn a_leftover_directory_without_admin_data_is_replaced() {
        let (_tmp, _repo, paths) = init_repo();
        let path = path_for(&paths, "cascade/d");
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("x"), "x").unwrap();
        let wt = create(&paths, &path, "cascade/d", "main").unwrap();
        assert!(!wt.path.join("x").exists());
        assert!(wt.path.join("README.md").exists());
    }

    #[test]
    fn remove_copes_with_read_only_directories() {
        use std::os::unix::fs::PermissionsExt;
        let (_tmp, _repo, paths) = init_repo();
        let wt = create(
            &paths,
            &path_for(&paths, "cascade/ro"),
            "cascade/ro",
            "main",
        )
        .unwrap();
        let ro = wt.path.join("cache/pkg");
        std::fs::create_dir_all(&ro).unwrap();
        std::fs::write(ro.join("f"), "x").unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        std::fs::set_permissions(
            wt.path.join("cache"),
            std::fs::Permissions::from_mode(0o555),
        )
        .unwrap();
        remove(&paths, &wt.path, true).unwrap();
        assert!(!wt.path.exists());
        // Nothing is left behind beside it either (no `.trash-*`).
        assert_eq!(std::fs::read_dir(root(&paths)).unwrap().count(), 0);
    }

    #[test]
    fn attach_keeps_the_branch_commits() {
        let (_tmp, _repo, paths) = init_repo();
        let path = path_for(&paths, "cascade/feat");
        let wt = create(&paths, &path, "cascade/feat", "main").unwrap();
        let wrepo = Repository::open(&wt.path).unwrap();
        let tip = commit_file(&wrepo, "f.txt", "f", "feature work");
        std::fs::remove_dir_all(&wt.path).unwrap();
        let back = attach(&paths, &path, "cascade/feat").unwrap();
        assert_eq!(back.head, Some(tip));
        assert!(back.path.join("f.txt").exists());
        let err = attach(&paths, &path, "cascade/none").unwrap_err();
        assert!(matches!(err, WorktreeError::NoSuchBranch { .. }));
    }

    #[test]
    fn remove_deletes_directory_admin_data_and_optionally_the_branch() {
        let (_tmp, repo, paths) = init_repo();
        let a = create(&paths, &path_for(&paths, "cascade/a"), "cascade/a", "main").unwrap();
        let b = create(&paths, &path_for(&paths, "cascade/b"), "cascade/b", "main").unwrap();
        assert_eq!(
            remove(&paths, &a.path, true).unwrap().as_deref(),
            Some("cascade/a")
        );
        assert!(!a.path.exists());
        assert!(repo.find_branch("cascade/a", BranchType::Local).is_err());
        remove(&paths, &b.path, false).unwrap();
        assert!(!b.path.exists());
        assert!(repo.find_branch("cascade/b", BranchType::Local).is_ok());
        assert!(list(&paths).unwrap().is_empty());
        assert!(repo.worktrees().unwrap().is_empty());
        // Removing again is fine.
        assert_eq!(remove(&paths, &b.path, true).unwrap(), None);
        assert!(delete_branch(&paths, "cascade/b").unwrap());
        assert!(!delete_branch(&paths, "cascade/b").unwrap());
        let err = remove(&paths, &paths.main_root, true).unwrap_err();
        assert!(matches!(err, WorktreeError::OutsideRoot { .. }));
    }

    #[test]
    fn prune_only_touches_cascade_leftovers() {
        let (tmp, repo, paths) = init_repo();
        // A worktree the user made, outside .cascade.
        let c = repo.head().unwrap().peel_to_commit().unwrap();
        let user_branch = repo.branch("user-feature", &c, false).unwrap();
        let user_ref = user_branch.into_reference();
        let mut opts = git2::WorktreeAddOptions::new();
        opts.reference(Some(&user_ref));
        let user_wt = tmp.path().join("user-wt");
        repo.worktree("user-wt", &user_wt, Some(&opts)).unwrap();
        // The user's worktree goes stale too: prune must leave it alone.
        std::fs::remove_dir_all(&user_wt).unwrap();

        let live = create(
            &paths,
            &path_for(&paths, "cascade/live"),
            "cascade/live",
            "main",
        )
        .unwrap();
        let gone = create(
            &paths,
            &path_for(&paths, "cascade/gone"),
            "cascade/gone",
            "main",
        )
        .unwrap();
        std::fs::remove_dir_all(&gone.path).unwrap();
        let locked = create(
            &paths,
            &path_for(&paths, "cascade/locked"),
            "cascade/locked",
            "main",
        )
        .unwrap();
        repo.find_worktree(&locked.name)
            .unwrap()
            .lock(Some("keep me"))
            .unwrap();

        let all = list(&paths).unwrap();
        assert_eq!(all.len(), 4);
        let by_name = |n: &str| all.iter().find(|w| w.name == n).unwrap().clone();
        assert!(by_name("gone").prunable && by_name("gone").is_cascade);
        assert!(by_name("user-wt").prunable && !by_name("user-wt").is_cascade);
        assert!(by_name("locked").locked && !by_name("locked").prunable);
        assert_eq!(by_name("locked").lock_reason.as_deref(), Some("keep me"));

        assert_eq!(prune_stale(&paths).unwrap(), vec!["gone".to_string()]);
        assert_eq!(list(&paths).unwrap().len(), 3);
        assert!(live.path.exists());

        let to_main = |_: &str| Some("main".to_string());
        let policy = PrunePolicy {
            target_of: Some(&to_main),
            ..Default::default()
        };
        let report = prune_all(&paths, &policy).unwrap();
        assert_eq!(report.worktrees, vec![live.path.clone()]);
        assert_eq!(
            report.branches,
            vec!["cascade/gone".to_string(), "cascade/live".to_string()]
        );
        assert_eq!(report.skipped.len(), 2, "{:?}", report.skipped);
        assert!(!live.path.exists());
        assert!(locked.path.exists());
        assert!(repo.find_branch("user-feature", BranchType::Local).is_ok());
        assert!(repo.find_branch("main", BranchType::Local).is_ok());
        let names: Vec<String> = list(&paths).unwrap().into_iter().map(|w| w.name).collect();
        assert_eq!(names, vec!["locked".to_string(), "user-wt".to_string()]);
    }

    #[test]
    fn prune_keeps_branches_cascade_did_not_create_or_that_are_unmerged() {
        let (_tmp, repo, paths) = init_repo();
        // The user's own `cascade/precious` with a commit only it has.
        let base = repo.head().unwrap().peel_to_commit().unwrap();
        repo.branch("cascade/precious", &base, false).unwrap();
        repo.set_head("refs/heads/cascade/precious").unwrap();
        commit_file(&repo, "p.txt", "mine\n", "precious work");
        repo.set_head("refs/heads/main").unwrap();
        // The user's merged `cascade/other`: still not cascade's to delete.
        repo.branch("cascade/other", &base, false).unwrap();
        // cascade's: one merged, one with unmerged work (a failed story).
        let merged = create(
            &paths,
            &path_for(&paths, "cascade/done"),
            "cascade/done",
            "main",
        )
        .unwrap();
        remove(&paths, &merged.path, false).unwrap();
        let failed = create(
            &paths,
            &path_for(&paths, "cascade/fail"),
            "cascade/fail",
            "main",
        )
        .unwrap();
        let wrepo = Repository::open(&failed.path).unwrap();
        commit_file(&wrepo, "f.txt", "agent\n", "agent work");
        drop(wrepo);
        let created = created_branches(&paths);
        assert!(created.contains("cascade/done") && created.contains("cascade/fail"));
        assert!(!created.contains("cascade/precious"));

        let to_main = |_: &str| Some("main".to_string());
        let policy = PrunePolicy {
            target_of: Some(&to_main),
            ..Default::default()
        };
        let verdicts = branch_verdicts(&paths, &policy).unwrap();
        let why = |n: &str| {
            verdicts
                .iter()
                .find(|(b, _)| b.name == n)
                .unwrap()
                .1
                .clone()
        };
        assert_eq!(
            why("cascade/precious").as_deref(),
            Some("not created by cascade")
        );
        assert_eq!(
            why("cascade/other").as_deref(),
            Some("not created by cascade")
        );
        assert_eq!(why("cascade/done"), None);
        let report = prune_all(&paths, &policy).unwrap();
        assert_eq!(report.branches, vec!["cascade/done".to_string()]);
        assert!(report.skipped.contains(&(
            "cascade/fail".to_string(),
            "not merged into main".to_string()
        )));
        for b in ["cascade/precious", "cascade/other", "cascade/fail"] {
            assert!(repo.find_branch(b, BranchType::Local).is_ok(), "{b}");
        }
        // The ledger forgets what is gone, keeps what is kept.
        let created = created_branches(&paths);
        assert!(!created.contains("cascade/done") && created.contains("cascade/fail"));

        // --force deletes them all.
        let policy = PrunePolicy {
            force: true,
            ..Default::default()
        };
        let report = prune_all(&paths, &policy).unwrap();
        assert_eq!(report.branches.len(), 3, "{report:?}");
        assert!(cascade_branches(&paths).unwrap().is_empty());
    }

    #[test]
    fn cascade_branches_names_their_worktrees() {
        let (_tmp, _repo, paths) = init_repo();
        let wt = create(&paths, &path_for(&paths, "cascade/a"), "cascade/a", "main").unwrap();
        let bs = cascade_branches(&paths).unwrap();
        assert_eq!(bs.len(), 1);
        assert_eq!(bs[0].name, "cascade/a");
        assert_eq!(bs[0].worktree.as_deref(), Some(wt.path.as_path()));
    }

    /// The git CLI (when installed) sees cascade's worktrees as its own.
    #[test]
    fn git_cli_understands_the_worktrees() {
        let git = |dir: &Path, args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .output()
        };
        let (_tmp, _repo, paths) = init_repo();
        if git(&paths.main_root, &["--version"]).is_err() {
            return; // no git on this machine: nothing to be compatible with
        }
        let wt = create(
            &paths,
            &path_for(&paths, "cascade/cli"),
            "cascade/cli",
            "main",
        )
        .unwrap();
        let out = git(&paths.main_root, &["worktree", "list", "--porcelain"]).unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("worktree {}", wt.path.display())),
            "{text}"
        );
        assert!(text.contains("branch refs/heads/cascade/cli"), "{text}");
        let out = git(&wt.path, &["status", "--porcelain"]).unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout), "");
        // `git worktree prune` keeps it (it is valid).
        git(&paths.main_root, &["worktree", "prune"]).unwrap();
        assert_eq!(list(&paths).unwrap().len(), 1);
        remove(&paths, &wt.path, true).unwrap();
        let out = git(&paths.main_root, &["worktree", "list", "--porcelain"]).unwrap();
        assert!(!String::from_utf8_lossy(&out.stdout).contains("cascade/cli"));
    }

    #[test]
    fn branch_names_and_paths() {
        assert_eq!(branch_name(None, "story-1"), "cascade/story-1");
        assert_eq!(branch_name(Some("auth"), "story-1"), "cascade/auth.story-1");
        assert!(is_cascade_branch("refs/heads/cascade/x"));
        assert!(!is_cascade_branch("main"));
        let (_tmp, _repo, paths) = init_repo();
        assert_eq!(
            path_for(&paths, "refs/heads/cascade/a/b"),
            paths.main_root.join(".cascade/worktrees/a+b")
        );
    }

    #[test]
    fn parallel_creation_of_different_branches() {
        let (_tmp, _repo, paths) = init_repo();
        // As the engine does before it starts stories.
        paths.ensure_excluded(&["/.cascade/"]).unwrap();
        std::thread::scope(|s| {
            for i in 0..6 {
                let paths = paths.clone();
                s.spawn(move || {
                    let b = format!("cascade/p{i}");
                    create(&paths, &path_for(&paths, &b), &b, "main").unwrap();
                });
            }
        });
        assert_eq!(list(&paths).unwrap().len(), 6);
    }

    /// Untracked, modified, staged and deleted leftovers of a story.
    fn make_a_mess(wt: &Path) {
        std::fs::write(wt.join("README.md"), "changed by the agent\n").unwrap();
        std::fs::write(wt.join("stray.txt"), "x").unwrap();
        std::fs::create_dir_all(wt.join("newdir/deep")).unwrap();
        std::fs::write(wt.join("newdir/deep/f.txt"), "x").unwrap();
        std::fs::write(wt.join("staged.txt"), "s").unwrap();
        let wrepo = Repository::open(wt).unwrap();
        let mut index = wrepo.index().unwrap();
        index.add_path(Path::new("staged.txt")).unwrap();
        index.write().unwrap();
    }

    fn status_lines(wt: &Path) -> Vec<String> {
        let wrepo = Repository::open(wt).unwrap();
        let mut so = git2::StatusOptions::new();
        so.include_untracked(true).include_ignored(false);
        let st = wrepo.statuses(Some(&mut so)).unwrap();
        st.iter()
            .map(|e| format!("{:?} {}", e.status(), e.path().unwrap_or("")))
            .collect()
    }

    #[test]
    fn reuse_starts_exactly_at_the_new_base_keeping_ignored_files() {
        let (_tmp, repo, paths) = init_repo();
        paths.ensure_excluded(&["/.cascade/"]).unwrap();
        commit_file(&repo, ".gitignore", "target/\n*.log\n", "ignore");
        commit_file(&repo, "gone-later.txt", "g", "a file main deletes later");
        let slot = slot_path(&paths, None, 1);
        let wt = create(&paths, &slot, "cascade/one", "main").unwrap();
        // The first story: a commit on its branch, then leftovers.
        let wrepo = Repository::open(&wt.path).unwrap();
        let story_commit = commit_file(&wrepo, "one.txt", "1", "one: story");
        make_a_mess(&wt.path);
        std::fs::remove_file(wt.path.join("gone-later.txt")).unwrap();
        std::fs::create_dir_all(wt.path.join("target/debug")).unwrap();
        std::fs::write(wt.path.join("target/debug/cache"), "warm").unwrap();
        std::fs::write(wt.path.join("build.log"), "log").unwrap();
        // Merged: back to the pool; main moves on meanwhile.
        assert_eq!(
            detach(&paths, &wt.path, true).unwrap().as_deref(),
            Some("cascade/one")
        );
        assert!(repo.find_branch("cascade/one", BranchType::Local).is_err());
        let mut index = repo.index().unwrap();
        index.remove_path(Path::new("gone-later.txt")).unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let parent = repo.head().unwrap().peel_to_commit().unwrap();
        let sig = git2::Signature::now("t", "t@t").unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "rm", &tree, &[&parent])
            .unwrap();
        let base = commit_file(&repo, "other.txt", "o", "another story merged");
        assert_ne!(story_commit, base);

        let again = reuse(&paths, &wt.path, "cascade/two", "main").unwrap();
        assert_eq!(again.path, wt.path);
        assert_eq!(again.head, Some(base));
        assert_eq!(again.branch.as_deref(), Some("cascade/two"));
        // Exactly the new base: no leftover of the previous story.
        assert_eq!(status_lines(&wt.path), Vec::<String>::new());
        assert_eq!(
            std::fs::read_to_string(wt.path.join("README.md")).unwrap(),
            "hello\n"
        );
        for gone in [
            "one.txt",
            "stray.txt",
            "newdir",
            "staged.txt",
            "gone-later.txt",
        ] {
            assert!(!wt.path.join(gone).exists(), "{gone} left over");
        }
        assert!(wt.path.join("other.txt").exists());
        // Ignored files stay: warm build caches.
        assert_eq!(
            std::fs::read_to_string(wt.path.join("target/debug/cache")).unwrap(),
            "warm"
        );
        assert!(wt.path.join("build.log").exists());
        // git agrees: the worktree is on the new branch at the base, clean.
        let wrepo = Repository::open(&wt.path).unwrap();
        assert_eq!(wrepo.head().unwrap().shorthand(), Some("cascade/two"));
        assert_eq!(wrepo.head().unwrap().target(), Some(base));
        let listed = list(&paths).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].branch.as_deref(), Some("cascade/two"));
        assert!(listed[0].is_cascade);
    }

    /// `git worktree add -q <options> <repo>/../outside <commit-ish>`: a
    /// worktree outside cascade's root.
    fn outside_worktree(paths: &RepoPaths, options: &[&str], commitish: &[&str]) -> PathBuf {
        let outside = paths.main_root.parent().unwrap().join("outside");
        let mut argv = vec!["worktree", "add", "-q"];
        argv.extend(options);
        argv.push(outside.to_str().unwrap());
        argv.extend(commitish);
        git(&paths.main_root, &argv);
        outside
    }

    /// What a holder says, to compare lists of them.
    fn said(h: &[Holder]) -> Vec<(PathBuf, Option<String>, bool, Option<String>)> {
        h.iter()
            .map(|h| {
                (
                    h.path.clone(),
                    h.branch.clone(),
                    h.is_cascade,
                    h.name.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn a_worktree_and_a_branchs_holders_are_found_as_a_reading_of_every_entry_finds_them() {
        let (_tmp, repo, paths) = init_repo();
        let a = story_worktree(&paths, "cascade/a");
        let b = story_worktree(&paths, "cascade/b");
        let c = story_worktree(&paths, "cascade/c");
        let d = story_worktree(&paths, "cascade/d");
        // `b` detached; `c`'s `.git` file names `a`'s entry (its own still
        // claims it); `d`'s `.git` file gone; an admin entry libgit2 cannot
        // open (no `gitdir`) whose HEAD names `a`'s branch; an outside
        // worktree that holds the branch main's checkout does not.
        detach(&paths, &b.path, false).unwrap();
        let a_git = std::fs::read_to_string(a.path.join(".git")).unwrap();
        std::fs::write(c.path.join(".git"), &a_git).unwrap();
        std::fs::remove_file(d.path.join(".git")).unwrap();
        let broken = paths.common_dir.join("worktrees").join("broken");
        std::fs::create_dir_all(&broken).unwrap();
        std::fs::write(broken.join("HEAD"), "ref: refs/heads/cascade/a\n").unwrap();
        let outside = outside_worktree(&paths, &["-b", "side"], &[]);
        let outside = absolute(&outside);
        // A relative `gitdir:` line (git's `worktree.useRelativePaths`).
        let e = std::fs::read_to_string(outside.join(".git")).unwrap();
        let admin = Path::new(e.trim().strip_prefix("gitdir: ").unwrap());
        let rel = format!(
            "gitdir: ../repo/.git/worktrees/{}\n",
            admin.file_name().unwrap().to_str().unwrap()
        );
        std::fs::write(outside.join(".git"), rel).unwrap();

        let all = entries(&paths, &repo).unwrap();
        let scanned = |p: &Path| all.iter().find(|e| e.path == p).map(|e| format!("{e:?}"));
        for p in [
            &a.path,
            &b.path,
            &c.path,
            &d.path,
            &outside,
            &paths.main_root,
        ] {
            let p = absolute(p);
            let found = entry_at(&paths, &repo, &p)
                .unwrap()
                .map(|e| format!("{e:?}"));
            assert_eq!(found, scanned(&p), "{}", p.display());
        }
        assert!(entry_at(&paths, &repo, &absolute(&a.path))
            .unwrap()
            .is_some());
        assert!(entry_at(&paths, &repo, &outside).unwrap().is_some());

        let every = holders(&paths, &repo).unwrap();
        assert_eq!(
            every.len(),
            6,
            "main and five linked worktrees: {:?}",
            said(&every)
        );
        for branch in [
            "main",
            "side",
            "cascade/a",
            "cascade/b",
            "cascade/c",
            "cascade/d",
            "none",
        ] {
            let want: Vec<_> = every
                .iter()
                .filter(|h| h.branch.as_deref() == Some(branch))
                .cloned()
                .collect();
            let got = holders_of(&paths, &repo, branch).unwrap();
            assert_eq!(said(&got), said(&want), "{branch}");
        }
        assert_eq!(holders_of(&paths, &repo, "cascade/a").unwrap().len(), 1);
        assert_eq!(holders_of(&paths, &repo, "main").unwrap().len(), 1);
    }

    #[test]
    fn a_deleted_branch_takes_its_config_section_with_it_when_it_has_one() {
        let (_tmp, repo, paths) = init_repo();
        for b in ["cascade/plain", "cascade/tracked", "cascade/other"] {
            story_worktree(&paths, b);
            detach(&paths, &path_for(&paths, b), false).unwrap();
        }
        {
            let mut cfg = repo.config().unwrap();
            cfg.set_str("branch.cascade/tracked.remote", "origin")
                .unwrap();
            cfg.set_str("branch.cascade/other.merge", "refs/heads/x")
                .unwrap();
        }
        assert!(delete_branch(&paths, "cascade/plain").unwrap());
        assert!(delete_branch(&paths, "cascade/tracked").unwrap());
        assert!(
            !delete_branch(&paths, "cascade/plain").unwrap(),
            "gone already"
        );
        let cfg = repo.config().unwrap().snapshot().unwrap();
        assert!(cfg.get_str("branch.cascade/tracked.remote").is_err());
        assert_eq!(
            cfg.get_str("branch.cascade/other.merge").unwrap(),
            "refs/heads/x"
        );
        for b in ["cascade/plain", "cascade/tracked"] {
            assert!(repo.find_branch(b, BranchType::Local).is_err(), "{b}");
        }
        assert!(repo.find_branch("cascade/other", BranchType::Local).is_ok());
        // A branch a worktree has checked out is still refused.
        let held = story_worktree(&paths, "cascade/held");
        outside_worktree(&paths, &[], &["cascade/other"]);
        assert!(matches!(
            delete_branch(&paths, "cascade/other"),
            Err(WorktreeError::BranchInUse { .. })
        ));
        // A stale cascade worktree holding it is released first.
        assert!(delete_branch(&paths, "cascade/held").unwrap());
        assert!(!held.path.exists());
    }

    #[test]
    fn a_reuse_looks_only_at_what_the_story_or_the_base_changed() {
        let (_tmp, repo, paths) = init_repo();
        commit_file(&repo, ".gitignore", "*.log\n", "ignore");
        commit_file(&repo, "kept.txt", "k", "a file nobody changes");
        let slot = slot_path(&paths, None, 1);
        let wt = create(&paths, &slot, "cascade/one", "main").unwrap();
        let wrepo = Repository::open(&wt.path).unwrap();
        commit_file(&wrepo, "one.txt", "1", "one: story");
        make_a_mess(&wt.path);
        std::fs::write(wt.path.join("build.log"), "log").unwrap();
        let base = commit_file(&repo, "other.txt", "o", "another story merged");
        let target = repo.find_commit(base).unwrap();
        let found: Vec<String> = differing_paths(&wrepo, &target)
            .unwrap()
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        // The story's commit and main's new file (the trees differ), the
        // agent's leftovers (the status): not kept.txt, .gitignore or the
        // ignored log.
        assert_eq!(
            found,
            [
                "README.md",
                "newdir/",
                "one.txt",
                "other.txt",
                "staged.txt",
                "stray.txt"
            ]
        );
    }

    #[test]
    fn reuse_for_a_retry_resets_the_same_branch() {
        let (_tmp, repo, paths) = init_repo();
        let slot = slot_path(&paths, None, 1);
        let wt = create(&paths, &slot, "cascade/r", "main").unwrap();
        let wrepo = Repository::open(&wt.path).unwrap();
        commit_file(&wrepo, "attempt1.txt", "1", "r: first attempt");
        make_a_mess(&wt.path);
        let base = commit_file(&repo, "moved.txt", "m", "main moved");
        let again = reuse(&paths, &wt.path, "cascade/r", "main").unwrap();
        assert_eq!(again.head, Some(base));
        assert_eq!(status_lines(&wt.path), Vec::<String>::new());
        assert!(!wt.path.join("attempt1.txt").exists());
        assert_eq!(
            repo.refname_to_id("refs/heads/cascade/r").unwrap(),
            base,
            "the branch starts again at the base"
        );
    }

    #[test]
    fn reuse_falls_back_to_a_fresh_worktree() {
        let (_tmp, repo, paths) = init_repo();
        // Nothing registered at the path: made from scratch.
        let slot = slot_path(&paths, Some("feat"), 3);
        assert!(slot.ends_with(".cascade/worktrees/feat.slot-3"));
        let wt = reuse(&paths, &slot, "cascade/feat.s1", "main").unwrap();
        assert_eq!(wt.head, Some(head(&repo)));
        assert!(wt.path.join("README.md").exists());
        // A nested repository the checkout does not remove: made from scratch.
        detach(&paths, &wt.path, true).unwrap();
        let nested = wt.path.join("vendor/lib");
        std::fs::create_dir_all(&nested).unwrap();
        Repository::init(&nested).unwrap();
        std::fs::write(nested.join("x"), "x").unwrap();
        let again = reuse(&paths, &wt.path, "cascade/feat.s2", "main").unwrap();
        assert!(!again.path.join("vendor").exists());
        assert_eq!(status_lines(&again.path), Vec::<String>::new());
        assert_eq!(list(&paths).unwrap().len(), 1);
        let err = reuse(&paths, &paths.main_root.join("x"), "cascade/y", "main").unwrap_err();
        assert!(matches!(err, WorktreeError::OutsideRoot { .. }), "{err}");
    }

    #[test]
    fn relocate_moves_a_worktree_git_keeps_track() {
        let (_tmp, _repo, paths) = init_repo();
        let slot = slot_path(&paths, None, 1);
        let wt = create(&paths, &slot, "cascade/bad", "main").unwrap();
        let to = path_for(&paths, "cascade/bad");
        let moved = relocate(&paths, &wt.path, &to).unwrap();
        assert_eq!(moved, absolute(&to));
        assert!(!slot.exists() && to.join("README.md").exists());
        let listed = list(&paths).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].path, moved);
        assert!(!listed[0].prunable);
        assert_eq!(listed[0].branch.as_deref(), Some("cascade/bad"));
        let wrepo = Repository::open(&moved).unwrap();
        assert!(wrepo.statuses(None).unwrap().is_empty());
        // A taken destination: nothing moves.
        let other = create(&paths, &slot, "cascade/other", "main").unwrap();
        assert_eq!(relocate(&paths, &other.path, &moved).unwrap(), other.path);
        assert!(
            prune_all(&paths, &PrunePolicy::default())
                .unwrap()
                .worktrees
                .len()
                == 2
        );
    }

    #[test]
    fn only_merged_branches_nobody_holds_are_deleted_together() {
        let (_tmp, repo, paths) = init_repo();
        let c = repo.head().unwrap().peel_to_commit().unwrap();
        // cascade's merged story branch (made through a worktree, so recorded).
        let done = create(
            &paths,
            &path_for(&paths, "cascade/merged"),
            "cascade/merged",
            "main",
        )
        .unwrap();
        detach(&paths, &done.path, false).unwrap();
        // A merged `cascade/...` branch somebody else made: not cascade's.
        repo.branch("cascade/users", &c, false).unwrap();
        let wt = create(
            &paths,
            &path_for(&paths, "cascade/held"),
            "cascade/held",
            "main",
        )
        .unwrap();
        let wrepo = Repository::open(&wt.path).unwrap();
        let ahead = commit_file(&wrepo, "x.txt", "x", "not merged");
        repo.branch("cascade/ahead", &repo.find_commit(ahead).unwrap(), false)
            .unwrap();
        repo.branch("user", &c, false).unwrap();
        let all: Vec<String> = [
            "cascade/users",
            "cascade/merged",
            "cascade/held",
            "cascade/ahead",
            "user",
            "cascade/none",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let deleted = delete_merged_branches(&paths, &all, "main").unwrap();
        assert_eq!(deleted, vec!["cascade/merged".to_string()]);
        for kept in ["cascade/users", "cascade/held", "cascade/ahead", "user"] {
            assert!(repo.find_branch(kept, BranchType::Local).is_ok(), "{kept}");
        }
    }

    #[test]
    fn a_branch_lock_left_by_a_killed_run_does_not_block_a_story() {
        let (_tmp, _repo, paths) = init_repo();
        let heads = paths.common_dir.join("refs/heads/cascade");
        std::fs::create_dir_all(&heads).unwrap();
        std::fs::write(heads.join("a.lock"), "").unwrap();
        let slot = slot_path(&paths, None, 1);
        let wt = create(&paths, &slot, "cascade/a", "main").unwrap();
        detach(&paths, &wt.path, true).unwrap();
        std::fs::create_dir_all(&heads).unwrap();
        std::fs::write(heads.join("b.lock"), "").unwrap();
        let again = reuse(&paths, &wt.path, "cascade/b", "main").unwrap();
        assert_eq!(again.branch.as_deref(), Some("cascade/b"));
    }

    #[test]
    fn slot_numbers_are_read_back() {
        let (_tmp, _repo, paths) = init_repo();
        assert_eq!(slot_number(&slot_path(&paths, None, 4), None), Some(4));
        assert_eq!(
            slot_number(&slot_path(&paths, Some("auth"), 2), Some("auth")),
            Some(2)
        );
        assert_eq!(slot_number(&slot_path(&paths, Some("auth"), 2), None), None);
        assert_eq!(slot_number(&slot_path(&paths, None, 2), Some("auth")), None);
        assert_eq!(slot_number(Path::new("/x/slot-"), None), None);
        assert_eq!(slot_number(Path::new("/x/story-1"), None), None);
    }
}
