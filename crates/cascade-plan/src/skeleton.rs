//! A lean second reading of `prd.json` for scheduling only:
//! [`validate_prd_json`] goes from bytes to a [`ValidPlan`] without building
//! the [`crate::Prd`] model.
//!
//! `cascade batches --json` on a 100,000-story plan spends most of its time
//! allocating and faulting in the model (titles, descriptions, criteria:
//! over a million small allocations) that batching never looks at. This
//! reader keeps ids and dependencies as slices of the input where it can and
//! only *checks* the other known fields, with the same types, the same
//! leniency and the same error messages (file, line, column) as the model's
//! reader in `wire.rs`, so both accept and reject exactly the same files
//! (`tests` below and the property tests hold them to it). Field names come
//! from the same table (`Fields::NAMES`).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::error::PlanError;
use crate::graph::{build, trim, Item, Kind};
use crate::index::{IdIndex, IndexStats};
use crate::model::{Priority, Status, Story};
use crate::plan::ValidPlan;
use crate::validate::{check_story, finish, ValidationErrors};
use crate::vocabulary::{self, PlanWarning};
use crate::wire::{Fields, Keyword};

/// Why [`validate_prd_json`] produced no plan.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The text is not a PRD (bad JSON or a field of the wrong type).
    #[error(transparent)]
    Parse(#[from] PlanError),
    /// The PRD parses but is invalid.
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
}

/// Parses and validates PRD text in one go, without building the model:
/// the same result as `validate_prd(&Prd::from_json(bytes, path)?)` with
/// about half the memory and a third less time on large plans. `path` is only
/// used in messages.
pub fn validate_prd_json(bytes: &[u8], path: &Path) -> Result<ValidPlan, CheckError> {
    validate_prd_json_warned(bytes, path).map(|(plan, _)| plan)
}

/// [`validate_prd_json`] with the warnings reading gave (the same as
/// [`crate::Prd::warnings`]).
pub fn validate_prd_json_warned(
    bytes: &[u8],
    path: &Path,
) -> Result<(ValidPlan, Vec<PlanWarning>), CheckError> {
    let (skeleton, warnings) = read_skeleton(bytes, path)?;
    let graph = build(Kind::Story, &skeleton.stories);
    let mut problems = Vec::new();
    for (index, s) in skeleton.stories.iter().enumerate() {
        let title_blank = s.title.as_ref().map_or(true, |t| t.0.trim().is_empty());
        check_story(index, &s.id, s.has_id, title_blank, &mut problems);
    }
    Ok((finish(graph, problems)?, warnings))
}

/// PRD text read as the model's reader reads it (the same errors, the same
/// warnings), keeping only the [`Skeleton`].
fn read_skeleton<'b>(
    bytes: &'b [u8],
    path: &Path,
) -> Result<(Skeleton<'b>, Vec<PlanWarning>), PlanError> {
    read_stories(bytes, path)
}

/// [`read_skeleton`], each story handed to a `K` as it is read.
fn read_stories<'b, K: Stories<'b>>(
    bytes: &'b [u8],
    path: &Path,
) -> Result<(Skeleton<'b, K>, Vec<PlanWarning>), PlanError> {
    let bytes = crate::model::json_text(bytes, path, crate::model::PRD_EXPECTED)?;
    let skeleton: Skeleton<'_, K> =
        crate::json::from_slice(bytes).map_err(|e| PlanError::parse(path.to_path_buf(), &e))?;
    let warnings = vocabulary::check(
        bytes,
        path,
        &vocabulary::STORIES,
        skeleton.stories.spellings(),
    )?;
    Ok((skeleton, warnings))
}

/// Reads `path` and does [`validate_prd_json`]: the fast way from a
/// `prd.json` to its schedule when the model itself is not needed.
pub fn load_valid_plan(path: impl AsRef<Path>) -> Result<ValidPlan, CheckError> {
    load_valid_plan_warned(path).map(|(plan, _)| plan)
}

/// [`load_valid_plan`] with the warnings reading gave.
pub fn load_valid_plan_warned(
    path: impl AsRef<Path>,
) -> Result<(ValidPlan, Vec<PlanWarning>), CheckError> {
    let path = path.as_ref();
    let bytes = crate::model::read(path, "prd")?;
    validate_prd_json_warned(&bytes, path)
}

