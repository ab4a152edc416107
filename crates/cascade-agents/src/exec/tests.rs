//! Executor tests with scripted `/bin/sh` agents in temp directories.

use super::*;
use crate::stream::ReviewVerdict;
use std::os::unix::fs::PermissionsExt;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    work: PathBuf,
    cascade: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    Fixture {
        cascade: root.join(".cascade"),
        work,
        root,
        _dir: dir,
    }
}

fn script(path: &Path, body: &str) -> String {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_string_lossy().into_owned()
}

fn agent(command: String, args: &[&str]) -> AgentDef {
    AgentDef {
        timeout_secs: Some(120),
        env: vec![("AGENT_OWN".into(), "own-{story_id}".into())],
        ..AgentDef::test_cli("scripted", &command, args)
    }
}

fn request(f: &Fixture, prompt: &str) -> AgentRequest {
    AgentRequest::new(
        "story-001",
        2,
        Phase::Implementation,
        prompt,
        &f.work,
        &f.cascade,
    )
}

/// Whether a process is alive (a zombie is dead; it only waits to be reaped).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            !matches!(rest.split_whitespace().next(), Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

/// Waits (as a hang guard only) until `pid` is gone.
async fn gone(pid: u32) -> bool {
    for _ in 0..100 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn success_with_stream_json_env_and_placeholders() {
    let f = fixture();
    let out = f.root.join("out");
    let cmd = script(
        &f.root.join("agent.sh"),
        &format!(
            r#"out='{out}'
printf '%s' "$1" > "$out.arg1"
printf '%s' "$2" > "$out.arg2"
pwd > "$out.pwd"
env | grep -E '^(CASCADE_|AGENT_OWN|EXTRA)' | sort > "$out.env"
echo '{{"type":"system","subtype":"init","session_id":"sess-9"}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"<review>PASS</review>"}}]}}}}'
echo '{{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"sess-9","total_cost_usd":0.25,"usage":{{"input_tokens":7,"output_tokens":3}}}}'
echo 'to stderr' >&2
exit 0"#,
            out = out.display()
        ),
    );
    let a = agent(cmd, &["--story={story_id}#{attempt}", "{prompt_file}"]);
    let mut req = request(&f, "build the thing");
    req.extra_env.push(("EXTRA".into(), "1".into()));
    let mut spawned = None;
    let run = execute(&a, req, |pid| spawned = Some(pid), &CancelToken::new())
        .await
        .unwrap();
    assert!(run.success(), "{}", run.outcome.describe());
    assert_eq!(spawned, Some(run.outcome.pid));
    assert_eq!(run.session_id.as_deref(), Some("sess-9"));
    assert_eq!(run.final_text.as_deref(), Some("done"));
    assert_eq!(run.review, Some(ReviewVerdict::Pass));
    let usage = run.usage.unwrap();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.cost_usd),
        (7, 3, Some(0.25))
    );

    let read =
        |suffix: &str| std::fs::read_to_string(format!("{}.{suffix}", out.display())).unwrap();
    assert_eq!(read("arg1"), "--story=story-001#2");
    let prompt_path = f.cascade.join("prompts/story-001-implementation-2.md");
    assert_eq!(read("arg2"), prompt_path.display().to_string());
    assert_eq!(run.prompt_path, prompt_path);
    assert_eq!(
        std::fs::read_to_string(&prompt_path).unwrap(),
        "build the thing"
    );
    assert_eq!(
        read("pwd").trim(),
        f.work.canonicalize().unwrap().display().to_string()
    );
    let env = read("env");
    for line in [
        "AGENT_OWN=own-story-001".to_string(),
        "CASCADE_ATTEMPT=2".to_string(),
        "CASCADE_PHASE=implementation".to_string(),
        format!("CASCADE_PROMPT_FILE={}", prompt_path.display()),
        "CASCADE_STORY_ID=story-001".to_string(),
        format!("CASCADE_WORKDIR={}", f.work.display()),
        "EXTRA=1".to_string(),
    ] {
        assert!(env.lines().any(|l| l == line), "missing {line} in\n{env}");
    }
    let log = std::fs::read_to_string(&run.log_path).unwrap();
    assert_eq!(
        run.log_path,
        f.cascade.join("logs/story-001-implementation-2.log")
    );
    assert!(log.starts_with("== cascade: story-001 attempt 2 (implementation) via scripted"));
    assert!(log.contains("\"result\":\"done\""));
    assert!(log.contains("to stderr"));
}

