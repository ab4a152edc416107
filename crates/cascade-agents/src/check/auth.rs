//! What an agent CLI's login depends on, as one fingerprint for the check
//! cache's key: the auth-related environment (the agent's own `env` wins
//! over cascade's) and the modification times of the files each CLI keeps
//! its login in. Logging out (`unset ANTHROPIC_API_KEY`, a removed
//! `~/.codex/auth.json`) or logging in changes the fingerprint, so a cached
//! verdict of either kind is checked again instead of being trusted.
//!
//! Values are folded into a hash, never stored: the cache file must not
//! hold a key.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::config::AgentDef;
use crate::watch::CliFamily;

/// The environment variables and the files (relative to `$HOME`) a family's
/// login reads. `IS_SANDBOX` is here for claude because the root check's
/// fix is to set it.
fn inputs(family: CliFamily) -> (&'static [&'static str], &'static [&'static str]) {
    match family {
        CliFamily::Claude => (
            &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
                "CLAUDE_CODE_USE_BEDROCK",
                "CLAUDE_CODE_USE_VERTEX",
                "CLAUDE_CONFIG_DIR",
                "IS_SANDBOX",
            ],
            // Not ~/.claude.json: claude rewrites it on every start.
            &[".claude/.credentials.json"],
        ),
        CliFamily::Codex => (
            &["OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_HOME"],
            &[".codex/auth.json"],
        ),
        CliFamily::Gemini => (
            &[
                "GEMINI_API_KEY",
                "GOOGLE_API_KEY",
                "GOOGLE_GENAI_USE_VERTEXAI",
                "GOOGLE_GENAI_USE_GCA",
                "GOOGLE_CLOUD_PROJECT",
                "GOOGLE_APPLICATION_CREDENTIALS",
            ],
            &[".gemini/settings.json", ".gemini/oauth_creds.json"],
        ),
        CliFamily::Amp => (&["AMP_API_KEY"], &[".local/share/amp/secrets.json"]),
        CliFamily::Cursor => (&["CURSOR_API_KEY"], &[".cursor/cli-config.json"]),
        CliFamily::Aider => (&["ANTHROPIC_API_KEY", "OPENAI_API_KEY"], &[]),
        CliFamily::Other => (&[], &[]),
    }
}

/// The fingerprint of `def`'s login inputs, reading cascade's environment
/// through `env` (a parameter so tests need not change the process's).
pub(crate) fn fingerprint(def: &AgentDef, env: impl Fn(&str) -> Option<String>) -> String {
    let family = CliFamily::of_command(&def.command);
    let (vars, files) = inputs(family);
    let lookup = |name: &str| {
        def.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| env(name))
    };
    let mut hasher = blake3::Hasher::new();
    for var in vars {
        hasher.update(var.as_bytes());
        match lookup(var) {
            // Length-prefixed, so `A=xy` and `A=x` + a file cannot collide.
            Some(v) => {
                hasher.update(&(v.len() as u64 + 1).to_le_bytes());
                hasher.update(v.as_bytes());
            }
            None => {
                hasher.update(&0u64.to_le_bytes());
            }
        }
    }
    let home = lookup("HOME").map(PathBuf::from);
    for file in files {
        hasher.update(file.as_bytes());
        let stamp = home.as_deref().and_then(|h| mtime_ns(&h.join(file)));
        hasher.update(&stamp.unwrap_or(0).to_le_bytes());
    }
    hasher.finalize().to_hex()[..16].to_string()
}

/// A file's modification time in nanoseconds (`None`: absent or unreadable,
/// which is itself part of the fingerprint: logged out).
fn mtime_ns(path: &Path) -> Option<u128> {
    let meta = std::fs::metadata(path).ok()?;
    Some(
        meta.modified()
            .ok()?
            .duration_since(UNIX_EPOCH)
            .ok()?
            .as_nanos()
            + 1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claude(env: &[(&str, &str)]) -> AgentDef {
        AgentDef {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..AgentDef::test_cli("claude", "claude", &[])
        }
    }

    #[test]
    fn unsetting_or_changing_a_key_changes_the_fingerprint() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path().display().to_string();
        let with_key = |key: Option<&'static str>| {
            let h = h.clone();
            move |n: &str| match n {
                "HOME" => Some(h.clone()),
                "ANTHROPIC_API_KEY" => key.map(str::to_string),
                _ => None,
            }
        };
        let def = claude(&[]);
        let a = fingerprint(&def, with_key(Some("k1")));
        assert_eq!(a, fingerprint(&def, with_key(Some("k1"))), "stable");
        assert_ne!(a, fingerprint(&def, with_key(None)), "logged out");
        assert_ne!(a, fingerprint(&def, with_key(Some("k2"))), "another key");
        // The agent's own env wins over cascade's.
        let own = claude(&[("ANTHROPIC_API_KEY", "k1")]);
        assert_eq!(a, fingerprint(&own, with_key(Some("k2"))));
        // The key itself is not in the fingerprint.
        assert!(!a.contains("k1"));
    }

    #[test]
    fn logging_in_through_a_credentials_file_changes_the_fingerprint() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path().display().to_string();
        let env = |n: &str| (n == "HOME").then(|| h.clone());
        let def = claude(&[]);
        let out = fingerprint(&def, env);
        std::fs::create_dir_all(home.path().join(".claude")).unwrap();
        std::fs::write(home.path().join(".claude/.credentials.json"), "{}").unwrap();
        let logged_in = fingerprint(&def, env);
        assert_ne!(out, logged_in);
        std::fs::remove_file(home.path().join(".claude/.credentials.json")).unwrap();
        assert_eq!(out, fingerprint(&def, env), "logged out again");
    }

    #[test]
    fn a_cli_cascade_does_not_know_depends_on_nothing_but_its_definition() {
        let mut def = claude(&[]);
        def.command = "./my-agent.sh".into();
        let a = fingerprint(&def, |_| Some("anything".to_string()));
        assert_eq!(a, fingerprint(&def, |_| None));
    }
}
