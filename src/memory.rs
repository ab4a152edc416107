//! How the process's memory allocator is set up, before any thread starts.
//!
//! glibc's malloc gives threads arenas of their own, up to eight per core. A
//! run spreads its work over many threads (tokio's blocking pool: git, status
//! scans, process supervision), and the resident size grew by about 25 KB a
//! story, 335 MB for a run of 10,000 stories, against 23 MB of live heap at
//! 2,000 (heaptrack): freed memory kept resident across many arenas, our
//! reading is, held by the long-lived allocations among it (a story's record,
//! its events). With as many arenas as cores the threads that run at the same
//! time still each find one, and the run stays near its live heap: a
//! 4,000-story run of instant scripted agents (`--parallel 8`) peaked at 150 MB
//! before, 72 MB after, at the same CPU per story.

/// Limits glibc's malloc to one arena per core, unless the user chose
/// (`MALLOC_ARENA_MAX`, or a `glibc.malloc.arena_max` tunable). Call first
/// thing in `main`; a no-op on other C libraries.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let chosen = std::env::var_os("MALLOC_ARENA_MAX").is_some()
            || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.arena_max"));
        if chosen {
            return;
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = i32::try_from(cores.max(2)).unwrap_or(i32::MAX);
        // SAFETY: mallopt only sets an allocator parameter; no thread of
        // ours has started yet, and it is safe to call at any time anyway.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}
