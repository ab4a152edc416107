//! The run state on disk while a run works on it ([`Store`]), and the
//! journal that makes a transition of a large plan cost the same as one of
//! a small plan.
//!
//! `state.json` (the document, [`RunState`]) names the generation of the
//! journal that continues it (`"journal": g`, 0: none). The journal,
//! `state.journal` beside it, starts with the line `{"journal": g}` and
//! then holds one record per line, each appended in one write:
//! `{"story": {...}, "at": T}` (a story's whole record, replacing the one
//! with its id) or `{"run": {...}, "at": T}` (the run's own fields; its
//! `stories` are empty). [`replay`] applies the records of the journal of
//! the document's generation in order; a torn last line (a process killed
//! while writing it) is skipped.
//!
//! When the journal has grown as large as the document (and when the run
//! ends), the state is folded: the document is rewritten with a new
//! generation, then the journal is replaced by an empty one of that
//! generation (temp file + rename). Whenever a kill lands, the files read
//! as the last state committed: before the document's rename, the old
//! document and its journal; after it, the new document (an older journal
//! is ignored). A reader that finds a journal newer than the document it
//! read raced a fold and reads again. A fold is paid for by the journal
//! bytes written since the last one, so the cost of a transition does not
//! grow with the plan.
//!
//! Small plans (at most [`COMPACT_ABOVE`] stories) keep no journal: their
//! document is rewritten at each transition, which is as cheap there and
//! leaves one plain file to read.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::state::{
    now_rfc3339, RunDoc, RunState, StateError, StoryRecord, StoryState, COMPACT_ABOVE,
};

/// The journal is folded into the document once it holds this many bytes,
/// or as many as the document if that is more.
const MIN_FOLD_BYTES: u64 = 1 << 20;

/// The journal of the state document at `state_path` (`state.json` ->
/// `state.journal`).
pub fn journal_path(state_path: &Path) -> PathBuf {
    state_path.with_extension("journal")
}

/// A journal line as written.
#[derive(Serialize)]
struct Out<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    journal: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    story: Option<&'a StoryState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<&'a RunState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<&'a str>,
}

/// A journal line as read (the header is read as a [`Head`]), with what
/// is read of a story (`S`, see [`RunDoc`]).
#[derive(Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de>"))]
struct In<S> {
    #[serde(default)]
    story: Option<S>,
    #[serde(default)]
    run: Option<RunDoc<S>>,
    #[serde(default)]
    at: Option<String>,
}

/// The header line of a journal.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    journal: Option<u64>,
}

/// What [`replay`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replay {
    /// The state is current: the journal was applied up to this byte
    /// offset (the end of its last complete line; 0: no journal).
    Current(u64),
    /// The journal belongs to a document newer than the one read: read again.
    Newer,
}

/// Applies the journal that continues `state` (`journal`: the text of the
/// journal file beside its document, read after it; empty: none).
pub(crate) fn replay<'a, S>(journal: &'a [u8], state: &mut RunDoc<S>) -> Replay
where
    S: StoryRecord + Deserialize<'a>,
{
    if state.journal == 0 {
        return Replay::Current(0);
    }
    let first = match journal.iter().position(|&b| b == b'\n') {
        Some(end) => &journal[..=end],
        None => return Replay::Current(0),
    };
    let header = serde_json::from_slice::<Head>(first)
        .ok()
        .and_then(|h| h.journal);
    match header {
        Some(g) if g == state.journal => {}
        Some(g) if g > state.journal => return Replay::Newer,
        // An older journal (folded into this document), or no header.
        _ => return Replay::Current(0),
    }
    let applied = apply_lines(&journal[first.len()..], state);
    Replay::Current(first.len() as u64 + applied)
}

