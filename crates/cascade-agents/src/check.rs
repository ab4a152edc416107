//! `cascade agents check`: does an installed agent CLI accept the argv
//! agents.json gives it, which version is it, and can it log in?
//!
//! For one agent: `<command> --version`; `<command> [subcommands] --help` for
//! `args` and for `resume_args` (the leading literal words of an argv are its
//! subcommands: `codex exec --help`, `codex exec resume --help`); every flag
//! of the argv must appear in that help. A flag the help does not list is
//! probed: a CLI that rejects it ("unexpected argument", "unknown option")
//! has lost it (codex 0.169 and `--full-auto`), which fails the check with
//! the fix. clap CLIs (codex) are asked `<command> [subcommands] <flag>
//! --help`; claude and gemini answer `--help` whatever else is on the line,
//! so they are given the argv itself with an empty prompt, which they refuse
//! right after parsing their flags, before any model call. Where no probe
//! can tell (amp's hidden `--dangerously-allow-all`), an unlisted flag is a
//! warning, not a failure. Login is
//! checked where the CLI can tell without a network call (`claude auth
//! status`, `codex login status`, gemini's auth env or settings), and claude's
//! refusal of `--dangerously-skip-permissions` as root without IS_SANDBOX=1.
//!
//! Every child runs under `cascade-process` (own process group, timeout) in
//! an empty scratch directory. Results are cached in
//! `.cascade/agent-checks.json`, keyed by the agent, its argv and env, the
//! installed binary (resolved path, size, modification time) and what its
//! login depends on (the auth environment and the CLI's credential files'
//! modification times, see [`auth`]), so a second run costs a few `stat`s
//! per agent; an upgrade, an agents.json edit, logging out or logging in
//! checks again. Failed checks are kept there too: [`crate::Detector`] reads them so
//! that every resolver falls back from an agent that failed its check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use cascade_process::{CancelToken, Spec};
use serde::{Deserialize, Serialize};

use crate::config::AgentDef;
use crate::watch::CliFamily;

mod auth;

/// Name of the check cache inside `.cascade/`.
pub const CHECK_FILE: &str = "agent-checks.json";
const CHECK_VERSION: u32 = 1;
/// How long one `--version` / `--help` / login probe may take (node CLIs
/// take a few seconds on a cold start, many more on a loaded machine).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);
/// Agents checked at the same time: node CLIs are CPU-heavy to start, and
/// seven at once on a small machine push each past its timeout.
const PARALLEL_CHECKS: usize = 3;

/// The releases the shipped argv was checked against (`--version` major and
/// minor): another version works too, but is reported as untested.
const TESTED: &[(CliFamily, &str)] = &[
    (CliFamily::Claude, "2.1"),
    (CliFamily::Codex, "0.169"),
    (CliFamily::Gemini, "0.61"),
];

/// Overall result of one agent's check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Everything verified.
    Ok,
    /// Usable, with something the user should know (untested version,
    /// a flag the help does not list, login not verifiable).
    Warning,
    /// The agent will not work as configured.
    Failed,
    /// The command is not installed.
    Missing,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Warning => "warning",
            CheckStatus::Failed => "failed",
            CheckStatus::Missing => "missing",
        }
    }
}

/// What a problem is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    NotInstalled,
    MissingFlag,
    UnlistedFlag,
    UnknownVersion,
    UntestedVersion,
    HelpFailed,
    Login,
    Root,
    /// An api agent's key variable is not set.
    ApiKey,
    /// An api agent's server did not answer as expected.
    Server,
}

/// One finding of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckProblem {
    pub kind: ProblemKind,
    /// Whether it makes the agent unusable (else a warning).
    pub fatal: bool,
    pub message: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// The check of one agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCheck {
    pub agent: String,
    pub command: String,
    pub path: Option<PathBuf>,
    pub version: Option<String>,
    pub status: CheckStatus,
    pub problems: Vec<CheckProblem>,
    /// Answered from `.cascade/agent-checks.json`.
    #[serde(default)]
    pub cached: bool,
}

impl AgentCheck {
    /// The agent cannot be used as configured (installed but failing).
    pub fn failed(&self) -> bool {
        self.status == CheckStatus::Failed
    }

