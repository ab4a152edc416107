//! Toolchain identity: what part of a gate's verdict comes from the compiler
//! or interpreter rather than from the tree.
//!
//! A gate's cache key carries the output of its toolchain command (`rustc
//! -vV`, `python3 --version`, `node --version`, `go version`), so a verdict
//! computed with one compiler is never a hit for another. The command is
//! the gate's `toolchain` argv from the config, or inferred from its
//! program; `"toolchain": []` opts out. Each (argv, folder) pair runs once
//! per [`Toolchains`] (one per cache, so once per run) and in the gate's own
//! folder, where a `rust-toolchain.toml` or `.nvmrc`-style pin applies.
//!
//! **Remembered across runs.** Probing costs a process (tens of ms through
//! rustup), more than a whole cache hit. So each probe's output is kept in
//! `<gate-cache>/toolchains.json` under a digest of its inputs: the argv and
//! folder, the environment (minus terminal/session variables that cannot
//! select a toolchain), where PATH resolves the program and that file's stat
//! data, and the stat data of the version-pin files in the folder and its
//! ancestors ([`PIN_FILES`]) and of the toolchain managers' own state
//! (rustup's settings and update hashes, pyenv, nvm, volta, asdf, mise, go
//! env). A later run whose inputs digest is the same uses the kept output
//! without running anything, unless a remote cache is attached: verdicts
//! shared with other machines always come from a fresh probe. A probe whose
//! inputs changed in the same timestamp tick as it ran is not kept (git's
//! racy rule: within that tick a later change may leave the same stat data).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cascade_process::{CancelToken, SpawnError, Spec};
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

/// How long a toolchain command may take (rustup may install on first use).
const TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of its output kept: version banners are short.
const MAX_BYTES: usize = 4096;

/// The toolchain command a gate's program implies, if any.
pub fn infer(program: &str) -> Option<Vec<String>> {
    let base = Path::new(program).file_name()?.to_str()?;
    let argv: &[&str] = match base {
        "cargo" | "rustc" | "rustfmt" | "clippy-driver" | "cargo-nextest" => &["rustc", "-vV"],
        "python" => &["python", "--version"],
        "python3" | "pytest" | "ruff" | "mypy" | "black" | "flake8" | "pylint" | "pyright"
        | "tox" | "uv" | "poetry" | "isort" => &["python3", "--version"],
        "node" | "npm" | "npx" | "pnpm" | "yarn" | "tsc" | "eslint" | "jest" | "vitest"
        | "prettier" | "biome" => &["node", "--version"],
        "go" | "gofmt" | "golangci-lint" | "staticcheck" => &["go", "version"],
        _ => return None,
    };
    Some(argv.iter().map(|s| s.to_string()).collect())
}

/// (argv, folder) -> its identity, computed at most once.
type Memo = DashMap<(Vec<String>, PathBuf), Arc<OnceCell<String>>>;

/// Memo of toolchain identities; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Toolchains {
    seen: Arc<Memo>,
    /// `toolchains.json`, when the cache lives on disk.
    file: Option<Arc<PathBuf>>,
    /// Whether identities kept by earlier runs may be used (no remote).
    trust_kept: bool,
}

impl Toolchains {
    /// Identities kept in `file` across runs (and used while
    /// [`Toolchains::trust_kept`] allows).
    pub fn persistent(file: PathBuf) -> Toolchains {
        Toolchains {
            seen: Arc::default(),
            file: Some(Arc::new(file)),
            trust_kept: true,
        }
    }

    /// The same memo, with identities probed by earlier runs standing in
    /// for a probe or not (`false` when verdicts are shared with a remote
    /// cache).
    pub fn trusting_kept(mut self, trust: bool) -> Toolchains {
        self.trust_kept = trust;
        self
    }

