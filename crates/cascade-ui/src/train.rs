//! The merge train as the run view shows it: the stories whose merge with
//! the target is being integration-gated (in train order, each with the
//! stories gated together with it), the last gatings that ended, and how
//! many passed, failed or were superseded. Folded from the engine's
//! `integration_started` / `integration_finished` events and the ones by
//! which a story leaves the train (merged, failed, conflicted), as the
//! records arrive (see docs/control.md, "The merge train").

use std::collections::VecDeque;

use serde::Serialize;

/// How many ended gatings the view keeps: the train of the last minutes,
/// not the run's history (that is in the event log).
const RECENT: usize = 12;

/// What the records say of the merge train of a plain run (a mega run's
/// feature merges are the mega view's).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Train {
    /// On the train now, in train order (the order they boarded: a car
    /// gated again keeps its place).
    cars: Vec<Car>,
    /// The last gatings that ended, oldest first.
    recent: VecDeque<Gating>,
    passed: u64,
    failed: u64,
    superseded: u64,
}

/// A story on the train.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Car {
    story: String,
    /// The stories in its gated tree not on the target yet, in train
    /// order, ending with `story`.
    members: Vec<String>,
    /// `gating`, or the verdict of its last gating: `passed` (it lands
    /// when the cars ahead have), `failed` (charged once those ahead have
    /// landed) or `superseded` (gated again, without a car ahead that
    /// failed).
    state: String,
    failed_gates: Vec<String>,
    /// How many times it was gated since it boarded.
    gatings: u32,
}

/// A gating that ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Gating {
    story: String,
    members: Vec<String>,
    verdict: String,
    failed_gates: Vec<String>,
}

/// What one event says to the train, by its name.
enum Said {
    Started,
    Finished,
    /// The story left the train (merged, failed, or its merge conflicted).
    Left,
    /// A run started or ended: nobody is on the train.
    Emptied,
}

impl Said {
    fn of(event: &str) -> Option<Said> {
        Some(match event {
            "integration_started" => Said::Started,
            "integration_finished" => Said::Finished,
            "story_merged" | "story_failed" | "attempt_failed" | "merge_conflict" => Said::Left,
            "run_started" | "run_finished" => Said::Emptied,
            _ => return None,
        })
    }
}

/// The parts of an event the train reads.
pub(crate) struct Record<'a> {
    pub event: &'a str,
    pub story: Option<&'a str>,
    pub members: &'a [String],
    pub verdict: Option<&'a str>,
    pub failed_gates: &'a [String],
}

impl Train {
    /// Takes in one event of a plain run.
    pub fn add(&mut self, r: &Record<'_>) {
        let Some(said) = Said::of(r.event) else {
            return;
        };
        if let Said::Emptied = said {
            self.cars.clear();
            return;
        }
        let Some(story) = r.story else { return };
        // A train is as long as the gate slots allow: a few cars, looked
        // through rather than indexed.
        let at = self.cars.iter().position(|c| c.story == story);
        match (said, at) {
            (Said::Started, Some(i)) => {
                let car = &mut self.cars[i];
                car.members = r.members.to_vec();
                car.state = "gating".into();
                car.failed_gates.clear();
                car.gatings += 1;
            }
            (Said::Started, None) => self.cars.push(Car {
                story: story.into(),
                members: r.members.to_vec(),
                state: "gating".into(),
                failed_gates: Vec::new(),
                gatings: 1,
            }),
            (Said::Finished, at) => {
                let verdict = r.verdict.unwrap_or("failed");
                self.count(verdict);
                if let Some(i) = at {
                    self.cars[i].state = verdict.into();
                    self.cars[i].failed_gates = r.failed_gates.to_vec();
                }
                if self.recent.len() == RECENT {
                    self.recent.pop_front();
                }
                self.recent.push_back(Gating {
                    story: story.into(),
                    members: r.members.to_vec(),
                    verdict: verdict.into(),
                    failed_gates: r.failed_gates.to_vec(),
                });
            }
            (Said::Left, Some(i)) => {
                self.cars.remove(i);
            }
            (Said::Left | Said::Emptied, _) => {}
        }
    }