    /// One line naming the fatal problems (for fallbacks and errors).
    pub fn summary(&self) -> String {
        let fatal: Vec<String> = self
            .problems
            .iter()
            .filter(|p| p.fatal)
            .map(|p| match &p.fix {
                Some(fix) => format!("{} ({fix})", p.message),
                None => p.message.clone(),
            })
            .collect();
        if fatal.is_empty() {
            self.status.as_str().to_string()
        } else {
            format!("failed `cascade agents check`: {}", fatal.join("; "))
        }
    }

    pub(crate) fn finish(mut self) -> AgentCheck {
        self.status = if self.problems.iter().any(|p| p.fatal) {
            CheckStatus::Failed
        } else if self.problems.is_empty() {
            CheckStatus::Ok
        } else {
            CheckStatus::Warning
        };
        self
    }

    pub(crate) fn problem(
        &mut self,
        kind: ProblemKind,
        fatal: bool,
        message: String,
        fix: Option<String>,
    ) {
        self.problems.push(CheckProblem {
            kind,
            fatal,
            message,
            fix,
        });
    }
}

/// Asks for the version with `argv` and records it (and whether it is the
/// one cascade's argv was checked against); `false` when the command did
/// not answer in time (the other probes would not either).
async fn check_version(
    check: &mut AgentCheck,
    probe: &Probe,
    def: &AgentDef,
    family: CliFamily,
    argv: &[String],
) -> bool {
    let shown = format!("{} {}", def.command, argv.join(" "));
    let version = probe.run(argv).await;
    let version_line = version
        .as_ref()
        .filter(|o| o.ok)
        .and_then(|o| first_line(&o.text));
    match version_line.as_deref().and_then(version_number) {
        Some(v) => {
            if let Some((_, tested)) = TESTED.iter().find(|(f, _)| *f == family) {
                let minor = v.split('.').take(2).collect::<Vec<_>>().join(".");
                if minor != *tested {
                    check.problem(
                        ProblemKind::UntestedVersion,
                        false,
                        format!("version {v} is not the one cascade's argv was checked against ({tested}.x)"),
                        Some("the flags below were verified against this version's --help; run `cascade agents check` again after upgrading".to_string()),
                    );
                }
            }
        }
        None => check.problem(
            ProblemKind::UnknownVersion,
            false,
            match (&version_line, &version) {
                (Some(l), _) => format!("`{shown}` printed no version number: {l}"),
                (None, Some(o)) if o.timed_out => format!(
                    "`{shown}` did not answer within {}s (a loaded machine?); run `cascade agents check --refresh` again",
                    PROBE_TIMEOUT.as_secs()
                ),
                (None, _) => format!("`{shown}` failed"),
            },
            None,
        ),
    }
    check.version = version_line;
    // A command that cannot answer --version in time will not answer
    // --help either: do not spend a timeout per probe on it.
    version.as_ref().is_some_and(|o| !o.timed_out)
}

/// Checks one agent whose command was found at `path` (`None`: missing).
pub async fn check_agent(def: &AgentDef, path: Option<&Path>, cancel: &CancelToken) -> AgentCheck {
    if let Some(api) = &def.api {
        return crate::api::check::check(def, api, cancel).await;
    }
    let mut check = AgentCheck {
        agent: def.name.clone(),
        command: def.command.clone(),
        path: path.map(Path::to_path_buf),
        version: None,
        status: CheckStatus::Missing,
        problems: Vec::new(),
        cached: false,
    };
    let Some(path) = path else {
        check.problem(
            ProblemKind::NotInstalled,
            false,
            format!("command '{}' not found on PATH", def.command),
            Some(install_hint(CliFamily::of_command(&def.command)).to_string()),
        );
        return check;
    };
    let scratch = match Scratch::new(&def.name) {
        Ok(d) => d,
        Err(e) => {
            check.problem(
                ProblemKind::HelpFailed,
                false,
                format!("cannot create a scratch directory for the check: {e}"),
                None,
            );
            return check.finish();
        }
    };
    let probe = Probe {
        program: path.to_path_buf(),
        cwd: scratch.0.clone(),
        env: agent_env(def),
        cancel: cancel.clone(),
    };
    let family = CliFamily::of_command(&def.command);

    // Version: only where the definition says how, or a CLI cascade knows
    // (a custom script run with `--version` may do real work instead).
    if let Some(argv) = def.version_probe() {
        if !check_version(&mut check, &probe, def, family, &argv).await {
            return check.finish();
        }
    }

    check_flags(&mut check, &probe, def, family).await;
    login(&mut check, def, family, &probe).await;
    root(&mut check, def, family);
    // Only a CLI that answered `--version` with a version is surely the one
    // these probes understand; for anything else (a wrapper, a test stub)
    // the findings are reported, but do not make the agent unusable.
    if check.version.as_deref().and_then(version_number).is_none() {
        for p in &mut check.problems {
            p.fatal = false;
        }
    }
    check.finish()
}

