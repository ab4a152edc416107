//! The fixture corpus: fake work an agent might hand in to get a green run
//! (stubs, decorator tricks, skipped or removed tests, test runners switched
//! off or narrowed by configuration, edits of the files that judge it) and
//! legitimate changes that look alike (real ABCs, Protocols, overloads,
//! `pass` in `except`, TODO in strings and comments, moved tests, ordinary
//! edits of shared config files). Every case is committed in a scratch git
//! repository and checked from the commit range, as an attempt is; the
//! verification rules are those of the base (a case that edits
//! `.cascade/verify.json` is judged by the old one).
//!
//! The cases live in `tests/corpus/<area>.txt`, in the format
//! `tests/support/cases.rs` reads (the workspace's e2e test
//! `tests/e2e/corpus.rs` runs the same cases through `cascade approve`).

use std::collections::BTreeSet;
use std::path::Path;

use cascade_verify::{Intent, RuleSet};

#[path = "support/cases.rs"]
mod cases;

use cascade_test_support::git;
use cases::{Case, AREAS};

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The rule ids verification finds in a case, committed as base..head.
fn run(case: &Case) -> Vec<cascade_verify::Finding> {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    git(d, &["init", "-q", "-b", "main"]);
    write(d, "README.md", "# corpus\n");
    for (path, text) in case.base() {
        write(d, path, text);
    }
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "base"]);
    let base = git(d, &["rev-parse", "HEAD"]);
    for path in case.removed() {
        git(d, &["rm", "-q", path]);
    }
    for (path, text) in case.written() {
        write(d, path, text);
    }
    git(d, &["add", "-A", "-f"]);
    git(d, &["commit", "-q", "-m", "change"]);
    // The rules of the base: its verify.json, if it had one.
    let rules = RuleSet::from_text(Path::new(".cascade/verify.json"), case.base_verify_json())
        .expect("the case's base verify.json is usable");
    cascade_verify::verify_repo(d, &base, Some("HEAD"), &rules, &Intent::default())
        .expect("the change reads")
        .findings
}

#[test]
fn the_corpus_is_caught_without_false_positives() {
    let cases = cases::all(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus"));
    let mut problems = Vec::new();
    let (mut fake, mut caught, mut legit, mut clean) = (0, 0, 0, 0);
    for case in &cases {
        let found = run(case);
        let rules: BTreeSet<String> = found.iter().map(|f| f.rule.clone()).collect();
        match &case.expect {
            Some(expect) => {
                fake += 1;
                assert!(
                    !expect.is_empty(),
                    "{}: {}: no ## expect",
                    case.area,
                    case.name
                );
                if &rules == expect {
                    caught += 1;
                } else {
                    problems.push(format!(
                        "{}: fake '{}': expected {expect:?}, found {rules:?}: {found:#?}",
                        case.area, case.name
                    ));
                }
            }
            None => {
                legit += 1;
                if found.is_empty() {
                    clean += 1;
                } else {
                    problems.push(format!(
                        "{}: legit '{}' flagged: {found:#?}",
                        case.area, case.name
                    ));
                }
            }
        }
    }
    // The numbers the docs and reports quote.
    println!(
        "corpus: {caught}/{fake} fake changes caught ({:.0}%), {clean}/{legit} legitimate changes clean",
        100.0 * caught as f64 / fake.max(1) as f64
    );
    for area in AREAS {
        let n = |legit: bool| {
            cases
                .iter()
                .filter(|c| c.area == area && c.expect.is_none() == legit)
                .count()
        };
        println!("  {area}: {} fake, {} legitimate", n(false), n(true));
    }
    assert!(
        fake >= 40 && legit >= 20,
        "the corpus shrank: {fake} fake, {legit} legit"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
