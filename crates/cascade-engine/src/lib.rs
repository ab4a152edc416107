//! cascade-engine (being built).
