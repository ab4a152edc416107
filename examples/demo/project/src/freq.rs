//! (empty: written by story-002 of the demo plan)
