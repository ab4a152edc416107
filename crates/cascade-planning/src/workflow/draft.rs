//! Writing the plan (generate + self-review, validate/fix through the one
//! generator loop), the challenge/revise rounds, the person's review, and
//! installing an approved plan.

use super::*;

/// The planning agent as the generator loop's author: attempt 1 is the
/// generate step followed by the self-review (or the revise step), later
/// attempts are fix steps. The real error of a failed call is kept for the
/// caller (the loop only needs to know that it must stop).
struct DraftAuthor<'p, 'a> {
    planner: &'p Planner<'a>,
    revising: bool,
    error: Mutex<Option<PlanningError>>,
}

impl PlanAuthor for DraftAuthor<'_, '_> {
    async fn write(&self, attempt: u32, fix: Option<&FixContext>) -> Result<(), AuthorError> {
        match self.attempt(attempt, fix).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let cancelled = matches!(e, PlanningError::Interrupted { .. });
                let text = e.to_string();
                if let Ok(mut slot) = self.error.lock() {
                    *slot = Some(e);
                }
                Err(if cancelled {
                    AuthorError::Cancelled
                } else {
                    AuthorError::Fatal(text)
                })
            }
        }
    }
}

impl DraftAuthor<'_, '_> {
    async fn attempt(&self, attempt: u32, fix: Option<&FixContext>) -> Result<(), PlanningError> {
        let p = self.planner;
        let files = p.files();
        let strategy = p.read(|s| s.strategy.unwrap_or(Strategy::HybridAuto));
        let plan = files.plan(strategy).to_path_buf();
        let import = p.import.as_ref();
        if attempt == 1 && self.revising {
            let challenge = std::fs::read_to_string(&files.challenge).unwrap_or_default();
            let prompt = p.read(|s| prompts::revise(s, &files.paths(Some(&plan)), &challenge));
            p.call(Step::Revise, false, prompt, Some(&plan)).await?;
            return p.update(|s| s.progress.drafted = true);
        }
        if attempt == 1 {
            if let Some(Import {
                kind: ImportKind::Json,
                json: Some(doc),
                ..
            }) = import
            {
                let mut doc = doc.clone();
                if doc.pointer("/metadata/source").is_none() {
                    design_doc::set_source(&mut doc, "user-provided");
                }
                let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
                crate::session::write_atomic(&files.design_doc, text.as_bytes())?;
            }
            let prompt = p.read(|s| prompts::generate(s, &files.paths(Some(&plan)), import));
            p.call(Step::Generate, false, prompt, Some(&plan)).await?;
            self.mark_converted(&files.design_doc);
            let prompt = p.read(|s| prompts::self_review(s, &files.paths(None)));
            let run = p.call(Step::SelfReview, false, prompt, None).await?;
            let agent = run.agent.clone();
            let marker = match run.review {
                Some(ReviewVerdict::Pass) => "PASS",
                Some(ReviewVerdict::NeedsRevision) => "NEEDS_REVISION",
                None => {
                    let msg = format!(
                        "the self-review by '{agent}' printed no <review>PASS</review> or <review>NEEDS_REVISION</review> marker; treated as PASS"
                    );
                    p.update(|s| s.warnings.push(msg.clone()))?;
                    p.emit(PlanEvent::Warning { message: msg });
                    "PASS"
                }
            };
            p.emit(PlanEvent::Verdict {
                kind: "self_review".into(),
                verdict: marker.into(),
                round: 1,
                agent,
            });
            self.mark_converted(&files.design_doc);
            return p.update(|s| {
                s.progress.self_review = Some(marker.to_string());
                s.progress.drafted = true;
                s.progress.fix_rounds = 0;
            });
        }
        let Some(fix) = fix else {
            return Ok(());
        };
        let prompt = p.read(|s| prompts::fix(s, &files.paths(Some(&plan)), fix, import));
        p.call(Step::Fix, false, prompt, Some(&plan)).await?;
        self.mark_converted(&files.design_doc);
        p.update(|s| s.progress.fix_rounds = attempt - 1)
    }

    /// A design doc converted from markdown or HTML says so (`source: converted`).
    fn mark_converted(&self, path: &Path) {
        let converted = self
            .planner
            .import
            .as_ref()
            .is_some_and(|i| i.kind != ImportKind::Json);
        if !converted {
            return;
        }
        if let Ok(mut doc) = steps::read_json(path) {
            if doc.pointer("/metadata/source").and_then(|v| v.as_str()) != Some("converted") {
                design_doc::set_source(&mut doc, "converted");
                if let Ok(text) = serde_json::to_string_pretty(&doc) {
                    let _ = crate::session::write_atomic(path, text.as_bytes());
                }
            }
        }
    }
}

