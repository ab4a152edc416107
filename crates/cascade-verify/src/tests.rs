//! Rule-by-rule tests: each rule fires on what it is for, and stays quiet
//! on the look-alikes (in a comment or a string, a legitimate `pass`, an
//! abstract method, an `if` that returns early...).

use cascade_git::diff::{FileDiff, FileStatus};

use crate::{scan, Finding, Intent, RuleSet, UserConfig};

/// A new file: every line added.
fn added(path: &str, text: &str) -> FileDiff {
    FileDiff {
        path: path.into(),
        old_path: None,
        status: FileStatus::Added,
        added: (1..=text.lines().count() as u32).collect(),
        removed: vec![],
        old_text: None,
        new_text: Some(text.into()),
        link_target: None,
    }
}

/// A changed file: the lines between the common prefix and suffix differ.
fn changed(path: &str, old: &str, new: &str) -> FileDiff {
    let (o, n): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let pre = o.iter().zip(&n).take_while(|(a, b)| a == b).count();
    let suf = o[pre..]
        .iter()
        .rev()
        .zip(n[pre..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    FileDiff {
        path: path.into(),
        old_path: None,
        status: FileStatus::Modified,
        added: (pre + 1..=n.len() - suf).map(|x| x as u32).collect(),
        removed: (pre + 1..=o.len() - suf).map(|x| x as u32).collect(),
        old_text: Some(old.into()),
        new_text: Some(new.into()),
        link_target: None,
    }
}

fn run(files: &[FileDiff]) -> Vec<Finding> {
    scan(files, &RuleSet::builtin(), &Intent::default())
}

/// The (rule, line) pairs found.
fn found(files: &[FileDiff]) -> Vec<(String, u32)> {
    run(files).into_iter().map(|f| (f.rule, f.line)).collect()
}

fn one(rule: &str, line: u32) -> Vec<(String, u32)> {
    vec![(rule.to_string(), line)]
}

#[test]
fn builtin_tables_load_and_ids_are_unique() {
    let rules = RuleSet::builtin();
    let ids = rules.ids();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "duplicate rule ids: {ids:?}");
    for lang in ["rust", "py", "ts", "go"] {
        assert!(ids.iter().any(|i| i.starts_with(lang)), "{lang} has rules");
    }
    assert!(rules
        .protected_paths()
        .iter()
        .any(|g| g == ".github/workflows/**"));
}

// ---- Rust -------------------------------------------------------------

#[test]
fn rust_stub_macros() {
    let f = added(
        "src/lib.rs",
        "pub fn area(w: u32) -> u32 {\n    todo!()\n}\npub fn b() { unimplemented!(\"later\") }\n",
    );
    assert_eq!(
        found(&[f]),
        [("rust-stub-macro".into(), 2), ("rust-stub-macro".into(), 4)]
    );
    // In a comment, a doc comment, a string, a raw string: not code.
    let f = added(
        "src/lib.rs",
        "// todo!() once the API settles\n/// Panics like `todo!()` would.\npub const S: &str = \"todo!()\";\npub const R: &str = r#\"unimplemented!()\"#;\n",
    );
    assert_eq!(found(&[f]), []);
    // Only added lines count: an old todo!() the change did not touch is not its fault.
    let old = "fn a() {\n    todo!()\n}\nfn b() -> u8 {\n    1\n}\n";
    let new = "fn a() {\n    todo!()\n}\nfn b() -> u8 {\n    2\n}\n";
    assert_eq!(found(&[changed("src/lib.rs", old, new)]), []);
}

#[test]
fn rust_panic_not_implemented() {
    let f = added(
        "src/a.rs",
        "fn f() {\n    panic!(\"not implemented yet\");\n}\n",
    );
    assert_eq!(found(&[f]), one("rust-panic-not-implemented", 2));
    let f = added(
        "src/a.rs",
        "fn f(x: u8) {\n    if x > 3 { panic!(\"x out of range: {x}\"); }\n}\n",
    );
    assert_eq!(found(&[f]), []);
}

#[test]
fn rust_placeholder_return() {
    let f = added(
        "src/a.rs",
        "pub fn total(items: &[u32]) -> u32 {\n    0\n}\n",
    );
    assert_eq!(found(&[f]), one("rust-placeholder-return", 2));
    let f = added(
        "src/a.rs",
        "pub fn cfg() -> Config {\n    Default::default()\n}\n",
    );
    assert_eq!(found(&[f]), one("rust-placeholder-return", 2));
    // Not the whole body, or not a function, or an old function's body: fine.
    let f = added(
        "src/a.rs",
        "pub fn total(items: &[u32]) -> u32 {\n    let s = items.iter().sum();\n    s\n}\nconst Z: u32 = {\n    0\n};\n",
    );
    assert_eq!(found(&[f]), []);
    let old = "fn zero() -> u32 {\n    1\n}\n";
    let new = "fn zero() -> u32 {\n    0\n}\n";
    assert_eq!(found(&[changed("src/a.rs", old, new)]), []);
}

#[test]
fn rust_ignore_and_assert_true() {
    let f = added("tests/t.rs", "#[test]\n#[ignore]\nfn slow() {\n    assert_eq!(run(), 4);\n}\n#[test]\nfn ok() {\n    assert!(true);\n}\n");
    assert_eq!(
        found(&[f]),
        [
            ("rust-ignore-test".into(), 2),
            ("rust-assert-true".into(), 8)
        ]
    );
    // Mentioned in a comment or string, or a real assertion: fine.
    let f = added("tests/t.rs", "// use #[ignore] for slow tests\n#[test]\nfn ok() {\n    assert!(is_true(1));\n    let s = \"assert!(true)\";\n    assert_eq!(s.len(), 13);\n}\n");
    assert_eq!(found(&[f]), []);
}

#[test]
fn a_removal_the_storys_words_ask_for_is_not_flagged() {
    let old = "#[test]\nfn adds() {\n    assert_eq!(add(1, 2), 3);\n}\n\n#[test]\nfn subtracts() {\n    assert_eq!(sub(3, 2), 1);\n}\n";
    let new = "#[test]\nfn adds() {\n    assert_eq!(add(1, 2), 3);\n}\n";
    let files = [changed("tests/math.rs", old, new)];
    let asked = Intent::default().with_words("Subtraction goes.\nRemove `subtracts`: sub is gone.");
    assert_eq!(scan(&files, &RuleSet::builtin(), &asked), []);
    // Words that name the test without asking for its removal excuse nothing.
    let kept = Intent::default().with_words("Keep subtracts; delete the unused helper.");
    let got = scan(&files, &RuleSet::builtin(), &kept);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].rule, "removed-test");
}

