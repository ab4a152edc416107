//! What judges a story, read from the commit it started from: its gates
//! (`.cascade/gates.json`, else prd.json's `quality_gates`, else the gates
//! of the detected project types) and its verification rules
//! (`.cascade/verify.json` over the built-in tables).
//!
//! A project may commit those files. An agent that edits them edits them on
//! its story branch, and that must change nothing for the story it is
//! judged on (the edit is itself a finding of verification). So every
//! attempt reads them from its base commit: the copy committed there, else
//! the main worktree's untracked copy as the run found it when it started,
//! never a story worktree's. A later story whose base holds an edit that
//! was allowed and merged is judged by the edited files.
//!
//! `cascade verify --range A..B` reads them from `A` the same way.
//!
//! Judges are kept by what they are made of, not by commit: each base names
//! its judging files by blob id (no file read), and bases that hold the same
//! files share one [`Judges`]. In a run where every merge moves the base,
//! keeping them per commit compiled the rule tables again for every story
//! and held each copy to the end of the run (megabytes per story).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cascade_gates::GateSet;
use cascade_git::RepoPaths;
use cascade_verify::RuleSet;

use crate::error::EngineError;

/// The judging files, by name under `.cascade/`.
pub const JUDGING_FILES: [&str; 3] = [GATES_JSON, VERIFY_JSON, CONFIG_JSON];
pub const GATES_JSON: &str = "gates.json";
pub const VERIFY_JSON: &str = "verify.json";
/// Only its `sandbox` section judges (what the story's processes may touch).
pub const CONFIG_JSON: &str = "config.json";

/// The gates and rules that judge the stories started from one commit.
#[derive(Debug)]
pub struct Judges {
    pub gates: GateSet,
    pub rules: RuleSet,
    /// config.json's `sandbox` at the base.
    pub sandbox: crate::confine::SandboxSettings,
}

/// Reads the judging files of each base commit (once per commit).
#[derive(Debug)]
pub struct Judging {
    /// Any directory of the repository.
    repo: PathBuf,
    cascade_dir: PathBuf,
    /// The main worktree's untracked copies as the run found them.
    untracked: BTreeMap<String, String>,
    prd_gates: Option<serde_json::Value>,
    /// Where the default gates are detected.
    project_root: PathBuf,
    /// Judges by the blob ids of the judging files at a base.
    seen: Mutex<HashMap<FilesKey, Arc<Judges>>>,
}

/// What decides a base's judges: per judging file, its blob id at the base,
/// or none (then the run's untracked copy, the same for every base).
type FilesKey = [Option<git2::Oid>; JUDGING_FILES.len()];

