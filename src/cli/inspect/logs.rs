//! `cascade logs STORY [--attempt N] [--phase P] [-f]`: what an agent of
//! one attempt said, from the log the engine writes while it runs
//! (`<artifacts>/logs/<story>-<phase>-<attempt>.log`, a header line saying
//! what ran, then the agent's output as it arrives).
//!
//! The default is the story's latest attempt in the phase it ran
//! (implementation or retry); `--phase review` picks that attempt's review,
//! and so on. `-f` keeps printing what the log gains, like `kubectl logs
//! -f`, until the attempt ends or the run stops running it (polled; a state
//! re-read every poll is cheap next to an agent's output).
//!
//! Agent output is shown safely (control characters as escapes, see
//! [`crate::cli::report::printable`]): a log cannot rewrite the terminal.
//! `--json` prints one object per line of the log instead (`story`,
//! `attempt`, `phase`, `path`, `line`, `text`), with `-f` as they come.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use super::{locate, Located};
use crate::cli::report::printable;
use crate::cli::{CliResult, Failure, Global, EXIT_OK};

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The story: its id, or FEATURE/STORY in a mega run
    pub story: String,
    /// The attempt (default: the latest)
    #[arg(long, value_name = "N")]
    pub attempt: Option<u32>,
    /// The phase whose agent to show: implementation, retry, review, ...
    /// (default: the one the attempt ran)
    #[arg(long, value_name = "P")]
    pub phase: Option<String>,
    /// Follow a running attempt's output until it ends
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// One JSON object per line of output (story, attempt, phase, path,
    /// line, text) instead of the text
    #[arg(long)]
    pub json: bool,
}

/// How often `-f` looks for more output and whether the attempt ended.
const POLL: Duration = Duration::from_millis(250);

pub fn run(_g: &Global, a: LogsArgs) -> CliResult {
    let mut found = locate(&a.story)?;
    let (attempt, phase) = chosen(&found, a.attempt, a.phase.as_deref())?;
    let path = log_path(&found, attempt, &phase);
    let mut reader = LogReader::default();
    if a.json {
        reader.json = Some(JsonLines {
            story: found.name(),
            attempt,
            phase: phase.clone(),
            path: path.display().to_string(),
            line: 0,
        });
    }
    if !a.follow || !attempt_going(&found, attempt) {
        if !path.exists() {
            return Err(no_log(&found, attempt, &phase));
        }
        reader.print_new(&path, true).map_err(read_error(&path))?;
        return Ok(EXIT_OK);
    }
    let state_path = found.state_path();
    loop {
        if path.exists() {
            reader.print_new(&path, false).map_err(read_error(&path))?;
        }
        if !attempt_going(&found, attempt) || crate::cli::out::Stream::Stdout.broken() {
            break;
        }
        std::thread::sleep(POLL);
        found.reload(&state_path)?;
    }
    if path.exists() {
        reader.print_new(&path, true).map_err(read_error(&path))?;
    } else {
        return Err(no_log(&found, attempt, &phase));
    }
    Ok(EXIT_OK)
}

