//! `DepGraph`: the dependency graph of a plan, built without judging it.
//!
//! Nodes are the stories (or features) by file position, so position `i` is
//! `prd.stories[i]`. Edges are stored twice as flat compressed rows (CSR):
//! `dependencies(i)` in the order the file lists them (resolved, deduplicated)
//! and `dependents(i)` in file order. A Vec indexed by position replaces
//! per-node maps, so building is one hash per id plus one per dependency, and
//! everything after is array walks.
//!
//! Problems found on the way (duplicate ids, unknown dependencies,
//! self-dependencies) are recorded rather than rejected, so that the same graph
//! serves validation and `cascade deps --no-check` on broken files. Only
//! [`crate::validate_prd`] decides what is an error.

use std::collections::HashMap;

use crate::model::{numeric_weight, Feature, MegaPlan, Prd, Priority, Story};

/// Marks "no value" in per-node `u32` arrays.
pub(crate) const NONE: u32 = u32::MAX;

/// What a plan's items are called, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Story,
    Feature,
}

impl Kind {
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Kind::Story => "story",
            Kind::Feature => "feature",
        }
    }

    pub(crate) fn list(self) -> &'static str {
        match self {
            Kind::Story => "stories",
            Kind::Feature => "features",
        }
    }
}

/// The view of a story or feature the graph needs.
pub(crate) trait Item {
    type Dep: AsRef<str>;
    fn id(&self) -> &str;
    fn alias(&self) -> Option<&str>;
    fn deps(&self) -> &[Self::Dep];
    fn priority(&self) -> Priority;
    fn complete(&self) -> bool;
    fn weight(&self) -> Option<u64>;
}

impl Item for Story {
    type Dep = String;
    fn id(&self) -> &str {
        trim(&self.id)
    }
    fn alias(&self) -> Option<&str> {
        None
    }
    fn deps(&self) -> &[String] {
        &self.dependencies
    }
    fn priority(&self) -> Priority {
        self.priority
    }
    fn complete(&self) -> bool {
        self.is_complete()
    }
    fn weight(&self) -> Option<u64> {
        numeric_weight(self.context_estimate.as_ref())
    }
}

impl Item for Feature {
    type Dep = String;
    fn id(&self) -> &str {
        trim(&self.id)
    }
    fn alias(&self) -> Option<&str> {
        Some(self.name.trim()).filter(|n| !n.is_empty())
    }
    fn deps(&self) -> &[String] {
        &self.dependencies
    }
    fn priority(&self) -> Priority {
        self.priority
    }
    fn complete(&self) -> bool {
        self.is_complete()
    }
    fn weight(&self) -> Option<u64> {
        None
    }
}

/// The dependency graph of a plan, with the problems met while building it.
#[derive(Debug, Clone)]
pub struct DepGraph {
    pub(crate) kind: Kind,
    /// Ids as written (trimmed), by position.
    ids: Vec<Box<str>>,
    /// The first position of each non-empty id.
    by_id: HashMap<Box<str>, u32>,
    pub(crate) priority: Vec<Priority>,
    pub(crate) complete: Vec<bool>,
    /// Critical-path weight per node (1 unless a numeric estimate says otherwise).
    pub(crate) weight: Vec<u64>,
    dep_off: Vec<u32>,
    dep_list: Vec<u32>,
    rdep_off: Vec<u32>,
    rdep_list: Vec<u32>,
    /// `(position, dependency as written)` for dependencies that name nothing.
    pub(crate) unknown: Vec<(u32, String)>,
    /// Positions that list themselves as a dependency.
    pub(crate) self_deps: Vec<u32>,
    /// `(first position, later position)` for ids used twice.
    pub(crate) duplicates: Vec<(u32, u32)>,
}

impl DepGraph {
    /// The graph of a PRD's stories (weights from numeric `context_estimate`).
    pub fn from_prd(prd: &Prd) -> DepGraph {
        build(Kind::Story, &prd.stories)
    }

    /// The graph of a mega-plan's features (a dependency may name a feature by
    /// id or, when no id matches, by name).
    pub fn from_mega(mega: &MegaPlan) -> DepGraph {
        build(Kind::Feature, &mega.features)
    }

    /// Number of nodes (stories or features).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the plan has no stories.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The id at `pos`, as written (trimmed; may be empty or invalid).
    pub fn id(&self, pos: usize) -> &str {
        &self.ids[pos]
    }

