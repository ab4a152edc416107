//! The project id (`<name>-<hash>`, exactly as Plan Cascade computes it)
//! and the per-user data home it lives under.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The longest sanitized name a project id keeps.
const NAME_MAX: usize = 50;

/// The `<name>` part of a project id: spaces become hyphens, everything but
/// ASCII letters, digits, `-` and `_` is dropped, the rest lowercased, runs of
/// hyphens collapsed, leading and trailing hyphens stripped, `project` when
/// nothing is left, cut to 50 characters (after stripping, as Plan Cascade
/// does, so a cut can end in a hyphen).
pub fn sanitize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = if c == ' ' { '-' } else { c };
        if !(c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            continue;
        }
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c.to_ascii_lowercase());
    }
    let trimmed = out.trim_matches('-');
    if trimmed.is_empty() {
        return "project".to_string();
    }
    // Only ASCII is left: byte and character counts agree.
    trimmed[..trimmed.len().min(NAME_MAX)].to_string()
}

/// The project id of a resolved, absolute project root: `<name>-<hash>`.
///
/// The root should already be resolved (symlinks followed, as Python's
/// `Path.resolve()` does); [`ProjectPaths::locate`](super::ProjectPaths::locate) does that.
pub fn project_id(root: &Path) -> String {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    project_id_from(&name, &path_text(root))
}

/// The project id from the root directory's name and its full path as text.
/// `<hash>` is the first 8 hex digits of SHA-256 of the path with
/// backslashes turned into slashes and lowercased, so a Windows path and the
/// same path typed with other case or separators give one id.
pub fn project_id_from(name: &str, path_text: &str) -> String {
    let normalized = path_text.replace('\\', "/").to_lowercase();
    let digest = Sha256::digest(normalized.as_bytes());
    let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{hash}", sanitize_name(name))
}

/// A path as the text Plan Cascade hashes: Windows' verbatim prefix
/// (`\\?\C:\x`, which `canonicalize` adds) removed, as Python never shows it.
pub(super) fn path_text(p: &Path) -> String {
    let s = p.to_string_lossy();
    if let Some(rest) = s.strip_prefix(r"\\?\UNC\") {
        format!(r"\\{rest}")
    } else if let Some(rest) = s.strip_prefix(r"\\?\") {
        rest.to_string()
    } else {
        s.into_owned()
    }
}

/// Resolves a project root the way Plan Cascade does (`Path.resolve()`):
/// absolute, symlinks followed; a path that cannot be resolved stays as given.
pub fn resolve_root(root: &Path) -> PathBuf {
    let p = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    PathBuf::from(path_text(&p))
}

/// Plan Cascade's per-user data home (the parent of every project's data
/// directory), from environment variables read through `var`:
/// `%APPDATA%\plan-cascade` on Windows (else `%USERPROFILE%\AppData\Roaming\plan-cascade`),
/// `$HOME/.plan-cascade` elsewhere. `None` when the variable is unset or empty.
pub fn data_home_with(var: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if cfg!(windows) {
        set("APPDATA")
            .map(|d| d.join("plan-cascade"))
            .or_else(|| set("USERPROFILE").map(|h| h.join("AppData/Roaming/plan-cascade")))
    } else {
        set("HOME").map(|h| h.join(".plan-cascade"))
    }
}

/// [`data_home_with`] over the process environment.
pub fn data_home() -> Option<PathBuf> {
    data_home_with(&|name| std::env::var_os(name))
}