#[tokio::test]
async fn non_zero_exit_is_a_run_not_an_error() {
    let f = fixture();
    let cmd = script(&f.root.join("fail.sh"), "echo 'cannot do it'\nexit 3");
    let run = execute(
        &agent(cmd, &[]),
        request(&f, "p"),
        |_| {},
        &CancelToken::new(),
    )
    .await
    .unwrap();
    assert!(!run.success());
    assert_eq!(run.outcome.exit_code, Some(3));
    assert!(!run.outcome.timed_out);
    assert!(run.outcome.output_excerpt(1000).contains("cannot do it"));
    assert_eq!(run.final_text, None);
}

#[tokio::test]
async fn timeout_kills_the_agent_and_its_grandchild() {
    let f = fixture();
    let pidfile = f.root.join("grandchild.pid");
    let cmd = script(
        &f.root.join("hang.sh"),
        &format!(
            "sleep 1000 &\necho $! > '{}'\necho started\nsleep 1000",
            pidfile.display()
        ),
    );
    let mut req = request(&f, "p");
    req.timeout_override = Some(Duration::from_secs(1));
    let mut a = agent(cmd, &[]);
    a.timeout_secs = Some(3600);
    let run = execute(&a, req, |_| {}, &CancelToken::new()).await.unwrap();
    assert!(run.outcome.timed_out, "{}", run.outcome.describe());
    assert!(!run.success());
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(grandchild).await, "grandchild {grandchild} survived");
    assert!(!cascade_process::group_alive(run.outcome.pid));
}

#[tokio::test]
async fn cancellation_kills_the_group() {
    let f = fixture();
    let pidfile = f.root.join("gc.pid");
    let cmd = script(
        &f.root.join("hang.sh"),
        // Written whole then renamed: the canceller waits for the file to
        // exist, and a file seen before `echo` wrote to it would be empty.
        &format!(
            "sleep 1000 &\necho $! > '{0}.tmp'\nmv '{0}.tmp' '{0}'\nwait",
            pidfile.display()
        ),
    );
    let cancel = CancelToken::new();
    let trigger = cancel.clone();
    let pf = pidfile.clone();
    tokio::spawn(async move {
        // Cancel once the agent is demonstrably running.
        for _ in 0..200 {
            if pf.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        trigger.cancel();
    });
    let run = execute(&agent(cmd, &[]), request(&f, "p"), |_| {}, &cancel)
        .await
        .unwrap();
    assert!(run.outcome.cancelled);
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(grandchild).await);
}

#[tokio::test]
async fn huge_output_is_read_whole_but_logged_within_the_limit() {
    let f = fixture();
    // 40 MiB of text in 1 KiB lines, plus one 2 MiB line without JSON.
    let cmd = script(
        &f.root.join("loud.sh"),
        "i=0\nline=$(head -c 1023 /dev/zero | tr '\\0' 'x')\n\
         yes \"$line\" | head -n 40960\n\
         head -c 2097152 /dev/zero | tr '\\0' 'y'\necho\n\
         echo '{\"type\":\"result\",\"result\":\"survived\"}'",
    );
    let run = execute(
        &agent(cmd, &[]),
        request(&f, "p"),
        |_| {},
        &CancelToken::new(),
    )
    .await
    .unwrap();
    assert!(run.success(), "{}", run.outcome.describe());
    let expected =
        40960 * 1024 + 2097152 + 1 + "{\"type\":\"result\",\"result\":\"survived\"}\n".len() as u64;
    assert_eq!(run.outcome.stdout.total_bytes, expected);
    assert!(run.outcome.stdout.tail.len() <= cascade_process::DEFAULT_TAIL_BYTES);
    assert_eq!(run.final_text.as_deref(), Some("survived"));
    // The log keeps its head and tail within the default limit.
    let log = std::fs::read(&run.log_path).unwrap();
    assert_eq!(log.len() as u64, cascade_process::DEFAULT_LOG_LIMIT);
    let text = String::from_utf8_lossy(&log);
    assert!(text.starts_with("== cascade: "), "{:.100}", text);
    assert!(text.contains("bytes of output dropped here"));
    assert!(text.ends_with("{\"type\":\"result\",\"result\":\"survived\"}\n"));
}

