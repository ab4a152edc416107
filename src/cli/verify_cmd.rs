//! `cascade verify [--json] [--range A..B]`: the local stub, skipped-test and
//! gate-tampering detection an attempt runs, for a person: on the working
//! tree against HEAD (untracked files included), or on a range of commits.
//! With `--story ID` the change is judged as that story's attempt would be
//! (its `verify_allow` and `files`). Exit 0 when clean, 1 with findings, 2
//! for bad input (a bad range or revision, an unknown story, a
//! `.cascade/verify.json` that cannot be used).

use cascade_verify::{Finding, Intent, RuleSet};
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
    /// Judge the change as this story's attempt would be (its verify_allow and files)
    #[arg(long, value_name = "ID")]
    pub story: Option<String>,
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
    let mut rules =
        RuleSet::load_file(&paths.cascade_dir().join("verify.json")).map_err(Failure::usage)?;
    // Asked for by a person: `"enabled": false` only turns off the attempts' step.
    rules.enabled = true;
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
    let findings = cascade_verify::scan(&files, &rules, &intent);
    let added: usize = files.iter().map(|f| f.added.len()).sum();
    if a.json {
        let report = Report {
            passed: findings.is_empty(),
            range: shown,
            files: files.len(),
            added_lines: added,
            findings: &findings,
        };
        let text = serde_json::to_string_pretty(&report).map_err(Failure::failed)?;
        outln!("{text}");
    } else {
        for f in &findings {
            outln!("{f}");
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
                "verify: {} finding{} in {shown}; fix them, or allow a rule for a story with \"verify_allow\": [\"rule-id\"] in prd.json",
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
