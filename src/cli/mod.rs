//! The command tree of `shared/CLI.md` and the dispatch to one module per area.
//!
//! Each area module (`plan_cmds`, `agents_cmd`, `gates_cmd`, `run_cmd`,
//! `mega_cmd`, `verify_cmd`, `worktree_cmd`, `paths_cmd`, `demo`) owns its argument structs' behaviour and
//! returns an exit code or a [`Failure`] that carries one; `report` holds the
//! reporters that render the engine's events (terminal, NDJSON, summary).

use std::path::PathBuf;

use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

// First: its printing macros are used by every module below.
#[macro_use]
pub mod out;

pub mod agents_check;
pub mod agents_cmd;
pub mod color;
pub mod completions;
pub mod config_check;
pub mod demo;
pub mod fleet_cmd;
pub mod gates_cmd;
pub mod history_cmd;
pub mod inspect;
pub mod live;
pub mod mega_cmd;
pub mod notify;
pub mod paths_cmd;
pub mod plan_cmds;
pub mod plan_file;
pub mod planning_cmd;
pub mod remote_args;
pub mod report;
pub mod run_cmd;
pub mod run_flags;
pub mod sandbox_cmd;
pub mod signals;
pub mod status_cmd;
#[cfg(feature = "ui")]
pub mod ui_cmd;
pub mod verify_cmd;
pub mod worktree_cmd;

/// Exit code: everything asked for is complete.
pub const EXIT_OK: u8 = 0;
/// Exit code: the run finished but something failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: bad input or usage.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: interrupted (SIGINT); state is saved.
pub const EXIT_INTERRUPTED: u8 = 130;

/// An error on its way out of the binary, with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    /// Bad input or usage (exit 2).
    pub fn usage(error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code: EXIT_USAGE,
            error: error.into(),
        }
    }

    /// Something failed at run time (exit 1).
    pub fn failed(error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code: EXIT_FAILED,
            error: error.into(),
        }
    }
}

/// The text `main` prints after `error: `: the error and its causes, joined
/// with `: ` like anyhow's `{:#}`, but without repeating a cause whose text
/// the message already shows. Many error types embed their source in their
/// own message (`cannot read X: <os error>`) and also expose it as
/// `source()`; printing both gave `... (os error 21): ... (os error 21)`.
pub fn render_error(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !cause.is_empty() && !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// What every command returns: the exit code on success paths, or a failure.
pub type CliResult = Result<u8, Failure>;

/// cascade: schedules coding agents over a plan.
#[derive(Debug, Parser)]
#[command(name = "cascade", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// agents.json to use (default: ./agents.json, then ~/.config/cascade/agents.json, then built-in)
    #[arg(long, global = true, value_name = "PATH")]
    pub agents: Option<PathBuf>,
    /// Run as if cascade was started in DIR
    #[arg(short = 'C', global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// When to colour the output (auto: on a terminal, unless NO_COLOR is set)
    #[arg(long, global = true, value_enum, default_value_t = color::ColorChoice::Auto, value_name = "WHEN")]
    pub color: color::ColorChoice,
}

#[derive(Debug, Subcommand)]
// Parsed once per process: the size of `plan`'s run options (RunFlags) costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Show the execution batches of a PRD
    Batches(plan_cmds::BatchesArgs),
    /// Analyze the dependency graph of a PRD or mega-plan
    Deps(plan_cmds::DepsArgs),
    /// Validate a PRD or mega-plan and report every problem
    Validate(plan_cmds::ValidateArgs),
    /// Configured agents and how stories resolve to them
    #[command(subcommand)]
    Agents(agents_cmd::AgentsCommand),
    /// Quality gates and their result cache
    #[command(subcommand)]
    Gates(gates_cmd::GatesCommand),
    /// Turn a goal into an approved, challenged plan (and run it with --run)
    Plan(planning_cmd::PlanArgs),
    /// Approve a PRD and run its stories
    Approve(run_cmd::RunArgs),
    /// Show the state of the current run
    Status(status_cmd::StatusArgs),
    /// Continue an interrupted or killed run
    Resume(run_cmd::RunArgs),
    /// Past runs, a run's stories with their attempts, outcomes per agent and story type
    History(history_cmd::HistoryArgs),
    /// One story of the run: attempts, failures, gate errors, review, diff stat, cost
    Show(inspect::show::ShowArgs),
    /// An attempt's agent output (-f follows a running one)
    Logs(inspect::logs::LogsArgs),
    /// Multi-feature plans (mega-plan.json)
    #[command(subcommand)]
    Mega(mega_cmd::MegaCommand),
    /// Find stubs, skipped or removed tests and gate/CI edits in the working tree or a range
    Verify(verify_cmd::VerifyArgs),
    /// cascade's worktrees and branches
    #[command(subcommand)]
    Worktree(worktree_cmd::WorktreeCommand),
    /// Project id, Plan Cascade data directory, path mode and every file cascade reads or writes
    Paths(paths_cmd::PathsArgs),
    /// Run the whole pipeline on a scratch repository with the bundled offline agent
    Demo(demo::DemoArgs),
    /// Run fleet jobs from NATS JetStream (needs the `fleet` feature)
    Worker(fleet_cmd::WorkerArgs),
    /// The fleet's workers and job queue (needs the `fleet` feature)
    #[command(subcommand)]
    Fleet(fleet_cmd::FleetCommand),
    /// Local web dashboard of runs and plans (the URL carries an access token)
    #[cfg(feature = "ui")]
    Ui(ui_cmd::UiArgs),
    /// The confinement of a story's processes
    #[command(subcommand)]
    Sandbox(sandbox_cmd::SandboxCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions(completions::CompletionsArgs),
    /// The bundled offline agent that `cascade demo` runs (not for direct use)
    #[command(name = "__demo-agent", hide = true)]
    DemoAgent(demo::DemoAgentArgs),
    /// One probe of `sandbox check`, run confined (not for direct use)
    #[command(name = "__sandbox-probe", hide = true)]
    SandboxProbe(sandbox_cmd::ProbeArgs),
}

