//! The one implementation of "ask an agent for a plan file and make it valid".
//!
//! An author (the agent behind a trait, so the loop is tested without
//! processes) writes the file(s); a check validates what was written; on
//! problems the author is asked again with the exact problems and what it
//! wrote, up to `max_fix_rounds` times, then the loop fails with every
//! remaining problem. Planning's generate/fix steps and the engine's
//! mega-plan feature PRDs both run through [`make_valid`].

use std::future::Future;
use std::path::PathBuf;

/// Largest previous file text (bytes) quoted back to the agent.
pub const MAX_PREVIOUS: usize = 12 * 1024;

/// Why one author call did not produce the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorError {
    /// No agent can be run (not installed, not configured): retrying is pointless.
    Unavailable(String),
    /// The run was cancelled (Ctrl-C).
    Cancelled,
    /// The agent ran but failed (exit code, timeout, crash): a fix round may help.
    Failed(String),
    /// Something that no retry changes (e.g. a session lookup failed): stop.
    Fatal(String),
}

/// The outcome of checking what the author wrote: a count of items (stories,
/// features) or every problem, verbatim.
pub type PlanCheck = Result<usize, Vec<String>>;

/// A failed attempt's details, for the fix prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct FixContext {
    /// 1-based number of the coming call.
    pub attempt: u32,
    pub max_attempts: u32,
    /// Every problem found, verbatim.
    pub problems: Vec<String>,
    /// What was written last time (possibly truncated), per file that exists.
    pub previous: Vec<(PathBuf, String)>,
}

/// Writes the plan file(s) once.
pub trait PlanAuthor {
    /// Call `attempt` (1 = the first write; later ones carry `fix`).
    fn write(
        &self,
        attempt: u32,
        fix: Option<&FixContext>,
    ) -> impl Future<Output = Result<(), AuthorError>> + Send;
}

/// A valid plan was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// What the check counted (stories or features).
    pub items: usize,
    /// Author calls it took in this run of the loop (0 = files were already valid).
    pub attempts: u32,
}

/// The plan could not be produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationFailed {
    pub attempts: u32,
    pub cancelled: bool,
    /// A stop that no retry changes (unavailable agent, fatal error).
    pub fatal: bool,
    /// The last problems (empty when cancelled or fatal).
    pub problems: Vec<String>,
    /// One paragraph: what happened, and the last problems verbatim.
    pub message: String,
}

/// Progress notes of the loop.
#[derive(Debug, Clone, PartialEq)]
pub enum GenProgress {
    /// The author is called for the `attempt`-th time.
    Attempt { attempt: u32, max_attempts: u32 },
    /// What it wrote was rejected.
    Invalid { attempt: u32, problems: Vec<String> },
}

/// Where the loop starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Remove stale files and call the author for attempt 1.
    Fresh,
    /// Call the author for attempt 1 on the files as they are (a revision
    /// edits them in place).
    InPlace,
    /// The files of `attempts_done` earlier calls are there (a resumed
    /// session): check them first, then continue with the fix rounds left.
    Existing { attempts_done: u32 },
}

/// What the loop needs besides the author.
pub struct Job<'a, C: Fn() -> PlanCheck> {
    /// The files the author writes (stale ones removed on a fresh start,
    /// quoted back in fix prompts).
    pub files: Vec<PathBuf>,
    /// Checks what was written.
    pub check: C,
    /// Fix rounds after the first write.
    pub max_fix_rounds: u32,
    /// In messages: "a valid PRD to 'x'".
    pub what: &'a str,
}

