//! Findings: the notes agents leave for each other (Plan Cascade's
//! `findings.md`), which every story's attempt shares.
//!
//! Story agents (plain runs and feature runs alike) work in their own story
//! worktrees, so the engine brings the files to them ([`seed_story`]): the
//! run root's `findings.md` (the feature worktree's, or the repository's in a
//! plain run) is copied into the story worktree as a writable `findings.md`,
//! and `mega-findings.md` (when the root has one: a mega-plan's feature) read-only
//! (mode 0444, see [`share_into`]); their absolute paths are also in
//! `CASCADE_FINDINGS` / `CASCADE_MEGA_FINDINGS`, and the prompt says how to
//! use them. After the agent exits, what it added to its `findings.md` is
//! appended to the root's `findings.md` under a heading naming the story
//! ([`StorySeed::collect`]), before the worktree can go away.
//!
//! The mega-plan's side (creating `mega-findings.md`, keeping a landed
//! feature's notes) is in `mega::findings`. Both names are listed in
//! `.git/info/exclude`, so neither ever dirties a tree or ends up in a commit.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The shared findings file of a mega-plan, at the repository root.
pub const MEGA_FINDINGS: &str = "mega-findings.md";
/// A run's (or a feature's) own findings file, at its worktree root.
pub const FEATURE_FINDINGS: &str = "findings.md";

/// A findings file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{op} '{}': {source}", path.display())]
pub struct FindingsError {
    pub op: String,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl FindingsError {
    fn new(op: &str, path: &Path, source: std::io::Error) -> Self {
        FindingsError {
            op: op.to_string(),
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Copies `<root>/mega-findings.md` into `worktree` with mode 0444, replacing
/// an older copy. Returns the copy's path, or `None` without a shared file.
pub fn share_into(root: &Path, worktree: &Path) -> Result<Option<PathBuf>, FindingsError> {
    let src = root.join(MEGA_FINDINGS);
    if !src.is_file() {
        return Ok(None);
    }
    let dst = worktree.join(MEGA_FINDINGS);
    if src == dst {
        return Ok(None);
    }
    // A read-only file cannot be overwritten in place; unlinking only needs
    // the directory to be writable.
    match std::fs::remove_file(&dst) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(FindingsError::new("remove", &dst, e)),
    }
    std::fs::copy(&src, &dst).map_err(|e| FindingsError::new("copy to", &dst, e))?;
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o444))
        .map_err(|e| FindingsError::new("make read-only", &dst, e))?;
    Ok(Some(dst))
}

/// Serialises appends to a root `findings.md` by concurrent stories.
static APPEND: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What a story worktree was given, so the story's own notes can be told
/// apart from what it started with.
#[derive(Debug, Clone)]
pub struct StorySeed {
    root: PathBuf,
    /// `findings.md` in the story worktree.
    pub findings: PathBuf,
    /// The read-only `mega-findings.md` copy, when the root has one.
    pub shared: Option<PathBuf>,
    seeded: String,
}

/// Brings the findings of `root` (the run's worktree root) into the story
/// worktree `worktree`: `findings.md` writable, `mega-findings.md` read-only.
/// Problems are not fatal to the story: the caller reports them and goes on
/// with an empty seed.
pub fn seed_story(root: &Path, worktree: &Path) -> (StorySeed, Vec<FindingsError>) {
    let mut problems = Vec::new();
    let src = root.join(FEATURE_FINDINGS);
    let findings = worktree.join(FEATURE_FINDINGS);
    let seeded = match std::fs::read_to_string(&src) {
        Ok(text) => {
            if let Err(e) = std::fs::write(&findings, &text) {
                problems.push(FindingsError::new("write", &findings, e));
                String::new()
            } else {
                text
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A reused worktree may still hold an earlier story's notes.
            match std::fs::remove_file(&findings) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => problems.push(FindingsError::new("remove", &findings, e)),
            }
            String::new()
        }
        Err(e) => {
            problems.push(FindingsError::new("read", &src, e));
            String::new()
        }
    };
    let shared = share_into(root, worktree).unwrap_or_else(|e| {
        problems.push(e);
        None
    });
    let seed = StorySeed {
        root: root.to_path_buf(),
        findings,
        shared,
        seeded,
    };
    (seed, problems)
}

impl StorySeed {
    /// Environment for the agent: `CASCADE_FINDINGS` (and `CASCADE_MEGA_FINDINGS`).
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![(
            "CASCADE_FINDINGS".to_string(),
            self.findings.display().to_string(),
        )];
        if let Some(shared) = &self.shared {
            env.push((
                "CASCADE_MEGA_FINDINGS".to_string(),
                shared.display().to_string(),
            ));
        }
        env
    }

