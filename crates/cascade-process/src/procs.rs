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

/// Every descendant of `root` (not `root` itself), found through the
/// kernel's lists of each thread's children
/// (`/proc/<pid>/task/<tid>/children`): a few reads per thread of `root`
/// and of each descendant, where [`list`] reads every process of the
/// machine. `None` where those lists cannot be read (no `/proc`, a kernel
/// built without `CONFIG_PROC_CHILDREN`, `root` gone): the caller reads
/// [`list`].
///
/// For a sweep by a subreaper, whose orphaned descendants come back to it:
/// one whose parent exits while the walk goes on is adopted by `root`,
/// maybe after `root`'s children were read, so they are read again after
/// each walk until they hold nobody new.
pub fn descendants(root: u32) -> Option<Vec<Proc>> {
    if !kernel_lists_children() {
        return None;
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for _ in 0..WALKS {
        let mut next: Vec<u32> = children(root)?
            .into_iter()
            .filter(|p| !seen.contains(p))
            .collect();
        if next.is_empty() {
            return Some(out);
        }
        while let Some(pid) = next.pop() {
            if pid == root || !seen.insert(pid) {
                continue;
            }
            // Gone meanwhile: its children (if any) went to a subreaper.
            let Some(p) = stat(pid) else { continue };
            out.push(p);
            if let Some(kids) = children(pid) {
                next.extend(kids.into_iter().filter(|k| !seen.contains(k)));
            }
        }
    }
    None
}

/// How many times [`descendants`] walks from the root before it gives up
/// on a tree that keeps changing (and the caller reads the whole table),
/// and how many times [`children`] reads a process whose threads change.
const WALKS: usize = 8;

/// Whether this kernel keeps children lists (`CONFIG_PROC_CHILDREN`; the
/// file of the calling thread, Linux 3.17 on).
fn kernel_lists_children() -> bool {
    static LISTS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LISTS.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists())
}

/// The children of every thread of `pid`. A thread that ends hands its
/// children to another thread of its process, maybe one read already, so
/// the threads are read again until a read saw every thread listed before
/// and after it; every child seen on the way counts. `None`: the process
/// cannot be read (gone, or no `/proc`).
fn children(pid: u32) -> Option<Vec<u32>> {
    let threads = |pid: u32| -> Option<Vec<String>> {
        let mut tids: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        tids.sort_unstable();
        Some(tids)
    };
    let mut found = Vec::new();
    let mut before = threads(pid)?;
    for _ in 0..WALKS {
        let mut whole = true;
        for tid in &before {
            match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) {
                Ok(text) => found.extend(
                    text.split_ascii_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                ),
                // The thread ended: its children are with another one now.
                Err(_) => whole = false,
            }
        }
        // The process ended: its children went to a subreaper.
        let Some(after) = threads(pid) else { break };
        if whole && after == before {
            break;
        }
        before = after;
    }
    found.sort_unstable();
    found.dedup();
    Some(found)
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

    #[test]
    fn descendants_are_the_tree_below_a_process_as_the_whole_table_shows_it() {
        let me = std::process::id();
        if descendants(me).is_none() {
            println!("skipped: no children lists in /proc on this system");
            return;
        }
        // A child with a child of its own, both waiting (the pipe keeps the
        // shell from replacing itself with its last command).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        let walked: Vec<u32> = descendants(child.id())
            .unwrap()
            .iter()
            .map(|p| p.pid)
            .collect();
        let mine: Vec<u32> = descendants(me).unwrap().iter().map(|p| p.pid).collect();
        // The whole table, read while both still run, links them the same way.
        let table = list();
        let parent = |pid: u32| table.iter().find(|p| p.pid == pid).map(|p| p.ppid);
        let links = (parent(child.id()), parent(grandchild));
        let _ = child.kill();
        kill_pid(grandchild, libc::SIGKILL);
        let _ = child.wait();
        assert_eq!(walked, [grandchild], "below the child: its sleep only");
        assert!(
            mine.contains(&child.id()) && mine.contains(&grandchild),
            "{mine:?}"
        );
        assert!(!mine.contains(&me), "the root is not its own descendant");
        assert_eq!(links, (Some(me), Some(child.id())));
        assert_eq!(
            descendants(u32::MAX - 1),
            None,
            "no such process: no answer"
        );
    }
}
