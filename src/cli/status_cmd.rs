//! `cascade status [--json]`: where the run is, read from the latest run of
//! `.cascade/cascade.db` (every committed transition of a running run, see
//! the engine's `store` module), whether or not a run is going on.
//!
//! One pass over the stories, written through one buffered handle: a
//! 100,000-story run prints as fast as a small one per story. The JSON is
//! serialized straight from the state's records (no intermediate `Value`
//! tree).

use std::io::Write;

use cascade_engine::lock::{LockHolder, RunLock};
use cascade_engine::state::{
    CooldownRecord, ReviewRecord, RunPhase, RunState, StoryState, StoryStatus,
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
    /// Print the status again every second until the run ends (on a
    /// terminal the screen is redrawn; elsewhere a block is printed only
    /// when something changed)
    #[arg(long)]
    pub watch: bool,
}

pub fn status(_g: &Global, a: StatusArgs) -> CliResult {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(anyhow::anyhow!("cannot read the current directory: {e}")))?;
    let paths = cascade_git::RepoPaths::discover(&cwd).map_err(Failure::usage)?;
    let color = super::color::stdout();
    if a.watch {
        return watch(&cwd, &paths, a.json, color);
    }
    // A failed write is recorded by `out`: the exit code tells it (141 for
    // a closed pipe, `cascade status | head -1`).
    let mut out = std::io::BufWriter::with_capacity(1 << 16, super::out::stdout());
    let (written, _) = render(&mut out, &cwd, &paths, a.json, color)?;
    let _ = written.and_then(|()| out.flush());
    Ok(EXIT_OK)
}

/// How often `--watch` looks again.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// `status --watch`: the status every second until the run is no longer
/// going on (then once more, its end); see [`watch_blocks`].
fn watch(
    cwd: &std::path::Path,
    paths: &cascade_git::RepoPaths,
    json: bool,
    color: bool,
) -> CliResult {
    watch_blocks(json, |block| {
        let (_written, running) = render(block, cwd, paths, json, color)?;
        Ok(running)
    })
}

/// `--watch` of `status` and `mega status`: `render` writes the status
/// into a block and says whether the run is going on; the block is printed
/// every [`WATCH_EVERY`] until the run is not (then once more, its end). On
/// a terminal the screen is cleared first; elsewhere a block is printed
/// only when it differs from the last (text blocks apart by an empty line).
pub(super) fn watch_blocks(
    json: bool,
    mut render: impl FnMut(&mut Vec<u8>) -> Result<bool, Failure>,
) -> CliResult {
    use std::io::IsTerminal;
    let terminal = std::io::stdout().is_terminal();
    let mut last: Option<Vec<u8>> = None;
    loop {
        let mut block = Vec::new();
        let running = render(&mut block)?;
        if last.as_ref() != Some(&block) {
            let mut out = super::out::stdout();
            let lead: &[u8] = match (terminal, last.is_some()) {
                // Home, clear the screen: the block is redrawn in place.
                (true, _) => b"\x1b[H\x1b[2J",
                (false, true) if !json => b"\n",
                _ => b"",
            };
            let _ = out.write_all(lead).and_then(|()| out.write_all(&block));
            last = Some(block);
        }
        if !running || super::out::Stream::Stdout.broken() {
            return Ok(EXIT_OK);
        }
        std::thread::sleep(WATCH_EVERY);
    }
}

