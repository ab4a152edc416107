//! One feature's way to "ready to merge": its worktree (created from the
//! target's tip, re-attached or reused on resume), its PRD (kept, copied from
//! the plan's folder, or written by the PRD agent), and the engine run of that
//! PRD inside the worktree, with story counts kept current in the state.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::findings;
use super::ports::{FeatureRun, MegaPorts};
use super::prd_gen::{self, AuthorError, FeatureBrief, GenProgress, PrdAuthor, PrdRequest};
use super::run::{Ctx, FeatureSpec, TaskEnd};
use super::state::{now, FailureKind, FeatureState, FeatureStatus, PrdSource, StoryCounts};
use crate::events::{Event, EventSink, RunStatus};
use crate::progress::ProgressLog;

/// Worktree, PRD and engine run of one feature.
pub(super) async fn run_feature<P: MegaPorts>(ctx: &Arc<Ctx<P>>, name: &str) -> TaskEnd {
    let before = match ctx.snapshot().feature(name) {
        Some(f) => f.clone(),
        None => return TaskEnd::Failed,
    };
    if before.status == FeatureStatus::Merging {
        // Killed while merging: the engine part is done.
        return TaskEnd::Ready;
    }
    let branch = before.branch.clone();

    // 1. The worktree.
    let (wt, reused) = match prepare_worktree(ctx, name, &before).await {
        Ok((wt, reused)) => {
            ctx.update(name, |f| {
                f.worktree = Some(wt.clone());
                f.started_at.get_or_insert_with(now);
            });
            ctx.emit(Event::FeatureStarted {
                feature: name.to_string(),
                branch: branch.clone(),
                worktree: wt.clone(),
                reused,
            });
            (wt, reused)
        }
        Err(e) => {
            ctx.fail(name, FailureKind::Error, e, vec![]);
            return TaskEnd::Failed;
        }
    };
    if let Err(e) = findings::share_into(&ctx.paths.main_root, &wt) {
        ctx.emit(Event::MegaNotice {
            message: format!(
                "feature '{name}': could not share {}: {e}",
                findings::MEGA_FINDINGS
            ),
        });
    }

    // 2. The PRD.
    let prd = match ensure_prd(ctx, name, &before, &wt, reused).await {
        Ok(p) => p,
        // Its PRD agent stopped (or never started) because the run's
        // budget ran out: left as it is, for a resume with more.
        Err(None) if !ctx.cancel.is_cancelled() && ctx.ports.budget_exhausted().is_some() => {
            return TaskEnd::Budget
        }
        Err(None) => return TaskEnd::Interrupted,
        Err(Some(message)) => {
            ctx.fail(name, FailureKind::PrdInvalid, message, vec![]);
            return TaskEnd::Failed;
        }
    };

    // 3. The stories, unless the run's budget ran out meanwhile (a PRD
    // agent's charge): no feature starts then.
    if let Some(message) = ctx.ports.budget_exhausted() {
        ctx.emit(Event::MegaNotice {
            message: format!("feature '{name}' does not start its stories: {message}"),
        });
        return TaskEnd::Budget;
    }
    let resume = before.status == FeatureStatus::Running;
    ctx.update(name, |f| f.status = FeatureStatus::Running);
    let feature_dir = ctx.feature_dir(name);
    let events: EventSink = {
        let ctx = ctx.clone();
        let name = name.to_string();
        Arc::new(move |event: &Event| {
            track_stories(&ctx, &name, event);
            if let Some(line) = ProgressLog::format(event) {
                ctx.progress.append(&format!("{name}/{line}"));
            }
            (ctx.sink)(&Event::in_feature(name.as_str(), event.clone()));
        })
    };
    let outcome = ctx
        .ports
        .run_feature(
            FeatureRun {
                feature: name.to_string(),
                branch: branch.clone(),
                worktree: wt.clone(),
                prd,
                state_dir: feature_dir,
                parallel: ctx.parallel,
                slots: ctx.slots.clone(),
                resume,
            },
            events,
            ctx.cancel.clone(),
        )
        .await;
    let c = outcome.stories;
    let counted = outcome.error.is_none();
    ctx.update(name, |f| {
        if !counted {
            return;
        }
        f.stories = StoryCounts {
            done: c.complete,
            total: c.complete + c.failed + c.blocked + c.pending,
            failed: c.failed,
            blocked: c.blocked,
        };
    });
    if let Some(error) = outcome.error {
        ctx.fail(name, FailureKind::Error, error, vec![]);
        return TaskEnd::Failed;
    }
    ctx.emit(Event::FeatureStoriesFinished {
        feature: name.to_string(),
        stories: ctx
            .snapshot()
            .feature(name)
            .map(|f| f.stories)
            .unwrap_or_default(),
    });
    match outcome.status {
        RunStatus::Completed => TaskEnd::Ready,
        RunStatus::Interrupted => TaskEnd::Interrupted,
        _ if ctx.cancel.is_cancelled() => TaskEnd::Interrupted,
        // The whole run's budget: the feature waits for a resume with more
        // (its state says running, so the resume continues its engine).
        RunStatus::BudgetExhausted if ctx.ports.budget_exhausted().is_some() => TaskEnd::Budget,
        // An engine run never ends running or closed: counted as failed.
        RunStatus::Failed
        | RunStatus::Paused
        | RunStatus::BudgetExhausted
        | RunStatus::Running
        | RunStatus::Closed => {
            let mut message = format!(
                "{} of {} stories complete ({} failed, {} blocked, {} pending)",
                c.complete,
                c.complete + c.failed + c.blocked + c.pending,
                c.failed,
                c.blocked,
                c.pending
            );
            for line in outcome.failures {
                message.push('\n');
                message.push_str(&line);
            }
            ctx.fail(name, FailureKind::StoriesFailed, message, vec![]);
            TaskEnd::Failed
        }
    }
}

