//! Where plan files live: the project, or Plan Cascade's per-user data directory.
//!
//! Plan Cascade's default ("new") path mode keeps a project's runtime files
//! out of the project, in `~/.plan-cascade/<project-id>/` (Unix, macOS) or
//! `%APPDATA%/plan-cascade/<project-id>/` (Windows): `prd.json`,
//! `mega-plan.json`, `manifest.json`, `.state/`, `.locks/`, `.worktree/`.
//! Only `design_doc.json`, `progress.txt`, `findings.md` and `mega-findings.md`
//! stay in the project. Its legacy mode keeps everything in the project root.
//!
//! This module computes the project id exactly as Plan Cascade does, finds
//! the data directory of a project, reads (never writes) its manifest to
//! confirm that the directory belongs to this project, and answers the two
//! questions the commands ask: which plan file to read ([`ProjectPaths::find_plan`])
//! and where `cascade plan` writes new plan files ([`ProjectPaths::plan_output`]).
//! It prints nothing: warnings come back as [`PathWarning`] values.
//!
//! The project root is given by the caller (the binary uses the main worktree
//! root from git, so a subdirectory or a linked worktree maps to the same id).
//!
//! Files: `id.rs` (project id, data home), `manifest.rs` (reading and
//! checking `manifest.json`), `output.rs` (where `cascade plan` writes), this
//! file (locating a project's data directory and choosing plan files).

use std::fmt;
use std::path::{Path, PathBuf};

mod id;
mod manifest;
mod output;
#[cfg(test)]
mod tests;

pub use id::{data_home, data_home_with, project_id, project_id_from, resolve_root, sanitize_name};
use manifest::same_root;
pub use manifest::{Manifest, ManifestError};
pub use output::{OutputPlace, PlanOutput};

/// The PRD's file name, in the project or the data directory.
pub const PRD_FILE: &str = "prd.json";
/// The mega-plan's file name, in the project or the data directory.
pub const MEGA_FILE: &str = "mega-plan.json";
/// The data directory's description of the project it belongs to.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The design document: always in the project, in both modes.
pub const DESIGN_DOC_FILE: &str = "design_doc.json";

/// What was found at a project's data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataDirState {
    /// No home directory to look in (`HOME` / `APPDATA` unset).
    NoHome,
    /// The directory does not exist: this project has no Plan Cascade data.
    Missing,
    /// The directory belongs to this project (its manifest says so, or it
    /// has none or an unreadable one; the id already encodes the path).
    Ours { manifest: Option<Manifest> },
    /// Its manifest names another project root (a hash collision, or a
    /// directory copied by hand): its files are not used.
    Foreign { manifest_root: String },
}

/// Something the user should hear about; the binary prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathWarning {
    /// A plan file exists in the project and in the data directory with
    /// different contents; the project's is used.
    BothDiffer { used: PathBuf, ignored: PathBuf },
    /// The data directory's manifest names another project root.
    ForeignManifest {
        dir: PathBuf,
        manifest_root: String,
        project_root: PathBuf,
    },
    /// The manifest could not be read (`reason`: the [`ManifestError`],
    /// which names the file); the directory is used anyway.
    UnreadableManifest { path: PathBuf, reason: String },
}

impl fmt::Display for PathWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathWarning::BothDiffer { used, ignored } => write!(
                f,
                "both '{}' and '{}' exist and differ; using '{}' (the project's file; pass --prd or --mega to choose the other, or remove one)",
                used.display(),
                ignored.display(),
                used.display()
            ),
            PathWarning::ForeignManifest {
                dir,
                manifest_root,
                project_root,
            } => write!(
                f,
                "the Plan Cascade data directory '{}' belongs to '{manifest_root}' according to its manifest.json, not to '{}'; its files are not used",
                dir.display(),
                project_root.display()
            ),
            PathWarning::UnreadableManifest { path, reason } => write!(
                f,
                "{reason}; using {} anyway since its name matches this project (fix or remove that manifest.json)",
                path.parent().unwrap_or(path).display()
            ),
        }
    }
}

/// Which path mode a project is in, as Plan Cascade would say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathMode {
    /// Plan files in the user data directory.
    New,
    /// Plan files in the project.
    Legacy,
    /// Neither: no plan file in the project and no data directory.
    None,
}

impl PathMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PathMode::New => "new",
            PathMode::Legacy => "legacy",
            PathMode::None => "none",
        }
    }
}

/// The kind of plan file a command reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    Prd,
    Mega,
}

impl PlanKind {
    pub fn file_name(self) -> &'static str {
        match self {
            PlanKind::Prd => PRD_FILE,
            PlanKind::Mega => MEGA_FILE,
        }
    }
}

/// Where a plan file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanSource {
    /// `--prd PATH` / `--mega PATH`.
    Flag,
    /// The current directory (legacy mode).
    Project,
    /// The project's Plan Cascade data directory (new mode).
    DataDir,
}

impl PlanSource {
    pub fn as_str(self) -> &'static str {
        match self {
            PlanSource::Flag => "flag",
            PlanSource::Project => "project",
            PlanSource::DataDir => "data_dir",
        }
    }
}

/// A plan file chosen by [`ProjectPaths::find_plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPlan {
    pub kind: PlanKind,
    /// As given for [`PlanSource::Flag`] (relative paths stay relative, so
    /// messages show what the user typed); absolute otherwise.
    pub path: PathBuf,
    pub source: PlanSource,
    pub warnings: Vec<PathWarning>,
}

