//! Agent logs with a size limit: [`CappedLog`] keeps the head and the tail
//! of what is written, with a line in between saying how much was dropped.
//!
//! An agent that prints without end must neither fill the disk nor the
//! memory. Up to the limit the log is exactly what was written. Past it,
//! the first half of the limit stays as it is and the second half is used
//! as a ring on disk that holds the most recent bytes; when the log is
//! finished the ring is put back in order (in place, a chunk at a time) and
//! its first bytes are replaced by the marker. Memory use is one chunk
//! whatever the limit, and the file never grows past the limit.
//!
//! While the output is still arriving and has wrapped around, the tail
//! region is out of order; it is in order once [`CappedLog::finish`] ran
//! (which [`crate::Running::wait`] does, and which dropping the log does).
//! Writes that fail (a full disk) are counted, not returned: a log must not
//! turn into a failed agent.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Default limit of one agent log: 16 MiB.
pub const DEFAULT_LOG_LIMIT: u64 = 16 * 1024 * 1024;

/// Bytes moved at a time when the ring is put in order.
const CHUNK: usize = 64 * 1024;

/// The size limit of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLimit {
    /// Keep everything.
    Unlimited,
    /// Keep at most this many bytes (the head and the tail, half each).
    Bytes(u64),
}

impl Default for LogLimit {
    fn default() -> Self {
        LogLimit::Bytes(DEFAULT_LOG_LIMIT)
    }
}

impl LogLimit {
    /// A limit given in MiB, where 0 means no limit (the convention of
    /// `.cascade/config.json`).
    pub fn from_mib(mib: u64) -> LogLimit {
        match mib {
            0 => LogLimit::Unlimited,
            n => LogLimit::Bytes(n.saturating_mul(1024 * 1024)),
        }
    }
}

/// A log file that keeps its head and tail within a [`LogLimit`].
#[derive(Debug)]
pub struct CappedLog {
    file: File,
    /// Bytes kept from the start (everything up to here is written in place).
    head: u64,
    /// Size of the ring that follows the head (`u64::MAX`: no limit).
    ring: u64,
    /// Bytes written to the file so far (head and ring, before wrapping).
    len: u64,
    /// Bytes offered in all, header included.
    total: u64,
    /// Next write position inside the ring, once it has wrapped.
    pos: u64,
    wrapped: bool,
    finished: bool,
    failed_writes: u64,
}

impl CappedLog {
    /// Opens `path` (created with its parent directories) to append to what
    /// it holds already (a header counts as part of the head).
    pub fn append(path: &Path, limit: LogLimit) -> std::io::Result<CappedLog> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Not O_APPEND: positioned writes (the ring) are ignored by it.
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .read(true)
            .open(path)?;
        let len = file.seek(SeekFrom::End(0))?;
        let (head, ring) = match limit {
            LogLimit::Unlimited => (u64::MAX, 0),
            LogLimit::Bytes(n) => {
                let n = n.max(2);
                // A header longer than half the limit is kept whole.
                let head = (n / 2).max(len);
                (head, n.saturating_sub(head).max(1))
            }
        };
        Ok(CappedLog {
            file,
            head,
            ring,
            len,
            total: len,
            pos: 0,
            wrapped: false,
            finished: false,
            failed_writes: 0,
        })
    }

    /// Appends `bytes`, overwriting the oldest part of the tail once the
    /// limit is reached.
    pub fn write(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let capacity = self.head.saturating_add(self.ring);
        // In order, up to the limit.
        if self.len < capacity {
            let n = (capacity - self.len).min(bytes.len() as u64) as usize;
            self.put(self.len, &bytes[..n]);
            self.len += n as u64;
            bytes = &bytes[n..];
        }
        // Past it: round the ring.
        while !bytes.is_empty() {
            self.wrapped = true;
            let n = (self.ring - self.pos).min(bytes.len() as u64) as usize;
            self.put(self.head + self.pos, &bytes[..n]);
            self.pos = (self.pos + n as u64) % self.ring;
            bytes = &bytes[n..];
        }
    }

    /// Bytes offered in all (header included).
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Bytes that are not in the log (0 until the limit was passed).
    pub fn dropped_bytes(&self) -> u64 {
        self.total - self.len.min(self.total)
    }

    /// How many writes failed (a full disk); the log misses what they held.
    pub fn failed_writes(&self) -> u64 {
        self.failed_writes
    }

    /// Puts the tail in order and writes the marker. Idempotent.
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        if !self.wrapped {
            return;
        }
        let (start, len) = (self.head, self.ring);
        // Rotate the ring left by `pos`: the oldest byte comes first.
        let rotated = self
            .reverse(start, start + self.pos)
            .and_then(|()| self.reverse(start + self.pos, start + len))
            .and_then(|()| self.reverse(start, start + len));
        if rotated.is_err() {
            self.failed_writes += 1;
            return;
        }
        let marker = self.marker();
        let marker = &marker.as_bytes()[..marker.len().min(len as usize)];
        self.put(start, marker);
    }

    /// The line between head and tail. It takes the place of the oldest
    /// bytes of the tail, which are counted as dropped.
    fn marker(&self) -> String {
        let text = |len: u64| {
            let kept_tail = self.ring.saturating_sub(len);
            let dropped = self.total - self.head - kept_tail;
            format!(
                "\n[cascade: {dropped} bytes of output dropped here; the log keeps the first {} and the last {kept_tail} bytes (the limit is resources.max_log_mb in .cascade/config.json)]\n",
                self.head
            )
        };
        // The length depends on the numbers it prints and they on the
        // length: iterate to the fixed point, padding when digits make it
        // flip between two lengths.
        let mut len = 0u64;
        for _ in 0..8 {
            let next = text(len).len() as u64;
            if next <= len {
                break;
            }
            len = next;
        }
        let mut s = text(len);
        while (s.len() as u64) < len {
            s.insert(s.len() - 2, ' ');
        }
        s
    }

    fn put(&mut self, offset: u64, bytes: &[u8]) {
        if self.file.write_all_at(bytes, offset).is_err() {
            self.failed_writes += 1;
        }
    }

    /// Reverses the bytes of `[lo, hi)` in the file, a chunk from each end
    /// at a time.
    fn reverse(&self, mut lo: u64, mut hi: u64) -> std::io::Result<()> {
        let mut left = vec![0u8; CHUNK];
        let mut right = vec![0u8; CHUNK];
        while hi - lo >= 2 {
            let n = ((hi - lo) / 2).min(CHUNK as u64) as usize;
            let (l, r) = (&mut left[..n], &mut right[..n]);
            self.file.read_exact_at(l, lo)?;
            self.file.read_exact_at(r, hi - n as u64)?;
            l.reverse();
            r.reverse();
            self.file.write_all_at(l, hi - n as u64)?;
            self.file.write_all_at(r, lo)?;
            lo += n as u64;
            hi -= n as u64;
        }
        Ok(())
    }
}

