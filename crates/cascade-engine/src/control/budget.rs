//! Budgets: how much a run and each story may spend (USD) and how long the
//! run may take.
//!
//! Limits come from the command line (`--max-cost`, `--max-story-cost`,
//! `--max-duration`), else from prd.json: `metadata.budget` (a number: the
//! run's USD; or `{"max_cost", "max_story_cost", "max_duration"}`) and a
//! story's own `budget` (its USD). Spend is what the agents reported
//! (or what the price table made of their tokens), summed over every
//! attempt the run state records, earlier runs included: a run resumed with
//! a raised budget goes on from what was spent. An attempt whose agent ran
//! but reported neither cost nor tokens has an unknown spend, which is said
//! as such, never counted as 0.
//!
//! Checks happen before each attempt (the engine starts none once the run
//! is over budget; a story over its own budget fails as `budget`) and after
//! each agent run (with `--hard-budget`, running agents are stopped at once).
//! The duration limit is measured from the start of this invocation.
//!
//! Several engines can spend from one budget: a mega run gives every
//! feature's engine the same [`Pool`] (the run's `--max-cost` and
//! `--max-duration`), to which each engine reports its own spend under its
//! feature's name; the run's limit holds for the sum, and once it is
//! exhausted no feature starts another attempt. A feature's own prd.json
//! `metadata.budget` then limits that feature alone.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::state::RunState;

/// The limits a run was given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Budget {
    /// `--max-cost`: USD for the whole run.
    pub max_cost: Option<f64>,
    /// `--max-story-cost`: USD per story.
    pub max_story_cost: Option<f64>,
    /// `--max-duration`.
    pub max_duration: Option<Duration>,
    /// `--hard-budget`: stop running agents when the run budget is exhausted.
    pub hard: bool,
}

impl Budget {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.max_cost.is_some() || self.max_story_cost.is_some() || self.max_duration.is_some()
    }

    /// Fills the limits not given on the command line from prd.json's
    /// `metadata.budget`. A malformed value is an error naming it.
    pub fn with_prd(mut self, metadata: Option<&Value>) -> Result<Budget, BudgetError> {
        let Some(b) = metadata.and_then(|m| m.get("budget")) else {
            return Ok(self);
        };
        let usd = |v: &Value, key: &'static str| -> Result<f64, BudgetError> {
            v.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .ok_or_else(|| BudgetError::NotUsd {
                    key,
                    got: v.to_string(),
                })
        };
        match b {
            Value::Null => {}
            Value::Number(_) => {
                if self.max_cost.is_none() {
                    self.max_cost = Some(usd(b, "budget")?);
                }
            }
            Value::Object(o) => {
                for (k, v) in o {
                    match k.as_str() {
                        "max_cost" => {
                            let f = usd(v, "budget.max_cost")?;
                            self.max_cost.get_or_insert(f);
                        }
                        "max_story_cost" => {
                            let f = usd(v, "budget.max_story_cost")?;
                            self.max_story_cost.get_or_insert(f);
                        }
                        "max_duration" => {
                            let secs = v
                                .as_u64()
                                .ok_or_else(|| BudgetError::NotSeconds(v.to_string()))?;
                            self.max_duration.get_or_insert(Duration::from_secs(secs));
                        }
                        other => return Err(BudgetError::UnknownField(other.to_string())),
                    }
                }
            }
            other => return Err(BudgetError::NotBudget(other.to_string())),
        }
        Ok(self)
    }
}

/// A budget in prd.json that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("metadata.{key} must be a number of USD >= 0 (got {got})")]
    NotUsd { key: &'static str, got: String },
    #[error("metadata.budget.max_duration must be whole seconds (got {0})")]
    NotSeconds(String),
    #[error("metadata.budget.{0} is not a budget field (max_cost, max_story_cost, max_duration)")]
    UnknownField(String),
    #[error("metadata.budget must be a number of USD or an object with max_cost, max_story_cost, max_duration (got {0})")]
    NotBudget(String),
    #[error("story '{story}': budget must be a number of USD >= 0 (got {got})")]
    Story { story: String, got: String },
}

/// What was spent, as far as anybody said.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    /// Sum of the reported (or priced) costs.
    pub known_usd: f64,
    /// Attempts whose agent ran and reported no cost nor tokens.
    pub unknown: u32,
}

