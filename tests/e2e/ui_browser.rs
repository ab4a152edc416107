//! The dashboard in a real browser: `cascade ui` on a temp repository,
//! headless Chromium driven over WebDriver (see `webdriver`), and a real run
//! of scripted agents next to it. Skips, saying why, when no browser is
//! installed. Screenshots land in `target/ui-screenshots/`.
//!
//! What is checked: the token is required (401 without it); the graph fills in
//! live from the event stream while `cascade approve` runs (no reload); a
//! failed story's gate errors are shown and their file:line links land on the
//! diff line, and its attempt says what confined it; a planning question answered on the page reaches the session's
//! files; the mega view pauses and resumes a mega run, cancels and retries a
//! story of one feature (not the other feature's story of the same id), and
//! resumes the finished run; the merge train shows the stories on it in
//! order while their merges are gated, and what the gatings ended with.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{init_repo, script, write_json};
use crate::webdriver::Browser;

/// A child in its own process group, killed with the group when dropped
/// (test failure included).
pub(crate) struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: signals the group this test created (process_group(0));
        // no memory is involved.
        unsafe {
            libc::killpg(self.0.id() as libc::pid_t, libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

/// A run in the background whose stdout and stderr go to files, so that
/// a test waiting on the page can say what the run did (CI once saw a page
/// with no live run after 30 s, and nothing told whether the run had ever
/// started).
struct LoggedRun {
    group: std::cell::RefCell<Group>,
    out: PathBuf,
    err: PathBuf,
}

impl LoggedRun {
    /// `cascade <args>` in `dir`, its output in `<logs>/run.out` and
    /// `<logs>/run.err`.
    fn start(dir: &Path, args: &[&str], logs: &Path) -> LoggedRun {
        let out = logs.join("run.out");
        let err = logs.join("run.err");
        let file = |p: &Path| std::fs::File::create(p).expect("run log");
        let mut cmd = run_command(dir, args, Stdio::from(file(&out)));
        let child = cmd.stderr(file(&err)).spawn().expect("cascade starts");
        LoggedRun {
            group: std::cell::RefCell::new(Group(child)),
            out,
            err,
        }
    }

    /// Whether the run still runs, and the end of its output.
    fn context(&self) -> String {
        let state = match self.group.borrow_mut().0.try_wait() {
            Ok(Some(status)) => format!("the run exited: {status}"),
            Ok(None) => "the run is still running".to_string(),
            Err(e) => format!("the run's state is unknown: {e}"),
        };
        let tail = |p: &Path| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        format!(
            "{state}\nits stdout (last lines):\n{}\nits stderr (last lines):\n{}",
            tail(&self.out),
            tail(&self.err)
        )
    }
}

/// `cascade <args>` in `dir`, in its own process group.
fn spawn_cascade(dir: &Path, args: &[&str], stdout: Stdio) -> Group {
    let child = run_command(dir, args, stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("cascade starts");
    Group(child)
}

/// The command of `cascade <args>` in `dir`, in its own process group,
/// stderr left for the caller to set (with the sandbox allowance of every
/// scripted run: see [`crate::common::bare_cascade`]).
fn run_command(dir: &Path, args: &[&str], stdout: Stdio) -> Command {
    let mut cmd = crate::common::bare_cascade();
    cmd.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("HOME", dir)
        .env_remove("XDG_CONFIG_HOME")
        .stdin(Stdio::null())
        .stdout(stdout)
        .process_group(0);
    cmd
}

/// `cascade ui --port 0 <extra>` in `dir`: the server and the URL it printed.
pub(crate) fn start_ui(dir: &Path, extra: &[&str]) -> (Group, String) {
    let mut args = vec!["ui", "--port", "0"];
    args.extend_from_slice(extra);
    let mut ui = spawn_cascade(dir, &args, Stdio::piped());
    let (tx, rx) = mpsc::channel();
    for pipe in [
        ui.0.stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        ui.0.stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                if let Some(at) = line.find("http://") {
                    let url = line[at..].split_whitespace().next().unwrap_or_default();
                    return (ui, url.to_string());
                }
                seen.push(line);
            }
            Err(_) => panic!("cascade ui printed no URL; output:\n{}", seen.join("\n")),
        }
    }
}

/// Where screenshots go: `target/ui-screenshots/<name>.png`.
pub(crate) fn screenshot_path(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("ui-screenshots").join(format!("{name}.png"))
}

/// The browser, or `None` after printing why the test skips.
pub(crate) fn browser_or_skip(test: &str) -> Option<Browser> {
    match Browser::start() {
        Ok(b) => Some(b),
        Err(why) => {
            eprintln!("skipping {test}: {why}");
            None
        }
    }
}

/// The origin part of the printed URL (`http://127.0.0.1:PORT`).
fn origin(url: &str) -> String {
    let rest = url.trim_start_matches("http://");
    format!("http://{}", rest.split('/').next().unwrap_or_default())
}

/// A repository with four stories over three batches: story-002's agent
/// writes a word the `words` gate rejects (with `file:line:col` errors), so
/// it fails and story-004, which needs it, is blocked; the others merge.
/// Agents sleep so the page can see them running.
fn live_run_repo(tools: &Path) -> tempfile::TempDir {
    let repo = init_repo();
    let agent = script(
        &tools.join("agent.sh"),
        &format!(
            r#"id="$CASCADE_STORY_ID"
echo "starting $id"
sleep 2
# story-003 holds until the test has looked at the page mid-run.
if [ "$id" = story-003 ]; then
  n=0
  while [ ! -f '{go}' ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done
fi
echo "$id" > "$id.txt"
if [ "$id" = story-002 ]; then printf 'fine\nbroken\n' > words.txt; fi
echo "done $id""#,
            go = tools.join("go").display()
        ),
    );
    let gate = script(
        &tools.join("words-gate.sh"),
        r#"if [ -f words.txt ] && grep -q broken words.txt; then
  echo 'words.txt:2:1: error: the word "broken" is not allowed'
  exit 1
fi"#,
    );
    write_json(
        &tools.join("agents.json"),
        &json!({"default_agent": "scripted", "agents": {
            "scripted": {"type": "cli", "command": agent.display().to_string(), "args": [], "timeout": 60}
        }}),
    );
    let story = |id: &str, title: &str, deps: &[&str]| {
        json!({"id": id, "title": title, "description": format!("Implement {id}"),
               "priority": "medium", "dependencies": deps, "status": "pending",
               "acceptance_criteria": ["it works"]})
    };
    write_json(
        &repo.path().join("prd.json"),
        &json!({
            "metadata": {"version": "1.0"},
            "goal": "watch the dashboard",
            "objectives": [],
            "stories": [
                story("story-001", "Add the model", &[]),
                story("story-002", "Add the word list", &[]),
                story("story-003", "Use the model", &["story-001"]),
                story("story-004", "Use the word list", &["story-002", "story-003"]),
            ],
            "quality_gates": {"enabled": true, "fail_fast": false, "use_cache": false, "gates": [
                {"name": "words", "type": "lint", "command": gate.display().to_string()}
            ]},
        }),
    );
    crate::common::git(repo.path(), &["add", "-A"]);
    crate::common::git(repo.path(), &["commit", "-q", "-m", "plan"]);
    repo
}

/// Loads the dashboard at `url` and waits until the page has started.
fn open_page(b: &Browser, url: &str) {
    b.goto(url);
    b.wait_js(
        "the page to start",
        15,
        "return document.body.dataset.ready === 'true'",
    );
}

/// `data-state` of a story's node, from the page.
const NODE_STATE: &str =
    "var n = document.querySelector('.node[data-story=\"' + arguments[0] + '\"]'); return n ? n.dataset.state : null;";

fn node_state(b: &Browser, id: &str) -> Value {
    b.js(NODE_STATE, json!([id]))
}

fn wait_state(b: &Browser, id: &str, state: &str, secs: u64) {
    wait_state_or(b, id, state, secs, String::new);
}

/// [`wait_state`], with `context()` in the failure's message.
fn wait_state_or(b: &Browser, id: &str, state: &str, secs: u64, context: impl Fn() -> String) {
    b.wait_js_or(
        &format!("{id} to be {state}"),
        secs,
        &format!(
            "var n = document.querySelector('.node[data-story=\"{id}\"]'); return n && n.dataset.state === '{state}';"
        ),
        context,
    );
}

#[test]
fn dashboard_requires_the_token_and_follows_a_live_run() {
    let Some(b) = browser_or_skip("dashboard_requires_the_token_and_follows_a_live_run") else {
        return;
    };
    let tools = tempfile::tempdir().expect("tools dir");
    let repo = live_run_repo(tools.path());
    let (ui, url) = start_ui(repo.path(), &[]);
    let base = origin(&url);
    assert!(
        base.starts_with("http://127.0.0.1:"),
        "listens on loopback by default: {url}"
    );

    // Phase 1: no token, or a wrong one, is refused before anything loads.
    for bad in [format!("{base}/"), format!("{base}/?token=wrong")] {
        b.goto(&bad);
        let text = b.js(
            "return document.body ? document.body.innerText : ''",
            json!([]),
        );
        assert!(
            b.find("#view-run").is_none(),
            "the page loaded without a valid token at {bad}"
        );
        assert!(
            text.as_str().unwrap_or_default().starts_with("401"),
            "{bad} should answer 401, showed: {text}"
        );
    }
    b.screenshot(&screenshot_path("no-token"));

    // Phase 2: with the token, before the run: the plan's graph, all pending.
    open_page(&b, &url);
    wait_state(&b, "story-001", "pending", 10);
    assert_eq!(node_state(&b, "story-004"), "pending");

    // Phase 3: a run starts next to it; the page follows without reloading.
    b.js("window.__sameDocument = true; return true", json!([]));
    let agents = tools.path().join("agents.json").display().to_string();
    let mut args = crate::common::APPROVE_NOW.to_vec();
    args.extend(["--json", "--agents", &agents]);
    let run = LoggedRun::start(repo.path(), &args, tools.path());
    let ran = || run.context();
    wait_state_or(&b, "story-001", "running", 60, ran);
    // A running node shows its agent and attempt; its elapsed time ticks.
    let meta = b.js(
        "return document.querySelector('.node[data-story=\"story-001\"]').innerText",
        json!([]),
    );
    assert!(
        meta.as_str().unwrap_or_default().contains("scripted"),
        "{meta}"
    );
    wait_state_or(&b, "story-001", "complete", 60, ran);
    wait_state_or(&b, "story-002", "failed", 60, ran);
    // story-003 now runs and waits for us: the page saw all this mid-run.
    wait_state_or(&b, "story-003", "running", 60, ran);
    assert_eq!(
        b.js(
            "return document.querySelector('#run-summary').dataset.live",
            json!([])
        ),
        "true"
    );
    b.wait_js(
        "the engine's events in the page's log",
        10,
        "return document.querySelector('#event-log li[data-event=story_merged]')",
    );
    b.screenshot(&screenshot_path("run-live"));
    // Its agent's output streams into the story view while it runs.
    b.click_css(".node[data-story=\"story-003\"]", 5);
    b.wait_js(
        "story-003's output so far",
        15,
        "var o = document.querySelector('pre.output[data-story=\"story-003\"]'); return o && o.textContent.includes('starting story-003');",
    );
    b.screenshot(&screenshot_path("story-running"));

    // Actions, while story-003 holds: pause and resume scheduling from the
    // run view, retry the failed story-002, then cancel story-003 from its
    // story view. Each goes through
    // the live run and comes back as a `control` event.
    b.click_css("#back-to-run", 5);
    b.click_css("#action-pause", 5);
    b.wait_js(
        "the PAUSED badge",
        15,
        "return document.querySelector('#paused-indicator') && document.querySelector('#run-summary').dataset.paused === 'true';",
    );
    b.screenshot(&screenshot_path("run-paused"));
    b.click_css("#action-resume", 5);
    b.wait_js(
        "scheduling to go on",
        15,
        "return !document.querySelector('#paused-indicator') && document.querySelector('#run-summary').dataset.paused === 'false';",
    );
    // Retry the failed story-002 in the live run: a second attempt runs,
    // and fails at the same gate.
    b.click_css(".node[data-story=\"story-002\"]", 5);
    b.click_css("#action-retry", 5);
    b.click_css("#back-to-run", 5);
    b.wait_js(
        "story-002's second attempt to fail",
        60,
        "var n = document.querySelector('.node[data-story=\"story-002\"]'); return n && n.dataset.state === 'failed' && n.innerText.includes('attempt 2');",
    );
    b.click_css(".node[data-story=\"story-003\"]", 5);
    b.click_css("#action-cancel", 5);
    b.click_css("#back-to-run", 5);
    wait_state(&b, "story-003", "cancelled", 30);
    expect_controls(
        &b,
        &[
            "action=pause",
            "action=resume",
            "action=retry",
            "action=cancel",
        ],
    );
    // The agent was killed; releasing it changes nothing.
    std::fs::write(tools.path().join("go"), "").expect("release story-003");
    wait_state(&b, "story-004", "blocked", 60);
    b.wait_js(
        "the run to finish",
        60,
        "var s = document.querySelector('#run-summary'); return s && s.dataset.live === 'false' && s.dataset.status !== 'running';",
    );
    assert_eq!(
        b.js("return window.__sameDocument === true", json!([])),
        true,
        "the page reloaded instead of following the events"
    );
    // Every attempt is a bar of the timeline; the critical path is marked.
    let bars = b.js(
        "return document.querySelectorAll('#gantt rect.bar').length",
        json!([]),
    );
    assert!(bars.as_u64().unwrap_or(0) >= 3, "Gantt bars: {bars}");
    assert_eq!(
        node_state(&b, "story-003"),
        "cancelled",
        "a late event undid the cancel"
    );
    let critical = b.js(
        "return [...document.querySelectorAll('.node[data-critical=true]')].map(n => n.dataset.story)",
        json!([]),
    );
    assert!(
        critical.as_array().is_some_and(|c| !c.is_empty()),
        "critical path: {critical}"
    );
    b.screenshot(&screenshot_path("run-finished"));

    // Phase 4: the failed story's gate errors (of its last attempt, open),
    // linked to its diff.
    b.click_css(".node[data-story=\"story-002\"]", 5);
    let text = b.wait_js(
        "the failed gate's errors",
        15,
        "var e = document.querySelector('.attempt:last-child .gate[data-passed=false] .gate-error'); return e && e.innerText;",
    );
    let text = text.as_str().unwrap_or_default();
    assert!(
        text.contains("words.txt:2") && text.contains("broken"),
        "gate error: {text}"
    );
    b.click_css(
        ".attempt:last-child .gate[data-passed=false] .gate-error a.file-link",
        5,
    );
    let landed = b.wait_js(
        "the link to land on the diff line",
        5,
        "var f = document.querySelector('.diff .flash'); return f && (f.dataset.file + ':' + f.dataset.line);",
    );
    assert_eq!(landed, "words.txt:2");
    // The attempt says what confined its processes (the run's default,
    // best-effort: Landlock where the kernel has it).
    let confinement = b.js(
        "var c = document.querySelector('.attempt:last-child .attempt-confinement'); return c && [c.dataset.confinement, c.innerText];",
        json!([]),
    );
    let abi = cascade_process::sandbox::describe();
    let shown = if abi == "none" {
        "Confinement: none (unconfined)".to_string()
    } else {
        format!("Confinement: {abi}")
    };
    assert_eq!(
        confinement,
        json!([abi, shown]),
        "the attempt's confinement"
    );
    b.screenshot(&screenshot_path("story-failed"));

    // Phase 5: the next morning. A new `cascade ui` (a new token) shows the
    // finished run from its state and journal, with nothing live.
    drop(ui);
    let agents = tools.path().join("agents.json").display().to_string();
    let (_ui, url) = start_ui(repo.path(), &["--agents", &agents]);
    open_page(&b, &url);
    for (id, state) in [
        ("story-001", "complete"),
        ("story-002", "failed"),
        ("story-003", "cancelled"),
        ("story-004", "blocked"),
    ] {
        wait_state(&b, id, state, 10);
    }
    let summary = b.js(
        "var s = document.querySelector('#run-summary'); return [s.dataset.status, s.dataset.live, document.querySelector('#action-pause').disabled];",
        json!([]),
    );
    assert_eq!(
        summary,
        json!(["failed", "false", true]),
        "finished run summary"
    );
    b.wait_js(
        "the journal's events",
        10,
        "return document.querySelectorAll('#event-log li[data-event=story_merged]').length === 1",
    );
    b.screenshot(&screenshot_path("run-reopened"));
    // No mega-plan here: the mega view says so.
    b.click_css("#tab-mega", 5);
    b.wait_find("#mega-empty", 10);

    // Phase 6: retry the failed story of the finished run. The dashboard
    // starts `cascade resume --yes` (with the --agents it was given), which
    // shows up live in the same page and ends as it must: story-002's third
    // attempt fails at its gate.
    b.goto(&format!("{url}#/story/story-002"));
    b.click_css("#action-retry", 10);
    b.click_css("#back-to-run", 5);
    b.wait_js(
        "story-002's third attempt to fail, the resumed run to end",
        90,
        "var n = document.querySelector('.node[data-story=\"story-002\"]'); var s = document.querySelector('#run-summary'); return n && n.dataset.state === 'failed' && n.innerText.includes('attempt 3') && s.dataset.live === 'false';",
    );
    // The snapshot that follows the end agrees: story-003 merged this time.
    b.wait_js(
        "the final totals",
        15,
        "return document.querySelector('#progress-text').textContent.startsWith('2/4 merged')",
    );
    b.screenshot(&screenshot_path("run-resumed"));
}

/// An agent that reports neither tokens nor cost: the run view's totals and
/// the attempt say "unknown" for both, never `0 / 0` or $0.
#[test]
fn dashboard_says_unknown_for_tokens_and_cost_no_agent_reported() {
    let Some(b) = browser_or_skip("dashboard_says_unknown_for_tokens_and_cost_no_agent_reported")
    else {
        return;
    };
    let run = crate::inspect::Run::new(&["story-ok"]);
    let out = run.approve();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::common::explain(&out)
    );
    let (_ui, url) = start_ui(run.repo(), &[]);
    open_page(&b, &url);
    wait_state(&b, "story-ok", "complete", 10);
    let text = |css: &str| {
        b.js(
            "var e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            json!([css]),
        )
    };
    assert_eq!(text("#total-tokens"), "unknown");
    assert_eq!(text("#total-cost"), "unknown");
    b.screenshot(&screenshot_path("unknown-spend"));
    // The story view's attempt says the same, in words.
    b.click_css(".node[data-story=\"story-ok\"]", 5);
    let meta = b
        .wait_js(
            "the attempt's line",
            15,
            "var m = document.querySelector('#attempt-1 .attempt-meta'); return m ? m.textContent : null;",
        )
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        meta.contains("tokens unknown (not reported)")
            && meta.contains("cost unknown (not reported)"),
        "{meta}"
    );
    assert!(!meta.contains("0 tokens") && !meta.contains("$0"), "{meta}");
}

