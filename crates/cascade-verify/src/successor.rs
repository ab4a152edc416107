//! Tests that take a removed test's place in the same change, so removing
//! it is a refactor and not a lost check: the same body under another name
//! (a rename), or one parametrised or table-driven test that covers copies
//! it replaces (`@pytest.mark.parametrize`, a Go table with `t.Run`, a loop
//! over cases) and holds every value and every function the removed copy
//! checked. Only tests the change added or changed can take a place, and
//! only in the test files of the same language.
//!
//! Both judges of removed tests use it: the diff rule `removed-test` and
//! the census's `test-disappeared` (where the successor must also have run
//! and passed).

use std::collections::HashSet;

use cascade_git::diff::FileDiff;
use regex::Regex;

use crate::lex;
use crate::rules::{Language, RuleSet, TestSyntax};
use crate::scan::{blank, indent, test_functions};

/// One test of a text: its name, what precedes it since the previous test
/// (decorators, a table of cases) with its own lines, and its body alone.
#[derive(Debug, Clone)]
pub(crate) struct TestText {
    pub name: String,
    pub lang: Language,
    /// The file's path (empty for a text of no file).
    pub file: String,
    /// From the end of the previous test (or the file's start) to this
    /// test's end.
    pub region: String,
    /// The lines after the test's header line, to its end.
    pub body: String,
    /// 0-based lines of `region` in its text.
    pub lines: std::ops::Range<usize>,
}

/// The tests of `text` (of language `lang`), each with its text.
pub(crate) fn tests_in(text: &str, lang: Language, ts: &TestSyntax) -> Vec<TestText> {
    let lines = lex::lex(text, lang.syntax());
    let raw: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut from = 0;
    for (name, i) in test_functions(&lines, ts) {
        let end = end_of(&lines, &raw, i, lang).max(i);
        if i < from {
            continue;
        }
        let join = |r: std::ops::Range<usize>| raw.get(r).map(|l| l.join("\n")).unwrap_or_default();
        out.push(TestText {
            name,
            lang,
            file: String::new(),
            region: join(from..end + 1),
            body: join(i + 1..end + 1),
            lines: from..end + 1,
        });
        from = end + 1;
    }
    out
}

/// The last line of the test whose header is line `i`.
fn end_of(lines: &[lex::Line], raw: &[&str], i: usize, lang: Language) -> usize {
    if lang.indented() {
        let own = raw.get(i).map_or(0, |l| indent(l));
        let mut end = i;
        for (j, l) in lines.iter().enumerate().skip(i + 1) {
            if blank(l) {
                continue;
            }
            if raw.get(j).map_or(0, |r| indent(r)) <= own {
                break;
            }
            end = j;
        }
        return end;
    }
    lex::block_close(lines, i).unwrap_or(lines.len().saturating_sub(1))
}

/// The tests the change added or changed (a region holding an added line)
/// in the new text of its test files.
pub(crate) fn written_tests(files: &[FileDiff], rules: &RuleSet) -> Vec<TestText> {
    let mut out = Vec::new();
    for d in files {
        let (Some(text), Some(lang)) = (d.new_text.as_deref(), rules.language_of(&d.path)) else {
            continue;
        };
        let Some(ts) = rules
            .tests_of(lang)
            .filter(|_| rules.is_test_file(lang, &d.path))
        else {
            continue;
        };
        let added: HashSet<usize> = d.added.iter().map(|n| *n as usize - 1).collect();
        out.extend(
            tests_in(text, lang, ts)
                .into_iter()
                .filter(|t| t.lines.clone().any(|l| added.contains(&l)))
                .map(|t| TestText {
                    file: d.path.clone(),
                    ..t
                }),
        );
    }
    out
}

/// The test of `written` that takes the place of `removed`, if one does.
pub(crate) fn successor<'a>(removed: &TestText, written: &'a [TestText]) -> Option<&'a TestText> {
    let body = squeeze(&removed.body);
    if body.is_empty() {
        return None;
    }
    let checks = checked(&removed.body);
    written.iter().filter(|w| w.lang == removed.lang).find(|w| {
        w.name != removed.name
            && (squeeze(&w.body) == body
                || (parametrised(&w.region)
                    && !checks.calls.is_empty()
                    && checks.held_by(&w.region)))
    })
}

/// The successor's name of test `name` of `old` (a test file's old text in
/// `lang`) among `written`, if it has one.
pub(crate) fn successor_of<'a>(
    old: &str,
    lang: Language,
    ts: &TestSyntax,
    name: &str,
    written: &'a [TestText],
) -> Option<&'a TestText> {
    let removed = tests_in(old, lang, ts)
        .into_iter()
        .find(|t| t.name == name)?;
    successor(&removed, written)
}

