//! `cascade paths [--json]`: where this project's files are, for people
//! moving between Plan Cascade and cascade.
//!
//! Shows the project id, the Plan Cascade data directory (and whether its
//! manifest confirms this project), the path mode (new | legacy | none), the
//! plan files discovery picks, where `cascade plan` would write new ones, and
//! every other file cascade reads or writes. Reads only; exit 0 (2 when the
//! current directory cannot be read).

use std::path::{Path, PathBuf};

use cascade_plan::paths::{
    DataDirState, OutputPlace, PathMode, PathWarning, PlanKind, PlanOutput, PlanSource,
    DESIGN_DOC_FILE, MANIFEST_FILE,
};
use clap::Args;
use serde::Serialize;
use serde_json::json;

use super::plan_file::Project;
use super::{CliResult, Global, EXIT_OK};

#[derive(Debug, Args)]
pub struct PathsArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

/// One file cascade reads or writes.
#[derive(Debug, Serialize)]
struct FileRow {
    /// What it is (`prd.json`, `run state`, ...).
    name: &'static str,
    path: String,
    exists: bool,
    /// `read`, `write` or `read-write`.
    access: &'static str,
    /// `project`, `data_dir`, `cascade` (the `.cascade/` directory), `user`,
    /// `built_in` or `flag`.
    location: &'static str,
    /// Why this file, when it is not obvious.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

pub fn run(g: &Global, a: PathsArgs) -> CliResult {
    let project = Project::current()?;
    let places = Places::of(&project);
    let mut files = plan_rows(&project, &places);
    files.extend(project_rows(&project, &places));
    files.push(agents_row(g, &project.cwd));
    files.push(gates_row(&places.cascade_dir));
    files.extend(cascade_rows(&places.cascade_dir));
    if a.json {
        outln!("{}", to_json(&project, &places, &files));
    } else {
        for w in &project.paths.warnings {
            errln!("warning: {w}");
        }
        let text = to_text(&project, &places, &files);
        use std::io::Write;
        let mut stdout = super::out::stdout();
        let _ = stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush());
    }
    Ok(EXIT_OK)
}

/// The directories everything else is relative to.
struct Places {
    /// cascade's own state directory (`.cascade/` at the main worktree root).
    cascade_dir: PathBuf,
    /// The repository's main worktree root (the current directory outside git).
    root: PathBuf,
    /// Where `cascade plan` would write new plan files.
    output: PlanOutput,
}

impl Places {
    fn of(project: &Project) -> Places {
        let cwd = &project.cwd;
        Places {
            cascade_dir: project
                .repo
                .as_ref()
                .map(|r| r.cascade_dir())
                .unwrap_or_else(|| cwd.join(".cascade")),
            root: project
                .repo
                .as_ref()
                .map(|r| r.main_root.clone())
                .unwrap_or_else(|| cwd.clone()),
            output: project.plan_output(None),
        }
    }
}

/// prd.json and mega-plan.json: the ones discovery picks, else where
/// `cascade plan` would put them; then design_doc.json (beside the PRD,
/// else in the project, as the engine reads it).
fn plan_rows(project: &Project, places: &Places) -> Vec<FileRow> {
    let (p, cwd) = (&project.paths, &project.cwd);
    let mut rows = Vec::new();
    let mut prd_dir = None;
    for kind in [PlanKind::Prd, PlanKind::Mega] {
        let name = kind.file_name();
        let row = match p.find_plan(kind, cwd, None) {
            Some(found) => {
                let (location, note) = match found.source {
                    PlanSource::DataDir => (
                        "data_dir",
                        "found in the Plan Cascade data directory: new mode",
                    ),
                    _ => ("project", "found in the current directory: legacy mode"),
                };
                let note = match found
                    .warnings
                    .iter()
                    .find(|w| matches!(w, PathWarning::BothDiffer { .. }))
                {
                    Some(w) => format!("{note}; {w}"),
                    None => note.to_string(),
                };
                if kind == PlanKind::Prd {
                    prd_dir = found.path.parent().map(Path::to_path_buf);
                }
                file(name, &found.path, "read-write", location, Some(note))
            }
            None => file(
                name,
                &places.output.plan_dir.join(name),
                "read-write",
                place_location(places.output.place),
                Some("not found; `cascade plan` would write it here".to_string()),
            ),
        };
        rows.push(row);
    }
    let beside = prd_dir
        .map(|d| d.join(DESIGN_DOC_FILE))
        .filter(|d| d.is_file());
    let design = beside.unwrap_or_else(|| cwd.join(DESIGN_DOC_FILE));
    rows.push(file("design_doc.json", &design, "read", "project", None));
    rows
}