/// Keeps the feature's story counts current from the engine's events.
fn track_stories<P: MegaPorts>(ctx: &Ctx<P>, name: &str, event: &Event) {
    match event {
        Event::RunStarted {
            total,
            already_complete,
            ..
        } => ctx.update(name, |f| {
            f.stories.total = *total;
            f.stories.done = *already_complete;
        }),
        Event::StoryMerged { .. } => ctx.update(name, |f| f.stories.done += 1),
        Event::StoryFailed { .. } => ctx.update(name, |f| f.stories.failed += 1),
        Event::StoryBlocked { .. } => ctx.update(name, |f| f.stories.blocked += 1),
        _ => {}
    }
}

/// The feature worktree: reused (resume), re-attached to its existing branch,
/// or created on a fresh branch from the target's tip.
async fn prepare_worktree<P: MegaPorts>(
    ctx: &Arc<Ctx<P>>,
    name: &str,
    before: &FeatureState,
) -> Result<(PathBuf, bool), String> {
    let paths = ctx.paths.clone();
    let branch = before.branch.clone();
    let target = ctx.target.clone();
    let fresh = before.status == FeatureStatus::Pending;
    let recorded = before.worktree.clone();
    let name = name.to_string();
    tokio::task::spawn_blocking(move || {
        let path = recorded.unwrap_or_else(|| cascade_git::worktree::path_for(&paths, &branch));
        let branch_exists = cascade_git::merge::branch_tip(&paths, &branch)
            .map_err(|e| e.to_string())?
            .is_some();
        if !fresh && branch_exists {
            let on_branch =
                cascade_git::merge::checked_out_in(&paths, &branch).map_err(|e| e.to_string())?;
            if on_branch.as_deref().is_some_and(|p| same_path(p, &path)) && path.is_dir() {
                return Ok((path, true));
            }
            cascade_git::worktree::attach(&paths, &path, &branch).map_err(|e| {
                format!("feature '{name}': cannot re-attach branch '{branch}': {e}")
            })?;
            return Ok((path, true));
        }
        cascade_git::worktree::create(&paths, &path, &branch, &target).map_err(|e| {
            format!(
                "feature '{name}': cannot create worktree '{}' on '{branch}' from '{target}': {e}",
                path.display()
            )
        })?;
        Ok((path, false))
    })
    .await
    .map_err(|e| format!("worktree task failed: {e}"))?
}

