//! `GET /api/run`: the run on show as one JSON document: its stories laid
//! out by batch with the critical path, the attempts per worker slot, and
//! the totals. Built from the run state (what is true now, the latest run
//! of the run database), the plan's [`Outline`] (titles,
//! dependencies) and a [`Summary`] of the run's records (what only the
//! events say: maximum attempts, skipped stories, cache hits, the merge
//! train), folded as the records arrive rather than read again for every
//! snapshot.
//!
//! Linear in the stories and attempts, and written without a tree of
//! values: the document ([`Snapshot`]) borrows the state's and the plan's
//! strings and is serialized straight into the response. Every story's
//! record and every dependency is found through an index (the state's and
//! the plan's [`cascade_plan::IdIndex`], once per story and per dependency),
//! batches come from one topological pass over positions, and worker slots
//! from a heap of free ones.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use cascade_engine::state::{AttemptRecord, RunState, StoryState, StoryStatus};
use cascade_engine::FailureKind;
use cascade_plan::{Dependencies, Outline};
use serde::Serialize;
use serde_json::Value;

use crate::hub::Status;
use crate::train::{self, Train};

/// Everything a snapshot is made of.
pub(crate) struct Input<'a> {
    pub state: Option<&'a RunState>,
    pub prd: Option<&'a Outline>,
    /// The plan's [`Shape`] when the caller keeps it (else it is made).
    pub shape: Option<&'a Shape>,
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

/// The state the page colours a story by, from its record's status and
/// error type (`None`: no record).
pub(crate) fn story_state(
    s: Option<(StoryStatus, Option<FailureKind>)>,
    skipped: bool,
    merging: bool,
) -> &'static str {
    let Some((status, error_type)) = s else {
        return "pending";
    };
    match status {
        StoryStatus::Pending => "pending",
        StoryStatus::Running if merging => "merging",
        StoryStatus::Running => "running",
        StoryStatus::Complete if skipped => "skipped",
        StoryStatus::Complete => "complete",
        StoryStatus::Failed if error_type == Some(FailureKind::Cancelled) => "cancelled",
        StoryStatus::Failed => "failed",
        StoryStatus::Blocked => "blocked",
    }
}

/// Each story's dependencies as positions in the plan (`deps(i)`), resolved
/// from ids once.
#[derive(Debug, Clone)]
pub(crate) struct Graph {
    /// Story `i`'s dependencies are `edges[starts[i]..starts[i + 1]]`.
    starts: Vec<usize>,
    edges: Vec<usize>,
}

impl Graph {
    /// From each story's dependency positions, in plan order.
    pub fn from_lists<L: IntoIterator<Item = usize>>(lists: impl IntoIterator<Item = L>) -> Graph {
        Graph::with_room(lists, 0)
    }

    /// [`Graph::from_lists`] with room made at once for `edges` edges (an
    /// upper bound): at 100,000 stories the lists grown by doubling were
    /// moved again and again, while the other threads of a dashboard just
    /// started read the run.
    fn with_room<L: IntoIterator<Item = usize>>(
        lists: impl IntoIterator<Item = L>,
        edges: usize,
    ) -> Graph {
        let lists = lists.into_iter();
        let mut starts = Vec::with_capacity(lists.size_hint().0 + 1);
        starts.push(0);
        let mut g = Graph {
            starts,
            edges: Vec::with_capacity(edges),
        };
        for l in lists {
            g.edges.extend(l);
            g.starts.push(g.edges.len());
        }
        g
    }

    fn len(&self) -> usize {
        self.starts.len() - 1
    }

    fn deps(&self, i: usize) -> &[usize] {
        &self.edges[self.starts[i]..self.starts[i + 1]]
    }

    /// The same edges the other way: story `j`'s "dependencies" here are
    /// the stories that depend on it, in plan order. Laid out in place
    /// ([`grouped`]) rather than as a list per story.
    fn reversed(&self) -> Graph {
        let n = self.len();
        let (starts, edges) = grouped(
            n,
            (0..n).flat_map(|i| self.deps(i).iter().map(move |&j| (j, i))),
        );
        Graph { starts, edges }
    }
}

/// `(key, item)` pairs grouped by key (each key below `keys`), each group
/// in the order given: group `k` is `items[starts[k]..starts[k + 1]]`. A
/// counting sort: one pass counts the groups' sizes, another fills them in
/// place, with no list per group.
fn grouped<P>(keys: usize, pairs: P) -> (Vec<usize>, Vec<usize>)
where
    P: Iterator<Item = (usize, usize)> + Clone,
{
    let mut starts = vec![0; keys + 1];
    for (k, _) in pairs.clone() {
        starts[k + 1] += 1;
    }
    for k in 0..keys {
        starts[k + 1] += starts[k];
    }
    let mut next = starts.clone();
    let mut items = vec![0; starts[keys]];
    for (k, item) in pairs {
        items[next[k]] = item;
        next[k] += 1;
    }
    (starts, items)
}

