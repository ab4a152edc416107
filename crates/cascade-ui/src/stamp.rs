//! A file's identity and size ([`FileStamp`]): a file replaced (rename) or
//! grown shows here without reading it, so a view made of it is made again
//! only when it changed (the plan the dashboard shows).

use std::path::Path;

/// A file's identity, size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

impl FileStamp {
    /// The stamp of the file at `path`, `None` when there is none.
    pub fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            len: m.len(),
            modified: m.modified().ok(),
            inode: m.ino(),
        })
    }
}