    /// The identity of `argv` run in `dir`: its trimmed output (stdout then
    /// stderr; `python --version` used to print on stderr). A command that
    /// cannot run gives a stable text saying so, which is part of the key
    /// like any other identity.
    pub async fn identity(&self, argv: &[String], dir: &Path) -> String {
        if argv.is_empty() {
            return String::new();
        }
        let cell = self
            .seen
            .entry((argv.to_vec(), dir.to_path_buf()))
            .or_default()
            .clone();
        cell.get_or_init(|| async move {
            if let Some(kept) = self.kept(argv, dir) {
                return kept;
            }
            // The clock and the inputs are read before the probe runs.
            let now = self.file.as_deref().and_then(|f| f.parent().map(fs_now));
            let inputs = Inputs::of(argv, dir);
            let identity = probe(argv, dir).await;
            if let (Some(file), Some(Ok(now))) = (self.file.as_deref(), now) {
                if !inputs.newest.is_some_and(|t| t >= now) {
                    let _ = keep(file, &inputs.digest, &identity);
                }
            }
            identity
        })
        .await
        .clone()
    }

    /// The identity without running anything: probed already in this run,
    /// or kept by an earlier run with the same inputs (when trusted).
    pub fn remembered(&self, argv: &[String], dir: &Path) -> Option<String> {
        if argv.is_empty() {
            return Some(String::new());
        }
        let key = (argv.to_vec(), dir.to_path_buf());
        if let Some(done) = self.seen.get(&key).and_then(|c| c.get().cloned()) {
            return Some(done);
        }
        let kept = self.kept(argv, dir)?;
        let cell = self.seen.entry(key).or_default().clone();
        let _ = cell.set(kept.clone());
        Some(kept)
    }

    /// What an earlier run kept for the same inputs, when trusted.
    fn kept(&self, argv: &[String], dir: &Path) -> Option<String> {
        if !self.trust_kept {
            return None;
        }
        let kept = read_kept(self.file.as_deref()?)?;
        let digest = Inputs::of(argv, dir).digest;
        kept.entries
            .into_iter()
            .find(|e| e.inputs == digest)
            .map(|e| e.identity)
    }

