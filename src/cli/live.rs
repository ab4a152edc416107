//! The live channel of a running command (`approve`, `resume`, `demo`,
//! `mega approve`): its events and requests on `.cascade/live.sock` for
//! `cascade ui`, and the event journal under `.cascade/runs/`.
//!
//! Built with the `ui` feature; without it [`Live`] does nothing.

use std::path::Path;

use cascade_engine::config::RunOptions;
use cascade_engine::EventSink;

/// The live channel of this process, while it runs.
pub struct Live {
    #[cfg(feature = "ui")]
    publisher: Option<cascade_ui::live::Publisher>,
}

impl Live {
    /// Starts it for the repository whose state is in `cascade_dir` and
    /// lets it steer the run of `options` (call inside the async runtime).
    /// A channel that cannot start is a warning, never a failed run.
    #[allow(unused_variables)]
    pub fn start(cascade_dir: Option<&Path>, options: Option<&mut RunOptions>) -> Live {
        #[cfg(feature = "ui")]
        {
            let Some(dir) = cascade_dir else {
                return Live { publisher: None };
            };
            let steering = cascade_engine::control::steer::Steering::new();
            match cascade_ui::live::Publisher::start(dir, steering.clone()) {
                Ok(p) => {
                    if let Some(o) = options {
                        o.steering = Some(steering);
                    }
                    Live { publisher: Some(p) }
                }
                Err(e) => {
                    eprintln!("warning: no live view for `cascade ui`: {e}");
                    Live { publisher: None }
                }
            }
        }
        #[cfg(not(feature = "ui"))]
        Live {}
    }

    /// `sink`, with every event also published to the live channel.
    pub fn wrap(&self, sink: EventSink) -> EventSink {
        #[cfg(feature = "ui")]
        if let Some(p) = &self.publisher {
            return p.wrap(sink);
        }
        sink
    }

    /// Publishes a line of another event stream (a mega run's); returns a
    /// notice to show when the journal cannot be written.
    #[allow(unused_variables)]
    pub fn publish(&self, line: &impl serde::Serialize) -> Option<String> {
        #[cfg(feature = "ui")]
        if let Some(p) = &self.publisher {
            return serde_json::to_value(line).ok().and_then(|v| p.publish(v));
        }
        None
    }
}