/// The files that stay in the project in both modes, and the data
/// directory's manifest.
fn project_rows(project: &Project, places: &Places) -> Vec<FileRow> {
    let cwd = &project.cwd;
    let mut rows = vec![
        file(
            "progress.txt",
            &cwd.join("progress.txt"),
            "write",
            "project",
            None,
        ),
        file(
            "findings.md",
            &cwd.join("findings.md"),
            "read-write",
            "project",
            None,
        ),
        file(
            "mega-findings.md",
            &places.root.join("mega-findings.md"),
            "read-write",
            "project",
            None,
        ),
    ];
    if let Some(dir) = &project.paths.data_dir {
        rows.push(file(
            "manifest.json",
            &dir.join(MANIFEST_FILE),
            "read",
            "data_dir",
            Some("read to confirm the project root, never written".into()),
        ));
    }
    rows
}

/// cascade's own files under `.cascade/`.
fn cascade_rows(cascade_dir: &Path) -> Vec<FileRow> {
    [
        ("run state", cascade_engine::store::DB_FILE, "read-write"),
        (
            "run state of an older cascade (imported once)",
            "state.json",
            "read",
        ),
        (
            "mega run state of an older cascade (imported once)",
            "mega-state.json",
            "read",
        ),
        ("run lock", "lock", "write"),
        ("project config", "config.json", "read"),
        ("skills config", "skills.json", "read"),
        ("gate cache", "gate-cache", "read-write"),
        ("planning sessions", "plans", "read-write"),
        ("gate results per attempt", "gate-results", "write"),
        ("run event journals", "runs", "read-write"),
        ("live channel of a running run", "live.sock", "read-write"),
        ("fleet jobs out", "fleet-jobs.json", "read-write"),
    ]
    .into_iter()
    .map(|(name, file_name, access)| {
        file(name, &cascade_dir.join(file_name), access, "cascade", None)
    })
    .collect()
}

fn state_name(state: &DataDirState) -> &'static str {
    match state {
        DataDirState::NoHome => "no_home",
        DataDirState::Missing => "missing",
        DataDirState::Ours { .. } => "ours",
        DataDirState::Foreign { .. } => "foreign",
    }
}

/// `cascade paths --json`: one object (fields in docs/paths.md).
fn to_json(project: &Project, places: &Places, files: &[FileRow]) -> serde_json::Value {
    let p = &project.paths;
    let manifest = match &p.state {
        DataDirState::Ours { manifest } => manifest.clone(),
        _ => None,
    };
    let warnings: Vec<String> = p.warnings.iter().map(ToString::to_string).collect();
    json!({
        "project_root": p.project_root.display().to_string(),
        "project_id": p.project_id,
        "data_dir": p.data_dir.as_ref().map(|d| d.display().to_string()),
        "data_dir_state": state_name(&p.state),
        "manifest": manifest,
        "mode": p.mode(&project.cwd).as_str(),
        "cascade_dir": places.cascade_dir.display().to_string(),
        "plan_output": {
            "plan_dir": places.output.plan_dir.display().to_string(),
            "design_doc_dir": places.output.design_doc_dir.display().to_string(),
            "place": place_location(places.output.place),
        },
        "files": files,
        "warnings": warnings,
    })
}

