//! The mega-plan's findings: `mega-findings.md`, the notes every feature may read.
//!
//! `mega-findings.md` lives at the repository root: it is copied into each
//! feature worktree read-only (mode 0444, [`share_into`]) so an agent cannot
//! edit the shared copy by accident. Each feature writes its own `findings.md`
//! in its worktree (its stories' notes, see [`crate::findings`]); when the
//! feature lands, that file is kept under `.cascade/mega/features/<name>/findings.md`
//! (the worktree goes away) and appended to `mega-findings.md`, so later
//! batches start from what earlier ones learned.

use std::path::{Path, PathBuf};

use super::error::MegaError;
pub use crate::findings::{share_into, FEATURE_FINDINGS, MEGA_FINDINGS};

/// Creates `<root>/mega-findings.md` with a header when it does not exist.
pub fn ensure_mega_findings(root: &Path, goal: &str) -> Result<PathBuf, MegaError> {
    let path = root.join(MEGA_FINDINGS);
    if !path.exists() {
        let text = format!(
            "# Mega-plan findings\n\nGoal: {goal}\n\nShared by every feature (read-only in feature worktrees). \
             Each feature's own findings.md is appended here when the feature lands.\n"
        );
        std::fs::write(&path, text).map_err(|e| MegaError::io("write", &path, e))?;
    }
    Ok(path)
}

/// Keeps the feature's `findings.md` (if it wrote one) under `keep_dir` and
/// appends it to the shared file. Returns where it was kept.
pub fn keep_feature_findings(
    root: &Path,
    worktree: &Path,
    feature: &str,
    keep_dir: &Path,
) -> Result<Option<PathBuf>, MegaError> {
    let src = worktree.join(FEATURE_FINDINGS);
    let text = match std::fs::read_to_string(&src) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(MegaError::io("read", &src, e)),
    };
    std::fs::create_dir_all(keep_dir).map_err(|e| MegaError::io("create", keep_dir, e))?;
    let kept = keep_dir.join(FEATURE_FINDINGS);
    std::fs::write(&kept, &text).map_err(|e| MegaError::io("write", &kept, e))?;
    if !text.trim().is_empty() {
        let shared = root.join(MEGA_FINDINGS);
        let mut all = match std::fs::read_to_string(&shared) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(MegaError::io("read", &shared, e)),
        };
        if !all.is_empty() && !all.ends_with('\n') {
            all.push('\n');
        }
        all.push_str(&format!("\n## Feature {feature}\n\n{}\n", text.trim_end()));
        super::state::write_atomic(&shared, all.as_bytes())?;
    }
    Ok(Some(kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_findings_are_kept_and_appended() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let wt = tmp.path().join("wt");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        ensure_mega_findings(&root, "g").unwrap();
        let keep = tmp.path().join("keep/auth");
        assert!(keep_feature_findings(&root, &wt, "auth", &keep)
            .unwrap()
            .is_none());
        std::fs::write(wt.join(FEATURE_FINDINGS), "tokens expire after 1h\n").unwrap();
        let kept = keep_feature_findings(&root, &wt, "auth", &keep)
            .unwrap()
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(kept).unwrap(),
            "tokens expire after 1h\n"
        );
        let shared = std::fs::read_to_string(root.join(MEGA_FINDINGS)).unwrap();
        assert!(shared.contains("## Feature auth\n\ntokens expire after 1h"));
    }
}
