//! JSON (de)serialization of the plan model that keeps unknown fields and key
//! order.
//!
//! Each object type lists its known keys ([`Fields::NAMES`]). Reading walks the
//! JSON object once: a known key is parsed straight into its field, anything
//! else goes into `extra`, and the sequence of keys is recorded in
//! [`Source::keys`]. Writing replays that sequence, then adds fields that are
//! set but were not in the file, then leftover extras. This is a hand-written
//! visitor rather than `#[serde(flatten)]` because flatten buffers every object
//! into an intermediate tree first, which is several times slower on the
//! 100,000-story plans cascade is built for, and forgets the key order.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::model::{Criterion, Feature, MegaPlan, Prd, Priority, Source, Status, Story};

/// Key-order token meaning "the next key of `extra`".
pub(crate) const EXTRA: u8 = u8::MAX;

/// An object type with known fields, unknown extras and a [`Source`].
pub(crate) trait Fields: Default {
    /// What the object is, for "expected a ... object" messages.
    const WHAT: &'static str;
    /// The known keys; a key's position is its field number.
    const NAMES: &'static [&'static str];
    /// Parses the value of known field `field` from `map`.
    fn read<'de, A: MapAccess<'de>>(&mut self, field: u8, map: &mut A) -> Result<(), A::Error>;
    /// Writes the value of known field `field` (its key is already written).
    fn write<M: SerializeMap>(&self, field: u8, map: &mut M) -> Result<(), M::Error>;
    /// Whether field `field` should be written when the file did not have it.
    /// `fresh` is true for objects built in code (no recorded key order): they
    /// get Plan Cascade's usual fields; objects read from a file only gain
    /// fields whose value is not the default, so a rewrite adds nothing.
    fn wanted(&self, field: u8, fresh: bool) -> bool;
    fn extra(&self) -> &Map<String, Value>;
    fn extra_mut(&mut self) -> &mut Map<String, Value>;
    fn source(&self) -> &Source;
    fn source_mut(&mut self) -> &mut Source;
}

/// A map key, borrowed from the input when possible.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Key-order tokens collected on the stack, so each object costs one exactly
/// sized allocation for them (plans have up to hundreds of thousands).
#[derive(Default)]
struct KeyBuf {
    inline: [u8; 24],
    len: usize,
    spill: Vec<u8>,
}

impl KeyBuf {
    fn push(&mut self, token: u8) {
        if self.spill.is_empty() && self.len < self.inline.len() {
            self.inline[self.len] = token;
            self.len += 1;
        } else {
            if self.spill.is_empty() {
                self.spill.extend_from_slice(&self.inline[..self.len]);
            }
            self.spill.push(token);
        }
    }

    fn as_slice(&self) -> &[u8] {
        if self.spill.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spill
        }
    }

    fn finish(self) -> Box<[u8]> {
        if self.spill.is_empty() {
            Box::from(&self.inline[..self.len])
        } else {
            self.spill.into_boxed_slice()
        }
    }
}

struct FieldsVisitor<T>(PhantomData<T>);

impl<'de, T: Fields> Visitor<'de> for FieldsVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} object", T::WHAT)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut out = T::default();
        let mut keys = KeyBuf::default();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match T::NAMES.iter().position(|n| *n == key) {
                Some(i) => {
                    let i = i as u8;
                    out.read(i, &mut map)?;
                    if !keys.as_slice().contains(&i) {
                        keys.push(i);
                    }
                }
                None => {
                    let value: Value = map.next_value()?;
                    if out.extra_mut().insert(key.into_owned(), value).is_none() {
                        keys.push(EXTRA);
                    }
                }
            }
        }
        out.source_mut().keys = keys.finish();
        Ok(out)
    }
}

fn deserialize_fields<'de, T: Fields, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(FieldsVisitor(PhantomData))
}