/// A project's places: its root, id and Plan Cascade data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectPaths {
    /// The resolved project root the id is computed from.
    pub project_root: PathBuf,
    pub project_id: String,
    /// `<data home>/<project id>`, whether or not it exists (`None` without a home).
    pub data_dir: Option<PathBuf>,
    pub state: DataDirState,
    /// Problems met while locating (a foreign or unreadable manifest).
    pub warnings: Vec<PathWarning>,
}

impl ProjectPaths {
    /// Locates the data directory of `project_root` under `data_home`
    /// (see [`data_home`]) and checks its manifest.
    pub fn locate(project_root: &Path, data_home: Option<&Path>) -> ProjectPaths {
        let project_root = resolve_root(project_root);
        let project_id = project_id(&project_root);
        let data_dir = data_home.map(|h| h.join(&project_id));
        let mut warnings = Vec::new();
        let state = match &data_dir {
            None => DataDirState::NoHome,
            Some(dir) if !dir.is_dir() => DataDirState::Missing,
            Some(dir) => {
                let path = dir.join(MANIFEST_FILE);
                match Manifest::read(&path) {
                    Ok(Some(m)) => match &m.project_root {
                        Some(root) if !same_root(root, &project_root) => {
                            warnings.push(PathWarning::ForeignManifest {
                                dir: dir.clone(),
                                manifest_root: root.clone(),
                                project_root: project_root.clone(),
                            });
                            DataDirState::Foreign {
                                manifest_root: root.clone(),
                            }
                        }
                        _ => DataDirState::Ours { manifest: Some(m) },
                    },
                    Ok(None) => DataDirState::Ours { manifest: None },
                    Err(e) => {
                        warnings.push(PathWarning::UnreadableManifest {
                            path,
                            reason: e.to_string(),
                        });
                        DataDirState::Ours { manifest: None }
                    }
                }
            }
        };
        ProjectPaths {
            project_root,
            project_id,
            data_dir,
            state,
            warnings,
        }
    }

    /// The data directory when it exists and belongs to this project.
    pub fn usable_data_dir(&self) -> Option<&Path> {
        match self.state {
            DataDirState::Ours { .. } => self.data_dir.as_deref(),
            _ => None,
        }
    }

    /// The project's mode seen from `cwd`: legacy when a plan file is in
    /// `cwd`, new when the project has a data directory, none otherwise.
    pub fn mode(&self, cwd: &Path) -> PathMode {
        if cwd.join(PRD_FILE).is_file() || cwd.join(MEGA_FILE).is_file() {
            PathMode::Legacy
        } else if self.usable_data_dir().is_some() {
            PathMode::New
        } else {
            PathMode::None
        }
    }

    /// The plan file of `kind` a command run in `cwd` reads: `flag` when
    /// given; else `<cwd>/<file>` (legacy mode); else the data directory's
    /// file. When both of the last two exist with different contents, the
    /// project's wins and a [`PathWarning::BothDiffer`] says so. `None`:
    /// no such file anywhere (the caller names both places).
    pub fn find_plan(&self, kind: PlanKind, cwd: &Path, flag: Option<&Path>) -> Option<FoundPlan> {
        if let Some(path) = flag {
            return Some(FoundPlan {
                kind,
                path: path.to_path_buf(),
                source: PlanSource::Flag,
                warnings: Vec::new(),
            });
        }
        let mut warnings = self.warnings.clone();
        let local = cwd.join(kind.file_name());
        let data = self
            .usable_data_dir()
            .map(|d| d.join(kind.file_name()))
            .filter(|p| p.is_file());
        if local.is_file() {
            if let Some(data) = data {
                if !same_contents(&local, &data) {
                    warnings.push(PathWarning::BothDiffer {
                        used: local.clone(),
                        ignored: data,
                    });
                }
            }
            return Some(FoundPlan {
                kind,
                path: local,
                source: PlanSource::Project,
                warnings,
            });
        }
        data.map(|path| FoundPlan {
            kind,
            path,
            source: PlanSource::DataDir,
            warnings,
        })
    }

    /// For commands that take either kind (`deps`, `validate`): `--mega`,
    /// `--prd`, else the project's `prd.json`, then its `mega-plan.json`,
    /// then the data directory's `prd.json`, then its `mega-plan.json`
    /// (the project's files always before the data directory's).
    pub fn find_either(
        &self,
        cwd: &Path,
        prd_flag: Option<&Path>,
        mega_flag: Option<&Path>,
    ) -> Option<FoundPlan> {
        if mega_flag.is_some() {
            return self.find_plan(PlanKind::Mega, cwd, mega_flag);
        }
        if prd_flag.is_some() {
            return self.find_plan(PlanKind::Prd, cwd, prd_flag);
        }
        let prd = self.find_plan(PlanKind::Prd, cwd, None);
        let mega = self.find_plan(PlanKind::Mega, cwd, None);
        match (prd, mega) {
            (Some(p), _) if p.source == PlanSource::Project => Some(p),
            (_, Some(m)) if m.source == PlanSource::Project => Some(m),
            (Some(p), _) => Some(p),
            (None, m) => m,
        }
    }
}

/// Whether two files hold the same bytes (unreadable counts as different).
fn same_contents(a: &Path, b: &Path) -> bool {
    match (std::fs::read(a), std::fs::read(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}
