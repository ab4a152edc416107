//! (empty: written by story-003 of the demo plan)
