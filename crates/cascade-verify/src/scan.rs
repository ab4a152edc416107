//! Applies a [`RuleSet`] to a change: the line rules to every added line,
//! and the structural checks (removed tests, emptied tests, edits to
//! protected files and test-runner settings, see the `edits` module) to the
//! files around them; then takes out what the story allows.

use std::collections::HashSet;

use cascade_git::diff::{FileDiff, FileStatus};
use serde::{Deserialize, Serialize};

use crate::lex::{self, Line};
use crate::rules::{Excuse, Language, Rule, RuleSet, Scope, TestSyntax, View, ViewSet};

/// Rule id: a test function of the old text is gone from the new one.
pub const REMOVED_TEST: &str = "removed-test";
/// Rule id: a test function this change touched has an empty body (or a
/// bare `return` as its first statement).
pub const EMPTIED_TEST: &str = "emptied-test";
/// Rule id: a protected file (cascade's, CI, test-runner or lint
/// configuration) changed although the story does not allow it.
pub const GATE_CONFIG_EDIT: &str = "gate-config-edit";
/// Rule id: test-runner settings inside a shared file changed (pytest's
/// section of pyproject.toml, the `test` script of package.json...).
pub const TEST_CONFIG_EDIT: &str = "test-config-edit";
/// Rule id: a new or changed test passes on the base commit without the
/// story's code (found by proving tests, see the `prove` module).
pub const UNPROVEN_TEST: &str = "unproven-test";
/// Rule id: a symbolic link the change adds points outside the repository
/// (see the `links` module).
pub const OUTWARD_SYMLINK: &str = "outward-symlink";
/// Rule id: an attempt left a setting in git's configuration (or a hook)
/// that runs a program (see the `gitconfig` module).
pub const GIT_CONFIG_CHANGED: &str = "git-config-changed";
/// Rule id: a file the change adds or changes looks like a credential (by
/// its content or its name, see the `secrets` module); the engine's commit
/// step refuses it.
pub const CREDENTIAL_CONTENT: &str = "credential-content";
/// The rule ids that are not in a table.
pub const STRUCTURAL: [&str; 11] = [
    crate::census::TEST_DISAPPEARED,
    crate::census::CENSUS_MISMATCH,
    REMOVED_TEST,
    EMPTIED_TEST,
    GATE_CONFIG_EDIT,
    TEST_CONFIG_EDIT,
    UNPROVEN_TEST,
    OUTWARD_SYMLINK,
    GIT_CONFIG_CHANGED,
    CREDENTIAL_CONTENT,
    crate::result_hook::RESULT_HOOK,
];

/// One thing found, at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: String,
    pub file: String,
    /// 1-based; in the old text for a removed test.
    pub line: u32,
    pub message: String,
    /// The line, trimmed and shortened.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: [{}] {}",
            self.file, self.line, self.rule, self.message
        )?;
        if !self.text.is_empty() {
            write!(f, ": `{}`", self.text)?;
        }
        Ok(())
    }
}

/// What the story allows, so wanted findings can go.
#[derive(Debug, Clone, Default)]
pub struct Intent {
    /// A story's `verify_allow`: rule ids, and files (paths or globs) whose
    /// protected-file, test-runner-setting and result-hook findings go.
    pub allow: Vec<String>,
    /// Tests the story's own words ask to remove ([`Intent::with_words`]).
    pub removals: Vec<String>,
}

/// The findings a story may allow by naming their file: what a file
/// changes about how tests are run and reported (a conftest that sorts
/// the collected tests is all three at once).
const BY_FILE: [&str; 3] = [GATE_CONFIG_EDIT, TEST_CONFIG_EDIT, crate::RESULT_HOOK];

impl Intent {
    /// The intent with the tests that `words` (the story's title,
    /// description and acceptance criteria) ask to remove.
    pub fn with_words(mut self, words: &str) -> Intent {
        self.removals = crate::asked::removals_asked(words);
        self
    }

    /// Whether the story asks for test `name` (or the test with id `id`)
    /// to go: named in `verify_allow`, or in a sentence of its own words
    /// that asks for a removal.
    pub fn removes_test(&self, id: &str, name: &str) -> bool {
        self.allow
            .iter()
            .chain(&self.removals)
            .any(|a| a == id || a == name)
    }