/// Runs the author, validates, and asks for fixes with the exact problems.
pub async fn make_valid<A: PlanAuthor, C: Fn() -> PlanCheck>(
    author: &A,
    job: &Job<'_, C>,
    start: Start,
    mut progress: impl FnMut(GenProgress),
) -> Result<Generated, GenerationFailed> {
    let max_attempts = 1 + job.max_fix_rounds;
    let mut last_problems: Vec<String> = Vec::new();
    let (first, mut fix) = match start {
        Start::Fresh => {
            // A stale file from an earlier attempt must not pass for a new one.
            for f in &job.files {
                let _ = std::fs::remove_file(f);
            }
            (1, None)
        }
        Start::InPlace => (1, None),
        Start::Existing { attempts_done } => match (job.check)() {
            Ok(items) => return Ok(Generated { items, attempts: 0 }),
            Err(problems) => {
                progress(GenProgress::Invalid {
                    attempt: attempts_done,
                    problems: problems.clone(),
                });
                last_problems = problems.clone();
                (
                    attempts_done + 1,
                    Some(fix_context(job, attempts_done + 1, max_attempts, problems)),
                )
            }
        },
    };
    for attempt in first..=max_attempts {
        progress(GenProgress::Attempt {
            attempt,
            max_attempts,
        });
        match author.write(attempt, fix.as_ref()).await {
            Err(AuthorError::Unavailable(why)) => {
                return Err(stop(attempt, false, format!("no agent could run: {why}")))
            }
            Err(AuthorError::Fatal(why)) => return Err(stop(attempt, false, why)),
            Err(AuthorError::Cancelled) => {
                return Err(stop(attempt, true, "interrupted".to_string()))
            }
            Err(AuthorError::Failed(why)) => {
                last_problems = vec![format!("the agent failed: {why}")];
            }
            Ok(()) => match (job.check)() {
                Ok(items) => {
                    return Ok(Generated {
                        items,
                        attempts: attempt,
                    })
                }
                Err(problems) => last_problems = problems,
            },
        }
        progress(GenProgress::Invalid {
            attempt,
            problems: last_problems.clone(),
        });
        fix = Some(fix_context(
            job,
            attempt + 1,
            max_attempts,
            last_problems.clone(),
        ));
    }
    Err(GenerationFailed {
        attempts: max_attempts,
        cancelled: false,
        fatal: false,
        message: format!(
            "the agent did not write {} in {max_attempts} attempts; last problems:\n{}",
            job.what,
            last_problems
                .iter()
                .map(|p| format!("  - {p}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
        problems: last_problems,
    })
}

fn stop(attempts: u32, cancelled: bool, message: String) -> GenerationFailed {
    GenerationFailed {
        attempts,
        cancelled,
        fatal: !cancelled,
        problems: Vec::new(),
        message,
    }
}

fn fix_context<C: Fn() -> PlanCheck>(
    job: &Job<'_, C>,
    attempt: u32,
    max_attempts: u32,
    problems: Vec<String>,
) -> FixContext {
    let previous = job
        .files
        .iter()
        .filter_map(|f| {
            std::fs::read_to_string(f)
                .ok()
                .map(|t| (f.clone(), truncate(&t, MAX_PREVIOUS)))
        })
        .collect();
    FixContext {
        attempt,
        max_attempts,
        problems,
        previous,
    }
}

/// `text` cut to at most `max` bytes on a character boundary, marked when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n... (truncated)", &text[..end])
}

/// The "fix the previous attempt" section of a prompt (markdown).
pub fn fix_section(fix: &FixContext) -> String {
    let mut p = format!(
        "## Fix the previous attempt (attempt {} of {})\n\nWhat was written last time was rejected. \
         Fix every problem below and write the whole file(s) again.\n\n",
        fix.attempt, fix.max_attempts
    );
    for problem in &fix.problems {
        p.push_str(&format!("- {problem}\n"));
    }
    for (path, text) in &fix.previous {
        p.push_str(&format!(
            "\nWhat was written to `{}` last time:\n\n```json\n{}",
            path.display(),
            text
        ));
        if !text.ends_with('\n') {
            p.push('\n');
        }
        p.push_str("```\n");
    }
    p.push('\n');
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::Mutex;

    /// Writes the scripted contents in order and records the fixes it got.
    struct Scripted {
        path: PathBuf,
        writes: Vec<Option<&'static str>>,
        fixes: Mutex<Vec<Option<FixContext>>>,
    }

    impl PlanAuthor for Scripted {
        async fn write(&self, attempt: u32, fix: Option<&FixContext>) -> Result<(), AuthorError> {
            self.fixes.lock().unwrap().push(fix.cloned());
            match self.writes[(attempt - 1) as usize] {
                Some(text) => {
                    std::fs::write(&self.path, text).unwrap();
                    Ok(())
                }
                None => Err(AuthorError::Failed("exit code 3".into())),
            }
        }
    }

    fn check(path: &Path) -> PlanCheck {
        let text = std::fs::read_to_string(path).map_err(|e| vec![format!("no file: {e}")])?;
        if text.contains("good") {
            Ok(2)
        } else {
            Err(vec![format!("unknown story 'y' ({text})")])
        }
    }

    fn scripted(dir: &Path, writes: Vec<Option<&'static str>>) -> Scripted {
        Scripted {
            path: dir.join("prd.json"),
            writes,
            fixes: Mutex::new(vec![]),
        }
    }

    #[tokio::test]
    async fn invalid_files_are_fixed_with_the_exact_problems() {
        let tmp = tempfile::tempdir().unwrap();
        let a = scripted(tmp.path(), vec![Some("bad1"), None, Some("good")]);
        let job = Job {
            files: vec![a.path.clone()],
            check: || check(&a.path),
            max_fix_rounds: 2,
            what: "a valid PRD",
        };
        let mut notes = vec![];
        let got = make_valid(&a, &job, Start::Fresh, |p| notes.push(p))
            .await
            .unwrap();
        assert_eq!(
            got,
            Generated {
                items: 2,
                attempts: 3
            }
        );
        let fixes = a.fixes.lock().unwrap();
        assert!(fixes[0].is_none());
        let second = fixes[1].as_ref().unwrap();
        assert_eq!((second.attempt, second.max_attempts), (2, 3));
        assert_eq!(second.problems, ["unknown story 'y' (bad1)"]);
        assert_eq!(second.previous[0].1, "bad1");
        let third = fixes[2].as_ref().unwrap();
        assert_eq!(third.problems, ["the agent failed: exit code 3"]);
        assert_eq!(notes.len(), 5);
        assert!(fix_section(second).contains("- unknown story 'y' (bad1)"));
    }

    #[tokio::test]
    async fn gives_up_after_the_fix_rounds_naming_the_problems() {
        let tmp = tempfile::tempdir().unwrap();
        let a = scripted(tmp.path(), vec![Some("bad1"), Some("bad2")]);
        let job = Job {
            files: vec![a.path.clone()],
            check: || check(&a.path),
            max_fix_rounds: 1,
            what: "a valid PRD",
        };
        let err = make_valid(&a, &job, Start::Fresh, |_| {})
            .await
            .unwrap_err();
        assert_eq!(err.attempts, 2);
        assert!(!err.fatal && !err.cancelled);
        assert!(err.message.contains("in 2 attempts"), "{}", err.message);
        assert_eq!(err.problems, ["unknown story 'y' (bad2)"]);
    }

    #[tokio::test]
    async fn a_resumed_loop_checks_existing_files_first() {
        let tmp = tempfile::tempdir().unwrap();
        let a = scripted(tmp.path(), vec![None, Some("good")]);
        std::fs::write(&a.path, "good").unwrap();
        let job = Job {
            files: vec![a.path.clone()],
            check: || check(&a.path),
            max_fix_rounds: 2,
            what: "a valid PRD",
        };
        let got = make_valid(&a, &job, Start::Existing { attempts_done: 1 }, |_| {})
            .await
            .unwrap();
        assert_eq!(got.attempts, 0);
        assert!(a.fixes.lock().unwrap().is_empty());
        std::fs::write(&a.path, "bad").unwrap();
        let got = make_valid(&a, &job, Start::Existing { attempts_done: 1 }, |_| {})
            .await
            .unwrap();
        assert_eq!(got.attempts, 2);
        let fixes = a.fixes.lock().unwrap();
        assert_eq!(fixes[0].as_ref().unwrap().attempt, 2);
    }

    #[tokio::test]
    async fn unavailable_and_fatal_stop_at_once() {
        struct Gone;
        impl PlanAuthor for Gone {
            async fn write(&self, _: u32, _: Option<&FixContext>) -> Result<(), AuthorError> {
                Err(AuthorError::Fatal("session not found".into()))
            }
        }
        let job = Job {
            files: vec![],
            check: || Ok(1),
            max_fix_rounds: 2,
            what: "x",
        };
        let err = make_valid(&Gone, &job, Start::Fresh, |_| {})
            .await
            .unwrap_err();
        assert!(err.fatal);
        assert_eq!(err.attempts, 1);
        assert_eq!(err.message, "session not found");
    }
}
