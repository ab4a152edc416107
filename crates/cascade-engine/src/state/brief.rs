//! What `cascade status` reads of a story record ([`StoryBrief`]): the
//! fields it shows, its strings borrowed from the record's text
//! ([`Text`]), its attempts counted as they are read ([`AttemptTally`])
//! rather than kept. The fields it does not show (the commit, the gates,
//! the attempts' times and logs) are skipped. At 100,000 stories this is
//! the difference between one buffer and a million small strings.
//!
//! The names and meanings are those of [`StoryState`]: a brief is a view of
//! the same record ([`super::RunDoc`], [`super::read_brief`]).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::StoryState;
use super::{charged, ReviewRecord, StoryRecord, StoryStatus};
use crate::retry::FailureKind;

/// A string of a state file: borrowed from its text, or owned where the
/// text has escapes (`\"`, `\n`, `\u00e9`) to undo.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Text<'a>(pub Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text<'a>, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

impl Serialize for Text<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// A story's attempts, counted as they are read: those charged to it
/// ([`StoryState::charged_attempts`]) that ended, and those still open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptTally {
    ended: u32,
    open: u32,
    /// What confined the last attempt that says.
    confinement: Option<String>,
}

impl AttemptTally {
    /// The attempts charged to the story. Without a live run (`live`
    /// false) the open ones were interrupted, which charges nothing
    /// ([`StoryState::close_unfinished_attempts`]).
    pub fn charged(&self, live: bool) -> u32 {
        self.ended + if live { self.open } else { 0 }
    }

    /// What confined the last attempt ("landlock abi 7", "none").
    pub fn confinement(&self) -> Option<&str> {
        self.confinement.as_deref()
    }
}

impl<'de> Deserialize<'de> for AttemptTally {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AttemptTally, D::Error> {
        /// What the tally reads of an attempt (the rest is skipped).
        #[derive(Deserialize)]
        struct Head<'a> {
            #[serde(default)]
            error_type: Option<FailureKind>,
            #[serde(default, borrow)]
            outcome: Option<Text<'a>>,
            #[serde(default, borrow)]
            confinement: Option<Text<'a>>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AttemptTally;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of attempts")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AttemptTally, A::Error> {
                let mut t = AttemptTally::default();
                while let Some(a) = seq.next_element::<Head<'de>>()? {
                    let outcome = a.outcome.as_deref();
                    match outcome {
                        None if charged(a.error_type, None) => t.open += 1,
                        Some(_) if charged(a.error_type, outcome) => t.ended += 1,
                        _ => {}
                    }
                    if let Some(c) = a.confinement {
                        t.confinement = Some(c.0.into_owned());
                    }
                }
                Ok(t)
            }
        }
        d.deserialize_seq(V)
    }
}

/// What `cascade status` reads of a story record (see the module doc).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StoryBrief<'a> {
    #[serde(borrow)]
    pub id: Text<'a>,
    pub status: StoryStatus,
    #[serde(default, borrow)]
    pub agent: Option<Text<'a>>,
    #[serde(default)]
    pub attempts: AttemptTally,
    #[serde(default, borrow)]
    pub branch: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub worktree: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub merge_commit: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub blocked_by: Vec<Text<'a>>,
    #[serde(default)]
    pub error_type: Option<FailureKind>,
    #[serde(default, borrow)]
    pub error: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub verification: Vec<Text<'a>>,
    #[serde(default, borrow)]
    pub verification_allowed: Vec<Text<'a>>,
    #[serde(default)]
    pub review: Option<ReviewRecord>,
}