    /// Whether the story allows `f`: its rule, or (for an edit of a
    /// protected file, of test-runner settings, or a result hook) its file.
    pub fn allows(&self, rules: &RuleSet, f: &Finding) -> bool {
        self.allow.iter().any(|a| {
            if a == &f.rule {
                return true;
            }
            if rules.has_rule(a) || !BY_FILE.contains(&f.rule.as_str()) {
                return false;
            }
            let entry = a.trim_start_matches("./").trim_end_matches('/');
            entry == f.file
                || f.file.starts_with(&format!("{entry}/"))
                || globset::GlobBuilder::new(entry)
                    .literal_separator(true)
                    .build()
                    .is_ok_and(|g| g.compile_matcher().is_match(&f.file))
        })
    }
}

/// What a change came to: the findings that stand, and those the story
/// allows (reported, so a review and the run's summary can say so).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub findings: Vec<Finding>,
    pub allowed: Vec<Finding>,
}

/// A file, ready for the rules.
pub(crate) struct Prepared<'a> {
    pub diff: &'a FileDiff,
    pub lang: Option<Language>,
    pub raw: Vec<&'a str>,
    pub lines: Vec<Line>,
}

/// Every finding of `rules` in `files`, minus those `intent` allows, sorted
/// by file and line.
pub fn scan(files: &[FileDiff], rules: &RuleSet, intent: &Intent) -> Vec<Finding> {
    check(files, rules, intent).findings
}

/// Every finding of `rules` in `files`, split into those that stand and
/// those `intent` allows, each sorted by file and line.
pub fn check(files: &[FileDiff], rules: &RuleSet, intent: &Intent) -> Verdict {
    let mut out = Vec::new();
    if !rules.enabled {
        return Verdict::default();
    }
    let prepared: Vec<Prepared> = files
        .iter()
        .map(|diff| {
            let lang = rules.language_of(&diff.path);
            let text = diff.new_text.as_deref().unwrap_or("");
            let syntax = lang.map_or(&lex::PLAIN, |l| l.syntax());
            Prepared {
                diff,
                lang,
                raw: text.lines().collect(),
                lines: lex::lex(text, syntax),
            }
        })
        .collect();
    // Test names of the new text of changed test files: a test moved to
    // another file its runner runs is not removed.
    let mut new_tests: HashSet<String> = HashSet::new();
    for p in &prepared {
        if let Some((lang, ts)) = p.lang.and_then(|l| rules.tests_of(l).map(|t| (l, t))) {
            if rules.is_test_file(lang, &p.diff.path) {
                new_tests.extend(test_functions(&p.lines, ts).into_iter().map(|(n, _)| n));
            }
        }
    }
    // What the change deleted outright: a test removed with the code it
    // uses is a clean-up, not a removed test.
    let deleted = crate::census::deleted_symbols(files, rules);
    // Tests the change added or changed: one may take a removed test's
    // place (a rename, a parametrised test replacing copies).
    let written = crate::successor::written_tests(files, rules);
    for p in &prepared {
        line_rules(p, rules, &mut out);
        if let (Some(lang), Some(ts)) = (p.lang, p.lang.and_then(|l| rules.tests_of(l))) {
            let gone = Gone {
                new_tests: &new_tests,
                deleted: &deleted,
                written: &written,
                intent,
            };
            removed_tests(p.diff, lang, ts, rules, &gone, &mut out);
            emptied_tests(p, lang, ts, &mut out);
        }
        crate::edits::protected_file(p, rules, &mut out);
        crate::edits::runner_settings(p, rules, &mut out);
        crate::links::outward_symlink(p.diff, &mut out);
        crate::result_hook::result_hooks(p, &mut out);
    }
    out.sort_by(|a, b| (&a.file, a.line, &a.rule).cmp(&(&b.file, b.line, &b.rule)));
    out.dedup();
    let (allowed, findings) = out.into_iter().partition(|f| intent.allows(rules, f));
    Verdict { findings, allowed }
}

fn applies(rule: &Rule, p: &Prepared) -> bool {
    match &rule.scope {
        Scope::Any => true,
        Scope::Languages(ls) => p.lang.is_some_and(|l| ls.contains(&l)),
        Scope::Extensions(exts) => std::path::Path::new(&p.diff.path)
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| exts.iter().any(|x| x.eq_ignore_ascii_case(e))),
    }
}

