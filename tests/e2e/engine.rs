//! End-to-end tests: the engine (`approve`, `resume`, `status`) on temp repos
//! with scripted agents.
//!
//! One generic agent script reads its behaviour for each story from marker
//! files in a tools directory outside the repository (wait for a file, fail,
//! write a bad value on the first attempt, edit a given file, hold after
//! its edit until a file exists), and appends
//! `start <id>` / `end <id>` to a shared timeline. Ordering is asserted on the
//! timeline (never on durations); waits are barriers on files with generous
//! guards so a slow machine only makes the tests slower.

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{
    alive_after_grace, cascade, cascade_command, code, events, explain, git, init_repo, of_kind,
    other_branches, script, temp_files, write_json,
};

/// A repository with a PRD and a tools dir with agents.json and scripts.
struct Fixture {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Fixture {
    /// `stories`: the PRD's stories; `gates`: its `quality_gates.gates`.
    fn new(stories: Value, gates: Value) -> Fixture {
        let repo = init_repo();
        let tools = tempfile::tempdir().expect("tools dir");
        let f = Fixture { repo, tools };
        f.write_prd(stories, gates);
        f.write_agent();
        f.set_agents(json!({}), None);
        f
    }

    fn write_prd(&self, stories: Value, gates: Value) {
        write_json(
            &self.repo().join("prd.json"),
            &json!({
                "metadata": {"version": "1.0", "keep": "me"},
                "goal": "test the engine",
                "objectives": [],
                "stories": stories,
                "quality_gates": {"enabled": true, "fail_fast": false, "use_cache": true, "gates": gates},
                "custom_field": {"kept": true}
            }),
        );
    }

    fn repo(&self) -> &Path {
        self.repo.path()
    }

    fn tools(&self) -> &Path {
        self.tools.path()
    }

    fn t(&self, name: &str) -> PathBuf {
        self.tools().join(name)
    }

    /// Creates a marker file in the tools dir.
    fn mark(&self, name: &str, content: &str) {
        std::fs::write(self.t(name), content).expect("marker");
    }

