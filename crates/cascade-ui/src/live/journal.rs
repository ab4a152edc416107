//! The event journal of a run: `.cascade/runs/<run_id>/events.jsonl`, one
//! [`Record`] per line, appended as the run goes (a resumed run goes on in
//! the same file, its numbering too). What `cascade ui` shows of a run that
//! is no longer live.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use super::Record;

/// `.cascade/runs`.
pub fn runs_dir(cascade_dir: &Path) -> PathBuf {
    cascade_dir.join("runs")
}

/// `.cascade/runs/<run_id>/events.jsonl`, or `None` for an id that is not
/// a plain file name (ids come from the state file, which a user may edit).
pub fn path(cascade_dir: &Path, run_id: &str) -> Option<PathBuf> {
    let plain = !run_id.is_empty()
        && run_id != "."
        && run_id != ".."
        && run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    plain.then(|| runs_dir(cascade_dir).join(run_id).join("events.jsonl"))
}

/// The records of a journal, in order. A line that does not parse (the
/// torn last line of a killed run) is skipped; a missing file is empty.
pub fn read(path: &Path) -> std::io::Result<Vec<Record>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line?;
        if let Ok(r) = serde_json::from_str::<Record>(&line) {
            out.push(r);
        }
    }
    Ok(out)
}

/// Calls `f` with each line of a journal, in order (none when there is no
/// journal; a line that is not UTF-8 is read lossily), for readers that take
/// the records apart themselves. The file is read a block at a time: a
/// large run's journal is tens of megabytes, never held whole.
pub fn each_line(path: &Path, f: impl FnMut(&str)) {
    // A missing journal has no lines; a read error ends them.
    let _ = lines(path, f);
}

fn lines(path: &Path, mut f: impl FnMut(&str)) -> std::io::Result<()> {
    let mut reader = BufReader::with_capacity(1 << 16, File::open(path)?);
    let mut line = Vec::new();
    while reader.read_until(b'\n', &mut line)? > 0 {
        let text = String::from_utf8_lossy(&line);
        let text = text.strip_suffix('\n').unwrap_or(&text);
        f(text.strip_suffix('\r').unwrap_or(text));
        line.clear();
    }
    Ok(())
}

/// The `seq` of the last record of the journal at `path` (0: none).
fn last_seq(path: &Path) -> u64 {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    let mut last = 0;
    each_line(path, |line| {
        if let Ok(s) = serde_json::from_str::<Seq>(line) {
            last = s.seq;
        }
    });
    last
}

/// Appends records to one run's journal.
#[derive(Debug)]
pub struct Writer {
    file: File,
    /// The `seq` the next record gets.
    pub next_seq: u64,
}

