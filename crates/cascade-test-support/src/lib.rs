//! Helpers the tests of cascade's crates share, defined once instead of
//! copied into each test file: a dev-dependency only, never part of the
//! product.

use std::path::Path;
use std::process::Command;

/// Runs `git <args>` in `dir` with a fixed author and committer (a test
/// machine may have no identity configured), panicking with git's error
/// output when it fails. Returns its standard output without trailing
/// whitespace (`rev-parse HEAD` gives the bare id; leading spaces, as in
/// `status --porcelain`, are kept).
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap_or_else(|e| panic!("git {args:?} does not start: {e}"));
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}
