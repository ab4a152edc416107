//! Changing the case of text.

use crate::words::words;

/// "hello big world" -> "Hello Big World".
pub fn title_case(text: &str) -> String {
    words(text)
        .iter()
        .map(|w| {
            let mut chars = w.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars.flat_map(char::to_lowercase)).collect(),
                None => String::new(),
            }
        })
        .collect::<Vec<String>>()
        .join(" ")
}

/// "Hello Big World" -> "hello_big_world".
pub fn snake_case(text: &str) -> String {
    words(text)
        .iter()
        .map(|w| w.to_lowercase())
        .collect::<Vec<String>>()
        .join("_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_and_snake_case() {
        assert_eq!(title_case("hello bIG world"), "Hello Big World");
        assert_eq!(snake_case("Hello, Big World!"), "hello_big_world");
        assert_eq!(title_case(""), "");
    }
}
