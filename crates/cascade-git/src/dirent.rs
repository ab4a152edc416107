//! One directory's entries and their stat data, for the fingerprint walk.
//!
//! The walk reads every directory of a worktree and stats every file in it,
//! 20,000 of them in a large tree: what each entry costs besides its system
//! calls is most of what a clean fingerprint costs. On Linux a [`Listing`]
//! reads the entries with `getdents64` into one buffer and stats them with
//! `statx` relative to the open directory (rustix), so an entry costs no
//! allocation at all (`std::fs::ReadDir` allocates a name per entry and
//! shares the directory handle through an `Arc`). Elsewhere it goes through
//! `std::fs`, with the same interface.

use std::path::{Path, PathBuf};

use crate::statindex::Stat;

/// An entry's type as the directory listing reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
    Symlink,
    /// A fifo, socket or device: never part of a tree.
    Other,
    /// The filesystem does not say; stat the entry to know.
    Unknown,
}

/// What `lstat` says about an entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub stat: Stat,
    /// `st_mode`: type and permission bits.
    pub mode: u32,
}

impl Meta {
    pub fn of(meta: &std::fs::Metadata) -> Meta {
        use std::os::unix::fs::MetadataExt;
        Meta {
            stat: Stat::of(meta),
            mode: meta.mode(),
        }
    }

    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }

    pub fn kind(&self) -> Kind {
        match self.mode & S_IFMT {
            S_IFDIR => Kind::Dir,
            S_IFREG => Kind::File,
            S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        }
    }
}

/// File type bits of `st_mode` (the same on every Unix).
pub(crate) const S_IFMT: u32 = 0o170000;
pub(crate) const S_IFDIR: u32 = 0o040000;
pub(crate) const S_IFREG: u32 = 0o100000;
pub(crate) const S_IFLNK: u32 = 0o120000;

/// The entries of one directory (without `.` and `..`).
pub(crate) struct Listing {
    dir: PathBuf,
    /// The open directory (entries are stat'ed relative to it).
    #[cfg(target_os = "linux")]
    fd: rustix::fd::OwnedFd,
    names: Names,
}

/// Entry names in one buffer.
#[derive(Default)]
struct Names {
    /// The names, each followed by a NUL.
    bytes: Vec<u8>,
    /// (start of the name in `bytes`, its length without the NUL, type).
    entries: Vec<(usize, usize, Kind)>,
}

impl Names {
    fn push(&mut self, name: &[u8], kind: Kind) {
        if name == b"." || name == b".." {
            return;
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        self.bytes.push(0);
        self.entries.push((start, name.len(), kind));
    }

    /// Name `i` with its NUL.
    fn with_nul(&self, i: usize) -> &[u8] {
        let (start, len, _) = self.entries[i];
        &self.bytes[start..=start + len]
    }
}

impl Listing {
    /// The number of entries.
    pub fn len(&self) -> usize {
        self.names.entries.len()
    }

    /// Entry `i`'s name and type.
    pub fn entry(&self, i: usize) -> (&[u8], Kind) {
        let (start, len, kind) = self.names.entries[i];
        (&self.names.bytes[start..start + len], kind)
    }

