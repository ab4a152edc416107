//! The dashboard's view of "the run": the records of the live run (from
//! its live channel) or, with none, of the last run (from its journal),
//! and the fan-out of new records to every event stream.
//!
//! A background task keeps trying the repository's live socket (a cheap
//! connect, once a second while nothing is live): when a run starts, the
//! dashboard switches to it; when it ends, its records stay on show.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::live::{journal, LiveClient, Record};
use crate::lock;

/// What event streams get.
#[derive(Debug, Clone)]
pub(crate) enum Feed {
    Record(Arc<Record>),
    /// The run on show changed (a new run went live, or the live one ended).
    Source,
}

#[derive(Default)]
struct View {
    run_id: Option<String>,
    live: bool,
    paused: bool,
    records: Vec<Arc<Record>>,
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
            hub.load_from_disk();
            loop {
                match LiveClient::connect(&hub.cascade_dir).await {
                    Ok((client, hello, mut rx)) => {
                        // The run's history so far, from its journal.
                        let past = hub.journal_of(hello.run_id.as_deref());
                        let replay = past.clone();
                        {
                            let mut v = lock(&hub.view);
                            *v = View {
                                run_id: hello.run_id,
                                live: true,
                                paused: hello.paused,
                                journaled: past.last().map_or(0, |r| r.seq),
                                records: past,
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
    fn journal_of(&self, run_id: Option<&str>) -> Vec<Arc<Record>> {
        run_id
            .and_then(|id| journal::path(&self.cascade_dir, id))
            .and_then(|p| journal::read(&p).ok())
            .unwrap_or_default()
            .into_iter()
            .map(Arc::new)
            .collect()
    }

    fn push(&self, r: Record) {
        let r = Arc::new(r);
        {
            let mut v = lock(&self.view);
            if r.kind == "event" && r.seq <= v.journaled {
                return; // read from the journal already
            }
            if r.kind == "event" {
                let event = r.data.get("event").and_then(|e| e.as_str());
                if event == Some("run_started") && v.run_id.is_none() {
                    v.run_id = r
                        .data
                        .get("run_id")
                        .and_then(|x| x.as_str())
                        .map(str::to_string);
                }
                if event == Some("control")
                    && r.data.get("ok") == Some(&serde_json::Value::Bool(true))
                {
                    match r.data.get("action").and_then(|a| a.as_str()) {
                        Some("pause") => v.paused = true,
                        Some("resume") => v.paused = false,
                        _ => {}
                    }
                }
            }
            v.records.push(Arc::clone(&r));
        }
        let _ = self.tx.send(Feed::Record(r));
    }

    /// With no live run: the journal of the run the state file names.
    pub fn load_from_disk(&self) {
        let run_id = cascade_engine::state::RunState::load(&self.cascade_dir.join("state.json"))
            .ok()
            .flatten()
            .map(|s| s.run_id);
        let changed = {
            let v = lock(&self.view);
            !v.live && v.loaded != run_id
        };
        if !changed {
            return;
        }
        let records = self.journal_of(run_id.as_deref());
        {
            let mut v = lock(&self.view);
            if v.live {
                return;
            }
            v.run_id = run_id.clone();
            v.loaded = run_id;
            v.records = records.clone();
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
    pub fn subscribe(&self, after: u64) -> (Vec<Arc<Record>>, broadcast::Receiver<Feed>) {
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

    /// All records of the run on show.
    pub fn records(&self) -> Vec<Arc<Record>> {
        lock(&self.view).records.clone()
    }

    /// The live run's channel, if one is live.
    pub fn client(&self) -> Option<Arc<LiveClient>> {
        lock(&self.view).client.clone()
    }
}