impl Spend {
    /// "$1.23", with the unknown part said.
    pub fn describe(&self) -> String {
        match (self.known_usd > 0.0, self.unknown) {
            (_, 0) => format!("${:.2}", self.known_usd),
            (false, n) => format!(
                "unknown ({n} attempt{} reported no cost or tokens)",
                if n == 1 { "" } else { "s" }
            ),
            (true, n) => format!(
                "${:.2} reported, plus {n} attempt{} whose spend is unknown",
                self.known_usd,
                if n == 1 { "" } else { "s" }
            ),
        }
    }

    /// The known spend, `None` when nothing is known at all.
    pub fn known(&self) -> Option<f64> {
        (self.known_usd > 0.0 || self.unknown == 0).then_some(self.known_usd)
    }
}

/// The spend of the attempts of `state` (of one story when `story` is
/// given: found through the state's index, not by a scan).
pub fn spend(state: &RunState, story: Option<&str>) -> Spend {
    let mut out = Spend::default();
    let stories: &[crate::state::StoryState] = match story {
        None => &state.stories,
        Some(id) => state.story(id).map(std::slice::from_ref).unwrap_or(&[]),
    };
    for s in stories {
        for a in &s.attempts {
            match a.cost_usd {
                Some(c) => out.known_usd += c,
                // The agent ran (it had a pid) and said nothing about its spend.
                None if a.pid.is_some() && a.outcome.is_some() => out.unknown += 1,
                None => {}
            }
        }
    }
    out
}

/// Why the run (or a feature of a mega run) may start no more attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct Exhausted {
    /// `cost` or `duration`.
    pub limit: &'static str,
    /// `run`, or `feature` for a feature's own budget in a mega run.
    pub scope: &'static str,
    /// The limit that was reached (USD for `cost`, seconds for `duration`).
    pub limit_usd: Option<f64>,
    pub limit_secs: Option<u64>,
    pub message: String,
    pub spend: Spend,
}

impl Exhausted {
    /// The `budget_exhausted` event that announces it (of the whole run, or
    /// of a mega feature's own budget).
    pub fn event(&self) -> crate::events::Event {
        crate::events::Event::BudgetExhausted {
            scope: self.scope.into(),
            story: None,
            limit: self.limit.to_string(),
            limit_usd: self.limit_usd,
            limit_secs: self.limit_secs,
            spent_usd: self.spend.known(),
            unknown_attempts: self.spend.unknown,
            message: self.message.clone(),
        }
    }
}

/// A run budget several engines spend from (see the module doc); a plain
/// run has one of its own.
#[derive(Debug)]
pub struct Pool {
    /// The run's limits (`max_story_cost` is not the pool's: each engine
    /// applies it to its stories).
    pub budget: Budget,
    started: Instant,
    exhausted: Mutex<Option<Exhausted>>,
    /// Spend of each engine, by part (a feature's name; `""` in a plain run).
    parts: Mutex<HashMap<String, Spend>>,
    /// Fired when the run budget runs out under `--hard-budget`: every
    /// engine of the pool stops its running agents.
    stop: cascade_process::CancelToken,
}

impl Pool {
    pub fn new(budget: Budget) -> Pool {
        Pool {
            budget,
            started: Instant::now(),
            exhausted: Mutex::new(None),
            parts: Mutex::new(HashMap::new()),
            stop: cascade_process::CancelToken::new(),
        }
    }

    /// What every engine of the pool links its agents to (see `stop`).
    pub fn stop_token(&self) -> cascade_process::CancelToken {
        self.stop.clone()
    }

    /// Sets the spend of `part` (what its state records so far).
    pub fn record(&self, part: &str, spend: Spend) {
        if let Ok(mut parts) = self.parts.lock() {
            parts.insert(part.to_string(), spend);
        }
    }

    /// Sets the spend of `part` and checks the run's limits at once (spend
    /// outside any engine, such as a mega run's PRD agent, which no
    /// engine's check before an attempt would see in time).
    pub fn charge(&self, part: &str, spend: Spend) -> Option<Exhausted> {
        self.record(part, spend);
        self.check()
    }

