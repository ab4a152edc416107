//! A Markdown report of a text.

use crate::slug::slugify;
use crate::summary::summarize;

/// A Markdown report: a heading with an anchor, the counts and the top words.
pub fn report(text: &str) -> String {
    let s = summarize(text);
    let mut out = format!("## {} {{#{}}}\n\n", s.title, slugify(&s.title));
    out.push_str(&format!("- words: {}\n- distinct words: {}\n", s.words, s.unique));
    for (word, count) in &s.top {
        out.push_str(&format!("- `{word}`: {count}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_markdown() {
        let r = report("the quick fox\nthe lazy dog and the fox");
        assert!(r.starts_with("## The Quick Fox {#the-quick-fox}\n"), "{r}");
        assert!(r.contains("- words: 9\n- distinct words: 6\n"), "{r}");
        assert!(r.contains("- `the`: 3\n"), "{r}");
    }
}
