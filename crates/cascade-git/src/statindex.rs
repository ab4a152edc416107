//! The stat index: what cascade remembers about a worktree's files between
//! two fingerprints, so that a file whose stat data has not changed is never
//! read or hashed again (git's index does the same for tracked files; this
//! one also covers untracked and modified files, and lets a clean scan skip
//! reading git's index).
//!
//! One file per worktree, `<dir>/<hash of the worktree path>.idx`, where
//! `<dir>` is chosen by the caller (the gate cache keeps it in
//! `.cascade/gate-cache/stat/`). It holds, sorted by path, every file of the
//! last fingerprint: path, git mode, whether git tracks it, [`Stat`] data
//! (size, mtime, ctime, inode) and its git blob id; plus the stat data of
//! git's index file when it was read, the reference time of the scan, and
//! the digest of that fingerprint (so a scan that finds nothing changed
//! neither copies nor folds the file list).
//!
//! **Trust.** A record gives a file's blob id only when the file's mode and
//! stat data are unchanged *and* it is not racy: its mtime and ctime are
//! before the reference time, which is the filesystem's own clock read
//! before the scan that wrote the record started ([`FsClock`]). A file changed
//! again within the same timestamp tick keeps its stat data; only a tick
//! that had already ended before the scan can vouch that nothing changed
//! since. This is git's racy-git rule, with the reference taken before the
//! files were looked at rather than when the index was written, so a change
//! made while the scan ran is never trusted either.
//!
//! **Validation.** A file with another magic, another [`VERSION`], a bad
//! checksum (corrupt or truncated), unsorted or duplicate paths, or the path
//! of another worktree is ignored: the next scan rebuilds it from scratch.
//! Writes go to a temp file that is renamed into place, so two processes
//! scanning the same worktree each leave a whole, valid index.

use std::fs::{File, Metadata};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use git2::Oid;

/// Format version: a file of any other version is rebuilt, never read.
pub const VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"CSTATIDX";
const CHECKSUM_LEN: usize = 32;
/// How many worktrees' indexes a directory keeps (newest first).
pub const KEEP_INDEXES: usize = 32;
/// Bytes of a record after its path: mode, flags, stat data, oid.
const RECORD_FIXED: usize = 4 + 4 + 40 + 20;
/// Record flag: git tracks the path.
const TRACKED: u32 = 1;

/// A filesystem timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Time {
    pub sec: i64,
    pub nsec: u32,
}

/// The stat data that says whether a file may have changed (git's choice
/// minus uid/gid/dev: size, mtime, ctime, inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Stat {
    pub size: u64,
    pub mtime: Time,
    pub ctime: Time,
    pub ino: u64,
}

impl Stat {
    /// The stat data of a file's metadata (not following symlinks if the
    /// metadata did not).
    pub fn of(meta: &Metadata) -> Stat {
        Stat {
            size: meta.size(),
            mtime: Time {
                sec: meta.mtime(),
                nsec: meta.mtime_nsec() as u32,
            },
            ctime: Time {
                sec: meta.ctime(),
                nsec: meta.ctime_nsec() as u32,
            },
            ino: meta.ino(),
        }
    }

    /// Whether the file changed at or after `reference`: within the tick
    /// the reference fell in, a later change may leave the same stat data.
    pub fn racy(&self, reference: Time) -> bool {
        self.mtime >= reference || self.ctime >= reference
    }
}

/// The filesystem's clock: a fresh temp file's mtime in the index
/// directory. Reading it before a scan gives the reference time of the
/// records that scan writes; the temp file then receives the new index (or
/// is removed when there is nothing to write).
#[derive(Debug)]
pub struct FsClock {
    file: Option<File>,
    path: PathBuf,
    /// The file's mtime: "now" as the filesystem counts it.
    pub now: Time,
}

impl FsClock {
    /// Creates the temp file in `dir` (created if missing).
    pub fn read(dir: &Path) -> std::io::Result<FsClock> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(dir)?;
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".tmp-{}-{seq}", std::process::id()));
        let file = File::options().write(true).create_new(true).open(&path)?;
        let now = match file.metadata() {
            Ok(meta) => Stat::of(&meta).mtime,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        Ok(FsClock {
            file: Some(file),
            path,
            now,
        })
    }

    /// Writes `bytes` into the temp file and renames it to `target`.
    pub fn commit(mut self, target: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = self
            .file
            .take()
            .ok_or_else(|| std::io::Error::other("clock file already used"))?;
        file.write_all(bytes)?;
        drop(file);
        std::fs::rename(&self.path, target)
    }
}

