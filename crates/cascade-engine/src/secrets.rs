//! Files that look like credentials, refused in a story's commits.
//!
//! An agent that writes a `.env` or a private key next to its work would
//! otherwise have it committed on the story branch, merged, and (with a
//! fleet) pushed to a shared remote. The commit step puts every path the
//! story adds to [`SecretPolicy::refuses`]: a file whose name matches
//! [`CREDENTIAL_PATTERNS`] fails the attempt (as `verification`, with the
//! paths in the retry prompt) unless the story allows it with
//! `"allow_secrets": ["<glob>", ...]` in prd.json (a glob with a `/`
//! matches the repository path, one without matches the file name).
//! Files cascade put there itself (`worktree.copy`, `worktree.setup`) never
//! reach this check: they are the worktree's own exclude
//! (`cascade_git::local_files`).

use globset::{Glob, GlobSet, GlobSetBuilder};

use cascade_plan::Story;

/// File names that look like credentials (matched against the name only).
pub const CREDENTIAL_PATTERNS: &[&str] = &[
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "credentials*.json",
    ".netrc",
    ".pgpass",
];

/// The story field that allows some of them.
pub const ALLOW_FIELD: &str = "allow_secrets";

/// Which added paths a story's commit refuses.
pub struct SecretPolicy {
    deny: GlobSet,
    allow_names: GlobSet,
    allow_paths: GlobSet,
}

fn set<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let glob = Glob::new(p).map_err(|e| format!("'{p}': {e}"))?;
        b.add(glob);
    }
    b.build().map_err(|e| e.to_string())
}

impl SecretPolicy {
    /// The policy of `story`: [`CREDENTIAL_PATTERNS`] minus what its
    /// `allow_secrets` allows. A malformed `allow_secrets` is an error.
    pub fn for_story(story: &Story) -> Result<SecretPolicy, String> {
        let allowed: Vec<&str> = match story.extra.get(ALLOW_FIELD) {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str())
                .collect::<Option<Vec<&str>>>()
                .ok_or_else(|| format!("{ALLOW_FIELD} must be a list of globs"))?,
            Some(_) => return Err(format!("{ALLOW_FIELD} must be a list of globs")),
        };
        let (paths, names): (Vec<&str>, Vec<&str>) = allowed.iter().partition(|p| p.contains('/'));
        let err = |e: String| format!("{ALLOW_FIELD}: {e}");
        Ok(SecretPolicy {
            deny: set(CREDENTIAL_PATTERNS.iter().copied()).map_err(err)?,
            allow_names: set(names).map_err(err)?,
            allow_paths: set(paths).map_err(err)?,
        })
    }

    /// Whether the repository path `path` must not be committed.
    pub fn refuses(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        self.deny.is_match(name)
            && !self.allow_names.is_match(name)
            && !self.allow_paths.is_match(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn story(extra: serde_json::Value) -> Story {
        let mut s = Story::new("s1", "S");
        if let serde_json::Value::Object(m) = extra {
            s.extra = m;
        }
        s
    }

    #[test]
    fn credentials_are_refused_unless_allowed() {
        let p = SecretPolicy::for_story(&story(serde_json::json!({}))).unwrap();
        for bad in [
            ".env",
            "app/.env.production",
            "certs/server.pem",
            "tls.key",
            "id_rsa",
            "home/id_ed25519.pub",
            "credentials.json",
            "gcp/credentials-prod.json",
        ] {
            assert!(p.refuses(bad), "{bad}");
        }
        for fine in [
            "src/env.rs",
            "README.md",
            "keys.rs",
            "docs/credentials.md",
            "environment",
        ] {
            assert!(!p.refuses(fine), "{fine}");
        }
        let p = SecretPolicy::for_story(&story(
            serde_json::json!({"allow_secrets": [".env.example", "tests/fixtures/*.pem"]}),
        ))
        .unwrap();
        assert!(!p.refuses(".env.example"));
        assert!(!p.refuses("web/.env.example"));
        assert!(!p.refuses("tests/fixtures/cert.pem"));
        assert!(p.refuses("cert.pem"));
        assert!(p.refuses(".env"));
        assert!(
            SecretPolicy::for_story(&story(serde_json::json!({"allow_secrets": "x"}))).is_err()
        );
    }
}
