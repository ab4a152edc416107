//! Findings from the test census (cascade-gates' [`cascade_gates::census`]):
//! a test that passed on the base and no longer runs and passes after the
//! change is `test-disappeared`, whatever syntax did it (a skip marker, an
//! alias of `pytest.skip`, a `collect_ignore`, a `cfg` that is never true, a
//! renamed go test), and the number of tests that ran must not fall.
//!
//! Not flagged: a test the story's `verify_allow` names (its id or its
//! function's name, or the rule id) or its own words ask to remove (see
//! `crate::asked`), a test removed from its file in a
//! change that also deletes the code it uses (a deleted module it names,
//! or a function definition the change removed): an honest clean-up, and
//! a test removed from its file whose place another took that ran and
//! passed (moved under its name, renamed, or covered by a parametrised
//! test: [`crate::successor`]).

use std::collections::HashSet;

use cascade_gates::census::{compare, Census, CensusRunner, TestOutcome};
use cascade_git::diff::{FileDiff, FileStatus};

use crate::rules::RuleSet;
use crate::scan::{finding, Finding, Intent};

/// Rule id: a test the base collected and passed no longer runs and passes.
pub const TEST_DISAPPEARED: &str = "test-disappeared";
/// Rule id: the runner's report after the change does not add up (a test
/// reported twice, more result lines than the runner counted), where the
/// base's did: something wrote results of its own into the output the
/// census reads.
pub const CENSUS_MISMATCH: &str = "census-mismatch";

/// The `census-mismatch` findings of gate `gate`: the doubts of its census
/// `now`, when its base's census `base` had none (a base whose report does
/// not add up either, a test that prints result lines of its own under
/// `--nocapture`, say, says nothing about the change).
pub fn mismatched(gate: &str, base: &Census, now: &Census) -> Vec<Finding> {
    if !base.doubts.is_empty() {
        return Vec::new();
    }
    now.doubts
        .iter()
        .map(|d| {
            finding(
                CENSUS_MISMATCH,
                gate,
                0,
                &format!(
                    "the {} report of gate '{gate}' does not add up: {d}; the tests may have written results of their own",
                    now.runner.name()
                ),
                "",
            )
        })
        .collect()
}

/// The `test-disappeared` findings of gate `gate`'s census `now` against
/// its base's census `base`, for the change `files`.
pub fn disappeared(
    gate: &str,
    base: &Census,
    now: &Census,
    files: &[FileDiff],
    rules: &RuleSet,
    intent: &Intent,
) -> Vec<Finding> {
    if intent.allow.iter().any(|a| a == TEST_DISAPPEARED) {
        return Vec::new();
    }
    let cmp = compare(base, now);
    let deleted = deleted_symbols(files, rules);
    let written = crate::successor::written_tests(files, rules);
    let mut out = Vec::new();
    let mut excused = 0;
    for (id, outcome) in &cmp.lost {
        if *outcome == Some(TestOutcome::Failed) {
            // A failing test fails its gate: nothing disappeared.
            continue;
        }
        let name = short_name(base.runner, id);
        if intent.removes_test(id, name) {
            excused += 1;
            continue;
        }
        if parametrised_now(id, now) {
            excused += 1;
            continue;
        }
        let home = files
            .iter()
            .find(|d| holds(rules, d, d.old_text.as_deref(), name));
        if let Some(d) = home {
            let removed = !holds(rules, d, d.new_text.as_deref(), name);
            if removed
                && (uses_deleted(d.old_text.as_deref(), &deleted, name)
                    || took_place(d, name, &written, rules, now))
            {
                excused += 1;
                continue;
            }
        }
        let how = match outcome {
            Some(TestOutcome::Skipped) => "is now skipped",
            _ => "is no longer collected or run",
        };
        let (file, line) = match home {
            Some(d) => (d.path.as_str(), line_of(d.new_text.as_deref(), name)),
            None => (gate, 0),
        };
        out.push(finding(
            TEST_DISAPPEARED,
            file,
            line,
            &format!(
                "test '{id}' passed on the base and {how} (gate '{gate}', {})",
                base.runner.name()
            ),
            "",
        ));
    }
    if out.is_empty() && cmp.ran_now + excused < cmp.ran_before {
        out.push(finding(
            TEST_DISAPPEARED,
            gate,
            0,
            &format!(
                "{} tests ran on the base and {} now (gate '{gate}')",
                cmp.ran_before, cmp.ran_now
            ),
            "",
        ));
    }
    out
}