fn line_rules(p: &Prepared, rules: &RuleSet, out: &mut Vec<Finding>) {
    if p.diff.new_text.is_none() {
        return;
    }
    // Per view, one regex-set pass per line finds the candidate rules.
    let sets: Vec<&ViewSet> = rules.sets.iter().filter(|s| s.lang == p.lang).collect();
    let by_extension: Vec<&Rule> = rules
        .rules
        .iter()
        .filter(|r| matches!(r.scope, Scope::Extensions(_)) && applies(r, p))
        .collect();
    // Rules about a block's whole body also read `def f(): pass` and
    // `fn f() -> u32 { 0 }`, header and body on one line.
    let one_liners: Vec<&Rule> = rules
        .rules
        .iter()
        .filter(|r| r.header.is_some() && applies(r, p))
        .collect();
    if sets.is_empty() && by_extension.is_empty() && one_liners.is_empty() {
        return;
    }
    let added: HashSet<u32> = p.diff.added.iter().copied().collect();
    for &n in &p.diff.added {
        let idx = n as usize - 1;
        let (Some(line), Some(raw)) = (p.lines.get(idx), p.raw.get(idx)) else {
            continue;
        };
        let hay = |view: View| match view {
            View::Code => line.code.as_str(),
            View::CodeStrings => line.code_strings.as_str(),
            View::Comment => line.comment.as_str(),
            View::Line => raw,
        };
        let mut report = |rule: &Rule, at: Option<usize>| {
            if let Some(message) = confirmed(rule, p, idx, at, &added) {
                out.push(finding(&rule.id, &p.diff.path, n, &message, raw));
            }
        };
        for vs in &sets {
            let h = hay(vs.view);
            // Most lines match nothing: one quick yes/no before asking which.
            if h.trim().is_empty() || !vs.set.is_match(h) {
                continue;
            }
            for m in vs.set.matches(h).iter() {
                report(&rules.rules[vs.rules[m]], None);
            }
        }
        for rule in &by_extension {
            let h = hay(rule.view);
            if !h.trim().is_empty() && rule.pattern.is_match(h) {
                report(rule, None);
            }
        }
        for rule in &one_liners {
            let Some((head, body)) = split_one_liner(hay(rule.view), p.lang) else {
                continue;
            };
            // The header is read with its opener (`{`), and the line's code
            // must be one too: a line of a string that reads like a header
            // (a docstring's `def f(): pass`) is not.
            let opener = if p.lang.is_some_and(Language::indented) {
                ":"
            } else {
                "{"
            };
            let header = |text: &str| {
                let text = format!("{text}{opener}");
                rule.header.as_ref().is_some_and(|h| h.is_match(&text))
                    && !rule
                        .not_header
                        .as_ref()
                        .is_some_and(|nh| nh.is_match(&text))
            };
            let code_head = split_one_liner(&line.code, p.lang).map(|(h, _)| h);
            let is_header = header(head) && code_head.is_some_and(header);
            if is_header && rule.pattern.is_match(body) {
                report(rule, Some(idx));
            }
        }
    }
}

/// A line that is a whole block, `def f(x): pass` (Python) or
/// `fn f() -> u32 { 0 }`: its header and its body. Quotes are skipped, so a
/// `:` or a brace in a string is not structure.
fn split_one_liner(text: &str, lang: Option<Language>) -> Option<(&str, &str)> {
    let indented = lang.is_some_and(Language::indented);
    // A Rust `'` is a lifetime more often than a char (the code view has
    // blanked chars already).
    let quotes: &[char] = if lang == Some(Language::Rust) {
        &['"']
    } else {
        &['"', '\'', '`']
    };
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut open = None;
    for (i, c) in text.char_indices() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                _ if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            _ if quotes.contains(&c) => quote = Some(c),
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            '{' if !indented && depth == 0 => {
                open = Some(i);
                break;
            }
            '{' => depth += 1,
            '}' => depth -= 1,
            ':' if indented && depth == 0 => {
                open = Some(i);
                break;
            }
            _ => {}
        }
    }
    let at = open?;
    let (head, rest) = (&text[..at], &text[at + 1..]);
    let body = if indented {
        rest
    } else {
        let close = rest.trim_end().trim_end_matches([';', ',']).trim_end();
        let inner = close.strip_suffix('}')?;
        if inner.contains(['{', '}']) {
            return None;
        }
        inner
    };
    (!body.trim().is_empty()).then_some((head, body))
}

