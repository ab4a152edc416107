//! `cascade plan`: from a goal to an approved plan, asking a person what
//! only a person can answer.
//!
//! The workflow itself is cascade-planning's [`Planner`]; this module turns
//! flags into session options, picks who answers (the terminal, or nobody:
//! then answers files and `plan answer|approve|reject|cancel`), renders the
//! planner's events (text, or NDJSON with `--json`), installs an approved
//! plan where it is built (the repository, or a new worktree for
//! HYBRID_WORKTREE) and, with `--run`, runs it with the same code as
//! `cascade approve --auto-run` / `cascade mega approve --auto-run`.
//! Exit codes: 0 approved (or cancelled on request), 1 failed / rejected /
//! cancelled by the third rejection, 2 bad input, 3 paused for a person,
//! 130 interrupted.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cascade_agents::{AgentsConfig, Detector};
use cascade_planning::{
    Answers, Nobody, Outcome, Person, PlanEvent, PlanStatus, Planner, PlanningError, ReviewAnswer,
    Session, SessionOptions, SessionStore, Strategy,
};
use cascade_process::CancelToken;
use clap::{Args, FromArgMatches, Subcommand, ValueEnum};

use super::run_flags::{Invocation, RunFlags};
use super::signals::StopSignals;
use super::{CliResult, Failure, Global, EXIT_FAILED, EXIT_OK};

mod install;
mod render;
mod term;

/// Exit code: paused for a person (answers, decisions or approval).
pub const EXIT_PAUSED: u8 = 3;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum StrategyArg {
    /// The planning agent assesses the task and picks one
    Auto,
    /// One story
    Direct,
    /// prd.json + design_doc.json in the repository
    Hybrid,
    /// The same on a new branch in its own worktree, merged when done
    Worktree,
    /// mega-plan.json + a project design_doc.json
    Mega,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub command: Option<PlanCommand>,
    #[command(flatten)]
    pub start: StartArgs,
}

#[derive(Debug, Args)]
pub struct StartArgs {
    /// What the plan should achieve, in a sentence
    #[arg(value_name = "GOAL", required = true)]
    pub goal: Option<String>,
    /// Import a design document (.json as is; .md or .html converted by the agent)
    #[arg(long, value_name = "PATH")]
    pub design_doc: Option<PathBuf>,
    /// How big the plan is and where it lives
    #[arg(long, value_enum, default_value_t = StrategyArg::Auto)]
    pub strategy: StrategyArg,
    /// Write the approved plan files (plan and design_doc.json) to DIR instead of where Plan Cascade's mode expects them
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
    /// Ask nobody: assumptions answer questions, recommendations decide, an APPROVED challenge approves
    #[arg(long)]
    pub auto: bool,
    /// Most discovery questions to ask
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub max_questions: u32,
    /// Fix rounds after a failed local validation
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub format_iterations: u32,
    /// Revise + re-challenge rounds on NEEDS_REVISION
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub planning_iterations: u32,
}

