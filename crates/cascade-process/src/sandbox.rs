//! Kernel confinement of a child between fork and exec (Landlock on Linux):
//! what a [`Policy`] lets a child write (its worktree, a private temp dir,
//! declared paths) and read (everything but hidden paths), and the one
//! place that applies it ([`Policy::prepare`], then the child's pre_exec).
//!
//! Landlock only grants, so "read everything but X" is built by granting
//! read on every sibling of each directory on the way from `/` down to X.
//! Directory listings stay allowed everywhere (names are visible, contents
//! of hidden files are not): many tools fail when they cannot list `$HOME`.

use std::path::{Path, PathBuf};

/// Hidden by default under `$HOME`: where credentials live.
pub const DEFAULT_HIDDEN: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".netrc",
    ".docker/config.json",
];

/// Overrides the Landlock ABI the kernel reports (a test hook: `0` makes
/// cascade behave as on a kernel without Landlock).
pub const ABI_OVERRIDE_VAR: &str = "CASCADE_LANDLOCK_ABI";

/// What a confined child may touch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Writable (and readable) trees: the worktree, the attempt's temp dir, declared paths.
    pub write: Vec<PathBuf>,
    /// Unreadable paths (files or trees); those that do not exist are skipped.
    pub hide: Vec<PathBuf>,
    /// The attempt's private temp directory: writable, and the child's
    /// `TMPDIR`, `TMP` and `TEMP` (tools put scratch files there, not in a
    /// shared `/tmp` the sandbox does not let them write).
    pub tmp: Option<PathBuf>,
}

/// Why a policy could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel refused or the crate could not build the ruleset.
    #[cfg(target_os = "linux")]
    #[error("cannot build the Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    /// A directory on the way to a hidden path could not be listed.
    #[error("cannot list {dir} to hide what is under it: {source}")]
    List {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A path as policies are written: `~/x` under `home`, an absolute path
/// as is; `None` for anything else, or for `~` without a home.
pub fn expand_home(path: &str, home: Option<&Path>) -> Option<PathBuf> {
    if path == "~" {
        return home.map(Path::to_path_buf);
    }
    if let Some(rest) = path.strip_prefix("~/") {
        return home.map(|h| h.join(rest));
    }
    let p = Path::new(path);
    p.is_absolute().then(|| p.to_path_buf())
}

/// `$HOME`, if set.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// The hidden defaults under `home`.
pub fn default_hidden(home: &Path) -> Vec<PathBuf> {
    DEFAULT_HIDDEN.iter().map(|p| home.join(p)).collect()
}

impl Policy {
    /// The same policy with `paths` writable as well (a gate's report
    /// directory, the Cargo target it leases, an agent's own state).
    pub fn with_write<I, P>(&self, paths: I) -> Policy
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        let mut p = self.clone();
        for path in paths {
            let path = path.into();
            if !p.write.contains(&path) {
                p.write.push(path);
            }
        }
        p
    }

    /// The environment a confined child gets: its temp directory.
    pub fn env(&self) -> Vec<(&'static str, &Path)> {
        match &self.tmp {
            Some(t) => ["TMPDIR", "TMP", "TEMP"]
                .into_iter()
                .map(|k| (k, t.as_path()))
                .collect(),
            None => Vec::new(),
        }
    }
}

/// The Landlock ABI this kernel enforces (0: none, or not Linux), or the
/// value of [`ABI_OVERRIDE_VAR`] when it is set to a number.
pub fn kernel_abi() -> i32 {
    if let Some(v) = std::env::var(ABI_OVERRIDE_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
    {
        return v.max(0);
    }
    #[cfg(target_os = "linux")]
    {
        // LANDLOCK_CREATE_RULESET_VERSION = 1: asks for the ABI version.
        // SAFETY: a null attribute with size 0 and the version flag only reads.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32,
            )
        };
        if v > 0 {
            return v as i32;
        }
    }
    0
}

/// What confinement a child gets here, for events and summaries.
pub fn describe() -> String {
    match kernel_abi() {
        0 => "none".to_string(),
        abi => format!("landlock abi {abi}"),
    }
}

/// A ruleset built in the parent, applied in the child by [`Prepared::apply`].
pub struct Prepared {
    #[cfg(target_os = "linux")]
    ruleset: Option<landlock::RulesetCreated>,
}

impl Policy {
    /// Builds the ruleset (opens the paths it names) in the parent, where
    /// allocating is safe; the child only makes the restricting syscall.
    pub fn prepare(&self) -> Result<Prepared, SandboxError> {
        #[cfg(target_os = "linux")]
        {
            linux::prepare(self)
        }
        #[cfg(not(target_os = "linux"))]
        {
            Ok(Prepared {})
        }
    }
}

