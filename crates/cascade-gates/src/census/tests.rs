//! The census parsers on output captured from real runs (pytest 9.2,
//! cargo 1.9x, go 1.19, jest 30.5 and vitest 5.1 in /tmp/vjt: see
//! `testdata/`), instrumenting, and comparing.

use super::*;

fn data(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/census/testdata")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// That census `c` (of `what`) holds exactly the tests of `want`.
fn holds_exactly(c: &Census, want: &[(&str, TestOutcome)], what: &str) {
    assert_eq!(c.tests.len(), want.len(), "{what}: {:?}", c.tests);
    for (id, o) in want {
        assert_eq!(c.tests.get(*id), Some(o), "{what}: {id}");
    }
}

#[test]
fn pytest_junit_report_is_read() {
    let c = pytest::parse_junit(&data("pytest-junit.xml"));
    let want = [
        ("tests.test_b", TestOutcome::Skipped),
        ("tests.test_a.test_one", TestOutcome::Passed),
        ("tests.test_a.test_fail", TestOutcome::Failed),
        ("tests.test_a.test_skipped", TestOutcome::Skipped),
        ("tests.test_a.test_xf", TestOutcome::Skipped),
        ("tests.test_a.TestK.test_p[1]", TestOutcome::Passed),
        ("tests.test_a.TestK.test_p[2]", TestOutcome::Passed),
    ];
    holds_exactly(&c, &want, "");
    assert_eq!(c.ran(), 4);
    assert!(pytest::parse_junit("not xml <").tests.is_empty());
}

#[test]
fn jest_and_vitest_json_reports_are_read_relative_to_where_they_ran() {
    for (runner, file) in [
        (CensusRunner::Jest, "jest.json"),
        (CensusRunner::Vitest, "vitest.json"),
    ] {
        let c = read_js_report(runner, &data(file), Path::new("/tmp/vjt"));
        let want = [
            ("src/calc.test.js > total > sums", TestOutcome::Passed),
            ("src/calc.test.js > total > later", TestOutcome::Skipped),
            ("src/calc.test.js > total > fails", TestOutcome::Failed),
            ("src/calc.test.js > top", TestOutcome::Passed),
        ];
        holds_exactly(&c, &want, file);
        assert_eq!(c.runner, runner);
    }
    assert!(
        read_js_report(CensusRunner::Jest, "not json", Path::new("/"))
            .tests
            .is_empty()
    );
}

#[test]
fn vitest_and_jest_are_instrumented_with_a_json_report() {
    let report = Path::new("/private/r.report");
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let v = instrument("npx", &args(&["vitest", "run"]), report).expect("vitest");
    assert_eq!(v.runner, CensusRunner::Vitest);
    assert_eq!(
        v.args,
        args(&[
            "vitest",
            "run",
            "--reporter=default",
            "--reporter=json",
            "--outputFile.json=/private/r.report"
        ])
    );
    let j = instrument("node_modules/.bin/jest", &[], report).expect("jest");
    assert_eq!(j.args, args(&["--json", "--outputFile=/private/r.report"]));
    assert_eq!(j.report.as_deref(), Some(report));
    assert!(instrument("npx", &args(&["eslint", "."]), report).is_none());
}

#[test]
fn libtest_output_is_read_with_its_binaries() {
    let c = libtest::parse(&data("cargo-test.stdout"), &data("cargo-test.stderr"));
    let want = [
        ("src/lib.rs[calc]::tests::adds", TestOutcome::Passed),
        ("src/lib.rs[calc]::tests::fails", TestOutcome::Failed),
        ("src/lib.rs[calc]::tests::slow", TestOutcome::Skipped),
        ("tests/api.rs[api]::adds", TestOutcome::Passed),
        ("doc[calc]::src/lib.rs - add", TestOutcome::Passed),
    ];
    holds_exactly(&c, &want, "");
    // Quiet cargo prints no `Running` lines: names alone.
    let quiet = libtest::parse("running 1 test\ntest tests::adds ... ok\n", "");
    assert_eq!(quiet.tests.get("tests::adds"), Some(&TestOutcome::Passed));
    assert!(
        c.doubts.is_empty() && quiet.doubts.is_empty(),
        "{:?}",
        c.doubts
    );
}

/// A cargo test run whose one binary ran `tests::adds` (passed) and
/// `tests::fails` (failed), with `trailer` as the failing test's captured
/// output and `extra` printed among the results.
fn cargo_run(extra: &str, trailer: &str, summary: &str) -> Census {
    let stdout = format!(
        "\nrunning 2 tests\ntest tests::adds ... ok\n{extra}test tests::fails ... FAILED\n\n\
         failures:\n\n---- tests::fails stdout ----\n{trailer}\n\nfailures:\n    tests::fails\n\n\
         test result: FAILED. {summary}; 0 measured; 0 filtered out; finished in 0.01s\n"
    );
    let stderr = "     Running unittests src/lib.rs (target/debug/deps/calc-c6626fb655a8d231)\n";
    libtest::parse(&stdout, stderr)
}

/// That one of `c`'s doubts says `needle`.
fn assert_doubt(c: &Census, needle: &str) {
    assert!(
        c.doubts.iter().any(|d| d.contains(needle)),
        "{needle}: {:?}",
        c.doubts
    );
}

#[test]
fn libtest_lines_the_harness_did_not_count_are_doubted() {
    let honest = cargo_run("", "assertion failed", "1 passed; 1 failed; 0 ignored");
    assert!(honest.doubts.is_empty(), "{:?}", honest.doubts);

    // A failing test that prints an `ok` line for itself (or for a test
    // that is gone) in its captured output: not read as a result.
    let forged = cargo_run(
        "",
        "test tests::fails ... ok\ntest tests::removed ... ok",
        "1 passed; 1 failed; 0 ignored",
    );
    assert_eq!(
        forged.tests.get("src/lib.rs[calc]::tests::fails"),
        Some(&TestOutcome::Failed)
    );
    assert!(!forged
        .tests
        .contains_key("src/lib.rs[calc]::tests::removed"));
    assert!(forged.doubts.is_empty(), "{:?}", forged.doubts);

    // Written among the results (`--nocapture`, or straight to the
    // descriptor): more lines than the harness counted.
    let among = cargo_run(
        "test tests::removed ... ok\n",
        "",
        "1 passed; 1 failed; 0 ignored",
    );
    assert_doubt(&among, "reported 2 passed");
    // A test that reports itself passed before the harness says it failed.
    let twice = cargo_run(
        "test tests::fails ... ok\n",
        "",
        "1 passed; 1 failed; 0 ignored",
    );
    assert_eq!(
        twice.tests.get("src/lib.rs[calc]::tests::fails"),
        Some(&TestOutcome::Failed)
    );
    assert_doubt(&twice, "reported twice");

    // A whole block of its own, with a summary that adds up: one block
    // more than the binaries cargo ran.
    let block = cargo_run(
        "",
        "\nrunning 1 test\ntest tests::removed ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
        "1 passed; 1 failed; 0 ignored",
    );
    assert_doubt(&block, "2 blocks of results for the 1 test binaries");
}

#[test]
fn go_json_events_are_read_and_turned_back_into_text() {
    let out = data("go-test.json");
    let c = gotest::parse(&out);
    let want = [
        ("example.com/calc.TestAdd", TestOutcome::Passed),
        ("example.com/calc.TestBad", TestOutcome::Failed),
        ("example.com/calc.TestSkip", TestOutcome::Skipped),
        ("example.com/calc.TestSub", TestOutcome::Passed),
        ("example.com/calc.TestSub/inner", TestOutcome::Passed),
    ];
    holds_exactly(&c, &want, "");
    assert!(c.doubts.is_empty(), "{:?}", c.doubts);
    let text = gotest::plain_text(&out);
    assert!(
        text.contains("    calc_test.go:4: bad\n--- FAIL: TestBad"),
        "{text}"
    );
    assert!(text.contains("FAIL\texample.com/calc\t"), "{text}");
}

#[test]
fn runners_get_cascades_arguments() {
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let report = Path::new("/r/.cascade/census/pytest.xml");
    let p = instrument("pytest", &args(&["-q"]), report).unwrap();
    assert_eq!(
        p.args,
        args(&["-q", "--junitxml=/r/.cascade/census/pytest.xml"])
    );
    assert_eq!(p.report.as_deref(), Some(report));
    let p = instrument("python3", &args(&["-m", "pytest", "tests"]), report).unwrap();
    assert_eq!(p.runner, CensusRunner::Pytest);
    assert!(instrument("python3", &args(&["-m", "unittest"]), report).is_none());
    let p = instrument("cargo", &args(&["test", "-q"]), report).unwrap();
    assert_eq!(p.args, args(&["test", "-q", "--", "--format=pretty"]));
    let p = instrument("cargo", &args(&["test", "--message-format=json"]), report).unwrap();
    assert_eq!(p.args, args(&["test", "--message-format=json"]));
    assert!(instrument("cargo", &args(&["clippy"]), report).is_none());
    let p = instrument("/usr/bin/go", &args(&["test", "./..."]), report).unwrap();
    assert_eq!(p.args, args(&["test", "-json", "./..."]));
    assert!(instrument("go", &args(&["vet", "./..."]), report).is_none());
}

#[test]
fn comparison_names_lost_tests_and_new_failures() {
    let census = |pairs: &[(&str, TestOutcome)]| Census {
        runner: CensusRunner::Pytest,
        tests: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        doubts: Vec::new(),
    };
    use TestOutcome::*;
    let base = census(&[("a", Passed), ("b", Passed), ("c", Failed), ("d", Passed)]);
    let now = census(&[("a", Passed), ("b", Skipped), ("c", Failed), ("e", Failed)]);
    let c = compare(&base, &now);
    assert_eq!(
        c.lost,
        vec![("b".to_string(), Some(Skipped)), ("d".to_string(), None)]
    );
    assert_eq!(c.new_failures, ["e"]);
    assert_eq!(c.known_failures, ["c"]);
    assert_eq!((c.ran_before, c.ran_now), (4, 3));
}

/// go 1.19's test2json reads a test's own `--- PASS: TestGone` line as a
/// `pass` of `TestGone` (seen with go1.19.8): a test that ends without
/// having started, or ends twice, is a doubt.
#[test]
fn go_verdicts_of_tests_never_started_are_doubted() {
    let ev = |action: &str, test: &str| {
        format!("{{\"Action\":\"{action}\",\"Package\":\"example.com/gof\",\"Test\":\"{test}\"}}\n")
    };
    let out = [
        ev("run", "TestReal"),
        ev("pass", "TestGone"),
        ev("pass", "TestReal"),
        ev("fail", "TestReal"),
    ]
    .concat();
    let c = gotest::parse(&out);
    assert_eq!(
        c.tests.get("example.com/gof.TestReal"),
        Some(&TestOutcome::Failed)
    );
    assert_eq!(
        c.doubts,
        [
            "test 'example.com/gof.TestGone' ended while 'TestReal' ran: that test printed it",
            "test 'example.com/gof.TestGone' ended without having started",
            "test 'example.com/gof.TestReal' is reported twice"
        ]
    );
}

/// go 1.19's events of a test that prints go's own lines for a test that
/// does not run (`=== RUN TestGone`, `--- PASS: TestGone`), beside
/// parallel tests and subtests (real output, see testdata/go-forged.json):
/// the printed start is a doubt, the real tests are not.
#[test]
fn a_go_test_printing_another_tests_start_and_pass_is_a_doubt() {
    let out = data("go-forged.json");
    let c = gotest::parse(&out);
    assert_doubt(
        &c,
        "test 'example.com/calc.TestGone' started while 'TestForge' ran",
    );
    assert_doubt(
        &c,
        "test 'example.com/calc.TestGone' ended while 'TestForge' ran",
    );
    assert_eq!(c.doubts.len(), 2, "{:?}", c.doubts);
    // Without the forging test, the parallel tests and subtests are read
    // without a doubt.
    let honest: String = out
        .lines()
        .filter(|l| !l.contains("TestGone") && !l.contains("TestForge"))
        .map(|l| format!("{l}\n"))
        .collect();
    let c = gotest::parse(&honest);
    assert!(c.doubts.is_empty(), "{:?}", c.doubts);
    assert_eq!(
        c.ran(),
        7,
        "{:?}",
        c.with(TestOutcome::Passed).collect::<Vec<_>>()
    );
    // A pass of a paused test, or of another test while one runs, is
    // printed too.
    let event = |action: &str, test: &str| {
        format!("{{\"Action\":\"{action}\",\"Package\":\"p\",\"Test\":\"{test}\"}}\n")
    };
    let paused = [
        event("run", "TestP"),
        event("pause", "TestP"),
        event("run", "TestQ"),
        event("pass", "TestP"),
    ]
    .concat();
    assert_doubt(
        &gotest::parse(&paused),
        "'p.TestP' ended while it was paused",
    );
    let inside = [
        event("run", "TestQ"),
        event("run", "TestR"),
        event("pass", "TestR"),
    ]
    .concat();
    assert_doubt(
        &gotest::parse(&inside),
        "'p.TestR' started while 'TestQ' ran",
    );
    // With -count=2 the tests run again once the first round has ended.
    let again = [
        event("run", "TestP"),
        event("pause", "TestP"),
        event("cont", "TestP"),
        event("pass", "TestP"),
        event("run", "TestP"),
        event("pass", "TestP"),
    ]
    .concat();
    let c = gotest::parse(&again);
    assert!(
        c.doubts.iter().all(|d| !d.contains("while")),
        "{:?}",
        c.doubts
    );
}
