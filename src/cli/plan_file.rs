//! The one place every command finds the plan file it reads.
//!
//! Order: `--prd` / `--mega` when given; else `./prd.json` (or
//! `./mega-plan.json`: Plan Cascade's legacy mode); else the file in this
//! project's Plan Cascade data directory (`~/.plan-cascade/<project-id>/`,
//! its default mode). The project is the main worktree of the repository
//! containing the current directory, so a subdirectory or a linked worktree
//! finds the same data directory; outside git it is the current directory.
//! The rules live in `cascade_plan::paths`; this module prints their
//! warnings (`warning: ...` on stderr) and turns "nowhere" into an error
//! that names every place looked at.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use cascade_plan::paths::{
    data_home, DataDirState, FoundPlan, PlanKind, PlanSource, ProjectPaths, MEGA_FILE,
};

use super::Failure;

/// The current directory, its repository (if any) and the project's places.
pub struct Project {
    pub cwd: PathBuf,
    pub repo: Option<cascade_git::RepoPaths>,
    pub paths: ProjectPaths,
}

impl Project {
    /// Locates the project of the current directory.
    pub fn current() -> Result<Project, Failure> {
        let cwd = std::env::current_dir()
            .map_err(|e| Failure::usage(anyhow!("cannot read the current directory: {e}")))?;
        Ok(Project::of(cwd))
    }

    /// Locates the project of `cwd` (the data home from `HOME` / `APPDATA`).
    pub fn of(cwd: PathBuf) -> Project {
        let repo = cascade_git::RepoPaths::discover(&cwd).ok();
        let root = repo
            .as_ref()
            .map(|r| r.main_root.clone())
            .unwrap_or_else(|| cwd.clone());
        let paths = ProjectPaths::locate(&root, data_home().as_deref());
        Project { cwd, repo, paths }
    }

    /// The plan file of `kind` (`flag`: `--prd` / `--mega`), or an error
    /// naming the places looked at.
    pub fn find(&self, kind: PlanKind, flag: Option<&Path>) -> Result<Plan, Failure> {
        match self.paths.find_plan(kind, &self.cwd, flag) {
            Some(found) => Ok(self.chosen(found)),
            None => Err(self.not_found(&[kind])),
        }
    }

    /// A PRD or a mega-plan, whichever is found first (`deps`, `validate`).
    pub fn find_either(&self, prd: Option<&Path>, mega: Option<&Path>) -> Result<Plan, Failure> {
        match self.paths.find_either(&self.cwd, prd, mega) {
            Some(found) => Ok(self.chosen(found)),
            None => Err(self.not_found(&[PlanKind::Prd, PlanKind::Mega])),
        }
    }

    /// Where `cascade plan` writes plan files for this project: `out`
    /// (`--out DIR`) when given; else the project's Plan Cascade data
    /// directory when one already exists (plan files there, design_doc.json
    /// in the project); else the project root.
    /// [`PlanOutput::describe`](cascade_plan::paths::PlanOutput::describe)
    /// is the sentence to print about the choice.
    pub fn plan_output(&self, out: Option<&Path>) -> cascade_plan::paths::PlanOutput {
        self.paths.plan_output(out)
    }

    /// The file of `kind` discovery would pick without a flag, as shown to
    /// the user; no warnings printed (for hints such as `status`'s).
    pub fn peek(&self, kind: PlanKind) -> Option<PathBuf> {
        self.paths
            .find_plan(kind, &self.cwd, None)
            .map(|found| self.shown(found))
    }

    /// Prints the warnings of a choice.
    fn chosen(&self, found: FoundPlan) -> Plan {
        for w in &found.warnings {
            errln!("warning: {w}");
        }
        let (kind, source) = (found.kind, found.source);
        Plan {
            path: self.shown(found),
            kind,
            source,
        }
    }

    /// A file of the current directory shortened to its name, as the user
    /// would type it; others as they are.
    fn shown(&self, found: FoundPlan) -> PathBuf {
        match found.source {
            PlanSource::Project => found
                .path
                .strip_prefix(&self.cwd)
                .map(Path::to_path_buf)
                .unwrap_or(found.path),
            _ => found.path,
        }
    }

    /// "prd.json not found (looked in ... and ...): create it or pass ...".
    fn not_found(&self, kinds: &[PlanKind]) -> Failure {
        for w in &self.paths.warnings {
            errln!("warning: {w}");
        }
        let names: Vec<&str> = kinds.iter().map(|k| k.file_name()).collect();
        let flags: Vec<&str> = kinds
            .iter()
            .map(|k| match k {
                PlanKind::Prd => "--prd PATH",
                PlanKind::Mega => "--mega PATH",
            })
            .collect();
        let mut places = vec![self.cwd.display().to_string()];
        match (&self.paths.state, &self.paths.data_dir) {
            (DataDirState::Ours { .. }, Some(dir)) => places.push(format!(
                "{} (this project's Plan Cascade data directory)",
                dir.display()
            )),
            (DataDirState::Missing, Some(dir)) => places.push(format!(
                "{} (no Plan Cascade data directory for this project)",
                dir.display()
            )),
            _ => {}
        }
        let mut text = if kinds.len() == 1 {
            format!(
                "{} not found in {}: create it or pass its path with {}",
                names[0],
                places.join(" or "),
                flags[0]
            )
        } else {
            format!(
                "no {} in {}: pass {}",
                names.join(" or "),
                places.join(" or "),
                flags.join(" or ")
            )
        };
        // A directory with the other kind of plan: say which command reads it.
        if kinds == [PlanKind::Prd] {
            if let Some(shown) = self.peek(PlanKind::Mega) {
                text.push_str(&format!(
                    " (there is a {MEGA_FILE}: `cascade deps --mega {0}` analyzes it, `cascade mega approve --mega {0}` runs it)",
                    shown.display()
                ));
            }
        }
        Failure::usage(anyhow!(text))
    }
}

/// A chosen plan file.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Relative to the current directory when it is there, else absolute
    /// (or as typed after `--prd` / `--mega`).
    pub path: PathBuf,
    pub kind: PlanKind,
    pub source: PlanSource,
}

/// Finds the PRD of a command run in the current directory (see [`Project::find`]).
pub fn find_prd(flag: Option<&Path>) -> Result<Plan, Failure> {
    Project::current()?.find(PlanKind::Prd, flag)
}
