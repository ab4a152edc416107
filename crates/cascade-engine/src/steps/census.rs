//! Step: judge the story by its test census. After its gates passed, each
//! census-aware gate's tests (which ran, how each ended) are compared with
//! the same gate's census on the story's base (cascade-verify's
//! `test-disappeared`): a test that passed there and no longer runs and
//! passes fails the attempt as `verification`, and so does a report read
//! from the gate's output that no longer adds up (`census-mismatch`).
//!
//! The base's census comes from the base's own gate run: the base commit's
//! tree written into a scratch directory under `.cascade/tmp/`, its gates
//! run there (through the gate cache), the report kept in
//! `.cascade/census/base-<tree id>.json`, so the next story on the same
//! base costs a file read. A story whose gates passed leaves its report
//! under its own tree's key too: after a fast-forward merge that tree is
//! the next story's base.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cascade_gates::GateReport;

use super::commit::Committed;
use super::prepare_worktree::Worktree;
use super::{Attempt, Stop};
use crate::checks::intent_of;
use crate::ctx::Ctx;
use crate::events::Event;

/// One base run at a time: two stories on the same base wait for one run.
static BASE_RUN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The attempt's private directory (0700, cascade's own, outside every
/// worktree) under which each of its gate runs makes a fresh report
/// directory ([`cascade_gates::runner::private_report_dir`]), so nothing
/// the story wrote before its gates ran, here or where an older cascade
/// kept the reports (`.cascade/census/<story>-<attempt>/`), is read.
pub(super) fn report_dir(ctx: &Ctx, story: &str, attempt: u32) -> PathBuf {
    ctx.paths
        .cascade_dir()
        .join("tmp")
        .join("census")
        .join(format!("{story}-{attempt}"))
}

pub(super) async fn run(
    a: &Attempt<'_>,
    wt: &Worktree,
    committed: &Committed,
    report: &GateReport,
) -> Result<(), Stop> {
    let ctx = a.ctx;
    if !wt.judges.rules.enabled || report.gates.iter().all(|g| g.census.is_none()) {
        return Ok(());
    }
    let started = Instant::now();
    keep(ctx, wt, &tree_of(&wt.path, &committed.commit), report);
    let Some(base) = base_report(a, wt).await else {
        return Ok(());
    };
    a.check_cancel()?;
    let files = {
        let (path, from, to) = (wt.path.clone(), wt.base.clone(), committed.commit.clone());
        tokio::task::spawn_blocking(move || cascade_git::diff::diff_lines(&path, &from, Some(&to)))
            .await
    };
    let Ok(Ok(files)) = files else {
        notice(ctx, a.id(), "could not read the change");
        return Ok(());
    };
    let intent = intent_of(a.story);
    let mut found = Vec::new();
    for g in &report.gates {
        let (Some(now), Some(before)) = (
            g.census.as_ref(),
            base.gates
                .iter()
                .find(|b| b.name == g.name)
                .and_then(|b| b.census.as_ref()),
        ) else {
            continue;
        };
        found.extend(cascade_verify::census::mismatched(&g.name, before, now));
        found.extend(cascade_verify::census::disappeared(
            &g.name,
            before,
            now,
            &files,
            &wt.judges.rules,
            &intent,
        ));
    }
    let (waived, findings): (Vec<_>, Vec<_>) = found
        .into_iter()
        .partition(|f| intent.allows(&wt.judges.rules, f));
    let found: Vec<String> = findings.iter().map(ToString::to_string).collect();
    let allowed: Vec<String> = waived.iter().map(ToString::to_string).collect();
    let number = a.number;
    ctx.amend_story(a.id(), move |s| {
        s.note_findings(number, found.len() + allowed.len());
        s.verification.extend(found);
        s.verification_allowed.extend(allowed);
    });
    ctx.emit(Event::VerificationFinished {
        story: a.id().to_string(),
        attempt: a.number,
        passed: findings.is_empty(),
        findings: findings.clone(),
        allowed: intent.allow.clone(),
        waived,
        duration_ms: started.elapsed().as_millis() as u64,
    });
    if findings.is_empty() {
        return Ok(());
    }
    Err(super::verify::failure(&findings).into())
}

