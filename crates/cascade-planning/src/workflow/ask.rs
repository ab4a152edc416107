//! Strategy, discovery and design: the steps before the plan is written,
//! and asking the person (answers files, `--auto`, terminal, else pause).

use super::*;

/// Who answered.
const BY_ANSWERS: &str = "answers";
const BY_AUTO: &str = "auto";
const BY_PERSON: &str = "person";

impl Planner<'_> {
    /// Plan Cascade's self-assessment, unless the strategy is known.
    pub(super) async fn strategy_step(&self) -> Result<(), PlanningError> {
        if let Some(strategy) = self.read(|s| s.strategy) {
            let (source, reasoning) = self.read(|s| {
                (
                    s.strategy_source.clone().unwrap_or_else(|| "forced".into()),
                    s.strategy_reasoning.clone().unwrap_or_default(),
                )
            });
            self.emit(PlanEvent::Strategy {
                strategy: strategy.to_string(),
                source,
                confidence: None,
                reasoning,
            });
            return Ok(());
        }
        let out = self.path(STRATEGY_FILE);
        let _ = std::fs::remove_file(&out);
        let files = self.files();
        let prompt = self.read(|s| prompts::strategy(s, &files.paths(Some(&out))));
        self.call(Step::Strategy, false, prompt, Some(&out)).await?;
        let a = self.expect_output(Step::Strategy, &out, strategy::read_assessment)?;
        self.update(|s| {
            s.strategy = Some(a.strategy);
            s.strategy_source = Some("assessed".into());
            s.strategy_reasoning = Some(a.reasoning.clone()).filter(|r| !r.is_empty());
            s.outputs
                .insert("strategy".into(), agent::shown(&out, &self.root));
        })?;
        self.emit(PlanEvent::Strategy {
            strategy: a.strategy.to_string(),
            source: "assessed".into(),
            confidence: a.confidence,
            reasoning: a.reasoning,
        });
        Ok(())
    }

    /// The clarifying questions (at most `--max-questions`).
    pub(super) async fn discovery_step(&self) -> Result<(), PlanningError> {
        let (done, max) = self.read(|s| (s.progress.discovery_done, s.options.max_questions));
        if done {
            return Ok(());
        }
        if max == 0 {
            return self.update(|s| s.progress.discovery_done = true);
        }
        let out = self.path(QUESTIONS_FILE);
        let _ = std::fs::remove_file(&out);
        let files = self.files();
        let prompt = self.read(|s| prompts::discovery(s, &files.paths(Some(&out))));
        self.call(Step::Discovery, false, prompt, Some(&out))
            .await?;
        let questions = self.expect_output(Step::Discovery, &out, |p| {
            steps::read_questions(p, max as usize)
        })?;
        self.update(|s| {
            s.questions = questions;
            s.current_question_index = 0;
            s.progress.discovery_done = true;
            s.outputs
                .insert("questions".into(), agent::shown(&out, &self.root));
        })
    }

    /// Answers the open questions in order; `Some(Paused)` when some wait.
    pub(super) fn ask_questions(&self) -> Result<Option<Outcome>, PlanningError> {
        let (total, start, auto) =
            self.read(|s| (s.questions.len(), s.current_question_index, s.options.auto));
        for index in start..total {
            let q = self.read(|s| s.questions[index].clone());
            if q.answer.is_some() {
                self.update(|s| s.current_question_index = index + 1)?;
                continue;
            }
            let (answer, by) = if let Some(a) = self.answers.question(&q.id) {
                (Some(a), BY_ANSWERS)
            } else if auto {
                let a = q
                    .assumption
                    .clone()
                    .or_else(|| q.options.first().cloned())
                    .unwrap_or_else(|| {
                        "no preference: make a reasonable assumption and state it in the plan"
                            .to_string()
                    });
                (Some(a), BY_AUTO)
            } else {
                self.emit(PlanEvent::Question {
                    question: q.clone(),
                    index: index + 1,
                    total,
                    answered_by: None,
                });
                let a = self.person_lock().question(&q, index + 1, total);
                (a, BY_PERSON)
            };
            let Some(answer) = answer else {
                let waiting_for = self.read(|s| {
                    s.questions[index..]
                        .iter()
                        .filter(|q| q.answer.is_none())
                        .map(|q| q.id.clone())
                        .collect()
                });
                return Ok(Some(Outcome::Paused { waiting_for }));
            };
            let answered = self.update(|s| {
                let q = &mut s.questions[index];
                q.answer = Some(answer);
                q.answered_at = Some(now());
                s.current_question_index = index + 1;
                s.questions[index].clone()
            })?;
            self.emit(PlanEvent::Question {
                question: answered,
                index: index + 1,
                total,
                answered_by: Some(by.to_string()),
            });
        }
        Ok(None)
    }

    /// The decision points with options and a recommendation.
    pub(super) async fn design_step(&self) -> Result<(), PlanningError> {
        if self.read(|s| s.progress.design_done) {
            return Ok(());
        }
        let out = self.path(DECISIONS_FILE);
        let _ = std::fs::remove_file(&out);
        let files = self.files();
        let prompt = self.read(|s| prompts::design(s, &files.paths(Some(&out))));
        self.call(Step::Design, false, prompt, Some(&out)).await?;
        let (decisions, summary) = self.expect_output(Step::Design, &out, steps::read_decisions)?;
        self.update(|s| {
            s.decisions = decisions;
            s.design_summary = summary;
            s.current_decision_index = 0;
            s.progress.design_done = true;
            s.outputs
                .insert("decisions".into(), agent::shown(&out, &self.root));
        })
    }

    /// Makes the open decisions in order; `Some(Paused)` when some wait.
    pub(super) fn ask_decisions(&self) -> Result<Option<Outcome>, PlanningError> {
        let (total, start, auto) =
            self.read(|s| (s.decisions.len(), s.current_decision_index, s.options.auto));
        for index in start..total {
            let d = self.read(|s| s.decisions[index].clone());
            if d.selected_option_id.is_some() {
                self.update(|s| s.current_decision_index = index + 1)?;
                continue;
            }
            let (choice, by) = if let Some(c) = self.answers.decision(&d.id) {
                (Some(c), BY_ANSWERS)
            } else if auto {
                let option = d
                    .recommendation
                    .clone()
                    .filter(|r| d.option(r).is_some())
                    .unwrap_or_else(|| d.options[0].id.clone());
                (
                    Some((
                        option,
                        Some("the planning agent's recommendation (--auto)".to_string()),
                    )),
                    BY_AUTO,
                )
            } else {
                self.emit(PlanEvent::Decision {
                    decision: d.clone(),
                    index: index + 1,
                    total,
                    decided_by: None,
                });
                let c = self.person_lock().decision(&d, index + 1, total);
                (c, BY_PERSON)
            };
            let Some((option, rationale)) = choice else {
                let waiting_for = self.read(|s| {
                    s.decisions[index..]
                        .iter()
                        .filter(|d| d.selected_option_id.is_none())
                        .map(|d| d.id.clone())
                        .collect()
                });
                return Ok(Some(Outcome::Paused { waiting_for }));
            };
            let Some(opt) = d.option(&option) else {
                return Err(PlanningError::Usage(format!(
                    "{} (\"{}\") has no option '{option}' (options: {})",
                    d.id,
                    d.topic,
                    d.options
                        .iter()
                        .map(|o| format!("{} = {}", o.id, o.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            };
            let opt_id = opt.id.clone();
            let decided = self.update(|s| {
                let d = &mut s.decisions[index];
                d.selected_option_id = Some(opt_id);
                d.rationale = rationale;
                d.decided_at = Some(now());
                s.current_decision_index = index + 1;
                s.decisions[index].clone()
            })?;
            self.emit(PlanEvent::Decision {
                decision: decided,
                index: index + 1,
                total,
                decided_by: Some(by.to_string()),
            });
        }
        Ok(None)
    }
}
