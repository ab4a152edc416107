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
    let _ = lines_from(path, 0, u64::MAX, f);
}

/// [`each_line`] on up to `parts` threads: the journal is cut into as many
/// byte ranges, a line belongs to the range its first byte is in, and each
/// range's lines go in order to `f` with that range's own `T` (made by
/// `new`). Returns the `T`s in the file's order, so that what they collect,
/// put end to end, is what one [`each_line`] would have collected. The last
/// range reads on to the end of the file, as [`each_line`] does. A journal
/// under a megabyte is read on one thread (a thread costs more than its
/// lines).
///
/// Why: a finished run's records are read whole when a dashboard's first
/// event stream or story view asks, tens of megabytes at 100,000 stories,
/// and the lines are independent.
pub(crate) fn each_line_split<T: Send>(
    path: &Path,
    parts: usize,
    new: impl Fn() -> T + Sync,
    f: impl Fn(&mut T, &str) + Sync,
) -> Vec<T> {
    const ALONE: u64 = 1 << 20;
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    let parts = if len < ALONE { 1 } else { parts.max(1) as u64 };
    // The ranges' starts; the last range is open-ended.
    let starts: Vec<u64> = (0..parts).map(|k| len * k / parts).collect();
    let read = |k: usize| {
        let mut out = new();
        let start = starts[k];
        let end = starts.get(k + 1).copied().unwrap_or(u64::MAX);
        let _ = lines_from(path, start, end, |line| f(&mut out, line));
        out
    };
    if parts == 1 {
        return vec![read(0)];
    }
    std::thread::scope(|scope| {
        let read = &read;
        let rest: Vec<_> = (1..starts.len())
            .map(|k| scope.spawn(move || read(k)))
            .collect();
        let mut all = vec![read(0)];
        for h in rest {
            // `f` panicked on that thread: as it would have on this one.
            all.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        all
    })
}

/// The lines that start at or after byte `start` and before byte `end`, to
/// `f` as [`each_line`] gives them. A line that starts before `start` is
/// skipped (it belongs to the range before).
fn lines_from(path: &Path, start: u64, end: u64, mut f: impl FnMut(&str)) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut reader = BufReader::with_capacity(1 << 16, File::open(path)?);
    let mut pos = start;
    let mut line = Vec::new();
    if start > 0 {
        // The byte before `start` says whether a line starts at `start`:
        // reading through to the next newline from there skips the line
        // that began earlier (or only that newline, when one ends there).
        reader.seek(SeekFrom::Start(start - 1))?;
        pos = start - 1 + reader.read_until(b'\n', &mut line)? as u64;
        line.clear();
    }
    while pos < end {
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        pos += n as u64;
        let text = text_of(&line);
        let text = text.strip_suffix('\n').unwrap_or(&text);
        f(text.strip_suffix('\r').unwrap_or(text));
        line.clear();
    }
    Ok(())
}

/// A line's text, read lossily when it is not UTF-8 (checked the fast way
/// first: the lossy reader walks a line in chunks even when it is valid).
fn text_of(line: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(line) {
        Ok(t) => std::borrow::Cow::Borrowed(t),
        Err(_) => String::from_utf8_lossy(line),
    }
}

/// What the opening of a journal line says, when it opens as
/// [`super::record_line`] writes a record: its kind and, when its data opens
/// with an `"event"` member (as an engine event's does), that event's name.
/// Only the opening is looked at: a reader may skip a line by its kind or
/// event unread, but must still parse a line it keeps (it may be torn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opening<'a> {
    pub seq: u64,
    pub t_ms: u64,
    pub ts: u64,
    pub kind: &'a str,
    pub event: Option<&'a str>,
    /// The line from its data's first byte on.
    pub rest: &'a str,
}

