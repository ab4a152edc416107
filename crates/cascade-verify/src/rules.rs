//! The rules, as data: one table per language (`rules/<language>.json`,
//! compiled into the binary) plus the project's `.cascade/verify.json`.
//!
//! A rule matches one added line: `pattern` (a regex) against the line's
//! code (`"in": "code"`, the default: comments removed, string contents
//! blanked), its code with strings (`"code_strings"`), its comments
//! (`"comment"`) or the raw line (`"line"`). `sole_statement_of` (a regex)
//! narrows it to a line that is the whole body of a block whose header
//! matches (a function that only says `pass`; `not_header` excludes
//! headers such as `if (x) {`), `new_function` to such a block
//! whose header this change added too, and `unless_near` (a regex) lets it
//! go when the header or one of the three lines above it matches (an
//! `@abstractmethod`). Every table may also say how to find its test
//! functions (`tests.attribute`, `tests.name` with the name as group 1), and
//! the common table lists the gate and CI files (`protected_paths`, globs).

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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    language: String,
    #[serde(default)]
    extensions: Vec<String>,
    #[serde(default)]
    tests: Option<TestsSpec>,
    #[serde(default)]
    rules: Vec<RuleSpec>,
    #[serde(default)]
    protected_paths: Vec<String>,
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
    /// More gate/CI files (globs) a story must not edit unasked.
    #[serde(default)]
    pub protected_paths: Vec<String>,
}

/// Where a rule applies.
#[derive(Debug, Clone)]
pub(crate) enum Scope {
    Any,
    Languages(Vec<Language>),
    Extensions(Vec<String>),
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
    pub(crate) scope: Scope,
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
    pub(crate) extensions: Vec<(String, Language)>,
    pub(crate) protected: globset::GlobSet,
    pub(crate) protected_globs: Vec<String>,
    /// False when `verify.json` says `"enabled": false`.
    pub enabled: bool,
}

impl RuleSet {
    /// The built-in tables.
    pub fn builtin() -> RuleSet {
        // The tables ship with the crate and are tested: failing here is a bug.
        RuleSet::build(None).unwrap_or_else(|e| panic!("built-in verify rules: {e}"))
    }

    /// The built-in tables with `.cascade/verify.json` of `root` applied
    /// when it exists.
    pub fn load(root: &Path) -> Result<RuleSet, VerifyError> {
        RuleSet::load_file(&root.join(".cascade").join("verify.json"))
    }

    /// The built-in tables with the `verify.json` at `path` applied when it exists.
    pub fn load_file(path: &Path) -> Result<RuleSet, VerifyError> {
        let path = path.to_path_buf();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return RuleSet::build(None),
            Err(e) => return Err(VerifyError::Read { path, source: e }),
        };
        let user: UserConfig = serde_json::from_str(&text).map_err(|e| VerifyError::Parse {
            path: path.clone(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        RuleSet::build(Some((&path, user)))
    }

    /// The built-in tables plus a user configuration (`source` names it in errors).
    pub fn build(user: Option<(&Path, UserConfig)>) -> Result<RuleSet, VerifyError> {
        let mut rules = Vec::new();
        let mut tests = Vec::new();
        let mut extensions = Vec::new();
        let mut globs: Vec<String> = Vec::new();
        let builtin = Path::new("<built-in rules>");
        for lang in Language::ALL {
            let table: Table =
                serde_json::from_str(lang.table()).map_err(|e| VerifyError::Parse {
                    path: builtin.join(format!("{}.json", lang.as_str())),
                    line: e.line(),
                    column: e.column(),
                    message: e.to_string(),
                })?;
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
            for spec in table.rules {
                rules.push(compile(builtin, spec, Scope::Languages(vec![lang]))?);
            }
        }
        let common: Table = serde_json::from_str(COMMON).map_err(|e| VerifyError::Parse {
            path: builtin.join("common.json"),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        for spec in common.rules {
            rules.push(compile(builtin, spec, Scope::Any)?);
        }
        globs.extend(common.protected_paths);
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
            globs.extend(user.protected_paths);
        }
        let mut builder = globset::GlobSetBuilder::new();
        for g in &globs {
            let glob = globset::GlobBuilder::new(g)
                .literal_separator(true)
                .build()
                .map_err(|e| VerifyError::Glob {
                    glob: g.clone(),
                    message: e.to_string(),
                })?;
            builder.add(glob);
        }
        let protected = builder.build().map_err(|e| VerifyError::Glob {
            glob: globs.join(", "),
            message: e.to_string(),
        })?;
        let sets = view_sets(&rules)?;
        Ok(RuleSet {
            rules,
            sets,
            tests,
            extensions,
            protected,
            protected_globs: globs,
            enabled,
        })
    }

    /// The ids of every rule in effect, plus the structural ones.
    pub fn ids(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.rules.iter().map(|r| r.id.as_str()).collect();
        out.extend([
            crate::scan::REMOVED_TEST,
            crate::scan::EMPTIED_TEST,
            crate::scan::GATE_CONFIG_EDIT,
        ]);
        out
    }

    /// The gate and CI file globs in effect.
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
        view: spec.view,
        id: spec.id,
        message: spec.message,
        scope,
    })
}

fn regex(path: &Path, what: &str, pattern: &str) -> Result<Regex, VerifyError> {
    Regex::new(pattern).map_err(|e| VerifyError::Rule {
        path: path.to_path_buf(),
        id: what.to_string(),
        message: format!("invalid pattern: {e}"),
    })
}
