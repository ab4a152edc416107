//! `cascade completions bash|zsh|fish|elvish|powershell`: the shell
//! completion script for the whole command tree (clap_complete), on stdout.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::{CliResult, EXIT_OK};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(a: CompletionsArgs) -> CliResult {
    let mut cmd = super::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "cascade", &mut out);
    use std::io::Write;
    let mut stdout = super::out::stdout();
    // A closed pipe (`cascade completions bash | head`) is not an error.
    let _ = stdout.write_all(&out).and_then(|()| stdout.flush());
    Ok(EXIT_OK)
}
