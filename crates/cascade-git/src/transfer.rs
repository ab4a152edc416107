//! Commits from one repository to another without a git process: a pack of
//! what a branch has beyond a base, and its import.
//!
//! A fleet worker packs the commits of a story beyond the job's base (with
//! their trees and blobs, nothing the base has: a self-contained pack, a few
//! KB for a typical story); the coordinator writes the pack into its object
//! store and points the story branch at the tip, checking first that the tip
//! is the reported commit and descends from the base. That replaces a push
//! by the worker and a fetch by the coordinator (each a few git processes)
//! on the path from a story's end to its merge.

use std::io::Write;
use std::path::Path;

use git2::{Oid, Repository};

use crate::error::GitError;
use crate::repo::RepoPaths;

/// Why a pack could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Git(#[from] GitError),
    /// The pack does not hold the commit it was sent for.
    #[error("the pack does not contain commit {commit}")]
    Missing { commit: String },
    /// The commit is not built on the base it was meant to start from.
    #[error("commit {commit} does not descend from the base {base}")]
    NotOnBase { commit: String, base: String },
}

/// A pack of every object reachable from `tip` and not from `base`, from
/// the repository at (or around) `dir`. `None` when `tip` adds nothing.
pub fn pack_since(dir: &Path, tip: &str, base: &str) -> Result<Option<Vec<u8>>, GitError> {
    let repo = packer(dir)?;
    let (tip, base) = (oid(tip)?, oid(base)?);
    if tip == base {
        return Ok(None);
    }
    pack_walk(&repo, tip, &[base]).map(Some)
}

/// A pack of every object reachable from `tip` and from none of `haves`
/// (commits the receiving side has, with everything they reach), for a
/// receiver that lacks `tip`. Haves this repository does not know are left
/// out; `None` when it knows none of them (the pack would be the whole
/// history) or does not have `tip`.
pub fn pack_for(dir: &Path, tip: &str, haves: &[String]) -> Result<Option<Vec<u8>>, GitError> {
    let repo = packer(dir)?;
    let tip = oid(tip)?;
    if repo.find_commit(tip).is_err() {
        return Ok(None);
    }
    let known: Vec<Oid> = haves
        .iter()
        .filter_map(|h| Oid::from_str(h).ok())
        .filter(|h| repo.find_commit(*h).is_ok())
        .collect();
    if known.is_empty() {
        return Ok(None);
    }
    pack_walk(&repo, tip, &known).map(Some)
}

/// Where packs are built for the repository at (or around) `dir`: a bare
/// repository without references (`cascade-packer` in the git directory)
/// that borrows every object of the real one through
/// `objects/info/alternates`, created on first use.
///
/// libgit2's pack builder lists every reference of its repository to put
/// tagged objects first (`git_tag_foreach` in its write order), reading
/// each loose ref's file. A run keeps a branch per story, so in the real
/// repository every pack cost one file read per story ever run: the
/// coordinator's packs of bases and the workers' packs of results grew
/// with the run. The packer has no references to list.
fn packer(dir: &Path) -> Result<Repository, GitError> {
    let repo = Repository::discover(dir).map_err(GitError::git("open repository"))?;
    let common = repo.commondir();
    let objects = common.join("objects");
    let objects = objects.canonicalize().unwrap_or(objects);
    let packer = common.join("cascade-packer");
    let alternates = packer.join("objects").join("info").join("alternates");
    let mut line = std::os::unix::ffi::OsStrExt::as_bytes(objects.as_os_str()).to_vec();
    line.push(b'\n');
    if std::fs::read(&alternates).ok() != Some(line.clone()) {
        Repository::init_bare(&packer).map_err(GitError::git("create the packing repository"))?;
        // Written whole, then renamed: a concurrent packer never reads half
        // a path (two writers write the same text).
        let tmp = alternates.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &line)
            .and_then(|()| std::fs::rename(&tmp, &alternates))
            .map_err(GitError::io("write", &alternates))?;
    }
    Repository::open_bare(&packer).map_err(GitError::git("open the packing repository"))
}

