//! End-to-end tests of what README.md and docs/ promise that no other test
//! covered: each test names the page and the claim it checks.
//!
//! - README.md, docs/commands.md (exit codes): SIGHUP stops a run with exit
//!   129, state saved, and `cascade resume` continues it.
//! - docs/commands.md (running a PRD): a resumed run's notice of the
//!   options it restored comes right after the run's opening line (the
//!   `run_started` event in `--json`).
//! - docs/commands.md, docs/verification.md, README.md: proving new tests
//!   is on by default for a pytest gate; `--no-prove-tests` and
//!   `.cascade/config.json`'s `prove_tests.enabled: false` turn it off.
//! - docs/control.md, docs/commands.md: `--notify-arg` passes an argument
//!   starting with `-` to the `--notify` command, after its own values.
//! - docs/commands.md: `--retry-agent A` is the agent of the retry phase.
//! - docs/commands.md: `gates run --base REV` gives incremental gates the
//!   files changed since REV; `--rerun-failures` re-runs a failing gate
//!   once, and a pass then counts as flaky.
//! - docs/planning.md: `--max-questions N` caps the questions (the prompt
//!   says N, a longer list is cut); `--max-questions 0` skips discovery.
//! - docs/dashboard.md, docs/commands.md, README.md: `cascade ui --open`
//!   starts the system's URL opener (`xdg-open`) with the printed URL;
//!   `--bind ADDR` listens there and warns; exit 0 on Ctrl-C, 2 when it
//!   cannot listen.
//!
//! - Every page: each `--flag` written after `cascade <command>` is one
//!   that command's `--help` lists.
//!
//! The fixtures are the other modules' (inspect.rs's run, census.rs's
//! python story, planning.rs's scripted planner).

use std::time::Duration;

use serde_json::Value;

use crate::common::{code, explain, have, of_kind};
use crate::inspect::{stdout, wait_until, Run};

/// A background `approve` of `run` (stdout and stderr piped, `extra`
/// added) whose story `story` holds its agent until `release`.
fn holding(run: &Run, story: &str, extra: &[&str]) -> std::process::Child {
    std::fs::write(run.t(&format!("wait-{story}")), "").expect("marker");
    let mut args = vec!["approve", "--auto-run", "--retry-delay", "0"];
    args.extend_from_slice(extra);
    let child = run.spawn(&args);
    assert!(
        wait_until(Duration::from_secs(60), || run.agent_started(story)),
        "the agent never started"
    );
    child
}

fn signal(child: &std::process::Child, signal: libc::c_int) {
    // SAFETY: a plain signal to our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
}

/// README.md and docs/commands.md: "129 | stopped by SIGHUP (the terminal
/// went away); state saved, `cascade resume` continues".
#[test]
fn sighup_stops_a_run_with_129_and_resume_continues_it() {
    let run = Run::new(&["hup"]);
    let child = holding(&run, "hup", &[]);
    signal(&child, libc::SIGHUP);
    let out = child.wait_with_output().expect("approve ends");
    assert_eq!(code(&out), 129, "{}", explain(&out));
    let status = run.cascade(&["status", "--json"]);
    let st: Value = serde_json::from_slice(&status.stdout).expect("status --json");
    assert_eq!(st["status"], "interrupted", "{st}");
    std::fs::write(run.t("release"), "").expect("release");
    let resumed = run.cascade(&["resume"]);
    assert_eq!(code(&resumed), 0, "{}", explain(&resumed));
    assert!(
        run.repo().join("hup.txt").is_file(),
        "{}",
        explain(&resumed)
    );
}