impl StoryRecord for StoryBrief<'_> {
    fn id(&self) -> &str {
        &self.id
    }
    fn status(&self) -> StoryStatus {
        self.status
    }
    fn pending(id: String) -> Self {
        StoryBrief {
            id: Text(Cow::Owned(id)),
            status: StoryStatus::Pending,
            agent: None,
            attempts: AttemptTally::default(),
            branch: None,
            worktree: None,
            merge_commit: None,
            blocked_by: Vec::new(),
            error_type: None,
            error: None,
            verification: Vec::new(),
            verification_allowed: Vec::new(),
            review: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{read_brief, RunState, StoryState};
    use super::*;
    use crate::store::{db_path, Store};

    /// A state whose strings have escapes, whose records carry fields this
    /// cascade does not know, and whose attempts end every way.
    const DOCUMENT: &str = r#"{"schema_version": 1, "run_id": "r\u00e9", "prd": "prd.json",
      "target_branch": "main", "project_root": "/x", "status": "running", "pid": 1,
      "started_at": "t", "updated_at": "t", "future_run_field": {"a": [1, 2]},
      "stories": [
        {"id": "a\"b", "status": "failed", "agent": "co\ndex", "future": [{"x": "\\"}],
         "attempts": [
           {"attempt": 1, "agent": "x", "phase": "implementation", "started_at": "t",
            "outcome": "failed", "error_type": "exit_code", "unknown": true},
           {"attempt": 2, "agent": "x", "phase": "retry", "started_at": "t",
            "outcome": null, "error_type": "rate_limited"},
           {"attempt": 3, "agent": "x", "phase": "retry", "started_at": "t",
            "outcome": "interrupted"},
           {"attempt": 4, "agent": "x", "phase": "retry", "started_at": "t"}],
         "error": "line one\nline \"two\"", "worktree": "w\t1", "blocked_by": ["c\u0301"],
         "verification": ["f.rs:1: [stub] \u2028"], "review": {"agent": "r", "verdict": "pass"},
         "gates": [{"name": "tests", "passed": false, "cached": false, "flaky": false}]},
        {"id": "plain", "status": "complete", "merge_commit": "abc", "commit": "def"}
      ]}"#;

    /// What a brief says of a story, in the full record's terms.
    fn same(brief: &StoryBrief<'_>, full: &StoryState) {
        let text = |t: &Option<Text<'_>>| t.as_deref().map(str::to_string);
        let texts = |v: &[Text<'_>]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(&*brief.id, full.id);
        assert_eq!(brief.status, full.status);
        assert_eq!(text(&brief.agent), full.agent);
        assert_eq!(text(&brief.branch), full.branch);
        assert_eq!(text(&brief.worktree), full.worktree);
        assert_eq!(text(&brief.merge_commit), full.merge_commit);
        assert_eq!(text(&brief.error), full.error);
        assert_eq!(brief.error_type, full.error_type);
        assert_eq!(texts(&brief.blocked_by), full.blocked_by);
        assert_eq!(texts(&brief.verification), full.verification);
        assert_eq!(
            texts(&brief.verification_allowed),
            full.verification_allowed
        );
        assert_eq!(brief.review, full.review);
        // Live: open attempts count; killed: they were interrupted.
        assert_eq!(brief.attempts.charged(true), full.charged_attempts());
        let mut closed = full.clone();
        closed.close_unfinished_attempts();
        assert_eq!(brief.attempts.charged(false), closed.charged_attempts());
    }

    fn check(path: &std::path::Path) {
        let full = RunState::load(path).unwrap().unwrap();
        read_brief(path, |brief| {
            assert_eq!(brief.run_id, full.run_id);
            assert_eq!(brief.updated_at, full.updated_at);
            assert_eq!(brief.status, full.status);
            assert_eq!(brief.stories.len(), full.stories.len());
            for (b, f) in brief.stories.iter().zip(&full.stories) {
                same(b, f);
            }
            assert_eq!(brief.counts(), full.counts());
        })
        .unwrap()
        .expect("a state");
    }

    #[test]
    fn a_brief_reads_what_the_full_record_says_escapes_and_unknown_fields_included() {
        // An older cascade's document, imported into the database.
        let dir = tempfile::tempdir().unwrap();
        let path = db_path(dir.path());
        std::fs::write(dir.path().join("state.json"), DOCUMENT).unwrap();
        check(&path);
        read_brief(&path, |b| {
            let s = &b.stories[0];
            assert_eq!(&*s.id, "a\"b");
            assert_eq!(s.error.as_deref(), Some("line one\nline \"two\""));
            assert_eq!(&*s.blocked_by[0], "c\u{301}");
            // exit_code charged; rate_limited and interrupted not; the
            // open one only while its run is live.
            assert_eq!(
                (s.attempts.charged(false), s.attempts.charged(true)),
                (1, 2)
            );
            // Strings without escapes are borrowed, not copied.
            assert!(matches!(b.stories[1].id.0, Cow::Borrowed(_)));
        })
        .unwrap()
        .expect("a state");
        // No state: `None`, no error.
        let none = read_brief(&dir.path().join("missing.db"), |_| ()).unwrap();
        assert!(none.is_none());
        // Garbage is the same error as the full reader's.
        let garbage = tempfile::tempdir().unwrap();
        let path = db_path(garbage.path());
        let text = "{\"schema_version\": 1, \"stories\": [";
        std::fs::write(garbage.path().join("state.json"), text).unwrap();
        let e = read_brief(&path, |_| ()).unwrap_err().to_string();
        assert_eq!(e, RunState::load(&path).unwrap_err().to_string());
    }

    #[test]
    fn a_brief_reads_every_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = db_path(dir.path());
        let ids = (0..300).map(|i| format!("s{i}"));
        let st = RunState::new("r".into(), "p".into(), "main".into(), "/x".into(), ids);
        let mut store = Store::open(st, &path).unwrap();
        store.change_story("s1", |s| {
            s.status = StoryStatus::Failed;
            s.error = Some("quoted \"x\"\nand more".into());
            s.blocked_by = vec!["s0".into()];
        });
        store.change_story("new \u{e9}", |s| s.status = StoryStatus::Complete);
        store.change_run(|r| r.status = super::super::RunPhase::Paused);
        store.commit().unwrap();
        check(&path);
        read_brief(&path, |b| {
            assert_eq!(b.status, super::super::RunPhase::Paused);
            let s1 = b.story("s1").unwrap();
            assert_eq!(s1.error.as_deref(), Some("quoted \"x\"\nand more"));
            assert_eq!(b.story("s2").unwrap().status, StoryStatus::Pending);
            assert_eq!(b.story("new \u{e9}").unwrap().status, StoryStatus::Complete);
        })
        .unwrap()
        .expect("a state");
    }
}
