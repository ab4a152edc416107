//! The human reporter.
//!
//! On a terminal (stdout and stderr both TTYs, `TERM` not `dumb`) it keeps a
//! live view on stderr with indicatif: the batch progress and one line per
//! running story (agent, phase, attempt, current step, elapsed time), while
//! every step worth keeping (started, gate results, retries, merges,
//! failures) is printed above it. Anywhere else it prints the same steps as
//! plain lines on stdout, flushed one by one, with no escape codes (unless
//! `--color always`). Whether to colour is [`crate::cli::color`]'s decision. On
//! `run_finished` it prints the summary table ([`super::summary`]).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use cascade_engine::race::ContestantStatus;
use cascade_engine::Event;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{human_duration, short_oid, summary};

/// Renders events for people.
pub struct TerminalReporter {
    view: View,
    color: bool,
    /// The base's failures the census judged by (`--base-failures known`),
    /// repeated under the summary.
    base_known: Vec<String>,
}

enum View {
    Live(Live),
    Plain(Box<dyn Write + Send>),
}

struct Live {
    multi: MultiProgress,
    overall: ProgressBar,
    stories: HashMap<String, ProgressBar>,
    finished: usize,
    base: usize,
}

impl TerminalReporter {
    /// Live view on a terminal, plain lines elsewhere; colour per `NO_COLOR`.
    pub fn detect() -> TerminalReporter {
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        let interactive =
            std::io::stdout().is_terminal() && std::io::stderr().is_terminal() && !dumb;
        if interactive {
            // The live view is drawn on stderr, the summary on stdout: both
            // are terminals here.
            TerminalReporter::live(crate::cli::color::stderr())
        } else {
            // Plain lines: coloured only when asked (`--color always`).
            TerminalReporter::plain(
                Box::new(crate::cli::out::stdout()),
                crate::cli::color::stdout(),
            )
        }
    }

    /// Plain lines on `out`.
    pub fn plain(out: Box<dyn Write + Send>, color: bool) -> TerminalReporter {
        TerminalReporter {
            view: View::Plain(out),
            color,
            base_known: Vec::new(),
        }
    }

    fn live(color: bool) -> TerminalReporter {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(8));
        let overall = multi.add(ProgressBar::new(0));
        let template = if color {
            "{prefix:.bold} [{bar:30.cyan/blue}] {pos}/{len} stories {msg}"
        } else {
            "{prefix} [{bar:30}] {pos}/{len} stories {msg}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            overall.set_style(style.progress_chars("=> "));
        }
        overall.set_prefix("run");
        TerminalReporter {
            view: View::Live(Live {
                multi,
                overall,
                stories: HashMap::new(),
                finished: 0,
                base: 0,
            }),
            color,
            base_known: Vec::new(),
        }
    }

    /// Renders one event.
    pub fn report(&mut self, event: &Event) {
        if let Event::RunFinished {
            status,
            stories,
            duration_ms,
            summary: rows,
            integration,
        } = event
        {
            self.finish();
            let mut text = summary::render(rows, *status, stories, *duration_ms, self.color);
            // Just above the closing "run ..." line.
            if let Some(mode) = integration {
                let body = text.trim_end_matches('\n');
                let at = body.rfind('\n').map_or(0, |i| i + 1);
                text.insert_str(at, &summary::integration_line(mode));
            }
            if !self.base_known.is_empty() {
                text.push_str(&format!(
                    "failures the base already had (judged by the test census): {}\n",
                    self.base_known.join("; ")
                ));
            }
            match &mut self.view {
                View::Plain(out) => {
                    let _ = out.write_all(b"\n");
                    let _ = out.write_all(text.as_bytes());
                    let _ = out.flush();
                }
                View::Live(_) => {
                    let mut out = crate::cli::out::stdout();
                    let _ = out.write_all(b"\n");
                    let _ = out.write_all(text.as_bytes());
                    let _ = out.flush();
                }
            }
            return;
        }
        if let Event::BaseJudged { failed, .. } = event {
            self.base_known = failed
                .iter()
                .filter(|f| f.judged_by_census)
                .map(|f| format!("'{}': {}", f.gate, f.failing_tests.join(", ")))
                .collect();
        }
        if let View::Live(live) = &mut self.view {
            live.update(event, self.color);
        }
        if let Some(line) = describe(event, self.color) {
            self.note(&line);
        }
    }

    /// Prints a line above the live view (or as a plain line).
    pub fn note(&mut self, line: &str) {
        match &mut self.view {
            View::Plain(out) => {
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            View::Live(live) => {
                if live.multi.println(line).is_err() {
                    errln!("{line}");
                }
            }
        }
    }

    /// Removes the live lines.
    pub fn finish(&mut self) {
        if let View::Live(live) = &mut self.view {
            for (_, bar) in live.stories.drain() {
                bar.finish_and_clear();
            }
            live.overall.finish_and_clear();
            let _ = live.multi.clear();
        }
    }
}