/// Whether test `id` now runs once per parameter (pytest's `id[...]`), and
/// every one of them passed.
fn parametrised_now(id: &str, now: &Census) -> bool {
    let prefix = format!("{id}[");
    let mut cases = now
        .tests
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .peekable();
    cases.peek().is_some() && cases.all(|(_, o)| *o == TestOutcome::Passed)
}

/// Whether `text` (a side of `d`) defines test `name`: a function of that
/// name, or a test of that title (vitest, jest).
fn holds(rules: &RuleSet, d: &FileDiff, text: Option<&str>, name: &str) -> bool {
    if defines(text, name) {
        return true;
    }
    let (Some(text), Some(lang)) = (text, rules.language_of(&d.path)) else {
        return false;
    };
    rules.tests_of(lang).is_some_and(|ts| {
        crate::successor::tests_in(text, lang, ts)
            .iter()
            .any(|t| t.name == name)
    })
}

/// Whether test `name`, removed from `home`, moved to another file or was
/// replaced by a renamed or parametrised test ([`crate::successor`]) that
/// ran and passed now.
fn took_place(
    home: &FileDiff,
    name: &str,
    written: &[crate::successor::TestText],
    rules: &RuleSet,
    now: &Census,
) -> bool {
    let passes = |n: &str| {
        now.with(TestOutcome::Passed)
            .any(|id| short_name(now.runner, id) == n)
    };
    if passes(name) {
        return true;
    }
    let path = home.old_path.as_deref().unwrap_or(&home.path);
    let (Some(old), Some(lang)) = (home.old_text.as_deref(), rules.language_of(path)) else {
        return false;
    };
    rules
        .tests_of(lang)
        .and_then(|ts| crate::successor::successor_of(old, lang, ts, name, written))
        .is_some_and(|t| passes(&t.name))
}

/// The function (or module) name of a census id: pytest
/// `tests.test_a.TestK.test_p[1]` -> `test_p`, cargo
/// `src/lib.rs[calc]::tests::adds` -> `adds`, go `example.com/m.TestA/sub`
/// -> `TestA`, vitest/jest `src/a.test.ts > total > sums` -> `sums`.
pub fn short_name(runner: CensusRunner, id: &str) -> &str {
    match runner {
        CensusRunner::Pytest => {
            let id = id.split('[').next().unwrap_or(id);
            id.rsplit('.').next().unwrap_or(id)
        }
        CensusRunner::Cargo => {
            let last = id.rsplit("::").next().unwrap_or(id);
            last.rsplit(" - ").next().unwrap_or(last)
        }
        CensusRunner::Go => {
            let last = id.rsplit('.').next().unwrap_or(id);
            last.split('/').next().unwrap_or(last)
        }
        CensusRunner::Vitest | CensusRunner::Jest => id
            .rsplit(cascade_gates::census::JS_SEPARATOR)
            .next()
            .unwrap_or(id),
    }
}

