//! What the run view reads of a story's record in the state
//! ([`StoryGlance`]): the fields `GET /api/run` shows, with the attempts'
//! times read as they are parsed (the snapshot only ever uses them as
//! milliseconds). The rest of the record (branch, commits, gates,
//! verification, review, the attempts' logs and errors) is skipped unread.
//! At 100,000 stories this is most of the state file's text, and the reading
//! a dashboard just started waits for.
//!
//! The names and meanings are those of [`StoryState`] and [`AttemptRecord`]
//! (the test below holds every field to the full record): a glance is a view
//! of the same record, kept current by the same follower
//! ([`cascade_engine::store::StateFollower`]).

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use cascade_engine::state::{RunDoc, StoryRecord, StoryStatus};
use cascade_engine::FailureKind;

use crate::stamp::FileStamp;

#[cfg(doc)]
use cascade_engine::state::StoryState;

#[cfg(doc)]
use cascade_engine::state::AttemptRecord;

/// The state as the run view reads it.
pub(crate) type RunGlance = RunDoc<StoryGlance>;

/// What the run view reads of a story's record (see the module doc).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct StoryGlance {
    pub id: String,
    pub status: StoryStatus,
    #[serde(default)]
    pub agent: Option<Name>,
    #[serde(default, deserialize_with = "few")]
    pub attempts: Vec<AttemptGlance>,
    #[serde(default, deserialize_with = "few")]
    pub blocked_by: Vec<String>,
    #[serde(default)]
    pub error_type: Option<FailureKind>,
    #[serde(default)]
    pub error: Option<String>,
}

impl StoryRecord for StoryGlance {
    fn id(&self) -> &str {
        &self.id
    }
    fn status(&self) -> StoryStatus {
        self.status
    }
    fn pending(id: String) -> Self {
        StoryGlance {
            id,
            status: StoryStatus::Pending,
            agent: None,
            attempts: Vec::new(),
            blocked_by: Vec::new(),
            error_type: None,
            error: None,
        }
    }
}

/// A short list (a story's attempts, its blockers) read into a `Vec` of
/// exactly its length up to 8 elements: a `Vec` grown by pushes holds at
/// least 4, and at 100,000 stories of one attempt each (200 bytes an
/// attempt) the room never used was most of the memory the state's reading
/// touched, and its first touch most of the time.
fn few<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    use serde::de::SeqAccess;
    struct Few<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Few<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a sequence")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut v = Vec::new();
            while let Some(x) = seq.next_element()? {
                if v.len() == v.capacity() && v.len() < 8 {
                    v.reserve_exact(1);
                }
                v.push(x);
            }
            Ok(v)
        }
    }
    d.deserialize_seq(Few(std::marker::PhantomData))
}

/// What the run view reads of an attempt: [`AttemptRecord`]'s fields of the
/// same names, its times as [`crate::snapshot::unix_ms`] reads them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct AttemptGlance {
    pub attempt: u32,
    pub agent: Name,
    pub phase: Name,
    /// `started_at` in Unix ms (`None`: not a time).
    #[serde(rename = "started_at")]
    pub started_ms: Millis,
    /// `finished_at` in Unix ms (`None`: absent, null or not a time).
    #[serde(default, rename = "finished_at")]
    pub finished_ms: Option<Millis>,
    #[serde(default)]
    pub outcome: Option<Name>,
    #[serde(default)]
    pub error_type: Option<FailureKind>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[serde(default)]
    pub cost_estimated: Option<bool>,
}

impl AttemptGlance {
    /// `finished_at` in Unix ms, when it is a time.
    pub fn finished(&self) -> Option<i64> {
        self.finished_ms.and_then(|m| m.0)
    }
}

/// A name that nearly every attempt repeats (its agent, phase and
/// outcome: a handful of words in a whole run), kept once and shared: at
/// 100,000 stories a string apiece was 300,000 allocations, and the memory
/// they took faulted in, in the state's reading a dashboard just started
/// waits for. The names last read are remembered per thread ([`KNOWN`]);
/// any other is kept as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Name(std::sync::Arc<str>);

/// How many names a thread remembers, and how long a name may be to be
/// remembered: a run's agents, phases and outcomes, not its free text.
const KNOWN: usize = 16;
const KNOWN_LEN: usize = 40;

