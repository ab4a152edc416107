//! `StoryId`: a story or feature id that is safe to use as a git branch
//! component and a file name.
//!
//! Ids become branch names (`cascade/<id>`) and directory names under
//! `.cascade/`, so a bad id must never get that far. The rules are a strict
//! subset of git's ref-name rules and of portable file names: ASCII letters,
//! digits, `-`, `_` and `.`; not empty; at most [`StoryId::MAX_LEN`] bytes; no
//! leading `.` or `-`; no `..`; not ending in `.` or `.lock`.
//!
//! The id is reference counted, so cloning it (schedulers hand ids around a
//! lot) never copies the string.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

/// Why a string is not a valid [`StoryId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid id '{id}': {reason}")]
pub struct InvalidId {
    /// The rejected text.
    pub id: String,
    /// What is wrong with it, in words a user can act on.
    pub reason: &'static str,
}

/// A validated story or feature id.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoryId(Arc<str>);

impl StoryId {
    /// The longest id accepted, in bytes (branch and file names stay short).
    pub const MAX_LEN: usize = 128;

    /// Validates `id` and wraps it.
    pub fn new(id: &str) -> Result<StoryId, InvalidId> {
        Self::check(id).map_err(|reason| InvalidId {
            id: id.to_owned(),
            reason,
        })?;
        Ok(StoryId(Arc::from(id)))
    }

    /// Why `id` is not valid, or `Ok(())`.
    pub fn check(id: &str) -> Result<(), &'static str> {
        if id.is_empty() {
            return Err("it is empty");
        }
        if id.len() > Self::MAX_LEN {
            return Err("it is longer than 128 characters");
        }
        if !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err("use only ASCII letters, digits, '-', '_' and '.'");
        }
        if id.starts_with('.') || id.starts_with('-') {
            return Err("it must not start with '.' or '-'");
        }
        if id.contains("..") {
            return Err("it must not contain '..'");
        }
        if id.ends_with('.') || id.ends_with(".lock") {
            return Err("it must not end with '.' or '.lock'");
        }
        Ok(())
    }

    /// Wraps text that [`StoryId::check`] already accepted (no copy).
    pub(crate) fn from_checked(id: Arc<str>) -> StoryId {
        debug_assert!(Self::check(&id).is_ok());
        StoryId(id)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for StoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for StoryId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for StoryId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for StoryId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for StoryId {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for StoryId {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl std::str::FromStr for StoryId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, InvalidId> {
        StoryId::new(s)
    }
}

impl TryFrom<&str> for StoryId {
    type Error = InvalidId;
    fn try_from(s: &str) -> Result<Self, InvalidId> {
        StoryId::new(s)
    }
}

impl TryFrom<String> for StoryId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, InvalidId> {
        StoryId::new(&s)
    }
}

impl serde::Serialize for StoryId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for StoryId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        StoryId::new(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plan_cascade_ids() {
        for ok in ["story-001", "US-1", "feature_2", "a", "v1.2", "a.b-c_d"] {
            assert_eq!(StoryId::new(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn rejects_unsafe_ids() {
        for bad in [
            "", "a b", "a/b", "..", "a..b", ".hidden", "-x", "x.", "x.lock", "a~b", "a:b", "a\0b",
            "é", "a\\b", "@{", "a*",
        ] {
            assert!(StoryId::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(StoryId::new(&"x".repeat(129)).is_err());
        assert!(StoryId::new(&"x".repeat(128)).is_ok());
    }

    #[test]
    fn serde_round_trip_validates() {
        let id: StoryId = serde_json::from_str("\"story-1\"").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"story-1\"");
        assert!(serde_json::from_str::<StoryId>("\"a/b\"").is_err());
    }
}
