//! End-to-end tests of the `cascade` binary: temp git repos, scripted agents.
//!
//! One test binary (fast to link); one module per area.

mod common;

mod agents;
mod agents_check;
mod api_agent;
mod base_first;
mod census;
mod control;
mod corpus;
mod demo;
mod docs;
mod engine;
mod examples;
mod fleet;
mod gates;
mod hardening;
mod inspect;
mod integration;
mod interrupt;
mod lean_build;
mod live_failures;
mod mega;
mod mock_anthropic;
mod mock_http;
mod mock_model;
mod mock_openai;
mod modes;
mod parity;
mod paths;
mod plan;
mod planning;
mod race;
mod real_agents;
mod reliability;
mod remote_cache;
mod sandbox;
#[cfg(feature = "ui")]
mod ui;
#[cfg(feature = "ui")]
mod ui_browser;
mod verify;
#[cfg(feature = "ui")]
mod webdriver;
