//! The refs a coordinator makes on the shared remote, and their cleanup.
//!
//! - A job's **base** is pushed as `refs/cascade/base/<sha>` before the job
//!   is published, once per commit. A merge pushes the target's new tip at
//!   once (the base of the stories it unblocks, ready before they ask). A
//!   base goes when no job out uses it, except the newest one of each target
//!   branch, kept until that target's run ends: git pushes only what the
//!   remote's refs do not reach, so it keeps every push incremental.
//! - The **branches** workers pushed (`cascade/<key>/a<n>`, and a conflict's
//!   work pushed for its resolution) go once their story is merged; a failed
//!   story's are kept for inspection, as its local branch is.
//!
//! Every change goes through one task, in rounds: a round is one `git push`
//! with all the bases asked for meanwhile and all the refs that became
//! garbage. A round nobody waits for gathers first (for [`GATHER`], or ten
//! times as long as the last round took, see [`gather_after`]): workers
//! get their bases from the coordinator (the `bases` module), so a base on
//! the remote is a fallback, and one push per merge (a handful of git
//! processes on each side) took a third of a busy coordinator's CPU. A
//! round somebody waits for (a resolution's job, a worker told to fetch)
//! starts at once. The ledger remembers every ref not deleted yet, so a
//! restarted coordinator still deletes them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cascade_engine::executor::Job;
use cascade_process::CancelToken;
use tokio::sync::{watch, Notify};

use crate::error::FleetError;
use crate::git;
use crate::ledger::Ledger;
use crate::protocol::base_ref;

/// How long the changes of a round nobody waits for gather at least...
const GATHER: Duration = Duration::from_secs(1);
/// ...and at most.
const GATHER_MAX: Duration = Duration::from_secs(30);
/// Within those bounds, a round nobody waits for gathers for this many
/// times as long as the last round took, so pushes take about a tenth of
/// the time at most, whatever a push costs on this remote (a round's `git
/// push` grows with the refs and objects the remote has; the rule is the
/// one prd.json's writes follow).
const SPACING: u32 = 10;

/// How long a round nobody waits for gathers after a round that took `last`.
fn gather_after(last: Duration) -> Duration {
    last.saturating_mul(SPACING).clamp(GATHER, GATHER_MAX)
}

/// The coordinator's refs on the shared remote.
pub(crate) struct RemoteRefs {
    repo: PathBuf,
    remote: String,
    ledger: Arc<Ledger>,
    state: Mutex<State>,
    wake: Notify,
    /// Somebody waits for a push: the round starts without gathering.
    urgent: Notify,
    /// Rounds done (waiters of a push watch it).
    rounds: watch::Sender<u64>,
    /// One round at a time.
    turn: tokio::sync::Mutex<()>,
    /// What could not be done, for the run's notices.
    problems: Mutex<Vec<String>>,
}

#[derive(Default)]
struct State {
    /// Bases asked for, with their target branch, in the order asked.
    to_push: Vec<(String, String)>,
    /// Bases on the remote (pushed by this process): their target branch.
    on_remote: HashMap<String, String>,
    /// Bases whose push failed, and why.
    failed: HashMap<String, String>,
    /// Jobs out per base.
    users: HashMap<String, usize>,
    /// Callers waiting for a push to be done.
    waiting: usize,
    /// The newest base pushed per target branch.
    newest: HashMap<String, String>,
    /// Branches to delete.
    doomed: BTreeSet<String>,
    /// Target branches whose run ended (their newest base may go too).
    ended: HashSet<String>,
    /// Also delete the bases an earlier coordinator left (end of a run).
    leftovers: bool,
}

/// The refs one round changes.
#[derive(Default)]
struct Round {
    push: Vec<(String, String)>,
    bases: Vec<String>,
    branches: Vec<String>,
}