/// The flags of `args`, `resume_args` and `list_sessions_args`, against
/// the help of their subcommand; a flag the help does not list is probed
/// (see [`probe_unlisted`]).
async fn check_flags(check: &mut AgentCheck, probe: &Probe, def: &AgentDef, family: CliFamily) {
    let mut argvs = vec![("args", &def.args)];
    if let Some(r) = &def.resume_args {
        argvs.push(("resume_args", r));
    }
    if let Some(l) = &def.list_sessions_args {
        argvs.push(("list_sessions_args", l));
    }
    let mut helps: BTreeMap<Vec<String>, Option<String>> = BTreeMap::new();
    for (field, argv) in argvs {
        let (subs, flags) = split_argv(argv);
        if !helps.contains_key(&subs) {
            let mut help_args = subs.clone();
            help_args.push("--help".to_string());
            let out = probe.run(&help_args).await;
            let text = out.filter(|o| o.ok).map(|o| o.text);
            if text.is_none() {
                check.problem(
                    ProblemKind::HelpFailed,
                    false,
                    format!(
                        "`{}` failed, so the flags of {field} could not be verified",
                        shown(&def.command, &help_args)
                    ),
                    None,
                );
            }
            helps.insert(subs.clone(), text);
        }
        let Some(Some(help)) = helps.get(&subs) else {
            continue;
        };
        let unlisted: Vec<String> = flags
            .into_iter()
            .filter(|f| !flag_listed(help, f))
            .collect();
        if !unlisted.is_empty() {
            let cmd = shown(&def.command, &subs);
            probe_unlisted(check, probe, family, field, argv, &cmd, &unlisted).await;
        }
    }
}

/// Flags `unlisted` of `field` (`argv`) that `cmd --help` does not list:
/// rejected (a fatal finding with the fix), accepted (nothing to say), or,
/// where no probe can tell, a warning that the flag may be hidden.
///
/// clap CLIs (codex) reject an unknown flag even before `--help`, so
/// `<cmd> <flag> --help` tells. claude (commander) and gemini (yargs) answer
/// `--help` and `--version` whatever else is on the line, so they are given
/// the argv itself, placeholders filled with inert values ([`inert_argv`]):
/// an empty prompt and an empty stdin make them stop right after parsing
/// their flags ("Input must be provided", "No input provided"), before any
/// model is called, and an unknown flag is refused before that.
async fn probe_unlisted(
    check: &mut AgentCheck,
    probe: &Probe,
    family: CliFamily,
    field: &str,
    argv: &[String],
    cmd: &str,
    unlisted: &[String],
) {
    let whole_argv = matches!(family, CliFamily::Claude | CliFamily::Gemini);
    let mut rejected: Vec<(String, String)> = Vec::new();
    let mut verified = false;
    if whole_argv {
        let inert = inert_argv(argv, &probe.cwd);
        if let Some(out) = probe.run(&inert).await.filter(|o| !o.timed_out) {
            verified = true;
            if says_unknown(&out.text) {
                let said = rejection_line(&out.text);
                // commander names the first unknown option only; a flag the
                // message does not name may be fine, but the argv is not.
                // (yargs names it without its dashes: "Unknown argument: yolo").
                let words = out.text.replace(['\'', '"', '`', ':'], " ");
                let named: Vec<&String> = unlisted
                    .iter()
                    .filter(|f| {
                        flag_listed(&words, f) || flag_listed(&words, f.trim_start_matches('-'))
                    })
                    .collect();
                if named.is_empty() {
                    rejected.push((unlisted.join(" "), said));
                } else {
                    rejected.extend(named.into_iter().map(|f| (f.clone(), said.clone())));
                }
            }
        }
    } else if family != CliFamily::Amp {
        // amp (commander) prints the help whatever else is on the line.
        for flag in unlisted {
            let mut probe_args = split_argv(argv).0;
            probe_args.push(flag.clone());
            probe_args.push("--help".to_string());
            if let Some(out) = probe.run(&probe_args).await {
                if says_unknown(&out.text) {
                    rejected.push((flag.clone(), rejection_line(&out.text)));
                }
            }
        }
    }
    for (flag, said) in &rejected {
        check.problem(
            ProblemKind::MissingFlag,
            true,
            format!("`{cmd}` does not accept {flag} (in {field}): {said}"),
            Some(format!(
                "edit this agent's {field} in agents.json: see `{cmd} --help` for today's flag (or update cascade's agents.json)"
            )),
        );
    }
    if verified || !rejected.is_empty() {
        return;
    }
    for flag in unlisted {
        check.problem(
            ProblemKind::UnlistedFlag,
            false,
            format!("`{cmd} --help` does not list {flag} (in {field}); it may be hidden"),
            None,
        );
    }
}