/// What a view of a plan shows of its stories, in file order: each one's
/// id, title and dependencies as written ([`load_outline`]). The model's
/// reader ([`crate::Prd::from_json`]) would give the same three fields of
/// the same stories, and accepts and rejects exactly the same files, at a
/// fraction of the cost on a large plan (nothing else is kept).
///
/// The strings are kept one after another in one buffer, each story's as
/// spans of it ([`Outline::story`] lends them out): at 100,000 stories a
/// string apiece was 600,000 allocations, a tenth of a dashboard's first
/// reading of its run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outline {
    /// Every story's id, title and dependencies, one after another.
    text: String,
    stories: Vec<Spans>,
    /// The dependencies of every story, story after story.
    deps: Vec<Span>,
    /// The stories by id.
    index: IdIndex,
}

/// Where a string of an [`Outline`] is in its text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
}

impl Span {
    /// The string this span marks in `text` (its outline's).
    fn of(self, text: &str) -> &str {
        &text[self.start..self.end]
    }
}

/// A story of an [`Outline`] as spans: its id, its title, and where its
/// dependencies' spans are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Spans {
    id: Span,
    title: Span,
    deps: (usize, usize),
}

/// A story of an [`Outline`]: the [`Story`] fields of the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutlineStory<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub dependencies: Dependencies<'a>,
}

/// A story's dependencies as written, in order.
#[derive(Clone, Copy)]
pub struct Dependencies<'a> {
    text: &'a str,
    spans: &'a [Span],
}

impl<'a> Dependencies<'a> {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The dependencies' ids, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a str> + Clone + 'a {
        let text = self.text;
        self.spans.iter().map(move |s| s.of(text))
    }
}

impl Default for Dependencies<'_> {
    /// None.
    fn default() -> Self {
        Dependencies {
            text: "",
            spans: &[],
        }
    }
}

impl PartialEq for Dependencies<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Dependencies<'_> {}

impl fmt::Debug for Dependencies<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl serde::Serialize for Dependencies<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl Outline {
    /// The number of stories.
    pub fn len(&self) -> usize {
        self.stories.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stories.is_empty()
    }

    /// Story `i` (in file order), if there is one.
    pub fn story(&self, i: usize) -> Option<OutlineStory<'_>> {
        self.stories.get(i).map(|s| self.view(s))
    }

    /// The stories, in file order.
    pub fn stories(
        &self,
    ) -> impl ExactSizeIterator<Item = OutlineStory<'_>> + DoubleEndedIterator + '_ {
        self.stories.iter().map(|s| self.view(s))
    }

    fn view(&self, s: &Spans) -> OutlineStory<'_> {
        OutlineStory {
            id: s.id.of(&self.text),
            title: s.title.of(&self.text),
            dependencies: Dependencies {
                text: &self.text,
                spans: &self.deps[s.deps.0..s.deps.1],
            },
        }
    }

    /// Where the story with this id is (indexed, as [`crate::Prd::position`]).
    pub fn position(&self, id: &str) -> Option<usize> {
        let id_at = |p: usize| self.stories[p].id.of(&self.text);
        self.index.position_by(self.stories.len(), id, id_at)
    }

    /// [`Outline::position`] of many ids at once: `f` gets a finder that
    /// answers as `position` does, the index locked once for all its
    /// lookups (see [`IdIndex::with_finder`]).
    pub fn with_positions<R>(&self, f: impl FnOnce(&dyn Fn(&str) -> Option<usize>) -> R) -> R {
        let id_at = |p: usize| self.stories[p].id.of(&self.text);
        self.index.with_finder(self.stories.len(), id_at, f)
    }

    /// How the story index has been used.
    pub fn index_stats(&self) -> IndexStats {
        self.index.stats()
    }

    /// Parses PRD text (`path` is only used in messages) as
    /// [`crate::Prd::from_json`] does, keeping only the outline.
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<Outline, PlanError> {
        let (skeleton, _) = read_stories::<Folded>(bytes, path)?;
        Ok(skeleton.stories.outline)
    }

    /// Appends story `s` (as read).
    fn push(&mut self, s: &Skel<'_>) -> Span {
        let id = self.put(&s.id);
        let title = self.put(s.title.as_ref().map_or("", |t| &t.0));
        let first = self.deps.len();
        for d in &s.deps {
            let span = self.put(&d.0);
            self.deps.push(span);
        }
        self.stories.push(Spans {
            id,
            title,
            deps: (first, self.deps.len()),
        });
        id
    }

    /// Appends `s` to the text: its span.
    fn put(&mut self, s: &str) -> Span {
        let start = self.text.len();
        self.text.push_str(s);
        Span {
            start,
            end: self.text.len(),
        }
    }
}