/// What a snapshot takes from the plan alone: each story's dependencies
/// found in the plan (through its index, itself left out) and its batch.
/// The dashboard keeps it with the plan it read (`api::RunFiles`) rather
/// than making it again for every snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    graph: Graph,
    layer: Vec<usize>,
    /// The stories by batch, in plan order within a batch: batch `b` is
    /// `by_layer[batch_starts[b]..batch_starts[b + 1]]` (the order the
    /// critical path is weighed in, and the batches as listed).
    by_layer: Vec<usize>,
    batch_starts: Vec<usize>,
}

impl Shape {
    pub fn of(p: &Outline) -> Shape {
        let edges = p.stories().map(|s| s.dependencies.len()).sum();
        let graph = p.with_positions(|position| {
            let lists = p.stories().enumerate().map(|(i, s)| {
                s.dependencies
                    .iter()
                    .filter_map(position)
                    .filter(move |&j| j != i)
            });
            Graph::with_room(lists, edges)
        });
        Shape::from_graph(graph)
    }

    fn from_graph(graph: Graph) -> Shape {
        let layer = layers(&graph);
        // The stories by batch (plan order within one), made once per plan
        // rather than sorted again for every snapshot.
        let nb = layer.iter().copied().max().map_or(0, |m| m + 1);
        let (batch_starts, by_layer) = grouped(nb, layer.iter().copied().zip(0..));
        Shape {
            graph,
            layer,
            by_layer,
            batch_starts,
        }
    }

    /// The stories of each batch, in plan order.
    fn batches(&self) -> impl Iterator<Item = &[usize]> + '_ {
        self.batch_starts
            .windows(2)
            .map(|w| &self.by_layer[w[0]..w[1]])
    }
}

/// The stories a snapshot shows: the plan's, in file order (else the
/// state's, without titles or dependencies), borrowed. A story's title and
/// dependencies are read from the outline as the story is written.
struct Plan<'a> {
    ids: Vec<&'a str>,
    outline: Option<&'a Outline>,
    shape: Cow<'a, Shape>,
}

impl<'a> Plan<'a> {
    fn of(
        prd: Option<&'a Outline>,
        shape: Option<&'a Shape>,
        state: Option<&'a RunState>,
    ) -> Plan<'a> {
        match prd {
            Some(p) => Plan {
                ids: p.stories().map(|s| s.id).collect(),
                outline: Some(p),
                shape: shape.map_or_else(|| Cow::Owned(Shape::of(p)), Cow::Borrowed),
            },
            None => {
                let ids: Vec<&str> = state
                    .map(|s| s.stories.iter().map(|x| x.id.as_str()).collect())
                    .unwrap_or_default();
                Plan {
                    outline: None,
                    shape: Cow::Owned(Shape::from_graph(Graph::from_lists(
                        ids.iter().map(|_| None),
                    ))),
                    ids,
                }
            }
        }
    }

    /// Story `i`'s title and dependencies (a story of the state alone: its
    /// id and none).
    fn story(&self, i: usize) -> (&'a str, Dependencies<'a>) {
        match self.outline.and_then(|p| p.story(i)) {
            Some(s) => (s.title, s.dependencies),
            None => (self.ids[i], Dependencies::default()),
        }
    }
}

