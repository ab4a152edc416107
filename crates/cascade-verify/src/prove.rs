//! Proving tests: a test a story adds or changes must fail without the
//! story's code. [`prove`] writes the base commit's tree into a scratch
//! directory, applies only the change's test files (for Rust tests inside a
//! source file, only its `#[cfg(test)]` module), runs just the new or changed
//! tests there with their runner, and reports every one that passed as an
//! `unproven-test`: it tests nothing the story built.
//!
//! Runners (the first that applies): pytest (`python3 -m pytest`, node ids
//! `file::Class::test`), else unittest for `TestCase` methods; `cargo test`
//! (`--test NAME` for `tests/NAME.rs`, `--lib` otherwise, test names as
//! filters); `go test -run '^(A|B)$'` per package; vitest or jest from the
//! project's `node_modules/.bin` (never `npx`: nothing is downloaded), with a
//! JSON report. A runner that is not installed, a test that cannot be
//! separated from the code (a Rust test outside a `#[cfg(test)]` module) or
//! a run that times out is a note, never a finding. A test whose text is
//! the same as a test of that name the change removed elsewhere (a moved
//! test) is not new, nor is one that takes a removed test's place (renamed,
//! or parametrised copies: [`crate::successor`]).
//!
//! Cost: one extra run of the changed tests (plus, for compiled languages,
//! building the base with them).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cascade_git::diff::FileDiff;
use cascade_process::{CancelToken, Spec};

use crate::lex;
use crate::rules::{Language, RuleSet};
use crate::scan::{body, finding, test_functions, Finding, Prepared, UNPROVEN_TEST};

/// Default limit of one runner's run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Output kept of a run (the test names are read from it).
const OUTPUT_BYTES: usize = 4 * 1024 * 1024;

/// A test the change added or changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedTest {
    pub file: String,
    pub lang: Language,
    /// The function's name (a TypeScript test's title).
    pub name: String,
    /// 1-based line of its name in the new text.
    pub line: u32,
    /// Python: the class it is a method of.
    pub class: Option<String>,
}

/// How [`prove`] runs the tests.
#[derive(Debug, Clone)]
pub struct ProveOptions {
    /// The directory the change was made in (its `node_modules` and `.venv`
    /// are lent to the scratch copy).
    pub source: PathBuf,
    /// `CARGO_TARGET_DIR` for cargo (`None`: the scratch copy's own).
    pub cargo_target_dir: Option<PathBuf>,
    /// Limit of each runner's run.
    pub timeout: Duration,
    /// Extra environment of the runs.
    pub env: Vec<(String, String)>,
    /// The story's confinement of the runs (their scratch copy of the base
    /// and the Cargo target are made writable too); `None`: unconfined.
    pub sandbox: Option<std::sync::Arc<cascade_process::sandbox::Policy>>,
}

impl ProveOptions {
    pub fn new(source: impl Into<PathBuf>) -> ProveOptions {
        ProveOptions {
            source: source.into(),
            cargo_target_dir: None,
            timeout: DEFAULT_TIMEOUT,
            env: Vec::new(),
            sandbox: None,
        }
    }
}

/// What proving found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proof {
    /// The new or changed tests.
    pub tests: Vec<ChangedTest>,
    /// How many of them ran on the base.
    pub ran: usize,
    /// One `unproven-test` per test that passed on the base.
    pub findings: Vec<Finding>,
    /// What could not be proven, and why.
    pub notes: Vec<String>,
}

