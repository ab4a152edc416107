//! A summary of a text: counts, the most frequent words and a title.

use crate::case::title_case;
use crate::freq::{frequencies, top_words};
use crate::words::word_count;

/// What [`summarize`] finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The first line of the text in title case.
    pub title: String,
    /// Number of words.
    pub words: usize,
    /// Number of distinct words (case-insensitive).
    pub unique: usize,
    /// The three most frequent words.
    pub top: Vec<(String, usize)>,
}

/// Summarizes `text`.
pub fn summarize(text: &str) -> Summary {
    let first_line = text.lines().next().unwrap_or("");
    Summary {
        title: title_case(first_line),
        words: word_count(text),
        unique: frequencies(text).len(),
        top: top_words(text, 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarizes_a_small_text() {
        let s = summarize("the quick fox\nthe lazy dog and the fox");
        assert_eq!(s.title, "The Quick Fox");
        assert_eq!(s.words, 9);
        assert_eq!(s.unique, 6, "unique counts distinct words");
        assert_eq!(s.top[0], ("the".to_string(), 3));
        assert_eq!(s.top[1], ("fox".to_string(), 2));
    }
}