/// Writes the status once to `out`: what was written, and whether the run
/// is going on (a live lock holder and a state that says running).
fn render(
    out: &mut impl Write,
    cwd: &std::path::Path,
    paths: &cascade_git::RepoPaths,
    json: bool,
    color: bool,
) -> Result<(std::io::Result<()>, bool), Failure> {
    let state_path = cascade_engine::store::db_path(&paths.cascade_dir());
    let state = RunState::load(&state_path).map_err(Failure::usage)?;
    let shown = state.map(|state| {
        // A state that says "running" without a live lock holder (asked
        // after reading it) was killed: its open attempts were interrupted
        // and are not charged.
        let live = RunLock::holder(&paths.cascade_dir().join("lock"));
        let running = live.is_some() && state.status == RunPhase::Running;
        let view = View {
            state: &state,
            live: live.as_ref(),
            color,
        };
        let written = if json {
            serde_json::to_writer(&mut *out, &view.json())
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
        } else {
            view.text(out)
        };
        (written, running)
    });
    Ok(match shown {
        Some(shown) => shown,
        None => (no_run(out, cwd, json), false),
    })
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
    state: &'a RunState,
    /// The process running the run now, if one is.
    live: Option<&'a LockHolder>,
    /// Colour the status words.
    color: bool,
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
    fn story_status(&self, s: &StoryState) -> &'static str {
        shown_status(s.status, self.live.is_some())
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
            "Run {} ({}): {}; {} complete, {} failed, {} blocked, {} pending; branch '{}'",
            st.run_id,
            st.prd,
            super::color::status(status, self.color),
            c.complete,
            c.failed,
            c.blocked,
            c.pending,
            st.target_branch
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
        for c in st.stories.iter().filter_map(confinement) {
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
                "{:<width$}  {}  {:<14}  {:>8}  {}",
                s.id,
                super::color::status_padded(self.story_status(s), 9, self.color),
                s.agent.as_deref().unwrap_or("-"),
                charged(s, self.live.is_some()),
                detail(s)
            )?;
        }
        let mut races = st
            .stories
            .iter()
            .filter_map(|s| Some((&s.id, s.race.as_ref()?)));
        if let Some(first) = races.next() {
            writeln!(out, "Races:")?;
            for (id, race) in std::iter::once(first).chain(races) {
                for line in super::report::race::lines(id, race, "  ") {
                    writeln!(out, "{line}")?;
                }
            }
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

/// A story's status as `status` and `show` print it (`live`: a process
/// runs the run now): a story a killed run left "running" is pending again.
pub(crate) fn shown_status(status: StoryStatus, live: bool) -> &'static str {
    match status {
        StoryStatus::Running if !live => "pending",
        other => other.as_str(),
    }
}

/// The attempts charged to the story (`live`: a process runs the run now;
/// without one, the attempts left open were interrupted and charge nothing).
fn charged(s: &StoryState, live: bool) -> u32 {
    let open = s
        .attempts
        .iter()
        .filter(|a| {
            a.outcome.is_none() && a.error_type != Some(cascade_engine::FailureKind::RateLimited)
        })
        .count() as u32;
    s.charged_attempts() - if live { 0 } else { open }
}

/// What confined the last attempt that says ("landlock abi 7", "none").
fn confinement(s: &StoryState) -> Option<&str> {
    s.attempts
        .iter()
        .rev()
        .find_map(|a| a.confinement.as_deref())
}

/// The DETAIL column: what blocks the story, why it failed, or its merge.
fn detail(s: &StoryState) -> String {
    if !s.blocked_by.is_empty() {
        format!("blocked by {}", s.blocked_by.join(", "))
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
            map.serialize_entry(&s.id, &StoryJson::of(self.0, s))?;
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
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    blocked_by: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    verification: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    verification_allowed: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    review: Option<&'a ReviewRecord>,
    /// What confined its last attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    confinement: Option<&'a str>,
    /// A racing story's last round: its contestants (verdict, gates, diff
    /// size, cost, branch) and the winner.
    #[serde(skip_serializing_if = "Option::is_none")]
    race: Option<&'a cascade_engine::race::RaceRecord>,
}

impl<'a> StoryJson<'a> {
    fn of(view: &View<'_>, s: &'a StoryState) -> StoryJson<'a> {
        StoryJson {
            status: view.story_status(s),
            agent: s.agent.as_deref(),
            attempts: charged(s, view.live.is_some()),
            branch: s.branch.as_deref(),
            worktree: s.worktree.as_deref(),
            merge_commit: s.merge_commit.as_deref(),
            error_type: s.error_type.map(|t| t.as_str()),
            error: s.error.as_deref(),
            blocked_by: &s.blocked_by,
            verification: &s.verification,
            verification_allowed: &s.verification_allowed,
            review: s.review.as_ref(),
            confinement: confinement(s),
            race: s.race.as_ref(),
        }
    }
}
