//! A plan's stories kept as text ([`PlanRecords`]): a story's view in the
//! dashboard parses its one story whole, found through the plan's
//! [`cascade_plan::Outline`], instead of the whole plan.

use serde::de::{Deserializer, Visitor};
use serde_json::value::RawValue;

use crate::stamp::FileStamp;

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
    use super::*;

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
}