/// What the change deleted outright in code that is not a test: the stems
/// of deleted source files, and functions whose definition is gone.
pub(crate) fn deleted_symbols(files: &[FileDiff], rules: &RuleSet) -> HashSet<String> {
    let def = regex::Regex::new(r"^\s*(?:export\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:def|fn|func|function)\s+(?:\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]*)")
        .expect("a fixed pattern");
    let mut out = HashSet::new();
    for d in files {
        let path = d.old_path.as_deref().unwrap_or(&d.path);
        let lang = rules.language_of(path);
        let is_test = lang.is_some_and(|l| rules.is_test_file(l, path));
        // Where tests are marked by an attribute (Rust) any file may hold
        // them beside the code: its top-level functions that are not tests
        // are code.
        let inline = lang
            .and_then(|l| rules.tests_of(l))
            .is_some_and(|ts| ts.attribute.is_some());
        if is_test && !inline {
            continue;
        }
        let Some(old) = d.old_text.as_deref() else {
            continue;
        };
        let test_dir = path.starts_with("tests/") || path.contains("/tests/");
        if d.status == FileStatus::Deleted && (!is_test || (inline && !test_dir)) {
            if let Some(stem) = std::path::Path::new(path)
                .file_stem()
                .and_then(|s| s.to_str())
            {
                out.insert(stem.to_string());
            }
        }
        let tests: HashSet<String> = match (is_test, lang) {
            (true, Some(l)) => rules.tests_of(l).map_or_else(HashSet::new, |ts| {
                crate::scan::test_functions(&crate::lex::lex(old, l.syntax()), ts)
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect()
            }),
            _ => HashSet::new(),
        };
        let new = d.new_text.as_deref().unwrap_or("");
        for l in old.lines() {
            if is_test && l.starts_with(char::is_whitespace) {
                continue;
            }
            if let Some(name) = def.captures(l).and_then(|c| c.get(1)) {
                if !tests.contains(name.as_str()) && !defines(Some(new), name.as_str()) {
                    out.insert(name.as_str().to_string());
                }
            }
        }
    }
    out
}

/// Whether the old text of a test's file names something the change
/// deleted (other than the test itself).
pub(crate) fn uses_deleted(old: Option<&str>, deleted: &HashSet<String>, test: &str) -> bool {
    old.is_some_and(|t| deleted.iter().any(|s| s != test && has_word(t, s)))
}

/// Whether `text` defines a function (or test) `name`.
fn defines(text: Option<&str>, name: &str) -> bool {
    let Some(text) = text else { return false };
    text.lines().any(|l| {
        let t = l.trim_start();
        [
            "def ",
            "fn ",
            "func ",
            "async def ",
            "pub fn ",
            "function ",
            "export function ",
        ]
        .iter()
        .any(|kw| {
            t.strip_prefix(kw)
                .is_some_and(|r| starts_with_word(r, name))
        })
    })
}