/// The pack of the commits reachable from `tip` and not from `hide`, with
/// their trees and blobs that `hide` does not reach.
fn pack_walk(repo: &Repository, tip: Oid, hide: &[Oid]) -> Result<Vec<u8>, GitError> {
    let mut walk = repo.revwalk().map_err(GitError::git("start a walk"))?;
    walk.push(tip).map_err(GitError::git("walk from the tip"))?;
    for h in hide {
        walk.hide(*h).map_err(GitError::git("hide the base"))?;
    }
    let mut pack = repo.packbuilder().map_err(GitError::git("build a pack"))?;
    pack.insert_walk(&mut walk)
        .map_err(GitError::git("add the commits to the pack"))?;
    let mut buf = git2::Buf::new();
    pack.write_buf(&mut buf)
        .map_err(GitError::git("write the pack"))?;
    Ok(buf.to_vec())
}

/// Whether the repository at `dir` has `commit` (fetched or imported with
/// everything it reaches: neither leaves a commit without its history).
pub fn has_commit(dir: &Path, commit: &str) -> bool {
    let Ok(id) = oid(commit) else { return false };
    Repository::open(dir).is_ok_and(|r| r.find_commit(id).is_ok())
}

/// The commits the refs `names` of the repository at `dir` point at (refs
/// that are missing are left out).
pub fn ref_commits(dir: &Path, names: &[&str]) -> Vec<String> {
    let Ok(repo) = Repository::open(dir) else {
        return Vec::new();
    };
    names
        .iter()
        .filter_map(|n| repo.refname_to_id(n).ok())
        .map(|id| id.to_string())
        .collect()
}

/// Writes `pack` (a pack from [`pack_for`]: its objects' history is here
/// already) into the repository at `dir` as a pack of its own in
/// `objects/pack`, as `git fetch` keeps all but its smallest fetches. The
/// caller rolls the packs up when there are many ([`pack_count`]).
///
/// Kept, not stored loose as [`import_onto`] stores a story's commit: a
/// base carries the root tree of every merge since the receiver's last
/// base, and storing each object loose (inflated, deflated again, a file
/// each, through a scratch directory) took about 60 ms of a fleet job's
/// start against 3-5 ms for keeping the pack (the fleet's makespan
/// measure, 2 workers x 3 slots).
pub fn import_pack(dir: &Path, pack: &[u8]) -> Result<(), GitError> {
    let repo = Repository::open(dir).map_err(GitError::git("open repository"))?;
    index_pack(&repo.commondir().join("objects").join("pack"), pack)
}

/// Writes `pack` with its index into the directory `dir` (libgit2's
/// default mode for packs: read-only, as git writes them).
fn index_pack(dir: &Path, pack: &[u8]) -> Result<(), GitError> {
    let mut indexer =
        git2::Indexer::new(None, dir, 0, false).map_err(GitError::git("read the pack"))?;
    indexer
        .write_all(pack)
        .map_err(GitError::io("write the pack to", dir))?;
    indexer.commit().map_err(GitError::git("index the pack"))?;
    Ok(())
}

/// How many packs the repository at `dir` keeps (`objects/pack/*.pack`;
/// 0 when it cannot be read).
pub fn pack_count(dir: &Path) -> usize {
    let Ok(repo) = Repository::open(dir) else {
        return 0;
    };
    std::fs::read_dir(repo.commondir().join("objects").join("pack")).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
            .count()
    })
}

/// Writes the objects of `pack` into the repository of `paths` and sets
/// `branch` (forced) to `tip`, which must be in the pack (or the
/// repository) and descend from `base`.
///
/// The objects are stored loose, as `git fetch` stores a small fetch: a
/// pack kept per story would leave a coordinator with thousands of tiny
/// packs, and every lookup of an object goes through each pack's index.
/// The pack is indexed in a scratch directory inside the git directory,
/// read from there and removed.
pub fn import_onto(
    paths: &RepoPaths,
    pack: &[u8],
    branch: &str,
    tip: &str,
    base: &str,
) -> Result<(), TransferError> {
    let repo = paths.open()?;
    store(&repo, &paths.common_dir, pack)?;
    point_branch(paths, &repo, branch, tip, base)
}

