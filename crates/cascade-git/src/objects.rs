//! The run's object store: where packs are built, and packing the loose
//! objects a run writes.
//!
//! libgit2 writes every object as a file of its own and never packs them
//! (git packs them: `git gc --auto` after its commands). A run writes a few
//! objects per story (commits, the trees along the changed paths, the
//! blobs), so thousands of stories leave tens of thousands of files in
//! `.git/objects`, and each read of one of them (every tree walk of a
//! merge, a checkout or a status) costs an open, a stat and a close besides
//! the inflate. [`pack_loose`] puts them in one pack, as `git repack -d`
//! does for loose objects.

use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use crate::error::GitError;
use crate::repo::RepoPaths;

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
pub(crate) fn packer(dir: &Path) -> Result<Repository, GitError> {
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

/// What [`pack_loose`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Packed {
    /// Loose objects now in the new pack (and their files removed).
    pub objects: usize,
}

/// Packs every loose object of the repository of `paths` into one new pack
/// in `objects/pack` and removes the loose files it holds.
///
/// Safe beside readers and writers of the same repository (agents' git,
/// another cascade): only objects listed before the pack was written are
/// removed, each after the pack and its index are in place, and git and
/// libgit2 both look through the packs again when a loose object they
/// expected is gone. Fan-out directories are left (a writer may be
/// creating an object in one). No pack is written when nothing is loose.
pub fn pack_loose(paths: &RepoPaths) -> Result<Packed, GitError> {
    let objects = paths.common_dir.join("objects");
    let loose = list_loose(&objects)?;
    if loose.is_empty() {
        return Ok(Packed::default());
    }
    let repo = packer(&paths.common_dir)?;
    let mut pack = repo
        .packbuilder()
        .map_err(GitError::git("start a pack of loose objects"))?;
    for (id, _) in &loose {
        pack.insert_object(*id, None)
            .map_err(GitError::git(format!("add object {id} to a pack")))?;
    }
    let dir = objects.join("pack");
    pack.write(&dir, 0).map_err(GitError::git(format!(
        "write a pack in '{}'",
        dir.display()
    )))?;
    for (_, file) in &loose {
        // Gone already (another packer, `git gc`): nothing to do.
        let _ = std::fs::remove_file(file);
    }
    Ok(Packed {
        objects: loose.len(),
    })
}

/// The loose objects under `objects` (`xx/yyyy...`), with their files.
fn list_loose(objects: &Path) -> Result<Vec<(Oid, PathBuf)>, GitError> {
    let mut found = Vec::new();
    let fanout = std::fs::read_dir(objects).map_err(GitError::io("list", objects))?;
    for dir in fanout.flatten() {
        let name = dir.file_name();
        let Some(prefix) = name.to_str().filter(|n| is_hex(n, 2)) else {
            continue;
        };
        let Ok(files) = std::fs::read_dir(dir.path()) else {
            continue;
        };
        for file in files.flatten() {
            let rest = file.file_name();
            let Some(rest) = rest.to_str().filter(|n| is_hex(n, 38)) else {
                continue;
            };
            if let Ok(id) = Oid::from_str(&format!("{prefix}{rest}")) {
                found.push((id, file.path()));
            }
        }
    }
    Ok(found)
}

fn is_hex(name: &str, len: usize) -> bool {
    name.len() == len && name.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::testutil::git;
    use crate::commit::{commit_all, init_repository};

    fn packs(dir: &Path) -> usize {
        std::fs::read_dir(dir.join(".git/objects/pack"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
            .count()
    }

    #[test]
    fn loose_objects_go_into_one_pack_and_stay_readable() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        std::fs::create_dir_all(dir.join("src/deep")).unwrap();
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        init_repository(dir, "main").unwrap();
        commit_all(dir, "init").unwrap();
        for i in 0..20 {
            std::fs::write(dir.join(format!("src/deep/f{i}.txt")), format!("{i}\n")).unwrap();
            commit_all(dir, &format!("story {i}")).unwrap();
        }
        let paths = RepoPaths::discover(dir).unwrap();
        let before = list_loose(&paths.common_dir.join("objects")).unwrap().len();
        assert!(before > 60, "{before} loose objects");

        let packed = pack_loose(&paths).unwrap();
        assert_eq!(packed.objects, before);
        assert!(list_loose(&paths.common_dir.join("objects"))
            .unwrap()
            .is_empty());
        assert_eq!(packs(dir), 1);
        // Every object is still there, and git agrees.
        git(dir, &["fsck", "--strict", "--no-dangling"]);
        assert_eq!(git(dir, &["show", "HEAD:src/deep/f19.txt"]), "19");
        assert_eq!(git(dir, &["rev-list", "--count", "HEAD"]), "21");
        // libgit2 (a fresh repository, as cascade opens them) reads them too.
        let repo = Repository::open(dir).unwrap();
        let head = repo.head().unwrap().peel_to_tree().unwrap();
        assert!(head.get_path(Path::new("src/deep/f0.txt")).is_ok());

        // Nothing loose: no empty pack.
        assert_eq!(pack_loose(&paths).unwrap().objects, 0);
        assert_eq!(packs(dir), 1);
        // New work packs into a second pack, beside the first.
        std::fs::write(dir.join("b.txt"), "b\n").unwrap();
        commit_all(dir, "more").unwrap();
        assert_eq!(pack_loose(&paths).unwrap().objects, 3);
        assert_eq!(packs(dir), 2);
        git(dir, &["fsck", "--strict", "--no-dangling"]);
    }

    #[test]
    fn a_linked_worktree_packs_the_common_store() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("main");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        init_repository(&dir, "main").unwrap();
        commit_all(&dir, "init").unwrap();
        let wt = t.path().join("wt");
        git(
            &dir,
            &["worktree", "add", "-q", "-b", "story", wt.to_str().unwrap()],
        );
        std::fs::write(wt.join("b.txt"), "b\n").unwrap();
        commit_all(&wt, "story").unwrap();
        let paths = RepoPaths::discover(&wt).unwrap();
        assert!(pack_loose(&paths).unwrap().objects >= 6);
        assert!(list_loose(&dir.join(".git/objects")).unwrap().is_empty());
        assert_eq!(git(&wt, &["show", "story:b.txt"]), "b");
    }
}
