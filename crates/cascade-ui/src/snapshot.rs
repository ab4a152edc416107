//! `GET /api/run`: the run on show as one JSON document: its stories laid
//! out by batch with the critical path, the attempts per worker slot, and
//! the totals. Built from the state file (what is true now), the plan
//! (titles, dependencies) and a [`Summary`] of the run's records (what only
//! the events say: maximum attempts, skipped stories, cache hits), folded
//! as the records arrive rather than read again for every snapshot.
//!
//! Linear in the stories and attempts: stories are found through the
//! state's index, batches come from one topological pass, and worker slots
//! from a heap of free ones.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cascade_engine::state::{RunState, StoryState, StoryStatus};
use cascade_plan::Prd;
use serde_json::{json, Value};

use crate::hub::Status;

/// Everything a snapshot is made of.
pub(crate) struct Input<'a> {
    pub state: Option<&'a RunState>,
    pub prd: Option<&'a Prd>,
    pub prd_path: Option<&'a Path>,
    pub summary: &'a Summary,
    pub status: &'a Status,
    /// Now, Unix ms.
    pub now_ms: i64,
    /// Gate results of an attempt (`story`, `attempt`) as kept by the engine.
    pub gates: &'a dyn Fn(&str, u32) -> Option<Value>,
}

/// Milliseconds since the Unix epoch of an RFC 3339 time.
pub(crate) fn unix_ms(t: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(t)
        .ok()
        .map(|d| d.timestamp_millis())
}

/// The state the page colours a story by.
pub(crate) fn story_state(s: Option<&StoryState>, skipped: bool, merging: bool) -> &'static str {
    let Some(s) = s else {
        return "pending";
    };
    match s.status {
        StoryStatus::Pending => "pending",
        StoryStatus::Running if merging => "merging",
        StoryStatus::Running => "running",
        StoryStatus::Complete if skipped => "skipped",
        StoryStatus::Complete => "complete",
        StoryStatus::Failed if s.error_type == Some(cascade_engine::FailureKind::Cancelled) => {
            "cancelled"
        }
        StoryStatus::Failed => "failed",
        StoryStatus::Blocked => "blocked",
    }
}

/// Batch (0-based) of every story over the whole plan (complete ones
/// included, so a finished run still draws as it ran): 0 without
/// dependencies, else one more than the deepest dependency. One pass in
/// topological order (Kahn); unknown and self dependencies are ignored, and
/// the stories of a cycle (never in a validated plan) get batch 0.
pub(crate) fn layers(ids: &[String], deps: &[Vec<String>]) -> Vec<usize> {
    let index: HashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_str(), i))
        .collect();
    let n = ids.len();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut waiting = vec![0usize; n];
    for (i, ds) in deps.iter().enumerate().take(n) {
        for d in ds {
            if let Some(&j) = index.get(d.as_str()).filter(|&&j| j != i) {
                dependents[j].push(i);
                waiting[i] += 1;
            }
        }
    }
    let mut layer = vec![0usize; n];
    let mut ready: Vec<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    while let Some(j) = ready.pop() {
        for &i in &dependents[j] {
            layer[i] = layer[i].max(layer[j] + 1);
            waiting[i] -= 1;
            if waiting[i] == 0 {
                ready.push(i);
            }
        }
    }
    // Left waiting: on or behind a cycle.
    for i in 0..n {
        if waiting[i] > 0 {
            layer[i] = 0;
        }
    }
    layer
}