/// Whether a rule whose pattern matched line `idx` really applies there
/// (the whole body of a matching block when it says so, not near an
/// `unless_near` line, not excused), and its message. `one_line`: the line
/// is the block's header too.
fn confirmed(
    rule: &Rule,
    p: &Prepared,
    idx: usize,
    one_line: Option<usize>,
    added: &HashSet<u32>,
) -> Option<String> {
    let near = match (&rule.header, one_line) {
        (Some(_), Some(h)) => h,
        (Some(header), None) => {
            let h = sole_statement(p, idx, header, rule.not_header.as_ref())?;
            if rule.new_function && !added.contains(&(h as u32 + 1)) {
                return None;
            }
            h
        }
        (None, _) => idx,
    };
    if rule
        .unless_near
        .as_ref()
        .is_some_and(|u| is_near(p, near, u))
    {
        return None;
    }
    match rule.excuse {
        None => Some(rule.message.clone()),
        Some(Excuse::PythonAbstract) => match crate::excuse::python_abstract(p, near) {
            Ok(()) => None,
            Err(None) => Some(rule.message.clone()),
            Err(Some(note)) => Some(format!("{} ({note})", rule.message)),
        },
    }
}

pub(crate) fn finding(rule: &str, file: &str, line: u32, message: &str, raw: &str) -> Finding {
    let t = raw.trim();
    let mut text: String = t.chars().take(120).collect();
    if t.chars().count() > 120 {
        text.push_str("...");
    }
    Finding {
        rule: rule.to_string(),
        file: file.to_string(),
        line,
        message: message.to_string(),
        text,
    }
}

/// A line with no code for the structure: blank, a comment, or a bare
/// string (a docstring).
pub(crate) fn blank(line: &Line) -> bool {
    line.code
        .trim()
        .chars()
        .all(|c| c == '"' || c == '\'' || c == '`')
}

pub(crate) fn indent(raw: &str) -> usize {
    raw.len() - raw.trim_start().len()
}

/// When line `idx` is the whole body of a block whose header matches
/// `header` (and not `not_header`), the header's index.
fn sole_statement(
    p: &Prepared,
    idx: usize,
    header: &regex::Regex,
    not_header: Option<&regex::Regex>,
) -> Option<usize> {
    let lines = &p.lines;
    let prev = (0..idx).rev().find(|&j| !blank(&lines[j]))?;
    let next = (idx + 1..lines.len()).find(|&k| !blank(&lines[k]));
    let is_header = |j: usize| {
        header.is_match(&lines[j].code_strings)
            && !not_header.is_some_and(|n| n.is_match(&lines[j].code_strings))
    };
    if p.lang.is_some_and(Language::indented) {
        if !lines[prev].code.trim_end().ends_with(':') {
            return None;
        }
        // The signature may span lines: the header is the nearest line above
        // that matches, with no other block opened in between.
        let h = (prev.saturating_sub(8)..=prev)
            .rev()
            .take_while(|&j| j == prev || !lines[j].code.trim_end().ends_with(':'))
            .find(|&j| is_header(j))?;
        let own = indent(p.raw.get(idx)?);
        if let Some(k) = next {
            if indent(p.raw.get(k)?) >= own {
                return None;
            }
        }
        Some(h)
    } else {
        let code = lines[idx].code.as_str();
        if code.contains('{') || code.contains('}') {
            return None;
        }
        if !lines[prev].code.trim_end().ends_with('{') || !is_header(prev) {
            return None;
        }
        let k = next?;
        lines[k].code.trim_start().starts_with('}').then_some(prev)
    }
}

