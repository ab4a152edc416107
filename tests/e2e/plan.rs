//! End-to-end tests: plan.
