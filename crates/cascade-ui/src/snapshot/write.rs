//! The run snapshot written out as compact JSON, byte for byte what
//! `serde_json::to_writer` makes of [`Snapshot`] (its `Serialize` derive
//! stays the reference: the tests below hold the two to the same bytes).
//!
//! Why not serde: at 100,000 stories the document is about 47 MB in some
//! 2.5 million members, and serde_json writes each member name as a string
//! to escape and each value through a call per token; here a name and its
//! punctuation are one constant copy, and a string that needs no escape
//! (nearly all of them: ids, titles, agents) one check and one copy.
//! Floats and strings that do need escapes are still written by serde_json
//! itself, so their text cannot drift from it.

use std::io::{self, Write};

use serde_json::Value;

use super::{AttemptView, Snapshot, StoryView, Totals};

/// Where the document goes: a buffer, handed on whenever a list element
/// leaves it over [`SPILL`] bytes (the whole document is never held at
/// once by the thread that sends it).
struct Out<'w> {
    buf: Vec<u8>,
    to: To<'w>,
}

/// Where [`Out`] hands its buffer: to the writer, or kept piece by piece
/// (moved, not copied) by a thread that writes ahead of the one sending.
enum To<'w> {
    Writer(&'w mut dyn Write),
    Kept(Vec<Vec<u8>>),
}

/// See [`Out`].
const SPILL: usize = 64 << 10;

impl<'w> Out<'w> {
    fn new(to: To<'w>) -> Out<'w> {
        Out {
            buf: Vec::with_capacity(SPILL + (8 << 10)),
            to,
        }
    }

    fn put(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Hands the buffer on once it is large enough.
    fn spill(&mut self) -> io::Result<()> {
        if self.buf.len() >= SPILL {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.to {
            To::Writer(w) => {
                w.write_all(&self.buf)?;
                self.buf.clear();
            }
            To::Kept(pieces) => {
                if !self.buf.is_empty() {
                    let room = self.buf.capacity();
                    pieces.push(std::mem::replace(&mut self.buf, Vec::with_capacity(room)));
                }
            }
        }
        Ok(())
    }

    /// The pieces kept (none when written to a writer), the buffer flushed.
    fn into_kept(mut self) -> io::Result<Vec<Vec<u8>>> {
        self.flush()?;
        Ok(match self.to {
            To::Kept(pieces) => pieces,
            To::Writer(_) => Vec::new(),
        })
    }
}

/// A value as serde_json writes it.
trait Json {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()>;
}

impl Json for str {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        if plain(self.as_bytes()) {
            // Room made once for the three copies.
            o.buf.reserve(self.len() + 2);
            o.put(b"\"");
            o.put(self.as_bytes());
            o.put(b"\"");
            Ok(())
        } else {
            serde_json::to_writer(&mut o.buf, self).map_err(io::Error::from)
        }
    }
}

/// Whether serde_json writes `s` as it is between quotes: it escapes `"`,
/// `\` and the control characters below 0x20, and nothing else. Looked at
/// 8 bytes at a time (a snapshot has over a million strings, most of them
/// ids and titles of 10 to 30 bytes): a word holds such a byte when one of
/// its bytes is below 0x20, or equal to `"` or `\` (a zero byte after the
/// xor), as the classic "has a byte less than n" test finds.
fn plain(s: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS;
    let mut words = s.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        let x = u64::from_ne_bytes(b);
        let hits = below(x, 0x20)
            | below(x ^ (ONES * u64::from(b'"')), 1)
            | below(x ^ (ONES * u64::from(b'\\')), 1);
        if hits != 0 {
            return false;
        }
    }
    words
        .remainder()
        .iter()
        .all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

impl Json for String {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        self.as_str().write(o)
    }
}

impl Json for std::borrow::Cow<'_, str> {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        (**self).write(o)
    }
}

impl Json for bool {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        o.put(if *self { b"true" } else { b"false" });
        Ok(())
    }
}

macro_rules! integer {
    ($($t:ty),*) => {$(
        impl Json for $t {
            fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
                o.put(itoa::Buffer::new().format(*self).as_bytes());
                Ok(())
            }
        }
    )*};
}
integer!(u32, u64, i64, usize);

impl Json for f64 {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        // Finite or not, as serde_json writes it (its float formatting).
        serde_json::to_writer(&mut o.buf, self).map_err(io::Error::from)
    }
}

impl Json for Value {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        serde_json::to_writer(&mut o.buf, self).map_err(io::Error::from)
    }
}

impl<T: Json + ?Sized> Json for &T {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        (**self).write(o)
    }
}

