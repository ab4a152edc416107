//! `cascade sandbox check [--story ID] [--json]`: the confinement a story's
//! processes would get here (mode, Landlock ABI, writable and hidden paths,
//! the agent's ports), then the same policy tried live: confined children
//! (this binary's hidden `__sandbox-probe`) write into the worktree, write
//! outside it, read a hidden file, connect from the agent's policy to a
//! port it names and to one it does not, and connect out from a gate's
//! policy; each is reported allowed or blocked beside what the policy says.
//!
//! The policy is built as an attempt builds it (`.cascade/config.json`'s
//! `sandbox` at HEAD, the agent's `sandbox` from agents.json) around a
//! scratch directory standing in for the story's worktree, so nothing of
//! the repository is touched but a probe file under `.cascade/`, removed
//! again. Exit 0 when every probe came out as the policy says, 1 when one
//! did not (an escape the policy should block went through), 2 for bad
//! input (an unknown story, a bad configuration).

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use cascade_agents::{AgentSandbox, AgentsConfig};
use cascade_engine::confine::{self, AttemptSandbox, SandboxMode};
use cascade_process::sandbox::{self, Policy};
use cascade_process::{CancelToken, Spec};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;

use super::{CliResult, Failure, Global, EXIT_FAILED, EXIT_OK};

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Print the confinement policy in effect for a story and try it with confined children
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The story whose policy to show (its agent's additions); default: the run's defaults
    #[arg(long, value_name = "ID")]
    pub story: Option<String>,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// The PRD holding --story
    #[arg(long, value_name = "PATH", default_value = "prd.json")]
    pub prd: PathBuf,
}

/// What a probe child tries.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeKind {
    /// Create (then remove) the file TARGET.
    Write,
    /// Read the file TARGET.
    Read,
    /// Open a TCP connection to TARGET (`host:port`).
    Connect,
}

/// `cascade __sandbox-probe KIND TARGET` (what `sandbox check` spawns confined).
#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[arg(value_enum)]
    pub kind: ProbeKind,
    pub target: String,
}

/// The probe's exit code for a connection refused: the connect reached
/// the port (nothing listens there), so no sandbox stopped it.
const REFUSED: u8 = 3;

/// The hidden probe: exit 0 when the operation succeeded, 1 (with the
/// error on stderr) when it did not, [`REFUSED`] when a connect was refused.
pub fn probe(_g: &Global, a: ProbeArgs) -> CliResult {
    let done = match a.kind {
        ProbeKind::Write => {
            std::fs::write(&a.target, b"probe\n").and_then(|()| std::fs::remove_file(&a.target))
        }
        ProbeKind::Read => std::fs::read(&a.target).map(drop),
        ProbeKind::Connect => a
            .target
            .parse()
            .map_err(std::io::Error::other)
            .and_then(|addr| {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)).map(drop)
            }),
    };
    match done {
        Ok(()) => Ok(EXIT_OK),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            errln!("{e}");
            Ok(REFUSED)
        }
        Err(e) => {
            errln!("{e}");
            Ok(EXIT_FAILED)
        }
    }
}

#[derive(Serialize)]
struct Report {
    /// `required`, `best-effort` or `off`.
    mode: &'static str,
    /// Where the mode came from.
    mode_from: &'static str,
    /// The Landlock ABI this kernel enforces (0: none).
    landlock_abi: i32,
    /// What confines a story's processes here ("landlock abi 7" or "none").
    confinement: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    story: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
    /// The scratch directory standing in for the story's worktree.
    worktree: PathBuf,
    writable: Vec<PathBuf>,
    hidden: Vec<PathBuf>,
    /// The TCP ports the agent may connect to (its definition's
    /// `net_ports`, else 443, and a proxy's).
    agent_ports: Vec<u16>,
    /// Whether this kernel holds agents to those ports (Landlock ABI 4).
    agent_ports_enforced: bool,
    /// Whether gates run in a network namespace of their own.
    gate_network_isolated: bool,
    notes: Vec<String>,
    probes: Vec<Probe>,
    /// Every probe came out as the policy says.
    enforced: bool,
}

#[derive(Serialize)]
struct Probe {
    name: &'static str,
    kind: ProbeKind,
    target: String,
    /// `blocked` or `allowed`: what the policy says.
    expected: &'static str,
    /// `blocked`, `allowed`, or `skipped` (nothing to try it on).
    result: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    detail: String,
}

/// The story (if any) and its agent's sandbox additions.
struct Subject {
    story: Option<String>,
    agent: Option<String>,
    sandbox: AgentSandbox,
}

pub fn run(g: &Global, c: SandboxCommand) -> CliResult {
    match c {
        SandboxCommand::Check(a) => check(g, a),
    }
}

