//! Step: commit what the agent changed (`<id>: <title>`). An agent that
//! committed its work itself leaves nothing to commit: its commits on the
//! story branch beyond the base are the work. Nothing at all is `no_changes`.

use super::prepare_worktree::Worktree;
use super::run_agent::AgentOutput;
use super::{Attempt, Failure, Stop};
use crate::events::Event;
use crate::retry::FailureKind;

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
    let p = wt.path.clone();
    let committed =
        tokio::task::spawn_blocking(move || cascade_git::commit::commit_all(&p, &message))
            .await
            .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?
            .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?;
    let commit = match committed {
        Some(oid) => oid.to_string(),
        None => match cascade_git::merge::branch_tip(&ctx.paths, a.branch) {
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
