//! Gate configuration: Plan Cascade's `quality_gates` (in prd.json), the
//! `.cascade/gates.json` override, and the resolved [`GateSet`].
//!
//! Shape (Plan Cascade's, plus cascade's `inputs`, `cache_failures`,
//! `working_dir`, `fail_on_output`, `parser`, `extensions`, `rerun_failures`):
//!
//! ```json
//! {"enabled": true, "fail_fast": false, "use_cache": true,
//!  "gates": [{"name": "tests", "type": "test", "required": true,
//!             "command": "cargo", "args": ["test"], "timeout_seconds": 600,
//!             "env": {"RUST_LOG": "off"}, "incremental": false,
//!             "inputs": ["src/**", "Cargo.*"], "cache_failures": false,
//!             "working_dir": "."}]}
//! ```
//!
//! Also `toolchain` per gate (an argv whose output joins the cache key, e.g.
//! `["rustc", "-vV"]`; inferred from the program when absent, `[]` for
//! none) and, at the top level, `remote_cache`: a URL or `{"url", "mode",
//! "timeout_ms", "flush_ms"}` (see [`crate::cache::remote`]).
//!
//! `command` may also be a whole command line (`"npm test"`) with no `args`;
//! it is split into words (quotes respected) — never given to a shell.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Deserialize;

use crate::detect;

/// Default per-gate timeout when none is configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Why the gate configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum GateConfigError {
    #[error("cannot read gate config '{}': {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid gate config in {origin}: {message} ({})", invalid_hint(.origin))]
    Invalid { origin: String, message: String },
    #[error("gate '{gate}' in {origin}: {message}")]
    Gate {
        origin: String,
        gate: String,
        message: String,
    },
    /// The remote cache settings cannot work (bad URL, mode, missing secret).
    #[error(transparent)]
    Remote(#[from] crate::cache::remote::RemoteError),
}

/// What to do about an invalid config, for where it came from: a PRD's
/// `quality_gates` section is fixed or removed (never the PRD itself), a
/// `.cascade/gates.json` fixed or deleted.
fn invalid_hint(origin: &str) -> &'static str {
    if origin.starts_with("prd.json") {
        "fix the `quality_gates` section of the PRD, or remove that section to use the default gates"
    } else {
        "fix that file, or delete it to use the gates from prd.json or the defaults"
    }
}

/// The kind of a gate; decides its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GateKind {
    Format,
    Typecheck,
    Lint,
    Test,
    Custom,
    Verification,
}

impl GateKind {
    /// The words a gate's `type` may be, and the kind each means (the first
    /// word of each kind is its name). Anything else is an error: a typo such
    /// as `"tset"` must not quietly become a custom gate.
    pub const SPELLINGS: &'static [(&'static str, GateKind)] = &[
        ("format", GateKind::Format),
        ("fmt", GateKind::Format),
        ("formatting", GateKind::Format),
        ("typecheck", GateKind::Typecheck),
        ("type_check", GateKind::Typecheck),
        ("types", GateKind::Typecheck),
        ("build", GateKind::Typecheck),
        ("compile", GateKind::Typecheck),
        ("lint", GateKind::Lint),
        ("linter", GateKind::Lint),
        ("test", GateKind::Test),
        ("tests", GateKind::Test),
        ("unit", GateKind::Test),
        ("unittest", GateKind::Test),
        ("custom", GateKind::Custom),
        ("verification", GateKind::Verification),
        ("verify", GateKind::Verification),
        ("verifier", GateKind::Verification),
        ("review", GateKind::Verification),
    ];

    /// The kind a `type` word names (case ignored); `None` if unknown.
    pub fn parse(s: &str) -> Option<GateKind> {
        cascade_plan::text::spelled(Self::SPELLINGS, s)
    }

    /// The kinds' names, for messages.
    fn names() -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::new();
        let mut seen: Vec<GateKind> = Vec::new();
        for (w, k) in Self::SPELLINGS {
            if !seen.contains(k) {
                seen.push(*k);
                names.push(w);
            }
        }
        names
    }

    /// Run order: format (0), then everything else in parallel (1), then verification (2).
    pub fn group(self) -> usize {
        match self {
            GateKind::Format => 0,
            GateKind::Verification => 2,
            _ => 1,
        }
    }
}

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `.cascade/gates.json`.
    GatesJson(PathBuf),
    /// `quality_gates` of prd.json.
    Prd,
    /// Nothing configured: defaults from the detected project types.
    Detected,
}

