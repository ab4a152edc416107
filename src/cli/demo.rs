//! `cascade demo`: a scratch repository, the bundled plan and offline agent, a real run.

use std::path::PathBuf;

use clap::Args;

use super::{not_built, CliResult, Global};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to create the scratch repository (default: a new temp dir, kept afterwards)
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print NDJSON events instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn run(_g: &Global, _a: DemoArgs) -> CliResult {
    not_built("demo")
}