/// The heaviest dependency chain (ids from first to last), stories
/// weighing their elapsed time where known, the mean of the known ones
/// (or 1) where not.
pub(crate) fn critical_path(
    ids: &[String],
    deps: &[Vec<String>],
    layer: &[usize],
    elapsed: &[Option<u64>],
) -> Vec<String> {
    let known: Vec<u64> = elapsed.iter().flatten().copied().collect();
    let default = if known.is_empty() {
        1
    } else {
        (known.iter().sum::<u64>() / known.len() as u64).max(1)
    };
    let weight: Vec<u64> = elapsed
        .iter()
        .map(|e| e.unwrap_or(default).max(1))
        .collect();
    let index: HashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_str(), i))
        .collect();
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by_key(|&i| (layer[i], i));
    let mut best: Vec<u64> = vec![0; ids.len()];
    let mut prev: Vec<Option<usize>> = vec![None; ids.len()];
    for &i in &order {
        let mut from = None;
        let mut base = 0;
        for d in &deps[i] {
            if let Some(&j) = index.get(d.as_str()) {
                if j != i && layer[j] < layer[i] && best[j] > base {
                    base = best[j];
                    from = Some(j);
                }
            }
        }
        best[i] = base + weight[i];
        prev[i] = from;
    }
    let Some(mut at) = (0..ids.len()).max_by_key(|&i| (best[i], std::cmp::Reverse(i))) else {
        return Vec::new();
    };
    let mut path = vec![ids[at].clone()];
    while let Some(p) = prev[at] {
        path.push(ids[p].clone());
        at = p;
    }
    path.reverse();
    path
}

/// Worker slots: each attempt takes the lowest slot free at its start.
pub(crate) fn slots(spans: &[(i64, Option<i64>)], now: i64) -> Vec<usize> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| (spans[i].0, i));
    // Slots in use, by when they free up; slots free, lowest first.
    let mut busy: BinaryHeap<Reverse<(i64, usize)>> = BinaryHeap::new();
    let mut free: BinaryHeap<Reverse<usize>> = BinaryHeap::new();
    let mut slot = vec![0; spans.len()];
    for i in order {
        let (start, end) = spans[i];
        let end = end.unwrap_or(now.max(start) + 1);
        while let Some(&Reverse((until, s))) = busy.peek() {
            if until > start {
                break;
            }
            busy.pop();
            free.push(Reverse(s));
        }
        let s = match free.pop() {
            Some(Reverse(s)) => s,
            None => busy.len(),
        };
        busy.push(Reverse((end, s)));
        slot[i] = s;
    }
    slot
}

/// What the records say per story.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    max_attempts: Option<u64>,
    pub skipped: bool,
    /// In the merge queue's merge (or resolving its conflict) now.
    pub merging: bool,
    worker: Option<String>,
    /// Gate results served from the cache.
    cache_hits: u64,
}

/// The fields of an event record the views look at (the rest of it is
/// skipped when it is read).
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Head {
    #[serde(default)]
    pub event: Option<String>,
    #[serde(default)]
    pub story: Option<String>,
    /// A mega run's feature (story ids repeat across features).
    #[serde(default)]
    feature: Option<String>,
    #[serde(default)]
    max_attempts: Option<u64>,
    #[serde(default)]
    worker: Option<String>,
    #[serde(default)]
    cached: Option<bool>,
    #[serde(default)]
    pub ok: Option<bool>,
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub run_id: Option<String>,
}

/// What the records say, per feature (`None`: a plain run's stories, or
/// engine events without a feature) and story.
pub(crate) type SeenStories = HashMap<Option<String>, HashMap<String, Seen>>;

/// What the run's event records say, feature by feature and story by
/// story, folded in as they arrive.
#[derive(Debug, Clone, Default)]
pub(crate) struct Summary {
    stories: SeenStories,
    cache_hits: u64,
}

impl Summary {
    /// Takes in one event record.
    pub fn add(&mut self, head: &Head) {
        let Some(story) = head.story.as_deref() else {
            return;
        };
        // Looked up before inserting: no allocation per record of a
        // story already seen.
        let feature = match self.stories.get_mut(&head.feature) {
            Some(f) => f,
            None => self.stories.entry(head.feature.clone()).or_default(),
        };
        let e = match feature.get_mut(story) {
            Some(e) => e,
            None => feature.entry(story.to_string()).or_default(),
        };
        match head.event.as_deref() {
            Some("story_started") => {
                e.max_attempts = head.max_attempts;
                e.merging = false;
                e.worker = head.worker.clone();
            }
            // Fleet runs: the coordinator hears of the worker that took
            // the job (`story_started` is the worker's own event).
            Some("job_started") => {
                e.merging = false;
                e.worker = head.worker.clone();
            }
            Some("story_skipped") => e.skipped = true,
            Some("gate_finished") if head.cached == Some(true) => {
                e.cache_hits += 1;
                self.cache_hits += 1;
            }
            Some("merge_started") | Some("merge_resolving") => e.merging = true,
            Some("attempt_failed") | Some("retry_scheduled") => e.merging = false,
            _ => {}
        }
    }

