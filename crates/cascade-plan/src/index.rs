//! [`IdIndex`]: finding an item of a list by its id without scanning the
//! list, the index a [`crate::Prd`]'s stories (and cascade's run state) are
//! looked up through.
//!
//! The owner keeps the list; the index maps ids to positions (a std
//! `HashMap`) and confirms every hit against the list, so an index can only
//! be stale in the list it points into, never wrong about what it found.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// How an [`IdIndex`] has been used: what a test checks to prove that a
/// code path looks items up by id without scanning the list per lookup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Lookups answered.
    pub lookups: u64,
    /// Passes over the whole list: the index (re)built because it was new
    /// or the list's length had changed. A per-lookup linear search would
    /// show up here as one pass per lookup.
    pub builds: u64,
}

/// Positions of a list's items by id (the first item wins when an id is
/// repeated, as with a linear search), built on first use and rebuilt when
/// the list's length has changed since.
///
/// The owner keeps the list and passes it to every call. The index notices
/// items added or removed; it cannot notice an id changed in place, so an
/// owner that renames items calls [`IdIndex::clear`]. A hit is always
/// confirmed against the list, so a stale index never returns an item with
/// another id.
///
/// Cloning gives an empty index (rebuilt on first use), and any two indexes
/// compare equal: it is derived data, not part of its owner's value.
#[derive(Default)]
pub struct IdIndex {
    /// Boxed: the index adds one pointer to its owner (a `Prd` is moved by value).
    built: RwLock<Option<Box<Built>>>,
    lookups: AtomicU64,
    builds: AtomicU64,
}

struct Built {
    /// The length of the list it was built from (plus items indexed since).
    len: usize,
    positions: HashMap<Box<str>, usize>,
}

impl Built {
    fn new<'a>(len: usize, id_at: impl Fn(usize) -> &'a str) -> Built {
        let mut positions = HashMap::with_capacity(len);
        for pos in 0..len {
            // A repeated id keeps its first position.
            positions.entry(id_at(pos).into()).or_insert(pos);
        }
        Built { len, positions }
    }

    /// The indexed position of `id`, confirmed against the list.
    fn find<'a>(&self, id: &str, id_at: impl Fn(usize) -> &'a str) -> Option<usize> {
        let pos = *self.positions.get(id)?;
        (pos < self.len && id_at(pos) == id).then_some(pos)
    }
}

impl IdIndex {
    /// The position of the first item whose `key` is `id`.
    pub fn position<T>(&self, items: &[T], id: &str, key: impl Fn(&T) -> &str) -> Option<usize> {
        self.position_by(items.len(), id, |p| key(&items[p]))
    }

    /// [`IdIndex::position`] without locking (the owner is borrowed mutably).
    pub fn position_mut<T>(
        &mut self,
        items: &[T],
        id: &str,
        key: impl Fn(&T) -> &str,
    ) -> Option<usize> {
        *self.lookups.get_mut() += 1;
        let id_at = |p: usize| key(&items[p]);
        let built = self.built.get_mut().unwrap_or_else(|e| e.into_inner());
        current(built, &self.builds, items.len(), &id_at).find(id, id_at)
    }

    /// [`IdIndex::position`] in a list of `len` items whose ids are read
    /// through `id_at` (an owner that keeps its ids elsewhere than in its
    /// items).
    pub fn position_by<'a>(
        &self,
        len: usize,
        id: &str,
        id_at: impl Fn(usize) -> &'a str,
    ) -> Option<usize> {
        self.with_finder(len, id_at, |find| find(id))
    }

    /// [`IdIndex::position_by`] for many ids at once: `f` gets a finder that
    /// answers as it does, with the index locked (and brought up to date)
    /// once for all its lookups.
    pub fn with_finder<'a, R>(
        &self,
        len: usize,
        id_at: impl Fn(usize) -> &'a str,
        f: impl FnOnce(&dyn Fn(&str) -> Option<usize>) -> R,
    ) -> R {
        let looked = std::cell::Cell::new(0u64);
        let answer = loop {
            let built = self.built.read().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = built.as_ref().filter(|b| b.len == len) {
                break f(&|id: &str| {
                    looked.set(looked.get() + 1);
                    b.find(id, &id_at)
                });
            }
            drop(built);
            // Built (or rebuilt) under the write lock, then read again.
            let mut built = self.built.write().unwrap_or_else(|e| e.into_inner());
            current(&mut built, &self.builds, len, &id_at);
        };
        self.lookups.fetch_add(looked.get(), Ordering::Relaxed);
        answer
    }

    /// The owner has just appended the last item of `items`: it is indexed
    /// without a rebuild (when the index is current).
    pub fn pushed<T>(&mut self, items: &[T], key: impl Fn(&T) -> &str) {
        let built = self.built.get_mut().unwrap_or_else(|e| e.into_inner());
        let n = items.len();
        match built.as_mut() {
            Some(b) if n > 0 && b.len + 1 == n => {
                b.positions
                    .entry(key(&items[n - 1]).into())
                    .or_insert(n - 1);
                b.len = n;
            }
            // Out of step: the next lookup rebuilds.
            _ => *built = None,
        }
    }

    /// Forgets everything (after ids were changed in place).
    pub fn clear(&mut self) {
        *self.built.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// How the index has been used so far.
    pub fn stats(&self) -> IndexStats {
        IndexStats {
            lookups: self.lookups.load(Ordering::Relaxed),
            builds: self.builds.load(Ordering::Relaxed),
        }
    }
}