impl Live {
    fn story_bar(&mut self, story: &str, color: bool) -> ProgressBar {
        if let Some(bar) = self.stories.get(story) {
            return bar.clone();
        }
        let bar = self.multi.add(ProgressBar::new_spinner());
        let template = if color {
            "  {spinner:.green} {prefix:.bold} {msg} {elapsed:.dim}"
        } else {
            "  {spinner} {prefix} {msg} {elapsed}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.set_prefix(story.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        self.stories.insert(story.to_string(), bar.clone());
        bar
    }

    fn done(&mut self, story: &str) {
        if let Some(bar) = self.stories.remove(story) {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
        self.finished += 1;
        let len = self.overall.length().unwrap_or(0);
        self.overall
            .set_position(((self.base + self.finished) as u64).min(len));
    }

    fn update(&mut self, event: &Event, color: bool) {
        match event {
            Event::RunStarted {
                total,
                already_complete,
                ..
            } => {
                self.base = *already_complete;
                self.overall.set_length(*total as u64);
                self.overall.set_position(*already_complete as u64);
            }
            Event::BatchStarted { batch, of, .. } => {
                self.overall.set_prefix(format!("batch {batch}/{of}"));
            }
            Event::StoryStarted {
                story,
                agent,
                attempt,
                max_attempts,
                phase,
                ..
            } => {
                let bar = self.story_bar(story, color);
                bar.set_message(shown(&format!(
                    "{agent} · {phase} · attempt {attempt}/{max_attempts} · agent running"
                )));
            }
            // Fleet runs: the worker's own `story_started` stays on the
            // worker; the coordinator hears of the job.
            Event::JobPublished { story, attempt, .. } => {
                let bar = self.story_bar(story, color);
                bar.set_message(shown(&format!("attempt {attempt} · queued for the fleet")));
            }
            Event::JobStarted {
                story,
                attempt,
                worker,
                agent,
            } => {
                let bar = self.story_bar(story, color);
                bar.set_message(shown(&format!("{agent} · attempt {attempt} · on {worker}")));
            }
            Event::AgentFinished { story, agent, .. } => {
                if let Some(bar) = self.stories.get(story) {
                    bar.set_message(shown(&format!("{agent} · agent finished")));
                }
            }
            Event::StoryCommitted { story, .. } => {
                if let Some(bar) = self.stories.get(story) {
                    bar.set_message("committed · gates next".to_string());
                }
            }
            Event::GateStarted { story, gate } => {
                if let Some(bar) = self.stories.get(story) {
                    bar.set_message(shown(&format!("gate {gate}")));
                }
            }
            Event::RetryScheduled {
                story,
                attempt,
                delay_ms,
                ..
            } => {
                if let Some(bar) = self.stories.get(story) {
                    bar.set_message(shown(&format!(
                        "waiting {} before attempt {attempt}",
                        human_duration(*delay_ms)
                    )));
                }
            }
            Event::MergeStarted {
                story,
                target_branch,
                ..
            } => {
                if let Some(bar) = self.stories.get(story) {
                    bar.set_message(format!("merging into '{target_branch}'"));
                }
            }
            Event::StoryMerged { story, .. } | Event::StoryFailed { story, .. } => self.done(story),
            Event::StoryBlocked { story, .. } => self.done(story),
            other => {
                if let Some((story, message)) = step_message(other) {
                    if let Some(bar) = self.stories.get(story) {
                        bar.set_message(shown(&message));
                    }
                }
            }
        }
    }
}

/// The live line of a story whose attempt moved on to a later step
/// (verification, proving tests, review, integration): the line always
/// names the step running now, never the last gate while a review runs.
fn step_message(event: &Event) -> Option<(&str, String)> {
    Some(match event {
        Event::GateFinished { story, gate, .. } => (story, format!("gate {gate} done")),
        Event::VerificationFinished { story, .. } => (story, "verified · next step".to_string()),
        Event::TestsProved { story, .. } => (story, "tests proved · next step".to_string()),
        Event::ReviewStarted { story, agent, .. } => (story, format!("review by {agent}")),
        Event::ReviewFinished { story, verdict, .. } => (story, format!("review: {verdict}")),
        Event::IntegrationStarted { story, .. } => {
            (story, "integration: gates on the merged tree".to_string())
        }
        _ => return None,
    })
}

/// A live line's text: agent and gate names, workers, shown safely.
fn shown(text: &str) -> String {
    super::printable_line(text).into_owned()
}

use crate::cli::color::paint;

/// "2 findings" and one per line below (at most 10).
fn listed(findings: &[cascade_engine::events::VerifyFinding], what: &str) -> String {
    let mut s = format!(
        "{} {what}{}",
        findings.len(),
        if findings.len() == 1 { "" } else { "s" }
    );
    for f in findings.iter().take(10) {
        s.push_str(&format!("\n    {f}"));
    }
    if findings.len() > 10 {
        s.push_str(&format!("\n    ... and {} more", findings.len() - 10));
    }
    s
}

/// The colours of a line (none without `color`).
#[derive(Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn ok(self, s: &str) -> String {
        paint(s, "32", self.0)
    }
    fn bad(self, s: &str) -> String {
        paint(s, "31", self.0)
    }
    fn warn(self, s: &str) -> String {
        paint(s, "33", self.0)
    }
}