/// The merge train in the run view: while the merges of rename and caller2
/// are gated (held), other boards on top of both, and the page shows the
/// three cars in train order with what each is gated on; after the run
/// (caller2 broke the train and failed) nobody is on it, and the last
/// gatings say who failed, live and in a dashboard started afterwards.
#[test]
fn dashboard_shows_the_merge_train() {
    if !crate::integration::python3() {
        return;
    }
    let Some(b) = browser_or_skip("dashboard_shows_the_merge_train") else {
        return;
    };
    let tools = tempfile::tempdir().expect("tools dir");
    let t = tools.path();
    let repo = init_repo();
    crate::integration::seed_train(repo.path(), t);
    for held in ["rename", "caller2"] {
        let name = format!("integration-{held}");
        crate::integration::hold(t, &name, "gated-integration-other", 10);
    }
    let (ui, url) = start_ui(repo.path(), &[]);
    open_page(&b, &url);
    let agents = t.join("agents.json").display().to_string();
    let mut args = crate::common::APPROVE_NOW.to_vec();
    args.extend([
        "--parallel",
        "4",
        "--gate-jobs",
        "4",
        "--json",
        "--agents",
        &agents,
    ]);
    let run = LoggedRun::start(repo.path(), &args, t);
    let cars = "return [...document.querySelectorAll('#train-cars li.car')].map((c) => c.dataset.story + ':' + c.dataset.state + ':' + c.querySelector('.car-base').textContent).join(' | ');";
    b.wait_js_or(
        "rename and caller2 gated, other on top of both",
        120,
        &format!(
            "var c = (function () {{ {cars} }})(); return c.startsWith('rename:gating: on the target | caller2:gating: on the target + rename | other:') && c.endsWith(': on the target + rename + caller2');"
        ),
        || run.context(),
    );
    b.screenshot(&screenshot_path("train-live"));
    b.wait_js_or(
        "the run to finish",
        120,
        "var s = document.querySelector('#run-summary'); return s && s.dataset.live === 'false' && s.dataset.status !== 'running';",
        || run.context(),
    );
    let said = |b: &Browser| {
        b.wait_js(
            "the train's counts and last gatings",
            15,
            "var n = document.querySelector('#train-counts'); var e = document.querySelector('#train-empty'); var r = [...document.querySelectorAll('#train-recent li.gating')].map((g) => g.dataset.story + ':' + g.dataset.verdict); return n && e && r.includes('caller2:failed') && r.includes('other:passed') && [n.textContent, r];",
        )
    };
    let live = said(&b);
    let counts = live[0].as_str().unwrap_or_default().to_string();
    assert!(
        counts.starts_with("Integration gatings: 2 passed, "),
        "{live}"
    );
    b.screenshot(&screenshot_path("train-finished"));
    // The next morning: the same from the run's journal.
    drop(ui);
    let (_ui, url) = start_ui(repo.path(), &[]);
    open_page(&b, &url);
    assert_eq!(said(&b), live);
}