    /// The prompt section that tells the agent about the findings files.
    pub fn prompt_section(&self) -> String {
        let mut out = String::from("\n## Findings\n\n");
        out.push_str(
            "Notes the agents of this plan leave for each other, in your working directory \
             (never committed):\n\n",
        );
        out.push_str(
            "- `findings.md` (also in `CASCADE_FINDINGS`): what earlier stories found. Read it \
             before you start. Append (do not rewrite) short notes later stories should know: \
             decisions, conventions, pitfalls, where things live. cascade adds what you append \
             to the plan's `findings.md` when you exit.\n",
        );
        if self.shared.is_some() {
            out.push_str(
                "- `mega-findings.md` (also in `CASCADE_MEGA_FINDINGS`, read-only): what the \
                 other features of the mega-plan found. Read it; do not edit it.\n",
            );
        }
        out
    }

    /// Appends what the agent added to its `findings.md` to the root's
    /// `findings.md` under `## <heading>`. Returns the added text, if any.
    pub fn collect(&self, heading: &str) -> Result<Option<String>, FindingsError> {
        let text = match std::fs::read_to_string(&self.findings) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(FindingsError::new("read", &self.findings, e)),
        };
        let added = match text.strip_prefix(self.seeded.as_str()) {
            Some(rest) => rest.to_string(),
            // Rewritten rather than appended to: keep the lines that are new.
            None => {
                let old: std::collections::HashSet<&str> =
                    self.seeded.lines().map(str::trim_end).collect();
                text.lines()
                    .filter(|l| !old.contains(l.trim_end()))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        };
        let added = added.trim_matches('\n').trim_end();
        if added.trim().is_empty() {
            return Ok(None);
        }
        let target = self.root.join(FEATURE_FINDINGS);
        let _turn = APPEND.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = match std::fs::read_to_string(&target) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(FindingsError::new("read", &target, e)),
        };
        if !all.is_empty() {
            if !all.ends_with('\n') {
                all.push('\n');
            }
            all.push('\n');
        }
        all.push_str(&format!("## {heading}\n\n{added}\n"));
        cascade_fs::write_atomic(&target, all.as_bytes(), cascade_fs::Durability::Synced)
            .map_err(|e| FindingsError::new("write", &target, e))?;
        Ok(Some(added.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn story_notes_are_seeded_and_collected_into_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let wt = tmp.path().join("wt");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        // Plain run: no findings yet, no shared file (a stale file of an
        // earlier story in a reused worktree goes).
        std::fs::write(wt.join(FEATURE_FINDINGS), "stale").unwrap();
        let (seed, problems) = seed_story(&root, &wt);
        assert!(problems.is_empty());
        assert!(seed.shared.is_none() && !seed.findings.exists());
        assert!(!seed.prompt_section().contains("mega-findings.md"));
        assert_eq!(seed.collect("s1: one").unwrap(), None);
        std::fs::write(&seed.findings, "uses tabs\n").unwrap();
        assert_eq!(
            seed.collect("s1: one").unwrap().as_deref(),
            Some("uses tabs")
        );
        assert_eq!(
            std::fs::read_to_string(root.join(FEATURE_FINDINGS)).unwrap(),
            "## s1: one\n\nuses tabs\n"
        );

        // The next story starts from that, with the shared file read-only.
        std::fs::write(root.join(MEGA_FINDINGS), "# shared\n").unwrap();
        let wt2 = tmp.path().join("wt2");
        std::fs::create_dir_all(&wt2).unwrap();
        let (seed, _) = seed_story(&root, &wt2);
        assert!(std::fs::read_to_string(&seed.findings)
            .unwrap()
            .contains("uses tabs"));
        let shared = seed.shared.clone().unwrap();
        assert_eq!(
            std::fs::metadata(&shared).unwrap().permissions().mode() & 0o777,
            0o444
        );
        assert!(seed.prompt_section().contains("CASCADE_MEGA_FINDINGS"));
        assert!(seed.env().iter().any(|(k, _)| k == "CASCADE_FINDINGS"));
        // Only what it appended is collected.
        let mut text = std::fs::read_to_string(&seed.findings).unwrap();
        text.push_str("\nthe API is in src/api.rs\n");
        std::fs::write(&seed.findings, text).unwrap();
        seed.collect("s2: two").unwrap();
        let all = std::fs::read_to_string(root.join(FEATURE_FINDINGS)).unwrap();
        assert_eq!(
            all,
            "## s1: one\n\nuses tabs\n\n## s2: two\n\nthe API is in src/api.rs\n"
        );
    }

    #[test]
    fn shared_copy_is_read_only_and_refreshed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let wt = tmp.path().join("wt");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        assert!(share_into(&root, &wt).unwrap().is_none());
        std::fs::write(root.join(MEGA_FINDINGS), "ship it").unwrap();
        let copy = share_into(&root, &wt).unwrap().unwrap();
        let mode = std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o444);
        assert!(std::fs::read_to_string(&copy).unwrap().contains("ship it"));
        // A second share replaces the read-only copy.
        std::fs::write(root.join(MEGA_FINDINGS), "v2").unwrap();
        share_into(&root, &wt).unwrap();
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), "v2");
    }
}