impl Prepared {
    /// Restricts the calling (forked, single-threaded) process. Only
    /// syscalls, no allocation: safe between fork and exec.
    pub fn apply(&mut self) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some(rs) = self.ruleset.take() {
            rs.restrict_self().map_err(std::io::Error::other)?;
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{Policy, Prepared, SandboxError};
    use landlock::{
        Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope, ABI,
    };
    use std::path::{Path, PathBuf};

    pub(super) fn prepare(policy: &Policy) -> Result<Prepared, SandboxError> {
        let abi = ABI::V7;
        let hidden: Vec<PathBuf> = policy
            .hide
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        let mut rs = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))?
            .scope(Scope::from_all(abi))?
            .create()?;
        let read = AccessFs::from_read(abi);
        // Listing is allowed everywhere (see the module comment).
        rs = rs.add_rule(PathBeneath::new(
            fd("/")?,
            AccessFs::ReadDir | AccessFs::Execute,
        ))?;
        let mut readable = Vec::new();
        readable_except(Path::new("/"), &hidden, &mut readable)?;
        for p in readable {
            if let Ok(f) = PathFd::new(&p) {
                rs = rs.add_rule(PathBeneath::new(f, read))?;
            }
        }
        let dev = AccessFs::from_file(abi) | AccessFs::ReadDir;
        if let Ok(f) = PathFd::new("/dev") {
            rs = rs.add_rule(PathBeneath::new(f, dev))?;
        }
        // POSIX shared memory (Python's multiprocessing, browsers) lives here.
        if let Ok(f) = PathFd::new("/dev/shm") {
            rs = rs.add_rule(PathBeneath::new(f, AccessFs::from_all(abi)))?;
        }
        for w in policy.write.iter().chain(&policy.tmp) {
            if let Ok(f) = PathFd::new(w) {
                rs = rs.add_rule(PathBeneath::new(f, AccessFs::from_all(abi)))?;
            }
        }
        Ok(Prepared { ruleset: Some(rs) })
    }

    fn fd(p: &str) -> Result<PathFd, SandboxError> {
        PathFd::new(p).map_err(|e| SandboxError::List {
            dir: p.into(),
            source: std::io::Error::other(e),
        })
    }

    /// Every entry of `dir` (recursively down the ancestors of hidden
    /// paths) that neither is nor holds a hidden path.
    fn readable_except(
        dir: &Path,
        hidden: &[PathBuf],
        out: &mut Vec<PathBuf>,
    ) -> Result<(), SandboxError> {
        let entries = std::fs::read_dir(dir).map_err(|source| SandboxError::List {
            dir: dir.to_path_buf(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            if hidden.iter().any(|h| h == &path) {
                continue;
            }
            if hidden.iter().any(|h| h.starts_with(&path)) {
                readable_except(&path, hidden, out)?;
            } else {
                out.push(path);
            }
        }
        Ok(())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::{CancelToken, Spec};
    use std::sync::Arc;

    /// Runs `sh -c script` confined to `policy`; true when it exited 0.
    async fn confined(policy: &Policy, script: &str) -> bool {
        let spec = Spec::new("sh")
            .args(["-c", script])
            .sandbox(Arc::new(policy.clone()));
        spec.spawn()
            .expect("spawn")
            .wait(&CancelToken::new())
            .await
            .success()
    }

    #[tokio::test]
    async fn writes_only_inside_the_writable_tree_and_hidden_files_are_unreadable() {
        if kernel_abi() == 0 {
            eprintln!("skipped: this kernel enforces no Landlock");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path().join("wt");
        let outside = tmp.path().join("outside");
        let secret = tmp.path().join("home/.ssh");
        for d in [&wt, &outside, &secret] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(secret.join("id_rsa"), "key").unwrap();
        std::fs::write(tmp.path().join("home/visible"), "ok").unwrap();
        let policy = Policy {
            write: vec![wt.clone()],
            hide: default_hidden(&tmp.path().join("home")),
            tmp: None,
        };
        let p = |p: &Path| p.display().to_string();
        assert!(confined(&policy, &format!("echo hi > {}/f", p(&wt))).await);
        assert_eq!(std::fs::read_to_string(wt.join("f")).unwrap(), "hi\n");
        assert!(!confined(&policy, &format!("echo x > {}/f", p(&outside))).await);
        assert!(!outside.join("f").exists());
        assert!(!confined(&policy, &format!("cat {}/id_rsa", p(&secret))).await);
        assert!(confined(&policy, &format!("cat {}/home/visible", p(tmp.path()))).await);
    }
}
