//! (empty: written by story-005 of the demo plan)