/// The new or changed tests of `files`: tests of test files (by the
/// runner's naming convention) whose text the change touched, minus moved
/// ones.
pub fn changed_tests(files: &[FileDiff], rules: &RuleSet) -> Vec<ChangedTest> {
    // Every old test's text, by name: a test with the same name and text is
    // moved, not new.
    let mut old_tests: HashMap<String, Vec<String>> = HashMap::new();
    for d in files {
        let (Some(lang), Some(old)) = (rules.language_of(&d.path), d.old_text.as_deref()) else {
            continue;
        };
        let Some(ts) = rules.tests_of(lang) else {
            continue;
        };
        let p = prepared(d, lang, old);
        for (name, i) in test_functions(&p.lines, ts) {
            if let Some((_, end)) = body(&p, i, lang) {
                old_tests
                    .entry(name)
                    .or_default()
                    .push(normalized(&p.raw[i..=end.min(p.raw.len() - 1)]));
            }
        }
    }
    // A test that takes a removed test's place (renamed, parametrised
    // copies) is a refactor: it passes on the base as the old one did.
    let written = crate::successor::written_tests(files, rules);
    let removed = removed_tests(files, rules);
    let refactored = |file: &str, name: &str| {
        let mine: Vec<_> = written
            .iter()
            .filter(|w| w.name == name && w.file == file)
            .cloned()
            .collect();
        removed
            .iter()
            .any(|r| crate::successor::successor(r, &mine).is_some())
    };
    let mut out = Vec::new();
    for d in files {
        let (Some(lang), Some(new)) = (rules.language_of(&d.path), d.new_text.as_deref()) else {
            continue;
        };
        let Some(ts) = rules.tests_of(lang) else {
            continue;
        };
        if !rules.is_test_file(lang, &d.path) || d.added.is_empty() {
            continue;
        }
        let p = prepared(d, lang, new);
        for (name, i) in test_functions(&p.lines, ts) {
            let Some((_, end)) = body(&p, i, lang) else {
                continue;
            };
            let end = end.min(p.raw.len() - 1);
            let touched = d
                .added
                .iter()
                .any(|&n| (i..=end).contains(&(n as usize - 1)));
            if !touched {
                continue;
            }
            let text = normalized(&p.raw[i..=end]);
            if old_tests.get(&name).is_some_and(|t| t.contains(&text)) || refactored(&d.path, &name)
            {
                continue;
            }
            let class = (lang == Language::Python)
                .then(|| crate::excuse::enclosing_class(&p, i).map(|(c, _)| c))
                .flatten();
            out.push(ChangedTest {
                file: d.path.clone(),
                lang,
                name,
                line: i as u32 + 1,
                class,
            });
        }
    }
    out
}

/// The tests of the old texts that the change removed from their file.
fn removed_tests(files: &[FileDiff], rules: &RuleSet) -> Vec<crate::successor::TestText> {
    let mut out = Vec::new();
    for d in files {
        let path = d.old_path.as_deref().unwrap_or(&d.path);
        let (Some(lang), Some(old)) = (rules.language_of(path), d.old_text.as_deref()) else {
            continue;
        };
        let Some(ts) = rules.tests_of(lang) else {
            continue;
        };
        let kept: Vec<String> = d
            .new_text
            .as_deref()
            .map(|t| crate::successor::tests_in(t, lang, ts))
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.name)
            .collect();
        out.extend(
            crate::successor::tests_in(old, lang, ts)
                .into_iter()
                .filter(|t| !kept.contains(&t.name)),
        );
    }
    out
}

fn prepared<'a>(d: &'a FileDiff, lang: Language, text: &'a str) -> Prepared<'a> {
    Prepared {
        diff: d,
        lang: Some(lang),
        raw: text.lines().collect(),
        lines: lex::lex(text, lang.syntax()),
    }
}

