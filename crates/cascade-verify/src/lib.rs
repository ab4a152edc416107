//! cascade-verify: local, instant detection of work that passes its gates
//! without being done: stub macros and bodies, placeholder returns, tests
//! skipped, removed or emptied, assertions that cannot fail, and edits to the
//! gate or CI configuration a story did not ask for. No agent, no network:
//! regexes over the lines a change added, read with a small per-language
//! lexer so a `todo!()` in a comment or a string is not code.
//!
//! Knows nothing of agents, gates or the engine: it reads a change (from
//! cascade-git) and returns findings.
//!
//! # API summary
//! - [`RuleSet`]: `builtin()` (the tables in `rules/*.json`: rust, python,
//!   typescript (also javascript), go, common), `load(root)` / `load_file`
//!   / `from_text(origin, text)` (plus a `verify.json`: `enabled`,
//!   `disable`, `rules`, `protected_paths`, `config`), `ids()`.
//! - [`check`]`(&[FileDiff], &RuleSet, &`[`Intent`]`) -> `[`Verdict`]` {
//!   findings, allowed }` (and [`scan`], the findings alone):
//!   `Finding { rule, file, line, message, text }` (Display:
//!   `file:line: [rule] message: \`text\``); `Intent { allow }` carries a
//!   story's `verify_allow` (rule ids, and files whose protected-file and
//!   test-runner-setting edits it allows).
//! - [`verify_repo`]`(workdir, from, to, &RuleSet, &Intent)`: the diff of
//!   `from..to` (or `from` against the working tree) checked.
//! - [`prove`]: which new or changed tests a change has, how each runner
//!   (pytest/unittest, cargo test, go test, vitest/jest) runs just those on
//!   a copy of the base with only the test changes applied, and which of
//!   them passed there (`unproven-test`).
//! - [`secrets`]: credentials by file name and by content
//!   (`SecretRules::builtin()`, `by_name(path)`, `by_content(path, bytes)`,
//!   the table in `rules/secrets.json`); [`build_output`]: directories of
//!   dependency or build output, the default file size limit, binary content.
//! - [`links`]: symbolic links a change adds that point outside the
//!   repository (`outward-symlink`, part of [`check`]); [`gitconfig`]:
//!   program-running settings and hooks an attempt leaves in git's own
//!   files (`GitState::record` before, `restore` after: `git-config-changed`).
//! - [`VerifyError`]: a `verify.json` that cannot be used (file:line:column,
//!   or the rule id and what is wrong with it), or a git failure.
//!
//! ```
//! use cascade_git::diff::{FileDiff, FileStatus};
//! use cascade_verify::{scan, Intent, RuleSet};
//! let file = FileDiff {
//!     path: "src/lib.rs".into(), old_path: None, status: FileStatus::Added,
//!     added: vec![1], removed: vec![], old_text: None,
//!     new_text: Some("pub fn f() -> u32 { todo!() }\n".into()), link_target: None,
//! };
//! let found = scan(&[file], &RuleSet::builtin(), &Intent::default());
//! assert_eq!(found[0].rule, "rust-stub-macro");
//! ```

mod asked;
pub mod build_output;
pub mod census;
mod edits;
pub mod error;
mod excuse;
pub mod gitconfig;
pub mod lex;
pub mod links;
pub mod prove;
mod result_hook;
pub mod rules;
pub mod scan;
pub mod secrets;
mod successor;
#[cfg(test)]
mod tests;

use std::path::Path;

pub use census::{CENSUS_MISMATCH, TEST_DISAPPEARED};
pub use error::VerifyError;
pub use result_hook::RESULT_HOOK;
pub use rules::{Language, RuleSet, UserConfig};
pub use scan::{
    check, scan, Finding, Intent, Verdict, CREDENTIAL_CONTENT, EMPTIED_TEST, GATE_CONFIG_EDIT,
    GIT_CONFIG_CHANGED, OUTWARD_SYMLINK, REMOVED_TEST, STRUCTURAL, TEST_CONFIG_EDIT, UNPROVEN_TEST,
};

/// Checks the change `from..to` of the repository at `workdir` (`to: None`:
/// `from` against the working tree, untracked files included).
pub fn verify_repo(
    workdir: &Path,
    from: &str,
    to: Option<&str>,
    rules: &RuleSet,
    intent: &Intent,
) -> Result<Verdict, VerifyError> {
    let files = cascade_git::diff::diff_lines(workdir, from, to)?;
    Ok(check(&files, rules, intent))
}
