//! `cascade show STORY [--json]`: one story of the run in full: every
//! attempt (agent, phase, outcome, duration, failure kind and reason, the
//! gates it ran with their parsed errors), verification findings, the
//! review's verdict, the diff stat of its branch against the target, and
//! what it cost ("unknown" where an agent reported no spend: unknown spend
//! is never shown as $0).

use std::io::Write;

use cascade_engine::state::{AttemptRecord, ReviewRecord};
use cascade_gates::{GateError, GateReport};
use clap::Args;
use serde::Serialize;

use super::{locate, Located};
use crate::cli::color;
use crate::cli::report::{human_count, human_duration, printable, printable_line, short_oid};
use crate::cli::{CliResult, Global, EXIT_OK};

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The story: its id, or FEATURE/STORY in a mega run
    pub story: String,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn run(_g: &Global, a: ShowArgs) -> CliResult {
    let found = locate(&a.story)?;
    let view = view(&found);
    let mut out = std::io::BufWriter::new(crate::cli::out::stdout());
    let written = if a.json {
        serde_json::to_writer_pretty(&mut out, &view)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        text(&view, &mut out, color::stdout())
    };
    let _ = written.and_then(|()| out.flush());
    Ok(EXIT_OK)
}

/// `show --json` (and what the text prints).
#[derive(Debug, Serialize)]
pub struct StoryView<'a> {
    /// `STORY` or `FEATURE/STORY`.
    pub story: String,
    pub id: &'a str,
    pub feature: Option<&'a str>,
    pub run_id: &'a str,
    pub status: &'static str,
    pub agent: Option<&'a str>,
    pub branch: Option<&'a str>,
    pub worktree: Option<&'a str>,
    pub target_branch: &'a str,
    pub merge_commit: Option<&'a str>,
    pub failure_kind: Option<&'static str>,
    pub error: Option<&'a str>,
    pub blocked_by: &'a [String],
    pub attempts: Vec<AttemptView<'a>>,
    pub verification: &'a [String],
    pub review: Option<&'a ReviewRecord>,
    /// `None`: no branch or commit to compare (the story never committed).
    pub diff: Option<DiffView>,
    pub cost: CostView,
}

#[derive(Debug, Serialize)]
pub struct AttemptView<'a> {
    pub attempt: u32,
    pub agent: &'a str,
    pub phase: &'a str,
    /// passed | failed | interrupted | running
    pub outcome: &'a str,
    pub failure_kind: Option<&'static str>,
    pub error: Option<&'a str>,
    pub started_at: &'a str,
    pub finished_at: Option<&'a str>,
    pub duration_ms: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// `None`: the agent reported no spend (unknown, not $0).
    pub cost_usd: Option<f64>,
    pub cost_estimated: Option<bool>,
    pub log: Option<&'a str>,
    /// The gates this attempt ran (empty: it ran none, or their results were not kept).
    pub gates: Vec<GateView>,
}

#[derive(Debug, Serialize)]
pub struct GateView {
    pub name: String,
    pub passed: bool,
    pub required: bool,
    pub cached: bool,
    pub skipped: bool,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub outcome: Option<String>,
    pub errors: Vec<GateError>,
}

#[derive(Debug, Serialize)]
pub struct DiffView {
    /// What the branch is compared with (the run's target branch).
    pub base: String,
    /// The branch (or the story's commit when its branch is gone).
    pub head: String,
    pub files: Vec<FileView>,
    pub added: usize,
    pub removed: usize,
}

#[derive(Debug, Serialize)]
pub struct FileView {
    pub path: String,
    pub added: usize,
    pub removed: usize,
    pub binary: bool,
}

/// The story's spend over its attempts.
#[derive(Debug, Serialize)]
pub struct CostView {
    /// The sum of what the attempts that reported spend cost; `None` when
    /// none reported any.
    pub usd: Option<f64>,
    /// Attempts that reported no spend (their cost is unknown).
    pub unknown_attempts: usize,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// Everything `show` prints about the story found.
pub fn view(found: &Located) -> StoryView<'_> {
    let s = found.story();
    let running = found.running();
    let attempts = s
        .attempts
        .iter()
        .map(|a| attempt_view(found, a, running))
        .collect();
    StoryView {
        story: found.name(),
        id: &s.id,
        feature: found.feature.as_deref(),
        run_id: &found.state.run_id,
        status: crate::cli::status_cmd::shown_status(s.status, found.live.is_some()),
        agent: s.agent.as_deref(),
        branch: s.branch.as_deref(),
        worktree: s.worktree.as_deref(),
        target_branch: &found.state.target_branch,
        merge_commit: s.merge_commit.as_deref(),
        failure_kind: s.error_type.map(|k| k.as_str()),
        error: s.error.as_deref(),
        blocked_by: &s.blocked_by,
        attempts,
        verification: &s.verification,
        review: s.review.as_ref(),
        diff: diff(found),
        cost: cost(&s.attempts),
    }
}