impl Planner<'_> {
    /// Writes the plan until it passes local validation (or fails the session).
    pub(super) async fn draft(&self) -> Result<(), PlanningError> {
        let (valid, drafted, fix_rounds, revising, strategy, max_fix) = self.read(|s| {
            (
                s.progress.valid,
                s.progress.drafted,
                s.progress.fix_rounds,
                s.progress.revising,
                s.strategy.unwrap_or(Strategy::HybridAuto),
                s.options.format_iterations,
            )
        });
        if valid {
            return Ok(());
        }
        let files = self.files();
        let plan = files.plan(strategy).to_path_buf();
        let start = if drafted {
            Start::Existing {
                attempts_done: 1 + fix_rounds,
            }
        } else if revising {
            // A revision edits the plan in place.
            Start::InPlace
        } else {
            Start::Fresh
        };
        let author = DraftAuthor {
            planner: self,
            revising,
            error: Mutex::new(None),
        };
        let what = format!(
            "a valid plan to '{}' and '{}'",
            agent::shown(&plan, &self.root),
            agent::shown(&files.design_doc, &self.root)
        );
        let job = Job {
            files: vec![plan.clone(), files.design_doc.clone()],
            check: || {
                check_plan(
                    strategy,
                    &PlanFiles {
                        plan: &plan,
                        design_doc: &files.design_doc,
                    },
                )
            },
            max_fix_rounds: max_fix,
            what: &what,
        };
        let result = generator::make_valid(&author, &job, start, |note| {
            if let GenProgress::Invalid { problems, .. } = note {
                self.emit(PlanEvent::Validation {
                    ok: false,
                    problems,
                });
            }
        })
        .await;
        match result {
            Ok(_) => {
                self.emit(PlanEvent::Validation {
                    ok: true,
                    problems: Vec::new(),
                });
                let (plan_shown, dd_shown) = (
                    agent::shown(&plan, &self.root),
                    agent::shown(&files.design_doc, &self.root),
                );
                self.update(|s| {
                    s.progress.valid = true;
                    s.progress.revising = false;
                    s.progress.verdict = None;
                    let key = if strategy.is_mega() {
                        "mega_plan"
                    } else {
                        "prd"
                    };
                    s.outputs.insert(key.into(), plan_shown);
                    s.outputs.insert("design_doc".into(), dd_shown);
                })
            }
            Err(failed) => {
                let kept = author.error.lock().ok().and_then(|mut e| e.take());
                if let Some(e) = kept {
                    return Err(e);
                }
                if failed.cancelled {
                    return Err(self.interrupted());
                }
                Err(PlanningError::InvalidPlan {
                    rounds: max_fix,
                    problems: failed.problems,
                })
            }
        }
    }
}