/// Reads `path` as [`crate::load_prd`] does, keeping only the [`Outline`].
pub fn load_outline(path: impl AsRef<Path>) -> Result<Outline, PlanError> {
    let path = path.as_ref();
    let bytes = crate::model::read(path, "prd")?;
    Outline::from_json(&bytes, path)
}

/// What scheduling (and an [`Outline`]) needs of a story.
struct Skel<'de> {
    id: Cow<'de, str>,
    has_id: bool,
    /// As written (`None`: absent or null, which the model reads as "").
    title: Option<Text<'de>>,
    priority: Priority,
    status: Status,
    deps: Vec<Text<'de>>,
    weight: Option<u64>,
    /// The status and priority as written, when not the canonical spelling
    /// (for the vocabulary check).
    status_raw: Option<Box<serde_json::Value>>,
    priority_raw: Option<Box<serde_json::Value>>,
}

impl<'de> Item for Skel<'de> {
    type Dep = Text<'de>;
    fn id(&self) -> &str {
        trim(&self.id)
    }
    fn alias(&self) -> Option<&str> {
        None
    }
    fn deps(&self) -> &[Text<'de>] {
        &self.deps
    }
    fn priority(&self) -> Priority {
        self.priority
    }
    fn complete(&self) -> bool {
        self.status.is_complete()
    }
    fn weight(&self) -> Option<u64> {
        self.weight
    }
}

struct Skeleton<'de, K = Vec<Skel<'de>>> {
    stories: K,
    _text: PhantomData<&'de str>,
}

/// Where a plan's stories go as they are read: kept (to validate them
/// together), or folded into an [`Outline`] one by one ([`Folded`]: at
/// 100,000 stories the kept stories were 15 MB read back once to be copied).
trait Stories<'de>: Default {
    /// Takes the next story.
    fn take(&mut self, s: Skel<'de>);
    /// The spellings of the stories' keywords, story after story (for
    /// [`vocabulary::check`]).
    fn spellings(&self) -> impl Iterator<Item = vocabulary::Spelling<'_>>;
}

impl<'de> Stories<'de> for Vec<Skel<'de>> {
    fn take(&mut self, s: Skel<'de>) {
        self.push(s);
    }
    fn spellings(&self) -> impl Iterator<Item = vocabulary::Spelling<'_>> {
        self.iter().map(|s| vocabulary::Spelling {
            id: &s.id,
            status: s.status_raw.as_deref(),
            priority: s.priority_raw.as_deref(),
        })
    }
}

/// Stories folded into an outline as they are read, with the keywords of
/// the few not spelled canonically (by story, the id's span).
#[derive(Default)]
struct Folded {
    outline: Outline,
    unusual: Vec<(usize, Span, Keywords)>,
}

/// A story's status and priority as written (see [`Skel::status_raw`]).
type Keywords = (
    Option<Box<serde_json::Value>>,
    Option<Box<serde_json::Value>>,
);