/// Batch (0-based) of every story over the whole plan (complete ones
/// included, so a finished run still draws as it ran): 0 without
/// dependencies, else one more than the deepest dependency. One pass in
/// topological order (Kahn); the stories of a cycle (never in a validated
/// plan) get batch 0.
pub(crate) fn layers(graph: &Graph) -> Vec<usize> {
    let n = graph.len();
    let dependents = graph.reversed();
    let mut waiting: Vec<usize> = (0..n).map(|i| graph.deps(i).len()).collect();
    let mut layer: Vec<usize> = vec![0; n];
    let mut ready: Vec<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    while let Some(j) = ready.pop() {
        for &i in dependents.deps(j) {
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

/// The heaviest dependency chain (positions from first to last), stories
/// weighing their elapsed time where known, the mean of the known ones
/// (or 1) where not.
pub(crate) fn critical_path(shape: &Shape, elapsed: &[Option<u64>]) -> Vec<usize> {
    let (graph, layer) = (&shape.graph, &shape.layer);
    let n = graph.len();
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
    let mut best: Vec<u64> = vec![0; n];
    let mut prev: Vec<Option<usize>> = vec![None; n];
    for &i in &shape.by_layer {
        let mut from = None;
        let mut base = 0;
        for &j in graph.deps(i) {
            if layer[j] < layer[i] && best[j] > base {
                base = best[j];
                from = Some(j);
            }
        }
        best[i] = base + weight[i];
        prev[i] = from;
    }
    let Some(mut at) = (0..n).max_by_key(|&i| (best[i], std::cmp::Reverse(i))) else {
        return Vec::new();
    };
    let mut path = vec![at];
    while let Some(p) = prev[at] {
        path.push(p);
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
    let mut slot: Vec<usize> = vec![0; spans.len()];
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
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Seen {
    pub max_attempts: Option<u64>,
    pub skipped: bool,
    /// In the merge queue's merge (or resolving its conflict) now.
    pub merging: bool,
    pub worker: Option<String>,
    /// Gate results served from the cache.
    pub cache_hits: u64,
}

/// The fields of an event record the views look at (the rest of it is
/// skipped when it is read), borrowed from the record's text: a run's
/// journal has hundreds of thousands of records, read at once when the
/// dashboard starts.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Head<'a> {
    #[serde(default, borrow)]
    pub event: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub story: Option<Cow<'a, str>>,
    /// A mega run's feature (story ids repeat across features).
    #[serde(default, borrow)]
    feature: Option<Cow<'a, str>>,
    #[serde(default)]
    max_attempts: Option<u64>,
    #[serde(default, borrow)]
    worker: Option<Cow<'a, str>>,
    #[serde(default)]
    cached: Option<bool>,
    #[serde(default)]
    pub ok: Option<bool>,
    #[serde(default, borrow)]
    pub action: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub run_id: Option<Cow<'a, str>>,
    /// `integration_*`: the stories gated together.
    #[serde(default)]
    members: Vec<String>,
    #[serde(default, borrow)]
    verdict: Option<Cow<'a, str>>,
    #[serde(default)]
    failed_gates: Vec<String>,
}

/// What the records say, per feature (`None`: a plain run's stories, or
/// engine events without a feature) and story.
pub(crate) type SeenStories = std::collections::HashMap<Option<String>, SeenMap>;

/// What the records say of the stories of one run (or feature), by id.
pub(crate) type SeenMap = std::collections::HashMap<Box<str>, Seen>;

/// What [`Summary::add`] does with an event, by its name.
enum Fold {
    Started,
    JobStarted,
    Skipped,
    Gate,
    Merging,
    NotMerging,
}

impl Fold {
    fn of(event: &str) -> Option<Fold> {
        Some(match event {
            "story_started" => Fold::Started,
            "job_started" => Fold::JobStarted,
            "story_skipped" => Fold::Skipped,
            "gate_finished" => Fold::Gate,
            "merge_started" | "merge_resolving" => Fold::Merging,
            "attempt_failed" | "retry_scheduled" => Fold::NotMerging,
            _ => return None,
        })
    }
}

/// What the run's event records say, feature by feature and story by
/// story, folded in as they arrive.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Summary {
    stories: SeenStories,
    cache_hits: u64,
    train: Train,
}

impl Summary {
    /// Takes in one event record.
    pub fn add(&mut self, head: &Head<'_>) {
        if let (Some(event), None) = (head.event.as_deref(), head.feature.as_deref()) {
            self.train.add(&train::Record {
                event,
                story: head.story.as_deref(),
                members: &head.members,
                verdict: head.verdict.as_deref(),
                failed_gates: &head.failed_gates,
            });
        }
        let (Some(story), Some(fold)) = (
            head.story.as_deref(),
            head.event.as_deref().and_then(Fold::of),
        ) else {
            return;
        };
        // A gate result not from the cache says nothing (a story seen with
        // nothing said reads as one not seen): no entry is made for it.
        if matches!(fold, Fold::Gate) && head.cached != Some(true) {
            return;
        }
        let feature = head.feature.as_deref().map(str::to_string);
        let e = self
            .stories
            .entry(feature)
            .or_default()
            .entry(story.into())
            .or_default();
        match fold {
            Fold::Started => {
                e.max_attempts = head.max_attempts;
                e.merging = false;
                e.worker = head.worker.as_deref().map(str::to_string);
            }
            // Fleet runs: the coordinator hears of the worker that took
            // the job (`story_started` is the worker's own event).
            Fold::JobStarted => {
                e.merging = false;
                e.worker = head.worker.as_deref().map(str::to_string);
            }
            Fold::Skipped => e.skipped = true,
            Fold::Gate if head.cached == Some(true) => {
                e.cache_hits += 1;
                self.cache_hits += 1;
            }
            Fold::Gate => {}
            Fold::Merging => e.merging = true,
            Fold::NotMerging => e.merging = false,
        }
    }

    /// What the records say about the stories of `feature` (`None`: a
    /// plain run's).
    pub fn stories(&self, feature: Option<&str>) -> Option<&SeenMap> {
        self.stories.get(&feature.map(str::to_string))
    }
}

/// The snapshot document (see the API section of docs/dashboard.md),
/// borrowing from the state and the plan: serialized straight to the
/// response, members in this order.
#[derive(Serialize)]
pub(crate) struct Snapshot<'a> {
    run_id: Option<&'a str>,
    status: Option<&'static str>,
    live: bool,
    paused: bool,
    last_event_id: u64,
    prd: Option<Cow<'a, str>>,
    target_branch: Option<&'a str>,
    schedule: Option<&'a Value>,
    parallel: Option<&'a Value>,
    started_at: Option<&'a str>,
    updated_at: Option<&'a str>,
    elapsed_ms: Option<i64>,
    stories: Stories<'a>,
    batches: Vec<Vec<&'a str>>,
    critical_path: Vec<&'a str>,
    attempts: Vec<AttemptView<'a>>,
    train: &'a Train,
    totals: Totals,
}

impl Snapshot<'_> {
    /// Writes the document into `w` as compact JSON.
    pub(crate) fn write_json(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer(w, self).map_err(std::io::Error::from)
    }
}

/// The stories of a snapshot, each one made as it is written: the document
/// never holds them all (at 100,000 stories their views would take 26 MB).
pub(crate) struct Stories<'a> {
    plan: Plan<'a>,
    /// Story `i`'s record in the state.
    states: Vec<Option<&'a StoryState>>,
    /// What the records say of the stories, looked up as each story is
    /// made.
    seen: Option<&'a SeenMap>,
    elapsed: Vec<Option<u64>>,
    run_start: Option<i64>,
}

