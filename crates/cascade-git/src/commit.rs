//! Committing everything an agent changed in a worktree.
//!
//! # API summary
//! - [`commit_all`]`(workdir, message) -> Result<Option<Oid>, GitError>`: stages
//!   every change in the worktree containing `workdir` (modifications,
//!   deletions, and untracked files that are not ignored) and commits it on
//!   the worktree's branch. `None` when nothing changed (an agent that exits 0
//!   but changed nothing is a failure for the engine). The worktree's own
//!   exclude ([`crate::local_files`]) is always left out.
//! - [`commit_checked`]`(workdir, message, rules) -> Result<`[`Outcome`]`, _>`:
//!   the same, but first every path added since `rules.base` (by this commit
//!   or by commits already on the branch) is put to `rules.refuse`; any
//!   refused path means nothing is committed ([`Outcome::Refused`]).
//! - [`init_repository`]`(dir, initial_branch)`: a new repository whose unborn
//!   HEAD names `initial_branch` (`cascade demo`'s scratch repository; the
//!   first [`commit_all`] then creates the branch).
//! - [`signature`]`(repo)`: the committer from the repository's config
//!   (`user.name`/`user.email`), or `cascade <cascade@localhost>` when none is
//!   configured (fresh CI machines have no identity).

use std::path::Path;

use git2::{IndexAddOption, Oid, Repository, Signature};

use crate::GitError;

/// Name of the fallback identity used when git has none configured.
pub const FALLBACK_NAME: &str = "cascade";
/// Email of the fallback identity.
pub const FALLBACK_EMAIL: &str = "cascade@localhost";

/// Stages everything that changed in the worktree of `workdir` and commits it
/// on its current branch (or as the first commit of an unborn branch).
/// Returns the new commit, or `None` when the tree is unchanged.
pub fn commit_all(workdir: &Path, message: &str) -> Result<Option<Oid>, GitError> {
    match commit_checked(workdir, message, &Rules::default())? {
        Outcome::Committed(oid) => Ok(Some(oid)),
        Outcome::Unchanged | Outcome::Refused(_) => Ok(None),
    }
}

/// What a commit must not contain.
#[derive(Default)]
pub struct Rules<'a> {
    /// The commit the work started from: every path added since (by the new
    /// commit or by commits already on the branch) is checked. `None`: only
    /// the paths the new commit adds.
    pub base: Option<Oid>,
    /// Whether an added path (repository-relative, `/`-separated) must not
    /// be committed.
    pub refuse: Option<&'a dyn Fn(&str) -> bool>,
}

/// What [`commit_checked`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The new commit on the worktree's branch.
    Committed(Oid),
    /// Nothing to commit (the tree is `HEAD`'s).
    Unchanged,
    /// Nothing committed: these added paths are refused (sorted).
    Refused(Vec<String>),
}

/// [`commit_all`] under `rules`: nothing is committed (and the index is not
/// written) when a path added since `rules.base` is refused.
pub fn commit_checked(
    workdir: &Path,
    message: &str,
    rules: &Rules<'_>,
) -> Result<Outcome, GitError> {
    let repo = Repository::open(workdir).map_err(|_| GitError::NotARepo {
        path: workdir.to_path_buf(),
    })?;
    let mut index = repo.index().map_err(GitError::git("read index"))?;
    stage_all(&repo, &mut index)?;
    let tree_id = index.write_tree().map_err(GitError::git("write tree"))?;
    let parent = match repo.head() {
        Ok(head) => Some(
            head.peel_to_commit()
                .map_err(GitError::git("read HEAD commit"))?,
        ),
        Err(e) if e.code() == git2::ErrorCode::UnbornBranch => None,
        Err(e) => return Err(GitError::git("read HEAD")(e)),
    };
    if let Some(refuse) = rules.refuse {
        let since = match rules.base {
            Some(base) => Some(base),
            None => parent.as_ref().map(|p| p.id()),
        };
        let refused: Vec<String> = added_paths(&repo, since, tree_id)?
            .into_iter()
            .filter(|p| refuse(p))
            .collect();
        if !refused.is_empty() {
            return Ok(Outcome::Refused(refused));
        }
    }
    if let Some(p) = &parent {
        if p.tree_id() == tree_id {
            return Ok(Outcome::Unchanged);
        }
    }
    index.write().map_err(GitError::git("write index"))?;
    let tree = repo
        .find_tree(tree_id)
        .map_err(GitError::git("find tree"))?;
    let sig = signature(&repo)?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let oid = repo
        .commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)
        .map_err(GitError::git("commit"))?;
    Ok(Outcome::Committed(oid))
}