/// A test's text with whitespace runs made one space.
fn normalized(lines: &[&str]) -> String {
    lines
        .iter()
        .flat_map(|l| l.split_whitespace())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the new or changed tests of `files` (the change `base..` of the
/// repository at `repo`) on the base commit with only the test changes
/// applied, in a scratch directory removed afterwards.
pub async fn prove(
    repo: &Path,
    base: &str,
    files: &[FileDiff],
    rules: &RuleSet,
    opts: &ProveOptions,
    cancel: &CancelToken,
) -> Result<Proof, crate::VerifyError> {
    let tests = changed_tests(files, rules);
    let mut proof = Proof {
        tests: tests.clone(),
        ..Proof::default()
    };
    if tests.is_empty() {
        return Ok(proof);
    }
    let scratch = tempfile::Builder::new()
        .prefix("cascade-prove-")
        .tempdir()
        .map_err(|e| crate::VerifyError::Read {
            path: std::env::temp_dir(),
            source: e,
        })?;
    let root = scratch.path().join("base");
    cascade_git::diff::export_tree(repo, base, &root)?;
    let usable = apply_test_changes(&root, files, rules, &tests, &mut proof.notes);
    let tests: Vec<ChangedTest> = tests
        .into_iter()
        .filter(|t| usable.contains(&t.file))
        .collect();
    lend_dependencies(&root, &opts.source, &tests);
    let confined = ProveOptions {
        sandbox: opts.sandbox.as_ref().map(|p| {
            let writable = std::iter::once(scratch.path().to_path_buf())
                .chain(opts.cargo_target_dir.iter().cloned());
            // The runs share one network namespace of their own, as a
            // run's gates do.
            let network = cascade_process::sandbox::Network::shared_or_own();
            std::sync::Arc::new(p.with_write(writable).with_network(network))
        }),
        ..opts.clone()
    };
    let opts = &confined;
    for run in plan(&root, &tests, opts, &mut proof.notes).await {
        if cancel.is_cancelled() {
            break;
        }
        let passed = run.execute(&root, opts, cancel, &mut proof.notes).await;
        proof.ran += run.tests.len();
        for t in run
            .tests
            .iter()
            .filter(|t| passed.iter().any(|p| p == &run.id_of(t)))
        {
            let raw = files
                .iter()
                .find(|d| d.path == t.file)
                .and_then(|d| d.new_text.as_deref())
                .and_then(|text| text.lines().nth(t.line as usize - 1))
                .unwrap_or("");
            proof.findings.push(finding(
                UNPROVEN_TEST,
                &t.file,
                t.line,
                &format!(
                    "test '{}' passes on the base commit without the story's code ({}): it does not test what the story built; make it fail without the change",
                    t.name,
                    run.runner.name()
                ),
                raw,
            ));
        }
    }
    proof
        .findings
        .sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    Ok(proof)
}

/// Writes the change's test files over the base copy (a Rust source file
/// gets only its test module); returns the files whose tests can run.
fn apply_test_changes(
    root: &Path,
    files: &[FileDiff],
    rules: &RuleSet,
    tests: &[ChangedTest],
    notes: &mut Vec<String>,
) -> Vec<String> {
    let mut usable = Vec::new();
    for d in files {
        let Some(lang) = rules.language_of(&d.path) else {
            continue;
        };
        let Some(new) = d.new_text.as_deref() else {
            continue;
        };
        let whole_file = rules.is_test_file(lang, &d.path)
            && (lang != Language::Rust || under_tests_dir(&d.path));
        let text = if whole_file {
            Some(new.to_string())
        } else if lang == Language::Rust && tests.iter().any(|t| t.file == d.path) {
            let spliced = splice_test_module(d.old_text.as_deref(), new);
            if spliced.is_none() {
                notes.push(format!(
                    "{}: its tests are not in a `#[cfg(test)]` module of a file the base has, so they cannot run without the story's code",
                    d.path
                ));
            }
            spliced
        } else {
            None
        };
        let Some(text) = text else {
            continue;
        };
        let path = root.join(&d.path);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, text));
        match written {
            Ok(()) => usable.push(d.path.clone()),
            Err(e) => notes.push(format!("{}: cannot write it on the base copy: {e}", d.path)),
        }
    }
    usable
}

fn under_tests_dir(path: &str) -> bool {
    path.split('/').rev().skip(1).any(|c| c == "tests")
}