/// Flags every command that continues a session takes.
#[derive(Debug, Args, Clone, Default)]
pub struct CommonArgs {
    /// Answers without a terminal: {"q-1": "...", "d-1": {"option": "opt-a", "rationale": "..."}, "review": "approve"}
    #[arg(long, value_name = "FILE")]
    pub answers: Option<PathBuf>,
    /// After approval, run the plan at once (approve --auto-run)
    #[arg(long)]
    pub run: bool,
    /// Print NDJSON events instead of text
    #[arg(long)]
    pub json: bool,
    /// The options of the run `--run` starts, the same as `approve`'s. Three
    /// of them also steer planning: `--agent` is the planning agent,
    /// `--review-agent` the one that challenges the plan (default: another
    /// agent than the planner) and `--yes` approves the plan at review
    /// without asking.
    #[command(flatten, next_help_heading = "Run options (the run --run starts)")]
    pub flags: RunFlags,
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Continue a session (no ID: list the sessions, newest first)
    Resume {
        #[arg(value_name = "ID")]
        id: Option<String>,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// The planning sessions of this repository, newest first
    List {
        #[arg(long)]
        json: bool,
    },
    /// One session: status, questions, decisions, verdict, usage and cost
    Show {
        #[arg(value_name = "ID")]
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Answer a question (q-N), make a decision (d-N: "OPTION" or "OPTION: rationale") or review ("approve", "reject: REASON"), then continue
    Answer {
        #[arg(value_name = "ID")]
        id: String,
        #[arg(value_name = "KEY")]
        key: String,
        #[arg(value_name = "VALUE")]
        value: String,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Approve the plan under review
    Approve {
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Reject the plan under review: back to design (the third rejection cancels)
    Reject {
        #[arg(value_name = "ID")]
        id: String,
        /// Why: it goes into the next design and generation prompts
        #[arg(long, value_name = "TEXT")]
        reason: String,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Cancel a session
    Cancel {
        #[arg(value_name = "ID")]
        id: String,
        #[arg(long)]
        json: bool,
    },
}

/// The repository, its `.cascade/`, and the agents configuration.
struct Context {
    root: PathBuf,
    paths: cascade_git::RepoPaths,
    store: SessionStore,
    config: AgentsConfig,
}

fn context(g: &Global) -> Result<Context, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(anyhow::anyhow!("cannot read the current directory: {e}")))?;
    let paths = cascade_git::RepoPaths::discover(&cwd).map_err(|e| {
        let e = e.to_string();
        // git's own message may already say how to fix it.
        if e.contains("git init") {
            Failure::usage(anyhow::anyhow!(
                "cascade plan works inside a git repository: {e}"
            ))
        } else {
            Failure::usage(anyhow::anyhow!(
                "{e} (cascade plan works inside a git repository: run `git init` first)"
            ))
        }
    })?;
    let root = paths.main_root.clone();
    let loaded = AgentsConfig::load(g.agents.as_deref(), &cwd).map_err(Failure::usage)?;
    for w in &loaded.warnings {
        errln!("warning: {w}");
    }
    Ok(Context {
        store: SessionStore::new(&paths.cascade_dir()),
        root,
        paths,
        config: loaded.config,
    })
}

fn planning_failure(e: PlanningError) -> Failure {
    if e.is_usage() {
        Failure::usage(e)
    } else {
        Failure::failed(e)
    }
}

pub fn run(g: &Global, a: PlanArgs) -> CliResult {
    match a.command {
        None => start(g, a.start),
        Some(PlanCommand::Resume { id, common }) => resume(g, id, common),
        Some(PlanCommand::List { json }) => list(g, json),
        Some(PlanCommand::Show { id, json }) => show(g, &id, json),
        Some(PlanCommand::Answer {
            id,
            key,
            value,
            common,
        }) => answer(g, &id, &key, &value, common),
        Some(PlanCommand::Approve { id, common }) => {
            continue_with(g, &id, common, Some(ReviewAnswer::Approve))
        }
        Some(PlanCommand::Reject { id, reason, common }) => {
            if reason.trim().is_empty() {
                return Err(Failure::usage(anyhow::anyhow!(
                    "--reason is empty: say what is wrong with the plan (it goes into the next design and generation prompts)"
                )));
            }
            cascade_planning::check_answer_size("review", &reason).map_err(planning_failure)?;
            let reason = reason.trim().to_string();
            continue_with(g, &id, common, Some(ReviewAnswer::Reject(reason)))
        }
        Some(PlanCommand::Cancel { id, json }) => cancel(g, &id, json),
    }
}

fn start(g: &Global, a: StartArgs) -> CliResult {
    let goal = a.goal.clone().unwrap_or_default();
    if goal.trim().is_empty() {
        return Err(Failure::usage(anyhow::anyhow!(
            "the goal is empty: say what the plan should achieve, e.g. cascade plan \"Add OAuth login\""
        )));
    }
    let ctx = context(g)?;
    // Bad run options are refused before any agent plans.
    if a.common.run {
        a.common.flags.run_options(false)?;
    }
    let (agent, review_agent) = (&a.common.flags.agent, &a.common.flags.review_agent);
    for (flag, name) in [("--agent", agent), ("--review-agent", review_agent)] {
        if let Some(n) = name {
            if ctx.config.agent(n).is_none() {
                return Err(Failure::usage(anyhow::anyhow!(
                    "unknown agent '{n}' given to {flag} (known agents: {})",
                    ctx.config.names().join(", ")
                )));
            }
        }
    }
    let design_doc = match &a.design_doc {
        Some(p) if !p.is_file() => {
            return Err(Failure::usage(anyhow::anyhow!(
                "--design-doc '{}': no such file (pass a .json, .md or .html design document)",
                p.display()
            )))
        }
        Some(p) => {
            // Checked now (exit 2 before any agent runs), kept absolute for resumes.
            cascade_planning::design_doc::import(p).map_err(planning_failure)?;
            Some(std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        }
        None => None,
    };
    let output = install::plan_output(a.out.as_deref())?;
    let options = SessionOptions {
        agent: agent.clone(),
        review_agent: review_agent.clone(),
        forced_strategy: match a.strategy {
            StrategyArg::Auto => None,
            StrategyArg::Direct => Some(Strategy::Direct),
            StrategyArg::Hybrid => Some(Strategy::HybridAuto),
            StrategyArg::Worktree => Some(Strategy::HybridWorktree),
            StrategyArg::Mega => Some(Strategy::MegaPlan),
        },
        design_doc,
        max_questions: a.max_questions,
        format_iterations: a.format_iterations,
        planning_iterations: a.planning_iterations,
        auto: a.auto,
        output: Some(output),
    };
    let answers = load_answers(a.common.answers.as_deref())?;
    let mut session = Session::new(&goal, options).map_err(planning_failure)?;
    ctx.store.save(&mut session).map_err(planning_failure)?;
    let _ = ctx.paths.ensure_excluded(&["/.cascade/"]);
    drive(g, &ctx, session, &a.common, answers, None)
}

fn load_answers(path: Option<&Path>) -> Result<Answers, Failure> {
    match path {
        None => Ok(Answers::default()),
        Some(p) if !p.is_file() => Err(Failure::usage(anyhow::anyhow!(
            "--answers '{}': no such file",
            p.display()
        ))),
        Some(p) => Answers::load(p).map_err(planning_failure),
    }
}

fn resume(g: &Global, id: Option<String>, common: CommonArgs) -> CliResult {
    let ctx = context(g)?;
    let id = match id {
        Some(id) => id,
        None => match pick_session(&ctx, common.json)? {
            Some(id) => id,
            None => return Ok(super::EXIT_USAGE),
        },
    };
    continue_with(g, &id, common, None)
}

/// `plan resume` without an id: on a terminal, choose from the list; else
/// print the list and exit 2.
fn pick_session(ctx: &Context, json: bool) -> Result<Option<String>, Failure> {
    let (sessions, _) = ctx.store.list();
    let open: Vec<&Session> = sessions.iter().filter(|s| !s.status.is_final()).collect();
    let interactive = !json && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    if interactive && !open.is_empty() {
        errln!("planning sessions (newest first):");
        for (i, s) in open.iter().enumerate() {
            errln!("  {}. {}", i + 1, render::list_line(s));
        }
        err!("continue which one? [1-{}] ", open.len());
        if let Some(line) = super::signals::read_line_unless_stopped() {
            if let Ok(n) = line.trim().parse::<usize>() {
                if (1..=open.len()).contains(&n) {
                    return Ok(Some(open[n - 1].session_id.clone()));
                }
            }
        }
        return Err(Failure::usage(anyhow::anyhow!(
            "no session chosen; continue one with `cascade plan resume ID`"
        )));
    }
    print_list(&sessions, json);
    if open.is_empty() && !sessions.is_empty() {
        errln!(
            "error: no session given, and every session here is finished (listed above); start a new one with `cascade plan \"GOAL\"`"
        );
    } else {
        errln!(
            "error: no session given: continue one with `cascade plan resume ID` (sessions listed above, newest first)"
        );
    }
    Ok(None)
}

fn print_list(sessions: &[Session], json: bool) {
    if json {
        let list: Vec<_> = sessions.iter().map(render::list_json).collect();
        outln!("{}", serde_json::json!({ "sessions": list }));
    } else if sessions.is_empty() {
        outln!("no planning sessions here; start one with `cascade plan \"GOAL\"`");
    } else {
        for s in sessions {
            outln!("{}", render::list_line(s));
        }
    }
}

fn list(g: &Global, json: bool) -> CliResult {
    let ctx = context(g)?;
    let (sessions, bad) = ctx.store.list();
    for (id, e) in bad {
        errln!("warning: session {id} cannot be read: {e}");
    }
    print_list(&sessions, json);
    Ok(EXIT_OK)
}

fn show(g: &Global, id: &str, json: bool) -> CliResult {
    let ctx = context(g)?;
    let s = ctx.store.load(id).map_err(planning_failure)?;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&s).unwrap_or_else(|_| "{}".into())
        );
    } else {
        out!("{}", render::show(&s, &ctx.store));
    }
    Ok(EXIT_OK)
}

fn answer(g: &Global, id: &str, key: &str, value: &str, common: CommonArgs) -> CliResult {
    cascade_planning::check_answer_size(key, value).map_err(planning_failure)?;
    let ctx = context(g)?;
    let session = ctx.store.load(id).map_err(planning_failure)?;
    let known = key == "review"
        || session.questions.iter().any(|q| q.id == key)
        || session.decisions.iter().any(|d| d.id == key);
    if !known {
        let mut keys: Vec<String> = session.questions.iter().map(|q| q.id.clone()).collect();
        keys.extend(session.decisions.iter().map(|d| d.id.clone()));
        keys.push("review".into());
        return Err(Failure::usage(anyhow::anyhow!(
            "session {id} has no question or decision '{key}' (known: {})",
            keys.join(", ")
        )));
    }
    // An answer already used changes nothing now: say so rather than
    // accept it silently.
    let used = session
        .questions
        .iter()
        .find(|q| q.id == key)
        .and_then(|q| q.answer.clone())
        .or_else(|| {
            session
                .decisions
                .iter()
                .find(|d| d.id == key)
                .and_then(|d| d.selected_option_id.clone())
        });
    if let Some(given) = used {
        return Err(Failure::usage(anyhow::anyhow!(
            "{key} of session {id} is answered already ({given}); to change the plan, reject it at review with a reason: `cascade plan reject {id} --reason \"...\"`"
        )));
    }
    if key == "review" {
        let review = ReviewAnswer::parse(value).ok_or_else(|| {
            Failure::usage(anyhow::anyhow!(
                "'{value}' is not a review answer: use approve, \"reject: REASON\" or cancel"
            ))
        })?;
        return continue_with(g, id, common, Some(review));
    }
    // Checked before it is kept: a bad answer saved in answers.json would
    // stop every later resume.
    let mut given = Answers::default();
    given.set_text(key, value).map_err(planning_failure)?;
    if let (Some(d), Some((option, _))) = (
        session.decisions.iter().find(|d| d.id == key),
        given.decision(key),
    ) {
        if d.option(&option).is_none() {
            return Err(Failure::usage(anyhow::anyhow!(
                "{key} (\"{}\") has no option '{option}' (options: {}); give one of them as \"OPTION-ID: rationale\"",
                d.topic,
                d.options
                    .iter()
                    .map(|o| format!("{} = {}", o.id, o.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    let path = ctx.store.answers_path(id);
    let mut answers = Answers::load(&path).map_err(planning_failure)?;
    answers.merge(given);
    answers.save(&path).map_err(planning_failure)?;
    continue_with(g, id, common, None)
}

fn continue_with(
    g: &Global,
    id: &str,
    common: CommonArgs,
    review: Option<ReviewAnswer>,
) -> CliResult {
    let ctx = context(g)?;
    let session = ctx.store.load(id).map_err(planning_failure)?;
    if review.is_some() && session.status != PlanStatus::Review {
        return Err(Failure::usage(anyhow::anyhow!(
            "session {id} is in {}, not waiting for a review; continue it with `cascade plan resume {id}`",
            session.status
        )));
    }
    if session.status == PlanStatus::Approved && !common.run {
        return Err(Failure::usage(anyhow::anyhow!(
            "session {id} is approved already; its plan is in {} (run it with `cascade plan resume {id} --run`)",
            session
                .outputs
                .get("prd")
                .or(session.outputs.get("mega_plan"))
                .cloned()
                .unwrap_or_default()
        )));
    }
    let answers = load_answers(common.answers.as_deref())?;
    drive(g, &ctx, session, &common, answers, review)
}

fn cancel(g: &Global, id: &str, json: bool) -> CliResult {
    let ctx = context(g)?;
    let s = cascade_planning::cancel(&ctx.store, id).map_err(planning_failure)?;
    if json {
        outln!(
            "{}",
            serde_json::json!({"event": "plan_finished", "session_id": s.session_id,
                "status": "cancelled", "outputs": s.outputs, "total_cost": s.total_cost})
        );
    } else {
        outln!("planning session {} cancelled", s.session_id);
    }
    Ok(EXIT_OK)
}

/// Runs the planner on `session` and acts on where it stopped.
fn drive(
    g: &Global,
    ctx: &Context,
    mut session: Session,
    common: &CommonArgs,
    answers: Answers,
    review: Option<ReviewAnswer>,
) -> CliResult {
    let interactive =
        !common.json && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    // Answers given once stay with the session (a rejection or a resume
    // later finds them in its answers.json); the new ones win.
    if !answers.is_empty() {
        let path = ctx.store.answers_path(&session.session_id);
        let mut kept = Answers::load(&path).map_err(planning_failure)?;
        kept.merge(answers.clone());
        kept.save(&path).map_err(planning_failure)?;
    }
    let detector = Detector::from_env().cache_dir(ctx.paths.cascade_dir());
    // The project's settings hold for the planning agents as for a run's:
    // their logs keep to `resources.max_log_mb`.
    let project = cascade_engine::config::ProjectConfig::load(&ctx.paths.cascade_dir())
        .map_err(Failure::usage)?;
    let rt = super::runtime()?;
    let cancel = CancelToken::new();
    let json = common.json;
    let mut terminal = term::Terminal;
    let mut nobody = Nobody;
    let person: &mut dyn Person = if interactive {
        &mut terminal
    } else {
        &mut nobody
    };
    let root = ctx.root.clone();
    // With --json, plan_finished is held back: on approval it is printed
    // after the plan is installed, with the installed files in `outputs`.
    let finished: Arc<Mutex<Option<serde_json::Value>>> = Arc::default();
    let held = finished.clone();
    let (result, stop) = rt.block_on(async {
        let stop = StopSignals::watch(cancel.clone());
        let mut planner = Planner::new(
            &ctx.config,
            &detector,
            &root,
            &ctx.paths.cascade_dir(),
            person,
            move |e: PlanEvent| {
                if json && matches!(e, PlanEvent::PlanFinished { .. }) {
                    if let (Ok(mut slot), Ok(v)) = (held.lock(), serde_json::to_value(&e)) {
                        *slot = Some(v);
                        return;
                    }
                }
                render::event(&e, json)
            },
        )
        .with_answers(answers)
        .with_review(review)
        .with_yes(common.flags.yes)
        .with_log_limit(project.resources.log_limit())
        .with_cancel(cancel.clone());
        (planner.run(&mut session).await, stop)
    });
    drop(rt);
    let finished = finished.lock().ok().and_then(|mut f| f.take());
    if !matches!(result, Ok(Outcome::Approved)) {
        if let Some(v) = &finished {
            outln!("{v}");
        }
    }
    match result {
        Err(PlanningError::Interrupted { id }) => {
            errln!(
                "interrupted; the session is saved: continue it with `cascade plan resume {id}`"
            );
            Ok(stop.exit_code())
        }
        Err(e) => {
            if e.session_failed() {
                errln!(
                    "the session is saved as failed; `cascade plan resume {}` retries the failed step",
                    session.session_id
                );
            }
            Err(planning_failure(e))
        }
        // Ctrl-C at a prompt: saved, and said so like any interruption.
        Ok(Outcome::Paused { .. }) if super::signals::stop_requested() => {
            errln!(
                "interrupted; the session is saved: continue it with `cascade plan resume {}`",
                session.session_id
            );
            Ok(stop.exit_code())
        }
        Ok(Outcome::Paused { waiting_for }) => {
            render::paused(&session, &ctx.store, &waiting_for, json);
            Ok(EXIT_PAUSED)
        }
        Ok(Outcome::Cancelled { by_rejections }) => {
            if by_rejections {
                errln!(
                    "error: the plan was rejected {} times; the session {} is cancelled (start again with a clearer goal)",
                    session.reject_count, session.session_id
                );
                Ok(EXIT_FAILED)
            } else {
                if !json {
                    outln!("planning session {} cancelled", session.session_id);
                }
                Ok(EXIT_OK)
            }
        }
        Ok(Outcome::Approved) => approved(g, ctx, session, common, interactive, finished),
    }
}

/// Installs the approved plan and runs it when asked to.
fn approved(
    g: &Global,
    ctx: &Context,
    mut session: Session,
    common: &CommonArgs,
    interactive: bool,
    finished: Option<serde_json::Value>,
) -> CliResult {
    let installed = install::install_approved(ctx, &mut session, common);
    if let Some(mut v) = finished {
        // The held-back plan_finished: `outputs` now name the installed
        // files (or still the drafts when installing failed).
        v["outputs"] = serde_json::json!(session.outputs);
        if let Ok(i) = &installed {
            v["installed"] = serde_json::json!({
                "plan": i.written.first(),
                "design_doc": i.written.get(1),
                "place": i.place,
            });
        }
        outln!("{v}");
    }
    let install::Installed {
        dir,
        branch,
        written,
        ..
    } = installed?;
    let strategy = session.strategy.unwrap_or(Strategy::HybridAuto);
    if !common.json {
        outln!(
            "plan approved: {}",
            written
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(b) = &branch {
            outln!("it is built on branch {b} in {}", dir.display());
        }
    }
    let run_now = common.run || (interactive && super::signals::ask_yes_no("run the plan now?"));
    if !run_now {
        if !common.json {
            // Name the file unless discovery in `dir` finds exactly it
            // (a data-directory plan loses to an older ./prd.json there).
            let (name, flag) = if strategy.is_mega() {
                ("mega-plan.json", "--mega")
            } else {
                ("prd.json", "--prd")
            };
            let file = match written.first() {
                Some(p) if *p != dir.join(name) => format!(" {flag} {}", p.display()),
                _ => String::new(),
            };
            let how = if strategy.is_mega() {
                format!("cascade mega approve --auto-run{file}")
            } else if let Some(b) = &branch {
                format!(
                    "cascade -C {} approve --auto-run{file}`, then merge branch `{b}",
                    dir.display()
                )
            } else {
                format!("cascade approve --auto-run{file}")
            };
            outln!("run it with `{how}`");
        }
        return Ok(EXIT_OK);
    }
    run_plan(
        g,
        ctx,
        strategy,
        &dir,
        branch.as_deref(),
        &written[0],
        common,
    )
}

/// `approve --auto-run` (or `mega approve --auto-run`) on the approved plan,
/// then, for a worktree plan, the merge of its branch.
fn run_plan(
    g: &Global,
    ctx: &Context,
    strategy: Strategy,
    dir: &Path,
    branch: Option<&str>,
    plan: &Path,
    common: &CommonArgs,
) -> CliResult {
    let back = std::env::current_dir().ok();
    std::env::set_current_dir(dir).map_err(|e| {
        Failure::failed(anyhow::anyhow!("cannot change to '{}': {e}", dir.display()))
    })?;
    // `approve --auto-run` with the run options given to `plan`.
    let mut flags = common.flags.clone();
    flags.auto_run = true;
    let call = Invocation {
        dry_run: false,
        json: common.json,
    };
    let code = if strategy.is_mega() {
        let args = super::mega_cmd::MegaApproveArgs {
            mega: Some(plan.to_path_buf()),
            run: super::mega_cmd::MegaRunFlags {
                prd_agent: None,
                flags,
            },
            call,
        };
        super::mega_cmd::run(g, super::mega_cmd::MegaCommand::Approve(args), None)
    } else {
        let args = super::run_cmd::RunArgs {
            prd: Some(plan.to_path_buf()),
            flags,
            call,
        };
        super::run_cmd::approve(g, args)
    };
    if let Some(b) = back {
        let _ = std::env::set_current_dir(b);
    }
    let code = code?;
    let Some(branch) = branch else {
        return Ok(code);
    };
    if code != EXIT_OK {
        errln!(
            "the plan's branch {branch} is kept unmerged in {}",
            dir.display()
        );
        return Ok(code);
    }
    merge_plan_branch(ctx, branch, dir)
}

/// Merges a HYBRID_WORKTREE plan's branch into the branch checked out at
/// the repository root, then removes its worktree.
fn merge_plan_branch(ctx: &Context, branch: &str, dir: &Path) -> CliResult {
    let target = cascade_engine::gitops::current_branch(&ctx.root)
        .map_err(|e| Failure::failed(anyhow::anyhow!("{e}")))?
        .ok_or_else(|| {
            Failure::failed(anyhow::anyhow!(
                "the repository root is on a detached HEAD: merge {branch} yourself"
            ))
        })?;
    let outcome = cascade_git::merge::merge_into(
        &ctx.paths,
        &target,
        branch,
        &format!("Merge plan branch {branch}"),
        &cascade_git::merge::MergeOptions::default(),
    )
    .map_err(|e| Failure::failed(anyhow::anyhow!("merging {branch} into {target}: {e}")))?;
    if let cascade_git::merge::MergeOutcome::Conflict { files } = outcome {
        return Err(Failure::failed(anyhow::anyhow!(
            "merging {branch} into {target} conflicts in {}; the branch is kept in {}",
            files.join(", "),
            dir.display()
        )));
    }
    let _ = cascade_git::worktree::remove(&ctx.paths, dir, true);
    outln!("merged {branch} into {target}");
    Ok(EXIT_OK)
}

/// Parses `argv` as the arguments of a subcommand (so defaults stay clap's).
pub(super) fn parse_args<T: Args + FromArgMatches>(
    name: &'static str,
    argv: &[&str],
) -> Result<T, Failure> {
    let cmd = T::augment_args(clap::Command::new(name));
    let m = cmd
        .try_get_matches_from(argv)
        .map_err(|e| Failure::failed(anyhow::anyhow!("internal: {e}")))?;
    T::from_arg_matches(&m).map_err(|e| Failure::failed(anyhow::anyhow!("internal: {e}")))
}

fn short_id(id: &str) -> String {
    id.trim_start_matches("planning-").chars().take(8).collect()
}
