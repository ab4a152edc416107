//! Edits to what judges a story: protected files (cascade's configuration,
//! CI, test-runner and lint configuration), where any change is a
//! `gate-config-edit`, and the test-runner settings inside shared files
//! (pytest's section of pyproject.toml, `collect_ignore` in conftest.py, the
//! `test` script of package.json, `harness = false` in Cargo.toml, a
//! Makefile's test target, a Go test file's build constraint), where a
//! change is a `test-config-edit`. Every message says what changed and how
//! a story allows it.

use cascade_git::diff::{FileDiff, FileStatus};
use serde_json::Value;

use crate::rules::{RuleSet, Watch};
use crate::scan::{finding, Finding, Prepared, GATE_CONFIG_EDIT, TEST_CONFIG_EDIT};

/// Lines of a change quoted in a message.
const QUOTED_LINES: usize = 2;
/// Characters of a quoted line.
const QUOTED_CHARS: usize = 60;

/// A change to a protected file: one finding, at its first changed line.
pub(crate) fn protected_file(p: &Prepared, rules: &RuleSet, out: &mut Vec<Finding>) {
    let d = p.diff;
    let hit = |path: &str| rules.protected.iter().find(|g| g.set.is_match(path));
    let Some(group) = hit(&d.path).or_else(|| d.old_path.as_deref().and_then(hit)) else {
        return;
    };
    let change = match d.status {
        FileStatus::Added => "added".to_string(),
        FileStatus::Deleted => "deleted".to_string(),
        FileStatus::Renamed => format!(
            "renamed from '{}'{}",
            d.old_path.as_deref().unwrap_or("?"),
            lines_changed(d, &d.removed, &d.added)
                .map(|l| format!(" and changed: {l}"))
                .unwrap_or_default()
        ),
        FileStatus::Modified => format!(
            "changed: {}",
            lines_changed(d, &d.removed, &d.added).unwrap_or_else(|| "its mode".into())
        ),
    };
    let line = d.added.first().or(d.removed.first()).copied().unwrap_or(1);
    out.push(finding(
        GATE_CONFIG_EDIT,
        &d.path,
        line,
        &format!("{} {change}{}", group.what, allow_hint(&d.path)),
        raw_added(p),
    ));
}

/// Changes to test-runner settings inside shared files: one finding per
/// setting and file. A new file has no settings a base ran with, except
/// where the config says it acts on the base's tests (`new_files`: a new
/// `conftest.py`).
pub(crate) fn runner_settings(p: &Prepared, rules: &RuleSet, out: &mut Vec<Finding>) {
    let d = p.diff;
    let added = d.status == FileStatus::Added;
    let old_path = d.old_path.as_deref().unwrap_or(&d.path);
    for config in &rules.configs {
        if added && !config.new_files {
            continue;
        }
        if !config.files.is_match(&d.path) && !config.files.is_match(old_path) {
            continue;
        }
        let old = d.old_text.as_deref().unwrap_or("");
        let new = d.new_text.as_deref().unwrap_or("");
        let mut change: Option<(u32, String)> = None;
        for watch in &config.watch {
            if change.is_some() {
                break;
            }
            change = match watch {
                Watch::Section { start, end } => {
                    let (old_in, new_in) = (sections(old, start, end), sections(new, start, end));
                    let added: Vec<u32> = within(&d.added, &new_in);
                    let removed: Vec<u32> = within(&d.removed, &old_in);
                    first_line(&added, &removed).zip(lines_changed(d, &removed, &added))
                }
                Watch::Lines(re) => {
                    let matching = |nums: &[u32], text: &str| -> Vec<u32> {
                        let lines: Vec<&str> = text.lines().collect();
                        nums.iter()
                            .copied()
                            .filter(|&n| lines.get(n as usize - 1).is_some_and(|l| re.is_match(l)))
                            .collect()
                    };
                    let added = matching(&d.added, new);
                    let removed = matching(&d.removed, old);
                    first_line(&added, &removed).zip(lines_changed(d, &removed, &added))
                }
                Watch::JsonKeys(keys) => json_change(old, new, keys),
            };
        }
        if let Some((line, what_changed)) = change {
            let raw = new.lines().nth(line as usize - 1).unwrap_or("");
            out.push(finding(
                TEST_CONFIG_EDIT,
                &d.path,
                line,
                &format!(
                    "{} changed: {what_changed}{}",
                    config.what,
                    allow_hint(&d.path)
                ),
                raw,
            ));
        }
    }
}

fn allow_hint(path: &str) -> String {
    format!("; a story may change it only with \"verify_allow\": [\"{path}\"]")
}

