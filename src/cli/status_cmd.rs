//! `cascade status [--json]`: where the run is, read from `.cascade/state.json`
//! and its journal (a running run's transitions, see the engine's `journal`
//! module), whether or not a run is going on.
//!
//! One pass over the stories, written through one buffered handle: a
//! 100,000-story run prints as fast as a small one per story. The state is
//! read as [`StoryBrief`]s borrowed from the file's text (the fields shown,
//! nothing else), and the JSON is serialized straight from them (no
//! intermediate `Value` tree).

use std::io::Write;

use cascade_engine::lock::{LockHolder, RunLock};
use cascade_engine::state::{
    read_brief, CooldownRecord, ReviewRecord, RunDoc, RunPhase, StoryBrief, StoryStatus, Text,
};
use cascade_engine::StoryCounts;
use cascade_plan::paths::PlanKind;
use clap::Args;
use serde::ser::SerializeMap;
use serde::Serialize;

use super::plan_file::Project;
use super::{CliResult, Failure, Global, EXIT_OK};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn status(_g: &Global, a: StatusArgs) -> CliResult {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(anyhow::anyhow!("cannot read the current directory: {e}")))?;
    let paths = cascade_git::RepoPaths::discover(&cwd).map_err(Failure::usage)?;
    let state_path = paths.cascade_dir().join("state.json");
    // A failed write is recorded by `out`: the exit code tells it (141 for
    // a closed pipe, `cascade status | head -1`).
    let mut out = std::io::BufWriter::with_capacity(1 << 16, super::out::stdout());
    let shown = read_brief(&state_path, |state| {
        // A state that says "running" without a live lock holder (asked
        // after reading it) was killed: its open attempts were interrupted
        // and are not charged.
        let live = RunLock::holder(&paths.cascade_dir().join("lock"));
        let view = View {
            state,
            live: live.as_ref(),
        };
        if a.json {
            serde_json::to_writer(&mut out, &view.json())
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
        } else {
            view.text(&mut out)
        }
    })
    .map_err(Failure::usage)?;
    let written = match shown {
        Some(written) => written,
        None => no_run(&mut out, &cwd, a.json),
    };
    let _ = written.and_then(|()| out.flush());
    Ok(EXIT_OK)
}

/// Says there is no run yet, and which plan `approve` would run (quietly:
/// no plan is no error here).
fn no_run(out: &mut impl Write, cwd: &std::path::Path, json: bool) -> std::io::Result<()> {
    let next = Project::of(cwd.to_path_buf()).peek(PlanKind::Prd);
    if json {
        let prd = next.as_ref().map(|p| p.display().to_string());
        return writeln!(
            out,
            "{}",
            serde_json::json!({"status": "none", "stories": {}, "prd": prd})
        );
    }
    match &next {
        Some(p) => writeln!(
            out,
            "No run yet: start one with `cascade approve` (it would run {}).",
            p.display()
        ),
        None => writeln!(out, "No run yet: start one with `cascade approve`."),
    }
}

/// The state as `status` shows it.
struct View<'a> {
    state: &'a RunDoc<StoryBrief<'a>>,
    /// The process running the run now, if one is.
    live: Option<&'a LockHolder>,
}

