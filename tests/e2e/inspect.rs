//! End-to-end tests: looking into a run from a terminal: `cascade show`,
//! `cascade logs [-f] [--json]`, `cascade status --watch` and `--color`.
//!
//! One scripted agent: it prints who it is, writes `<story>.txt` (two
//! lines), writes `bad.txt` too for a story whose id says so (the gate
//! fails it), and waits for a `release` file in the tools directory first
//! when a `wait-<story>` marker is there (ignoring SIGTERM when a
//! `stubborn` marker is there too); with a `hang-gate` marker the gate of a
//! story hangs the same way. Waits are barriers on files and on
//! the processes ending, with generous guards: no timing is asserted.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{
    cascade_command, code, explain, init_repo, run_with_agents, script, write_json, APPROVE_NOW,
};

/// A repository with a PRD of the given story ids, the agent and a gate
/// (tests/e2e/interrupt.rs and docs.rs run it too).
pub(crate) struct Run {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Run {
    pub(crate) fn new(ids: &[&str]) -> Run {
        let run = Run {
            repo: init_repo(),
            tools: tempfile::tempdir().expect("tools dir"),
        };
        let t = run.tools().display().to_string();
        let agent = script(
            &run.t("agent.sh"),
            &format!(
                r#"T='{t}'
id="$CASCADE_STORY_ID"
# A stubborn agent (and the sleeps it starts) ignores SIGTERM: only SIGKILL stops it.
[ -f "$T/stubborn" ] && trap '' TERM INT
echo "hello from $id attempt $CASCADE_ATTEMPT"
if [ -f "$T/wait-$id" ]; then
  i=0
  while [ ! -e "$T/release" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  echo "released $id"
fi
printf 'one\ntwo\n' > "$id.txt"
case "$id" in *bad*) echo broken > bad.txt ;; esac"#
            ),
        );
        let gate = script(
            &run.t("gate.sh"),
            &format!(
                r#"T='{t}'
# With a `hang-gate` marker, the gate of a story's tree (an agent wrote a
# .txt there; the base has none) ignores SIGTERM and waits for `release`.
if [ -f "$T/hang-gate" ] && ls ./*.txt >/dev/null 2>&1; then
  trap '' TERM INT
  touch "$T/gate-started"
  i=0
  while [ ! -e "$T/release" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
fi
if [ -f bad.txt ]; then echo 'bad.txt:1:1: error: no bad files here'; exit 1; fi"#
            ),
        );
        write_json(
            &run.t("agents.json"),
            &json!({"default_agent": "scripted", "agents": {
                "scripted": {"type": "cli", "command": agent.display().to_string(), "args": [], "timeout": 120}
            }}),
        );
        let stories: Vec<Value> = ids
            .iter()
            .map(|id| {
                json!({"id": id, "title": format!("Title {id}"), "description": "do it",
                       "priority": "medium", "dependencies": [], "status": "pending",
                       "acceptance_criteria": ["it works"]})
            })
            .collect();
        write_json(
            &run.repo().join("prd.json"),
            &json!({"metadata": {"version": "1.0"}, "goal": "inspect", "objectives": [],
            "stories": stories,
            "quality_gates": {"enabled": true, "gates": [
                {"name": "check", "type": "test", "command": gate.display().to_string(), "required": true}
            ]}}),
        );
        run
    }

    pub(crate) fn repo(&self) -> &Path {
        self.repo.path()
    }

    pub(crate) fn tools(&self) -> &Path {
        self.tools.path()
    }

    pub(crate) fn t(&self, name: &str) -> PathBuf {
        self.tools().join(name)
    }

    /// `cascade <args>` in the repository with the run's agents.
    pub(crate) fn cascade(&self, args: &[&str]) -> std::process::Output {
        run_with_agents(self.repo(), &self.t("agents.json"), args)
    }

    /// `cascade <args>` started in the background, stdout piped.
    pub(crate) fn spawn(&self, args: &[&str]) -> Child {
        cascade_command(self.repo())
            .args(args)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cascade starts")
    }

    /// Runs the whole plan to its end (no retries).
    pub(crate) fn approve(&self) -> std::process::Output {
        self.cascade(&APPROVE_NOW)
    }

    /// `show STORY --json`, parsed.
    pub(crate) fn show_json(&self, story: &str) -> Value {
        let out = self.cascade(&["show", story, "--json"]);
        assert_eq!(code(&out), 0, "{}", explain(&out));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", explain(&out)))
    }

    /// Whether `story`'s agent has started in the running run (its log says hello).
    pub(crate) fn agent_started(&self, story: &str) -> bool {
        let log = self
            .repo()
            .join(format!(".cascade/logs/{story}-implementation-1.log"));
        std::fs::read_to_string(log).is_ok_and(|t| t.contains("hello from"))
    }
}

/// Waits (up to `guard`) until `done` holds; whether it did.
pub(crate) fn wait_until(guard: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < guard {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

pub(crate) fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn show_tells_attempts_gates_diff_and_unknown_cost() {
    let run = Run::new(&["story-ok", "story-bad"]);
    let out = run.approve();
    assert_eq!(code(&out), 1, "story-bad fails its gate: {}", explain(&out));

    let ok = run.show_json("story-ok");
    assert_eq!(ok["status"], "complete", "{ok:#}");
    assert_eq!(ok["agent"], "scripted");
    let attempts = ok["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "{ok:#}");
    assert_eq!(attempts[0]["outcome"], "passed");
    assert_eq!(attempts[0]["phase"], "implementation");
    assert_eq!(attempts[0]["gates"][0]["name"], "check");
    assert_eq!(attempts[0]["gates"][0]["passed"], true);
    let files = ok["diff"]["files"].as_array().expect("diff files");
    assert_eq!(files.len(), 1, "{ok:#}");
    assert_eq!(files[0]["path"], "story-ok.txt");
    assert_eq!(files[0]["added"], 2);
    assert_eq!(ok["diff"]["base"], "main");
    // The scripted agent reports no spend: unknown, never $0.
    assert_eq!(ok["cost"]["usd"], Value::Null, "{ok:#}");
    assert_eq!(ok["cost"]["unknown_attempts"], 1);

    let bad = run.show_json("story-bad");
    assert_eq!(bad["status"], "failed", "{bad:#}");
    assert_eq!(bad["failure_kind"], "quality_gate");
    let gate = &bad["attempts"][0]["gates"][0];
    assert_eq!(gate["passed"], false, "{bad:#}");
    assert_eq!(gate["errors"][0]["file"], "bad.txt");
    assert_eq!(gate["errors"][0]["message"], "no bad files here");
    let paths: Vec<&str> = bad["diff"]["files"]
        .as_array()
        .expect("diff files")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(paths, ["bad.txt", "story-bad.txt"], "{bad:#}");

    let text = run.cascade(&["show", "story-bad"]);
    assert_eq!(code(&text), 0, "{}", explain(&text));
    let text = stdout(&text);
    for expected in [
        "story-bad: failed",
        "#1 implementation by scripted: failed (quality_gate)",
        "gate check failed",
        "bad.txt:1:1: error: no bad files here",
        "2 files changed, 3 insertions(+), 0 deletions(-)",
        "cost: unknown",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(!text.contains("$0.0"), "unknown spend shown as $0:\n{text}");
}

#[test]
fn show_and_logs_of_an_unknown_story_exit_2_naming_the_closest() {
    let run = Run::new(&["story-ok"]);
    let none = run.cascade(&["show", "story-ok"]);
    assert_eq!(code(&none), 2, "{}", explain(&none));
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("no run yet"),
        "{}",
        explain(&none)
    );
    assert_eq!(code(&run.approve()), 0);
    for command in ["show", "logs"] {
        let out = run.cascade(&[command, "story-okk"]);
        assert_eq!(code(&out), 2, "{}", explain(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("unknown story 'story-okk': did you mean 'story-ok'?"),
            "{err}"
        );
    }
}

#[test]
fn logs_print_an_attempts_agent_output() {
    let run = Run::new(&["story-ok"]);
    assert_eq!(code(&run.approve()), 0);
    let out = run.cascade(&["logs", "story-ok"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(
        stdout(&out).contains("hello from story-ok attempt 1"),
        "{}",
        explain(&out)
    );
    let same = run.cascade(&[
        "logs",
        "story-ok",
        "--attempt",
        "1",
        "--phase",
        "implementation",
    ]);
    assert_eq!(stdout(&same), stdout(&out));

    let missing = run.cascade(&["logs", "story-ok", "--attempt", "2"]);
    assert_eq!(code(&missing), 2, "{}", explain(&missing));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("has no attempt 2 (it has 1)"));
    let review = run.cascade(&["logs", "story-ok", "--phase", "review"]);
    assert_eq!(code(&review), 2, "{}", explain(&review));
    let err = String::from_utf8_lossy(&review.stderr);
    assert!(
        err.contains("no review log of attempt 1")
            && err.contains("it has: --attempt 1 --phase implementation"),
        "{err}"
    );
}

/// `cascade logs slow -f <extra>` of a run whose agent goes on only once
/// the follower is reading: what the follower printed, once both ended.
fn followed(extra: &[&str]) -> String {
    let run = Run::new(&["slow"]);
    std::fs::write(run.t("wait-slow"), "").expect("marker");
    let approve = run.spawn(&["approve", "--auto-run", "--retry-delay", "0", "--json"]);
    assert!(
        wait_until(Duration::from_secs(60), || run.agent_started("slow")),
        "the agent never started"
    );
    let follow = run.spawn(&[&["logs", "slow", "-f"][..], extra].concat());
    // The follower is reading the live log; the agent goes on only now.
    std::fs::write(run.t("release"), "").expect("release");
    let followed = follow.wait_with_output().expect("logs -f ends");
    let done = approve.wait_with_output().expect("approve ends");
    assert_eq!(code(&done), 0, "{}", explain(&done));
    assert_eq!(code(&followed), 0, "{}", explain(&followed));
    stdout(&followed)
}

#[test]
fn logs_follow_a_running_attempt_until_it_ends() {
    let text = followed(&[]);
    let hello = text.find("hello from slow attempt 1");
    let released = text.find("released slow");
    assert!(
        hello.is_some() && released > hello,
        "logs -f printed:\n{text}"
    );
}

#[test]
fn logs_json_follows_too_one_numbered_object_per_line() {
    let text = followed(&["--json"]);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    // The log's first line is cascade's header naming what ran.
    assert_eq!(lines[0]["line"], 1, "{text}");
    assert!(
        lines[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("== cascade: slow attempt 1 (implementation)")),
        "{text}"
    );
    let texts: Vec<&str> = lines.iter().filter_map(|l| l["text"].as_str()).collect();
    let hello = texts.iter().position(|t| *t == "hello from slow attempt 1");
    let released = texts.iter().position(|t| *t == "released slow");
    assert!(hello.is_some() && released > hello, "{text}");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["line"], i + 1, "{text}");
        assert_eq!(l["story"], "slow");
        assert_eq!(l["attempt"], 1);
        assert_eq!(l["phase"], "implementation");
        assert!(
            l["path"]
                .as_str()
                .is_some_and(|p| p.ends_with(".cascade/logs/slow-implementation-1.log")),
            "{l}"
        );
    }
}

#[test]
fn color_follows_the_flag_and_no_color() {
    let run = Run::new(&["story-ok", "story-bad"]);
    let _ = run.approve();
    // Not a terminal, NO_COLOR set (the helpers' environment): no escapes.
    for args in [&["status"][..], &["show", "story-bad"][..]] {
        let plain = run.cascade(args);
        assert!(!stdout(&plain).contains('\x1b'), "{}", explain(&plain));
        let never = run.cascade(&[args, &["--color", "never"]].concat());
        assert!(!stdout(&never).contains('\x1b'), "{}", explain(&never));
        // Asked for on the command line, colour wins over NO_COLOR.
        let always = run.cascade(&[args, &["--color", "always"]].concat());
        assert!(
            stdout(&always).contains("\x1b[31mfailed\x1b[0m"),
            "{}",
            explain(&always)
        );
    }
    let wrong = run.cascade(&["status", "--color", "sometimes"]);
    assert_eq!(code(&wrong), 2, "{}", explain(&wrong));
}

#[test]
fn status_watch_prints_changes_until_the_run_ends() {
    let run = Run::new(&["slow"]);
    std::fs::write(run.t("wait-slow"), "").expect("marker");
    let approve = run.spawn(&["approve", "--auto-run", "--retry-delay", "0", "--json"]);
    assert!(
        wait_until(Duration::from_secs(60), || run.agent_started("slow")),
        "the agent never started"
    );
    let mut watch = run.spawn(&["status", "--watch"]);
    // The watcher's first block shows the run going on; only then the agent ends.
    let mut lines = BufReader::new(watch.stdout.take().expect("piped"));
    let mut first = String::new();
    lines.read_line(&mut first).expect("a first line");
    assert!(first.contains(": running;"), "{first}");
    std::fs::write(run.t("release"), "").expect("release");
    let done = approve.wait_with_output().expect("approve ends");
    assert_eq!(code(&done), 0, "{}", explain(&done));
    // The watcher ends by itself once the run has ended.
    let mut rest = String::new();
    lines.read_to_string(&mut rest).expect("the rest");
    let status = watch.wait().expect("status --watch ends");
    assert!(status.success(), "{status:?}");
    let text = first + &rest;
    let blocks: Vec<&str> = text.split("\n\n").collect();
    assert!(blocks.len() >= 2, "{text}");
    assert!(
        blocks.last().is_some_and(|b| b.contains(": completed;")),
        "the last block is the run's end:\n{text}"
    );
    for pair in blocks.windows(2) {
        assert_ne!(pair[0], pair[1], "a block repeated unchanged:\n{text}");
    }
    assert!(!text.contains('\x1b'), "no terminal, no escapes:\n{text}");

    // On a run that has ended: one block, and it returns.
    let once = run.cascade(&["status", "--watch"]);
    assert_eq!(code(&once), 0, "{}", explain(&once));
    assert_eq!(stdout(&once), stdout(&run.cascade(&["status"])));
}
