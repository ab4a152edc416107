//! `GET /api/run`: the run on show as one JSON document: its stories laid
//! out by batch with the critical path, the attempts per worker slot, and
//! the totals. Built from the state file (what is true now), the plan
//! (titles, dependencies) and the run's records (what only the events
//! say: maximum attempts, skipped stories, cache hits).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cascade_engine::state::{RunState, StoryState, StoryStatus};
use cascade_plan::Prd;
use serde_json::{json, Value};

use crate::hub::Status;
use crate::live::Record;

/// Everything a snapshot is made of.
pub(crate) struct Input<'a> {
    pub state: Option<&'a RunState>,
    pub prd: Option<&'a Prd>,
    pub prd_path: Option<&'a Path>,
    pub records: &'a [Arc<Record>],
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
fn story_state(s: Option<&StoryState>, skipped: bool, merging: bool) -> &'static str {
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
/// dependencies, else one more than the deepest dependency.
pub(crate) fn layers(ids: &[String], deps: &[Vec<String>]) -> Vec<usize> {
    let index: HashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_str(), i))
        .collect();
    let mut layer: Vec<Option<usize>> = vec![None; ids.len()];
    // Plans are validated acyclic; a bad one still ends (depth <= n).
    for _ in 0..=ids.len() {
        let mut changed = false;
        for i in 0..ids.len() {
            let mut l = 0;
            let mut ready = true;
            for d in &deps[i] {
                match index.get(d.as_str()) {
                    Some(&j) if j != i => match layer[j] {
                        Some(lj) => l = l.max(lj + 1),
                        None => ready = false,
                    },
                    _ => {}
                }
            }
            if ready && layer[i] != Some(l) {
                layer[i] = Some(l);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    layer.into_iter().map(|l| l.unwrap_or(0)).collect()
}

/// The heaviest dependency chain (ids from first to last), stories
/// weighing their elapsed time where known, the mean of the known ones
/// (or 1) where not.
pub(crate) fn critical_path(
    ids: &[String],
    deps: &[Vec<String>],
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
    let layer = layers(ids, deps);
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
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| (spans[i].0, i));
    let mut busy_until: Vec<i64> = Vec::new();
    let mut slot = vec![0; spans.len()];
    for i in order {
        let (start, end) = spans[i];
        let end = end.unwrap_or(now.max(start) + 1);
        let free = busy_until.iter().position(|&u| u <= start);
        let s = match free {
            Some(s) => s,
            None => {
                busy_until.push(0);
                busy_until.len() - 1
            }
        };
        busy_until[s] = end;
        slot[i] = s;
    }
    slot
}

/// What the records say per story.
#[derive(Default)]
struct Seen {
    max_attempts: Option<u64>,
    skipped: bool,
    /// Gates passed in the current attempt: waiting for or in the merge queue.
    merging: bool,
    worker: Option<String>,
}

fn seen(records: &[Arc<Record>]) -> (HashMap<String, Seen>, u64) {
    let mut out: HashMap<String, Seen> = HashMap::new();
    let mut cache_hits = 0;
    for r in records.iter().filter(|r| r.kind == "event") {
        let d = &r.data;
        let Some(story) = d.get("story").and_then(|s| s.as_str()) else {
            continue;
        };
        let e = out.entry(story.to_string()).or_default();
        match d.get("event").and_then(|e| e.as_str()) {
            Some("story_started") => {
                e.max_attempts = d.get("max_attempts").and_then(Value::as_u64);
                e.merging = false;
                e.worker = d.get("worker").and_then(|w| w.as_str()).map(str::to_string);
            }
            // Fleet runs: the coordinator hears of the worker that took
            // the job (`story_started` is the worker's own event).
            Some("job_started") => {
                e.merging = false;
                e.worker = d.get("worker").and_then(|w| w.as_str()).map(str::to_string);
            }
            Some("story_skipped") => e.skipped = true,
            Some("review_finished") | Some("verification_finished") => {}
            Some("gate_finished") if d.get("cached") == Some(&Value::Bool(true)) => cache_hits += 1,
            Some("merge_resolving") => e.merging = true,
            Some("attempt_failed") | Some("retry_scheduled") => e.merging = false,
            _ => {}
        }
    }
    (out, cache_hits)
}

/// The snapshot document (see the API section of docs/dashboard.md).
pub(crate) fn build(input: &Input<'_>) -> Value {
    let st = input.state;
    let run_start = st.and_then(|s| unix_ms(&s.started_at));
    let rel = |t: &str| -> Option<i64> { Some(unix_ms(t)? - run_start?) };
    let (seen, cache_hits) = seen(input.records);

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
            if let Some(g) = (input.gates)(&s.id, a.attempt) {
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
            let seen = seen.get(id);
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
        "critical_path": critical_path(&ids, &deps, &elapsed),
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
        // Unknown and self dependencies are ignored.
        assert_eq!(layers(&v(&["x"]), &[v(&["x", "nope"])]), vec![0]);
    }

    #[test]
    fn critical_path_weighs_elapsed_time() {
        let ids = v(&["a", "b", "c", "d"]);
        let deps = vec![v(&[]), v(&["a"]), v(&["a"]), v(&["b", "c"])];
        // c took longer than b: the path goes through c.
        let path = critical_path(&ids, &deps, &[Some(10), Some(5), Some(50), None]);
        assert_eq!(path, v(&["a", "c", "d"]));
        let path = critical_path(&ids, &deps, &[Some(10), Some(90), Some(50), None]);
        assert_eq!(path, v(&["a", "b", "d"]));
        assert!(critical_path(&[], &[], &[]).is_empty());
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
}