/// The base's gate report with its census: kept, or run now.
async fn base_report(a: &Attempt<'_>, wt: &Worktree) -> Option<GateReport> {
    match base_gates(a.ctx, a.env, &wt.path, &wt.base, &wt.judges).await {
        Ok(kept) => Some(kept.report),
        Err(BaseRun::Cancelled) => None,
        Err(BaseRun::Trouble(what)) => {
            notice(a.ctx, a.id(), &what);
            None
        }
    }
}

/// The gate report of a base commit and whether it was kept from before.
pub(super) struct BaseReport {
    pub report: GateReport,
    pub cached: bool,
}

/// Why there is no base report.
pub(super) enum BaseRun {
    /// The run is being cancelled.
    Cancelled,
    /// cascade's own trouble (the tree could not be written, the worktree
    /// setup failed there): not the base's fault.
    Trouble(String),
}

/// The gates of `judges` on the tree of `base` (a commit of the repository
/// at `repo`): the report kept under the tree's id, or a run now in a
/// scratch copy of the tree (with the worktree's copy and setup), kept for
/// the next caller. One run at a time: callers on the same base wait for
/// one run, the first story's or the run's own judgment of its base.
pub(super) async fn base_gates(
    ctx: &Arc<Ctx>,
    env: &[(String, String)],
    repo: &Path,
    base: &str,
    judges: &crate::judging::Judges,
) -> Result<BaseReport, BaseRun> {
    let tree = tree_of(repo, base);
    let path = kept_path(ctx, &tree);
    let kept = |report| BaseReport {
        report,
        cached: true,
    };
    if let Some(r) = read_kept(&path, judges) {
        return Ok(kept(r));
    }
    let _one = BASE_RUN.lock().await;
    if let Some(r) = read_kept(&path, judges) {
        return Ok(kept(r));
    }
    // Removed when done (a killed run's leftover is a plain directory in tmp/).
    let scratch = Scratch(
        ctx.paths
            .cascade_dir()
            .join("tmp")
            .join(format!("census-base-{tree}-{}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(scratch.path());
    let root = scratch.path().join("base");
    let exported = {
        let (repo, base, root) = (repo.to_path_buf(), base.to_string(), root.clone());
        tokio::task::spawn_blocking(move || cascade_git::diff::export_tree(&repo, &base, &root))
            .await
    };
    if !matches!(exported, Ok(Ok(()))) {
        return Err(BaseRun::Trouble("could not write the base's tree".into()));
    }
    // Confined as a story's processes are, to the scratch copy.
    let (sandbox, _) =
        crate::confine::AttemptSandbox::new(ctx.options.sandbox, &judges.sandbox, &root)
            .map_err(|e| BaseRun::Trouble(e.to_string()))?;
    if let Err(f) = super::prepare_worktree::setup(ctx, &root, &sandbox).await {
        if ctx.cancel.is_cancelled() {
            return Err(BaseRun::Cancelled);
        }
        return Err(BaseRun::Trouble(format!("on the base: {}", f.error)));
    }
    let opts = cascade_gates::RunOptions {
        workdir: root.clone(),
        repo_root: Some(root.clone()),
        base_commit: None,
        use_cache: ctx.options.use_gate_cache,
        rerun_failures: true,
        fail_fast: false,
        census_dir: Some(scratch.path().join("reports")),
    };
    let target = ctx.control.cargo_target(&root);
    let mut extra_env = env.to_vec();
    if let Some(t) = &target {
        extra_env.push(("CARGO_TARGET_DIR".into(), t.path().display().to_string()));
    }
    let env = cascade_gates::GateEnv {
        admission: ctx.control.gates.clone(),
        extra_env,
        // The base's copy is where these gates run; the Cargo target theirs.
        sandbox: crate::confine::AttemptSandbox::widened(
            &sandbox.policy,
            std::iter::once(scratch.path().to_path_buf()).chain(target.iter().map(|t| t.path())),
        ),
        story: Some("the base".to_string()),
    };
    // The run's first gates: what the caches say about themselves is
    // said here (the stories' gates may never meet it again).
    let sink = Arc::clone(ctx);
    let on_event = move |e: cascade_gates::GateEvent| match e {
        cascade_gates::GateEvent::CacheUnavailable { reason } => sink.emit(Event::Notice {
            message: format!("gate cache unavailable: {reason}"),
        }),
        cascade_gates::GateEvent::RemoteWarning { message } => sink.emit(Event::Notice {
            message: format!("remote gate cache: {message}"),
        }),
        _ => {}
    };
    let report = cascade_gates::run_gates_in(
        &judges.gates,
        &opts,
        &env,
        &ctx.gate_cache,
        on_event,
        &ctx.cancel,
    )
    .await;
    drop(target);
    if ctx.cancel.is_cancelled() {
        return Err(BaseRun::Cancelled);
    }
    write_kept(ctx, &path, &report);
    Ok(BaseReport {
        report,
        cached: false,
    })
}

/// Keeps the base gates' part of a passing story report under its tree (a
/// report the gate step accepted).
fn keep(ctx: &Arc<Ctx>, wt: &Worktree, tree: &str, report: &GateReport) {
    if !report.passed {
        return;
    }
    let gates: Vec<_> = report
        .gates
        .iter()
        .filter(|g| wt.judges.gates.gates.iter().any(|b| b.name == g.name))
        .cloned()
        .collect();
    // Under `--base-failures known` a passing report can hold a gate that
    // failed on known failures only: the tree's report says it failed.
    let mine = GateReport {
        passed: gates.iter().all(|g| g.passed || !g.required),
        gates,
    };
    write_kept(ctx, &kept_path(ctx, tree), &mine);
}

fn kept_path(ctx: &Ctx, tree: &str) -> PathBuf {
    ctx.paths
        .cascade_dir()
        .join("census")
        .join(format!("base-{tree}.json"))
}

/// The kept report at `path`, when it is one of these gates: the same tree
/// can be judged by other gates (an untracked `.cascade/gates.json` edited
/// between runs), and a report of other commands says nothing about them.
fn read_kept(path: &Path, judges: &crate::judging::Judges) -> Option<GateReport> {
    let bytes = std::fs::read(path).ok()?;
    let report: GateReport = serde_json::from_slice(&bytes).ok()?;
    let fits = judges.gates.gates.iter().all(|g| {
        report
            .gates
            .iter()
            .any(|r| r.name == g.name && r.command == g.command_line() && r.required == g.required)
    });
    fits.then_some(report)
}

/// Best effort: a census that cannot be kept is run again next time.
fn write_kept(ctx: &Ctx, path: &Path, report: &GateReport) {
    let Ok(bytes) = serde_json::to_vec(report) else {
        return;
    };
    if let Some(dir) = path.parent() {
        ensure(dir);
    }
    if let Err(e) = cascade_fs::write_atomic(path, &bytes, cascade_fs::Durability::Renamed) {
        ctx.emit(Event::Notice {
            message: format!(
                "could not keep the test census in '{}': {e}",
                path.display()
            ),
        });
    }
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ensure(dir: &Path) -> &Path {
    let _ = std::fs::create_dir_all(dir);
    dir
}

/// The tree id of `rev` (the key of a census); `rev` itself when git
/// cannot say.
fn tree_of(repo: &Path, rev: &str) -> String {
    git2::Repository::discover(repo)
        .and_then(|r| {
            r.revparse_single(&format!("{rev}^{{tree}}"))
                .map(|o| o.id())
        })
        .map(|id| id.to_string())
        .unwrap_or_else(|_| rev.to_string())
}

fn notice(ctx: &Ctx, story: &str, what: &str) {
    ctx.emit(Event::Notice {
        message: format!("{story}: test census: {what}"),
    });
}