/// One gate, ready to run.
#[derive(Debug, Clone)]
pub struct Gate {
    pub name: String,
    pub kind: GateKind,
    pub required: bool,
    /// Program (looked up on PATH when it has no slash).
    pub program: String,
    pub args: Vec<String>,
    pub timeout: Duration,
    /// Extra environment, sorted.
    pub env: BTreeMap<String, String>,
    /// Pass the changed files instead of `.` (see [`crate::incremental`]).
    pub incremental: bool,
    /// Extensions an incremental run cares about (empty: all files).
    pub extensions: Vec<String>,
    /// Globs (repository-relative) restricting the fingerprint.
    pub inputs: Vec<String>,
    pub inputs_set: Option<GlobSet>,
    pub cache_failures: bool,
    /// Folder relative to the repository root (`.` for the root).
    pub working_dir: String,
    /// Output on stdout means failure (`gofmt -l`).
    pub fail_on_output: bool,
    /// Error parser name (`cargo`, `pytest`, ...); `None`: chosen from the program.
    pub parser: Option<String>,
    /// Toolchain command whose output joins the cache key; `None`: inferred
    /// from the program ([`crate::toolchain::infer`]), `Some([])`: none.
    pub toolchain: Option<Vec<String>>,
}

impl Gate {
    /// A required test gate running `argv` (no shell) from the repository
    /// root, e.g. a story's acceptance-criterion check. `origin` names where
    /// it was written, for errors.
    pub fn from_argv(
        name: &str,
        argv: &[String],
        timeout: Option<Duration>,
        origin: &str,
    ) -> Result<Gate, GateConfigError> {
        let (command, args) = match argv.split_first() {
            Some((c, a)) => (c.clone(), a.to_vec()),
            None => (String::new(), Vec::new()),
        };
        if command.trim().is_empty() {
            return Err(GateConfigError::Gate {
                origin: origin.to_string(),
                gate: name.to_string(),
                message: "the command is empty".into(),
            });
        }
        let mut gate = build_gate(
            RawGate {
                name: name.to_string(),
                kind: Some("test".into()),
                required: true,
                command: command.clone(),
                args: args.clone(),
                timeout_seconds: timeout.map(|t| t.as_secs()),
                env: BTreeMap::new(),
                incremental: false,
                inputs: Vec::new(),
                cache_failures: false,
                working_dir: None,
                fail_on_output: false,
                parser: None,
                extensions: None,
                toolchain: None,
            },
            origin,
        )?;
        // The argv as given: a one-word command is not split at spaces.
        gate.program = command;
        gate.args = args;
        Ok(gate)
    }

    /// The command line for display.
    pub fn command_line(&self) -> String {
        let mut parts = vec![self.program.clone()];
        parts.extend(self.args.iter().cloned());
        parts.join(" ")
    }

    /// The toolchain command that applies to this gate, if any.
    pub fn toolchain_argv(&self) -> Option<Vec<String>> {
        match &self.toolchain {
            Some(argv) if argv.is_empty() => None,
            Some(argv) => Some(argv.clone()),
            None => crate::toolchain::infer(&self.program),
        }
    }
}