/// The mega view's story `story` of `feature`, as a CSS selector (with
/// `what` after it: ` .mega-retry`, ...).
fn mega_row(feature: &str, story: &str, what: &str) -> String {
    format!(".mega-story[data-feature=\"{feature}\"][data-story=\"{story}\"]{what}")
}

fn wait_mega_state(b: &Browser, feature: &str, story: &str, state: &str, secs: u64) {
    b.wait_js(
        &format!("{story} of {feature} to be {state}"),
        secs,
        &format!(
            "var n = document.querySelector('{}'); return n && n.dataset.state === '{state}';",
            mega_row(feature, story, "").replace('\'', "\\'")
        ),
    );
}

/// Waits until `test` (JavaScript, `s` the mega view's summary) holds.
fn wait_mega(b: &Browser, what: &str, secs: u64, test: &str) {
    b.wait_js(
        what,
        secs,
        &format!("var s = document.querySelector('#mega-summary'); return s && ({test});"),
    );
}

/// Clicks a button of the mega view once it is enabled.
fn click_enabled(b: &Browser, css: &str) {
    b.wait_js(
        &format!("{css} to be enabled"),
        15,
        &format!(
            "var e = document.querySelector('{}'); return e && !e.disabled;",
            css.replace('\'', "\\'")
        ),
    );
    b.click_css(css, 5);
}