impl Planner<'_> {
    /// Challenge, and revise + re-challenge on NEEDS_REVISION, up to
    /// `--planning-iterations` revisions.
    pub(super) async fn challenge_loop(&self) -> Result<(), PlanningError> {
        loop {
            let verdict = match self.read(|s| s.progress.verdict.clone()) {
                Some(v) => verdict::parse(&format!("Verdict: {v}")),
                None => None,
            };
            let verdict = match verdict {
                Some(v) => v,
                None => self.challenge().await?,
            };
            let files = self.files();
            let (challenges, max_revisions, auto) = self.read(|s| {
                (
                    s.progress.challenges,
                    s.options.planning_iterations,
                    s.options.auto,
                )
            });
            match verdict {
                Verdict::Approved => return Ok(()),
                Verdict::Rejected => {
                    return Err(PlanningError::Rejected {
                        agent: self.read(|s| s.review_agent.clone().unwrap_or_default()),
                        path: files.challenge.clone(),
                    })
                }
                Verdict::NeedsRevision => {
                    let revisions_done = challenges.saturating_sub(1);
                    if revisions_done < max_revisions {
                        self.update(|s| {
                            s.progress.revising = true;
                            s.progress.drafted = false;
                            s.progress.valid = false;
                            s.progress.fix_rounds = 0;
                        })?;
                        self.draft().await?;
                        continue;
                    }
                    if auto {
                        return Err(PlanningError::StillNeedsRevision {
                            rounds: max_revisions,
                            path: files.challenge.clone(),
                        });
                    }
                    let msg = format!(
                        "the challenge still says NEEDS_REVISION after {max_revisions} revision round(s); review its findings in '{}' before approving",
                        agent::shown(&files.challenge, &self.root)
                    );
                    self.update(|s| s.warnings.push(msg.clone()))?;
                    self.emit(PlanEvent::Warning { message: msg });
                    return Ok(());
                }
            }
        }
    }

    /// One challenge by the review agent: CHALLENGE.md and its verdict.
    async fn challenge(&self) -> Result<Verdict, PlanningError> {
        let files = self.files();
        let _ = std::fs::remove_file(&files.challenge);
        let round = self.read(|s| s.progress.challenges) + 1;
        let prompt =
            self.read(|s| prompts::challenge(s, &files.paths(Some(&files.challenge)), round));
        let run = self
            .call(Step::Challenge, true, prompt, Some(&files.challenge))
            .await?;
        let text = std::fs::read_to_string(&files.challenge).ok();
        // The verdict is in the file; an agent that only printed it is read too.
        let verdict = text
            .as_deref()
            .and_then(verdict::parse)
            .or_else(|| run.final_text.as_deref().and_then(verdict::parse))
            .or_else(|| verdict::parse(&run.outcome.stdout.text_lossy()));
        let Some(verdict) = verdict else {
            return Err(PlanningError::UnparsableVerdict {
                path: files.challenge.clone(),
            });
        };
        if text.is_none() {
            let body = run
                .final_text
                .clone()
                .unwrap_or_else(|| run.outcome.stdout.text_lossy());
            crate::session::write_atomic(&files.challenge, body.as_bytes())?;
        }
        let history = self.path(&format!("CHALLENGE-{round}.md"));
        let _ = std::fs::copy(&files.challenge, &history);
        let shown = agent::shown(&files.challenge, &self.root);
        self.update(|s| {
            s.progress.challenges = round;
            s.progress.verdict = Some(verdict.as_str().to_string());
            s.outputs.insert("challenge".into(), shown);
        })?;
        self.emit(PlanEvent::Verdict {
            kind: "challenge".into(),
            verdict: verdict.as_str().into(),
            round,
            agent: run.agent.clone(),
        });
        Ok(verdict)
    }

    /// The person's review: the command's answer, answers.json (once),
    /// `--yes`, `--auto`, the terminal; `None` pauses.
    pub(super) fn review(&self) -> Result<Option<ReviewAnswer>, PlanningError> {
        let mut answer = self.review_answer.lock().ok().and_then(|mut a| a.take());
        if answer.is_none() && !self.read(|s| s.progress.review_answer_used) {
            if let Some(a) = self.answers.review() {
                self.update(|s| s.progress.review_answer_used = true)?;
                answer = Some(a);
            }
        }
        let (auto, verdict) = self.read(|s| (s.options.auto, s.progress.verdict.clone()));
        if answer.is_none() && (self.yes || (auto && verdict.as_deref() == Some("APPROVED"))) {
            answer = Some(ReviewAnswer::Approve);
        }
        if answer.is_none() && !auto {
            let summary = self.summary();
            answer = self.person_lock().review(&summary);
        }
        if let Some(a) = &answer {
            let (text, reason) = match a {
                ReviewAnswer::Approve => ("approve", None),
                ReviewAnswer::Cancel => ("cancel", None),
                ReviewAnswer::Reject(r) => ("reject", Some(r.clone())),
            };
            let count =
                self.read(|s| s.reject_count) + u32::from(matches!(a, ReviewAnswer::Reject(_)));
            self.emit(PlanEvent::Review {
                answer: text.into(),
                reason,
                reject_count: count,
            });
        }
        Ok(answer)
    }

    /// Records a rejection: back to design, or cancelled at the third.
    /// Returns whether the session is now cancelled.
    pub(super) fn reject(&self, reason: String) -> Result<bool, PlanningError> {
        self.update(|s| {
            s.reject_count += 1;
            s.rejections.push(if reason.trim().is_empty() {
                "(no reason given)".to_string()
            } else {
                reason.trim().to_string()
            });
            if s.reject_count >= MAX_REJECTIONS {
                s.status = PlanStatus::Cancelled;
                s.error_message = Some(format!(
                    "cancelled after {} rejections by the person",
                    s.reject_count
                ));
                return true;
            }
            s.status = PlanStatus::Design;
            s.decisions.clear();
            s.current_decision_index = 0;
            s.design_summary = None;
            let used = s.progress.review_answer_used;
            s.progress = crate::session::Progress {
                discovery_done: true,
                review_answer_used: used,
                ..Default::default()
            };
            false
        })
    }

    /// What the person reviews, from the session and the draft files.
    pub fn summary(&self) -> Summary {
        let files = self.files();
        self.read(|s| {
            summarize(
                s,
                files.plan(s.strategy.unwrap_or(Strategy::HybridAuto)),
                &files.design_doc,
                &files.challenge,
            )
        })
    }
}

