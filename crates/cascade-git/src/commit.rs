//! Owned by the engine work (issue 5): commit helpers.
