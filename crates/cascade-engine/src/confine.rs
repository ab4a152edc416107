//! The confinement of a story's processes: the `sandbox` section of
//! `.cascade/config.json` (read from the story's base commit with the other
//! judging files, so a story cannot loosen its own sandbox), the run's
//! `--sandbox` mode, and the [`cascade_process::sandbox::Policy`] every
//! child of an attempt is spawned under (agent, review and conflict agents,
//! gates, `worktree.setup`, test proving, an api agent's RunGates).
//!
//! What an attempt may write: its worktree, a private temp directory (its
//! `TMPDIR`), the usual tool caches under `$HOME` ([`TOOL_CACHES`]), paths
//! the project declares (`sandbox.write`), paths the person running cascade
//! allows ([`WRITE_VAR`]) and, per spawn site, what only that site needs
//! (an agent's own state from agents.json, a gate's report directory and
//! Cargo target). What it may not read: the credentials of
//! [`cascade_process::sandbox::DEFAULT_HIDDEN`], the other worktrees beside
//! its own, and `sandbox.hide`.
//!
//! The run's own hooks (the `--notify` command) belong to no story: they
//! get [`hook_policy`], which writes only their private temp directory and
//! [`WRITE_VAR`]'s paths and reads what a story may.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cascade_process::sandbox::{self, Network, Policy};
use serde::{Deserialize, Serialize};

/// Writable under `$HOME` for every confined process: package and build
/// caches that tools fail without (cargo, go, npm, pip and the XDG cache).
pub const TOOL_CACHES: &[&str] = &[".cache", ".cargo", "go", ".npm"];

/// More writable paths (an OS path list), given by whoever starts cascade:
/// outside the project's reach, like a command-line flag.
pub const WRITE_VAR: &str = "CASCADE_SANDBOX_WRITE";

/// `--sandbox` and `sandbox.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Confined, or the run does not start (exit 2).
    Required,
    /// Confined where the kernel can; otherwise unconfined with one warning.
    #[default]
    BestEffort,
    /// Never confined.
    Off,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Required => "required",
            SandboxMode::BestEffort => "best-effort",
            SandboxMode::Off => "off",
        }
    }
}

/// `sandbox` in `.cascade/config.json`.
///
/// ```json
/// {"sandbox": {"mode": "required", "write": ["~/.m2"], "hide": ["~/.kube"]}}
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct SandboxSettings {
    /// The mode when the run gives no `--sandbox` (default best-effort).
    #[serde(default)]
    pub mode: Option<SandboxMode>,
    /// More writable paths (absolute, or `~/...` under `$HOME`).
    #[serde(default)]
    pub write: Vec<String>,
    /// More unreadable paths (the same forms; a path inside a writable
    /// tree stays readable: Landlock cannot take back what a parent grants).
    #[serde(default)]
    pub hide: Vec<String>,
}

/// The run needs a confinement this machine cannot give.
#[derive(Debug, thiserror::Error)]
#[error("the sandbox is required ({origin}) but {missing}; run on Linux 5.13 or later with Landlock enabled (lsm=landlock), or pass --sandbox best-effort to run unconfined")]
pub struct SandboxUnavailable {
    /// Where `required` came from.
    pub origin: String,
    /// What is missing.
    pub missing: String,
}

/// The mode in effect: the run's flag, else the base's config, else best-effort.
pub fn mode(flag: Option<SandboxMode>, settings: &SandboxSettings) -> SandboxMode {
    flag.or(settings.mode).unwrap_or_default()
}

/// Refuses a run whose mode is `required` on a kernel without Landlock.
pub fn check_available(
    flag: Option<SandboxMode>,
    settings: &SandboxSettings,
) -> Result<(), SandboxUnavailable> {
    if mode(flag, settings) != SandboxMode::Required || sandbox::kernel_abi() > 0 {
        return Ok(());
    }
    let origin = if flag.is_some() {
        "--sandbox required"
    } else {
        "sandbox.mode in .cascade/config.json"
    };
    let missing = if cfg!(target_os = "linux") {
        "this kernel enforces no Landlock (landlock_create_ruleset reports no ABI)"
    } else {
        "Landlock exists only on Linux"
    };
    Err(SandboxUnavailable {
        origin: origin.to_string(),
        missing: missing.to_string(),
    })
}