/// The base text of a Rust source file with the `#[cfg(test)]` module of
/// the new text in place of its own (or appended); `None` when the base has
/// no such file or the new text no such module.
fn splice_test_module(old: Option<&str>, new: &str) -> Option<String> {
    let old = old?;
    let (from, to) = test_module(new)?;
    let new_lines: Vec<&str> = new.lines().collect();
    let module = new_lines[from..=to].join("\n");
    let old_lines: Vec<&str> = old.lines().collect();
    let mut out: Vec<&str> = match test_module(old) {
        Some((a, b)) => {
            let mut v = old_lines[..a].to_vec();
            v.push(&module);
            v.extend(&old_lines[b + 1..]);
            v
        }
        None => {
            let mut v = old_lines.clone();
            v.push("");
            v.push(&module);
            v
        }
    };
    out.push("");
    Some(out.join("\n"))
}

/// The 0-based first and last line of the `#[cfg(test)] mod ... { }` block.
fn test_module(text: &str) -> Option<(usize, usize)> {
    let lines = lex::lex(text, &lex::RUST);
    let attr = lines.iter().position(|l| {
        let c: String = l.code.split_whitespace().collect();
        c.starts_with("#[cfg(test)]")
    })?;
    let m = (attr..lines.len().min(attr + 4)).find(|&j| lines[j].code.contains("mod "))?;
    lex::block_close(&lines, m).map(|j| (attr, j))
}

/// Symlinks the source's `node_modules` (beside each package.json of a
/// TypeScript test) and `.venv` into the base copy: dependencies are not in
/// git.
fn lend_dependencies(root: &Path, source: &Path, tests: &[ChangedTest]) {
    let mut dirs: Vec<PathBuf> = vec![PathBuf::new()];
    for t in tests.iter().filter(|t| t.lang == Language::TypeScript) {
        if let Some(pkg) = nearest(root, &t.file, "package.json") {
            dirs.push(pkg);
        }
    }
    for dir in dirs {
        for name in ["node_modules", ".venv"] {
            let from = source.join(&dir).join(name);
            let to = root.join(&dir).join(name);
            if from.is_dir() && !to.exists() {
                #[cfg(unix)]
                let _ = std::os::unix::fs::symlink(&from, &to);
            }
        }
    }
}

/// The folder (relative to `root`) of the nearest `marker` file above `file`.
fn nearest(root: &Path, file: &str, marker: &str) -> Option<PathBuf> {
    let mut dir = Path::new(file).parent();
    while let Some(d) = dir {
        if root.join(d).join(marker).is_file() {
            return Some(d.to_path_buf());
        }
        dir = d.parent();
    }
    None
}

/// A test runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Runner {
    Pytest,
    Unittest,
    Cargo,
    Go,
    Vitest,
    Jest,
}

impl Runner {
    pub fn name(self) -> &'static str {
        match self {
            Runner::Pytest => "pytest",
            Runner::Unittest => "unittest",
            Runner::Cargo => "cargo test",
            Runner::Go => "go test",
            Runner::Vitest => "vitest",
            Runner::Jest => "jest",
        }
    }
}

/// One runner's run over some of the tests.
#[derive(Debug, Clone)]
struct Run {
    runner: Runner,
    /// Folder (relative to the base copy) it runs in.
    dir: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    tests: Vec<ChangedTest>,
    /// A JSON report the runner writes (vitest, jest).
    report: Option<PathBuf>,
}

impl Run {
    /// The id under which the runner reports `t` as passed.
    fn id_of(&self, t: &ChangedTest) -> String {
        match self.runner {
            Runner::Pytest => pytest_id(t),
            Runner::Unittest => unittest_id(t),
            _ => t.name.clone(),
        }
    }

