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
//! The cases live in `tests/corpus/<area>.txt`:
//!
//! ```text
//! ## case <name>              fake work; `## expect` lists the rule ids it must get (exactly)
//! ## expect rule-a rule-b
//! ## legit <name>             a legitimate change: no finding
//! ## file <path>              the file's old text follows (none: the case adds it)
//! ## file <old> -> <new>      a rename
//! ## becomes                  the new text follows
//! ## deleted                  the case deletes the file
//! ```

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use cascade_verify::{Intent, RuleSet};

const AREAS: [&str; 5] = ["python", "rust", "typescript", "go", "config"];

#[derive(Debug, Default)]
struct File {
    old_path: String,
    new_path: String,
    old: Option<String>,
    new: Option<String>,
}

#[derive(Debug)]
struct Case {
    area: &'static str,
    name: String,
    /// `None`: legitimate.
    expect: Option<BTreeSet<String>>,
    files: Vec<File>,
}

/// Which text a line belongs to while reading a case.
enum Into {
    Nothing,
    Old,
    New,
}

fn parse(area: &'static str, text: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut into = Into::Nothing;
    for line in text.lines() {
        let Some(directive) = line.strip_prefix("## ") else {
            let Some(case) = cases.last_mut() else {
                continue;
            };
            let Some(file) = case.files.last_mut() else {
                continue;
            };
            let slot = match into {
                Into::Old => &mut file.old,
                Into::New => &mut file.new,
                Into::Nothing => continue,
            };
            let s = slot.get_or_insert_with(String::new);
            s.push_str(line);
            s.push('\n');
            continue;
        };
        let (word, rest) = directive.split_once(' ').unwrap_or((directive, ""));
        match word {
            "case" | "legit" => {
                cases.push(Case {
                    area,
                    name: rest.to_string(),
                    expect: (word == "case").then(BTreeSet::new),
                    files: Vec::new(),
                });
                into = Into::Nothing;
            }
            "expect" => {
                let case = cases.last_mut().expect("## expect after ## case");
                case.expect = Some(rest.split_whitespace().map(str::to_string).collect());
            }
            "file" => {
                let (old, new) = rest.split_once(" -> ").unwrap_or((rest, rest));
                cases
                    .last_mut()
                    .expect("## file in a case")
                    .files
                    .push(File {
                        old_path: old.trim().to_string(),
                        new_path: new.trim().to_string(),
                        ..File::default()
                    });
                into = Into::Old;
            }
            "becomes" => {
                let file = cases.last_mut().and_then(|c| c.files.last_mut());
                file.expect("## becomes after ## file").new = Some(String::new());
                into = Into::New;
            }
            "deleted" => into = Into::Nothing,
            other => panic!("{area}: unknown directive '## {other}'"),
        }
    }
    // Blank lines separate cases: they are not part of the texts.
    for case in &mut cases {
        for f in &mut case.files {
            for t in [&mut f.old, &mut f.new].into_iter().flatten() {
                let trimmed = t.trim_end_matches('\n').to_string();
                *t = trimmed + "\n";
            }
        }
    }
    cases
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

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
    for f in &case.files {
        if let Some(old) = &f.old {
            write(d, &f.old_path, old);
        }
    }
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "base"]);
    let base = git(d, &["rev-parse", "HEAD"]);
    for f in &case.files {
        if f.old.is_some() && (f.new.is_none() || f.old_path != f.new_path) {
            git(d, &["rm", "-q", &f.old_path]);
        }
        if let Some(new) = &f.new {
            write(d, &f.new_path, new);
        }
    }
    git(d, &["add", "-A", "-f"]);
    git(d, &["commit", "-q", "-m", "change"]);
    // The rules of the base: its verify.json, if it had one.
    let base_verify = case
        .files
        .iter()
        .find(|f| f.old_path == ".cascade/verify.json")
        .and_then(|f| f.old.as_deref());
    let rules = RuleSet::from_text(Path::new(".cascade/verify.json"), base_verify)
        .expect("the case's base verify.json is usable");
    cascade_verify::verify_repo(d, &base, Some("HEAD"), &rules, &Intent::default())
        .expect("the change reads")
        .findings
}

#[test]
fn the_corpus_is_caught_without_false_positives() {
    let mut cases = Vec::new();
    for area in AREAS {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus")
            .join(format!("{area}.txt"));
        let text = std::fs::read_to_string(&path).unwrap();
        cases.extend(parse(area, &text));
    }
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
