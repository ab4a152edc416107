//! The planning state machine: discovery -> design -> review -> approved.
//!
//! [`Planner::run`] drives a session as far as it can: it runs the steps
//! that are not done yet (strategy, discovery, design, generate with its
//! self-review and validate/fix rounds, challenge and revise), asks what
//! needs a person (answers files first, then `--auto`, then the terminal
//! through [`Person`]) and pauses when nobody answers. Every answer and every agent call is saved
//! before the next one starts, so a killed session resumes at the same
//! question or step. An agent failure marks the session `failed` with its
//! `error_message`; resuming retries the failed step.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use cascade_agents::{AgentDef, AgentsConfig, Detector, ReviewVerdict};
use cascade_process::CancelToken;

use crate::agent::{self, AgentChoice, Call, Workspace};
use crate::answers::{Answers, ReviewAnswer};
use crate::check::{check_plan, PlanFiles};
use crate::design_doc::{self, Import, ImportKind};
use crate::error::PlanningError;
use crate::events::PlanEvent;
use crate::generator::{self, AuthorError, FixContext, GenProgress, Job, PlanAuthor, Start};
use crate::prompts::{self, Paths};
use crate::session::{now, Decision, PlanStatus, Question, Session, SessionStore, MAX_REJECTIONS};
use crate::steps::{self, Step};
use crate::strategy::{self, Strategy};
use crate::verdict::{self, Verdict};

mod ask;
mod draft;

pub use draft::{install, summarize};

/// File names inside the session directory.
pub const STRATEGY_FILE: &str = "strategy.json";
pub const QUESTIONS_FILE: &str = "questions.json";
pub const DECISIONS_FILE: &str = "decisions.json";
pub const PRD_FILE: &str = "prd.json";
pub const MEGA_FILE: &str = "mega-plan.json";
pub const DESIGN_DOC_FILE: &str = "design_doc.json";
pub const CHALLENGE_FILE: &str = "CHALLENGE.md";

/// Someone who can answer on a terminal. Each method returns `None` when
/// nobody can answer now (the session then pauses).
pub trait Person: Send {
    fn question(&mut self, q: &Question, index: usize, total: usize) -> Option<String>;
    /// `(option id, rationale)`.
    fn decision(
        &mut self,
        d: &Decision,
        index: usize,
        total: usize,
    ) -> Option<(String, Option<String>)>;
    fn review(&mut self, summary: &Summary) -> Option<ReviewAnswer>;
}

/// No terminal: every question pauses the session.
#[derive(Debug, Default)]
pub struct Nobody;

impl Person for Nobody {
    fn question(&mut self, _: &Question, _: usize, _: usize) -> Option<String> {
        None
    }
    fn decision(&mut self, _: &Decision, _: usize, _: usize) -> Option<(String, Option<String>)> {
        None
    }
    fn review(&mut self, _: &Summary) -> Option<ReviewAnswer> {
        None
    }
}

/// What the person reviews.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub session_id: String,
    pub goal: String,
    pub strategy: Option<Strategy>,
    /// Stories (or features) as batches of `(id, title)`.
    pub batches: Vec<Vec<(String, String)>>,
    pub critical_path: Vec<String>,
    /// `(topic, chosen option, rationale)`.
    pub decisions: Vec<(String, String, Option<String>)>,
    pub verdict: Option<String>,
    pub challenge_file: Option<PathBuf>,
    pub plan_file: PathBuf,
    pub design_doc_file: PathBuf,
    pub total_cost: f64,
    pub calls: usize,
    pub reject_count: u32,
}

/// Where a run of the planner stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Approved,
    /// By `cancel` or by the third rejection.
    Cancelled {
        by_rejections: bool,
    },
    /// Waiting for these answer keys (`q-N`, `d-N`, `review`).
    Paused {
        waiting_for: Vec<String>,
    },
}

