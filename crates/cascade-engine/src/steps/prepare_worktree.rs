//! Step: put the story's worktree on its branch at the current tip of the
//! target branch (leased from the run's pool; a retry resets the one the
//! story holds), read what judges work started there (gates and
//! verification rules of that commit, see the `judging` module), copy the
//! configured files in, run the setup commands, record what those two left
//! as the worktree's own exclude (never committed:
//! `cascade_git::local_files`), and seed the run's findings
//! files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cascade_process::Spec;

use super::{Attempt, Failure, Stop};
use crate::ctx::Ctx;
use crate::events::Event;
use crate::findings::{seed_story, StorySeed};
use crate::retry::FailureKind;

/// A worktree ready for the agent.
pub(super) struct Worktree {
    pub path: PathBuf,
    /// The target branch's tip the story branch starts from (a fleet
    /// resolution starts from the story's work, judged from this tip).
    pub base: String,
    /// The gates and verification rules of `base`: what judges the work.
    pub judges: Arc<crate::judging::Judges>,
    /// The findings files given to the agent.
    pub findings: StorySeed,
    /// What every process of the attempt is confined to (see `confine`).
    pub sandbox: crate::confine::AttemptSandbox,
}

pub(super) async fn run(a: &Attempt<'_>, held: &mut Option<PathBuf>) -> Result<Worktree, Stop> {
    run_from(a, held, None).await
}

/// [`run`] with the story branch at `start` (a commit), when given, instead
/// of the target branch's tip: a fleet worker resolving a merge conflict
/// starts from the story's earlier work. The work is judged by the tip's
/// rules all the same (not by the story's own edits of them), and `base` is
/// the tip.
pub(super) async fn run_from(
    a: &Attempt<'_>,
    held: &mut Option<PathBuf>,
    start: Option<&str>,
) -> Result<Worktree, Stop> {
    let ctx = a.ctx;
    let id = a.id();
    let base = super::target_tip(ctx)?;
    let judges = ctx.judging.at(&base).map_err(|e| {
        Failure::new(
            FailureKind::Setup,
            format!("cannot read the gates and verification rules of the base {base}: {e}"),
        )
    })?;
    let path = lease(ctx, a.branch, start.unwrap_or(&base), held).await?;
    let shown = path.display().to_string();
    ctx.amend_story(id, |s| s.worktree = Some(shown));
    let sandbox = confine(a, &judges, &path)?;
    if let Err(f) = setup(ctx, &path, &sandbox).await {
        a.check_cancel()?;
        return Err(f.into());
    }
    let touched = !(ctx.project.worktree.copy.is_empty() && ctx.project.worktree.setup.is_empty());
    keep_local(ctx, &path, touched).await?;
    // The run's findings files, for the agent to read and append to.
    let (findings, problems) = seed_story(&ctx.paths.workdir, &path);
    for e in problems {
        ctx.emit(Event::Notice {
            message: format!("{id}: findings not shared: {e}"),
        });
    }
    Ok(Worktree {
        path,
        base,
        judges,
        findings,
        sandbox,
    })
}

/// The attempt's confinement, by the run's `--sandbox` and the base's
/// `sandbox` settings; recorded on the attempt.
fn confine(
    a: &Attempt<'_>,
    judges: &crate::judging::Judges,
    path: &Path,
) -> Result<crate::confine::AttemptSandbox, Failure> {
    let ctx = a.ctx;
    let (sandbox, warning) =
        crate::confine::AttemptSandbox::new(ctx.options.sandbox, &judges.sandbox, path)
            .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?;
    if let Some(message) = warning {
        ctx.emit(Event::Notice { message });
    }
    let confinement = sandbox.confinement.clone();
    let number = a.number;
    ctx.amend_story(a.id(), move |s| {
        if let Some(r) = s.attempts.iter_mut().rev().find(|r| r.attempt == number) {
            r.confinement = Some(confinement);
        }
    });
    Ok(sandbox)
}