#[test]
fn dashboard_steers_a_mega_run_by_feature() {
    let Some(b) = browser_or_skip("dashboard_steers_a_mega_run_by_feature") else {
        return;
    };
    let tools = tempfile::tempdir().expect("tools dir");
    let t = tools.path();
    let (repo, agents) = crate::ui::two_feature_mega(t);
    let agents = agents.display().to_string();
    let (_ui, url) = start_ui(repo.path(), &["--agents", &agents]);
    b.goto(&format!("{url}#/mega"));
    b.wait_find("#mega-empty", 15);

    // A mega run starts: both features' stories show up, live.
    let mut args = vec!["--agents", agents.as_str()];
    args.extend_from_slice(crate::ui::MEGA_APPROVE);
    // Its output to files (a pipe nobody reads would stall it when full).
    let _run = LoggedRun::start(repo.path(), &args, t);
    for f in ["alpha", "beta"] {
        wait_mega_state(&b, f, "s-hang", "running", 60);
        wait_mega_state(&b, f, "s-fail", "failed", 60);
    }
    wait_mega(
        &b,
        "the mega view to be live",
        30,
        "s.dataset.live === 'true'",
    );
    b.screenshot(&screenshot_path("mega-live"));

    // Pause the whole run.
    click_enabled(&b, "#mega-pause");
    wait_mega(
        &b,
        "the PAUSED badge",
        15,
        "s.dataset.paused === 'true' && document.querySelector('#mega-paused')",
    );
    // Retry alpha's failed story: it waits (paused).
    click_enabled(&b, &mega_row("alpha", "s-fail", " .mega-retry"));
    wait_mega_state(&b, "alpha", "s-fail", "pending", 30);
    // Cancel alpha's hanging story: beta's story of the same id runs on.
    click_enabled(&b, &mega_row("alpha", "s-hang", " .mega-cancel"));
    wait_mega_state(&b, "alpha", "s-hang", "cancelled", 60);
    wait_mega_state(&b, "alpha", "s-next", "blocked", 30);
    assert_eq!(
        b.js(
            &format!(
                "return document.querySelector('{}').dataset.state",
                mega_row("beta", "s-hang", "").replace('\'', "\\'")
            ),
            json!([])
        ),
        "running",
        "beta's s-hang was touched"
    );
    b.screenshot(&screenshot_path("mega-paused"));

    // Resume: alpha's retried story runs again and merges; beta's goes on
    // once its agent is let go.
    click_enabled(&b, "#mega-resume");
    wait_mega(
        &b,
        "scheduling to go on",
        15,
        "s.dataset.paused === 'false' && !document.querySelector('#mega-paused')",
    );
    wait_mega_state(&b, "alpha", "s-fail", "complete", 60);
    std::fs::write(t.join("beta.go"), "").expect("release beta's s-hang");
    wait_mega_state(&b, "beta", "s-hang", "complete", 60);
    wait_mega_state(&b, "beta", "s-next", "complete", 60);
    wait_mega(
        &b,
        "the mega run to end",
        60,
        "s.dataset.live === 'false' && s.dataset.status === 'failed'",
    );
    b.screenshot(&screenshot_path("mega-finished"));

    // Retry on the finished run resumes it (`cascade mega resume --yes`):
    // every failed story runs again and both features land.
    click_enabled(&b, &mega_row("beta", "s-fail", " .mega-retry"));
    wait_mega(
        &b,
        "the resumed mega run to complete",
        120,
        "s.dataset.status === 'completed' && s.dataset.live === 'false'",
    );
    for f in ["alpha", "beta"] {
        for id in ["s-hang", "s-fail", "s-next"] {
            wait_mega_state(&b, f, id, "complete", 15);
        }
    }
    b.screenshot(&screenshot_path("mega-resumed"));
    // Every request of the page reached the run as a control event, with
    // the feature it named.
    b.click_css("#tab-run", 5);
    expect_controls(
        &b,
        &[
            "action=pause",
            "[alpha]  s-fail  action=retry",
            "[alpha]  s-hang  action=cancel",
            "action=resume",
        ],
    );
}

