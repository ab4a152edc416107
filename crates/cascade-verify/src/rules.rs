//! The rules, as data: one table per language (`rules/<language>.json`,
//! compiled into the binary) plus the project's `.cascade/verify.json`.
//!
//! A rule matches one added line: `pattern` (a regex) against the line's
//! code (`"in": "code"`, the default: comments removed, string contents
//! blanked), its code with strings (`"code_strings"`), its comments
//! (`"comment"`) or the raw line (`"line"`). `sole_statement_of` (a regex)
//! narrows it to a line that is the whole body of a block whose header
//! matches (a function that only says `pass`, on its own line or on the
//! header's: `def f(): pass`; `not_header` excludes headers such as
//! `if (x) {`), `new_function` to such a block whose header this change
//! added too, `unless_near` (a regex) lets it go when the header or one of
//! the three lines above it matches, and `excuse` names a check in code that
//! lets it go (`python-abstract`: an abstract method of a class that really
//! is abstract, an `@overload` with an implementation, a `Protocol` member,
//! a `.pyi` stub file).
//!
//! Every table may also say how to find its test functions (`tests`), which
//! files hold tests its runner runs (`test_files`, globs), and which parts
//! of shared files configure the test runner (`config`: a TOML/INI
//! `section`, single `lines`, or `json_keys` of a JSON file). The common
//! table lists the files a story may not change at all unless it allows them
//! (`protected`: cascade's, CI, test-runner and lint configuration).

use std::path::Path;

use regex::Regex;
use serde::Deserialize;

use crate::error::VerifyError;
use crate::lex::{self, Syntax};

/// The languages the built-in tables know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    Rust,
    Python,
    TypeScript,
    Go,
}

impl Language {
    pub const ALL: [Language; 4] = [
        Language::Rust,
        Language::Python,
        Language::TypeScript,
        Language::Go,
    ];

    /// The name tables and `verify.json` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::TypeScript => "typescript",
            Language::Go => "go",
        }
    }

    /// `typescript` also answers to `javascript`, `ts` and `js`.
    pub fn parse(name: &str) -> Option<Language> {
        match name.to_ascii_lowercase().as_str() {
            "rust" | "rs" => Some(Language::Rust),
            "python" | "py" => Some(Language::Python),
            "typescript" | "javascript" | "ts" | "js" => Some(Language::TypeScript),
            "go" | "golang" => Some(Language::Go),
            _ => None,
        }
    }

    pub fn syntax(self) -> &'static Syntax {
        match self {
            Language::Rust => &lex::RUST,
            Language::Python => &lex::PYTHON,
            Language::TypeScript => &lex::C_LIKE,
            Language::Go => &lex::GO,
        }
    }

    /// Blocks are braces, or indentation (Python).
    pub fn indented(self) -> bool {
        self == Language::Python
    }

    fn table(self) -> &'static str {
        match self {
            Language::Rust => include_str!("../rules/rust.json"),
            Language::Python => include_str!("../rules/python.json"),
            Language::TypeScript => include_str!("../rules/typescript.json"),
            Language::Go => include_str!("../rules/go.json"),
        }
    }
}

const COMMON: &str = include_str!("../rules/common.json");

/// Which part of a line a rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    #[default]
    Code,
    CodeStrings,
    Comment,
    Line,
}

/// A rule as written in a table or `verify.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub id: String,
    pub pattern: String,
    pub message: String,
    #[serde(default, rename = "in")]
    pub view: View,
    #[serde(default)]
    pub sole_statement_of: Option<String>,
    /// With `sole_statement_of`: a header that matches this is not one
    /// (`if (x) {` is not a function).
    #[serde(default)]
    pub not_header: Option<String>,
    #[serde(default)]
    pub unless_near: Option<String>,
    #[serde(default)]
    pub new_function: bool,
    /// A check in code that lets the finding go (see [`Excuse`]).
    #[serde(default)]
    pub excuse: Option<String>,
    /// In `verify.json`: the languages it applies to (none: every language).
    #[serde(default)]
    pub languages: Vec<String>,
    /// In `verify.json`: file extensions it applies to (for languages
    /// without a table; such files are read as plain code).
    #[serde(default)]
    pub extensions: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestsSpec {
    #[serde(default)]
    attribute: Option<String>,
    name: String,
}

