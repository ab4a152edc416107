//! `cascade verify [--json] [--range A..B] [--story ID] [--prove-tests]`:
//! the local stub, skipped-test and tampering detection an attempt runs, for
//! a person: on the working tree against HEAD (untracked files included),
//! or on a range of commits. The rules are those of the base (`A`, or HEAD):
//! its committed `.cascade/verify.json`, else the main worktree's untracked
//! one, as an attempt reads them. With `--story ID` the change is judged as
//! that story's attempt would be (its `verify_allow`); `--prove-tests` also
//! runs the change's new or changed tests on the base. Exit 0 when clean, 1
//! with findings, 2 for bad input (a bad range or revision, an unknown
//! story, a `.cascade/verify.json` that cannot be used).

use cascade_process::CancelToken;
use cascade_verify::{Finding, Intent};
use clap::Args;
use serde::Serialize;

use super::{CliResult, Failure, Global, EXIT_FAILED, EXIT_OK};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Check the commits A..B (`A..` means A..HEAD) instead of the working tree
    #[arg(long, value_name = "A..B")]
    pub range: Option<String>,
    /// Judge the change as this story's attempt would be (its verify_allow)
    #[arg(long, value_name = "ID")]
    pub story: Option<String>,
    /// Also run the change's new or changed tests on the base (A, or HEAD)
    /// with only the test changes applied: a test that passes there is a
    /// finding (unproven-test)
    #[arg(long)]
    pub prove_tests: bool,
    /// The PRD holding --story
    #[arg(
        long,
        value_name = "PATH",
        default_value = "prd.json",
        requires = "story"
    )]
    pub prd: std::path::PathBuf,
}

#[derive(Serialize)]
struct Report<'a> {
    passed: bool,
    /// `A..B`, or `HEAD..working-tree`.
    range: String,
    files: usize,
    added_lines: usize,
    findings: &'a [Finding],
    /// Findings the story's `verify_allow` lets go (with `--story`).
    #[serde(skip_serializing_if = "<[Finding]>::is_empty")]
    allowed: &'a [Finding],
    /// With `--prove-tests`: the new or changed tests run on the base.
    #[serde(skip_serializing_if = "Option::is_none")]
    proved_tests: Option<usize>,
    /// With `--prove-tests`: what could not be proven, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
}

/// Splits `A..B` (`A..` = `A..HEAD`); a three-dot range or an empty side is bad input.
fn parse_range(range: &str) -> Result<(String, String), Failure> {
    let bad = || {
        Failure::usage(anyhow::anyhow!(
            "--range '{range}' is not a range: write it as A..B (two revisions, e.g. main..HEAD), or A.. for A..HEAD"
        ))
    };
    if range.contains("...") {
        return Err(bad());
    }
    let (a, b) = range.split_once("..").ok_or_else(bad)?;
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        return Err(bad());
    }
    Ok((
        a.to_string(),
        if b.is_empty() {
            "HEAD".into()
        } else {
            b.to_string()
        },
    ))
}