/// The line an event prints, if it prints one (`run_finished` is the
/// summary; `gate_started` shows only on the live line). Each theme below
/// answers for its own events.
pub fn describe(event: &Event, color: bool) -> Option<String> {
    let p = Paint(color);
    run_line(event, p)
        .or_else(|| agent_line(event, p))
        .or_else(|| check_line(event, p))
        .or_else(|| review_line(event, p))
        .or_else(|| merge_line(event, p))
        .or_else(|| fleet_race_line(event, p))
}

/// The run's own lines: its start, batches, the base, notes, pauses, limits and requests.
fn run_line(event: &Event, p: Paint) -> Option<String> {
    let line = match event {
        Event::RunStarted {
            prd,
            target_branch,
            total,
            already_complete,
            schedule,
            parallel,
            batches,
            resumed,
            ..
        } => format!(
            "{} {prd}: {total} stories ({already_complete} already complete), {batches} batch{}, {schedule} schedule, parallel {parallel}, merging into '{target_branch}'",
            if *resumed { "resuming" } else { "running" },
            if *batches == 1 { "" } else { "es" },
        ),
        Event::BatchStarted { batch, of, stories } => {
            format!("batch {batch}/{of}: {}", stories.join(", "))
        }
        Event::BatchFinished { batch, of } => format!("batch {batch}/{of} done"),
        Event::BaseJudged {
            commit,
            passed,
            cached,
            failed,
            ..
        } => {
            let at = format!("base {}", super::short_oid(commit));
            let kept = if *cached { " (kept from an earlier run)" } else { "" };
            if *passed {
                format!("{at}: required gates {}{kept}", p.ok("pass"))
            } else {
                let gates: Vec<String> = failed
                    .iter()
                    .map(|f| {
                        if f.judged_by_census {
                            format!(
                                "'{}' (known failures, judged by the census: {})",
                                f.gate,
                                f.failing_tests.join(", ")
                            )
                        } else {
                            format!("'{}'", f.gate)
                        }
                    })
                    .collect();
                format!("{at}: required gates {}{kept}: {}", p.bad("FAIL"), gates.join(", "))
            }
        }
        Event::Notice { message } => format!("note: {}", super::printable(message)),
        Event::StorySkipped { story, reason } => {
            format!("{story}: skipped ({})", super::printable(reason))
        }
        Event::RunPaused { reason } => format!("paused: {}", super::printable(reason)),
        Event::BudgetExhausted { message, .. } => {
            format!("{}: {}", p.bad("budget exhausted"), super::printable(message))
        }
        Event::WaitingForMemory {
            what,
            story,
            available_mb,
            threshold_mb,
        } => format!(
            "{story}: {what} waits for memory ({available_mb} MiB available, below {threshold_mb} MiB)"
        ),
        Event::Control {
            action,
            story,
            by,
            ok: taken,
            message,
        } => {
            let what = story.as_ref().map_or_else(|| action.clone(), |s| format!("{action} {s}"));
            if *taken {
                format!("{what} (by {by}): {}", super::printable(message))
            } else {
                format!("{what} (by {by}) refused: {}", super::printable(message))
            }
        }
        _ => return None,
    };
    Some(line)
}