/// A part of a shared file that configures the test runner (a table's or
/// `verify.json`'s `config`): a change to it is a `test-config-edit`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    /// What it is, for the message ("pytest settings in pyproject.toml").
    pub what: String,
    /// The files (globs, repository-relative).
    pub files: Vec<String>,
    /// A section: from a line matching this to the line before the next
    /// one matching `section_end` (default: the next `[header]`).
    #[serde(default)]
    pub section: Option<String>,
    #[serde(default)]
    pub section_end: Option<String>,
    /// Single lines: an added or removed line matching this.
    #[serde(default)]
    pub lines: Option<String>,
    /// JSON pointers (`/scripts/test`) whose value must not change.
    #[serde(default)]
    pub json_keys: Vec<String>,
    /// Whether a file the change adds is judged too: a new `conftest.py`
    /// acts on the base's tests (a new `Cargo.toml` is a new crate's own).
    #[serde(default)]
    pub new_files: bool,
}

/// Files a story may not change unless it allows them (`protected`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProtectedSpec {
    what: String,
    paths: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    language: String,
    #[serde(default)]
    extensions: Vec<String>,
    #[serde(default)]
    tests: Option<TestsSpec>,
    #[serde(default)]
    test_files: Vec<String>,
    #[serde(default)]
    rules: Vec<RuleSpec>,
    #[serde(default)]
    config: Vec<ConfigSpec>,
    #[serde(default)]
    protected: Vec<ProtectedSpec>,
}

/// `.cascade/verify.json`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// `false` turns local verification off for the project.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Rule ids to switch off everywhere.
    #[serde(default)]
    pub disable: Vec<String>,
    /// More rules (a rule with a built-in id replaces it).
    #[serde(default)]
    pub rules: Vec<RuleSpec>,
    /// More gate/CI files (globs) a story must not edit unless it allows them.
    #[serde(default)]
    pub protected_paths: Vec<String>,
    /// More test-runner settings in shared files (see [`ConfigSpec`]).
    #[serde(default)]
    pub config: Vec<ConfigSpec>,
}

/// Where a rule applies.
#[derive(Debug, Clone)]
pub(crate) enum Scope {
    Any,
    Languages(Vec<Language>),
    Extensions(Vec<String>),
}

/// A check in code that lets a rule's finding go (a rule's `excuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excuse {
    /// `python-abstract`: an abstract method of a class that is abstract
    /// (an `ABC`, `ABCMeta`, or a subclass of one), an `@overload` that has
    /// an implementation, a member of a `Protocol`, anything in a `.pyi`.
    PythonAbstract,
}

impl Excuse {
    fn parse(name: &str) -> Option<Excuse> {
        match name {
            "python-abstract" => Some(Excuse::PythonAbstract),
            _ => None,
        }
    }
}

/// A compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    pub id: String,
    pub message: String,
    pub(crate) view: View,
    pub(crate) pattern: Regex,
    pub(crate) header: Option<Regex>,
    pub(crate) not_header: Option<Regex>,
    pub(crate) unless_near: Option<Regex>,
    pub(crate) new_function: bool,
    pub(crate) excuse: Option<Excuse>,
    pub(crate) scope: Scope,
}

/// What part of a file a [`ConfigRule`] watches.
#[derive(Debug, Clone)]
pub(crate) enum Watch {
    Section { start: Regex, end: Regex },
    Lines(Regex),
    JsonKeys(Vec<String>),
}

/// A compiled [`ConfigSpec`].
#[derive(Debug, Clone)]
pub(crate) struct ConfigRule {
    pub what: String,
    pub files: globset::GlobSet,
    pub watch: Vec<Watch>,
    /// See [`ConfigSpec::new_files`].
    pub new_files: bool,
}

/// A compiled group of protected files.
#[derive(Debug, Clone)]
pub(crate) struct Protected {
    pub what: String,
    pub set: globset::GlobSet,
}

/// How a language's test functions are found.
#[derive(Debug, Clone)]
pub(crate) struct TestSyntax {
    pub attribute: Option<Regex>,
    pub name: Regex,
}

/// The rules of one view for files of one language (`None`: a file of no
/// known language), matched in one pass per line.
#[derive(Debug, Clone)]
pub(crate) struct ViewSet {
    pub lang: Option<Language>,
    pub view: View,
    pub set: regex::RegexSet,
    /// Indices into `RuleSet::rules`, in the set's order.
    pub rules: Vec<usize>,
}

