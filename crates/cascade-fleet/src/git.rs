//! The git transport: the git CLI (argv, no shell; in its own process
//! group, stopped with the caller's token), so every transport and
//! credential helper the user configured for `git` works here too.

use std::path::Path;
use std::time::Duration;

use cascade_process::{CancelToken, Spec};

use crate::error::FleetError;
use crate::protocol::base_ref;

/// A git command that may take a while (network).
const TIMEOUT: Duration = Duration::from_secs(600);

/// Runs `git <args>` in `dir`; its stdout (trimmed) on success.
pub async fn git(dir: &Path, args: &[&str], cancel: &CancelToken) -> Result<String, FleetError> {
    let spec = Spec::new("git")
        .args(args)
        .cwd(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .timeout(TIMEOUT);
    let shown = || format!("git {}", args.join(" "));
    let out = spec.run(cancel).await.map_err(|e| FleetError::Git {
        command: shown(),
        message: e.to_string(),
    })?;
    if out.cancelled {
        return Err(FleetError::Cancelled);
    }
    if !out.success() {
        return Err(FleetError::Git {
            command: shown(),
            message: format!("{}: {}", out.describe(), out.stderr.text_lossy().trim()),
        });
    }
    Ok(out.stdout.text_lossy().trim().to_string())
}

/// Pushes `src` (a commit or a local ref) to the ref `dst` of the remote
/// (forced: a base is the same commit again; a redelivered job's rerun
/// replaces an earlier run's branch).
pub async fn push(
    dir: &Path,
    remote: &str,
    src: &str,
    dst: &str,
    cancel: &CancelToken,
) -> Result<(), FleetError> {
    let refspec = format!("+{src}:{dst}");
    git(dir, &["push", "--quiet", remote, &refspec], cancel).await?;
    Ok(())
}

/// Coordinator: makes `base` fetchable from the shared remote.
pub async fn push_base(
    repo: &Path,
    remote: &str,
    base: &str,
    cancel: &CancelToken,
) -> Result<(), FleetError> {
    push(repo, remote, base, &base_ref(base), cancel).await
}

/// Coordinator: fetches the objects of a worker's pushed branch (no local
/// ref is written: the caller points the story branch at the commit after
/// checking it).
pub async fn fetch_objects(
    repo: &Path,
    remote: &str,
    branch: &str,
    cancel: &CancelToken,
) -> Result<(), FleetError> {
    let refspec = format!("refs/heads/{branch}");
    git(
        repo,
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            remote,
            &refspec,
        ],
        cancel,
    )
    .await?;
    Ok(())
}

/// Worker: the branch of a slot's clone at the job's base (the engine's
/// target branch there).
pub const BASE_BRANCH: &str = "cascade-fleet/base";
/// Worker: where a slot's clone fetches a job's base to.
const FETCHED_BASE: &str = "refs/cascade/fleet-base";
/// Worker: the refs of a slot's clone at commits it has with their whole
/// history (the last base checked out, the last base fetched, the remote's
/// default branch as cloned): what it tells a coordinator it has.
pub fn have_refs() -> [String; 3] {
    [
        format!("refs/heads/{BASE_BRANCH}"),
        FETCHED_BASE.to_string(),
        "refs/remotes/origin/HEAD".to_string(),
    ]
}

/// Where a worker may get a job's base besides the shared remote: the
/// coordinators' base service (see the `bases` module).
pub struct BaseSource<'a> {
    pub client: &'a async_nats::Client,
    pub subject: String,
}