/// The resolved gate configuration.
#[derive(Debug, Clone)]
pub struct GateSet {
    pub enabled: bool,
    pub fail_fast: bool,
    pub use_cache: bool,
    /// Re-run a failed gate once; a pass then counts as flaky.
    pub rerun_failures: bool,
    pub gates: Vec<Gate>,
    pub source: ConfigSource,
    /// `remote_cache` of the config, if set.
    pub remote: Option<crate::cache::remote::RemoteConfig>,
    /// Unknown fields of the config, each naming the closest known one
    /// (they are ignored).
    pub warnings: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct RawGates {
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default)]
    fail_fast: bool,
    #[serde(default = "yes")]
    use_cache: bool,
    #[serde(default)]
    rerun_failures: bool,
    #[serde(default)]
    gates: Vec<RawGate>,
    /// A URL string or a [`crate::cache::remote::RemoteConfig`] object.
    #[serde(default)]
    remote_cache: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct RawGate {
    name: String,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default = "yes")]
    required: bool,
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    timeout_seconds: Option<u64>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    incremental: bool,
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    cache_failures: bool,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    fail_on_output: bool,
    #[serde(default)]
    parser: Option<String>,
    #[serde(default)]
    extensions: Option<Vec<String>>,
    #[serde(default)]
    toolchain: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

/// Where the configuration of `prd.json` is said to come from in messages.
const PRD_ORIGIN: &str = "prd.json quality_gates";

/// The gate configuration that applies, as written: a `gates.json`'s text
/// (where it came from, and the text), else the PRD's `quality_gates`, else
/// none.
enum Configured<'a> {
    GatesJson { path: &'a Path, text: &'a str },
    Prd(&'a serde_json::Value),
    Nothing,
}

impl<'a> Configured<'a> {
    fn of(
        gates_json: Option<(&'a Path, &'a str)>,
        prd_quality_gates: Option<&'a serde_json::Value>,
    ) -> Configured<'a> {
        match (gates_json, prd_quality_gates) {
            (Some((path, text)), _) => Configured::GatesJson { path, text },
            (None, Some(v)) if !v.is_null() => Configured::Prd(v),
            _ => Configured::Nothing,
        }
    }

    /// Its unknown fields, each naming the closest known one.
    fn warnings(&self) -> Vec<String> {
        match self {
            Configured::GatesJson { path, text } => serde_json::from_str(text)
                .map(|v| unknown_fields(&v, &path.display().to_string()))
                .unwrap_or_default(),
            Configured::Prd(v) => unknown_fields(v, PRD_ORIGIN),
            Configured::Nothing => Vec::new(),
        }
    }
}

/// `<cascade_dir>/gates.json` and its text, when there is one.
fn read_override(cascade_dir: &Path) -> Result<Option<(PathBuf, String)>, GateConfigError> {
    let path = cascade_dir.join("gates.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some((path, text))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(GateConfigError::Read { path, source }),
    }
}

impl GateSet {
    /// The unknown fields of the gate configuration that applies (what
    /// [`GateSet::warnings`] holds), also when the configuration is invalid
    /// (`cascade validate` reports both).
    pub fn unknown_field_warnings(
        prd_quality_gates: Option<&serde_json::Value>,
        cascade_dir: &Path,
    ) -> Vec<String> {
        let file = read_override(cascade_dir).ok().flatten();
        Configured::of(
            file.as_ref().map(|(p, t)| (p.as_path(), t.as_str())),
            prd_quality_gates,
        )
        .warnings()
    }

    /// Resolves the gates: `<cascade_dir>/gates.json` if present, else the
    /// PRD's `quality_gates`, else defaults for the project types detected
    /// under `project_root`. A config with an empty `gates` list keeps its
    /// settings and takes the detected gates.
    pub fn resolve(
        prd_quality_gates: Option<&serde_json::Value>,
        cascade_dir: &Path,
        project_root: &Path,
    ) -> Result<GateSet, GateConfigError> {
        let file = read_override(cascade_dir)?;
        GateSet::from_override(
            file.as_ref().map(|(p, t)| (p.as_path(), t.as_str())),
            prd_quality_gates,
            project_root,
        )
    }