/// Every rule in effect.
#[derive(Debug, Clone)]
pub struct RuleSet {
    pub(crate) rules: Vec<Rule>,
    pub(crate) sets: Vec<ViewSet>,
    pub(crate) tests: Vec<(Language, TestSyntax)>,
    /// Per language: the files its test runner runs.
    pub(crate) test_files: Vec<(Language, globset::GlobSet)>,
    pub(crate) extensions: Vec<(String, Language)>,
    pub(crate) protected: Vec<Protected>,
    pub(crate) protected_globs: Vec<String>,
    pub(crate) configs: Vec<ConfigRule>,
    /// False when `verify.json` says `"enabled": false`.
    pub enabled: bool,
}

impl RuleSet {
    /// The built-in tables.
    pub fn builtin() -> RuleSet {
        // Built once per process and cloned (the patterns are shared):
        // compiling the tables costs more than the rest of a story's setup,
        // and every new base commit of a run, every job of a fleet worker,
        // asks for them again.
        static BUILTIN: std::sync::OnceLock<RuleSet> = std::sync::OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                // The tables ship with the crate and are tested: failing here is a bug.
                RuleSet::build(None).unwrap_or_else(|e| panic!("built-in verify rules: {e}"))
            })
            .clone()
    }

    /// The built-in tables with `.cascade/verify.json` of `root` applied
    /// when it exists.
    pub fn load(root: &Path) -> Result<RuleSet, VerifyError> {
        RuleSet::load_file(&root.join(".cascade").join("verify.json"))
    }

    /// The built-in tables with the `verify.json` at `path` applied when it exists.
    pub fn load_file(path: &Path) -> Result<RuleSet, VerifyError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RuleSet::builtin()),
            Err(e) => {
                return Err(VerifyError::Read {
                    path: path.to_path_buf(),
                    source: e,
                })
            }
        };
        RuleSet::from_text(path, Some(&text))
    }

    /// The built-in tables with the text of a `verify.json` applied (`None`:
    /// there is none); `origin` names it in errors (a path, or the file at a
    /// commit).
    pub fn from_text(origin: &Path, text: Option<&str>) -> Result<RuleSet, VerifyError> {
        let Some(text) = text else {
            return Ok(RuleSet::builtin());
        };
        let user: UserConfig = serde_json::from_str(text).map_err(|e| VerifyError::Parse {
            path: origin.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        RuleSet::build(Some((origin, user)))
    }

    /// The built-in tables plus a user configuration (`source` names it in errors).
    pub fn build(user: Option<(&Path, UserConfig)>) -> Result<RuleSet, VerifyError> {
        let mut rules = Vec::new();
        let mut tests = Vec::new();
        let mut test_files = Vec::new();
        let mut extensions = Vec::new();
        let mut configs = Vec::new();
        let builtin = Path::new("<built-in rules>");
        let parse_table = |name: &str, text: &str| -> Result<Table, VerifyError> {
            serde_json::from_str(text).map_err(|e| VerifyError::Parse {
                path: builtin.join(format!("{name}.json")),
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })
        };
        for lang in Language::ALL {
            let table = parse_table(lang.as_str(), lang.table())?;
            debug_assert_eq!(table.language, lang.as_str());
            for ext in table.extensions {
                extensions.push((ext, lang));
            }
            if let Some(t) = table.tests {
                tests.push((
                    lang,
                    TestSyntax {
                        attribute: t
                            .attribute
                            .as_deref()
                            .map(|p| regex(builtin, "tests.attribute", p))
                            .transpose()?,
                        name: regex(builtin, "tests.name", &t.name)?,
                    },
                ));
            }
            test_files.push((lang, globs(&table.test_files)?));
            for spec in table.rules {
                rules.push(compile(builtin, spec, Scope::Languages(vec![lang]))?);
            }
            for spec in table.config {
                configs.push(config_rule(builtin, spec)?);
            }
        }
        let common = parse_table("common", COMMON)?;
        for spec in common.rules {
            rules.push(compile(builtin, spec, Scope::Any)?);
        }
        for spec in common.config {
            configs.push(config_rule(builtin, spec)?);
        }
        let mut protected_globs: Vec<String> = Vec::new();
        let mut protected = Vec::new();
        for group in common.protected {
            protected_globs.extend(group.paths.iter().cloned());
            protected.push(Protected {
                what: group.what,
                set: globs(&group.paths)?,
            });
        }
        let mut enabled = true;
        if let Some((path, user)) = user {
            enabled = user.enabled.unwrap_or(true);
            for spec in user.rules {
                let scope = scope_of(path, &spec)?;
                let rule = compile(path, spec, scope)?;
                rules.retain(|r| r.id != rule.id);
                rules.push(rule);
            }
            for id in &user.disable {
                rules.retain(|r| &r.id != id);
            }
            for spec in user.config {
                configs.push(config_rule(path, spec)?);
            }
            if !user.protected_paths.is_empty() {
                protected_globs.extend(user.protected_paths.iter().cloned());
                protected.push(Protected {
                    what: format!("a file {} protects", path.display()),
                    set: globs(&user.protected_paths)?,
                });
            }
        }
        let sets = view_sets(&rules)?;
        Ok(RuleSet {
            rules,
            sets,
            tests,
            test_files,
            extensions,
            protected,
            protected_globs,
            configs,
            enabled,
        })
    }

    /// Whether `id` names a rule in effect (or a structural one); anything
    /// else in a story's `verify_allow` is a file (a glob).
    pub fn has_rule(&self, id: &str) -> bool {
        self.ids().contains(&id)
    }

    /// Whether the test runner of `lang` runs the tests of `path` (a test
    /// file by the runner's naming convention).
    pub fn is_test_file(&self, lang: Language, path: &str) -> bool {
        self.test_files
            .iter()
            .any(|(l, set)| *l == lang && set.is_match(path))
    }

    /// The ids of every rule in effect, plus the structural ones.
    pub fn ids(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.rules.iter().map(|r| r.id.as_str()).collect();
        out.extend(crate::scan::STRUCTURAL);
        out
    }

    /// The protected file globs in effect (cascade's, CI, test-runner and
    /// lint configuration, plus `verify.json`'s `protected_paths`).
    pub fn protected_paths(&self) -> &[String] {
        &self.protected_globs
    }

    /// The language of a path, by extension.
    pub fn language_of(&self, path: &str) -> Option<Language> {
        let ext = Path::new(path).extension()?.to_str()?;
        self.extensions
            .iter()
            .find(|(e, _)| e.eq_ignore_ascii_case(ext))
            .map(|(_, l)| *l)
    }

    pub(crate) fn tests_of(&self, lang: Language) -> Option<&TestSyntax> {
        self.tests.iter().find(|(l, _)| *l == lang).map(|(_, t)| t)
    }
}

/// The rules grouped per (language, view) into regex sets. Rules scoped
/// by extension stay out (they are matched one by one).
fn view_sets(rules: &[Rule]) -> Result<Vec<ViewSet>, VerifyError> {
    let mut out = Vec::new();
    let langs = Language::ALL.iter().copied().map(Some).chain([None]);
    for lang in langs {
        for view in [View::Code, View::CodeStrings, View::Comment, View::Line] {
            let picked: Vec<usize> = rules
                .iter()
                .enumerate()
                .filter(|(_, r)| r.view == view)
                .filter(|(_, r)| match (&r.scope, lang) {
                    (Scope::Any, _) => true,
                    (Scope::Languages(ls), Some(l)) => ls.contains(&l),
                    _ => false,
                })
                .map(|(i, _)| i)
                .collect();
            if picked.is_empty() {
                continue;
            }
            let set = regex::RegexSet::new(picked.iter().map(|&i| rules[i].pattern.as_str()))
                .map_err(|e| VerifyError::Rule {
                    path: Path::new("<rules>").to_path_buf(),
                    id: "(set)".into(),
                    message: e.to_string(),
                })?;
            out.push(ViewSet {
                lang,
                view,
                set,
                rules: picked,
            });
        }
    }
    Ok(out)
}

fn scope_of(path: &Path, spec: &RuleSpec) -> Result<Scope, VerifyError> {
    if !spec.extensions.is_empty() {
        return Ok(Scope::Extensions(
            spec.extensions
                .iter()
                .map(|e| e.trim_start_matches('.').to_string())
                .collect(),
        ));
    }
    if spec.languages.is_empty() {
        return Ok(Scope::Any);
    }
    let mut langs = Vec::new();
    for name in &spec.languages {
        langs.push(Language::parse(name).ok_or_else(|| VerifyError::Rule {
            path: path.to_path_buf(),
            id: spec.id.clone(),
            message: format!(
                "unknown language '{name}' (known: rust, python, typescript/javascript, go; use \"extensions\" for others)"
            ),
        })?);
    }
    Ok(Scope::Languages(langs))
}

fn compile(path: &Path, spec: RuleSpec, scope: Scope) -> Result<Rule, VerifyError> {
    let bad = |what: &str, e: regex::Error| VerifyError::Rule {
        path: path.to_path_buf(),
        id: spec.id.clone(),
        message: format!("invalid {what}: {e}"),
    };
    if spec.id.trim().is_empty() {
        return Err(VerifyError::Rule {
            path: path.to_path_buf(),
            id: spec.id.clone(),
            message: "a rule needs a non-empty id".into(),
        });
    }
    Ok(Rule {
        pattern: Regex::new(&spec.pattern).map_err(|e| bad("pattern", e))?,
        header: spec
            .sole_statement_of
            .as_deref()
            .map(Regex::new)
            .transpose()
            .map_err(|e| bad("sole_statement_of", e))?,
        not_header: spec
            .not_header
            .as_deref()
            .map(Regex::new)
            .transpose()
            .map_err(|e| bad("not_header", e))?,
        unless_near: spec
            .unless_near
            .as_deref()
            .map(Regex::new)
            .transpose()
            .map_err(|e| bad("unless_near", e))?,
        new_function: spec.new_function,
        excuse: spec
            .excuse
            .as_deref()
            .map(|name| {
                Excuse::parse(name).ok_or_else(|| VerifyError::Rule {
                    path: path.to_path_buf(),
                    id: spec.id.clone(),
                    message: format!("unknown excuse '{name}' (known: python-abstract)"),
                })
            })
            .transpose()?,
        view: spec.view,
        id: spec.id,
        message: spec.message,
        scope,
    })
}

/// Globs as one set (`**` crosses folders, `*` does not).
fn globs(patterns: &[String]) -> Result<globset::GlobSet, VerifyError> {
    let mut builder = globset::GlobSetBuilder::new();
    for g in patterns {
        let glob = globset::GlobBuilder::new(g)
            .literal_separator(true)
            .build()
            .map_err(|e| VerifyError::Glob {
                glob: g.clone(),
                message: e.to_string(),
            })?;
        builder.add(glob);
    }
    builder.build().map_err(|e| VerifyError::Glob {
        glob: patterns.join(", "),
        message: e.to_string(),
    })
}

fn config_rule(path: &Path, spec: ConfigSpec) -> Result<ConfigRule, VerifyError> {
    let id = format!("config '{}'", spec.what);
    let mut watch = Vec::new();
    if let Some(start) = &spec.section {
        let end = spec.section_end.as_deref().unwrap_or(r"^\s*\[");
        watch.push(Watch::Section {
            start: regex(path, &id, start)?,
            end: regex(path, &id, end)?,
        });
    }
    if let Some(lines) = &spec.lines {
        watch.push(Watch::Lines(regex(path, &id, lines)?));
    }
    if !spec.json_keys.is_empty() {
        if let Some(bad) = spec.json_keys.iter().find(|k| !k.starts_with('/')) {
            return Err(VerifyError::Rule {
                path: path.to_path_buf(),
                id,
                message: format!("json key '{bad}' must be a JSON pointer like \"/scripts/test\""),
            });
        }
        watch.push(Watch::JsonKeys(spec.json_keys.clone()));
    }
    if watch.is_empty() || spec.files.is_empty() {
        return Err(VerifyError::Rule {
            path: path.to_path_buf(),
            id,
            message:
                "a config entry needs \"files\" and one of \"section\", \"lines\", \"json_keys\""
                    .into(),
        });
    }
    Ok(ConfigRule {
        files: globs(&spec.files)?,
        what: spec.what,
        watch,
        new_files: spec.new_files,
    })
}

fn regex(path: &Path, what: &str, pattern: &str) -> Result<Regex, VerifyError> {
    Regex::new(pattern).map_err(|e| VerifyError::Rule {
        path: path.to_path_buf(),
        id: what.to_string(),
        message: format!("invalid pattern: {e}"),
    })
}