    /// The first position whose id is `id`.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.by_id.get(trim(id)).map(|&p| p as usize)
    }

    /// Positions of the nodes `pos` depends on, in the order the file lists them.
    pub fn dependencies(&self, pos: usize) -> &[u32] {
        &self.dep_list[self.dep_off[pos] as usize..self.dep_off[pos + 1] as usize]
    }

    /// Positions of the nodes that depend on `pos`, in file order.
    pub fn dependents(&self, pos: usize) -> &[u32] {
        &self.rdep_list[self.rdep_off[pos] as usize..self.rdep_off[pos + 1] as usize]
    }

    /// The priority at `pos`.
    pub fn priority(&self, pos: usize) -> Priority {
        self.priority[pos]
    }

    /// Whether the node at `pos` is already complete.
    pub fn is_complete(&self, pos: usize) -> bool {
        self.complete[pos]
    }

    /// The critical-path weight at `pos`.
    pub fn weight(&self, pos: usize) -> u64 {
        self.weight[pos]
    }

    /// Dependencies that name no story: `(position, name as written)`.
    pub fn unknown_dependencies(&self) -> impl Iterator<Item = (usize, &str)> {
        self.unknown.iter().map(|(p, d)| (*p as usize, d.as_str()))
    }

    /// Positions of nodes that depend on themselves.
    pub fn self_dependencies(&self) -> impl Iterator<Item = usize> + '_ {
        self.self_deps.iter().map(|p| *p as usize)
    }

    /// Number of resolved dependency edges.
    pub fn edge_count(&self) -> usize {
        self.dep_list.len()
    }

    /// Kahn layering over the nodes where `active[i]`; edges from inactive
    /// nodes count as satisfied. Returns the processing order (a topological
    /// order of the active acyclic part) and each node's layer (`NONE` for
    /// inactive nodes and for nodes on or behind a cycle).
    pub(crate) fn layer(&self, active: &[bool]) -> (Vec<u32>, Vec<u32>) {
        let n = self.len();
        let mut indeg = vec![0u32; n];
        let mut depth = vec![NONE; n];
        let mut order = Vec::with_capacity(n);
        for v in 0..n {
            if !active[v] {
                continue;
            }
            let d = self
                .dependencies(v)
                .iter()
                .filter(|&&u| active[u as usize])
                .count() as u32;
            indeg[v] = d;
            if d == 0 {
                depth[v] = 0;
                order.push(v as u32);
            }
        }
        let mut head = 0;
        while head < order.len() {
            let u = order[head] as usize;
            head += 1;
            let next = depth[u] + 1;
            for &w in self.dependents(u) {
                let w = w as usize;
                if !active[w] {
                    continue;
                }
                if depth[w] == NONE || depth[w] < next {
                    depth[w] = next;
                }
                indeg[w] -= 1;
                if indeg[w] == 0 {
                    order.push(w as u32);
                }
            }
        }
        // Nodes never released sit on or behind a cycle: no layer.
        if order.len() < active.iter().filter(|a| **a).count() {
            for v in 0..n {
                if indeg[v] > 0 {
                    depth[v] = NONE;
                }
            }
        }
        (order, depth)
    }

    /// For each node in `order` (a topological order of active nodes), the
    /// weight of the heaviest chain from it to a sink through active nodes.
    /// `weight_of` gives each node's weight. Other nodes get 0.
    pub(crate) fn longest_to_sink(
        &self,
        order: &[u32],
        active: &[bool],
        weight_of: impl Fn(usize) -> u64,
    ) -> Vec<u64> {
        let mut rem = vec![0u64; self.len()];
        for &u in order.iter().rev() {
            let u = u as usize;
            let best = self
                .dependents(u)
                .iter()
                .filter(|&&w| active[w as usize])
                .map(|&w| rem[w as usize])
                .max()
                .unwrap_or(0);
            rem[u] = weight_of(u).saturating_add(best);
        }
        rem
    }

    /// The heaviest chain through the nodes of `order`, dependency first.
    /// Ties go to the shallower start, then to file order.
    pub(crate) fn heaviest_chain(
        &self,
        order: &[u32],
        depth: &[u32],
        active: &[bool],
        rem: &[u64],
    ) -> Vec<u32> {
        let Some(&start) = order.iter().min_by_key(|&&v| {
            let v = v as usize;
            (std::cmp::Reverse(rem[v]), depth[v], v)
        }) else {
            return Vec::new();
        };
        let mut path = vec![start];
        let mut cur = start as usize;
        loop {
            let next = self
                .dependents(cur)
                .iter()
                .filter(|&&w| active[w as usize] && depth[w as usize] != NONE)
                .min_by_key(|&&w| (std::cmp::Reverse(rem[w as usize]), w));
            match next {
                Some(&w) => {
                    path.push(w);
                    cur = w as usize;
                }
                None => break,
            }
        }
        path
    }
}

