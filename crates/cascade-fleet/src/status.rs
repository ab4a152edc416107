//! `cascade fleet status`: the live workers (from their heartbeats) and the
//! job queue (waiting: not delivered yet; in flight: delivered, not acked).

use serde::Serialize;

use crate::error::FleetError;
use crate::nats::Fleet;
use crate::protocol::Heartbeat;
use crate::registry;

/// What `fleet status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct FleetStatus {
    pub url: String,
    pub workers: Vec<Heartbeat>,
    pub queue: Queue,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Queue {
    /// Jobs in the stream (waiting + in flight).
    pub jobs: u64,
    /// Published, not taken by a worker yet.
    pub waiting: u64,
    /// Taken by a worker, not finished.
    pub in_flight: u64,
    /// Deliveries beyond the first (jobs of dead or stopped workers).
    pub redelivered: u64,
    /// Slots of the live workers, and those running a job.
    pub slots: usize,
    pub busy: usize,
}

/// Reads the fleet's state.
pub async fn status(url: &str) -> Result<FleetStatus, FleetError> {
    let fleet = Fleet::connect(url, "cascade-fleet-status").await?;
    let mut jobs = fleet.jobs_stream().await?;
    let consumer = fleet.workers_consumer(&jobs).await?;
    let store = fleet.workers_kv().await?;
    let workers = registry::live_workers(&store)
        .await
        .map_err(|e| fleet.js_error(e))?;
    let total = jobs
        .info()
        .await
        .map_err(|e| fleet.js_error(e))?
        .state
        .messages;
    let mut consumer = consumer;
    let info = consumer.info().await.map_err(|e| fleet.js_error(e))?;
    Ok(FleetStatus {
        url: url.to_string(),
        queue: Queue {
            jobs: total,
            waiting: info.num_pending,
            in_flight: info.num_ack_pending as u64,
            redelivered: info.num_redelivered as u64,
            slots: workers.iter().map(|w| w.slots).sum(),
            busy: workers.iter().map(|w| w.jobs.len()).sum(),
        },
        workers,
    })
}