/// The run view's event log shows a `control` event for each of `lines`
/// (each a part of its line: `action=pause`, `[feature]  story  action=...`).
fn expect_controls(b: &Browser, lines: &[&str]) {
    let controls = b.wait_js(
        "the control events in the log",
        15,
        &format!(
            "var l = [...document.querySelectorAll('#event-log li[data-event=control]')].map(e => e.textContent); return l.length >= {} && l;",
            lines.len()
        ),
    );
    let controls = controls.to_string();
    for line in lines {
        assert!(controls.contains(line), "{line} not in {controls}");
    }
}

/// A planning session waiting for its first question, written with the
/// planning crate itself (what `cascade plan` leaves after discovery).
fn waiting_session(repo: &Path) -> (cascade_planning::SessionStore, String) {
    use cascade_planning::session::{DecisionOption, Tradeoffs};
    use cascade_planning::{
        Decision, Question, QuestionType, Session, SessionOptions, SessionStore,
    };
    let paths = cascade_git::RepoPaths::discover(repo).expect("repo paths");
    let store = SessionStore::new(&paths.cascade_dir());
    let mut s = Session::new("Add OAuth login", SessionOptions::defaults()).expect("session");
    s.questions.push(Question {
        id: "q-1".into(),
        kind: QuestionType::Technical,
        question: "Which identity provider?".into(),
        context: "Decides the SDK".into(),
        options: vec![],
        assumption: Some("Google".into()),
        answer: None,
        answered_at: None,
    });
    let option = |id: &str, name: &str, pro: &str, con: &str| DecisionOption {
        id: id.into(),
        name: name.into(),
        description: String::new(),
        tradeoffs: Tradeoffs {
            pros: vec![pro.into()],
            cons: vec![con.into()],
        },
    };
    s.decisions.push(Decision {
        id: "d-1".into(),
        topic: "Where sessions live".into(),
        context: String::new(),
        options: vec![
            option("opt-a", "Signed cookie", "no server state", "size limit"),
            option("opt-b", "Redis", "scales out", "one more service"),
        ],
        recommendation: Some("opt-a".into()),
        selected_option_id: None,
        rationale: None,
        decided_at: None,
    });
    store.save(&mut s).expect("save session");
    let id = s.session_id.clone();
    (store, id)
}