fn attempt_view<'a>(found: &Located, a: &'a AttemptRecord, running: bool) -> AttemptView<'a> {
    let outcome = match a.outcome.as_deref() {
        Some(o) => o,
        None if running => "running",
        None => cascade_engine::state::INTERRUPTED,
    };
    AttemptView {
        attempt: a.attempt,
        agent: &a.agent,
        phase: &a.phase,
        outcome,
        failure_kind: a.error_type.map(|k| k.as_str()),
        error: a.error.as_deref(),
        started_at: &a.started_at,
        finished_at: a.finished_at.as_deref(),
        duration_ms: a.duration_ms,
        input_tokens: a.input_tokens,
        output_tokens: a.output_tokens,
        cost_usd: a.cost_usd,
        cost_estimated: a.cost_estimated,
        log: a.log.as_deref(),
        gates: gates(found, a.attempt),
    }
}

/// The gate results the engine kept for attempt `n` (none when it ran no
/// gates, or the file cannot be read: `show` reports what is there).
fn gates(found: &Located, n: u32) -> Vec<GateView> {
    let path = cascade_engine::gate_report_path(&found.artifacts, &found.story().id, n);
    let Ok(bytes) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(report) = serde_json::from_slice::<GateReport>(&bytes) else {
        return Vec::new();
    };
    report
        .gates
        .into_iter()
        .map(|g| GateView {
            name: g.name,
            passed: g.passed,
            required: g.required,
            cached: g.cached,
            skipped: g.skipped,
            timed_out: g.timed_out,
            duration_ms: g.duration_ms,
            outcome: g.outcome,
            errors: g.errors,
        })
        .collect()
}

/// The stat of the story's branch (or, once it is gone, its commit)
/// against the target branch.
fn diff(found: &Located) -> Option<DiffView> {
    let s = found.story();
    let base = &found.state.target_branch;
    let heads = [s.branch.as_deref(), s.commit.as_deref()];
    let (head, files) = heads.into_iter().flatten().find_map(|head| {
        cascade_git::diff::diff_stat(&found.repo, base, head)
            .ok()
            .map(|files| (head, files))
    })?;
    Some(DiffView {
        base: base.clone(),
        head: head.to_string(),
        added: files.iter().map(|f| f.added).sum(),
        removed: files.iter().map(|f| f.removed).sum(),
        files: files
            .into_iter()
            .map(|f| FileView {
                path: f.path,
                added: f.added,
                removed: f.removed,
                binary: f.binary,
            })
            .collect(),
    })
}

fn cost(attempts: &[AttemptRecord]) -> CostView {
    let sum = |f: fn(&AttemptRecord) -> Option<u64>| -> Option<u64> {
        attempts.iter().filter_map(f).reduce(|a, b| a + b)
    };
    CostView {
        usd: attempts
            .iter()
            .filter_map(|a| a.cost_usd)
            .reduce(|a, b| a + b),
        unknown_attempts: attempts.iter().filter(|a| a.cost_usd.is_none()).count(),
        input_tokens: sum(|a| a.input_tokens),
        output_tokens: sum(|a| a.output_tokens),
    }
}

/// `$0.0123`, or "unknown" for spend no agent reported.
pub fn usd(cost: Option<f64>) -> String {
    cost.map_or_else(|| "unknown".to_string(), |c| format!("${c:.4}"))
}

/// The text form of `show`.
fn text(v: &StoryView<'_>, out: &mut impl Write, on: bool) -> std::io::Result<()> {
    head(v, out, on)?;
    writeln!(out, "attempts:")?;
    if v.attempts.is_empty() {
        writeln!(out, "  none yet")?;
    }
    for a in &v.attempts {
        attempt_text(a, out, on)?;
    }
    findings_text(v, out, on)?;
    diff_text(v.diff.as_ref(), out)?;
    cost_text(&v.cost, out)
}