/// An attempt's agent: started, finished, committed, failed, retried, cooled down.
fn agent_line(event: &Event, p: Paint) -> Option<String> {
    let line = match event {
        Event::AgentFallback {
            story,
            from,
            to,
            why,
        } => {
            format!(
                "{story}: {} {from} -> {to}: {}",
                p.warn("fallback"),
                super::printable(why)
            )
        }
        Event::StoryStarted {
            story,
            agent,
            attempt,
            max_attempts,
            phase,
            pid,
            ..
        } => {
            // An api agent has no process: cascade itself calls the model.
            let runs = if *pid == 0 {
                "model API".to_string()
            } else {
                format!("pid {pid}")
            };
            format!(
                "{story}: started via {agent} ({phase}, attempt {attempt}/{max_attempts}, {runs})"
            )
        }
        Event::AgentFinished {
            story,
            agent,
            success,
            outcome,
            duration_ms,
            ..
        } => {
            let what = if *success {
                p.ok("finished")
            } else {
                p.bad("failed")
            };
            format!(
                "{story}: {agent} {what} ({outcome}) in {}",
                human_duration(*duration_ms)
            )
        }
        Event::StoryCommitted { story, commit, .. } => {
            format!("{story}: committed {}", short_oid(commit))
        }
        Event::CommitLeftOut {
            story, left_out, ..
        } => {
            let dirs: Vec<String> = left_out
                .iter()
                .map(|l| {
                    let dir = super::printable(&l.dir);
                    format!("{dir}/ ({} files, {})", l.files, l.reason)
                })
                .collect();
            format!("{story}: left out of the commit: {}", dirs.join(", "))
        }
        Event::AttemptFailed {
            story,
            attempt,
            error_type,
            error,
            ..
        } => format!(
            "{story}: attempt {attempt} {} ({error_type}): {}",
            p.bad("failed"),
            super::printable(error)
        ),
        Event::RetryScheduled {
            story,
            attempt,
            max_attempts,
            agent,
            delay_ms,
            ..
        } => format!(
            "{story}: {} attempt {attempt}/{max_attempts} via {agent} in {}",
            p.warn("retry"),
            human_duration(*delay_ms)
        ),
        Event::AgentCooldown {
            agent,
            story,
            cooldown_ms,
            retry_after,
            concurrency,
            message,
            ..
        } => format!(
            "{story}: {agent} {} ({}); cooling down {}{}, then at most {concurrency} at once",
            p.warn("rate limited"),
            super::printable(message),
            human_duration(*cooldown_ms),
            if *retry_after { " (Retry-After)" } else { "" }
        ),
        _ => return None,
    };
    Some(line)
}