#[test]
fn rust_removed_and_emptied_tests() {
    let old = "#[test]\nfn adds() {\n    assert_eq!(add(1, 2), 3);\n}\n\n#[test]\nfn subtracts() {\n    assert_eq!(sub(3, 2), 1);\n}\n";
    let new = "#[test]\nfn adds() {\n    assert_eq!(add(1, 2), 3);\n}\n";
    let got = run(&[changed("tests/math.rs", old, new)]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].rule.as_str(), got[0].line), ("removed-test", 7));
    assert!(got[0].message.contains("subtracts"));
    // Emptied in place.
    let new =
        "#[test]\nfn adds() {\n    assert_eq!(add(1, 2), 3);\n}\n\n#[test]\nfn subtracts() {\n}\n";
    assert_eq!(
        found(&[changed("tests/math.rs", old, new)]),
        one("emptied-test", 7)
    );
    // Moved to another file: not removed.
    let moved = added(
        "tests/sub.rs",
        "#[test]\nfn subtracts() {\n    assert_eq!(sub(3, 2), 1);\n}\n",
    );
    let new = "#[test]\nfn adds() {\n    assert_eq!(add(1, 2), 3);\n}\n";
    assert_eq!(found(&[changed("tests/math.rs", old, new), moved]), []);
    // A non-test function removed, or a #[cfg(test)] module: not a test.
    let old = "#[cfg(test)]\nmod tests {}\nfn helper() {}\n";
    assert_eq!(found(&[changed("src/a.rs", old, "")]), []);
}

// ---- Python -----------------------------------------------------------