/// Applies every complete line of `text`; returns the bytes of those lines
/// (a line still being written is left for later).
fn apply_lines<'a, S>(text: &'a [u8], state: &mut RunDoc<S>) -> u64
where
    S: StoryRecord + Deserialize<'a>,
{
    let mut done = 0usize;
    for line in text.split_inclusive(|&b| b == b'\n') {
        if !line.ends_with(b"\n") {
            break;
        }
        done += line.len();
        // A line that does not parse (cut short by a full disk) is
        // skipped; the writer starts afresh after it.
        if let Ok(record) = serde_json::from_slice::<In<S>>(line) {
            apply(state, record);
        }
    }
    done as u64
}

fn apply<S: StoryRecord>(state: &mut RunDoc<S>, record: In<S>) {
    if let Some(story) = record.story {
        state.put_story(story);
    }
    if let Some(run) = record.run {
        state.take_run_fields(run);
    }
    if let Some(at) = record.at {
        state.updated_at = at;
    }
}

/// A file's identity and size: a document replaced (rename) or a journal
/// grown shows here without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
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

/// Keeps a run state read from disk current at the cost of what changed:
/// the whole document when it was replaced, else only the journal lines
/// appended since the last look (for readers that look again and again,
/// such as the dashboard).
///
/// What is kept of each story is `S`: the whole record (the default), or a
/// reader's own owned view of it (the dashboard's run view reads fewer
/// fields), which the journal's story records are read as too.
#[derive(Debug)]
pub struct StateFollower<S = StoryState> {
    path: PathBuf,
    state: Option<RunDoc<S>>,
    /// The document the state was read from.
    document: Option<FileStamp>,
    /// How far the journal has been applied.
    offset: u64,
}

impl<S: StoryRecord + DeserializeOwned> StateFollower<S> {
    /// Follows the state document at `path` (nothing read yet).
    pub fn new(path: &Path) -> StateFollower<S> {
        StateFollower {
            path: path.to_path_buf(),
            state: None,
            document: None,
            offset: 0,
        }
    }

    /// The state as it is on disk now (`None`: no run yet).
    pub fn refresh(&mut self) -> Result<Option<&RunDoc<S>>, StateError> {
        let stamp = FileStamp::of(&self.path);
        if stamp.is_none() {
            self.state = None;
            self.document = None;
            return Ok(None);
        }
        let same = stamp == self.document;
        let reload = match self.state.as_mut() {
            Some(state) if same && state.journal != 0 => {
                if self.offset > 0 {
                    self.offset += follow(&self.path, state, self.offset);
                    false
                } else {
                    // The journal did not exist yet when the document was read.
                    let journal = std::fs::read(journal_path(&self.path)).unwrap_or_default();
                    match replay(&journal, state) {
                        Replay::Current(o) => {
                            self.offset = o;
                            false
                        }
                        Replay::Newer => true,
                    }
                }
            }
            Some(_) => !same,
            None => true,
        };
        if reload {
            let (state, offset) = RunDoc::<S>::load_with_offset(&self.path)?;
            self.state = state;
            self.offset = offset;
            // Stamped after reading: a document replaced meanwhile is read
            // again next time.
            self.document = stamp;
        }
        Ok(self.state.as_ref())
    }
}

/// Applies the journal lines of `state_path` from `offset` on; returns the
/// bytes applied.
fn follow<S: StoryRecord + DeserializeOwned>(
    state_path: &Path,
    state: &mut RunDoc<S>,
    offset: u64,
) -> u64 {
    use std::io::{Seek, SeekFrom};
    let Ok(mut file) = File::open(journal_path(state_path)) else {
        return 0;
    };
    let mut text = Vec::new();
    if file.seek(SeekFrom::Start(offset)).is_err() || file.read_to_end(&mut text).is_err() {
        return 0;
    }
    apply_lines(&text, state)
}

/// The generation named by the header of the journal at `path`, if any.
fn header(path: &Path) -> Option<u64> {
    let file = File::open(path).ok()?;
    let mut first = String::new();
    BufReader::new(file).read_line(&mut first).ok()?;
    serde_json::from_str::<Head>(&first).ok()?.journal
}