    /// Like [`GateSet::resolve`] with the text of a `gates.json` given
    /// (`None`: there is none), read from wherever the caller reads it (the
    /// commit a story started from); `origin` names it in errors.
    pub fn from_override(
        gates_json: Option<(&Path, &str)>,
        prd_quality_gates: Option<&serde_json::Value>,
        project_root: &Path,
    ) -> Result<GateSet, GateConfigError> {
        let configured = Configured::of(gates_json, prd_quality_gates);
        let warnings = configured.warnings();
        let (raw, origin, source) = match configured {
            Configured::GatesJson { path, text } => {
                let origin = path.display().to_string();
                // From the text, so its errors keep their positions.
                let raw: RawGates =
                    serde_json::from_str(text).map_err(|e| GateConfigError::Invalid {
                        origin: origin.clone(),
                        message: e.to_string(),
                    })?;
                (
                    Some(raw),
                    origin,
                    ConfigSource::GatesJson(path.to_path_buf()),
                )
            }
            Configured::Prd(v) => {
                let origin = PRD_ORIGIN.to_string();
                let raw: RawGates =
                    serde_json::from_value(v.clone()).map_err(|e| GateConfigError::Invalid {
                        origin: origin.clone(),
                        message: e.to_string(),
                    })?;
                (Some(raw), origin, ConfigSource::Prd)
            }
            Configured::Nothing => (None, String::new(), ConfigSource::Detected),
        };
        let Some(raw) = raw else {
            return Ok(GateSet {
                enabled: true,
                fail_fast: false,
                use_cache: true,
                rerun_failures: false,
                gates: detect::default_gates(project_root),
                source,
                remote: None,
                warnings,
            });
        };
        let remote = match raw.remote_cache {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(url)) => Some(crate::cache::remote::RemoteConfig {
                url: Some(url),
                ..Default::default()
            }),
            Some(v) => Some(serde_json::from_value(v).map_err(|e| GateConfigError::Invalid {
                origin: origin.clone(),
                message: format!(
                    "remote_cache: {e} (a URL, or {{\"url\", \"mode\", \"timeout_ms\", \"flush_ms\"}})"
                ),
            })?),
        };
        let gates = if raw.gates.is_empty() {
            detect::default_gates(project_root)
        } else {
            let mut out = Vec::with_capacity(raw.gates.len());
            for g in raw.gates {
                out.push(build_gate(g, &origin)?);
            }
            out
        };
        let mut names = std::collections::HashSet::new();
        for g in &gates {
            if !names.insert(g.name.as_str()) {
                return Err(GateConfigError::Gate {
                    origin,
                    gate: g.name.clone(),
                    message: "two gates have this name; names must be unique".into(),
                });
            }
        }
        Ok(GateSet {
            enabled: raw.enabled,
            fail_fast: raw.fail_fast,
            use_cache: raw.use_cache,
            rerun_failures: raw.rerun_failures,
            gates: if raw.enabled { gates } else { Vec::new() },
            source,
            remote,
            warnings,
        })
    }
}

/// The unknown fields of a gate config (top level, each gate, an object
/// `remote_cache`), against the fields its serde types read.
fn unknown_fields(value: &serde_json::Value, origin: &str) -> Vec<String> {
    use cascade_plan::strict::{fields_of, unknown_keys};
    let Some(top) = value.as_object() else {
        return Vec::new();
    };
    let mut found = unknown_keys(top, "", fields_of::<RawGates>(), &[]);
    if let Some(gates) = top.get("gates").and_then(|g| g.as_array()) {
        for (i, g) in gates.iter().enumerate() {
            if let Some(g) = g.as_object() {
                found.extend(unknown_keys(
                    g,
                    &format!("gates[{i}]"),
                    fields_of::<RawGate>(),
                    &[],
                ));
            }
        }
    }
    if let Some(remote) = top.get("remote_cache").and_then(|r| r.as_object()) {
        found.extend(unknown_keys(
            remote,
            "remote_cache",
            fields_of::<crate::cache::remote::RemoteConfig>(),
            &[],
        ));
    }
    found
        .into_iter()
        .map(|w| format!("{origin}: {w}"))
        .collect()
}

