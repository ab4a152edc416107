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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cascade_gates::GateSet;
use cascade_git::RepoPaths;
use cascade_verify::RuleSet;

use crate::error::EngineError;

/// The judging files, by name under `.cascade/`.
pub const JUDGING_FILES: [&str; 2] = [GATES_JSON, VERIFY_JSON];
pub const GATES_JSON: &str = "gates.json";
pub const VERIFY_JSON: &str = "verify.json";

/// The gates and rules that judge the stories started from one commit.
#[derive(Debug)]
pub struct Judges {
    pub gates: GateSet,
    /// Shared by every commit with the same `verify.json` (see [`Judging`]).
    pub rules: Arc<RuleSet>,
}

/// The verification file a rule set was built from: where it came from
/// and its text (`None`: the built-in tables alone).
type RulesKey = Option<(PathBuf, String)>;

/// Reads the judging files of each base commit (once per commit).
///
/// Every story of a run starts from a new commit (the tip after the last
/// merge), so what is kept per commit must be small: the rule set, whose
/// compiled patterns take megabytes and tens of milliseconds to build, is
/// built once per distinct `verify.json` (origin and text) and shared by
/// every commit that has it; the gates are read per commit (they are
/// small, and detected gates follow the project's files).
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
    seen: Mutex<HashMap<String, Arc<Judges>>>,
    rule_sets: Mutex<HashMap<RulesKey, Arc<RuleSet>>>,
}

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
            rule_sets: Mutex::new(HashMap::new()),
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
        if let Some(j) = self.seen.lock().ok().and_then(|s| s.get(base).cloned()) {
            return Ok(j);
        }
        let gates_json = self.file(base, GATES_JSON)?;
        let gates = GateSet::from_override(
            gates_json.as_ref().map(|(o, t)| (o.as_path(), t.as_str())),
            self.prd_gates.as_ref(),
            &self.project_root,
        )?;
        let rules = self.shared_rules_at(base)?;
        let judges = Arc::new(Judges { gates, rules });
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(base.to_string(), Arc::clone(&judges));
        }
        Ok(judges)
    }

    /// The verification rules alone of commit `base` (`cascade verify`).
    pub fn rules_at(&self, base: &str) -> Result<RuleSet, EngineError> {
        Ok(build_rules(&self.file(base, VERIFY_JSON)?)?)
    }

    /// [`Judging::rules_at`], built once per distinct file.
    fn shared_rules_at(&self, base: &str) -> Result<Arc<RuleSet>, EngineError> {
        let key = self.file(base, VERIFY_JSON)?;
        if let Some(r) = self
            .rule_sets
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned())
        {
            return Ok(r);
        }
        let rules = Arc::new(build_rules(&key)?);
        if let Ok(mut m) = self.rule_sets.lock() {
            m.insert(key, Arc::clone(&rules));
        }
        Ok(rules)
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

fn build_rules(file: &RulesKey) -> Result<RuleSet, cascade_verify::VerifyError> {
    match file {
        Some((origin, text)) => RuleSet::from_text(origin, Some(text)),
        None => Ok(RuleSet::builtin()),
    }
}

/// `.cascade/<name>`, repository-relative.
fn rel(name: &str) -> String {
    format!("{}/{name}", cascade_git::repo::CASCADE_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    const TESTS: &str =
        r#"{"gates": [{"name": "tests", "command": "python3", "args": ["-m", "unittest"]}]}"#;
    const TRUE: &str = r#"{"gates": [{"name": "tests", "command": "true"}]}"#;

    #[test]
    fn judges_come_from_the_base_commit_else_the_untracked_copy_as_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::create_dir_all(d.join(".cascade")).unwrap();
        std::fs::write(d.join(".cascade/gates.json"), TESTS).unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "base"]);
        let base = git(d, &["rev-parse", "HEAD"]);
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
}
