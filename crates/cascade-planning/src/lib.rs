//! cascade-planning: from a one-line goal to an approved, challenged plan.
//!
//! What it owns: planning sessions (`.cascade/plans/planning-<uuid>/session.json`,
//! atomic writes, schema version; phases discovery -> design -> review ->
//! approved, plus cancelled and failed), the strategy choice (Plan Cascade's
//! self-assessment -> DIRECT / HYBRID_AUTO / HYBRID_WORKTREE / MEGA_PLAN),
//! discovery questions and design decisions, the generate -> self-review ->
//! validate/fix -> challenge -> revise loop, design docs (Plan Cascade's
//! two-level `design_doc.json`: checks, import of .json/.md/.html), and the
//! one "ask an agent for a valid plan file" generator that mega-plan feature
//! PRDs use too. It runs agents through cascade-agents and validates with
//! cascade-plan; it knows nothing about worktrees or gates, and never prints.
//!
//! # API summary
//!
//! - Sessions: [`Session`]`::new(goal, `[`SessionOptions`]`)`, [`SessionStore`]`::new(cascade_dir)`
//!   `.save(&mut s)`, `.load(id)`, `.list()` (newest first), `.dir(id)`,
//!   `.answers_path(id)`. [`PlanStatus`], [`Question`], [`Decision`], [`LlmCall`].
//! - Running: [`Planner`]`::new(&agents_config, &detector, root, cascade_dir,
//!   &mut person, |event| ...)` with `.with_answers(`[`Answers`]`)`,
//!   `.with_review(Some(`[`ReviewAnswer`]`))`, `.with_yes(bool)`,
//!   `.with_cancel(token)`; `.run(&mut session).await -> Result<`[`Outcome`]`,
//!   `[`PlanningError`]`>` (`Approved`, `Cancelled{by_rejections}`,
//!   `Paused{waiting_for}`). The person is a [`Person`] (terminal) or
//!   [`Nobody`]. [`install`]`(&store, &mut session, dir)` copies an approved
//!   plan where it is built; [`cancel`]`(&store, id)`. One process works on a
//!   session at a time ([`lock::SessionLock`], `session.lock` held by the
//!   kernel, with its pid; a killed holder's lock is gone with it).
//! - Events: [`PlanEvent`] (serde: `{"event": "plan_started", ...}`).
//! - Generator: [`generator::make_valid`]`(&author, &`[`generator::Job`]`, start,
//!   progress)` with a [`generator::PlanAuthor`]; checks: [`check::check_plan`],
//!   [`check::check_prd`], [`design_doc::check`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use cascade_planning::*;
//! use std::path::Path;
//! let root = Path::new("/repo");
//! let cascade_dir = root.join(".cascade");
//! let loaded = cascade_agents::AgentsConfig::load(None, root)?;
//! let detector = cascade_agents::Detector::from_env();
//! let store = SessionStore::new(&cascade_dir);
//! let mut session = Session::new("Add OAuth login", SessionOptions::defaults())?;
//! store.save(&mut session)?;
//! let mut nobody = Nobody;
//! let mut planner = Planner::new(&loaded.config, &detector, root, &cascade_dir, &mut nobody, |e| {
//!     let _ = serde_json::to_string(&e);
//! });
//! match planner.run(&mut session).await? {
//!     Outcome::Paused { waiting_for } => println!("waiting for {waiting_for:?}"),
//!     other => println!("{other:?}"),
//! }
//! # Ok(()) }
//! ```

pub mod agent;
pub mod answers;
pub mod check;
pub mod design_doc;
pub mod error;
pub mod events;
pub mod generator;
pub mod lock;
pub mod prompts;
pub mod session;
pub mod steps;
pub mod strategy;
pub mod verdict;
pub mod workflow;

pub use answers::{check_size as check_answer_size, Answers, ReviewAnswer, MAX_ANSWER_BYTES};
pub use error::PlanningError;
pub use events::PlanEvent;
pub use session::{
    Decision, LlmCall, PlanStatus, Question, QuestionType, Session, SessionOptions, SessionStore,
};
pub use steps::Step;
pub use strategy::Strategy;
pub use verdict::Verdict;
pub use workflow::{cancel, install, summarize, Nobody, Outcome, Person, Planner, Summary};
