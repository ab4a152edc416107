//! End-to-end tests of `cascade agents check` and of the same check before
//! a run, with stub CLIs on a fake PATH shaped like the real ones (a codex
//! that rejects `--full-auto` the way codex-cli 0.169 does), and `cascade completions`.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::common::{cascade, explain, git, init_repo, script, write_json};

/// A codex stub: today's `exec --help`, clap's rejection of `--full-auto`,
/// logged in; as an agent it writes a file (so a story can complete).
const CODEX: &str = r#"case "$*" in
  --version) echo "codex-cli 0.169.0";;
  "exec --help") printf 'Usage: codex exec [OPTIONS] [PROMPT]\n  -s, --sandbox <SANDBOX_MODE>\n      --skip-git-repo-check\n      --json\n';;
  "exec resume --help") printf 'Usage: codex exec resume [OPTIONS]\n  -c, --config <key=value>\n      --json\n      --skip-git-repo-check\n';;
  "login status") echo "Logged in using an API key";;
  *--full-auto*) echo "error: unexpected argument '--full-auto' found" >&2; echo "For more information, try '--help'." >&2; exit 2;;
  exec*) echo "codex was here" > codex.txt; echo '{"type":"thread.started","thread_id":"t-1"}';;
  *) exit 2;;
esac"#;

fn fake_bin(root: &Path) -> PathBuf {
    let bin = root.join("fakebin");
    script(&bin.join("codex"), CODEX);
    // git and sh for cascade itself; nothing else.
    for tool in ["git", "sh", "env"] {
        if let Some(real) = which(tool) {
            std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
        }
    }
    bin
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

fn agents(dir: &Path, codex_args: &[&str]) {
    write_json(
        &dir.join("agents.json"),
        &json!({
            "default_agent": "codex",
            "agents": {
                "codex": {"type": "cli", "command": "codex", "args": codex_args, "timeout": 60,
                          "resume_args": ["exec", "resume", "--json", "-c", "k=v", "{session_id}", "{prompt}"]},
                "backup": {"type": "cli", "command": dir.join("backup.sh").display().to_string(), "args": [], "timeout": 60}
            },
            "phase_defaults": {"implementation": {"default_agent": "codex", "fallback_chain": ["backup"]}}
        }),
    );
    script(&dir.join("backup.sh"), "echo backup was here > backup.txt");
}

fn prd(dir: &Path) {
    write_json(
        &dir.join("prd.json"),
        &json!({"metadata": {"version": "1.0.0"}, "goal": "g", "objectives": [],
            "stories": [{"id": "story-001", "title": "Write a file", "description": "d",
                "priority": "high", "dependencies": [], "status": "pending", "acceptance_criteria": []}],
            "quality_gates": {"enabled": false, "gates": []}}),
    );
}

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn check_reports_a_removed_flag_with_the_fix_and_caches_the_result() {
    let repo = init_repo();
    let dir = repo.path();
    let bin = fake_bin(dir);
    agents(dir, &["exec", "--json", "--full-auto", "{prompt}"]);
    let out = cascade(dir)
        .env("PATH", &bin)
        .args(["agents", "check", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(&out);
    assert_eq!(v["passed"], false);
    let codex = &v["agents"][0];
    assert_eq!(codex["agent"], "codex");
    assert_eq!(codex["status"], "failed");
    assert_eq!(codex["version"], "codex-cli 0.169.0");
    let p = &codex["problems"][0];
    assert_eq!(p["kind"], "missing_flag");
    assert!(
        p["message"].as_str().unwrap().contains("--full-auto"),
        "{p}"
    );
    assert!(
        p["fix"].as_str().unwrap().contains("codex exec --help"),
        "{p}"
    );
    // The backup script is not a CLI cascade knows: checked, never fatal.
    assert_ne!(v["agents"][1]["status"], "failed");

    // Second time: from the cache, same answer.
    let out = cascade(dir)
        .env("PATH", &bin)
        .args(["agents", "check", "--json"])
        .output()
        .unwrap();
    let v = json_of(&out);
    assert_eq!(v["agents"][0]["cached"], true);
    assert_eq!(v["agents"][0]["status"], "failed");

    // Today's argv passes.
    agents(
        dir,
        &[
            "exec",
            "--json",
            "--sandbox",
            "workspace-write",
            "--skip-git-repo-check",
            "{prompt}",
        ],
    );
    let out = cascade(dir)
        .env("PATH", &bin)
        .args(["agents", "check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("codex") && text.contains("ok"), "{text}");
}

#[test]
fn a_chosen_agent_failing_its_check_falls_back_or_stops_the_run_with_exit_2() {
    let repo = init_repo();
    let dir = repo.path();
    let bin = fake_bin(dir);
    agents(dir, &["exec", "--json", "--full-auto", "{prompt}"]);
    prd(dir);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "plan"]);

    // --no-fallback: stops before any story, exit 2, with the report.
    let out = cascade(dir)
        .env("PATH", &bin)
        .args(["approve", "--auto-run", "--no-fallback", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--full-auto") && err.contains("agent check"),
        "{err}"
    );
    assert!(!dir.join("codex.txt").exists() && !dir.join("backup.txt").exists());

    // Otherwise: falls back along the chain, saying so.
    let out = cascade(dir)
        .env("PATH", &bin)
        .args(["approve", "--auto-run", "--json", "--retry-delay", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}\n{stdout}");
    assert!(
        err.contains("agent 'codex' failed `cascade agents check`")
            && err.contains("falling back to 'backup'"),
        "{err}"
    );
    assert!(stdout.contains("\"backup\""), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(dir.join("backup.txt")).unwrap(),
        "backup was here\n"
    );
}

#[test]
fn nothing_installed_is_exit_2_for_check_and_approve() {
    let repo = init_repo();
    let dir = repo.path();
    let bin = dir.join("emptybin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["git", "sh"] {
        if let Some(real) = which(tool) {
            std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
        }
    }
    prd(dir);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "plan"]);
    let out = cascade(dir)
        .env("PATH", &bin)
        .args(["agents", "check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("none of the configured agents is installed")
    );
    let out = cascade(dir)
        .env("PATH", &bin)
        .args(["approve", "--auto-run"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no agent available") && err.contains("tried"),
        "{err}"
    );
}

#[test]
fn completions_are_printed_for_every_shell_and_an_unknown_shell_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = cascade(dir.path())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("cascade"), "{shell}");
        // Subcommands and their flags are in the script.
        assert!(
            text.contains("approve") && text.contains("no-fallback"),
            "{shell}"
        );
    }
    let out = cascade(dir.path())
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A claude stub: logged in when ANTHROPIC_API_KEY is set, when
/// `~/.claude/.credentials.json` exists, or when the file named by
/// `$STUB_LOGIN` exists (a login the check's key cannot see); as an
/// agent it writes a file.
const CLAUDE: &str = r#"case "$*" in
  --version) echo "2.1.5 (Claude Code)";;
  --help) printf 'Usage: claude [options]\n  -p, --print\n  --output-format <format>\n';;
  "auth status")
    if [ -n "$ANTHROPIC_API_KEY" ] || [ -f "$HOME/.claude/.credentials.json" ] || { [ -n "$STUB_LOGIN" ] && [ -f "$STUB_LOGIN" ]; }; then
      echo '{"loggedIn": true}'
    else
      echo '{"loggedIn": false}'; exit 1
    fi;;
  -p*) echo "claude was here" > claude.txt; echo done;;
  *) exit 2;;