/// Builds the review summary of session `s` with its plan at `plan`.
pub fn summarize(s: &Session, plan: &Path, design_doc: &Path, challenge: &Path) -> Summary {
    let strategy = s.strategy.unwrap_or(Strategy::HybridAuto);
    let (batches, critical_path) = if strategy.is_mega() {
        cascade_plan::load_mega(plan)
            .ok()
            .and_then(|mega| {
                let valid = cascade_plan::validate_mega(&mega).ok()?;
                Some(order(&valid, |id| {
                    mega.features
                        .iter()
                        .find(|f| f.id == id || f.name == id)
                        .map(|f| f.title.clone())
                }))
            })
            .unwrap_or_default()
    } else {
        cascade_plan::load_prd(plan)
            .ok()
            .and_then(|prd| {
                let valid = cascade_plan::validate_prd(&prd).ok()?;
                Some(order(&valid, |id| prd.story(id).map(|st| st.title.clone())))
            })
            .unwrap_or_default()
    };
    let decisions = s
        .decisions
        .iter()
        .filter_map(|d| {
            let id = d.selected_option_id.as_deref()?;
            let name = d
                .option(id)
                .map(|o| o.name.clone())
                .unwrap_or(id.to_string());
            Some((d.topic.clone(), name, d.rationale.clone()))
        })
        .collect();
    Summary {
        session_id: s.session_id.clone(),
        goal: s.instruction.clone(),
        strategy: s.strategy,
        batches,
        critical_path,
        decisions,
        verdict: s.progress.verdict.clone(),
        challenge_file: challenge.is_file().then(|| challenge.to_path_buf()),
        plan_file: plan.to_path_buf(),
        design_doc_file: design_doc.to_path_buf(),
        total_cost: s.total_cost,
        calls: s.llm_calls.len(),
        reject_count: s.reject_count,
    }
}

/// Batches of `(id, title)` and the critical path of a validated plan.
type Order = (Vec<Vec<(String, String)>>, Vec<String>);

fn order(valid: &cascade_plan::ValidPlan, title: impl Fn(&str) -> Option<String>) -> Order {
    let batches = valid
        .batches()
        .iter()
        .map(|b| {
            b.iter()
                .map(|id| (id.to_string(), title(id.as_str()).unwrap_or_default()))
                .collect()
        })
        .collect();
    let critical_path = valid
        .critical_path()
        .iter()
        .map(|i| i.to_string())
        .collect();
    (batches, critical_path)
}

/// Copies an approved session's plan files into `dir` (the repository root,
/// or wherever the caller builds the plan) and records them in `outputs`.
/// A different file already there is first kept as `replaced-<name>` in the
/// session directory. Returns the written paths.
pub fn install(
    store: &SessionStore,
    session: &mut Session,
    dir: &Path,
) -> Result<Vec<PathBuf>, PlanningError> {
    if session.status != PlanStatus::Approved {
        return Err(PlanningError::Usage(format!(
            "the planning session {} is {}, not approved",
            session.session_id, session.status
        )));
    }
    let sdir = store.dir(&session.session_id);
    let plan_name = if session.strategy.is_some_and(Strategy::is_mega) {
        MEGA_FILE
    } else {
        PRD_FILE
    };
    let mut written = Vec::new();
    for name in [plan_name, DESIGN_DOC_FILE] {
        let from = sdir.join(name);
        let bytes = std::fs::read(&from).map_err(|source| PlanningError::Io {
            path: from.clone(),
            source,
        })?;
        let to = dir.join(name);
        if let Ok(old) = std::fs::read(&to) {
            if old != bytes {
                let keep = sdir.join(format!("replaced-{name}"));
                crate::session::write_atomic(&keep, &old)?;
                session.warnings.push(format!(
                    "'{}' existed and was replaced; the old one is kept in '{}'",
                    to.display(),
                    keep.display()
                ));
            }
        }
        crate::session::write_atomic(&to, &bytes)?;
        written.push(to);
    }
    let key = if plan_name == MEGA_FILE {
        "mega_plan"
    } else {
        "prd"
    };
    session
        .outputs
        .insert(key.into(), written[0].display().to_string());
    session
        .outputs
        .insert("design_doc".into(), written[1].display().to_string());
    store.save(session)?;
    Ok(written)
}