fn serialize_fields<T: Fields, S: Serializer>(t: &T, s: S) -> Result<S::Ok, S::Error> {
    let names = T::NAMES;
    let mut map = s.serialize_map(None)?;
    let mut written: u64 = 0;
    let is_known = |k: &str| names.contains(&k);
    let mut extras = t.extra().iter().filter(|(k, _)| !is_known(k));
    for &token in t.source().keys.iter() {
        if token == EXTRA {
            if let Some((k, v)) = extras.next() {
                map.serialize_entry(k, v)?;
            }
        } else if (token as usize) < names.len() && written & (1 << token) == 0 {
            written |= 1 << token;
            map.serialize_key(names[token as usize])?;
            t.write(token, &mut map)?;
        }
    }
    let fresh = t.source().keys.is_empty();
    for i in 0..names.len() as u8 {
        if written & (1 << i) == 0 && t.wanted(i, fresh) {
            map.serialize_key(names[i as usize])?;
            t.write(i, &mut map)?;
        }
    }
    for (k, v) in extras {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

/// Reads a value where JSON `null` means the type's default.
fn nullable<'de, T, A>(map: &mut A) -> Result<T, A::Error>
where
    T: DeserializeOwned + Default,
    A: MapAccess<'de>,
{
    Ok(map.next_value::<Option<T>>()?.unwrap_or_default())
}

/// A keyword field (priority, status) read leniently: the parsed value, plus
/// the original JSON when it was not the canonical spelling.
pub(crate) struct Keyword<K>(pub(crate) K, pub(crate) Option<Box<Value>>);

pub(crate) trait KeywordKind: Copy + Default {
    fn parse(text: &str) -> Option<Self>;
    fn canonical(self) -> &'static str;
}

impl KeywordKind for Priority {
    fn parse(text: &str) -> Option<Self> {
        Priority::parse(text)
    }
    fn canonical(self) -> &'static str {
        self.as_str()
    }
}

impl KeywordKind for Status {
    fn parse(text: &str) -> Option<Self> {
        Status::parse(text)
    }
    fn canonical(self) -> &'static str {
        self.as_str()
    }
}

impl<'de, K: KeywordKind> Deserialize<'de> for Keyword<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = match d.deserialize_any(KeywordVisitor::<K>(PhantomData))? {
            Ok(kw) => return Ok(kw),
            Err(value) => value,
        };
        Ok(Keyword(K::default(), Some(Box::new(value))))
    }
}

/// Strings are parsed without building a `Value`; anything else becomes one.
struct KeywordVisitor<K>(PhantomData<K>);

impl<K: KeywordKind> KeywordVisitor<K> {
    fn text(s: &str) -> Keyword<K> {
        match K::parse(s) {
            Some(k) if k.canonical() == s => Keyword(k, None),
            Some(k) => Keyword(k, Some(Box::new(Value::String(s.to_owned())))),
            None => Keyword(K::default(), Some(Box::new(Value::String(s.to_owned())))),
        }
    }
}