/// `.cascade/config.json`'s `sandbox` section at HEAD of the repository
/// holding `cwd` (else its untracked copy, as for every judging file).
pub(super) fn settings_at_head(cwd: &Path) -> Result<confine::SandboxSettings, Failure> {
    let paths = cascade_git::RepoPaths::discover(cwd).map_err(Failure::usage)?;
    cascade_engine::judging::Judging::new(&paths, cwd, None)
        .and_then(|j| j.sandbox_at("HEAD"))
        .map_err(Failure::usage)
}

fn check(g: &Global, a: CheckArgs) -> CliResult {
    let cwd = std::env::current_dir().map_err(Failure::failed)?;
    let paths = cascade_git::RepoPaths::discover(&cwd).map_err(Failure::usage)?;
    let settings = settings_at_head(&cwd)?;
    let subject = subject(g, &cwd, &a)?;
    let scratch = tempfile::Builder::new()
        .prefix("cascade-sandbox-check-")
        .tempdir()
        .map_err(Failure::failed)?;
    let worktree = scratch.path().join("worktree");
    std::fs::create_dir_all(&worktree).map_err(Failure::failed)?;
    let mode = confine::mode(None, &settings);
    let mut notes = Vec::new();
    let attempt = match AttemptSandbox::new(None, &settings, &worktree) {
        Ok((attempt, _warning)) => attempt,
        Err(e) => {
            notes.push(format!("a run would not start: {e}"));
            AttemptSandbox::default()
        }
    };
    // What the policy says, also where nothing enforces it.
    let stated = attempt
        .policy
        .as_deref()
        .cloned()
        .unwrap_or_else(|| confine::attempt_policy(&settings, &worktree, scratch.path()));
    // The agent's policy, as its CLI is started with it.
    let agent_policy = attempt
        .policy
        .as_deref()
        .map(|p| Arc::new(subject.sandbox.policy(p)));
    let stated = subject.sandbox.policy(&stated);
    // Escapes are blocked when a policy applies, and should be when the
    // mode requires one (a run would refuse to start there).
    let confined = attempt.policy.is_some() || mode == SandboxMode::Required;
    if attempt.policy.is_none() && mode == SandboxMode::BestEffort {
        notes.push("this kernel enforces no Landlock: best-effort runs unconfined".to_string());
    }
    let ports_enforced = confined && sandbox::ports_enforced();
    if attempt.policy.is_some() && !ports_enforced {
        notes.push(format!(
            "this kernel's Landlock (ABI {}) has no TCP rules (ABI {} has): agents connect to any port",
            sandbox::kernel_abi(),
            sandbox::NET_ABI
        ));
    }
    let gate = attempt
        .policy
        .as_deref()
        .map(|p| Arc::new(p.with_network(sandbox::Network::shared_or_own())));
    let isolated = gate.is_some() && sandbox::own_network_available();
    if gate.is_some() && !isolated {
        notes.push(
            "this kernel allows no user namespaces: gates keep the host's network".to_string(),
        );
    }
    let probes = super::runtime()?.block_on(probes(&Probing {
        paths: &paths,
        worktree: &worktree,
        stated: &stated,
        agent: agent_policy,
        gate,
        confined,
        isolated,
        ports_enforced,
    }))?;
    let enforced = probes
        .iter()
        .all(|p| p.result == "skipped" || p.result == p.expected);
    let report = Report {
        mode: mode.as_str(),
        mode_from: if settings.mode.is_some() {
            "sandbox.mode in .cascade/config.json"
        } else {
            "the default"
        },
        landlock_abi: sandbox::kernel_abi(),
        confinement: attempt.confinement.clone(),
        story: subject.story,
        agent: subject.agent,
        worktree: worktree.clone(),
        writable: stated.write.iter().chain(&stated.tmp).cloned().collect(),
        hidden: stated.hide.clone(),
        agent_ports: stated.connect_ports.clone().unwrap_or_default(),
        agent_ports_enforced: ports_enforced,
        gate_network_isolated: isolated,
        notes,
        probes,
        enforced,
    };
    print(&report, a.json)?;
    Ok(if enforced { EXIT_OK } else { EXIT_FAILED })
}

