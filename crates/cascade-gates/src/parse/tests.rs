//! Parser tests on real-looking samples of each tool's output.

use super::*;

fn one(v: &[GateError], i: usize) -> (&str, Option<u32>, Option<u32>, Option<&str>, Severity) {
    let e = &v[i];
    (
        e.file.as_deref().unwrap_or(""),
        e.line,
        e.column,
        e.code.as_deref(),
        e.severity,
    )
}

#[test]
fn cargo_json_messages() {
    let out = r#"{"reason":"compiler-artifact","package_id":"x","target":{"name":"x"}}
{"reason":"compiler-message","package_id":"demo 0.1.0","message":{"$message_type":"diagnostic","message":"mismatched types","code":{"code":"E0308","explanation":"..."},"level":"error","spans":[{"file_name":"src/main.rs","byte_start":1,"byte_end":2,"line_start":4,"line_end":4,"column_start":18,"column_end":25,"is_primary":true,"text":[],"label":"expected `u32`"}],"children":[],"rendered":"error[E0308]: mismatched types\n"}}
{"reason":"compiler-message","package_id":"demo 0.1.0","message":{"message":"unused variable: `x`","code":{"code":"unused_variables","explanation":null},"level":"warning","spans":[{"file_name":"src/lib.rs","line_start":2,"column_start":9,"is_primary":true}],"children":[]}}
{"reason":"compiler-message","package_id":"demo 0.1.0","message":{"message":"this `if` has identical blocks","code":{"code":"clippy::if_same_then_else","explanation":null},"level":"warning","spans":[{"file_name":"src/lib.rs","line_start":9,"column_start":5,"is_primary":false},{"file_name":"src/lib.rs","line_start":7,"column_start":5,"is_primary":true}],"children":[]}}
{"reason":"compiler-message","package_id":"demo 0.1.0","message":{"message":"aborting due to 1 previous error","code":null,"level":"error","spans":[],"children":[]}}
{"reason":"build-finished","success":false}
"#;
    let v = parse(
        Parser::Cargo,
        out,
        "error: could not compile `demo`\n",
        None,
    );
    assert_eq!(v.len(), 3, "{v:?}");
    assert_eq!(
        one(&v, 0),
        (
            "src/main.rs",
            Some(4),
            Some(18),
            Some("E0308"),
            Severity::Error
        )
    );
    assert_eq!(v[0].message, "mismatched types");
    assert_eq!(one(&v, 1).4, Severity::Warning);
    assert_eq!(
        one(&v, 2),
        (
            "src/lib.rs",
            Some(7),
            Some(5),
            Some("clippy::if_same_then_else"),
            Severity::Warning
        )
    );
}

#[test]
fn rustc_text_and_cargo_test_failures() {
    let stderr = "   Compiling demo v0.1.0 (/tmp/demo)
error[E0425]: cannot find value `y` in this scope
 --> src/lib.rs:3:5
  |
3 |     y
  |     ^ not found in this scope

warning: unused import: `std::fs`
 --> src/main.rs:1:5

error: aborting due to 1 previous error
";
    let v = parse(Parser::Cargo, "", stderr, None);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(
        one(&v, 0),
        (
            "src/lib.rs",
            Some(3),
            Some(5),
            Some("E0425"),
            Severity::Error
        )
    );
    assert_eq!(
        one(&v, 1),
        ("src/main.rs", Some(1), Some(5), None, Severity::Warning)
    );

    let stdout = "
running 3 tests
test tests::adds ... ok
test tests::subtracts ... FAILED
test tests::old_style ... FAILED

failures:

---- tests::subtracts stdout ----
thread 'tests::subtracts' panicked at src/lib.rs:21:9:
assertion `left == right` failed
  left: 1
 right: 2
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

---- tests::old_style stdout ----
thread 'tests::old_style' panicked at 'boom', src/old.rs:5:3

failures:
    tests::subtracts
    tests::old_style

test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out
";
    let v = parse(Parser::Cargo, stdout, "", None);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(
        one(&v, 0),
        (
            "src/lib.rs",
            Some(21),
            Some(9),
            Some("tests::subtracts"),
            Severity::Error
        )
    );
    assert!(v[0].message.contains("left: 1"), "{}", v[0].message);
    assert_eq!(
        one(&v, 1),
        (
            "src/old.rs",
            Some(5),
            Some(3),
            Some("tests::old_style"),
            Severity::Error
        )
    );
    assert!(v[1].message.contains("boom"));

    // Rust 1.90+ prints the thread id; with RUST_BACKTRACE set a backtrace follows.
    let stdout = "
running 1 test
summary::tests::summarizes --- FAILED

failures:

---- summary::tests::summarizes stdout ----

thread 'summary::tests::summarizes' (24109) panicked at src/summary.rs:37:9:
assertion `left == right` failed
  left: 4
 right: 3
stack backtrace:
   0: __rustc::rust_begin_unwind
             at /rustc/library/std/src/panicking.rs:689:5

failures:
    summary::tests::summarizes

test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out
";
    let v = parse(Parser::Cargo, stdout, "", None);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        one(&v, 0),
        (
            "src/summary.rs",
            Some(37),
            Some(9),
            Some("summary::tests::summarizes"),
            Severity::Error
        )
    );
    assert!(v[0].message.contains("left: 4"), "{}", v[0].message);
    assert!(
        !v[0].message.contains("rust_begin_unwind"),
        "{}",
        v[0].message
    );
}