/// Parses the command line like `Cli::parse`, keeping clap's matches too:
/// `resume` asks them which flags were given explicitly (those override the
/// options the run was started with; the others are restored).
/// The async runtime of a command that runs stories, gates or agents.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(anyhow::anyhow!("cannot start the async runtime: {e}")))
}

pub fn parse() -> (Cli, ArgMatches) {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches)
        .map_err(|e| e.format(&mut Cli::command()))
        .unwrap_or_else(|e| e.exit());
    (cli, matches)
}

/// cascade keeps its state in a `.cascade/` directory at the repository
/// root; something else of that name (a file of the user's) would otherwise
/// surface as an obscure "File exists" or "Not a directory" error.
fn check_cascade_dir() -> Result<(), Failure> {
    let Ok(cwd) = std::env::current_dir() else {
        return Ok(());
    };
    let Ok(paths) = cascade_git::RepoPaths::discover(&cwd) else {
        return Ok(()); // not a repository: the command says so itself
    };
    let dir = paths.cascade_dir();
    match std::fs::metadata(&dir) {
        Ok(m) if !m.is_dir() => Err(Failure::usage(anyhow::anyhow!(
            "'{}' is a file, but cascade keeps its state in a directory of that name at the repository root; rename or remove that file and run again",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

/// Applies `-C` and runs the chosen command (`matches`: the parsed command line).
pub fn dispatch(cli: Cli, matches: &ArgMatches) -> CliResult {
    color::set(cli.global.color);
    if let Some(dir) = &cli.global.dir {
        std::env::set_current_dir(dir).map_err(|e| {
            Failure::usage(anyhow::anyhow!(
                "cannot change to directory '{}': {e} (check the path given to -C)",
                dir.display()
            ))
        })?;
    }
    // This process adopts the orphans of whatever it starts, so that none
    // outlives the command (see cascade_process's `supervise` module). Not
    // the dashboard: it starts `cascade resume` and a browser on purpose
    // to outlive it, outside cascade-process.
    #[cfg(feature = "ui")]
    let adopts = !matches!(cli.command, Command::Ui(_));
    #[cfg(not(feature = "ui"))]
    let adopts = true;
    if adopts {
        cascade_process::become_subreaper();
    }
    let g = &cli.global;
    let uses_state_dir = !matches!(
        cli.command,
        Command::Batches(_)
            | Command::Deps(_)
            | Command::Validate(_)
            | Command::Paths(_)
            | Command::Demo(_)
            | Command::DemoAgent(_)
            | Command::SandboxProbe(_)
            | Command::Completions(_)
            | Command::Worker(_)
            | Command::Fleet(_)
    );
    if uses_state_dir {
        check_cascade_dir()?;
    }
    match cli.command {
        Command::Batches(a) => plan_cmds::batches(g, a),
        Command::Deps(a) => plan_cmds::deps(g, a),
        Command::Validate(a) => plan_cmds::validate(g, a),
        Command::Agents(c) => agents_cmd::run(g, c),
        Command::Gates(c) => gates_cmd::run(g, c),
        Command::Approve(a) => run_cmd::approve(g, a),
        Command::Status(a) => status_cmd::status(g, a),
        Command::Resume(a) => run_cmd::resume(g, a, matches.subcommand_matches("resume")),
        Command::History(a) => history_cmd::run(g, a),
        Command::Show(a) => inspect::show::run(g, a),
        Command::Logs(a) => inspect::logs::run(g, a),
        Command::Mega(c) => mega_cmd::run(g, c, matches.subcommand_matches("mega")),
        Command::Verify(a) => verify_cmd::run(g, a),
        Command::Worktree(c) => worktree_cmd::run(g, c),
        Command::Paths(a) => paths_cmd::run(g, a),
        Command::Plan(a) => planning_cmd::run(g, a),
        Command::Demo(a) => demo::run(g, a),
        Command::Completions(a) => completions::run(a),
        Command::Worker(a) => fleet_cmd::worker(g, a),
        Command::Fleet(c) => fleet_cmd::run(g, c),
        #[cfg(feature = "ui")]
        Command::Ui(a) => ui_cmd::run(g, a),
        Command::DemoAgent(a) => demo::agent(g, a),
        Command::Sandbox(c) => sandbox_cmd::run(g, c),
        Command::SandboxProbe(a) => sandbox_cmd::probe(g, a),
    }
}