    /// The spend of every part together.
    pub fn total(&self) -> Spend {
        let parts = match self.parts.lock() {
            Ok(p) => p,
            Err(_) => return Spend::default(),
        };
        parts.values().fold(Spend::default(), |mut t, s| {
            t.known_usd += s.known_usd;
            t.unknown += s.unknown;
            t
        })
    }

    /// Whether the run budget ran out.
    pub fn exhausted(&self) -> Option<Exhausted> {
        self.exhausted.lock().ok().and_then(|e| e.clone())
    }

    /// Time left before `--max-duration`, if one is set.
    pub fn time_left(&self) -> Option<Duration> {
        self.budget
            .max_duration
            .map(|d| d.saturating_sub(self.started.elapsed()))
    }

    /// Checks the run's limits against the parts' spend; returns the
    /// exhaustion the first time it happens (later: `None`).
    fn check(&self) -> Option<Exhausted> {
        let mut slot = self.exhausted.lock().ok()?;
        if slot.is_some() {
            return None;
        }
        let spend = self.total();
        let over_time = self
            .budget
            .max_duration
            .filter(|d| self.started.elapsed() >= *d);
        let found = match over_time {
            Some(max) => Some(Exhausted {
                limit: "duration",
                scope: "run",
                limit_usd: None,
                limit_secs: Some(max.as_secs()),
                message: format!(
                    "the run reached its time budget of {}s (--max-duration) having spent {}; {}; `cascade resume --max-duration <more>` continues",
                    max.as_secs(),
                    spend.describe(),
                    what_now(self.budget.hard),
                ),
                spend,
            }),
            None => over_cost(&self.budget, spend).map(|max| Exhausted {
                limit: "cost",
                scope: "run",
                limit_usd: Some(max),
                limit_secs: None,
                message: format!(
                    "the run spent {} of its ${max:.2} budget (--max-cost); {}; `cascade resume --max-cost <higher>` continues",
                    spend.describe(),
                    what_now(self.budget.hard),
                ),
                spend,
            }),
        };
        if let Some(e) = &found {
            *slot = Some(e.clone());
        }
        found
    }
}

fn what_now(hard: bool) -> &'static str {
    if hard {
        "running agents are stopped (--hard-budget)"
    } else {
        "running work finishes, nothing new starts"
    }
}

/// `budget.max_cost` when `spend` reached it.
fn over_cost(budget: &Budget, spend: Spend) -> Option<f64> {
    budget.max_cost.filter(|m| spend.known_usd >= *m)
}

/// The budget of one engine's run: the run's [`Pool`] (its own, or a mega
/// run's shared one), and its own limits.
#[derive(Debug)]
pub struct Tracker {
    /// This engine's limits: `max_story_cost`, `hard`, and (in a shared
    /// pool) its own `max_cost` from its prd.json.
    pub budget: Budget,
    /// Per story USD from prd.json (`budget` of the story).
    story_limits: HashMap<String, f64>,
    pool: std::sync::Arc<Pool>,
    /// This engine's name in the pool; `None` when the pool is its own.
    part: Option<String>,
    /// A feature's own budget ran out (in a shared pool).
    own: Mutex<Option<Exhausted>>,
}

impl Tracker {
    /// The budget of a plain run: a pool of its own with `budget`'s limits.
    pub fn new(budget: Budget, story_limits: HashMap<String, f64>) -> Tracker {
        Tracker {
            pool: std::sync::Arc::new(Pool::new(budget.clone())),
            budget,
            story_limits,
            part: None,
            own: Mutex::new(None),
        }
    }

    /// The budget of engine `part` of a run whose engines share `pool`.
    pub fn pooled(
        budget: Budget,
        story_limits: HashMap<String, f64>,
        pool: std::sync::Arc<Pool>,
        part: &str,
    ) -> Tracker {
        Tracker {
            budget,
            story_limits,
            pool,
            part: Some(part.to_string()),
            own: Mutex::new(None),
        }
    }

    /// Whether the run budget (or, in a shared pool, this engine's own)
    /// ran out.
    pub fn exhausted(&self) -> Option<Exhausted> {
        self.pool
            .exhausted()
            .or_else(|| self.own.lock().ok().and_then(|e| e.clone()))
    }