/// The checks of an attempt's work: verification and proved tests.
fn check_line(event: &Event, p: Paint) -> Option<String> {
    let line = match event {
        Event::VerificationFinished {
            story,
            findings,
            waived,
            ..
        } => {
            let mut s = if findings.is_empty() {
                format!("{story}: verification {}", p.ok("passed"))
            } else {
                format!(
                    "{story}: verification {}: {}",
                    p.bad("FAILED"),
                    listed(findings, "finding")
                )
            };
            if !waived.is_empty() {
                s.push_str(&format!(
                    "\n  allowed by the story's verify_allow: {}",
                    listed(waived, "finding")
                ));
            }
            s
        }
        Event::TestsProved {
            story,
            tests,
            findings,
            notes,
            ..
        } => {
            let mut s = if findings.is_empty() {
                format!(
                    "{story}: new tests {} on the base ({tests} run)",
                    p.ok("fail")
                )
            } else {
                format!(
                    "{story}: new tests {}: {}",
                    p.bad("PASS ON THE BASE"),
                    listed(findings, "test")
                )
            };
            for n in notes.iter().take(5) {
                s.push_str(&format!("\n    note: {n}"));
            }
            s
        }
        _ => return None,
    };
    Some(line)
}

/// The reviews and gates of an attempt's work.
fn review_line(event: &Event, p: Paint) -> Option<String> {
    let line = match event {
        Event::ReviewStarted {
            story, agent, note, ..
        } => match note {
            Some(note) => format!("{story}: review by {agent} ({})", p.warn(note)),
            None => format!("{story}: review by {agent}"),
        },
        Event::ReviewFinished {
            story,
            agent,
            verdict,
            passed,
            findings,
            ..
        } => {
            let v = match (verdict.as_str(), passed) {
                ("pass", _) => p.ok("PASS"),
                ("missing", true) => p.warn("PASS (no <review> marker)"),
                ("missing", false) => p.bad("NEEDS_REVISION (no <review> marker, --review=strict)"),
                _ => p.bad("NEEDS_REVISION"),
            };
            let mut s = format!("{story}: review {v} via {agent}");
            for l in findings.lines().filter(|l| !l.trim().is_empty()).take(10) {
                s.push_str(&format!("\n    {}", l.trim()));
            }
            s
        }
        Event::GateFinished {
            story,
            gate,
            passed,
            required,
            cached,
            cache,
            flaky,
            skipped,
            duration_ms,
            errors,
            timed_out,
        } => {
            let verdict = if *skipped {
                "skipped".to_string()
            } else if *passed {
                p.ok("passed")
            } else if let Some(why) = timed_out {
                let v = format!("FAILED: {why}");
                if *required {
                    p.bad(&v)
                } else {
                    p.warn(&format!("{v} (optional)"))
                }
            } else if *required {
                p.bad("FAILED")
            } else {
                p.warn("failed (optional)")
            };
            let mut s = format!("{story}: gate {gate} {verdict}");
            if *cached {
                s.push_str(if cache == "remote" {
                    " (cached: remote)"
                } else {
                    " (cached)"
                });
            } else if !*skipped {
                s.push_str(&format!(" in {}", human_duration(*duration_ms)));
            }
            if *flaky {
                s.push_str(&format!(" {}", p.warn("(flaky: passed on re-run)")));
            }
            if *errors > 0 {
                s.push_str(&format!(
                    ", {errors} error{}",
                    if *errors == 1 { "" } else { "s" }
                ));
            }
            s
        }
        _ => return None,
    };
    Some(line)
}

