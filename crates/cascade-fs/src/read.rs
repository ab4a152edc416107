//! Reading a large file whole (a 100,000-story `prd.json` or run state is
//! 30-45 MB) into memory that faults in by huge pages.
//!
//! `std::fs::read` reads into a buffer of the file's length, fresh from the
//! allocator: the kernel then faults its pages in one 4 KiB page at a time
//! while it copies the file in, about 10,000 faults for a 43 MB state, a
//! quarter of a dashboard's first reading of its run. Advised for
//! transparent huge pages (Linux; the system's setting is commonly
//! `madvise`, which honours only advised memory), the same buffer faults in
//! 2 MiB at a time. Elsewhere, or when the advice is refused, it is the
//! same read.
//!
//! The file is read, not mapped: a mapped file that someone truncates
//! (an editor saving `prd.json`) kills its reader with SIGBUS.

use std::io::Read;
use std::path::Path;

/// Below this, a file is read as `std::fs::read` reads it: a buffer that
/// holds no whole huge page gains nothing from the advice.
const HUGE_PAGE: usize = 2 << 20;

/// The bytes of the file at `path`, as [`std::fs::read`] reads them (the
/// same errors), into a buffer advised for huge pages when it is large
/// (see the module doc). A file that grows or shrinks while it is read is
/// read to its end as it is then, whatever its length was when opened.
pub fn read_whole(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let len = file
        .metadata()
        .map_or(0, |m| usize::try_from(m.len()).unwrap_or(usize::MAX));
    read_sized(&mut file, len)
}

/// What `from` holds to its end, read into a buffer made for `len` bytes
/// (what the file said its length was; the bytes read are what it holds).
fn read_sized(from: &mut impl Read, len: usize) -> std::io::Result<Vec<u8>> {
    // One more byte than the file: the read that finds its end needs no
    // room of its own.
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(len.saturating_add(1))
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
    if bytes.capacity() >= 2 * HUGE_PAGE {
        advise_huge_pages(bytes.spare_capacity_mut());
    }
    from.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Advises the kernel to back the whole 2 MiB-aligned pages of `room`
/// (memory not yet written) with huge pages. Advice only: refused (no
/// transparent huge pages), it changes nothing.
#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(room: &mut [T]) {
    let start = room.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(room);
    let first = start.next_multiple_of(HUGE_PAGE);
    let last = end - end % HUGE_PAGE;
    if last > first {
        // SAFETY: the range lies inside `room`, memory this process owns
        // and has not written; MADV_HUGEPAGE changes how its pages are
        // backed, never what they hold.
        unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages<T>(_: &mut [T]) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that tell where in the file each one was.
    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn reads_exactly_the_file_small_or_large() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for n in [0, 1, 4095, HUGE_PAGE - 1, 2 * HUGE_PAGE + 17, 5 * HUGE_PAGE] {
            let text = pattern(n);
            std::fs::write(&path, &text).unwrap();
            let read = read_whole(&path).unwrap();
            assert_eq!(read.len(), n);
            assert!(read == text, "{n} bytes");
        }
    }

    #[test]
    fn errors_are_those_of_std_read() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let ours = read_whole(&missing).unwrap_err();
        let theirs = std::fs::read(&missing).unwrap_err();
        assert_eq!(ours.kind(), theirs.kind());
        assert_eq!(ours.kind(), std::io::ErrorKind::NotFound);
        // A directory opens but does not read.
        let ours = read_whole(dir.path()).unwrap_err();
        let theirs = std::fs::read(dir.path()).unwrap_err();
        assert_eq!(ours.kind(), theirs.kind());
    }

    /// A file that is not the length it said when opened (written or
    /// truncated meanwhile, or a device or `/proc` file, which says 0 or
    /// 4096): what it holds is read, advised or not.
    #[test]
    fn a_file_longer_or_shorter_than_it_said_is_read_to_its_end() {
        let text = pattern(3 * HUGE_PAGE + 5);
        for said in [
            0,
            10,
            3 * HUGE_PAGE,
            text.len(),
            text.len() + 1,
            8 * HUGE_PAGE,
        ] {
            let read = read_sized(&mut std::io::Cursor::new(&text), said).unwrap();
            assert!(read == text, "said {said}");
        }
        let short = pattern(1000);
        let read = read_sized(&mut std::io::Cursor::new(&short), 8 * HUGE_PAGE).unwrap();
        assert!(read == short);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_proc_file_of_no_stated_length_is_read_whole() {
        let path = Path::new("/proc/self/status");
        let read = read_whole(path).unwrap();
        assert!(read.starts_with(b"Name:"));
        assert!(read.ends_with(b"\n"));
    }

    /// The buffer of a large file is advised: its mapping carries the
    /// kernel's huge-page flag (`hg`), where the kernel has huge pages.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_files_buffer_is_advised_for_huge_pages() {
        if !Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("large");
        std::fs::write(&path, pattern(5 * HUGE_PAGE)).unwrap();
        let read = read_whole(&path).unwrap();
        let at = read.as_ptr() as usize + 3 * HUGE_PAGE;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let flags = mapping_flags(&smaps, at).expect("the buffer's mapping");
        assert!(flags.split(' ').any(|f| f == "hg"), "{flags}");
    }

    /// The `VmFlags` of the mapping holding address `at` in `smaps`.
    fn mapping_flags(smaps: &str, at: usize) -> Option<&str> {
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split(' ').next().and_then(|r| r.split_once('-'));
            let bounds = range.and_then(|(a, b)| {
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            });
            if let Some((start, end)) = bounds {
                inside = (start..end).contains(&at);
            } else if let Some(flags) = line.strip_prefix("VmFlags:") {
                if inside {
                    return Some(flags.trim());
                }
            }
        }
        None
    }
}
