//! Committing everything an agent changed in a worktree.
//!
//! # API summary
//! - [`commit_all`]`(workdir, message) -> Result<Option<Oid>, GitError>`: stages
//!   every change in the worktree containing `workdir` (modifications,
//!   deletions, and untracked files that are not ignored) and commits it on
//!   the worktree's branch. `None` when nothing changed (an agent that exits 0
//!   but changed nothing is a failure for the engine). The worktree's own
//!   exclude ([`crate::local_files`]) is always left out.
//! - [`commit_checked`]`(workdir, message, rules) -> Result<`[`Checked`]`, _>`:
//!   the same, but untracked paths `rules.leave_out` names a directory for
//!   (build output, unless the base tracks files there) are not staged
//!   ([`Checked::left_out`] counts them by directory), and every file added
//!   or changed since `rules.base` (by this commit or by commits already on
//!   the branch) is put, with its content, to `rules.refuse`; any refused
//!   path means nothing is committed ([`Outcome::Refused`], with reasons).
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
    match commit_checked(workdir, message, &Rules::<()>::default())?.outcome {
        Outcome::Committed(oid) => Ok(Some(oid)),
        Outcome::Unchanged | Outcome::Refused(_) => Ok(None),
    }
}

/// Why a file must not be committed, if it must not (see [`Rules::refuse`]).
pub type RefuseFn<'a, R> = &'a dyn Fn(&Candidate<'_>) -> Option<R>;

/// The build output directory an untracked path is left out for (see
/// [`Rules::leave_out`]).
pub type LeaveOutFn<'a> = &'a dyn Fn(&str) -> Option<String>;

/// What a commit must not contain, and what it leaves out. `R` is the
/// caller's reason for refusing a file (named back in [`Outcome::Refused`]).
pub struct Rules<'a, R = String> {
    /// The commit the work started from: every path added or changed since
    /// (by the new commit or by commits already on the branch) is checked,
    /// and what that commit tracks decides what is left out. `None`: only
    /// the paths the new commit adds or changes, and `HEAD`'s tree decides.
    pub base: Option<Oid>,
    /// Why an added or changed file must not be committed, if it must not.
    pub refuse: Option<RefuseFn<'a, R>>,
    /// The directory (repository path, no trailing `/`) that makes an
    /// untracked path one to leave out of the commit (dependency or build
    /// output by convention), if one does. A directory the base already
    /// tracks files in is committed as usual.
    pub leave_out: Option<LeaveOutFn<'a>>,
}

impl<R> Default for Rules<'_, R> {
    fn default() -> Self {
        Rules {
            base: None,
            refuse: None,
            leave_out: None,
        }
    }
}

/// A file the commit would add or change, put to [`Rules::refuse`].
pub struct Candidate<'a> {
    /// Repository-relative, `/`-separated.
    pub path: &'a str,
    /// New since the base (`false`: the base has it, with other content).
    pub added: bool,
    /// The content that would be committed.
    pub content: &'a [u8],
}

/// What [`commit_checked`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<R = String> {
    /// The new commit on the worktree's branch.
    Committed(Oid),
    /// Nothing to commit (the tree is `HEAD`'s).
    Unchanged,
    /// Nothing committed: these paths are refused, each with its reason
    /// (sorted by path).
    Refused(Vec<(String, R)>),
}

/// A directory left out of the commit by [`Rules::leave_out`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// Repository path of the directory, no trailing `/`.
    pub dir: String,
    /// How many files under it were left out.
    pub files: usize,
}

/// [`commit_checked`]'s answer: what it did and what it left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked<R = String> {
    pub outcome: Outcome<R>,
    /// Directories left out (sorted), whatever the outcome.
    pub left_out: Vec<LeftOut>,
}

