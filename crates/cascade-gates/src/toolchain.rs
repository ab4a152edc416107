//! Toolchain identity: what part of a gate's verdict comes from the compiler
//! or interpreter rather than from the tree.
//!
//! A gate's cache key carries the output of its toolchain command (`rustc
//! -vV`, `python3 --version`, `node --version`, `go version`), so a verdict
//! computed with one compiler is never a hit for another. The command is
//! the gate's `toolchain` argv from the config, or inferred from its
//! program; `"toolchain": []` opts out. Each (argv, folder) pair runs once
//! per [`Toolchains`] (one per cache, so once per run) and in the gate's own
//! folder, where a `rust-toolchain.toml` or `.nvmrc`-style pin applies.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cascade_process::{CancelToken, SpawnError, Spec};
use dashmap::DashMap;
use tokio::sync::OnceCell;

/// How long a toolchain command may take (rustup may install on first use).
const TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of its output kept: version banners are short.
const MAX_BYTES: usize = 4096;

/// The toolchain command a gate's program implies, if any.
pub fn infer(program: &str) -> Option<Vec<String>> {
    let base = Path::new(program).file_name()?.to_str()?;
    let argv: &[&str] = match base {
        "cargo" | "rustc" | "rustfmt" | "clippy-driver" | "cargo-nextest" => &["rustc", "-vV"],
        "python" => &["python", "--version"],
        "python3" | "pytest" | "ruff" | "mypy" | "black" | "flake8" | "pylint" | "pyright"
        | "tox" | "uv" | "poetry" | "isort" => &["python3", "--version"],
        "node" | "npm" | "npx" | "pnpm" | "yarn" | "tsc" | "eslint" | "jest" | "vitest"
        | "prettier" | "biome" => &["node", "--version"],
        "go" | "gofmt" | "golangci-lint" | "staticcheck" => &["go", "version"],
        _ => return None,
    };
    Some(argv.iter().map(|s| s.to_string()).collect())
}

/// (argv, folder) -> its identity, computed at most once.
type Memo = DashMap<(Vec<String>, PathBuf), Arc<OnceCell<String>>>;

/// Memo of toolchain identities; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Toolchains {
    seen: Arc<Memo>,
}

impl Toolchains {
    /// The identity of `argv` run in `dir`: its trimmed output (stdout then
    /// stderr; `python --version` used to print on stderr). A command that
    /// cannot run gives a stable text saying so, which is part of the key
    /// like any other identity.
    pub async fn identity(&self, argv: &[String], dir: &Path) -> String {
        let Some((program, args)) = argv.split_first() else {
            return String::new();
        };
        let cell = self
            .seen
            .entry((argv.to_vec(), dir.to_path_buf()))
            .or_default()
            .clone();
        cell.get_or_init(|| async move {
            let spec = Spec::new(program)
                .args(args)
                .cwd(dir)
                .timeout(TIMEOUT)
                .tail_bytes(MAX_BYTES);
            match spec.run(&CancelToken::new()).await {
                Ok(o) => {
                    let mut text = o.stdout.text_lossy().trim().to_string();
                    let err = o.stderr.text_lossy();
                    if !err.trim().is_empty() {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(err.trim());
                    }
                    if !o.success() {
                        text.push_str(&format!("\n[{}]", o.describe()));
                    }
                    text
                }
                Err(SpawnError::NotFound { .. }) => format!("{program}: not installed"),
                Err(e) => format!("{program}: cannot run: {e}"),
            }
        })
        .await
        .clone()
    }

    /// How many distinct toolchain commands ran.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none ran yet.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_imply_their_toolchain() {
        assert_eq!(infer("cargo").unwrap(), vec!["rustc", "-vV"]);
        assert_eq!(infer("/usr/bin/npx").unwrap(), vec!["node", "--version"]);
        assert_eq!(infer("pytest").unwrap()[0], "python3");
        assert_eq!(infer("gofmt").unwrap(), vec!["go", "version"]);
        assert!(infer("make").is_none());
    }

    #[tokio::test]
    async fn identities_run_once_and_say_when_missing() {
        let t = Toolchains::default();
        let dir = std::env::temp_dir();
        let argv = vec![
            "sh".to_string(),
            "-c".into(),
            "echo v1; echo warn >&2".into(),
        ];
        assert_eq!(t.identity(&argv, &dir).await, "v1\nwarn");
        assert_eq!(t.identity(&argv, &dir).await, "v1\nwarn");
        assert_eq!(t.len(), 1);
        let missing = vec!["cascade-no-such-compiler-xyz".to_string()];
        assert_eq!(
            t.identity(&missing, &dir).await,
            "cascade-no-such-compiler-xyz: not installed"
        );
    }
}
