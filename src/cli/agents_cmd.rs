//! `cascade agents list|resolve`: configured agents and the resolver's choices.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{not_built, CliResult, Global};

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// List configured agents, whether they are installed, their path and version
    List(ListArgs),
    /// Show which agent every story of a PRD resolves to, and why
    Resolve(ResolveArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Ignore the cached detection results
    #[arg(long)]
    pub refresh: bool,
}

#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The PRD to read
    #[arg(long, value_name = "PATH", default_value = "prd.json")]
    pub prd: PathBuf,
    /// Phase to resolve for (planning, implementation, retry, refactor, review)
    #[arg(long, value_name = "NAME", default_value = "implementation")]
    pub phase: String,
    /// Use this agent for every story
    #[arg(long, value_name = "A")]
    pub agent: Option<String>,
    /// Agent for the implementation phase
    #[arg(long, value_name = "A")]
    pub impl_agent: Option<String>,
    /// Agent for the retry phase
    #[arg(long, value_name = "A")]
    pub retry_agent: Option<String>,
    /// Use the first named candidate even if it is not installed
    #[arg(long)]
    pub no_fallback: bool,
    /// Ignore the cached detection results
    #[arg(long)]
    pub refresh: bool,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn run(_g: &Global, _c: AgentsCommand) -> CliResult {
    not_built("agents")
}