/// The run state of a running run: the document in memory, what changed
/// since it was last committed, and the journal it is appended to. Reads
/// go through `Deref`; changes go through [`Store::change_story`] and
/// [`Store::change_run`], and reach the disk with [`Store::commit`].
#[derive(Debug)]
pub(crate) struct Store {
    state: RunState,
    path: PathBuf,
    /// The journal, open for appending (large plans).
    file: Option<File>,
    /// Bytes in the journal (header included).
    journal_bytes: u64,
    /// Bytes of the document as last written.
    document_bytes: u64,
    /// Positions of the stories changed since the last commit.
    dirty: Vec<usize>,
    /// The run's own fields changed since the last commit.
    run_dirty: bool,
    /// The last compact document made, which the next fold copies the
    /// records of unchanged stories from.
    written: Option<Written>,
    /// Per story position, changed since `written` was made.
    changed: Vec<bool>,
}

/// A compact state document as serialized, with where each story's record
/// is in it. Serializing 100,000 records is most of the cost of a fold;
/// copying the bytes of those that did not change is a small part of it.
#[derive(Debug)]
struct Written {
    bytes: Vec<u8>,
    /// Per story position, its record's span in `bytes`.
    spans: Vec<std::ops::Range<usize>>,
}

impl std::ops::Deref for Store {
    type Target = RunState;

    fn deref(&self) -> &RunState {
        &self.state
    }
}

impl Store {
    /// Writes `state` to `path` (a new document, and a new journal for a
    /// large plan) and keeps it there as it changes.
    pub fn open(state: RunState, path: &Path) -> Result<Store, StateError> {
        let mut store = Store {
            state,
            path: path.to_path_buf(),
            file: None,
            journal_bytes: 0,
            document_bytes: 0,
            dirty: Vec::new(),
            run_dirty: false,
            written: None,
            changed: Vec::new(),
        };
        store.fold(store.journaled())?;
        Ok(store)
    }

    /// Changes the story's record (added if new); it is written by the
    /// next commit.
    pub fn change_story<R>(&mut self, id: &str, f: impl FnOnce(&mut StoryState) -> R) -> R {
        let i = self.state.position_or_add(id);
        self.dirty.push(i);
        if self.changed.len() <= i {
            self.changed.resize(i + 1, false);
        }
        self.changed[i] = true;
        f(&mut self.state.stories[i])
    }

    /// Changes the run's own fields (not its stories: see [`Store::change_story`];
    /// neither the journal nor the next document would see a story changed
    /// here); written by the next commit.
    pub fn change_run<R>(&mut self, f: impl FnOnce(&mut RunState) -> R) -> R {
        self.run_dirty = true;
        f(&mut self.state)
    }

    /// Writes what changed since the last commit: appended to the journal
    /// (folded when it has grown), or the whole document of a small plan.
    pub fn commit(&mut self) -> Result<(), StateError> {
        if self.dirty.is_empty() && !self.run_dirty {
            return Ok(());
        }
        if !self.journaled() || self.file.is_none() {
            return self.fold(self.journaled());
        }
        let lines = self.changed_lines()?;
        let appended = match self.file.as_mut() {
            Some(file) => file.write_all(&lines),
            None => Ok(()),
        };
        if appended.is_err() {
            // A partial line would spoil the next one: start afresh.
            self.file = None;
            return self.fold(true);
        }
        self.journal_bytes += lines.len() as u64;
        self.dirty.clear();
        self.run_dirty = false;
        if self.journal_bytes >= self.document_bytes.max(MIN_FOLD_BYTES) {
            return self.fold(true);
        }
        Ok(())
    }

    /// Writes the whole state as one document and removes the journal (the
    /// end of a run: what is left is one plain file).
    pub fn finish(&mut self) -> Result<(), StateError> {
        self.fold(false)
    }

    /// Whether this plan's transitions go to a journal.
    fn journaled(&self) -> bool {
        self.state.stories.len() > COMPACT_ABOVE
    }