impl Drop for FsClock {
    fn drop(&mut self) {
        // Not committed (or the rename failed): leave nothing behind.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One remembered file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Repository-relative path, `/`-separated.
    pub path: &'a [u8],
    /// Git mode (see [`crate::status::mode`]).
    pub mode: u32,
    /// Whether git's index holds the path.
    pub tracked: bool,
    pub stat: Stat,
    /// Git blob id (a commit id for a submodule).
    pub oid: Oid,
}

/// Why a stat index file was not used (it is rebuilt).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("not a stat index")]
    Magic,
    #[error("stat index version {0}, expected {VERSION}")]
    Version(u32),
    #[error("stat index checksum mismatch (corrupt or truncated)")]
    Checksum,
    #[error("stat index is malformed at byte {0}")]
    Malformed(usize),
    #[error("stat index paths are not sorted and unique")]
    Order,
    #[error("stat index belongs to another worktree")]
    OtherWorktree,
}

/// A loaded, validated stat index. Records are decoded from the bytes when
/// asked for (the index of a large tree is megabytes; copying it into
/// structs would double what a scan touches).
pub struct StatIndex {
    buf: Vec<u8>,
    reference: Time,
    digest: [u8; 32],
    git_index: Option<Stat>,
    /// Where each record starts (its path length), in path order.
    offsets: Vec<u32>,
}

impl std::fmt::Debug for StatIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatIndex")
            .field("records", &self.offsets.len())
            .field("reference", &self.reference)
            .field("git_index", &self.git_index)
            .finish()
    }
}

impl StatIndex {
    /// Parses and validates the bytes of an index written for `workdir`.
    pub fn parse(buf: Vec<u8>, workdir: &Path) -> Result<StatIndex, Invalid> {
        if !buf.starts_with(MAGIC) {
            return Err(Invalid::Magic);
        }
        let mut r = Reader {
            buf: &buf,
            pos: MAGIC.len(),
        };
        let version = r.u32()?;
        if version != VERSION {
            return Err(Invalid::Version(version));
        }
        let body = buf
            .len()
            .checked_sub(CHECKSUM_LEN)
            .ok_or(Invalid::Checksum)?;
        if body < r.pos || blake3::hash(&buf[..body]).as_bytes()[..] != buf[body..] {
            return Err(Invalid::Checksum);
        }
        let r = &mut Reader {
            buf: &buf[..body],
            pos: r.pos,
        };
        let reference = r.time()?;
        let has_git_index = r.u32()? != 0;
        let git_index = Some(r.stat()?).filter(|_| has_git_index);
        let digest = r.array()?;
        if r.bytes()? != workdir.as_os_str().as_bytes() {
            return Err(Invalid::OtherWorktree);
        }
        let count = r.u32()? as usize;
        // Each record takes at least its fixed part: bound the allocation.
        let mut offsets = Vec::with_capacity(count.min(body / (4 + RECORD_FIXED) + 1));
        let mut prev: &[u8] = &[];
        for i in 0..count {
            let at = u32::try_from(r.pos).map_err(|_| Invalid::Malformed(r.pos))?;
            let path = r.bytes()?;
            r.take(RECORD_FIXED)?;
            if i > 0 && prev >= path {
                return Err(Invalid::Order);
            }
            prev = path;
            offsets.push(at);
        }
        if r.pos != body {
            return Err(Invalid::Malformed(r.pos));
        }
        Ok(StatIndex {
            buf,
            reference,
            digest,
            git_index,
            offsets,
        })
    }

    /// The reference time: records modified at or after it are racy.
    pub fn reference(&self) -> Time {
        self.reference
    }

    /// The digest of the fingerprint these records make (see
    /// [`crate::fingerprint`]).
    pub fn digest(&self) -> [u8; 32] {
        self.digest
    }

    /// Stat data of git's index file when this index was written (`None`:
    /// there was none).
    pub fn git_index(&self) -> Option<Stat> {
        self.git_index
    }