impl<'a> Stories<'a> {
    pub fn len(&self) -> usize {
        self.plan.ids.len()
    }

    /// Story `i` as the document shows it.
    fn view(&self, i: usize) -> StoryView<'a> {
        let s = self.states[i];
        let seen = self.seen.and_then(|m| m.get(self.plan.ids[i]));
        let attempts = s.map_or(&[][..], |s| &s.attempts[..]);
        let sum = |f: fn(&AttemptRecord) -> Option<u64>| -> Option<u64> {
            attempts.iter().filter_map(f).reduce(|a, b| a + b)
        };
        // A story that made it keeps its last failure in the state;
        // the graph shows failures only where they stand.
        let stands = s.filter(|s| s.status != StoryStatus::Complete);
        let (title, depends_on) = self.plan.story(i);
        StoryView {
            id: self.plan.ids[i],
            title,
            batch: self.plan.shape.layer[i],
            depends_on,
            state: story_state(
                s.map(|s| (s.status, s.error_type)),
                seen.is_some_and(|x| x.skipped),
                seen.is_some_and(|x| x.merging),
            ),
            agent: s.and_then(|s| s.agent.as_deref()),
            attempt: attempts.last().map(|a| a.attempt),
            max_attempts: seen.and_then(|x| x.max_attempts),
            started_at_ms: attempts
                .first()
                .and_then(|a| Some(unix_ms(&a.started_at)? - self.run_start?)),
            elapsed_ms: self.elapsed[i],
            failure_kind: stands.and_then(|s| s.error_type).map(|k| k.as_str()),
            error: stands.and_then(|s| s.error.as_deref()),
            blocked_by: s.map_or(&[][..], |s| &s.blocked_by[..]),
            cost_usd: attempts
                .iter()
                .filter_map(|a| a.cost_usd)
                .reduce(|a, b| a + b),
            tokens_in: sum(|a| a.input_tokens),
            tokens_out: sum(|a| a.output_tokens),
            worker: seen.and_then(|x| x.worker.as_deref()),
        }
    }
}

impl Serialize for Stories<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq((0..self.len()).map(|i| self.view(i)))
    }
}

/// A story of the snapshot.
#[derive(Serialize)]
struct StoryView<'a> {
    id: &'a str,
    title: &'a str,
    batch: usize,
    depends_on: Dependencies<'a>,
    state: &'static str,
    agent: Option<&'a str>,
    attempt: Option<u32>,
    max_attempts: Option<u64>,
    started_at_ms: Option<i64>,
    elapsed_ms: Option<u64>,
    failure_kind: Option<&'static str>,
    error: Option<&'a str>,
    blocked_by: &'a [String],
    cost_usd: Option<f64>,
    tokens_in: Option<u64>,
    tokens_out: Option<u64>,
    worker: Option<&'a str>,
}

/// An attempt on the timeline.
#[derive(Serialize)]
struct AttemptView<'a> {
    story: &'a str,
    attempt: u32,
    agent: &'a str,
    phase: &'a str,
    start_ms: i64,
    end_ms: Option<i64>,
    outcome: &'a str,
    failure_kind: Option<&'static str>,
    slot: usize,
}

#[derive(Serialize, Default)]
struct Totals {
    tokens_in: u64,
    tokens_out: u64,
    cost_usd: f64,
    cost_estimated: bool,
    /// Finished attempts whose agent reported no spend: `cost_usd` leaves
    /// them out, and the page says "unknown" rather than a $0 it does not know.
    #[serde(skip_serializing_if = "is_zero")]
    unknown_spend: u64,
    /// Finished attempts whose agent reported no tokens at all: the page
    /// says "unknown" for them rather than counting them as 0 / 0.
    #[serde(skip_serializing_if = "is_zero")]
    unknown_tokens: u64,
    gate_cache_hits: u64,
    gate_cache_saved_ms: u64,
    merged: usize,
    failed: usize,
    blocked: usize,
    pending: usize,
    total: usize,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the attempts of the run add up to: the timeline, each story's
/// elapsed time, and the run's totals.
struct Timeline<'a> {
    rows: Vec<AttemptView<'a>>,
    elapsed: Vec<Option<u64>>,
    totals: Totals,
}