impl Judging {
    /// Takes the main worktree's untracked judging files as they are now
    /// (a copy the main worktree tracks is a commit's, read from commits).
    pub fn new(
        paths: &RepoPaths,
        project_root: &Path,
        prd_gates: Option<&serde_json::Value>,
    ) -> Result<Judging, EngineError> {
        let cascade_dir = paths.cascade_dir();
        let mut untracked = BTreeMap::new();
        for name in JUDGING_FILES {
            let path = cascade_dir.join(name);
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(cascade_gates::GateConfigError::Read { path, source }.into())
                }
            };
            if !cascade_git::diff::is_tracked(&paths.main_root, &rel(name))? {
                untracked.insert(name.to_string(), text);
            }
        }
        Ok(Judging {
            repo: paths.workdir.clone(),
            cascade_dir,
            untracked,
            prd_gates: prd_gates.cloned(),
            project_root: project_root.to_path_buf(),
            seen: Mutex::new(HashMap::new()),
        })
    }

    /// The same with the untracked copies given (a fleet worker takes the
    /// coordinator's, which travel with the job).
    pub fn with_untracked(mut self, files: BTreeMap<String, String>) -> Judging {
        self.untracked = files
            .into_iter()
            .filter(|(name, _)| JUDGING_FILES.contains(&name.as_str()))
            .collect();
        self
    }

    /// The untracked copies this run judges by where a base has none.
    pub fn untracked(&self) -> &BTreeMap<String, String> {
        &self.untracked
    }

    /// The gates and rules of the stories started from commit `base`.
    pub fn at(&self, base: &str) -> Result<Arc<Judges>, EngineError> {
        let rels = JUDGING_FILES.map(rel);
        let ids =
            cascade_git::diff::blob_ids_at(&self.repo, base, &rels.each_ref().map(String::as_str))?;
        let key: FilesKey = std::array::from_fn(|i| ids.get(i).copied().flatten());
        if let Some(j) = self.seen.lock().ok().and_then(|s| s.get(&key).cloned()) {
            return Ok(j);
        }
        let gates_json = self.file(base, GATES_JSON)?;
        let gates = GateSet::from_override(
            gates_json.as_ref().map(|(o, t)| (o.as_path(), t.as_str())),
            self.prd_gates.as_ref(),
            &self.project_root,
        )?;
        let rules = self.rules_at(base)?;
        let sandbox = self.sandbox_at(base)?;
        let judges = Arc::new(Judges {
            gates,
            rules,
            sandbox,
        });
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(key, Arc::clone(&judges));
        }
        Ok(judges)
    }

    /// The verification rules alone of commit `base` (`cascade verify`).
    pub fn rules_at(&self, base: &str) -> Result<RuleSet, EngineError> {
        Ok(match self.file(base, VERIFY_JSON)? {
            Some((origin, text)) => RuleSet::from_text(&origin, Some(&text))?,
            None => RuleSet::builtin(),
        })
    }

    /// config.json's `sandbox` section at `base` (the rest of the file is
    /// the main worktree's, read by `ProjectConfig::load`).
    pub fn sandbox_at(&self, base: &str) -> Result<crate::confine::SandboxSettings, EngineError> {
        #[derive(serde::Deserialize)]
        struct Only {
            #[serde(default)]
            sandbox: crate::confine::SandboxSettings,
        }
        let Some((origin, text)) = self.file(base, CONFIG_JSON)? else {
            return Ok(Default::default());
        };
        let only: Only = serde_json::from_str(&text).map_err(|source| {
            crate::config::ProjectConfigError::Parse {
                path: origin.clone(),
                source,
            }
        })?;
        if let Err((key, entry)) = only.sandbox.check() {
            return Err(crate::config::ProjectConfigError::BadSandboxPath {
                path: origin,
                key,
                entry,
            }
            .into());
        }
        Ok(only.sandbox)
    }

    /// A judging file for `base`: where it came from (for messages) and its
    /// text.
    fn file(&self, base: &str, name: &str) -> Result<Option<(PathBuf, String)>, EngineError> {
        if let Some(bytes) = cascade_git::diff::file_at(&self.repo, base, &rel(name))? {
            let short: String = base.chars().take(10).collect();
            return Ok(Some((
                PathBuf::from(format!("{} (at commit {short})", rel(name))),
                String::from_utf8_lossy(&bytes).into_owned(),
            )));
        }
        Ok(self
            .untracked
            .get(name)
            .map(|t| (self.cascade_dir.join(name), t.clone())))
    }
}