pub fn run(_g: &Global, a: VerifyArgs) -> CliResult {
    let cwd = std::env::current_dir().map_err(Failure::failed)?;
    let paths = cascade_git::RepoPaths::discover(&cwd).map_err(Failure::usage)?;
    let (from, to, shown) = match &a.range {
        Some(r) => {
            let (from, to) = parse_range(r)?;
            let shown = format!("{from}..{to}");
            (from, Some(to), shown)
        }
        None => ("HEAD".to_string(), None, "HEAD..working-tree".to_string()),
    };
    let files = cascade_git::diff::diff_lines(&cwd, &from, to.as_deref()).map_err(|e| {
        Failure::usage(anyhow::anyhow!(
            "cannot read the change {shown}: {e} (check the revisions; a repository needs a first commit)"
        ))
    })?;
    // The rules of the base, as an attempt started there reads them.
    let mut rules = cascade_engine::judging::Judging::new(&paths, &cwd, None)
        .and_then(|j| j.rules_at(&from))
        .map_err(Failure::usage)?;
    // Asked for by a person: `"enabled": false` only turns off the attempts' step.
    rules.enabled = true;
    let intent = match &a.story {
        None => Intent::default(),
        Some(id) => {
            let prd = cascade_plan::load_prd(&a.prd).map_err(Failure::usage)?;
            let story = prd.story(id).ok_or_else(|| {
                Failure::usage(anyhow::anyhow!(
                    "unknown story '{id}' in '{}' (see `cascade batches` for the ids)",
                    a.prd.display()
                ))
            })?;
            cascade_engine::checks::intent_of(story)
        }
    };
    let mut verdict = cascade_verify::check(&files, &rules, &intent);
    let mut proved = None;
    let mut notes = Vec::new();
    if a.prove_tests {
        let proof = prove(&paths, &from, &files, &rules)?;
        proved = Some(proof.ran);
        notes = proof.notes;
        for f in proof.findings {
            if intent.allows(&rules, &f) {
                verdict.allowed.push(f);
            } else {
                verdict.findings.push(f);
            }
        }
    }
    let findings = &verdict.findings;
    let added: usize = files.iter().map(|f| f.added.len()).sum();
    if a.json {
        let report = Report {
            passed: findings.is_empty(),
            range: shown,
            files: files.len(),
            added_lines: added,
            findings,
            allowed: &verdict.allowed,
            proved_tests: proved,
            notes,
        };
        let text = serde_json::to_string_pretty(&report).map_err(Failure::failed)?;
        outln!("{text}");
    } else {
        for f in findings {
            outln!("{f}");
        }
        for f in &verdict.allowed {
            outln!("allowed by verify_allow: {f}");
        }
        for n in &notes {
            outln!("note: {n}");
        }
        if let Some(n) = proved {
            outln!(
                "verify: {n} new or changed test{} run on {from}",
                if n == 1 { "" } else { "s" }
            );
        }
        if findings.is_empty() {
            outln!(
                "verify: clean ({} file{}, {added} added line{} checked, {shown})",
                files.len(),
                if files.len() == 1 { "" } else { "s" },
                if added == 1 { "" } else { "s" }
            );
        } else {
            outln!(
                "verify: {} finding{} in {shown}; fix them, or allow a rule for a story with \"verify_allow\": [\"rule-id\"] (a protected file with its path) in prd.json",
                findings.len(),
                if findings.len() == 1 { "" } else { "s" }
            );
        }
    }
    Ok(if findings.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}

/// Runs the change's new or changed tests on `base` (Ctrl-C stops them).
fn prove(
    paths: &cascade_git::RepoPaths,
    base: &str,
    files: &[cascade_git::diff::FileDiff],
    rules: &cascade_verify::RuleSet,
) -> Result<cascade_verify::prove::Proof, Failure> {
    let rt = super::runtime()?;
    let cancel = CancelToken::new();
    let mut opts = cascade_verify::prove::ProveOptions::new(&paths.workdir);
    // The project's own build directory, when it has one.
    let target = paths.workdir.join("target");
    if target.is_dir() {
        opts.cargo_target_dir = Some(target);
    }
    rt.block_on(async {
        let c = cancel.clone();
        let watcher = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                c.cancel();
            }
        });
        let proof =
            cascade_verify::prove::prove(&paths.workdir, base, files, rules, &opts, &cancel).await;
        watcher.abort();
        proof
    })
    .map_err(Failure::failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(
            parse_range("main..HEAD").unwrap(),
            ("main".into(), "HEAD".into())
        );
        assert_eq!(parse_range("v1..").unwrap(), ("v1".into(), "HEAD".into()));
        for bad in ["main", "..HEAD", "a...b", ""] {
            assert_eq!(parse_range(bad).unwrap_err().code, 2, "{bad}");
        }
    }
}