thread_local! {
    static NAMES: std::cell::RefCell<Vec<std::sync::Arc<str>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Name {
    /// `s` as a name, shared with the same name read before on this thread
    /// when it is one of the [`KNOWN`] remembered.
    fn of(s: &str) -> Name {
        if s.len() > KNOWN_LEN {
            return Name(s.into());
        }
        NAMES.with(|names| {
            let mut names = names.borrow_mut();
            if let Some(n) = names.iter().find(|n| ***n == *s) {
                return Name(std::sync::Arc::clone(n));
            }
            let n: std::sync::Arc<str> = s.into();
            if names.len() < KNOWN {
                names.push(std::sync::Arc::clone(&n));
            }
            Name(n)
        })
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
        from_str(d, Name::of)
    }
}

/// What `make` makes of a string read from `d` (its text borrowed, never
/// kept as read).
fn from_str<'de, D: Deserializer<'de>, T>(d: D, make: fn(&str) -> T) -> Result<T, D::Error> {
    struct V<T>(fn(&str) -> T);
    impl<T> Visitor<'_> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E>(self, v: &str) -> Result<T, E> {
            Ok((self.0)(v))
        }
    }
    d.deserialize_str(V(make))
}

/// A time string of the state, read as Unix ms (`None`: not a time) without
/// keeping the string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Millis(pub Option<i64>);

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Millis, D::Error> {
        from_str(d, |v| Millis(crate::snapshot::unix_ms(v)))
    }
}

/// A plan's stories with their text left unparsed, found through its
/// [`Outline`] (so the plan is one that [`cascade_plan::load_prd`] reads,
/// and a story is where the model would find it): a story's view parses
/// its one story whole.
pub(crate) struct PlanRecords {
    outline: std::sync::Arc<cascade_plan::Outline>,
    stories: Vec<Box<RawValue>>,
}

impl PlanRecords {
    /// The plan at `path`; `None` when it does not read. `known`: its
    /// outline as read already (the run view's) and the file's stamp then:
    /// used when the file is still the one it was read from, rather than
    /// reading it again (at 100,000 stories a third of a story view's
    /// first reading).
    pub fn load(
        path: &std::path::Path,
        known: Option<(std::sync::Arc<cascade_plan::Outline>, FileStamp)>,
    ) -> Option<PlanRecords> {
        use serde::de::{IgnoredAny, MapAccess};
        struct Stories;
        impl<'de> Visitor<'de> for Stories {
            type Value = Vec<Box<RawValue>>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a PRD object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                // As the model reads it: the last `stories` counts.
                let mut stories = Vec::new();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "stories" {
                        stories = map.next_value::<Option<_>>()?.unwrap_or_default();
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(stories)
            }
        }
        let bytes = std::fs::read(path).ok()?;
        // Stamped after reading: the file read is the one the outline was
        // made of only if its stamp has not changed since.
        let outline = match known {
            Some((outline, stamp)) if FileStamp::of(path) == Some(stamp) => outline,
            _ => std::sync::Arc::new(cascade_plan::Outline::from_json(&bytes, path).ok()?),
        };
        let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        let stories = serde_json::Deserializer::from_slice(text)
            .deserialize_map(Stories)
            .ok()?;
        Some(PlanRecords { outline, stories })
    }

    /// The outline the stories are found through.
    #[cfg(test)]
    pub fn outline(&self) -> &std::sync::Arc<cascade_plan::Outline> {
        &self.outline
    }

    /// Story `id` of the plan, read whole (as [`cascade_plan::Prd::story`]
    /// finds it).
    pub fn story(&self, id: &str) -> Option<cascade_plan::Story> {
        let raw = self.stories.get(self.outline.position(id)?)?;
        serde_json::from_str(raw.get()).ok()
    }
}

#[cfg(test)]
mod tests {
    use cascade_engine::state::{AttemptRecord, RunState, StoryState};
    use cascade_engine::store::{db_path, story_record, StateFollower};

    use super::*;
    use crate::snapshot::unix_ms;

    /// What a glance says of a story, in the full record's terms.
    pub(crate) fn same(glance: &StoryGlance, full: &StoryState) {
        assert_eq!(glance.id, full.id);
        assert_eq!(glance.status, full.status);
        assert_eq!(glance.agent.as_deref(), full.agent.as_deref());
        assert_eq!(glance.blocked_by, full.blocked_by);
        assert_eq!(glance.error_type, full.error_type);
        assert_eq!(glance.error, full.error);
        assert_eq!(glance.attempts.len(), full.attempts.len());
        for (g, f) in glance.attempts.iter().zip(&full.attempts) {
            same_attempt(g, f);
        }
    }

