//! [`cascade_git::configure_libgit2`]'s tree cache, checked in a process of
//! its own: the option is process-wide and must be set before other
//! threads use libgit2, so this file holds one test and nothing else.

use git2::{Repository, Signature};

/// What libgit2's object caches hold now, in bytes, for the whole process.
fn cached_bytes() -> isize {
    let (mut current, mut allowed) = (0isize, 0isize);
    // SAFETY: GIT_OPT_GET_CACHED_MEMORY writes two `ssize_t`s through the
    // pointers given, which live for the call.
    let rc = unsafe {
        libgit2_sys::git_libgit2_opts(
            libgit2_sys::GIT_OPT_GET_CACHED_MEMORY as std::ffi::c_int,
            &mut current as *mut isize,
            &mut allowed as *mut isize,
        )
    };
    assert_eq!(rc, 0, "libgit2 refused GIT_OPT_GET_CACHED_MEMORY");
    current
}

#[test]
fn a_large_tree_stays_cached_in_its_handle_once_configured() {
    let tmp = tempfile::tempdir().unwrap();
    let tree_id = {
        let repo = Repository::init(tmp.path()).unwrap();
        // A root tree of 2,000 entries: about 70 KB, far over libgit2's
        // default limit of 4 KiB for a cached tree.
        let blob = repo.blob(b"x\n").unwrap();
        let mut tb = repo.treebuilder(None).unwrap();
        for i in 0..2_000 {
            tb.insert(format!("file-{i:05}.txt"), blob, 0o100644)
                .unwrap();
        }
        let tree_id = tb.write().unwrap();
        let sig = Signature::now("t", "t@t").unwrap();
        let tree = repo.find_tree(tree_id).unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "big", &tree, &[])
            .unwrap();
        tree_id
    };
    let tree_bytes = {
        let repo = Repository::open(tmp.path()).unwrap();
        let (size, _) = repo.odb().unwrap().read_header(tree_id).unwrap();
        isize::try_from(size).unwrap()
    };
    assert!(tree_bytes > 4096, "the tree is {tree_bytes} bytes");

    // How much the object caches grew while a fresh handle read the tree
    // twice (by id, then through HEAD), with both reads still held.
    let growth = || {
        let repo = Repository::open(tmp.path()).unwrap();
        let before = cached_bytes();
        let first = repo.find_tree(tree_id).unwrap();
        let again = repo.head().unwrap().peel_to_tree().unwrap();
        assert_eq!((first.len(), again.id()), (2_000, tree_id));
        cached_bytes() - before
    };
    let default = growth();
    assert!(
        default < tree_bytes,
        "cached without the option: grew by {default} bytes"
    );

    // SAFETY: this test is the only one in its process, and the reads
    // above have ended: no other thread uses libgit2.
    unsafe { cascade_git::configure_libgit2() };
    let configured = growth();
    assert!(
        configured >= tree_bytes,
        "the {tree_bytes}-byte tree is not cached: the caches grew by {configured} bytes"
    );
}
