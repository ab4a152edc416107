//! What a story's commit leaves out or refuses besides secrets: directories
//! that are dependency or build output by convention ([`BUILD_OUTPUT_DIRS`]),
//! files over a size limit, and binary files.
//!
//! The engine's commit step leaves a path under such a directory out of the
//! commit unless the base already tracks files there, and refuses a file
//! over the limit or a new binary file the story did not say it adds.

use std::sync::OnceLock;

use globset::{Glob, GlobSet, GlobSetBuilder};

/// Directory names (globs over one path component) that hold dependency or
/// build output by convention.
pub const BUILD_OUTPUT_DIRS: &[&str] = &[
    "node_modules",
    "bower_components",
    ".venv",
    "venv",
    "__pycache__",
    "*.egg-info",
    ".eggs",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    "htmlcov",
    "target",
    "dist",
    "build",
    ".gradle",
    ".next",
    ".nuxt",
    ".svelte-kit",
    ".parcel-cache",
    ".turbo",
    ".terraform",
];

/// The size limit of one committed file when the project sets none (MiB).
pub const DEFAULT_MAX_FILE_MB: u64 = 5;

/// How many leading bytes decide whether content is binary (git's own
/// heuristic reads as many).
const BINARY_PROBE: usize = 8000;

fn dirs() -> &'static GlobSet {
    static DIRS: OnceLock<GlobSet> = OnceLock::new();
    DIRS.get_or_init(|| {
        let mut b = GlobSetBuilder::new();
        for d in BUILD_OUTPUT_DIRS {
            // The list above is fixed and tested: failing here is a bug.
            b.add(Glob::new(d).unwrap_or_else(|e| panic!("BUILD_OUTPUT_DIRS '{d}': {e}")));
        }
        b.build()
            .unwrap_or_else(|e| panic!("BUILD_OUTPUT_DIRS: {e}"))
    })
}

/// The directory (repository path, no trailing `/`) that makes the file at
/// `path` build output: its first parent directory named in
/// [`BUILD_OUTPUT_DIRS`].
pub fn output_dir(path: &str) -> Option<&str> {
    let mut end = 0;
    let mut parts = path.split('/').peekable();
    while let Some(part) = parts.next() {
        // The last component is the file itself, not a directory.
        parts.peek()?;
        end += part.len();
        if dirs().is_match(part) {
            return Some(&path[..end]);
        }
        end += 1;
    }
    None
}

/// Whether `content` is binary: a NUL byte in its first 8000 bytes, as git
/// decides.
pub fn is_binary(content: &[u8]) -> bool {
    content[..content.len().min(BINARY_PROBE)].contains(&0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_dirs_are_found_at_any_depth_and_only_as_directories() {
        assert_eq!(output_dir("node_modules/a/index.js"), Some("node_modules"));
        assert_eq!(
            output_dir("web/node_modules/a.js"),
            Some("web/node_modules")
        );
        assert_eq!(output_dir(".venv/bin/python"), Some(".venv"));
        assert_eq!(
            output_dir("pkg/foo.egg-info/PKG-INFO"),
            Some("pkg/foo.egg-info")
        );
        assert_eq!(output_dir("src/__pycache__/m.pyc"), Some("src/__pycache__"));
        assert_eq!(output_dir("build/app.bin"), Some("build"));
        assert_eq!(output_dir("build"), None, "a file named build");
        assert_eq!(output_dir("src/builder.rs"), None);
        assert_eq!(output_dir("docs/distribution.md"), None);
        assert_eq!(output_dir("README.md"), None);
    }

    #[test]
    fn binary_is_a_nul_byte_near_the_start() {
        assert!(is_binary(b"\x7fELF\x02\x01\x01\0\0\0"));
        assert!(!is_binary("plain text, ünïcode\n".as_bytes()));
        let mut late = vec![b'a'; BINARY_PROBE];
        late.push(0);
        assert!(!is_binary(&late));
    }
}
