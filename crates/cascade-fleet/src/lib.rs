//! cascade-fleet: stories of one plan run on many machines through NATS
//! JetStream, merged by one coordinator.
//!
//! The fleet is an executor of cascade-engine: the coordinator
//! ([`Coordinator`], set as `RunOptions::executor`) runs the scheduler,
//! state, retries and merge queue exactly as a local run does, and sends
//! each attempt's work (agent, commit, verification, gates, review) as a job
//! to the workers ([`worker::run`]), which run it with the engine's own steps
//! (`Engine::run_job`) and push the result to the shared git remote. Git is
//! the transport of code (the git CLI), JetStream of jobs, results and
//! heartbeats.
//!
//! # API summary
//! - [`Coordinator::connect`]`(`[`CoordinatorConfig`]`)`: connects, sets up
//!   the streams, returns the executor (wrap it in
//!   `cascade_engine::executor::ExecutorHandle`).
//! - [`worker::run`]`(`[`WorkerConfig`]`, sink, drain, kill)`: the worker
//!   loop; [`WorkerEvent`]s go to `sink` (the binary prints them).
//! - [`status::status`]`(url)`: live workers and the queue ([`FleetStatus`]).
//! - [`protocol`]: names of streams, subjects, consumer and bucket, and the
//!   JSON messages ([`protocol::JobMsg`], [`protocol::ResultMsg`],
//!   [`protocol::Heartbeat`]).
//! - [`FleetError`]: `is_usage()` => exit 2.

mod bases;
pub mod coordinator;
pub mod error;
pub mod git;
mod ledger;
mod live;
pub mod nats;
pub mod protocol;
mod refs;
mod registry;
pub mod status;
pub mod timing;
pub mod workdir;
pub mod worker;

pub use coordinator::{Coordinator, CoordinatorConfig};
pub use error::FleetError;
pub use status::FleetStatus;
pub use worker::{WorkerConfig, WorkerEvent, WorkerSink};
