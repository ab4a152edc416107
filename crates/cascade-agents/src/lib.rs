//! cascade-agents (being built).
