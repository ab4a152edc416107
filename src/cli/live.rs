//! The live channel of a running command (`approve`, `resume`, `demo`,
//! `mega approve`): its events and requests on `.cascade/live.sock` for
//! `cascade ui`, and the event journal under `.cascade/runs/`.
//!
//! The channel opens at the run's first `run_started` (or `mega_started`)
//! event, that is once the run holds the repository's lock: a second
//! command refused by the lock never touches the first one's socket. The
//! events before it are kept and published first.
//!
//! Built with the `ui` feature; without it [`Live`] does nothing.

use std::path::Path;

use cascade_engine::config::RunOptions;
use cascade_engine::EventSink;

#[cfg(feature = "ui")]
mod channel {
    use std::path::PathBuf;
    use std::sync::Mutex;

    use cascade_engine::control::steer::Steering;
    use cascade_ui::live::{event_head, Publisher};

    pub enum State {
        /// Not open yet: the events so far (JSON text).
        Waiting(Vec<String>),
        Open(Publisher),
        Off,
    }

    pub struct Channel {
        pub dir: PathBuf,
        pub steering: Steering,
        pub state: Mutex<State>,
    }

    impl Channel {
        /// Publishes `v` (an event's JSON text), opening the channel at
        /// the run's start; returns a notice to show (the journal cannot be
        /// written).
        pub fn feed(&self, v: String) -> Option<String> {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            // Only read while waiting for the start: the events after it
            // (a run's last one lists every story) are not read again.
            let starts = |v: &str| {
                matches!(
                    event_head(v).0.as_deref(),
                    Some("run_started" | "mega_started")
                )
            };
            match &mut *st {
                State::Open(p) => p.publish_text(v),
                State::Off => None,
                State::Waiting(early) if !starts(&v) => {
                    early.push(v);
                    None
                }
                State::Waiting(early) => {
                    let early = std::mem::take(early);
                    match Publisher::start(&self.dir, self.steering.clone()) {
                        Ok(p) => {
                            let mut note = None;
                            for e in early.into_iter().chain(std::iter::once(v)) {
                                note = note.or(p.publish_text(e));
                            }
                            *st = State::Open(p);
                            note
                        }
                        Err(e) => {
                            *st = State::Off;
                            Some(format!("no live view for `cascade ui`: {e}"))
                        }
                    }
                }
            }
        }

        /// Closes the channel (removes the socket).
        pub fn close(&self) {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            *st = State::Off;
        }

        /// Takes the open publisher out (the channel is then off).
        pub fn take(&self) -> Option<Publisher> {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match std::mem::replace(&mut *st, State::Off) {
                State::Open(p) => Some(p),
                _ => None,
            }
        }
    }
}

/// The live channel of this process, while it runs.
pub struct Live {
    #[cfg(feature = "ui")]
    channel: Option<std::sync::Arc<channel::Channel>>,
}

impl Live {
    /// Prepares it for the repository whose state is in `cascade_dir` and
    /// lets it steer the run of `options`. A channel that cannot open is a
    /// notice, never a failed run.
    #[allow(unused_variables)]
    pub fn start(cascade_dir: Option<&Path>, options: Option<&mut RunOptions>) -> Live {
        #[cfg(feature = "ui")]
        {
            let Some(dir) = cascade_dir else {
                return Live { channel: None };
            };
            let steering = cascade_engine::control::steer::Steering::new();
            if let Some(o) = options {
                o.steering = Some(steering.clone());
            }
            Live {
                channel: Some(std::sync::Arc::new(channel::Channel {
                    dir: dir.to_path_buf(),
                    steering,
                    state: std::sync::Mutex::new(channel::State::Waiting(Vec::new())),
                })),
            }
        }
        #[cfg(not(feature = "ui"))]
        Live {}
    }

    /// `sink`, with every event also published to the live channel (a
    /// problem with it is reported as a notice after the event).
    pub fn wrap(&self, sink: EventSink) -> EventSink {
        #[cfg(feature = "ui")]
        if let Some(c) = &self.channel {
            let c = std::sync::Arc::clone(c);
            return std::sync::Arc::new(move |e: &cascade_engine::Event| {
                let note = serde_json::to_string(e).ok().and_then(|v| c.feed(v));
                sink(e);
                if let Some(message) = note {
                    sink(&cascade_engine::Event::Notice { message });
                }
            });
        }
        sink
    }

    /// Publishes a line of another event stream (a mega run's); returns a
    /// notice to show when the channel or its journal has a problem.
    #[allow(unused_variables)]
    pub fn publish(&self, line: &impl serde::Serialize) -> Option<String> {
        #[cfg(feature = "ui")]
        if let Some(c) = &self.channel {
            return serde_json::to_string(line).ok().and_then(|v| c.feed(v));
        }
        None
    }
}

impl Live {
    /// Ends the channel once every connected dashboard has been sent the
    /// run's last events (at most 2 s), then removes the socket.
    pub async fn finish(self) {
        #[cfg(feature = "ui")]
        if let Some(p) = self.channel.as_ref().and_then(|c| c.take()) {
            p.drain(std::time::Duration::from_secs(2)).await;
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        #[cfg(feature = "ui")]
        if let Some(c) = &self.channel {
            c.close();
        }
    }
}
