//! The corpus's cases, read from `tests/corpus/<area>.txt`: one reader for
//! the two tests that judge them (`tests/corpus.rs` through `cascade
//! verify`'s library call, and the workspace's `tests/e2e/corpus.rs`
//! through a default `cascade approve`), so a case means the same in both.
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
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;

/// The areas, one file each.
pub const AREAS: [&str; 5] = ["python", "rust", "typescript", "go", "config"];

#[derive(Debug, Default, Clone)]
pub struct File {
    pub old_path: String,
    pub new_path: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub area: &'static str,
    pub name: String,
    /// `None`: legitimate.
    pub expect: Option<BTreeSet<String>>,
    pub files: Vec<File>,
}

impl Case {
    /// The files of the base: (path, text).
    pub fn base(&self) -> impl Iterator<Item = (&str, &str)> {
        self.files
            .iter()
            .filter_map(|f| Some((f.old_path.as_str(), f.old.as_deref()?)))
    }

    /// The paths the change removes (deleted, or the old side of a rename).
    pub fn removed(&self) -> impl Iterator<Item = &str> {
        self.files
            .iter()
            .filter(|f| f.old.is_some() && (f.new.is_none() || f.old_path != f.new_path))
            .map(|f| f.old_path.as_str())
    }

    /// The files the change writes: (path, new text).
    pub fn written(&self) -> impl Iterator<Item = (&str, &str)> {
        self.files
            .iter()
            .filter_map(|f| Some((f.new_path.as_str(), f.new.as_deref()?)))
    }

    /// The case's `.cascade/verify.json` on the base, if it has one.
    pub fn base_verify_json(&self) -> Option<&str> {
        self.files
            .iter()
            .find(|f| f.old_path == ".cascade/verify.json")
            .and_then(|f| f.old.as_deref())
    }
}

/// Which text a line belongs to while reading a case.
enum Into {
    Nothing,
    Old,
    New,
}

/// Every case of every area, from the directory of the area files.
pub fn all(dir: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    for area in AREAS {
        let path = dir.join(format!("{area}.txt"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        cases.extend(parse(area, &text));
    }
    cases
}

/// The cases of one area's text.
pub fn parse(area: &'static str, text: &str) -> Vec<Case> {
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
