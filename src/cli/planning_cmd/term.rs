//! The person at the terminal: one question at a time (options as a menu,
//! free text allowed), decisions with pros/cons and the recommendation, and
//! the review of the summary. End of input pauses the session.

use std::io::Write;

use cascade_planning::{Decision, Person, Question, ReviewAnswer, Summary};

use crate::cli::report::printable;
use crate::cli::signals::read_line_unless_stopped;

/// `errln!` for lines holding what an agent wrote (questions, options,
/// titles): control characters are shown as escapes, never obeyed.
macro_rules! say {
    ($($t:tt)*) => { errln!("{}", printable(&format!($($t)*))) };
}

pub struct Terminal;

fn ask(prompt: &str) -> Option<String> {
    let mut err = crate::cli::out::stderr();
    let _ = write!(err, "{}", printable(prompt));
    let _ = err.flush();
    read_line_unless_stopped().map(|l| l.trim().to_string())
}

impl Person for Terminal {
    fn question(&mut self, q: &Question, index: usize, total: usize) -> Option<String> {
        say!(
            "\nquestion {index} of {total} ({}): {}",
            q.kind.as_str(),
            q.question
        );
        if !q.context.is_empty() {
            say!("  why it matters: {}", q.context);
        }
        for (i, o) in q.options.iter().enumerate() {
            say!("  {}) {o}", i + 1);
        }
        let hint = match &q.assumption {
            Some(a) => format!("number or your own answer; Enter = \"{a}\""),
            None => "number or your own answer".to_string(),
        };
        loop {
            let line = ask(&format!("[{hint}] > "))?;
            if line.is_empty() {
                if let Some(a) = &q.assumption {
                    return Some(a.clone());
                }
                continue;
            }
            if let Ok(n) = line.parse::<usize>() {
                if (1..=q.options.len()).contains(&n) {
                    return Some(q.options[n - 1].clone());
                }
            }
            return Some(line);
        }
    }

    fn decision(
        &mut self,
        d: &Decision,
        index: usize,
        total: usize,
    ) -> Option<(String, Option<String>)> {
        say!("\ndecision {index} of {total}: {}", d.topic);
        if !d.context.is_empty() {
            say!("  {}", d.context);
        }
        for (i, o) in d.options.iter().enumerate() {
            let rec = if d.recommendation.as_deref() == Some(o.id.as_str()) {
                "  (recommended)"
            } else {
                ""
            };
            say!("  {}) {} [{}]{rec}", i + 1, o.name, o.id);
            if !o.description.is_empty() {
                say!("       {}", o.description);
            }
            for p in &o.tradeoffs.pros {
                say!("       + {p}");
            }
            for c in &o.tradeoffs.cons {
                say!("       - {c}");
            }
        }
        let option = loop {
            let line = ask("[number or option id; Enter = recommended] > ")?;
            if line.is_empty() {
                if let Some(r) = &d.recommendation {
                    break r.clone();
                }
                continue;
            }
            if let Ok(n) = line.parse::<usize>() {
                if (1..=d.options.len()).contains(&n) {
                    break d.options[n - 1].id.clone();
                }
            }
            if d.option(&line).is_some() {
                break line;
            }
            say!("  no such option");
        };
        let rationale = ask("why (optional) > ")?;
        Some((option, Some(rationale).filter(|r| !r.is_empty())))
    }

    fn review(&mut self, summary: &Summary) -> Option<ReviewAnswer> {
        say!("\nthe plan:");
        for (i, b) in summary.batches.iter().enumerate() {
            let items: Vec<String> = b.iter().map(|(id, t)| format!("{id} {t}")).collect();
            say!("  batch {}: {}", i + 1, items.join("; "));
        }
        if !summary.critical_path.is_empty() {
            say!("  critical path: {}", summary.critical_path.join(" -> "));
        }
        for (topic, choice, _) in &summary.decisions {
            say!("  decision: {topic}: {choice}");
        }
        if let Some(v) = &summary.verdict {
            say!("  challenge verdict: {v}");
        }
        say!(
            "  files: {}, {}\n  cost so far: ${:.4} in {} calls",
            summary.plan_file.display(),
            summary.design_doc_file.display(),
            summary.total_cost,
            summary.calls
        );
        loop {
            let line = ask("approve, reject or cancel? [a/r/c] > ")?;
            match line.to_ascii_lowercase().as_str() {
                "a" | "approve" | "y" | "yes" => return Some(ReviewAnswer::Approve),
                "c" | "cancel" => return Some(ReviewAnswer::Cancel),
                "r" | "reject" => loop {
                    // The reason goes into the next design: never empty.
                    let reason = ask("reason (it goes into the next design) > ")?;
                    if !reason.trim().is_empty() {
                        return Some(ReviewAnswer::Reject(reason.trim().to_string()));
                    }
                },
                _ => continue,
            }
        }
    }
}