/// The story of `--story` (exit 2 when unknown) and its agent (the story's
/// `agent`, else agents.json's default), with what the agent declares.
fn subject(g: &Global, cwd: &Path, a: &CheckArgs) -> Result<Subject, Failure> {
    let story = match &a.story {
        None => None,
        Some(id) => {
            let prd = cascade_plan::load_prd(&a.prd).map_err(Failure::usage)?;
            let story = prd.story(id).ok_or_else(|| {
                Failure::usage(anyhow!(
                    "unknown story '{id}' in '{}' (see `cascade batches` for the ids)",
                    a.prd.display()
                ))
            })?;
            Some((id.clone(), story.agent.clone()))
        }
    };
    let loaded = AgentsConfig::load(g.agents.as_deref(), cwd).map_err(Failure::usage)?;
    let name = story
        .as_ref()
        .and_then(|(_, agent)| agent.clone())
        .unwrap_or_else(|| loaded.config.default_agent.clone());
    let def = loaded.config.agent(&name);
    Ok(Subject {
        story: story.map(|(id, _)| id),
        sandbox: def.map(|d| d.sandbox.clone()).unwrap_or_default(),
        agent: Some(name),
    })
}

/// What the probes run under.
struct Probing<'a> {
    paths: &'a cascade_git::RepoPaths,
    worktree: &'a Path,
    stated: &'a Policy,
    /// The agent's policy (none: unconfined).
    agent: Option<Arc<Policy>>,
    /// A gate's policy (none: unconfined).
    gate: Option<Arc<Policy>>,
    /// Whether the mode says a story is confined.
    confined: bool,
    /// Whether gates get a network namespace of their own.
    isolated: bool,
    /// Whether agents are held to their TCP ports.
    ports_enforced: bool,
}

async fn probes(p: &Probing<'_>) -> Result<Vec<Probe>, Failure> {
    let escape = if p.confined { "blocked" } else { "allowed" };
    let pid = std::process::id();
    let own_dir = p.paths.cascade_dir();
    std::fs::create_dir_all(&own_dir).map_err(Failure::failed)?;
    let mut out = vec![
        Try::new(
            "write inside the worktree",
            ProbeKind::Write,
            p.worktree.join("probe"),
            "allowed",
        )
        .run(p)
        .await?,
        Try::new(
            "write outside: the main checkout",
            ProbeKind::Write,
            own_dir.join(format!("sandbox-probe-{pid}")),
            escape,
        )
        .run(p)
        .await?,
    ];
    if let Some(home) = sandbox::home() {
        let target = home.join(format!(".cascade-sandbox-probe-{pid}"));
        let t = Try::new("write outside: $HOME", ProbeKind::Write, target, escape);
        out.push(t.run(p).await?);
    }
    out.push(match hidden_file(&p.stated.hide) {
        Some(file) => {
            let t = Try::new("read a hidden path", ProbeKind::Read, file, escape);
            t.run(p).await?
        }
        None => Probe {
            name: "read a hidden path",
            kind: ProbeKind::Read,
            target: String::new(),
            expected: escape,
            result: "skipped",
            detail: "none of the hidden paths holds a file here".to_string(),
        },
    });
    out.extend(agent_connects(p).await?);
    // A listener on the host's loopback: a gate in a network namespace of
    // its own cannot reach it.
    let listener = TcpListener::bind("127.0.0.1:0").map_err(Failure::failed)?;
    let addr = listener.local_addr().map_err(Failure::failed)?;
    let mut gate = Try::new(
        "connect from a gate to the host's 127.0.0.1",
        ProbeKind::Connect,
        PathBuf::from(addr.to_string()),
        if p.isolated { "blocked" } else { "allowed" },
    );
    gate.gate = true;
    out.push(gate.run(p).await?);
    Ok(out)
}

/// The agent's connects on the host's 127.0.0.1: to the first port it
/// names (nothing need listen there: a refused connection got through the
/// sandbox) and to a listener's port it does not name.
async fn agent_connects(p: &Probing<'_>) -> Result<Vec<Probe>, Failure> {
    let named = p.stated.connect_ports.clone().unwrap_or_default();
    let mut out = Vec::new();
    if let Some(port) = named.first() {
        let mut t = Try::new(
            "connect from the agent to a port it names",
            ProbeKind::Connect,
            PathBuf::from(format!("127.0.0.1:{port}")),
            "allowed",
        );
        t.refused = "allowed";
        out.push(t.run(p).await?);
    }
    let listener = TcpListener::bind("127.0.0.1:0").map_err(Failure::failed)?;
    let addr = listener.local_addr().map_err(Failure::failed)?;
    let name = "connect from the agent to a port it does not name";
    if named.contains(&addr.port()) {
        out.push(Probe {
            name,
            kind: ProbeKind::Connect,
            target: addr.to_string(),
            expected: "blocked",
            result: "skipped",
            detail: "the free port found is one the agent names".to_string(),
        });
    } else {
        let expected = if p.ports_enforced {
            "blocked"
        } else {
            "allowed"
        };
        let t = Try::new(name, ProbeKind::Connect, addr.to_string().into(), expected);
        out.push(t.run(p).await?);
    }
    Ok(out)
}