/// `argv` with its placeholders filled so that the CLI parses every flag
/// and stops there: an empty prompt, an empty prompt file in `scratch`,
/// `scratch` as the working directory, and a session that does not exist.
fn inert_argv(argv: &[String], scratch: &Path) -> Vec<String> {
    let empty_file = scratch.join("prompt.md");
    let _ = std::fs::write(&empty_file, "");
    let (dir, file) = (
        scratch.display().to_string(),
        empty_file.display().to_string(),
    );
    let values = crate::placeholders::Values {
        prompt: "",
        prompt_file: &file,
        working_dir: &dir,
        story_id: "agents-check",
        attempt: "1",
        session_id: "00000000-0000-0000-0000-000000000000",
        session_index: "1",
    };
    argv.iter()
        .map(|a| crate::placeholders::substitute(a, &values))
        .collect()
}

/// The line of a CLI's output that says what it refused.
fn rejection_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| says_unknown(l))
        .unwrap_or("")
        .chars()
        .take(160)
        .collect()
}

/// The argv split into its leading subcommand words and its flags.
/// Placeholders and values are neither.
pub fn split_argv(argv: &[String]) -> (Vec<String>, Vec<String>) {
    let mut subs = Vec::new();
    let mut flags = Vec::new();
    let mut leading = true;
    let mut after_separator = false;
    for a in argv {
        if after_separator {
            continue;
        }
        if a == "--" {
            after_separator = true;
            continue;
        }
        if a.starts_with('-') && a.len() > 1 {
            leading = false;
            let name = a.split('=').next().unwrap_or(a).to_string();
            if !flags.contains(&name) {
                flags.push(name);
            }
        } else if leading && !a.contains('{') && !a.is_empty() && !a.contains(' ') {
            subs.push(a.clone());
        } else {
            leading = false;
        }
    }
    (subs, flags)
}

/// Whether `flag` appears in `help` as a word of its own (`-p, --print`,
/// `--output-format <format>`, `[--yolo]`), not inside a longer flag.
pub fn flag_listed(help: &str, flag: &str) -> bool {
    let bytes = help.as_bytes();
    let mut from = 0;
    while let Some(pos) = help[from..].find(flag) {
        let start = from + pos;
        let end = start + flag.len();
        let before_ok = start == 0
            || matches!(
                bytes[start - 1],
                b' ' | b'\t' | b'\n' | b',' | b'[' | b'(' | b'|' | b'/'
            );
        let after_ok = end == bytes.len()
            || matches!(
                bytes[end],
                b' ' | b'\t'
                    | b'\n'
                    | b'\r'
                    | b','
                    | b'='
                    | b'['
                    | b']'
                    | b'<'
                    | b')'
                    | b'|'
                    | b'.'
            );
        if before_ok && after_ok {
            return true;
        }
        from = start + 1;
    }
    false
}

/// What CLIs print for a flag they do not know (clap, commander, yargs, argparse).
fn says_unknown(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    [
        "unexpected argument",
        "unknown option",
        "unknown argument",
        "unrecognized argument",
        "unrecognized option",
        "no such option",
    ]
    .iter()
    .any(|m| lower.contains(m))
}

/// The first dotted version number in a line (`2.1.197 (Claude Code)`,
/// `codex-cli 0.169.0`, `0.0.1790142911-g7618fb (released ...)`).
pub fn version_number(line: &str) -> Option<String> {
    line.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
        .map(|w| w.trim_start_matches('v'))
        .map(|w| w.rsplit(['-', '/']).find(|p| p.contains('.')).unwrap_or(w))
        .find(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() >= 2
                && parts[..2]
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|w| {
            w.split('-')
                .next()
                .unwrap_or(w)
                .trim_end_matches('.')
                .to_string()
        })
}