    /// What the records say about the stories of `feature` (`None`: a
    /// plain run's).
    pub fn stories(&self, feature: Option<&str>) -> Option<&HashMap<String, Seen>> {
        self.stories.get(&feature.map(str::to_string))
    }
}

/// The snapshot document (see the API section of docs/dashboard.md).
pub(crate) fn build(input: &Input<'_>) -> Value {
    let st = input.state;
    let run_start = st.and_then(|s| unix_ms(&s.started_at));
    let rel = |t: &str| -> Option<i64> { Some(unix_ms(t)? - run_start?) };
    let seen = input.summary.stories(None);
    let cache_hits = input.summary.cache_hits;

    // The stories: the plan's, in file order (else the state's).
    let (ids, titles, deps): (Vec<String>, Vec<String>, Vec<Vec<String>>) = match input.prd {
        Some(p) => (
            p.stories.iter().map(|s| s.id.clone()).collect(),
            p.stories.iter().map(|s| s.title.clone()).collect(),
            p.stories.iter().map(|s| s.dependencies.clone()).collect(),
        ),
        None => {
            let ids: Vec<String> = st
                .map(|s| s.stories.iter().map(|x| x.id.clone()).collect())
                .unwrap_or_default();
            let n = ids.len();
            (ids.clone(), ids, vec![Vec::new(); n])
        }
    };
    let layer = layers(&ids, &deps);
    let states: Vec<Option<&StoryState>> =
        ids.iter().map(|id| st.and_then(|s| s.story(id))).collect();

    // Attempts (timeline) and per-story sums.
    let mut spans = Vec::new();
    let mut rows = Vec::new();
    let mut elapsed: Vec<Option<u64>> = vec![None; ids.len()];
    let (mut tokens_in, mut tokens_out, mut cost, mut estimated, mut saved) =
        (0u64, 0u64, 0f64, false, 0u64);
    for (i, s) in states.iter().enumerate() {
        let Some(s) = s else { continue };
        for a in &s.attempts {
            let Some(start) = rel(&a.started_at) else {
                continue;
            };
            let end = a.finished_at.as_deref().and_then(rel).or_else(|| {
                a.outcome
                    .as_ref()
                    .and(a.duration_ms)
                    .map(|d| start + d as i64)
            });
            let running = a.outcome.is_none() && s.status == StoryStatus::Running;
            let end = if running { None } else { end.or(Some(start)) };
            let now_rel = run_start.map_or(0, |r| input.now_ms - r);
            let took = end.unwrap_or(now_rel).saturating_sub(start).max(0) as u64;
            *elapsed[i].get_or_insert(0) += took;
            tokens_in += a.input_tokens.unwrap_or(0);
            tokens_out += a.output_tokens.unwrap_or(0);
            cost += a.cost_usd.unwrap_or(0.0);
            estimated |= a.cost_estimated == Some(true);
            // Only a story with cached gate results has time saved to read.
            let hits = seen
                .and_then(|m| m.get(&s.id))
                .is_some_and(|x| x.cache_hits > 0);
            if let Some(g) = hits.then(|| (input.gates)(&s.id, a.attempt)).flatten() {
                for gate in g
                    .get("gates")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if gate.get("cached") == Some(&Value::Bool(true)) {
                        saved += gate
                            .get("original_duration_ms")
                            .and_then(Value::as_u64)
                            .unwrap_or(0);
                    }
                }
            }
            spans.push((start, end));
            rows.push(json!({
                "story": s.id,
                "attempt": a.attempt,
                "agent": a.agent,
                "phase": a.phase,
                "start_ms": start,
                "end_ms": end,
                "outcome": if running { "running" } else { match a.outcome.as_deref() { Some("passed") => "ok", Some(o) => o, None => "interrupted" } },
                "failure_kind": a.error_type.map(|k| k.as_str()),
            }));
        }
    }
    let now_rel = run_start.map_or(0, |r| input.now_ms - r);
    for (row, slot) in rows.iter_mut().zip(slots(&spans, now_rel)) {
        row["slot"] = json!(slot);
    }

    let stories: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let s = states[i];
            let seen = seen.and_then(|m| m.get(id));
            let last = s.and_then(|s| s.attempts.last());
            let sum = |f: fn(&cascade_engine::state::AttemptRecord) -> Option<u64>| -> Option<u64> {
                let v: Vec<u64> = s?.attempts.iter().filter_map(f).collect();
                (!v.is_empty()).then(|| v.iter().sum())
            };
            let story_cost: Option<f64> = s.and_then(|s| {
                let v: Vec<f64> = s.attempts.iter().filter_map(|a| a.cost_usd).collect();
                (!v.is_empty()).then(|| v.iter().sum())
            });
            json!({
                "id": id,
                "title": titles[i],
                "batch": layer[i],
                "depends_on": deps[i],
                "state": story_state(s, seen.is_some_and(|x| x.skipped), seen.is_some_and(|x| x.merging)),
                "agent": s.and_then(|s| s.agent.clone()),
                "attempt": last.map(|a| a.attempt),
                "max_attempts": seen.and_then(|x| x.max_attempts),
                "started_at_ms": s.and_then(|s| s.attempts.first()).and_then(|a| rel(&a.started_at)),
                "elapsed_ms": elapsed[i],
                // A story that made it keeps its last failure in the
                // state; the graph shows failures only where they stand.
                "failure_kind": s.filter(|s| s.status != StoryStatus::Complete).and_then(|s| s.error_type).map(|k| k.as_str()),
                "error": s.filter(|s| s.status != StoryStatus::Complete).and_then(|s| s.error.clone()),
                "blocked_by": s.map(|s| s.blocked_by.clone()).unwrap_or_default(),
                "cost_usd": story_cost,
                "tokens_in": sum(|a| a.input_tokens),
                "tokens_out": sum(|a| a.output_tokens),
                "worker": seen.and_then(|x| x.worker.clone()),
            })
        })
        .collect();

    let nb = layer.iter().copied().max().map_or(0, |m| m + 1);
    let mut batches: Vec<Vec<String>> = vec![Vec::new(); nb];
    for (i, id) in ids.iter().enumerate() {
        batches[layer[i]].push(id.clone());
    }
    let counts = st.map(|s| s.counts()).unwrap_or_default();
    let flags = st.and_then(|s| s.options.as_ref());
    json!({
        "run_id": st.map(|s| s.run_id.clone()).or_else(|| input.status.run_id.clone()),
        "status": st.map(|s| s.status.as_str()),
        "live": input.status.live,
        "paused": input.status.paused,
        "last_event_id": input.status.last_event_id,
        "prd": st.map(|s| s.prd.clone()).or_else(|| input.prd_path.map(|p| p.display().to_string())),
        "target_branch": st.map(|s| s.target_branch.clone()),
        "schedule": flags.and_then(|f| f.get("schedule").cloned()),
        "parallel": flags.and_then(|f| f.get("parallel").cloned()),
        "started_at": st.map(|s| s.started_at.clone()),
        "updated_at": st.map(|s| s.updated_at.clone()),
        "elapsed_ms": run_start.map(|r| if input.status.live { input.now_ms - r } else { st.and_then(|s| unix_ms(&s.updated_at)).unwrap_or(input.now_ms) - r }),
        "stories": stories,
        "batches": batches,
        "critical_path": critical_path(&ids, &deps, &layer, &elapsed),
        "attempts": rows,
        "totals": {
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cost_usd": cost,
            "cost_estimated": estimated,
            "gate_cache_hits": cache_hits,
            "gate_cache_saved_ms": saved,
            "merged": counts.complete,
            "failed": counts.failed,
            "blocked": counts.blocked,
            "pending": counts.pending,
            "total": ids.len(),
        },
    })
}

