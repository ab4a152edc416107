//! End-to-end tests: engine.
