//! Tests the story's own words ask to remove: a sentence of its title,
//! description or acceptance criteria that says remove, delete or drop and
//! names a test ("Remove `test_legacy_export`: the export is gone").
//! Removing such a test is what the story is for, so neither
//! `removed-test` nor `test-disappeared` flags it. The words come from the
//! plan (the user's), never from the change, so an agent cannot excuse
//! itself. A sentence is cut at a line break, `;` or a full stop followed
//! by a space; "keep test_x; delete the helper" asks nothing of `test_x`.

use regex::Regex;
use std::sync::OnceLock;

/// The verbs that ask for a removal, as whole words, lower case.
const VERBS: [&str; 12] = [
    "remove", "removes", "removed", "removing", "delete", "deletes", "deleted", "deleting", "drop",
    "drops", "dropped", "dropping",
];

fn word() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| Regex::new(r"[A-Za-z_][A-Za-z0-9_]*").unwrap_or_else(|e| panic!("{e}")))
}

fn name() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    // A name with its path (`tests.test_a.test_b`, `mod::tests::it_works`).
    R.get_or_init(|| {
        Regex::new(r"[A-Za-z_][A-Za-z0-9_]*(?:(?:::|\.|/)[A-Za-z_][A-Za-z0-9_]*)*")
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// The names in the sentences of `words` that ask for a removal: each
/// name as written and its last segment (`tests.test_a.test_b` also
/// names `test_b`).
pub fn removals_asked(words: &str) -> Vec<String> {
    let mut out = Vec::new();
    for sentence in words.split(['\n', ';']).flat_map(|s| s.split(". ")) {
        let asks = word()
            .find_iter(sentence)
            .any(|w| VERBS.contains(&w.as_str().to_ascii_lowercase().as_str()));
        if !asks {
            continue;
        }
        for m in name().find_iter(sentence) {
            let full = m.as_str().trim_end_matches('.');
            let last = full.rsplit(['.', ':', '/']).next().unwrap_or(full);
            for n in [full, last] {
                if n.len() >= 3 && !out.iter().any(|o| o == n) {
                    out.push(n.to_string());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentence_asking_to_remove_names_its_tests() {
        let asked = removals_asked(
            "Drop the legacy export.\nRemove `test_legacy_export` and tests.test_io.test_old_csv; keep test_import.",
        );
        assert!(
            asked.contains(&"test_legacy_export".to_string()),
            "{asked:?}"
        );
        assert!(asked.contains(&"tests.test_io.test_old_csv".to_string()));
        assert!(asked.contains(&"test_old_csv".to_string()));
        assert!(!asked.contains(&"test_import".to_string()), "{asked:?}");
    }

    #[test]
    fn words_without_a_removal_ask_nothing() {
        assert!(removals_asked("Rename test_a to test_b. Keep test_c").is_empty());
        assert!(removals_asked("keep test_x; delete the helper")
            .iter()
            .all(|n| n != "test_x"));
        // "Removal" is not the verb; "removed" is.
        assert!(removals_asked("The removal of test_y is not asked").is_empty());
        assert!(removals_asked("test_z is removed").contains(&"test_z".to_string()));
    }
}
