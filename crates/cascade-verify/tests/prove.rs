//! Proving tests with real runners: a story's new test that already passes
//! on the base commit is an `unproven-test`; one that fails there (it needs
//! the story's code) is not, and neither is a test moved from another file.
//! Each runner's test skips, saying why, when the runner is not installed.

use std::process::Command;

use cascade_process::CancelToken;
use cascade_test_support::git;
use cascade_verify::prove::{prove, Proof, ProveOptions};
use cascade_verify::RuleSet;

fn runs(program: &str, args: &[&str]) -> bool {
    let ok = Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: `{program} {}` does not run here", args.join(" "));
    }
    ok
}

/// Commits `base` files, then `change` (None deletes), and proves base..HEAD.
fn proof_of(base: &[(&str, &str)], change: &[(&str, Option<&str>)]) -> Proof {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    git(d, &["init", "-q", "-b", "main"]);
    for (p, t) in base {
        let path = d.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, t).unwrap();
    }
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "base"]);
    let base_commit = git(d, &["rev-parse", "HEAD"]);
    for (p, t) in change {
        let path = d.join(p);
        match t {
            Some(t) => {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, t).unwrap();
            }
            None => std::fs::remove_file(path).unwrap(),
        }
    }
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "story"]);
    let files = cascade_git::diff::diff_lines(d, &base_commit, Some("HEAD")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut opts = ProveOptions::new(d);
    opts.cargo_target_dir = Some(tmp.path().join("target"));
    rt.block_on(prove(
        d,
        &base_commit,
        &files,
        &RuleSet::builtin(),
        &opts,
        &CancelToken::new(),
    ))
    .unwrap()
}

fn unproven(p: &Proof) -> Vec<(&str, &str)> {
    p.findings
        .iter()
        .map(|f| (f.file.as_str(), f.text.as_str()))
        .collect()
}

const CALC_BASE: &str = "def total(xs):\n    return xs[0]\n";
const CALC_DONE: &str = "def total(xs):\n    return sum(xs)\n";

#[test]
fn python_tests_that_pass_on_the_base_are_unproven() {
    if !runs("python3", &["--version"]) {
        return;
    }
    let old_tests = "import unittest\nfrom calc import total\n\n\nclass Old(unittest.TestCase):\n    def test_kept(self):\n        self.assertEqual(total([4]), 4)\n";
    let new_tests = "import unittest\nfrom calc import total\n\n\nclass TotalTest(unittest.TestCase):\n    def test_sums(self):\n        self.assertEqual(total([1, 2, 3]), 6)\n\n    def test_single(self):\n        self.assertEqual(total([5]), 5)\n";
    // A test moved from test_old.py to test_calc.py unchanged is not new.
    let moved =
        format!("{new_tests}\n    def test_kept(self):\n        self.assertEqual(total([4]), 4)\n");
    let p = proof_of(
        &[("calc.py", CALC_BASE), ("test_old.py", old_tests)],
        &[
            ("calc.py", Some(CALC_DONE)),
            ("test_calc.py", Some(&moved)),
            ("test_old.py", None),
        ],
    );
    let names: Vec<&str> = p.tests.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["test_sums", "test_single"], "{p:#?}");
    assert_eq!(p.ran, 2, "{p:#?}");
    assert_eq!(
        unproven(&p),
        [("test_calc.py", "def test_single(self):")],
        "{p:#?}"
    );
    assert!(p.findings[0].message.contains("passes on the base commit"));
}

#[test]
fn pytest_functions_are_proven_by_node_id() {
    if !runs("python3", &["-c", "import pytest"]) {
        return;
    }
    let tests = "from calc import total\n\n\ndef test_sums():\n    assert total([1, 2, 3]) == 6\n\n\ndef test_single():\n    assert total([5]) == 5\n";
    let p = proof_of(
        &[("calc.py", CALC_BASE), ("tests/__init__.py", "")],
        &[
            ("calc.py", Some(CALC_DONE)),
            ("tests/test_calc.py", Some(tests)),
        ],
    );
    assert_eq!(p.ran, 2, "{p:#?}");
    assert_eq!(
        unproven(&p),
        [("tests/test_calc.py", "def test_single():")],
        "{p:#?}"
    );
    assert!(p.findings[0].message.contains("(pytest)"));
}

#[test]
fn cargo_tests_in_a_test_module_run_against_the_base_code() {
    if !runs("cargo", &["--version"]) {
        return;
    }
    let toml =
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n";
    let base = "pub fn total(xs: &[u32]) -> u32 {\n    xs[0]\n}\n";
    let done = "pub fn total(xs: &[u32]) -> u32 {\n    xs.iter().sum()\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn sums() {\n        assert_eq!(super::total(&[1, 2, 3]), 6);\n    }\n\n    #[test]\n    fn single() {\n        assert_eq!(super::total(&[5]), 5);\n    }\n}\n";
    let integration = "#[test]\nfn first_of_one() {\n    assert_eq!(calc::total(&[7]), 7);\n}\n";
    let p = proof_of(
        &[("Cargo.toml", toml), ("src/lib.rs", base)],
        &[
            ("src/lib.rs", Some(done)),
            ("tests/more.rs", Some(integration)),
        ],
    );
    assert_eq!(p.ran, 3, "{p:#?}");
    assert_eq!(
        unproven(&p),
        [
            ("src/lib.rs", "fn single() {"),
            ("tests/more.rs", "fn first_of_one() {")
        ],
        "{p:#?}"
    );
}

#[test]
fn missing_runners_are_notes_not_findings() {
    // No node_modules: a TypeScript test cannot be proven here.
    let test = "import { total } from './calc';\ntest('sums', () => {\n  expect(total([1, 2])).toBe(3);\n});\n";
    let p = proof_of(
        &[("package.json", "{\"name\": \"calc\"}\n")],
        &[("src/calc.test.ts", Some(test))],
    );
    assert_eq!(p.tests.len(), 1);
    assert!(p.findings.is_empty());
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("neither vitest nor jest")),
        "{:?}",
        p.notes
    );
}