/// The run's attempts, story by story in plan order (`states[i]` is story
/// `i`'s record), each on the lowest worker slot free at its start.
fn timeline<'a>(
    input: &Input<'a>,
    states: &[Option<&'a StoryState>],
    seen: Option<&SeenMap>,
    run_start: Option<i64>,
) -> Timeline<'a> {
    let rel = |ms: Option<i64>| -> Option<i64> { Some(ms? - run_start?) };
    let now_rel = run_start.map_or(0, |r| input.now_ms - r);
    // Room made once (at 100,000 stories the rows grown by doubling were
    // copied again and again, on the thread the page waits for).
    let attempts = states.iter().flatten().map(|s| s.attempts.len()).sum();
    let mut spans = Vec::with_capacity(attempts);
    let mut rows = Vec::with_capacity(attempts);
    let mut elapsed: Vec<Option<u64>> = vec![None; states.len()];
    let mut totals = Totals::default();
    for (i, s) in states.iter().enumerate() {
        let Some(s) = s else { continue };
        // Only a story with cached gate results has time saved to read
        // (none when the run has none: no story is looked up).
        let hits = input.summary.cache_hits > 0
            && seen
                .and_then(|m| m.get(s.id.as_str()))
                .is_some_and(|x| x.cache_hits > 0);
        for a in &s.attempts {
            let Some(start) = rel(unix_ms(&a.started_at)) else {
                continue;
            };
            let end = rel(a.finished_at.as_deref().and_then(unix_ms)).or_else(|| {
                a.outcome
                    .as_ref()
                    .and(a.duration_ms)
                    .map(|d| start + d as i64)
            });
            let running = a.outcome.is_none() && s.status == StoryStatus::Running;
            let end = if running { None } else { end.or(Some(start)) };
            let took = end.unwrap_or(now_rel).saturating_sub(start).max(0) as u64;
            *elapsed[i].get_or_insert(0) += took;
            totals.tokens_in += a.input_tokens.unwrap_or(0);
            totals.tokens_out += a.output_tokens.unwrap_or(0);
            totals.cost_usd += a.cost_usd.unwrap_or(0.0);
            if a.cost_usd.is_none() && a.outcome.is_some() {
                totals.unknown_spend += 1;
            }
            if a.input_tokens.is_none() && a.output_tokens.is_none() && a.outcome.is_some() {
                totals.unknown_tokens += 1;
            }
            totals.cost_estimated |= a.cost_estimated == Some(true);
            if hits {
                totals.gate_cache_saved_ms +=
                    (input.gates)(&s.id, a.attempt).map_or(0, |g| saved_ms(&g));
            }
            spans.push((start, end));
            rows.push(AttemptView {
                story: &s.id,
                attempt: a.attempt,
                agent: &a.agent,
                phase: &a.phase,
                start_ms: start,
                end_ms: end,
                outcome: if running {
                    "running"
                } else {
                    match a.outcome.as_deref() {
                        Some("passed") => "ok",
                        Some(o) => o,
                        None => "interrupted",
                    }
                },
                failure_kind: a.error_type.map(|k| k.as_str()),
                slot: 0,
            });
        }
    }
    for (row, slot) in rows.iter_mut().zip(slots(&spans, now_rel)) {
        row.slot = slot;
    }
    Timeline {
        rows,
        elapsed,
        totals,
    }
}

/// The original run time of an attempt's gates that were served from the
/// cache, from its gate results.
fn saved_ms(results: &Value) -> u64 {
    results
        .get("gates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|g| g.get("cached") == Some(&Value::Bool(true)))
        .map(|g| {
            g.get("original_duration_ms")
                .and_then(Value::as_u64)
                .unwrap_or(0)
        })
        .sum()
}

/// Each story's record in the state: where the state lists the plan's
/// stories in its order (as a run writes them), the one at the same
/// position; else the one its index finds.
fn records<'a>(ids: &[&str], state: Option<&'a RunState>) -> Vec<Option<&'a StoryState>> {
    let Some(st) = state else {
        return vec![None; ids.len()];
    };
    ids.iter()
        .enumerate()
        .map(|(i, id)| match st.stories.get(i) {
            Some(s) if s.id == *id => Some(s),
            _ => st.story(id),
        })
        .collect()
}

/// The snapshot of the run (see [`Snapshot`]).
pub(crate) fn build<'a>(input: &Input<'a>) -> Snapshot<'a> {
    let st = input.state;
    let run_start = st.and_then(|s| unix_ms(&s.started_at));
    let plan = Plan::of(input.prd, input.shape, st);
    let states = records(&plan.ids, st);
    let seen = input.summary.stories(None);
    let Timeline {
        rows,
        elapsed,
        mut totals,
    } = timeline(input, &states, seen, run_start);

    let batches: Vec<Vec<&str>> = plan
        .shape
        .batches()
        .map(|b| b.iter().map(|&i| plan.ids[i]).collect())
        .collect();
    let counts = st.map(|s| s.counts()).unwrap_or_default();
    totals.gate_cache_hits = input.summary.cache_hits;
    totals.merged = counts.complete;
    totals.failed = counts.failed;
    totals.blocked = counts.blocked;
    totals.pending = counts.pending;
    totals.total = plan.ids.len();
    let flags = st.and_then(|s| s.options.as_ref());
    let status = input.status;
    Snapshot {
        run_id: st.map(|s| s.run_id.as_str()).or(status.run_id.as_deref()),
        status: st.map(|s| s.status.as_str()),
        live: status.live,
        paused: status.paused,
        last_event_id: status.last_event_id,
        prd: st
            .map(|s| Cow::Borrowed(s.prd.as_str()))
            .or_else(|| input.prd_path.map(|p| Cow::Owned(p.display().to_string()))),
        target_branch: st.map(|s| s.target_branch.as_str()),
        schedule: flags.and_then(|f| f.get("schedule")),
        parallel: flags.and_then(|f| f.get("parallel")),
        started_at: st.map(|s| s.started_at.as_str()),
        updated_at: st.map(|s| s.updated_at.as_str()),
        elapsed_ms: run_start.map(|r| {
            if status.live {
                input.now_ms - r
            } else {
                st.and_then(|s| unix_ms(&s.updated_at))
                    .unwrap_or(input.now_ms)
                    - r
            }
        }),
        critical_path: critical_path(&plan.shape, &elapsed)
            .into_iter()
            .map(|i| plan.ids[i])
            .collect(),
        batches,
        stories: Stories {
            plan,
            states,
            seen,
            elapsed,
            run_start,
        },
        attempts: rows,
        train: &input.summary.train,
        totals,
    }
}

