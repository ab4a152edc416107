//! Check tests with scripted CLIs: a clap-like one that rejects unknown
//! flags, a help text shaped like codex 0.169's, and the cache.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn def(name: &str, command: &str, args: &[&str]) -> AgentDef {
    AgentDef {
        timeout_secs: Some(60),
        ..AgentDef::test_cli(name, command, args)
    }
}

/// A fake `codex`: `--version`, `exec --help` listing today's flags, and
/// clap's rejection of anything else.
fn fake_codex(dir: &Path) -> PathBuf {
    let path = dir.join("codex");
    std::fs::write(
        &path,
        r#"#!/bin/sh
case "$*" in
  --version) echo "codex-cli 0.169.0";;
  "exec --help") printf 'Usage: codex exec [OPTIONS] [PROMPT]\n\nOptions:\n  -s, --sandbox <SANDBOX_MODE>\n      --skip-git-repo-check\n      --json\n          Print events to stdout as JSONL\n  -h, --help\n';;
  "exec resume --help") printf 'Usage: codex exec resume [OPTIONS] [SESSION_ID] [PROMPT]\n  -c, --config <key=value>\n      --json\n';;
  "login status") echo "Logged in using an API key"; exit 0;;
  exec\ --full-auto*) printf "error: unexpected argument '--full-auto' found\n" >&2; exit 2;;
  *) echo "unexpected call: $*" >&2; exit 2;;
esac
"#,
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn argv_splits_into_subcommands_and_flags() {
    let argv: Vec<String> = [
        "exec",
        "resume",
        "--json",
        "-c",
        "sandbox_mode=\"x\"",
        "{session_id}",
        "{prompt}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (subs, flags) = split_argv(&argv);
    assert_eq!(subs, ["exec", "resume"]);
    assert_eq!(flags, ["--json", "-c"]);
    let (subs, flags) = split_argv(&[
        "-p".into(),
        "{prompt}".into(),
        "--output-format=json".into(),
    ]);
    assert!(subs.is_empty());
    assert_eq!(flags, ["-p", "--output-format"]);
}

#[test]
fn flags_are_matched_as_whole_words() {
    let help = "  -p, --print   Print\n  --output-format <format>\n  [--yolo]\n  --jsonl\n";
    assert!(flag_listed(help, "-p"));
    assert!(flag_listed(help, "--print"));
    assert!(flag_listed(help, "--output-format"));
    assert!(flag_listed(help, "--yolo"));
    assert!(!flag_listed(help, "--json"), "--jsonl is another flag");
    assert!(!flag_listed(help, "--out"));
}

#[test]
fn version_numbers_of_the_real_clis() {
    assert_eq!(
        version_number("2.1.197 (Claude Code)").as_deref(),
        Some("2.1.197")
    );
    assert_eq!(
        version_number("codex-cli 0.169.0").as_deref(),
        Some("0.169.0")
    );
    assert_eq!(version_number("0.61.0").as_deref(), Some("0.61.0"));
    assert_eq!(
        version_number("0.0.1790142911-g7618fb (released 2026-09-23T05:55:11.000Z, 2mo ago)")
            .as_deref(),
        Some("0.0.1790142911")
    );
    assert_eq!(version_number("aider v0.86.1").as_deref(), Some("0.86.1"));
    assert_eq!(version_number("hello world"), None);
}

#[tokio::test]
async fn a_removed_flag_fails_the_check_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let codex = fake_codex(dir.path());
    let old = def(
        "codex",
        "codex",
        &["exec", "--json", "--full-auto", "{prompt}"],
    );
    let check = check_agent(&old, Some(&codex), &CancelToken::new()).await;
    assert_eq!(check.status, CheckStatus::Failed, "{check:#?}");
    assert_eq!(check.version.as_deref(), Some("codex-cli 0.169.0"));
    let p = check
        .problems
        .iter()
        .find(|p| p.kind == ProblemKind::MissingFlag)
        .unwrap();
    assert!(
        p.message.contains("--full-auto") && p.message.contains("codex exec"),
        "{}",
        p.message
    );
    assert!(p.fix.as_deref().unwrap().contains("codex exec --help"));
    assert!(check.summary().contains("--full-auto"));

    let mut new = def(
        "codex",
        "codex",
        &[
            "exec",
            "--json",
            "--sandbox",
            "workspace-write",
            "--skip-git-repo-check",
            "{prompt}",
        ],
    );
    new.resume_args = Some(
        [
            "exec",
            "resume",
            "--json",
            "-c",
            "k=v",
            "{session_id}",
            "{prompt}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    new.env = vec![("OPENAI_API_KEY".into(), "sk-test".into())];
    let check = check_agent(&new, Some(&codex), &CancelToken::new()).await;
    assert_eq!(check.status, CheckStatus::Ok, "{check:#?}");
}

#[tokio::test]
async fn missing_agents_are_reported_not_failed() {
    let check = check_agent(&def("amp-code", "amp", &["-x"]), None, &CancelToken::new()).await;
    assert_eq!(check.status, CheckStatus::Missing);
    assert!(!check.failed());
    assert!(check.problems[0]
        .fix
        .as_deref()
        .unwrap()
        .contains("@sourcegraph/amp"));
}

#[tokio::test]
async fn results_are_cached_per_binary_and_definition_and_read_by_the_detector() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let codex = fake_codex(&bin);
    let cascade = dir.path().join(".cascade");
    let cache = CheckCache::new(&cascade);
    let old = def(
        "codex",
        "codex",
        &["exec", "--json", "--full-auto", "{prompt}"],
    );
    let defs = vec![(old.clone(), Some(codex.clone()))];
    let first = check_agents(&defs, Some(&cache), false, &CancelToken::new()).await;
    assert!(!first[0].cached && first[0].failed());
    let second = check_agents(&defs, Some(&cache), false, &CancelToken::new()).await;
    assert!(
        second[0].cached,
        "unchanged binary and argv: from the cache"
    );
    assert_eq!(second[0].problems, first[0].problems);

    // The detector (as the engine builds it) sees the failure...
    let det = crate::Detector::with_path(bin.as_os_str(), dir.path()).cache_dir(&cascade);
    assert!(det.check_failure(&old).unwrap().contains("--full-auto"));
    // ...but not for a corrected definition, which is checked anew.
    let mut fixed = old.clone();
    fixed.args = vec!["exec".into(), "--json".into(), "{prompt}".into()];
    assert!(det.check_failure(&fixed).is_none());
    assert!(cache.get(&fixed, &codex).is_none());
}

/// A fake CLI shaped like claude (commander) or gemini (yargs): `--help`
/// and `--version` win wherever they are on the line (so `<flag> --help`
/// proves nothing), an unknown flag is refused when the argv is parsed,
/// an empty prompt stops it right after parsing, and anything else would
/// call a model (noted in `model-called` next to the script).
fn fake_parsing_cli(dir: &Path, name: &str, version: &str, refusal: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            r#"#!/bin/sh
case "$*" in "auth status") echo '{{"loggedIn": true}}'; exit 0;; esac
for a in "$@"; do
  case "$a" in
    --version) echo "{version}"; exit 0;;
    --help) printf 'Usage: {name} [options] [prompt]\n  -p, --prompt <text>\n  --output-format <format>\n'; exit 0;;
  esac