esac"#;

/// The fake PATH with the claude stub, and an agents.json using only it.
fn claude_only(dir: &Path) -> PathBuf {
    claude_stub(dir, CLAUDE, &["-p", "{prompt}", "--output-format", "text"])
}

/// The fake PATH with `stub` as claude, and an agents.json whose only
/// agent runs it with `args`.
fn claude_stub(dir: &Path, stub: &str, args: &[&str]) -> PathBuf {
    let bin = fake_bin(dir);
    script(&bin.join("claude"), stub);
    write_json(
        &dir.join("agents.json"),
        &json!({
            "default_agent": "claude",
            "agents": {"claude": {"type": "cli", "command": "claude", "timeout": 60, "args": args}}
        }),
    );
    bin
}

/// `agents check --json` for the claude stub: (status, cached).
fn claude_check(dir: &Path, bin: &Path, key: Option<&str>) -> (String, bool) {
    let mut cmd = cascade(dir);
    cmd.env("PATH", bin).env_remove("ANTHROPIC_API_KEY");
    if let Some(key) = key {
        cmd.env("ANTHROPIC_API_KEY", key);
    }
    let out = cmd.args(["agents", "check", "--json"]).output().unwrap();
    let v = json_of(&out);
    let claude = &v["agents"][0];
    assert_eq!(claude["agent"], "claude", "{v}");
    (
        claude["status"].as_str().unwrap_or_default().to_string(),
        claude["cached"] == true,
    )
}

#[test]
fn a_cached_verdict_does_not_survive_logging_out_or_logging_in() {
    let repo = init_repo();
    let dir = repo.path();
    let bin = claude_only(dir);
    let ok = |cached| ("ok".to_string(), cached);
    let failed = |cached| ("failed".to_string(), cached);
    assert_eq!(claude_check(dir, &bin, Some("k1")), ok(false));
    assert_eq!(claude_check(dir, &bin, Some("k1")), ok(true));
    // Logged out: checked again, and the check says so.
    assert_eq!(claude_check(dir, &bin, None), failed(false));
    assert_eq!(claude_check(dir, &bin, None), failed(true));
    // The printed fix applied (a login stored in claude's credentials
    // file): checked again at once, not after an hour.
    std::fs::create_dir_all(dir.join(".claude")).unwrap();
    std::fs::write(dir.join(".claude/.credentials.json"), "{}").unwrap();
    assert_eq!(claude_check(dir, &bin, None), ok(false));
    assert_eq!(claude_check(dir, &bin, None), ok(true));
    std::fs::remove_file(dir.join(".claude/.credentials.json")).unwrap();
    assert_eq!(claude_check(dir, &bin, None), failed(false));
}

