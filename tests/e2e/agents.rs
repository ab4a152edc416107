//! End-to-end tests: agents.