/// The first added line of the file, as the finding's text.
fn raw_added<'a>(p: &Prepared<'a>) -> &'a str {
    p.diff
        .added
        .first()
        .and_then(|&n| p.raw.get(n as usize - 1))
        .copied()
        .unwrap_or("")
}

/// Per line of `text`: whether it is inside a section (from a line matching
/// `start`, header included, to the line before one matching `end`).
fn sections(text: &str, start: &regex::Regex, end: &regex::Regex) -> Vec<bool> {
    let mut inside = false;
    text.lines()
        .map(|l| {
            if start.is_match(l) {
                inside = true;
            } else if inside && end.is_match(l) {
                inside = false;
            }
            inside
        })
        .collect()
}

/// The 1-based line numbers of `nums` inside a section.
fn within(nums: &[u32], inside: &[bool]) -> Vec<u32> {
    nums.iter()
        .copied()
        .filter(|&n| inside.get(n as usize - 1).copied().unwrap_or(false))
        .collect()
}

/// Where to report a change: its first added line, else 1 (a removal has
/// no line in the new text).
fn first_line(added: &[u32], removed: &[u32]) -> Option<u32> {
    match (added.first(), removed.is_empty()) {
        (Some(&n), _) => Some(n),
        (None, false) => Some(1),
        (None, true) => None,
    }
}

/// "- `old line` + `new line` (and 3 more lines)", from the removed lines
/// of the old text and the added lines of the new one; `None` when neither.
fn lines_changed(d: &FileDiff, removed: &[u32], added: &[u32]) -> Option<String> {
    let pick = |nums: &[u32], text: Option<&str>, sign: char| -> Vec<String> {
        let lines: Vec<&str> = text.unwrap_or("").lines().collect();
        nums.iter()
            .filter_map(|&n| lines.get(n as usize - 1))
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .take(QUOTED_LINES)
            .map(|l| format!("{sign} `{}`", shorten(l)))
            .collect()
    };
    let mut parts = pick(removed, d.old_text.as_deref(), '-');
    parts.extend(pick(added, d.new_text.as_deref(), '+'));
    // One line changed in place (a one-line JSON file): quote both from a
    // little before where they differ, so the message shows the difference.
    if let ([r], [a]) = (removed, added) {
        let line = |text: Option<&str>, n: u32| {
            text.and_then(|t| t.lines().nth(n as usize - 1))
                .unwrap_or("")
                .trim()
                .to_string()
        };
        let (old, new) = (
            line(d.old_text.as_deref(), *r),
            line(d.new_text.as_deref(), *a),
        );
        let same = old
            .chars()
            .zip(new.chars())
            .take_while(|(x, y)| x == y)
            .count();
        let from = same.saturating_sub(QUOTED_CHARS / 3);
        if from > 0 {
            let cut =
                |s: &str| format!("...{}", shorten(&s.chars().skip(from).collect::<String>()));
            parts = vec![format!("- `{}`", cut(&old)), format!("+ `{}`", cut(&new))];
        }
    }
    if parts.is_empty() && removed.is_empty() && added.is_empty() {
        return None;
    }
    let more = (removed.len() + added.len()).saturating_sub(parts.len());
    let mut s = if parts.is_empty() {
        "blank lines".to_string()
    } else {
        parts.join(" ")
    };
    if more > 0 {
        s.push_str(&format!(
            " (and {more} more line{})",
            if more == 1 { "" } else { "s" }
        ));
    }
    Some(s)
}

fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(QUOTED_CHARS).collect();
    if s.chars().count() > QUOTED_CHARS {
        out.push_str("...");
    }
    out
}

/// The first of `keys` (JSON pointers) whose value differs between the old
/// and the new text, with the new text's line that names it. Texts that do
/// not parse are left to the gates.
fn json_change(old: &str, new: &str, keys: &[String]) -> Option<(u32, String)> {
    let old: Value = serde_json::from_str(old).ok()?;
    let new_v: Value = serde_json::from_str(new).unwrap_or(Value::Null);
    let show = |v: Option<&Value>| match v {
        None => "(none)".to_string(),
        Some(v) => shorten(&v.to_string()),
    };
    for key in keys {
        let (a, b) = (old.pointer(key), new_v.pointer(key));
        if a == b {
            continue;
        }
        let name = key.rsplit('/').next().unwrap_or(key);
        let quoted = format!("\"{name}\"");
        let line = new
            .lines()
            .position(|l| l.contains(&quoted))
            .map_or(1, |i| i as u32 + 1);
        let dotted = key.trim_start_matches('/').replace('/', ".");
        return Some((line, format!("{dotted}: {} -> {}", show(a), show(b))));
    }
    None
}