    /// Runs it; the ids of the tests that passed.
    async fn execute(
        &self,
        root: &Path,
        opts: &ProveOptions,
        cancel: &CancelToken,
        notes: &mut Vec<String>,
    ) -> Vec<String> {
        let mut spec = Spec::new(&self.program)
            .args(&self.args)
            .cwd(root.join(&self.dir))
            .timeout(opts.timeout)
            .tail_bytes(OUTPUT_BYTES);
        for (k, v) in &opts.env {
            spec = spec.env(k, v);
        }
        if self.runner == Runner::Cargo {
            // Set either way: an inherited `CARGO_TARGET_DIR` (cascade run
            // from a cargo build) would build into, and wait for the lock
            // of, a directory that is not the run's.
            let dir = opts
                .cargo_target_dir
                .clone()
                .unwrap_or_else(|| root.join("target"));
            spec = spec.env("CARGO_TARGET_DIR", dir);
        }
        // The tests run as a gate runs them: off the host's network (the
        // namespace `prove` gave the policy).
        if let Some(policy) = &opts.sandbox {
            spec = spec.sandbox(std::sync::Arc::clone(policy));
        }
        let outcome = match spec.run(cancel).await {
            Ok(o) => o,
            Err(e) => {
                notes.push(format!("{} could not start: {e}", self.runner.name()));
                return Vec::new();
            }
        };
        if outcome.timed_out || outcome.cancelled {
            notes.push(format!(
                "{} on the base: {}",
                self.runner.name(),
                outcome.describe()
            ));
            return Vec::new();
        }
        let text = format!(
            "{}\n{}",
            outcome.stdout.text_lossy(),
            outcome.stderr.text_lossy()
        );
        let report = self
            .report
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok());
        passed(self.runner, &text, report.as_deref())
    }
}

fn pytest_id(t: &ChangedTest) -> String {
    match &t.class {
        Some(c) => format!("{}::{c}::{}", t.file, t.name),
        None => format!("{}::{}", t.file, t.name),
    }
}

fn unittest_id(t: &ChangedTest) -> String {
    let module = t.file.trim_end_matches(".py").replace('/', ".");
    match &t.class {
        Some(c) => format!("{module}.{c}.{}", t.name),
        None => format!("{module}.{}", t.name),
    }
}

/// The runs that prove `tests` in the base copy at `root`.
async fn plan(
    root: &Path,
    tests: &[ChangedTest],
    opts: &ProveOptions,
    notes: &mut Vec<String>,
) -> Vec<Run> {
    let python = python(opts);
    let mut runs = Vec::new();
    for ((runner, dir, extra), tests) in grouped(root, tests, &python, notes).await {
        let group = Group {
            root,
            runner,
            dir: &dir,
            extra: &extra,
            tests: &tests,
            python: &python,
        };
        let (program, args, report) = group.command(runs.len());
        runs.push(Run {
            runner,
            dir,
            program,
            args,
            tests,
            report,
        });
    }
    runs
}

/// The tests of one run: its runner, the directory it runs in and one
/// more argument (cargo's target, a JS test file).
type GroupKey = (Runner, PathBuf, String);