/// [`commit_all`] under `rules`: what `rules.leave_out` names is not
/// staged, and nothing is committed (and the index is not written) when a
/// path added or changed since `rules.base` is refused.
pub fn commit_checked<R>(
    workdir: &Path,
    message: &str,
    rules: &Rules<'_, R>,
) -> Result<Checked<R>, GitError> {
    let repo = Repository::open(workdir).map_err(|_| GitError::NotARepo {
        path: workdir.to_path_buf(),
    })?;
    let parent = match repo.head() {
        Ok(head) => Some(
            head.peel_to_commit()
                .map_err(GitError::git("read HEAD commit"))?,
        ),
        Err(e) if e.code() == git2::ErrorCode::UnbornBranch => None,
        Err(e) => return Err(GitError::git("read HEAD")(e)),
    };
    let since = rules.base.or(parent.as_ref().map(|p| p.id()));
    let mut index = repo.index().map_err(GitError::git("read index"))?;
    let left_out = match rules.leave_out {
        Some(leave_out) => {
            let keep = Tracked::new(&repo, since, parent.as_ref())?;
            stage_leaving_out(&repo, &mut index, &|p| {
                leave_out(p).filter(|dir| !keep.covers(p, dir))
            })?
        }
        None => {
            stage_all(&repo, &mut index)?;
            Vec::new()
        }
    };
    let tree_id = index.write_tree().map_err(GitError::git("write tree"))?;
    let done = |outcome| {
        Ok(Checked {
            outcome,
            left_out: left_out.clone(),
        })
    };
    if let Some(refuse) = rules.refuse {
        let refused = refusals(&repo, since, tree_id, refuse)?;
        if !refused.is_empty() {
            return done(Outcome::Refused(refused));
        }
    }
    if let Some(p) = &parent {
        if p.tree_id() == tree_id {
            return done(Outcome::Unchanged);
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
    done(Outcome::Committed(oid))
}

/// What stays committed although [`Rules::leave_out`] names it: a directory
/// the base tracks files in, and a path `HEAD` already has (the agent
/// committed it itself; skipping it keeps the index's entry as it is).
struct Tracked<'r> {
    base: Option<git2::Tree<'r>>,
    head: Option<git2::Tree<'r>>,
}

impl<'r> Tracked<'r> {
    fn new(
        repo: &'r Repository,
        base: Option<Oid>,
        head: Option<&git2::Commit<'r>>,
    ) -> Result<Tracked<'r>, GitError> {
        let base = base_tree(repo, base)?;
        let head = match head {
            Some(c) => Some(c.tree().map_err(GitError::git("read HEAD tree"))?),
            None => None,
        };
        Ok(Tracked { base, head })
    }

    fn covers(&self, path: &str, dir: &str) -> bool {
        let has = |t: &Option<git2::Tree<'_>>, p: &str| {
            t.as_ref().is_some_and(|t| t.get_path(Path::new(p)).is_ok())
        };
        has(&self.base, dir) || has(&self.head, path)
    }
}

/// The tree of the base commit `base`, if there is one.
fn base_tree(repo: &Repository, base: Option<Oid>) -> Result<Option<git2::Tree<'_>>, GitError> {
    base.map(|c| {
        repo.find_commit(c)
            .and_then(|c| c.tree())
            .map_err(GitError::git("read base commit"))
    })
    .transpose()
}