fn first_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("WARNING:"))
        .map(|l| l.chars().take(160).collect())
}

fn shown(command: &str, args: &[String]) -> String {
    std::iter::once(command.to_string())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The agent's own `env` (without values that hold per-run placeholders).
fn agent_env(def: &AgentDef) -> Vec<(String, String)> {
    def.env
        .iter()
        .filter(|(_, v)| !v.contains('{'))
        .cloned()
        .collect()
}

fn env_set(def: &AgentDef, names: &[&str]) -> Option<String> {
    names
        .iter()
        .find(|n| {
            def.env.iter().any(|(k, v)| k == *n && !v.is_empty())
                || std::env::var_os(n).is_some_and(|v| !v.is_empty())
        })
        .map(|n| n.to_string())
}

async fn login(check: &mut AgentCheck, def: &AgentDef, family: CliFamily, probe: &Probe) {
    let advice = family.auth_advice().to_string();
    match family {
        CliFamily::Claude => {
            let out = probe.run(&["auth".to_string(), "status".to_string()]).await;
            let Some(out) = out else { return };
            let json = out
                .text
                .find('{')
                .and_then(|i| serde_json::from_str::<serde_json::Value>(&out.text[i..]).ok());
            match json.and_then(|j| j.get("loggedIn").and_then(serde_json::Value::as_bool)) {
                Some(true) => {}
                Some(false) => check.problem(
                    ProblemKind::Login,
                    true,
                    "`claude auth status`: not logged in and no API key".to_string(),
                    Some(advice),
                ),
                None => check.problem(
                    ProblemKind::Login,
                    false,
                    "`claude auth status` gave no answer; login not verified".to_string(),
                    None,
                ),
            }
        }
        CliFamily::Codex => {
            if env_set(def, &["OPENAI_API_KEY", "CODEX_API_KEY"]).is_some() {
                return;
            }
            let out = probe
                .run(&["login".to_string(), "status".to_string()])
                .await;
            if let Some(out) = out {
                if !out.ok {
                    check.problem(
                        ProblemKind::Login,
                        true,
                        format!(
                            "`codex login status`: {}",
                            first_line(&out.text).unwrap_or_else(|| "not logged in".to_string())
                        ),
                        Some(advice),
                    );
                }
            }
        }
        CliFamily::Gemini => {
            let env = [
                "GEMINI_API_KEY",
                "GOOGLE_API_KEY",
                "GOOGLE_GENAI_USE_VERTEXAI",
                "GOOGLE_GENAI_USE_GCA",
                "GOOGLE_CLOUD_PROJECT",
            ];
            if env_set(def, &env).is_some() {
                return;
            }
            let settings = std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".gemini").join("settings.json"));
            let chosen = settings
                .and_then(|p| std::fs::read_to_string(p).ok())
                .is_some_and(|s| s.contains("selectedType"));
            if !chosen {
                check.problem(
                    ProblemKind::Login,
                    true,
                    "no gemini auth method: no GEMINI_API_KEY / GOOGLE_API_KEY / Vertex AI variables and none chosen in ~/.gemini/settings.json".to_string(),
                    Some(advice),
                );
            }
        }
        CliFamily::Amp => {
            if env_set(def, &["AMP_API_KEY"]).is_none() {
                check.problem(
                    ProblemKind::Login,
                    false,
                    "AMP_API_KEY is not set; amp will use a stored login if there is one (not verified), else start an interactive login, which cascade stops as `auth`".to_string(),
                    Some(advice),
                );
            }
        }
        CliFamily::Cursor => {
            if env_set(def, &["CURSOR_API_KEY"]).is_none() {
                check.problem(
                    ProblemKind::Login,
                    false,
                    "CURSOR_API_KEY is not set; cursor-agent will use a stored login if there is one (not verified)".to_string(),
                    Some(advice),
                );
            }
        }
        CliFamily::Aider | CliFamily::Other => {}
    }
}