done
prompt=""; prev=""
for a in "$@"; do
  case "$a" in
    -p|--prompt|--output-format|--hidden-ok) ;;
    -*) f="${{a#--}}"; echo "{refusal}" >&2; exit 1;;
    *) case "$prev" in -p|--prompt) prompt="$a";; esac;;
  esac
  prev="$a"
done
if [ -z "$prompt" ]; then echo "Error: Input must be provided either through stdin or as a prompt argument" >&2; exit 1; fi
touch "$(dirname "$0")/model-called"
"#
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn a_flag_claude_and_gemini_reject_at_run_time_fails_the_check_without_calling_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let claude = fake_parsing_cli(
        dir.path(),
        "claude",
        "2.1.197 (Claude Code)",
        "error: unknown option '$a'",
    );
    let gemini = fake_parsing_cli(dir.path(), "gemini", "0.61.0", "Unknown argument: $f");
    for (command, path) in [("claude", &claude), ("gemini", &gemini)] {
        let mut gone = def(
            command,
            command,
            &["-p", "{prompt}", "--output-format", "json", "--gone"],
        );
        gone.env = vec![("GEMINI_API_KEY".into(), "k".into())];
        let check = check_agent(&gone, Some(path), &CancelToken::new()).await;
        assert_eq!(check.status, CheckStatus::Failed, "{check:#?}");
        let p = check
            .problems
            .iter()
            .find(|p| p.kind == ProblemKind::MissingFlag)
            .unwrap_or_else(|| panic!("{check:#?}"));
        assert!(
            p.message.contains("--gone") && p.message.contains("(in args)"),
            "{}",
            p.message
        );
        assert!(
            p.message.to_ascii_lowercase().contains("unknown"),
            "the CLI's own words: {}",
            p.message
        );
        assert!(p.fix.as_deref().unwrap().contains("agents.json"), "{p:?}");

        // A flag the help hides but the parser accepts: verified, no note.
        let mut hidden = def(
            command,
            command,
            &["-p", "{prompt}", "--output-format", "json", "--hidden-ok"],
        );
        hidden.env = gone.env.clone();
        let check = check_agent(&hidden, Some(path), &CancelToken::new()).await;
        assert_eq!(check.status, CheckStatus::Ok, "{check:#?}");
    }
    assert!(
        !dir.path().join("model-called").exists(),
        "a probe called a model"
    );
}

#[test]
fn inert_argv_fills_placeholders_with_values_that_stop_the_cli_early() {
    let argv: Vec<String> = [
        "-p",
        "{prompt}",
        "--resume",
        "{session_id}",
        "--cwd={working_dir}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let scratch = tempfile::tempdir().unwrap();
    let filled = inert_argv(&argv, scratch.path());
    let dir = scratch.path().display().to_string();
    assert_eq!(
        filled,
        [
            "-p",
            "",
            "--resume",
            "00000000-0000-0000-0000-000000000000",
            &format!("--cwd={dir}")
        ]
    );
}