    fn same_attempt(g: &AttemptGlance, f: &AttemptRecord) {
        assert_eq!(g.attempt, f.attempt);
        assert_eq!(*g.agent, f.agent);
        assert_eq!(*g.phase, f.phase);
        assert_eq!(g.started_ms.0, unix_ms(&f.started_at));
        assert_eq!(g.finished(), f.finished_at.as_deref().and_then(unix_ms));
        assert_eq!(g.outcome.as_deref(), f.outcome.as_deref());
        assert_eq!(g.error_type, f.error_type);
        assert_eq!(g.duration_ms, f.duration_ms);
        assert_eq!(g.input_tokens, f.input_tokens);
        assert_eq!(g.output_tokens, f.output_tokens);
        assert_eq!(g.cost_usd, f.cost_usd);
        assert_eq!(g.cost_estimated, f.cost_estimated);
    }

    /// Each story's record read whole from the state kept as text is the
    /// record the full reader reads.
    fn records_say_what_the_state_says(path: &std::path::Path, full: &RunState) {
        for f in &full.stories {
            let record = story_record(path, &f.id).expect("readable");
            assert_eq!(record.as_ref(), Some(f));
        }
    }

    #[test]
    fn names_read_again_are_shared_and_any_name_reads_as_written() {
        let read = |s: &str| serde_json::from_str::<Name>(&serde_json::to_string(s).unwrap());
        let a = read("claude").unwrap();
        let b = read("claude").unwrap();
        assert!(std::sync::Arc::ptr_eq(&a.0, &b.0));
        // More names than are remembered, long ones and escaped ones:
        // each reads as written, the ones remembered shared.
        let many: Vec<String> = (0..KNOWN + 4).map(|i| format!("agent-{i}")).collect();
        let long = "x".repeat(KNOWN_LEN + 1);
        for s in many
            .iter()
            .map(String::as_str)
            .chain([&*long, "q\"uote\n", ""])
        {
            let (first, again) = (read(s).unwrap(), read(s).unwrap());
            assert_eq!((&*first, &*again), (s, s));
        }
        assert!(!std::sync::Arc::ptr_eq(
            &read(&long).unwrap().0,
            &read(&long).unwrap().0
        ));
        assert!(std::sync::Arc::ptr_eq(
            &read("agent-0").unwrap().0,
            &read("agent-0").unwrap().0
        ));
        assert!(read("7").is_ok() && serde_json::from_str::<Name>("7").is_err());
    }

    #[test]
    fn a_plans_story_read_from_its_text_is_the_models() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("prd.json");
        let text = "\u{feff}{\"goal\": \"g\", \"stories\": [{\"id\": \"x\", \"title\": \"old\"}],
            \"stories\": [{\"id\": \"a\", \"title\": \"A \\\"q\\\"\", \"description\": \"d\",
              \"acceptance_criteria\": [\"one\", {\"description\": \"two\"}], \"dependencies\": [\"b\"]},
             {\"id\": \"b\", \"title\": \"B\", \"extra\": [1]}, {\"id\": \"a\", \"title\": \"again\"}]}";
        std::fs::write(&path, text).expect("a plan");
        let model = cascade_plan::load_prd(&path).expect("a plan");
        let plan = PlanRecords::load(&path, None).expect("a plan");
        for id in ["a", "b", "x", "none"] {
            assert_eq!(plan.story(id).as_ref(), model.story(id), "{id}");
        }
        assert_eq!(
            plan.story("a").map(|s| s.title),
            Some("A \"q\"".to_string())
        );
        // What the model does not read, neither does this.
        std::fs::write(
            &path,
            "{\"stories\": [{\"id\": \"a\", \"status\": \"done\"}]}",
        )
        .expect("a plan");
        assert!(cascade_plan::load_prd(&path).is_err());
        assert!(PlanRecords::load(&path, None).is_none());
    }