    /// How many files it remembers.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Whether it remembers no file.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Record `i` (in path order); `i < len()`.
    pub fn record(&self, i: usize) -> Record<'_> {
        Record {
            path: self.path(i),
            mode: self.mode(i),
            tracked: self.tracked(i),
            stat: self.stat(i),
            oid: self.oid(i),
        }
    }

    /// The path of record `i`.
    pub fn path(&self, i: usize) -> &[u8] {
        // Every offset was checked by `parse`: whole records lie in `buf`.
        let at = self.offsets[i] as usize;
        let len = u32::from_le_bytes(fixed(&self.buf, at)) as usize;
        &self.buf[at + 4..at + 4 + len]
    }

    /// Where the fixed part of record `i` starts (after its path).
    fn fixed_part(&self, i: usize) -> usize {
        let at = self.offsets[i] as usize;
        at + 4 + u32::from_le_bytes(fixed(&self.buf, at)) as usize
    }

    /// The git mode of record `i`.
    pub fn mode(&self, i: usize) -> u32 {
        u32::from_le_bytes(fixed(&self.buf, self.fixed_part(i)))
    }

    /// Whether git tracked the path of record `i`.
    pub fn tracked(&self, i: usize) -> bool {
        u32::from_le_bytes(fixed(&self.buf, self.fixed_part(i) + 4)) & TRACKED != 0
    }

    /// The stat data of record `i`.
    pub fn stat(&self, i: usize) -> Stat {
        let at = self.fixed_part(i) + 8;
        Reader {
            buf: &self.buf[at..at + 40],
            pos: 0,
        }
        .stat()
        .unwrap_or_default()
    }

    /// The blob id of record `i`.
    pub fn oid(&self, i: usize) -> Oid {
        let at = self.fixed_part(i) + 48;
        // Twenty bytes always make an id.
        Oid::from_bytes(&self.buf[at..at + 20]).unwrap_or_else(|_| Oid::zero())
    }

    /// Whether record `i` still describes a file whose current mode and
    /// stat data are `mode` and `stat` (see the module doc), without
    /// decoding its id.
    pub fn vouches(&self, i: usize, mode: u32, stat: &Stat) -> bool {
        self.mode(i) == mode && self.stat(i) == *stat && !stat.racy(self.reference)
    }

    /// The records, sorted by path.
    pub fn records(&self) -> impl ExactSizeIterator<Item = Record<'_>> + '_ {
        (0..self.offsets.len()).map(|i| self.record(i))
    }
}

/// `N` bytes at `at` (in bounds: callers checked).
fn fixed<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&buf[at..at + N]);
    a
}

/// Encodes an index; `records` must be sorted by path without duplicates
/// (as a fingerprint's files are) and `digest` the digest of their
/// fingerprint.
pub fn encode(
    workdir: &Path,
    reference: Time,
    git_index: Option<Stat>,
    digest: &[u8; 32],
    records: &[Record<'_>],
) -> Vec<u8> {
    let mut w = Vec::with_capacity(64 + records.len() * 96);
    w.extend_from_slice(MAGIC);
    w.extend_from_slice(&VERSION.to_le_bytes());
    put_time(&mut w, reference);
    w.extend_from_slice(&u32::from(git_index.is_some()).to_le_bytes());
    put_stat(&mut w, &git_index.unwrap_or_default());
    w.extend_from_slice(digest);
    put_bytes(&mut w, workdir.as_os_str().as_bytes());
    w.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for r in records {
        put_bytes(&mut w, r.path);
        w.extend_from_slice(&r.mode.to_le_bytes());
        w.extend_from_slice(&(if r.tracked { TRACKED } else { 0 }).to_le_bytes());
        put_stat(&mut w, &r.stat);
        w.extend_from_slice(r.oid.as_bytes());
    }
    let sum = blake3::hash(&w);
    w.extend_from_slice(sum.as_bytes());
    w
}

fn put_time(w: &mut Vec<u8>, t: Time) {
    w.extend_from_slice(&t.sec.to_le_bytes());
    w.extend_from_slice(&t.nsec.to_le_bytes());
}

fn put_stat(w: &mut Vec<u8>, s: &Stat) {
    w.extend_from_slice(&s.size.to_le_bytes());
    put_time(w, s.mtime);
    put_time(w, s.ctime);
    w.extend_from_slice(&s.ino.to_le_bytes());
}

fn put_bytes(w: &mut Vec<u8>, b: &[u8]) {
    w.extend_from_slice(&(b.len() as u32).to_le_bytes());
    w.extend_from_slice(b);
}

/// A bounds-checked little-endian reader.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Invalid> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or(Invalid::Malformed(self.pos))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Invalid> {
        Ok(fixed(self.take(N)?, 0))
    }

    fn u32(&mut self) -> Result<u32, Invalid> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, Invalid> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn time(&mut self) -> Result<Time, Invalid> {
        let sec = i64::from_le_bytes(self.array()?);
        Ok(Time {
            sec,
            nsec: self.u32()?,
        })
    }

    fn stat(&mut self) -> Result<Stat, Invalid> {
        Ok(Stat {
            size: self.u64()?,
            mtime: self.time()?,
            ctime: self.time()?,
            ino: self.u64()?,
        })
    }

    /// A length-prefixed byte string.
    fn bytes(&mut self) -> Result<&'a [u8], Invalid> {
        let len = self.u32()? as usize;
        self.take(len)
    }
}

