//! Unknown keys in the JSON files a user writes (agents.json, gates.json,
//! `.cascade/config.json`): each is a warning naming the closest known key,
//! so a typo such as `"fallback_chian"` is not silently ignored.
//!
//! The known keys are never a second hand-written list that could drift
//! from the reader: [`fields_of`] asks a serde-derived type for the names
//! its `Deserialize` impl accepts (renames and aliases included), and a
//! hand-written reader can record the keys it asks for ([`Tracked`]).

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde_json::{Map, Value};

use crate::text::{printable_line, suggestion};

/// The field names a serde-derived struct `T` reads (from the derive's own
/// table, so renames and aliases are in it); empty for types that are not a
/// derived struct.
pub fn fields_of<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(Probe) {
        Err(Probed(Some(fields))) => fields,
        _ => &[],
    }
}

/// A deserializer that answers nothing, but learns a struct's field names
/// when the struct's impl asks for them.
struct Probe;

#[derive(Debug)]
struct Probed(Option<&'static [&'static str]>);

impl fmt::Display for Probed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("probe")
    }
}

impl std::error::Error for Probed {}

impl de::Error for Probed {
    fn custom<M: fmt::Display>(_: M) -> Probed {
        Probed(None)
    }
}

impl<'de> Deserializer<'de> for Probe {
    type Error = Probed;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Probed> {
        Err(Probed(None))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Probed> {
        Err(Probed(Some(fields)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// One warning per key of `object` that is neither in `known` nor in
/// `ignored` (keys another tool writes there, accepted as they are):
/// `<at>.<key>: unknown field ... (did you mean '<closest>'?); it is ignored`.
/// `at` is the object's key path (empty at the top).
pub fn unknown_keys(
    object: &Map<String, Value>,
    at: &str,
    known: &[&str],
    ignored: &[&str],
) -> Vec<String> {
    object
        .keys()
        .filter(|k| !known.contains(&k.as_str()) && !ignored.contains(&k.as_str()))
        .map(|k| {
            let path = if at.is_empty() {
                printable_line(k).into_owned()
            } else {
                format!("{at}.{}", printable_line(k))
            };
            format!(
                "{path}: unknown field ({}); it is ignored",
                suggestion(k, known.iter().copied())
            )
        })
        .collect()
}

/// A JSON object read by hand that remembers which keys the reader asked
/// for, asked or not present: those are the known keys, so what the reader
/// reads and what [`Tracked::unknown`] accepts can never disagree.
pub struct Tracked<'v> {
    map: &'v Map<String, Value>,
    asked: RefCell<Vec<String>>,
}

impl<'v> Tracked<'v> {
    pub fn new(map: &'v Map<String, Value>) -> Tracked<'v> {
        Tracked {
            map,
            asked: RefCell::new(Vec::new()),
        }
    }

    /// The value of `key`, which becomes a known key.
    pub fn get(&self, key: &str) -> Option<&'v Value> {
        let mut asked = self.asked.borrow_mut();
        if !asked.iter().any(|k| k == key) {
            asked.push(key.to_string());
        }
        self.map.get(key)
    }

    /// Whether `key` is present (it becomes a known key).
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The object itself (reading through it is not tracked).
    pub fn map(&self) -> &'v Map<String, Value> {
        self.map
    }

    /// [`unknown_keys`] for the keys never asked for.
    pub fn unknown(&self, at: &str, ignored: &[&str]) -> Vec<String> {
        let asked = self.asked.borrow();
        let known: Vec<&str> = asked.iter().map(String::as_str).collect();
        unknown_keys(self.map, at, &known, ignored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(dead_code)]
    #[derive(serde::Deserialize)]
    struct Sample {
        name: String,
        #[serde(rename = "type")]
        kind: Option<String>,
        #[serde(default, alias = "timeout")]
        timeout_seconds: u64,
    }

    #[test]
    fn fields_come_from_the_derive() {
        let fields = fields_of::<Sample>();
        for f in ["name", "type", "timeout_seconds", "timeout"] {
            assert!(fields.contains(&f), "{f} in {fields:?}");
        }
        assert!(fields_of::<String>().is_empty());
    }

    #[test]
    fn unknown_keys_name_the_closest_known_one() {
        let v: Value = serde_json::json!({"name": "x", "tpye": "test", "$schema": "s", "zzz": 1});
        let map = v.as_object().unwrap();
        let found = unknown_keys(map, "gates[0]", fields_of::<Sample>(), &["$schema"]);
        assert_eq!(
            found,
            [
                "gates[0].tpye: unknown field (did you mean 'type'?); it is ignored",
                "gates[0].zzz: unknown field (known: name, type, timeout, timeout_seconds); it is ignored",
            ]
        );
        let t = Tracked::new(map);
        assert!(t.get("name").is_some());
        assert!(t.get("type").is_none());
        assert_eq!(
            t.unknown("", &["zzz", "$schema"]),
            ["tpye: unknown field (did you mean 'type'?); it is ignored"]
        );
    }
}