/// Stores the objects of `pack` loose in `repo` (whose git directory is
/// `git_dir`), through a scratch index (see [`import_onto`]).
fn store(repo: &Repository, git_dir: &Path, pack: &[u8]) -> Result<(), GitError> {
    let scratch = Scratch::new(git_dir)?;
    {
        index_pack(&scratch.0.join("pack"), pack)?;
        let incoming = git2::Odb::new().map_err(GitError::git("open the pack"))?;
        let shown = scratch.0.to_string_lossy();
        incoming
            .add_disk_alternate(&shown)
            .map_err(GitError::git("open the pack"))?;
        let odb = repo.odb().map_err(GitError::git("open the object store"))?;
        let mut copied = Ok(());
        incoming
            .foreach(|id| {
                copied = incoming
                    .read(*id)
                    .and_then(|o| odb.write(o.kind(), o.data()))
                    .map(|_| ());
                copied.is_ok()
            })
            .map_err(GitError::git("list the pack's objects"))?;
        copied.map_err(GitError::git("store the pack's objects"))?;
    }
    drop(scratch);
    Ok(())
}

/// A directory of its own under the git directory, removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(git_dir: &Path) -> Result<Scratch, GitError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = git_dir
            .join("cascade-incoming")
            .join(format!("{}-{n}", std::process::id()));
        std::fs::create_dir_all(dir.join("pack"))
            .map_err(GitError::io("create a scratch directory", &dir))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Points `branch` (forced) at `commit` and checks the commit out, HEAD
/// detached, in the worktree at `dir` (a fleet worker's clone at a job's
/// base: only the files that differ from the previous checkout are written).
pub fn check_out(dir: &Path, commit: &str, branch: &str) -> Result<(), GitError> {
    let repo = Repository::open(dir).map_err(GitError::git("open repository"))?;
    let id = oid(commit)?;
    let target = repo
        .find_commit(id)
        .map_err(GitError::git(format!("read commit {commit}")))?;
    let mut opts = git2::build::CheckoutBuilder::new();
    opts.force();
    repo.checkout_tree(target.as_object(), Some(&mut opts))
        .map_err(GitError::git(format!("check out {commit}")))?;
    repo.set_head_detached(id)
        .map_err(GitError::git("detach HEAD"))?;
    repo.branch(branch, &target, true)
        .map_err(GitError::git(format!("set branch '{branch}'")))?;
    Ok(())
}

/// Sets `branch` (forced) to `tip` after checking it exists here and
/// descends from `base` (what a fetched branch must satisfy too).
pub fn set_branch_checked(
    paths: &RepoPaths,
    branch: &str,
    tip: &str,
    base: &str,
) -> Result<(), TransferError> {
    let repo = paths.open()?;
    point_branch(paths, &repo, branch, tip, base)
}

/// Whether `commit` is built on `base`: its first parent is the base, or
/// the base is among its ancestors (the agent made commits of its own).
pub fn descends_from(paths: &RepoPaths, commit: &str, base: &str) -> Result<bool, GitError> {
    let repo = paths.open()?;
    on_base(&repo, oid(commit)?, oid(base)?)
}

/// Sets `branch` to `tip` (see [`set_branch_checked`]). A branch this
/// creates is recorded as cascade's (`worktree::created_branches`), so the
/// end of the run deletes it once merged, as it does the branches of local
/// stories.
fn point_branch(
    paths: &RepoPaths,
    repo: &Repository,
    branch: &str,
    tip: &str,
    base: &str,
) -> Result<(), TransferError> {
    let (t, b) = (oid(tip)?, oid(base)?);
    if repo.find_commit(t).is_err() {
        return Err(TransferError::Missing {
            commit: tip.to_string(),
        });
    }
    if !on_base(repo, t, b)? {
        return Err(TransferError::NotOnBase {
            commit: tip.to_string(),
            base: base.to_string(),
        });
    }
    let name = if branch.starts_with("refs/") {
        branch.to_string()
    } else {
        format!("refs/heads/{branch}")
    };
    let existed = repo.find_reference(&name).is_ok();
    repo.reference(&name, t, true, "cascade: story work")
        .map_err(GitError::git(format!("set '{name}'")))?;
    if let (false, Some(short)) = (existed, name.strip_prefix("refs/heads/")) {
        crate::worktree::record_created(paths, short);
    }
    Ok(())
}

fn on_base(repo: &Repository, commit: Oid, base: Oid) -> Result<bool, GitError> {
    if commit == base {
        return Ok(true);
    }
    let c = repo
        .find_commit(commit)
        .map_err(GitError::git(format!("read commit {commit}")))?;
    if c.parent_id(0).ok() == Some(base) {
        return Ok(true);
    }
    repo.graph_descendant_of(commit, base)
        .map_err(GitError::git(format!("compare {commit} with {base}")))
}