    /// The full path of entry `i`.
    pub fn path(&self, i: usize) -> PathBuf {
        use std::os::unix::ffi::OsStrExt;
        self.dir.join(std::ffi::OsStr::from_bytes(self.entry(i).0))
    }
}

#[cfg(target_os = "linux")]
impl Listing {
    /// Reads the directory at `dir`.
    pub fn read(dir: &Path) -> std::io::Result<Listing> {
        use rustix::fs::{openat, Mode, OFlags, RawDir, CWD};
        let fd = openat(
            CWD,
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut names = Names::default();
        let mut buf: Vec<u8> = Vec::with_capacity(32 * 1024);
        loop {
            let mut raw = RawDir::new(&fd, buf.spare_capacity_mut());
            let mut too_small = false;
            while let Some(entry) = raw.next() {
                match entry {
                    Ok(e) => names.push(e.file_name().to_bytes(), kind_of(e.file_type())),
                    // A name longer than the buffer holds: grow it and read
                    // on (the file descriptor keeps the directory offset).
                    Err(rustix::io::Errno::INVAL) => {
                        too_small = true;
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if !too_small {
                return Ok(Listing {
                    dir: dir.to_path_buf(),
                    fd,
                    names,
                });
            }
            buf.reserve(buf.capacity() * 2);
        }
    }

    /// `lstat` of entry `i`, relative to the open directory.
    pub fn stat(&self, i: usize) -> std::io::Result<Meta> {
        use rustix::fs::{statx, AtFlags, StatxFlags};
        let name = std::ffi::CStr::from_bytes_with_nul(self.names.with_nul(i))
            .map_err(std::io::Error::other)?;
        let time = |t: rustix::fs::StatxTimestamp| crate::statindex::Time {
            sec: t.tv_sec,
            nsec: t.tv_nsec,
        };
        match statx(
            &self.fd,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BASIC_STATS,
        ) {
            Ok(x) => Ok(Meta {
                stat: Stat {
                    size: x.stx_size,
                    mtime: time(x.stx_mtime),
                    ctime: time(x.stx_ctime),
                    ino: x.stx_ino,
                },
                mode: u32::from(x.stx_mode),
            }),
            // A kernel (or sandbox) without statx.
            Err(rustix::io::Errno::NOSYS) => {
                std::fs::symlink_metadata(self.path(i)).map(|m| Meta::of(&m))
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(target_os = "linux")]
fn kind_of(t: rustix::fs::FileType) -> Kind {
    use rustix::fs::FileType;
    match t {
        FileType::Directory => Kind::Dir,
        FileType::RegularFile => Kind::File,
        FileType::Symlink => Kind::Symlink,
        FileType::Unknown => Kind::Unknown,
        _ => Kind::Other,
    }
}

#[cfg(not(target_os = "linux"))]
impl Listing {
    /// Reads the directory at `dir`.
    pub fn read(dir: &Path) -> std::io::Result<Listing> {
        use std::os::unix::ffi::OsStrExt;
        let mut names = Names::default();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = match entry.file_type() {
                Ok(t) if t.is_dir() => Kind::Dir,
                Ok(t) if t.is_file() => Kind::File,
                Ok(t) if t.is_symlink() => Kind::Symlink,
                Ok(_) => Kind::Other,
                Err(_) => Kind::Unknown,
            };
            names.push(entry.file_name().as_bytes(), kind);
        }
        Ok(Listing {
            dir: dir.to_path_buf(),
            names,
        })
    }

    /// `lstat` of entry `i`.
    pub fn stat(&self, i: usize) -> std::io::Result<Meta> {
        std::fs::symlink_metadata(self.path(i)).map(|m| Meta::of(&m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_names_types_and_stat_data_like_std() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(d.join("f.txt"), "12345").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::os::unix::fs::symlink("f.txt", d.join("link")).unwrap();
        let long = "n".repeat(250);
        std::fs::write(d.join(&long), "").unwrap();
        let listing = Listing::read(d).unwrap();
        let mut seen: Vec<(String, Kind)> = (0..listing.len())
            .map(|i| {
                let (name, kind) = listing.entry(i);
                (String::from_utf8_lossy(name).into_owned(), kind)
            })
            .collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        let kinds: Vec<Kind> = seen.iter().map(|s| s.1).collect();
        assert_eq!(seen.len(), 4);
        assert!(kinds.iter().all(|k| *k != Kind::Other));
        for i in 0..listing.len() {
            let std_meta = std::fs::symlink_metadata(listing.path(i)).unwrap();
            let ours = listing.stat(i).unwrap();
            assert_eq!(ours.stat, Stat::of(&std_meta));
            assert_eq!(ours.mode, Meta::of(&std_meta).mode);
            let (_, kind) = listing.entry(i);
            assert!(kind == Kind::Unknown || kind == ours.kind(), "{kind:?}");
        }
        assert!(Listing::read(&d.join("missing")).is_err());
    }

    #[test]
    fn a_directory_with_many_entries_is_read_whole() {
        let tmp = tempfile::tempdir().unwrap();
        // More than one getdents buffer's worth of long names.
        for i in 0..600 {
            std::fs::write(tmp.path().join(format!("{i:0>200}")), "").unwrap();
        }
        assert_eq!(Listing::read(tmp.path()).unwrap().len(), 600);
    }
}