#[test]
fn python_stub_bodies() {
    let f = added(
        "app.py",
        "def total(items):\n    pass\n\nasync def fetch(url):\n    ...\n",
    );
    assert_eq!(
        found(&[f]),
        [("py-stub-body".into(), 2), ("py-stub-body".into(), 5)]
    );
    // With a docstring, still a stub.
    let f = added(
        "app.py",
        "def total(items):\n    \"\"\"Sum them.\"\"\"\n    pass\n",
    );
    assert_eq!(found(&[f]), one("py-stub-body", 3));
    // `pass` in an except block, a loop or a class body: legitimate.
    let f = added(
        "app.py",
        "def load(p):\n    try:\n        return open(p).read()\n    except OSError:\n        pass\n    return None\n\nclass Empty(Exception):\n    pass\n",
    );
    assert_eq!(found(&[f]), []);
    // An intended abstract method, an overload, a Protocol: legitimate.
    let f = added(
        "app.py",
        "class Shape(ABC):\n    @abstractmethod\n    def area(self):\n        pass\n\n    @abc.abstractmethod\n    def name(self):\n        raise NotImplementedError\n\nclass Sized(Protocol):\n    def size(self) -> int:\n        ...\n",
    );
    assert_eq!(found(&[f]), []);
}

#[test]
fn python_not_implemented_and_placeholder_return() {
    let f = added(
        "app.py",
        "def parse(text):\n    raise NotImplementedError(\"later\")\n",
    );
    assert_eq!(found(&[f]), one("py-not-implemented", 2));
    let f = added("app.py", "def parse(text):\n    return None\n");
    assert_eq!(found(&[f]), one("py-placeholder-return", 2));
    // An early return, or a raise in a branch: fine.
    let f = added(
        "app.py",
        "def parse(text):\n    if not text:\n        return None\n    if text == 'x':\n        raise NotImplementedError('x format')\n    return text.split()\n",
    );
    assert_eq!(found(&[f]), []);
    // A multi-line signature is still the function's header.
    let f = added(
        "app.py",
        "def parse(\n    text,\n    strict=False,\n):\n    pass\n",
    );
    assert_eq!(found(&[f]), one("py-stub-body", 5));
}

#[test]
fn python_skips_and_assert_true() {
    let f = added(
        "test_app.py",
        "import pytest\n\n@pytest.mark.skip(reason='flaky')\ndef test_sum():\n    assert sum([1]) == 1\n\ndef test_ok():\n    assert True\n",
    );
    assert_eq!(
        found(&[f]),
        [("py-skip-test".into(), 3), ("py-assert-true".into(), 8)]
    );
    let f = added("test_app.py", "def test_env():\n    pytest.skip('no db')\n");
    assert_eq!(found(&[f]), one("py-skip-test", 2));
    // In a comment or string, or a real assert: fine.
    let f = added(
        "test_app.py",
        "# we never use @pytest.mark.skip here\ndef test_ok():\n    msg = 'assert True'\n    assert is_valid(msg) is True\n",
    );
    assert_eq!(found(&[f]), []);
}

#[test]
fn python_removed_and_emptied_tests() {
    let old = "def test_a():\n    assert f(1) == 2\n\ndef test_b():\n    assert f(2) == 3\n";
    let new = "def test_a():\n    assert f(1) == 2\n";
    assert_eq!(
        found(&[changed("test_f.py", old, new)]),
        one("removed-test", 4)
    );
    let new = "def test_a():\n    assert f(1) == 2\n\ndef test_b():\n    pass\n";
    let got = found(&[changed("test_f.py", old, new)]);
    assert!(got.contains(&("emptied-test".into(), 4)), "{got:?}");
    // A deleted test file counts too.
    let gone = FileDiff {
        path: "test_f.py".into(),
        old_path: None,
        status: FileStatus::Deleted,
        added: vec![],
        removed: (1..=5).collect(),
        old_text: Some(old.into()),
        new_text: None,
        link_target: None,
    };
    assert_eq!(
        found(&[gone]),
        [("removed-test".into(), 1), ("removed-test".into(), 4)]
    );
}

// ---- TypeScript / JavaScript -------------------------------------------

#[test]
fn ts_not_implemented_and_placeholder() {
    let f = added("src/a.ts", "export function total(xs: number[]): number {\n  throw new Error(\"Not implemented\");\n}\n");
    assert_eq!(found(&[f]), one("ts-throw-not-implemented", 2));
    let f = added(
        "src/a.ts",
        "export function total(xs: number[]): number {\n  return 0;\n}\n",
    );
    assert_eq!(found(&[f]), one("ts-placeholder-return", 2));
    // An early return inside an if, a real error, a comment: fine.
    let f = added(
        "src/a.ts",
        "export function total(xs: number[]): number {\n  if (xs.length === 0) {\n    return 0;\n  }\n  // throw new Error('not implemented')\n  if (xs.length > 1e6) throw new Error('too many items');\n  return xs.reduce((a, b) => a + b, 0);\n}\n",
    );
    assert_eq!(found(&[f]), []);
}