/// The PRD of the run: the one the state names (relative to where the run
/// was started), else `fallback` (`./prd.json` where `cascade ui` runs).
pub(crate) fn prd_path(state: Option<&RunState>, fallback: &Path) -> PathBuf {
    prd_named(
        state.map(|s| (s.prd.as_str(), s.project_root.as_str())),
        fallback,
    )
}

/// [`prd_path`] from what a state names: its `prd` and `project_root`.
pub(crate) fn prd_named(named: Option<(&str, &str)>, fallback: &Path) -> PathBuf {
    if let Some((prd, root)) = named.filter(|(prd, _)| !prd.is_empty()) {
        let p = PathBuf::from(prd);
        return if p.is_absolute() {
            p
        } else {
            Path::new(root).join(p)
        };
    }
    fallback.to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(deps: &[&[usize]]) -> Graph {
        Graph::from_lists(deps.iter().map(|d| d.iter().copied()))
    }

    #[test]
    fn a_reversed_graph_lists_each_storys_dependents_in_plan_order() {
        let g = graph(&[&[], &[0], &[0], &[1, 2, 0], &[]]);
        let r = g.reversed();
        let lists: Vec<&[usize]> = (0..r.len()).map(|j| r.deps(j)).collect();
        assert_eq!(lists, vec![&[1, 2, 3][..], &[3], &[3], &[], &[]]);
    }

    #[test]
    fn layers_cover_complete_stories_too() {
        assert_eq!(
            layers(&graph(&[&[], &[0], &[0], &[1, 2]])),
            vec![0, 1, 1, 2]
        );
        // A cycle is batch 0.
        assert_eq!(layers(&graph(&[&[1], &[0], &[0]])), vec![0, 0, 0]);
        // A long chain in reverse file order (the old fixpoint's worst case).
        let n = 2000;
        let chain = Graph::from_lists((0..n).map(|i| (i + 1 < n).then_some(i + 1)));
        let l = layers(&chain);
        assert_eq!((l[0], l[n - 1]), (n - 1, 0));
    }

    #[test]
    fn critical_path_weighs_elapsed_time() {
        let g = graph(&[&[], &[0], &[0], &[1, 2]]);
        // c took longer than b: the path goes through c.
        let shape = Shape::from_graph(g);
        let path = critical_path(&shape, &[Some(10), Some(5), Some(50), None]);
        assert_eq!(path, vec![0, 2, 3]);
        let path = critical_path(&shape, &[Some(10), Some(90), Some(50), None]);
        assert_eq!(path, vec![0, 1, 3]);
        assert!(critical_path(&Shape::from_graph(graph(&[])), &[]).is_empty());
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
            let data = data.to_string();
            seen.add(&serde_json::from_str(&data).expect("an event head"));
        }
        let merging = |feature: Option<&str>, story: &str| {
            seen.stories(feature)
                .and_then(|m| m.get(story))
                .expect("the story's entry")
                .merging
        };
        assert!(merging(None, "a"));
        assert!(!merging(Some("f"), "a"));
        assert!(!merging(Some("f"), "b"));
        let running = Some((StoryStatus::Running, None));
        assert_eq!(story_state(running, false, true), "merging");
        assert_eq!(story_state(running, false, false), "running");
    }

    /// A run with a story in every state the page draws, and a plan with
    /// unknown and self dependencies and a story the run never saw.
    pub(super) fn varied_run() -> (Outline, RunState, Summary) {
        let story = |id: &str, deps: &[&str]| {
            serde_json::json!({"id": id, "title": format!("Title {id}"), "description": "d",
                "priority": "medium", "dependencies": deps, "status": "pending",
                "acceptance_criteria": ["it works"]})
        };
        let prd = serde_json::json!({"metadata": {}, "goal": "g", "objectives": [], "stories": [
            story("a", &[]), story("b", &["a", "nope"]), story("c", &["a", "c"]),
            story("d", &["b", "c"]), story("e", &[]), story("f", &["e"]),
            story("g", &["d"]), story("h", &["g", "f"]), story("i", &[]), story("j", &["i"]),
        ]});
        let prd = Outline::from_json(prd.to_string().as_bytes(), Path::new("prd.json"))
            .expect("a valid plan");
        let attempt = |n: u32, start: &str, end: Option<&str>, outcome: Option<&str>| {
            serde_json::json!({"attempt": n, "agent": "claude", "phase": if n == 1 { "implementation" } else { "retry" },
                "started_at": start, "finished_at": end, "outcome": outcome, "duration_ms": 900,
                "input_tokens": 100 * n, "output_tokens": 10 * n, "cost_usd": 0.25 * n as f64})
        };
        let mut failed = attempt(
            1,
            "2026-01-01T00:00:05Z",
            Some("2026-01-01T00:00:09Z"),
            Some("failed"),
        );
        failed["error_type"] = serde_json::json!("quality_gate");
        let mut estimated = attempt(
            2,
            "2026-01-01T00:00:10Z",
            Some("2026-01-01T00:00:30.5Z"),
            Some("passed"),
        );
        estimated["cost_estimated"] = serde_json::json!(true);
        let mut no_cost = attempt(1, "2026-01-01T00:00:02Z", None, Some("passed"));
        no_cost["cost_usd"] = serde_json::Value::Null;
        no_cost["input_tokens"] = serde_json::Value::Null;
        let state = serde_json::json!({
            "schema_version": 1, "run_id": "run-1", "prd": "prd.json", "target_branch": "main",
            "project_root": "/tmp/p", "status": "running", "pid": 7,
            "started_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:01:00Z",
            "options": {"schedule": "eager", "parallel": 3},
            "stories": [
                {"id": "a", "status": "complete", "agent": "claude",
                 "attempts": [failed, estimated], "error_type": "quality_gate", "error": "old"},
                {"id": "b", "status": "running", "agent": "claude",
                 "attempts": [attempt(1, "2026-01-01T00:00:31Z", None, None)]},
                {"id": "c", "status": "running", "agent": "codex",
                 "attempts": [attempt(1, "2026-01-01T00:00:31Z", Some("2026-01-01T00:00:40Z"), Some("passed"))]},
                {"id": "d", "status": "failed", "agent": "claude", "error_type": "cancelled",
                 "error": "cancelled by ui",
                 "attempts": [attempt(1, "2026-01-01T00:00:41Z", Some("2026-01-01T00:00:42Z"), Some("cancelled"))]},
                {"id": "e", "status": "complete", "agent": "claude", "attempts": [no_cost]},
                {"id": "f", "status": "failed", "agent": "claude", "error_type": "timeout",
                 "error": "timed out", "attempts": [attempt(1, "2026-01-01T00:00:03Z", None, Some("timeout"))]},
                {"id": "g", "status": "blocked", "blocked_by": ["d"], "attempts": []},
                {"id": "h", "status": "pending", "attempts": []},
                {"id": "i", "status": "complete", "attempts": []},
                {"id": "x", "status": "complete", "attempts": [attempt(1, "bad time", None, None)]},
            ],
        });
        let state: RunState = serde_json::from_value(state).expect("a run state");
        let mut summary = Summary::default();
        for data in [
            serde_json::json!({"event": "story_started", "story": "a", "max_attempts": 3, "worker": "w1"}),
            serde_json::json!({"event": "gate_finished", "story": "a", "cached": true}),
            serde_json::json!({"event": "gate_finished", "story": "a", "cached": false}),
            serde_json::json!({"event": "story_started", "story": "b", "max_attempts": 2}),
            serde_json::json!({"event": "job_started", "story": "c", "worker": "w2"}),
            serde_json::json!({"event": "merge_started", "story": "c"}),
            serde_json::json!({"event": "story_skipped", "story": "i"}),
            serde_json::json!({"event": "story_started", "story": "a", "feature": "other"}),
            // The merge train: e landed; c, gated on top of it, failed and
            // is gated again without it.
            serde_json::json!({"event": "integration_started", "story": "e", "members": ["e"]}),
            serde_json::json!({"event": "integration_started", "story": "c", "members": ["e", "c"]}),
            serde_json::json!({"event": "integration_finished", "story": "c", "members": ["e", "c"],
                               "verdict": "failed", "failed_gates": ["tests"]}),
            serde_json::json!({"event": "integration_finished", "story": "e", "members": ["e"],
                               "verdict": "passed", "failed_gates": []}),
            serde_json::json!({"event": "story_merged", "story": "e"}),
            serde_json::json!({"event": "integration_started", "story": "c", "members": ["c"]}),
            // A feature's merge is the mega view's.
            serde_json::json!({"event": "integration_started", "story": "a", "feature": "other",
                               "members": ["a"]}),
        ] {
            let data = data.to_string();
            summary.add(&serde_json::from_str(&data).expect("an event head"));
        }
        (prd, state, summary)
    }

    /// The document as the page reads it, byte for byte: a run with a
    /// story in every state, the same with no plan, and no run at all.
    #[test]
    fn the_snapshot_document_keeps_its_shape() {
        let (prd, state, summary) = varied_run();
        let status = Status {
            run_id: Some("run-1".into()),
            live: true,
            paused: false,
            last_event_id: 42,
        };
        let gates = |story: &str, attempt: u32| {
            (story == "a" && attempt == 2).then(|| {
                serde_json::json!({"gates": [
                    {"name": "tests", "cached": true, "original_duration_ms": 1500},
                    {"name": "lint", "cached": false, "original_duration_ms": 99},
                ]})
            })
        };
        let input = |state, prd, status| Input {
            state,
            prd,
            shape: None,
            prd_path: Some(Path::new("/tmp/p/prd.json")),
            summary: &summary,
            status,
            now_ms: unix_ms("2026-01-01T00:01:10Z").expect("a time"),
            gates: &gates,
        };
        let idle = Status {
            run_id: None,
            live: false,
            paused: false,
            last_event_id: 0,
        };
        let docs = [
            build(&input(Some(&state), Some(&prd), &status)),
            build(&input(Some(&state), None, &idle)),
            build(&input(None, Some(&prd), &idle)),
        ];
        // What the dashboard sends.
        let text: Vec<String> = docs.iter().map(written).collect();
        let golden = include_str!("snapshot_golden.txt");
        assert_eq!(text.join("\n") + "\n", golden);
    }

    /// No run is live (no gate results, no plan path, the epoch as now).
    static IDLE: Status = Status {
        run_id: None,
        live: false,
        paused: false,
        last_event_id: 0,
    };

    /// The snapshot's input of `state` and `prd` with nothing live ([`IDLE`]).
    fn idle_input<'a>(
        state: Option<&'a RunState>,
        prd: Option<&'a Outline>,
        summary: &'a Summary,
    ) -> Input<'a> {
        Input {
            state,
            prd,
            shape: None,
            prd_path: None,
            summary,
            status: &IDLE,
            now_ms: 0,
            gates: &no_gates,
        }
    }

    fn no_gates(_: &str, _: u32) -> Option<Value> {
        None
    }

    /// An attempt whose agent reported neither tokens nor cost is counted
    /// as unknown in both (the page shows "unknown", not 0 / 0 or $0);
    /// one that reported output tokens only is not unknown in tokens.
    #[test]
    fn attempts_that_reported_nothing_are_unknown_in_tokens_and_spend() {
        let (prd, state, summary) = varied_run();
        let totals = |state: &RunState| {
            let doc = build(&idle_input(Some(state), Some(&prd), &summary));
            let v: serde_json::Value =
                serde_json::from_str(&written(&doc)).expect("the document is JSON");
            v["totals"].clone()
        };
        // Story e's attempt reported output tokens but no cost.
        let before = totals(&state);
        assert_eq!(before["unknown_spend"], 1, "{before}");
        assert_eq!(before.get("unknown_tokens"), None, "{before}");
        let mut silent = state.clone();
        let e = silent.position("e").expect("story e");
        silent.stories[e].attempts[0].output_tokens = None;
        let after = totals(&silent);
        assert_eq!(after["unknown_tokens"], 1, "{after}");
        assert_eq!(
            after["tokens_out"],
            before["tokens_out"].as_u64().unwrap_or(0) - 10
        );
    }

    /// The document as `GET /api/run` writes it.
    fn written(doc: &Snapshot<'_>) -> String {
        let mut out = Vec::new();
        doc.write_json(&mut out).expect("written");
        String::from_utf8(out).expect("UTF-8")
    }

    /// A fresh run's state of these stories.
    fn glance(ids: impl Iterator<Item = String>) -> RunState {
        RunState::new(
            "run-1".into(),
            "prd.json".into(),
            "main".into(),
            "/tmp/p".into(),
            ids,
        )
    }

    /// No story is searched for along a list: each story's record is found
    /// through the state's index and each dependency through the plan's,
    /// one lookup apiece, each index built once.
    #[test]
    fn the_snapshot_finds_stories_and_dependencies_through_indexes() {
        use cascade_plan::synthetic::{prd_json, Shape};
        let n = 3000;
        let prd = Outline::from_json(prd_json(&Shape::new(n)).as_bytes(), Path::new("prd.json"))
            .expect("a generated plan");
        let edges: u64 = prd.stories().map(|s| s.dependencies.len() as u64).sum();
        assert!(edges > n as u64, "{edges} dependencies");
        // The state lists the stories in another order than the plan.
        let state = glance(prd.stories().rev().map(|s| s.id.to_string()));
        let (plan_before, state_before) = (prd.index_stats(), state.index_stats());
        let summary = Summary::default();
        let snapshot = build(&idle_input(Some(&state), Some(&prd), &summary));
        assert_eq!(snapshot.stories.len(), n);
        assert!(snapshot.batches.len() > 1);
        // Long enough to be written in many pieces: the same bytes.
        assert_eq!(
            written(&snapshot),
            serde_json::to_string(&snapshot).expect("serializable")
        );
        let (plan, run) = (prd.index_stats(), state.index_stats());
        assert_eq!(plan.lookups - plan_before.lookups, edges);
        assert!(plan.builds - plan_before.builds <= 1, "{plan:?}");
        assert_eq!(run.lookups - state_before.lookups, n as u64);
        assert!(run.builds - state_before.builds <= 1, "{run:?}");
        // A state in the plan's order (as a run writes it) is read by
        // position, without a lookup.
        let in_order = glance(prd.stories().map(|s| s.id.to_string()));
        let before = in_order.index_stats();
        assert_eq!(
            records(&Plan::of(Some(&prd), None, None).ids, Some(&in_order)).len(),
            n
        );
        assert_eq!(in_order.index_stats(), before);
    }
}