impl Drop for CappedLog {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream `0..n` as bytes that show their position (`a`..`z` cycling,
    /// a newline every 50).
    fn stream(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| {
                if i % 50 == 49 {
                    b'\n'
                } else {
                    b'a' + (i % 26) as u8
                }
            })
            .collect()
    }

    fn capped(limit: u64, header: &[u8], data: &[u8], piece: usize) -> (Vec<u8>, CappedLog) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/a.log");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, header).unwrap();
        let mut log = CappedLog::append(&path, LogLimit::Bytes(limit)).unwrap();
        for chunk in data.chunks(piece) {
            log.write(chunk);
        }
        log.finish();
        (std::fs::read(&path).unwrap(), log)
    }

    #[test]
    fn under_the_limit_the_log_is_exact() {
        let data = stream(1000);
        let (file, log) = capped(4096, b"== header\n", &data, 7);
        assert_eq!(file, [b"== header\n".as_slice(), &data].concat());
        assert_eq!(log.dropped_bytes(), 0);
        // Exactly at the limit, too.
        let data = stream(4096 - 10);
        let (file, _) = capped(4096, b"== header\n", &data, 4096);
        assert_eq!(file.len(), 4096);
        assert!(!String::from_utf8_lossy(&file).contains("[cascade:"));
    }

    #[test]
    fn over_the_limit_head_marker_and_tail_are_kept_in_order() {
        for piece in [1, 13, 1000, 64 * 1024, 1 << 20] {
            let data = stream(300_000);
            let header = b"== header\n";
            let (file, log) = capped(10_000, header, &data, piece);
            let all = [header.as_slice(), &data].concat();
            assert_eq!(file.len(), 10_000, "piece {piece}");
            assert_eq!(&file[..5000], &all[..5000], "head, piece {piece}");
            let text = String::from_utf8_lossy(&file[5000..]).into_owned();
            assert!(
                text.starts_with("\n[cascade: "),
                "piece {piece}: {text:.80}"
            );
            let marker_end = text.find("]\n").unwrap() + 2;
            let kept_tail = &file[5000 + marker_end..];
            assert_eq!(
                kept_tail,
                &all[all.len() - kept_tail.len()..],
                "piece {piece}"
            );
            // The number in the marker is what is missing.
            let dropped: u64 = text["\n[cascade: ".len()..]
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(
                dropped,
                all.len() as u64 - 5000 - kept_tail.len() as u64,
                "piece {piece}"
            );
            assert!(
                text.contains(&format!("the last {} bytes", kept_tail.len())),
                "piece {piece}: {text:.300}"
            );
            assert_eq!(log.total_bytes(), all.len() as u64);
        }
    }

    #[test]
    fn unlimited_keeps_everything_and_zero_mib_means_unlimited() {
        assert_eq!(LogLimit::from_mib(0), LogLimit::Unlimited);
        assert_eq!(LogLimit::from_mib(2), LogLimit::Bytes(2 * 1024 * 1024));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.log");
        let mut log = CappedLog::append(&path, LogLimit::Unlimited).unwrap();
        let data = stream(100_000);
        log.write(&data);
        drop(log);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }
}