    fn write_agent(&self) {
        let t = self.tools().display().to_string();
        script(
            &self.t("agent.sh"),
            &format!(
                r#"T='{t}'
id="$CASCADE_STORY_ID"
echo "start $id" >> "$T/timeline"
cp "$CASCADE_PROMPT_FILE" "$T/prompt-$id-$CASCADE_ATTEMPT.md" 2>/dev/null
touch "$T/started-$id"
if [ -f .env ] && [ -d build-cache ]; then touch "$T/setup-ok-$id"; fi
if [ -f "$T/wait-$id" ]; then
  w=$(cat "$T/wait-$id"); i=0
  while [ ! -e "$T/$w" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  [ -e "$T/$w" ] && touch "$T/saw-$id"
fi
if [ -f "$T/fail-$id" ]; then echo "failing on purpose (attempt $CASCADE_ATTEMPT)"; echo "end $id" >> "$T/timeline"; exit 3; fi
if [ -f "$T/flaky-$id" ]; then
  if [ "$CASCADE_ATTEMPT" = 1 ]; then echo bad > value.txt; else echo good > value.txt; fi
elif [ -f "$T/edit-$id" ]; then
  printf '%s\n' "line from $id" > "$(cat "$T/edit-$id")"
elif [ ! -f "$T/nochange-$id" ]; then
  printf '%s\n' "$id" > "$id.txt"
fi
hf="$T/hold-$id"; [ -f "$T/hold-$id-$CASCADE_ATTEMPT" ] && hf="$T/hold-$id-$CASCADE_ATTEMPT"
if [ -f "$hf" ]; then
  touch "$T/held-$id"
  h=$(cat "$hf"); i=0
  while [ ! -e "$T/$h" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
fi
echo "end $id" >> "$T/timeline""#
            ),
        );
    }

    /// Writes agents.json: `scripted` (the generic agent) as default plus `extra` agents.
    fn set_agents(&self, extra: Value, implementation: Option<Value>) {
        let mut agents = json!({
            "scripted": {"type": "cli", "command": self.t("agent.sh").display().to_string(), "args": [], "timeout": 60}
        });
        if let (Some(map), Some(extra)) = (agents.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                map.insert(k.clone(), v.clone());
            }
        }
        let mut cfg = json!({"default_agent": "scripted", "agents": agents});
        if let Some(phase) = implementation {
            cfg["phase_defaults"] = json!({"implementation": phase});
        }
        write_json(&self.t("agents.json"), &cfg);
    }

    /// `cascade <args> --agents <tools>/agents.json --retry-delay 0` in the repo.
    fn cascade(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = cascade(self.repo());
        cmd.args(args)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .timeout(Duration::from_secs(120));
        cmd
    }

    /// `cascade <args> --agents <tools>/agents.json` as a plain command, to be
    /// started in the background (the caller sets stdio and spawns it).
    fn background(&self, args: &[&str]) -> StdCommand {
        let mut cmd = cascade_command(self.repo());
        cmd.args(args).arg("--agents").arg(self.t("agents.json"));
        cmd
    }

    /// `bytes` as text for a snapshot: what differs from run to run (the
    /// temp directories, run and commit ids, pids, durations) and from
    /// kernel to kernel (the confinement) replaced.
    fn redacted(&self, bytes: &[u8]) -> String {
        let text = String::from_utf8_lossy(bytes)
            .replace(&self.tools().display().to_string(), "[tools]")
            .replace(&self.repo().display().to_string(), "[repo]");
        let volatile = [
            (r"\b\d{8}T\d{6}Z-\d+\b", "[run-id]"),
            (r"\b[0-9a-f]{10}\b", "[commit]"),
            (r"(?m)^Confinement: .*$", "Confinement: [confinement]"),
            (r"(?m)^confinement: .*$", "confinement: [confinement]"),
            (r"\bpid \d+", "pid [pid]"),
            (r"\b(\d+h\d{2}m|\d+m\d{2}s|\d+(\.\d)?s)\b", "[duration]"),
        ];
        volatile.iter().fold(text, |text, (pattern, with)| {
            let re = regex::Regex::new(pattern).expect("a valid pattern");
            re.replace_all(&text, *with).into_owned()
        })
    }

    /// `approve` in the background, its output discarded (a run to kill).
    fn spawn_quiet_approve(&self) -> std::process::Child {
        self.background(&BACKGROUND_APPROVE)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cascade starts")
    }

    /// Each story's commit ("ID: Title ID") is on main exactly once.
    fn assert_each_merged_once(&self, ids: &[&str]) {
        let subjects = self.main_subjects();
        for id in ids {
            let title = format!("{id}: Title {id}");
            let merged = subjects.iter().filter(|s| **s == title).count();
            assert_eq!(merged, 1, "{id} merged once: {subjects:?}");
        }
    }

    fn approve(&self, extra: &[&str]) -> std::process::Output {
        let mut args = vec!["approve", "--auto-run", "--retry-delay", "0", "--json"];
        args.extend_from_slice(extra);
        self.cascade(&args).output().expect("cascade runs")
    }

    fn timeline(&self) -> Vec<String> {
        std::fs::read_to_string(self.t("timeline"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn pos(&self, line: &str) -> usize {
        let tl = self.timeline();
        tl.iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("'{line}' not in timeline {tl:?}"))
    }

    fn prd(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.repo().join("prd.json")).unwrap())
            .unwrap()
    }

    fn prd_status(&self, id: &str) -> String {
        self.prd()["stories"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .map(|s| s["status"].as_str().unwrap_or("").to_string())
            .unwrap()
    }

    fn status_json(&self) -> Value {
        let out = self.cascade(&["status", "--json"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status json")
    }

    /// The story's status and its first attempt's agent pid from the run
    /// database, waiting (with a guard) until the pid has been recorded.
    fn agent_pid(&self, id: &str) -> (String, i32) {
        let path = cascade_engine::store::db_path(&self.repo().join(".cascade"));
        let start = Instant::now();
        loop {
            // A read racing a write is simply tried again.
            let state = cascade_engine::state::RunState::load(&path).ok().flatten();
            let story = state.as_ref().and_then(|st| st.story(id));
            if let Some(s) = story {
                if let Some(pid) = s.attempts.first().and_then(|a| a.pid) {
                    return (s.status.as_str().to_string(), pid as i32);
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no pid for {id}: {:?}",
                story
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn main_subjects(&self) -> Vec<String> {
        git(self.repo(), &["log", "--format=%s", "main"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn progress(&self) -> String {
        std::fs::read_to_string(self.repo().join("progress.txt")).unwrap_or_default()
    }
}

fn story(id: &str, deps: &[&str]) -> Value {
    json!({
        "id": id, "title": format!("Title {id}"), "description": format!("Implement {id}"),
        "priority": "medium", "dependencies": deps, "status": "pending",
        "acceptance_criteria": ["it works"], "story_extra": id
    })
}

fn wait_for(path: &Path, guard: Duration) -> bool {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() > guard {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Whether a process exists and is not a zombie (a container's init may not
/// reap orphans, so a killed orphan can linger as a zombie).
fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .map_or(true, |(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

fn worktree_dirs(repo: &Path) -> Vec<String> {
    std::fs::read_dir(repo.join(".cascade/worktrees"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn diamond_completes_in_dependency_order_with_merges() {
    // s1 -> (s2, s3, s4); (s2, s3) -> s5; (s4, s5) -> s6
    let f = Fixture::new(
        json!([
            story("s1", &[]),
            story("s2", &["s1"]),
            story("s3", &["s1"]),
            story("s4", &["s1"]),
            story("s5", &["s2", "s3"]),
            story("s6", &["s4", "s5"]),
        ]),
        json!([]),
    );
    let out = f.approve(&["--parallel", "3"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let deps = [
        ("s2", "s1"),
        ("s3", "s1"),
        ("s4", "s1"),
        ("s5", "s2"),
        ("s5", "s3"),
        ("s6", "s4"),
        ("s6", "s5"),
    ];
    for (s, d) in deps {
        assert!(
            f.pos(&format!("end {d}")) < f.pos(&format!("start {s}")),
            "{s} started before {d} ended: {:?}",
            f.timeline()
        );
    }
    // Every story merged exactly once, its file on main, status complete in
    // prd.json with every other field kept.
    let subjects = f.main_subjects();
    for id in ["s1", "s2", "s3", "s4", "s5", "s6"] {
        let title = format!("{id}: Title {id}");
        assert_eq!(
            subjects.iter().filter(|s| **s == title).count(),
            1,
            "{subjects:?}"
        );
        assert!(
            f.repo().join(format!("{id}.txt")).exists(),
            "{id}.txt on main"
        );
        assert_eq!(f.prd_status(id), "complete");
    }
    let prd = f.prd();
    assert_eq!(prd["custom_field"]["kept"], true);
    assert_eq!(prd["metadata"]["keep"], "me");
    assert_eq!(prd["stories"][0]["story_extra"], "s1");
    // Merged worktrees and branches are gone; the tree is clean.
    assert!(
        worktree_dirs(f.repo()).is_empty(),
        "{:?}",
        worktree_dirs(f.repo())
    );
    assert_eq!(git(f.repo(), &["branch", "--list", "cascade/*"]).trim(), "");
    assert_eq!(git(f.repo(), &["status", "--porcelain"]).trim(), "");
    // Events: NDJSON with run_finished last; progress.txt in Plan Cascade's format.
    let ev = events(&out);
    let last = ev.last().unwrap();
    assert_eq!(last["event"], "run_finished");
    assert_eq!(last["status"], "completed");
    assert_eq!(last["stories"]["complete"], 6);
    assert_eq!(
        ev.iter().filter(|e| e["event"] == "story_merged").count(),
        6
    );
    // Each merge is announced when the story's turn in the merge queue
    // comes: merge_started (branch, target) before its story_merged.
    for id in ["s1", "s2", "s3", "s4", "s5", "s6"] {
        let at = |kind: &str| {
            ev.iter()
                .position(|e| e["event"] == kind && e["story"] == id)
                .unwrap_or_else(|| panic!("no {kind} for {id}: {}", explain(&out)))
        };
        assert!(at("merge_started") < at("story_merged"), "{id}: {ev:?}");
        let started = &ev[at("merge_started")];
        assert_eq!(started["branch"], format!("cascade/{id}"), "{started}");
        assert_eq!(started["target_branch"], "main", "{started}");
        assert_eq!(started["attempt"], 1, "{started}");
    }
    let progress = f.progress();
    assert_eq!(
        progress.matches("[COMPLETE] via scripted").count(),
        6,
        "{progress}"
    );
    assert!(progress
        .lines()
        .all(|l| l.starts_with('[') && l.as_bytes()[20] == b']'));
    let st = f.status_json();
    assert_eq!(st["status"], "completed");
    assert_eq!(st["stories"]["s6"]["status"], "complete");
    assert_eq!(st["stories"]["s6"]["agent"], "scripted");
    assert_eq!(st["stories"]["s6"]["attempts"], 1);
}

#[test]
fn parallel_stories_really_overlap() {
    let f = Fixture::new(json!([story("a", &[]), story("b", &[])]), json!([]));
    // Each waits until the other has started: only true overlap lets both see it.
    f.mark("wait-a", "started-b");
    f.mark("wait-b", "started-a");
    let out = f.approve(&["--parallel", "2"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(
        f.t("saw-a").exists() && f.t("saw-b").exists(),
        "{:?}",
        f.timeline()
    );
}

#[test]
fn eager_starts_a_story_before_an_unrelated_slow_one_ends() {
    // slow and fast are independent; after depends on fast only.
    let f = Fixture::new(
        json!([
            story("slow", &[]),
            story("fast", &[]),
            story("after", &["fast"])
        ]),
        json!([]),
    );
    // slow holds until `after` has started: possible only with eager.
    f.mark("wait-slow", "started-after");
    let out = f.approve(&["--schedule", "eager", "--parallel", "4"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(f.t("saw-slow").exists(), "{:?}", f.timeline());
    assert!(
        f.pos("start after") < f.pos("end slow"),
        "{:?}",
        f.timeline()
    );
}

#[test]
fn eager_never_runs_two_stories_declaring_the_same_files_at_once() {
    // a and b both declare shared.txt; c declares nothing.
    let with_files = |id: &str| {
        let mut s = story(id, &[]);
        s["files"] = json!(["shared.txt"]);
        s
    };
    let f = Fixture::new(
        json!([with_files("a"), with_files("b"), story("c", &[])]),
        json!([]),
    );
    // a holds until c has started, c until b has: c must run beside a,
    // then beside b, while b waits for a to end (without the lock all
    // three would start at once).
    f.mark("wait-a", "started-c");
    f.mark("wait-c", "started-b");
    let out = f.approve(&["--schedule", "eager", "--parallel", "3"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(
        f.t("saw-a").exists() && f.t("saw-c").exists(),
        "{:?}",
        f.timeline()
    );
    assert!(f.pos("end a") < f.pos("start b"), "{:?}", f.timeline());
    assert!(f.pos("start c") < f.pos("end a"), "{:?}", f.timeline());
    assert!(f.pos("start b") < f.pos("end c"), "{:?}", f.timeline());
}

/// Files a story's merge conflicted in count as its files for the rest of
/// the run: a story declaring one waits while the conflicted story's
/// retry runs (eager's soft lock), where before it started beside it.
#[test]
fn a_story_declaring_a_file_another_conflicted_in_waits_while_that_one_runs() {
    let mut z = story("z", &["w"]);
    z["files"] = json!(["README.md"]);
    let f = Fixture::new(
        json!([story("x", &[]), story("y", &[]), story("w", &[]), z]),
        json!([]),
    );
    // x edits README.md and holds; y edits it once x holds and merges;
    // then x goes on and conflicts. Its retry holds until w has merged,
    // and w (which z depends on) ends only once x has conflicted.
    f.mark("edit-x", "README.md");
    f.mark("edit-y", "README.md");
    f.mark("hold-x-1", "go-x");
    f.mark("hold-x-2", "go-x2");
    f.mark("wait-y", "held-x");
    f.mark("wait-w", "conflicted-x");
    let args = ["--schedule", "eager", "--parallel", "4", "--no-resolve"];
    let (ev, all) = approve_watching(&f, &args, |line| {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            return;
        };
        match (e["event"].as_str(), e["story"].as_str()) {
            (Some("story_merged"), Some("y")) => f.mark("go-x", ""),
            (Some("merge_conflict"), Some("x")) => f.mark("conflicted-x", ""),
            (Some("story_merged"), Some("w")) => f.mark("go-x2", ""),
            _ => {}
        }
    });
    let at = |kind: &str, story: &str| {
        ev.iter()
            .position(|e| e["event"] == kind && e["story"] == story)
            .unwrap_or_else(|| panic!("no {kind} of {story}: {all}"))
    };
    assert!(at("merge_conflict", "x") < at("story_merged", "w"), "{all}");
    assert!(
        at("story_merged", "x") < at("story_started", "z"),
        "z started while x, which conflicted in README.md, still ran: {all}"
    );
    f.assert_each_merged_once(&["x", "y", "w", "z"]);
}

/// The files a story's merge conflicted in are kept in its record: after
/// the run is interrupted and resumed, a story declaring one of them (z,
/// added to the plan meanwhile) still waits while the conflicted story's
/// retry runs, instead of starting beside it.
#[test]
fn a_story_declaring_a_file_another_conflicted_in_waits_for_it_after_a_resume_too() {
    let f = Fixture::new(json!([story("x", &[]), story("y", &[])]), json!([]));
    f.mark("edit-x", "README.md");
    f.mark("edit-y", "README.md");
    f.mark("hold-x-1", "go-x");
    f.mark("wait-y", "held-x");
    // x's retry holds (whatever number the resume gives it) until the
    // test lets it go.
    f.mark("hold-x-2", "go-x2");
    f.mark("hold-x-3", "go-x2");
    let eager = ["--schedule", "eager", "--parallel", "3", "--no-resolve"];
    let mut argv = BACKGROUND_APPROVE.to_vec();
    argv.extend(eager);
    let mut child = spawn_cascade(&f, &argv);
    let stdout = child.stdout.take().expect("stdout");
    // Read on past the interrupt (a closed pipe would stop the run itself).
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok);
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let e: Value = serde_json::from_str(&line).unwrap_or_default();
        match (e["event"].as_str(), e["story"].as_str()) {
            (Some("story_merged"), Some("y")) => f.mark("go-x", ""),
            (Some("story_started"), Some("x")) if e["attempt"] == 2 => break,
            _ => {}
        }
        seen.push(line);
    }
    assert!(
        seen.iter().any(|l| l.contains("\"merge_conflict\"")),
        "x did not conflict: {seen:?}"
    );
    // SAFETY: a plain signal to our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    seen.extend(lines);
    let status = child.wait().expect("the run ends");
    assert_eq!(status.code(), Some(130), "{seen:?}");

    let mut z = story("z", &[]);
    z["files"] = json!(["README.md"]);
    f.write_prd(json!([story("x", &[]), story("y", &[]), z]), json!([]));
    let mut child = spawn_cascade(
        &f,
        &["resume", "--auto-run", "--retry-delay", "0", "--json"],
    );
    let stdout = child.stdout.take().expect("stdout");
    let mut events = Vec::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
        let e: Value = serde_json::from_str(&line).unwrap_or_default();
        if e["event"] == "story_started" && e["story"] == "x" {
            // Time for z to start beside x, were it not kept apart.
            let go = f.t("go-x2");
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(1500));
                let _ = std::fs::write(go, "");
            });
        }
        events.push(e);
    }
    assert!(child.wait().expect("resume ends").success(), "{events:?}");
    let at = |kind: &str, story: &str| {
        events
            .iter()
            .position(|e| e["event"] == kind && e["story"] == story)
            .unwrap_or_else(|| panic!("no {kind} of {story}: {events:?}"))
    };
    assert!(
        at("story_merged", "x") < at("story_started", "z"),
        "z started while x, which conflicted in README.md before the resume, ran: {events:?}"
    );
    f.assert_each_merged_once(&["x", "y", "z"]);
}

/// A story whose merge conflicts in a file a running story is editing
/// retries when that story has ended, not on the timer, and lends its
/// slot meanwhile; the running one, conflicting in turn, does not wait for
/// the waiting one.
#[test]
fn a_conflict_retry_waits_for_the_running_story_it_is_against() {
    let f = Fixture::new(
        json!([
            story("first", &[]),
            story("second", &[]),
            story("long", &[]),
            story("fourth", &[]),
            story("fifth", &[])
        ]),
        json!([]),
    );
    // The first three edit README.md. `long` edits it, then holds until the
    // test lets it go; `first` and `second` start their edits once it
    // holds, so one of them merges and the other conflicts while `long`
    // runs. `fourth` takes the winner's slot and holds too: `fifth` can
    // only run in the slot the waiting loser lends.
    for id in ["first", "second", "long"] {
        f.mark(&format!("edit-{id}"), "README.md");
    }
    f.mark("hold-long", "go-long");
    f.mark("hold-fourth", "go-long");
    f.mark("wait-first", "held-long");
    f.mark("wait-second", "held-long");
    let args = ["--parallel", "3", "--no-resolve", "--max-retries", "2"];
    let (mut waits, mut fifth_merged) = (false, false);
    let (ev, all) = approve_watching(&f, &args, |line| {
        // The loser says it waits for `long`, and `fifth` merged in its
        // slot: only now may `long` and `fourth` end (they give up holding
        // after 30 s, when the slot was not lent).
        waits |= line.contains("its retry waits for long to end");
        fifth_merged |= line.contains("\"story_merged\"") && line.contains("\"fifth\"");
        if waits && fifth_merged && !f.t("go-long").exists() {
            f.mark("go-long", "");
        }
    });
    let conflicts = of_kind(&ev, "merge_conflict");
    let loser = conflicts
        .iter()
        .filter_map(|e| e["story"].as_str())
        .find(|s| *s != "long")
        .unwrap_or_else(|| panic!("neither first nor second conflicted: {all}"));
    assert!(
        f.t("go-long").exists(),
        "{loser} never said it waits for long: {all}"
    );
    let at = |pred: &dyn Fn(&Value) -> bool, what: &str| {
        ev.iter()
            .position(pred)
            .unwrap_or_else(|| panic!("no {what}: {all}"))
    };
    let long_merged = at(
        &|e| e["event"] == "story_merged" && e["story"] == "long",
        "long merged",
    );
    let retried = at(
        &|e| e["event"] == "retry_scheduled" && e["story"] == loser,
        "retry of the loser",
    );
    assert!(
        long_merged < retried,
        "{loser} retried before long ended: {all}"
    );
    let fifth_merged = at(
        &|e| e["event"] == "story_merged" && e["story"] == "fifth",
        "fifth merged",
    );
    let fourth_merged = at(
        &|e| e["event"] == "story_merged" && e["story"] == "fourth",
        "fourth merged",
    );
    assert!(
        fifth_merged < fourth_merged,
        "fifth did not run in the slot {loser} lent while it waited: {all}"
    );
    // Its wait cost no time on the timer and the retry merged it.
    assert_eq!(ev[retried]["delay_ms"], 0, "{all}");
    // `long` conflicted with the winner too, and retried on the timer: it
    // does not wait for a story that waits.
    let notices: Vec<&str> = of_kind(&ev, "notice")
        .iter()
        .filter_map(|e| e["message"].as_str())
        .filter(|m| m.contains("its retry waits"))
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    // `main` moved under `long` (the winner merged): that is not a branch
    // its agent created.
    assert!(!all.contains("the agent created branch"), "{all}");
    f.assert_each_merged_once(&["first", "second", "long", "fourth", "fifth"]);
}

#[test]
fn gate_failure_is_retried_with_the_error_in_the_prompt() {
    let f = Fixture::new(json!([story("flaky", &[])]), json!([]));
    let gate = script(
        &f.t("gate.sh"),
        "if grep -q bad value.txt 2>/dev/null; then echo 'value.txt:1:1: error: value must not be bad MARKER-42'; exit 1; fi\nexit 0",
    );
    f.write_prd(
        json!([story("flaky", &[])]),
        json!([{"name": "check", "type": "test", "command": gate.display().to_string(), "required": true}]),
    );
    f.mark("flaky-flaky", "");
    let out = f.approve(&[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let second = std::fs::read_to_string(f.t("prompt-flaky-2.md")).expect("second prompt");
    assert!(second.contains("MARKER-42"), "{second}");
    assert!(second.contains("quality gate 'check' failed"), "{second}");
    let first = std::fs::read_to_string(f.t("prompt-flaky-1.md")).unwrap();
    assert!(!first.contains("MARKER-42"));
    let progress = f.progress();
    assert!(
        progress.contains("flaky: [FAILED] via scripted: quality gate 'check' failed"),
        "{progress}"
    );
    assert!(
        progress.contains("flaky: [RETRY] -> scripted (attempt 2/4)"),
        "{progress}"
    );
    let ev = events(&out);
    assert!(ev
        .iter()
        .any(|e| e["event"] == "attempt_failed" && e["error_type"] == "quality_gate"));
    assert_eq!(f.status_json()["stories"]["flaky"]["attempts"], 2);
    assert_eq!(
        std::fs::read_to_string(f.repo().join("value.txt")).unwrap(),
        "good\n"
    );
}

/// A gate killed at its timeout says so where it is shown: the
/// `gate_finished` event, the attempt's error and progress.txt.
#[test]
fn gate_that_times_out_is_reported_as_timed_out() {
    let f = Fixture::new(json!([story("slow", &[])]), json!([]));
    // Hangs on the story's work only (the base passes it).
    let gate = script(&f.t("gate.sh"), "if [ -f slow.txt ]; then sleep 30; fi");
    f.write_prd(
        json!([story("slow", &[])]),
        json!([{"name": "hang", "type": "test", "command": gate.display().to_string(),
                "required": true, "timeout_seconds": 1}]),
    );
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    let gate = ev
        .iter()
        .find(|e| e["event"] == "gate_finished" && e["gate"] == "hang")
        .unwrap_or_else(|| panic!("no gate_finished: {}", explain(&out)));
    assert_eq!(gate["timed_out"], "timed out after 1 s", "{gate}");
    let failed = ev
        .iter()
        .find(|e| e["event"] == "attempt_failed")
        .unwrap_or_else(|| panic!("no attempt_failed: {}", explain(&out)));
    assert_eq!(
        failed["error"], "quality gate 'hang' (timed out after 1 s) failed",
        "{failed}"
    );
    let progress = f.progress();
    assert!(progress.contains("(timed out after 1 s)"), "{progress}");
}

#[test]
fn always_failing_story_blocks_dependents_only() {
    let f = Fixture::new(
        json!([
            story("ok1", &[]),
            story("bad", &[]),
            story("child", &["bad"]),
            story("grandchild", &["child"]),
            story("ok2", &["ok1"]),
        ]),
        json!([]),
    );
    f.mark("fail-bad", "");
    let out = f.approve(&["--max-retries", "1"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let st = f.status_json();
    assert_eq!(st["status"], "failed");
    assert_eq!(st["stories"]["bad"]["status"], "failed");
    assert_eq!(st["stories"]["bad"]["attempts"], 2);
    assert_eq!(st["stories"]["bad"]["error_type"], "exit_code");
    assert_eq!(st["stories"]["child"]["status"], "blocked");
    assert_eq!(st["stories"]["grandchild"]["status"], "blocked");
    assert_eq!(st["stories"]["ok1"]["status"], "complete");
    assert_eq!(st["stories"]["ok2"]["status"], "complete");
    let ev = events(&out);
    let last = ev.last().unwrap();
    assert_eq!(last["status"], "failed");
    assert_eq!(last["stories"]["complete"], 2);
    assert_eq!(last["stories"]["failed"], 1);
    assert_eq!(last["stories"]["blocked"], 2);
    assert!(!f.timeline().iter().any(|l| l.contains("child")));
    // The failed story's worktree is kept for inspection.
    assert!(worktree_dirs(f.repo()).contains(&"bad".to_string()));
}

#[test]
fn hanging_agent_times_out_without_orphans() {
    let f = Fixture::new(
        json!([{"id": "hang", "title": "Hang", "description": "d", "dependencies": [], "agent": "hanger"}]),
        json!([]),
    );
    let t = f.tools().display().to_string();
    let hang = script(
        &f.t("hang.sh"),
        &format!("sleep 300 &\necho $! > '{t}/grandchild'\nsleep 300"),
    );
    f.set_agents(
        json!({"hanger": {"type": "cli", "command": hang.display().to_string(), "args": [], "timeout": 1}}),
        None,
    );
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let st = f.status_json();
    assert_eq!(st["stories"]["hang"]["status"], "failed");
    assert_eq!(st["stories"]["hang"]["error_type"], "timeout");
    let pid: i32 = std::fs::read_to_string(f.t("grandchild"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!pid_alive(pid), "grandchild {pid} survived");
}

#[test]
fn conflicting_stories_report_a_merge_conflict_and_keep_the_branch() {
    let f = Fixture::new(json!([story("left", &[]), story("right", &[])]), json!([]));
    // Both edit README.md's only line, from the same base (each waits for the other).
    f.mark("edit-left", "README.md");
    f.mark("edit-right", "README.md");
    f.mark("wait-left", "started-right");
    f.mark("wait-right", "started-left");
    // Without an agent resolving it (control.rs tests the resolution).
    let out = f.approve(&["--parallel", "2", "--max-retries", "0", "--no-resolve"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let ev = events(&out);
    let conflict = ev
        .iter()
        .find(|e| e["event"] == "merge_conflict")
        .unwrap_or_else(|| panic!("no merge_conflict: {}", explain(&out)));
    assert_eq!(conflict["files"], json!(["README.md"]));
    let loser = conflict["story"].as_str().unwrap().to_string();
    // The conflicting merge was announced too, before its conflict.
    let at = |kind: &str| {
        ev.iter()
            .position(|e| e["event"] == kind && e["story"] == loser.as_str())
            .unwrap_or_else(|| panic!("no {kind} for {loser}: {}", explain(&out)))
    };
    assert!(at("merge_started") < at("merge_conflict"), "{ev:?}");
    let st = f.status_json();
    assert_eq!(st["stories"][&loser]["status"], "failed");
    assert_eq!(st["stories"][&loser]["error_type"], "merge_conflict");
    let branch = format!("cascade/{loser}");
    git(
        f.repo(),
        &["rev-parse", "--verify", &format!("refs/heads/{branch}")],
    );
    // The branch still holds the story's commit.
    let subject = git(f.repo(), &["log", "-1", "--format=%s", &branch]);
    assert_eq!(subject.trim(), format!("{loser}: Title {loser}"));
    // The main worktree is clean and holds the winner's line.
    assert_eq!(git(f.repo(), &["status", "--porcelain"]).trim(), "");
    let readme = std::fs::read_to_string(f.repo().join("README.md")).unwrap();
    assert!(
        readme.starts_with("line from ") && !readme.contains(&loser),
        "{readme}"
    );
}

/// `cascade history`: the run, its stories with their attempts, and the
/// judged attempts per agent and story type, from the run database.
#[test]
fn history_shows_runs_stories_and_agents_from_the_database() {
    let mut typed = story("h1", &[]);
    typed["type"] = json!("feature");
    let f = Fixture::new(json!([typed, story("h2", &[])]), json!([]));
    f.mark("fail-h2", "");
    let out = f.approve(&["--max-retries", "1"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let json_of = |args: &[&str]| -> Value {
        let out = f.cascade(args).output().unwrap();
        assert_eq!(code(&out), 0, "{}", explain(&out));
        serde_json::from_slice(&out.stdout).expect("history json")
    };
    let runs = json_of(&["history", "--json"]);
    let run = &runs["runs"][0];
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(run["status"], "failed", "{runs}");
    assert_eq!(
        (run["stories"].as_u64(), run["complete"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(
        (run["failed"].as_u64(), run["attempts"].as_u64()),
        (Some(1), Some(3))
    );
    assert!(run["finished_at"].is_string(), "{runs}");

    let stories = json_of(&["history", "stories", "--json"]);
    assert_eq!(stories["run_id"], run["id"]);
    let h1 = &stories["stories"][0];
    assert_eq!(
        (h1["id"].as_str(), h1["story_type"].as_str()),
        (Some("h1"), Some("feature"))
    );
    assert_eq!(h1["attempts"][0]["outcome"], "passed", "{stories}");
    let h2 = &stories["stories"][1];
    let kinds: Vec<&str> = h2["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["error_type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["exit_code", "exit_code"], "{stories}");

    let agents = json_of(&["history", "agents", "--json"]);
    let rows: Vec<(String, Value, u64, u64)> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let n = |k: &str| a[k].as_u64().unwrap_or(99);
            (
                a["agent"].as_str().unwrap_or("").to_string(),
                a["story_type"].clone(),
                n("attempts"),
                n("passed"),
            )
        })
        .collect();
    assert_eq!(
        rows,
        // h2 declares no type: it is grouped by the type the resolver
        // inferred ("Implement h2": a feature), with h1's one attempt.
        [("scripted".to_string(), json!("feature"), 3, 1)],
        "{agents}"
    );
    let text = f.cascade(&["history"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("RUN") && text.contains("failed"), "{text}");
    let unknown = f
        .cascade(&["history", "stories", "--run", "nope"])
        .output()
        .unwrap();
    assert_eq!(code(&unknown), 2, "{}", explain(&unknown));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no run 'nope'"));
}

/// A bug-fix story titled to be inferred as one.
fn bugfix(id: &str) -> Value {
    let mut s = story(id, &[]);
    s["title"] = json!(format!("Fix the crash in {id}"));
    s
}

/// `--route learned` changes the choice once the history shows the
/// configured agent failing a story type that another agent passes.
#[test]
fn route_learned_moves_a_story_type_away_from_the_agent_that_keeps_failing_it() {
    let ids = ["b1", "b2", "b3"];
    let f = Fixture::new(json!(ids.map(bugfix)), json!([]));
    // `other` always writes its story's file; `scripted` (the default, the
    // configured choice) fails these stories.
    let other = script(
        &f.t("other.sh"),
        "printf '%s\\n' \"$CASCADE_STORY_ID\" > \"$CASCADE_STORY_ID-other.txt\"",
    );
    f.set_agents(
        json!({"other": {"type": "cli", "command": other.display().to_string(), "args": [], "timeout": 60}}),
        None,
    );
    for id in ids {
        f.mark(&format!("fail-{id}"), "");
    }
    let failing = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&failing), 1, "{}", explain(&failing));
    let passing = f.approve(&["--agent", "other"]);
    assert_eq!(code(&passing), 0, "{}", explain(&passing));

    f.write_prd(json!([bugfix("b4"), story("f1", &[])]), json!([]));
    let plan = |extra: &[&str]| -> Value {
        let mut args = vec!["approve", "--dry-run", "--json"];
        args.extend_from_slice(extra);
        let out = f.cascade(&args).output().unwrap();
        assert_eq!(code(&out), 0, "{}", explain(&out));
        serde_json::from_slice(&out.stdout).expect("dry run json")
    };
    let configured = plan(&[]);
    assert_eq!(
        configured["batches"][0][0]["agent"], "scripted",
        "{configured}"
    );
    let learned = plan(&["--route", "learned"]);
    let b4 = &learned["batches"][0][0];
    assert_eq!(
        (b4["story"].as_str(), b4["agent"].as_str()),
        (Some("b4"), Some("other"))
    );
    assert_eq!(
        b4["reason"],
        "learned: other passed 3 of 3 judged 'bugfix' attempts in this repository (--route learned)",
        "{learned}"
    );
    // A type with no history goes by the configured chain.
    assert_eq!(learned["batches"][0][1]["agent"], "scripted", "{learned}");
    // --agent still wins over history.
    let named = plan(&["--route", "learned", "--agent", "scripted"]);
    assert_eq!(named["batches"][0][0]["agent"], "scripted", "{named}");
    // `agents resolve` says which rule decided.
    let out = f
        .cascade(&["agents", "resolve", "--route", "learned", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let resolved: Value = serde_json::from_slice(&out.stdout).expect("resolve json");
    let row = &resolved["assignments"][0];
    assert_eq!(
        (row["agent"].as_str(), row["level"].as_str()),
        (Some("other"), Some("learned")),
        "{resolved}"
    );

    let run = f.approve(&["--route", "learned"]);
    assert_eq!(code(&run), 0, "{}", explain(&run));
    let started: Vec<(String, String)> = events(&run)
        .iter()
        .filter(|e| e["event"] == "story_started")
        .map(|e| {
            (
                e["story"].as_str().unwrap_or("").into(),
                e["agent"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    assert!(
        started.contains(&("b4".into(), "other".into())),
        "{started:?}"
    );
    assert!(
        started.contains(&("f1".into(), "scripted".into())),
        "{started:?}"
    );
}

#[test]
fn kill_9_then_resume_merges_each_story_exactly_once() {
    kill_9_then_resume(0);
}

/// A larger plan (220 stories done before the run): the killed run's
/// transitions are as committed as a small plan's.
#[test]
fn kill_9_then_resume_of_a_large_plan_loses_nothing() {
    kill_9_then_resume(220);
}

/// k1 -> k2 -> k3 (plus `done` stories complete in prd.json): kill -9 while
/// k2 runs, then resume.
fn kill_9_then_resume(done: usize) {
    let mut stories = vec![story("k1", &[]), story("k2", &["k1"]), story("k3", &["k2"])];
    for i in 0..done {
        let mut s = story(&format!("done{i}"), &[]);
        s["status"] = json!("complete");
        stories.push(s);
    }
    let f = Fixture::new(Value::Array(stories), json!([]));
    // k2 blocks on its first run until released (never, in the killed run).
    f.mark("wait-k2", "release");
    let mut child = f.spawn_quiet_approve();
    assert!(wait_for(&f.t("started-k2"), Duration::from_secs(60)));
    // A story's start reaches the state file within a fraction of a second
    // (not waited for: resume restarts it whatever the file says); wait for
    // it, as the agent's pid is how this test finds the agent to kill.
    let (status, agent_pid) = f.agent_pid("k2");
    assert_eq!(status, "running");
    // kill -9 cascade, then its agent (a crash takes the machine's processes too).
    child.kill().unwrap();
    child.wait().unwrap();
    // SAFETY: kills the agent's process group (it leads its own group).
    unsafe {
        libc::kill(-agent_pid, libc::SIGKILL);
    }
    std::fs::remove_file(f.t("wait-k2")).unwrap();
    // status knows the run is not running any more.
    let st = f.status_json();
    assert_eq!(st["status"], "interrupted");
    assert_eq!(st["stories"]["k1"]["status"], "complete");
    // k1's merge was committed before the kill, with its merge commit.
    let state = crate::common::run_state(f.repo());
    let k1 = state["stories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "k1")
        .unwrap();
    assert_eq!(k1["status"], "complete");
    assert!(k1["merge_commit"].is_string(), "{k1}");

    let out = f
        .cascade(&["resume", "--auto-run", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    // The dead run's lock was taken over, with a note.
    assert!(
        events(&out).iter().any(|e| e["event"] == "notice"
            && e["message"].as_str().unwrap_or("").contains("stale lock")),
        "{}",
        explain(&out)
    );
    f.assert_each_merged_once(&["k1", "k2", "k3"]);
    // k1 was not run again; k2 restarted from a fresh worktree.
    assert_eq!(f.timeline().iter().filter(|l| *l == "start k1").count(), 1);
    assert_eq!(f.timeline().iter().filter(|l| *l == "start k2").count(), 2);
    let st = f.status_json();
    assert_eq!(st["status"], "completed");
    assert!(worktree_dirs(f.repo()).is_empty());
    // The state is in the database alone.
    assert!(!f.repo().join(".cascade/state.json").exists());
}

/// kill -9 while k2's gate runs (its commit recorded, its merge not yet
/// done: a transition the killed run never finished), then resume: every
/// story merged exactly once, k1 not run again.
#[test]
fn kill_9_while_a_gate_runs_then_resume_merges_each_story_exactly_once() {
    let f = Fixture::new(json!([]), json!([]));
    let t = f.tools().display().to_string();
    // In k2's worktree, while `hold` exists, the gate says so and waits
    // (up to 30 s) for `release`.
    let gate = script(
        &f.t("gate.sh"),
        &format!(
            r#"T='{t}'
if [ -f k2.txt ] && [ ! -f k3.txt ] && [ -f "$T/hold" ]; then
  touch "$T/in-gate-k2"; i=0
  while [ ! -e "$T/release" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
fi
exit 0"#
        ),
    );
    f.mark("hold", "");
    f.write_prd(
        json!([story("k1", &[]), story("k2", &["k1"]), story("k3", &["k2"])]),
        json!([{"name": "check", "type": "test", "command": gate.display().to_string(), "required": true}]),
    );
    let mut child = f.spawn_quiet_approve();
    assert!(wait_for(&f.t("in-gate-k2"), Duration::from_secs(60)));
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_file(f.t("hold")).unwrap();
    f.mark("release", "");
    let st = f.status_json();
    assert_eq!(st["status"], "interrupted", "{st}");
    assert_eq!(st["stories"]["k1"]["status"], "complete", "{st}");
    assert_ne!(st["stories"]["k2"]["status"], "complete", "{st}");

    let out = f
        .cascade(&["resume", "--auto-run", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    f.assert_each_merged_once(&["k1", "k2", "k3"]);
    assert_eq!(f.timeline().iter().filter(|l| *l == "start k1").count(), 1);
    let state = crate::common::run_state(f.repo());
    let stories = state["stories"].as_array().unwrap();
    assert!(stories.iter().all(|s| s["status"] == "complete"), "{state}");
    // k2's first attempt was interrupted by the kill, never charged.
    let k2 = stories.iter().find(|s| s["id"] == "k2").unwrap();
    assert_eq!(k2["attempts"][0]["outcome"], "interrupted", "{k2}");
    assert_eq!(f.status_json()["stories"]["k2"]["attempts"], 1);
}

#[test]
fn resume_stops_the_agent_a_killed_run_left_running() {
    let f = Fixture::new(json!([story("k1", &[]), story("k2", &["k1"])]), json!([]));
    // k2's first agent waits for a marker that never comes (up to 30 s).
    f.mark("wait-k2", "release");
    let mut child = f.spawn_quiet_approve();
    assert!(wait_for(&f.t("started-k2"), Duration::from_secs(60)));
    let (_, agent_pid) = f.agent_pid("k2");
    // kill -9 reaches cascade only: the agent, in its own process group, lives on.
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: signal 0 only checks that the process exists.
    assert_eq!(
        unsafe { libc::kill(agent_pid, 0) },
        0,
        "the agent should outlive cascade"
    );
    // The restarted attempt must not wait.
    std::fs::remove_file(f.t("wait-k2")).unwrap();

    let out = f
        .cascade(&["resume", "--auto-run", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(
        events(&out).iter().any(|e| e["event"] == "notice"
            && e["message"]
                .as_str()
                .unwrap_or("")
                .contains(&format!("pid {agent_pid}"))),
        "{}",
        explain(&out)
    );
    // The old agent is gone (it never reached its end) and k2 merged once.
    let gone = (0..100).any(|_| {
        let alive = std::fs::read_to_string(format!("/proc/{agent_pid}/stat"))
            .map(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(false);
        if alive {
            std::thread::sleep(Duration::from_millis(20));
        }
        !alive
    });
    assert!(gone, "the killed run's agent {agent_pid} still runs");
    assert_eq!(f.timeline().iter().filter(|l| *l == "end k2").count(), 1);
    let title = "k2: Title k2".to_string();
    assert_eq!(f.main_subjects().iter().filter(|s| **s == title).count(), 1);
}

#[test]
fn second_concurrent_approve_is_refused_naming_the_pid() {
    let f = Fixture::new(json!([story("w", &[])]), json!([]));
    f.mark("wait-w", "release");
    let mut first = f
        .background(&BACKGROUND_APPROVE)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(&f.t("started-w"), Duration::from_secs(60)));
    let out = f.approve(&[]);
    // The kernel's lock says the first still runs.
    assert_eq!(f.status_json()["status"], "running");
    f.mark("release", "");
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error:"), "{err}");
    assert!(
        err.contains(&format!("another cascade run (pid {}", first.id())),
        "{err}"
    );
    let status = first.wait().unwrap();
    assert!(status.success());
    assert_eq!(f.prd_status("w"), "complete");
    // The lock file goes with the run that held it.
    assert!(!f.repo().join(".cascade/lock").exists());
}

#[test]
fn fallback_for_a_missing_agent_appears_in_progress() {
    let f = Fixture::new(
        json!([{"id": "fb", "title": "Fallback", "description": "d", "dependencies": [], "agent": "ghost"}]),
        json!([]),
    );
    f.set_agents(
        json!({"ghost": {"type": "cli", "command": "cascade-test-no-such-agent", "args": [], "timeout": 5}}),
        Some(json!({"default_agent": "ghost", "fallback_chain": ["scripted"]})),
    );
    let out = f.approve(&[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let progress = f.progress();
    assert!(
        progress
            .lines()
            .any(|l| l.contains("fb: [FALLBACK] ghost -> scripted: ") && l.contains("not found")),
        "{progress}"
    );
    assert!(
        progress.contains("fb: [START] via scripted (pid:"),
        "{progress}"
    );
    let ev = events(&out);
    let started = ev.iter().find(|e| e["event"] == "story_started").unwrap();
    assert_eq!(started["agent"], "scripted");
    assert_eq!(started["fallbacks"][0]["from"], "ghost");
}

#[test]
fn agent_that_changes_nothing_fails_with_no_changes() {
    let f = Fixture::new(json!([story("idle", &[])]), json!([]));
    f.mark("nochange-idle", "");
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let st = f.status_json();
    assert_eq!(st["stories"]["idle"]["error_type"], "no_changes");
    assert!(f
        .progress()
        .contains("idle: [FAILED] via scripted: no changes"));
}

#[test]
fn without_auto_run_and_terminal_one_batch_runs_then_resume_continues() {
    let f = Fixture::new(json!([story("b1", &[]), story("b2", &["b1"])]), json!([]));
    let out = f
        .cascade(&["approve", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.prd_status("b1"), "complete");
    assert_eq!(f.prd_status("b2"), "pending");
    assert_eq!(events(&out).last().unwrap()["status"], "paused");
    assert_eq!(f.status_json()["status"], "paused");
    let out = f
        .cascade(&["resume", "--yes", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.prd_status("b2"), "complete");
    assert_eq!(f.timeline().iter().filter(|l| *l == "start b1").count(), 1);
}

#[test]
fn dry_run_shows_the_schedule_and_runs_nothing() {
    let f = Fixture::new(json!([story("d1", &[]), story("d2", &["d1"])]), json!([]));
    let out = f
        .cascade(&["approve", "--dry-run", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["batches"][0][0]["story"], "d1");
    assert_eq!(v["batches"][1][0]["story"], "d2");
    assert_eq!(v["batches"][1][0]["agent"], "scripted");
    // The text a person reads, the temp directories named alike each time.
    let out = f.cascade(&["approve", "--dry-run"]).output().unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    insta::assert_snapshot!("approve_dry_run", f.redacted(&out.stdout));
    assert!(f.timeline().is_empty());
    assert!(!f.repo().join(".cascade/cascade.db").exists());
}

/// What a person reads of a run: a gate fails the first attempt, the retry
/// passes and merges, the dependent merges after it, then the summary.
#[test]
fn terminal_report_of_a_retried_run() {
    let f = Fixture::new(json!([]), json!([]));
    let gate = script(
        &f.t("gate.sh"),
        "if grep -q bad value.txt 2>/dev/null; then echo 'value.txt:1:1: error: value must not be bad'; exit 1; fi\nexit 0",
    );
    f.write_prd(
        json!([story("t1", &[]), story("t2", &["t1"])]),
        json!([{"name": "check", "type": "test", "command": gate.display().to_string(), "required": true}]),
    );
    f.mark("flaky-t1", "");
    let out = f
        .cascade(&["approve", "--auto-run", "--retry-delay", "0"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    insta::assert_snapshot!("terminal_report", f.redacted(&out.stdout));
}

#[test]
fn status_text_of_a_finished_run() {
    let f = Fixture::new(json!([story("s1", &[]), story("s2", &["s1"])]), json!([]));
    f.mark("fail-s2", "");
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let out = f.cascade(&["status"]).output().unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    insta::assert_snapshot!("status_text", f.redacted(&out.stdout));
}

#[test]
fn bad_input_exits_2() {
    let f = Fixture::new(json!([story("x", &["nope"])]), json!([]));
    let out = f.approve(&[]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
    // A dirty tree is refused too.
    let f = Fixture::new(json!([story("x", &[])]), json!([]));
    std::fs::write(f.repo().join("README.md"), "changed\n").unwrap();
    let out = f.approve(&[]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-dirty"));
    // An unknown --agent.
    let out = f.approve(&["--allow-dirty", "--agent", "nobody"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown agent 'nobody'"));
    // resume without a run.
    let out = f
        .cascade(&["resume", "--allow-dirty", "--retry-delay", "0"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", explain(&out));
}

#[test]
fn sigint_saves_state_and_exits_130() {
    let f = Fixture::new(json!([story("int", &[])]), json!([]));
    f.mark("wait-int", "release");
    let child = f
        .background(&BACKGROUND_APPROVE)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(&f.t("started-int"), Duration::from_secs(60)));
    let (_, agent_pid) = f.agent_pid("int");
    // SAFETY: plain signal to our child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", explain(&out));
    assert!(!pid_alive(agent_pid), "agent {agent_pid} still running");
    assert_eq!(events(&out).last().unwrap()["status"], "interrupted");
    let st = f.status_json();
    assert_eq!(st["status"], "interrupted");
    assert_eq!(st["stories"]["int"]["status"], "pending");
    assert_eq!(f.prd_status("int"), "pending");
}

#[test]
fn resume_treats_a_story_already_on_the_branch_as_merged() {
    // A run merged s2 but was killed before it recorded that: the state says
    // running and prd.json in_progress. Resume must not run s2 again.
    let f = Fixture::new(json!([story("m1", &[]), story("m2", &["m1"])]), json!([]));
    let out = f.approve(&[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let mut state = crate::common::run_state(f.repo());
    state["status"] = json!("running");
    state["stories"][1]["status"] = json!("running");
    state["stories"][1]["merge_commit"] = Value::Null;
    crate::common::save_run_state(f.repo(), &state);
    let mut prd = f.prd();
    prd["stories"][1]["status"] = json!("in_progress");
    write_json(&f.repo().join("prd.json"), &prd);

    let out = f
        .cascade(&["resume", "--auto-run", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    assert!(
        ev.iter()
            .any(|e| e["event"] == "story_skipped" && e["story"] == "m2"),
        "{}",
        explain(&out)
    );
    assert_eq!(f.timeline().iter().filter(|l| *l == "start m2").count(), 1);
    assert_eq!(f.prd_status("m2"), "complete");
    assert_eq!(f.status_json()["stories"]["m2"]["status"], "complete");
    let subjects = f.main_subjects();
    assert_eq!(subjects.iter().filter(|s| *s == "m2: Title m2").count(), 1);
}

#[test]
fn flaky_gate_is_rerun_once_and_reported_as_flaky() {
    let f = Fixture::new(json!([story("fl", &[])]), json!([]));
    let t = f.tools().display().to_string();
    // Fails on its first run on the story's work only (the base passes it).
    let gate = script(
        &f.t("flaky-gate.sh"),
        &format!("if [ -f fl.txt ] && [ ! -f '{t}/gate-ran' ]; then touch '{t}/gate-ran'; echo 'transient failure'; exit 1; fi\nexit 0"),
    );
    f.write_prd(
        json!([story("fl", &[])]),
        json!([{"name": "wobbly", "type": "test", "command": gate.display().to_string(), "required": true}]),
    );
    let out = f.approve(&[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    let gate = ev
        .iter()
        .find(|e| e["event"] == "gate_finished" && e["gate"] == "wobbly")
        .unwrap_or_else(|| panic!("{}", explain(&out)));
    assert_eq!(gate["passed"], true);
    assert_eq!(gate["flaky"], true);
    // Not charged to the agent: one attempt.
    assert_eq!(f.status_json()["stories"]["fl"]["attempts"], 1);
}

#[test]
fn worktree_setup_copies_files_and_runs_commands() {
    let f = Fixture::new(json!([story("su", &[])]), json!([]));
    // .env and build-cache/ are ignored: a fresh worktree lacks them.
    std::fs::write(f.repo().join(".gitignore"), ".env\nbuild-cache/\n").unwrap();
    git(f.repo(), &["add", ".gitignore"]);
    git(f.repo(), &["commit", "-q", "-m", "ignore"]);
    std::fs::write(f.repo().join(".env"), "SECRET=1\n").unwrap();
    write_json(
        &f.repo().join(".cascade/config.json"),
        &json!({"worktree": {"copy": [".env"], "setup": [["mkdir", "-p", "build-cache"]]}}),
    );
    let out = f.approve(&[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(f.t("setup-ok-su").exists(), "{:?}", f.timeline());
    // Ignored setup output is not committed.
    let files = git(f.repo(), &["ls-files"]);
    assert!(!files.lines().any(|l| l == ".env"), "{files}");
}

#[test]
fn max_iterations_stops_after_that_many_batches() {
    let f = Fixture::new(
        json!([story("i1", &[]), story("i2", &["i1"]), story("i3", &["i2"])]),
        json!([]),
    );
    let out = f.approve(&["--mode", "max-iterations", "--max-iterations", "2"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.prd_status("i2"), "complete");
    assert_eq!(f.prd_status("i3"), "pending");
    assert_eq!(events(&out).last().unwrap()["status"], "paused");
    let out = f.approve(&["--mode", "max-iterations"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
}

#[test]
fn fail_fast_stops_scheduling_after_the_first_failure() {
    let f = Fixture::new(
        json!([story("ff1", &[]), story("ff2", &[]), story("ff3", &[])]),
        json!([]),
    );
    f.mark("fail-ff1", "");
    let out = f.approve(&["--fail-fast", "--parallel", "1", "--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    assert!(!f
        .timeline()
        .iter()
        .any(|l| l == "start ff2" || l == "start ff3"));
    let last = events(&out).last().unwrap().clone();
    assert_eq!(last["status"], "failed");
    assert_eq!(last["stories"]["pending"], 2);
}

#[test]
fn a_tracked_prd_being_updated_never_makes_the_tree_dirty() {
    let f = Fixture::new(json!([story("p1", &[]), story("p2", &["p1"])]), json!([]));
    // Some users commit prd.json: cascade's status updates then modify a tracked file.
    git(f.repo(), &["add", "-f", "prd.json"]);
    git(f.repo(), &["commit", "-q", "-m", "plan"]);
    let out = f.approve(&["--mode", "batch-complete"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.prd_status("p1"), "complete");
    let out = f
        .cascade(&["resume", "--yes", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.prd_status("p2"), "complete");
}

/// `kill -9` between writing a PRD's temp file and renaming it leaves
/// `.prd.json.<pid>.<n>.tmp`; the next run must not call that the user's
/// uncommitted work (it refused to resume before).
#[test]
fn a_prd_temp_file_a_killed_run_left_does_not_make_the_tree_dirty() {
    let f = Fixture::new(json!([story("t1", &[])]), json!([]));
    let leftover = f.repo().join(".prd.json.4242.3.tmp");
    std::fs::write(&leftover, "{").unwrap();
    let out = f.approve(&[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.prd_status("t1"), "complete");
    assert!(!leftover.exists(), "the stale temp file is removed");
}

#[test]
fn an_invalid_plan_is_reported_once_without_repeating_its_causes() {
    let f = Fixture::new(
        json!([story("c1", &["c2"]), story("c2", &["c1"])]),
        json!([]),
    );
    let out = f.approve(&[]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.matches("c1 -> c2 -> c1").count(), 1, "{err}");
}

#[test]
fn a_repository_without_commits_says_so_not_detached_head() {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    write_json(
        &dir.path().join("prd.json"),
        &json!({"stories": [story("n1", &[])]}),
    );
    let out = cascade(dir.path())
        .args(["approve", "--auto-run", "--allow-dirty"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no commits yet"), "{err}");
    assert!(!err.contains("detached"), "{err}");
}

#[test]
fn a_prd_in_an_untracked_folder_does_not_make_the_tree_dirty() {
    let f = Fixture::new(json!([story("u1", &[])]), json!([]));
    std::fs::create_dir_all(f.repo().join("plans/next")).unwrap();
    std::fs::rename(
        f.repo().join("prd.json"),
        f.repo().join("plans/next/prd.json"),
    )
    .unwrap();
    let out = f.approve(&["--prd", "plans/next/prd.json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(events(&out).last().unwrap()["stories"]["complete"], 1);
    // The PRD (and progress.txt) are excluded where they are: `git status`
    // shows nothing of cascade's.
    let status = git(f.repo(), &["status", "--porcelain"]);
    assert_eq!(status, "", "{status}");
    let exclude = std::fs::read_to_string(f.repo().join(".git/info/exclude")).unwrap();
    assert!(
        exclude.lines().any(|l| l == "/plans/next/prd.json"),
        "{exclude}"
    );
    // A user's own untracked file next to it still counts as a change.
    std::fs::write(f.repo().join("plans/notes.txt"), "mine\n").unwrap();
    let out = f.approve(&["--prd", "plans/next/prd.json"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("plans/notes.txt"));
}

#[test]
fn resume_without_a_run_says_so_even_on_a_dirty_tree() {
    let f = Fixture::new(json!([story("r1", &[])]), json!([]));
    std::fs::write(f.repo().join("README.md"), "changed\n").unwrap();
    let out = f
        .cascade(&["resume", "--retry-delay", "0"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("there is no run to resume"), "{err}");
    assert!(err.contains("cascade approve"), "{err}");
}

/// Stories reuse worktrees: a story's worktree is exactly the new base of
/// the target branch (no file, change or staged entry of the previous story
/// or its gates), while ignored build output (`target/`) is kept warm.
#[test]
fn a_reused_worktree_starts_exactly_at_the_new_base_keeping_ignored_files() {
    let f = Fixture::new(
        json!([story("r1", &[]), story("r2", &["r1"]), story("r3", &["r2"])]),
        json!([]),
    );
    std::fs::write(f.repo().join(".gitignore"), "target/\n").unwrap();
    std::fs::write(f.repo().join("tracked.txt"), "original\n").unwrap();
    git(f.repo(), &["add", ".gitignore", "tracked.txt"]);
    git(f.repo(), &["commit", "-q", "-m", "ignore target"]);
    let t = f.tools().display().to_string();
    // The agent records what it finds, then does its story.
    script(
        &f.t("inspect.sh"),
        &format!(
            r#"T='{t}'
id="$CASCADE_STORY_ID"
pwd > "$T/wd-$id"
git status --porcelain --untracked-files=all > "$T/status-$id"
ls -A | sort > "$T/ls-$id"
cat target/cache > "$T/cache-$id" 2>/dev/null
git rev-parse --abbrev-ref HEAD > "$T/branch-$id"
git rev-parse HEAD > "$T/head-$id"
cat tracked.txt > "$T/tracked-$id"
printf '%s\n' "$id" > "$id.txt""#
        ),
    );
    // The gate (after the commit) leaves untracked, modified, staged and
    // ignored files behind.
    script(
        &f.t("mess.sh"),
        r#"echo leftover > leftover.txt
mkdir -p junk/deep && echo j > junk/deep/j.txt
echo changed > tracked.txt
echo staged > staged.txt && git add staged.txt
mkdir -p target && echo warm >> target/cache"#,
    );
    f.write_prd(
        json!([story("r1", &[]), story("r2", &["r1"]), story("r3", &["r2"])]),
        json!([{"name": "mess", "type": "test", "required": true,
                "command": f.t("mess.sh").display().to_string(), "args": []}]),
    );
    f.set_agents(
        json!({"inspect": {"type": "cli", "command": f.t("inspect.sh").display().to_string(), "args": [], "timeout": 60}}),
        None,
    );
    let out = f.approve(&["--parallel", "1", "--agent", "inspect"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let read = |name: &str| std::fs::read_to_string(f.t(name)).unwrap_or_default();
    // One worktree served the whole chain.
    assert_eq!(read("wd-r1"), read("wd-r2"));
    assert_eq!(read("wd-r2"), read("wd-r3"));
    for (id, prev) in [("r2", "r1"), ("r3", "r2")] {
        assert_eq!(read(&format!("status-{id}")), "", "{id} started dirty");
        let ls = read(&format!("ls-{id}"));
        for gone in ["leftover.txt", "junk", "staged.txt", &format!("{id}.txt")] {
            assert!(!ls.lines().any(|l| l == gone), "{gone} left for {id}: {ls}");
        }
        assert!(ls.lines().any(|l| l == format!("{prev}.txt")), "{ls}");
        assert_eq!(read(&format!("tracked-{id}")), "original\n");
        assert_eq!(
            read(&format!("branch-{id}")).trim(),
            format!("cascade/{id}")
        );
    }
    // Each story started at the tip its predecessor's merge left.
    let log = git(f.repo(), &["log", "--format=%H %s", "main"]);
    let merged_r1 = log
        .lines()
        .find(|l| l.ends_with("r1: Title r1"))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .unwrap();
    assert_eq!(read("head-r2").trim(), merged_r1);
    // Ignored build output stayed warm from story to story.
    assert_eq!(read("cache-r1"), "");
    assert_eq!(read("cache-r2"), "warm\n");
    assert_eq!(read("cache-r3"), "warm\nwarm\n");
    // Nothing is left behind once the run is over.
    assert!(
        worktree_dirs(f.repo()).is_empty(),
        "{:?}",
        worktree_dirs(f.repo())
    );
    assert_eq!(git(f.repo(), &["branch", "--list", "cascade/*"]).trim(), "");
    assert_eq!(git(f.repo(), &["worktree", "list"]).lines().count(), 1);
    assert_eq!(git(f.repo(), &["status", "--porcelain"]).trim(), "");
}

#[test]
fn sigterm_stops_the_agents_saves_state_and_exits_143() {
    // `kill`, a cancelled CI job or `timeout` send SIGTERM: the agents (in
    // their own process groups) must not be left running as orphans.
    let f = Fixture::new(json!([story("term", &[])]), json!([]));
    f.mark("wait-term", "release");
    let child = f
        .background(&BACKGROUND_APPROVE)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(&f.t("started-term"), Duration::from_secs(60)));
    let (_, agent_pid) = f.agent_pid("term");
    // SAFETY: plain signal to our child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 143, "{}", explain(&out));
    assert!(!pid_alive(agent_pid), "agent {agent_pid} still running");
    assert_eq!(events(&out).last().unwrap()["status"], "interrupted");
    assert_eq!(f.status_json()["status"], "interrupted");
    // And the run continues from there.
    std::fs::write(f.t("release"), "").unwrap();
    let out = f
        .cascade(&["resume", "--auto-run", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.prd_status("term"), "complete");
}

#[test]
fn out_of_range_retry_delays_are_usage_errors_not_panics() {
    let f = Fixture::new(json!([story("d1", &[])]), json!([]));
    for delay in ["1e300", "-1", "NaN"] {
        let out = f
            .cascade(&["approve", "--dry-run", "--retry-delay", delay])
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{delay}: {}", explain(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: --retry-delay"), "{delay}: {err}");
        assert!(!err.contains("internal error"), "{delay}: {err}");
    }
    // An unknown agent given to a phase flag is not blamed on a story.
    let out = f
        .cascade(&["approve", "--dry-run", "--impl-agent", "nobody"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: unknown agent 'nobody' given to --impl-agent"),
        "{err}"
    );
}

#[test]
fn agent_control_characters_never_reach_the_terminal_raw() {
    let f = Fixture::new(
        json!([{"id": "esc", "title": "Esc", "description": "d", "dependencies": [], "agent": "noisy"}]),
        json!([]),
    );
    let noisy = script(
        &f.t("noisy.sh"),
        r"printf 'boom \033[2J\033[31mred\000nul\n' >&2; exit 4",
    );
    f.set_agents(
        json!({"noisy": {"type": "cli", "command": noisy.display().to_string(), "args": []}}),
        None,
    );
    let out = f.cascade(&crate::common::APPROVE_NOW).output().unwrap();
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let text = [out.stdout.clone(), out.stderr.clone()].concat();
    assert!(
        !text.contains(&0x1b),
        "raw ESC: {}",
        String::from_utf8_lossy(&text)
    );
    assert!(
        !text.contains(&0),
        "raw NUL: {}",
        String::from_utf8_lossy(&text)
    );
    assert!(
        String::from_utf8_lossy(&text).contains("boom \\u{1b}[2J"),
        "{}",
        explain(&out)
    );
    let status = f.cascade(&["status"]).output().unwrap();
    assert!(!status.stdout.contains(&0x1b));
}

#[test]
fn status_after_kill_9_shows_no_story_running() {
    let f = Fixture::new(json!([story("k9", &[])]), json!([]));
    f.mark("wait-k9", "release");
    let mut child = f.spawn_quiet_approve();
    assert!(wait_for(&f.t("started-k9"), Duration::from_secs(60)));
    let (status, _) = f.agent_pid("k9");
    assert_eq!(status, "running");
    child.kill().unwrap();
    child.wait().unwrap();
    let st = f.status_json();
    assert_eq!(st["status"], "interrupted");
    assert_eq!(st["stories"]["k9"]["status"], "pending", "{st}");
    let text = f.cascade(&["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(!text.contains("running"), "{text}");
    std::fs::write(f.t("release"), "").unwrap();
}

#[test]
fn edits_to_prd_json_during_a_run_are_kept() {
    let f = Fixture::new(json!([story("e1", &[]), story("e2", &["e1"])]), json!([]));
    f.mark("wait-e1", "go-e1");
    let child = f
        .background(&BACKGROUND_APPROVE)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(&f.t("started-e1"), Duration::from_secs(60)));
    // The user edits the plan while e1 runs.
    let mut prd = f.prd();
    prd["goal"] = json!("reworded while running");
    prd["stories"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "later", "title": "Added mid-run", "dependencies": []}));
    write_json(&f.repo().join("prd.json"), &prd);
    std::fs::write(f.t("go-e1"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let prd = f.prd();
    assert_eq!(prd["goal"], "reworded while running");
    assert_eq!(prd["stories"][2]["id"], "later");
    assert_eq!(f.prd_status("e1"), "complete");
    assert_eq!(f.prd_status("e2"), "complete");
}

/// A pseudo-terminal: (master, slave) file descriptors.
fn open_pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two new descriptors we then own.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty failed");
    // SAFETY: both descriptors are fresh and owned only here.
    unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    }
}

#[test]
fn ctrl_c_at_the_batch_prompt_stops_the_run_with_130() {
    use std::io::Read;
    let f = Fixture::new(json!([story("q1", &[]), story("q2", &["q1"])]), json!([]));
    let (master, slave) = open_pty();
    let mut child = f
        .background(&["approve", "--retry-delay", "0"])
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Read the terminal until the prompt for batch 2 shows.
    let (tx, rx) = std::sync::mpsc::channel();
    let mut reader = std::fs::File::from(master);
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&seen).contains("[Y/n]") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the prompt before batch 2");
    // SAFETY: plain signal to our child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("Ctrl-C at the prompt did not stop cascade");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    assert_eq!(f.prd_status("q1"), "complete");
    assert_eq!(f.prd_status("q2"), "pending");
}

/// `worktree prune` never deletes a `cascade/...` branch cascade did not
/// create (the user's unmerged work), unless `--force`.
#[test]
fn worktree_prune_keeps_cascade_named_branches_cascade_did_not_create() {
    let f = Fixture::new(json!([story("p1", &[])]), json!([]));
    let out = f.approve(&[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    git(f.repo(), &["checkout", "-q", "-b", "cascade/precious"]);
    std::fs::write(f.repo().join("precious.txt"), "mine\n").unwrap();
    git(f.repo(), &["add", "precious.txt"]);
    git(f.repo(), &["commit", "-q", "-m", "precious work"]);
    git(f.repo(), &["checkout", "-q", "main"]);

    let dry = f
        .cascade(&["worktree", "prune", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(code(&dry), 0, "{}", explain(&dry));
    assert!(
        String::from_utf8_lossy(&dry.stdout)
            .contains("would keep cascade/precious: not created by cascade"),
        "{}",
        explain(&dry)
    );
    let out = f.cascade(&["worktree", "prune"]).output().unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("kept cascade/precious: not created by cascade"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("deleted branch cascade/precious"),
        "{stdout}"
    );
    let branches = git(f.repo(), &["branch", "--format=%(refname:short)"]);
    assert!(branches.contains("cascade/precious"), "{branches}");

    let out = f
        .cascade(&["worktree", "prune", "--force"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("deleted branch cascade/precious"));
}

/// An agent that commits its own work: its commits beyond the base are the
/// story's work (not "no changes"), and what it left uncommitted on top is
/// committed as usual.
#[test]
fn an_agent_that_commits_its_own_work_is_not_a_no_changes_failure() {
    let f = Fixture::new(
        json!([story("own", &[]), story("mixed", &["own"])]),
        json!([]),
    );
    let body = r#"echo "work of $CASCADE_STORY_ID" > "$CASCADE_STORY_ID.txt"
git add "$CASCADE_STORY_ID.txt"
git -c user.name=agent -c user.email=agent@example.com commit -q -m "agent commit $CASCADE_STORY_ID"
if [ "$CASCADE_STORY_ID" = mixed ]; then echo extra > extra.txt; fi"#;
    let agent = script(&f.t("committer.sh"), body);
    f.set_agents(
        json!({"scripted": {"type": "cli", "command": agent.display().to_string(), "args": [], "timeout": 60}}),
        None,
    );
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let subjects = f.main_subjects();
    assert!(
        subjects.iter().any(|s| s == "agent commit own"),
        "{subjects:?}"
    );
    assert!(
        subjects.iter().any(|s| s == "agent commit mixed"),
        "{subjects:?}"
    );
    assert!(
        subjects.iter().any(|s| s == "mixed: Title mixed"),
        "{subjects:?}"
    );
    for file in ["own.txt", "mixed.txt", "extra.txt"] {
        assert!(f.repo().join(file).is_file(), "{file}");
    }
}

/// Sets the fixture's `scripted` agent to the shell `body` (as `name.sh`).
fn agent_script(f: &Fixture, name: &str, body: &str) {
    let agent = script(&f.t(&format!("{name}.sh")), body);
    f.set_agents(
        json!({"scripted": {"type": "cli", "command": agent.display().to_string(), "args": [], "timeout": 60}}),
        None,
    );
}

/// The agent's commit helper for the scripts below.
const AGENT_GIT: &str = "git -c user.name=agent -c user.email=agent@example.com";

/// Issue 45 item 11, the exact case: the agent makes a branch of its own,
/// commits `more.txt` there and exits on it. Its HEAD is the attempt's work:
/// merged, announced, the agent's branch removed.
#[test]
fn work_an_agent_committed_on_a_branch_of_its_own_is_merged_and_the_branch_removed() {
    let f = Fixture::new(json!([story("away", &[])]), json!([]));
    let body = format!(
        r#"echo $$ > "{t}/agent.pid"
git checkout -q -b agent-branch
echo more > more.txt
git add more.txt
{AGENT_GIT} commit -q -m "more on my branch"
echo "uncommitted" > away.txt"#,
        t = f.tools().display()
    );
    agent_script(&f, "brancher", &body);
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(git(f.repo(), &["show", "main:more.txt"]).trim(), "more");
    assert_eq!(
        git(f.repo(), &["show", "main:away.txt"]).trim(),
        "uncommitted"
    );
    let notices = notices_of(&out);
    assert!(
        notices
            .iter()
            .any(|m| m.contains("brought back onto 'cascade/away'")),
        "{notices:?}"
    );
    assert!(
        notices
            .iter()
            .any(|m| m.contains("removed branch 'agent-branch'")),
        "{notices:?}"
    );
    assert_eq!(other_branches(f.repo()), Vec::<String>::new());
    assert_eq!(alive_after_grace(&f.t("agent.pid")), Vec::<u32>::new());
    assert_eq!(temp_files(f.repo()), Vec::<PathBuf>::new());
}

/// The messages of a run's notices.
fn notices_of(out: &std::process::Output) -> Vec<String> {
    of_kind(&events(out), "notice")
        .iter()
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

/// A branch the user had before the run, which the agent checks out and
/// commits on: the work is brought back onto the story branch and merged,
/// and the user's branch is reported, never deleted (even though the story
/// branch holds its commits).
#[test]
fn a_branch_from_before_the_run_that_the_agent_moved_is_kept() {
    let f = Fixture::new(json!([story("away", &[])]), json!([]));
    git(f.repo(), &["branch", "keep-me"]);
    let before = git(f.repo(), &["rev-parse", "keep-me"]);
    let body = format!(
        r#"git checkout -q keep-me
echo more > more.txt
git add more.txt
{AGENT_GIT} commit -q -m "more on the user's branch""#
    );
    agent_script(&f, "borrower", &body);
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(git(f.repo(), &["show", "main:more.txt"]).trim(), "more");
    let now = git(f.repo(), &["rev-parse", "--verify", "keep-me"]);
    assert_ne!(now, before, "the agent's commit is where it left it");
    let notices = notices_of(&out);
    assert!(
        notices
            .iter()
            .any(|m| m.contains("branch 'keep-me' moved from") && m.contains("left as it is")),
        "{notices:?}"
    );
    assert!(
        !notices
            .iter()
            .any(|m| m.contains("removed branch 'keep-me'")
                || m.contains("the agent created branch 'keep-me'")),
        "{notices:?}"
    );
}

/// An agent that leaves the story's history (a branch from before the
/// base): nothing of it is committed, the attempt fails as verification
/// naming the branch, and the branch (which holds the agent's commits) is
/// reported and kept.
#[test]
fn an_agent_on_history_without_the_story_branch_fails_naming_its_branch() {
    let f = Fixture::new(json!([story("lost", &[])]), json!([]));
    let body = format!(
        r#"echo $$ > "{t}/agent.pid"
git checkout -q --orphan elsewhere
git rm -rq --cached .
echo lost > lost.txt
git add lost.txt
{AGENT_GIT} commit -q -m "unrelated history""#,
        t = f.tools().display()
    );
    agent_script(&f, "wanderer", &body);
    let out = f.approve(&["--max-retries", "0"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let evs = events(&out);
    let failed = of_kind(&evs, "story_failed");
    assert_eq!(failed.len(), 1, "{}", explain(&out));
    assert_eq!(failed[0]["error_type"], "verification", "{}", failed[0]);
    let error = failed[0]["error"].as_str().unwrap_or("");
    assert!(error.contains("branch 'elsewhere'"), "{error}");
    assert!(
        of_kind(&evs, "notice").iter().any(|e| e["message"]
            .as_str()
            .unwrap_or("")
            .contains("the agent created branch 'elsewhere'")),
        "{}",
        explain(&out)
    );
    let files = git(f.repo(), &["ls-tree", "-r", "--name-only", "main"]);
    assert!(!files.contains("lost.txt"), "{files}");
    assert_eq!(alive_after_grace(&f.t("agent.pid")), Vec::<u32>::new());
}

/// With --allow-dirty, a merge that would overwrite the user's uncommitted
/// change is refused once: the agent is not re-run, the story fails with a
/// clear message, its branch keeps the work and the user's file is intact.
#[test]
fn a_merge_blocked_by_the_users_uncommitted_change_fails_once_without_rerunning_the_agent() {
    let f = Fixture::new(json!([story("d1", &[])]), json!([]));
    f.mark("edit-d1", "README.md");
    std::fs::write(f.repo().join("README.md"), "the user's unsaved work\n").unwrap();
    let out = f.approve(&["--allow-dirty", "--max-retries", "3"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let starts = f.timeline().iter().filter(|l| *l == "start d1").count();
    assert_eq!(starts, 1, "the agent was re-run: {:?}", f.timeline());
    assert_eq!(
        std::fs::read_to_string(f.repo().join("README.md")).unwrap(),
        "the user's unsaved work\n"
    );
    let st = f.status_json();
    assert_eq!(st["stories"]["d1"]["status"], "failed", "{st}");
    assert_eq!(st["stories"]["d1"]["attempts"], 1, "{st}");
    let err = String::from_utf8_lossy(&out.stderr).to_string() + &f.progress();
    assert!(err.contains("would be overwritten"), "{err}");
    assert!(err.contains("kept on branch 'cascade/d1'"), "{err}");
    let on_branch = git(f.repo(), &["show", "cascade/d1:README.md"]);
    assert_eq!(on_branch, "line from d1\n");
}

/// Resume goes on numbering attempts after an interrupted one (its log is
/// kept), and the interrupted attempt does not use up a retry.
#[test]
fn resume_continues_attempt_numbering_and_keeps_every_log() {
    let f = Fixture::new(json!([story("num", &[])]), json!([]));
    f.mark("wait-num", "release");
    let child = f
        .background(&BACKGROUND_APPROVE)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(&f.t("started-num"), Duration::from_secs(60)));
    let _ = f.agent_pid("num");
    // SAFETY: plain signal to our child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", explain(&out));
    // The interrupted attempt is not charged (issue 23).
    let st = f.status_json();
    assert_eq!(st["stories"]["num"]["attempts"], 0, "{st}");
    let log1 = f.repo().join(".cascade/logs/num-implementation-1.log");
    assert!(
        log1.is_file(),
        "{:?}",
        std::fs::read_dir(f.repo().join(".cascade/logs"))
    );
    let first_log = std::fs::read(&log1).unwrap();

    f.mark("release", "");
    let out = f
        .cascade(&["resume", "--auto-run", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let started: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "story_started")
        .collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["attempt"], 2, "{started:?}");
    // The interrupted attempt is history, not a used-up retry: 4 more allowed.
    assert_eq!(started[0]["max_attempts"], 5, "{started:?}");
    assert_eq!(
        std::fs::read(&log1).unwrap(),
        first_log,
        "log 1 overwritten"
    );
    assert!(f
        .repo()
        .join(".cascade/logs/num-implementation-2.log")
        .is_file());
    let st = f.status_json();
    assert_eq!(st["stories"]["num"]["status"], "complete", "{st}");
    // The interrupted attempt is not charged: one attempt did the work.
    assert_eq!(st["stories"]["num"]["attempts"], 1, "{st}");
}

/// A file named `.cascade` at the root is named, with what to do about it.
#[test]
fn a_file_named_dot_cascade_is_reported_with_what_to_do() {
    let f = Fixture::new(json!([story("c1", &[])]), json!([]));
    std::fs::write(f.repo().join(".cascade"), "the user's file\n").unwrap();
    for args in [
        &["approve", "--auto-run", "--retry-delay", "0"][..],
        &["status"][..],
        &["worktree", "prune"][..],
    ] {
        let out = f.cascade(args).output().unwrap();
        assert_eq!(code(&out), 2, "{args:?}: {}", explain(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(".cascade' is a file") && err.contains("rename or remove that file"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("os error"), "{err}");
    }
    assert_eq!(
        std::fs::read_to_string(f.repo().join(".cascade")).unwrap(),
        "the user's file\n"
    );
}

/// The arguments of a run started in the background and stopped by a signal.
const BACKGROUND_APPROVE: [&str; 5] = ["approve", "--auto-run", "--retry-delay", "0", "--json"];

/// `cascade <args> --agents <tools>/agents.json` started in the background
/// (stdout piped for the NDJSON events), to be interrupted with SIGINT.
fn spawn_cascade(f: &Fixture, args: &[&str]) -> std::process::Child {
    f.background(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// `BACKGROUND_APPROVE` and `args` run in the background, each line of
/// its output handed to `on_line` as it comes (a test reacts to the events
/// by marking files); the run must succeed. Its events, and its whole
/// output for assertion messages.
fn approve_watching(
    f: &Fixture,
    args: &[&str],
    mut on_line: impl FnMut(&str),
) -> (Vec<Value>, String) {
    let mut argv = BACKGROUND_APPROVE.to_vec();
    argv.extend(args);
    let mut child = spawn_cascade(f, &argv);
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = Vec::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
        on_line(&line);
        lines.push(line);
    }
    let status = child.wait().expect("cascade ends");
    let all = lines.join("\n");
    assert!(status.success(), "{status}: {all}");
    let events = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (events, all)
}

/// SIGINT to a background cascade once `marker` exists; its output (exit 130).
fn interrupt_when(f: &Fixture, child: std::process::Child, marker: &str) -> std::process::Output {
    assert!(wait_for(&f.t(marker), Duration::from_secs(60)));
    // SAFETY: plain signal to our child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", explain(&out));
    out
}

fn event<'a>(events: &'a [Value], name: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["event"] == name)
        .unwrap_or_else(|| panic!("no {name} in {events:?}"))
}

#[test]
fn resume_continues_with_the_options_the_run_was_started_with() {
    let f = Fixture::new(json!([story("a", &[]), story("b", &["a"])]), json!([]));
    let command = f.t("agent.sh").display().to_string();
    f.set_agents(
        json!({"second": {"type": "cli", "command": command, "args": [], "timeout": 60}}),
        None,
    );
    f.mark("wait-a", "release");
    let approve = [
        "approve",
        "--auto-run",
        "--agent",
        "second",
        "--parallel",
        "3",
        "--schedule",
        "eager",
        "--max-retries",
        "5",
        "--retry-delay",
        "0",
        "--json",
    ];
    let out = interrupt_when(&f, spawn_cascade(&f, &approve), "started-a");
    let ev = events(&out);
    assert_eq!(event(&ev, "run_started")["parallel"], 3, "{ev:?}");
    let state = crate::common::run_state(f.repo());
    let stored = &state["options"];
    assert_eq!(stored["agent"], "second", "{state}");
    assert_eq!(stored["parallel"], 3, "{state}");
    assert_eq!(stored["schedule"], "eager", "{state}");
    assert_eq!(stored["max_retries"], 5, "{state}");
    assert_eq!(stored["auto_run"], true, "{state}");

    // Resume without flags: the stored options are used, and said so.
    std::fs::remove_file(f.t("started-a")).unwrap();
    let out = interrupt_when(&f, spawn_cascade(&f, &["resume", "--json"]), "started-a");
    let ev = events(&out);
    let started = event(&ev, "run_started");
    assert_eq!(started["parallel"], 3, "{ev:?}");
    assert_eq!(started["schedule"], "eager", "{ev:?}");
    let a = event(&ev, "story_started");
    assert_eq!(a["agent"], "second", "{ev:?}");
    // Attempt 1 was interrupted (history), then 1 + --max-retries 5.
    assert_eq!(a["max_attempts"], 7, "{ev:?}");
    let note = ev
        .iter()
        .filter(|e| e["event"] == "notice")
        .filter_map(|e| e["message"].as_str())
        .find(|m| m.starts_with("resuming with"))
        .unwrap_or_else(|| panic!("no restored-options notice in {ev:?}"));
    // Where docs/commands.md says it is: right after the run's opening line.
    let opening = ev.iter().position(|e| e["event"] == "run_started");
    let after = opening.and_then(|i| ev.get(i + 1));
    assert_eq!(
        after.and_then(|e| e["message"].as_str()),
        Some(note),
        "{ev:?}"
    );
    for flag in [
        "--agent second",
        "--parallel 3",
        "--schedule eager",
        "--max-retries 5",
        "--auto-run",
    ] {
        assert!(note.contains(flag), "{note}");
    }

    // A dry run shows the stored options, an explicit flag winning.
    let out = f
        .cascade(&["resume", "--dry-run", "--json", "--parallel", "2"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["parallel"], 2, "{plan}");
    assert_eq!(plan["schedule"], "eager", "{plan}");

    // Explicit flags override the stored values; the rest (--auto-run,
    // --schedule eager) still applies, so b runs too.
    f.mark("release", "");
    let out = f
        .cascade(&["resume", "--json", "--agent", "scripted", "--parallel", "2"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    let started = event(&ev, "run_started");
    assert_eq!(started["parallel"], 2, "{ev:?}");
    assert_eq!(started["schedule"], "eager", "{ev:?}");
    let agents: Vec<&Value> = ev
        .iter()
        .filter(|e| e["event"] == "story_started")
        .map(|e| &e["agent"])
        .collect();
    assert_eq!(agents, [&json!("scripted"), &json!("scripted")], "{ev:?}");
    let note = ev
        .iter()
        .filter(|e| e["event"] == "notice")
        .filter_map(|e| e["message"].as_str())
        .find(|m| m.contains("given here instead"))
        .unwrap_or_else(|| panic!("no override notice in {ev:?}"));
    // The notice names the values in effect, and what they replaced.
    assert!(
        note.contains(
            "--agent scripted --parallel 2 given here instead of --agent second --parallel 3"
        ),
        "{note}"
    );
    assert!(
        note.starts_with("resuming with") && note.contains("--schedule eager"),
        "{note}"
    );
    assert_eq!(f.prd_status("a"), "complete");
    assert_eq!(f.prd_status("b"), "complete");
}

/// An older cascade's `.cascade/state.json` (interrupted, without
/// `options`) is imported into the database once and resumes with the
/// defaults.
#[test]
fn resume_of_an_older_state_file_imports_it_and_uses_the_defaults() {
    let f = Fixture::new(json!([story("old", &[])]), json!([]));
    f.mark("wait-old", "release");
    let approve = ["approve", "--auto-run", "--parallel", "3", "--json"];
    interrupt_when(&f, spawn_cascade(&f, &approve), "started-old");
    let mut state = crate::common::run_state(f.repo());
    state.as_object_mut().unwrap().remove("options");
    let cascade = f.repo().join(".cascade");
    for db in ["cascade.db", "cascade.db-wal", "cascade.db-shm"] {
        let _ = std::fs::remove_file(cascade.join(db));
    }
    write_json(&cascade.join("state.json"), &state);
    // status reads it (and imports it) as it was.
    let st = f.status_json();
    assert_eq!(st["status"], "interrupted", "{st}");
    assert!(!cascade.join("state.json").exists());
    assert!(cascade.join("state.json.imported").is_file());
    f.mark("release", "");
    let out = f
        .cascade(&["resume", "--auto-run", "--retry-delay", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let ev = events(&out);
    assert_eq!(event(&ev, "run_started")["parallel"], 4, "{ev:?}");
    assert!(
        !ev.iter().any(|e| e["event"] == "notice"
            && e["message"]
                .as_str()
                .unwrap_or("")
                .contains("resuming with")),
        "{ev:?}"
    );
    assert_eq!(f.prd_status("old"), "complete");
}