pub(crate) fn build<T: Item>(kind: Kind, items: &[T]) -> DepGraph {
    let n = items.len();
    // One pass over the items for everything per node (items are large;
    // touching each once matters at 100,000 stories).
    let mut ids: Vec<Box<str>> = Vec::with_capacity(n);
    let mut priority = Vec::with_capacity(n);
    let mut complete = Vec::with_capacity(n);
    let mut weight = Vec::with_capacity(n);
    let mut edges = 0;
    for item in items {
        ids.push(item.id().into());
        priority.push(item.priority());
        complete.push(item.complete());
        weight.push(item.weight().unwrap_or(1));
        edges += item.deps().len();
    }
    let mut by_id: HashMap<Box<str>, u32> = HashMap::with_capacity(n);
    let mut duplicates = Vec::new();
    for (pos, id) in ids.iter().enumerate() {
        if id.is_empty() {
            continue;
        }
        match by_id.entry(id.clone()) {
            std::collections::hash_map::Entry::Occupied(first) => {
                duplicates.push((*first.get(), pos as u32))
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(pos as u32);
            }
        }
    }
    // Aliases (feature names) resolve only where no id has the same text.
    let mut aliases: HashMap<&str, u32> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(alias) = item.alias() {
            if !by_id.contains_key(alias) {
                aliases.entry(alias).or_insert(i as u32);
            }
        }
    }
    let resolve = |dep: &str| by_id.get(dep).or_else(|| aliases.get(dep)).copied();

    let mut dep_off = Vec::with_capacity(n + 1);
    let mut dep_list = Vec::with_capacity(edges);
    let mut unknown = Vec::new();
    let mut self_deps = Vec::new();
    // `seen[u] == v` means u is already a dependency of v (dedup in O(1)).
    let mut seen = vec![NONE; n];
    dep_off.push(0u32);
    for (v, item) in items.iter().enumerate() {
        let v32 = v as u32;
        for dep in item.deps() {
            let dep = trim(dep.as_ref());
            if dep.is_empty() {
                continue;
            }
            match resolve(dep) {
                Some(u) => {
                    if seen[u as usize] != v32 {
                        seen[u as usize] = v32;
                        if u == v32 {
                            self_deps.push(v32);
                        }
                        dep_list.push(u);
                    }
                }
                None => unknown.push((v32, dep.to_owned())),
            }
        }
        dep_off.push(dep_list.len() as u32);
    }

    // Reverse edges by counting sort: filling sources in file order leaves
    // every dependents list in file order.
    let mut rdep_off = vec![0u32; n + 1];
    for &u in &dep_list {
        rdep_off[u as usize + 1] += 1;
    }
    for i in 0..n {
        rdep_off[i + 1] += rdep_off[i];
    }
    let mut fill: Vec<u32> = rdep_off[..n].to_vec();
    let mut rdep_list = vec![0u32; dep_list.len()];
    for v in 0..n {
        for &u in &dep_list[dep_off[v] as usize..dep_off[v + 1] as usize] {
            rdep_list[fill[u as usize] as usize] = v as u32;
            fill[u as usize] += 1;
        }
    }

    DepGraph {
        kind,
        ids,
        by_id,
        priority,
        complete,
        weight,
        dep_off,
        dep_list,
        rdep_off,
        rdep_list,
        unknown,
        self_deps,
        duplicates,
    }
}

/// `str::trim` with a fast path for the usual case of nothing to trim.
#[inline]
pub(crate) fn trim(s: &str) -> &str {
    match (s.as_bytes().first(), s.as_bytes().last()) {
        (Some(&a), Some(&b)) if a > b' ' && a < 0x80 && b > b' ' && b < 0x80 => s,
        _ => s.trim(),
    }
}