    /// How many distinct toolchain commands ran (or were remembered) in this run.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none ran yet.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// Runs the toolchain command once.
async fn probe(argv: &[String], dir: &Path) -> String {
    let Some((program, args)) = argv.split_first() else {
        return String::new();
    };
    let spec = Spec::new(program)
        .args(args)
        .cwd(dir)
        .timeout(TIMEOUT)
        .tail_bytes(MAX_BYTES);
    match spec.run(&CancelToken::new()).await {
        Ok(o) => {
            let mut text = o.stdout.text_lossy().trim().to_string();
            let err = o.stderr.text_lossy();
            if !err.trim().is_empty() {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(err.trim());
            }
            if !o.success() {
                text.push_str(&format!("\n[{}]", o.describe()));
            }
            text
        }
        Err(SpawnError::NotFound { .. }) => format!("{program}: not installed"),
        Err(e) => format!("{program}: cannot run: {e}"),
    }
}

/// Version of the kept-identities file and of the inputs digest.
const KEPT_VERSION: u32 = 1;
/// How many identities the file keeps (the oldest go first).
const KEEP: usize = 64;

/// Files that pin a toolchain version, looked for in a gate's folder and
/// every folder above it.
pub const PIN_FILES: &[&str] = &[
    "rust-toolchain",
    "rust-toolchain.toml",
    ".nvmrc",
    ".node-version",
    "package.json",
    ".python-version",
    ".tool-versions",
    ".mise.toml",
    "mise.toml",
    ".go-version",
    "go.mod",
    "go.work",
];

/// Environment variables that say nothing about which toolchain runs
/// (terminal, session, shell bookkeeping, cascade's own settings).
const VOLATILE_ENV: &[&str] = &[
    "_",
    "OLDPWD",
    "PWD",
    "SHLVL",
    "TERM",
    "COLORTERM",
    "COLUMNS",
    "LINES",
    "DISPLAY",
    "WINDOWID",
    "TMUX",
    "TMUX_PANE",
    "STY",
    "LS_COLORS",
    "PS1",
    "PROMPT_COMMAND",
    "MAIL",
    "GPG_TTY",
    "DBUS_SESSION_BUS_ADDRESS",
];
const VOLATILE_ENV_PREFIXES: &[&str] = &["SSH_", "TERM_", "XDG_SESSION_", "CASCADE_"];

/// The inputs of a toolchain probe, digested.
struct Inputs {
    digest: String,
    /// The newest mtime/ctime among the files read (for the racy rule).
    newest: Option<Time>,
}

impl Inputs {
    fn of(argv: &[String], dir: &Path) -> Inputs {
        fn field(h: &mut blake3::Hasher, b: &[u8]) {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        }
        let mut h = blake3::Hasher::new();
        let mut newest: Option<Time> = None;
        field(
            &mut h,
            format!("cascade-toolchain-inputs-v{KEPT_VERSION}").as_bytes(),
        );
        for a in argv {
            field(&mut h, a.as_bytes());
        }
        field(&mut h, dir.as_os_str().as_encoded_bytes());
        let mut env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
            .filter(|(k, _)| {
                !VOLATILE_ENV.contains(&k.as_str())
                    && !VOLATILE_ENV_PREFIXES.iter().any(|p| k.starts_with(p))
            })
            .collect();
        env.sort();
        for (k, v) in &env {
            field(&mut h, k.as_bytes());
            field(&mut h, v.as_bytes());
        }
        let mut stat_of = |h: &mut blake3::Hasher, path: &Path| {
            field(h, path.as_os_str().as_encoded_bytes());
            match std::fs::metadata(path) {
                Ok(meta) => {
                    let (mtime, ctime) = times(&meta);
                    newest = newest.max(Some(mtime)).max(Some(ctime));
                    h.update(&meta.size().to_le_bytes());
                    for (sec, nsec) in [mtime, ctime] {
                        h.update(&sec.to_le_bytes());
                        h.update(&nsec.to_le_bytes());
                    }
                    h.update(&meta.ino().to_le_bytes());
                }
                Err(_) => {
                    h.update(b"-");
                }
            }
        };
        let program = argv.first().map(String::as_str).unwrap_or("");
        let path_var = std::env::var_os("PATH").unwrap_or_default();
        match which::which_in(program, Some(&path_var), dir) {
            Ok(found) => {
                stat_of(&mut h, &found);
                if let Ok(real) = found.canonicalize() {
                    stat_of(&mut h, &real);
                }
            }
            Err(_) => field(&mut h, b"not found"),
        }
        for folder in dir.ancestors() {
            for name in PIN_FILES {
                stat_of(&mut h, &folder.join(name));
            }
        }
        for path in manager_state() {
            stat_of(&mut h, &path);
        }
        Inputs {
            digest: h.finalize().to_hex().to_string(),
            newest,
        }
    }
}

/// The toolchain managers' own state files: which toolchain is the
/// default or the override, and when one was installed or updated.
fn manager_state() -> Vec<PathBuf> {
    let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let home = env("HOME");
    let under_home = |rel: &str| home.as_ref().map(|h| h.join(rel));
    let mut out = Vec::new();
    if let Some(rustup) = env("RUSTUP_HOME").or_else(|| under_home(".rustup")) {
        out.push(rustup.join("settings.toml"));
        out.push(rustup.join("toolchains"));
        let hashes = rustup.join("update-hashes");
        if let Ok(rd) = std::fs::read_dir(&hashes) {
            let mut names: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
            names.sort();
            out.extend(names);
        }
        out.push(hashes);
    }
    out.extend(
        env("PYENV_ROOT")
            .or_else(|| under_home(".pyenv"))
            .map(|p| p.join("version")),
    );
    out.extend(
        env("NVM_DIR")
            .or_else(|| under_home(".nvm"))
            .map(|p| p.join("alias/default")),
    );
    out.extend(
        env("VOLTA_HOME")
            .or_else(|| under_home(".volta"))
            .map(|p| p.join("tools/user/platform.json")),
    );
    out.extend(under_home(".tool-versions"));
    out.extend(under_home(".config/mise/config.toml"));
    out.extend(env("GOENV").or_else(|| under_home(".config/go/env")));
    out
}

/// `toolchains.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Kept {
    version: u32,
    entries: Vec<KeptIdentity>,
}