/// Merges and a story's end: merged, integrated, conflicted, failed or blocked.
fn merge_line(event: &Event, p: Paint) -> Option<String> {
    let line = match event {
        Event::MergeStarted {
            story,
            branch,
            target_branch,
            ..
        } => format!("{story}: merging '{branch}' into '{target_branch}'"),
        Event::StoryMerged {
            story,
            attempts,
            commit,
            fast_forward,
            target_branch,
            duration_ms,
            ..
        } => format!(
            "{story}: {} into '{target_branch}' ({} {}) after {attempts} attempt{} in {}",
            p.ok("merged"),
            if *fast_forward { "fast-forward" } else { "merge commit" },
            short_oid(commit),
            if *attempts == 1 { "" } else { "s" },
            human_duration(*duration_ms)
        ),
        Event::IntegrationStarted {
            story,
            merged_since,
            ..
        } => format!(
            "{story}: integration gates on the merge with {}",
            if merged_since.is_empty() {
                "the target's tip".to_string()
            } else {
                merged_since.join(", ")
            }
        ),
        Event::IntegrationFinished {
            story,
            verdict,
            failed_gates,
            ..
        } => match failed_gates.is_empty() {
            true => format!("{story}: integration {verdict}"),
            false => format!(
                "{story}: integration {} ({})",
                p.bad(verdict),
                failed_gates.join(", ")
            ),
        },
        Event::MergeConflict {
            story,
            branch,
            files,
        } => format!(
            "{story}: {} in {}; branch '{branch}' kept",
            p.bad("merge conflict"),
            files.join(", ")
        ),
        Event::MergeResolving {
            story,
            agent,
            files,
        } => format!(
            "{story}: {agent} resolves the merge conflict in {}",
            files.join(", ")
        ),
        Event::MergeResolved {
            story,
            agent,
            commit,
        } => format!(
            "{story}: {agent} {} the merge conflict ({})",
            p.ok("resolved"),
            short_oid(commit)
        ),
        Event::StoryFailed {
            story,
            attempts,
            error_type,
            error,
            branch,
            worktree,
            ..
        } => format!(
            "{story}: {} after {attempts} attempt{} ({error_type}): {}\n  branch '{branch}', worktree {worktree}",
            p.bad("FAILED"),
            if *attempts == 1 { "" } else { "s" },
            super::printable(error),
        ),
        Event::StoryBlocked { story, blocked_by } => {
            format!("{story}: {} by {}", p.warn("blocked"), blocked_by.join(", "))
        }
        _ => return None,
    };
    Some(line)
}

