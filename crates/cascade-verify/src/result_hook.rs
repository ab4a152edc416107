//! Pytest hooks a change adds or changes that can rewrite what the tests
//! report (`result-hook`): a `pytest_runtest_makereport` that sets every
//! outcome to "passed", a `pytest_report_teststatus` that prints failures as
//! passes, a `pytest_collection_modifyitems` that drops items, a
//! `pytest_plugins` that loads a plugin doing the same; and go's
//! `TestMain`, which runs around a package's tests and can print lines go
//! 1.19's test2json reads as their results. The census reads what the
//! runner reports, so a hook that forges the report forges the census:
//! such a hook is judged by what it is, wherever it lives (a conftest.py, a
//! plugin module), and a story that means to add one says so in
//! `verify_allow`: the file's path (which also allows that file's
//! test-collection edits, `test-config-edit`) or the rule id.

use crate::rules::Language;
use crate::scan::{blank, finding, indent, Finding, Prepared};

/// Rule id: a pytest hook that can change test outcomes was added or changed.
pub const RESULT_HOOK: &str = "result-hook";

/// The hooks that see or decide a test's outcome, its collection or the
/// session's exit status.
const HOOKS: [&str; 11] = [
    "pytest_runtest_makereport",
    "pytest_report_teststatus",
    "pytest_runtest_logreport",
    "pytest_runtest_protocol",
    "pytest_runtest_call",
    "pytest_pyfunc_call",
    "pytest_collection_modifyitems",
    "pytest_collectreport",
    "pytest_ignore_collect",
    "pytest_deselected",
    "pytest_sessionfinish",
];

/// One `result-hook` finding per hook definition (or `pytest_plugins`
/// assignment) of a Python file, or `TestMain` of a go test file, whose
/// lines the change added or changed.
pub(crate) fn result_hooks(p: &Prepared, out: &mut Vec<Finding>) {
    if p.diff.new_text.is_none() {
        return;
    }
    match p.lang {
        Some(Language::Python) => python_hooks(p, out),
        Some(Language::Go) if p.diff.path.ends_with("_test.go") => go_test_main(p, out),
        _ => {}
    }
}

/// A line the change added or changed (a blank line added after a block
/// is not a change of the block).
fn touched(p: &Prepared, i: usize) -> bool {
    !blank(&p.lines[i]) && p.diff.added.contains(&(i as u32 + 1))
}

/// The finding for `what` at line `i`.
fn hook_finding(p: &Prepared, i: usize, what: &str) -> Finding {
    let message = format!(
        "{what} added or changed: it can rewrite test outcomes, so the gate's result cannot be trusted (allow it with `verify_allow: [\"{}\"]`, or `[\"{RESULT_HOOK}\"]`)",
        p.diff.path
    );
    finding(RESULT_HOOK, &p.diff.path, i as u32 + 1, &message, p.raw[i])
}

/// go's `TestMain` whose body the change added or changed: it runs before
/// and after the package's tests, where what it prints is not any test's
/// output (see the census's go reader).
fn go_test_main(p: &Prepared, out: &mut Vec<Finding>) {
    for (i, line) in p.lines.iter().enumerate() {
        if !line.code.starts_with("func TestMain(") {
            continue;
        }
        // Its body ends at the first `}` in the first column.
        let end = (i + 1..p.lines.len())
            .find(|&j| p.raw[j].starts_with('}'))
            .map_or(p.lines.len(), |j| j + 1);
        if (i..end).any(|j| touched(p, j)) {
            out.push(hook_finding(p, i, "go `TestMain`"));
        }
    }
}

/// The pytest hooks and `pytest_plugins` lines of a Python file.
fn python_hooks(p: &Prepared, out: &mut Vec<Finding>) {
    let touched = |i: usize| touched(p, i);
    for (i, line) in p.lines.iter().enumerate() {
        let code = line.code.trim_start();
        let what = if let Some(hook) = hook_defined(code) {
            (i..block_end(p, i))
                .any(touched)
                .then(|| format!("pytest hook `{hook}`"))
        } else {
            (indent(p.raw[i]) == 0 && code.starts_with("pytest_plugins") && touched(i))
                .then(|| "`pytest_plugins` (a plugin)".to_string())
        };
        if let Some(what) = what {
            out.push(hook_finding(p, i, &what));
        }
    }
}

/// The hook a `def` line defines, if it is one of [`HOOKS`].
fn hook_defined(code: &str) -> Option<&'static str> {
    let rest = code.strip_prefix("async ").unwrap_or(code);
    let name = rest.strip_prefix("def ")?.split('(').next()?.trim();
    HOOKS.iter().copied().find(|h| *h == name)
}

/// One past the last line of the block whose header is line `start`.
fn block_end(p: &Prepared, start: usize) -> usize {
    let own = indent(p.raw[start]);
    (start + 1..p.lines.len())
        .find(|&j| !blank(&p.lines[j]) && indent(p.raw[j]) <= own)
        .unwrap_or(p.lines.len())
}
