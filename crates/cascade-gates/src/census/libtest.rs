//! libtest's pretty output (`cargo test`): blocks that start with
//! `running N tests` on stdout, one `test NAME ... ok|ignored|FAILED` line
//! per test, and on stderr one `Running SRC (PATH/deps/BIN-HASH)` or
//! `Doc-tests CRATE` line per block, in the same order: together they say
//! which binary a test belongs to (two crates may both have `tests::adds`).

use super::{Census, CensusRunner, TestOutcome};

pub(super) fn parse(stdout: &str, stderr: &str) -> Census {
    let binaries: Vec<String> = stderr.lines().filter_map(binary_of).collect();
    let mut census = Census::new(CensusRunner::Cargo);
    let mut block: Option<usize> = None;
    for line in stdout.lines() {
        let line = line.trim_end();
        if line.starts_with("running ") && (line.ends_with(" tests") || line.ends_with(" test")) {
            block = Some(block.map_or(0, |b| b + 1));
            continue;
        }
        let Some(rest) = line.strip_prefix("test ") else {
            continue;
        };
        let (name, outcome) = if let Some(n) = rest.strip_suffix(" ... ok") {
            (n, TestOutcome::Passed)
        } else if let Some(n) = rest.strip_suffix(" ... FAILED") {
            (n, TestOutcome::Failed)
        } else if let Some((n, _)) = rest.split_once(" ... ignored") {
            (n, TestOutcome::Skipped)
        } else {
            continue;
        };
        // A doc test's line number moves with every edit above it.
        let name = match name.rsplit_once(" (line ") {
            Some((n, _)) => n,
            None => name,
        };
        // Without the `Running` lines (`cargo -q`) the name alone.
        let id = match block.and_then(|b| binaries.get(b)) {
            Some(bin) => format!("{bin}::{name}"),
            None => name.to_string(),
        };
        census.tests.insert(id, outcome);
    }
    census
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
