//! Word frequencies.

use std::collections::HashMap;

use crate::words::words;

/// How often each word occurs, case-insensitively (keys are lowercase).
pub fn frequencies(text: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for w in words(text) {
        *counts.entry(w.to_lowercase()).or_insert(0) += 1;
    }
    counts
}

/// The `n` most frequent words, most frequent first; ties in alphabetical order.
pub fn top_words(text: &str, n: usize) -> Vec<(String, usize)> {
    let mut all: Vec<(String, usize)> = frequencies(text).into_iter().collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(n);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_case_insensitively() {
        let f = frequencies("The cat and the hat");
        assert_eq!(f["the"], 2);
        assert_eq!(f["cat"], 1);
        assert_eq!(f.len(), 4);
    }

    #[test]
    fn top_words_breaks_ties_alphabetically() {
        let top = top_words("b a c b a d", 3);
        assert_eq!(
            top,
            vec![("a".to_string(), 2), ("b".to_string(), 2), ("c".to_string(), 1)]
        );
    }
}