impl<'a> Opening<'a> {
    /// `None`: the line does not open that way (or its kind or event name
    /// has escapes); read it whole.
    pub fn of(line: &'a str) -> Option<Opening<'a>> {
        // Digits that make a `u64` (as a record's numbers must).
        let number = |rest: &'a str, member: &str| -> Option<(u64, &'a str)> {
            let rest = rest.strip_prefix(member)?;
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            Some((rest[..digits].parse().ok()?, &rest[digits..]))
        };
        // A JSON string without escapes (nor the control characters a JSON
        // string cannot hold), and what follows it. Looked for byte by
        // byte (a search for either of two chars decodes every char: every
        // line of a journal has two such strings).
        let plain = |rest: &'a str| -> Option<(&'a str, &'a str)> {
            let end = rest.bytes().position(|b| b == b'"' || b == b'\\')?;
            let text = &rest[..end];
            (rest.as_bytes()[end] == b'"' && !text.bytes().any(|b| b < 0x20))
                .then(|| (text, &rest[end + 1..]))
        };
        let (seq, rest) = number(line, "{\"seq\":")?;
        let (t_ms, rest) = number(rest, ",\"t_ms\":")?;
        let (ts, rest) = number(rest, ",\"ts\":")?;
        let (kind, rest) = plain(rest.strip_prefix(",\"kind\":\"")?)?;
        let data = rest.strip_prefix(",\"data\":")?;
        let event = match data.strip_prefix("{\"event\":\"") {
            Some(name) => Some(plain(name)?.0),
            None => None,
        };
        Some(Opening {
            seq,
            t_ms,
            ts,
            kind,
            event,
            rest: data,
        })
    }

    /// The record's data as text, when the line is a whole record in this
    /// layout: its data and the closing brace, nothing else. `None`: the
    /// line must be read whole to know (it may be torn or another layout).
    /// Whatever parses as one JSON value from this text is the data the
    /// record's reader would find.
    pub fn data(&self) -> Option<&'a str> {
        let data = self.rest.strip_suffix('}')?;
        Some(data.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r')))
    }
}

/// The last line of a journal that `parse` accepts, as `parse` answers
/// (`None`: no line does, or no journal). Lines are split and read as
/// [`each_line`] reads them, from the end, one at a time: what a reader of
/// every line would have last, without reading the others.
pub(crate) fn last_line<T>(path: &Path, parse: impl Fn(&str) -> Option<T>) -> Option<T> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path).ok()?;
    from_the_end(&file, |span, _| {
        if span.is_empty() {
            return Ok(None);
        }
        let mut bytes = vec![0u8; (span.end - span.start) as usize];
        file.read_exact_at(&mut bytes, span.start)?;
        let text = text_of(&bytes);
        Ok(parse(text.strip_suffix('\r').unwrap_or(&text)))
    })
    .ok()
    .flatten()
}

/// The `seq` of the last whole record of a journal (0: none). Lines are
/// looked at from the end, each as little as it takes: a resumed run's
/// journal can be large, and its last line long (`run_finished` carries
/// every story).
fn last_seq(file: &File) -> std::io::Result<u64> {
    Ok(from_the_end(file, |span, ended| seq_of(file, span, ended))?.unwrap_or(0))
}

/// The lines of `file` from its end, one at a time, until `look` answers
/// for one (`None`: none did). `look` gets a line's span, without its
/// newline, and whether a newline follows it (a line without one may be
/// torn).
fn from_the_end<T>(
    file: &File,
    mut look: impl FnMut(std::ops::Range<u64>, bool) -> std::io::Result<Option<T>>,
) -> std::io::Result<Option<T>> {
    let len = file.metadata()?.len();
    // The line being looked at ends here (a newline, or the file's end).
    let mut end = len;
    loop {
        let start = line_start(file, end)?;
        if let Some(found) = look(start..end, end < len)? {
            return Ok(Some(found));
        }
        if start == 0 {
            return Ok(None);
        }
        end = start - 1;
    }
}

/// Where the line that ends at `end` starts: after the newline before it,
/// or at the file's start. Read backwards a block at a time.
fn line_start(file: &File, end: u64) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut block = vec![0u8; 64 * 1024];
    let mut pos = end;
    while pos > 0 {
        let from = pos.saturating_sub(block.len() as u64);
        let chunk = &mut block[..(pos - from) as usize];
        file.read_exact_at(chunk, from)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(from + i as u64 + 1);
        }
        pos = from;
    }
    Ok(0)
}

