//! cascade-gates (being built).