#[test]
fn cargo_fmt_check() {
    let out = "Diff in /repo/src/main.rs at line 1:\n-fn main(){}\n+fn main() {}\nDiff in /repo/src/main.rs at line 9:\nDiff in /repo/src/lib.rs:4:\n";
    let v = parse(Parser::Cargo, out, "", Some(Path::new("/repo")));
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(one(&v, 0).0, "src/main.rs");
    assert_eq!(
        one(&v, 1),
        (
            "src/lib.rs",
            Some(4),
            None,
            Some("rustfmt"),
            Severity::Error
        )
    );
}

#[test]
fn pytest_summary() {
    let out = "============================= test session starts ==============================
collected 3 items

tests/test_math.py .F                                                     [ 66%]
tests/test_io.py E                                                        [100%]

=================================== FAILURES ===================================
_________________________________ test_divide __________________________________

    def test_divide():
>       assert divide(4, 2) == 3
E       assert 2.0 == 3

tests/test_math.py:12: AssertionError
=========================== short test summary info ============================
FAILED tests/test_math.py::test_divide - assert 2.0 == 3
ERROR tests/test_io.py::test_read - FileNotFoundError: data.txt
========================= 1 failed, 1 passed, 1 error in 0.05s =================
";
    let v = parse(Parser::Pytest, out, "", None);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(
        one(&v, 0),
        (
            "tests/test_math.py",
            Some(12),
            None,
            Some("tests/test_math.py::test_divide"),
            Severity::Error
        )
    );
    assert!(v[0].message.contains("assert 2.0 == 3"));
    assert_eq!(one(&v, 1).0, "tests/test_io.py");
}

#[test]
fn mypy_text_and_json() {
    let text = "src/app.py:10:5: error: Incompatible types in assignment (expression has type \"str\", variable has type \"int\")  [assignment]
src/app.py:22: note: Revealed type is \"builtins.int\"
Found 1 error in 1 file (checked 3 source files)
";
    let v = parse(Parser::Mypy, text, "", None);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(
        one(&v, 0),
        (
            "src/app.py",
            Some(10),
            Some(5),
            Some("assignment"),
            Severity::Error
        )
    );
    assert!(v[0].message.starts_with("Incompatible types"));
    assert_eq!(
        one(&v, 1),
        ("src/app.py", Some(22), None, None, Severity::Note)
    );

    let json = r#"{"file": "src/app.py", "line": 3, "column": 4, "message": "Name \"x\" is not defined", "hint": null, "code": "name-defined", "severity": "error"}"#;
    let v = parse(Parser::Mypy, json, "", None);
    assert_eq!(
        one(&v, 0),
        (
            "src/app.py",
            Some(3),
            Some(5),
            Some("name-defined"),
            Severity::Error
        )
    );
}

#[test]
fn ruff_json_and_text() {
    let json = r#"[{"cell":null,"code":"F401","end_location":{"column":10,"row":1},"filename":"/proj/pkg/mod.py","fix":{"applicability":"safe","edits":[],"message":"Remove unused import: `os`"},"location":{"column":8,"row":1},"message":"`os` imported but unused","noqa_row":1,"url":"https://docs.astral.sh/ruff/rules/unused-import"}]"#;
    let v = parse(Parser::Ruff, json, "", Some(Path::new("/proj")));
    assert_eq!(
        one(&v, 0),
        (
            "pkg/mod.py",
            Some(1),
            Some(8),
            Some("F401"),
            Severity::Error
        )
    );
    let text = "pkg/mod.py:1:8: F401 [*] `os` imported but unused\npkg/b.py:4:1: E402 Module level import not at top of file\nFound 2 errors.\n[*] 1 fixable with the `--fix` option.\n";
    let v = parse(Parser::Ruff, text, "", None);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(v[0].message, "`os` imported but unused");
    assert_eq!(
        one(&v, 1),
        ("pkg/b.py", Some(4), Some(1), Some("E402"), Severity::Error)
    );
}

