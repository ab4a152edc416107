//! Nothing a supervised child starts outlives it.
//!
//! A child's process group is not enough: a descendant can leave it
//! (`setsid`, a daemon's double fork) and then survives every signal sent to
//! the group. So every child gets a token in its environment
//! ([`OWNER_VAR`]`=<cascade pid>.<n>`), which its descendants inherit, and
//! when the child is done (it exited, timed out or was cancelled) [`sweep`]
//! kills, until none is left:
//!
//! - every member of its process group,
//! - every process that carries its token (only processes that started
//!   after the child are read: a descendant is never older than its
//!   ancestor),
//! - every descendant of those, found through the parent links (which
//!   catches descendants that cleared their environment while their
//!   parents live).
//!
//! **Subreaper.** A process that called [`become_subreaper`] (the `cascade`
//! binary does, for the commands that run work) inherits the orphans of its
//! descendants instead of init: a daemon whose parent exited becomes
//! cascade's child. That has two uses: killed orphans are reaped here (no
//! zombies pile up over a long run), and when no supervised child is
//! running, any child of this process that cascade did not start itself
//! can only be such an orphan (one that also cleared its environment) and
//! is killed. Every child of such a process must be started through
//! [`crate::Spec`], which registers it; the caller of `become_subreaper`
//! promises that.
//!
//! **Everything at once.** [`kill_all`] (a second Ctrl-C) SIGKILLs every
//! registered group and every process carrying any token of this process,
//! refuses new children from then on, and waits (bounded) until they are
//! gone.
//!
//! Everything here reads `/proc`; where it does not exist only the process
//! groups are killed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::procs::{self, Proc};

/// The environment variable that marks a supervised child and everything
/// it starts: `<pid of the supervising process>.<n>`.
pub const OWNER_VAR: &str = "CASCADE_SUPERVISOR";

/// Rounds of "find, kill, look again" before a sweep gives up on a process
/// that keeps forking.
const MAX_ROUNDS: usize = 50;
/// How long a sweep waits for what it killed to be dead.
const DEATH_WAIT: Duration = Duration::from_secs(3);

static SUBREAPER: AtomicBool = AtomicBool::new(false);
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Children started through [`crate::Spec`] and still owned by a
/// `Running`, and orphans killed but not reaped yet.
#[derive(Default)]
struct Registry {
    /// pid -> every live supervised child.
    live: HashMap<u32, Child>,
    /// pid -> start time of adopted processes this process killed and must reap.
    to_reap: HashMap<u32, u64>,
}

/// A live supervised child: its token and what it is for.
struct Child {
    token: String,
    label: Label,
}

/// What a supervised child is for, as [`crate::Spec::label`] named it
/// (`kind` "agent", `name` the story; unnamed: "other" and the program).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub kind: String,
    pub name: String,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        // Plain maps: usable whatever panicked while holding them.
        .unwrap_or_else(|e| e.into_inner())
}

/// Makes this process the reaper of its descendants' orphans (Linux
/// `PR_SET_CHILD_SUBREAPER`). Returns whether it is one now. Call it once,
/// early, in a process whose children are all started through
/// [`crate::Spec`] (see the module doc); a library does not call it.
pub fn become_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integers.
        let on: libc::c_ulong = 1;
        let ok = unsafe {
            libc::prctl(
                libc::PR_SET_CHILD_SUBREAPER,
                on,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        } == 0;
        if ok {
            SUBREAPER.store(true, Ordering::SeqCst);
        }
        ok
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Whether [`become_subreaper`] succeeded in this process.
pub fn is_subreaper() -> bool {
    SUBREAPER.load(Ordering::SeqCst)
}

/// Whether [`kill_all`] has begun (no new child may start).
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// A token no other child of this process has.
pub(crate) fn new_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}.{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `spawn` and registers the child it returns, under the registry's
/// lock, so that no sweep sees the new child before it is registered.
pub(crate) fn spawn_registered<T>(
    token: &str,
    label: Label,
    spawn: impl FnOnce() -> std::io::Result<(T, u32)>,
) -> std::io::Result<(T, u32)> {
    let mut reg = registry();
    if stopping() {
        return Err(std::io::Error::other(
            "cascade is stopping and starts no new process",
        ));
    }
    let (child, pid) = spawn()?;
    reg.live.insert(
        pid,
        Child {
            token: token.to_string(),
            label,
        },
    );
    Ok((child, pid))
}

/// What a sweep found and killed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Processes killed (not counting the child itself).
    pub killed: Vec<u32>,
    /// Killed processes still not dead when the sweep stopped waiting.
    pub survivors: Vec<u32>,
}

