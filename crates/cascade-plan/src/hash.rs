//! A small, fast, non-cryptographic hasher for id lookups.
//!
//! Plans are local files the user controls, so hash flooding is not a
//! concern, and SipHash (std's default) is a visible share of the time spent
//! on a 100,000-story plan. This is the multiply-rotate scheme of rustc's
//! `FxHasher`, processing eight bytes at a time, with a strong final mix.

use std::hash::{BuildHasherDefault, Hasher};

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// The hasher; use through [`FxBuild`].
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, mut bytes: &[u8]) {
        while bytes.len() >= 8 {
            let (head, rest) = bytes.split_at(8);
            let mut w = [0u8; 8];
            w.copy_from_slice(head);
            self.add(u64::from_le_bytes(w));
            bytes = rest;
        }
        if !bytes.is_empty() {
            let mut w = [0u8; 8];
            w[..bytes.len()].copy_from_slice(bytes);
            self.add(u64::from_le_bytes(w) ^ ((bytes.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    /// Finishes with murmur3's 64-bit mixer: the multiply-rotate rounds leave
    /// the low bits (which pick the hash table bucket) depending on only a few
    /// input bytes, and ids like `story-000123` differ in exactly those.
    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// `BuildHasher` for [`FxHasher`].
pub type FxBuild = BuildHasherDefault<FxHasher>;

/// A `HashMap` using [`FxHasher`].
pub type FxHashMap<K, V> = std::collections::HashMap<K, V, FxBuild>;

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn similar_ids_spread_over_low_bits() {
        // The bucket index is the low bits; sequential ids must not pile up.
        let build = FxBuild::default();
        let mut buckets = vec![0u32; 1 << 12];
        for i in 0..100_000 {
            let h = build.hash_one(format!("story-{i:06}").as_str());
            buckets[(h as usize) & ((1 << 12) - 1)] += 1;
        }
        let max = *buckets.iter().max().unwrap();
        assert!(max < 60, "worst bucket has {max} of ~24 expected");
    }
}
