//! The final summary table of a run: one row per story with its status,
//! agent, attempts, gates (cached and flaky marked), duration and, where the
//! agent reported them, tokens and cost; then the failures with their errors
//! and a totals line.

use cascade_engine::events::GateSummary;
use cascade_engine::{RunStatus, StoryCounts, StorySummary};

use super::{human_count, human_duration};

/// The summary's line naming `--integration`, so a green report is never
/// read as a green target when merges were not gated as merged.
pub fn integration_line(mode: &str) -> String {
    match mode {
        "trust" => "integration: trust (merges were not gated as merged; the target branch may fail its gates)\n".to_string(),
        mode => format!("integration: {mode} (every merge was gated as merged before the target branch moved)\n"),
    }
}

/// Renders the summary (ends with a newline). `color` adds ANSI colours to
/// statuses.
pub fn render(
    rows: &[StorySummary],
    status: RunStatus,
    counts: &StoryCounts,
    duration_ms: u64,
    color: bool,
) -> String {
    if rows.is_empty() {
        // A table with a header and no rows says nothing.
        return "nothing to run: the plan has no stories (add some to it, then run again)\n"
            .to_string();
    }
    let with_cost = rows.iter().any(|r| r.cost_usd.is_some());
    let mut out = aligned(&table(rows, with_cost), color);
    out.push_str(&failures(rows));
    out.push_str(&checked(rows));
    out.push_str(&races(rows));
    out.push_str(&confinement(rows));
    out.push_str(&totals(rows, status, counts, duration_ms, with_cost));
    out
}

/// The table's cells: a header, then one row per story (the token and
/// cost columns only when some agent reported them).
fn table(rows: &[StorySummary], with_cost: bool) -> Vec<Vec<String>> {
    let with_tokens = rows
        .iter()
        .any(|r| r.input_tokens.is_some() || r.output_tokens.is_some());
    let mut header = vec!["STORY", "STATUS", "AGENT", "ATTEMPTS", "GATES", "DURATION"];
    if with_tokens {
        header.push("TOKENS (in/out)");
    }
    if with_cost {
        header.push("COST");
    }
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for r in rows {
        let mut row = vec![
            r.story.clone(),
            r.status.clone(),
            r.agent.clone().unwrap_or_else(|| "-".into()),
            if r.attempts == 0 {
                "-".into()
            } else {
                r.attempts.to_string()
            },
            gates(&r.gates),
            if r.duration_ms == 0 {
                "-".into()
            } else {
                human_duration(r.duration_ms)
            },
        ];
        if with_tokens {
            row.push(match (r.input_tokens, r.output_tokens) {
                (None, None) => "-".into(),
                (i, o) => format!(
                    "{}/{}",
                    i.map_or("-".into(), human_count),
                    o.map_or("-".into(), human_count)
                ),
            });
        }
        if with_cost {
            // Spend an agent did not report is unknown, never $0.
            row.push(match (r.cost_usd, r.attempts) {
                (Some(c), _) => format!("${c:.2}"),
                (None, 0) => "-".into(),
                (None, _) => "unknown".into(),
            });
        }
        table.push(row);
    }
    table
}