/// Kills everything the child `leader` (token `token`, started at `start`)
/// left behind, waits until it is dead (bounded) and unregisters the child.
/// Blocking; the async side calls it on a blocking thread.
pub(crate) fn finish(leader: u32, token: &str, start: Option<u64>) -> Swept {
    let me = std::process::id();
    let young = start.unwrap_or(0);
    let needle = format!("{OWNER_VAR}={token}");
    // The child was reaped: should its pid already lead another supervised
    // child, that group is not this child's to kill.
    let group = registry()
        .live
        .get(&leader)
        .map_or(true, |c| c.token == token)
        .then_some(leader);
    let swept = kill_until_gone(|table, chosen| {
        if let Some(g) = group {
            procs::kill_group(g, libc::SIGKILL);
        }
        let mut out: Vec<Proc> = table
            .iter()
            .filter(|p| p.alive() && p.pid != me && p.pid != leader)
            .filter(|p| {
                Some(p.pgrp) == group || (p.start >= young && carries(p.pid, &needle, false))
            })
            .copied()
            .collect();
        add_descendants(table, &[leader], chosen, &mut out);
        out
    });
    let empty = {
        let mut reg = registry();
        if group.is_some() {
            reg.live.remove(&leader);
        }
        reg.live.is_empty()
    };
    if empty && is_subreaper() {
        // Not this child's doing (as far as anyone can tell): not in its result.
        sweep_orphans();
    }
    swept
}

/// Unregisters a child without sweeping (its `Running` was dropped; the
/// caller killed its group).
pub(crate) fn forget(leader: u32) {
    registry().live.remove(&leader);
}

/// With nothing supervised running, kills the children of this process
/// that it did not start (orphans it adopted as a subreaper).
fn sweep_orphans() -> Swept {
    let me = std::process::id();
    kill_until_gone(|table, _| {
        let reg = registry();
        if !reg.live.is_empty() {
            return Vec::new(); // something started meanwhile: not now
        }
        table
            .iter()
            .filter(|p| p.alive() && p.ppid == me)
            .copied()
            .collect()
    })
}

/// What [`kill_all`] stopped.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KilledAll {
    /// The supervised children whose process groups were killed, sorted
    /// by kind and name (a stable message).
    pub groups: Vec<Label>,
    /// Processes still alive when it stopped waiting (usually none).
    pub left: Vec<u32>,
}