    /// A state whose strings have escapes, whose records carry fields this
    /// cascade does not know, and whose attempts have every kind of time.
    const DOCUMENT: &str = r#"{"schema_version": 1, "run_id": "r\u00e9", "prd": "prd.json",
      "target_branch": "main", "project_root": "/x", "status": "running", "pid": 1,
      "started_at": "2026-01-01T00:00:00.000Z", "updated_at": "t", "future_run_field": [1],
      "options": {"schedule": "eager", "parallel": 3},
      "stories": [
        {"id": "a\"b", "status": "failed", "agent": "co\ndex", "future": [{"x": "\\"}],
         "attempts": [
           {"attempt": 1, "agent": "x", "phase": "implementation",
            "started_at": "2026-01-01T00:00:01.000Z", "finished_at": "2026-01-01T00:00:02.5Z",
            "outcome": "failed", "error_type": "exit_code", "error": "boom", "log": "l",
            "pid": 9, "duration_ms": 1500, "input_tokens": 10, "output_tokens": 2,
            "cost_usd": 0.5, "cost_estimated": true, "session_id": "s", "unknown": true},
           {"attempt": 2, "agent": "\u0078", "phase": "retry", "started_at": "2026-01-01T01:00:00+01:00",
            "finished_at": null, "outcome": null, "error_type": "rate_limited"},
           {"attempt": 3, "agent": "x", "phase": "retry", "started_at": "not a time",
            "finished_at": "nor this", "outcome": "interrupted"},
           {"attempt": 4, "agent": "x", "phase": "retry", "started_at": "2026-01-01T00:00:09.000Z"}],
         "error": "line one\nline \"two\"", "error_type": "quality_gate",
         "worktree": "w\t1", "blocked_by": ["c\u0301"], "commit": "c", "merge_commit": null,
         "verification": ["f.rs:1: [stub] \u2028"], "review": {"agent": "r", "verdict": "pass"},
         "gates": [{"name": "tests", "passed": false, "cached": false, "flaky": false}]},
        {"id": "plain", "status": "complete", "merge_commit": "abc", "commit": "def"},
        {"id": "c", "status": "blocked", "blocked_by": ["a\"b"], "attempts": []}
      ]}"#;

    #[test]
    fn a_glance_reads_what_the_full_record_says_escapes_and_unknown_fields_included() {
        // An older cascade's document, imported into the database.
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = db_path(dir.path());
        std::fs::write(dir.path().join("state.json"), DOCUMENT).expect("the state");
        let full = RunState::load(&path).expect("readable").expect("a state");
        let mut follower = StateFollower::<StoryGlance>::new(&path);
        let glance = follower.refresh().expect("readable").expect("a state");
        assert_eq!(glance.run_id, full.run_id);
        assert_eq!(glance.status, full.status);
        assert_eq!(glance.options, full.options);
        assert_eq!(glance.stories.len(), full.stories.len());
        for (g, f) in glance.stories.iter().zip(&full.stories) {
            same(g, f);
        }
        assert_eq!(glance.counts(), full.counts());
        // A story's view reads its record whole, and only its own.
        records_say_what_the_state_says(&path, &full);
        assert_eq!(story_record(&path, "nope").expect("readable"), None);
        // Each kind of time, to be sure the document says something.
        let a = &glance.stories[0].attempts;
        assert_eq!(a[0].finished(), unix_ms("2026-01-01T00:00:02.500Z"));
        assert_eq!(a[1].started_ms.0, unix_ms("2026-01-01T00:00:00.000Z"));
        assert_eq!((a[2].started_ms.0, a[2].finished()), (None, None));
        assert_eq!(a[3].finished_ms, None);
    }

    #[test]
    fn a_glance_is_followed_through_what_the_run_writes() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = db_path(dir.path());
        let ids = (0..3).map(|i| format!("s{i}"));
        let mut st = RunState::new("r".into(), "p".into(), "main".into(), "/x".into(), ids);
        st.save(&path).expect("the state");
        let mut follower = StateFollower::<StoryGlance>::new(&path);
        assert!(follower.refresh().expect("readable").is_some());
        let s1 = st.story_mut("s1");
        s1.status = StoryStatus::Failed;
        s1.error = Some("quoted \"x\"\nand more".into());
        s1.blocked_by = vec!["s0".into()];
        s1.attempts.push(AttemptRecord::started(
            1,
            "claude".into(),
            "implementation".into(),
            "2026-01-01T00:00:00.000Z".into(),
        ));
        st.story_mut("new \u{e9}").status = StoryStatus::Complete;
        st.save(&path).expect("the state");
        let full = RunState::load(&path).expect("readable").expect("a state");
        let glance = follower.refresh().expect("readable").expect("a state");
        assert_eq!(glance.stories.len(), 4);
        assert_eq!(glance.stories.len(), full.stories.len());
        for (g, f) in glance.stories.iter().zip(&full.stories) {
            same(g, f);
        }
        assert_eq!(glance.updated_at, full.updated_at);
        records_say_what_the_state_says(&path, &full);
        let s1 = glance.story("s1").expect("s1");
        assert_eq!(
            s1.attempts[0].started_ms.0,
            unix_ms("2026-01-01T00:00:00.000Z")
        );
        assert_eq!(
            glance.story("new \u{e9}").map(|s| s.status),
            Some(StoryStatus::Complete)
        );
    }
}