/// `.cascade/<name>`, repository-relative.
fn rel(name: &str) -> String {
    format!("{}/{name}", cascade_git::repo::CASCADE_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_test_support::git;

    const TESTS: &str =
        r#"{"gates": [{"name": "tests", "command": "python3", "args": ["-m", "unittest"]}]}"#;
    const TRUE: &str = r#"{"gates": [{"name": "tests", "command": "true"}]}"#;

    /// A repository whose one commit (returned) tracks `.cascade/gates.json`.
    fn repo_with_gates() -> (tempfile::TempDir, String) {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::create_dir_all(d.join(".cascade")).unwrap();
        std::fs::write(d.join(".cascade/gates.json"), TESTS).unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "base"]);
        let head = git(d, &["rev-parse", "HEAD"]);
        (tmp, head)
    }

    #[test]
    fn judges_come_from_the_base_commit_else_the_untracked_copy_as_it_was() {
        let (tmp, base) = repo_with_gates();
        let d = tmp.path();
        // An untracked verify.json of the main worktree, and an edit of the
        // committed gates.json on a later commit.
        std::fs::write(
            d.join(".cascade/verify.json"),
            r#"{"disable": ["rust-stub-macro"]}"#,
        )
        .unwrap();
        std::fs::write(d.join(".cascade/gates.json"), TRUE).unwrap();
        git(d, &["commit", "-q", "-am", "cheat"]);
        let cheat = git(d, &["rev-parse", "HEAD"]);
        let paths = RepoPaths::discover(d).unwrap();
        let judging = Judging::new(&paths, d, None).unwrap();
        assert_eq!(
            judging.untracked().keys().collect::<Vec<_>>(),
            ["verify.json"],
            "the tracked gates.json is read from commits"
        );
        // Later edits of the untracked copy change nothing for this run.
        std::fs::write(d.join(".cascade/verify.json"), "{oops").unwrap();
        let at_base = judging.at(&base).unwrap();
        assert_eq!(at_base.gates.gates[0].program, "python3");
        assert!(!at_base.rules.ids().contains(&"rust-stub-macro"));
        let at_cheat = judging.at(&cheat).unwrap();
        assert_eq!(at_cheat.gates.gates[0].program, "true");
        // A bad committed file names the commit.
        std::fs::write(d.join(".cascade/gates.json"), "{bad").unwrap();
        git(d, &["commit", "-q", "-am", "broken"]);
        let broken = git(d, &["rev-parse", "HEAD"]);
        let e = judging.at(&broken).unwrap_err().to_string();
        assert!(e.contains(".cascade/gates.json (at commit"), "{e}");
        // prd.json's gates apply where the base has no gates.json.
        let prd: serde_json::Value = serde_json::from_str(TESTS).unwrap();
        git(d, &["rm", "-q", ".cascade/gates.json"]);
        git(d, &["commit", "-q", "-m", "no gates file"]);
        let none = git(d, &["rev-parse", "HEAD"]);
        std::fs::remove_file(d.join(".cascade/verify.json")).unwrap();
        let judging = Judging::new(&paths, d, Some(&prd)).unwrap();
        assert_eq!(judging.at(&none).unwrap().gates.gates[0].program, "python3");
        // A fleet worker takes the coordinator's untracked copies (and only
        // judging files).
        let theirs = [
            ("gates.json".to_string(), TRUE.to_string()),
            ("state.json".to_string(), "{}".to_string()),
        ];
        let worker = Judging::new(&paths, d, None)
            .unwrap()
            .with_untracked(theirs.into_iter().collect());
        assert_eq!(worker.untracked().len(), 1);
        assert_eq!(worker.at(&none).unwrap().gates.gates[0].program, "true");
    }

    #[test]
    fn bases_holding_the_same_judging_files_share_one_set_of_judges() {
        let (tmp, first) = repo_with_gates();
        let d = tmp.path();
        // Stories merging other files move the base, not the judging files.
        let mut same = vec![first.clone()];
        for i in 0..5 {
            std::fs::write(d.join(format!("f{i}.txt")), "x").unwrap();
            git(d, &["add", "-A"]);
            git(d, &["commit", "-q", "-m", "story"]);
            same.push(git(d, &["rev-parse", "HEAD"]));
        }
        let paths = RepoPaths::discover(d).unwrap();
        let judging = Judging::new(&paths, d, None).unwrap();
        let one = judging.at(&first).unwrap();
        for base in &same {
            assert!(Arc::ptr_eq(&one, &judging.at(base).unwrap()), "{base}");
        }
        // A base whose verify.json differs is judged by its own rules, and
        // a later base back at the first files shares the first judges.
        std::fs::write(
            d.join(".cascade/verify.json"),
            r#"{"disable": ["rust-stub-macro"]}"#,
        )
        .unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "rules"]);
        let other = judging.at(&git(d, &["rev-parse", "HEAD"])).unwrap();
        assert!(!Arc::ptr_eq(&one, &other));
        assert!(!other.rules.ids().contains(&"rust-stub-macro"));
        assert!(one.rules.ids().contains(&"rust-stub-macro"));
        git(d, &["rm", "-q", ".cascade/verify.json"]);
        git(d, &["commit", "-q", "-m", "back"]);
        let back = judging.at(&git(d, &["rev-parse", "HEAD"])).unwrap();
        assert!(Arc::ptr_eq(&one, &back));
        assert_eq!(judging.seen.lock().unwrap().len(), 2);
    }
}