/// The PRD of the run: the one the state names (relative to where the run
/// was started), else `fallback` (`./prd.json` where `cascade ui` runs).
pub(crate) fn prd_path(state: Option<&RunState>, fallback: &Path) -> PathBuf {
    if let Some(s) = state.filter(|s| !s.prd.is_empty()) {
        let p = PathBuf::from(&s.prd);
        return if p.is_absolute() {
            p
        } else {
            Path::new(&s.project_root).join(p)
        };
    }
    fallback.to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn layers_cover_complete_stories_too() {
        let ids = v(&["a", "b", "c", "d"]);
        let deps = vec![v(&[]), v(&["a"]), v(&["a"]), v(&["b", "c"])];
        assert_eq!(layers(&ids, &deps), vec![0, 1, 1, 2]);
        // Unknown and self dependencies are ignored; a cycle is batch 0.
        assert_eq!(layers(&v(&["x"]), &[v(&["x", "nope"])]), vec![0]);
        let cyc = layers(&v(&["a", "b", "c"]), &[v(&["b"]), v(&["a"]), v(&["a"])]);
        assert_eq!(cyc, vec![0, 0, 0]);
        // A long chain in reverse file order (the old fixpoint's worst case).
        let n = 2000;
        let ids: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
        let deps: Vec<Vec<String>> = (0..n)
            .map(|i| {
                if i + 1 < n {
                    vec![format!("s{}", i + 1)]
                } else {
                    vec![]
                }
            })
            .collect();
        let l = layers(&ids, &deps);
        assert_eq!((l[0], l[n - 1]), (n - 1, 0));
    }

    #[test]
    fn critical_path_weighs_elapsed_time() {
        let ids = v(&["a", "b", "c", "d"]);
        let deps = vec![v(&[]), v(&["a"]), v(&["a"]), v(&["b", "c"])];
        // c took longer than b: the path goes through c.
        let layer = layers(&ids, &deps);
        let path = critical_path(&ids, &deps, &layer, &[Some(10), Some(5), Some(50), None]);
        assert_eq!(path, v(&["a", "c", "d"]));
        let path = critical_path(&ids, &deps, &layer, &[Some(10), Some(90), Some(50), None]);
        assert_eq!(path, v(&["a", "b", "d"]));
        assert!(critical_path(&[], &[], &[], &[]).is_empty());
    }

    #[test]
    fn attempts_take_the_lowest_free_slot() {
        let spans = [
            (0, Some(10)),
            (0, Some(5)),
            (5, Some(8)),
            (10, None),
            (11, Some(12)),
        ];
        assert_eq!(slots(&spans, 20), vec![0, 1, 1, 0, 1]);
    }

    #[test]
    fn a_story_whose_merge_started_is_merging_until_its_attempt_fails() {
        let mut seen = Summary::default();
        for data in [
            serde_json::json!({"event": "story_started", "story": "a", "attempt": 1}),
            serde_json::json!({"event": "merge_started", "story": "a", "attempt": 1,
                               "branch": "cascade/a", "target_branch": "main"}),
            // The same id in a mega run's feature is another story.
            serde_json::json!({"event": "story_started", "story": "a", "feature": "f"}),
            serde_json::json!({"event": "merge_started", "story": "b", "feature": "f"}),
            serde_json::json!({"event": "attempt_failed", "story": "b", "feature": "f"}),
        ] {
            seen.add(&serde_json::from_value(data).expect("an event head"));
        }
        let merging = |feature: Option<&str>, story: &str| {
            seen.stories(feature).expect("the feature's stories")[story].merging
        };
        assert!(merging(None, "a"));
        assert!(!merging(Some("f"), "a"));
        assert!(!merging(Some("f"), "b"));
        let running: StoryState =
            serde_json::from_value(serde_json::json!({"id": "a", "status": "running"}))
                .expect("a story state");
        assert_eq!(story_state(Some(&running), false, true), "merging");
        assert_eq!(story_state(Some(&running), false, false), "running");
    }
}