/// claude refuses `--dangerously-skip-permissions` as root unless IS_SANDBOX=1.
fn root(check: &mut AgentCheck, def: &AgentDef, family: CliFamily) {
    let skips = def
        .args
        .iter()
        .chain(def.resume_args.iter().flatten())
        .any(|a| a == "--dangerously-skip-permissions");
    // SAFETY: geteuid has no preconditions and cannot fail.
    let is_root = unsafe { libc::geteuid() } == 0;
    // claude accepts exactly "1" (the agent's env wins over cascade's own).
    let sandbox = def
        .env
        .iter()
        .find(|(k, _)| k == "IS_SANDBOX")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("IS_SANDBOX").ok());
    if family == CliFamily::Claude && skips && is_root && sandbox.as_deref() != Some("1") {
        check.problem(
            ProblemKind::Root,
            true,
            format!(
                "running as root: claude refuses --dangerously-skip-permissions unless IS_SANDBOX=1{}",
                match &sandbox {
                    Some(v) => format!(" (it is {v:?})"),
                    None => String::new(),
                }
            ),
            Some("set \"IS_SANDBOX\": \"1\" in this agent's \"env\" in agents.json (only in a container or VM you trust), or run cascade as a normal user".to_string()),
        );
    }
}

fn install_hint(family: CliFamily) -> &'static str {
    match family {
        CliFamily::Claude => "npm install -g @anthropic-ai/claude-code",
        CliFamily::Codex => "npm install -g @openai/codex",
        CliFamily::Gemini => "npm install -g @google/gemini-cli",
        CliFamily::Amp => "npm install -g @sourcegraph/amp",
        CliFamily::Aider => {
            "python -m pip install aider-install && aider-install (or pipx install aider-chat)"
        }
        CliFamily::Cursor => {
            "curl https://cursor.com/install -fsS | bash (see docs/agents/cursor-agent.md)"
        }
        CliFamily::Other => "install it, or point this agent's command in agents.json at it",
    }
}

/// An empty directory the probes run in (a command that does not
/// understand `--help` may do real work: not in the user's checkout).
struct Scratch(PathBuf);

