//! Settings an attempt leaves in git's own files that make git run a
//! program (`git-config-changed`): a hook directory, a filter, an fsmonitor,
//! a pager, an alias and the like ([`EXEC_KEYS`]) added to or changed in the
//! repository's `config` or the worktree's `config.worktree`, and hooks
//! added to, changed in or removed from the repository's `hooks` directory.
//!
//! cascade's own commits run no hook, but the person's next `git commit` in
//! their checkout would run what an agent put there, long after the run.
//! So [`GitState::record`] takes what those files hold before the attempt
//! and [`GitState::restore`] puts it back afterwards, reporting what it
//! undid as findings. Only the settings that run programs are judged and put
//! back, each one by itself: the rest of the file (what git or cascade wrote
//! meanwhile, for this or another story) is left as it is.
//!
//! The repository's `config` and `hooks` are shared by every worktree: with
//! stories running in parallel and unconfined, the change is charged to the
//! attempt that sees it first. Confined, an agent cannot write them at all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::VerifyError;
use crate::scan::{Finding, GIT_CONFIG_CHANGED};

/// The settings that make git run a program, as `section.key` or
/// `section.*.key` (any subsection), lowercase; `*` as the key: every key
/// of the section.
pub const EXEC_KEYS: &[&str] = &[
    "core.hookspath",
    "core.fsmonitor",
    "core.sshcommand",
    "core.editor",
    "core.pager",
    "core.askpass",
    "core.gitproxy",
    "core.alternaterefscommand",
    "sequence.editor",
    "diff.external",
    "diff.*.command",
    "diff.*.textconv",
    "merge.*.driver",
    "filter.*.clean",
    "filter.*.smudge",
    "filter.*.process",
    "gpg.program",
    "gpg.*.program",
    "credential.helper",
    "credential.*.helper",
    "alias.*",
    "pager.*",
    "include.path",
    "includeif.*.path",
    "hook.*.command",
    "interactive.difffilter",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "uploadpack.packobjectshook",
    "difftool.*.cmd",
    "mergetool.*.cmd",
    "man.*.cmd",
    "browser.*.cmd",
    "protocol.allow",
    "protocol.*.allow",
];

/// Whether the configuration variable `name` (as git2 lists it:
/// `section.subsection.key`, subsection as written) runs a program.
pub fn runs_a_program(name: &str) -> bool {
    let Some((section, rest)) = name.split_once('.') else {
        return false;
    };
    let (sub, key) = match rest.rsplit_once('.') {
        Some((sub, key)) => (Some(sub), key),
        None => (None, rest),
    };
    let (section, key) = (section.to_ascii_lowercase(), key.to_ascii_lowercase());
    EXEC_KEYS.iter().any(|k| {
        let parts: Vec<&str> = k.split('.').collect();
        match (parts.as_slice(), sub) {
            ([s, "*"], None) => *s == section,
            ([s, k], None) => *s == section && *k == key,
            ([s, "*", k], Some(_)) => *s == section && *k == key,
            _ => false,
        }
    })
}

/// One configuration file as it was: its bytes (none: it did not exist)
/// and the values of its program-running settings, in file order.
#[derive(Debug, Clone)]
struct ConfigFile {
    path: PathBuf,
    bytes: Option<Vec<u8>>,
    exec: BTreeMap<String, Vec<String>>,
}

/// What git's own files of a worktree held before an attempt.
#[derive(Debug, Clone)]
pub struct GitState {
    /// Shown in findings instead of the absolute paths (the directory
    /// holding the repository's `.git`).
    shown_from: PathBuf,
    configs: Vec<ConfigFile>,
    hooks_dir: PathBuf,
    hooks: BTreeMap<String, Vec<u8>>,
}

fn git_error(path: &Path) -> impl FnOnce(git2::Error) -> VerifyError + '_ {
    move |source| VerifyError::GitConfig {
        path: path.to_path_buf(),
        source,
    }
}

fn read_error(path: &Path) -> impl FnOnce(std::io::Error) -> VerifyError + '_ {
    move |source| VerifyError::Read {
        path: path.to_path_buf(),
        source,
    }
}

fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> VerifyError + '_ {
    move |source| VerifyError::Write {
        path: path.to_path_buf(),
        source,
    }
}

impl GitState {
    /// What the repository of `worktree` holds now.
    pub fn record(worktree: &Path) -> Result<GitState, VerifyError> {
        let repo = git2::Repository::open(worktree).map_err(git_error(worktree))?;
        let common = repo.commondir().to_path_buf();
        let mut paths = vec![common.join("config")];
        let own = repo.path().join("config.worktree");
        if repo.path() != common {
            paths.push(own);
        }
        let configs = paths
            .into_iter()
            .map(read_config)
            .collect::<Result<_, _>>()?;
        let hooks_dir = common.join("hooks");
        Ok(GitState {
            shown_from: common.parent().unwrap_or(&common).to_path_buf(),
            configs,
            hooks: read_hooks(&hooks_dir)?,
            hooks_dir,
        })
    }

    /// Puts back every program-running setting and hook that changed since
    /// [`GitState::record`]; returns one finding per thing undone.
    pub fn restore(&self) -> Result<Vec<Finding>, VerifyError> {
        let mut found = Vec::new();
        for before in &self.configs {
            let now = read_config(before.path.clone())?;
            let changed = changed_keys(&before.exec, &now.exec);
            if changed.is_empty() {
                continue;
            }
            for name in &changed {
                found.push(self.config_finding(&before.path, name, &now.exec));
            }
            put_back(before, &changed)?;
        }
        found.extend(self.restore_hooks()?);
        Ok(found)
    }

    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.shown_from)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    fn config_finding(
        &self,
        path: &Path,
        name: &str,
        now: &BTreeMap<String, Vec<String>>,
    ) -> Finding {
        let values = now.get(name).map(|v| v.join(", ")).unwrap_or_default();
        let what = if values.is_empty() { "removed" } else { "set" };
        Finding {
            rule: GIT_CONFIG_CHANGED.to_string(),
            file: self.shown(path),
            line: 1,
            message: format!(
                "`{name}` was {what}: a setting git runs a program from; cascade put it back as it was before the attempt"
            ),
            text: if values.is_empty() {
                String::new()
            } else {
                format!("{name} = {values}")
            },
        }
    }

    /// The hooks directory as it was: added hooks removed, changed or
    /// removed ones written back.
    fn restore_hooks(&self) -> Result<Vec<Finding>, VerifyError> {
        let now = read_hooks(&self.hooks_dir)?;
        let mut found = Vec::new();
        let mut note = |name: &str, what: &str| {
            found.push(Finding {
                rule: GIT_CONFIG_CHANGED.to_string(),
                file: self.shown(&self.hooks_dir.join(name)),
                line: 1,
                message: format!(
                    "the git hook '{name}' was {what} during the attempt; cascade put the hooks back as they were"
                ),
                text: String::new(),
            });
        };
        for (name, bytes) in &now {
            let path = self.hooks_dir.join(name);
            match self.hooks.get(name) {
                None => {
                    note(name, "added");
                    std::fs::remove_file(&path).map_err(write_error(&path))?;
                }
                Some(old) if old != bytes => {
                    note(name, "changed");
                    std::fs::write(&path, old).map_err(write_error(&path))?;
                }
                Some(_) => {}
            }
        }
        for (name, old) in &self.hooks {
            if !now.contains_key(name) {
                note(name, "removed");
                let path = self.hooks_dir.join(name);
                std::fs::write(&path, old).map_err(write_error(&path))?;
                set_executable(&path)?;
            }
        }
        Ok(found)
    }
}

/// The names whose values differ between `before` and `now`.
fn changed_keys(
    before: &BTreeMap<String, Vec<String>>,
    now: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut names: Vec<&String> = before.keys().chain(now.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| before.get(*n) != now.get(*n))
        .cloned()
        .collect()
}

