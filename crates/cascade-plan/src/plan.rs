//! `ValidPlan`: a plan that passed validation, ready to be scheduled.
//!
//! Only [`crate::validate_prd`] and [`crate::validate_mega`] make one, so
//! holding a `ValidPlan` means: ids are valid and unique, every dependency
//! names a story, and the graph is acyclic. Scheduling views are computed once
//! at construction, all linear in stories + edges:
//!
//! - batches: Kahn layers over the stories not yet complete (a dependency on a
//!   complete story counts as satisfied), each layer ordered high > medium >
//!   low, then by file position. A story's batch is the length of the longest
//!   chain of unfinished dependencies below it, so every story runs as early
//!   as possible.
//! - `remaining_path_len`: the heaviest chain of unfinished stories from a
//!   story to a sink (weights from numeric `context_estimate`, else 1; 0 for
//!   complete stories), the eager scheduler's "longest remaining critical
//!   path first" key.
//!
//! The structural [`Analysis`] (over all stories, complete or not) is
//! computed on first use.

use std::sync::OnceLock;

use crate::analysis::Analysis;
use crate::graph::{DepGraph, NONE};
use crate::id::StoryId;
use crate::model::Priority;

/// A validated, acyclic plan (stories of a PRD or features of a mega-plan).
#[derive(Debug)]
pub struct ValidPlan {
    graph: DepGraph,
    /// Ids as [`StoryId`]s, made on first use (the text lives in `graph`).
    ids: OnceLock<Vec<StoryId>>,
    /// Flat batches: `batch_list[batch_off[b]..batch_off[b + 1]]`.
    batch_off: Vec<u32>,
    batch_list: Vec<u32>,
    /// Batch number per position (`NONE` for complete nodes).
    batch_of: Vec<u32>,
    /// Topological order of the unfinished nodes.
    order: Vec<u32>,
    remaining: Vec<u64>,
    analysis: OnceLock<Analysis>,
}

impl ValidPlan {
    /// Builds the scheduling views. Callers guarantee `graph` is acyclic and
    /// every id valid and unique. `layers` is the layering over all nodes
    /// when the caller already has it and no node is complete (then the
    /// layering over unfinished nodes is the same).
    pub(crate) fn new(graph: DepGraph, layers: Option<(Vec<u32>, Vec<u32>)>) -> ValidPlan {
        let n = graph.len();
        let active: Vec<bool> = graph.complete.iter().map(|c| !c).collect();
        let (order, batch_of) = match layers {
            Some(l) if !graph.complete.iter().any(|c| *c) => l,
            _ => graph.layer(&active),
        };
        let remaining = graph.longest_to_sink(&order, &active, |u| graph.weight(u));

        // Bucket by batch in file order, then a stable 3-way split by priority.
        let batches = batch_of
            .iter()
            .filter(|&&b| b != NONE)
            .max()
            .map_or(0, |&m| m + 1);
        let mut batch_off = vec![0u32; batches as usize + 1];
        for &b in &batch_of {
            if b != NONE {
                batch_off[b as usize + 1] += 1;
            }
        }
        for b in 0..batches as usize {
            batch_off[b + 1] += batch_off[b];
        }
        let mut fill: Vec<u32> = batch_off[..batches as usize].to_vec();
        let mut by_position = vec![0u32; order.len()];
        for (v, &b) in batch_of.iter().enumerate() {
            if b != NONE {
                by_position[fill[b as usize] as usize] = v as u32;
                fill[b as usize] += 1;
            }
        }
        let mut batch_list = Vec::with_capacity(order.len());
        for b in 0..batches as usize {
            let batch = &by_position[batch_off[b] as usize..batch_off[b + 1] as usize];
            for p in [Priority::High, Priority::Medium, Priority::Low] {
                batch_list.extend(batch.iter().filter(|&&v| graph.priority(v as usize) == p));
            }
        }
        debug_assert_eq!(
            n - batch_list.len(),
            graph.complete.iter().filter(|c| **c).count()
        );

        ValidPlan {
            graph,
            ids: OnceLock::new(),
            batch_off,
            batch_list,
            batch_of,
            order,
            remaining,
            analysis: OnceLock::new(),
        }
    }

    /// Number of stories (complete ones included).
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    /// Whether the plan has no stories at all.
    pub fn is_empty(&self) -> bool {
        self.graph.is_empty()
    }

    /// Number of stories not yet complete.
    pub fn pending_len(&self) -> usize {
        self.batch_list.len()
    }

    /// The batches of unfinished stories, in execution order.
    pub fn batches(&self) -> Vec<Vec<StoryId>> {
        let ids = self.ids();
        self.batch_positions()
            .map(|b| b.iter().map(|&v| ids[v as usize].clone()).collect())
            .collect()
    }

