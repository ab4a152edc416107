//! Incremental gates: the files that changed since the story's base commit
//! (staged, unstaged and untracked), restricted to the gate's folder and
//! extensions, substituted for the `.` argument.

use std::path::Path;

use cascade_git::GitError;

use crate::config::Gate;

/// Changed files relevant to `gate`, relative to the gate's folder.
/// `gate_dir_in_repo` is the gate's folder relative to the repository root
/// (`.` for the root).
pub fn relevant_changes(
    repo_root: &Path,
    base: &str,
    gate: &Gate,
    gate_dir_in_repo: &str,
) -> Result<Vec<String>, GitError> {
    let changed = cascade_git::status::changed_files(repo_root, base)?;
    Ok(filter(changed, gate_dir_in_repo, &gate.extensions))
}

/// Keeps files under `dir` (made relative to it) whose extension is listed
/// (all files when `extensions` is empty).
pub fn filter(changed: Vec<String>, dir: &str, extensions: &[String]) -> Vec<String> {
    changed
        .into_iter()
        .filter_map(|p| {
            if dir == "." {
                Some(p)
            } else {
                p.strip_prefix(dir)
                    .and_then(|r| r.strip_prefix('/'))
                    .map(str::to_string)
            }
        })
        .filter(|p| {
            extensions.is_empty()
                || Path::new(p)
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| extensions.iter().any(|x| x.trim_start_matches('.') == e))
        })
        .collect()
}

/// The gate's args with every `.` replaced by the files; `None` when there
/// is no `.` to replace (the gate then runs on everything).
pub fn substitute(args: &[String], files: &[String]) -> Option<Vec<String>> {
    if !args.iter().any(|a| a == ".") {
        return None;
    }
    let mut out = Vec::with_capacity(args.len() + files.len());
    for a in args {
        if a == "." {
            out.extend(files.iter().cloned());
        } else {
            out.push(a.clone());
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_by_folder_and_extension_and_substitutes() {
        let changed = vec![
            "README.md".to_string(),
            "py/a.py".to_string(),
            "py/sub/b.pyi".to_string(),
            "web/c.ts".to_string(),
        ];
        let exts = vec!["py".to_string(), "pyi".to_string()];
        let files = filter(changed.clone(), "py", &exts);
        assert_eq!(files, vec!["a.py", "sub/b.pyi"]);
        assert_eq!(filter(changed.clone(), ".", &[]).len(), 4);
        assert!(filter(changed, "web", &exts).is_empty());
        let args = vec!["check".to_string(), ".".to_string()];
        assert_eq!(
            substitute(&args, &files).unwrap(),
            vec!["check", "a.py", "sub/b.pyi"]
        );
        assert!(substitute(&["-q".to_string()], &files).is_none());
    }
}
