//! What a story's commit refuses or leaves out: credentials, files too
//! large or binary, and dependency or build output.
//!
//! An agent that writes a `.env`, a private key or a token next to its work,
//! or runs `npm install` and `pip install` in the worktree, would otherwise
//! have all of it committed on the story branch, merged, and (with a fleet)
//! pushed to a shared remote. The commit step puts every file the story adds
//! or changes to [`SecretPolicy::check`]:
//! - a credential by file name (added files) or by content (added or changed
//!   files): the rules are cascade-verify's ([`cascade_verify::secrets`],
//!   one table), allowed per file by `"allow_secrets": ["<glob>", ...]` in
//!   prd.json (a glob with a `/` matches the repository path, one without
//!   matches the file name);
//! - a file over the project's size limit (`commit.max_file_mb` in
//!   `.cascade/config.json`, default 5), or a new binary file, unless the
//!   story's `files` names it;
//!
//! any of which fails the attempt (as `verification`, with the files and
//! rules in the retry prompt) with nothing committed. Untracked files under a
//! dependency or build output directory ([`cascade_verify::build_output`])
//! are left out of the commit ([`SecretPolicy::leave_out`]) unless the base
//! tracks files there or the story's `files` names them.
//! Files cascade put there itself (`worktree.copy`, `worktree.setup`) never
//! reach this check: they are the worktree's own exclude
//! (`cascade_git::local_files`).

use globset::{Glob, GlobSet, GlobSetBuilder};

use cascade_git::commit::Candidate;
use cascade_plan::Story;
use cascade_verify::build_output;
use cascade_verify::secrets::{SecretMatch, SecretRules};

/// The story field that allows some credential-looking files.
pub const ALLOW_FIELD: &str = "allow_secrets";

/// Why a file must not be committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It looks like a credential (by name, or by content at a line).
    Credential(SecretMatch),
    /// It is larger than the limit.
    TooLarge { bytes: u64, limit: u64 },
    /// A new binary file the story's `files` does not name.
    Binary,
}

impl Refusal {
    /// Whether it is a credential (the rest is build hygiene).
    pub fn is_credential(&self) -> bool {
        matches!(self, Refusal::Credential(_))
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Credential(m) => match m.line {
                Some(line) => write!(f, "line {line}: {}, rule {}", m.what, m.rule),
                None => write!(f, "file name: {}, rule {}", m.what, m.rule),
            },
            Refusal::TooLarge { bytes, limit } => write!(
                f,
                "{:.1} MB, over the {} MB limit",
                *bytes as f64 / MIB as f64,
                limit / MIB
            ),
            Refusal::Binary => write!(f, "a binary file the story's \"files\" does not name"),
        }
    }
}

const MIB: u64 = 1024 * 1024;

/// What a story's commit refuses and leaves out.
pub struct SecretPolicy {
    allow_names: GlobSet,
    allow_paths: GlobSet,
    /// The story's `files`: what it says it adds.
    declared: GlobSet,
    /// `None`: no size limit.
    max_file_bytes: Option<u64>,
}

/// Why a story's `allow_secrets` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AllowError {
    #[error("{ALLOW_FIELD} must be a list of globs")]
    NotAList,
    #[error("{ALLOW_FIELD}: '{pattern}': {source}")]
    Glob {
        pattern: String,
        #[source]
        source: globset::Error,
    },
    #[error("{ALLOW_FIELD}: {0}")]
    Set(#[source] globset::Error),
}

fn set<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<GlobSet, AllowError> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let glob = Glob::new(p).map_err(|source| AllowError::Glob {
            pattern: p.to_string(),
            source,
        })?;
        b.add(glob);
    }
    b.build().map_err(AllowError::Set)
}

/// The story's `files` as globs; an entry that is not a valid glob is
/// taken literally (the field predates its use as globs here).
fn declared(files: &[String]) -> GlobSet {
    let mut b = GlobSetBuilder::new();
    for f in files {
        let glob = Glob::new(f).or_else(|_| Glob::new(&globset::escape(f)));
        if let Ok(g) = glob {
            b.add(g);
        }
    }
    b.build().unwrap_or_else(|_| GlobSet::empty())
}