/// One probe child to spawn: what it tries, under whose policy, and what
/// the policy says of it.
struct Try {
    name: &'static str,
    kind: ProbeKind,
    target: PathBuf,
    expected: &'static str,
    /// Under a gate's policy (else the agent's).
    gate: bool,
    /// What a refused connection counts as: `allowed` where reaching the
    /// port is the point, `blocked` where reaching the host is.
    refused: &'static str,
}

impl Try {
    fn new(name: &'static str, kind: ProbeKind, target: PathBuf, expected: &'static str) -> Try {
        Try {
            name,
            kind,
            target,
            expected,
            gate: false,
            refused: "blocked",
        }
    }

    /// Spawns the confined probe child and says what came of it.
    async fn run(self, p: &Probing<'_>) -> Result<Probe, Failure> {
        let exe = std::env::current_exe()
            .map_err(|e| Failure::failed(anyhow!("cannot find cascade's own binary: {e}")))?;
        let kind_arg = self
            .kind
            .to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default();
        let mut spec = Spec::new(exe)
            .args([
                OsString::from("__sandbox-probe"),
                OsString::from(kind_arg),
                self.target.clone().into_os_string(),
            ])
            .cwd(p.worktree)
            .timeout(Duration::from_secs(20));
        let policy = if self.gate { &p.gate } else { &p.agent };
        if let Some(policy) = policy {
            spec = spec.sandbox(Arc::clone(policy));
        }
        let outcome = spec
            .run(&CancelToken::new())
            .await
            .map_err(Failure::failed)?;
        // An allowed write removed its file; a denied one never made it.
        if self.kind == ProbeKind::Write {
            let _ = std::fs::remove_file(&self.target);
        }
        let refused = outcome.exit_code == Some(i32::from(REFUSED));
        let result = if outcome.success() {
            "allowed"
        } else if refused {
            self.refused
        } else {
            "blocked"
        };
        let detail = if refused && result == "allowed" {
            "connection refused: nothing listens there, but the connect got past the sandbox"
                .to_string()
        } else {
            outcome.output_excerpt(300).trim().to_string()
        };
        Ok(Probe {
            name: self.name,
            kind: self.kind,
            target: self.target.display().to_string(),
            expected: self.expected,
            result,
            detail,
        })
    }
}

/// A file among the hidden paths to try reading: a hidden file itself, or
/// the first file directly inside a hidden directory.
fn hidden_file(hidden: &[PathBuf]) -> Option<PathBuf> {
    hidden.iter().find_map(|h| {
        if h.is_file() {
            return Some(h.clone());
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(h)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        files.into_iter().next()
    })
}

fn print(r: &Report, json: bool) -> Result<(), Failure> {
    if json {
        let text = serde_json::to_string_pretty(r).map_err(Failure::failed)?;
        outln!("{text}");
        return Ok(());
    }
    outln!("Sandbox: {} ({})", r.mode, r.mode_from);
    outln!(
        "Confinement: {} (kernel Landlock ABI {})",
        r.confinement,
        r.landlock_abi
    );
    match (&r.story, &r.agent) {
        (Some(s), Some(a)) => outln!("Story: {s} (agent {a})"),
        (None, Some(a)) => outln!("Story: none given, the run's defaults (agent {a})"),
        _ => outln!("Story: none given, the run's defaults"),
    }
    outln!("Worktree: {} (a scratch stand-in)", r.worktree.display());
    outln!("Writable:");
    for w in &r.writable {
        outln!("  {}", w.display());
    }
    outln!("Hidden:");
    for h in &r.hidden {
        outln!("  {}", h.display());
    }
    let ports: Vec<String> = r.agent_ports.iter().map(u16::to_string).collect();
    outln!(
        "Agent's TCP ports: {}{}",
        or_none(&ports.join(", ")),
        if r.agent_ports_enforced {
            " (enforced)"
        } else {
            " (not enforced here)"
        }
    );
    outln!(
        "Gates' network: {}",
        if r.gate_network_isolated {
            "a namespace of their own (loopback only)"
        } else {
            "the host's"
        }
    );
    for n in &r.notes {
        outln!("note: {n}");
    }
    outln!("Probes:");
    for p in &r.probes {
        let mark = if p.result == "skipped" || p.result == p.expected {
            "ok"
        } else {
            "NOT AS STATED"
        };
        outln!(
            "  {:<50} {:<8} (policy: {}) {mark}",
            p.name,
            p.result,
            p.expected
        );
        if !p.detail.is_empty() {
            outln!("      {}", p.detail.lines().next().unwrap_or(""));
        }
    }
    if r.enforced {
        outln!("sandbox: the policy is enforced as stated");
    } else {
        outln!("sandbox: something the policy should block was not blocked");
    }
    Ok(())
}

fn or_none(s: &str) -> &str {
    if s.is_empty() {
        "none"
    } else {
        s
    }
}