fn read_config(path: PathBuf) -> Result<ConfigFile, VerifyError> {
    let bytes = match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(read_error(&path)(e)),
    };
    let mut exec: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if bytes.is_some() {
        let cfg = git2::Config::open(&path).map_err(git_error(&path))?;
        let entries = cfg.entries(None).map_err(git_error(&path))?;
        entries
            .for_each(|e| {
                if let Some(name) = e.name().filter(|n| runs_a_program(n)) {
                    let value = e.value().unwrap_or_default().to_string();
                    exec.entry(name.to_string()).or_default().push(value);
                }
            })
            .map_err(git_error(&path))?;
    }
    Ok(ConfigFile { path, bytes, exec })
}

/// Sets each of `changed` in the file back to its values in `before`; when
/// that does not give back what `before` had (a setting from an included
/// file, a file git2 cannot edit), writes the file back whole.
fn put_back(before: &ConfigFile, changed: &[String]) -> Result<(), VerifyError> {
    let path = &before.path;
    let edited = (|| -> Result<(), git2::Error> {
        let mut cfg = git2::Config::open(path)?;
        for name in changed {
            // None there (only set by an included file) is fine.
            let _ = cfg.remove_multivar(name, ".*");
            for value in before.exec.get(name).into_iter().flatten() {
                // All values are gone: a regex matching none of them adds one.
                cfg.set_multivar(name, "^$", value)?;
            }
        }
        Ok(())
    })();
    let again = read_config(path.clone());
    let restored = edited.is_ok() && again.is_ok_and(|a| a.exec == before.exec);
    if restored {
        return Ok(());
    }
    match &before.bytes {
        Some(bytes) => std::fs::write(path, bytes).map_err(write_error(path)),
        None => std::fs::remove_file(path).map_err(write_error(path)),
    }
}

/// The hooks of `dir` by name (git's `*.sample` files are not hooks).
fn read_hooks(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>, VerifyError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(read_error(dir)(e)),
    };
    let mut hooks = BTreeMap::new();
    for entry in entries {
        let entry = entry.map_err(read_error(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.ends_with(".sample") || !path.is_file() {
            continue;
        }
        hooks.insert(name, std::fs::read(&path).map_err(read_error(&path))?);
    }
    Ok(hooks)
}

fn set_executable(path: &Path) -> Result<(), VerifyError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .map_err(write_error(path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cascade_test_support::git;

    #[test]
    fn program_running_settings_are_told_from_the_others() {
        for name in [
            "core.hooksPath",
            "filter.Evil.clean",
            "alias.st",
            "includeIf.gitdir:/x/.path",
            "diff.x.textconv",
        ] {
            assert!(runs_a_program(name), "{name}");
        }
        for name in [
            "user.name",
            "core.bare",
            "filter.clean",
            "branch.main.remote",
        ] {
            assert!(!runs_a_program(name), "{name}");
        }
    }

    #[test]
    fn a_hooks_path_and_a_hook_are_found_and_put_back_and_the_rest_stays() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path();
        git(repo, &["init", "-q"]);
        git(repo, &["config", "core.pager", "less"]);
        let state = GitState::record(repo).unwrap();
        assert!(state.restore().unwrap().is_empty(), "nothing changed yet");

        git(repo, &["config", "core.hooksPath", "/tmp/evil"]);
        git(repo, &["config", "core.pager", "evil-pager"]);
        git(repo, &["config", "user.name", "kept"]);
        std::fs::write(repo.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        let found = state.restore().unwrap();
        let rules: Vec<(&str, &str)> = found
            .iter()
            .map(|f| (f.file.as_str(), f.text.as_str()))
            .collect();
        assert_eq!(
            rules,
            [
                (".git/config", "core.hookspath = /tmp/evil"),
                (".git/config", "core.pager = evil-pager"),
                (".git/hooks/pre-commit", ""),
            ]
        );
        assert!(found.iter().all(|f| f.rule == GIT_CONFIG_CHANGED));
        let cfg = git2::Config::open(&repo.join(".git/config")).unwrap();
        assert!(cfg.get_string("core.hookspath").is_err());
        assert_eq!(cfg.get_string("core.pager").unwrap(), "less");
        assert_eq!(cfg.get_string("user.name").unwrap(), "kept");
        assert!(!repo.join(".git/hooks/pre-commit").exists());
        assert!(state.restore().unwrap().is_empty(), "put back");
    }
}