/// The directory that holds the stat indexes of a repository's worktrees.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Indexes under `dir` (created on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The index file of the worktree rooted at `workdir`.
    pub fn file_for(&self, workdir: &Path) -> PathBuf {
        let h = blake3::hash(workdir.as_os_str().as_bytes()).to_hex();
        self.dir.join(format!("{}.idx", &h[..16]))
    }

    /// The worktree's index, or `None` when there is none or it is invalid
    /// (then it is rebuilt by the next [`Store::save`]).
    pub fn load(&self, workdir: &Path) -> Option<StatIndex> {
        let buf = std::fs::read(self.file_for(workdir)).ok()?;
        StatIndex::parse(buf, workdir).ok()
    }

    /// Reads the filesystem's clock before a scan (see [`FsClock`]).
    pub fn clock(&self) -> std::io::Result<FsClock> {
        FsClock::read(&self.dir)
    }

    /// Replaces the worktree's index with `bytes` (through the clock's temp
    /// file); when the worktree had none, the oldest indexes beyond
    /// [`KEEP_INDEXES`] go.
    pub fn save(&self, clock: FsClock, workdir: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let target = self.file_for(workdir);
        let fresh = !target.exists();
        clock.commit(&target, bytes)?;
        if fresh {
            self.prune();
        }
        Ok(())
    }

    /// Keeps the newest [`KEEP_INDEXES`] index files.
    fn prune(&self) {
        keep_newest(&self.dir, ".idx", KEEP_INDEXES);
    }
}