impl RemoteRefs {
    pub fn new(repo: PathBuf, remote: String, ledger: Arc<Ledger>) -> RemoteRefs {
        RemoteRefs {
            repo,
            remote,
            ledger,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            urgent: Notify::new(),
            rounds: watch::channel(0).0,
            turn: tokio::sync::Mutex::new(()),
            problems: Mutex::new(Vec::new()),
        }
    }

    /// The task that runs the rounds, until dropped.
    pub fn pusher(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let refs = Arc::clone(self);
        tokio::spawn(async move {
            let mut last = Duration::ZERO;
            loop {
                refs.wake.notified().await;
                if refs.gathers() {
                    tokio::select! {
                        _ = tokio::time::sleep(gather_after(last)) => {}
                        _ = refs.urgent.notified() => {}
                    }
                }
                let started = std::time::Instant::now();
                refs.round().await;
                last = started.elapsed();
            }
        })
    }

    /// A new job uses its base: on the remote once this returns. A
    /// resolution's job also needs the story's work it starts from: pushed
    /// to the attempt's branch (and deleted with the story's branches).
    pub async fn use_base(&self, job: &Job, cancel: &CancelToken) -> Result<(), FleetError> {
        if let Some(r) = &job.resolve {
            let branch = job.attempt_branch();
            let dst = format!("refs/heads/{branch}");
            git::push(&self.repo, &self.remote, &r.commit, &dst, cancel).await?;
            if let Err(e) = self.ledger.pushed(&job.key(), &branch) {
                self.problem(e.to_string());
            }
        }
        let base = job.base.clone();
        let mut rounds = self.rounds.subscribe();
        self.take_base(job);
        let mut waiting = None;
        loop {
            let (done, failed) = self.state(|st| {
                (
                    st.on_remote.contains_key(&base),
                    st.failed.get(&base).cloned(),
                )
            });
            if done {
                return Ok(());
            }
            if let Some(message) = failed {
                self.release_base(&base);
                return Err(FleetError::Git {
                    command: format!("git push {} {}", self.remote, base_ref(&base)),
                    message,
                });
            }
            waiting.get_or_insert_with(|| self.wait_for_rounds());
            tokio::select! {
                _ = rounds.changed() => {}
                _ = cancel.cancelled() => {
                    self.release_base(&base);
                    return Err(FleetError::Cancelled);
                }
            }
        }
    }

    /// A new job uses its base, which is pushed in the next round (without
    /// waiting for it: workers get a base from the coordinator, see the
    /// `bases` module, and [`RemoteRefs::pushed`] says when it is there).
    pub fn take_base(&self, job: &Job) {
        let base = job.base.clone();
        self.state(|st| {
            *st.users.entry(base.clone()).or_default() += 1;
            st.failed.remove(&base);
        });
        self.ask(&base, &job.target_branch);
    }

    /// Whether `base`, used by a job of this coordinator, is on the remote:
    /// waits for its push when that is under way. `false`: not a base of
    /// this coordinator's jobs, or its push failed.
    pub async fn pushed(&self, base: &str) -> bool {
        let mut rounds = self.rounds.subscribe();
        let mut waiting = None;
        loop {
            let (done, pending) = self.state(|st| {
                let used = st.users.get(base).copied().unwrap_or(0) > 0;
                (
                    st.on_remote.contains_key(base),
                    used && !st.failed.contains_key(base),
                )
            });
            if done {
                return true;
            }
            if !pending {
                return false;
            }
            waiting.get_or_insert_with(|| self.wait_for_rounds());
            if rounds.changed().await.is_err() {
                return false;
            }
        }
    }

    /// A job out from before a restart uses `base` (pushed again: the
    /// coordinator that published it may have stopped before its push).
    pub fn adopt_base(&self, base: &str, target: &str) {
        self.state(|st| *st.users.entry(base.to_string()).or_default() += 1);
        self.ask(base, target);
    }