impl Writer {
    /// Opens (creating) the journal at `path`; numbering goes on after
    /// what it holds.
    pub fn open(path: &Path) -> std::io::Result<Writer> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let last = last_seq(path);
        // A torn last line must not swallow the next record.
        let len = file.metadata()?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            let mut r = File::open(path)?;
            std::io::Seek::seek(&mut r, std::io::SeekFrom::Start(len - 1))?;
            std::io::Read::read_exact(&mut r, &mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
            }
        }
        Ok(Writer {
            file,
            next_seq: last + 1,
        })
    }

    /// Appends one record (a whole line in one write).
    pub fn append(&mut self, record: &Record) -> std::io::Result<()> {
        let line = serde_json::to_string(record).map_err(std::io::Error::other)?;
        self.append_line(&line)
    }

    /// Appends one record's line as it was serialized (without its newline).
    pub fn append_line(&mut self, line: &str) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.file.write_all(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64) -> Record {
        Record {
            seq,
            t_ms: seq * 10,
            ts: 1,
            kind: "event".into(),
            data: serde_json::json!({"event": "notice", "message": "m"}),
        }
    }

    #[test]
    fn appends_and_goes_on_numbering_after_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "run-1").unwrap();
        let mut w = Writer::open(&p).unwrap();
        assert_eq!(w.next_seq, 1);
        w.append(&rec(1)).unwrap();
        w.append(&rec(2)).unwrap();
        drop(w);
        // A killed run's half-written line.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"seq\": 3, \"t_").unwrap();
        drop(f);
        let got = read(&p).unwrap();
        assert_eq!(got, vec![rec(1), rec(2)]);
        let mut w = Writer::open(&p).unwrap();
        assert_eq!(w.next_seq, 3);
        w.append(&rec(3)).unwrap();
        assert_eq!(read(&p).unwrap(), vec![rec(1), rec(2), rec(3)]);
    }

    /// The numbering goes on after the last whole record however long its
    /// line (longer than a block read backwards), past a torn line, a line
    /// made whole by the newline after it, and a record written otherwise.
    #[test]
    fn numbering_goes_on_after_a_long_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "run-1").unwrap();
        let mut w = Writer::open(&p).unwrap();
        w.append(&rec(1)).unwrap();
        let long = format!(
            "{{\"event\": \"run_finished\", \"x\": \"{}\"}}",
            "y".repeat(300_000)
        );
        w.append_line(&super::super::record_line(2, 5, 6, "event", &long))
            .unwrap();
        drop(w);
        assert_eq!(Writer::open(&p).unwrap().next_seq, 3);
        // A torn line: skipped, and ended so that the next record is whole.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"seq\":3,\"t_ms\":1,\"data\":{\"y\"")
            .unwrap();
        drop(f);
        assert_eq!(Writer::open(&p).unwrap().next_seq, 3);
        // Then a record with its fields in another order and spacing.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"kind\": \"event\", \"seq\": 7, \"t_ms\": 1, \"ts\": 2, \"data\": {}}\n")
            .unwrap();
        drop(f);
        assert_eq!(Writer::open(&p).unwrap().next_seq, 8);
    }

    #[test]
    fn refuses_run_ids_that_are_not_file_names() {
        let d = Path::new("/x/.cascade");
        assert!(path(d, "../../etc").is_none());
        assert!(path(d, "a/b").is_none());
        assert!(path(d, "..").is_none());
        assert!(path(d, "").is_none());
        assert_eq!(
            path(d, "20260101-abc").unwrap(),
            Path::new("/x/.cascade/runs/20260101-abc/events.jsonl")
        );
    }

    #[test]
    fn missing_journal_is_empty() {
        assert!(read(Path::new("/nonexistent/events.jsonl"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_last_seq_is_that_of_the_last_line_that_parses() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "run-1").unwrap();
        let seq = |l: &str| serde_json::from_str::<Record>(l).ok().map(|r| r.seq);
        assert_eq!(last_seq(&p), 0, "no journal");
        let mut w = Writer::open(&p).unwrap();
        assert_eq!(last_seq(&p), 0, "an empty journal");
        w.append(&rec(1)).unwrap();
        let long = format!(
            "{{\"event\":\"run_finished\",\"x\":\"{}\"}}",
            "y".repeat(200_000)
        );
        w.append_line(&super::super::record_line(2, 5, 6, "event", &long))
            .unwrap();
        drop(w);
        assert_eq!(last_seq(&p), 2);
        // A torn line without a newline, then lines that do not parse and
        // a carriage return: each as `each_line` sees it.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"seq\":3,\"t_ms\":1,\"data\":{\"y\"")
            .unwrap();
        assert_eq!(last_seq(&p), 2);
        f.write_all(
            b"\n\n{\"seq\":4,\"t_ms\":1,\"ts\":2,\"kind\":\"event\",\"data\":{}}\r\nnot json\n",
        )
        .unwrap();
        drop(f);
        assert_eq!(last_seq(&p), 4);
        let mut every = Vec::new();
        each_line(&p, |l| every.extend(seq(l)));
        assert_eq!(every, vec![1, 2, 4]);
    }
}