    /// Time left before `--max-duration`, if one is set.
    pub fn time_left(&self) -> Option<Duration> {
        self.pool.time_left()
    }

    /// Whether exhausting the budget stops running agents.
    pub fn hard(&self) -> bool {
        self.budget.hard || self.pool.budget.hard
    }

    /// The pool's hard stop (see [`Pool::stop_token`]).
    pub fn pool_stop(&self) -> cascade_process::CancelToken {
        self.pool.stop_token()
    }

    /// Checks the run's limits against `state`; returns the exhaustion the
    /// first time it happens (later calls: `None`, see [`Tracker::exhausted`]).
    pub fn check_run(&self, state: &RunState) -> Option<Exhausted> {
        // This runs before every attempt: the run's attempts are summed only
        // when a limit needs them.
        let limited = |b: &Budget| b.max_cost.is_some() || b.max_duration.is_some();
        if !limited(&self.budget) && !limited(&self.pool.budget) {
            return None;
        }
        let mine = spend(state, None);
        let Some(part) = &self.part else {
            self.pool.record("", mine);
            return self.pool.check();
        };
        self.pool.record(part, mine);
        if let Some(e) = self.pool.check() {
            return Some(e);
        }
        // The feature's own budget (its prd.json's metadata.budget).
        let mut own = self.own.lock().ok()?;
        if own.is_some() {
            return None;
        }
        let max = over_cost(&self.budget, mine)?;
        let e = Exhausted {
            limit: "cost",
            scope: "feature",
            limit_usd: Some(max),
            limit_secs: None,
            message: format!(
                "feature '{part}' spent {} of its ${max:.2} budget (metadata.budget of its prd.json); {}; raise it and resume",
                mine.describe(),
                what_now(self.budget.hard),
            ),
            spend: mine,
        };
        *own = Some(e.clone());
        Some(e)
    }

    /// The USD limit of story `id`: the command line's, else its own `budget`.
    pub fn story_limit(&self, id: &str) -> Option<f64> {
        self.budget
            .max_story_cost
            .or_else(|| self.story_limits.get(id).copied())
    }

    /// Why story `id` may not start another attempt, if it may not.
    pub fn check_story(&self, state: &RunState, id: &str) -> Option<(f64, Spend, String)> {
        let max = self.story_limit(id)?;
        let spend = spend(state, Some(id));
        (spend.known_usd >= max).then(|| {
            (
                max,
                spend,
                format!(
                    "story '{id}' spent {} of its ${max:.2} budget; not retried (raise --max-story-cost or the story's `budget` and resume)",
                    spend.describe()
                ),
            )
        })
    }
}