/// The index for a list of `len` items whose ids `id_at` reads, built (and
/// counted) when missing or out of date.
fn current<'a, 'b>(
    built: &'b mut Option<Box<Built>>,
    builds: &AtomicU64,
    len: usize,
    id_at: &impl Fn(usize) -> &'a str,
) -> &'b Built {
    if built.as_ref().is_some_and(|b| b.len != len) {
        *built = None;
    }
    built.get_or_insert_with(|| {
        builds.fetch_add(1, Ordering::Relaxed);
        Box::new(Built::new(len, id_at))
    })
}

impl Clone for IdIndex {
    fn clone(&self) -> IdIndex {
        IdIndex::default()
    }
}

impl PartialEq for IdIndex {
    fn eq(&self, _: &IdIndex) -> bool {
        true
    }
}

impl std::fmt::Debug for IdIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdIndex")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &String) -> &str {
        s
    }

    #[test]
    fn finds_the_first_item_and_builds_once() {
        let items: Vec<String> = (0..5000).map(|i| format!("story-{i:06}")).collect();
        let index = IdIndex::default();
        for (i, id) in items.iter().enumerate() {
            assert_eq!(index.position(&items, id, key), Some(i));
        }
        assert_eq!(index.position(&items, "story-999999", key), None);
        assert_eq!(
            index.stats(),
            IndexStats {
                lookups: 5001,
                builds: 1
            }
        );
        let dup = vec!["a".to_string(), "b".into(), "a".into(), String::new()];
        let index = IdIndex::default();
        assert_eq!(index.position(&dup, "a", key), Some(0));
        assert_eq!(index.position(&dup, "", key), Some(3));
    }

    /// Many lookups under one lock answer as one lookup apiece would, count
    /// as many lookups, and build the index once, or again when the list
    /// changed length.
    #[test]
    fn a_finder_answers_as_single_lookups_do() {
        let mut items: Vec<String> = (0..300).map(|i| format!("s{}", i % 250)).collect();
        items.push(String::new());
        let probes: Vec<String> = (0..400)
            .map(|i| format!("s{i}"))
            .chain([String::new()])
            .collect();
        let one = IdIndex::default();
        let many = IdIndex::default();
        let single: Vec<Option<usize>> = probes
            .iter()
            .map(|p| one.position(&items, p, key))
            .collect();
        let found: Vec<Option<usize>> = many.with_finder(
            items.len(),
            |p| &items[p],
            |find| probes.iter().map(|p| find(p)).collect(),
        );
        assert_eq!(found, single);
        assert_eq!(many.stats(), one.stats());
        // Out of date (shorter now): rebuilt once, then current.
        items.truncate(10);
        let found = many.with_finder(items.len(), |p| &items[p], |find| (find("s9"), find("s11")));
        assert_eq!(found, (Some(9), None));
        assert_eq!(many.position(&items, "s3", key), Some(3));
        assert_eq!(many.stats().builds, 2);
        assert_eq!(many.stats().lookups, one.stats().lookups + 3);
    }

    #[test]
    fn follows_pushes_and_rebuilds_when_the_length_changed() {
        let mut items: Vec<String> = vec!["a".into(), "b".into()];
        let mut index = IdIndex::default();
        assert_eq!(index.position_mut(&items, "b", key), Some(1));
        for i in 0..100 {
            items.push(format!("n{i}"));
            index.pushed(&items, key);
        }
        assert_eq!(index.position_mut(&items, "n99", key), Some(101));
        // Appended items were indexed as they came: built once.
        let grown = index.stats().builds;
        assert_eq!(grown, 1);
        // Removed behind its back: the length tells.
        items.retain(|s| s != "a");
        assert_eq!(index.position(&items, "b", key), Some(0));
        assert_eq!(index.position(&items, "a", key), None);
        assert_eq!(index.stats().builds, grown + 1);
        // Renamed in place: cleared by the owner.
        items[0] = "z".into();
        index.clear();
        assert_eq!(index.position(&items, "z", key), Some(0));
        assert_eq!(index.clone().stats(), IndexStats::default());
    }
}