    /// The journal lines of what changed, stamped with the time.
    fn changed_lines(&mut self) -> Result<Vec<u8>, StateError> {
        let at = now_rfc3339();
        self.dirty.sort_unstable();
        self.dirty.dedup();
        let mut out = Vec::with_capacity(512 * (self.dirty.len() + 1));
        let serialize = |e: serde_json::Error| StateError::Io {
            op: "serialize",
            path: self.path.clone(),
            source: std::io::Error::other(e),
        };
        for &i in &self.dirty {
            let line = Out {
                journal: None,
                story: self.state.stories.get(i),
                run: None,
                at: Some(&at),
            };
            serde_json::to_writer(&mut out, &line).map_err(serialize)?;
            out.push(b'\n');
        }
        if self.run_dirty {
            // The run's fields alone: its stories are set aside meanwhile.
            let stories = std::mem::take(&mut self.state.stories);
            let line = Out {
                journal: None,
                story: None,
                run: Some(&self.state),
                at: Some(&at),
            };
            let written = serde_json::to_writer(&mut out, &line);
            self.state.stories = stories;
            written.map_err(serialize)?;
            out.push(b'\n');
        }
        self.state.updated_at = at;
        Ok(out)
    }

    /// Rewrites the document with a new journal generation (`journal`) or
    /// none, then starts that journal (or removes the old one).
    fn fold(&mut self, journal: bool) -> Result<(), StateError> {
        let jpath = journal_path(&self.path);
        // Above any generation on disk: an older journal never continues
        // the new document, even if a kill leaves it behind.
        let next = self.state.journal.max(header(&jpath).unwrap_or(0)) + 1;
        self.state.journal = if journal { next } else { 0 };
        let written = self.document()?;
        let indented;
        let bytes = match &written {
            Some(w) => &w.bytes,
            None => {
                indented = self.state.snapshot(&self.path)?;
                &indented
            }
        };
        crate::state::write_snapshot(&self.path, bytes)?;
        self.document_bytes = bytes.len() as u64;
        self.written = written;
        self.changed.clear();
        self.dirty.clear();
        self.run_dirty = false;
        self.file = None;
        let io = |source| StateError::Io {
            op: "write",
            path: jpath.clone(),
            source,
        };
        if !journal {
            return match std::fs::remove_file(&jpath) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(e)),
                _ => Ok(()),
            };
        }
        let mut head = serde_json::to_vec(&Out {
            journal: Some(next),
            story: None,
            run: None,
            at: None,
        })
        .map_err(|e| io(std::io::Error::other(e)))?;
        head.push(b'\n');
        cascade_fs::write_atomic(&jpath, &head, cascade_fs::Durability::Renamed).map_err(io)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&jpath)
            .map_err(io)?;
        self.file = Some(file);
        self.journal_bytes = head.len() as u64;
        Ok(())
    }
}