impl<'de> Stories<'de> for Folded {
    fn take(&mut self, s: Skel<'de>) {
        let at = self.outline.stories.len();
        let id = self.outline.push(&s);
        if s.status_raw.is_some() || s.priority_raw.is_some() {
            self.unusual.push((at, id, (s.status_raw, s.priority_raw)));
        }
    }
    fn spellings(&self) -> impl Iterator<Item = vocabulary::Spelling<'_>> {
        let mut unusual = self.unusual.iter().peekable();
        (0..self.outline.len()).map(move |i| {
            let id = self.outline.stories[i].id.of(&self.outline.text);
            match unusual.next_if(|(at, _, _)| *at == i) {
                Some((_, _, (status, priority))) => vocabulary::Spelling {
                    id,
                    status: status.as_deref(),
                    priority: priority.as_deref(),
                },
                None => vocabulary::Spelling {
                    id,
                    status: None,
                    priority: None,
                },
            }
        })
    }
}

/// A plan's `stories` (null: none), each handed to `K` as it is read, as
/// serde reads an `Option<Vec<Skel>>` (the same errors).
struct StoriesSeed<'k, K>(&'k mut K);

impl<'de, K: Stories<'de>> de::DeserializeSeed<'de> for StoriesSeed<'_, K> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, K: Stories<'de>> Visitor<'de> for StoriesSeed<'_, K> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("option")
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(Each(self.0))
    }
}

/// The stories' list itself (see [`StoriesSeed`]).
struct Each<'k, K>(&'k mut K);

impl<'de, K: Stories<'de>> Visitor<'de> for Each<'_, K> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(s) = seq.next_element::<Skel<'de>>()? {
            self.0.take(s);
        }
        Ok(())
    }
}

/// A string, borrowed from the input unless it had escapes.
pub(crate) struct Text<'de>(Cow<'de, str>);

impl AsRef<str> for Text<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_string(V)
    }
}

/// Checks that a value is a string (as `String` would), without keeping it.
struct AString;

impl<'de> Deserialize<'de> for AString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<AString, E> {
                Ok(AString)
            }
        }
        d.deserialize_string(V)
    }
}

/// Checks a list the way `Vec<T>` reads one, keeping nothing.
struct ListOf<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ListOf<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = ListOf<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ListOf<T>, A::Error> {
                while seq.next_element::<T>()?.is_some() {}
                Ok(ListOf(PhantomData))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

/// Checks an acceptance criterion (a string or an object) like `Criterion`.
struct CriterionCheck;

impl<'de> Deserialize<'de> for CriterionCheck {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CriterionCheck;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an object with a \"description\"")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<CriterionCheck, E> {
                Ok(CriterionCheck)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CriterionCheck, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(CriterionCheck)
            }
        }
        d.deserialize_any(V)
    }
}