/// Leases a pooled worktree for the branch at `base`, or resets the one the
/// story already holds.
async fn lease(
    ctx: &Arc<Ctx>,
    branch: &str,
    base: &str,
    held: &mut Option<PathBuf>,
) -> Result<PathBuf, Failure> {
    let c = Arc::clone(ctx);
    let current = held.clone();
    let (b, from) = (branch.to_string(), base.to_string());
    let leased = tokio::task::spawn_blocking(move || match &current {
        Some(p) => c.pool.restart(p, &b, &from),
        None => c.pool.lease(&b, &from),
    })
    .await;
    match leased {
        Ok(Ok(p)) => {
            *held = Some(p.clone());
            Ok(p)
        }
        Ok(Err(e)) => Err(ctx.write_failed(
            &ctx.paths.common_dir,
            FailureKind::Setup,
            format!("cannot prepare a worktree for branch '{branch}': {e}"),
            &e,
        )),
        Err(e) => Err(Failure::new(
            FailureKind::Setup,
            format!("cannot prepare a worktree for branch '{branch}': {e}"),
        )),
    }
}

/// Records everything copy and setup changed in the fresh worktree as its
/// own exclude, so the story's commits contain only what the agent did.
/// Without copy or setup (`touched` false) nothing can have changed: a
/// leased worktree is checked clean, so the status scan, which grows with
/// the repository, is skipped and the list is emptied.
async fn keep_local(ctx: &Ctx, path: &Path, touched: bool) -> Result<(), Failure> {
    let p = path.to_path_buf();
    let recorded = tokio::task::spawn_blocking(move || {
        let changed = if touched {
            cascade_git::local_files::changed(&p)?
        } else {
            Vec::new()
        };
        cascade_git::local_files::record(&p, &changed)
    })
    .await;
    match recorded {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ctx.write_failed(
            path,
            FailureKind::Setup,
            format!("cannot record the files worktree setup left: {e}"),
            &e,
        )),
        Err(e) => Err(Failure::new(FailureKind::Setup, e.to_string())),
    }
}

/// Copies the configured files into the worktree and runs the setup
/// commands, confined like the agent (also in the scratch copy of a base
/// whose gates run, see `census`).
pub(super) async fn setup(
    ctx: &Ctx,
    wt_path: &Path,
    sandbox: &crate::confine::AttemptSandbox,
) -> Result<(), Failure> {
    let setup = &ctx.project.worktree;
    for rel in &setup.copy {
        let from = ctx.project_root.join(rel);
        if !from.exists() {
            continue;
        }
        let to = wt_path.join(rel);
        if let Some(dir) = to.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::copy(&from, &to).map_err(|e| {
            let message = format!("cannot copy '{}' into the worktree: {e}", from.display());
            ctx.write_failed(&to, FailureKind::Setup, message, &e)
        })?;
    }
    let timeout = Duration::from_secs(setup.timeout_seconds.unwrap_or(600));
    for argv in &setup.setup {
        let Some((program, args)) = argv.split_first() else {
            continue;
        };
        let mut spec = Spec::new(program).args(args).cwd(wt_path).timeout(timeout);
        if let Some(p) = &sandbox.policy {
            spec = spec.sandbox(Arc::clone(p));
        }
        let outcome = spec.run(&ctx.cancel).await.map_err(|e| {
            Failure::new(
                FailureKind::Setup,
                format!(
                    "worktree setup command '{}' could not start: {e}",
                    argv.join(" ")
                ),
            )
        })?;
        if !outcome.success() {
            return Err(Failure::new(
                FailureKind::Setup,
                format!(
                    "worktree setup command '{}' failed: {}",
                    argv.join(" "),
                    outcome.describe()
                ),
            )
            .with_excerpt(outcome.output_excerpt(2000)));
        }
    }
    Ok(())
}
