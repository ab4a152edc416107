//! End-to-end tests: gates.
