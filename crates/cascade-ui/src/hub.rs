//! The dashboard's view of "the run": the records of the live run (from
//! its live channel) or, with none, of the last run (from its journal),
//! and the fan-out of new records to every event stream.
//!
//! A background task keeps trying the repository's live socket (a cheap
//! connect, once a second while nothing is live): when a run starts, the
//! dashboard switches to it; when it ends, its records stay on show.
//!
//! A record is kept as an [`Entry`]: the text every event stream sends
//! for it and its story, not its parsed data (at 100,000 stories a run has
//! hundreds of thousands of records, and their `Value` trees were most of
//! the dashboard's memory). What the run view needs from them is folded
//! into a [`Summary`] as they arrive; a story's view parses that story's
//! records again.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;

use serde_json::value::RawValue;
use serde_json::Value;

use crate::live::{journal, LiveClient, Record};
use crate::lock;
use crate::snapshot::{Head, Summary};

/// What event streams get.
#[derive(Debug, Clone)]
pub(crate) enum Feed {
    Record(Arc<Entry>),
    /// The records of a run just put on show, in order, as one message: a
    /// run's journal can hold far more records than the channel holds
    /// messages (at 100,000 stories, hundreds of thousands), and a stream
    /// open then must get them all, not lose most and reload.
    Records(Arc<[Arc<Entry>]>),
    /// The run on show changed (a new run went live, or the live one ended).
    Source,
}

/// One record of the run on show, as the dashboard keeps it.
#[derive(Debug)]
pub(crate) struct Entry {
    pub seq: u64,
    /// An engine event (not agent output).
    pub event: bool,
    /// The story it is about, if any.
    pub story: Option<Box<str>>,
    /// Its server-sent event text (`sse::message`).
    pub sse: Box<str>,
}

impl Entry {
    /// The entry of a record, and its head when it is an event (borrowed
    /// from `data`).
    fn new<'d>(
        seq: u64,
        kind: &str,
        data: &'d str,
        times: (u64, u64),
    ) -> (Entry, Option<Head<'d>>) {
        let head: Option<Head<'d>> = serde_json::from_str(data).ok();
        let event = kind == "event";
        let control = event && head.as_ref().and_then(|h| h.event.as_deref()) == Some("control");
        let story = head
            .as_ref()
            .and_then(|h| h.story.as_deref())
            .map(Box::from);
        let entry = Entry {
            seq,
            event,
            story,
            sse: crate::sse::message(seq, kind, data, times, control).into(),
        };
        (entry, head.filter(|_| event))
    }

    /// From a journal line (`None`: not a record, e.g. a torn last line).
    fn parse(line: &str) -> Option<(Entry, Option<Head<'_>>)> {
        let l = Line::of(line)?;
        Some(Entry::new(l.seq, &l.kind, l.data.get(), (l.t_ms, l.ts)))
    }

    /// The record's data, parsed again from its text (`t_ms` and `ts`
    /// included).
    pub fn data(&self) -> Option<Value> {
        let json = self.sse.split("\ndata: ").nth(1)?.split('\n').next()?;
        serde_json::from_str(json).ok()
    }
}

/// A journal line's parts (its data left unparsed).
#[derive(serde::Deserialize)]
struct Line<'a> {
    seq: u64,
    t_ms: u64,
    ts: u64,
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    data: &'a RawValue,
}

impl Line<'_> {
    /// `None`: not a record (a torn or foreign line).
    fn of(line: &str) -> Option<Line<'_>> {
        serde_json::from_str(line).ok()
    }
}

/// What the records of a journal say and the `seq` of its last record,
/// without keeping the records: what the run view needs of a finished
/// run's journal when nobody asked for its records yet.
fn summarize_journal(path: &std::path::Path) -> (Summary, u64) {
    let mut summary = Summary::default();
    let mut last = 0;
    journal::each_line(path, |line| {
        let Some(l) = Line::of(line) else { return };
        last = l.seq;
        if l.kind != "event" {
            return;
        }
        if let Ok(head) = serde_json::from_str::<Head>(l.data.get()) {
            summary.add(&head);
        }
    });
    (summary, last)
}

