//! Where `cascade plan` writes new plan files: `--out`, else the project's
//! Plan Cascade data directory when it has one, else the project.

use std::path::{Path, PathBuf};

use super::{ProjectPaths, DESIGN_DOC_FILE};

/// Where `cascade plan` writes plan files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOutput {
    /// The directory for `prd.json` / `mega-plan.json`.
    pub plan_dir: PathBuf,
    /// The directory for `design_doc.json` (the project in both modes, as
    /// Plan Cascade keeps it; `--out` puts it beside the plan).
    pub design_doc_dir: PathBuf,
    pub place: OutputPlace,
}

/// Why [`PlanOutput`] chose its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputPlace {
    /// `--out DIR`.
    Flag,
    /// The project already has a Plan Cascade data directory (new mode).
    DataDir,
    /// No data directory for this project: the project root.
    Project,
}

impl PlanOutput {
    /// One sentence for the user: where the plan goes and why.
    pub fn describe(&self) -> String {
        let dir = self.plan_dir.display();
        match self.place {
            OutputPlace::Flag => format!("writing plan files to {dir} (--out)"),
            OutputPlace::DataDir => format!(
                "writing the plan to {dir} (this project's Plan Cascade data directory) and {} to {}",
                DESIGN_DOC_FILE,
                self.design_doc_dir.display()
            ),
            OutputPlace::Project => format!(
                "writing plan files to {dir} (no Plan Cascade data directory for this project)"
            ),
        }
    }
}

impl ProjectPaths {
    /// Where `cascade plan` writes its plan files: `out` when given; else
    /// this project's Plan Cascade data directory when one already exists
    /// (the plan there, `design_doc.json` in the project, as Plan Cascade's
    /// new mode expects); else the project root.
    pub fn plan_output(&self, out: Option<&Path>) -> PlanOutput {
        if let Some(dir) = out {
            return PlanOutput {
                plan_dir: dir.to_path_buf(),
                design_doc_dir: dir.to_path_buf(),
                place: OutputPlace::Flag,
            };
        }
        match self.usable_data_dir() {
            Some(dir) => PlanOutput {
                plan_dir: dir.to_path_buf(),
                design_doc_dir: self.project_root.clone(),
                place: OutputPlace::DataDir,
            },
            None => PlanOutput {
                plan_dir: self.project_root.clone(),
                design_doc_dir: self.project_root.clone(),
                place: OutputPlace::Project,
            },
        }
    }
}
