//! cascade-plan (being built).
