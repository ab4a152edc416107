//! Kernel confinement of a child between fork and exec (Landlock on Linux):
//! what a [`Policy`] lets a child write (its worktree, a private temp dir,
//! declared paths), read (everything but hidden paths) and connect to (TCP
//! ports, when the policy names them), and the one place that applies it
//! ([`Policy::prepare`], then the child's pre_exec).
//!
//! Landlock only grants, so "read everything but X" is built by granting
//! read on every sibling of each directory on the way from `/` down to X.
//! Directory listings stay allowed everywhere (names are visible, contents
//! of hidden files are not): many tools fail when they cannot list `$HOME`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Where the child's network is: the host's, or a namespace of its own
    /// or shared with the other gates of its run (loopback only). Gates
    /// get the latter.
    pub network: Network,
    /// The only TCP ports the child may connect to (any address: Landlock
    /// rules know ports, not hosts); `None`: connecting is not restricted.
    /// What agents get (their model API). Enforced from Landlock ABI 4;
    /// an older kernel leaves connecting free ([`ports_enforced`]).
    pub connect_ports: Option<Vec<u16>>,
}

/// Where a confined child's network is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Network {
    /// The host's.
    #[default]
    Host,
    /// A user and network namespace the child makes for itself, its
    /// loopback up: 127.0.0.1 works inside, nothing outside is reachable.
    /// Where the kernel allows no user namespaces
    /// ([`own_network_available`]) the child keeps the host's network.
    Own,
    /// The same, made beforehand and joined by every child given it (the
    /// gates of one run): a start joins instead of making one.
    Shared(Arc<SharedNetwork>),
}

impl Network {
    /// A [`SharedNetwork`] for the children to come, or [`Network::Own`]
    /// where one cannot be made (each child then tries for itself).
    pub fn shared_or_own() -> Network {
        match SharedNetwork::new() {
            Ok(shared) => Network::Shared(Arc::new(shared)),
            Err(_) => Network::Own,
        }
    }
}

#[cfg(target_os = "linux")]
mod netns;
#[cfg(target_os = "linux")]
pub use netns::SharedNetwork;

/// Where there are no network namespaces: never made.
#[cfg(not(target_os = "linux"))]
#[derive(Debug, PartialEq, Eq)]
pub struct SharedNetwork;

#[cfg(not(target_os = "linux"))]
impl SharedNetwork {
    /// Fails: this system has no network namespaces.
    pub fn new() -> Result<SharedNetwork, SandboxError> {
        Err(SandboxError::Network(std::io::Error::from(
            std::io::ErrorKind::Unsupported,
        )))
    }
}