impl<'a> View<'a> {
    /// The run's status: one that says "running" without a live lock
    /// holder was killed.
    fn status(&self) -> &'static str {
        match (self.state.status, self.live) {
            (RunPhase::Running, None) => "interrupted",
            (s, _) => s.as_str(),
        }
    }

    /// Nothing runs without a live lock holder: a story the killed run left
    /// "running" is pending again (`resume` restarts it from a fresh worktree).
    fn story_status(&self, s: &StoryBrief<'_>) -> &'static str {
        match s.status {
            StoryStatus::Running if self.live.is_none() => "pending",
            other => other.as_str(),
        }
    }

    /// The cooldowns that have not ended yet.
    fn active_cooldowns(&self) -> Vec<&'a CooldownRecord> {
        let now = chrono::Utc::now();
        self.state
            .cooldowns
            .iter()
            .filter(|c| {
                chrono::DateTime::parse_from_rfc3339(&c.until)
                    .is_ok_and(|t| t.with_timezone(&chrono::Utc) > now)
            })
            .collect()
    }

    fn json(&self) -> StatusJson<'_> {
        let st = self.state;
        StatusJson {
            status: self.status(),
            run_id: &st.run_id,
            prd: &st.prd,
            target_branch: &st.target_branch,
            started_at: &st.started_at,
            updated_at: &st.updated_at,
            counts: st.counts(),
            cooldowns: self.active_cooldowns(),
            stories: Stories(self),
        }
    }

    fn text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let st = self.state;
        let c = st.counts();
        let status = self.status();
        writeln!(
            out,
            "Run {} ({}): {status}; {} complete, {} failed, {} blocked, {} pending; branch '{}'",
            st.run_id, st.prd, c.complete, c.failed, c.blocked, c.pending, st.target_branch
        )?;
        if let Some(h) = self.live {
            writeln!(
                out,
                "Running now: pid {} on {} since {}",
                h.pid, h.host, h.started_at
            )?;
        }
        // What confined the stories' last attempts, each kind once.
        let mut confinements: Vec<&str> = Vec::new();
        for c in st.stories.iter().filter_map(|s| s.attempts.confinement()) {
            if !confinements.contains(&c) {
                confinements.push(c);
            }
        }
        if !confinements.is_empty() {
            writeln!(out, "Confinement: {}", confinements.join(", "))?;
        }
        for c in self.active_cooldowns() {
            writeln!(
                out,
                "Agent '{}' is cooling down until {} (rate limited: {}); then at most {} at once",
                c.agent,
                c.until,
                super::report::printable(&c.message),
                c.concurrency
            )?;
        }
        let width = st
            .stories
            .iter()
            .map(|s| s.id.len())
            .max()
            .unwrap_or(5)
            .max(5);
        writeln!(
            out,
            "{:<width$}  {:<9}  {:<14}  ATTEMPTS  DETAIL",
            "STORY", "STATUS", "AGENT"
        )?;
        for s in &st.stories {
            writeln!(
                out,
                "{:<width$}  {:<9}  {:<14}  {:>8}  {}",
                &*s.id,
                self.story_status(s),
                s.agent.as_deref().unwrap_or("-"),
                s.attempts.charged(self.live.is_some()),
                detail(s)
            )?;
        }
        if status == "interrupted" || status == "paused" {
            writeln!(out, "Continue with `cascade resume`.")?;
        }
        if status == "budget_exhausted" {
            writeln!(
                out,
                "The run's budget ran out: continue with `cascade resume --max-cost <higher>` (or `--max-duration <more>`)."
            )?;
        }
        Ok(())
    }
}

/// The DETAIL column: what blocks the story, why it failed, or its merge.
fn detail(s: &StoryBrief<'_>) -> String {
    if !s.blocked_by.is_empty() {
        let ids: Vec<&str> = s.blocked_by.iter().map(|b| &**b).collect();
        format!("blocked by {}", ids.join(", "))
    } else if s.status == StoryStatus::Failed {
        let first = s
            .error
            .as_deref()
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or("");
        format!(
            "{}{}",
            super::report::printable(first),
            s.worktree
                .as_ref()
                .map(|w| format!(" (worktree {w})"))
                .unwrap_or_default()
        )
    } else {
        s.merge_commit
            .as_ref()
            .map(|m| format!("merged {}", &m[..m.len().min(10)]))
            .unwrap_or_default()
    }
}

/// `status --json` (CLI.md: `status`, `stories` keyed by id with `status`,
/// `agent`, `attempts`; the rest as it is known).
#[derive(Serialize)]
struct StatusJson<'a> {
    status: &'static str,
    run_id: &'a str,
    prd: &'a str,
    target_branch: &'a str,
    started_at: &'a str,
    updated_at: &'a str,
    counts: StoryCounts,
    cooldowns: Vec<&'a CooldownRecord>,
    stories: Stories<'a>,
}

/// The stories as an object keyed by id, in plan order.
struct Stories<'a>(&'a View<'a>);

impl Serialize for Stories<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let stories = &self.0.state.stories;
        let mut map = ser.serialize_map(Some(stories.len()))?;
        for s in stories {
            map.serialize_entry(&*s.id, &StoryJson::of(self.0, s))?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct StoryJson<'a> {
    status: &'static str,
    agent: Option<&'a str>,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    branch: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worktree: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    merge_commit: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "<[Text]>::is_empty")]
    blocked_by: &'a [Text<'a>],
    #[serde(skip_serializing_if = "<[Text]>::is_empty")]
    verification: &'a [Text<'a>],
    #[serde(skip_serializing_if = "<[Text]>::is_empty")]
    verification_allowed: &'a [Text<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    review: Option<&'a ReviewRecord>,
    /// What confined its last attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    confinement: Option<&'a str>,
}

impl<'a> StoryJson<'a> {
    fn of(view: &View<'_>, s: &'a StoryBrief<'a>) -> StoryJson<'a> {
        StoryJson {
            status: view.story_status(s),
            agent: s.agent.as_deref(),
            attempts: s.attempts.charged(view.live.is_some()),
            branch: s.branch.as_deref(),
            worktree: s.worktree.as_deref(),
            merge_commit: s.merge_commit.as_deref(),
            error_type: s.error_type.map(|t| t.as_str()),
            error: s.error.as_deref(),
            blocked_by: &s.blocked_by,
            verification: &s.verification,
            verification_allowed: &s.verification_allowed,
            review: s.review.as_ref(),
            confinement: s.attempts.confinement(),
        }
    }
}