fn starts_with_word(text: &str, word: &str) -> bool {
    text.strip_prefix(word)
        .is_some_and(|r| !r.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
}

/// Whether `word` stands in `text` as a whole identifier.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

/// 1-based line where `name` is defined in `text` (0 when it is not).
fn line_of(text: Option<&str>, name: &str) -> u32 {
    text.and_then(|t| {
        t.lines()
            .position(|l| l.contains(name))
            .map(|i| i as u32 + 1)
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_gates::census::TestOutcome::*;

    fn census(pairs: &[(&str, TestOutcome)]) -> Census {
        Census {
            runner: CensusRunner::Pytest,
            tests: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            doubts: Vec::new(),
        }
    }

    #[test]
    fn a_report_that_does_not_add_up_is_a_finding_unless_the_bases_did_not_either() {
        let base = census(&[("tests::a", Passed)]);
        let mut now = census(&[("tests::a", Passed)]);
        now.doubts.push("test 'tests::a' is reported twice".into());
        let found = mismatched("tests", &base, &now);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rule, CENSUS_MISMATCH);
        assert!(found[0].message.contains("reported twice"), "{found:?}");
        let mut odd_base = base.clone();
        odd_base.doubts.push("block 1 reported 2 passed".into());
        assert!(mismatched("tests", &odd_base, &now).is_empty());
        assert!(mismatched("tests", &base, &base).is_empty());
    }

    fn diff(path: &str, status: FileStatus, old: Option<&str>, new: Option<&str>) -> FileDiff {
        FileDiff {
            path: path.into(),
            old_path: None,
            status,
            added: vec![],
            removed: vec![1],
            old_text: old.map(str::to_string),
            new_text: new.map(str::to_string),
            link_target: None,
        }
    }

    #[test]
    fn a_skipped_or_missing_test_is_found_whatever_did_it() {
        let rules = RuleSet::builtin();
        let base = census(&[
            ("tests.test_a.test_one", Passed),
            ("tests.test_b.test_two", Passed),
        ]);
        let now = census(&[("tests.test_a.test_one", Skipped)]);
        let f = disappeared("pytest", &base, &now, &[], &rules, &Intent::default());
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0]
            .message
            .contains("'tests.test_a.test_one' passed on the base and is now skipped"));
        assert!(f[1].message.contains("is no longer collected"));
        let allow = Intent {
            allow: vec!["test_one".into(), "tests.test_b.test_two".into()],
            ..Intent::default()
        };
        assert!(disappeared("pytest", &base, &now, &[], &rules, &allow).is_empty());
    }

    #[test]
    fn a_test_deleted_with_the_code_it_uses_is_not_flagged() {
        let rules = RuleSet::builtin();
        let base = census(&[
            ("tests.test_legacy.test_old", Passed),
            ("tests.test_a.test_one", Passed),
        ]);
        let now = census(&[("tests.test_a.test_one", Passed)]);
        let test_old = "from legacy import old\n\ndef test_old():\n    assert old() == 1\n";
        let files = [
            diff(
                "legacy.py",
                FileStatus::Deleted,
                Some("def old():\n    return 1\n"),
                None,
            ),
            diff(
                "tests/test_legacy.py",
                FileStatus::Deleted,
                Some(test_old),
                None,
            ),
        ];
        assert!(disappeared("pytest", &base, &now, &files, &rules, &Intent::default()).is_empty());
        // The test deleted alone (its code stays): found.
        let f = disappeared(
            "pytest",
            &base,
            &now,
            &files[1..],
            &rules,
            &Intent::default(),
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].file, "tests/test_legacy.py");
    }

    #[test]
    fn a_renamed_or_moved_test_that_passes_is_not_flagged() {
        let rules = RuleSet::builtin();
        let base = census(&[("tests.test_a.test_total", Passed)]);
        let old = "def test_total():\n    assert total([1, 2]) == 3\n";
        let renamed = "def test_total_of_two():\n    assert total([1, 2]) == 3\n";
        let mut d = diff(
            "tests/test_a.py",
            FileStatus::Modified,
            Some(old),
            Some(renamed),
        );
        d.added = vec![1];
        let files = [d];
        let now = census(&[("tests.test_a.test_total_of_two", Passed)]);
        assert!(disappeared("pytest", &base, &now, &files, &rules, &Intent::default()).is_empty());
        // The successor did not pass: the test is lost.
        let failing = census(&[("tests.test_a.test_total_of_two", Skipped)]);
        let f = disappeared(
            "pytest",
            &base,
            &failing,
            &files,
            &rules,
            &Intent::default(),
        );
        assert_eq!(f.len(), 1, "{f:?}");
        // Parametrised in place: every case ran and passed.
        let cases = census(&[
            ("tests.test_a.test_total[xs0-3]", Passed),
            ("tests.test_a.test_total[xs1-0]", Passed),
        ]);
        assert!(disappeared("pytest", &base, &cases, &[], &rules, &Intent::default()).is_empty());
        let one_skipped = census(&[
            ("tests.test_a.test_total[xs0-3]", Passed),
            ("tests.test_a.test_total[xs1-0]", Skipped),
        ]);
        assert_eq!(
            disappeared(
                "pytest",
                &base,
                &one_skipped,
                &[],
                &rules,
                &Intent::default()
            )
            .len(),
            1
        );
        // Moved under its own name to a file that ran.
        let moved = census(&[("tests.test_b.test_total", Passed)]);
        let gone = [diff(
            "tests/test_a.py",
            FileStatus::Deleted,
            Some(old),
            None,
        )];
        assert!(disappeared("pytest", &base, &moved, &gone, &rules, &Intent::default()).is_empty());
    }

    #[test]
    fn short_names_per_runner() {
        assert_eq!(
            short_name(CensusRunner::Pytest, "tests.test_a.TestK.test_p[a.b]"),
            "test_p"
        );
        assert_eq!(
            short_name(CensusRunner::Cargo, "src/lib.rs[calc]::tests::adds"),
            "adds"
        );
        assert_eq!(
            short_name(CensusRunner::Cargo, "doc[calc]::src/lib.rs - add"),
            "add"
        );
        assert_eq!(
            short_name(CensusRunner::Go, "example.com/m.TestA/sub"),
            "TestA"
        );
    }
}