fn same_path(a: &Path, b: &Path) -> bool {
    let ca = a.canonicalize().unwrap_or_else(|_| a.to_path_buf());
    let cb = b.canonicalize().unwrap_or_else(|_| b.to_path_buf());
    ca == cb
}

/// Finds, copies or generates the feature's PRD. `Err(None)`: interrupted;
/// `Err(Some(why))`: no valid PRD.
async fn ensure_prd<P: MegaPorts>(
    ctx: &Arc<Ctx<P>>,
    name: &str,
    before: &FeatureState,
    wt: &Path,
    reused: bool,
) -> Result<PathBuf, Option<String>> {
    let prd_path = wt.join("prd.json");
    let generated_unaccepted =
        before.prd_source == Some(PrdSource::Generated) && before.prd.is_none();
    // A fresh worktree holds nothing of the feature yet: a prd.json in it is
    // the target branch's committed one (the same for every feature), not
    // this feature's PRD.
    let inherited = !reused && committed_unchanged(wt, "prd.json");
    let plan_prd = ctx.plan_dir.join("features").join(name).join("prd.json");

    // Order: the PRD this feature already runs (resume), the plan folder's,
    // one present in the worktree, else the PRD agent writes one.
    let source = if prd_path.is_file() && before.prd.is_some() {
        Some(before.prd_source.unwrap_or(PrdSource::Worktree))
    } else if plan_prd.is_file() {
        std::fs::copy(&plan_prd, &prd_path).map_err(|e| {
            Some(format!(
                "cannot copy '{}' to '{}': {e}",
                plan_prd.display(),
                prd_path.display()
            ))
        })?;
        Some(PrdSource::PlanFolder)
    } else if prd_path.is_file() && !generated_unaccepted && !inherited {
        Some(PrdSource::Worktree)
    } else {
        None
    };
    if let Some(source) = source {
        let shown = if source == PrdSource::PlanFolder {
            plan_prd.clone()
        } else {
            prd_path.clone()
        };
        return match ctx.ports.check_prd(&prd_path) {
            Ok(stories) => {
                ctx.update(name, |f| {
                    f.prd = Some(prd_path.clone());
                    f.prd_source = Some(source);
                });
                ctx.emit(Event::PrdReady {
                    feature: name.to_string(),
                    path: shown,
                    source,
                    stories,
                });
                Ok(prd_path)
            }
            Err(problems) => Err(Some(format!(
                "the PRD '{}' is invalid:\n{}",
                shown.display(),
                bullet(&problems)
            ))),
        };
    }

    // Generate it.
    ctx.update(name, |f| {
        f.status = FeatureStatus::GeneratingPrd;
        f.prd_source = Some(PrdSource::Generated);
        f.prd = None;
    });
    let spec = ctx.specs.get(name).cloned().unwrap_or(FeatureSpec {
        id: name.to_string(),
        name: name.to_string(),
        title: String::new(),
        description: String::new(),
        priority: String::new(),
        dependencies: vec![],
    });
    let request = PrdRequest {
        goal: ctx.goal.clone(),
        dependency_titles: spec
            .dependencies
            .iter()
            .map(|d| {
                let t = ctx
                    .specs
                    .get(d)
                    .map(|s| s.title.clone())
                    .unwrap_or_default();
                (d.clone(), t)
            })
            .collect(),
        feature: FeatureBrief {
            name: spec.name.clone(),
            title: spec.title.clone(),
            description: spec.description.clone(),
            priority: spec.priority.clone(),
            dependencies: spec.dependencies.clone(),
        },
        design_doc: prd_gen::find_design_doc(&ctx.plan_dir, &ctx.paths.main_root),
        parent_design_doc: prd_gen::project_design_doc_json(&ctx.plan_dir, &ctx.paths.main_root),
        prd_path: prd_path.clone(),
    };
    let author = PortAuthor {
        ctx: ctx.as_ref(),
        feature: name,
        worktree: wt,
    };
    let result = {
        prd_gen::generate(
            &author,
            &request,
            |p| ctx.ports.check_prd(p),
            |note| match note {
                GenProgress::Attempt {
                    attempt,
                    max_attempts,
                } => {
                    ctx.update(name, |f| f.prd_attempts += 1);
                    ctx.emit(Event::PrdGenerationStarted {
                        feature: name.to_string(),
                        attempt,
                        max_attempts,
                    });
                }
                GenProgress::Invalid { attempt, problems } => ctx.emit(Event::PrdInvalid {
                    feature: name.to_string(),
                    attempt,
                    problems,
                }),
            },
        )
        .await
    };
    match result {
        Ok(g) => {
            ctx.update(name, |f| f.prd = Some(g.path.clone()));
            ctx.emit(Event::PrdReady {
                feature: name.to_string(),
                path: g.path.clone(),
                source: PrdSource::Generated,
                stories: g.stories,
            });
            Ok(g.path)
        }
        Err(f) if f.cancelled || ctx.cancel.is_cancelled() => Err(None),
        Err(f) => Err(Some(f.message)),
    }
}