/// The paths of tree `tree` that the tree of commit `since` does not have
/// (all of them when `since` is `None`), sorted.
fn added_paths(repo: &Repository, since: Option<Oid>, tree: Oid) -> Result<Vec<String>, GitError> {
    let new = repo.find_tree(tree).map_err(GitError::git("find tree"))?;
    let old = match since {
        Some(c) => Some(
            repo.find_commit(c)
                .and_then(|c| c.tree())
                .map_err(GitError::git("read base commit"))?,
        ),
        None => None,
    };
    let mut out: Vec<String> = crate::treediff::changed_paths(repo, old.as_ref(), &new)
        .map_err(GitError::git("diff trees"))?
        .into_iter()
        .filter(|(_, change)| *change == crate::treediff::Change::Added)
        .map(|(path, _)| String::from_utf8_lossy(&path).into_owned())
        .collect();
    out.sort();
    Ok(out)
}

/// Stages every change of the worktree in `index`: deletions and
/// modifications of tracked files, and new files (ignored paths are skipped
/// unless already tracked). Staging a conflicted path
/// resolves its conflict, as `git add` does. The worktree's own exclude
/// ([`crate::local_files`]) is skipped: those paths stay as in the index.
pub(crate) fn stage_all(repo: &Repository, index: &mut git2::Index) -> Result<(), GitError> {
    let local = crate::local_files::of(repo);
    let mut skip = |path: &Path, _: &[u8]| -> i32 {
        let covered = path.to_str().is_some_and(|p| local.covers(p));
        i32::from(covered)
    };
    let cb: Option<&mut git2::IndexMatchedPath<'_>> = if local.is_empty() {
        None
    } else {
        Some(&mut skip)
    };
    // One pass over the worktree: libgit2's `add_all` compares the index
    // with the worktree (untracked files included) and adds what exists and
    // removes what does not, so it stages deletions and modifications as
    // `update_all` would, whose comparison is the same without untracked
    // files. Both were called once, two full scans per commit.
    index
        .add_all(["*"].iter(), IndexAddOption::DEFAULT, cb)
        .map_err(GitError::git("stage changes"))?;
    Ok(())
}

/// Creates a git repository in `dir` (created if missing) whose first commit
/// will be on `initial_branch`. An existing repository is an error.
pub fn init_repository(dir: &Path, initial_branch: &str) -> Result<(), GitError> {
    if dir.join(".git").exists() {
        return Err(GitError::io("init repository in", dir)(
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a git repository already exists there",
            ),
        ));
    }
    let mut opts = git2::RepositoryInitOptions::new();
    opts.initial_head(initial_branch).mkpath(true);
    Repository::init_opts(dir, &opts).map_err(GitError::git("init repository"))?;
    Ok(())
}

/// The identity to commit with: git's configured one, else the fallback
/// `cascade <cascade@localhost>`.
pub fn signature(repo: &Repository) -> Result<Signature<'static>, GitError> {
    match repo.signature() {
        Ok(sig) => Ok(sig),
        Err(_) => Signature::now(FALLBACK_NAME, FALLBACK_EMAIL)
            .map_err(GitError::git("make commit signature")),
    }
}

/// Temp repositories for the crate's tests.
#[cfg(test)]
pub(crate) mod testutil {
    use std::path::Path;

    use git2::{Oid, Repository};
    use tempfile::TempDir;

    use crate::RepoPaths;

