//! `cascade batches`, `cascade deps`, `cascade validate`: the dependency analyzer's commands.

use std::path::PathBuf;

use clap::Args;

use super::{not_built, CliResult, Global};

#[derive(Debug, Args)]
pub struct BatchesArgs {
    /// The PRD to read
    #[arg(long, value_name = "PATH", default_value = "prd.json")]
    pub prd: PathBuf,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DepsArgs {
    /// The PRD to read
    #[arg(long, value_name = "PATH", conflicts_with = "mega")]
    pub prd: Option<PathBuf>,
    /// The mega-plan to read
    #[arg(long, value_name = "PATH")]
    pub mega: Option<PathBuf>,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Report cycles and unknown dependencies instead of failing on them
    #[arg(long)]
    pub no_check: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The PRD to read
    #[arg(long, value_name = "PATH", conflicts_with = "mega")]
    pub prd: Option<PathBuf>,
    /// The mega-plan to read
    #[arg(long, value_name = "PATH")]
    pub mega: Option<PathBuf>,
}

pub fn batches(_g: &Global, _a: BatchesArgs) -> CliResult {
    not_built("batches")
}

pub fn deps(_g: &Global, _a: DepsArgs) -> CliResult {
    not_built("deps")
}

pub fn validate(_g: &Global, _a: ValidateArgs) -> CliResult {
    not_built("validate")
}
