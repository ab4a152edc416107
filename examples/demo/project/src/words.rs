//! (empty: written by story-001 of the demo plan)