fn build_gate(g: RawGate, origin: &str) -> Result<Gate, GateConfigError> {
    let err = |message: String| GateConfigError::Gate {
        origin: origin.to_string(),
        gate: g.name.clone(),
        message,
    };
    if g.name.trim().is_empty() {
        return Err(err("the gate name is empty".into()));
    }
    let (program, args) = if g.args.is_empty() {
        let mut words = split_words(&g.command).map_err(|e| err(e.to_string()))?;
        if words.is_empty() {
            return Err(err("the command is empty".into()));
        }
        let program = words.remove(0);
        (program, words)
    } else {
        if g.command.trim().is_empty() {
            return Err(err("the command is empty".into()));
        }
        (g.command.clone(), g.args.clone())
    };
    let working_dir = match &g.working_dir {
        Some(dir) => clean_relative(dir).ok_or_else(|| {
            err(format!(
                "working_dir '{dir}' must be a relative path inside the repository"
            ))
        })?,
        None => ".".to_string(),
    };
    let inputs_set = if g.inputs.is_empty() {
        None
    } else {
        let mut b = GlobSetBuilder::new();
        for pattern in &g.inputs {
            let glob =
                Glob::new(pattern).map_err(|e| err(format!("input glob '{pattern}': {e}")))?;
            b.add(glob);
        }
        Some(b.build().map_err(|e| err(format!("inputs: {e}")))?)
    };
    let kind = match g.kind.as_deref() {
        None => GateKind::Custom,
        Some(t) => GateKind::parse(t).ok_or_else(|| {
            let names = GateKind::names();
            let hint = cascade_plan::text::closest(t, names.iter().copied())
                .map(|n| format!(" (did you mean '{n}'?)"))
                .unwrap_or_default();
            err(format!(
                "unknown gate type '{}'{hint}; types: {}",
                cascade_plan::text::printable_line(t),
                names.join(", ")
            ))
        })?,
    };
    let extensions = g
        .extensions
        .clone()
        .unwrap_or_else(|| detect::extensions_for_program(&program));
    Ok(Gate {
        name: g.name.clone(),
        kind,
        required: g.required,
        program,
        args,
        timeout: g
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TIMEOUT),
        env: g.env.clone(),
        incremental: g.incremental,
        extensions,
        inputs: g.inputs.clone(),
        inputs_set,
        cache_failures: g.cache_failures,
        working_dir,
        fail_on_output: g.fail_on_output,
        parser: g.parser.clone(),
        toolchain: g.toolchain.clone(),
    })
}

/// `a/./b/` -> `a/b`; `None` for absolute paths or `..`.
pub(crate) fn clean_relative(dir: &str) -> Option<String> {
    let mut parts = Vec::new();
    for c in Path::new(dir).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str()?.to_string()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    })
}

/// What is wrong with a command line [`split_words`] was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    #[error("unclosed single quote in '{0}'")]
    UnclosedSingleQuote(String),
    #[error("unclosed double quote in '{0}'")]
    UnclosedDoubleQuote(String),
    #[error("trailing backslash in '{0}'")]
    TrailingBackslash(String),
}