#[test]
fn ts_skips_assert_true_and_tests() {
    let f = added(
        "src/a.test.js",
        "it.skip('adds', () => {\n  expect(add(1, 2)).toBe(3);\n});\nxit('subs', () => {});\ntest('ok', () => {\n  expect(true).toBe(true);\n});\n",
    );
    let got = found(&[f]);
    assert!(got.contains(&("ts-skip-test".into(), 1)), "{got:?}");
    assert!(got.contains(&("ts-skip-test".into(), 4)), "{got:?}");
    assert!(got.contains(&("ts-assert-true".into(), 6)), "{got:?}");
    // `.skip` of something else, or in a string: fine.
    let f = added(
        "src/a.js",
        "const rows = table.skip(2);\nconst s = 'it.skip(';\n",
    );
    assert_eq!(found(&[f]), []);
    let old = "test('adds', () => {\n  expect(add(1, 2)).toBe(3);\n});\ntest('subs', () => {\n  expect(sub(3, 2)).toBe(1);\n});\n";
    let new = "test('adds', () => {\n  expect(add(1, 2)).toBe(3);\n});\n";
    assert_eq!(
        found(&[changed("a.test.ts", old, new)]),
        one("removed-test", 4)
    );
    let new =
        "test('adds', () => {\n  expect(add(1, 2)).toBe(3);\n});\ntest('subs', () => {\n});\n";
    assert_eq!(
        found(&[changed("a.test.ts", old, new)]),
        one("emptied-test", 4)
    );
}

// ---- Go ---------------------------------------------------------------

#[test]
fn go_rules() {
    let f = added(
        "calc.go",
        "func Total(xs []int) int {\n\tpanic(\"not implemented\")\n}\n",
    );
    assert_eq!(found(&[f]), one("go-panic-not-implemented", 2));
    let f = added(
        "calc.go",
        "func Load(p string) (*Config, error) {\n\treturn nil, nil\n}\n",
    );
    assert_eq!(found(&[f]), one("go-placeholder-return", 2));
    let f = added(
        "calc_test.go",
        "func TestTotal(t *testing.T) {\n\tt.Skip(\"flaky\")\n}\nfunc TestOk(t *testing.T) {\n\tassert.True(t, true)\n}\n",
    );
    assert_eq!(
        found(&[f]),
        [("go-skip-test".into(), 2), ("go-assert-true".into(), 5)]
    );
    // An early return in an if, a real panic, t.Skip in a comment: fine.
    let f = added(
        "calc.go",
        "func Load(p string) (*Config, error) {\n\tif p == \"\" {\n\t\treturn nil, nil\n\t}\n\t// t.Skip(\"x\")\n\tif p == \"!\" { panic(\"bad path\") }\n\treturn parse(p)\n}\n",
    );
    assert_eq!(found(&[f]), []);
    let old =
        "func TestA(t *testing.T) {\n\tcheck(t)\n}\nfunc TestB(t *testing.T) {\n\tcheck(t)\n}\n";
    let new = "func TestA(t *testing.T) {\n\tcheck(t)\n}\n";
    assert_eq!(
        found(&[changed("a_test.go", old, new)]),
        one("removed-test", 4)
    );
}

// ---- Common -----------------------------------------------------------

#[test]
fn todo_implement_comments() {
    let f = added(
        "src/a.py",
        "def f(x):\n    # TODO: implement the real parser\n    return parse(x)\n",
    );
    assert_eq!(found(&[f]), one("todo-implement-comment", 2));
    let f = added(
        "src/a.rs",
        "fn f() -> u8 {\n    // TODO: implement caching\n    compute()\n}\n",
    );
    assert_eq!(found(&[f]), one("todo-implement-comment", 2));
    // A TODO about something else, or the words in a string: fine.
    let f = added(
        "src/a.rs",
        "// TODO: rename after 2.0\nconst S: &str = \"TODO: implement\";\n",
    );
    assert_eq!(found(&[f]), []);
    // Prose files have no comments.
    let f = added("NOTES.md", "TODO: implement the parser\n");
    assert_eq!(found(&[f]), []);
}

