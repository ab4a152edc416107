//! Graph analysis for reports: depth, roots, critical path, bottlenecks,
//! orphans and cycles, over the plan as written (complete stories included).
//!
//! Works on any [`DepGraph`], cyclic or not, so `cascade deps --no-check` can
//! describe a broken plan: nodes on or behind a cycle have no depth and are
//! left out of the critical path. Cycles are found with petgraph's
//! strongly connected components (Kosaraju, iterative, so a 100,000-node
//! cycle cannot overflow the stack), run only on the nodes Kahn's algorithm
//! could not release, and each is named as a closed path.

use std::collections::VecDeque;

use petgraph::graph::{DiGraph, NodeIndex};

use crate::graph::{DepGraph, NONE};

/// One cycle: a closed path of positions (`path[0] == path[last]`), each
/// depending on the next; `others` are further members of the same strongly
/// connected component that this path does not visit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// Closed path, each node depending on the next.
    pub path: Vec<usize>,
    /// Other nodes caught in the same tangle, in file order.
    pub others: Vec<usize>,
}

impl Cycle {
    /// Whether this is a node depending on itself.
    pub fn is_self_loop(&self) -> bool {
        self.path.len() == 2
    }
}

/// The shape of a dependency graph. All node references are file positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// Per position: the length of the longest dependency chain below the
    /// node (0 for roots); `None` on or behind a cycle.
    pub depth: Vec<Option<u32>>,
    /// Nodes without dependencies, in file order.
    pub roots: Vec<usize>,
    /// The heaviest dependency chain, dependency first.
    pub critical_path: Vec<usize>,
    /// Its total weight (number of nodes unless numeric estimates give weights).
    pub critical_path_len: u64,
    /// Nodes that 2 or more others depend on, most dependents first, then file order.
    pub bottlenecks: Vec<usize>,
    /// Nodes with neither dependencies nor dependents, in file order.
    pub orphans: Vec<usize>,
    /// Every cycle (one closed path per strongly connected component),
    /// ordered by their first node's position.
    pub cycles: Vec<Cycle>,
}

impl Analysis {
    /// Analyzes `graph` as written.
    pub fn of(graph: &DepGraph) -> Analysis {
        let n = graph.len();
        let all = vec![true; n];
        let (order, depth) = graph.layer(&all);
        let rem = graph.longest_to_sink(&order, &all, |u| graph.weight(u));
        let critical_path: Vec<usize> = graph
            .heaviest_chain(&order, &depth, &all, &rem)
            .into_iter()
            .map(|v| v as usize)
            .collect();
        let critical_path_len = critical_path.first().map_or(0, |&v| rem[v]);
        let roots = (0..n)
            .filter(|&v| graph.dependencies(v).is_empty())
            .collect();
        let mut bottlenecks: Vec<usize> =
            (0..n).filter(|&v| graph.dependents(v).len() >= 2).collect();
        bottlenecks.sort_by_key(|&v| (std::cmp::Reverse(graph.dependents(v).len()), v));
        let orphans = (0..n)
            .filter(|&v| graph.dependencies(v).is_empty() && graph.dependents(v).is_empty())
            .collect();
        let cycles = if order.len() < n {
            find_cycles(graph, &depth)
        } else {
            Vec::new()
        };
        Analysis {
            depth: depth.iter().map(|&d| (d != NONE).then_some(d)).collect(),
            roots,
            critical_path,
            critical_path_len,
            bottlenecks,
            orphans,
            cycles,
        }
    }

    /// The greatest depth, if any node has one.
    pub fn max_depth(&self) -> Option<u32> {
        self.depth.iter().flatten().copied().max()
    }
}

/// Names every cycle among the nodes Kahn left unreleased (`depth == NONE`).
pub(crate) fn find_cycles(graph: &DepGraph, depth: &[u32]) -> Vec<Cycle> {
    let n = graph.len();
    // The subgraph of unreleased nodes, edges pointing at dependencies.
    let stuck: Vec<u32> = (0..n as u32)
        .filter(|&v| depth[v as usize] == NONE)
        .collect();
    let mut local = vec![NONE; n];
    let mut g: DiGraph<u32, (), u32> = DiGraph::with_capacity(stuck.len(), stuck.len());
    for &v in &stuck {
        local[v as usize] = g.add_node(v).index() as u32;
    }
    for &v in &stuck {
        for &u in graph.dependencies(v as usize) {
            if local[u as usize] != NONE {
                g.add_edge(
                    NodeIndex::new(local[v as usize] as usize),
                    NodeIndex::new(local[u as usize] as usize),
                    (),
                );
            }
        }
    }

    let mut comp_of = vec![NONE; n];
    let mut parent = vec![NONE; n];
    let mut cycles = Vec::new();
    for (c, comp) in petgraph::algo::kosaraju_scc(&g).into_iter().enumerate() {
        let mut members: Vec<usize> = comp.iter().map(|&ix| g[ix] as usize).collect();
        members.sort_unstable();
        let start = members[0];
        let self_loop = graph.dependencies(start).contains(&(start as u32));
        if members.len() == 1 && !self_loop {
            continue; // behind a cycle, not on one
        }
        for &m in &members {
            comp_of[m] = c as u32;
        }
        let path = if self_loop {
            vec![start, start]
        } else {
            shortest_cycle(graph, start, c as u32, &comp_of, &mut parent)
        };
        let on_path: std::collections::HashSet<usize> = path.iter().copied().collect();
        let others = members
            .into_iter()
            .filter(|m| !on_path.contains(m))
            .collect();
        cycles.push(Cycle { path, others });
    }
    cycles.sort_by_key(|c| c.path[0]);
    cycles
}

/// Breadth-first search along dependency edges inside component `c` for the
/// shortest way from `start` back to itself.
fn shortest_cycle(
    graph: &DepGraph,
    start: usize,
    c: u32,
    comp_of: &[u32],
    parent: &mut [u32],
) -> Vec<usize> {
    let mut queue = VecDeque::from([start]);
    parent[start] = start as u32;
    while let Some(x) = queue.pop_front() {
        for &u in graph.dependencies(x) {
            let u = u as usize;
            if u == start {
                // Walk back from x to start, then read it forwards.
                let mut back = Vec::new();
                let mut cur = x;
                while cur != start {
                    back.push(cur);
                    cur = parent[cur] as usize;
                }
                let mut path = Vec::with_capacity(back.len() + 2);
                path.push(start);
                path.extend(back.into_iter().rev());
                path.push(start);
                return path;
            }
            if comp_of[u] == c && parent[u] == NONE {
                parent[u] = x as u32;
                queue.push_back(u);
            }
        }
    }
    // A strongly connected component always has a way back; keep the members
    // visible even if that invariant were ever broken.
    vec![start, start]
}