/// docs/commands.md: "Right after the run's opening line (the
/// `run_started` event in `--json`; only the notices about the files read
/// come before it), a resumed run prints a notice saying what it uses".
#[test]
fn the_resume_notice_comes_right_after_the_opening_line() {
    let run = Run::new(&["a", "b"]);
    let child = holding(&run, "a", &["--parallel", "1"]);
    signal(&child, libc::SIGINT);
    let out = child.wait_with_output().expect("approve ends");
    assert_eq!(code(&out), 130, "{}", explain(&out));
    // Text: the opening line, then the notice.
    std::fs::write(run.t("release"), "").expect("release");
    let resumed = run.cascade(&["resume", "--parallel", "2"]);
    assert_eq!(code(&resumed), 0, "{}", explain(&resumed));
    let lines: Vec<String> = stdout(&resumed).lines().map(str::to_string).collect();
    let opening = lines
        .iter()
        .position(|l| l.starts_with("resuming "))
        .unwrap_or_else(|| panic!("no opening line: {}", explain(&resumed)));
    let next = lines
        .get(opening + 1)
        .map(String::as_str)
        .unwrap_or_default();
    assert!(
        next.starts_with("note: resuming with ") && next.contains("--parallel 2 given here"),
        "the line after the opening one: {next:?}\n{}",
        explain(&resumed)
    );
    // JSON: the event right after run_started.
    let run = Run::new(&["c"]);
    let child = holding(&run, "c", &[]);
    signal(&child, libc::SIGINT);
    assert_eq!(code(&child.wait_with_output().expect("ends")), 130);
    std::fs::write(run.t("release"), "").expect("release");
    let resumed = run.cascade(&["resume", "--json"]);
    assert_eq!(code(&resumed), 0, "{}", explain(&resumed));
    let events = crate::common::events(&resumed);
    let at = events
        .iter()
        .position(|e| e["event"] == "run_started")
        .unwrap_or_else(|| panic!("no run_started: {}", explain(&resumed)));
    let after = &events[at + 1];
    assert_eq!(after["event"], "notice", "{after}");
    assert!(
        after["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("resuming with ")),
        "{after}"
    );
}

/// A story that adds a test which already passes on the base (it checks
/// what `total` always did) to a pytest project.
const UNPROVEN_TEST: &str = "printf 'from calc import total\\n\\ndef test_one():\\n    assert total([5]) == 5\\n' > tests/test_one.py\n\
                             echo '# checked' >> calc.py";

/// docs/commands.md and docs/verification.md: `--prove-tests` is "on where
/// the test census knows a gate's runner" (pytest here) and
/// "`--no-prove-tests` ... turn[s] the default off".
#[test]
fn proving_is_on_by_default_for_pytest_and_no_prove_tests_turns_it_off() {
    if !have("python3", &["-m", "pytest", "--version"]) {
        return;
    }
    let files = crate::census::python_files();
    let run = |flags: &[&str]| {
        crate::census::run_story_with(
            &files,
            crate::census::PYTEST,
            "test total on one item",
            UNPROVEN_TEST,
            flags,
        )
    };
    let (events, exit, _repo) = run(&[]);
    assert_eq!(exit, 1, "proved by default: {events:?}");
    let proved = of_kind(&events, "tests_proved");
    assert_eq!(proved.len(), 1, "{events:?}");
    assert_eq!(proved[0]["passed"], false, "{events:?}");
    assert_eq!(proved[0]["findings"][0]["rule"], "unproven-test");

    let (events, exit, _repo) = run(&["--no-prove-tests"]);
    assert_eq!(exit, 0, "{events:?}");
    assert!(of_kind(&events, "tests_proved").is_empty(), "{events:?}");

    // "... or `.cascade/config.json` `"prove_tests": {"enabled": false}`
    // turn the default off".
    let mut files = crate::census::python_files();
    files.push((
        ".cascade/config.json",
        r#"{"prove_tests": {"enabled": false}}"#,
    ));
    let (events, exit, _repo) = crate::census::run_story_with(
        &files,
        crate::census::PYTEST,
        "test total on one item",
        UNPROVEN_TEST,
        &[],
    );
    assert_eq!(exit, 0, "{events:?}");
    assert!(of_kind(&events, "tests_proved").is_empty(), "{events:?}");
}

/// docs/control.md and docs/commands.md: "`--notify-arg ARG` | one more
/// argument of the `--notify` command, taken as is even when it starts
/// with `-` (repeat it)", after the values given to `--notify`.
#[test]
fn notify_arg_adds_arguments_that_start_with_a_dash() {
    let run = Run::new(&["told"]);
    let seen = run.t("notify-args");
    let notify = crate::common::script(
        &run.t("notify.sh"),
        &format!(
            "printf '%s\\n' \"$@\" > '{f}.tmp' && mv '{f}.tmp' '{f}'",
            f = seen.display()
        ),
    );
    let notify = notify.display().to_string();
    let mut args = crate::common::APPROVE_NOW.to_vec();
    args.extend([
        "--notify",
        &notify,
        "first",
        "--notify-arg",
        "--channel",
        "--notify-arg",
        "builds",
    ]);
    let out = run.cascade(&args);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let got = std::fs::read_to_string(&seen).unwrap_or_else(|e| panic!("{e}: {}", explain(&out)));
    assert_eq!(got, "first\n--channel\nbuilds\n");
}

/// docs/planning.md: "`--max-questions N` | 5 | discovery asks at most N
/// questions (0 skips discovery)". The scripted planner always lists two.
#[test]
fn max_questions_caps_the_questions_and_zero_skips_discovery() {
    let p = crate::planning::Plan::new();
    let (exit, out, err) = p.plan(&["--yes", "--max-questions", "1"]);
    assert_eq!(exit, 0, "stdout:\n{out}\nstderr:\n{err}");
    let questions = p.session()["questions"].clone();
    assert_eq!(questions.as_array().map(Vec::len), Some(1), "{questions:#}");
    assert_eq!(questions[0]["id"], "q-1");
    let prompt = std::fs::read_to_string(p.t("prompt-discovery.md")).expect("the prompt");
    assert!(prompt.contains("List at most 1 questions"), "{prompt}");

    let p = crate::planning::Plan::new();
    let (exit, out, err) = p.plan(&["--yes", "--max-questions", "0"]);
    assert_eq!(exit, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(p.count("discovery"), 0, "{:?}", p.calls());
    assert_eq!(p.count("design"), 1, "{:?}", p.calls());
    assert_eq!(p.session()["questions"], serde_json::json!([]));
}

/// docs/commands.md: "`--impl-agent A` / `--retry-agent A` | the agent of
/// the implementation / retry phase".
#[test]
fn retry_agent_takes_the_retries() {
    // A story whose gate always fails: attempt 1 and its retry.
    let run = Run::new(&["bad-story"]);
    let agent = run.t("agent.sh").display().to_string();
    crate::common::write_json(
        &run.t("agents.json"),
        &serde_json::json!({"default_agent": "scripted", "agents": {
            "scripted": {"type": "cli", "command": agent, "args": [], "timeout": 120},
            "second": {"type": "cli", "command": agent, "args": [], "timeout": 120}
        }}),
    );
    let out = run.cascade(&[
        "approve",
        "--auto-run",
        "--retry-delay",
        "0",
        "--max-retries",
        "1",
        "--retry-agent",
        "second",
    ]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let shown = run.show_json("bad-story");
    let attempts: Vec<(&str, &str)> = shown["attempts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| {
                    (
                        t["phase"].as_str().unwrap_or_default(),
                        t["agent"].as_str().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        attempts,
        [("implementation", "scripted"), ("retry", "second")],
        "{shown:#}"
    );
}

/// docs/commands.md: "`--base REV` gives incremental gates the files
/// changed since `REV`" (an incremental gate's `.` argument becomes them;
/// nothing changed: the gate is skipped).
#[test]
fn gates_run_base_gives_incremental_gates_the_changed_files() {
    let dir = crate::common::init_repo();
    let repo = dir.path();
    let tools = tempfile::tempdir().expect("tools");
    let seen = tools.path().join("args");
    let gate = crate::common::script(
        &tools.path().join("lint.sh"),
        &format!("printf '%s\\n' \"$@\" >> '{}'", seen.display()),
    );
    crate::gates::gates_json(
        repo,
        serde_json::json!([{"name": "lint", "type": "lint", "command": gate, "args": ["."],
            "incremental": true, "extensions": ["txt"]}]),
    );
    std::fs::write(repo.join("a.txt"), "a\n").expect("write");
    std::fs::write(repo.join("b.md"), "b\n").expect("write");
    crate::common::git(repo, &["add", "a.txt", "b.md"]);
    crate::common::git(repo, &["commit", "-q", "-m", "two files"]);

    let (exit, v) = crate::gates::run_json(repo, &["--no-cache", "--base", "HEAD~1"]);
    assert_eq!(exit, 0, "{v}");
    assert_eq!(v["gates"][0]["skipped"], false, "{v}");
    let args = std::fs::read_to_string(&seen).expect("the gate ran");
    assert_eq!(args, "a.txt\n", "only the changed .txt file, for `.`");

    let (exit, v) = crate::gates::run_json(repo, &["--no-cache", "--base", "HEAD"]);
    assert_eq!(exit, 0, "{v}");
    assert_eq!(
        v["gates"][0]["skipped"], true,
        "nothing changed since HEAD: {v}"
    );
    assert_eq!(
        std::fs::read_to_string(&seen).expect("args"),
        "a.txt\n",
        "the skipped gate did not run"
    );
}

/// docs/commands.md: "`--rerun-failures` re-runs a failing gate once (a
/// pass then counts as flaky)". The gate passes on its third run only.
#[test]
fn gates_run_rerun_failures_turns_a_second_pass_into_flaky() {
    let dir = crate::common::init_repo();
    let repo = dir.path();
    let tools = tempfile::tempdir().expect("tools");
    let count = tools.path().join("runs");
    let gate = crate::common::script(
        &tools.path().join("flaky.sh"),
        &format!(
            "n=$(cat '{c}' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '{c}'\n\
             [ $n = 3 ] || {{ echo 'flaky.txt:1:1: error: not the third run'; exit 1; }}",
            c = count.display()
        ),
    );
    crate::gates::gates_json(
        repo,
        serde_json::json!([{"name": "unit", "type": "test", "command": gate}]),
    );
    let (exit, v) = crate::gates::run_json(repo, &["--no-cache"]);
    assert_eq!(exit, 1, "without the flag one failure fails: {v}");
    assert_eq!(v["gates"][0]["passed"], false, "{v}");

    let (exit, v) = crate::gates::run_json(repo, &["--no-cache", "--rerun-failures"]);
    assert_eq!(exit, 0, "{v}");
    assert_eq!(v["passed"], true, "{v}");
    assert_eq!(v["gates"][0]["flaky"], true, "{v}");
    assert_eq!(std::fs::read_to_string(&count).expect("runs").trim(), "3");
}

/// README.md, docs/*.md, docs/agents/*.md and examples/*/README.md.
fn pages() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for dir in ["docs", "docs/agents"] {
        for e in std::fs::read_dir(root.join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            if e.path().extension().is_some_and(|x| x == "md") {
                pages.push(e.path());
            }
        }
    }
    for e in std::fs::read_dir(root.join("examples"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let readme = e.path().join("README.md");
        if readme.is_file() {
            pages.push(readme);
        }
    }
    pages.sort();
    pages
}

/// Every page: `cascade <command> [<subcommand>] ... --flag` (in a code
/// block or in backticks) only names flags that command takes, as its
/// `--help` lists them. A page's `cascade approve --agent-timeout` would
/// fail here.
#[test]
fn every_flag_the_docs_give_a_command_is_in_its_help() {
    let invocation =
        regex::Regex::new(r"cascade ([a-z][a-z-]*(?: [a-z][a-z-]*)?)([^`\n#|;]*)").expect("regex");
    let flag = regex::Regex::new(r"(?:^|[^\w-])(--[a-z][a-z0-9-]*)").expect("regex");
    let dir = tempfile::tempdir().expect("a directory to run in");
    let mut helps: std::collections::HashMap<Vec<String>, Option<String>> = Default::default();
    let mut help = |words: &[&str]| -> Option<String> {
        let key: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        helps
            .entry(key)
            .or_insert_with(|| {
                let out = crate::common::cascade(dir.path())
                    .args(words)
                    .arg("--help")
                    .output()
                    .expect("cascade runs");
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            })
            .clone()
    };
    let (mut checked, mut wrong) = (0, Vec::new());
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        for (n, line) in text.lines().enumerate() {
            for m in invocation.captures_iter(line) {
                let words: Vec<&str> = m[1].split(' ').collect();
                // The subcommand when there is one (`gates run`), else the command.
                let Some((command, text)) = [&words[..], &words[..1]]
                    .into_iter()
                    .find_map(|w| help(w).map(|h| (w.join(" "), h)))
                else {
                    continue;
                };
                for f in flag.captures_iter(&m[2]) {
                    checked += 1;
                    if !text.contains(&f[1]) {
                        wrong.push(format!(
                            "{}:{}: cascade {command} {}",
                            page.display(),
                            n + 1,
                            &f[1]
                        ));
                    }
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} flags found: is the pattern right?"
    );
    assert!(
        wrong.is_empty(),
        "flags their command does not take:\n{}",
        wrong.join("\n")
    );
}

#[cfg(feature = "ui")]
mod ui {
    //! `cascade ui`'s flags and exit codes (docs/dashboard.md, docs/commands.md).

    use std::io::{BufRead, BufReader};
    use std::path::Path;
    use std::process::{Child, Stdio};
    use std::time::Duration;

    use crate::common::{cascade_command, init_repo, script};
    use crate::inspect::wait_until;

    /// `cascade ui --port 0 <args>` in `dir` with `path` first on PATH: the
    /// process, the URL it printed, and its stderr so far (in `err`).
    fn start(dir: &Path, args: &[&str], path: &Path, err: &Path) -> (Child, String) {
        let search = format!(
            "{}:{}",
            path.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut child = cascade_command(dir)
            .args(["ui", "--port", "0"])
            .args(args)
            .env("PATH", search)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(err).expect("stderr file"))
            .spawn()
            .expect("cascade ui starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("reads the URL");
        (child, line.trim().to_string())
    }

    /// Ends `child` with SIGINT (Ctrl-C); its exit code.
    fn interrupt(mut child: Child) -> Option<i32> {
        // SAFETY: a plain signal to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let mut status = None;
        wait_until(Duration::from_secs(15), || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        if status.is_none() {
            let _ = child.kill();
        }
        status.and_then(|s| s.code())
    }

    /// docs/dashboard.md: "`cascade ui --open` # also opens the address in
    /// your browser": the URL opener (`xdg-open`) gets the printed URL, with
    /// its token, as its one argument. A stand-in opener records it.
    #[test]
    fn open_hands_the_printed_url_to_the_url_opener() {
        if cfg!(target_os = "macos") {
            println!("skipped: on macOS the opener is `open`, not the stand-in `xdg-open`");
            return;
        }
        let repo = init_repo();
        let tools = tempfile::tempdir().expect("tools");
        let seen = tools.path().join("opened");
        script(
            &tools.path().join("xdg-open"),
            // Written whole (renamed into place): the test reads it once it is there.
            &format!(
                "printf '%s\\n' \"$#\" \"$@\" > '{f}.tmp' && mv '{f}.tmp' '{f}'",
                f = seen.display()
            ),
        );
        let err = tools.path().join("stderr");
        let (child, url) = start(repo.path(), &["--open"], tools.path(), &err);
        assert!(url.contains("?token="), "{url}");
        assert!(
            wait_until(Duration::from_secs(15), || seen.is_file()),
            "the opener never ran"
        );
        let opened = std::fs::read_to_string(&seen).expect("what the opener got");
        assert_eq!(opened, format!("1\n{url}\n"));
        assert_eq!(interrupt(child), Some(0), "exit 0 on Ctrl-C");
    }

    /// docs/dashboard.md: "`--bind ADDR` (e.g. `0.0.0.0`) listens elsewhere
    /// on purpose and prints a warning"; docs/commands.md: "exit 0 on
    /// Ctrl-C, 2 when it cannot listen".
    #[test]
    fn bind_listens_there_with_a_warning_and_a_taken_port_is_exit_2() {
        let repo = init_repo();
        let tools = tempfile::tempdir().expect("tools");
        let err = tools.path().join("stderr");
        let (child, url) = start(repo.path(), &["--bind", "0.0.0.0"], tools.path(), &err);
        let port: u16 = url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {url}"));
        let warned = std::fs::read_to_string(&err).unwrap_or_default();
        assert!(
            warned.contains(&format!("warning: listening on 0.0.0.0:{port} (--bind)")),
            "{warned}"
        );
        match crate::ui::listeners(port) {
            // 0.0.0.0 in /proc's hex.
            Some(found) => assert_eq!(found, vec!["00000000".to_string()], "{found:?}"),
            None => println!("no /proc/net/tcp here: the listening address is not read"),
        }
        // Another dashboard on the same port cannot listen: exit 2.
        let taken = crate::common::cascade(repo.path())
            .args(["ui", "--port", &port.to_string(), "--bind", "0.0.0.0"])
            .timeout(Duration::from_secs(30))
            .output()
            .expect("cascade ui runs");
        assert_eq!(
            taken.status.code(),
            Some(2),
            "{}",
            crate::common::explain(&taken)
        );
        assert!(
            String::from_utf8_lossy(&taken.stderr).starts_with("error:"),
            "{}",
            crate::common::explain(&taken)
        );
        assert_eq!(interrupt(child), Some(0), "exit 0 on Ctrl-C");
    }
}