/// Why an attempt's sandbox could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AttemptSandboxError {
    #[error(transparent)]
    Unavailable(#[from] SandboxUnavailable),
    #[error("cannot create the attempt's temp directory: {0}")]
    TempDir(#[source] std::io::Error),
}

/// The confinement of one attempt: its policy (none when unconfined) and
/// the temp directory the policy names, removed when the attempt is done.
#[derive(Debug, Default)]
pub struct AttemptSandbox {
    pub policy: Option<Arc<Policy>>,
    /// "landlock abi 7" or "none": what events and summaries show.
    pub confinement: String,
    _tmp: Option<tempfile::TempDir>,
}

/// Whether the unconfined warning was given (once per cascade process: a
/// run, a mega run or a fleet worker).
static WARNED: AtomicBool = AtomicBool::new(false);

impl AttemptSandbox {
    /// The sandbox of an attempt in `worktree`. `Ok` with a warning to
    /// show when it runs unconfined in best-effort mode (the first time).
    pub fn new(
        flag: Option<SandboxMode>,
        settings: &SandboxSettings,
        worktree: &Path,
    ) -> Result<(AttemptSandbox, Option<String>), AttemptSandboxError> {
        if sandbox::kernel_abi() == 0 && mode(flag, settings) == SandboxMode::BestEffort {
            let first = !WARNED.swap(true, Ordering::Relaxed);
            let warning = first.then(|| {
                "the kernel enforces no Landlock: agents and gates run unconfined (best-effort sandbox; --sandbox required refuses to run)".to_string()
            });
            return Ok((AttemptSandbox::unconfined(), warning));
        }
        let made = Self::confined(flag, settings, |tmp| {
            attempt_policy(settings, worktree, tmp)
        })?;
        Ok((made, None))
    }

    /// The sandbox of the run's own hooks (the `--notify` command), by
    /// the same mode as its attempts: [`hook_policy`]. Unconfined without
    /// a word where the kernel has no Landlock (the run's attempts say it).
    pub fn for_hooks(
        flag: Option<SandboxMode>,
        settings: &SandboxSettings,
    ) -> Result<AttemptSandbox, AttemptSandboxError> {
        Self::confined(flag, settings, |tmp| hook_policy(settings, tmp))
    }

    /// A sandbox whose policy `build` makes around a new temp directory;
    /// unconfined when the mode is off or best-effort without Landlock.
    fn confined(
        flag: Option<SandboxMode>,
        settings: &SandboxSettings,
        build: impl FnOnce(&Path) -> Policy,
    ) -> Result<AttemptSandbox, AttemptSandboxError> {
        let abi = sandbox::kernel_abi();
        match mode(flag, settings) {
            SandboxMode::Off => return Ok(AttemptSandbox::unconfined()),
            SandboxMode::Required if abi == 0 => check_available(flag, settings)?,
            SandboxMode::BestEffort if abi == 0 => return Ok(AttemptSandbox::unconfined()),
            _ => {}
        }
        let tmp = tempfile::Builder::new()
            .prefix("cascade-sandbox-")
            .tempdir()
            .map_err(AttemptSandboxError::TempDir)?;
        let policy = build(tmp.path());
        Ok(AttemptSandbox {
            policy: Some(Arc::new(policy)),
            confinement: sandbox::describe(),
            _tmp: Some(tmp),
        })
    }

    fn unconfined() -> AttemptSandbox {
        AttemptSandbox {
            policy: None,
            confinement: "none".to_string(),
            _tmp: None,
        }
    }

    /// The policy with `extra` writable too (what one spawn site needs).
    pub fn widened<P: Into<PathBuf>>(
        policy: &Option<Arc<Policy>>,
        extra: impl IntoIterator<Item = P>,
    ) -> Option<Arc<Policy>> {
        policy.as_ref().map(|p| Arc::new(p.with_write(extra)))
    }
}

/// The policy of an attempt in `worktree` with its temp directory `tmp`
/// (also what `sandbox check` shows where nothing enforces it).
pub fn attempt_policy(settings: &SandboxSettings, worktree: &Path, tmp: &Path) -> Policy {
    let home = sandbox::home();
    let mut write = vec![worktree.to_path_buf()];
    if let Some(home) = &home {
        write.extend(TOOL_CACHES.iter().map(|c| home.join(c)));
    }
    write.extend(
        settings
            .write
            .iter()
            .filter_map(|p| sandbox::expand_home(p, home.as_deref())),
    );
    write.extend(allowed_by_the_runner());
    let mut hide = hidden(settings, home.as_deref());
    hide.extend(other_worktrees(worktree));
    Policy {
        write,
        hide,
        tmp: Some(tmp.to_path_buf()),
        network: Network::Host,
        connect_ports: None,
    }
}

/// The policy of the run's own hooks (the `--notify` command), with the
/// temp directory `tmp`: they write nothing of the project (not the
/// checkout, not a worktree, not `$HOME`, not even the tool caches), only
/// `tmp` and [`WRITE_VAR`]'s paths; they read what a story may (the
/// default hidden paths and `sandbox.hide` are not readable) and keep the
/// host's network (a webhook, on any port).
pub fn hook_policy(settings: &SandboxSettings, tmp: &Path) -> Policy {
    let home = sandbox::home();
    Policy {
        write: allowed_by_the_runner(),
        hide: hidden(settings, home.as_deref()),
        tmp: Some(tmp.to_path_buf()),
        network: Network::Host,
        connect_ports: None,
    }
}

/// The writable paths of [`WRITE_VAR`] (absolute ones only).
fn allowed_by_the_runner() -> Vec<PathBuf> {
    std::env::var_os(WRITE_VAR)
        .map(|list| {
            std::env::split_paths(&list)
                .filter(|p| p.is_absolute())
                .collect()
        })
        .unwrap_or_default()
}

/// The default hidden paths under `home` and the project's `sandbox.hide`.
fn hidden(settings: &SandboxSettings, home: Option<&Path>) -> Vec<PathBuf> {
    let mut hide = home.map(sandbox::default_hidden).unwrap_or_default();
    hide.extend(
        settings
            .hide
            .iter()
            .filter_map(|p| sandbox::expand_home(p, home)),
    );
    hide
}

impl SandboxSettings {
    /// The first entry of `write` or `hide` that is neither absolute nor
    /// under `~/`, as `(key, entry)`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let bad = |p: &String| sandbox::expand_home(p, Some(Path::new("/"))).is_none();
        for (key, list) in [("write", &self.write), ("hide", &self.hide)] {
            if let Some(p) = list.iter().find(|p| bad(p)) {
                return Err((key, p.clone()));
            }
        }
        Ok(())
    }
}