/// `cascade paths`: a header, then one line per file.
fn to_text(project: &Project, places: &Places, files: &[FileRow]) -> String {
    let p = &project.paths;
    let data_dir = match (&p.data_dir, &p.state) {
        (None, _) if cfg!(windows) => "none (APPDATA and USERPROFILE are not set)".to_string(),
        (None, _) => "none (HOME is not set)".to_string(),
        (Some(d), DataDirState::Missing) => format!("{} (does not exist)", d.display()),
        (Some(d), DataDirState::Foreign { manifest_root }) => format!(
            "{} (not used: its manifest.json names {manifest_root})",
            d.display()
        ),
        (Some(d), DataDirState::Ours { manifest: Some(_) }) => {
            format!("{} (manifest.json confirms this project)", d.display())
        }
        (Some(d), _) => format!("{} (exists, no readable manifest.json)", d.display()),
    };
    let mode = match p.mode(&project.cwd) {
        PathMode::New => "new (Plan Cascade's default: plan files in the data directory)",
        PathMode::Legacy => "legacy (plan files in the project)",
        PathMode::None => "none (no plan files and no data directory yet)",
    };
    let mut out = String::new();
    out.push_str(&format!("project root:   {}\n", p.project_root.display()));
    out.push_str(&format!("project id:     {}\n", p.project_id));
    out.push_str(&format!("data directory: {data_dir}\n"));
    out.push_str(&format!("mode:           {mode}\n"));
    out.push_str(&format!(
        "cascade state:  {}\n",
        places.cascade_dir.display()
    ));
    out.push_str(&format!("new plans:      {}\n", places.output.describe()));
    out.push_str("\nfiles:\n");
    let name_w = files.iter().map(|f| f.name.len()).max().unwrap_or(0);
    for f in files {
        let mark = if f.exists { " " } else { "-" };
        let note = f
            .note
            .as_ref()
            .map(|n| format!("  ({n})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {mark} {:<name_w$}  {:<10}  {}{note}\n",
            f.name, f.access, f.path
        ));
    }
    out.push_str(
        "\n  - : does not exist yet\n\nPlan Cascade's own .state/, .locks/ and .worktree/ in the data directory are not used: cascade keeps its state in the .cascade/ directory above.\n",
    );
    out
}

fn file(
    name: &'static str,
    path: &Path,
    access: &'static str,
    location: &'static str,
    note: Option<String>,
) -> FileRow {
    FileRow {
        name,
        path: path.display().to_string(),
        exists: path.exists(),
        access,
        location,
        note,
    }
}

fn place_location(place: OutputPlace) -> &'static str {
    match place {
        OutputPlace::Flag => "flag",
        OutputPlace::DataDir => "data_dir",
        OutputPlace::Project => "project",
    }
}

/// The agents.json in use (`--agents`, ./agents.json, the user's, built-in).
fn agents_row(g: &Global, cwd: &Path) -> FileRow {
    use cascade_agents::config::{AgentsConfig, ConfigSource};
    match AgentsConfig::load(g.agents.as_deref(), cwd) {
        Ok(loaded) => {
            let location = match &loaded.source {
                ConfigSource::Explicit(_) => "flag",
                ConfigSource::Project(_) => "project",
                ConfigSource::User(_) => "user",
                ConfigSource::BuiltIn => "built_in",
            };
            match loaded.source.path() {
                Some(path) => file("agents.json", path, "read", location, None),
                None => FileRow {
                    name: "agents.json",
                    path: "built-in".into(),
                    exists: true,
                    access: "read",
                    location,
                    note: Some("no agents.json found; the one compiled into cascade".into()),
                },
            }
        }
        Err(e) => FileRow {
            name: "agents.json",
            path: g
                .agents
                .clone()
                .unwrap_or_else(|| PathBuf::from("agents.json"))
                .display()
                .to_string(),
            exists: false,
            access: "read",
            location: "project",
            note: Some(format!("cannot be used: {e}")),
        },
    }
}

/// The gate config: `.cascade/gates.json` when present, else the PRD's
/// `quality_gates`, else defaults for the detected project type.
fn gates_row(cascade_dir: &Path) -> FileRow {
    let path = cascade_dir.join("gates.json");
    let note = if path.is_file() {
        "overrides the PRD's quality_gates"
    } else {
        "absent: the PRD's quality_gates, else defaults for the detected project type"
    };
    file("gates config", &path, "read", "cascade", Some(note.into()))
}