impl Scratch {
    fn new(agent: &str) -> std::io::Result<Scratch> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let safe: String = agent
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let dir = std::env::temp_dir().join(format!(
            "cascade-agent-check-{}-{safe}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the agent's program with some arguments, briefly.
struct Probe {
    program: PathBuf,
    cwd: PathBuf,
    env: Vec<(String, String)>,
    cancel: CancelToken,
}

struct ProbeOutput {
    ok: bool,
    timed_out: bool,
    /// stdout then stderr.
    text: String,
}

impl Probe {
    async fn run(&self, args: &[String]) -> Option<ProbeOutput> {
        let mut spec = Spec::new(self.program.as_os_str())
            .args(args)
            .cwd(&self.cwd)
            .timeout(PROBE_TIMEOUT)
            .grace(Duration::from_millis(300))
            .tail_bytes(256 * 1024);
        for (k, v) in &self.env {
            spec = spec.env(k, v);
        }
        let outcome = spec.run(&self.cancel).await.ok()?;
        let mut text = outcome.stdout.text_lossy();
        text.push('\n');
        text.push_str(&outcome.stderr.text_lossy());
        Some(ProbeOutput {
            ok: outcome.success(),
            timed_out: outcome.timed_out,
            text,
        })
    }
}

/// What identifies a checked agent: its definition, the installed binary
/// and its login inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckKey {
    pub agent_hash: String,
    pub path: PathBuf,
    pub size: u64,
    pub mtime_ns: u128,
    /// [`auth::fingerprint`]; absent in caches written before it existed,
    /// which therefore never match.
    #[serde(default)]
    pub auth: String,
}

impl CheckKey {
    /// The key of `def` installed at `path` (`None`: cannot stat it).
    pub fn of(def: &AgentDef, path: &Path) -> Option<CheckKey> {
        let real = std::fs::canonicalize(path).ok()?;
        let meta = std::fs::metadata(&real).ok()?;
        let mtime_ns = meta
            .modified()
            .ok()?
            .duration_since(UNIX_EPOCH)
            .ok()?
            .as_nanos();
        Some(CheckKey {
            agent_hash: agent_hash(def),
            path: real,
            size: meta.len(),
            mtime_ns,
            auth: auth::fingerprint(def, |name| std::env::var(name).ok()),
        })
    }
}

/// A stable hash of what the check depends on in the definition (FNV-1a:
/// no dependency, and only equality matters).
fn agent_hash(def: &AgentDef) -> String {
    let text = serde_json::json!({
        "command": def.command,
        "args": def.args,
        "resume_args": def.resume_args,
        "list_sessions_args": def.list_sessions_args,
        "env": def.env,
    })
    .to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    #[serde(default)]
    agents: BTreeMap<String, CachedCheck>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CachedCheck {
    key: CheckKey,
    check: AgentCheck,
}

/// The check cache in a `.cascade/` directory.
#[derive(Debug, Clone)]
pub struct CheckCache {
    file: PathBuf,
    /// False: [`CheckCache::put`] keeps nothing (a dry run writes nothing).
    writes: bool,
}

impl CheckCache {
    pub fn new(cascade_dir: &Path) -> CheckCache {
        CheckCache {
            file: cascade_dir.join(CHECK_FILE),
            writes: true,
        }
    }

    /// The same cache, only read.
    pub fn read_only(self) -> CheckCache {
        CheckCache {
            writes: false,
            ..self
        }
    }

    fn load(&self) -> CacheFile {
        std::fs::read(&self.file)
            .ok()
            .and_then(|b| serde_json::from_slice::<CacheFile>(&b).ok())
            .filter(|c| c.version == CHECK_VERSION)
            .unwrap_or_default()
    }

    /// The cached check of `def` at `path`, if the binary and definition are unchanged.
    pub fn get(&self, def: &AgentDef, path: &Path) -> Option<AgentCheck> {
        let key = CheckKey::of(def, path)?;
        let cached = self.load().agents.remove(&def.name)?;
        (cached.key == key).then_some(AgentCheck {
            cached: true,
            ..cached.check
        })
    }

    /// Stores `check` (atomically; a failure to write only costs the cache).
    pub fn put(&self, def: &AgentDef, check: &AgentCheck) {
        if !self.writes {
            return;
        }
        let Some(path) = &check.path else { return };
        let Some(key) = CheckKey::of(def, path) else {
            return;
        };
        let mut file = self.load();
        file.version = CHECK_VERSION;
        file.agents.insert(
            def.name.clone(),
            CachedCheck {
                key,
                check: AgentCheck {
                    cached: false,
                    ..check.clone()
                },
            },
        );
        if let Ok(bytes) = serde_json::to_vec_pretty(&file) {
            let _ = cascade_fs::write_atomic(&self.file, &bytes, cascade_fs::Durability::Synced);
        }
    }

    /// Why `def` (installed at `path`) failed its last check, if it did and
    /// nothing changed since.
    pub fn failure(&self, def: &AgentDef, path: &Path) -> Option<String> {
        self.get(def, path)
            .filter(AgentCheck::failed)
            .map(|c| c.summary())
    }
}

/// Checks `defs` (with their found paths), in parallel, answering from the
/// cache in `cascade_dir` when the binary and definition are unchanged
/// (`refresh`: check anyway), and storing new results there.
pub async fn check_agents(
    defs: &[(AgentDef, Option<PathBuf>)],
    cache: Option<&CheckCache>,
    refresh: bool,
    cancel: &CancelToken,
) -> Vec<AgentCheck> {
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(PARALLEL_CHECKS));
    let mut tasks = Vec::new();
    for (def, path) in defs {
        if let (Some(cache), Some(path), false) = (cache, path, refresh) {
            if let Some(hit) = cache.get(def, path) {
                tasks.push(tokio::spawn(async move { hit }));
                continue;
            }
        }
        let def = def.clone();
        let path = path.clone();
        let cancel = cancel.clone();
        let cache = cache.cloned();
        let limit = std::sync::Arc::clone(&limit);
        tasks.push(tokio::spawn(async move {
            let _slot = limit.acquire_owned().await.ok();
            let check = check_agent(&def, path.as_deref(), &cancel).await;
            if let Some(cache) = cache {
                if check.status != CheckStatus::Missing && !cancel.is_cancelled() {
                    cache.put(&def, &check);
                }
            }
            check
        }));
    }
    let mut out = Vec::new();
    for (task, (def, path)) in tasks.into_iter().zip(defs) {
        out.push(task.await.unwrap_or_else(|_| AgentCheck {
            agent: def.name.clone(),
            command: def.command.clone(),
            path: path.clone(),
            version: None,
            status: CheckStatus::Warning,
            problems: vec![CheckProblem {
                kind: ProblemKind::HelpFailed,
                fatal: false,
                message: "the check itself failed".to_string(),
                fix: None,
            }],
            cached: false,
        }));
    }
    out
}

#[cfg(test)]
mod tests;
