//! `cascade history [runs|stories|agents] [--run ID] [--json]`: what the run
//! database (`.cascade/cascade.db`) remembers of past runs: the runs, one
//! run's stories with their attempts, and the outcomes per agent and story
//! type. The queries are the engine's (`cascade_engine::store::history`);
//! this renders them as tables or JSON.

use std::io::Write;

use cascade_engine::store::history::{self, AgentRow, RunRow, StoryRow};
use clap::{Args, ValueEnum};

use super::{CliResult, Failure, Global, EXIT_OK};

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// What to show: the runs (newest first), one run's stories with their
    /// attempts, or the judged attempts per agent and story type
    #[arg(value_enum, default_value_t = View::Runs)]
    pub view: View,
    /// The run whose stories to show (default: the latest)
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum View {
    Runs,
    Stories,
    Agents,
}

pub fn run(_g: &Global, a: HistoryArgs) -> CliResult {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(anyhow::anyhow!("cannot read the current directory: {e}")))?;
    let paths = cascade_git::RepoPaths::discover(&cwd).map_err(Failure::usage)?;
    let db = cascade_engine::store::db_path(&paths.cascade_dir());
    let mut out = std::io::BufWriter::new(super::out::stdout());
    let written = match a.view {
        View::Runs => {
            let runs = history::runs(&db).map_err(Failure::usage)?;
            if a.json {
                json_line(&mut out, &serde_json::json!({ "runs": runs }))
            } else {
                runs_text(&mut out, &runs)
            }
        }
        View::Stories => {
            let found = history::stories(&db, a.run.as_deref()).map_err(Failure::usage)?;
            let Some((run_id, stories)) = found else {
                return Err(Failure::usage(match &a.run {
                    Some(id) => anyhow::anyhow!(
                        "no run '{id}' in {}: `cascade history` lists the runs",
                        db.display()
                    ),
                    None => anyhow::anyhow!("no run yet: start one with `cascade approve`"),
                }));
            };
            if a.json {
                let v = serde_json::json!({ "run_id": run_id, "stories": stories });
                json_line(&mut out, &v)
            } else {
                stories_text(&mut out, &run_id, &stories)
            }
        }
        View::Agents => {
            let agents = history::agents(&db).map_err(Failure::usage)?;
            if a.json {
                json_line(&mut out, &serde_json::json!({ "agents": agents }))
            } else {
                agents_text(&mut out, &agents)
            }
        }
    };
    // A closed pipe (`| head`) is recorded by `out` and told by the exit code.
    let _ = written.and_then(|()| out.flush());
    Ok(EXIT_OK)
}

fn json_line(out: &mut impl Write, v: &serde_json::Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, v).map_err(std::io::Error::from)?;
    writeln!(out)
}

/// Rows under a header, each column as wide as its widest cell.
fn table(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cells: &mut dyn Iterator<Item = &str>| {
        let text: Vec<String> = cells
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        writeln!(out, "{}", text.join("  ").trim_end())
    };
    line(out, &mut header.iter().copied())?;
    for row in rows {
        line(out, &mut row.iter().map(String::as_str))?;
    }
    Ok(())
}

fn usd(v: f64) -> String {
    format!("${v:.2}")
}

fn seconds(ms: f64) -> String {
    format!("{:.1}s", ms / 1000.0)
}

fn runs_text(out: &mut impl Write, runs: &[RunRow]) -> std::io::Result<()> {
    if runs.is_empty() {
        return writeln!(out, "No runs yet: start one with `cascade approve`.");
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.id.clone(),
                r.status.clone(),
                r.stories.to_string(),
                r.complete.to_string(),
                r.failed.to_string(),
                r.blocked.to_string(),
                r.attempts.to_string(),
                usd(r.cost_usd),
                r.started_at.clone(),
                r.prd.clone(),
            ]
        })
        .collect();
    let header = [
        "RUN", "STATUS", "STORIES", "COMPLETE", "FAILED", "BLOCKED", "ATTEMPTS", "COST", "STARTED",
        "PRD",
    ];
    table(out, &header, &rows)
}