/// Deletes the files of `dir` whose names end with `suffix` beyond the
/// `keep` most recently modified ones (best effort: errors are ignored).
pub fn keep_newest(dir: &Path, suffix: &str, keep: usize) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(PathBuf, std::time::SystemTime)> = rd
        .filter_map(Result::ok)
        .filter(|e| e.file_name().as_bytes().ends_with(suffix.as_bytes()))
        .filter_map(|e| Some((e.path(), e.metadata().ok()?.modified().ok()?)))
        .collect();
    if files.len() <= keep {
        return;
    }
    files.sort_by_key(|f| std::cmp::Reverse(f.1));
    for (path, _) in files.into_iter().skip(keep) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(n: u64) -> Stat {
        Stat {
            size: n,
            mtime: Time {
                sec: 100 + n as i64,
                nsec: 5,
            },
            ctime: Time { sec: 90, nsec: 7 },
            ino: 1000 + n,
        }
    }

    fn sample(workdir: &Path) -> Vec<u8> {
        let oid = Oid::from_bytes(&[7; 20]).unwrap();
        let recs = [
            Record {
                path: b"a.txt",
                mode: 0o100644,
                tracked: true,
                stat: stat(1),
                oid,
            },
            Record {
                path: b"src/new.rs",
                mode: 0o100755,
                tracked: false,
                stat: stat(2),
                oid,
            },
        ];
        encode(
            workdir,
            Time { sec: 500, nsec: 0 },
            Some(stat(9)),
            &[3; 32],
            &recs,
        )
    }

    #[test]
    fn round_trips() {
        let wd = Path::new("/w/t");
        let idx = StatIndex::parse(sample(wd), wd).unwrap();
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.reference(), Time { sec: 500, nsec: 0 });
        assert_eq!(idx.git_index(), Some(stat(9)));
        assert_eq!(idx.digest(), [3; 32]);
        let recs: Vec<Record> = idx.records().collect();
        assert_eq!(recs[0].path, b"a.txt");
        assert!(recs[0].tracked && !recs[1].tracked);
        assert_eq!(recs[1].mode, 0o100755);
        assert_eq!(recs[1].stat, stat(2));
    }

    #[test]
    fn corrupt_truncated_old_or_foreign_files_are_rejected() {
        let wd = Path::new("/w/t");
        let good = sample(wd);
        let mut flipped = good.clone();
        flipped[40] ^= 1;
        assert_eq!(
            StatIndex::parse(flipped, wd).unwrap_err(),
            Invalid::Checksum
        );
        for cut in [0, 5, 12, good.len() / 2, good.len() - 1] {
            assert!(
                StatIndex::parse(good[..cut].to_vec(), wd).is_err(),
                "cut {cut}"
            );
        }
        let mut old = good.clone();
        old[8..12].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(StatIndex::parse(old, wd).unwrap_err(), Invalid::Version(0));
        assert_eq!(
            StatIndex::parse(good, Path::new("/w/other")).unwrap_err(),
            Invalid::OtherWorktree
        );
        assert_eq!(
            StatIndex::parse(b"garbage".to_vec(), wd).unwrap_err(),
            Invalid::Magic
        );
    }

    #[test]
    fn unsorted_records_are_rejected_even_with_a_valid_checksum() {
        let wd = Path::new("/w");
        let oid = Oid::zero();
        let r = |p: &'static [u8]| Record {
            path: p,
            mode: 0o100644,
            tracked: false,
            stat: Stat::default(),
            oid,
        };
        let bytes = encode(wd, Time::default(), None, &[0; 32], &[r(b"b"), r(b"a")]);
        assert_eq!(StatIndex::parse(bytes, wd).unwrap_err(), Invalid::Order);
        let bytes = encode(wd, Time::default(), None, &[0; 32], &[r(b"a"), r(b"a")]);
        assert_eq!(StatIndex::parse(bytes, wd).unwrap_err(), Invalid::Order);
    }

    #[test]
    fn racy_records_are_not_trusted() {
        let wd = Path::new("/w/t");
        let idx = StatIndex::parse(sample(wd), wd).unwrap();
        let rec = idx.record(0);
        // Same mode and stat data, modified well before the reference.
        assert!(idx.vouches(0, 0o100644, &rec.stat));
        assert!(!idx.vouches(0, 0o100755, &rec.stat));
        let mut other = rec.stat;
        other.size += 1;
        assert!(!idx.vouches(0, 0o100644, &other));
        // Recorded by a scan that started in the file's own tick (or
        // before a later change of its inode): racy, however equal the
        // stat data.
        let vouched = |stat: Stat, reference: Time| {
            let bytes = encode(wd, reference, None, &[0; 32], &[Record { stat, ..rec }]);
            StatIndex::parse(bytes, wd)
                .unwrap()
                .vouches(0, rec.mode, &stat)
        };
        let tick = |sec: i64| Time { sec, nsec: 0 };
        assert!(
            vouched(rec.stat, tick(rec.stat.mtime.sec + 1)),
            "the control"
        );
        assert!(!vouched(rec.stat, rec.stat.mtime));
        let mut changed_inode = rec.stat;
        changed_inode.ctime = tick(rec.stat.mtime.sec + 1);
        assert!(!vouched(changed_inode, tick(rec.stat.mtime.sec + 1)));
    }

    #[test]
    fn clock_reads_the_filesystem_and_leaves_nothing_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::new(tmp.path().join("stat"));
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let clock = store.clock().unwrap();
        assert!(clock.now.sec >= before - 1);
        drop(clock);
        assert_eq!(std::fs::read_dir(store.dir()).unwrap().count(), 0);
        let wd = Path::new("/w/t");
        store.save(store.clock().unwrap(), wd, &sample(wd)).unwrap();
        assert_eq!(store.load(wd).unwrap().len(), 2);
        assert_eq!(std::fs::read_dir(store.dir()).unwrap().count(), 1);
    }

    #[test]
    fn keeps_the_newest_indexes() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::new(tmp.path().join("stat"));
        for i in 0..KEEP_INDEXES + 3 {
            let wd = PathBuf::from(format!("/w/{i}"));
            store
                .save(store.clock().unwrap(), &wd, &sample(&wd))
                .unwrap();
        }
        assert_eq!(
            std::fs::read_dir(store.dir()).unwrap().count(),
            KEEP_INDEXES
        );
    }
}
