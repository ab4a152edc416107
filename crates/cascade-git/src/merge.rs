//! Owned by the engine work (issue 5): merge helpers.