#[tokio::test]
async fn the_log_limit_comes_from_the_request() {
    let f = fixture();
    let cmd = script(&f.root.join("some.sh"), "yes line | head -n 100000");
    let mut req = request(&f, "p");
    req.log_limit = cascade_process::LogLimit::Bytes(1000);
    let small = execute(&agent(cmd.clone(), &[]), req, |_| {}, &CancelToken::new())
        .await
        .unwrap();
    assert_eq!(std::fs::metadata(&small.log_path).unwrap().len(), 1000);
    let mut req = request(&f, "p");
    req.attempt = 3;
    req.log_limit = cascade_process::LogLimit::Unlimited;
    let run = execute(&agent(cmd, &[]), req, |_| {}, &CancelToken::new())
        .await
        .unwrap();
    let log = std::fs::read_to_string(&run.log_path).unwrap();
    assert_eq!(log.lines().filter(|l| *l == "line").count(), 100000);
}

#[tokio::test]
async fn invalid_utf8_output_is_survived() {
    let f = fixture();
    let cmd = script(
        &f.root.join("bytes.sh"),
        "printf 'ok \\377\\376 bad \\200\\n'\nprintf '<review>\\377PASS</review>\\n'\nprintf '\\377' >&2\nexit 0",
    );
    let run = execute(
        &agent(cmd, &[]),
        request(&f, "p"),
        |_| {},
        &CancelToken::new(),
    )
    .await
    .unwrap();
    assert!(run.success());
    let text = run.outcome.output_excerpt(1000);
    assert!(text.contains("ok"), "{text}");
    assert!(text.contains('\u{fffd}'));
    let log = std::fs::read(&run.log_path).unwrap();
    assert!(log.windows(2).any(|w| w == b"\xff\xfe"), "raw bytes logged");
}

#[tokio::test]
async fn shell_metacharacters_in_the_prompt_arrive_intact() {
    let f = fixture();
    let canary = f.root.join("pwned");
    let prompt = format!(
        "Fix it; $(touch {c}) `touch {c}` && rm -rf / || true | cat > /dev/null\n\
         'single' \"double\" \\backslash\\ $HOME ${{HOME}} * ? [a-z] ~ # !\n\
         {{prompt}} {{attempt}} %s %n \t tab <review>PASS</review> é 漢字 🚀",
        c = canary.display()
    );
    let out = f.root.join("arg");
    let cmd = script(
        &f.root.join("echo.sh"),
        &format!(
            "printf '%s' \"$2\" > '{}'\nprintf '%s' \"$#\" > '{}.count'",
            out.display(),
            out.display()
        ),
    );
    let run = execute(
        &agent(cmd, &["--message", "{prompt}", "--yes"]),
        request(&f, &prompt),
        |_| {},
        &CancelToken::new(),
    )
    .await
    .unwrap();
    assert!(run.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), prompt);
    assert_eq!(
        std::fs::read_to_string(format!("{}.count", out.display())).unwrap(),
        "3"
    );
    assert_eq!(std::fs::read_to_string(&run.prompt_path).unwrap(), prompt);
    assert!(!canary.exists(), "the prompt was interpreted by a shell");
}

#[tokio::test]
async fn missing_command_is_unavailable() {
    let f = fixture();
    let a = agent("cascade-test-no-such-agent-xyz".into(), &[]);
    let err = execute(
        &a,
        request(&f, "p"),
        |_| panic!("not spawned"),
        &CancelToken::new(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ExecError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("cascade-test-no-such-agent-xyz"));

    let not_exec = f.root.join("plain.txt");
    std::fs::write(&not_exec, "hi").unwrap();
    let a = agent(not_exec.display().to_string(), &[]);
    let err = execute(&a, request(&f, "p"), |_| {}, &CancelToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, ExecError::NotExecutable { .. }), "{err:?}");
}

#[tokio::test]
async fn missing_workdir_is_a_clear_error_and_an_oversized_prompt_goes_by_file() {
    let f = fixture();
    let cmd = script(&f.root.join("ok.sh"), "exit 0");
    let mut req = request(&f, "p");
    req.workdir = f.root.join("nope");
    let err = execute(&agent(cmd.clone(), &[]), req, |_| {}, &CancelToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, ExecError::NoWorkingDir { .. }), "{err:?}");

    // A prompt longer than the OS passes in argv goes through the prompt
    // file and stdin: `{prompt}` becomes a pointer to the file.
    let big = "a".repeat(MAX_ARG_BYTES + 10);
    let seen = script(
        &f.root.join("seen.sh"),
        "printf '%s' \"$1\" > \"$CASCADE_WORKDIR/arg.txt\"; wc -c > \"$CASCADE_WORKDIR/stdin.txt\"",
    );
    let run = execute(
        &agent(seen, &["{prompt}"]),
        request(&f, &big),
        |_| {},
        &CancelToken::new(),
    )
    .await
    .unwrap();
    assert!(run.success(), "{:?}", run.outcome);
    let arg = std::fs::read_to_string(f.work.join("arg.txt")).unwrap();
    assert!(arg.starts_with("Your task is in the file "), "{arg}");
    assert!(
        arg.contains(&run.prompt_path.display().to_string()),
        "{arg}"
    );
    let stdin = std::fs::read_to_string(f.work.join("stdin.txt")).unwrap();
    assert_eq!(stdin.trim(), big.len().to_string());
    assert_eq!(std::fs::read_to_string(&run.prompt_path).unwrap(), big);
    // A short prompt stays in argv, stdin stays empty.
    let inv = invocation(
        &agent(cmd, &["{prompt}"]),
        &request(&f, "short"),
        Path::new("/p.md"),
    );
    assert_eq!(inv.args, ["short"]);
    assert!(!inv.prompt_on_stdin);
}