/// The records of a journal, in order, and what they say.
fn read_journal(path: &std::path::Path) -> (Vec<Arc<Entry>>, Arc<Summary>) {
    let mut summary = Summary::default();
    let mut records = Vec::new();
    journal::each_line(path, |line| {
        if let Some((entry, head)) = Entry::parse(line) {
            if let Some(head) = &head {
                summary.add(head);
            }
            records.push(Arc::new(entry));
        }
    });
    (records, Arc::new(summary))
}

#[derive(Default)]
struct View {
    run_id: Option<String>,
    live: bool,
    paused: bool,
    records: Vec<Arc<Entry>>,
    /// What `records` say, for the run view (shared with the snapshots
    /// being built: a record that arrives meanwhile copies it first).
    summary: Arc<Summary>,
    client: Option<Arc<LiveClient>>,
    /// The state's run id whose journal `records` came from (no live run).
    loaded: Option<String>,
    /// Live: the last `seq` of the run's journal when we connected; live
    /// engine events up to it are already in `records` (a resumed run's
    /// earlier events come from the journal, this process's from it too).
    journaled: u64,
    /// A finished run on show whose records are not read yet (only their
    /// `summary`): its journal and the `seq` of its last record. Streams
    /// and story views read them when they first ask
    /// ([`Hub::with_records`]); the run view never does.
    unread: Option<(PathBuf, u64)>,
}

pub(crate) struct Hub {
    cascade_dir: PathBuf,
    view: Mutex<View>,
    tx: broadcast::Sender<Feed>,
    /// Held while the unread records of the run on show are read (one
    /// reader at a time; the view stays free meanwhile).
    reading: Mutex<()>,
}

/// How the run on show stands.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Status {
    pub run_id: Option<String>,
    pub live: bool,
    pub paused: bool,
    pub last_event_id: u64,
}

impl Hub {
    pub fn new(cascade_dir: PathBuf) -> Arc<Hub> {
        let (tx, _) = broadcast::channel(4096);
        Arc::new(Hub {
            cascade_dir,
            view: Mutex::new(View::default()),
            tx,
            reading: Mutex::new(()),
        })
    }