/// The `seq` of the record on the line at `span`: read from its first
/// bytes when the line is whole (`ended`: a newline follows it, and it
/// closes its object) and opens as [`super::record_line`] writes a record,
/// else parsed whole (a torn or foreign line: `None`).
fn seq_of(file: &File, span: std::ops::Range<u64>, ended: bool) -> std::io::Result<Option<u64>> {
    use std::os::unix::fs::FileExt;
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    if span.is_empty() {
        return Ok(None);
    }
    let len = (span.end - span.start) as usize;
    if ended {
        let mut head = [0u8; 32];
        let head = &mut head[..len.min(32)];
        file.read_exact_at(head, span.start)?;
        let mut last = [0u8; 1];
        file.read_exact_at(&mut last, span.end - 1)?;
        let seq = head.strip_prefix(b"{\"seq\":").and_then(|rest| {
            let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
            let number = std::str::from_utf8(&rest[..digits]).ok()?;
            (rest.get(digits) == Some(&b',')).then(|| number.parse::<u64>().ok())?
        });
        if let (Some(seq), b'}') = (seq, last[0]) {
            return Ok(Some(seq));
        }
    }
    let mut line = vec![0u8; len];
    file.read_exact_at(&mut line, span.start)?;
    Ok(serde_json::from_slice::<Seq>(&line).ok().map(|s| s.seq))
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
        let last = last_seq(&file)?;
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
    fn a_journal_read_in_parts_gives_every_line_once_in_order() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let every = |p: &Path| {
            let mut lines = Vec::new();
            each_line(p, |l| lines.push(l.to_string()));
            lines
        };
        let split = |p: &Path, parts: usize| {
            let got = each_line_split(p, parts, Vec::new, |v: &mut Vec<String>, l| {
                v.push(l.to_string())
            });
            assert!(got.len() <= parts.max(1), "one part per range");
            got.concat()
        };
        // Lines of 100 bytes: with an even count, the ranges of 2 and 4
        // parts start exactly where lines start.
        let even = dir.path().join("even.jsonl");
        std::fs::write(&even, format!("{}\n", "x".repeat(99)).repeat(20_000)).expect("a journal");
        // Lines of every length up to 700 bytes (some empty), CRLF endings,
        // a line that is not UTF-8, and a torn last line with no newline.
        let mixed = dir.path().join("mixed.jsonl");
        let mut bytes = Vec::new();
        let mut n = 0usize;
        while bytes.len() < 3 << 20 {
            let len = (n * 7919) % 701;
            bytes.extend(format!("{n}:{}", "y".repeat(len)).as_bytes());
            match n % 5 {
                0 => bytes.extend(b"\r\n"),
                1 => bytes.extend(b"\xff\xfe\n"),
                _ => bytes.push(b'\n'),
            }
            if n % 11 == 0 {
                bytes.push(b'\n');
            }
            n += 1;
        }
        bytes.extend(b"{\"seq\":9,\"t_ms\"");
        std::fs::write(&mixed, &bytes).expect("a journal");
        for p in [&even, &mixed] {
            let want = every(p);
            assert!(want.len() > 5_000);
            for parts in [0, 1, 2, 3, 4, 7, 16] {
                assert_eq!(split(p, parts), want, "{} in {parts} parts", p.display());
            }
        }
        // Under a megabyte: one part, whatever is asked.
        let small = dir.path().join("small.jsonl");
        std::fs::write(&small, "a\nb\n").expect("a journal");
        let got = each_line_split(&small, 8, Vec::new, |v: &mut Vec<String>, l| {
            v.push(l.to_string())
        });
        assert_eq!(got, vec![vec!["a".to_string(), "b".to_string()]]);
        // No journal: no lines.
        let none = split(&dir.path().join("none.jsonl"), 4);
        assert!(none.is_empty());
    }

    #[test]
    fn missing_journal_is_empty() {
        assert!(read(Path::new("/nonexistent/events.jsonl"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn an_opening_says_the_kind_and_event_of_a_written_record() {
        let line = |kind: &str, data: &str| {
            super::super::record_line(12, 3, 1_767_225_600_000, kind, data)
        };
        let open =
            |l: &str| Opening::of(l).map(|o| (o.kind.to_string(), o.event.map(str::to_string)));
        let e = line("event", r#"{"event":"story_started","story":"a"}"#);
        assert_eq!(
            open(&e),
            Some(("event".into(), Some("story_started".into())))
        );
        let o = line(
            "agent_output",
            r#"{"story":"a","attempt":1,"text":"{\"event\":\"x\"}"}"#,
        );
        assert_eq!(open(&o), Some(("agent_output".into(), None)));
        // Names past ASCII are read as written.
        let wide = line("événement", r#"{"event":"story_☃","story":"a"}"#);
        assert_eq!(
            open(&wide),
            Some(("événement".into(), Some("story_☃".into())))
        );
        // Data that does not open with its event's name: no name.
        let late = line("event", r#"{"story":"a","event":"story_skipped"}"#);
        assert_eq!(open(&late), Some(("event".into(), None)));
        // Escapes in the kind or the name, another layout, spacing, a line
        // torn in its opening: read whole.
        assert_eq!(open(&line("ev\"ent", "{}")), None);
        assert_eq!(
            open(&line("event", r#"{"event":"story\u005fskipped"}"#)),
            None
        );
        assert_eq!(
            open(r#"{"kind":"event","seq":7,"t_ms":1,"ts":2,"data":{}}"#),
            None
        );
        assert_eq!(
            open(r#"{"seq": 7, "t_ms": 1, "ts": 2, "kind": "event", "data": {}}"#),
            None
        );
        assert_eq!(
            open(r#"{"seq":7,"t_ms":,"ts":2,"kind":"event","data":{}}"#),
            None
        );
        assert_eq!(open(r#"{"seq":7,"t_ms":1,"ts":2,"kind":"eve"#), None);
        assert_eq!(
            open("{\"seq\":7,\"t_ms\":1,\"ts\":2,\"kind\":\"ev\u{1}ent\",\"data\":{}}"),
            None
        );
        // A number no record holds (past u64).
        assert_eq!(
            open(r#"{"seq":18446744073709551616,"t_ms":1,"ts":2,"kind":"event","data":{}}"#),
            None
        );
        // The data of a whole line, up to its closing brace.
        let data = |l: &str| Opening::of(l).and_then(|o| o.data().map(str::to_string));
        assert_eq!(
            data(&e).as_deref(),
            Some(r#"{"event":"story_started","story":"a"}"#)
        );
        assert_eq!(
            data(r#"{"seq":7,"t_ms":1,"ts":2,"kind":"event","data": {"a":1} }"#).as_deref(),
            Some(r#"{"a":1}"#)
        );
        let o = Opening::of(&e).expect("an opening");
        assert_eq!((o.seq, o.t_ms, o.ts), (12, 3, 1_767_225_600_000));
        // Only the opening is looked at: a line torn after it still opens.
        assert_eq!(
            open(r#"{"seq":7,"t_ms":1,"ts":2,"kind":"event","data":{"event":"notice","mes"#),
            Some(("event".into(), Some("notice".into())))
        );
    }

    #[test]
    fn the_last_line_is_the_last_one_that_parses_read_from_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "run-1").unwrap();
        let seq = |l: &str| serde_json::from_str::<Record>(l).ok().map(|r| r.seq);
        assert_eq!(last_line(&p, seq), None, "no journal");
        let mut w = Writer::open(&p).unwrap();
        assert_eq!(last_line(&p, seq), None, "an empty journal");
        w.append(&rec(1)).unwrap();
        let long = format!(
            "{{\"event\":\"run_finished\",\"x\":\"{}\"}}",
            "y".repeat(200_000)
        );
        w.append_line(&super::super::record_line(2, 5, 6, "event", &long))
            .unwrap();
        drop(w);
        assert_eq!(last_line(&p, seq), Some(2));
        // A torn line without a newline, then lines that do not parse and
        // a carriage return: each as `each_line` sees it.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"seq\":3,\"t_ms\":1,\"data\":{\"y\"")
            .unwrap();
        assert_eq!(last_line(&p, seq), Some(2));
        f.write_all(
            b"\n\n{\"seq\":4,\"t_ms\":1,\"ts\":2,\"kind\":\"event\",\"data\":{}}\r\nnot json\n",
        )
        .unwrap();
        drop(f);
        assert_eq!(last_line(&p, seq), Some(4));
        let mut every = Vec::new();
        each_line(&p, |l| every.extend(seq(l)));
        assert_eq!(every, vec![1, 2, 4]);
    }
}