/// Worker: a clone of `remote` at `dir` (created once, no checkout), with
/// the job's base checked out (detached) in the main worktree and set as
/// branch [`BASE_BRANCH`]. The base comes from the clone itself when an
/// earlier job brought it, else from `source` (a pack from the
/// coordinator), else it is fetched; `work`, a branch of the remote holding
/// earlier work of the story (a conflict to resolve), is always fetched
/// with it.
pub async fn prepare_clone(
    dir: &Path,
    remote: &str,
    base: &str,
    work: Option<&str>,
    source: Option<BaseSource<'_>>,
    cancel: &CancelToken,
) -> Result<(), FleetError> {
    if !dir.join(".git").exists() {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(|e| FleetError::Io {
                path: parent.to_path_buf(),
                source: e,
            })?;
        }
        let shown = dir.display().to_string();
        let cwd = dir.parent().unwrap_or(Path::new("."));
        git(
            cwd,
            &["clone", "--quiet", "--no-checkout", remote, &shown],
            cancel,
        )
        .await?;
    }
    roll_up_packs(dir, cancel).await?;
    if work.is_none() {
        let here = {
            let (dir, base) = (dir.to_path_buf(), base.to_string());
            tokio::task::spawn_blocking(move || cascade_git::transfer::has_commit(&dir, &base))
                .await
                .unwrap_or(false)
        };
        let here = here
            || match &source {
                Some(s) => crate::bases::ask(s.client, &s.subject, dir, base).await,
                None => false,
            };
        // A base that cannot be checked out after all is fetched.
        if here && check_out(dir, base).await.is_ok() {
            return Ok(());
        }
    }
    // Into fixed local refs (replaced job after job): a clone that fetched
    // every base under its own name would collect thousands of refs.
    let mut refspecs = vec![format!("+{}:{FETCHED_BASE}", base_ref(base))];
    if let Some(work) = work {
        refspecs.push(format!("+refs/heads/{work}:refs/cascade/fleet-work"));
    }
    let mut args = vec!["fetch", "--quiet", "--no-tags", remote];
    args.extend(refspecs.iter().map(String::as_str));
    git(dir, &args, cancel).await?;
    check_out(dir, base).await
}

/// Worker: how many packs a slot's clone collects (one per base a
/// coordinator sent, see [`cascade_git::transfer::import_pack`]) before
/// [`roll_up_packs`] combines them: every lookup of an object goes through
/// each pack's index.
pub const MAX_PACKS: usize = 16;

/// Worker: combines the packs of the clone at `dir` when it has more than
/// [`MAX_PACKS`], between two jobs of its slot (nothing else uses the
/// clone then). `git repack -d --geometric=2` keeps each pack at least
/// twice the size of the next smaller one, so the count stays logarithmic
/// and an object is rewritten a logarithmic number of times; it packs the
/// loose objects (the agents' commits) too. A git without `--geometric`
/// (before 2.33) repacks everything. Housekeeping: a failure leaves the
/// packs as they were (the next job tries again) and the job goes on; only
/// `cancel` stops it (a repack killed halfway leaves its temporary pack,
/// which the next repack removes).
pub async fn roll_up_packs(dir: &Path, cancel: &CancelToken) -> Result<(), FleetError> {
    let count = {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || cascade_git::transfer::pack_count(&dir))
            .await
            .unwrap_or(0)
    };
    if count <= MAX_PACKS {
        return Ok(());
    }
    let mut rolled = git(dir, &["repack", "-d", "-q", "--geometric=2"], cancel).await;
    if matches!(rolled, Err(FleetError::Git { .. })) {
        rolled = git(dir, &["repack", "-a", "-d", "-q"], cancel).await;
    }
    match rolled {
        Err(FleetError::Cancelled) => Err(FleetError::Cancelled),
        _ => Ok(()),
    }
}

/// Checks `base` out in the clone at `dir` as [`BASE_BRANCH`], in-process
/// (no git processes on the way to the agent).
async fn check_out(dir: &Path, base: &str) -> Result<(), FleetError> {
    let (dir, base) = (dir.to_path_buf(), base.to_string());
    tokio::task::spawn_blocking(move || cascade_git::transfer::check_out(&dir, &base, BASE_BRANCH))
        .await
        .map_err(|e| e.to_string())
        .and_then(|done| done.map_err(|e| e.to_string()))
        .map_err(|message| FleetError::Git {
            command: "check out the base".into(),
            message,
        })
}

/// Worker: pushes the local `branch` to `to` on the remote.
pub async fn push_branch(
    dir: &Path,
    remote: &str,
    branch: &str,
    to: &str,
    cancel: &CancelToken,
) -> Result<(), FleetError> {
    let (src, dst) = (format!("refs/heads/{branch}"), format!("refs/heads/{to}"));
    push(dir, remote, &src, &dst, cancel).await
}

/// The URL of the repository's `origin`, if it has one.
pub async fn origin_url(repo: &Path, cancel: &CancelToken) -> Option<String> {
    git(repo, &["remote", "get-url", "origin"], cancel)
        .await
        .ok()
        .filter(|u| !u.is_empty())
}