    /// A job using `base` is over.
    pub fn release_base(&self, base: &str) {
        let unused = self.state(|st| {
            let n = st.users.entry(base.to_string()).or_default();
            *n = n.saturating_sub(1);
            *n == 0
        });
        if unused {
            self.wake.notify_one();
        }
    }

    /// Story `key` is merged into `target`, whose tip is now `tip`: the
    /// story's branches go, and `tip` (the base of what comes next) is
    /// pushed right away.
    pub fn merged(&self, key: &str, target: &str, tip: &str) {
        let branches = self.ledger.branches(key);
        self.state(|st| st.doomed.extend(branches));
        self.ask(tip, target);
    }

    /// The run of `target` ends: every ref no job out needs goes now (its
    /// newest base too, and the bases an earlier coordinator left). Returns
    /// what could not be done.
    pub async fn finish(&self, target: &str) -> Vec<String> {
        self.state(|st| {
            st.ended.insert(target.to_string());
            st.leftovers = true;
        });
        self.round().await;
        self.problems
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }

    /// Whether the next round gathers first (nobody waits for it).
    fn gathers(&self) -> bool {
        self.state(|st| st.waiting == 0)
    }

    /// Says a caller waits for pushes until the guard is dropped: the
    /// rounds meanwhile start without gathering.
    fn wait_for_rounds(&self) -> Waiting<'_> {
        self.state(|st| st.waiting += 1);
        self.urgent.notify_one();
        Waiting(self)
    }

    /// Queues `base` for the next round (unless it is there or queued).
    fn ask(&self, base: &str, target: &str) {
        let new = self.state(|st| {
            let known =
                st.on_remote.contains_key(base) || st.to_push.iter().any(|(b, _)| b == base);
            if !known {
                st.to_push.push((base.to_string(), target.to_string()));
            }
            !known
        });
        if new {
            self.wake.notify_one();
        }
    }

    fn state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut st)
    }

    fn problem(&self, message: String) {
        if let Ok(mut p) = self.problems.lock() {
            p.push(message);
        }
    }

    /// One push with every base asked for and every ref that is garbage now.
    async fn round(&self) {
        let _turn = self.turn.lock().await;
        let leftovers = self.state(|st| std::mem::take(&mut st.leftovers));
        let (recorded, out) = if leftovers {
            self.ledger.bases()
        } else {
            Default::default()
        };
        let plan = self.state(|st| st.plan(&recorded, &out));
        if plan.push.is_empty() && plan.bases.is_empty() && plan.branches.is_empty() {
            return;
        }
        let pushes: Vec<String> = plan.push.iter().map(|(b, _)| b.clone()).collect();
        if let Err(e) = self.ledger.add_bases(&pushes) {
            self.problem(e.to_string());
        }
        let updates: Vec<(String, String)> = plan
            .push
            .iter()
            .map(|(b, _)| (b.clone(), base_ref(b)))
            .chain(plan.bases.iter().map(|b| (String::new(), base_ref(b))))
            .chain(
                plan.branches
                    .iter()
                    .map(|b| (String::new(), format!("refs/heads/{b}"))),
            )
            .collect();
        let failed = git::update_refs(&self.repo, &self.remote, &updates).await;
        let ok = |r: &str| !failed.contains_key(r);
        let bases: Vec<String> = plan
            .bases
            .iter()
            .filter(|b| ok(&base_ref(b)))
            .cloned()
            .collect();
        let branches: Vec<String> = plan
            .branches
            .iter()
            .filter(|b| ok(&format!("refs/heads/{b}")))
            .cloned()
            .collect();
        self.state(|st| {
            for (base, target) in &plan.push {
                match failed.get(&base_ref(base)) {
                    Some(why) => {
                        st.failed.insert(base.clone(), why.clone());
                    }
                    None => {
                        st.on_remote.insert(base.clone(), target.clone());
                        st.newest.insert(target.clone(), base.clone());
                    }
                }
            }
            for base in &bases {
                if let Some(target) = st.on_remote.remove(base) {
                    if st.newest.get(&target) == Some(base) {
                        st.newest.remove(&target);
                    }
                }
            }
        });
        let deletions = plan.bases.len() + plan.branches.len();
        let undeleted: Vec<&String> = failed
            .iter()
            .filter(|(r, _)| !plan.push.iter().any(|(b, _)| &&base_ref(b) == r))
            .map(|(r, _)| r)
            .collect();
        if !undeleted.is_empty() {
            self.problem(format!(
                "fleet: could not delete {} of {deletions} ref(s) from the shared remote: {}",
                undeleted.len(),
                failed.values().next().cloned().unwrap_or_default()
            ));
        }
        if let Err(e) = self.ledger.forget(&branches, &bases) {
            self.problem(e.to_string());
        }
        self.rounds.send_modify(|n| *n += 1);
    }
}