/// The critical-path weight of a `context_estimate`, as `numeric_weight`
/// computes it from the value, without building the value.
struct Weight(Option<u64>);

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Weight;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Weight, E> {
                Ok(Weight(crate::model::weight_of_f64(v as f64)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Weight, E> {
                Ok(Weight(crate::model::weight_of_f64(v as f64)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Weight, E> {
                Ok(Weight(crate::model::weight_of_f64(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Weight, E> {
                Ok(Weight(crate::model::weight_of_str(v)))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Weight, E> {
                Ok(Weight(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Weight, E> {
                Ok(Weight(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Weight, E> {
                Ok(Weight(None))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Weight, D::Error> {
                d.deserialize_any(V)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Weight, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Weight(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Weight, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Weight(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Reads an object's keys with the model's key table; `read` handles each
/// known field by number, unknown ones are skipped.
fn read_object<'de, A, F>(mut map: A, names: &[&str], mut read: F) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    F: FnMut(usize, &mut A) -> Result<(), A::Error>,
{
    while let Some(key) = map.next_key::<Text<'de>>()? {
        match names.iter().position(|n| *n == key.as_ref()) {
            Some(i) => read(i, &mut map)?,
            None => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    Ok(())
}

impl<'de> Deserialize<'de> for Skel<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Skel<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "{} object", <Story as Fields>::WHAT)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Skel<'de>, A::Error> {
                let mut s = Skel {
                    id: Cow::Borrowed(""),
                    has_id: false,
                    title: None,
                    priority: Priority::default(),
                    status: Status::default(),
                    deps: Vec::new(),
                    weight: None,
                    status_raw: None,
                    priority_raw: None,
                };
                // Field numbers and types mirror `impl Fields for Story` in wire.rs.
                read_object(map, <Story as Fields>::NAMES, |i, map| {
                    match i {
                        0 => {
                            s.id = map.next_value::<Text<'de>>()?.0;
                            s.has_id = true;
                        }
                        1 => s.title = map.next_value::<Option<Text<'de>>>()?,
                        3 => {
                            let Keyword(p, raw) = map.next_value::<Keyword<Priority>>()?;
                            (s.priority, s.priority_raw) = (p, raw);
                        }
                        4 => {
                            s.deps = map
                                .next_value::<Option<Vec<Text<'de>>>>()?
                                .unwrap_or_default()
                        }
                        5 => {
                            let Keyword(st, raw) = map.next_value::<Keyword<Status>>()?;
                            (s.status, s.status_raw) = (st, raw);
                        }
                        6 => {
                            map.next_value::<Option<ListOf<CriterionCheck>>>()?;
                        }
                        2 | 7 | 8 | 9 => {
                            map.next_value::<Option<AString>>()?;
                        }
                        10 | 11 => {
                            map.next_value::<Option<ListOf<AString>>>()?;
                        }
                        _ => s.weight = map.next_value::<Option<Weight>>()?.and_then(|w| w.0),
                    }
                    Ok(())
                })?;
                Ok(s)
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de, K: Stories<'de>> Deserialize<'de> for Skeleton<'de, K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<K>(PhantomData<K>);
        impl<'de, K: Stories<'de>> Visitor<'de> for V<K> {
            type Value = Skeleton<'de, K>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "{} object", <crate::model::Prd as Fields>::WHAT)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let mut stories = K::default();
                // Mirrors `impl Fields for Prd` in wire.rs.
                read_object(map, <crate::model::Prd as Fields>::NAMES, |i, map| {
                    match i {
                        1 => {
                            map.next_value::<Option<AString>>()?;
                        }
                        2 => {
                            map.next_value::<Option<ListOf<AString>>>()?;
                        }
                        3 => {
                            // As the model reads it: the last `stories`
                            // counts.
                            stories = K::default();
                            map.next_value_seed(StoriesSeed(&mut stories))?;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                    Ok(())
                })?;
                Ok(Skeleton {
                    stories,
                    _text: PhantomData,
                })
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::{validate_prd, Prd};

    use super::*;

    /// Both readers give the same batches, or the same error message; and
    /// the outline says what the model says of each story, or fails the
    /// same way reading does.
    fn same(text: &str) {
        let path = Path::new("p.json");
        let model = Prd::from_json(text.as_bytes(), path).map_err(|e| e.to_string());
        let outline = Outline::from_json(text.as_bytes(), path).map_err(|e| e.to_string());
        match (&model, &outline) {
            (Ok(m), Ok(o)) => {
                assert_eq!(m.stories.len(), o.len(), "{text}");
                for (ms, os) in m.stories.iter().zip(o.stories()) {
                    assert_eq!(ms.id, os.id, "{text}");
                    assert_eq!(ms.title, os.title, "{text}");
                    let deps: Vec<&str> = os.dependencies.iter().collect();
                    assert_eq!(ms.dependencies, deps, "{text}");
                    for id in std::iter::once(&ms.id).chain(&ms.dependencies) {
                        assert_eq!(m.position(id), o.position(id), "{text}: {id}");
                    }
                }
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "{text}"),
            (a, b) => panic!("outline disagrees on {text}: {a:?} vs {b:?}"),
        }
        let full = Prd::from_json(text.as_bytes(), path)
            .map_err(|e| e.to_string())
            .and_then(|p| validate_prd(&p).map_err(|e| e.to_string()));
        let lean = validate_prd_json(text.as_bytes(), path).map_err(|e| e.to_string());
        match (full, lean) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.batches(), b.batches(), "{text}");
                for p in 0..a.len() {
                    assert_eq!(
                        a.node_at(p).remaining_path_len(),
                        b.node_at(p).remaining_path_len(),
                        "{text}"
                    );
                }
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "{text}"),
            (a, b) => panic!("readers disagree on {text}: {:?} vs {:?}", a.err(), b.err()),
        }
    }

    #[test]
    fn agrees_with_the_model_on_empty_files_and_byte_order_marks() {
        same("");
        same(" \n");
        same("\u{feff}{\"stories\": [{\"id\": \"a\", \"title\": \"A\"}]}");
    }

    #[test]
    fn agrees_with_the_model_on_valid_plans() {
        for text in [
            r#"{"stories": []}"#,
            r#"{}"#,
            r#"{"stories": null, "goal": null, "objectives": null}"#,
            r#"{"metadata": {"a": [1, {"b": null}]}, "goal": "g", "objectives": ["x"],
                "quality_gates": {"gates": []}, "unknown": [true],
                "stories": [
                  {"id": "b", "title": "B", "dependencies": ["a", " a "], "priority": "HIGH",
                   "status": "inprogress", "acceptance_criteria": ["x", {"description": "y", "n": [1]}],
                   "type": "bugfix", "story_type": null, "agent": "codex", "tags": ["t"], "files": [],
                   "context_estimate": 5, "extra": {"deep": [1, 2, {"x": "y"}]}},
                  {"id": "a", "title": "A", "description": null, "context_estimate": "2.5",
                   "status": "completed", "priority": 7},
                  {"id": "c", "title": "C\u00e9", "dependencies": ["b\u0020"], "context_estimate": {"x": 1}},
                  {"id": "d", "title": "D", "dependencies": null, "context_estimate": -3,
                   "acceptance_criteria": null, "tags": null}
                ]}"#,
            // The last `stories` counts, the keywords of the ones before
            // it unread.
            r#"{"stories": [{"id": "x", "title": "X", "status": "bogus"}],
                "stories": [{"id": "a", "title": "A", "priority": "urgent"},
                            {"id": "b", "title": "B", "dependencies": ["a"], "status": "done "}]}"#,
            r#"{"stories": [{"id": "x", "title": "X"}], "stories": null}"#,
        ] {
            same(text);
        }
    }

    #[test]
    fn agrees_with_the_model_on_invalid_plans() {
        for text in [
            "",
            "[]",
            "{\"stories\": {}}",
            "{\"stories\": [1]}",
            "{\"stories\": [{\"id\": 1}]}",
            "{\"stories\": [{\"id\": null}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": 5}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\", \"dependencies\": \"b\"}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\", \"dependencies\": [1]}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\", \"acceptance_criteria\": [1]}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\", \"acceptance_criteria\": \"x\"}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\", \"tags\": [null]}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\", \"agent\": []}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\", \"type\": 3}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\", \"description\": {}}]}",
            "{\"goal\": 1}",
            "{\"objectives\": \"x\"}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\"},]}",
            "{\"stories\": [{\"id\": \"a\" \"title\": \"t\"}]}",
            "{\"stories\": []} x",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\", \"status\": \"done\"}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"t\", \"priority\": \"urgent\"}]}",
            // Unknown keywords of stories after plain ones, named where
            // they are.
            "{\"stories\": [{\"id\": \"a\", \"title\": \"A\"}, {\"id\": \"b\", \"title\": \"B\",
              \"priority\": \"urgent\"}, {\"id\": \"c\", \"title\": \"C\"},
              {\"id\": \"d\", \"title\": \"D\", \"status\": \"done\"},
              {\"id\": \"e\", \"title\": \"E\", \"status\": 3}]}",
            "{\"stories\": null, \"stories\": [{\"id\": \"a\", \"title\": \"A\", \"status\": \"nope\"}]}",
            "{\"stories\": [{\"id\": \"a\", \"title\": \"A\", \"status\": \"nope\"}], \"stories\": 1}",
            "{\"stories\": [{\"title\": \"\"}, {\"id\": \"\"}, {\"id\": \"a b\", \"title\": \"x\"},
              {\"id\": \"d\", \"title\": \"x\"}, {\"id\": \"d\", \"title\": \"y\", \"dependencies\": [\"d\", \"zz\"]},
              {\"id\": \"e\", \"title\": \"x\", \"dependencies\": [\"f\"]},
              {\"id\": \"f\", \"title\": \"x\", \"dependencies\": [\"e\"]}]}",
        ] {
            same(text);
        }
    }
}
