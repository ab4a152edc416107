//! Atomic replacement of a file: temp file beside it, optional fsync, rename.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How far a finished [`write_atomic`] is guaranteed to survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The data is flushed to the disk (fsync) before the rename: the new
    /// content survives a crash of the machine. For files a person edits or
    /// that nothing else can rebuild (plans, sessions).
    Synced,
    /// Rename only: a crash of cascade leaves the old or the new content,
    /// a crash of the machine may lose the last write. For files rewritten
    /// often during a run (`prd.json`'s statuses, caches), whose facts git
    /// or the run database also hold; an fsync per write made them the
    /// bottleneck of large runs.
    Renamed,
}

/// Replaces `path` with `bytes` through a temp file in the same directory
/// and a rename, creating the directory when needed.
///
/// When `path` is a symbolic link (a plan kept elsewhere and linked into
/// the project), the file it points to is replaced and the link stays. The
/// permissions of the file replaced are kept. On any failure the temp file
/// is removed before the error is returned (on a full disk, that gives the
/// space back), and `path` is left as it was.
pub fn write_atomic(path: &Path, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
    replace(path, bytes, durability, false)
}

/// [`write_atomic`] for a file only its owner may read (mode 0600, from
/// the temp file's creation on, whatever the file replaced had): saved
/// agent sessions, which hold prompts, file contents and tool output.
pub fn write_atomic_private(
    path: &Path,
    bytes: &[u8],
    durability: Durability,
) -> std::io::Result<()> {
    replace(path, bytes, durability, true)
}

fn replace(
    path: &Path,
    bytes: &[u8],
    durability: Durability,
    private: bool,
) -> std::io::Result<()> {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    let target;
    let path = if is_link {
        target = std::fs::canonicalize(path)?;
        target.as_path()
    } else {
        path
    };
    let dir = parent_dir(path);
    std::fs::create_dir_all(dir)?;
    let tmp = temp_path(dir, &file_name(path));
    let result = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        if private {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&tmp)?;
        file.write_all(bytes)?;
        if private {
            use std::os::unix::fs::PermissionsExt;
            // The mode above is masked by the umask, never widened by it.
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        } else if let Ok(meta) = std::fs::metadata(path) {
            file.set_permissions(meta.permissions())?;
        }
        if durability == Durability::Synced {
            file.sync_all()?;
        }
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Temporary files that an atomic write of `path` leaves behind when the
/// writing process is killed between creating and renaming them
/// (`.<name>.<pid>.<n>.tmp` beside it). A caller that holds the run lock
/// knows no write of this file is under way and may remove them.
pub fn leftover_write_temps(path: &Path) -> Vec<PathBuf> {
    let (Some(_), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(parent_dir(path)) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            let file = e.file_name();
            let file = file.to_string_lossy();
            file.strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(".tmp"))
                .and_then(|rest| rest.split_once('.'))
                .is_some_and(|(pid, n)| all_digits(pid) && all_digits(n))
        })
        .map(|e| e.path())
        .collect()
}

/// Removes the temp files of `path` ([`leftover_write_temps`]) whose writer
/// is gone: its pid (in the name) is not this process and no process has it.
/// Safe without any lock: a live writer's temp file is never touched (a pid
/// the system gave to a new process since keeps a stale file, the safe
/// side). Returns the files removed.
pub fn remove_dead_writers_temps(path: &Path) -> Vec<PathBuf> {
    let me = std::process::id();
    leftover_write_temps(path)
        .into_iter()
        .filter(|tmp| writer_pid(tmp).is_some_and(|pid| pid != me && !pid_exists(pid)))
        .filter(|tmp| std::fs::remove_file(tmp).is_ok())
        .collect()
}

/// The pid in a temp file's name (`.<name>.<pid>.<n>.tmp`).
fn writer_pid(tmp: &Path) -> Option<u32> {
    let name = tmp.file_name()?.to_str()?;
    let mut parts = name.strip_suffix(".tmp")?.rsplit('.');
    let _n = parts.next()?;
    parts.next()?.parse().ok()
}

/// Whether a process `pid` exists (`kill(pid, 0)`: only ESRCH says no, so
/// a process of another user counts as existing).
fn pid_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 sends nothing; it only checks that the pid exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The directory of `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_string())
}

/// A temp name no other write of this process uses at the same time
/// (several threads may replace the same file, e.g. cache entries).
fn temp_path(dir: &Path, name: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_creates_directories_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/state.json");
        write_atomic(&path, b"one", Durability::Renamed).unwrap();
        write_atomic(&path, b"two", Durability::Synced).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(names(&dir.path().join("a/b")), ["state.json"]);
    }

    #[test]
    fn a_failed_write_removes_its_temp_and_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_atomic(&path, b"old", Durability::Renamed).unwrap();
        // The rename fails: a directory is in the way of the target.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir_all(blocked.join("inside")).unwrap();
        assert!(write_atomic(&blocked, b"new", Durability::Renamed).is_err());
        assert_eq!(names(dir.path()), ["blocked", "state.json"]);
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
    }

    #[test]
    fn a_private_write_is_owner_only_whatever_it_replaces() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("sessions/s.json");
        write_atomic_private(&p, b"{}", Durability::Renamed).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p), 0o600);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_atomic_private(&p, b"{\"a\":1}", Durability::Renamed).unwrap();
        assert_eq!(mode(&p), 0o600);
        assert_eq!(std::fs::read(&p).unwrap(), b"{\"a\":1}");
    }

    #[test]
    fn a_link_is_followed_and_permissions_are_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, "x").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("prd.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_atomic(&link, b"y", Durability::Synced).unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"y");
        let mode = std::fs::metadata(&real).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn leftover_write_temps_finds_only_this_files_temps() {
        let dir = tempfile::tempdir().unwrap();
        let prd = dir.path().join("prd.json");
        for name in [
            ".prd.json.123.0.tmp",
            ".prd.json.45.7.tmp",
            ".prd.json.x.0.tmp",
            ".prd.json.12.tmp",
            ".other.json.1.0.tmp",
            "prd.json",
        ] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        let mut found: Vec<String> = leftover_write_temps(&prd)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        found.sort();
        assert_eq!(found, [".prd.json.123.0.tmp", ".prd.json.45.7.tmp"]);
    }

    #[test]
    fn only_the_temps_of_dead_writers_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        // A pid that is gone: a child spawned and reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let temps = [
            format!(".state.json.{dead}.0.tmp"),
            format!(".state.json.{me}.3.tmp"),
            ".state.json.1.0.tmp".to_string(),
        ];
        for n in &temps {
            std::fs::write(dir.path().join(n), "x").unwrap();
        }
        let removed = remove_dead_writers_temps(&state);
        assert_eq!(removed, [dir.path().join(&temps[0])]);
        let mut left = temps[1..].to_vec();
        left.sort();
        assert_eq!(names(dir.path()), left);
    }
}
