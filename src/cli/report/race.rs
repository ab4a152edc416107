//! A racing story's round as text: the outcome (winner, reason,
//! runners-up), then the contestants side by side (status, review verdict,
//! gates, diff size, cost, branch). The one rendering of a race that the
//! final summary and `cascade status` both print.

use cascade_engine::race::{ContestantRecord, ContestantStatus, RaceRecord};

/// The race of `story`: its outcome line, then one aligned line per
/// contestant (each indented by two spaces more than `indent`).
pub fn lines(story: &str, race: &RaceRecord, indent: &str) -> Vec<String> {
    let mut out = vec![format!("{indent}{story}: {}", outcome(race))];
    let rows: Vec<[String; 6]> = race.contestants.iter().map(row).collect();
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for (r, c) in rows.iter().zip(&race.contestants) {
        let mark = if race.winner.as_deref() == Some(c.name.as_str()) {
            "*"
        } else {
            " "
        };
        let mut line = format!("{indent}  {mark} ");
        for (i, cell) in r.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < r.len() {
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push(line.trim_end().to_string());
        if let (Some(error), false) = (&c.error, c.status == ContestantStatus::Passed) {
            let first = error.lines().next().unwrap_or_default();
            out.push(format!("{indent}      {}", super::printable(first)));
        }
    }
    out
}

/// `race won by small over big: smaller change (1 vs 40 lines)`, or where
/// the round stands.
fn outcome(race: &RaceRecord) -> String {
    let names: Vec<&str> = race.contestants.iter().map(|c| c.name.as_str()).collect();
    match (&race.winner, &race.reason) {
        (Some(w), reason) => {
            let over = if race.runners_up.is_empty() {
                String::new()
            } else {
                format!(" over {}", race.runners_up.join(", "))
            };
            let why = reason
                .as_deref()
                .map(|r| format!(": {}", super::printable(r)))
                .unwrap_or_default();
            format!("race won by {w}{over}{why}")
        }
        (None, _)
            if race
                .contestants
                .iter()
                .any(|c| c.status == ContestantStatus::Running) =>
        {
            format!("race of {} (until {})", names.join(", "), race.until)
        }
        (None, _) => format!("race of {}: no contestant passed", names.join(", ")),
    }
}

/// A contestant's cells: name, status, review, gates, diff size, cost and
/// branch.
fn row(c: &ContestantRecord) -> [String; 6] {
    let status = match (c.status, c.error_type) {
        (ContestantStatus::Failed, Some(kind)) => format!("failed ({})", kind.as_str()),
        (s, _) => s.as_str().replace('_', " "),
    };
    let review = c
        .verdict
        .as_deref()
        .map_or("review -".to_string(), |v| format!("review {v}"));
    let gates = if c.gates.is_empty() {
        "gates -".to_string()
    } else {
        let passed = c.gates.iter().filter(|g| g.passed).count();
        format!("gates {passed}/{}", c.gates.len())
    };
    let size = c
        .lines_changed
        .map_or("-".to_string(), |n| format!("{n} lines"));
    let cost = c.cost_usd.map_or("cost -".into(), |c| format!("${c:.4}"));
    [
        c.name.clone(),
        status,
        review,
        format!("{gates}  {size}"),
        cost,
        c.branch.clone(),
    ]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cascade_engine::events::GateSummary;
    use cascade_engine::FailureKind;

    /// The race of the worked example in docs/racing.md, as recorded.
    pub(crate) fn example() -> RaceRecord {
        let c = |name: &str, status: ContestantStatus, lines: Option<u64>| ContestantRecord {
            name: name.into(),
            agent: name.into(),
            attempt: 1,
            branch: format!("cascade/s1/race-{name}"),
            status,
            error_type: None,
            error: None,
            verdict: None,
            findings: lines.map(|_| 0),
            gates: vec![GateSummary {
                name: "check".into(),
                passed: status == ContestantStatus::Passed,
                cached: false,
                flaky: false,
            }],
            lines_changed: lines,
            cost_usd: None,
            base: None,
            commit: None,
        };
        let mut broken = c("broken", ContestantStatus::Failed, None);
        broken.error_type = Some(FailureKind::QualityGate);
        broken.error = Some("quality gate 'check' failed".into());
        let mut small = c("small", ContestantStatus::Passed, Some(1));
        small.cost_usd = Some(0.0123);
        small.verdict = Some("pass".into());
        RaceRecord {
            until: cascade_engine::race::RaceUntil::All,
            keep: cascade_engine::race::RaceKeep::All,
            contestants: vec![broken, c("big", ContestantStatus::Passed, Some(40)), small],
            winner: Some("small".into()),
            reason: Some("smaller change (1 vs 40 lines)".into()),
            runners_up: vec!["big".into()],
        }
    }

    #[test]
    fn a_race_reads_as_its_outcome_then_the_contestants_side_by_side() {
        insta::assert_snapshot!(lines("s1", &example(), "  ").join("\n"));
    }

    #[test]
    fn a_round_under_way_and_one_nobody_won_say_so() {
        let mut race = example();
        race.winner = None;
        race.reason = None;
        race.runners_up.clear();
        race.contestants[1].status = ContestantStatus::Running;
        assert_eq!(
            lines("s1", &race, "")[0],
            "s1: race of broken, big, small (until all)"
        );
        race.contestants[1].status = ContestantStatus::Failed;
        race.contestants[2].status = ContestantStatus::Stopped;
        assert_eq!(
            lines("s1", &race, "")[0],
            "s1: race of broken, big, small: no contestant passed"
        );
    }
}
