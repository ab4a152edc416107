//! Generated plans of any size, for benchmarks and tests of cascade at
//! scale (a 100,000-story `prd.json` is written on demand, never committed).
//!
//! The plan is deterministic (a fixed xorshift seed, the same on every
//! platform): story `i` (`story-000000`, ...) depends on up to
//! [`Shape::max_deps`] distinct earlier stories picked from the previous
//! [`Shape::window`], priorities rotate at random, and about one story in
//! [`Shape::complete_one_in`] is already complete. The default shape (3
//! dependencies from the previous 2,000, 1 in 20 complete) is the one the
//! batching benchmark has always used, so its figures stay comparable.
//!
//! ```
//! use cascade_plan::synthetic::{prd_json, Shape};
//! let text = prd_json(&Shape::new(10));
//! let prd = cascade_plan::Prd::from_json(text.as_bytes(), "prd.json".as_ref()).unwrap();
//! assert_eq!(prd.stories.len(), 10);
//! assert!(cascade_plan::validate_prd(&prd).is_ok());
//! ```

use std::fmt::Write as _;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Number of stories.
    pub stories: usize,
    /// Dependencies of each story (fewer for the first ones).
    pub max_deps: usize,
    /// Dependencies are picked among this many stories just before.
    pub window: usize,
    /// About one story in this many is complete already (0: none).
    pub complete_one_in: u64,
}

impl Shape {
    /// `stories` stories in the default shape.
    pub fn new(stories: usize) -> Shape {
        Shape {
            stories,
            max_deps: 3,
            window: 2000,
            complete_one_in: 20,
        }
    }

    /// No story complete yet (a plan about to run).
    pub fn all_pending(self) -> Shape {
        Shape {
            complete_one_in: 0,
            ..self
        }
    }

    /// Each story depends on up to `max_deps` earlier ones.
    pub fn deps(self, max_deps: usize) -> Shape {
        Shape { max_deps, ..self }
    }
}

/// The id of story `i`.
pub fn story_id(i: usize) -> String {
    format!("story-{i:06}")
}

/// A small xorshift generator: deterministic across runs and platforms.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The `prd.json` text of a plan of this shape (about 330 bytes a story).
pub fn prd_json(shape: &Shape) -> String {
    let n = shape.stories;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = String::with_capacity(n * 330 + 256);
    out.push_str("{\n  \"metadata\": {\"version\": \"1.0\", \"generator\": \"cascade bench\"},\n");
    out.push_str("  \"goal\": \"Synthetic plan for the batching benchmark\",\n");
    out.push_str("  \"objectives\": [\"scale\"],\n  \"stories\": [\n");
    let mut deps = Vec::with_capacity(shape.max_deps);
    for i in 0..n {
        deps.clear();
        let want = i.min(shape.max_deps);
        let window = i.min(shape.window) as u64;
        while deps.len() < want {
            let d = i - 1 - rng.below(window) as usize;
            if !deps.contains(&d) {
                deps.push(d);
            }
        }
        let priority = ["high", "medium", "low"][rng.below(3) as usize];
        let roll = rng.below(shape.complete_one_in.max(1));
        let status = if shape.complete_one_in > 0 && roll == 0 {
            "complete"
        } else {
            "pending"
        };
        if i > 0 {
            out.push_str(",\n");
        }
        let _ = write!(
            out,
            "    {{\"id\": \"{}\", \"title\": \"Story number {i}\", \
             \"description\": \"Implement part {i} of the synthetic system.\", \
             \"priority\": \"{priority}\", \"dependencies\": [",
            story_id(i)
        );
        for (k, d) in deps.iter().enumerate() {
            let sep = if k == 0 { "" } else { ", " };
            let _ = write!(out, "{sep}\"{}\"", story_id(*d));
        }
        let _ = write!(
            out,
            "], \"status\": \"{status}\", \
             \"acceptance_criteria\": [\"part {i} works\", \"tests for part {i} pass\"], \
             \"context_estimate\": \"small\"}}"
        );
    }
    out.push_str("\n  ]\n}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_valid_deterministic_and_shaped() {
        let shape = Shape::new(3000);
        let text = prd_json(&shape);
        assert_eq!(text, prd_json(&shape));
        let prd = crate::Prd::from_json(text.as_bytes(), "prd.json".as_ref()).unwrap();
        assert_eq!(prd.stories.len(), 3000);
        assert_eq!(prd.stories[2999].id, story_id(2999));
        let plan = crate::validate_prd(&prd).unwrap();
        let complete = prd.stories.iter().filter(|s| s.is_complete()).count();
        // About one in 20.
        assert!((100..200).contains(&complete), "{complete}");
        assert_eq!(plan.pending_len(), 3000 - complete);
        assert!(prd.stories[10..].iter().all(|s| s.dependencies.len() == 3));

        let flat = prd_json(&Shape::new(50).all_pending().deps(0));
        let prd = crate::Prd::from_json(flat.as_bytes(), "prd.json".as_ref()).unwrap();
        assert!(prd
            .stories
            .iter()
            .all(|s| s.dependencies.is_empty() && !s.is_complete()));
    }
}