    fn count(&mut self, verdict: &str) {
        match verdict {
            "passed" => self.passed += 1,
            "superseded" => self.superseded += 1,
            _ => self.failed += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `events` taken in by `t`, in order.
    fn fold_onto(t: &mut Train, events: &[serde_json::Value]) {
        for e in events {
            let list = |k: &str| -> Vec<String> {
                e[k].as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            let (members, failed_gates) = (list("members"), list("failed_gates"));
            t.add(&Record {
                event: e["event"].as_str().expect("an event name"),
                story: e["story"].as_str(),
                members: &members,
                verdict: e["verdict"].as_str(),
                failed_gates: &failed_gates,
            });
        }
    }

    fn fold(events: &[serde_json::Value]) -> Train {
        let mut t = Train::default();
        fold_onto(&mut t, events);
        t
    }

    fn started(story: &str, members: &[&str]) -> serde_json::Value {
        serde_json::json!({"event": "integration_started", "story": story, "members": members})
    }

    fn finished(story: &str, members: &[&str], verdict: &str) -> serde_json::Value {
        let failed: &[&str] = if verdict == "failed" { &["tests"] } else { &[] };
        serde_json::json!({"event": "integration_finished", "story": story,
            "members": members, "verdict": verdict, "failed_gates": failed})
    }

    fn cars(t: &Train) -> Vec<(&str, Vec<&str>, &str, u32)> {
        t.cars
            .iter()
            .map(|c| {
                let members = c.members.iter().map(String::as_str).collect();
                (c.story.as_str(), members, c.state.as_str(), c.gatings)
            })
            .collect()
    }

    /// rename, caller2 on top of it and other on top of both; caller2
    /// fails, other's gating is superseded and done again without it.
    #[test]
    fn cars_keep_their_place_and_leave_when_merged_or_charged() {
        let t = fold(&[
            started("rename", &["rename"]),
            started("caller2", &["rename", "caller2"]),
            started("other", &["rename", "caller2", "other"]),
            finished("caller2", &["rename", "caller2"], "failed"),
            finished("other", &["rename", "caller2", "other"], "superseded"),
            started("other", &["rename", "other"]),
        ]);
        assert_eq!(
            cars(&t),
            vec![
                ("rename", vec!["rename"], "gating", 1),
                ("caller2", vec!["rename", "caller2"], "failed", 1),
                ("other", vec!["rename", "other"], "gating", 2),
            ]
        );
        assert_eq!(t.cars[1].failed_gates, ["tests"]);
        assert!(t.cars[2].failed_gates.is_empty());
        let mut t = t;
        fold_onto(
            &mut t,
            &[
                finished("rename", &["rename"], "passed"),
                serde_json::json!({"event": "story_merged", "story": "rename"}),
                serde_json::json!({"event": "attempt_failed", "story": "caller2"}),
                finished("other", &["rename", "other"], "passed"),
            ],
        );
        assert_eq!(
            cars(&t),
            vec![("other", vec!["rename", "other"], "passed", 2)]
        );
        assert_eq!((t.passed, t.failed, t.superseded), (2, 1, 1));
        let verdicts: Vec<(&str, &str)> = t
            .recent
            .iter()
            .map(|g| (g.story.as_str(), g.verdict.as_str()))
            .collect();
        assert_eq!(
            verdicts,
            [
                ("caller2", "failed"),
                ("other", "superseded"),
                ("rename", "passed"),
                ("other", "passed"),
            ]
        );
        // A run that ends (or a new one) has nobody on the train; what
        // was gated stays said.
        fold_onto(&mut t, &[serde_json::json!({"event": "run_finished"})]);
        assert!(t.cars.is_empty());
        assert_eq!(t.recent.len(), 4);
        // With nobody on it, a story leaving says nothing.
        let before = t.clone();
        fold_onto(
            &mut t,
            &[serde_json::json!({"event": "story_merged", "story": "x"})],
        );
        assert_eq!(t, before);
    }

    #[test]
    fn only_the_last_gatings_are_kept() {
        let events: Vec<serde_json::Value> = (0..RECENT + 5)
            .map(|i| finished(&format!("s{i}"), &[], "passed"))
            .collect();
        let t = fold(&events);
        assert_eq!(t.recent.len(), RECENT);
        assert_eq!(t.recent.front().map(|g| g.story.as_str()), Some("s5"));
        assert_eq!(t.passed, (RECENT + 5) as u64);
    }
}