#[test]
fn protected_files_fail_unless_the_story_allows_them_by_file() {
    let ci = added(".github/workflows/ci.yml", "on: push\n");
    let gates = changed(
        ".cascade/gates.json",
        "{\"gates\": [{\"name\": \"t\", \"command\": \"pytest\"}]}\n",
        "{\"gates\": [{\"name\": \"t\", \"command\": \"true\"}]}\n",
    );
    let ini = changed(
        "pytest.ini",
        "[pytest]\n",
        "[pytest]\naddopts = -k 'not slow'\n",
    );
    let files = [ci.clone(), gates.clone(), ini.clone()];
    let got = run(&files);
    assert_eq!(
        got.iter()
            .map(|f| (f.rule.as_str(), f.file.as_str()))
            .collect::<Vec<_>>(),
        [
            ("gate-config-edit", ".cascade/gates.json"),
            ("gate-config-edit", ".github/workflows/ci.yml"),
            ("gate-config-edit", "pytest.ini")
        ]
    );
    // The message says what changed and how to allow it.
    let m = &got[0].message;
    assert!(
        m.starts_with("cascade's configuration changed: - `...\": \"t\", \"command\": \"pytest\"}]}` + `...\": \"t\", \"command\": \"true\"}]}`"),
        "{m}"
    );
    assert!(
        m.contains("\"verify_allow\": [\".cascade/gates.json\"]"),
        "{m}"
    );
    assert!(
        got[1].message.starts_with("CI configuration added"),
        "{}",
        got[1].message
    );
    // A story allows a file (or a folder, or a glob); what it allows is
    // reported apart.
    let intent = Intent {
        allow: vec![".github/workflows/".into(), "*.ini".into()],
        ..Intent::default()
    };
    let v = crate::check(&files, &RuleSet::builtin(), &intent);
    assert_eq!(v.findings.len(), 1);
    assert_eq!(v.findings[0].file, ".cascade/gates.json");
    assert_eq!(v.allowed.len(), 2);
    // A file named in verify_allow allows only edits of protected files,
    // not a stub in it.
    let stub = added("src/ci.rs", "fn ci() -> u32 { todo!() }\n");
    let intent = Intent {
        allow: vec!["src/ci.rs".into()],
        ..Intent::default()
    };
    assert_eq!(scan(&[stub], &RuleSet::builtin(), &intent).len(), 1);
    // An ordinary source file is not gate configuration.
    assert_eq!(found(&[added("src/ci.rs", "fn ci() {}\n")]), []);
}

#[test]
fn a_conftest_hook_is_allowed_by_its_file_or_the_rule() {
    let hook = added(
        "tests/conftest.py",
        "def pytest_collection_modifyitems(items):\n    items.sort(key=lambda i: i.name)\n",
    );
    let rules: Vec<String> = run(std::slice::from_ref(&hook))
        .into_iter()
        .map(|f| f.rule)
        .collect();
    assert_eq!(rules, ["result-hook", "test-config-edit"], "{rules:?}");
    // The file allows both (it sorts what it collects: one edit).
    let by_file = Intent {
        allow: vec!["tests/conftest.py".into()],
        ..Intent::default()
    };
    let v = crate::check(std::slice::from_ref(&hook), &RuleSet::builtin(), &by_file);
    assert!(v.findings.is_empty(), "{:?}", v.findings);
    assert_eq!(v.allowed.len(), 2);
    // The rule id allows the hook alone.
    let by_rule = Intent {
        allow: vec![crate::RESULT_HOOK.into()],
        ..Intent::default()
    };
    let left = scan(&[hook], &RuleSet::builtin(), &by_rule);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].rule, "test-config-edit");
}

#[test]
fn allowed_rules_go_and_findings_name_file_line_rule() {
    let f = added("src/lib.rs", "fn f() {\n    todo!()\n}\n");
    let got = run(std::slice::from_ref(&f));
    assert_eq!(
        got[0].to_string(),
        "src/lib.rs:2: [rust-stub-macro] stub macro left in the code: `todo!()`"
    );
    let intent = Intent {
        allow: vec!["rust-stub-macro".into()],
        ..Intent::default()
    };
    assert!(scan(&[f], &RuleSet::builtin(), &intent).is_empty());
}

// ---- verify.json --------------------------------------------------------