/// Per-story limits from prd.json (`budget` on a story, USD).
pub fn story_limits(prd: &cascade_plan::Prd) -> Result<HashMap<String, f64>, BudgetError> {
    let mut out = HashMap::new();
    for s in &prd.stories {
        if let Some(v) = s.extra.get("budget") {
            let usd = v
                .as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .ok_or_else(|| BudgetError::Story {
                    story: s.id.clone(),
                    got: v.to_string(),
                })?;
            out.insert(s.id.clone(), usd);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::AttemptRecord;

    fn attempt(cost: Option<f64>, ran: bool) -> AttemptRecord {
        AttemptRecord {
            pid: ran.then_some(1),
            outcome: Some("failed".into()),
            cost_usd: cost,
            ..AttemptRecord::started(1, "a".into(), "implementation".into(), String::new())
        }
    }

    fn state(attempts: &[(&str, Option<f64>, bool)]) -> RunState {
        let ids: Vec<String> = attempts.iter().map(|a| a.0.to_string()).collect();
        let mut st = RunState::new(
            "r".into(),
            "prd.json".into(),
            "main".into(),
            ".".into(),
            ids,
        );
        for (id, cost, ran) in attempts {
            st.story_mut(id).attempts.push(attempt(*cost, *ran));
        }
        st
    }

    #[test]
    fn spend_sums_reports_and_says_what_is_unknown() {
        let st = state(&[
            ("a", Some(1.5), true),
            ("b", None, true),
            ("b", Some(0.5), true),
            ("c", None, false),
        ]);
        let all = spend(&st, None);
        assert_eq!(
            all,
            Spend {
                known_usd: 2.0,
                unknown: 1
            }
        );
        assert!(all.describe().contains("unknown"), "{}", all.describe());
        let only_unknown = spend(&state(&[("x", None, true)]), None);
        assert_eq!(only_unknown.known(), None);
        assert!(only_unknown.describe().starts_with("unknown"));
        assert!(!only_unknown.describe().contains("$0"));
    }

    #[test]
    fn run_and_story_limits() {
        let st = state(&[("a", Some(3.0), true), ("b", Some(1.0), true)]);
        let limits = HashMap::from([("b".to_string(), 0.5)]);
        let t = Tracker::new(
            Budget {
                max_cost: Some(5.0),
                ..Budget::default()
            },
            limits,
        );
        assert!(t.check_run(&st).is_none());
        assert!(t.check_story(&st, "a").is_none());
        let (max, _, msg) = t.check_story(&st, "b").unwrap();
        assert_eq!(max, 0.5);
        assert!(msg.contains("$1.00 of its $0.50"), "{msg}");
        let st = state(&[("a", Some(3.0), true), ("b", Some(2.5), true)]);
        let e = t.check_run(&st).unwrap();
        assert_eq!(e.limit, "cost");
        assert!(e.message.contains("--max-cost"), "{}", e.message);
        // Said once; remembered.
        assert!(t.check_run(&st).is_none());
        assert!(t.exhausted().is_some());
    }

    #[test]
    fn engines_of_a_pool_spend_from_one_budget() {
        let pool = std::sync::Arc::new(Pool::new(Budget {
            max_cost: Some(4.0),
            ..Budget::default()
        }));
        let own = Budget {
            max_cost: Some(2.2),
            ..Budget::default()
        };
        let a = Tracker::pooled(own, HashMap::new(), pool.clone(), "auth");
        let b = Tracker::pooled(Budget::default(), HashMap::new(), pool.clone(), "api");
        assert!(a.check_run(&state(&[("s", Some(2.0), true)])).is_none());
        assert!(b.check_run(&state(&[("s", Some(1.5), true)])).is_none());
        assert_eq!(pool.total().known_usd, 3.5);
        // Feature a's own limit (2.3 of 2.2; 3.8 of the run's 4): a alone stops.
        let e = a.check_run(&state(&[("s", Some(2.3), true)])).unwrap();
        assert_eq!((e.scope, e.limit), ("feature", "cost"));
        assert!(a.exhausted().is_some() && b.exhausted().is_none());
        // Together over the run's limit (4.1 of 4): every engine of the pool stops.
        let e = b.check_run(&state(&[("s", Some(1.8), true)])).unwrap();
        assert_eq!((e.scope, e.limit_usd), ("run", Some(4.0)));
        assert!(b.exhausted().is_some() && pool.exhausted().is_some());
        assert!(a.check_run(&state(&[("s", Some(2.3), true)])).is_none());
        assert_eq!(a.exhausted().unwrap().scope, "run");
    }

    #[test]
    fn prd_budget_fills_what_the_command_line_left() {
        let meta = serde_json::json!({"budget": {"max_cost": 2.0, "max_story_cost": 0.5, "max_duration": 60}});
        let b = Budget {
            max_cost: Some(9.0),
            ..Budget::default()
        }
        .with_prd(Some(&meta))
        .unwrap();
        assert_eq!(b.max_cost, Some(9.0));
        assert_eq!(b.max_story_cost, Some(0.5));
        assert_eq!(b.max_duration, Some(Duration::from_secs(60)));
        let b = Budget::default()
            .with_prd(Some(&serde_json::json!({"budget": 3})))
            .unwrap();
        assert_eq!(b.max_cost, Some(3.0));
        let err = Budget::default()
            .with_prd(Some(&serde_json::json!({"budget": "lots"})))
            .unwrap_err();
        assert_eq!(err, BudgetError::NotBudget("\"lots\"".into()));
        assert!(err.to_string().contains("metadata.budget"), "{err}");
        let err = Budget::default()
            .with_prd(Some(&serde_json::json!({"budget": {"max_cots": 1}})))
            .unwrap_err();
        assert_eq!(err, BudgetError::UnknownField("max_cots".into()));
        assert!(err.to_string().contains("max_cots"), "{err}");
    }
}
