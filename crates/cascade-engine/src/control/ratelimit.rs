//! Rate limits per agent: a cooldown shared by every story that uses the
//! agent, and AIMD concurrency.
//!
//! When an agent's run ends rate limited, the agent cools down: for the
//! Retry-After its provider gave, else exponentially (2s, 4s, 8s, ... up to
//! five minutes, with +-20% jitter so parallel stories do not return in
//! step). No story starts that agent before the cooldown ends. Its
//! concurrency (how many stories may run it at once) halves on every limit
//! and grows by one after each quiet period without one, up to `--parallel`
//! (additive increase, multiplicative decrease, as TCP does). A rate-limited
//! attempt is not charged to the story (see the `story` module); when the
//! cooldown is longer than [`LONG_COOLDOWN`], the next attempt moves to a
//! fallback agent unless `--no-fallback` is given.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use cascade_process::CancelToken;
use tokio::sync::Notify;

/// First cooldown without Retry-After.
pub const BASE_COOLDOWN: Duration = Duration::from_secs(2);
/// The longest cooldown without Retry-After.
pub const MAX_COOLDOWN: Duration = Duration::from_secs(300);
/// A cooldown longer than this sends stories to a fallback agent.
pub const LONG_COOLDOWN: Duration = Duration::from_secs(60);
/// Time without a limit after which an agent's concurrency grows by one.
pub const QUIET_PERIOD: Duration = Duration::from_secs(30);
/// Rate-limited attempts a story may have in one run before it fails as
/// `rate_limited` (they cost no retry, but a provider that never lets up
/// must not keep a run alive forever).
pub const MAX_RATE_LIMITED: u32 = 20;

#[derive(Debug)]
struct AgentLimit {
    until: Option<Instant>,
    concurrency: usize,
    running: usize,
    /// Limits in a row (the exponent of the backoff).
    strikes: u32,
    last_change: Instant,
}

/// One cooldown that started.
#[derive(Debug, Clone, PartialEq)]
pub struct Cooldown {
    pub duration: Duration,
    /// When it ends, wall clock.
    pub until: SystemTime,
    pub retry_after: bool,
    pub concurrency: usize,
}

/// The rate-limit state of every agent of a run.
#[derive(Debug)]
pub struct Limits {
    agents: Mutex<HashMap<String, AgentLimit>>,
    changed: Notify,
    /// The most stories an agent may run at once (`--parallel`).
    max: usize,
    /// Time without a limit after which an agent's concurrency grows by one.
    quiet: Duration,
}

/// Held while a story runs the agent.
#[derive(Debug)]
pub struct AgentPermit {
    limits: Arc<Limits>,
    agent: String,
}

impl Drop for AgentPermit {
    fn drop(&mut self) {
        if let Ok(mut m) = self.limits.agents.lock() {
            if let Some(l) = m.get_mut(&self.agent) {
                l.running = l.running.saturating_sub(1);
            }
        }
        self.limits.changed.notify_waiters();
    }
}

impl Limits {
    pub fn new(max: usize) -> Limits {
        Limits {
            agents: Mutex::new(HashMap::new()),
            changed: Notify::new(),
            max: max.max(1),
            quiet: QUIET_PERIOD,
        }
    }

    /// The same with another quiet period (tests).
    pub fn with_quiet_period(mut self, quiet: Duration) -> Limits {
        self.quiet = quiet;
        self
    }

    /// How many stories may run `agent` at once now.
    pub fn concurrency(&self, agent: &str) -> usize {
        self.agents
            .lock()
            .ok()
            .and_then(|m| m.get(agent).map(|l| l.concurrency))
            .unwrap_or(self.max)
    }

