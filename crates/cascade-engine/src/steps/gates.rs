//! Step: run the quality gates of the story's base commit (never the story
//! branch's: an agent's edit of `.cascade/gates.json` changes nothing for
//! its own story) in the worktree (the cache is shared by all worktrees),
//! with the story's acceptance-criteria checks (`criterion-<n>`),
//! forwarding their events; a failing required gate fails the
//! attempt as `quality_gate` with the gates' errors for the retry prompt.

use std::sync::Arc;

use cascade_agents::{GateFuture, GateHook};
use cascade_gates::{GateEvent, GateReport};

use super::prepare_worktree::Worktree;
use super::run_agent::AgentOutput;
use super::{Attempt, Failure, Stop};
use crate::events::{Event, GateSummary};
use crate::retry::FailureKind;

pub(super) async fn run(
    a: &Attempt<'_>,
    wt: &Worktree,
    output: &AgentOutput,
) -> Result<GateReport, Stop> {
    let ctx = a.ctx;
    let place = WorkPlace::from(wt);
    let mut report = run_gates(ctx, a.id(), a.number, a.env, &place, true, &ctx.cancel).await;
    a.check_cancel()?;
    // `--base-failures known`: a gate the base fails is judged by the census.
    let known = super::base::judge_known(a.ctx, a.id(), a.env, &place, &mut report).await?;
    keep_report(a, &report);
    let gates: Vec<GateSummary> = report.gates.iter().map(GateSummary::of).collect();
    ctx.amend_story(a.id(), |s| s.gates = gates);
    for (gate, tests) in &known.accepted {
        ctx.emit(Event::Notice {
            message: format!(
                "{}: gate '{gate}' fails only on tests the base already fails ({}): judged by the census",
                a.id(),
                tests.join(", ")
            ),
        });
    }
    if !report.passed {
        let (_, mut message) = failed_required(&report);
        if !known.rejected.is_empty() {
            message = format!("{message} ({})", known.rejected.join("; "));
        }
        let mut f =
            Failure::new(FailureKind::QualityGate, message).with_excerpt(output.excerpt.clone());
        f.gate_summary = report.summary_for_prompt(20);
        return Err(f.into());
    }
    Ok(report)
}

/// The attempt's gates on a tree that is not its worktree's (integration
/// gating runs them on the story merged with the target's tip), with
/// their events, stopped when `stop` fires; the caller judges the report.
pub(super) async fn run_at(
    ctx: &Arc<crate::ctx::Ctx>,
    story: &str,
    attempt: u32,
    env: &[(String, String)],
    place: &WorkPlace,
    stop: &cascade_process::CancelToken,
) -> GateReport {
    let mut report = run_gates(ctx, story, attempt, env, place, true, stop).await;
    if stop.is_cancelled() {
        return report;
    }
    // `--base-failures known`: the merged tree is judged as the story is
    // (cancelled: the caller's own check stops the attempt).
    let _ = super::base::judge_known(ctx, story, env, place, &mut report).await;
    report
}

/// "quality gate 'x' failed" for the required gates a report failed.
pub(super) fn failed_required(report: &GateReport) -> (Vec<String>, String) {
    let failed: Vec<&cascade_gates::GateResult> = report.failed().filter(|g| g.required).collect();
    let message = failed_message(&failed);
    (failed.iter().map(|g| g.name.clone()).collect(), message)
}

/// `<artifacts>/gate-results/<story>-<attempt>.json`: the attempt's gate results
/// with their parsed errors, for whoever looks back at the run (the
/// dashboard). Best effort: a write that fails is a notice.
fn keep_report(a: &Attempt<'_>, report: &GateReport) {
    let path = gate_report_path(&a.ctx.artifacts_dir, a.id(), a.number);
    let written = serde_json::to_vec(report)
        .map_err(std::io::Error::other)
        .and_then(|bytes| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            cascade_fs::write_atomic(&path, &bytes, cascade_fs::Durability::Renamed)
        });
    if let Err(e) = written {
        a.ctx.emit(Event::Notice {
            message: format!(
                "{}: could not keep the gate results in '{}': {e}",
                a.id(),
                path.display()
            ),
        });
    }
}

/// Where [`keep_report`] keeps an attempt's gate results.
pub fn gate_report_path(
    artifacts_dir: &std::path::Path,
    story: &str,
    attempt: u32,
) -> std::path::PathBuf {
    artifacts_dir
        .join("gate-results")
        .join(format!("{story}-{attempt}.json"))
}

/// "timed out after N s" for a gate killed at its timeout: the words every
/// place that shows the gate uses (events, the attempt's error).
fn timed_out(r: &cascade_gates::GateResult) -> Option<String> {
    r.timed_out
        .then(|| r.outcome.clone().unwrap_or_else(|| "timed out".to_string()))
}