/// The Landlock ABI that restricts TCP connects by port.
pub const NET_ABI: i32 = 4;

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
    /// A shared network namespace could not be made.
    #[error("cannot make a network namespace for the gates: {0}")]
    Network(#[source] std::io::Error),
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

    /// The same policy with a network namespace of the child's own.
    pub fn with_own_network(&self) -> Policy {
        self.with_network(Network::Own)
    }

    /// The same policy with its network `network` (gates: shared by the run).
    pub fn with_network(&self, network: Network) -> Policy {
        Policy {
            network,
            ..self.clone()
        }
    }

    /// The same policy letting the child connect over TCP only to `ports`
    /// (and those of the policy already, when it names some).
    pub fn with_connect_ports(&self, ports: impl IntoIterator<Item = u16>) -> Policy {
        let mut p = self.clone();
        let list = p.connect_ports.get_or_insert_with(Vec::new);
        for port in ports {
            if !list.contains(&port) {
                list.push(port);
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

/// Whether this kernel restricts TCP connects by port (the ABI of
/// [`kernel_abi`] is [`NET_ABI`] or later), so that a policy's
/// `connect_ports` bind.
pub fn ports_enforced() -> bool {
    kernel_abi() >= NET_ABI
}

/// Whether this kernel lets an unprivileged process make a user and a
/// network namespace (asked once per process, by making a [`SharedNetwork`]).
pub fn own_network_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| SharedNetwork::new().is_ok())
}

/// A ruleset built in the parent, applied in the child by [`Prepared::apply`].
pub struct Prepared {
    #[cfg(target_os = "linux")]
    ruleset: Option<landlock::RulesetCreated>,
    #[cfg(target_os = "linux")]
    network: Option<netns::Enter>,
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
        // The namespaces first: writing the uid map under /proc is a write
        // Landlock would refuse once applied.
        #[cfg(target_os = "linux")]
        if let Some(net) = &self.network {
            net.enter();
        }
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
        Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
        Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, ABI,
    };
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    pub(super) fn prepare(policy: &Policy) -> Result<Prepared, SandboxError> {
        let abi = ABI::V7;
        let hidden: Vec<PathBuf> = policy
            .hide
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))?
            .scope(Scope::from_all(abi))?;
        // Handled only when ports are named: what is handled and not
        // granted is denied, and a gate (in its own network) or a setup
        // command (package installs) connects where it needs.
        if policy.connect_ports.is_some() {
            ruleset = ruleset.handle_access(AccessNet::ConnectTcp)?;
        }
        let mut rs = ruleset.create()?;
        for port in policy.connect_ports.iter().flatten() {
            rs = rs.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
        }
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
        use super::netns::{Enter, Maps};
        let network = match &policy.network {
            super::Network::Host => None,
            super::Network::Own => Some(Enter::Own(Maps::new())),
            super::Network::Shared(shared) => Some(Enter::Join(Arc::clone(shared), Maps::new())),
        };
        Ok(Prepared {
            ruleset: Some(rs),
            network,
        })
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

    /// Whether python3 runs here (else the test says why it skips).
    fn python3() -> bool {
        let ok = std::process::Command::new("python3")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            eprintln!("skipped: python3 is not installed");
        }
        ok
    }

    /// A shell command connecting to the host's 127.0.0.1 on `port`.
    fn connect_to(port: u16) -> String {
        format!("python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"")
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
            network: Network::Host,
            connect_ports: None,
        };
        let p = |p: &Path| p.display().to_string();
        assert!(confined(&policy, &format!("echo hi > {}/f", p(&wt))).await);
        assert_eq!(std::fs::read_to_string(wt.join("f")).unwrap(), "hi\n");
        assert!(!confined(&policy, &format!("echo x > {}/f", p(&outside))).await);
        assert!(!outside.join("f").exists());
        assert!(!confined(&policy, &format!("cat {}/id_rsa", p(&secret))).await);
        assert!(confined(&policy, &format!("cat {}/home/visible", p(tmp.path()))).await);
    }

    #[tokio::test]
    async fn a_child_with_its_own_network_reaches_its_loopback_but_not_the_hosts() {
        if kernel_abi() == 0 || !own_network_available() {
            eprintln!("skipped: no Landlock or no user namespaces here");
            return;
        }
        if !python3() {
            return;
        }
        let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = host.local_addr().unwrap().port();
        let tmp = tempfile::tempdir().unwrap();
        let policy = Policy {
            write: vec![tmp.path().to_path_buf()],
            ..Policy::default()
        };
        let connect = connect_to(port);
        let inside = "python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); socket.create_connection(s.getsockname(), 2)\"";
        assert!(confined(&policy, &connect).await, "the host's network");
        let own = policy.with_own_network();
        assert!(!confined(&own, &connect).await, "reached the host");
        assert!(confined(&own, inside).await, "its own loopback");
        let shared = policy.with_network(Network::shared_or_own());
        assert!(matches!(shared.network, Network::Shared(_)));
        assert!(
            !confined(&shared, &connect).await,
            "shared reached the host"
        );
        assert!(confined(&shared, inside).await, "the shared loopback");
    }

    /// What `/proc/self/ns/net` names for a child confined to `policy`.
    async fn network_of(policy: &Policy) -> String {
        let spec = Spec::new("readlink")
            .args(["/proc/self/ns/net"])
            .sandbox(Arc::new(policy.clone()));
        let out = spec.run(&CancelToken::new()).await.expect("readlink runs");
        assert!(out.success(), "{out:?}");
        out.stdout.text_lossy().trim().to_string()
    }

    #[tokio::test]
    async fn children_given_one_shared_network_are_in_it_and_no_other_is() {
        if kernel_abi() == 0 || !own_network_available() {
            eprintln!("skipped: no Landlock or no user namespaces here");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let policy = Policy {
            write: vec![tmp.path().to_path_buf()],
            ..Policy::default()
        };
        let one = Arc::new(SharedNetwork::new().expect("a shared network"));
        let two = Arc::new(SharedNetwork::new().expect("another"));
        assert_ne!(one, two);
        let in_one = policy.with_network(Network::Shared(Arc::clone(&one)));
        let first = network_of(&in_one).await;
        assert_eq!(first, format!("net:[{}]", one.inode()));
        assert_eq!(network_of(&in_one).await, first, "the same namespace again");
        let in_two = network_of(&policy.with_network(Network::Shared(two))).await;
        let own = network_of(&policy.with_own_network()).await;
        let host = std::fs::read_link("/proc/self/ns/net").unwrap();
        for other in [&in_two, &own, &host.display().to_string()] {
            assert_ne!(other, &first);
        }
        // A namespace outlives the child that made it while it is held.
        assert_eq!(network_of(&in_one).await, first);
    }

    #[tokio::test]
    async fn a_child_connects_only_to_the_ports_its_policy_names() {
        if !ports_enforced() {
            eprintln!("skipped: this kernel's Landlock has no TCP rules (ABI < {NET_ABI})");
            return;
        }
        if !python3() {
            return;
        }
        let named = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let base = Policy {
            write: vec![tmp.path().to_path_buf()],
            ..Policy::default()
        };
        let port = |l: &std::net::TcpListener| l.local_addr().unwrap().port();
        assert!(
            confined(&base, &connect_to(port(&other))).await,
            "unrestricted"
        );
        let limited = base.with_connect_ports([port(&named)]);
        assert!(confined(&limited, &connect_to(port(&named))).await, "named");
        assert!(
            !confined(&limited, &connect_to(port(&other))).await,
            "not named"
        );
        // Binding is not restricted: a local server of the child's own works,
        // though connecting to it on an unnamed port does not.
        let bind = "python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\"";
        assert!(confined(&limited, bind).await, "bind");
    }

    #[test]
    fn connect_ports_add_up_without_repeats() {
        let p = Policy::default().with_connect_ports([443, 8080]);
        assert_eq!(
            p.with_connect_ports([443, 9]).connect_ports,
            Some(vec![443, 8080, 9])
        );
        assert_eq!(Policy::default().connect_ports, None);
    }
}
