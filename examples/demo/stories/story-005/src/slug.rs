//! URL slugs.

use crate::words::words;

/// "Hello, World! 2024" -> "hello-world-2024" (ASCII letters and digits only).
pub fn slugify(text: &str) -> String {
    words(text)
        .iter()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .collect::<String>()
                .to_ascii_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect::<Vec<String>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_lowercase_and_dashed() {
        assert_eq!(slugify("Hello, World! 2024"), "hello-world-2024");
        assert_eq!(slugify("Don't panic"), "dont-panic");
        assert_eq!(slugify("  "), "");
    }
}