/// Coordinator: sets and deletes refs of the remote with one push:
/// `(src, dst)` pushes `src` (forced) to the ref `dst`, an empty `src`
/// deletes `dst` (a ref that is gone already counts as deleted). Returns
/// the refs that could not be changed, with why.
pub async fn update_refs(
    repo: &Path,
    remote: &str,
    updates: &[(String, String)],
) -> std::collections::HashMap<String, String> {
    if updates.is_empty() {
        return Default::default();
    }
    let specs: Vec<String> = updates
        .iter()
        .map(|(src, dst)| match src.is_empty() {
            true => format!(":{dst}"),
            false => format!("+{src}:{dst}"),
        })
        .collect();
    let mut args = vec!["push", "--porcelain", remote];
    args.extend(specs.iter().map(String::as_str));
    let spec = Spec::new("git")
        .args(&args)
        .cwd(repo)
        .env("GIT_TERMINAL_PROMPT", "0")
        .timeout(TIMEOUT);
    let all = |why: String| {
        updates
            .iter()
            .map(|(_, dst)| (dst.clone(), why.clone()))
            .collect()
    };
    let out = match spec.run(&CancelToken::new()).await {
        Ok(o) => o,
        Err(e) => return all(format!("git push could not run: {e}")),
    };
    let text = out.stdout.text_lossy();
    // `<flag>\t<src>:<dst>\t<summary>`; `!` is a ref that was refused.
    let mut failed = std::collections::HashMap::new();
    let mut reported = std::collections::HashSet::new();
    for line in text.lines() {
        let mut parts = line.split('\t');
        let (Some(flag), Some(refspec), summary) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Some((_, dst)) = refspec.split_once(':') else {
            continue;
        };
        reported.insert(dst.to_string());
        if flag == "!" {
            failed.insert(dst.to_string(), summary.unwrap_or("refused").to_string());
        }
    }
    if !out.success() {
        let why = format!("{}: {}", out.describe(), out.stderr.text_lossy().trim());
        for (_, dst) in updates {
            if !reported.contains(dst) {
                failed.insert(dst.clone(), why.clone());
            }
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit of one more file in `repo` (`-c` identity: no config here).
    async fn commit(repo: &Path, i: usize) -> String {
        let cancel = CancelToken::new();
        std::fs::write(repo.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
        git(repo, &["add", "-A"], &cancel).await.unwrap();
        let msg = format!("c{i}");
        let identity = ["-c", "user.name=t", "-c", "user.email=t@t"];
        let args = [&identity[..], &["commit", "-q", "-m", &msg]].concat();
        git(repo, &args, &cancel).await.unwrap();
        git(repo, &["rev-parse", "HEAD"], &cancel).await.unwrap()
    }

    #[tokio::test]
    async fn a_clone_rolls_up_the_packs_of_its_bases_past_the_limit_and_keeps_every_object() {
        let t = tempfile::tempdir().unwrap();
        let (from, to) = (t.path().join("from"), t.path().join("to"));
        std::fs::create_dir(&from).unwrap();
        let cancel = CancelToken::new();
        git(&from, &["init", "-q", "-b", "main"], &cancel)
            .await
            .unwrap();
        let mut have = commit(&from, 0).await;
        let shown = from.display().to_string();
        let clone = ["clone", "-q", "--no-checkout", &shown, "to"];
        git(t.path(), &clone, &cancel).await.unwrap();
        let mut tips = Vec::new();
        // One base after another, as a coordinator sends them.
        for i in 1..=MAX_PACKS + 1 {
            let tip = commit(&from, i).await;
            let pack = cascade_git::transfer::pack_for(&from, &tip, &[have])
                .unwrap()
                .unwrap();
            cascade_git::transfer::import_pack(&to, &pack).unwrap();
            have = tip.clone();
            tips.push(tip);
            let before = cascade_git::transfer::pack_count(&to);
            if i == MAX_PACKS + 1 {
                // A worker stopping meanwhile stops the roll-up, and its job.
                let stopped = CancelToken::new();
                stopped.cancel();
                let r = roll_up_packs(&to, &stopped).await;
                assert!(matches!(r, Err(FleetError::Cancelled)), "{r:?}");
                assert_eq!(cascade_git::transfer::pack_count(&to), before);
            }
            roll_up_packs(&to, &cancel).await.unwrap();
            let after = cascade_git::transfer::pack_count(&to);
            if i < MAX_PACKS {
                // Up to the limit they stay as they came.
                assert_eq!(after, before, "after base {i}");
            }
        }
        let count = cascade_git::transfer::pack_count(&to);
        assert!((1..=2).contains(&count), "{count} packs after the roll-up");
        for tip in &tips {
            assert!(cascade_git::transfer::has_commit(&to, tip), "{tip}");
        }
        // Whole: git itself finds nothing missing from the last base down.
        let fsck = ["fsck", "--connectivity-only", "--no-dangling", &have];
        git(&to, &fsck, &cancel).await.unwrap();
    }
}