/// SIGKILLs every supervised child of this process and everything they
/// started, refuses new children from now on, and waits up to `wait` for
/// all of it to be dead. Returns the children whose groups it killed and
/// what is still alive then. For a process about to exit (the second
/// Ctrl-C).
pub fn kill_all(wait: Duration) -> KilledAll {
    STOPPING.store(true, Ordering::SeqCst);
    let me = std::process::id();
    let prefix = format!("{OWNER_VAR}={me}.");
    let my_start = procs::stat(me).map(|p| p.start).unwrap_or(0);
    let deadline = Instant::now() + wait;
    // Taken once: no child starts from now on, so these are all there are.
    let mut groups: Vec<(u32, Label)> = registry()
        .live
        .iter()
        .map(|(pid, c)| (*pid, c.label.clone()))
        .collect();
    groups.sort_by(|a, b| (&a.1.kind, &a.1.name, a.0).cmp(&(&b.1.kind, &b.1.name, b.0)));
    let leaders: Vec<u32> = groups.iter().map(|(pid, _)| *pid).collect();
    let swept = kill_until_gone_by(deadline, |table, chosen| {
        for &l in &leaders {
            procs::kill_group(l, libc::SIGKILL);
        }
        let subreaper = is_subreaper();
        let mut out: Vec<Proc> = table
            .iter()
            .filter(|p| p.alive() && p.pid != me)
            .filter(|p| {
                leaders.contains(&p.pgrp)
                    || (subreaper && p.ppid == me)
                    || (p.start >= my_start && carries(p.pid, &prefix, true))
            })
            .copied()
            .collect();
        add_descendants(table, &leaders, chosen, &mut out);
        out
    });
    // Where /proc is missing, the groups were signalled; wait for them.
    while leaders.iter().any(|l| procs::group_alive(*l)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut left = swept.survivors;
    left.extend(leaders.iter().copied().filter(|l| procs::group_alive(*l)));
    KilledAll {
        groups: groups.into_iter().map(|(_, label)| label).collect(),
        left,
    }
}

/// Whether the environment of `pid` holds `needle` as a whole entry
/// (`prefix`: an entry starting with it).
fn carries(pid: u32, needle: &str, prefix: bool) -> bool {
    procs::environ(pid).is_some_and(|env| {
        env.split(|b| *b == 0).any(|kv| {
            if prefix {
                kv.starts_with(needle.as_bytes())
            } else {
                kv == needle.as_bytes()
            }
        })
    })
}

/// Adds to `out` every live process whose parent is in `roots`, in `out`
/// or in `chosen` (earlier rounds), transitively.
fn add_descendants(table: &[Proc], roots: &[u32], chosen: &HashMap<u32, u64>, out: &mut Vec<Proc>) {
    let me = std::process::id();
    loop {
        let before = out.len();
        for p in table.iter().filter(|p| p.alive() && p.pid != me) {
            let parent_in = roots.contains(&p.ppid)
                || chosen.contains_key(&p.ppid)
                || out.iter().any(|o| o.pid == p.ppid);
            if parent_in && !out.iter().any(|o| o.pid == p.pid) {
                out.push(*p);
            }
        }
        if out.len() == before {
            return;
        }
    }
}

/// The processes a sweep looks among. A subreaper's: its descendants
/// ([`procs::descendants`]), since whatever its children start stays below
/// it (an orphan is adopted by it, a daemon's `setsid` leaves the group,
/// not the tree), so the cost follows what cascade started, not how many
/// processes the machine runs (a read of `/proc` per process, about 11 µs
/// each: a millisecond per sweep on a quiet machine, several on a
/// desktop). Otherwise, or where the kernel keeps no children lists, every
/// process.
fn sweep_table() -> Vec<Proc> {
    if is_subreaper() {
        if let Some(table) = procs::descendants(std::process::id()) {
            return table;
        }
    }
    procs::list()
}

fn kill_until_gone(select: impl FnMut(&[Proc], &HashMap<u32, u64>) -> Vec<Proc>) -> Swept {
    kill_until_gone_by(Instant::now() + DEATH_WAIT, select)
}

/// Finds targets with `select` (given the process table and what earlier
/// rounds chose), SIGKILLs them, and looks again until a round finds
/// nothing; then waits until every target is dead (or `deadline`), and
/// reaps the ones that were adopted by this process.
fn kill_until_gone_by(
    deadline: Instant,
    mut select: impl FnMut(&[Proc], &HashMap<u32, u64>) -> Vec<Proc>,
) -> Swept {
    let mut chosen: HashMap<u32, u64> = HashMap::new();
    for _ in 0..MAX_ROUNDS {
        let table = sweep_table();
        let targets = select(&table, &chosen);
        let fresh: Vec<&Proc> = targets
            .iter()
            .filter(|p| chosen.get(&p.pid) != Some(&p.start))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for p in fresh {
            procs::kill_pid(p.pid, libc::SIGKILL);
            chosen.insert(p.pid, p.start);
        }
    }
    if chosen.is_empty() {
        reap_adopted(&HashMap::new());
        return Swept::default();
    }
    let gone = |pid: &u32, start: &u64| match procs::stat(*pid) {
        Some(p) => p.zombie || p.start != *start,
        None => true,
    };
    while !chosen.iter().all(|(p, s)| gone(p, s)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    reap_adopted(&chosen);
    let mut killed: Vec<u32> = chosen.keys().copied().collect();
    killed.sort_unstable();
    let survivors = killed
        .iter()
        .copied()
        .filter(|p| !gone(p, &chosen[p]))
        .collect();
    Swept { killed, survivors }
}

/// Reaps the killed processes that are zombie children of this process
/// (orphans it adopted as a subreaper), now or in a later call. Never a
/// registered child: tokio waits for those itself.
fn reap_adopted(killed: &HashMap<u32, u64>) {
    let me = std::process::id();
    let mut reg = registry();
    for (&pid, &start) in killed {
        if !reg.live.contains_key(&pid) {
            reg.to_reap.insert(pid, start);
        }
    }
    let live: std::collections::HashSet<u32> = reg.live.keys().copied().collect();
    reg.to_reap.retain(|&pid, &mut start| {
        if live.contains(&pid) {
            return false;
        }
        match procs::stat(pid) {
            // Someone else's child, or gone: not ours to reap.
            Some(p) if p.start == start && p.ppid == me => {
                if p.zombie {
                    let mut status = 0;
                    // SAFETY: waitpid on a specific pid with WNOHANG; the
                    // pid is a zombie child of this process that no other
                    // code waits for (not registered).
                    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
                    false
                } else {
                    true // still dying; reaped next time
                }
            }
            Some(p) if p.start == start => true, // may be re-parented to us later
            _ => false,
        }
    });
}

#[cfg(test)]
mod tests;