    /// Runs the git CLI in `dir`; its standard output, trimmed (it must succeed).
    pub fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// A repository on `main` with `README.md` committed, and an identity.
    pub fn init_repo() -> (TempDir, Repository, RepoPaths) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        std::fs::create_dir(&root).unwrap();
        let mut opts = git2::RepositoryInitOptions::new();
        opts.initial_head("main");
        let repo = Repository::init_opts(&root, &opts).unwrap();
        {
            let mut cfg = repo.config().unwrap();
            cfg.set_str("user.name", "Test").unwrap();
            cfg.set_str("user.email", "test@example.com").unwrap();
        }
        commit_file(&repo, "README.md", "hello\n", "init");
        let paths = RepoPaths::discover(&root).unwrap();
        (tmp, repo, paths)
    }

    /// Writes `name` in the repo's worktree and commits it on HEAD.
    pub fn commit_file(repo: &Repository, name: &str, content: &str, msg: &str) -> Oid {
        let wd = repo.workdir().unwrap().to_path_buf();
        let p = wd.join(name);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&p, content).unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(Path::new(name)).unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("Test", "test@example.com").unwrap();
        let parent = repo.head().ok().map(|h| h.peel_to_commit().unwrap());
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        repo.commit(Some("HEAD"), &sig, &sig, msg, &tree, &parents)
            .unwrap()
    }

    /// A story worktree on a new branch `branch` from `main`.
    pub fn story_worktree(paths: &RepoPaths, branch: &str) -> crate::worktree::WorktreeInfo {
        let path = crate::worktree::path_for(paths, branch);
        crate::worktree::create(paths, &path, branch, "main").unwrap()
    }

    /// The commit HEAD points at.
    pub fn head(repo: &Repository) -> Oid {
        repo.head().unwrap().target().unwrap()
    }

    /// The tip of a local branch.
    pub fn tip(repo: &Repository, branch: &str) -> Oid {
        repo.refname_to_id(&format!("refs/heads/{branch}")).unwrap()
    }

    /// The content of `path` in the tree of `commit`.
    pub fn file_at(repo: &Repository, commit: Oid, path: &str) -> Option<String> {
        let tree = repo.find_commit(commit).unwrap().tree().unwrap();
        let entry = tree.get_path(Path::new(path)).ok()?;
        let blob = repo.find_blob(entry.id()).unwrap();
        Some(String::from_utf8_lossy(blob.content()).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn nothing_changed_is_none() {
        let (_tmp, repo, paths) = init_repo();
        let before = head(&repo);
        assert_eq!(commit_all(&paths.workdir, "nothing").unwrap(), None);
        assert_eq!(head(&repo), before);
    }

    #[test]
    fn commits_modifications_additions_deletions_but_not_ignored_files() {
        let (_tmp, repo, paths) = init_repo();
        commit_file(&repo, "gone.txt", "bye", "add gone");
        commit_file(&repo, ".gitignore", "target/\n*.log\n", "ignore");
        let wd = &paths.workdir;
        std::fs::write(wd.join("README.md"), "changed\n").unwrap();
        std::fs::remove_file(wd.join("gone.txt")).unwrap();
        std::fs::create_dir_all(wd.join("src/deep")).unwrap();
        std::fs::write(wd.join("src/deep/new.rs"), "fn x() {}\n").unwrap();
        std::fs::create_dir_all(wd.join("target")).unwrap();
        std::fs::write(wd.join("target/out"), "bin").unwrap();
        std::fs::write(wd.join("run.log"), "log").unwrap();

        let oid = commit_all(wd, "story-001: change things").unwrap().unwrap();
        assert_eq!(head(&repo), oid);
        let c = repo.find_commit(oid).unwrap();
        assert_eq!(c.message(), Some("story-001: change things"));
        assert_eq!(c.parent_count(), 1);
        assert_eq!(
            file_at(&repo, oid, "README.md").as_deref(),
            Some("changed\n")
        );
        assert_eq!(
            file_at(&repo, oid, "src/deep/new.rs").as_deref(),
            Some("fn x() {}\n")
        );
        assert_eq!(file_at(&repo, oid, "gone.txt"), None);
        assert_eq!(file_at(&repo, oid, "target/out"), None);
        assert_eq!(file_at(&repo, oid, "run.log"), None);
        // The index matches the commit: the worktree is clean afterwards.
        let mut so = git2::StatusOptions::new();
        so.include_untracked(true);
        assert!(repo.statuses(Some(&mut so)).unwrap().is_empty());
        // And a second call has nothing to do.
        assert_eq!(commit_all(wd, "again").unwrap(), None);
    }

    #[test]
    fn local_files_stay_out_and_refused_paths_stop_the_commit() {
        let (_tmp, repo, paths) = init_repo();
        commit_file(&repo, "lock.txt", "v1\n", "lock");
        let wt = story_worktree(&paths, "cascade/s1");
        let base = tip(&repo, "cascade/s1");
        // What setup left: a copied secret and a rewritten lock file.
        std::fs::write(wt.path.join(".env"), "SECRET=hunter2\n").unwrap();
        std::fs::write(wt.path.join("lock.txt"), "v2\n").unwrap();
        let local = crate::local_files::changed(&wt.path).unwrap();
        crate::local_files::record(&wt.path, &local).unwrap();
        // The agent's work, one file of it committed by the agent itself.
        std::fs::write(wt.path.join("src.txt"), "code\n").unwrap();
        std::fs::write(wt.path.join("id_rsa"), "KEY\n").unwrap();
        let agent_repo = Repository::open(&wt.path).unwrap();
        let mut index = agent_repo.index().unwrap();
        index.add_path(Path::new("id_rsa")).unwrap();
        index.write().unwrap();
        let tree = agent_repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = signature(&agent_repo).unwrap();
        let parent = agent_repo.head().unwrap().peel_to_commit().unwrap();
        agent_repo
            .commit(Some("HEAD"), &sig, &sig, "agent", &tree, &[&parent])
            .unwrap();
        std::fs::write(wt.path.join("server.pem"), "CERT\n").unwrap();
        let refuse =
            |p: &str| p.ends_with(".pem") || p.starts_with("id_rsa") || p.starts_with(".env");
        let rules = Rules {
            base: Some(base),
            refuse: Some(&refuse),
        };
        let before = tip(&repo, "cascade/s1");
        let out = commit_checked(&wt.path, "s1: story", &rules).unwrap();
        // Both the agent's committed key and the new certificate; not the
        // copied `.env` (a local file, never staged).
        assert_eq!(
            out,
            Outcome::Refused(vec!["id_rsa".into(), "server.pem".into()])
        );
        assert_eq!(tip(&repo, "cascade/s1"), before, "nothing committed");
        // Without the refusals: the work, never the local files.
        std::fs::remove_file(wt.path.join("server.pem")).unwrap();
        let oid = commit_all(&wt.path, "s1: story").unwrap().unwrap();
        assert_eq!(file_at(&repo, oid, "src.txt").as_deref(), Some("code\n"));
        assert_eq!(file_at(&repo, oid, ".env"), None);
        assert_eq!(file_at(&repo, oid, "lock.txt").as_deref(), Some("v1\n"));
    }

    #[test]
    fn commits_on_the_worktree_branch_only() {
        let (_tmp, repo, paths) = init_repo();
        let main_before = tip(&repo, "main");
        let wt = story_worktree(&paths, "cascade/s1");
        std::fs::write(wt.path.join("story.txt"), "done\n").unwrap();
        let oid = commit_all(&wt.path, "s1: story").unwrap().unwrap();
        assert_eq!(tip(&repo, "cascade/s1"), oid);
        assert_eq!(tip(&repo, "main"), main_before);
        assert!(!paths.workdir.join("story.txt").exists());
    }

    #[test]
    fn falls_back_to_cascade_identity_and_handles_unborn_branches() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init(tmp.path()).unwrap();
        // An empty local identity hides whatever the machine has configured,
        // like a fresh CI machine with no user.name.
        {
            let mut cfg = repo.config().unwrap();
            cfg.set_str("user.name", "").unwrap();
            cfg.set_str("user.email", "").unwrap();
        }
        assert!(repo.signature().is_err());
        std::fs::write(tmp.path().join("a.txt"), "a").unwrap();
        let oid = commit_all(tmp.path(), "first").unwrap().unwrap();
        let c = repo.find_commit(oid).unwrap();
        assert_eq!(c.parent_count(), 0);
        assert_eq!(c.author().name(), Some(FALLBACK_NAME));
        assert_eq!(c.author().email(), Some(FALLBACK_EMAIL));
        assert_eq!(c.committer().name(), Some(FALLBACK_NAME));
    }

    #[test]
    fn init_then_first_commit_lands_on_the_initial_branch() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("new/repo");
        init_repository(&dir, "main").unwrap();
        std::fs::write(dir.join("a.txt"), "a").unwrap();
        let oid = commit_all(&dir, "first").unwrap().unwrap();
        let repo = Repository::open(&dir).unwrap();
        assert_eq!(tip(&repo, "main"), oid);
        assert!(init_repository(&dir, "main").is_err());
    }

    #[test]
    fn not_a_repo_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let err = commit_all(tmp.path(), "x").unwrap_err();
        assert!(matches!(err, GitError::NotARepo { .. }));
    }
}