/// Everything a run needs besides the session.
pub struct Planner<'a> {
    config: &'a AgentsConfig,
    detector: &'a Detector,
    store: SessionStore,
    root: PathBuf,
    cancel: CancelToken,
    /// `--answers FILE` (wins over the session's answers.json).
    extra_answers: Answers,
    /// `plan approve|reject`: the review answer given with the command (used once).
    review_answer: Mutex<Option<ReviewAnswer>>,
    /// `--yes`: approve the review.
    yes: bool,
    /// The size limit of each step's agent log (the project's
    /// `resources.max_log_mb`, as for a run's agents).
    log_limit: cascade_process::LogLimit,
    person: Mutex<&'a mut dyn Person>,
    events: Mutex<Box<dyn FnMut(PlanEvent) + Send + 'a>>,
    session: Mutex<Option<Session>>,
    answers: Answers,
    import: Option<Import>,
    agents: Option<AgentChoice>,
}

impl<'a> Planner<'a> {
    /// `root`: the repository root (where agents run); `cascade_dir` its `.cascade/`.
    pub fn new(
        config: &'a AgentsConfig,
        detector: &'a Detector,
        root: &Path,
        cascade_dir: &Path,
        person: &'a mut dyn Person,
        events: impl FnMut(PlanEvent) + Send + 'a,
    ) -> Planner<'a> {
        Planner {
            config,
            detector,
            store: SessionStore::new(cascade_dir),
            root: root.to_path_buf(),
            cancel: CancelToken::new(),
            extra_answers: Answers::default(),
            review_answer: Mutex::new(None),
            yes: false,
            log_limit: cascade_process::LogLimit::default(),
            person: Mutex::new(person),
            events: Mutex::new(Box::new(events)),
            session: Mutex::new(None),
            answers: Answers::default(),
            import: None,
            agents: None,
        }
    }

    /// Answers from `--answers FILE`.
    pub fn with_answers(mut self, answers: Answers) -> Self {
        self.extra_answers = answers;
        self
    }

    /// The review answer given with the command (`plan approve`, `plan reject`).
    pub fn with_review(mut self, answer: Option<ReviewAnswer>) -> Self {
        self.review_answer = Mutex::new(answer);
        self
    }

    /// `--yes`: the review is approved.
    pub fn with_yes(mut self, yes: bool) -> Self {
        self.yes = yes;
        self
    }

    /// The size limit of each step's agent log (default: the run's default).
    pub fn with_log_limit(mut self, limit: cascade_process::LogLimit) -> Self {
        self.log_limit = limit;
        self
    }

    /// Ctrl-C cancels the running agent and stops the session (saved).
    pub fn with_cancel(mut self, cancel: CancelToken) -> Self {
        self.cancel = cancel;
        self
    }

    pub fn store(&self) -> &SessionStore {
        &self.store
    }

    fn emit(&self, e: PlanEvent) {
        if let Ok(mut f) = self.events.lock() {
            f(e);
        }
    }

    fn person_lock(&self) -> MutexGuard<'_, &'a mut dyn Person> {
        match self.person.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn s(&self) -> MutexGuard<'_, Option<Session>> {
        match self.session.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Runs `f` on the session and saves it.
    fn update<T>(&self, f: impl FnOnce(&mut Session) -> T) -> Result<T, PlanningError> {
        let mut g = self.s();
        let s = g
            .as_mut()
            .ok_or_else(|| PlanningError::Usage("no session".into()))?;
        let out = f(s);
        self.store.save(s)?;
        Ok(out)
    }

    /// Reads from the session.
    fn read<T>(&self, f: impl FnOnce(&Session) -> T) -> T {
        let g = self.s();
        match g.as_ref() {
            Some(s) => f(s),
            None => unreachable!("the session is set for the whole run"),
        }
    }

    fn dir(&self) -> PathBuf {
        self.read(|s| self.store.dir(&s.session_id))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    fn workspace(&self) -> Workspace {
        Workspace {
            root: self.root.clone(),
            session_dir: self.dir(),
            cancel: self.cancel.clone(),
            log_limit: self.log_limit,
        }
    }

    /// Drives `session` as far as it goes; the session is saved throughout
    /// and given back in `session` at the end.
    pub async fn run(&mut self, session: &mut Session) -> Result<Outcome, PlanningError> {
        let _lock = crate::lock::SessionLock::acquire(
            &self.store.dir(&session.session_id),
            &session.session_id,
        )?;
        // Another process may have moved the session on meanwhile.
        if let Ok(fresh) = self.store.load(&session.session_id) {
            *session = fresh;
        }
        if session.status.is_final() {
            if session.status == PlanStatus::Approved {
                return Ok(Outcome::Approved);
            }
            return Err(PlanningError::Finished {
                id: session.session_id.clone(),
                status: session.status.to_string(),
            });
        }
        let resumed = !session.llm_calls.is_empty()
            || session.status != PlanStatus::Discovery
            || !session.questions.is_empty();
        self.emit(PlanEvent::PlanStarted {
            session_id: session.session_id.clone(),
            instruction: session.instruction.clone(),
            status: session.status.to_string(),
            resumed,
            plan_output: session
                .options
                .output
                .as_ref()
                .map(crate::events::OutputChoice::new),
        });
        let mut answers = Answers::load(&self.store.answers_path(&session.session_id))?;
        answers.merge(self.extra_answers.clone());
        self.answers = answers;
        if let Some(p) = &session.options.design_doc {
            self.import = Some(design_doc::import(p)?);
        }
        if session.status == PlanStatus::Failed {
            session.status = session.progress.failed_in.unwrap_or(PlanStatus::Discovery);
            session.error_message = None;
        }
        *self.s() = Some(session.clone());
        let result = self.start().await;
        let result = match result {
            Ok(()) => self.drive().await,
            Err(e) => Err(e),
        };
        let outcome = self.finish(result);
        if let Some(s) = self.s().take() {
            *session = s;
        }
        outcome
    }

    /// Chooses the agents and records them.
    async fn start(&mut self) -> Result<(), PlanningError> {
        let choice = self.read(|s| agent::choose(self.config, self.detector, s))?;
        let note = choice.note.clone();
        self.update(|s| {
            s.generator_agent = Some(choice.generator.clone());
            s.review_agent = Some(choice.reviewer.clone());
            if let Some(n) = &note {
                if !s.warnings.contains(n) {
                    s.warnings.push(n.clone());
                }
            }
        })?;
        self.emit(PlanEvent::Agents {
            generator: choice.generator.clone(),
            reviewer: choice.reviewer.clone(),
            note: note.clone(),
        });
        if let Some(n) = note {
            self.emit(PlanEvent::Warning { message: n });
        }
        self.agents = Some(choice);
        Ok(())
    }

    /// Records how the run ended (a failure marks the session failed).
    fn finish(&self, result: Result<Outcome, PlanningError>) -> Result<Outcome, PlanningError> {
        let (id, answers_file) = self.read(|s| {
            (
                s.session_id.clone(),
                self.store.answers_path(&s.session_id).display().to_string(),
            )
        });
        match &result {
            Ok(Outcome::Paused { waiting_for }) => {
                let status = self.read(|s| s.status.to_string());
                self.emit(PlanEvent::Paused {
                    session_id: id,
                    status,
                    waiting_for: waiting_for.clone(),
                    answers_file,
                });
            }
            Ok(_) => self.emit_finished(None),
            Err(PlanningError::Interrupted { .. }) => {}
            Err(e) if !e.session_failed() => {}
            Err(e) => {
                let msg = e.to_string();
                let _ = self.update(|s| {
                    s.progress.failed_in = Some(s.status);
                    s.status = PlanStatus::Failed;
                    s.error_message = Some(msg.clone());
                });
                self.emit_finished(Some(msg));
            }
        }
        result
    }

    fn emit_finished(&self, error: Option<String>) {
        let e = self.read(|s| PlanEvent::PlanFinished {
            session_id: s.session_id.clone(),
            status: s.status.to_string(),
            strategy: s.strategy.map(|x| x.as_str().to_string()),
            outputs: s.outputs.clone(),
            total_cost: s.total_cost,
            error,
        });
        self.emit(e);
    }

    async fn drive(&self) -> Result<Outcome, PlanningError> {
        loop {
            if self.cancel.is_cancelled() {
                return Err(self.interrupted());
            }
            match self.read(|s| s.status) {
                PlanStatus::Discovery => {
                    self.strategy_step().await?;
                    self.discovery_step().await?;
                    if let Some(p) = self.ask_questions()? {
                        return Ok(p);
                    }
                    self.update(|s| s.status = PlanStatus::Design)?;
                }
                PlanStatus::Design => {
                    self.design_step().await?;
                    if let Some(p) = self.ask_decisions()? {
                        return Ok(p);
                    }
                    self.draft().await?;
                    self.challenge_loop().await?;
                    self.update(|s| s.status = PlanStatus::Review)?;
                }
                PlanStatus::Review => match self.review()? {
                    None => {
                        return Ok(Outcome::Paused {
                            waiting_for: vec!["review".into()],
                        })
                    }
                    Some(ReviewAnswer::Approve) => {
                        self.update(|s| s.status = PlanStatus::Approved)?;
                        return Ok(Outcome::Approved);
                    }
                    Some(ReviewAnswer::Cancel) => {
                        self.update(|s| s.status = PlanStatus::Cancelled)?;
                        return Ok(Outcome::Cancelled {
                            by_rejections: false,
                        });
                    }
                    Some(ReviewAnswer::Reject(reason)) => {
                        if self.reject(reason)? {
                            return Ok(Outcome::Cancelled {
                                by_rejections: true,
                            });
                        }
                    }
                },
                PlanStatus::Approved => return Ok(Outcome::Approved),
                PlanStatus::Cancelled => {
                    return Ok(Outcome::Cancelled {
                        by_rejections: self.read(|s| s.reject_count >= MAX_REJECTIONS),
                    })
                }
                PlanStatus::Failed => {
                    self.update(|s| {
                        s.status = s.progress.failed_in.unwrap_or(PlanStatus::Discovery)
                    })?;
                }
            }
        }
    }

    fn interrupted(&self) -> PlanningError {
        PlanningError::Interrupted {
            id: self.read(|s| s.session_id.clone()),
        }
    }

    fn agent_def(&self, reviewer: bool) -> Result<&'a AgentDef, PlanningError> {
        let choice = self
            .agents
            .as_ref()
            .ok_or_else(|| PlanningError::Usage("agents not chosen".into()))?;
        let name = if reviewer {
            &choice.reviewer
        } else {
            &choice.generator
        };
        self.config
            .agent(name)
            .ok_or_else(|| PlanningError::Usage(format!("agent '{name}' is not configured")))
    }

    /// The environment of every step (CLI.md's CASCADE_PLAN_* variables).
    fn env(&self, step: Step, output: Option<&Path>) -> Vec<(String, String)> {
        let files = self.files();
        let mut env = vec![
            (
                "CASCADE_PLAN_ID".to_string(),
                self.read(|s| s.session_id.clone()),
            ),
            ("CASCADE_PLAN_STEP".to_string(), step.to_string()),
        ];
        env.extend(
            files
                .plan_files()
                .map(|(var, path)| (var.to_string(), path.display().to_string())),
        );
        if let Some(o) = output {
            env.push(("CASCADE_OUTPUT".to_string(), o.display().to_string()));
        }
        env
    }

    /// Runs one agent call: events, resume, usage record, session id, failure.
    async fn call(
        &self,
        step: Step,
        reviewer: bool,
        prompt: String,
        output: Option<&Path>,
    ) -> Result<cascade_agents::AgentRun, PlanningError> {
        let def = self.agent_def(reviewer)?;
        let role = if reviewer {
            crate::session::Role::Reviewer
        } else {
            crate::session::Role::Generator
        };
        let continue_session = matches!(step, Step::SelfReview | Step::Fix | Step::Revise);
        let ws = self.workspace();
        let snapshot = self.read(|s| s.clone());
        let resume = if continue_session {
            agent::resume_for(def, role, &snapshot, &ws).await?
        } else {
            None
        };
        let attempt = 1 + snapshot
            .llm_calls
            .iter()
            .filter(|c| c.step == step.as_str())
            .count() as u32;
        let env = self.env(step, output);
        // What an api agent may write: the step's output, and the plan
        // files for the steps that write or fix them.
        let mut writes: Vec<PathBuf> = output.map(Path::to_path_buf).into_iter().collect();
        if matches!(
            step,
            Step::Generate | Step::SelfReview | Step::Fix | Step::Revise
        ) {
            writes.extend(self.files().plan_files().map(|(_, p)| p));
        }
        let result = agent::run_call(
            Call {
                step,
                agent: def,
                prompt,
                env,
                writes,
            },
            resume,
            attempt,
            &ws,
            |resumed| {
                self.emit(PlanEvent::StepStarted {
                    step: step.to_string(),
                    agent: def.name.clone(),
                    attempt,
                    resumed_session: resumed,
                })
            },
        )
        .await?;
        let failure = agent::failure(&result.run);
        let record = result.record.clone();
        let total = self.update(|s| {
            if let Some(id) = &result.run.session_id {
                s.record_session(role, &def.name, id);
            }
            s.record_call(record.clone());
            s.total_cost
        })?;
        self.emit(PlanEvent::StepFinished {
            step: step.to_string(),
            agent: def.name.clone(),
            ok: failure.is_none(),
            model: record.model.clone(),
            tokens_in: record.tokens_in,
            tokens_out: record.tokens_out,
            cost: record.cost,
            duration_ms: record.duration_ms,
            total_cost: total,
        });
        if result.run.outcome.cancelled || self.cancel.is_cancelled() {
            return Err(self.interrupted());
        }
        if let Some(message) = failure {
            self.update(|s| s.progress.failed_step = Some(step.to_string()))?;
            return Err(PlanningError::AgentFailed {
                step: step.to_string(),
                agent: def.name.clone(),
                message,
                log: result.run.log_path.clone(),
            });
        }
        Ok(result.run)
    }

    /// A step's output file, or a clear error naming it.
    fn expect_output<T>(
        &self,
        step: Step,
        path: &Path,
        read: impl FnOnce(&Path) -> Result<T, PlanningError>,
    ) -> Result<T, PlanningError> {
        if !path.is_file() {
            return Err(PlanningError::MissingOutput {
                step: step.to_string(),
                path: path.to_path_buf(),
                message: "the agent exited without writing it".into(),
            });
        }
        read(path).map_err(|e| PlanningError::MissingOutput {
            step: step.to_string(),
            path: path.to_path_buf(),
            message: format!("it is not usable: {e}"),
        })
    }

    fn files(&self) -> Files {
        let dir = self.dir();
        Files {
            prd: dir.join(PRD_FILE),
            mega: dir.join(MEGA_FILE),
            design_doc: dir.join(DESIGN_DOC_FILE),
            challenge: dir.join(CHALLENGE_FILE),
        }
    }
}