/// Attempts on the fleet's workers, and races.
fn fleet_race_line(event: &Event, p: Paint) -> Option<String> {
    let line = match event {
        Event::JobPublished {
            story,
            attempt,
            base,
            ..
        } => {
            format!(
                "{story}: attempt {attempt} published to the fleet (base {})",
                short_oid(base)
            )
        }
        Event::JobStarted {
            story,
            attempt,
            worker,
            agent,
        } => {
            format!("{story}: attempt {attempt} started on worker {worker} via {agent}")
        }
        Event::JobFinished {
            story,
            attempt,
            worker,
            status,
            error,
            duration_ms,
            ..
        } => format!(
            "{story}: attempt {attempt} {} on worker {worker} in {}{}",
            if status == "passed" {
                p.ok(status)
            } else {
                p.bad(status)
            },
            human_duration(*duration_ms),
            error
                .as_ref()
                .map(|e| format!(": {}", super::printable(e)))
                .unwrap_or_default()
        ),
        Event::FleetWaiting { reason } => {
            format!("{}: {}", p.warn("fleet"), super::printable(reason))
        }
        Event::RaceStarted {
            story,
            contestants,
            until,
            ..
        } => format!(
            "{story}: race of {} (until {until})",
            contestants.join(", ")
        ),
        Event::RaceContestantFinished {
            story,
            contestant,
            status,
            error,
            lines_changed,
            ..
        } => match (status, lines_changed) {
            (ContestantStatus::Passed, Some(lines)) => {
                format!(
                    "{story}: contestant {contestant} {} ({lines} lines changed)",
                    p.ok("passed")
                )
            }
            (ContestantStatus::Passed, None) => {
                format!("{story}: contestant {contestant} {}", p.ok("passed"))
            }
            (ContestantStatus::Failed, _) => format!(
                "{story}: contestant {contestant} {}: {}",
                p.bad("failed"),
                super::printable(error.as_deref().unwrap_or(""))
            ),
            _ => format!(
                "{story}: contestant {contestant} {}: {}",
                p.warn(&status.as_str().replace('_', " ")),
                super::printable(error.as_deref().unwrap_or(""))
            ),
        },
        Event::RaceWon {
            story,
            winner,
            branch,
            reason,
            runners_up,
            ..
        } => {
            let others = if runners_up.is_empty() {
                "no runner-up".to_string()
            } else {
                format!("runners-up {}", runners_up.join(", "))
            };
            format!(
                "{story}: race {} by {winner} ({branch}): {}; {others}",
                p.ok("won"),
                super::printable(reason)
            )
        }
        // The summary prints `run_finished`; `mega approve` prints a mega
        // run's own steps and its features' events (cli/mega_cmd.rs).
        _ => return None,
    };
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_engine::events::GateSummary;
    use cascade_engine::{FailureKind, RunStatus, StoryCounts, StorySummary};
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn plain_lines_without_escapes_then_the_summary() {
        let buf = Shared::default();
        let mut r = TerminalReporter::plain(Box::new(buf.clone()), false);
        let events = vec![
            Event::RunStarted {
                run_id: "r".into(),
                prd: "prd.json".into(),
                target_branch: "main".into(),
                total: 2,
                already_complete: 0,
                schedule: "batch".into(),
                parallel: 2,
                batches: 1,
                resumed: false,
            },
            Event::BatchStarted {
                batch: 1,
                of: 1,
                stories: vec!["a".into(), "b".into()],
            },
            Event::StoryStarted {
                story: "a".into(),
                title: "A".into(),
                agent: "demo".into(),
                attempt: 1,
                max_attempts: 4,
                phase: "implementation".into(),
                fallbacks: vec![],
                pid: 42,
                branch: "cascade/a".into(),
                worktree: "/w/a".into(),
                confinement: "none".into(),
            },
            Event::GateStarted {
                story: "a".into(),
                gate: "tests".into(),
            },
            Event::GateFinished {
                story: "a".into(),
                gate: "tests".into(),
                passed: false,
                required: true,
                cached: false,
                cache: "miss".into(),
                flaky: false,
                skipped: false,
                duration_ms: 2000,
                errors: 1,
                timed_out: None,
            },
            Event::AttemptFailed {
                story: "a".into(),
                agent: "demo".into(),
                attempt: 1,
                error_type: FailureKind::QualityGate,
                error: "quality gate 'tests' failed".into(),
            },
            Event::RetryScheduled {
                story: "a".into(),
                attempt: 2,
                max_attempts: 4,
                agent: "demo".into(),
                error_type: FailureKind::QualityGate,
                delay_ms: 0,
            },
            Event::MergeStarted {
                story: "a".into(),
                attempt: 2,
                branch: "cascade/a".into(),
                target_branch: "main".into(),
            },
            Event::StoryMerged {
                story: "a".into(),
                agent: "demo".into(),
                attempts: 2,
                commit: "0123456789abcdef".into(),
                fast_forward: true,
                target_branch: "main".into(),
                duration_ms: 5000,
                worker: None,
            },
            Event::StoryBlocked {
                story: "b".into(),
                blocked_by: vec!["x".into()],
            },
            Event::RunFinished {
                status: RunStatus::Failed,
                stories: StoryCounts {
                    complete: 1,
                    blocked: 1,
                    ..Default::default()
                },
                duration_ms: 6000,
                summary: vec![StorySummary {
                    story: "a".into(),
                    status: "complete".into(),
                    agent: Some("demo".into()),
                    attempts: 2,
                    gates: vec![GateSummary {
                        name: "tests".into(),
                        passed: true,
                        cached: false,
                        flaky: false,
                    }],
                    duration_ms: 5000,
                    input_tokens: None,
                    output_tokens: None,
                    cost_usd: None,
                    error: None,
                    verification: vec![],
                    verification_allowed: vec![],
                    review: None,
                    confinement: None,
                    race: None,
                }],
                integration: Some("trust".into()),
            },
        ];
        for e in &events {
            r.report(e);
        }
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains('\x1b'), "{text}");
        let expected = [
            "running prd.json: 2 stories (0 already complete), 1 batch, batch schedule, parallel 2, merging into 'main'",
            "batch 1/1: a, b",
            "a: started via demo (implementation, attempt 1/4, pid 42)",
            "a: gate tests FAILED in 2.0s, 1 error",
            "a: attempt 1 failed (quality_gate): quality gate 'tests' failed",
            "a: retry attempt 2/4 via demo in 0.0s",
            "a: merging 'cascade/a' into 'main'",
            "a: merged into 'main' (fast-forward 0123456789) after 2 attempts in 5.0s",
            "b: blocked by x",
        ];
        for line in expected {
            assert!(
                text.contains(&format!("{line}\n")),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            !text.contains("gate tests\n"),
            "gate_started prints nothing"
        );
        assert!(text.contains("STORY  STATUS"), "{text}");
        assert!(text.contains("tests ✓"), "{text}");
        assert!(text.ends_with("run failed: 1 complete, 0 failed, 1 blocked, 0 pending in 6.0s\n"));
        assert!(
            text.contains("\nintegration: trust (merges were not gated as merged"),
            "{text}"
        );
    }

    #[test]
    fn the_live_line_names_the_step_running_now() {
        let review = Event::ReviewStarted {
            story: "s1".into(),
            attempt: 1,
            agent: "checker".into(),
            author: "writer".into(),
            note: None,
        };
        assert_eq!(
            step_message(&review),
            Some(("s1", "review by checker".to_string()))
        );
        let started = Event::GateStarted {
            story: "s1".into(),
            gate: "tests".into(),
        };
        assert_eq!(
            step_message(&started),
            None,
            "its own arm says 'gate tests'"
        );
    }

    #[test]
    fn colour_only_when_asked() {
        let e = Event::StoryBlocked {
            story: "b".into(),
            blocked_by: vec!["a".into()],
        };
        assert!(describe(&e, true)
            .unwrap()
            .contains("\x1b[33mblocked\x1b[0m"));
        assert_eq!(describe(&e, false).unwrap(), "b: blocked by a");
        let failed = Event::StoryFailed {
            story: "s".into(),
            agent: "demo".into(),
            attempts: 1,
            error_type: FailureKind::MergeConflict,
            error: "conflict in a.txt".into(),
            branch: "cascade/s".into(),
            worktree: "/w/s".into(),
            worker: None,
        };
        assert_eq!(
            describe(&failed, false).unwrap(),
            "s: FAILED after 1 attempt (merge_conflict): conflict in a.txt\n  branch 'cascade/s', worktree /w/s"
        );
    }

    #[test]
    fn the_base_judgment_prints_and_known_failures_follow_the_summary() {
        let buf = Shared::default();
        let mut r = TerminalReporter::plain(Box::new(buf.clone()), false);
        r.report(&Event::BaseJudged {
            commit: "0123456789abcdef".into(),
            passed: false,
            mode: "known".into(),
            cached: true,
            failed: vec![cascade_engine::events::BaseFailure {
                gate: "tests".into(),
                errors: vec!["t.py:3: assert 1 == 2".into()],
                failing_tests: vec!["t.test_mul".into()],
                judged_by_census: true,
            }],
            duration_ms: 3,
        });
        r.report(&Event::RunFinished {
            status: RunStatus::Completed,
            stories: StoryCounts::default(),
            duration_ms: 1,
            summary: vec![],
            integration: None,
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("base 0123456789: required gates FAIL (kept from an earlier run): 'tests' (known failures, judged by the census: t.test_mul)\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "failures the base already had (judged by the test census): 'tests': t.test_mul\n"
            ),
            "{text}"
        );
    }
}