/// The paths of tree `tree` that are new or changed against the tree of
/// commit `since` (all of them when `since` is `None`) that `refuse`
/// refuses, with its reasons, sorted by path.
fn refusals<R>(
    repo: &Repository,
    since: Option<Oid>,
    tree: Oid,
    refuse: &dyn Fn(&Candidate<'_>) -> Option<R>,
) -> Result<Vec<(String, R)>, GitError> {
    use crate::treediff::Change;
    let new = repo.find_tree(tree).map_err(GitError::git("find tree"))?;
    let old = base_tree(repo, since)?;
    let mut out = Vec::new();
    for (path, change) in crate::treediff::changed_paths(repo, old.as_ref(), &new)
        .map_err(GitError::git("diff trees"))?
    {
        if change == Change::Deleted {
            continue;
        }
        let path = String::from_utf8_lossy(&path).into_owned();
        let entry = new
            .get_path(Path::new(&path))
            .map_err(GitError::git("read tree entry"))?;
        // A submodule's commit or a symbolic link's target is not content.
        if entry.kind() != Some(git2::ObjectType::Blob) || entry.filemode() == 0o120000 {
            continue;
        }
        let blob = repo
            .find_blob(entry.id())
            .map_err(GitError::git("read blob"))?;
        let candidate = Candidate {
            path: &path,
            added: change == Change::Added,
            content: blob.content(),
        };
        if let Some(reason) = refuse(&candidate) {
            out.push((path, reason));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Stages every change of the worktree in `index`: deletions and
/// modifications of tracked files, and new files (ignored paths are skipped
/// unless already tracked). Staging a conflicted path
/// resolves its conflict, as `git add` does. The worktree's own exclude
/// ([`crate::local_files`]) is skipped: those paths stay as in the index.
pub(crate) fn stage_all(repo: &Repository, index: &mut git2::Index) -> Result<(), GitError> {
    stage_leaving_out(repo, index, &|_| None).map(|_| ())
}

/// [`stage_all`], also skipping each path `leave` names a directory for
/// (that path stays as in the index); the directories so left out, with
/// how many files each, sorted.
fn stage_leaving_out(
    repo: &Repository,
    index: &mut git2::Index,
    leave: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<LeftOut>, GitError> {
    let local = crate::local_files::of(repo);
    let mut left: std::collections::BTreeMap<String, usize> = Default::default();
    let mut skip = |path: &Path, _: &[u8]| -> i32 {
        let Some(p) = path.to_str() else { return 0 };
        if local.covers(p) {
            return 1;
        }
        match leave(p) {
            Some(dir) => {
                *left.entry(dir).or_default() += 1;
                1
            }
            None => 0,
        }
    };
    // One pass over the worktree: libgit2's `add_all` compares the index
    // with the worktree (untracked files included) and adds what exists and
    // removes what does not, so it stages deletions and modifications as
    // `update_all` would, whose comparison is the same without untracked
    // files. Both were called once, two full scans per commit.
    index
        .add_all(["*"].iter(), IndexAddOption::DEFAULT, Some(&mut skip))
        .map_err(GitError::git("stage changes"))?;
    Ok(left
        .into_iter()
        .map(|(dir, files)| LeftOut { dir, files })
        .collect())
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

    pub use cascade_test_support::git;

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
        let refuse = |c: &Candidate<'_>| {
            let p = c.path;
            (p.ends_with(".pem") || p.starts_with("id_rsa") || p.starts_with(".env"))
                .then(|| String::from_utf8_lossy(c.content).into_owned())
        };
        let rules = Rules {
            base: Some(base),
            refuse: Some(&refuse),
            leave_out: None,
        };
        let before = tip(&repo, "cascade/s1");
        let out = commit_checked(&wt.path, "s1: story", &rules).unwrap();
        // Both the agent's committed key and the new certificate, each with
        // the reason the rule gave; not the copied `.env` (a local file,
        // never staged).
        assert_eq!(
            out.outcome,
            Outcome::Refused(vec![
                ("id_rsa".into(), "KEY\n".into()),
                ("server.pem".into(), "CERT\n".into())
            ])
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
    fn build_output_is_left_out_unless_the_base_tracks_its_directory() {
        let (_tmp, repo, paths) = init_repo();
        commit_file(&repo, "web/dist/app.js", "v1\n", "dist is tracked");
        let wt = story_worktree(&paths, "cascade/s1");
        let base = tip(&repo, "cascade/s1");
        for (path, body) in [
            ("src/app.js", "code\n"),
            ("node_modules/left-pad/index.js", "pad\n"),
            ("node_modules/left-pad/package.json", "{}\n"),
            ("web/dist/app.js", "v2\n"),
            ("web/dist/new.js", "new\n"),
        ] {
            let p = wt.path.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        let leave = |p: &str| {
            let (dir, _) = p.split_once('/')?;
            matches!(dir, "node_modules")
                .then(|| dir.to_string())
                .or_else(|| p.starts_with("web/dist/").then(|| "web/dist".to_string()))
        };
        let rules = Rules::<String> {
            base: Some(base),
            refuse: None,
            leave_out: Some(&leave),
        };
        let out = commit_checked(&wt.path, "s1: story", &rules).unwrap();
        assert_eq!(
            out.left_out,
            vec![LeftOut {
                dir: "node_modules".into(),
                files: 2
            }]
        );
        let Outcome::Committed(oid) = out.outcome else {
            panic!("{:?}", out.outcome)
        };
        assert_eq!(file_at(&repo, oid, "src/app.js").as_deref(), Some("code\n"));
        assert_eq!(file_at(&repo, oid, "node_modules/left-pad/index.js"), None);
        assert_eq!(
            file_at(&repo, oid, "web/dist/app.js").as_deref(),
            Some("v2\n")
        );
        assert_eq!(
            file_at(&repo, oid, "web/dist/new.js").as_deref(),
            Some("new\n")
        );
        // Left out, not deleted: the files stay in the worktree for the gates.
        assert!(wt.path.join("node_modules/left-pad/index.js").exists());
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
