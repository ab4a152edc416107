//! Credentials by file name and by content: the one definition of what a
//! story's commit must not hold as a secret (the table in
//! `rules/secrets.json`, whose content rules are ported from gitleaks'
//! public rule list; the file names its source).
//!
//! The engine's commit step asks [`SecretRules::by_name`] about every path
//! a story adds and [`SecretRules::by_content`] about every file it adds or
//! changes; what the story allows is the engine's business.

use std::sync::OnceLock;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use regex::Regex;
use serde::Deserialize;

/// The table as shipped.
const TABLE: &str = include_str!("../rules/secrets.json");

/// A value shorter than this is never judged by its entropy.
const MIN_SECRET_LEN: usize = 20;

#[derive(Deserialize)]
struct Table {
    #[allow(dead_code)] // Read by people: where the content rules come from.
    source: String,
    names: Vec<NameRow>,
    contents: Vec<ContentRow>,
}

#[derive(Deserialize)]
struct NameRow {
    id: String,
    what: String,
    globs: Vec<String>,
}

#[derive(Deserialize)]
struct ContentRow {
    id: String,
    what: String,
    pattern: String,
    /// File-name globs the rule is limited to (none: every file).
    #[serde(default)]
    files: Vec<String>,
    /// Patterns over the match that make it a documented example, not a secret.
    #[serde(default)]
    allow: Vec<String>,
    /// The least Shannon entropy (bits per character) of the `secret`
    /// group: below it the value is a word, a placeholder or a reference.
    #[serde(default)]
    entropy: Option<f64>,
}

/// Which rule a path or a content matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretMatch {
    /// The rule's id (`github-pat`, `env-file`, ...).
    pub rule: String,
    /// What it found, in words (`a GitHub personal access token`).
    pub what: String,
    /// The 1-based line of a content match; `None` for a file name.
    pub line: Option<usize>,
}

struct NameRule {
    id: String,
    what: String,
    /// Globs without a `/` match the file name, the others the path.
    names: GlobSet,
    paths: GlobSet,
}

struct ContentRule {
    id: String,
    what: String,
    pattern: Regex,
    files: Option<GlobSet>,
    allow: Vec<Regex>,
    entropy: Option<f64>,
}

/// The compiled table.
pub struct SecretRules {
    names: Vec<NameRule>,
    contents: Vec<ContentRule>,
}

/// A case-insensitive glob set of `globs`.
fn glob_set<'a>(globs: impl IntoIterator<Item = &'a String>) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for g in globs {
        let glob = GlobBuilder::new(g)
            .case_insensitive(true)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("glob '{g}': {e}"))?;
        b.add(glob);
    }
    b.build().map_err(|e| e.to_string())
}

fn regex(id: &str, pattern: &str) -> Result<Regex, String> {
    Regex::new(pattern).map_err(|e| format!("rule '{id}': {e}"))
}

impl SecretRules {
    /// The shipped table, compiled once per process.
    pub fn builtin() -> &'static SecretRules {
        static BUILTIN: OnceLock<SecretRules> = OnceLock::new();
        BUILTIN.get_or_init(|| {
            // The table ships with the crate and is tested: failing here is a bug.
            SecretRules::parse(TABLE).unwrap_or_else(|e| panic!("rules/secrets.json: {e}"))
        })
    }

    fn parse(text: &str) -> Result<SecretRules, String> {
        let table: Table = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let names = table
            .names
            .into_iter()
            .map(|r| {
                let (paths, names): (Vec<&String>, Vec<&String>) =
                    r.globs.iter().partition(|g| g.contains('/'));
                Ok(NameRule {
                    names: glob_set(names)?,
                    paths: glob_set(paths)?,
                    id: r.id,
                    what: r.what,
                })
            })
            .collect::<Result<_, String>>()?;
        let contents = table
            .contents
            .into_iter()
            .map(|r| {
                Ok(ContentRule {
                    pattern: regex(&r.id, &r.pattern)?,
                    files: (!r.files.is_empty())
                        .then(|| glob_set(&r.files))
                        .transpose()?,
                    allow: r
                        .allow
                        .iter()
                        .map(|a| regex(&r.id, a))
                        .collect::<Result<_, _>>()?,
                    entropy: r.entropy,
                    id: r.id,
                    what: r.what,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(SecretRules { names, contents })
    }

    /// The name rule the repository path `path` (`/`-separated) matches.
    pub fn by_name(&self, path: &str) -> Option<SecretMatch> {
        let name = path.rsplit('/').next().unwrap_or(path);
        self.names
            .iter()
            .find(|r| r.names.is_match(name) || r.paths.is_match(path))
            .map(|r| SecretMatch {
                rule: r.id.clone(),
                what: r.what.clone(),
                line: None,
            })
    }

    /// The first content rule the file at `path` with `content` matches
    /// (binary content is not read: see [`crate::build_output::is_binary`]).
    pub fn by_content(&self, path: &str, content: &[u8]) -> Option<SecretMatch> {
        if crate::build_output::is_binary(content) {
            return None;
        }
        let text = String::from_utf8_lossy(content);
        let name = path.rsplit('/').next().unwrap_or(path);
        for (n, line) in text.lines().enumerate() {
            let found = self
                .contents
                .iter()
                .filter(|r| r.files.as_ref().map_or(true, |f| f.is_match(name)))
                .find(|r| r.matches(line));
            if let Some(r) = found {
                return Some(SecretMatch {
                    rule: r.id.clone(),
                    what: r.what.clone(),
                    line: Some(n + 1),
                });
            }
        }
        None
    }
}

impl ContentRule {
    fn matches(&self, line: &str) -> bool {
        self.pattern.captures_iter(line).any(|c| {
            let whole = c.get(0).map_or("", |m| m.as_str());
            if self.allow.iter().any(|a| a.is_match(whole)) {
                return false;
            }
            match (self.entropy, c.name("secret")) {
                (Some(min), Some(secret)) => looks_random(secret.as_str(), min),
                _ => true,
            }
        })
    }
}

/// Whether `value` reads like a generated secret rather than a word, an
/// identifier, a placeholder or a UUID: long enough, letters and digits
/// both, and at least `min_entropy` bits per character.
fn looks_random(value: &str, min_entropy: f64) -> bool {
    let value = value.trim_end_matches('=');
    value.len() >= MIN_SECRET_LEN
        && value.bytes().any(|b| b.is_ascii_digit())
        && value.bytes().any(|b| b.is_ascii_alphabetic())
        && !is_uuid(value)
        && shannon_entropy(value) >= min_entropy
}

/// `8-4-4-4-12` hexadecimal groups: an identifier, not a credential.
fn is_uuid(value: &str) -> bool {
    let groups: Vec<&str> = value.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Bits per character of `s` under its own character frequencies.
fn shannon_entropy(s: &str) -> f64 {
    let mut counts = [0usize; 256];
    for b in s.bytes() {
        counts[b as usize] += 1;
    }
    let len = s.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / len;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