impl<'de, K: KeywordKind> Visitor<'de> for KeywordVisitor<K> {
    type Value = Result<Keyword<K>, Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Ok(Self::text(v)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Err(Value::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Err(Value::from(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Err(Value::from(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Err(Value::from(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Err(Value::Null))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Err(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Value::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Err)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Value::deserialize(de::value::MapAccessDeserializer::new(map)).map(Err)
    }
}

/// Writes a keyword: the original spelling if it still means the same thing.
fn write_keyword<K: KeywordKind + PartialEq, M: SerializeMap>(
    value: K,
    raw: Option<&Value>,
    map: &mut M,
) -> Result<(), M::Error> {
    if let Some(raw) = raw {
        let same = match raw {
            Value::String(s) => K::parse(s).unwrap_or_default() == value,
            _ => value == K::default(),
        };
        if same {
            return map.serialize_value(raw);
        }
    }
    map.serialize_value(value.canonical())
}

impl<'de> Deserialize<'de> for Criterion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Criterion;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an object with a \"description\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Criterion, E> {
                Ok(Criterion::Text(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Criterion, E> {
                Ok(Criterion::Text(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Criterion, A::Error> {
                Map::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|m| Criterion::Object(Box::new(m)))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Criterion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Criterion::Text(t) => s.serialize_str(t),
            Criterion::Object(m) => m.serialize(s),
        }
    }
}

macro_rules! object_serde {
    ($t:ty) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                deserialize_fields(d)
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serialize_fields(self, s)
            }
        }
    };
}

macro_rules! common_accessors {
    () => {
        fn extra(&self) -> &Map<String, Value> {
            &self.extra
        }
        fn extra_mut(&mut self) -> &mut Map<String, Value> {
            &mut self.extra
        }
        fn source(&self) -> &Source {
            &self.source
        }
        fn source_mut(&mut self) -> &mut Source {
            &mut self.source
        }
    };
}

object_serde!(Story);
object_serde!(Prd);
object_serde!(MegaPlan);
object_serde!(Feature);

impl Fields for Story {
    const WHAT: &'static str = "a story";
    const NAMES: &'static [&'static str] = &[
        "id",                  // 0
        "title",               // 1
        "description",         // 2
        "priority",            // 3
        "dependencies",        // 4
        "status",              // 5
        "acceptance_criteria", // 6
        "agent",               // 7
        "type",                // 8
        "story_type",          // 9
        "tags",                // 10
        "files",               // 11
        "context_estimate",    // 12
    ];

    fn read<'de, A: MapAccess<'de>>(&mut self, field: u8, map: &mut A) -> Result<(), A::Error> {
        match field {
            0 => self.id = map.next_value()?,
            1 => self.title = nullable(map)?,
            2 => self.description = nullable(map)?,
            3 => {
                let Keyword(p, raw) = map.next_value::<Keyword<Priority>>()?;
                self.priority = p;
                self.source.priority = raw;
            }
            4 => self.dependencies = nullable(map)?,
            5 => {
                let Keyword(s, raw) = map.next_value::<Keyword<Status>>()?;
                self.status = s;
                self.source.status = raw;
            }
            6 => self.acceptance_criteria = nullable(map)?,
            7 => self.agent = map.next_value()?,
            8 | 9 => self.story_type = map.next_value()?,
            10 => self.tags = nullable(map)?,
            11 => self.files = nullable(map)?,
            _ => self.context_estimate = map.next_value()?,
        }
        Ok(())
    }

    fn write<M: SerializeMap>(&self, field: u8, map: &mut M) -> Result<(), M::Error> {
        match field {
            0 => map.serialize_value(&self.id),
            1 => map.serialize_value(&self.title),
            2 => map.serialize_value(&self.description),
            3 => write_keyword(self.priority, self.source.priority.as_deref(), map),
            4 => map.serialize_value(&self.dependencies),
            5 => write_keyword(self.status, self.source.status.as_deref(), map),
            6 => map.serialize_value(&self.acceptance_criteria),
            7 => map.serialize_value(&self.agent),
            8 | 9 => map.serialize_value(&self.story_type),
            10 => map.serialize_value(&self.tags),
            11 => map.serialize_value(&self.files),
            _ => map.serialize_value(&self.context_estimate),
        }
    }

    fn wanted(&self, field: u8, fresh: bool) -> bool {
        match field {
            0 | 1 => true,
            2 => !self.description.is_empty(),
            3 => fresh || self.priority != Priority::default(),
            4 => fresh || !self.dependencies.is_empty(),
            5 => fresh || self.status != Status::default(),
            6 => !self.acceptance_criteria.is_empty(),
            7 => self.agent.is_some(),
            // `story_type` is written as `type` (unless the file used `story_type`).
            8 => self.story_type.is_some() && !self.source.has_key(9),
            9 => false,
            10 => !self.tags.is_empty(),
            11 => !self.files.is_empty(),
            _ => self.context_estimate.is_some(),
        }
    }

    common_accessors!();
}

impl Fields for Prd {
    const WHAT: &'static str = "a PRD";
    const NAMES: &'static [&'static str] =
        &["metadata", "goal", "objectives", "stories", "quality_gates"];

    fn read<'de, A: MapAccess<'de>>(&mut self, field: u8, map: &mut A) -> Result<(), A::Error> {
        match field {
            0 => self.metadata = map.next_value()?,
            1 => self.goal = nullable(map)?,
            2 => self.objectives = nullable(map)?,
            3 => self.stories = nullable(map)?,
            _ => self.quality_gates = map.next_value()?,
        }
        Ok(())
    }

    fn write<M: SerializeMap>(&self, field: u8, map: &mut M) -> Result<(), M::Error> {
        match field {
            0 => map.serialize_value(&self.metadata),
            1 => map.serialize_value(&self.goal),
            2 => map.serialize_value(&self.objectives),
            3 => map.serialize_value(&self.stories),
            _ => map.serialize_value(&self.quality_gates),
        }
    }

    fn wanted(&self, field: u8, fresh: bool) -> bool {
        match field {
            0 => self.metadata.is_some(),
            1 => fresh || !self.goal.is_empty(),
            2 => !self.objectives.is_empty(),
            3 => true,
            _ => self.quality_gates.is_some(),
        }
    }

    common_accessors!();
}

impl Fields for MegaPlan {
    const WHAT: &'static str = "a mega-plan";
    const NAMES: &'static [&'static str] = &["goal", "execution_mode", "target_branch", "features"];

    fn read<'de, A: MapAccess<'de>>(&mut self, field: u8, map: &mut A) -> Result<(), A::Error> {
        match field {
            0 => self.goal = nullable(map)?,
            1 => self.execution_mode = map.next_value()?,
            2 => self.target_branch = map.next_value()?,
            _ => self.features = nullable(map)?,
        }
        Ok(())
    }

    fn write<M: SerializeMap>(&self, field: u8, map: &mut M) -> Result<(), M::Error> {
        match field {
            0 => map.serialize_value(&self.goal),
            1 => map.serialize_value(&self.execution_mode),
            2 => map.serialize_value(&self.target_branch),
            _ => map.serialize_value(&self.features),
        }
    }

    fn wanted(&self, field: u8, fresh: bool) -> bool {
        match field {
            0 => fresh || !self.goal.is_empty(),
            1 => self.execution_mode.is_some(),
            2 => self.target_branch.is_some(),
            _ => true,
        }
    }

    common_accessors!();
}

impl Fields for Feature {
    const WHAT: &'static str = "a feature";
    const NAMES: &'static [&'static str] = &[
        "id",
        "name",
        "title",
        "description",
        "priority",
        "dependencies",
        "status",
    ];

    fn read<'de, A: MapAccess<'de>>(&mut self, field: u8, map: &mut A) -> Result<(), A::Error> {
        match field {
            0 => self.id = map.next_value()?,
            1 => self.name = nullable(map)?,
            2 => self.title = nullable(map)?,
            3 => self.description = nullable(map)?,
            4 => {
                let Keyword(p, raw) = map.next_value::<Keyword<Priority>>()?;
                self.priority = p;
                self.source.priority = raw;
            }
            5 => self.dependencies = nullable(map)?,
            _ => {
                let Keyword(s, raw) = map.next_value::<Keyword<Status>>()?;
                self.status = s;
                self.source.status = raw;
            }
        }
        Ok(())
    }

    fn write<M: SerializeMap>(&self, field: u8, map: &mut M) -> Result<(), M::Error> {
        match field {
            0 => map.serialize_value(&self.id),
            1 => map.serialize_value(&self.name),
            2 => map.serialize_value(&self.title),
            3 => map.serialize_value(&self.description),
            4 => write_keyword(self.priority, self.source.priority.as_deref(), map),
            5 => map.serialize_value(&self.dependencies),
            _ => write_keyword(self.status, self.source.status.as_deref(), map),
        }
    }

    fn wanted(&self, field: u8, fresh: bool) -> bool {
        match field {
            3 => !self.description.is_empty(),
            4 => fresh || self.priority != Priority::default(),
            5 => fresh || !self.dependencies.is_empty(),
            6 => fresh || self.status != Status::default(),
            _ => true,
        }
    }

    common_accessors!();
}
