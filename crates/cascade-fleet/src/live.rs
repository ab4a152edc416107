//! The coordinator's live feed of results: an ordered consumer of the
//! results stream (this repository's subjects, from now on), made again
//! as soon as the connection to NATS is back after an outage.
//!
//! Why: a NATS restart loses the ordered (ephemeral) consumer, and
//! async-nats notices only after two missed idle heartbeats of its fixed
//! 15 s; meanwhile the results workers publish once NATS is back would sit
//! in the stream unheard. The new consumer starts right after the last
//! result read, so nothing published meanwhile is missed (and a result read
//! twice is a duplicate the caller ignores).

use std::time::Duration;

use async_nats::jetstream::consumer::{self, pull::Ordered};
use async_nats::jetstream::stream;
use futures_util::StreamExt;

use crate::error::FleetError;
use crate::nats::Fleet;
use crate::protocol::ResultMsg;

/// How often the reader looks at the connection.
const CONNECTION_CHECK: Duration = Duration::from_millis(250);

/// The first consumer (made by the caller, so that failing to make it is
/// the coordinator's error) and where the next one starts.
pub(crate) struct Feed {
    messages: Ordered,
    next_sequence: u64,
}

/// The live results of `filter`, from now on.
pub(crate) async fn open(
    fleet: &Fleet,
    results: &stream::Stream,
    filter: &str,
) -> Result<Feed, FleetError> {
    let mut consumer = results
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: filter.to_string(),
            deliver_policy: consumer::DeliverPolicy::New,
            ..Default::default()
        })
        .await
        .map_err(|e| fleet.js_error(e))?;
    // "New" starts after the stream's last message as the server saw it.
    let next_sequence = consumer
        .info()
        .await
        .map(|i| i.delivered.stream_sequence + 1)
        .map_err(|e| fleet.js_error(e))?;
    let messages = consumer.messages().await.map_err(|e| fleet.js_error(e))?;
    Ok(Feed {
        messages,
        next_sequence,
    })
}

/// Reads `feed` into `deliver` until the task is aborted, making a new
/// consumer after each outage (see the module doc).
pub(crate) fn spawn(
    fleet: Fleet,
    results: stream::Stream,
    filter: String,
    feed: Feed,
    deliver: impl Fn(ResultMsg) + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Feed {
            mut messages,
            mut next_sequence,
        } = feed;
        loop {
            read_until_reconnected(&fleet, &mut messages, &mut next_sequence, &deliver).await;
            messages = reopen(&results, &filter, next_sequence).await;
        }
    })
}

/// Delivers what `messages` brings until the connection, having been
/// down, is up again (or the consumer ends).
async fn read_until_reconnected(
    fleet: &Fleet,
    messages: &mut Ordered,
    next_sequence: &mut u64,
    deliver: &impl Fn(ResultMsg),
) {
    let mut check = tokio::time::interval(CONNECTION_CHECK);
    // A reconnect is told by the client's count of connections, not by
    // seeing it down: a restart shorter than a check would go unseen (as
    // it did under load in CI).
    let connects = fleet.connects();
    loop {
        tokio::select! {
            m = messages.next() => match m {
                None => return,
                Some(Err(_)) => {}
                Some(Ok(m)) => {
                    if let Ok(info) = m.info() {
                        *next_sequence = info.stream_sequence + 1;
                    }
                    if let Ok(r) = serde_json::from_slice::<ResultMsg>(&m.payload) {
                        deliver(r);
                    }
                }
            },
            _ = check.tick() => {
                if fleet.connected() && fleet.connects() > connects {
                    return;
                }
            }
        }
    }
}

/// A consumer from `start`, retried until NATS takes it.
async fn reopen(results: &stream::Stream, filter: &str, start: u64) -> Ordered {
    loop {
        let made = results
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: filter.to_string(),
                deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                },
                ..Default::default()
            })
            .await;
        if let Ok(consumer) = made {
            if let Ok(messages) = consumer.messages().await {
                return messages;
            }
        }
        tokio::time::sleep(CONNECTION_CHECK).await;
    }
}
