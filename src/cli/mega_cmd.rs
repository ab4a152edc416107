//! `cascade mega approve|status|complete`: multi-feature plans.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{not_built, CliResult, Global};

#[derive(Debug, Subcommand)]
pub enum MegaCommand {
    /// Run the features of a mega-plan in dependency batches
    Approve(MegaApproveArgs),
    /// Show the state of the mega-plan run
    Status(MegaStatusArgs),
    /// Final cleanup after every feature has landed
    Complete,
}

#[derive(Debug, Args)]
pub struct MegaApproveArgs {
    /// The mega-plan to run
    #[arg(long, value_name = "PATH", default_value = "mega-plan.json")]
    pub mega: PathBuf,
    /// Run every batch without asking
    #[arg(long)]
    pub auto_run: bool,
    /// Use this agent for everything
    #[arg(long, value_name = "A")]
    pub agent: Option<String>,
    /// Agent that writes missing feature PRDs
    #[arg(long, value_name = "A")]
    pub prd_agent: Option<String>,
    /// Agent for the implementation phase
    #[arg(long, value_name = "A")]
    pub impl_agent: Option<String>,
    /// Units of work (features x stories) running at once
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub parallel: usize,
    /// Print NDJSON events instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct MegaStatusArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn run(_g: &Global, _c: MegaCommand) -> CliResult {
    not_built("mega")
}
