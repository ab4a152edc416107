//! (empty: written by story-006 of the demo plan)