    fn entry<'a>(&self, m: &'a mut HashMap<String, AgentLimit>, agent: &str) -> &'a mut AgentLimit {
        m.entry(agent.to_string()).or_insert_with(|| AgentLimit {
            until: None,
            concurrency: self.max,
            running: 0,
            strikes: 0,
            last_change: Instant::now(),
        })
    }

    /// The cooldown left for `agent`, if it is cooling down.
    pub fn cooldown_left(&self, agent: &str) -> Option<Duration> {
        let m = self.agents.lock().ok()?;
        let until = m.get(agent)?.until?;
        until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// Waits until `agent` is out of its cooldown and under its concurrency,
    /// then counts the caller as running it. `on_wait` is called once with
    /// the wait left when the caller has to wait for a cooldown.
    pub async fn acquire(
        self: &Arc<Self>,
        agent: &str,
        cancel: &CancelToken,
        mut on_wait: impl FnMut(Duration),
    ) -> Result<AgentPermit, ()> {
        let mut told = false;
        loop {
            // Registered before the check, so a release in between is not missed.
            let changed = self.changed.notified();
            let wait = {
                let mut m = self.agents.lock().map_err(|_| ())?;
                let (max, quiet) = (self.max, self.quiet);
                let l = self.entry(&mut m, agent);
                if l.concurrency < max && l.last_change.elapsed() >= quiet {
                    l.concurrency += 1;
                    l.last_change = Instant::now();
                }
                match l
                    .until
                    .and_then(|u| u.checked_duration_since(Instant::now()))
                {
                    Some(left) if !left.is_zero() => Some(left),
                    _ if l.running < l.concurrency => {
                        l.running += 1;
                        return Ok(AgentPermit {
                            limits: Arc::clone(self),
                            agent: agent.to_string(),
                        });
                    }
                    // At its concurrency: until a permit comes back (or a
                    // quiet period raises the limit).
                    _ => None,
                }
            };
            if let Some(left) = wait {
                if !told {
                    told = true;
                    on_wait(left);
                }
            }
            let sleep = wait.unwrap_or(self.quiet);
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = changed => {}
                _ = cancel.cancelled() => return Err(()),
            }
        }
    }

    /// Records a rate limit of `agent`: starts (or extends) its cooldown and
    /// halves its concurrency.
    pub fn rate_limited(&self, agent: &str, retry_after: Option<Duration>) -> Cooldown {
        let out = {
            let mut m = match self.agents.lock() {
                Ok(m) => m,
                Err(e) => e.into_inner(),
            };
            let l = self.entry(&mut m, agent);
            l.strikes = l.strikes.saturating_add(1);
            let duration = match retry_after {
                Some(d) => d,
                None => backoff(l.strikes),
            };
            let now = Instant::now();
            let until = now + duration;
            // Another story's longer cooldown stands.
            let until = l.until.filter(|u| *u > until).unwrap_or(until);
            l.until = Some(until);
            l.concurrency = (l.concurrency / 2).max(1);
            l.last_change = now;
            let left = until.saturating_duration_since(now);
            Cooldown {
                duration: left,
                until: SystemTime::now() + left,
                retry_after: retry_after.is_some(),
                concurrency: l.concurrency,
            }
        };
        self.changed.notify_waiters();
        out
    }

    /// A run of `agent` got through: the backoff starts over.
    pub fn succeeded(&self, agent: &str) {
        if let Ok(mut m) = self.agents.lock() {
            if let Some(l) = m.get_mut(agent) {
                l.strikes = 0;
            }
        }
    }

    /// Every agent cooling down now: (agent, time left, concurrency).
    pub fn cooling(&self) -> Vec<(String, Duration, usize)> {
        let Ok(m) = self.agents.lock() else {
            return Vec::new();
        };
        let now = Instant::now();
        let mut out: Vec<_> = m
            .iter()
            .filter_map(|(a, l)| {
                let left = l.until?.checked_duration_since(now)?;
                (!left.is_zero()).then(|| (a.clone(), left, l.concurrency))
            })
            .collect();
        out.sort();
        out
    }
}

/// 2s, 4s, 8s, ... capped, with +-20% jitter.
fn backoff(strikes: u32) -> Duration {
    let exp = BASE_COOLDOWN
        .saturating_mul(1u32 << strikes.saturating_sub(1).min(16))
        .min(MAX_COOLDOWN);
    // Jitter from the clock's nanoseconds: no dependency for one number.
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let factor = 0.8 + 0.4 * (nanos % 1000) as f64 / 1000.0;
    exp.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_a_cap() {
        for (strikes, base) in [(1u32, 2.0f64), (2, 4.0), (3, 8.0), (30, 300.0)] {
            let d = backoff(strikes).as_secs_f64();
            assert!(
                d >= base * 0.8 - 1e-9 && d <= base * 1.2 + 1e-9,
                "{strikes}: {d}"
            );
        }
    }

    #[tokio::test]
    async fn cooldown_is_shared_and_concurrency_halves() {
        let limits = Arc::new(Limits::new(4));
        let cancel = CancelToken::new();
        let c = limits.rate_limited("codex", Some(Duration::from_millis(300)));
        assert!(c.retry_after);
        assert_eq!(c.concurrency, 2);
        assert!(limits.cooldown_left("codex").is_some());
        assert!(limits.cooldown_left("claude").is_none());
        // Another agent is not held back.
        let _other = limits
            .acquire("claude", &cancel, |_| panic!("no wait"))
            .await
            .unwrap();
        // Every story of this agent waits for the cooldown.
        let started = Instant::now();
        let mut waited = None;
        let p1 = limits
            .acquire("codex", &cancel, |d| waited = Some(d))
            .await
            .unwrap();
        assert!(waited.is_some());
        assert!(started.elapsed() >= Duration::from_millis(250));
        // Concurrency 2: a third waits until one is given back.
        let _p2 = limits.acquire("codex", &cancel, |_| {}).await.unwrap();
        let l2 = Arc::clone(&limits);
        let c2 = cancel.clone();
        let third = tokio::spawn(async move { l2.acquire("codex", &c2, |_| {}).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!third.is_finished());
        drop(p1);
        tokio::time::timeout(Duration::from_secs(5), third)
            .await
            .expect("released")
            .unwrap()
            .unwrap();
        // A shorter cooldown never cuts a longer one.
        limits.rate_limited("gemini", Some(Duration::from_secs(100)));
        let c = limits.rate_limited("gemini", Some(Duration::from_secs(1)));
        assert!(c.duration > Duration::from_secs(90));
        assert_eq!(limits.cooling()[0].0, "gemini");
    }

    #[tokio::test]
    async fn concurrency_grows_by_one_per_quiet_period_up_to_the_limit() {
        let limits = Arc::new(Limits::new(4).with_quiet_period(Duration::from_millis(50)));
        let cancel = CancelToken::new();
        limits.rate_limited("a", Some(Duration::ZERO));
        limits.rate_limited("a", Some(Duration::ZERO));
        assert_eq!(limits.concurrency("a"), 1);
        // Each acquisition after a quiet period adds one, never past --parallel.
        for want in [2, 3, 4, 4] {
            tokio::time::sleep(Duration::from_millis(60)).await;
            drop(limits.acquire("a", &cancel, |_| {}).await.unwrap());
            assert_eq!(limits.concurrency("a"), want);
        }
    }
}
