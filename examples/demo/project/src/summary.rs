//! (empty: written by story-004 of the demo plan)