/// "quality gate 'x' failed", naming every failed required gate, each one
/// killed at its timeout with "(timed out after N s)".
fn failed_message(failed: &[&cascade_gates::GateResult]) -> String {
    let name = |g: &cascade_gates::GateResult| match timed_out(g) {
        Some(why) => format!("'{}' ({why})", g.name),
        None => format!("'{}'", g.name),
    };
    match failed {
        [one] => format!("quality gate {} failed", name(one)),
        [] => "quality gates failed".to_string(),
        many => format!(
            "quality gates {} failed",
            many.iter().map(|g| name(g)).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The `RunGates` tool of an api agent: the attempt's gates in its
/// worktree as they are now, without events (the gate step that follows
/// the agent reports the gates), their report as the model reads it.
pub(super) fn hook(a: &Attempt<'_>, wt: &Worktree) -> GateHook {
    let ctx = Arc::clone(a.ctx);
    let story = a.id().to_string();
    let attempt = a.number;
    let env = a.env.to_vec();
    let place = WorkPlace::from(wt);
    GateHook(Arc::new(move || -> GateFuture {
        let (ctx, story, env, place) =
            (Arc::clone(&ctx), story.clone(), env.clone(), place.clone());
        Box::pin(async move {
            let cancel = ctx.cancel.clone();
            for_model(&run_gates(&ctx, &story, attempt, &env, &place, false, &cancel).await)
        })
    }))
}

/// The gates' report for a model: the failing gates and their parsed
/// errors, and the output of a failing gate whose errors could not be parsed.
fn for_model(report: &GateReport) -> String {
    let mut out = report.summary_for_prompt(30);
    for g in report.failed().filter(|g| g.errors.is_empty()) {
        let tail = g.output_excerpt.trim();
        if !tail.is_empty() {
            let start = tail.len().saturating_sub(MODEL_OUTPUT_TAIL);
            let start = (start..tail.len())
                .find(|i| tail.is_char_boundary(*i))
                .unwrap_or(0);
            out.push_str(&format!(
                "\nOutput of gate '{}':\n{}\n",
                g.name,
                &tail[start..]
            ));
        }
    }
    out
}

/// Bytes of a failing gate's output [`for_model`] passes on.
const MODEL_OUTPUT_TAIL: usize = 4000;

/// Where gates run: a worktree, the commit it started from and the gates
/// read from that commit.
#[derive(Clone)]
pub(super) struct WorkPlace {
    pub path: std::path::PathBuf,
    pub base: String,
    pub judges: Arc<crate::judging::Judges>,
    /// What the gates are confined to (`None`: unconfined).
    pub sandbox: Option<Arc<cascade_process::sandbox::Policy>>,
}

impl From<&Worktree> for WorkPlace {
    fn from(wt: &Worktree) -> WorkPlace {
        WorkPlace {
            path: wt.path.clone(),
            base: wt.base.clone(),
            judges: Arc::clone(&wt.judges),
            sandbox: wt.sandbox.policy.clone(),
        }
    }
}

/// Runs the gates in the worktree, forwarding their events when `report`,
/// until `cancel` fires (the run's token, or a gating's own).
async fn run_gates(
    ctx: &Arc<crate::ctx::Ctx>,
    story: &str,
    attempt: u32,
    env: &[(String, String)],
    wt: &WorkPlace,
    report: bool,
    cancel: &cascade_process::CancelToken,
) -> GateReport {
    // The story's acceptance-criteria checks run with the project's gates.
    let base_gates = &wt.judges.gates;
    let story_gates;
    let gates = match ctx.checks.criteria.get(story) {
        Some(extra) => {
            let mut set = base_gates.clone();
            set.enabled = true;
            set.gates.extend(extra.iter().cloned());
            story_gates = set;
            &story_gates
        }
        None => base_gates,
    };
    let opts = cascade_gates::RunOptions {
        workdir: wt.path.clone(),
        repo_root: Some(wt.path.clone()),
        base_commit: Some(wt.base.clone()),
        use_cache: ctx.options.use_gate_cache,
        rerun_failures: true,
        fail_fast: base_gates.fail_fast,
        census_dir: report.then(|| super::census::report_dir(ctx, story, attempt)),
    };
    let sink = Arc::clone(ctx);
    let id = story.to_string();
    let on_event = move |e: GateEvent| match e {
        _ if !report => {}
        GateEvent::Started { name, .. } => sink.emit(Event::GateStarted {
            story: id.clone(),
            gate: name,
        }),
        GateEvent::Finished(r) => sink.emit(Event::GateFinished {
            story: id.clone(),
            gate: r.name.clone(),
            passed: r.passed,
            required: r.required,
            cached: r.cached,
            cache: r.cache.as_str().to_string(),
            flaky: r.flaky,
            skipped: r.skipped,
            duration_ms: r.duration_ms,
            errors: r.errors.len(),
            timed_out: timed_out(&r),
        }),
        GateEvent::CacheUnavailable { reason } => sink.emit(Event::Notice {
            message: format!("{id}: gate cache unavailable: {reason}"),
        }),
        GateEvent::RemoteWarning { message } => sink.emit(Event::Notice {
            message: format!("remote gate cache: {message}"),
        }),
    };
    // `--gate-jobs` and the memory guard; the story's ports; a Cargo target
    // directory nobody else builds in right now (see control::resources).
    let notice = {
        let (c, story) = (Arc::clone(ctx), story.to_string());
        Arc::new(move |available: u64, threshold: u64| {
            c.emit(Event::WaitingForMemory {
                what: "gate".into(),
                story: story.clone(),
                available_mb: available / (1024 * 1024),
                threshold_mb: threshold / (1024 * 1024),
            })
        })
    };
    let target = ctx.control.cargo_target(&wt.path);
    let mut extra_env = env.to_vec();
    if let Some(t) = &target {
        extra_env.push(("CARGO_TARGET_DIR".into(), t.path().display().to_string()));
    }
    let env = cascade_gates::GateEnv {
        admission: ctx.control.gates.noting(notice),
        extra_env,
        // The Cargo target the gates build in is theirs to write.
        sandbox: crate::confine::AttemptSandbox::widened(
            &wt.sandbox,
            target.iter().map(|t| t.path()),
        ),
        story: Some(story.to_string()),
    };
    cascade_gates::run_gates_in(gates, &opts, &env, &ctx.gate_cache, on_event, cancel).await
}