    /// The batches as file positions (no allocation per batch).
    pub fn batch_positions(&self) -> impl ExactSizeIterator<Item = &[u32]> + '_ {
        self.batch_off
            .windows(2)
            .map(move |w| &self.batch_list[w[0] as usize..w[1] as usize])
    }

    /// Number of batches.
    pub fn batch_count(&self) -> usize {
        self.batch_off.len() - 1
    }

    /// Every story in file order.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = Node<'_>> + '_ {
        (0..self.len()).map(move |pos| Node { plan: self, pos })
    }

    /// The story at file position `pos` (panics if out of range).
    pub fn node_at(&self, pos: usize) -> Node<'_> {
        assert!(pos < self.len(), "position {pos} out of range");
        Node { plan: self, pos }
    }

    /// The story with this id.
    pub fn node(&self, id: &str) -> Option<Node<'_>> {
        self.position(id).map(|pos| Node { plan: self, pos })
    }

    /// The file position of the story with this id (`prd.stories[pos]`).
    pub fn position(&self, id: &str) -> Option<usize> {
        self.graph.position(id)
    }

    /// The id at file position `pos`.
    pub fn id_at(&self, pos: usize) -> &StoryId {
        &self.ids()[pos]
    }

    /// The id at file position `pos` as text (no [`StoryId`] is made).
    pub fn id_str(&self, pos: usize) -> &str {
        self.graph.id(pos)
    }

    /// All ids in file order.
    pub fn ids(&self) -> &[StoryId] {
        self.ids.get_or_init(|| {
            (0..self.len())
                .map(|p| StoryId::from_checked(std::sync::Arc::from(self.graph.id(p))))
                .collect()
        })
    }

    /// Longest weighted chain of unfinished stories from `id` to a sink
    /// (including `id` itself; 0 for a complete story).
    pub fn remaining_path_len(&self, id: &str) -> Option<u64> {
        self.position(id).map(|p| self.remaining[p])
    }

    /// The heaviest chain of unfinished stories, dependency first (empty when
    /// everything is complete).
    pub fn critical_path(&self) -> Vec<&StoryId> {
        let active: Vec<bool> = self.graph.complete.iter().map(|c| !c).collect();
        self.graph
            .heaviest_chain(&self.order, &self.batch_of, &active, &self.remaining)
            .into_iter()
            .map(|v| &self.ids()[v as usize])
            .collect()
    }

    /// The structural analysis (all stories, complete ones included).
    pub fn analysis(&self) -> &Analysis {
        self.analysis.get_or_init(|| Analysis::of(&self.graph))
    }

    /// The underlying graph.
    pub fn graph(&self) -> &DepGraph {
        &self.graph
    }
}

/// One story of a [`ValidPlan`], by file position.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    plan: &'a ValidPlan,
    pos: usize,
}

impl<'a> Node<'a> {
    /// The id.
    pub fn id(&self) -> &'a StoryId {
        &self.plan.ids()[self.pos]
    }

    /// The id as text.
    pub fn id_str(&self) -> &'a str {
        self.plan.graph.id(self.pos)
    }

    /// The file position (`prd.stories[position]`).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The priority.
    pub fn priority(&self) -> Priority {
        self.plan.graph.priority(self.pos)
    }

    /// Whether the story was already complete in the file.
    pub fn is_complete(&self) -> bool {
        self.plan.graph.is_complete(self.pos)
    }

    /// Its critical-path weight.
    pub fn weight(&self) -> u64 {
        self.plan.graph.weight(self.pos)
    }

    /// The stories it depends on, in the order the file lists them.
    pub fn dependencies(&self) -> impl ExactSizeIterator<Item = &'a StoryId> + 'a {
        let ids = self.plan.ids();
        self.dependency_positions()
            .iter()
            .map(move |&u| &ids[u as usize])
    }

    /// Positions of the stories it depends on.
    pub fn dependency_positions(&self) -> &'a [u32] {
        self.plan.graph.dependencies(self.pos)
    }

    /// The stories that depend on it, in file order.
    pub fn dependents(&self) -> impl ExactSizeIterator<Item = &'a StoryId> + 'a {
        let ids = self.plan.ids();
        self.dependent_positions()
            .iter()
            .map(move |&u| &ids[u as usize])
    }

    /// Positions of the stories that depend on it.
    pub fn dependent_positions(&self) -> &'a [u32] {
        self.plan.graph.dependents(self.pos)
    }

    /// Its batch number (0-based), `None` if already complete.
    pub fn batch(&self) -> Option<usize> {
        let b = self.plan.batch_of[self.pos];
        (b != NONE).then_some(b as usize)
    }

    /// Longest weighted chain of unfinished stories from here to a sink.
    pub fn remaining_path_len(&self) -> u64 {
        self.plan.remaining[self.pos]
    }
}
