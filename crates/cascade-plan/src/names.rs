//! `Names`: every id of a plan stored back to back in one string, with a
//! compact open-addressing hash index over them (`index::Slots`).
//!
//! Resolving ~3 dependencies per story on a 100,000-story plan is the hot
//! loop of validation, and it is bound by cache misses, not arithmetic. A
//! `HashMap<&str, u32>` costs a 24-byte bucket per id plus a pointer chase to
//! each id's own allocation; here a slot is 8 bytes (32 bits of hash + the
//! position), probing is linear within a cache line, and the ids being
//! compared sit next to each other in one buffer. One allocation instead of
//! one per id, too.

use crate::index::Slots;

/// The ids of a plan by position, plus an index from id to first position.
#[derive(Debug, Clone, Default)]
pub(crate) struct Names {
    text: String,
    /// `end[i]` is where id `i` ends in `text` (it starts at `end[i - 1]`).
    end: Vec<u32>,
    /// Positions by id.
    slots: Slots,
}

impl Names {
    /// Stores `ids` (in order) and indexes each non-empty one; returns the
    /// names and `(first, later)` position pairs for ids seen twice.
    #[cfg(test)]
    pub(crate) fn new<'a>(ids: impl Iterator<Item = &'a str>) -> (Names, Vec<(u32, u32)>) {
        let mut names = Names::with_capacity(0);
        for id in ids {
            names.push(id);
        }
        let dups = names.build_index();
        (names, dups)
    }

    /// Room for `n` ids (about 16 bytes each).
    pub(crate) fn with_capacity(n: usize) -> Names {
        Names {
            text: String::with_capacity(n * 16),
            end: Vec::with_capacity(n),
            slots: Slots::default(),
        }
    }

    /// Appends the id of the next position.
    pub(crate) fn push(&mut self, id: &str) {
        self.text.push_str(id);
        self.end.push(self.text.len() as u32);
    }

    /// Indexes every non-empty id (load factor at most 1/2); returns
    /// `(first, later)` position pairs for ids seen twice.
    pub(crate) fn build_index(&mut self) -> Vec<(u32, u32)> {
        let n = self.end.len();
        self.slots = Slots::for_len(n);
        let mut duplicates = Vec::new();
        for pos in 0..n as u32 {
            if let Err(first) = self.insert(pos) {
                duplicates.push((first, pos));
            }
        }
        duplicates
    }

    /// Number of ids.
    pub(crate) fn len(&self) -> usize {
        self.end.len()
    }

    /// The id at `pos`.
    pub(crate) fn get(&self, pos: usize) -> &str {
        id_in(&self.text, &self.end, pos)
    }

    /// The first position with this id.
    pub(crate) fn find(&self, id: &str) -> Option<u32> {
        self.slots.find(id, |p| self.get(p as usize))
    }

    /// Indexes the id at `pos` (unless empty), or returns the position that
    /// already has it.
    fn insert(&mut self, pos: u32) -> Result<(), u32> {
        let (text, end) = (&self.text, &self.end);
        let id = id_in(text, end, pos as usize);
        if id.is_empty() {
            return Ok(());
        }
        self.slots.insert(pos, id, |p| id_in(text, end, p as usize))
    }
}

/// The id at `pos` among ids stored back to back in `text` (id `i` ends at `end[i]`).
fn id_in<'a>(text: &'a str, end: &[u32], pos: usize) -> &'a str {
    let start = if pos == 0 { 0 } else { end[pos - 1] as usize };
    &text[start..end[pos] as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_finds_and_reports_duplicates() {
        let ids = ["a", "", "bb", "a", "ccc", "bb"];
        let (names, dups) = Names::new(ids.iter().copied());
        assert_eq!(names.len(), 6);
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(names.get(i), *id);
        }
        assert_eq!(names.find("a"), Some(0));
        assert_eq!(names.find("bb"), Some(2));
        assert_eq!(names.find("ccc"), Some(4));
        assert_eq!(names.find(""), None);
        assert_eq!(names.find("zz"), None);
        assert_eq!(dups, [(0, 3), (2, 5)]);
    }

    #[test]
    fn many_similar_ids() {
        let ids: Vec<String> = (0..50_000).map(|i| format!("story-{i:06}")).collect();
        let (names, dups) = Names::new(ids.iter().map(String::as_str));
        assert!(dups.is_empty());
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(names.find(id), Some(i as u32));
        }
        assert_eq!(names.find("story-050000"), None);
    }

    #[test]
    fn empty() {
        let (names, _) = Names::new(std::iter::empty());
        assert_eq!(names.len(), 0);
        assert_eq!(names.find("x"), None);
    }
}
