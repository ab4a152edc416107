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
    /// The entry of a record, and its head when it is an event.
    fn new(seq: u64, kind: &str, data: &str, times: (u64, u64)) -> (Entry, Option<Head>) {
        let event = kind == "event";
        let head: Option<Head> = serde_json::from_str(data).ok();
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

    /// From a record of the live channel.
    fn of(r: &Record) -> (Entry, Option<Head>) {
        let data = serde_json::to_string(&r.data).unwrap_or_else(|_| "{}".into());
        Entry::new(r.seq, &r.kind, &data, (r.t_ms, r.ts))
    }

    /// From a journal line (`None`: not a record, e.g. a torn last line).
    fn parse(line: &str) -> Option<(Entry, Option<Head>)> {
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
        let l: Line<'_> = serde_json::from_str(line).ok()?;
        Some(Entry::new(l.seq, &l.kind, l.data.get(), (l.t_ms, l.ts)))
    }

    /// The record's data, parsed again from its text (`t_ms` and `ts`
    /// included).
    pub fn data(&self) -> Option<Value> {
        let json = self.sse.split("\ndata: ").nth(1)?.split('\n').next()?;
        serde_json::from_str(json).ok()
    }
}

/// The records of a journal, in order, with what they say folded in.
fn read_journal(path: &std::path::Path) -> (Vec<Arc<Entry>>, Arc<Summary>) {
    let mut entries = Vec::new();
    let mut summary = Summary::default();
    journal::each_line(path, |line| {
        if let Some((entry, head)) = Entry::parse(line) {
            if let Some(h) = &head {
                summary.add(h);
            }
            entries.push(Arc::new(entry));
        }
    });
    (entries, Arc::new(summary))
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
}

pub(crate) struct Hub {
    cascade_dir: PathBuf,
    view: Mutex<View>,
    tx: broadcast::Sender<Feed>,
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
                        let replay = past.clone();
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
                            };
                            // Streams already open get the history too
                            // (under the lock: a stream opening now gets
                            // it from `records` instead, not twice).
                            let _ = hub.tx.send(Feed::Source);
                            for r in replay {
                                let _ = hub.tx.send(Feed::Record(r));
                            }
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
        let (entry, head) = Entry::of(&r);
        let entry = Arc::new(entry);
        {
            let mut v = lock(&self.view);
            if entry.event && entry.seq <= v.journaled {
                return; // read from the journal already
            }
            if let Some(h) = &head {
                let event = h.event.as_deref();
                if event == Some("run_started") && v.run_id.is_none() {
                    v.run_id = h.run_id.clone();
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

    /// With no live run: shows the records of `run_id` (the run the state
    /// file names; the caller has read it) from its journal, unless they are
    /// on show already.
    pub fn show_finished(&self, run_id: Option<&str>) {
        let changed = {
            let v = lock(&self.view);
            !v.live && v.loaded.as_deref() != run_id
        };
        if !changed {
            return;
        }
        let (records, summary) = self.journal_of(run_id);
        {
            let mut v = lock(&self.view);
            if v.live {
                return;
            }
            v.run_id = run_id.map(str::to_string);
            v.loaded = v.run_id.clone();
            v.records = records.clone();
            v.summary = summary;
            v.journaled = 0;
            let _ = self.tx.send(Feed::Source);
            for r in records {
                let _ = self.tx.send(Feed::Record(r));
            }
        }
    }

    pub fn status(&self) -> Status {
        let v = lock(&self.view);
        Status {
            run_id: v.run_id.clone(),
            live: v.live,
            paused: v.paused,
            last_event_id: v.records.last().map_or(0, |r| r.seq),
        }
    }

    /// The records so far (after `after`), and the feed of the next ones
    /// (subscribed under the same lock: nothing is missed or repeated).
    pub fn subscribe(&self, after: u64) -> (Vec<Arc<Entry>>, broadcast::Receiver<Feed>) {
        let v = lock(&self.view);
        let rx = self.tx.subscribe();
        let past = v
            .records
            .iter()
            .filter(|r| r.seq > after)
            .cloned()
            .collect();
        (past, rx)
    }

    /// What the records of the run on show say, for the run view.
    pub fn summary(&self) -> Arc<Summary> {
        Arc::clone(&lock(&self.view).summary)
    }

    /// The data of the event records about `story`, in order.
    pub fn story_events(&self, story: &str) -> Vec<Value> {
        let mine: Vec<Arc<Entry>> = lock(&self.view)
            .records
            .iter()
            .filter(|r| r.event && r.story.as_deref() == Some(story))
            .cloned()
            .collect();
        mine.iter().filter_map(|e| e.data()).collect()
    }

    /// The live run's channel, if one is live.
    pub fn client(&self) -> Option<Arc<LiveClient>> {
        lock(&self.view).client.clone()
    }
}