/// The session's plan files (owned; [`Files::paths`] lends them to prompts).
#[derive(Debug, Clone)]
struct Files {
    prd: PathBuf,
    mega: PathBuf,
    design_doc: PathBuf,
    challenge: PathBuf,
}

impl Files {
    /// The plan files a step may write, with the variable naming each.
    fn plan_files(&self) -> impl Iterator<Item = (&'static str, PathBuf)> {
        [
            ("CASCADE_PRD_PATH", self.prd.clone()),
            ("CASCADE_DESIGN_DOC_PATH", self.design_doc.clone()),
            ("CASCADE_MEGA_PATH", self.mega.clone()),
        ]
        .into_iter()
    }

    fn paths<'p>(&'p self, output: Option<&'p Path>) -> Paths<'p> {
        Paths {
            output,
            prd: &self.prd,
            mega: &self.mega,
            design_doc: &self.design_doc,
            challenge: &self.challenge,
        }
    }

    fn plan(&self, strategy: Strategy) -> &Path {
        if strategy.is_mega() {
            &self.mega
        } else {
            &self.prd
        }
    }
}

/// `cascade plan cancel ID`: marks the session cancelled (no agent runs).
pub fn cancel(store: &SessionStore, id: &str) -> Result<Session, PlanningError> {
    store.load(id)?;
    let _lock = crate::lock::SessionLock::acquire(&store.dir(id), id)?;
    let mut s = store.load(id)?;
    if s.status.is_final() {
        return Err(PlanningError::Finished {
            id: s.session_id.clone(),
            status: s.status.to_string(),
        });
    }
    s.status = PlanStatus::Cancelled;
    s.error_message = Some("cancelled by the person".into());
    store.save(&mut s)?;
    Ok(s)
}
