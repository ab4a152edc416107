//! Network namespaces of confined children (Linux): one a child makes for
//! itself between fork and exec, or a [`SharedNetwork`] made once and
//! joined by several children (the gates of one run). Making a user and a
//! network namespace is most of what a gate's confinement costs; joining
//! one is two `setns` calls.
//!
//! Only syscalls run in a forked child: the uid and gid maps are formatted
//! before the fork.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use super::SandboxError;

/// The maps that keep a process's ids as they were once it is in a new
/// user namespace (`inside outside 1`).
pub(super) struct Maps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl Maps {
    pub(super) fn new() -> Maps {
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Maps {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// Unshares the user and network namespaces, maps the ids and brings
    /// `lo` up; false when the kernel refuses (the process keeps the
    /// network it had).
    ///
    /// # Safety
    /// Only in a forked, single-threaded child (a multi-threaded process
    /// cannot enter a new user namespace; the buffers are `self`'s).
    unsafe fn unshare(&self) -> bool {
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
            return false;
        }
        write(b"/proc/self/setgroups\0", b"deny");
        write(b"/proc/self/uid_map\0", &self.uid_map);
        write(b"/proc/self/gid_map\0", &self.gid_map);
        loopback_up();
        true
    }
}

/// How a confined child gets the network of its policy, in its pre_exec.
pub(super) enum Enter {
    /// Makes a user and network namespace of its own.
    Own(Maps),
    /// Joins the shared one, or makes its own where joining fails.
    Join(Arc<SharedNetwork>, Maps),
}

impl Enter {
    /// Best-effort: where the kernel refuses, the child keeps the host's
    /// network (said by [`super::own_network_available`]).
    pub(super) fn enter(&self) {
        // SAFETY: called between fork and exec (see `Prepared::apply`).
        unsafe {
            match self {
                Enter::Own(maps) => {
                    maps.unshare();
                }
                Enter::Join(shared, maps) => {
                    if !shared.join() {
                        maps.unshare();
                    }
                }
            }
        }
    }
}

/// A user namespace holding a network namespace with its loopback up,
/// that children join instead of each making their own (what
/// [`super::Network::Shared`] names). The gates of one run share one: their
/// starts cost less, and a server one of them leaves on 127.0.0.1 is
/// reachable by the others, not by another run's gates or the host.
/// Kept alive by its two descriptors: gone once it is dropped and the
/// last child in it has exited.
pub struct SharedNetwork {
    user: OwnedFd,
    net: OwnedFd,
    inode: u64,
}

impl SharedNetwork {
    /// Makes the namespaces in a forked child that waits while their
    /// descriptors are opened from `/proc`, then exits. Fails where the
    /// kernel allows no unprivileged user namespaces.
    pub fn new() -> Result<SharedNetwork, SandboxError> {
        let maps = Maps::new();
        let (ready_r, ready_w) = pipe()?;
        let (hold_r, hold_w) = pipe()?;
        // SAFETY: the child makes only syscalls on what exists before the
        // fork (`maps`, the pipes) and `_exit`s; the parent waits for it.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(os_error());
        }
        if pid == 0 {
            // SAFETY: the forked child (see above).
            unsafe {
                libc::close(ready_r.as_raw_fd());
                libc::close(hold_w.as_raw_fd());
                hold(&maps, ready_w.as_raw_fd(), hold_r.as_raw_fd())
            }
        }
        drop((ready_w, hold_r));
        let made = read_byte(&ready_r) == Some(1);
        let opened = if made {
            open_namespaces(pid)
        } else {
            Err(SandboxError::Network(std::io::Error::other(
                "the kernel refused an unprivileged user and network namespace",
            )))
        };
        // Closing the holding pipe lets the child exit.
        drop(hold_w);
        reap(pid);
        opened
    }

    /// The network namespace's inode: what `/proc/<pid>/ns/net` of a
    /// child in it names (`net:[inode]`).
    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// Enters the user namespace, then the network namespace (the second
    /// needs the capabilities the first gives).
    ///
    /// # Safety
    /// Only in a forked, single-threaded child.
    unsafe fn join(&self) -> bool {
        libc::setns(self.user.as_raw_fd(), libc::CLONE_NEWUSER) == 0
            && libc::setns(self.net.as_raw_fd(), libc::CLONE_NEWNET) == 0
    }
}

impl PartialEq for SharedNetwork {
    fn eq(&self, other: &SharedNetwork) -> bool {
        self.inode == other.inode
    }
}

impl Eq for SharedNetwork {}

impl std::fmt::Debug for SharedNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedNetwork(net:[{}])", self.inode)
    }
}

/// The holding child: makes the namespaces, says whether it did, and waits
/// until the parent closes the holding pipe (or exits): the child has
/// closed its copies of the parent's ends.
///
/// # Safety
/// Only in the child `SharedNetwork::new` forks.
unsafe fn hold(maps: &Maps, ready: i32, held: i32) -> ! {
    let made = u8::from(maps.unshare());
    libc::write(ready, (&made as *const u8).cast(), 1);
    let mut byte = 0u8;
    while libc::read(held, (&mut byte as *mut u8).cast(), 1) < 0
        && *libc::__errno_location() == libc::EINTR
    {}
    libc::_exit(0)
}

/// The user and network namespaces of `pid`, opened from `/proc`.
fn open_namespaces(pid: libc::pid_t) -> Result<SharedNetwork, SandboxError> {
    let open = |kind: &str| {
        std::fs::File::open(format!("/proc/{pid}/ns/{kind}")).map_err(SandboxError::Network)
    };
    let (user, net) = (open("user")?, open("net")?);
    let inode = net.metadata().map_err(SandboxError::Network)?.ino();
    Ok(SharedNetwork {
        user: user.into(),
        net: net.into(),
        inode,
    })
}

/// A pipe whose ends are closed on exec (a child another thread starts
/// meanwhile does not keep the holding child alive).
fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, each owned once.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// One byte from `fd`, `None` at its end or on an error.
fn read_byte(fd: &OwnedFd) -> Option<u8> {
    let mut byte = 0u8;
    loop {
        // SAFETY: reads at most one byte into `byte`.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
        match n {
            1 => return Some(byte),
            n if n < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return None,
        }
    }
}

/// Waits for `pid` to exit.
fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waits for the one child this module forked.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
}

fn os_error() -> SandboxError {
    SandboxError::Network(std::io::Error::last_os_error())
}

/// Writes `bytes` to the file at the NUL-terminated `path`.
unsafe fn write(path: &[u8], bytes: &[u8]) {
    let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd >= 0 {
        libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
    }
}

/// `ip link set lo up` in the current network namespace.
unsafe fn loopback_up() {
    let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if fd < 0 {
        return;
    }
    let mut req: libc::ifreq = std::mem::zeroed();
    req.ifr_name[0] = b'l' as libc::c_char;
    req.ifr_name[1] = b'o' as libc::c_char;
    if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) == 0 {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req);
    }
    libc::close(fd);
}
