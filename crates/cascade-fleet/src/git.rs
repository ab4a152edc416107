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

/// Coordinator: makes `base` fetchable from the shared remote.
pub async fn push_base(
    repo: &Path,
    remote: &str,
    base: &str,
    cancel: &CancelToken,
) -> Result<(), FleetError> {
    let refspec = format!("{base}:{}", base_ref(base));
    git(
        repo,
        &["push", "--quiet", "--force", remote, &refspec],
        cancel,
    )
    .await?;
    Ok(())
}

/// Coordinator: fetches a worker's pushed branch onto the local `into`
/// branch; returns its tip.
pub async fn fetch_branch(
    repo: &Path,
    remote: &str,
    branch: &str,
    into: &str,
    cancel: &CancelToken,
) -> Result<String, FleetError> {
    let refspec = format!("+refs/heads/{branch}:refs/heads/{into}");
    git(
        repo,
        &["fetch", "--quiet", "--no-tags", remote, &refspec],
        cancel,
    )
    .await?;
    git(
        repo,
        &[
            "rev-parse",
            "--verify",
            &format!("refs/heads/{into}^{{commit}}"),
        ],
        cancel,
    )
    .await
}

/// Whether `ancestor` is `commit` or one of its ancestors.
pub async fn is_ancestor(
    repo: &Path,
    ancestor: &str,
    commit: &str,
    cancel: &CancelToken,
) -> Result<bool, FleetError> {
    match git(
        repo,
        &["merge-base", "--is-ancestor", ancestor, commit],
        cancel,
    )
    .await
    {
        Ok(_) => Ok(true),
        Err(FleetError::Git { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The first parent of `commit`.
pub async fn parent(repo: &Path, commit: &str, cancel: &CancelToken) -> Result<String, FleetError> {
    git(
        repo,
        &["rev-parse", "--verify", &format!("{commit}^1")],
        cancel,
    )
    .await
}

/// Worker: a clone of `remote` at `dir` (created once, no checkout), with
/// the job's base fetched, checked out (detached) in the main worktree and
/// set as branch `target`.
pub async fn prepare_clone(
    dir: &Path,
    remote: &str,
    base: &str,
    target: &str,
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
    let r = base_ref(base);
    let refspec = format!("+{r}:{r}");
    git(
        dir,
        &["fetch", "--quiet", "--no-tags", remote, &refspec],
        cancel,
    )
    .await?;
    git(
        dir,
        &["checkout", "--quiet", "--force", "--detach", base],
        cancel,
    )
    .await?;
    git(dir, &["branch", "--quiet", "--force", target, base], cancel).await?;
    Ok(())
}

/// Worker: pushes the local `branch` to `to` on the remote (forced: a
/// redelivered job's run replaces an earlier one of the same attempt).
pub async fn push_branch(
    dir: &Path,
    remote: &str,
    branch: &str,
    to: &str,
    cancel: &CancelToken,
) -> Result<(), FleetError> {
    let refspec = format!("+refs/heads/{branch}:refs/heads/{to}");
    git(
        dir,
        &["push", "--quiet", "--force", remote, &refspec],
        cancel,
    )
    .await?;
    Ok(())
}

/// The URL of the repository's `origin`, if it has one.
pub async fn origin_url(repo: &Path, cancel: &CancelToken) -> Option<String> {
    git(repo, &["remote", "get-url", "origin"], cancel)
        .await
        .ok()
        .filter(|u| !u.is_empty())
}