/// The story's line, where it stands and why.
fn head(v: &StoryView<'_>, out: &mut impl Write, on: bool) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} (run {}){}",
        printable_line(&v.story),
        color::status(v.status, on),
        v.run_id,
        v.agent
            .map(|a| format!(", agent {}", printable_line(a)))
            .unwrap_or_default()
    )?;
    if let Some(b) = v.branch {
        let merged = v
            .merge_commit
            .map(|m| format!(", merged as {}", short_oid(m)))
            .unwrap_or_default();
        writeln!(out, "branch: {b} -> {}{merged}", v.target_branch)?;
    }
    if let Some(w) = v.worktree {
        writeln!(out, "worktree: {w}")?;
    }
    if !v.blocked_by.is_empty() {
        writeln!(out, "blocked by: {}", v.blocked_by.join(", "))?;
    }
    if let Some(e) = v.error {
        let kind = v.failure_kind.map(|k| format!("{k}: ")).unwrap_or_default();
        writeln!(out, "failure: {kind}{}", printable(e).trim_end())?;
    }
    Ok(())
}

fn attempt_text(a: &AttemptView<'_>, out: &mut impl Write, on: bool) -> std::io::Result<()> {
    let took = a.duration_ms.map(human_duration).unwrap_or_default();
    let kind = a
        .failure_kind
        .map(|k| format!(" ({k})"))
        .unwrap_or_default();
    let tokens = token_pair(a.input_tokens, a.output_tokens)
        .map(|t| format!(", {t} tokens"))
        .unwrap_or_default();
    writeln!(
        out,
        "  #{} {} by {}: {}{kind} {took}, cost {}{tokens}",
        a.attempt,
        a.phase,
        printable_line(a.agent),
        color::status(a.outcome, on),
        usd(a.cost_usd)
    )?;
    if let Some(e) = a.error {
        writeln!(
            out,
            "     {}",
            printable(e).trim_end().replace('\n', "\n     ")
        )?;
    }
    for g in &a.gates {
        let word = match (g.skipped, g.passed) {
            (true, _) => "skipped",
            (false, true) => "passed",
            (false, false) => "failed",
        };
        let mut notes = Vec::new();
        if g.cached {
            notes.push("cached".to_string());
        }
        if !g.required {
            notes.push("optional".to_string());
        }
        if let Some(o) = g.outcome.as_deref().filter(|_| !g.passed) {
            notes.push(printable_line(o).into_owned());
        }
        let notes = match notes.is_empty() {
            true => String::new(),
            false => format!(" ({})", notes.join(", ")),
        };
        writeln!(
            out,
            "     gate {} {} {}{notes}",
            printable_line(&g.name),
            color::status(word, on),
            human_duration(g.duration_ms)
        )?;
        for e in g.errors.iter().take(10) {
            writeln!(out, "       {}", printable_line(&e.display_line()))?;
        }
        if g.errors.len() > 10 {
            writeln!(out, "       ... and {} more", g.errors.len() - 10)?;
        }
    }
    Ok(())
}

fn findings_text(v: &StoryView<'_>, out: &mut impl Write, on: bool) -> std::io::Result<()> {
    if !v.verification.is_empty() {
        writeln!(out, "verification:")?;
        for f in v.verification {
            writeln!(out, "  {}", printable_line(f))?;
        }
    }
    if let Some(r) = v.review {
        let note = r
            .note
            .as_deref()
            .map(|n| format!(" ({})", printable_line(n)))
            .unwrap_or_default();
        writeln!(
            out,
            "review: {} by {}{note}",
            color::status(&r.verdict, on),
            printable_line(&r.agent)
        )?;
        for line in r.findings.lines() {
            writeln!(out, "  {}", printable_line(line))?;
        }
    }
    Ok(())
}

fn diff_text(d: Option<&DiffView>, out: &mut impl Write) -> std::io::Result<()> {
    let Some(d) = d else {
        return writeln!(out, "diff: no commit yet");
    };
    let n = d.files.len();
    writeln!(
        out,
        "diff {}...{}: {n} file{} changed, {} insertion{}(+), {} deletion{}(-)",
        d.base,
        d.head,
        if n == 1 { "" } else { "s" },
        d.added,
        if d.added == 1 { "" } else { "s" },
        d.removed,
        if d.removed == 1 { "" } else { "s" },
    )?;
    let width = d.files.iter().map(|f| f.path.len()).max().unwrap_or(0);
    for f in &d.files {
        let change = match f.binary {
            true => "binary".to_string(),
            false => format!("+{} -{}", f.added, f.removed),
        };
        writeln!(out, "  {:<width$}  {change}", printable_line(&f.path))?;
    }
    Ok(())
}

