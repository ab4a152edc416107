//! Where an approved plan goes: the session's choice made at its start
//! (`--out`, the project's Plan Cascade data directory, or the project,
//! through `ProjectPaths::plan_output`), the HYBRID_WORKTREE exception (its
//! own worktree), installing the drafts there (or finding an earlier
//! install) and keeping installed files inside the checkout out of git.

use std::path::{Path, PathBuf};

use cascade_plan::paths::{OutputPlace, PlanOutput};
use cascade_planning::{Session, Strategy};

use super::{planning_failure, short_id, CommonArgs, Context};
use crate::cli::Failure;

/// Where this session's approved plan files go, decided once at its start
/// by the same rule `cascade paths` shows: `--out DIR` (absolute; it must
/// not be a file), else the project's Plan Cascade data directory when one
/// exists, else the project root.
pub(super) fn plan_output(out: Option<&Path>) -> Result<PlanOutput, Failure> {
    let project = crate::cli::plan_file::Project::current()?;
    for w in &project.paths.warnings {
        errln!("warning: {w}");
    }
    let out = match out {
        None => None,
        Some(dir) if dir.as_os_str().is_empty() => {
            return Err(Failure::usage(anyhow::anyhow!(
                "--out needs a directory, e.g. --out plans/oauth"
            )))
        }
        Some(dir) => {
            let abs = std::path::absolute(dir)
                .map_err(|e| Failure::usage(anyhow::anyhow!("--out '{}': {e}", dir.display())))?;
            if abs.exists() && !abs.is_dir() {
                return Err(Failure::usage(anyhow::anyhow!(
                    "--out '{}' is a file, not a directory: pass the directory the plan files go to",
                    dir.display()
                )));
            }
            Some(abs)
        }
    };
    Ok(project.plan_output(out.as_deref()))
}

/// An installed plan.
pub(super) struct Installed {
    /// The directory the plan is built in (the repository root, or the
    /// HYBRID_WORKTREE plan's worktree).
    pub dir: PathBuf,
    /// The HYBRID_WORKTREE plan's branch.
    pub branch: Option<String>,
    /// The plan file first, then design_doc.json.
    pub written: Vec<PathBuf>,
    /// Where they went: `flag`, `data_dir`, `project` or `worktree`.
    pub place: &'static str,
}

/// Installs an approved plan where the session decided (see
/// [`install_target`]), or finds it where an earlier approval installed it.
pub(super) fn install_approved(
    ctx: &Context,
    session: &mut Session,
    common: &CommonArgs,
) -> Result<Installed, Failure> {
    let strategy = session.strategy.unwrap_or(Strategy::HybridAuto);
    let plan_key = if strategy.is_mega() {
        "mega_plan"
    } else {
        "prd"
    };
    // Installed by an earlier approval (`plan approve ID --run` later, or a
    // run to retry): run that file as it is now, statuses and all.
    let installed = session
        .outputs
        .get(plan_key)
        .map(PathBuf::from)
        .filter(|p| {
            // Drafts are recorded relative to the root, installed files in
            // full; a draft is never "installed", however it is written.
            p.is_absolute() && p.is_file() && !p.starts_with(ctx.store.dir(&session.session_id))
        });
    let (dir, branch) = if strategy == Strategy::HybridWorktree {
        let branch = format!("cascade/plan-{}", short_id(&session.session_id));
        let path = cascade_git::worktree::path_for(&ctx.paths, &branch);
        if installed.is_none() || !path.is_dir() {
            cascade_git::worktree::create(&ctx.paths, &path, &branch, "HEAD").map_err(|e| {
                Failure::failed(anyhow::anyhow!("cannot create the plan's worktree: {e}"))
            })?;
        }
        (path, Some(branch))
    } else {
        (ctx.root.clone(), None)
    };
    let written = match installed {
        Some(plan) => {
            let design = session.outputs.get("design_doc").map(PathBuf::from);
            vec![Some(plan), design].into_iter().flatten().collect()
        }
        None => {
            let target = install_target(session, &dir, strategy);
            if !common.json
                && strategy == Strategy::HybridWorktree
                && target.place != OutputPlace::Flag
            {
                outln!(
                    "HYBRID_WORKTREE: the plan files go into the plan's own worktree {} (not {})",
                    dir.display(),
                    session
                        .options
                        .output
                        .as_ref()
                        .map(|o| o.plan_dir.display().to_string())
                        .unwrap_or_else(|| ctx.root.display().to_string())
                );
            }
            let known = session.warnings.len();
            let written = cascade_planning::install(
                &ctx.store,
                session,
                &target.plan_dir,
                &target.design_doc_dir,
            )
            .map_err(planning_failure)?;
            // A plan that was there (a Plan Cascade user's prd.json in the
            // data directory, say) is replaced: say so, and where it is kept.
            for w in &session.warnings[known..] {
                errln!("warning: {w}");
            }
            exclude_written(ctx, &dir, &written);
            written
        }
    };
    let place = match (&branch, session.options.output.as_ref().map(|o| o.place)) {
        (Some(_), Some(OutputPlace::Flag)) => "flag",
        (Some(_), _) => "worktree",
        (None, Some(p)) => p.as_str(),
        (None, None) => "project",
    };
    Ok(Installed {
        dir,
        branch,
        written,
        place,
    })
}

/// Where an approved plan is installed: the session's choice (`--out`, the
/// data directory, the project: see [`plan_output`]), except that a
/// HYBRID_WORKTREE plan without `--out` goes into its own worktree `dir`,
/// as Plan Cascade keeps a worktree task's prd.json in that worktree (the
/// data directory's prd.json belongs to the main checkout).
fn install_target(session: &Session, dir: &Path, strategy: Strategy) -> PlanOutput {
    let chosen = session.options.output.clone().unwrap_or(PlanOutput {
        plan_dir: dir.to_path_buf(),
        design_doc_dir: dir.to_path_buf(),
        place: OutputPlace::Project,
    });
    if strategy == Strategy::HybridWorktree && chosen.place != OutputPlace::Flag {
        return PlanOutput {
            plan_dir: dir.to_path_buf(),
            design_doc_dir: dir.to_path_buf(),
            place: OutputPlace::Project,
        };
    }
    chosen
}

/// Keeps what cascade wrote out of git, like everything cascade writes:
/// its own files, and each installed plan file inside the checkout `dir`
/// (one in the data directory is outside any checkout).
fn exclude_written(ctx: &Context, dir: &Path, written: &[PathBuf]) {
    let mut own: Vec<String> = cascade_engine::config::OWN_FILES
        .iter()
        .map(|s| s.to_string())
        .collect();
    own.push("/design_doc.json".into());
    for p in written {
        let rel = p.strip_prefix(dir).or_else(|_| p.strip_prefix(&ctx.root));
        if let Ok(rel) = rel {
            own.push(format!("/{}", rel.to_string_lossy().replace('\\', "/")));
        }
    }
    own.sort();
    own.dedup();
    let own: Vec<&str> = own.iter().map(String::as_str).collect();
    let _ = ctx.paths.ensure_excluded(&own);
}
