//! Telling a full disk from other write failures, and naming that disk.
//!
//! "No space left on device" alone does not say which disk: cascade writes
//! to the repository (git objects, worktrees), to `.cascade/` and to the
//! system's temp directory, which are often different file systems. The
//! mount table (`/proc/self/mountinfo` on Linux) says which one a path is on.

use std::error::Error;
use std::path::{Path, PathBuf};

/// Whether this I/O error means the disk (or the user's quota) is full.
pub fn is_disk_full_io(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == libc::ENOSPC || code == libc::EDQUOT)
        || mentions_disk_full(&e.to_string())
}

/// Whether `err` or any error in its source chain means the disk is full.
///
/// Besides `std::io::Error`s, it recognises errors that only carry the
/// operating system's text (libgit2's, for one, end in the `strerror` of
/// the failed call).
pub fn is_disk_full(err: &(dyn Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if is_disk_full_io(io) {
                return true;
            }
        } else if mentions_disk_full(&e.to_string()) {
            return true;
        }
        next = e.source();
    }
    false
}

/// Whether an error message carries the operating system's words for a
/// full disk or quota (for errors that were turned into text on the way).
pub fn mentions_disk_full(text: &str) -> bool {
    text.contains("No space left on device") || text.contains("Disk quota exceeded")
}

/// The file system a path is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// Where it is mounted, e.g. `/` or `/home`.
    pub mount_point: PathBuf,
    /// Its type, e.g. `ext4`, `tmpfs`, `overlay`.
    pub fs_type: String,
    /// What is mounted, e.g. `/dev/nvme0n1p2`.
    pub source: String,
    /// Bytes an unprivileged user may still write there, when known.
    pub available: Option<u64>,
}

impl Disk {
    /// Of the disks holding `paths`, the one with the least space left (the
    /// one that is full, when a write failed for want of space).
    pub fn fullest<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Option<Disk> {
        paths
            .into_iter()
            .filter_map(Disk::holding)
            .min_by_key(|d| d.available.unwrap_or(u64::MAX))
    }

    /// The file system holding `path` (or, when `path` does not exist yet,
    /// its nearest existing ancestor). `None` where the mount table cannot
    /// be read (not Linux).
    pub fn holding(path: &Path) -> Option<Disk> {
        let existing = nearest_existing(path)?;
        let real = std::fs::canonicalize(&existing).unwrap_or(existing);
        let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let (mount_point, fs_type, source) = table
            .lines()
            .filter_map(parse_mountinfo_line)
            .filter(|(mount, _, _)| real.starts_with(mount))
            // The longest mount point wins; among equal ones the last
            // mounted (it hides the others).
            .fold(None::<(PathBuf, String, String)>, |best, m| match &best {
                Some(b) if b.0.as_os_str().len() > m.0.as_os_str().len() => best,
                _ => Some(m),
            })?;
        Some(Disk {
            available: available_bytes(&mount_point),
            mount_point,
            fs_type,
            source,
        })
    }
}

impl std::fmt::Display for Disk {
    /// `the disk mounted at '/home' (ext4 on /dev/sda2, 0 B free)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the disk mounted at '{}' ({} on {}",
            self.mount_point.display(),
            self.fs_type,
            self.source
        )?;
        if let Some(bytes) = self.available {
            write!(f, ", {} free", human_bytes(bytes))?;
        }
        f.write_str(")")
    }
}

fn nearest_existing(path: &Path) -> Option<PathBuf> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    absolute
        .ancestors()
        .find(|p| p.exists())
        .map(Path::to_path_buf)
}

/// (mount point, fs type, source) of one `/proc/self/mountinfo` line:
/// `36 35 98:0 /root /mnt rw,noatime master:1 - ext3 /dev/root rw`.
fn parse_mountinfo_line(line: &str) -> Option<(PathBuf, String, String)> {
    let (left, right) = line.split_once(" - ")?;
    let mount = left.split(' ').nth(4)?;
    let mut right = right.split(' ');
    let fs_type = right.next()?.to_string();
    let source = unescape(right.next().unwrap_or(""));
    Some((PathBuf::from(unescape(mount)), fs_type, source))
}

/// Undoes the octal escapes of the mount table (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |n, c| n.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn available_bytes(mount: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mount.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized,
    // zero-initialised out-parameter that statvfs fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (rc == 0).then(|| (st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapped(std::io::Error);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("cannot save the state")
        }
    }
    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn full_disks_are_recognised_through_the_chain_and_in_text() {
        let full = Wrapped(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(is_disk_full(&full));
        let quota = std::io::Error::from_raw_os_error(libc::EDQUOT);
        assert!(is_disk_full(&quota));
        let denied = Wrapped(std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(!is_disk_full(&denied));
        let text = std::io::Error::other("failed to write 'x': No space left on device");
        assert!(is_disk_full_io(&text));
    }

    #[test]
    fn mountinfo_lines_parse_with_escapes() {
        let line = "36 35 98:0 / /mnt/my\\040disk rw,noatime shared:1 - ext4 /dev/sda2 rw";
        let (mount, fs, source) = parse_mountinfo_line(line).unwrap();
        assert_eq!(mount, PathBuf::from("/mnt/my disk"));
        assert_eq!(fs, "ext4");
        assert_eq!(source, "/dev/sda2");
        assert!(parse_mountinfo_line("garbage").is_none());
    }

    #[test]
    fn the_disk_of_a_missing_file_is_its_directorys() {
        if !Path::new("/proc/self/mountinfo").exists() {
            println!("skipped: no /proc/self/mountinfo on this system");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::holding(&dir.path().join("not/yet/there.json")).unwrap();
        assert!(dir
            .path()
            .canonicalize()
            .unwrap()
            .starts_with(&disk.mount_point));
        let text = disk.to_string();
        assert!(text.starts_with("the disk mounted at '"), "{text}");
        assert!(text.contains(" free)"), "{text}");
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