/// The cells in aligned columns (the status column coloured).
fn aligned(table: &[Vec<String>], color: bool) -> String {
    let widths: Vec<usize> = (0..table[0].len())
        .map(|c| table.iter().map(|row| width(&row[c])).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, row) in table.iter().enumerate() {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let last = c + 1 == row.len();
            let text = if i > 0 && c == 1 {
                crate::cli::color::status(cell, color)
            } else {
                cell.clone()
            };
            line.push_str(&text);
            if !last {
                line.push_str(&" ".repeat(widths[c] - width(cell) + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// "failures:" with each failed story's error (nothing when none failed).
fn failures(rows: &[StorySummary]) -> String {
    // A story that failed once and then passed is not a failure.
    let failures: Vec<&StorySummary> = rows
        .iter()
        .filter(|r| r.error.is_some() && r.status != "complete")
        .collect();
    let mut out = String::new();
    if !failures.is_empty() {
        out.push_str("\nfailures:\n");
        for r in failures {
            out.push_str(&format!(
                "  {}: {}\n",
                r.story,
                super::printable(r.error.as_deref().unwrap_or_default())
            ));
        }
    }
    out
}

/// What verification and the reviews found (their last word per story).
fn checked(rows: &[StorySummary]) -> String {
    let checked: Vec<&StorySummary> = rows
        .iter()
        .filter(|r| {
            !r.verification.is_empty() || !r.verification_allowed.is_empty() || r.review.is_some()
        })
        .collect();
    let mut out = String::new();
    if checked.is_empty() {
        return out;
    }
    out.push_str("\nverification and review:\n");
    for r in checked {
        if let Some(first) = r.verification.first() {
            out.push_str(&format!(
                "  {}: verification: {} finding{}, first: {}\n",
                r.story,
                r.verification.len(),
                if r.verification.len() == 1 { "" } else { "s" },
                super::printable(first)
            ));
        }
        for allowed in &r.verification_allowed {
            out.push_str(&format!(
                "  {}: allowed by verify_allow: {}\n",
                r.story,
                super::printable(allowed)
            ));
        }
        if let Some(rv) = &r.review {
            let verdict = match rv.verdict.as_str() {
                "pass" => "PASS".to_string(),
                "needs_revision" => "NEEDS_REVISION".to_string(),
                other => format!("no marker ({other})"),
            };
            let first = rv.findings.lines().map(str::trim).find(|l| !l.is_empty());
            let note = rv
                .note
                .as_deref()
                .map(|n| format!(" ({})", super::printable(n)))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {}: review {verdict} via {}{note}{}\n",
                r.story,
                rv.agent,
                first
                    .map(|f| format!(": {}", super::printable(f)))
                    .unwrap_or_default()
            ));
        }
    }
    out
}

/// "races:" with each racing story's winner, runners-up and contestants
/// (nothing when no story raced).
fn races(rows: &[StorySummary]) -> String {
    let mut out = String::new();
    for r in rows {
        if let Some(race) = &r.race {
            if out.is_empty() {
                out.push_str("\nraces:\n");
            }
            for line in super::race::lines(&r.story, race, "  ") {
                out.push_str(&line);
                out.push('\n');
            }
        }
    }
    out
}

/// The last line: the run's status, the counts, the time, the tokens
/// and cost when reported, and for an interrupted run what continues it.
fn totals(
    rows: &[StorySummary],
    status: RunStatus,
    counts: &StoryCounts,
    duration_ms: u64,
    with_cost: bool,
) -> String {
    let mut totals = format!(
        "\nrun {}: {} complete, {} failed, {} blocked, {} pending in {}",
        status,
        counts.complete,
        counts.failed,
        counts.blocked,
        counts.pending,
        human_duration(duration_ms)
    );
    let tokens: u64 = rows
        .iter()
        .map(|r| r.input_tokens.unwrap_or(0) + r.output_tokens.unwrap_or(0))
        .sum();
    if tokens > 0 {
        totals.push_str(&format!(", {} tokens", human_count(tokens)));
    }
    let cost: f64 = rows.iter().filter_map(|r| r.cost_usd).sum();
    if with_cost {
        let unknown = rows.iter().any(|r| r.cost_usd.is_none() && r.attempts > 0);
        let more = if unknown { " + unknown" } else { "" };
        totals.push_str(&format!(", ${cost:.2}{more}"));
    }
    totals.push_str(&super::continued_by(status, "cascade resume"));
    totals.push('\n');
    totals
}

/// "\nconfinement: landlock abi 7\n" when every attempt that ran had the
/// same, else each story's; nothing when no attempt ran.
fn confinement(rows: &[StorySummary]) -> String {
    let ran: Vec<(&str, &str)> = rows
        .iter()
        .filter_map(|r| r.confinement.as_deref().map(|c| (r.story.as_str(), c)))
        .collect();
    let Some((_, first)) = ran.first() else {
        return String::new();
    };
    if ran.iter().all(|(_, c)| c == first) {
        return format!("\nconfinement: {first}\n");
    }
    let each: Vec<String> = ran.iter().map(|(s, c)| format!("{s} {c}")).collect();
    format!("\nconfinement: {}\n", each.join(", "))
}

/// `tests ✓ (cached), lint ✗`.
fn gates(gates: &[GateSummary]) -> String {
    if gates.is_empty() {
        return "-".into();
    }
    gates
        .iter()
        .map(|g| {
            let mut s = format!("{} {}", g.name, if g.passed { "✓" } else { "✗" });
            if g.cached {
                s.push_str(" (cached)");
            }
            if g.flaky {
                s.push_str(" (flaky)");
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn width(s: &str) -> usize {
    s.chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(story: &str, status: &str) -> StorySummary {
        StorySummary {
            story: story.into(),
            status: status.into(),
            agent: Some("demo".into()),
            attempts: 1,
            gates: vec![],
            duration_ms: 1500,
            input_tokens: None,
            output_tokens: None,
            cost_usd: None,
            error: None,
            verification: vec![],
            verification_allowed: vec![],
            review: None,
            confinement: None,
            race: None,
        }
    }

    #[test]
    fn a_race_is_summed_up_with_its_winner_runners_up_and_contestants() {
        let mut s1 = row("s1", "complete");
        s1.race = Some(crate::cli::report::race::tests::example());
        let counts = StoryCounts {
            complete: 2,
            ..Default::default()
        };
        let text = render(
            &[s1, row("s2", "complete")],
            RunStatus::Completed,
            &counts,
            3000,
            false,
        );
        insta::assert_snapshot!(text);
    }

    #[test]
    fn verification_and_review_findings_are_listed() {
        let mut a = row("s1", "failed");
        a.verification = vec!["calc.py:2: [py-stub-body] function body is only `pass`".into()];
        a.verification_allowed = vec![
            ".cascade/gates.json:1: [gate-config-edit] cascade's configuration changed".into(),
        ];
        let mut b = row("s2", "complete");
        b.review = Some(cascade_engine::state::ReviewRecord {
            agent: "codex".into(),
            verdict: "pass".into(),
            findings: String::new(),
            note: Some("--review-agent names 'codex', the agent that wrote the code: it reviews its own work".into()),
        });
        let mut c = row("s3", "failed");
        c.review = Some(cascade_engine::state::ReviewRecord {
            agent: "codex".into(),
            verdict: "needs_revision".into(),
            findings: "\ncalc.py:2: sum, do not count\nmore".into(),
            note: None,
        });
        let text = render(
            &[a, b, c],
            RunStatus::Failed,
            &StoryCounts::default(),
            10,
            false,
        );
        assert!(text.contains("verification and review:\n"), "{text}");
        assert!(
            text.contains(
                "  s1: allowed by verify_allow: .cascade/gates.json:1: [gate-config-edit] cascade's"
            ),
            "{text}"
        );
        assert!(
            text.contains("  s1: verification: 1 finding, first: calc.py:2: [py-stub-body]"),
            "{text}"
        );
        assert!(
            text.contains("  s2: review PASS via codex (--review-agent names 'codex', the agent that wrote the code: it reviews its own work)\n"),
            "{text}"
        );
        assert!(
            text.contains("  s3: review NEEDS_REVISION via codex: calc.py:2: sum, do not count\n"),
            "{text}"
        );
    }

    #[test]
    fn aligned_table_with_gates_and_failures() {
        let mut a = row("story-001", "complete");
        a.gates = vec![
            GateSummary {
                name: "tests".into(),
                passed: true,
                cached: true,
                flaky: false,
            },
            GateSummary {
                name: "lint".into(),
                passed: true,
                cached: false,
                flaky: true,
            },
        ];
        let mut b = row("story-0002", "failed");
        b.attempts = 4;
        b.error = Some("quality gate 'tests' failed".into());
        let mut c = row("s3", "blocked");
        c.agent = None;
        c.attempts = 0;
        c.duration_ms = 0;
        let counts = StoryCounts {
            complete: 1,
            failed: 1,
            blocked: 1,
            pending: 0,
        };
        let text = render(&[a, b, c], RunStatus::Failed, &counts, 61_000, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("STORY       STATUS    AGENT  ATTEMPTS  GATES"));
        assert!(!lines[0].contains("TOKENS") && !lines[0].contains("COST"));
        assert!(
            lines[1].contains("tests ✓ (cached), lint ✓ (flaky)"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("story-0002  failed    demo   4"),
            "{text}"
        );
        assert!(
            lines[3].starts_with("s3          blocked   -      -"),
            "{text}"
        );
        // Columns line up: STATUS starts at the same offset in every row.
        let col = lines[0].find("STATUS").unwrap();
        assert_eq!(&lines[1][col..col + 8], "complete");
        assert!(text.contains("failures:\n  story-0002: quality gate 'tests' failed\n"));
        assert!(text.ends_with("run failed: 1 complete, 1 failed, 1 blocked, 0 pending in 1m01s\n"));
        assert!(!text.contains('\x1b'));
    }

    #[test]
    fn a_plan_without_stories_is_one_line_not_an_empty_table() {
        let text = render(&[], RunStatus::Completed, &StoryCounts::default(), 3, false);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with("nothing to run"), "{text}");
        assert!(!text.contains("STORY"), "{text}");
    }

    #[test]
    fn tokens_and_cost_when_reported() {
        let mut a = row("a", "complete");
        a.input_tokens = Some(12_000);
        a.output_tokens = Some(800);
        a.cost_usd = Some(0.125);
        let b = row("b", "complete");
        let mut b = b;
        b.error = Some("an earlier attempt failed".into());
        let text = render(
            &[a, b],
            RunStatus::Completed,
            &StoryCounts {
                complete: 2,
                ..Default::default()
            },
            3000,
            true,
        );
        assert!(
            text.contains("TOKENS (in/out)") && text.contains("COST"),
            "{text}"
        );
        assert!(text.contains("12.0k/800"), "{text}");
        assert!(text.contains("$0.13") || text.contains("$0.12"), "{text}");
        assert!(text.contains("\x1b[32mcomplete\x1b[0m"));
        assert!(text.contains("12.8k tokens"), "{text}");
        assert!(!text.contains("failures:"), "{text}");
    }

    #[test]
    fn an_interrupted_run_says_what_continues_it() {
        let mut done = row("done", "complete");
        done.cost_usd = Some(0.25);
        let cut = row("cut", "pending");
        let counts = StoryCounts {
            complete: 1,
            pending: 1,
            ..Default::default()
        };
        let text = render(&[done, cut], RunStatus::Interrupted, &counts, 4200, false);
        let last = text.lines().last().unwrap_or_default();
        assert!(last.starts_with("run interrupted: "), "{text}");
        assert!(last.ends_with("; `cascade resume` continues it"), "{text}");
        insta::assert_snapshot!(text);
        // Any other end says nothing of resuming.
        let text = render(
            &[row("a", "complete")],
            RunStatus::Completed,
            &counts,
            1,
            false,
        );
        assert!(!text.contains("resume"), "{text}");
    }

    #[test]
    fn spend_not_reported_is_unknown_not_zero() {
        let mut paid = row("paid", "complete");
        paid.cost_usd = Some(0.5);
        let silent = row("silent", "complete");
        let mut never = row("never", "blocked");
        never.attempts = 0;
        let text = render(
            &[paid, silent, never],
            RunStatus::Completed,
            &StoryCounts {
                complete: 2,
                blocked: 1,
                ..Default::default()
            },
            1000,
            false,
        );
        let cost_of = |story: &str| {
            text.lines()
                .find(|l| l.starts_with(story))
                .and_then(|l| l.split_whitespace().last())
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(cost_of("paid"), "$0.50", "{text}");
        assert_eq!(cost_of("silent"), "unknown", "{text}");
        assert_eq!(cost_of("never"), "-", "{text}");
        assert!(text.contains(", $0.50 + unknown\n"), "{text}");
        insta::assert_snapshot!(text);
    }
}
