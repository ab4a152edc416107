//! The system's process table as cascade needs it: who is alive, who is
//! whose parent, which group a process is in, when it started, and what its
//! environment says. Read from `/proc` on Linux; elsewhere the table is
//! empty and callers fall back to signalling process groups.

/// One process, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    /// Process group id.
    pub pgrp: u32,
    /// Exited but not reaped by its parent yet (or being torn down).
    pub zombie: bool,
    /// Start time in clock ticks since boot: with the pid, it identifies a
    /// process across pid reuse, and a descendant always starts after its
    /// ancestor.
    pub start: u64,
}

impl Proc {
    /// Running (not a zombie).
    pub fn alive(&self) -> bool {
        !self.zombie
    }
}

/// The process `pid`, if it exists.
pub fn stat(pid: u32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// `/proc/<pid>/stat`: `pid (comm) state ppid pgrp session ... starttime ...`;
/// the command name may hold spaces and parentheses, so fields are counted
/// from the last `)`.
fn parse_stat(pid: u32, text: &str) -> Option<Proc> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = *fields.first()?;
    Some(Proc {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        zombie: state == "Z" || state == "X" || state == "x",
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Every process visible in `/proc` (empty where there is none).
pub fn list() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .collect()
}

/// The environment of `pid` (`NAME=value` entries), if it may be read
/// (same user, and not a zombie).
pub fn environ(pid: u32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/environ")).ok()
}

/// The value of `name` in an environment read by [`environ`].
pub fn env_var<'a>(environ: &'a [u8], name: &str) -> Option<&'a [u8]> {
    environ.split(|b| *b == 0).find_map(|kv| {
        kv.strip_prefix(name.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
    })
}

/// Sends `signal` to every process of the group led by `pgid`.
/// Errors (typically ESRCH: the group is already gone) are ignored on purpose.
pub fn kill_group(pgid: u32, signal: i32) {
    if pgid == 0 || pgid > i32::MAX as u32 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; it has no
    // memory-safety preconditions.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), signal);
    }
}

/// Sends `signal` to one process; errors (it is gone) are ignored.
pub fn kill_pid(pid: u32, signal: i32) {
    if pid == 0 || pid > i32::MAX as u32 {
        return;
    }
    // SAFETY: kill(2) on a positive pid has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Whether any live (not zombie) process belongs to the group led by `pgid`.
///
/// A killed process stays a zombie until its new parent reaps it, and
/// `kill(-pgid, 0)` still counts zombies, so where `/proc` exists the group
/// is looked up there instead.
pub fn group_alive(pgid: u32) -> bool {
    if pgid == 0 || pgid > i32::MAX as u32 {
        return false;
    }
    if std::path::Path::new("/proc/self/stat").exists() {
        return list().iter().any(|p| p.pgrp == pgid && p.alive());
    }
    // SAFETY: signal 0 only checks for existence and permission.
    unsafe { libc::kill(-(pgid as libc::pid_t), 0) == 0 }
}

/// Whether a process with this pid exists (used for stale lock detection).
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether `pid` is gone or a zombie (dead, whoever reaps it).
pub fn dead(pid: u32) -> bool {
    match stat(pid) {
        Some(p) => p.zombie,
        None => !pid_alive(pid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_with_odd_command_names() {
        let line = "42 (a) b) (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        let p = parse_stat(42, line).unwrap();
        assert_eq!((p.ppid, p.pgrp, p.zombie, p.start), (1, 42, false, 123456));
        let z = parse_stat(7, "7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0").unwrap();
        assert!(z.zombie && !z.alive());
        assert!(parse_stat(1, "garbage").is_none());
    }

    #[test]
    fn this_process_is_listed_and_its_environment_read() {
        if stat(std::process::id()).is_none() {
            println!("skipped: no /proc on this system");
            return;
        }
        let me = std::process::id();
        assert!(list().iter().any(|p| p.pid == me && p.alive()));
        let env = environ(me).unwrap();
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(env_var(&env, "PATH"), Some(path.as_bytes()));
        assert_eq!(env_var(&env, "CASCADE_NO_SUCH_VARIABLE_XYZ"), None);
        assert!(!dead(me));
        assert!(dead(u32::MAX - 1));
    }
}
