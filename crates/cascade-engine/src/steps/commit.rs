//! Step: commit what the agent changed (`<id>: <title>`). An agent that
//! committed its work itself leaves nothing to commit: its commits on the
//! story branch beyond the base are the work. Nothing at all is `no_changes`.
//! Files cascade put into the worktree (copied, or left by setup) are never
//! part of it (the worktree's own exclude), and a path added since the base
//! that looks like a credential ([`crate::secrets`]) fails the attempt as
//! `verification` before anything is committed, unless the story allows it.

use cascade_git::commit::{Outcome, Rules};

use super::prepare_worktree::Worktree;
use super::run_agent::AgentOutput;
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::retry::FailureKind;
use crate::secrets::{SecretPolicy, ALLOW_FIELD};

/// The story branch's tip after the commit.
pub(super) struct Committed {
    pub commit: String,
}

pub(super) async fn run(
    a: &Attempt<'_>,
    wt: &Worktree,
    output: &AgentOutput,
) -> Result<Committed, Stop> {
    let ctx = a.ctx;
    let id = a.id();
    let message = format!("{id}: {}", a.story.title);
    let policy = SecretPolicy::for_story(a.story)
        .map_err(|e| Failure::new(FailureKind::Setup, format!("story '{id}': {e}")))?;
    let base = git2::Oid::from_str(&wt.base).ok();
    let p = wt.path.clone();
    let committed = tokio::task::spawn_blocking(move || {
        let refuse = |path: &str| policy.refuses(path);
        let rules = Rules {
            base,
            refuse: Some(&refuse),
        };
        cascade_git::commit::commit_checked(&p, &message, &rules)
    })
    .await
    .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?
    .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?;
    let commit = match committed {
        Outcome::Committed(oid) => oid.to_string(),
        Outcome::Refused(paths) => return Err(refused(&paths).into()),
        Outcome::Unchanged => match cascade_git::merge::branch_tip(&ctx.paths, a.branch) {
            Ok(Some(tip)) if tip.to_string() != wt.base => tip.to_string(),
            _ => {
                return Err(Failure::new(
                    FailureKind::NoChanges,
                    format!(
                        "no changes: agent '{}' exited 0 but changed no file",
                        a.agent
                    ),
                )
                .with_excerpt(output.excerpt.clone())
                .into())
            }
        },
    };
    // In memory only: until the merge is recorded (written before the branch
    // is deleted), the branch tip is what tells resume the story was merged.
    ctx.amend_story(id, |s| s.commit = Some(commit.clone()));
    ctx.emit(Event::StoryCommitted {
        story: id.to_string(),
        attempt: a.number,
        commit: commit.clone(),
    });
    Ok(Committed { commit })
}

/// The failure of an attempt whose work adds credential-looking files.
fn refused(paths: &[String]) -> Failure {
    let list = paths
        .iter()
        .map(|p| cascade_plan::text::printable_line(p).into_owned())
        .collect::<Vec<_>>()
        .join(", ");
    let mut f = Failure::new(
        FailureKind::Verification,
        format!(
            "refused to commit files that look like credentials: {list}; nothing was committed \
             (remove them from the work, or list them in the story's \"{ALLOW_FIELD}\" in prd.json if they are meant to be committed)"
        ),
    );
    f.findings = format!(
        "These files look like credentials and must not be committed: {list}. Do not create or \
         commit them; keep secrets out of the repository."
    );
    f
}