fn stories_text(out: &mut impl Write, run_id: &str, stories: &[StoryRow]) -> std::io::Result<()> {
    writeln!(out, "Run {run_id}: {} stories", stories.len())?;
    for s in stories {
        let kind = s.story_type.as_deref().map(|t| format!(" [{t}]"));
        let agent = s.agent.as_deref().map(|a| format!(" via {a}"));
        writeln!(
            out,
            "{} {}{}{}",
            s.id,
            s.status,
            kind.unwrap_or_default(),
            agent.unwrap_or_default()
        )?;
        for a in &s.attempts {
            let mut line = format!("  #{} {} {}", a.number, a.agent, a.phase);
            line.push_str(&format!(" {}", a.outcome.as_deref().unwrap_or("running")));
            if let Some(kind) = &a.error_type {
                line.push_str(&format!(" ({kind})"));
            }
            if let Some(ms) = a.duration_ms {
                line.push_str(&format!(" {}", seconds(ms as f64)));
            }
            if let Some(cost) = a.cost_usd {
                line.push_str(&format!(" {}", usd(cost)));
            }
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

fn agents_text(out: &mut impl Write, agents: &[AgentRow]) -> std::io::Result<()> {
    if agents.is_empty() {
        return writeln!(out, "No judged attempts yet.");
    }
    let rows: Vec<Vec<String>> = agents
        .iter()
        .map(|a| {
            vec![
                a.agent.clone(),
                a.story_type.clone().unwrap_or_else(|| "-".into()),
                a.attempts.to_string(),
                a.passed.to_string(),
                format!("{:.0}%", a.success_rate * 100.0),
                usd(a.cost_usd),
                a.mean_duration_ms.map_or_else(|| "-".into(), seconds),
            ]
        })
        .collect();
    let header = [
        "AGENT",
        "TYPE",
        "ATTEMPTS",
        "PASSED",
        "SUCCESS",
        "COST",
        "MEAN DURATION",
    ];
    table(out, &header, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_engine::store::history::AttemptRow;

    fn text(f: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
        let mut out = Vec::new();
        f(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_three_views_as_text() {
        let runs = vec![
            RunRow {
                id: "20260102T090000Z-42".into(),
                status: "failed".into(),
                prd: "prd.json".into(),
                started_at: "2026-01-02T09:00:00.000Z".into(),
                finished_at: Some("2026-01-02T09:30:00.000Z".into()),
                stories: 3,
                complete: 1,
                failed: 1,
                blocked: 1,
                attempts: 4,
                cost_usd: 0.375,
            },
            RunRow {
                id: "20260101T090000Z-7".into(),
                status: "completed".into(),
                prd: "plans/next/prd.json".into(),
                started_at: "2026-01-01T09:00:00.000Z".into(),
                finished_at: None,
                stories: 12,
                complete: 12,
                failed: 0,
                blocked: 0,
                attempts: 12,
                cost_usd: 1.5,
            },
        ];
        let attempt =
            |number, agent: &str, phase: &str, outcome: &str, kind: Option<&str>| AttemptRow {
                number,
                agent: agent.into(),
                phase: phase.into(),
                outcome: Some(outcome.into()),
                error_type: kind.map(String::from),
                duration_ms: Some(1_250),
                cost_usd: Some(0.125),
            };
        let stories = vec![
            StoryRow {
                id: "story-001".into(),
                status: "complete".into(),
                story_type: Some("feature".into()),
                agent: Some("claude-code".into()),
                attempts: vec![
                    attempt(1, "codex", "implementation", "failed", Some("quality_gate")),
                    attempt(2, "claude-code", "retry", "passed", None),
                ],
            },
            StoryRow {
                id: "story-002".into(),
                status: "blocked".into(),
                story_type: None,
                agent: None,
                attempts: Vec::new(),
            },
        ];
        let agents = vec![
            AgentRow {
                agent: "claude-code".into(),
                story_type: Some("feature".into()),
                attempts: 3,
                passed: 2,
                success_rate: 2.0 / 3.0,
                cost_usd: 0.5,
                mean_duration_ms: Some(62_000.0),
            },
            AgentRow {
                agent: "codex".into(),
                story_type: None,
                attempts: 1,
                passed: 0,
                success_rate: 0.0,
                cost_usd: 0.0,
                mean_duration_ms: None,
            },
        ];
        let all = format!(
            "{}\n{}\n{}",
            text(|o| runs_text(o, &runs)),
            text(|o| stories_text(o, "20260102T090000Z-42", &stories)),
            text(|o| agents_text(o, &agents)),
        );
        insta::assert_snapshot!(all);
        assert!(text(|o| runs_text(o, &[])).contains("No runs yet"));
    }
}
