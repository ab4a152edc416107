//! Step: commit what the agent changed (`<id>: <title>`). An agent that
//! committed its work itself leaves nothing to commit: its commits on the
//! story branch beyond the base are the work. Nothing at all is `no_changes`.
//! Files cascade put into the worktree (copied, or left by setup) are never
//! part of it (the worktree's own exclude); untracked dependency or build
//! output is left out (a `commit_left_out` event names it); and a file added
//! or changed since the base that looks like a credential, is too large or
//! is an undeclared binary ([`crate::secrets`]) fails the attempt as
//! `verification` before anything is committed, unless the story allows it.

use cascade_git::commit::{Candidate, Outcome, Rules};

use super::prepare_worktree::Worktree;
use super::run_agent::AgentOutput;
use super::{Attempt, Failure, Stop};
use crate::events::{Event, LeftOutDir};
use crate::retry::FailureKind;
use crate::secrets::{Refusal, SecretPolicy, ALLOW_FIELD};

/// Why build output is left out, as the event says it.
const LEFT_OUT_REASON: &str = "dependency or build output";

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
    let policy = SecretPolicy::for_story(a.story, ctx.project.commit.max_file_mb())
        .map_err(|e| Failure::new(FailureKind::Setup, format!("story '{id}': {e}")))?;
    let base = git2::Oid::from_str(&wt.base).ok();
    let p = wt.path.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let refuse = |c: &Candidate<'_>| policy.check(c);
        let leave_out = |path: &str| policy.leave_out(path);
        let rules = Rules {
            base,
            refuse: Some(&refuse),
            leave_out: Some(&leave_out),
        };
        cascade_git::commit::commit_checked(&p, &message, &rules)
    })
    .await
    .map_err(|e| Failure::new(FailureKind::Setup, e.to_string()))?
    .map_err(|e| ctx.write_failed(&wt.path, FailureKind::Setup, e.to_string(), &e))?;
    if !checked.left_out.is_empty() {
        ctx.emit(Event::CommitLeftOut {
            story: id.to_string(),
            attempt: a.number,
            left_out: checked
                .left_out
                .iter()
                .map(|l| LeftOutDir {
                    dir: l.dir.clone(),
                    files: l.files,
                    reason: LEFT_OUT_REASON.to_string(),
                })
                .collect(),
        });
    }
    let commit = match checked.outcome {
        Outcome::Committed(oid) => oid.to_string(),
        Outcome::Refused(files) => {
            announce_credentials(a, &files);
            return Err(refused(&files).into());
        }
        Outcome::Unchanged => match cascade_git::merge::branch_tip(&ctx.paths, a.branch) {
            Ok(Some(tip)) if tip.to_string() != wt.base => tip.to_string(),
            _ => {
                return Err(Failure::new(
                    FailureKind::NoChanges,
                    format!(
                        "no changes: agent '{}' exited 0 but changed no file{}",
                        a.agent,
                        only_left_out(&checked.left_out)
                    ),
                )
                .with_excerpt(output.excerpt.clone())
                .into())
            }
        },
    };
    // In memory only: until the merge is recorded (written before the branch
    // is deleted), the branch tip is what tells resume the story was merged.
    let c = commit.clone();
    ctx.amend_story(id, move |s| s.commit = Some(c));
    ctx.emit(Event::StoryCommitted {
        story: id.to_string(),
        attempt: a.number,
        commit: commit.clone(),
    });
    Ok(Committed { commit })
}

/// What an attempt that changed nothing but build output did write.
fn only_left_out(left_out: &[cascade_git::commit::LeftOut]) -> String {
    if left_out.is_empty() {
        return String::new();
    }
    let dirs: Vec<String> = left_out
        .iter()
        .map(|l| format!("{}/", cascade_plan::text::printable_line(&l.dir)))
        .collect();
    format!(
        " (only {LEFT_OUT_REASON}, which is left out of commits: {})",
        dirs.join(", ")
    )
}

/// The credentials among refused files as `credential-content` findings
/// (in `verification_finished`, the story's state, `show` and the dashboard).
fn announce_credentials(a: &Attempt<'_>, files: &[(String, Refusal)]) {
    let findings: Vec<cascade_verify::Finding> = files
        .iter()
        .filter_map(|(path, r)| match r {
            Refusal::Credential(m) => Some(cascade_verify::Finding {
                rule: cascade_verify::CREDENTIAL_CONTENT.to_string(),
                file: path.clone(),
                line: m.line.map_or(1, |l| l as u32),
                message: format!("{r}: not committed"),
                text: String::new(),
            }),
            _ => None,
        })
        .collect();
    if findings.is_empty() {
        return;
    }
    let verdict = cascade_verify::Verdict {
        findings,
        allowed: Vec::new(),
    };
    super::verify::record(a, verdict, Vec::new(), std::time::Instant::now());
}

/// The failure of an attempt whose work holds refused files: credentials
/// first, then files too large or binary, each with its rule.
fn refused(files: &[(String, Refusal)]) -> Failure {
    let list = |credential: bool| {
        files
            .iter()
            .filter(|(_, r)| r.is_credential() == credential)
            .map(|(p, r)| format!("{} ({r})", cascade_plan::text::printable_line(p)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (secrets, other) = (list(true), list(false));
    let mut message = Vec::new();
    let mut findings = Vec::new();
    if !secrets.is_empty() {
        message.push(format!(
            "refused to commit files that look like credentials: {secrets} \
             (remove them from the work, or list them in the story's \"{ALLOW_FIELD}\" in prd.json if they are meant to be committed)"
        ));
        findings.push(format!(
            "These files look like credentials and must not be committed: {secrets}. Do not \
             create or commit them; keep secrets out of the repository (read them from the environment)."
        ));
    }
    if !other.is_empty() {
        message.push(format!(
            "refused to commit files too large or binary: {other} \
             (leave them out of the work, or name them in the story's \"files\" in prd.json if the story adds them)"
        ));
        findings.push(format!(
            "These files must not be committed: {other}. Do not commit build output, \
             binaries or large generated files."
        ));
    }
    let mut f = Failure::new(
        FailureKind::Verification,
        format!("{}; nothing was committed", message.join("; ")),
    );
    f.findings = findings.join("\n");
    f
}