/// The worktrees beside `worktree` (the run's other slots: other stories').
fn other_worktrees(worktree: &Path) -> Vec<PathBuf> {
    let (Some(parent), Ok(own)) = (worktree.parent(), std::fs::canonicalize(worktree)) else {
        return Vec::new();
    };
    std::fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| std::fs::canonicalize(p).map_or(true, |c| c != own))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_the_flag_wins_over_the_file() {
        let s: SandboxSettings =
            serde_json::from_str(r#"{"mode": "off", "write": ["~/.m2"], "hide": ["secrets"]}"#)
                .unwrap();
        assert_eq!(mode(None, &s), SandboxMode::Off);
        assert_eq!(mode(Some(SandboxMode::Required), &s), SandboxMode::Required);
        assert_eq!(
            mode(None, &SandboxSettings::default()),
            SandboxMode::BestEffort
        );
    }

    #[test]
    fn paths_expand_against_home_and_relative_ones_are_refused() {
        let home = Path::new("/h");
        let expand = sandbox::expand_home;
        assert_eq!(expand("~/.m2", Some(home)), Some("/h/.m2".into()));
        assert_eq!(expand("/opt/x", Some(home)), Some("/opt/x".into()));
        assert_eq!(expand("sec", Some(home)), None);
        assert_eq!(expand("~/.m2", None), None);
        let s = SandboxSettings {
            hide: vec!["~/.kube".into(), "sec".into()],
            ..SandboxSettings::default()
        };
        assert_eq!(s.check(), Err(("hide", "sec".to_string())));
    }

    #[test]
    fn an_attempt_hides_the_worktrees_beside_its_own_and_writes_its_own() {
        let tmp = tempfile::tempdir().unwrap();
        for d in ["slot-1", "slot-2", "f.slot-1"] {
            std::fs::create_dir_all(tmp.path().join(d)).unwrap();
        }
        let own = tmp.path().join("slot-1");
        let settings = SandboxSettings {
            write: vec!["/opt/cache".into()],
            hide: vec!["/opt/secret".into()],
            ..SandboxSettings::default()
        };
        let p = attempt_policy(&settings, &own, Path::new("/tmp/t"));
        assert!(p.write.contains(&own));
        assert!(p.write.contains(&PathBuf::from("/opt/cache")));
        assert!(p.hide.contains(&tmp.path().join("slot-2")));
        assert!(p.hide.contains(&tmp.path().join("f.slot-1")));
        assert!(!p.hide.contains(&own));
        assert!(p.hide.contains(&PathBuf::from("/opt/secret")));
        assert_eq!(p.tmp, Some(PathBuf::from("/tmp/t")));
    }

    #[test]
    fn a_hook_writes_only_its_temp_dir_and_what_the_runner_allows() {
        let settings = SandboxSettings {
            write: vec!["/opt/cache".into()],
            hide: vec!["/opt/secret".into()],
            ..SandboxSettings::default()
        };
        let p = hook_policy(&settings, Path::new("/tmp/t"));
        // Not the project's `write`, not the tool caches: the runner's own.
        assert_eq!(p.write, allowed_by_the_runner());
        assert_eq!(p.tmp, Some(PathBuf::from("/tmp/t")));
        assert!(p.hide.contains(&PathBuf::from("/opt/secret")));
        if let Some(home) = sandbox::home() {
            assert!(p.hide.contains(&home.join(".ssh")));
        }
        assert!(p.network == Network::Host && p.connect_ports.is_none());
    }
}
