//! Planning sessions (`.cascade/plans/<id>/`), read for the page, and the
//! cascade commands the actions run: answering and approving go through
//! the `cascade plan answer` and `cascade plan approve` commands themselves
//! (the same checks, the same session and answers files, the same planner
//! continuing), run as a child process of the dashboard.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use cascade_planning::{PlanStatus, Session, SessionStore};
use serde_json::{json, Value};

/// The keys a session waits for: its open questions and decisions, or
/// `review` at review.
pub(crate) fn waiting_for(s: &Session) -> Vec<String> {
    let mut keys: Vec<String> = s.open_questions().map(|q| q.id.clone()).collect();
    keys.extend(s.open_decisions().map(|d| d.id.clone()));
    if s.status == PlanStatus::Review {
        keys.push("review".into());
    }
    keys
}

/// `GET /api/plans`: every session, newest first, and the ones that could
/// not be read (with why).
pub(crate) fn list(cascade_dir: &Path) -> Value {
    let store = SessionStore::new(cascade_dir);
    let (mut sessions, broken) = store.list();
    sessions.sort_by(|a, b| b.updated_at.cmp(&a.updated_at));
    let rows: Vec<Value> = sessions
        .iter()
        .map(|s| {
            json!({
                "id": s.session_id,
                "instruction": s.instruction,
                "status": s.status,
                "strategy": s.strategy,
                "waiting_for": waiting_for(s),
                "created_at": s.created_at,
                "updated_at": s.updated_at,
            })
        })
        .collect();
    let unreadable: Vec<Value> = broken
        .iter()
        .map(|(id, e)| json!({ "id": id, "error": e.to_string() }))
        .collect();
    json!({ "plans": rows, "unreadable": unreadable })
}

/// `GET /api/plans/{id}`: session.json as the CLI writes it, with `id`,
/// `waiting_for`, the challenge's text and the answers kept so far.
/// `Err((status, message))` for an unknown or unreadable session.
pub(crate) fn show(cascade_dir: &Path, id: &str) -> Result<Value, (u16, String)> {
    if !cascade_planning::session::valid_id(id) {
        return Err((404, format!("no planning session '{id}'")));
    }
    let store = SessionStore::new(cascade_dir);
    if !store.dir(id).join("session.json").is_file() {
        return Err((404, format!("no planning session '{id}'")));
    }
    let s = store.load(id).map_err(|e| (500, e.to_string()))?;
    let mut v = serde_json::to_value(&s).map_err(|e| (500, e.to_string()))?;
    v["id"] = json!(s.session_id);
    v["waiting_for"] = json!(waiting_for(&s));
    v["challenge"] = json!(std::fs::read_to_string(store.dir(id).join("CHALLENGE.md")).ok());
    v["answers"] = std::fs::read(store.answers_path(id))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(json!({}));
    Ok(v)
}

/// How to run cascade itself for an action.
#[derive(Debug, Clone)]
pub struct Cli {
    /// The `cascade` executable.
    pub exe: PathBuf,
    /// Arguments every invocation gets first (`--agents PATH`).
    pub global: Vec<String>,
    /// Where it runs (the directory `cascade ui` was started in).
    pub cwd: PathBuf,
}

/// How a started command stands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ran {
    /// It ended within the wait: exit code and what it printed.
    Ended { code: i32, output: String },
    /// Still going (the planner asks agents); its output goes to `log`.
    Running { pid: u32, log: PathBuf },
}

/// Runs `cascade <args>` with its output in `log`, waiting at most `wait`
/// for it to end. It runs in its own process group, so stopping the
/// dashboard does not stop it; it is reaped when it ends.
pub(crate) async fn run_cli(
    cli: &Cli,
    args: &[String],
    log: &Path,
    wait: Duration,
) -> std::io::Result<Ran> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let out = std::fs::File::create(log)?;
    let err = out.try_clone()?;
    let mut cmd = tokio::process::Command::new(&cli.exe);
    cmd.args(&cli.global)
        .args(args)
        .current_dir(&cli.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0);
    let mut child = cmd.spawn()?;
    let pid = child.id().unwrap_or(0);
    match tokio::time::timeout(wait, child.wait()).await {
        Ok(status) => {
            let status = status?;
            let output = crate::detail::read_text(log, true).unwrap_or_default();
            Ok(Ran::Ended {
                code: status.code().unwrap_or(-1),
                output,
            })
        }
        Err(_) => {
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
            Ok(Ran::Running {
                pid,
                log: log.to_path_buf(),
            })
        }
    }
}

/// The `error: ...` line of a command's output (else its last line).
pub(crate) fn error_line(output: &str) -> String {
    output
        .lines()
        .find_map(|l| l.strip_prefix("error: "))
        .or_else(|| output.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("the command failed without saying why")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_line_prefers_the_error() {
        assert_eq!(error_line("note\nerror: no such key\nmore"), "no such key");
        assert_eq!(error_line("a\nlast\n\n"), "last");
    }

    #[test]
    fn unknown_sessions_are_404() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(show(dir.path(), "planning-nope").unwrap_err().0, 404);
        assert_eq!(show(dir.path(), "../x").unwrap_err().0, 404);
        assert_eq!(list(dir.path())["plans"], json!([]));
    }
}