impl SecretPolicy {
    /// The policy of `story` with a size limit of `max_file_mb` MiB (0: none).
    /// A malformed `allow_secrets` is an error.
    pub fn for_story(story: &Story, max_file_mb: u64) -> Result<SecretPolicy, AllowError> {
        let allowed: Vec<&str> = match story.extra.get(ALLOW_FIELD) {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str())
                .collect::<Option<Vec<&str>>>()
                .ok_or(AllowError::NotAList)?,
            Some(_) => return Err(AllowError::NotAList),
        };
        let (paths, names): (Vec<&str>, Vec<&str>) = allowed.iter().partition(|p| p.contains('/'));
        Ok(SecretPolicy {
            allow_names: set(names)?,
            allow_paths: set(paths)?,
            declared: declared(&story.files),
            max_file_bytes: (max_file_mb > 0).then(|| max_file_mb.saturating_mul(MIB)),
        })
    }

    fn allows_secret(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        self.allow_names.is_match(name) || self.allow_paths.is_match(path)
    }

    /// Why the file `c` must not be committed, if it must not.
    pub fn check(&self, c: &Candidate<'_>) -> Option<Refusal> {
        let rules = SecretRules::builtin();
        let declared = self.declared.is_match(c.path);
        let bytes = c.content.len() as u64;
        if let Some(limit) = self.max_file_bytes.filter(|l| bytes > *l && !declared) {
            return Some(Refusal::TooLarge { bytes, limit });
        }
        if !self.allows_secret(c.path) {
            let by_name = c.added.then(|| rules.by_name(c.path)).flatten();
            let found = by_name.or_else(|| rules.by_content(c.path, c.content));
            if let Some(m) = found {
                return Some(Refusal::Credential(m));
            }
        }
        (c.added && !declared && build_output::is_binary(c.content)).then_some(Refusal::Binary)
    }

    /// The build output directory an untracked `path` is left out for, if
    /// any (never a path the story's `files` names).
    pub fn leave_out(&self, path: &str) -> Option<String> {
        if self.declared.is_match(path) {
            return None;
        }
        build_output::output_dir(path).map(str::to_string)
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

    fn check(p: &SecretPolicy, path: &str, added: bool, content: &[u8]) -> Option<Refusal> {
        p.check(&Candidate {
            path,
            added,
            content,
        })
    }

    #[test]
    fn credentials_are_refused_unless_allowed() {
        let p = SecretPolicy::for_story(&story(serde_json::json!({})), 5).unwrap();
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
            assert!(
                check(&p, bad, true, b"x").is_some_and(|r| r.is_credential()),
                "{bad}"
            );
            // A file the base already has is judged by its content only.
            assert_eq!(check(&p, bad, false, b"x"), None, "{bad}");
        }
        for fine in [
            "src/env.rs",
            "README.md",
            "keys.rs",
            "docs/credentials.md",
            "environment",
        ] {
            assert_eq!(check(&p, fine, true, b"fn main() {}\n"), None, "{fine}");
        }
        let key = b"-----BEGIN OPENSSH PRIVATE KEY-----\n";
        let r = check(&p, "notes.txt", false, key).unwrap();
        assert_eq!(r.to_string(), "line 1: a private key, rule private-key");
        let p = SecretPolicy::for_story(
            &story(serde_json::json!({"allow_secrets": [".env.example", "tests/fixtures/*.pem"]})),
            5,
        )
        .unwrap();
        assert_eq!(check(&p, ".env.example", true, b"x"), None);
        assert_eq!(check(&p, "web/.env.example", true, b"x"), None);
        assert_eq!(check(&p, "tests/fixtures/cert.pem", true, key), None);
        assert!(check(&p, "cert.pem", true, b"x").is_some());
        assert!(check(&p, ".env", true, b"x").is_some());
        assert!(
            SecretPolicy::for_story(&story(serde_json::json!({"allow_secrets": "x"})), 5).is_err()
        );
    }

    #[test]
    fn large_and_binary_files_need_the_story_to_name_them() {
        let mut s = story(serde_json::json!({}));
        s.files = vec!["assets/*.png".into(), "src/[weird".into()];
        let p = SecretPolicy::for_story(&s, 1).unwrap();
        let big = vec![b'a'; 1024 * 1024 + 1];
        assert_eq!(
            check(&p, "data.csv", false, &big),
            Some(Refusal::TooLarge {
                bytes: big.len() as u64,
                limit: MIB
            })
        );
        assert_eq!(check(&p, "assets/big.png", true, &big), None);
        let bin = b"\x7fELF\0\0\0";
        assert_eq!(check(&p, "build/app.bin", true, bin), Some(Refusal::Binary));
        assert_eq!(check(&p, "app.bin", false, bin), None, "already tracked");
        assert_eq!(check(&p, "assets/logo.png", true, bin), None);
        assert_eq!(check(&p, "src/[weird", true, bin), None, "taken literally");
        let unlimited = SecretPolicy::for_story(&s, 0).unwrap();
        assert_eq!(check(&unlimited, "data.csv", false, &big), None);
        assert_eq!(
            p.leave_out("node_modules/x/index.js").as_deref(),
            Some("node_modules")
        );
        assert_eq!(p.leave_out("src/main.rs"), None);
    }
}