/// `tests` grouped by the run that proves them; a test no installed runner
/// can prove is a note instead.
async fn grouped(
    root: &Path,
    tests: &[ChangedTest],
    python: &Path,
    notes: &mut Vec<String>,
) -> BTreeMap<GroupKey, Vec<ChangedTest>> {
    let mut groups: BTreeMap<GroupKey, Vec<ChangedTest>> = BTreeMap::new();
    let mut has_pytest: Option<bool> = None;
    for t in tests {
        let key = match t.lang {
            Language::Python => {
                let pytest = match has_pytest {
                    Some(b) => b,
                    None => {
                        let b = probe(python, &["-c", "import pytest"], root).await;
                        has_pytest = Some(b);
                        b
                    }
                };
                if pytest {
                    (Runner::Pytest, PathBuf::new(), String::new())
                } else if t.class.is_some() {
                    (Runner::Unittest, PathBuf::new(), String::new())
                } else {
                    notes.push(format!(
                        "{}: '{}' not proven: pytest is not installed for {}",
                        t.file,
                        t.name,
                        python.display()
                    ));
                    continue;
                }
            }
            Language::Rust => {
                let Some(dir) = nearest(root, &t.file, "Cargo.toml") else {
                    notes.push(format!("{}: no Cargo.toml above it", t.file));
                    continue;
                };
                let rel = Path::new(&t.file)
                    .strip_prefix(&dir)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let target = match rel.strip_prefix("tests/") {
                    Some(name) if !name.contains('/') => {
                        format!("--test={}", name.trim_end_matches(".rs"))
                    }
                    _ if rel == "src/main.rs" || rel.starts_with("src/bin/") => "--bins".into(),
                    _ => "--lib".into(),
                };
                (Runner::Cargo, dir, target)
            }
            Language::Go => {
                let dir = Path::new(&t.file)
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default();
                (Runner::Go, dir, String::new())
            }
            Language::TypeScript => {
                let dir = nearest(root, &t.file, "package.json").unwrap_or_default();
                let bin = |name: &str| root.join(&dir).join("node_modules/.bin").join(name);
                let runner = if bin("vitest").exists() {
                    Runner::Vitest
                } else if bin("jest").exists() {
                    Runner::Jest
                } else {
                    notes.push(format!(
                        "{}: '{}' not proven: neither vitest nor jest is in node_modules/.bin",
                        t.file, t.name
                    ));
                    continue;
                };
                (runner, dir, t.file.clone())
            }
        };
        groups.entry(key).or_default().push(t.clone());
    }
    groups
}

/// One group's run, to build its command line.
struct Group<'a> {
    root: &'a Path,
    runner: Runner,
    dir: &'a Path,
    extra: &'a str,
    tests: &'a [ChangedTest],
    python: &'a Path,
}

impl Group<'_> {
    /// The program, its arguments and the report file it writes (the
    /// `index`-th run's, for the JS runners).
    fn command(&self, index: usize) -> (PathBuf, Vec<String>, Option<PathBuf>) {
        let Group {
            runner,
            extra,
            tests,
            python,
            ..
        } = *self;
        let names: Vec<String> = tests.iter().map(|t| t.name.clone()).collect();
        match runner {
            Runner::Pytest => {
                let mut a = vec![
                    "-m".into(),
                    "pytest".into(),
                    "-rA".into(),
                    "-p".into(),
                    "no:cacheprovider".into(),
                ];
                a.extend(tests.iter().map(pytest_id));
                (python.to_path_buf(), a, None)
            }
            Runner::Unittest => {
                let mut a = vec!["-m".into(), "unittest".into(), "-v".into()];
                a.extend(tests.iter().map(unittest_id));
                (python.to_path_buf(), a, None)
            }
            Runner::Cargo => {
                let mut a = vec!["test".into(), extra.to_string(), "--".into()];
                a.extend(names.iter().cloned());
                ("cargo".into(), a, None)
            }
            Runner::Go => {
                let pattern = format!("^({})$", names.join("|"));
                let a = vec![
                    "test".into(),
                    "-count=1".into(),
                    "-v".into(),
                    "-run".into(),
                    pattern,
                    ".".into(),
                ];
                ("go".into(), a, None)
            }
            Runner::Vitest | Runner::Jest => self.js_command(index, &names),
        }
    }

    /// vitest's or jest's command, its JSON report at `.cascade-prove-<index>.json`.
    fn js_command(
        &self,
        index: usize,
        names: &[String],
    ) -> (PathBuf, Vec<String>, Option<PathBuf>) {
        let Group {
            root,
            runner,
            dir,
            extra,
            ..
        } = *self;
        let report = root.join(format!(".cascade-prove-{index}.json"));
        let file = Path::new(extra)
            .strip_prefix(dir)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| extra.to_string());
        let pattern = names
            .iter()
            .map(|n| regex::escape(n))
            .collect::<Vec<_>>()
            .join("|");
        let bin = root
            .join(dir)
            .join("node_modules/.bin")
            .join(if runner == Runner::Vitest {
                "vitest"
            } else {
                "jest"
            });
        let out = report.display().to_string();
        let a = if runner == Runner::Vitest {
            vec![
                "run".into(),
                "--reporter=json".into(),
                format!("--outputFile={out}"),
                file,
                "-t".into(),
                pattern,
            ]
        } else {
            vec![
                "--json".into(),
                format!("--outputFile={out}"),
                "--runTestsByPath".into(),
                file,
                "-t".into(),
                pattern,
            ]
        };
        (bin, a, Some(report))
    }
}

