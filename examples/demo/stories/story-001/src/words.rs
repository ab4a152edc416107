//! Splitting text into words.

/// The words of `text`: maximal runs of alphanumeric characters (apostrophes
/// inside a word are kept: "don't" is one word).
pub fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (i, &(pos, c)) in chars.iter().enumerate() {
        let inner_apostrophe = c == '\''
            && start.is_some()
            && chars.get(i + 1).is_some_and(|&(_, n)| n.is_alphanumeric());
        if c.is_alphanumeric() || inner_apostrophe {
            start.get_or_insert(pos);
        } else if let Some(s) = start.take() {
            out.push(&text[s..pos]);
        }
    }
    if let Some(s) = start {
        out.push(&text[s..]);
    }
    out
}

/// How many words `text` has.
pub fn word_count(text: &str) -> usize {
    words(text).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_anything_not_alphanumeric() {
        assert_eq!(words("Hello, world!  It's 2024."), vec!["Hello", "world", "It's", "2024"]);
        assert_eq!(words(""), Vec::<&str>::new());
        assert_eq!(words("--'quoted'--"), vec!["quoted"]);
        assert_eq!(word_count("one two  three"), 3);
    }
}