fn cost_text(c: &CostView, out: &mut impl Write) -> std::io::Result<()> {
    let unknown = match (c.usd, c.unknown_attempts) {
        (Some(_), n) if n > 0 => format!(
            " (+ unknown for {n} attempt{} that reported no spend)",
            if n == 1 { "" } else { "s" }
        ),
        _ => String::new(),
    };
    let tokens = token_pair(c.input_tokens, c.output_tokens)
        .map(|t| format!(", {t} tokens (in/out)"))
        .unwrap_or_default();
    writeln!(out, "cost: {}{unknown}{tokens}", usd(c.usd))
}

/// `1.2k/300` (in/out), `None` when the agent reported neither.
fn token_pair(input: Option<u64>, output: Option<u64>) -> Option<String> {
    match (input, output) {
        (None, None) => None,
        (i, o) => Some(format!(
            "{}/{}",
            i.map_or("-".into(), human_count),
            o.map_or("-".into(), human_count)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A story that failed its gate once, then passed and was reviewed,
    /// with spend reported by one attempt only.
    fn view() -> StoryView<'static> {
        let gate = |passed: bool, errors: Vec<GateError>| GateView {
            name: "tests".into(),
            passed,
            required: true,
            cached: passed,
            skipped: false,
            timed_out: false,
            duration_ms: 1200,
            outcome: (!passed).then(|| "exit code 1".to_string()),
            errors,
        };
        let error = GateError {
            file: Some("src/lib.rs".into()),
            line: Some(3),
            column: Some(5),
            code: Some("E0308".into()),
            message: "mismatched types".into(),
            severity: cascade_gates::Severity::Error,
        };
        let review: &'static ReviewRecord = Box::leak(Box::new(ReviewRecord {
            agent: "reviewer".into(),
            verdict: "pass".into(),
            findings: "reads well".into(),
            note: None,
        }));
        StoryView {
            story: "story-002".into(),
            id: "story-002",
            feature: None,
            run_id: "run-1",
            status: "complete",
            agent: Some("codex"),
            branch: Some("cascade/story-002"),
            worktree: None,
            target_branch: "main",
            merge_commit: Some("0123456789abcdef"),
            failure_kind: None,
            error: None,
            blocked_by: &[],
            attempts: vec![
                AttemptView {
                    attempt: 1,
                    agent: "codex",
                    phase: "implementation",
                    outcome: "failed",
                    failure_kind: Some("quality_gate"),
                    error: Some("quality gate 'tests' failed"),
                    started_at: "2026-01-28T10:30:00Z",
                    finished_at: Some("2026-01-28T10:31:00Z"),
                    duration_ms: Some(61_000),
                    input_tokens: Some(12_000),
                    output_tokens: Some(800),
                    cost_usd: Some(0.125),
                    cost_estimated: Some(false),
                    log: None,
                    gates: vec![gate(false, vec![error])],
                },
                AttemptView {
                    attempt: 2,
                    agent: "aider",
                    phase: "retry",
                    outcome: "passed",
                    failure_kind: None,
                    error: None,
                    started_at: "2026-01-28T10:31:05Z",
                    finished_at: Some("2026-01-28T10:32:05Z"),
                    duration_ms: Some(4_500),
                    input_tokens: None,
                    output_tokens: None,
                    cost_usd: None,
                    cost_estimated: None,
                    log: None,
                    gates: vec![gate(true, Vec::new())],
                },
            ],
            verification: &[],
            review: Some(review),
            diff: Some(DiffView {
                base: "main".into(),
                head: "cascade/story-002".into(),
                files: vec![
                    FileView {
                        path: "src/lib.rs".into(),
                        added: 12,
                        removed: 3,
                        binary: false,
                    },
                    FileView {
                        path: "logo.png".into(),
                        added: 0,
                        removed: 0,
                        binary: true,
                    },
                ],
                added: 12,
                removed: 3,
            }),
            cost: CostView {
                usd: Some(0.125),
                unknown_attempts: 1,
                input_tokens: Some(12_000),
                output_tokens: Some(800),
            },
        }
    }

    #[test]
    fn the_text_of_a_story_retried_then_merged() {
        let mut out = Vec::new();
        text(&view(), &mut out, false).unwrap();
        insta::assert_snapshot!(String::from_utf8(out).unwrap());
    }

    #[test]
    fn status_words_are_coloured_when_asked() {
        let mut out = Vec::new();
        text(&view(), &mut out, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\x1b[32mcomplete\x1b[0m"), "{text}");
        assert!(text.contains("\x1b[31mfailed\x1b[0m"), "{text}");
    }
}