/// Whether `re` matches the header `h`, one of the three lines above it, or
/// (Python) the class it belongs to.
fn is_near(p: &Prepared, h: usize, re: &regex::Regex) -> bool {
    let from = h.saturating_sub(3);
    if (from..=h).any(|j| p.raw.get(j).is_some_and(|l| re.is_match(l))) {
        return true;
    }
    if p.lang.is_some_and(Language::indented) {
        let own = p.raw.get(h).map_or(0, |l| indent(l));
        if let Some(c) = (0..h)
            .rev()
            .find(|&j| !blank(&p.lines[j]) && p.raw.get(j).is_some_and(|l| indent(l) < own))
        {
            return p.raw.get(c).is_some_and(|l| re.is_match(l));
        }
    }
    false
}

/// The test functions of a text: (name, 0-based line of the name).
pub(crate) fn test_functions(lines: &[Line], ts: &TestSyntax) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        match &ts.attribute {
            Some(attr) => {
                if attr.is_match(&l.code) {
                    let found = (i + 1..lines.len().min(i + 8)).find_map(|j| {
                        ts.name
                            .captures(&lines[j].code_strings)
                            .and_then(|c| c.get(1))
                            .map(|m| (m.as_str().to_string(), j))
                    });
                    out.extend(found);
                }
            }
            None => {
                if let Some(m) = ts.name.captures(&l.code_strings).and_then(|c| c.get(1)) {
                    // A TypeScript test's name is its title, quotes off.
                    let name = m.as_str().trim_matches(|c| matches!(c, '"' | '\'' | '`'));
                    out.push((name.to_string(), i));
                }
            }
        }
    }
    out.dedup();
    out
}

/// What tells a removed test from one that moved or went with its code.
struct Gone<'a> {
    /// Test names of the new text of changed test files.
    new_tests: &'a HashSet<String>,
    /// Modules and functions the change deleted outright.
    deleted: &'a HashSet<String>,
    /// Tests the change added or changed (successors of removed ones).
    written: &'a [crate::successor::TestText],
    /// What the story asks for (a test it asks to remove is not flagged).
    intent: &'a Intent,
}

/// Tests of the old text that no longer run: removed (and not moved to
/// another test file, nor deleted with the code they use, nor replaced by
/// a renamed or parametrised test: [`crate::successor`]), or in a file
/// renamed to a name the test runner does not collect (`test_calc.py` ->
/// `calc_checks.py`).
fn removed_tests(
    diff: &FileDiff,
    lang: Language,
    ts: &TestSyntax,
    rules: &RuleSet,
    gone: &Gone<'_>,
    out: &mut Vec<Finding>,
) {
    let old_path = diff.old_path.as_deref().unwrap_or(&diff.path);
    if diff.status == FileStatus::Added || !rules.is_test_file(lang, old_path) {
        return;
    }
    let uncollected = diff.status == FileStatus::Renamed && !rules.is_test_file(lang, &diff.path);
    if diff.removed.is_empty() && !uncollected {
        return;
    }
    let Some(old) = diff.old_text.as_deref() else {
        return;
    };
    let removed: HashSet<u32> = diff.removed.iter().copied().collect();
    let old_raw: Vec<&str> = old.lines().collect();
    let old_lines = lex::lex(old, lang.syntax());
    let old_tests = crate::successor::tests_in(old, lang, ts);
    for (name, i) in test_functions(&old_lines, ts) {
        let n = i as u32 + 1;
        let cleanup = !uncollected && crate::census::uses_deleted(Some(old), gone.deleted, &name);
        let replaced = !uncollected
            && old_tests
                .iter()
                .find(|t| t.name == name)
                .is_some_and(|t| crate::successor::successor(t, gone.written).is_some());
        let asked = !uncollected && gone.intent.removes_test(&name, &name);
        if (uncollected || removed.contains(&n))
            && !gone.new_tests.contains(&name)
            && !cleanup
            && !replaced
            && !asked
        {
            let message = if uncollected {
                format!(
                    "test '{name}' no longer runs: '{old_path}' was renamed to '{}', which the test runner does not collect",
                    diff.path
                )
            } else {
                format!("test '{name}' was removed (line {n} of the old text)")
            };
            out.push(finding(
                REMOVED_TEST,
                &diff.path,
                n,
                &message,
                old_raw.get(i).copied().unwrap_or(""),
            ));
        }
    }
}