/// Splits a command line into words: whitespace separates, single and
/// double quotes group, backslash escapes. No expansion of any kind, and no
/// comments (`shlex` would drop a word starting with `#`).
pub fn split_words(s: &str) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => cur.push(ch),
                        None => return Err(SplitError::UnclosedSingleQuote(s.into())),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch) => cur.push(ch),
                            None => return Err(SplitError::TrailingBackslash(s.into())),
                        },
                        Some(ch) => cur.push(ch),
                        None => return Err(SplitError::UnclosedDoubleQuote(s.into())),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(ch) => cur.push(ch),
                    None => return Err(SplitError::TrailingBackslash(s.into())),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn splits_words_without_a_shell() {
        assert_eq!(
            split_words(r#"npx tsc --noEmit "a b" 'c;d' e\ f $HOME"#).unwrap(),
            vec!["npx", "tsc", "--noEmit", "a b", "c;d", "e f", "$HOME"]
        );
        assert!(split_words("a 'b").is_err());
    }

    #[test]
    fn an_invalid_config_says_what_to_fix_where_it_came_from() {
        let tmp = tempfile::tempdir().unwrap();
        let cascade = tmp.path().join(".cascade");
        let bad = json!({"gates": "not a list"});
        let err = GateSet::resolve(Some(&bad), &cascade, tmp.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("`quality_gates` section"), "{err}");
        assert!(!err.contains("delete it"), "{err}");
        std::fs::create_dir_all(&cascade).unwrap();
        std::fs::write(cascade.join("gates.json"), "{not json").unwrap();
        let err = GateSet::resolve(None, &cascade, tmp.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("gates.json") && err.contains("delete it"),
            "{err}"
        );
        // An enormous timeout is taken as is (no deadline), not overflowed.
        let huge =
            json!({"gates": [{"name": "t", "command": "true", "timeout_seconds": u64::MAX}]});
        let set = GateSet::resolve(Some(&huge), &tmp.path().join("none"), tmp.path()).unwrap();
        assert_eq!(set.gates[0].timeout, Duration::from_secs(u64::MAX));
    }

    #[test]
    fn prd_config_and_override() {
        let tmp = tempfile::tempdir().unwrap();
        let cascade = tmp.path().join(".cascade");
        let prd = json!({"enabled": true, "fail_fast": true, "gates": [
            {"name": "tests", "type": "test", "command": "npm test", "timeout_seconds": 5,
             "env": {"B": "2", "A": "1"}, "working_dir": "./web/", "inputs": ["web/**"]},
            {"name": "fmt", "type": "format", "required": false, "command": "cargo", "args": ["fmt", "--check"]}
        ]});
        let set = GateSet::resolve(Some(&prd), &cascade, tmp.path()).unwrap();
        assert_eq!(set.source, ConfigSource::Prd);
        assert!(set.fail_fast && set.use_cache);
        let t = &set.gates[0];
        assert_eq!(
            (t.program.as_str(), t.args.clone()),
            ("npm", vec!["test".to_string()])
        );
        assert_eq!(t.working_dir, "web");
        assert_eq!(t.timeout, Duration::from_secs(5));
        assert_eq!(t.kind.group(), 1);
        assert!(t.inputs_set.as_ref().unwrap().is_match("web/a.js"));
        assert_eq!(set.gates[1].kind, GateKind::Format);
        assert!(!set.gates[1].required);

        std::fs::create_dir_all(&cascade).unwrap();
        std::fs::write(
            cascade.join("gates.json"),
            r#"{"gates": [{"name": "only", "command": "true"}]}"#,
        )
        .unwrap();
        let set = GateSet::resolve(Some(&prd), &cascade, tmp.path()).unwrap();
        assert!(matches!(set.source, ConfigSource::GatesJson(_)));
        assert_eq!(set.gates.len(), 1);
        assert!(!set.fail_fast);
    }

    #[test]
    fn bad_configs_say_where() {
        let tmp = tempfile::tempdir().unwrap();
        let bad = json!({"gates": [{"name": "x", "command": "a", "working_dir": "../up"}]});
        let e = GateSet::resolve(Some(&bad), tmp.path(), tmp.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("gate 'x'") && e.contains("working_dir"), "{e}");
        let dup = json!({"gates": [{"name": "x", "command": "a"}, {"name": "x", "command": "b"}]});
        assert!(GateSet::resolve(Some(&dup), tmp.path(), tmp.path()).is_err());
        std::fs::write(tmp.path().join("gates.json"), "{oops").unwrap();
        let e = GateSet::resolve(None, tmp.path(), tmp.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("gates.json"), "{e}");
    }

    #[test]
    fn remote_cache_and_toolchain_settings() {
        let tmp = tempfile::tempdir().unwrap();
        let v = json!({"remote_cache": "s3://b/p", "gates": [
            {"name": "x", "command": "cargo test", "toolchain": ["rustc", "--version"]},
            {"name": "y", "command": "cargo fmt", "toolchain": []},
            {"name": "z", "command": "npm test"}]});
        let set = GateSet::resolve(Some(&v), tmp.path(), tmp.path()).unwrap();
        assert_eq!(set.remote.unwrap().url.as_deref(), Some("s3://b/p"));
        assert_eq!(
            set.gates[0].toolchain_argv().unwrap(),
            vec!["rustc", "--version"]
        );
        assert_eq!(set.gates[1].toolchain_argv(), None);
        assert_eq!(
            set.gates[2].toolchain_argv().unwrap(),
            vec!["node", "--version"]
        );
        let v = json!({"remote_cache": {"url": "file:///x", "mode": "read", "timeout_ms": 10}});
        let r = GateSet::resolve(Some(&v), tmp.path(), tmp.path())
            .unwrap()
            .remote
            .unwrap();
        assert_eq!((r.mode.as_deref(), r.timeout_ms), (Some("read"), Some(10)));
        // A typo is a warning naming the field meant (it is ignored).
        let typo = json!({"remote_cache": {"url": "file:///x", "timout_ms": 10},
            "fail_fats": true, "gates": [{"name": "t", "command": "true", "requierd": false}]});
        let set = GateSet::resolve(Some(&typo), tmp.path(), tmp.path()).unwrap();
        assert_eq!(
            set.warnings,
            [
                "prd.json quality_gates: fail_fats: unknown field (did you mean 'fail_fast'?); it is ignored",
                "prd.json quality_gates: gates[0].requierd: unknown field (did you mean 'required'?); it is ignored",
                "prd.json quality_gates: remote_cache.timout_ms: unknown field (did you mean 'timeout_ms'?); it is ignored",
            ]
        );
        assert_eq!(set.remote.unwrap().timeout_ms, None);
    }

    #[test]
    fn unknown_gate_types_are_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let v = json!({"gates": [{"name": "unit", "type": "tset", "command": "true"}]});
        let e = GateSet::resolve(Some(&v), tmp.path(), tmp.path())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gate 'unit'") && e.contains("unknown gate type 'tset' (did you mean 'test'?); types: format, typecheck, lint, test, custom, verification"),
            "{e}"
        );
        // Plan Cascade's own words still mean what they meant.
        let v = json!({"gates": [{"name": "a", "type": "typecheck", "command": "true"},
            {"name": "b", "type": "Tests", "command": "true"}, {"name": "c", "command": "true"}]});
        let set = GateSet::resolve(Some(&v), tmp.path(), tmp.path()).unwrap();
        let kinds: Vec<GateKind> = set.gates.iter().map(|g| g.kind).collect();
        assert_eq!(
            kinds,
            [GateKind::Typecheck, GateKind::Test, GateKind::Custom]
        );
    }

    #[test]
    fn disabled_config_has_no_gates() {
        let tmp = tempfile::tempdir().unwrap();
        let v = json!({"enabled": false, "gates": [{"name": "x", "command": "a"}]});
        let set = GateSet::resolve(Some(&v), tmp.path(), tmp.path()).unwrap();
        assert!(!set.enabled && set.gates.is_empty());
    }
}