/// The Python of the source's `.venv`, else `python3`.
fn python(opts: &ProveOptions) -> PathBuf {
    let venv = opts.source.join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// Whether `program args` exits 0 (a runner is installed).
async fn probe(program: &Path, args: &[&str], cwd: &Path) -> bool {
    let spec = Spec::new(program)
        .args(args)
        .cwd(cwd)
        .timeout(Duration::from_secs(60));
    spec.run(&CancelToken::new())
        .await
        .is_ok_and(|o| o.success())
}

/// The ids of the tests a runner's output (or JSON report) says passed.
pub fn passed(runner: Runner, output: &str, report: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    match runner {
        // `PASSED tests/test_x.py::TestX::test_y` (the -rA summary).
        Runner::Pytest => {
            for l in output.lines() {
                if let Some(id) = l.trim().strip_prefix("PASSED ") {
                    out.push(id.split_whitespace().next().unwrap_or("").to_string());
                }
            }
        }
        // `test_y (mod.TestX.test_y) ... ok` (3.11+) or `test_y (mod.TestX) ... ok`.
        Runner::Unittest => {
            for l in output.lines() {
                let Some(head) = l.trim().strip_suffix(" ... ok") else {
                    continue;
                };
                let Some((name, rest)) = head.split_once(" (") else {
                    continue;
                };
                let inner = rest.trim_end_matches(')');
                let id = if inner.ends_with(&format!(".{name}")) {
                    inner.to_string()
                } else {
                    format!("{inner}.{name}")
                };
                out.push(id);
            }
        }
        // `test tests::adds ... ok` -> `adds`.
        Runner::Cargo => {
            for l in output.lines() {
                let Some(rest) = l.trim().strip_prefix("test ") else {
                    continue;
                };
                if let Some(path) = rest.strip_suffix(" ... ok") {
                    out.push(path.rsplit("::").next().unwrap_or(path).to_string());
                }
            }
        }
        // `--- PASS: TestX (0.00s)`.
        Runner::Go => {
            for l in output.lines() {
                if let Some(rest) = l.trim().strip_prefix("--- PASS: ") {
                    out.push(rest.split_whitespace().next().unwrap_or("").to_string());
                }
            }
        }
        // Jest's JSON report (vitest writes the same shape), read as the
        // census reads it; a test's title is its id here.
        Runner::Vitest | Runner::Jest => {
            let census = cascade_gates::census::read_js_report(
                cascade_gates::CensusRunner::Jest,
                report.unwrap_or(""),
                Path::new(""),
            );
            out.extend(
                census
                    .with(cascade_gates::TestOutcome::Passed)
                    .map(|id| crate::census::short_name(census.runner, id).to_string()),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_or_parametrised_test_is_not_a_new_one() {
        let diff = |old: &str, new: &str, added: Vec<u32>| FileDiff {
            path: "tests/test_calc.py".into(),
            old_path: None,
            status: cascade_git::diff::FileStatus::Modified,
            added,
            removed: vec![1],
            old_text: Some(old.into()),
            new_text: Some(new.into()),
            link_target: None,
        };
        let old = "def test_one():\n    assert total([1, 2]) == 3\n";
        let rules = RuleSet::builtin();
        let renamed = diff(
            old,
            "def test_total_of_two():\n    assert total([1, 2]) == 3\n",
            vec![1],
        );
        assert!(changed_tests(&[renamed], &rules).is_empty());
        let table = "import pytest\n\n@pytest.mark.parametrize(\"xs, want\", [([1, 2], 3)])\ndef test_total(xs, want):\n    assert total(xs) == want\n";
        assert!(changed_tests(&[diff(old, table, vec![1, 2, 3, 4, 5])], &rules).is_empty());
        // A new test that replaces nothing is new.
        let new = diff(old, "def test_one():\n    assert total([1, 2]) == 3\n\ndef test_neg():\n    assert total([-1]) == -1\n", vec![3, 4, 5]);
        let found = changed_tests(&[new], &rules);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "test_neg");
    }

    #[test]
    fn runners_output_is_read_for_passed_tests() {
        let pytest = "..F\n=== short test summary info ===\nPASSED tests/test_a.py::test_one\nPASSED tests/test_a.py::TestX::test_two\nFAILED tests/test_a.py::test_three - assert 1 == 2\n";
        assert_eq!(
            passed(Runner::Pytest, pytest, None),
            [
                "tests/test_a.py::test_one",
                "tests/test_a.py::TestX::test_two"
            ]
        );
        let unittest = "test_sums (test_calc.TotalTest.test_sums) ... ok\ntest_new (test_calc.TotalTest) ... ok\ntest_bad (test_calc.TotalTest.test_bad) ... FAIL\n";
        assert_eq!(
            passed(Runner::Unittest, unittest, None),
            [
                "test_calc.TotalTest.test_sums",
                "test_calc.TotalTest.test_new"
            ]
        );
        let cargo = "running 2 tests\ntest tests::adds ... ok\ntest tests::subs ... FAILED\ntest sums ... ok\n";
        assert_eq!(passed(Runner::Cargo, cargo, None), ["adds", "sums"]);
        let go = "=== RUN   TestA\n--- PASS: TestA (0.00s)\n--- FAIL: TestB (0.00s)\n";
        assert_eq!(passed(Runner::Go, go, None), ["TestA"]);
        let jest = r#"{"testResults": [{"assertionResults": [
            {"title": "sums", "fullName": "calc sums", "status": "passed"},
            {"title": "empty", "status": "failed"}]}]}"#;
        assert_eq!(passed(Runner::Jest, "", Some(jest)), ["sums"]);
        assert!(passed(Runner::Vitest, "", Some("not json")).is_empty());
    }

    #[test]
    fn ids_and_rust_test_modules() {
        let t = ChangedTest {
            file: "tests/test_calc.py".into(),
            lang: Language::Python,
            name: "test_sums".into(),
            line: 3,
            class: Some("TotalTest".into()),
        };
        assert_eq!(pytest_id(&t), "tests/test_calc.py::TotalTest::test_sums");
        assert_eq!(unittest_id(&t), "tests.test_calc.TotalTest.test_sums");
        let old = "pub fn f() -> u8 {\n    1\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn a() {}\n}\n";
        let new = "pub fn f() -> u8 {\n    2\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn a() {}\n    #[test]\n    fn b() { assert_eq!(super::f(), 2); }\n}\n";
        let spliced = splice_test_module(Some(old), new).unwrap();
        assert!(spliced.contains("    1\n"), "the base's code: {spliced}");
        assert!(spliced.contains("fn b()"), "the new tests: {spliced}");
        let no_module = "pub fn f() -> u8 {\n    1\n}\n";
        let appended = splice_test_module(Some(no_module), new).unwrap();
        assert!(appended.starts_with(no_module) && appended.contains("mod tests"));
        assert_eq!(splice_test_module(None, new), None);
        assert!(under_tests_dir("crates/x/tests/a.rs") && !under_tests_dir("src/tests.rs"));
    }
}
