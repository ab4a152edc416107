//! libtest's pretty output (`cargo test`): blocks that start with
//! `running N tests` on stdout, one `test NAME ... ok|ignored|FAILED` line
//! per test, and on stderr one `Running SRC (PATH/deps/BIN-HASH)` or
//! `Doc-tests CRATE` line per block, in the same order: together they say
//! which binary a test belongs to (two crates may both have `tests::adds`).
//!
//! The lines come from the gate's own output, which the tests can write to
//! as well, so what they say is checked against what the harness counted:
//! a test's line is read only among the block's results (not in the
//! `failures:` section, where a failing test's captured output is shown),
//! and a block whose lines disagree with its `running N tests` or its
//! `test result:` counts, a test reported twice, or more blocks than
//! binaries cargo ran, is a doubt of the census ([`Census::doubts`]).

use super::{Census, CensusRunner, TestOutcome};

/// Where in a block a line is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// After `running N tests`: the tests' result lines.
    Results,
    /// After `failures:` or `successes:` (captured output, the names
    /// again) until `test result:`.
    Trailer,
}

/// One `running N tests` block as read.
struct Block {
    index: usize,
    expected: usize,
    part: Part,
    /// Lines read: passed, failed, skipped.
    counts: [usize; 3],
}

fn slot(o: TestOutcome) -> usize {
    match o {
        TestOutcome::Passed => 0,
        TestOutcome::Failed => 1,
        TestOutcome::Skipped => 2,
    }
}

pub(super) fn parse(stdout: &str, stderr: &str) -> Census {
    let binaries: Vec<String> = stderr.lines().filter_map(binary_of).collect();
    let mut census = Census::new(CensusRunner::Cargo);
    let mut blocks = 0;
    let mut block: Option<Block> = None;
    for line in stdout.lines() {
        let line = line.trim_end();
        if let Some(expected) = running(line) {
            if let Some(open) = block.take() {
                unfinished(&mut census, &open);
            }
            block = Some(Block {
                index: blocks,
                expected,
                part: Part::Results,
                counts: [0; 3],
            });
            blocks += 1;
            continue;
        }
        let Some(b) = block.as_mut() else {
            continue;
        };
        if line == "failures:" || line == "successes:" {
            b.part = Part::Trailer;
            continue;
        }
        if let Some(summary) = line.strip_prefix("test result: ") {
            if let Some(b) = block.take() {
                check_summary(&mut census, &b, summary);
            }
            continue;
        }
        if b.part != Part::Results {
            continue;
        }
        let Some((name, outcome)) = result_line(line) else {
            continue;
        };
        // Without the `Running` lines (`cargo -q`) the name alone.
        let id = match binaries.get(b.index) {
            Some(bin) => format!("{bin}::{name}"),
            None => name.to_string(),
        };
        b.counts[slot(outcome)] += 1;
        census.record(id, outcome);
    }
    if let Some(open) = block {
        unfinished(&mut census, &open);
    }
    if !binaries.is_empty() && blocks > binaries.len() {
        census.doubts.push(format!(
            "{blocks} blocks of results for the {} test binaries cargo ran",
            binaries.len()
        ));
    }
    census
}

/// `running 3 tests` -> 3.
fn running(line: &str) -> Option<usize> {
    let n = line.strip_prefix("running ")?;
    let n = n
        .strip_suffix(" tests")
        .or_else(|| n.strip_suffix(" test"))?;
    n.parse().ok()
}

/// `test NAME ... ok` -> (NAME, Passed); a doc test's line number is left
/// out (it moves with every edit above it).
fn result_line(line: &str) -> Option<(&str, TestOutcome)> {
    let rest = line.strip_prefix("test ")?;
    let (name, outcome) = if let Some(n) = rest.strip_suffix(" ... ok") {
        (n, TestOutcome::Passed)
    } else if let Some(n) = rest.strip_suffix(" ... FAILED") {
        (n, TestOutcome::Failed)
    } else if let Some((n, _)) = rest.split_once(" ... ignored") {
        (n, TestOutcome::Skipped)
    } else {
        return None;
    };
    let name = match name.rsplit_once(" (line ") {
        Some((n, _)) => n,
        None => name,
    };
    Some((name, outcome))
}

/// A block that ended without its `test result:` line (the binary
/// crashed, or the output was cut): its lines must not be more than it
/// announced.
fn unfinished(census: &mut Census, b: &Block) {
    let read: usize = b.counts.iter().sum();
    if read > b.expected {
        census.doubts.push(format!(
            "block {} announced {} tests and reported {read}",
            b.index + 1,
            b.expected
        ));
    }
}

/// Checks a block's lines against its `test result:` line (`ok. 1 passed;
/// 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.12s`).
fn check_summary(census: &mut Census, b: &Block, summary: &str) {
    let count = |word: &str| -> usize {
        summary
            .split(';')
            .filter_map(|part| {
                let mut words = part.split_whitespace().rev();
                let w = words.next()?;
                let n = words.next()?;
                (w == word).then(|| n.parse::<usize>().ok()).flatten()
            })
            .sum()
    };
    let harness = [count("passed"), count("failed"), count("ignored")];
    let [passed, failed, ignored] = harness;
    // Lines that match the harness's counts, which match the tests it
    // announced, are never more than it announced.
    let announced = passed + failed + ignored + count("measured");
    if b.counts != harness || announced != b.expected {
        census.doubts.push(format!(
            "block {} reported {} passed, {} failed, {} ignored where the harness counted \
             {passed} passed, {failed} failed, {ignored} ignored of {} tests",
            b.index + 1,
            b.counts[0],
            b.counts[1],
            b.counts[2],
            b.expected
        ));
    }
}

/// `Running unittests src/lib.rs (target/debug/deps/calc-c66)` ->
/// `src/lib.rs[calc]`; `Doc-tests calc` -> `doc[calc]`.
fn binary_of(line: &str) -> Option<String> {
    let line = line.trim();
    if let Some(krate) = line.strip_prefix("Doc-tests ") {
        return Some(format!("doc[{}]", krate.trim()));
    }
    let rest = line.strip_prefix("Running ")?;
    let rest = rest.strip_prefix("unittests ").unwrap_or(rest);
    let (src, path) = rest.split_once(" (")?;
    let file = path.trim_end_matches(')').rsplit('/').next()?;
    let bin = match file.rsplit_once('-') {
        Some((b, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => b,
        _ => file,
    };
    Some(format!("{src}[{bin}]"))
}
