//! `cascade gates run` and `cascade gates cache stats|clear|explain`.

use clap::{Args, Subcommand};

use super::{not_built, CliResult, Global};

#[derive(Debug, Subcommand)]
pub enum GatesCommand {
    /// Run the quality gates in the current directory
    Run(GatesRunArgs),
    /// Inspect or clear the gate result cache
    #[command(subcommand)]
    Cache(CacheCommand),
}

#[derive(Debug, Args)]
pub struct GatesRunArgs {
    /// Run every gate even if a cached result exists
    #[arg(long)]
    pub no_cache: bool,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Entries, hits, misses and time saved
    Stats(JsonFlag),
    /// Remove every cached result
    Clear(JsonFlag),
    /// Why the last lookup of each gate missed
    Explain(JsonFlag),
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn run(_g: &Global, _c: GatesCommand) -> CliResult {
    not_built("gates")
}