fn emptied_tests(p: &Prepared, lang: Language, ts: &TestSyntax, out: &mut Vec<Finding>) {
    if p.diff.new_text.is_none() {
        return;
    }
    let touched = |from: usize, to: usize| {
        p.diff
            .added
            .iter()
            .any(|&n| (from..=to).contains(&(n as usize - 1)))
    };
    for (name, i) in test_functions(&p.lines, ts) {
        let Some((empty, end)) = body(p, i, lang) else {
            continue;
        };
        // A test whose body this change touched (or that it removed lines
        // from, within the body) and left without a statement.
        if empty && (touched(i, end) || lines_removed_within(p, i, end)) {
            out.push(finding(
                EMPTIED_TEST,
                &p.diff.path,
                i as u32 + 1,
                &format!(
                    "test '{name}' runs no statement (an empty body, or a bare `return` first)"
                ),
                p.raw.get(i).copied().unwrap_or(""),
            ));
        }
    }
}

/// Whether a braced body's first statement is a bare `return` (after
/// which nothing runs). TypeScript's `return expect(...)` hands a promise
/// to the runner, so only `return;` counts there; a Go test returns
/// nothing, so any `return` is bare.
fn returns_first(inner: &str, lang: Language) -> bool {
    let first = inner.trim_start();
    let Some(rest) = first.strip_prefix("return") else {
        return false;
    };
    let rest = rest.trim_start();
    rest.starts_with(';')
        || (lang == Language::Go && (rest.is_empty() || first.starts_with("return ")))
}

/// Whether the change removed lines right inside `from..=to` of the new
/// text (a deletion shows in the new text as nothing; git reports it
/// against the old line numbers, which match the new ones where nothing was
/// added above: close enough to tell a body emptied in place).
fn lines_removed_within(p: &Prepared, from: usize, to: usize) -> bool {
    if p.diff.removed.is_empty() {
        return false;
    }
    let shift = p
        .diff
        .added
        .iter()
        .filter(|&&n| (n as usize) <= from)
        .count() as i64
        - p.diff
            .removed
            .iter()
            .filter(|&&n| (n as usize) <= from)
            .count() as i64;
    p.diff.removed.iter().any(|&n| {
        let at = n as i64 - 1 + shift;
        at > from as i64 && at <= to as i64 + 1
    })
}

/// The body of the block opened at line `i` (or within two lines after):
/// whether it has no statement, and its last line.
pub(crate) fn body(p: &Prepared, i: usize, lang: Language) -> Option<(bool, usize)> {
    let lines = &p.lines;
    if lang.indented() {
        let h = (i..lines.len().min(i + 6)).find(|&j| lines[j].code.trim_end().ends_with(':'))?;
        let own = indent(p.raw.get(i)?);
        let mut end = h;
        let mut empty = true;
        // After a bare `return` as the first statement nothing runs.
        let mut returned = false;
        for (j, line) in lines.iter().enumerate().skip(h + 1) {
            if blank(line) {
                continue;
            }
            if indent(p.raw.get(j)?) <= own {
                break;
            }
            end = j;
            let c = line.code.trim();
            if empty && (c == "return" || c == "return None") {
                returned = true;
            }
            if c != "pass" && c != "..." && !returned {
                empty = false;
            }
        }
        if end == h {
            // `def test_x(): pass` on one line.
            let after = lines[h].code.rsplit_once(':').map_or("", |(_, a)| a).trim();
            return Some((after.is_empty() || after == "pass" || after == "...", h));
        }
        Some((empty, end))
    } else {
        let start = (i..lines.len().min(i + 3)).find(|&j| lines[j].code.contains('{'))?;
        let mut depth = 0i32;
        let mut inner = String::new();
        for (j, l) in lines.iter().enumerate().skip(start) {
            let mut chars = l.code.chars();
            if j == start {
                let pos = l.code.find('{')?;
                chars = l.code[pos..].chars();
            }
            for c in chars {
                match c {
                    '{' => {
                        depth += 1;
                        if depth > 1 {
                            inner.push(c);
                        }
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            let empty = inner.trim().trim_matches(';').trim().is_empty()
                                || returns_first(&inner, lang);
                            return Some((empty, j));
                        }
                        inner.push(c);
                    }
                    _ if depth >= 1 => inner.push(c),
                    _ => {}
                }
            }
            inner.push(' ');
        }
        None
    }
}
