//! A story whose merge conflicted (or whose merged tree failed the gates)
//! with a story still running: which running stories it is against, and
//! the wait for them to end before it retries.
//!
//! Retrying such a story on the backoff timer meets the same conflict
//! again while the other story is still at work: replayed history without
//! dependencies burnt 4 attempts in 14 s that way. So the retry waits
//! until every story it is against has ended (merged or failed): it then
//! starts from a tip that holds their work. The wait is not an attempt.
//!
//! A story is against a running one when the files it touches (the files
//! its merges conflicted in, and its work since it left the target
//! branch: in its worktree, or on its branch when the worktree is not
//! here) meet the files the running one declares (`files` in prd.json) or
//! touches so far, read the same way. The branches count for a fleet run,
//! where worktrees are on the workers: a story's commits are here once its result is, and
//! a story being merged (on the merge train) is the one a conflict is
//! most often against. A story that waits is never waited
//! for, so two stories cannot wait for each other: the later of the two
//! retries on the timer. A waiting story lends its slot of parallelism
//! to the next story meanwhile (the run's loop gives it one back first).

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;

use crate::ctx::Ctx;
use crate::failure::Failure;
use crate::owner::{Ask, Change};
use crate::retry::FailureKind;
use crate::state::StoryStatus;

/// The stories of a run waiting for others to end.
#[derive(Debug, Default)]
pub(crate) struct Waiting(Mutex<HashSet<String>>);

impl Waiting {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a story waits for: the running stories its failure is against,
/// and the files they share with it. The story counts as waiting while
/// this lives (dropped when the wait ends, however it ends).
pub(crate) struct Against<'a> {
    pub stories: Vec<String>,
    pub files: Vec<String>,
    waiting: &'a Waiting,
    id: String,
}

impl Drop for Against<'_> {
    fn drop(&mut self) {
        self.waiting.lock().remove(&self.id);
    }
}

/// The story `id` is marked waiting for the running stories its `failure`
/// is against (`own`: its worktree, for the files it touches); `None`
/// when the failure is not a conflict of that kind, or is against no
/// running story that is not itself waiting.
pub(crate) async fn against<'a>(
    ctx: &'a Ctx,
    id: &str,
    failure: &Failure,
    own: Option<PathBuf>,
) -> Option<Against<'a>> {
    if !matches!(
        failure.kind,
        FailureKind::MergeConflict | FailureKind::Integration
    ) {
        return None;
    }
    let me = id.to_string();
    let (mine, running) = ctx
        .state
        .read(move |st| {
            let work = |s: &crate::state::StoryState| Work {
                worktree: s.worktree.clone().map(PathBuf::from),
                branch: s.branch.clone(),
            };
            let mine = st
                .stories
                .iter()
                .find(|s| s.id == me)
                .map(|s| (work(s), s.conflicted_files.clone()));
            let running = st
                .stories
                .iter()
                .filter(|s| s.status == StoryStatus::Running && s.id != me)
                .map(|s| (s.id.clone(), work(s)))
                .collect::<Vec<_>>();
            (mine, running)
        })
        .await?;
    if running.is_empty() {
        return None;
    }
    let (mut my_work, conflicted) = mine.unwrap_or_default();
    my_work.worktree = own.or(my_work.worktree);
    let mut files: BTreeSet<String> = conflicted.into_iter().collect();
    files.extend(my_work.touches(ctx).await);
    let mut stories = Vec::new();
    let mut shared = BTreeSet::new();
    for (other, work) in running {
        let mut theirs = declared(ctx, &other);
        theirs.extend(work.touches(ctx).await);
        let common: Vec<&String> = files.intersection(&theirs).collect();
        if !common.is_empty() {
            shared.extend(common.into_iter().cloned());
            stories.push(other);
        }
    }
    // Under the lock: a story that started waiting meanwhile is not
    // waited for, and this one counts as waiting from now.
    let mut waiting = ctx.control.waiting.lock();
    stories.retain(|s| !waiting.contains(s));
    if stories.is_empty() {
        return None;
    }
    waiting.insert(id.to_string());
    Some(Against {
        stories,
        files: shared.into_iter().collect(),
        waiting: &ctx.control.waiting,
        id: id.to_string(),
    })
}

/// Waits until none of the stories of `against` runs any more, the slot
/// of parallelism of story `id` lent meanwhile: the run's loop answers
/// once they have ended and a slot is free again (or drops the answer when
/// the run ends first).
pub(crate) async fn wait_for(ctx: &Ctx, id: &str, against: &Against<'_>) {
    let (resume, resumed) = tokio::sync::oneshot::channel();
    ctx.state.send(Change::Ask(Ask::Lend {
        id: id.to_string(),
        until: against.stories.clone(),
        resume,
    }));
    let _ = resumed.await;
}

/// Where a story's work is: its worktree, when it is here, and its branch.
#[derive(Debug, Default)]
struct Work {
    worktree: Option<PathBuf>,
    branch: Option<String>,
}

impl Work {
    /// The files the work touches since it left the target: in its
    /// worktree when that is here (its commits and changes so far), else
    /// on its branch (none before it has commits here: a fleet story's
    /// arrive with its result).
    async fn touches(&self, ctx: &Ctx) -> BTreeSet<String> {
        if let Some(w) = self.worktree.as_ref().filter(|w| w.is_dir()) {
            return touched(ctx, w.clone()).await;
        }
        let Some(branch) = self.branch.clone() else {
            return BTreeSet::new();
        };
        let (repo, target) = (ctx.paths.main_root.clone(), ctx.target_branch.clone());
        tokio::task::spawn_blocking(move || {
            cascade_git::status::branch_touches(&repo, &branch, &target)
        })
        .await
        .ok()
        .and_then(Result::ok)
        .map(|v| v.into_iter().collect())
        .unwrap_or_default()
    }
}

/// The files `story` declares in prd.json.
fn declared(ctx: &Ctx, story: &str) -> BTreeSet<String> {
    let prd = ctx.prd.lock().unwrap_or_else(|e| e.into_inner());
    prd.story(story)
        .map(|s| s.files.iter().cloned().collect())
        .unwrap_or_default()
}

/// The files the work in `worktree` touches since it left the target
/// branch (none when that cannot be read: a fleet worker's worktree is
/// on another machine).
async fn touched(ctx: &Ctx, worktree: PathBuf) -> BTreeSet<String> {
    let target = ctx.target_branch.clone();
    tokio::task::spawn_blocking(move || cascade_git::status::touched_since(&worktree, &target))
        .await
        .ok()
        .and_then(Result::ok)
        .map(|v| v.into_iter().collect())
        .unwrap_or_default()
}
