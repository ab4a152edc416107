//! Symbolic links a change adds that point outside the repository
//! (`outward-symlink`): an absolute target, or a relative one whose `..`
//! climbs above the repository's root.
//!
//! Such a link is how work escapes its worktree after the fact: merged, it
//! makes the next tool that follows it (a gate, an editor, a deploy script)
//! read or write `/etc/passwd` or `~/.ssh` through a path that looks like
//! the project's own. The target is judged as written, without following it:
//! what it points at on this machine is not what it points at on the next.

use std::path::{Component, Path};

use cascade_git::diff::FileDiff;

use crate::scan::{Finding, OUTWARD_SYMLINK};

/// The finding of `diff` when the change leaves it a link pointing outside.
pub(crate) fn outward_symlink(diff: &FileDiff, out: &mut Vec<Finding>) {
    let Some(target) = diff.link_target.as_deref() else {
        return;
    };
    if !leaves_repository(&diff.path, target) {
        return;
    }
    let how = if Path::new(target).is_absolute() {
        "an absolute path"
    } else {
        "above the repository's root"
    };
    out.push(Finding {
        rule: OUTWARD_SYMLINK.to_string(),
        file: diff.path.clone(),
        line: 1,
        message: format!("a symbolic link pointing outside the repository ({how})"),
        text: format!("-> {target}"),
    });
}

/// Whether a link at the repository path `link` (`/`-separated) pointing
/// at `target` resolves outside the repository, judged lexically.
pub fn leaves_repository(link: &str, target: &str) -> bool {
    let target = Path::new(target);
    if target.has_root() {
        return true;
    }
    // The link's own directory, as a depth below the root.
    let mut depth = Path::new(link)
        .parent()
        .map_or(0, |p| p.components().count());
    for c in target.components() {
        match c {
            Component::ParentDir if depth == 0 => return true,
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_and_climbing_targets_leave_and_inner_ones_stay() {
        assert!(leaves_repository("escape_link", "/etc/passwd"));
        assert!(leaves_repository("escape_link", ".."));
        assert!(leaves_repository("a/b/link", "../../../x"));
        assert!(leaves_repository("a/link", "b/../../../x"));
        assert!(!leaves_repository("a/b/link", "../../x"));
        assert!(!leaves_repository("a/link", "./b/../c"));
        assert!(!leaves_repository("link", "docs/README.md"));
    }

    #[test]
    fn a_committed_or_untracked_outward_link_is_a_finding() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path();
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@x"])
                .args(args)
                .current_dir(repo)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        std::fs::write(repo.join("README.md"), "x\n").unwrap();
        git(&["add", "-A"]);
        git(&["commit", "-qm", "base"]);
        std::os::unix::fs::symlink("/etc/passwd", repo.join("escape_link")).unwrap();
        std::os::unix::fs::symlink("README.md", repo.join("inner_link")).unwrap();
        let rules = crate::RuleSet::builtin();
        let intent = crate::Intent::default();
        let untracked = crate::verify_repo(repo, "HEAD", None, &rules, &intent).unwrap();
        git(&["add", "-A"]);
        git(&["commit", "-qm", "links"]);
        let committed = crate::verify_repo(repo, "HEAD~1", Some("HEAD"), &rules, &intent).unwrap();
        for verdict in [untracked, committed] {
            let found: Vec<(&str, &str, &str)> = verdict
                .findings
                .iter()
                .map(|f| (f.rule.as_str(), f.file.as_str(), f.text.as_str()))
                .collect();
            assert_eq!(found, [(OUTWARD_SYMLINK, "escape_link", "-> /etc/passwd")]);
        }
    }
}
