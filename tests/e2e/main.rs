//! End-to-end tests of the `cascade` binary: temp git repos, scripted agents.
//!
//! One test binary (fast to link); one module per area.

mod common;

mod agents;
mod agents_check;
mod control;
mod demo;
mod engine;
mod gates;
mod mega;
mod paths;
mod plan;
mod planning;
mod remote_cache;
mod verify;