/// A list of these values: `[…,…]`, handed to the writer as it grows.
fn list<T: Json>(o: &mut Out<'_>, values: impl Iterator<Item = T>) -> io::Result<()> {
    o.put(b"[");
    for (k, v) in values.enumerate() {
        if k > 0 {
            o.put(b",");
        }
        v.write(o)?;
        o.spill()?;
    }
    o.put(b"]");
    Ok(())
}

impl<T: Json> Json for Option<T> {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        match self {
            Some(v) => v.write(o),
            None => {
                o.put(b"null");
                Ok(())
            }
        }
    }
}

impl<T: Json> Json for [T] {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        list(o, self.iter())
    }
}

impl Json for cascade_plan::Dependencies<'_> {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        list(o, self.iter())
    }
}

impl<T: Json> Json for Vec<T> {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        self.as_slice().write(o)
    }
}

/// Members of an object, in this order, after `$open` (`{` for the first
/// member, `,` for a later one): `"a":…,"b":…`. The names are constants
/// that need no escape.
macro_rules! members {
    ($o:expr, $open:literal, $first:literal => $v0:expr $(, $name:literal => $v:expr)* $(,)?) => {{
        let o: &mut Out<'_> = $o;
        o.put(concat!($open, "\"", $first, "\":").as_bytes());
        Json::write(&$v0, o)?;
        $(
            o.put(concat!(",\"", $name, "\":").as_bytes());
            Json::write(&$v, o)?;
        )*
    }};
}

/// An object of these members, in this order: `{"a":…,"b":…}`.
macro_rules! object {
    ($o:expr, $($members:tt)*) => {{
        let o: &mut Out<'_> = $o;
        members!(o, "{", $($members)*);
        o.put(b"}");
        Ok(())
    }};
}

impl Json for StoryView<'_> {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        object!(o,
            "id" => self.id,
            "title" => self.title,
            "batch" => self.batch,
            "depends_on" => self.depends_on,
            "state" => self.state,
            "agent" => self.agent,
            "attempt" => self.attempt,
            "max_attempts" => self.max_attempts,
            "started_at_ms" => self.started_at_ms,
            "elapsed_ms" => self.elapsed_ms,
            "failure_kind" => self.failure_kind,
            "error" => self.error,
            "blocked_by" => self.blocked_by,
            "cost_usd" => self.cost_usd,
            "tokens_in" => self.tokens_in,
            "tokens_out" => self.tokens_out,
            "worker" => self.worker,
        )
    }
}

impl Json for AttemptView<'_> {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        object!(o,
            "story" => self.story,
            "attempt" => self.attempt,
            "agent" => self.agent,
            "phase" => self.phase,
            "start_ms" => self.start_ms,
            "end_ms" => self.end_ms,
            "outcome" => self.outcome,
            "failure_kind" => self.failure_kind,
            "slot" => self.slot,
        )
    }
}

impl Json for Totals {
    fn write(&self, o: &mut Out<'_>) -> io::Result<()> {
        object!(o,
            "tokens_in" => self.tokens_in,
            "tokens_out" => self.tokens_out,
            "cost_usd" => self.cost_usd,
            "cost_estimated" => self.cost_estimated,
            "gate_cache_hits" => self.gate_cache_hits,
            "gate_cache_saved_ms" => self.gate_cache_saved_ms,
            "merged" => self.merged,
            "failed" => self.failed,
            "blocked" => self.blocked,
            "pending" => self.pending,
            "total" => self.total,
        )
    }
}

/// Below this many stories the document is written on one thread (a
/// thread costs more than it saves).
const TWO_THREADS_FROM: usize = 2048;