fn user(json: &str) -> Result<RuleSet, crate::VerifyError> {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join(".cascade")).unwrap();
    std::fs::write(tmp.path().join(".cascade/verify.json"), json).unwrap();
    RuleSet::load(tmp.path())
}

#[test]
fn user_rules_extend_replace_and_disable() {
    let rules = user(
        r#"{
          "disable": ["py-assert-true"],
          "protected_paths": ["deploy/**"],
          "rules": [
            {"id": "py-print", "languages": ["python"], "pattern": "^\\s*print\\(", "message": "debug print"},
            {"id": "rb-pending", "extensions": ["rb"], "in": "line", "pattern": "\\bpending\\b", "message": "pending spec"},
            {"id": "rust-stub-macro", "languages": ["rust"], "pattern": "\\btodo!", "message": "mine"}
          ]
        }"#,
    )
    .unwrap();
    let files = [
        added("a.py", "def test_x():\n    print(1)\n    assert True\n"),
        added("spec/a_spec.rb", "it 'works' do\n  pending\nend\n"),
        added("src/a.rs", "fn f() { todo!() }\n"),
        added("deploy/run.sh", "echo\n"),
    ];
    let got: Vec<(String, String)> = scan(&files, &rules, &Intent::default())
        .into_iter()
        .map(|f| (f.rule, f.message))
        .collect();
    assert!(
        got.contains(&("py-print".into(), "debug print".into())),
        "{got:?}"
    );
    assert!(got.iter().all(|(r, _)| r != "py-assert-true"));
    assert!(got.iter().any(|(r, _)| r == "rb-pending"));
    assert!(got.contains(&("rust-stub-macro".into(), "mine".into())));
    assert!(got.iter().any(|(r, _)| r == "gate-config-edit"));
    // Off for the project.
    let off = user(r#"{"enabled": false}"#).unwrap();
    assert!(scan(&files, &off, &Intent::default()).is_empty());
}

#[test]
fn bad_verify_json_names_where() {
    let e = user(
        "{\n  \"rules\": [\n    {\"id\": \"x\", \"pattern\": \"(\", \"message\": \"m\"}\n  ]\n}",
    )
    .unwrap_err();
    assert!(e.to_string().contains("rule 'x': invalid pattern"), "{e}");
    let e = user("{\n  \"rulez\": []\n}").unwrap_err().to_string();
    assert!(e.contains("verify.json:2:"), "{e}");
    assert!(e.contains("unknown field"), "{e}");
    let e =
        user(r#"{"rules": [{"id": "x", "languages": ["cobol"], "pattern": "a", "message": "m"}]}"#)
            .unwrap_err();
    assert!(e.to_string().contains("unknown language 'cobol'"), "{e}");
    let _ = UserConfig::default();
}

/// go's `TestMain` runs around a package's tests, where what it prints
/// is no test's output (go 1.19 reads printed `--- PASS` lines there as
/// results): added or changed in a test file it is a `result-hook`; left
/// as it was, or in a file that is not a test file, it is not.
#[test]
fn a_go_test_main_added_or_changed_is_a_result_hook() {
    let main = "package calc\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\nfunc TestMain(m *testing.M) {\n\tos.Exit(m.Run())\n}\n";
    let hooks = |files: &[FileDiff]| -> Vec<(String, u32)> {
        found(files)
            .into_iter()
            .filter(|(rule, _)| rule == crate::RESULT_HOOK)
            .collect()
    };
    assert_eq!(hooks(&[added("calc_test.go", main)]), one("result-hook", 8));
    let printing = main.replace("\tos.Exit", "\tprintln(\"--- PASS: TestAdd\")\n\tos.Exit");
    assert_eq!(
        hooks(&[changed("calc_test.go", main, &printing)]),
        one("result-hook", 8)
    );
    let more = format!("{main}\nfunc TestMore(t *testing.T) {{}}\n");
    assert_eq!(hooks(&[changed("calc_test.go", main, &more)]), []);
    assert_eq!(hooks(&[added("cmd/main.go", main)]), []);
    let by_file = Intent {
        allow: vec!["calc_test.go".into()],
        ..Intent::default()
    };
    let v = crate::check(
        &[added("calc_test.go", main)],
        &RuleSet::builtin(),
        &by_file,
    );
    assert!(
        v.findings.iter().all(|f| f.rule != crate::RESULT_HOOK),
        "{:?}",
        v.findings
    );
}