/// The text without any whitespace (a rename re-indents nothing, but a
/// formatter may).
fn squeeze(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// What a test checks: the functions it calls (not methods, not assertion
/// helpers) and the numbers it uses.
struct Checks {
    calls: HashSet<String>,
    numbers: HashSet<String>,
}

impl Checks {
    /// Whether `text` names every function and every number.
    fn held_by(&self, text: &str) -> bool {
        let words: HashSet<&str> = WORD
            .get_or_init(|| Regex::new(r"[A-Za-z_][A-Za-z0-9_]*|[0-9][0-9_.]*").expect("fixed"))
            .find_iter(text)
            .map(|m| m.as_str())
            .collect();
        self.calls.iter().all(|c| words.contains(c.as_str()))
            && self.numbers.iter().all(|n| words.contains(n.as_str()))
    }
}

static WORD: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
static CALL: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
static NUMBER: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
static TABLE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();

fn checked(body: &str) -> Checks {
    let call = CALL
        .get_or_init(|| Regex::new(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(").expect("a fixed pattern"));
    let number =
        NUMBER.get_or_init(|| Regex::new(r"(?:^|[^\w.])([0-9][0-9_.]*)").expect("a fixed pattern"));
    // A method (`.toBe(`, `t.Fatal(`) is not what the test exercises.
    let calls = call
        .captures_iter(body)
        .filter_map(|c| c.get(1))
        .filter(|m| !body[..m.start()].ends_with('.'))
        .map(|m| m.as_str())
        .filter(|n| !is_assertion(n))
        .map(str::to_string)
        .collect();
    let numbers = number
        .captures_iter(body)
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str().trim_end_matches('.').to_string())
        .collect();
    Checks { calls, numbers }
}

/// Calls that judge rather than exercise: the runner's assertions, and
/// keywords followed by a parenthesis.
fn is_assertion(name: &str) -> bool {
    name.starts_with("assert")
        || matches!(
            name,
            "expect"
                | "if"
                | "for"
                | "while"
                | "return"
                | "not"
                | "and"
                | "or"
                | "in"
                | "len"
                | "func"
                | "fn"
        )
}

/// Whether a test's region runs its body over several cases.
fn parametrised(region: &str) -> bool {
    TABLE
        .get_or_init(|| {
            Regex::new(r"\bparametrize\b|\.each\b|\bt\.Run\s*\(|\bfor\b[^\n]*\b(in|of|range)\b")
                .expect("a fixed pattern")
        })
        .is_match(region)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tests_of(text: &str, lang: Language) -> Vec<TestText> {
        let rules = RuleSet::builtin();
        tests_in(text, lang, rules.tests_of(lang).expect("tests"))
    }

    #[test]
    fn a_renamed_test_with_the_same_body_succeeds_it() {
        let old = tests_of("def test_a():\n    assert f(1) == 2\n", Language::Python);
        let new = tests_of(
            "def test_f_adds_one():\n    assert f(1) == 2\n",
            Language::Python,
        );
        assert_eq!(
            successor(&old[0], &new).map(|t| t.name.as_str()),
            Some("test_f_adds_one")
        );
        let weaker = tests_of("def test_f():\n    assert f(1)\n", Language::Python);
        assert!(successor(&old[0], &weaker).is_none());
    }

    #[test]
    fn a_parametrised_test_holding_every_value_succeeds_the_copies() {
        let old = tests_of(
            "def test_one():\n    assert total([1, 2]) == 3\n\n\ndef test_two():\n    assert total([]) == 0\n",
            Language::Python,
        );
        let new = tests_of(
            "import pytest\n\n\n@pytest.mark.parametrize(\"xs, want\", [([1, 2], 3), ([], 0)])\ndef test_total(xs, want):\n    assert total(xs) == want\n",
            Language::Python,
        );
        for t in &old {
            assert_eq!(
                successor(t, &new).map(|t| t.name.as_str()),
                Some("test_total")
            );
        }
        // A value of a copy the table lost: that copy is not covered.
        let short = tests_of(
            "import pytest\n\n\n@pytest.mark.parametrize(\"xs, want\", [([1, 2], 3)])\ndef test_total(xs, want):\n    assert total(xs) == want\n",
            Language::Python,
        );
        assert!(successor(&old[0], &short).is_some());
        assert!(successor(&old[1], &short).is_none());
    }

    #[test]
    fn a_loop_of_typescript_tests_succeeds_the_copies() {
        let old = tests_of(
            "test('sums two', () => {\n  expect(total([1, 2])).toBe(3);\n});\n",
            Language::TypeScript,
        );
        let new = tests_of(
            "const cases = [\n  [[1, 2], 3],\n];\n\nfor (const [xs, want] of cases) {\n  test(`sums ${xs.length} items`, () => {\n    expect(total(xs)).toBe(want);\n  });\n}\n",
            Language::TypeScript,
        );
        assert_eq!(new.len(), 1, "{new:?}");
        assert!(successor(&old[0], &new).is_some(), "{old:?} {new:?}");
    }

    #[test]
    fn go_tables_and_rust_bodies_have_their_extent() {
        let go = tests_of(
            "package calc\n\nfunc TestTotal(t *testing.T) {\n\tfor _, c := range cases {\n\t\tt.Run(c.name, func(t *testing.T) {})\n\t}\n}\n\nfunc TestOther(t *testing.T) {}\n",
            Language::Go,
        );
        assert_eq!(go.len(), 2);
        assert!(go[0].body.contains("t.Run") && !go[0].body.contains("TestOther"));
        let rust = tests_of(
            "#[test]\nfn sums() {\n    assert_eq!(total(&[1, 2]), 3);\n}\n",
            Language::Rust,
        );
        assert_eq!(rust[0].name, "sums");
        assert!(rust[0].region.starts_with("#[test]"));
    }
}