impl Store {
    /// The state as a compact document (a large plan's), the records of
    /// stories unchanged since the last one copied from it; what
    /// [`RunState::snapshot`] makes, byte for byte. `None`: a small plan's
    /// document (indented), made by the snapshot itself.
    fn document(&mut self) -> Result<Option<Written>, StateError> {
        if !self.journaled() {
            return Ok(None);
        }
        let serialize = |e: serde_json::Error| StateError::Io {
            op: "serialize",
            path: self.path.clone(),
            source: std::io::Error::other(e),
        };
        self.state.updated_at = now_rfc3339();
        // The run's own fields: `stories` is the last of them, written `[]`
        // while the records are set aside.
        let stories = std::mem::take(&mut self.state.stories);
        let head = serde_json::to_vec(&self.state);
        self.state.stories = stories;
        let mut head = head.map_err(serialize)?;
        if !head.ends_with(b"\"stories\":[]}") {
            return Ok(None);
        }
        head.truncate(head.len() - 2);
        let previous = self.written.take();
        let mut bytes = head;
        bytes.reserve(previous.as_ref().map_or(0, |w| w.bytes.len()));
        let mut spans = Vec::with_capacity(self.state.stories.len());
        for (i, story) in self.state.stories.iter().enumerate() {
            if i > 0 {
                bytes.push(b',');
            }
            let start = bytes.len();
            let kept = previous
                .as_ref()
                .filter(|_| !self.changed.get(i).copied().unwrap_or(false))
                .and_then(|w| Some(&w.bytes[w.spans.get(i)?.clone()]));
            match kept {
                Some(record) => bytes.extend_from_slice(record),
                None => serde_json::to_writer(&mut bytes, story).map_err(serialize)?,
            }
            spans.push(start..bytes.len());
        }
        bytes.extend_from_slice(b"]}");
        Ok(Some(Written { bytes, spans }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StoryStatus;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("s{i}")).collect()
    }

    fn fresh(n: usize) -> RunState {
        RunState::new(
            "r".into(),
            "prd.json".into(),
            "main".into(),
            "/x".into(),
            ids(n),
        )
    }

    #[test]
    fn a_large_plan_appends_and_reads_back_every_transition() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut store = Store::open(fresh(500), &path).unwrap();
        let document = std::fs::read(&path).unwrap();
        for i in 0..50 {
            store.change_story(&format!("s{i}"), |s| s.status = StoryStatus::Complete);
            store.commit().unwrap();
        }
        store.change_run(|st| st.status = crate::state::RunPhase::Paused);
        store.change_story("new", |s| s.status = StoryStatus::Failed);
        store.commit().unwrap();
        // The document was not rewritten; the journal holds the changes.
        assert_eq!(std::fs::read(&path).unwrap(), document);
        let back = RunState::load(&path).unwrap().unwrap();
        assert_eq!(back, *store);
        assert_eq!(back.counts().complete, 50);
        assert_eq!(back.story("new").unwrap().status, StoryStatus::Failed);
        assert_eq!(back.status, crate::state::RunPhase::Paused);
        // The end of the run leaves one document.
        store.finish().unwrap();
        assert!(!journal_path(&path).exists());
        let back = RunState::load(&path).unwrap().unwrap();
        assert_eq!((back.journal, back.counts().complete), (0, 50));
    }

