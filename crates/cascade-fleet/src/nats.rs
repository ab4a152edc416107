//! The NATS side: connecting, and the streams, consumer and bucket of the
//! protocol, created on first use with the same settings by whoever comes
//! first (coordinator, worker or `fleet status`).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, stream};

use crate::error::FleetError;
use crate::protocol::*;

/// A connection to the fleet's NATS server (or cluster).
#[derive(Clone)]
pub struct Fleet {
    pub url: String,
    pub client: async_nats::Client,
    pub js: jetstream::Context,
}

impl Fleet {
    /// Connects (the first connection must succeed; later outages are
    /// reconnected without end, see `connected`).
    pub async fn connect(url: &str, name: &str) -> Result<Fleet, FleetError> {
        check_url(url)?;
        let opts = async_nats::ConnectOptions::new()
            .name(name)
            .connection_timeout(Duration::from_secs(5))
            .request_timeout(Some(Duration::from_secs(5)))
            .max_reconnects(None);
        let client = async_nats::connect_with_options(url, opts)
            .await
            .map_err(|e| FleetError::Connect {
                url: url.to_string(),
                message: e.to_string(),
            })?;
        let js = jetstream::new(client.clone());
        Ok(Fleet {
            url: url.to_string(),
            client,
            js,
        })
    }

    /// Whether the connection is up right now.
    pub fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// How many times the client has connected (the first connection
    /// counts): it grows with each reconnect, however short the outage.
    pub fn connects(&self) -> u64 {
        self.client
            .statistics()
            .connects
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn js_error(&self, e: impl std::fmt::Display) -> FleetError {
        FleetError::JetStream {
            url: self.url.clone(),
            message: e.to_string(),
        }
    }

    /// The jobs stream (work queue).
    pub async fn jobs_stream(&self) -> Result<stream::Stream, FleetError> {
        self.js
            .get_or_create_stream(stream::Config {
                name: JOBS_STREAM.to_string(),
                subjects: vec!["cascade.jobs.>".to_string()],
                retention: stream::RetentionPolicy::WorkQueue,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .map_err(|e| self.js_error(e))
    }

    /// The results stream.
    pub async fn results_stream(&self) -> Result<stream::Stream, FleetError> {
        self.js
            .get_or_create_stream(stream::Config {
                name: RESULTS_STREAM.to_string(),
                subjects: vec!["cascade.results.>".to_string()],
                retention: stream::RetentionPolicy::Limits,
                max_age: RESULTS_MAX_AGE,
                ..Default::default()
            })
            .await
            .map_err(|e| self.js_error(e))
    }

    /// The workers' shared durable pull consumer of the jobs stream.
    pub async fn workers_consumer(
        &self,
        jobs: &stream::Stream,
    ) -> Result<consumer::PullConsumer, FleetError> {
        jobs.get_or_create_consumer(
            WORKERS_CONSUMER,
            consumer::pull::Config {
                durable_name: Some(WORKERS_CONSUMER.to_string()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: ack_wait(),
                max_deliver: -1,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| self.js_error(e))
    }

    /// The workers' heartbeat bucket.
    pub async fn workers_kv(&self) -> Result<kv::Store, FleetError> {
        if let Ok(store) = self.js.get_key_value(WORKERS_BUCKET).await {
            return Ok(store);
        }
        self.js
            .create_key_value(kv::Config {
                bucket: WORKERS_BUCKET.to_string(),
                history: 1,
                max_age: WORKER_TTL,
                ..Default::default()
            })
            .await
            .map_err(|e| self.js_error(e))
    }
}

/// The consumer's ack wait: [`ACK_WAIT`], or `CASCADE_FLEET_ACK_WAIT_SECS`
/// (at least 3 progress intervals are kept; for tests and slow networks).
pub fn ack_wait() -> Duration {
    std::env::var("CASCADE_FLEET_ACK_WAIT_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|s| *s >= 1)
        .map(Duration::from_secs)
        .unwrap_or(ACK_WAIT)
}

/// Deliveries after which a worker reports a job failed instead of running
/// it: [`MAX_DELIVERIES`], or `CASCADE_FLEET_MAX_DELIVERIES` (at least 1).
pub fn max_deliveries() -> u64 {
    std::env::var("CASCADE_FLEET_MAX_DELIVERIES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(MAX_DELIVERIES)
}

/// How often a running job is progressed: a third of the ack wait, at most
/// [`PROGRESS_EVERY`].
pub fn progress_every() -> Duration {
    (ack_wait() / 3)
        .min(PROGRESS_EVERY)
        .max(Duration::from_millis(300))
}

/// `nats://HOST:PORT` (also `tls://`, `ws://`, `wss://`, or `HOST:PORT`;
/// a comma-separated list of servers is accepted as NATS clients do).
fn check_url(url: &str) -> Result<(), FleetError> {
    let bad = |message: &str| FleetError::BadUrl {
        url: url.to_string(),
        message: message.to_string(),
    };
    if url.trim().is_empty() {
        return Err(bad("it is empty"));
    }
    for one in url.split(',') {
        let rest = match one.split_once("://") {
            Some((scheme, rest)) => {
                if !matches!(scheme, "nats" | "tls" | "ws" | "wss") {
                    return Err(bad(&format!("unknown scheme '{scheme}'")));
                }
                rest
            }
            None => one,
        };
        let host = rest.rsplit('@').next().unwrap_or(rest);
        if host.is_empty() || host.starts_with(':') {
            return Err(bad("no host"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert!(check_url("nats://127.0.0.1:4222").is_ok());
        assert!(check_url("localhost:4222").is_ok());
        assert!(check_url("nats://a:1,nats://b:2").is_ok());
        assert!(check_url("http://x:1").is_err());
        assert!(check_url("").is_err());
        assert!(check_url("nats://:4222").is_err());
    }
}