    /// Follows live runs until the process ends.
    pub fn spawn_watch(self: &Arc<Hub>) -> tokio::task::JoinHandle<()> {
        let hub = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                match LiveClient::connect(&hub.cascade_dir).await {
                    Ok((client, hello, mut rx)) => {
                        // The run's history so far, from its journal.
                        let (past, summary) = hub.journal_of(hello.run_id.as_deref());
                        let replay: Arc<[Arc<Entry>]> = past.as_slice().into();
                        {
                            let mut v = lock(&hub.view);
                            *v = View {
                                run_id: hello.run_id,
                                live: true,
                                paused: hello.paused,
                                journaled: past.last().map_or(0, |r| r.seq),
                                records: past,
                                summary,
                                client: Some(Arc::new(client)),
                                loaded: None,
                                unread: None,
                            };
                            // Streams already open get the history too
                            // (under the lock: a stream opening now gets
                            // it from `records` instead, not twice).
                            let _ = hub.tx.send(Feed::Source);
                            let _ = hub.tx.send(Feed::Records(replay));
                        }
                        while let Some(r) = rx.recv().await {
                            hub.push(r);
                        }
                        {
                            let mut v = lock(&hub.view);
                            v.live = false;
                            v.paused = false;
                            v.client = None;
                            v.loaded = v.run_id.clone();
                        }
                        let _ = hub.tx.send(Feed::Source);
                    }
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(1000)).await;
                    }
                }
            }
        })
    }

    /// The journal of `run_id` (empty when there is none).
    fn journal_of(&self, run_id: Option<&str>) -> (Vec<Arc<Entry>>, Arc<Summary>) {
        match run_id.and_then(|id| journal::path(&self.cascade_dir, id)) {
            Some(p) => read_journal(&p),
            None => Default::default(),
        }
    }

    fn push(&self, r: Record) {
        let data = serde_json::to_string(&r.data).unwrap_or_else(|_| "{}".into());
        let (entry, head) = Entry::new(r.seq, &r.kind, &data, (r.t_ms, r.ts));
        let entry = Arc::new(entry);
        {
            let mut v = lock(&self.view);
            if entry.event && entry.seq <= v.journaled {
                return; // read from the journal already
            }
            if let Some(h) = &head {
                let event = h.event.as_deref();
                if event == Some("run_started") && v.run_id.is_none() {
                    v.run_id = h.run_id.as_deref().map(str::to_string);
                }
                if event == Some("control") && h.ok == Some(true) {
                    match h.action.as_deref() {
                        Some("pause") => v.paused = true,
                        Some("resume") => v.paused = false,
                        _ => {}
                    }
                }
                Arc::make_mut(&mut v.summary).add(h);
            }
            v.records.push(Arc::clone(&entry));
        }
        let _ = self.tx.send(Feed::Record(entry));
    }

    /// With no live run: shows the run `run_id` (the run the state file
    /// names; the caller has read it) from its journal, unless it is on
    /// show already. Only what the run view needs is read (see
    /// [`summarize_journal`]), unless event streams are open: they get the
    /// records at once.
    pub fn show_finished(&self, run_id: Option<&str>) {
        let changed = {
            let v = lock(&self.view);
            !v.live && v.loaded.as_deref() != run_id
        };
        if !changed {
            return;
        }
        let path = run_id.and_then(|id| journal::path(&self.cascade_dir, id));
        let (records, summary, unread) = match path {
            Some(p) if self.tx.receiver_count() == 0 => {
                let (summary, last) = summarize_journal(&p);
                (Vec::new(), Arc::new(summary), Some((p, last)))
            }
            Some(p) => {
                let (records, summary) = read_journal(&p);
                (records, summary, None)
            }
            None => Default::default(),
        };
        let mut v = lock(&self.view);
        if v.live {
            return;
        }
        v.run_id = run_id.map(str::to_string);
        v.loaded = v.run_id.clone();
        v.summary = summary;
        v.journaled = 0;
        v.records = records;
        v.unread = unread;
        // Streams open now get the records (under the lock: a stream
        // opening later gets them from `records` instead). One opened since
        // the look above has them read here.
        if self.tx.receiver_count() > 0 {
            if let Some((p, _)) = v.unread.take() {
                v.records = read_journal(&p).0;
            }
            let _ = self.tx.send(Feed::Source);
            let _ = self.tx.send(Feed::Records(v.records.as_slice().into()));
        }
    }

    /// Runs `f` on the view once the records of the run on show are read
    /// (see [`View::unread`]): they are read outside the view's lock, and
    /// again if the run on show changed meanwhile.
    fn with_records<T>(&self, f: impl FnOnce(&View) -> T) -> T {
        loop {
            {
                let v = lock(&self.view);
                if v.unread.is_none() {
                    return f(&v);
                }
            }
            let _one = lock(&self.reading);
            let Some(path) = lock(&self.view).unread.as_ref().map(|(p, _)| p.clone()) else {
                continue;
            };
            let records = read_journal(&path).0;
            let mut v = lock(&self.view);
            if v.unread.as_ref().is_some_and(|(p, _)| *p == path) {
                v.unread = None;
                v.records = records;
            }
        }
    }

    pub fn status(&self) -> Status {
        let v = lock(&self.view);
        Status {
            run_id: v.run_id.clone(),
            live: v.live,
            paused: v.paused,
            last_event_id: match &v.unread {
                Some((_, last)) => *last,
                None => v.records.last().map_or(0, |r| r.seq),
            },
        }
    }

    /// The records so far (after `after`), and the feed of the next ones
    /// (subscribed under the same lock: nothing is missed or repeated).
    /// The records are read first if they were not (a blocking call).
    pub fn subscribe(&self, after: u64) -> (Vec<Arc<Entry>>, broadcast::Receiver<Feed>) {
        self.with_records(|v| {
            let rx = self.tx.subscribe();
            let past = v
                .records
                .iter()
                .filter(|r| r.seq > after)
                .cloned()
                .collect();
            (past, rx)
        })
    }

    /// What the records of the run on show say, for the run view.
    pub fn summary(&self) -> Arc<Summary> {
        Arc::clone(&lock(&self.view).summary)
    }

    /// The data of the event records about `story`, in order.
    pub fn story_events(&self, story: &str) -> Vec<Value> {
        let mine: Vec<Arc<Entry>> = self.with_records(|v| {
            v.records
                .iter()
                .filter(|r| r.event && r.story.as_deref() == Some(story))
                .cloned()
                .collect()
        });
        mine.iter().filter_map(|e| e.data()).collect()
    }

    /// The live run's channel, if one is live.
    pub fn client(&self) -> Option<Arc<LiveClient>> {
        lock(&self.view).client.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::record_line;

    /// A finished run's journal with every kind of line a reader meets:
    /// events the summary folds and events it does not, agent output, a
    /// mega run's feature, escapes, another layout, lines that do not parse,
    /// and a torn last line.
    fn journal(dir: &std::path::Path) -> PathBuf {
        let p = journal::path(dir, "run-1").expect("a plain run id");
        let mut w = journal::Writer::open(&p).expect("the journal");
        let lines = [
            (
                "event",
                r#"{"event":"run_started","run_id":"run-1","total":3}"#,
            ),
            (
                "event",
                r#"{"event":"story_started","story":"a","attempt":1,"max_attempts":3,"worker":"w1"}"#,
            ),
            (
                "agent_output",
                r#"{"story":"a","attempt":1,"text":"{\"event\":\"story_skipped\",\"story\":\"a\"}"}"#,
            ),
            (
                "event",
                r#"{"event":"gate_finished","story":"a","cached":true,"name":"tests"}"#,
            ),
            (
                "event",
                r#"{"event":"gate_finished","story":"a","cached":false}"#,
            ),
            ("event", r#"{"event":"merge_started","story":"a"}"#),
            (
                "event",
                r#"{"event":"agent_finished","story":"c","attempt":1}"#,
            ),
            ("event", r#"{"story":"b","event":"story_skipped"}"#),
            (
                "event",
                r#"{"event":"story\u005fstarted","story":"q\"uote","max_attempts":2}"#,
            ),
            (
                "event",
                r#"{"event":"job_started","story":"a","feature":"f","worker":"w2"}"#,
            ),
            ("event", r#"{"event":"retry_scheduled","story":"a"}"#),
            (
                "event",
                r#"{"event":"run_finished","stories":[{"id":"a"}]}"#,
            ),
        ];
        for (seq, (kind, data)) in lines.iter().enumerate() {
            w.append_line(&record_line(seq as u64 + 1, 1, 2, kind, data))
                .expect("a line");
        }
        for raw in [
            r#"{"seq":18,"t_ms":1,"ts":2,"kind":"event","data":{"event":5,"story":"e"}}"#,
            r#"{"seq":19,"t_ms":1,"ts":2,"kind":"event","data": {"event":"story_skipped","story":"e"} }"#,
            r#"{"kind": "event", "seq": 20, "t_ms": 1, "ts": 2, "data": {"event": "story_skipped", "story": "c"}}"#,
            r#"{"seq":21,"t_ms":1,"ts":2,"kind":"event","data":{"event":"story_skipped","story":"d"}, oops}"#,
            r#"{"seq":22,"t_ms":1,"ts":2,"kind":"event","data":{"event":"agent_finished","story":"d"}, oops}"#,
            "not json",
            r#"{"seq":23,"t_ms":1,"ts":2,"kind":"event","data":{"event":"story_started","sto"#,
        ] {
            w.append_line(raw).expect("a raw line");
        }
        p
    }

    #[test]
    fn a_journal_summarized_unread_says_what_its_records_say() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let p = journal(dir.path());
        // Every record read and folded, the long way.
        let mut summary = Summary::default();
        journal::each_line(&p, |line| {
            if let Some((_, Some(head))) = Entry::parse(line) {
                summary.add(&head);
            }
        });
        let records = read_journal(&p).0;
        let (quick, last) = summarize_journal(&p);
        assert_eq!(quick, summary);
        assert_eq!(*read_journal(&p).1, summary);
        assert_eq!(Some(last), records.last().map(|r| r.seq));
        assert_eq!(last, 20);
        // What it says, to be sure the journal says something.
        let plain = summary.stories(None).expect("the plain run's stories");
        let said = |id: &str| plain.get(id).expect("a story heard of");
        assert_eq!(said("a").max_attempts, Some(3));
        assert!(!said("a").merging, "a retry after the merge started");
        assert_eq!(said("a").cache_hits, 1);
        assert!(said("b").skipped && said("c").skipped);
        assert_eq!(said("q\"uote").max_attempts, Some(2));
        assert!(plain.get("d").is_none());
        assert!(summary.stories(Some("f")).is_some());
    }

    #[test]
    fn a_finished_run_shows_its_summary_first_and_its_records_when_asked() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let p = journal(dir.path());
        let (records, summary) = read_journal(&p);
        let hub = Hub::new(dir.path().to_path_buf());
        hub.show_finished(Some("run-1"));
        assert!(lock(&hub.view).unread.is_some(), "records left unread");
        assert_eq!(*hub.summary(), *summary);
        assert_eq!(hub.status().last_event_id, 20);
        assert_eq!(hub.status().run_id.as_deref(), Some("run-1"));
        // A story's view and a stream read them.
        let events = hub.story_events("a");
        assert_eq!(events.len(), 6);
        assert_eq!(events[0]["event"], "story_started");
        assert_eq!(events[0]["t_ms"], 1);
        let (past, _rx) = hub.subscribe(3);
        let seqs: Vec<u64> = past.iter().map(|r| r.seq).collect();
        let want: Vec<u64> = records.iter().map(|r| r.seq).filter(|&s| s > 3).collect();
        assert_eq!(seqs, want);
        let sse: Vec<&str> = past.iter().map(|r| &*r.sse).collect();
        let want: Vec<&str> = records
            .iter()
            .filter(|r| r.seq > 3)
            .map(|r| &*r.sse)
            .collect();
        assert_eq!(sse, want);
        assert_eq!(hub.status().last_event_id, 20);
    }

    #[test]
    fn streams_open_when_a_run_is_shown_get_its_records_at_once() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let p = journal(dir.path());
        let (records, _) = read_journal(&p);
        let hub = Hub::new(dir.path().to_path_buf());
        let (past, mut rx) = hub.subscribe(0);
        assert!(past.is_empty());
        hub.show_finished(Some("run-1"));
        assert!(lock(&hub.view).unread.is_none());
        assert!(matches!(rx.try_recv(), Ok(Feed::Source)));
        let mut sent = Vec::new();
        while let Ok(Feed::Records(rs)) = rx.try_recv() {
            sent.extend(rs.iter().map(|r| r.seq));
        }
        assert_eq!(sent, records.iter().map(|r| r.seq).collect::<Vec<_>>());
    }

    /// A journal of `n` story events, `seq` 1 to `n`.
    fn long_journal(dir: &std::path::Path, n: u64) -> PathBuf {
        let p = journal::path(dir, "run-1").expect("a plain run id");
        let mut w = journal::Writer::open(&p).expect("the journal");
        for seq in 1..=n {
            let data = format!(r#"{{"event":"story_started","story":"s{seq}","attempt":1}}"#);
            w.append_line(&record_line(seq, 1, 2, "event", &data))
                .expect("a line");
        }
        p
    }

    #[test]
    fn a_stream_open_when_a_long_run_is_shown_gets_every_record() {
        // More records than the channel holds messages: a dashboard whose
        // first request is the event stream, on a large run.
        let dir = tempfile::tempdir().expect("a temp dir");
        let n = 10_000;
        long_journal(dir.path(), n);
        let hub = Hub::new(dir.path().to_path_buf());
        let (past, mut rx) = hub.subscribe(0);
        assert!(past.is_empty());
        hub.show_finished(Some("run-1"));
        let mut sent = Vec::new();
        loop {
            match rx.try_recv() {
                Ok(Feed::Source) => {}
                Ok(Feed::Record(r)) => sent.push(r.seq),
                Ok(Feed::Records(rs)) => sent.extend(rs.iter().map(|r| r.seq)),
                Err(broadcast::error::TryRecvError::Empty) => break,
                Err(e) => panic!("the stream lost records: {e:?}"),
            }
        }
        assert_eq!(sent, (1..=n).collect::<Vec<_>>());
    }
}