/// Whether `rel` is tracked in `wt`'s checkout and unmodified there.
fn committed_unchanged(wt: &Path, rel: &str) -> bool {
    git2::Repository::open(wt)
        .and_then(|repo| repo.status_file(Path::new(rel)))
        .is_ok_and(|s| s.is_empty())
}

fn bullet(problems: &[String]) -> String {
    problems
        .iter()
        .map(|p| format!("  - {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The PRD agent through the ports, for [`prd_gen::generate`].
struct PortAuthor<'a, P> {
    ctx: &'a Ctx<P>,
    feature: &'a str,
    worktree: &'a Path,
}

impl<P: MegaPorts> PrdAuthor for PortAuthor<'_, P> {
    async fn write_prd(
        &self,
        attempt: u32,
        prompt: &str,
        prd_path: &Path,
    ) -> Result<(), AuthorError> {
        if self.ctx.cancel.is_cancelled() {
            return Err(AuthorError::Cancelled);
        }
        // The PRD agent is work like a story's agent: it takes a slot of
        // `--parallel` too.
        let _slot = tokio::select! {
            permit = self.ctx.slots.clone().acquire_owned() => permit.ok(),
            _ = self.ctx.cancel.cancelled() => return Err(AuthorError::Cancelled),
        };
        // Nothing new starts once the run's budget is spent (see
        // `run_feature`, which tells this from Ctrl-C).
        if let Some(message) = self.ctx.ports.budget_exhausted() {
            self.ctx.emit(Event::MegaNotice {
                message: format!(
                    "feature '{}': its PRD agent does not start: {message}",
                    self.feature
                ),
            });
            return Err(AuthorError::Cancelled);
        }
        let written = self
            .ctx
            .ports
            .write_prd(
                self.feature,
                self.worktree,
                attempt,
                prompt,
                prd_path,
                &self.ctx.cancel,
            )
            .await;
        if let Some(c) = self.ctx.ports.take_prd_charge(self.feature) {
            self.ctx.update(self.feature, |f| match c.cost_usd {
                Some(usd) => f.prd_cost_usd += usd,
                None => f.prd_unknown_spend += 1,
            });
            self.ctx.emit(Event::PrdAgentFinished {
                feature: self.feature.to_string(),
                attempt,
                agent: c.agent,
                cost_usd: c.cost_usd,
                input_tokens: c.input_tokens,
                output_tokens: c.output_tokens,
            });
            if let Some(e) = c.exhausted {
                self.ctx.emit(e.event());
            }
        }
        written
    }
}