#[test]
fn dashboard_answers_a_planning_question() {
    let Some(b) = browser_or_skip("dashboard_answers_a_planning_question") else {
        return;
    };
    let repo = init_repo();
    let (store, id) = waiting_session(repo.path());
    let session_file = store.dir(&id).join("session.json");
    let before = std::fs::read_to_string(&session_file).expect("session.json");
    // The planner the answer wakes up is a script that gives up at once: the
    // test needs no agent, and never reaches a real one.
    let tools = tempfile::tempdir().expect("tools dir");
    let planner = script(
        &tools.path().join("planner.sh"),
        "echo 'no plan today' >&2\nexit 1",
    );
    let agents = tools.path().join("agents.json");
    write_json(
        &agents,
        &json!({"default_agent": "scripted", "agents": {
            "scripted": {"type": "cli", "command": planner.display().to_string(), "args": [], "timeout": 30}
        }}),
    );
    let (_ui, url) = start_ui(repo.path(), &["--agents", &agents.display().to_string()]);

    b.goto(&format!("{url}#/plan"));
    b.click_css(&format!("#plan-list [data-plan=\"{id}\"] a"), 15);
    let input = b.wait_find("#answer-q-1", 10);
    // The decision's options with their pros and cons, the recommended one
    // marked.
    let options = b.js(
        "return [...document.querySelectorAll('.decision[data-decision=\"d-1\"] .option')].map(o => [o.dataset.option, o.dataset.recommended, o.querySelector('.pros').innerText, o.querySelector('.cons').innerText])",
        json!([]),
    );
    assert_eq!(
        options,
        json!([
            ["opt-a", "true", "no server state", "size limit"],
            ["opt-b", "false", "scales out", "one more service"]
        ]),
        "decision options"
    );
    b.type_into(&input, "GitHub");
    b.screenshot(&screenshot_path("plan-question"));
    b.click_css("#submit-q-1", 5);

    // The answer reaches the session's files, as `cascade plan answer` would.
    let answers = store.answers_path(&id);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let in_answers = std::fs::read_to_string(&answers).unwrap_or_default();
        let session = std::fs::read_to_string(&session_file).unwrap_or_default();
        if in_answers.contains("GitHub") || (session != before && session.contains("GitHub")) {
            break;
        }
        if std::time::Instant::now() > deadline {
            let page = b.js("return document.body.innerText", json!([]));
            panic!(
                "the answer reached neither {} nor session.json;\nanswers: {in_answers}\nsession: {session}\npage:\n{page}",
                answers.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The page shows the answer as kept (used by the planner when it goes
    // on), whatever the planner made of it.
    b.wait_js(
        "the page to show the saved answer",
        15,
        "var a = document.querySelector('.question[data-question=\"q-1\"] .answer-text'); return a && a.textContent === 'GitHub';",
    );
    b.screenshot(&screenshot_path("plan-answered"));
    // This repository has no plan to run: the run view says so.
    b.click_css("#tab-run", 5);
    b.wait_find("#no-stories", 10);
}