#[derive(Debug, Serialize, Deserialize)]
struct KeptIdentity {
    /// Digest of the probe's inputs.
    inputs: String,
    identity: String,
}

fn read_kept(file: &Path) -> Option<Kept> {
    let bytes = std::fs::read(file).ok()?;
    serde_json::from_slice::<Kept>(&bytes)
        .ok()
        .filter(|k| k.version == KEPT_VERSION)
}

/// A file-system timestamp: seconds and nanoseconds, in time order.
type Time = (i64, u32);

/// A file's modification and change times.
fn times(meta: &std::fs::Metadata) -> (Time, Time) {
    (
        (meta.mtime(), meta.mtime_nsec() as u32),
        (meta.ctime(), meta.ctime_nsec() as u32),
    )
}

/// "Now" as the file system holding `dir` counts it (created if missing):
/// the modification time of a fresh temp file there, removed at once. Read
/// before a probe, an input stamped at or after it may change again within
/// the same timestamp tick without a change of its stat data.
fn fs_now(dir: &Path) -> std::io::Result<Time> {
    std::fs::create_dir_all(dir)?;
    let probe = tempfile::tempfile_in(dir)?;
    Ok(times(&probe.metadata()?).0)
}

/// Adds (or refreshes) one identity.
fn keep(file: &Path, digest: &str, identity: &str) -> std::io::Result<()> {
    let mut kept = read_kept(file).unwrap_or_default();
    kept.version = KEPT_VERSION;
    kept.entries.retain(|e| e.inputs != digest);
    kept.entries.push(KeptIdentity {
        inputs: digest.to_string(),
        identity: identity.to_string(),
    });
    let excess = kept.entries.len().saturating_sub(KEEP);
    kept.entries.drain(..excess);
    let bytes = serde_json::to_vec(&kept).map_err(std::io::Error::other)?;
    cascade_fs::write_atomic(file, &bytes, cascade_fs::Durability::Renamed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_imply_their_toolchain() {
        assert_eq!(infer("cargo").unwrap(), vec!["rustc", "-vV"]);
        assert_eq!(infer("/usr/bin/npx").unwrap(), vec!["node", "--version"]);
        assert_eq!(infer("pytest").unwrap()[0], "python3");
        assert_eq!(infer("gofmt").unwrap(), vec!["go", "version"]);
        assert!(infer("make").is_none());
    }

    #[tokio::test]
    async fn identities_run_once_and_say_when_missing() {
        let t = Toolchains::default();
        let dir = std::env::temp_dir();
        let argv = vec![
            "sh".to_string(),
            "-c".into(),
            "echo v1; echo warn >&2".into(),
        ];
        assert_eq!(t.identity(&argv, &dir).await, "v1\nwarn");
        assert_eq!(t.identity(&argv, &dir).await, "v1\nwarn");
        assert_eq!(t.len(), 1);
        let missing = vec!["cascade-no-such-compiler-xyz".to_string()];
        assert_eq!(
            t.identity(&missing, &dir).await,
            "cascade-no-such-compiler-xyz: not installed"
        );
    }

    /// A folder for a probe, a probe that counts its runs there, and the
    /// kept-identities file beside it. Waits a tick so the files made here
    /// are not racy for the probe that follows.
    fn probe_setup() -> (tempfile::TempDir, PathBuf, Vec<String>, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("project");
        std::fs::create_dir(&dir).unwrap();
        let argv = vec![
            "sh".to_string(),
            "-c".into(),
            "echo run >> ../runs; echo v1".into(),
        ];
        let file = tmp.path().join("cache/toolchains.json");
        std::thread::sleep(Duration::from_millis(30));
        (tmp, dir, argv, file)
    }

    fn runs(tmp: &tempfile::TempDir) -> usize {
        std::fs::read_to_string(tmp.path().join("runs"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn a_later_run_with_the_same_inputs_uses_the_kept_identity() {
        let (tmp, dir, argv, file) = probe_setup();
        let first = Toolchains::persistent(file.clone());
        assert_eq!(first.remembered(&argv, &dir), None, "nothing kept yet");
        assert_eq!(first.identity(&argv, &dir).await, "v1");
        assert_eq!(runs(&tmp), 1);
        // Another run (a new memo over the same file): no probe.
        let later = Toolchains::persistent(file.clone());
        assert_eq!(later.remembered(&argv, &dir).as_deref(), Some("v1"));
        assert_eq!(later.identity(&argv, &dir).await, "v1");
        assert_eq!(runs(&tmp), 1);
        // With a remote cache the kept identity is not trusted.
        let shared = Toolchains::persistent(file).trusting_kept(false);
        assert_eq!(shared.remembered(&argv, &dir), None);
        assert_eq!(shared.identity(&argv, &dir).await, "v1");
        assert_eq!(runs(&tmp), 2);
    }

    #[tokio::test]
    async fn a_new_pin_file_means_a_new_probe() {
        let (tmp, dir, argv, file) = probe_setup();
        Toolchains::persistent(file.clone())
            .identity(&argv, &dir)
            .await;
        std::fs::write(
            dir.join("rust-toolchain.toml"),
            "[toolchain]\nchannel = \"1.80\"\n",
        )
        .unwrap();
        let after = Toolchains::persistent(file.clone());
        assert_eq!(after.remembered(&argv, &dir), None);
        after.identity(&argv, &dir).await;
        assert_eq!(runs(&tmp), 2);
        // A pin in a folder above counts too.
        std::fs::write(tmp.path().join(".nvmrc"), "20\n").unwrap();
        assert_eq!(Toolchains::persistent(file).remembered(&argv, &dir), None);
    }

    #[tokio::test]
    async fn a_probe_whose_inputs_changed_in_its_tick_is_not_kept() {
        let (_tmp, dir, argv, file) = probe_setup();
        // An input stamped at or after the probe's clock: it may still be
        // changing, so what the probe said is not kept for later runs.
        let pin = dir.join(".python-version");
        std::fs::write(&pin, "3.12\n").unwrap();
        let future = std::time::SystemTime::now() + Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&pin)
            .unwrap()
            .set_modified(future)
            .unwrap();
        let t = Toolchains::persistent(file.clone());
        assert_eq!(t.identity(&argv, &dir).await, "v1");
        assert_eq!(t.remembered(&argv, &dir).as_deref(), Some("v1"), "this run");
        assert_eq!(Toolchains::persistent(file).remembered(&argv, &dir), None);
    }

    #[test]
    fn a_damaged_or_older_kept_file_is_ignored() {
        let (_tmp, dir, argv, file) = probe_setup();
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let digest = Inputs::of(&argv, &dir).digest;
        let entry = serde_json::json!({"inputs": digest, "identity": "stale"});
        for bytes in [
            b"{not json".to_vec(),
            serde_json::to_vec(&serde_json::json!({"version": 0, "entries": [entry]})).unwrap(),
        ] {
            std::fs::write(&file, bytes).unwrap();
            assert_eq!(
                Toolchains::persistent(file.clone()).remembered(&argv, &dir),
                None
            );
        }
        // The control: the same entry in the current version is used.
        let current = serde_json::json!({"version": KEPT_VERSION, "entries": [entry]});
        std::fs::write(&file, serde_json::to_vec(&current).unwrap()).unwrap();
        assert_eq!(
            Toolchains::persistent(file)
                .remembered(&argv, &dir)
                .as_deref(),
            Some("stale")
        );
    }
}