fn oid(hex: &str) -> Result<Oid, GitError> {
    Oid::from_str(hex).map_err(GitError::git(format!("read object id '{hex}'")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::testutil::git;
    use crate::commit::{commit_all, init_repository};

    /// A repository with `files` committed on main; returns its tip.
    fn repo(dir: &Path, files: usize) -> String {
        for i in 0..files {
            std::fs::write(dir.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
        }
        init_repository(dir, "main").unwrap();
        commit_all(dir, "init").unwrap().unwrap().to_string()
    }

    #[test]
    fn a_story_commit_travels_as_a_small_pack_and_lands_on_its_branch() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let base = repo(a.path(), 200);
        // The other side is a clone at the base (the coordinator).
        let to = b.path().join("to");
        git(
            b.path(),
            &["clone", "-q", &a.path().display().to_string(), "to"],
        );
        std::fs::write(a.path().join("f1.txt"), "changed\n").unwrap();
        std::fs::write(a.path().join("new.txt"), "new\n").unwrap();
        let tip = commit_all(a.path(), "story").unwrap().unwrap().to_string();

        let pack = pack_since(a.path(), &tip, &base).unwrap().unwrap();
        // The commit, its tree and two blobs: not the 200 files of the base
        // (a pack's header: "PACK", version, object count).
        assert_eq!(&pack[..4], b"PACK");
        let objects = u32::from_be_bytes([pack[8], pack[9], pack[10], pack[11]]);
        assert_eq!(objects, 4, "pack of {} bytes", pack.len());
        let paths = RepoPaths::discover(&to).unwrap();
        let packs = || {
            std::fs::read_dir(paths.common_dir.join("objects/pack"))
                .map(|d| d.count())
                .unwrap_or(0)
        };
        let before = packs();
        import_onto(&paths, &pack, "cascade/s1", &tip, &base).unwrap();
        assert_eq!(git(&to, &["rev-parse", "cascade/s1"]), tip);
        // Stored loose, nothing left behind: no pack per story.
        assert_eq!(packs(), before);
        let scratch = paths.common_dir.join("cascade-incoming");
        assert_eq!(
            std::fs::read_dir(scratch).map(|d| d.count()).unwrap_or(0),
            0
        );
        assert_eq!(git(&to, &["show", "cascade/s1:new.txt"]), "new");
        assert!(descends_from(&paths, &tip, &base).unwrap());
        assert_eq!(pack_since(a.path(), &base, &base).unwrap(), None);
    }

    #[test]
    fn packs_are_built_in_a_repository_with_no_references_borrowing_the_objects() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("repo");
        std::fs::create_dir(&dir).unwrap();
        let base = repo(&dir, 3);
        // A branch per story, as a long run leaves them.
        let r = Repository::open(&dir).unwrap();
        let head = r.head().unwrap().peel_to_commit().unwrap();
        for i in 0..300 {
            r.branch(&format!("cascade/s{i}"), &head, false).unwrap();
        }
        std::fs::write(dir.join("new.txt"), "new\n").unwrap();
        let tip = commit_all(&dir, "story").unwrap().unwrap().to_string();

        let pack = pack_since(&dir, &tip, &base).unwrap().unwrap();
        let objects = u32::from_be_bytes([pack[8], pack[9], pack[10], pack[11]]);
        assert_eq!(objects, 3, "the commit, its tree and the new blob");
        let p = packer(&dir).unwrap();
        assert_eq!(p.references().unwrap().count(), 0);
        assert!(p.find_commit(oid(&tip).unwrap()).is_ok());
        // Borrowed, not copied: the packer's own store stays empty.
        let own = |sub: &str| {
            std::fs::read_dir(dir.join(".git/cascade-packer/objects").join(sub))
                .unwrap()
                .count()
        };
        assert_eq!((own("pack"), own("info")), (0, 1));

        // A repository moved elsewhere: the packer follows it.
        let moved = t.path().join("moved");
        std::fs::rename(&dir, &moved).unwrap();
        let again = pack_for(&moved, &tip, std::slice::from_ref(&base))
            .unwrap()
            .unwrap();
        assert_eq!(again, pack);
    }

    /// `<parent>/to`: a clone of `from` with nothing checked out.
    fn clone_without_checkout(from: &Path, parent: &Path) -> std::path::PathBuf {
        let from = from.display().to_string();
        git(parent, &["clone", "-q", "--no-checkout", &from, "to"]);
        parent.join("to")
    }

    #[test]
    fn a_base_travels_as_a_pack_beyond_the_commits_the_receiver_has() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = repo(a.path(), 50);
        let to = clone_without_checkout(a.path(), b.path());
        std::fs::write(a.path().join("f1.txt"), "one\n").unwrap();
        let second = commit_all(a.path(), "two").unwrap().unwrap().to_string();
        std::fs::write(a.path().join("f2.txt"), "two\n").unwrap();
        let third = commit_all(a.path(), "three").unwrap().unwrap().to_string();

        // The receiver names what it has: its remote's HEAD as cloned.
        let have = ref_commits(&to, &["refs/remotes/origin/HEAD", "refs/missing"]);
        assert_eq!(have, std::slice::from_ref(&first));
        assert!(!has_commit(&to, &third));
        // Commits unknown here do not narrow the pack; none known: no pack.
        let unknown = "1".repeat(40);
        assert_eq!(
            pack_for(a.path(), &third, std::slice::from_ref(&unknown)).unwrap(),
            None
        );
        assert_eq!(pack_for(a.path(), &unknown, &have).unwrap(), None);
        let pack = pack_for(a.path(), &third, &[unknown, first.clone()])
            .unwrap()
            .unwrap();
        // Two commits, two trees, two blobs: not the 50 files of `first`.
        let objects = u32::from_be_bytes([pack[8], pack[9], pack[10], pack[11]]);
        assert_eq!(objects, 6, "pack of {} bytes", pack.len());
        let (kept, loose) = (pack_count(&to), git(&to, &["count-objects"]));
        import_pack(&to, &pack).unwrap();
        assert!(has_commit(&to, &third) && has_commit(&to, &second));
        // Kept as it came, a pack of its own; nothing stored loose.
        assert_eq!(pack_count(&to), kept + 1);
        assert_eq!(git(&to, &["count-objects"]), loose);
        check_out(&to, &third, "cascade-fleet/base").unwrap();
        assert_eq!(std::fs::read_to_string(to.join("f2.txt")).unwrap(), "two\n");
        // Whole: git itself finds nothing missing.
        git(&to, &["fsck", "--connectivity-only", "--no-dangling"]);
    }

    #[test]
    fn a_clone_is_checked_out_at_a_commit_with_a_branch_there() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = repo(a.path(), 3);
        std::fs::write(a.path().join("f0.txt"), "changed\n").unwrap();
        std::fs::remove_file(a.path().join("f1.txt")).unwrap();
        let second = commit_all(a.path(), "two").unwrap().unwrap().to_string();
        let to = clone_without_checkout(a.path(), b.path());
        check_out(&to, &second, "cascade-fleet/base").unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("f0.txt")).unwrap(),
            "changed\n"
        );
        assert!(!to.join("f1.txt").exists());
        check_out(&to, &first, "cascade-fleet/base").unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("f1.txt")).unwrap(),
            "file 1\n"
        );
        assert_eq!(git(&to, &["rev-parse", "cascade-fleet/base"]), first);
        assert_eq!(git(&to, &["rev-parse", "HEAD"]), first);
        assert_eq!(git(&to, &["status", "--porcelain"]), "");
    }

    #[test]
    fn a_pack_that_does_not_hold_the_commit_or_is_not_on_the_base_is_refused() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let base = repo(a.path(), 3);
        let to = b.path().join("to");
        git(
            b.path(),
            &["clone", "-q", &a.path().display().to_string(), "to"],
        );
        std::fs::write(a.path().join("f0.txt"), "one\n").unwrap();
        let first = commit_all(a.path(), "one").unwrap().unwrap().to_string();
        std::fs::write(a.path().join("f0.txt"), "two\n").unwrap();
        let second = commit_all(a.path(), "two").unwrap().unwrap().to_string();
        let paths = RepoPaths::discover(&to).unwrap();

        // The pack of `first` does not hold `second`.
        let pack = pack_since(a.path(), &first, &base).unwrap().unwrap();
        let e = import_onto(&paths, &pack, "cascade/s1", &second, &base).unwrap_err();
        assert!(matches!(e, TransferError::Missing { .. }), "{e}");
        // `base` is not built on `first`.
        let e = set_branch_checked(&paths, "cascade/s1", &base, &first).unwrap_err();
        assert!(matches!(e, TransferError::NotOnBase { .. }), "{e}");
        assert!(git(&to, &["branch", "--list", "cascade/s1"]).is_empty());
    }
}
