//! textkit: small text utilities.
//!
//! Every module below starts as an empty stub; one story of the demo plan
//! writes each of them (see `prd.json`).

pub mod case;
pub mod freq;
pub mod report;
pub mod slug;
pub mod summary;
pub mod words;
