//! `cascade approve`, `cascade resume`, `cascade status`: running a PRD.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{not_built, CliResult, Global};

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ScheduleArg {
    /// A batch starts when the previous one is finished
    Batch,
    /// A story starts as soon as its dependencies are merged
    Eager,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ModeArg {
    /// Retry until every story is complete or out of retries
    UntilComplete,
    /// Stop after --max-iterations scheduling rounds
    MaxIterations,
    /// Stop after the current batch completes
    BatchComplete,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The PRD to run
    #[arg(long, value_name = "PATH", default_value = "prd.json")]
    pub prd: PathBuf,
    /// Run every batch without asking
    #[arg(long)]
    pub auto_run: bool,
    /// Use this agent for every story
    #[arg(long, value_name = "A")]
    pub agent: Option<String>,
    /// Agent for the implementation phase
    #[arg(long, value_name = "A")]
    pub impl_agent: Option<String>,
    /// Agent for retries
    #[arg(long, value_name = "A")]
    pub retry_agent: Option<String>,
    /// Use the named agent even if it is not installed
    #[arg(long)]
    pub no_fallback: bool,
    /// Retries per story after the first attempt
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub max_retries: u32,
    /// Base delay of the exponential retry backoff, in seconds (0: retry at once)
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub retry_delay: f64,
    /// Stories running at once
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub parallel: usize,
    /// Scheduling discipline
    #[arg(long, value_enum, default_value_t = ScheduleArg::Batch)]
    pub schedule: ScheduleArg,
    /// Stop scheduling new stories after the first failure
    #[arg(long)]
    pub fail_fast: bool,
    /// Run even if the working tree has uncommitted changes
    #[arg(long)]
    pub allow_dirty: bool,
    /// When the run stops
    #[arg(long, value_enum, default_value_t = ModeArg::UntilComplete)]
    pub mode: ModeArg,
    /// Iterations for --mode max-iterations
    #[arg(long, value_name = "N")]
    pub max_iterations: Option<u32>,
    /// Print the schedule with agents and fallbacks; run nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask before each batch
    #[arg(long)]
    pub yes: bool,
    /// Print NDJSON events instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn approve(_g: &Global, _a: RunArgs) -> CliResult {
    not_built("approve")
}

pub fn resume(_g: &Global, _a: RunArgs) -> CliResult {
    not_built("resume")
}

pub fn status(_g: &Global, _a: StatusArgs) -> CliResult {
    not_built("status")
}