#[test]
fn a_cached_failure_is_checked_again_before_it_refuses_a_run() {
    let repo = init_repo();
    let dir = repo.path();
    let bin = claude_only(dir);
    prd(dir);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "plan"]);
    assert_eq!(claude_check(dir, &bin, None), ("failed".to_string(), false));
    // The user logs in where the cache key cannot see it.
    let elsewhere = tempfile::tempdir().unwrap();
    let login = elsewhere.path().join("logged-in");
    std::fs::write(&login, "yes").unwrap();
    let out = cascade(dir)
        .env("PATH", &bin)
        .env_remove("ANTHROPIC_API_KEY")
        .env("STUB_LOGIN", &login)
        .args([
            "approve",
            "--auto-run",
            "--no-fallback",
            "--json",
            "--retry-delay",
            "0",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("claude.txt")).unwrap(),
        "claude was here\n"
    );
    // The fresh verdict is what the cache holds now.
    let v: Value =
        serde_json::from_slice(&std::fs::read(dir.join(".cascade/agent-checks.json")).unwrap())
            .unwrap();
    assert_eq!(v["agents"]["claude"]["check"]["status"], "ok", "{v}");
}

/// A claude stub shaped like Claude Code's commander parser: `--help` and
/// `--version` win wherever they are on the line (and `--help` does not
/// list `--verbose`), `--verbose` is refused when the argv is parsed, and
/// anything that gets past the parser would call a model (noted in
/// `model-called` next to the script, and writes the story's file).
const CLAUDE_STRICT: &str = r#"for a in "$@"; do
  case "$a" in
    --version) echo "2.1.197 (Claude Code)"; exit 0;;
    --help) printf 'Usage: claude [options] [prompt]\n  -p, --print\n  --output-format <format>\n'; exit 0;;
  esac
done
case "$*" in "auth status") echo '{"loggedIn": true}'; exit 0;; esac
for a in "$@"; do
  case "$a" in
    --verbose) echo "error: unknown option '--verbose'" >&2; exit 1;;
  esac
done
touch "$(dirname "$0")/model-called"
echo "claude was here" > claude.txt"#;

/// Issue 45 item 6, the probe end to end: a flag agents.json passes that
/// claude's `--help` does not list and its parser rejects fails `agents
/// check` naming the flag and the fix, and refuses the run before any
/// story starts; the probe itself never gets past the parser.
#[test]
fn a_flag_claude_rejects_at_parse_time_fails_the_check_and_refuses_approve() {
    let repo = init_repo();
    let dir = repo.path();
    let bin = claude_stub(
        dir,
        CLAUDE_STRICT,
        &["-p", "{prompt}", "--output-format", "text", "--verbose"],
    );
    prd(dir);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "plan"]);

    let out = cascade(dir)
        .env("PATH", &bin)
        .args(["agents", "check", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let v = json_of(&out);
    assert_eq!(v["passed"], false, "{v}");
    let claude = &v["agents"][0];
    assert_eq!(claude["agent"], "claude", "{v}");
    assert_eq!(claude["status"], "failed", "{v}");
    let problems = claude["problems"].as_array().cloned().unwrap_or_default();
    let p = problems
        .iter()
        .find(|p| p["kind"] == "missing_flag")
        .unwrap_or_else(|| panic!("no missing_flag: {v}"));
    let message = p["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("--verbose") && message.contains("unknown option '--verbose'"),
        "the flag, in the CLI's own words: {message}"
    );
    let fix = p["fix"].as_str().unwrap_or_default();
    assert!(
        fix.contains("agents.json") && fix.contains("claude --help"),
        "{fix}"
    );
    // The same in the text report.
    let out = cascade(dir)
        .env("PATH", &bin)
        .args(["agents", "check", "--refresh"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("--verbose") && text.contains("agents.json"),
        "{text}"
    );

    // The run is refused (exit 2) before any story starts.
    let out = cascade(dir)
        .env("PATH", &bin)
        .args(["approve", "--auto-run", "--json", "--retry-delay", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    assert!(err.contains("--verbose"), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("\"story_started\""), "{stdout}");
    assert!(!dir.join("claude.txt").exists());
    assert!(
        !bin.join("model-called").exists(),
        "a probe or a story got past claude's parser"
    );
}
