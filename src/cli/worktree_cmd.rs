//! `cascade worktree list|prune`: cascade's own worktrees and branches.

use clap::Subcommand;

use super::{not_built, CliResult, Global};

#[derive(Debug, Subcommand)]
pub enum WorktreeCommand {
    /// Show cascade's worktrees and branches
    List,
    /// Remove cascade's leftover worktrees and branches (never anything else)
    Prune,
}

pub fn run(_g: &Global, _c: WorktreeCommand) -> CliResult {
    not_built("worktree")
}