#[test]
fn tsc_plain_and_pretty() {
    let out = "src/index.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.\nsrc/util.ts:10:1 - error TS2304: Cannot find name 'foo'.\n\nFound 2 errors in 2 files.\n";
    let v = parse(Parser::Tsc, out, "", None);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(
        one(&v, 0),
        (
            "src/index.ts",
            Some(3),
            Some(7),
            Some("TS2322"),
            Severity::Error
        )
    );
    assert_eq!(
        one(&v, 1),
        (
            "src/util.ts",
            Some(10),
            Some(1),
            Some("TS2304"),
            Severity::Error
        )
    );
}

#[test]
fn eslint_json_and_stylish() {
    let json = r#"[{"filePath":"/w/src/a.js","messages":[{"ruleId":"no-unused-vars","severity":2,"message":"'x' is assigned a value but never used.","line":1,"column":7,"nodeType":"Identifier"},{"ruleId":"semi","severity":1,"message":"Missing semicolon.","line":2,"column":12}],"errorCount":1,"warningCount":1}]"#;
    let v = parse(Parser::Eslint, json, "", Some(Path::new("/w")));
    assert_eq!(v.len(), 2);
    assert_eq!(
        one(&v, 0),
        (
            "src/a.js",
            Some(1),
            Some(7),
            Some("no-unused-vars"),
            Severity::Error
        )
    );
    assert_eq!(one(&v, 1).4, Severity::Warning);
    let text = "
/w/src/a.js
  1:7   error    'x' is assigned a value but never used  no-unused-vars
  2:12  warning  Missing semicolon                        semi

✖ 2 problems (1 error, 1 warning)
";
    let v = parse(Parser::Eslint, text, "", None);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(
        one(&v, 0),
        (
            "/w/src/a.js",
            Some(1),
            Some(7),
            Some("no-unused-vars"),
            Severity::Error
        )
    );
    assert_eq!(v[0].message, "'x' is assigned a value but never used");
    assert_eq!(
        one(&v, 1),
        (
            "/w/src/a.js",
            Some(2),
            Some(12),
            Some("semi"),
            Severity::Warning
        )
    );
}

#[test]
fn go_build_vet_test_and_gofmt() {
    let build = "# example.com/app\n./main.go:5:2: undefined: foo\n./util.go:9:10: cannot use x (variable of type int) as string value\n";
    let v = parse(Parser::Go, "", build, None);
    assert_eq!(v.len(), 2);
    assert_eq!(
        one(&v, 0),
        ("main.go", Some(5), Some(2), None, Severity::Error)
    );
    let vet = "# example.com/app\nvet: ./main.go:7:2: fmt.Printf format %d has arg s of wrong type string\n";
    assert_eq!(one(&parse(Parser::Go, "", vet, None), 0).0, "main.go");
    let test = "=== RUN   TestAdd\n--- FAIL: TestAdd (0.00s)\n    math_test.go:12: Add(1, 2) = 4; want 3\nFAIL\nFAIL\texample.com/app\t0.003s\n";
    let v = parse(Parser::Go, test, "", None);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        one(&v, 0),
        (
            "math_test.go",
            Some(12),
            None,
            Some("TestAdd"),
            Severity::Error
        )
    );
    assert!(v[0].message.contains("want 3"));
    let v = parse(Parser::Gofmt, "main.go\n./pkg/x.go\n", "", None);
    assert_eq!(v.len(), 2);
    assert_eq!(one(&v, 1).0, "pkg/x.go");
}

#[test]
fn unknown_output_yields_nothing_and_fallback_keeps_the_tail() {
    assert!(parse(Parser::Generic, "something broke\nbadly", "", None).is_empty());
    assert!(parse(Parser::Cargo, "\u{0}\u{1}garbage {not json", "", None).is_empty());
    let f = fallback(&"x".repeat(5000), "the end", 100);
    assert!(f.message.ends_with("the end"));
    assert!(f.message.len() <= 100);
    let g = generic("lib/a.c:3:4: warning: shadowed\n", "");
    assert_eq!(
        one(&g, 0),
        ("lib/a.c", Some(3), Some(4), None, Severity::Warning)
    );
}

#[test]
fn parser_choice_from_command() {
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        Parser::for_command("npx", &s(&["--no-install", "tsc", "--noEmit"])),
        Parser::Tsc
    );
    assert_eq!(
        Parser::for_command("python", &s(&["-m", "pytest"])),
        Parser::Pytest
    );
    assert_eq!(
        Parser::for_command("/usr/bin/cargo", &s(&["clippy"])),
        Parser::Cargo
    );
    assert_eq!(Parser::for_command("go", &s(&["vet"])), Parser::Go);
    assert_eq!(Parser::for_command("./check.sh", &[]), Parser::Generic);
}