/// The attempt number and phase asked for (defaults filled in).
fn chosen(
    found: &Located,
    attempt: Option<u32>,
    phase: Option<&str>,
) -> Result<(u32, String), Failure> {
    let s = found.story();
    let record = match attempt {
        Some(n) => s.attempts.iter().rfind(|r| r.attempt == n).ok_or_else(|| {
            let known: Vec<String> = s.attempts.iter().map(|r| r.attempt.to_string()).collect();
            Failure::usage(anyhow::anyhow!(
                "story '{}' has no attempt {n} (it has {})",
                found.name(),
                if known.is_empty() {
                    "none yet".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })?,
        None => s.attempts.last().ok_or_else(|| {
            Failure::usage(anyhow::anyhow!(
                "story '{}' has no attempt yet, so no agent output (`cascade status` shows where the run is)",
                found.name()
            ))
        })?,
    };
    let phase = phase.unwrap_or(&record.phase);
    if phase.is_empty() || !phase.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
        return Err(Failure::usage(anyhow::anyhow!(
            "'{}' is not a phase (implementation, retry, review, ...)",
            printable(phase)
        )));
    }
    Ok((record.attempt, phase.to_string()))
}

/// Where the engine writes the log of `phase` of attempt `attempt` (see
/// `cascade_agents::AgentRequest::log_path`; story ids are validated, so
/// the id is the file name's start as it is).
fn log_path(found: &Located, attempt: u32, phase: &str) -> PathBuf {
    let recorded = found
        .story()
        .attempts
        .iter()
        .rfind(|r| r.attempt == attempt && r.phase == phase)
        .and_then(|r| r.log.as_deref());
    match recorded {
        Some(log) => PathBuf::from(log),
        None => found
            .artifacts
            .join("logs")
            .join(format!("{}-{phase}-{attempt}.log", found.story().id)),
    }
}

/// Whether attempt `n` may still write to its logs: the run runs it and it
/// has no outcome yet (its review runs before the outcome is known).
fn attempt_going(found: &Located, n: u32) -> bool {
    found.running()
        && found
            .story()
            .attempts
            .iter()
            .rfind(|r| r.attempt == n)
            .is_some_and(|r| r.outcome.is_none())
}

/// No log for what was asked: say which logs the story has.
fn no_log(found: &Located, attempt: u32, phase: &str) -> Failure {
    let id = &found.story().id;
    let mut have: Vec<String> = std::fs::read_dir(found.artifacts.join("logs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(id.as_str())?.strip_prefix('-')?;
            let (phase, n) = rest.strip_suffix(".log")?.rsplit_once('-')?;
            // `a-b-review-1.log` is story `a-b`'s, not story `a`'s.
            let ok = n.parse::<u32>().is_ok() && !phase.contains('-');
            ok.then(|| format!("--attempt {n} --phase {phase}"))
        })
        .collect();
    have.sort();
    let hint = match have.is_empty() {
        true => "it has no agent logs yet".to_string(),
        false => format!("it has: {}", have.join("; ")),
    };
    Failure::usage(anyhow::anyhow!(
        "no {phase} log of attempt {attempt} of story '{}': {hint}",
        found.name()
    ))
}

fn read_error(path: &Path) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| Failure::failed(anyhow::anyhow!("cannot read '{}': {e}", path.display()))
}

/// Prints a growing file piece by piece: whole lines while it grows (so a
/// character split between two reads is never mangled), the rest at the end.
#[derive(Default)]
struct LogReader {
    offset: u64,
    partial: Vec<u8>,
    /// `--json`: each line as an object; `None`: the text as it is (made safe).
    json: Option<JsonLines>,
}

/// What every `--json` line says besides its text (`line` counts the
/// lines printed so far, from 1).
struct JsonLines {
    story: String,
    attempt: u32,
    phase: String,
    path: String,
    line: u64,
}

impl JsonLines {
    /// One object per line of `text` (a last line without a newline too),
    /// `text` without its newline; JSON escapes what a terminal must not get.
    fn render(&mut self, text: &str) -> String {
        let mut out = String::new();
        for line in text.split_inclusive('\n') {
            self.line += 1;
            let value = serde_json::json!({
                "story": self.story,
                "attempt": self.attempt,
                "phase": self.phase,
                "path": self.path,
                "line": self.line,
                "text": line.strip_suffix('\n').unwrap_or(line),
            });
            out.push_str(&value.to_string());
            out.push('\n');
        }
        out
    }
}

impl LogReader {
    /// Prints what the file gained since the last call (all of it when
    /// `last`, else up to its last newline).
    fn print_new(&mut self, path: &Path, last: bool) -> std::io::Result<()> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        if len < self.offset {
            // Rewritten (a fresh log): start over.
            self.offset = 0;
            self.partial.clear();
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let read = file.read_to_end(&mut self.partial)?;
        self.offset += read as u64;
        let cut = match last {
            true => self.partial.len(),
            false => self
                .partial
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1),
        };
        if cut == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.partial[..cut]).into_owned();
        self.partial.drain(..cut);
        let shown = match &mut self.json {
            Some(json) => json.render(&text),
            None => printable(&text).into_owned(),
        };
        let mut out = crate::cli::out::stdout();
        // A failed write is recorded by `out` (and ends a follow).
        let _ = out.write_all(shown.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_growing_log_is_printed_in_whole_lines() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.log");
        std::fs::write(&path, "one\ntw").unwrap();
        let mut r = LogReader::default();
        r.print_new(&path, false).unwrap();
        assert_eq!(r.offset, 6);
        assert_eq!(r.partial, b"tw");
        std::fs::write(&path, "one\ntwo\nthr").unwrap();
        r.print_new(&path, false).unwrap();
        assert_eq!(r.partial, b"thr");
        r.print_new(&path, true).unwrap();
        assert!(r.partial.is_empty());
        // A shorter file is a new log: read from its start.
        std::fs::write(&path, "new\n").unwrap();
        r.print_new(&path, false).unwrap();
        assert_eq!(r.offset, 4);
    }

    #[test]
    fn json_lines_are_numbered_objects_without_the_newline() {
        let mut json = JsonLines {
            story: "auth/a".into(),
            attempt: 2,
            phase: "review".into(),
            path: "/x/a-review-2.log".into(),
            line: 0,
        };
        let first = json.render("== cascade: header\n\x1b[31mred\n");
        let rest = json.render("no newline");
        let lines: Vec<serde_json::Value> = first
            .lines()
            .chain(rest.lines())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["line"], 1);
        assert_eq!(lines[0]["text"], "== cascade: header");
        assert_eq!(lines[1]["text"], "\x1b[31mred");
        assert!(first.contains("\\u001b"), "escaped in the JSON: {first}");
        assert_eq!(lines[2]["line"], 3);
        assert_eq!(lines[2]["text"], "no newline");
        assert_eq!(lines[2]["story"], "auth/a");
        assert_eq!(lines[2]["attempt"], 2);
        assert_eq!(lines[2]["phase"], "review");
        assert_eq!(lines[2]["path"], "/x/a-review-2.log");
    }
}