    /// A fold copies the records of stories unchanged since the last one
    /// and serializes the others: the document is byte for byte the one a
    /// whole serialization of the state makes, through changed, added and
    /// escaped records, run fields and several folds.
    #[test]
    fn a_fold_reusing_unchanged_records_writes_the_whole_serialization() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut store = Store::open(fresh(400), &path).unwrap();
        let whole = |store: &Store| {
            let mut copy = store.state.clone();
            let bytes = std::fs::read(&path).unwrap();
            // The time the fold stamped, then the state's own serialization.
            let on_disk: RunState = serde_json::from_slice(&bytes).unwrap();
            copy.updated_at = on_disk.updated_at;
            (bytes, serde_json::to_vec(&copy).unwrap())
        };
        let (bytes, expected) = whole(&store);
        assert_eq!(bytes, expected);
        for round in 0..3 {
            for i in (round..400).step_by(7) {
                store.change_story(&format!("s{i}"), |s| {
                    s.status = StoryStatus::Failed;
                    s.error = Some(format!("round {round}: \"quoted\"\n\u{e9}"));
                });
            }
            store.change_story(&format!("added-{round}"), |s| {
                s.agent = Some("codex".into())
            });
            store.change_run(|st| st.cooldowns.clear());
            store.commit().unwrap();
            store.fold(true).unwrap();
            let (bytes, expected) = whole(&store);
            assert_eq!(bytes, expected, "round {round}");
            assert_eq!(RunState::load(&path).unwrap().unwrap(), *store);
        }
        store.change_run(|st| st.status = crate::state::RunPhase::Paused);
        store.finish().unwrap();
        let (bytes, expected) = whole(&store);
        assert_eq!(bytes, expected);
        assert_eq!(RunState::load(&path).unwrap().unwrap(), *store);
    }

    #[test]
    fn the_journal_is_folded_once_it_outgrows_the_document() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut store = Store::open(fresh(300), &path).unwrap();
        let first = store.journal;
        // A long error per transition grows the journal past 1 MB.
        for round in 0..400 {
            store.change_story(&format!("s{}", round % 300), |s| {
                s.error = Some(format!("{round}: {}", "x".repeat(4000)));
            });
            store.commit().unwrap();
        }
        assert!(store.journal > first, "folded at least once");
        assert!(std::fs::metadata(journal_path(&path)).unwrap().len() < 2 << 20);
        let back = RunState::load(&path).unwrap().unwrap();
        assert_eq!(back, *store);
    }

    #[test]
    fn kills_at_any_point_read_as_a_committed_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let jpath = journal_path(&path);
        let mut store = Store::open(fresh(300), &path).unwrap();
        store.change_story("s1", |s| s.status = StoryStatus::Complete);
        store.commit().unwrap();
        // Killed while appending: a torn line after the committed one.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&jpath)
            .unwrap();
        f.write_all(b"{\"story\": {\"id\": \"s2\", \"sta").unwrap();
        drop(f);
        let back = RunState::load(&path).unwrap().unwrap();
        assert_eq!(back.story("s1").unwrap().status, StoryStatus::Complete);
        assert_eq!(back.story("s2").unwrap().status, StoryStatus::Pending);

        // Killed during a fold, after the new document was renamed into
        // place but before its journal was: the older journal is ignored.
        let old_journal = std::fs::read(&jpath).unwrap();
        store.change_story("s3", |s| s.status = StoryStatus::Failed);
        store.commit().unwrap();
        store.fold(true).unwrap();
        std::fs::write(&jpath, &old_journal).unwrap();
        let back = RunState::load(&path).unwrap().unwrap();
        assert_eq!(back, *store);

        // A journal newer than the document read (a fold raced the
        // reader): never applied to it; the document is read again.
        std::fs::write(
            &jpath,
            "{\"journal\": 99}\n{\"story\": {\"id\": \"s1\", \"status\": \"failed\"}}\n",
        )
        .unwrap();
        let mut read = RunState::parse(&path, &std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            replay(&std::fs::read(&jpath).unwrap(), &mut read),
            Replay::Newer
        );
        assert_eq!(read, *store);
        assert_eq!(RunState::load(&path).unwrap().unwrap(), *store);
    }

    #[test]
    fn a_follower_reads_only_what_was_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut follower = StateFollower::new(&path);
        assert!(follower.refresh().unwrap().is_none());
        let mut store = Store::open(fresh(400), &path).unwrap();
        assert_eq!(follower.refresh().unwrap(), Some(&*store));
        for i in 0..30 {
            store.change_story(&format!("s{i}"), |s| s.status = StoryStatus::Running);
            store.commit().unwrap();
            if i % 7 == 0 {
                assert_eq!(follower.refresh().unwrap(), Some(&*store));
            }
        }
        // A line being written is left for the next look.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(journal_path(&path))
            .unwrap();
        f.write_all(b"{\"story\": {\"id\": \"s0\", ").unwrap();
        assert_eq!(follower.refresh().unwrap(), Some(&*store));
        f.write_all(b"\"status\": \"failed\"}}\n").unwrap();
        let seen = follower.refresh().unwrap().unwrap();
        assert_eq!(seen.story("s0").unwrap().status, StoryStatus::Failed);
        // Folded, and finished: the document is read again.
        store.change_story("s0", |s| s.status = StoryStatus::Complete);
        store.commit().unwrap();
        store.fold(true).unwrap();
        assert_eq!(follower.refresh().unwrap(), Some(&*store));
        store.finish().unwrap();
        assert_eq!(follower.refresh().unwrap(), Some(&*store));
    }

    #[test]
    fn a_small_plan_keeps_one_plain_document() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut store = Store::open(fresh(3), &path).unwrap();
        store.change_story("s0", |s| s.status = StoryStatus::Complete);
        store.commit().unwrap();
        assert!(!journal_path(&path).exists());
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(raw["stories"][0]["status"], "complete");
        assert!(raw.get("journal").is_none());
    }
}