impl Snapshot<'_> {
    /// Writes the document into `w` as `serde_json::to_writer` would. A
    /// large one is made on two threads (at 100,000 stories, some 47 MB
    /// made by one thread was a third of the first `GET /api/run`): this
    /// one writes the stories up to [`Snapshot::split`] as it makes them,
    /// another makes the rest meanwhile and keeps it, written after.
    pub(crate) fn write_json(&self, w: &mut dyn Write) -> io::Result<()> {
        let n = self.stories.len();
        if n < TWO_THREADS_FROM {
            let mut out = Out::new(To::Writer(w));
            self.before(&mut out, n)?;
            self.after(&mut out, n)?;
            return out.flush();
        }
        self.write_split(w, self.split())
    }

    /// Where the stories are split between the two threads: the second
    /// takes the stories from there on and all that follows them (the
    /// batches, the critical path, the attempts), so that both make about
    /// as much. A story's row takes about one and a half times as long to
    /// make as an attempt's (measured at 100,000 stories: three times the
    /// bytes, but made as it is written).
    fn split(&self) -> usize {
        let (n, attempts) = (self.stories.len(), self.attempts.len());
        (n / 2).saturating_add(attempts / 3).min(n)
    }

    /// The document with the stories before `k` (and all before them)
    /// written by this thread as they are made, the rest made meanwhile by
    /// another and written once this thread is done.
    fn write_split(&self, w: &mut dyn Write, k: usize) -> io::Result<()> {
        std::thread::scope(|scope| {
            let rest = scope.spawn(move || {
                let mut kept = Out::new(To::Kept(Vec::new()));
                self.after(&mut kept, k)?;
                kept.into_kept()
            });
            let mut out = Out::new(To::Writer(&mut *w));
            let first = self.before(&mut out, k).and_then(|()| out.flush());
            let rest = rest
                .join()
                .map_err(|_| io::Error::other("the snapshot's second writer failed"))?;
            first?;
            for piece in rest? {
                w.write_all(&piece)?;
            }
            Ok(())
        })
    }

    /// The document up to story `k` (not included): the run's members and
    /// the stories' opening.
    fn before(&self, o: &mut Out<'_>, k: usize) -> io::Result<()> {
        members!(o, "{",
            "run_id" => self.run_id,
            "status" => self.status,
            "live" => self.live,
            "paused" => self.paused,
            "last_event_id" => self.last_event_id,
            "prd" => self.prd,
            "target_branch" => self.target_branch,
            "schedule" => self.schedule,
            "parallel" => self.parallel,
            "started_at" => self.started_at,
            "updated_at" => self.updated_at,
            "elapsed_ms" => self.elapsed_ms,
        );
        o.put(b",\"stories\":[");
        self.rows(o, 0..k)
    }

    /// The document from story `k` on: the other stories and the members
    /// after them.
    fn after(&self, o: &mut Out<'_>, k: usize) -> io::Result<()> {
        self.rows(o, k..self.stories.len())?;
        o.put(b"]");
        members!(o, ",",
            "batches" => self.batches,
            "critical_path" => self.critical_path,
            "attempts" => self.attempts,
            "totals" => self.totals,
        );
        o.put(b"}");
        Ok(())
    }

    /// Stories `range`, each made as it is written (see
    /// [`super::Stories`]), each but the first of the list after a comma.
    fn rows(&self, o: &mut Out<'_>, range: std::ops::Range<usize>) -> io::Result<()> {
        for i in range {
            if i > 0 {
                o.put(b",");
            }
            self.stories.view(i).write(o)?;
            o.spill()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours<T: Json + ?Sized>(v: &T) -> String {
        let mut bytes = Vec::new();
        let mut out = Out::new(To::Writer(&mut bytes));
        v.write(&mut out).expect("written");
        out.flush().expect("flushed");
        String::from_utf8(bytes).expect("UTF-8")
    }

    /// A run of `n` stories in a chain, every other one with an attempt
    /// (so that the attempts, after the stories, are written too).
    fn chain(n: usize) -> (cascade_plan::Outline, crate::glance::RunGlance) {
        let stories: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                let deps: Vec<String> =
                    (i > 0).then(|| format!("s{}", i - 1)).into_iter().collect();
                serde_json::json!({"id": format!("s{i}"), "title": format!("T \"{i}\""),
                    "description": "d", "priority": "low", "dependencies": deps,
                    "status": "pending", "acceptance_criteria": []})
            })
            .collect();
        let prd =
            serde_json::json!({"metadata": {}, "goal": "g", "objectives": [], "stories": stories});
        let prd = cascade_plan::Outline::from_json(
            prd.to_string().as_bytes(),
            std::path::Path::new("p.json"),
        )
        .expect("a plan");
        let records: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                let attempts: Vec<serde_json::Value> = (i % 2 == 1)
                    .then(|| {
                        serde_json::json!({"attempt": 1, "agent": "a", "phase": "implementation",
                        "started_at": "2026-01-01T00:00:01.000Z", "outcome": "failed",
                        "error_type": "exit_code", "cost_usd": 0.5})
                    })
                    .into_iter()
                    .collect();
                serde_json::json!({"id": format!("s{i}"), "status": "failed", "attempts": attempts,
                    "error": "e\n"})
            })
            .collect();
        let state = serde_json::json!({"schema_version": 1, "run_id": "r", "prd": "p.json",
            "target_branch": "main", "project_root": "/x", "status": "running", "pid": 1,
            "started_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T00:00:09.000Z",
            "stories": records});
        (prd, serde_json::from_value(state).expect("a state"))
    }

    /// The snapshot of this run, as the dashboard makes it.
    fn snapshot<'a>(
        prd: &'a cascade_plan::Outline,
        state: &'a crate::glance::RunGlance,
        summary: &'a super::super::Summary,
        status: &'a crate::hub::Status,
    ) -> Snapshot<'a> {
        super::super::build(&super::super::Input {
            state: Some(state),
            prd: Some(prd),
            shape: None,
            prd_path: None,
            summary,
            status,
            now_ms: 1_767_225_600_000,
            gates: &|_, _| None,
        })
    }

    fn split_at(snapshot: &Snapshot<'_>, k: usize) -> String {
        let mut bytes = Vec::new();
        snapshot.write_split(&mut bytes, k).expect("written");
        String::from_utf8(bytes).expect("UTF-8")
    }

    /// Split anywhere between two threads, the document is the one
    /// serde_json writes: any number of stories (none, one, odd and even
    /// counts), every split point, and the varied run of the snapshot's
    /// own tests.
    #[test]
    fn a_document_written_on_two_threads_is_the_same_bytes() {
        let status = crate::hub::Status {
            run_id: None,
            live: true,
            paused: false,
            last_event_id: 3,
        };
        let none = super::super::Summary::default();
        let (varied, varied_state, said) = super::super::tests::varied_run();
        let chains: Vec<_> = [0, 1, 2, 3, 4, 7, 33].into_iter().map(chain).collect();
        let runs = chains
            .iter()
            .map(|(prd, state)| (prd, state, &none))
            .chain([(&varied, &varied_state, &said)]);
        for (prd, state, summary) in runs {
            let doc = snapshot(prd, state, summary, &status);
            let reference = serde_json::to_string(&doc).expect("serializable");
            let n = doc.stories.len();
            assert!(doc.split() <= n);
            for k in 0..=n {
                assert_eq!(split_at(&doc, k), reference, "{k} of {n}");
            }
            assert_eq!(ours_doc(&doc), reference, "{n}");
        }
        // Past the size written on two threads: the split the document
        // takes, and a few others.
        let (prd, state) = chain(TWO_THREADS_FROM + 1);
        let doc = snapshot(&prd, &state, &none, &status);
        let reference = serde_json::to_string(&doc).expect("serializable");
        assert!(ours_doc(&doc) == reference);
        let k = doc.split();
        assert!(0 < k && k < doc.stories.len(), "{k}");
        for k in [1, k - 1, doc.stories.len() - 1] {
            assert!(split_at(&doc, k) == reference, "{k}");
        }
    }

    fn ours_doc(doc: &Snapshot<'_>) -> String {
        let mut bytes = Vec::new();
        doc.write_json(&mut bytes).expect("written");
        String::from_utf8(bytes).expect("UTF-8")
    }

    /// Every byte value, alone and in each place of a word and of the
    /// bytes after the last word, among plain bytes of every kind.
    #[test]
    fn a_string_is_plain_when_serde_json_writes_it_unescaped() {
        let escaped = |s: &[u8]| {
            let text = String::from_utf8_lossy(s);
            serde_json::to_string(&*text).expect("json") != format!("\"{text}\"")
        };
        for len in 1..=19 {
            for at in 0..len {
                for b in 0..=0x7fu8 {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    assert_eq!(plain(&s), !escaped(&s), "{b:#x} at {at} of {len}");
                }
                // Bytes of multi-byte characters (0x80 and up) are plain.
                let mut s = "é☃𝄞xyz-story-000123".as_bytes()[..len].to_vec();
                s[at] = 0x7f;
                assert!(plain(&s));
            }
        }
        assert!(plain(b""));
        // The high bit set next to a byte just above 0x20 or a quote
        // (what a careless word test mistakes for one).
        assert!(plain("\u{a0}!\u{a3}#é]ÿ!".as_bytes()));
    }

    #[test]
    fn strings_and_numbers_are_written_as_serde_json_writes_them() {
        let strings = [
            "",
            "plain",
            "quote \" and \\ back",
            "tab\tnew\nline\r\u{8}\u{c}",
            "\u{1}\u{1f}\u{7f} é ☃ 𝄞",
            "\u{2028}\u{2029}",
        ];
        for s in strings {
            assert_eq!(ours(s), serde_json::to_string(s).expect("json"), "{s:?}");
        }
        for f in [
            0.0,
            -0.0,
            0.1 + 0.2,
            1e21,
            1e-7,
            12.5,
            f64::NAN,
            f64::INFINITY,
        ] {
            assert_eq!(ours(&f), serde_json::to_string(&f).expect("json"), "{f}");
        }
        for n in [0u64, 7, u64::MAX] {
            assert_eq!(ours(&n), serde_json::to_string(&n).expect("json"));
        }
        assert_eq!(
            ours(&i64::MIN),
            serde_json::to_string(&i64::MIN).expect("json")
        );
        let none: Option<&str> = None;
        assert_eq!(ours(&none), "null");
        let lists: Vec<Vec<&str>> = vec![vec![], vec!["a", "b\"c"]];
        assert_eq!(ours(&lists), serde_json::to_string(&lists).expect("json"));
    }
}