#[test]
fn invocation_is_pure_and_ordered() {
    let f = fixture();
    let mut a = agent("codex".into(), &["exec", "{prompt}"]);
    a.working_dir = Some("{working_dir}".into());
    let mut req = request(&f, "hi\0there");
    req.extra_env
        .push(("CASCADE_PRD_PATH".into(), "/x/prd.json".into()));
    let inv = invocation(&a, &req, Path::new("/p.md"));
    assert_eq!(inv.program, "codex");
    assert_eq!(inv.args, ["exec", "hithere"]);
    assert_eq!(inv.cwd, f.work);
    assert_eq!(inv.timeout, Duration::from_secs(120));
    assert_eq!(inv.env.last().unwrap().0, "CASCADE_PRD_PATH");
    assert_eq!(safe_component("../a b"), "_a_b");
}

#[test]
fn resume_uses_resume_args_with_the_session() {
    let f = fixture();
    let mut a = agent("tool".into(), &["-p", "{prompt}"]);
    a.resume_args = Some(vec![
        "--resume".into(),
        "{session_id}".into(),
        "-p".into(),
        "{prompt}".into(),
    ]);
    let mut req = request(&f, "go on");
    let fresh = invocation(&a, &req, Path::new("/p.md"));
    assert_eq!(fresh.args, vec!["-p", "go on"]);
    req.resume = Some(ResumeSession {
        session_id: "abc-123".into(),
        session_index: Some(2),
    });
    let resumed = invocation(&a, &req, Path::new("/p.md"));
    assert_eq!(resumed.args, vec!["--resume", "abc-123", "-p", "go on"]);
    // An agent that cannot resume starts a new session with its own argv.
    a.resume_args = None;
    assert_eq!(
        invocation(&a, &req, Path::new("/p.md")).args,
        vec!["-p", "go on"]
    );
}

#[tokio::test]
async fn an_auth_retry_in_the_stream_stops_the_agent_at_once() {
    let f = fixture();
    let pidfile = f.root.join("retry.pid");
    // Like `claude -p --output-format stream-json` with a rejected key: it
    // announces the retry and keeps going (here: forever, with a child).
    let cmd = script(
        &f.root.join("claude"),
        &format!(
            "sleep 1000 &\necho $! > '{}'\n\
             echo '{{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s-1\"}}'\n\
             echo '{{\"type\":\"system\",\"subtype\":\"api_retry\",\"attempt\":1,\"max_retries\":10,\"retry_delay_ms\":600,\"error_status\":401,\"error\":\"authentication_failed\"}}'\n\
             wait",
            pidfile.display()
        ),
    );
    let run = execute(
        &agent(cmd, &[]),
        request(&f, "p"),
        |_| {},
        &CancelToken::new(),
    )
    .await
    .unwrap();
    assert!(run.outcome.stopped, "{:?}", run.outcome.describe());
    assert!(!run.outcome.cancelled && !run.outcome.timed_out);
    let signal = run.signal.expect("classified");
    assert_eq!(signal.kind, crate::signal::SignalKind::Auth);
    assert!(signal.advice.unwrap().contains("ANTHROPIC_API_KEY"));
    assert_eq!(run.session_id.as_deref(), Some("s-1"));
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(grandchild).await, "the agent's whole group is stopped");
}

#[tokio::test]
async fn a_root_refusal_on_stderr_comes_back_as_a_hint() {
    let f = fixture();
    let cmd = script(
        &f.root.join("claude"),
        "echo '--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons' >&2\nexit 1",
    );
    let run = execute(
        &agent(cmd, &[]),
        request(&f, "p"),
        |_| {},
        &CancelToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(run.outcome.exit_code, Some(1));
    assert!(run.signal.is_none());
    assert!(run.hint.unwrap().contains("IS_SANDBOX"));
}