/// A caller waiting for pushes ([`RemoteRefs::wait_for_rounds`]).
struct Waiting<'a>(&'a RemoteRefs);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.state(|st| st.waiting = st.waiting.saturating_sub(1));
    }
}

impl State {
    /// What the next round changes: the bases asked for; the bases on the
    /// remote no job uses (but the newest of a target still running); the
    /// doomed branches; with `recorded`, the bases an earlier coordinator
    /// pushed that no job out (`out`) uses.
    fn plan(&mut self, recorded: &[String], out: &BTreeSet<String>) -> Round {
        let unused = |b: &String| self.users.get(b).copied().unwrap_or(0) == 0;
        // A base pushed ahead for a target whose run ended is not needed.
        let push: Vec<(String, String)> = std::mem::take(&mut self.to_push)
            .into_iter()
            .filter(|(b, target)| !(self.ended.contains(target) && unused(b)))
            .collect();
        let pushing = |b: &String| push.iter().any(|(p, _)| p == b);
        let mut bases: Vec<String> = self
            .on_remote
            .iter()
            .filter(|(b, target)| {
                unused(b)
                    && !pushing(b)
                    && (self.ended.contains(*target) || self.newest.get(*target) != Some(*b))
            })
            .map(|(b, _)| b.clone())
            .collect();
        bases.extend(
            recorded
                .iter()
                .filter(|b| {
                    !self.on_remote.contains_key(*b)
                        && !out.contains(*b)
                        && unused(b)
                        && !pushing(b)
                })
                .cloned(),
        );
        bases.sort();
        bases.dedup();
        Round {
            push,
            bases,
            branches: std::mem::take(&mut self.doomed).into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        let mut st = State::default();
        for (b, t) in [("b1", "main"), ("b2", "main"), ("f1", "feature")] {
            st.on_remote.insert(b.into(), t.into());
        }
        st.newest.insert("main".into(), "b2".into());
        st.newest.insert("feature".into(), "f1".into());
        st
    }

    #[test]
    fn bases_go_when_unused_but_the_newest_of_a_running_target_stays() {
        let mut st = state();
        st.users.insert("b1".into(), 1);
        st.doomed.insert("cascade/s1/a1".into());
        let r = st.plan(&[], &BTreeSet::new());
        // b1 is used, b2 and f1 are their targets' newest.
        assert!(r.bases.is_empty(), "{:?}", r.bases);
        assert_eq!(r.branches, ["cascade/s1/a1"]);
        assert!(st.doomed.is_empty());

        st.users.insert("b1".into(), 0);
        st.ended.insert("feature".into());
        let r = st.plan(&[], &BTreeSet::new());
        assert_eq!(r.bases, ["b1", "f1"]);
    }

    #[test]
    fn a_base_pushed_ahead_for_a_run_that_ended_is_not_pushed() {
        let mut st = state();
        st.to_push.push(("tip".into(), "main".into()));
        st.to_push.push(("ftip".into(), "feature".into()));
        st.ended.insert("main".into());
        let r = st.plan(&[], &BTreeSet::new());
        assert_eq!(r.push, [("ftip".to_string(), "feature".to_string())]);
        assert_eq!(r.bases, ["b1", "b2"]);
    }

    /// `git <args>` in `dir` (the crate's own runner); its stdout, trimmed.
    async fn git(dir: &std::path::Path, args: &[&str]) -> String {
        crate::git::git(dir, args, &CancelToken::new())
            .await
            .unwrap()
    }

    #[test]
    fn rounds_gather_ten_times_as_long_as_the_last_round_took_within_bounds() {
        // A cheap push: a second.
        assert_eq!(gather_after(Duration::ZERO), GATHER);
        assert_eq!(gather_after(Duration::from_millis(40)), GATHER);
        // A push of 300 ms: three seconds, so pushing takes a tenth at most.
        assert_eq!(
            gather_after(Duration::from_millis(300)),
            Duration::from_secs(3)
        );
        // A very slow remote: never more than the cap.
        assert_eq!(gather_after(Duration::from_secs(20)), GATHER_MAX);
        assert_eq!(gather_after(Duration::MAX), GATHER_MAX);
    }

    #[tokio::test]
    async fn a_base_somebody_waits_for_is_pushed_at_once_with_what_gathered() {
        let tmp = tempfile::tempdir().unwrap();
        let (repo, remote) = (tmp.path().join("repo"), tmp.path().join("remote.git"));
        std::fs::create_dir(&repo).unwrap();
        git(tmp.path(), &["init", "-q", "--bare", "remote.git"]).await;
        git(&repo, &["init", "-q", "-b", "main"]).await;
        git(
            &repo,
            &["remote", "add", "origin", &remote.to_string_lossy()],
        )
        .await;
        let mut tips = Vec::new();
        for n in 1..=2 {
            let args = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q"];
            git(
                &repo,
                &[&args[..], &["--allow-empty", "-m", &format!("c{n}")]].concat(),
            )
            .await;
            tips.push(git(&repo, &["rev-parse", "HEAD"]).await);
        }
        let ledger = Arc::new(Ledger::open(tmp.path().join("ledger.json")));
        let refs = Arc::new(RemoteRefs::new(repo.clone(), "origin".into(), ledger));
        let pusher = refs.pusher();

        // A merge's tip is pushed ahead, when the round has gathered.
        assert!(refs.gathers());
        refs.merged("s1", "main", &tips[0]);
        // A job's base its publisher waits for does not wait for the
        // gathering: its round starts at once and takes the tip along.
        let job = crate::protocol::test_job(None, "s2", 1, &tips[1]);
        refs.use_base(&job, &CancelToken::new()).await.unwrap();
        assert_eq!(*refs.rounds.borrow(), 1, "one round for both");
        let on_remote = git(&repo, &["ls-remote", "origin", "refs/cascade/base/*"]).await;
        for tip in &tips {
            assert!(on_remote.contains(&base_ref(tip)), "{tip}: {on_remote}");
        }
        // Nobody waits any more: the rounds gather again.
        assert!(refs.gathers());
        {
            let _waiting = refs.wait_for_rounds();
            assert!(!refs.gathers());
        }
        assert!(refs.gathers());
        pusher.abort();
    }

    #[test]
    fn leftovers_of_an_earlier_coordinator_go_unless_a_job_out_uses_them() {
        let mut st = state();
        st.to_push.push(("new".into(), "main".into()));
        let recorded = vec!["old1".to_string(), "old2".to_string(), "new".to_string()];
        let out: BTreeSet<String> = ["old2".to_string()].into();
        let r = st.plan(&recorded, &out);
        assert_eq!(r.push, [("new".to_string(), "main".to_string())]);
        // b1 (unused, not newest) and old1; not old2 (a job out), not new.
        assert_eq!(r.bases, ["b1", "old1"]);
    }
}
