//! The scheduler: hands out ready stories, takes back results.
//!
//! Like turborepo's walker it knows nothing about the work: it sees nodes
//! (indices) with dependencies, a priority, a file position and the length of
//! the longest chain still hanging off them, and answers "what may start
//! now?". Two disciplines:
//!
//! - [`Discipline::Batch`]: Kahn layers of the remaining work; layer `k + 1`
//!   starts only when every node of layer `k` is finished (done, failed or
//!   blocked). Inside a layer: priority, then file order.
//! - [`Discipline::Eager`]: a node starts as soon as all its dependencies are
//!   done; among ready nodes the longest remaining critical path first, then
//!   priority, then file order.
//!
//! Eager also keeps apart nodes that declare the same file (a story's
//! `files` in prd.json, as keys the caller interned): a ready node whose
//! files a running node holds waits until that node is finished, and the
//! next ready node runs instead. Two stories that will touch the same files
//! then never run at once, so neither burns attempts on merge conflicts
//! with the other (a slot may stay idle meanwhile: the holder always ends).
//! Files a node's merge conflicted in join its own (`add_files`).
//!
//! Both never run more than `parallel` nodes at once. A failed node blocks its
//! dependents transitively; the rest goes on, unless `fail_fast`, which stops
//! handing out anything new. A layer limit (`set_layer_limit`) holds back
//! nodes of later layers: that is how "one batch, then ask" and
//! `--max-iterations` are expressed in both disciplines.

/// How ready nodes are released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discipline {
    Batch,
    Eager,
}

/// A node as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// Indices of the nodes this one waits for.
    pub deps: Vec<usize>,
    /// 0 = high, 1 = medium, 2 = low.
    pub priority: u8,
    /// Position in the plan file (ties).
    pub file_index: usize,
    /// Longest chain (weighted) from this node to any sink, itself included.
    pub remaining_path: u64,
    /// Already complete before the run: never handed out, counts as done.
    pub done: bool,
    /// The files the node declares, as keys: eager never runs two nodes
    /// sharing one at once.
    pub files: Vec<u32>,
}

/// Where a node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    Waiting,
    Running,
    Done,
    Failed,
    Blocked,
}

impl NodeState {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            NodeState::Done | NodeState::Failed | NodeState::Blocked
        )
    }
}

/// Hands out nodes whose dependencies are done.
///
/// Every operation costs what it touches, not the size of the plan: each
/// node counts its dependencies not done yet (`unmet`), eager's ready nodes
/// wait in a heap ordered by its key, and batch walks the current layer
/// with a cursor while each layer counts its unfinished nodes.
#[derive(Debug, Clone)]
pub struct Scheduler {
    nodes: Vec<NodeSpec>,
    dependents: Vec<Vec<usize>>,
    state: Vec<NodeState>,
    layer: Vec<usize>,
    layers: Vec<Vec<usize>>,
    discipline: Discipline,
    parallel: usize,
    fail_fast: bool,
    stopped: bool,
    running: usize,
    layer_limit: usize,
    /// Dependencies of each node that are not done.
    unmet: Vec<u32>,
    /// Eager: ready nodes (`unmet == 0`, waiting), best first; entries that
    /// went stale are skipped when they come up.
    ready: std::collections::BinaryHeap<std::cmp::Reverse<EagerKey>>,
    /// Eager: ready nodes held back by the layer limit.
    held: Vec<usize>,
    /// Batch: nodes of each layer not finished yet.
    unfinished: Vec<usize>,
    /// Batch: the first layer with an unfinished node (or later).
    current: usize,
    /// Batch: per layer, where the search for a waiting node resumes.
    cursor: Vec<usize>,
    /// Each node's index in its layer's list.
    slot: Vec<usize>,
    /// Nodes waiting.
    waiting: usize,
    /// Eager: how many running nodes hold each file key.
    holding: std::collections::HashMap<u32, u32>,
    /// Eager: ready nodes put aside because a running node holds one of
    /// their files; offered again when a running node finishes.
    parked: Vec<usize>,
    /// Running nodes that lent their slot ([`Scheduler::lend`]).
    lent: std::collections::HashSet<usize>,
}

/// Eager's order: longest remaining path, then priority, file order, index.
type EagerKey = (std::cmp::Reverse<u64>, u8, usize, usize);

impl Scheduler {
    /// A scheduler over `nodes`. Dependencies must form a DAG (the plan was
    /// validated); out-of-range dependency indices are ignored.
    pub fn new(
        nodes: Vec<NodeSpec>,
        discipline: Discipline,
        parallel: usize,
        fail_fast: bool,
    ) -> Scheduler {
        let n = nodes.len();
        let mut dependents = vec![Vec::new(); n];
        let mut unmet = vec![0u32; n];
        for (i, node) in nodes.iter().enumerate() {
            for &d in &node.deps {
                if d < n && d != i {
                    dependents[d].push(i);
                    if !nodes[d].done {
                        unmet[i] += 1;
                    }
                }
            }
        }
        let state: Vec<NodeState> = nodes
            .iter()
            .map(|n| {
                if n.done {
                    NodeState::Done
                } else {
                    NodeState::Waiting
                }
            })
            .collect();
        let layer = compute_layers(&nodes);
        let mut layers: Vec<Vec<usize>> = Vec::new();
        for i in 0..n {
            if state[i] == NodeState::Done {
                continue;
            }
            let l = layer[i];
            if layers.len() <= l {
                layers.resize(l + 1, Vec::new());
            }
            layers[l].push(i);
        }
        let mut slot = vec![0; n];
        for members in &mut layers {
            members.sort_by_key(|&i| (nodes[i].priority, nodes[i].file_index, i));
            for (k, &i) in members.iter().enumerate() {
                slot[i] = k;
            }
        }
        let unfinished = layers.iter().map(Vec::len).collect();
        let waiting = state.iter().filter(|s| **s == NodeState::Waiting).count();
        let mut s = Scheduler {
            cursor: vec![0; layers.len()],
            nodes,
            dependents,
            state,
            layer,
            layers,
            discipline,
            parallel: parallel.max(1),
            fail_fast,
            stopped: false,
            running: 0,
            layer_limit: usize::MAX,
            unmet,
            ready: std::collections::BinaryHeap::new(),
            held: Vec::new(),
            unfinished,
            current: 0,
            slot,
            waiting,
            holding: std::collections::HashMap::new(),
            parked: Vec::new(),
            lent: std::collections::HashSet::new(),
        };
        for i in 0..n {
            s.offer(i);
        }
        s
    }

    /// Only nodes of layers `< limit` are handed out until the limit is raised.
    pub fn set_layer_limit(&mut self, limit: usize) {
        self.layer_limit = limit;
        for i in std::mem::take(&mut self.held) {
            self.offer(i);
        }
    }

    pub fn layer_limit(&self) -> usize {
        self.layer_limit
    }

    /// Files `keys` join node `i`'s (its merge conflicted in them): from
    /// now on eager keeps it apart from other nodes holding one, and while
    /// it runs it holds them.
    pub fn add_files(&mut self, i: usize, keys: &[u32]) {
        for &k in keys {
            if self.nodes[i].files.contains(&k) {
                continue;
            }
            self.nodes[i].files.push(k);
            if self.state[i] == NodeState::Running {
                *self.holding.entry(k).or_default() += 1;
            }
        }
    }

    /// Running node `i` lends its slot while it waits for other nodes to
    /// end (a retry against a story still running): another node may run
    /// in it meanwhile. `i` stays running (holding its files) until it
    /// takes a slot back ([`Scheduler::reclaim`]) or ends.
    pub fn lend(&mut self, i: usize) {
        if self.state[i] == NodeState::Running && self.lent.insert(i) {
            self.running -= 1;
        }
    }

    /// Node `i` takes a slot back, if one is free (whether the run is
    /// stopped or not: it is work already under way). `true` when it runs
    /// in a slot again.
    pub fn reclaim(&mut self, i: usize) -> bool {
        if !self.lent.contains(&i) {
            return true;
        }
        if self.running >= self.parallel {
            return false;
        }
        self.lent.remove(&i);
        self.running += 1;
        true
    }

    /// Node `i` leaves the running state: its slot is free (unless it lent it).
    fn stop_running(&mut self, i: usize) {
        if self.state[i] == NodeState::Running && !self.lent.remove(&i) {
            self.running -= 1;
        }
    }

    /// Stops handing out nodes (Ctrl-C, fail-fast).
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The next node to start, if one may start now.
    pub fn next_ready(&mut self) -> Option<usize> {
        if self.stopped || self.running >= self.parallel {
            return None;
        }
        let pick = match self.discipline {
            Discipline::Batch => self.next_batch(),
            Discipline::Eager => self.next_eager(),
        }?;
        self.set(pick, NodeState::Running);
        self.running += 1;
        Some(pick)
    }

    fn deps_done(&self, i: usize) -> bool {
        self.nodes[i]
            .deps
            .iter()
            .all(|&d| d >= self.nodes.len() || d == i || self.state[d] == NodeState::Done)
    }

    /// Moves node `i` to `to`, keeping the counts of waiting and of each
    /// layer's unfinished nodes.
    fn set(&mut self, i: usize, to: NodeState) {
        let from = self.state[i];
        self.state[i] = to;
        match (from == NodeState::Running, to == NodeState::Running) {
            (false, true) => self.hold(i),
            (true, false) => self.let_go(i),
            _ => {}
        }
        if from == NodeState::Waiting {
            self.waiting -= 1;
        }
        if to == NodeState::Waiting {
            self.waiting += 1;
        }
        let Some(unfinished) = self.unfinished.get_mut(self.layer[i]) else {
            return;
        };
        match (from.is_terminal(), to.is_terminal()) {
            (false, true) => *unfinished -= 1,
            (true, false) => *unfinished += 1,
            _ => {}
        }
    }

    /// A node that waits again (or for the first time) becomes a candidate:
    /// eager puts it in the heap once nothing holds it back; batch moves the
    /// search of its layer back to it.
    fn offer(&mut self, i: usize) {
        if self.state[i] != NodeState::Waiting {
            return;
        }
        match self.discipline {
            Discipline::Eager if self.unmet[i] == 0 => {
                if self.layer[i] < self.layer_limit {
                    let n = &self.nodes[i];
                    let key = (
                        std::cmp::Reverse(n.remaining_path),
                        n.priority,
                        n.file_index,
                        i,
                    );
                    self.ready.push(std::cmp::Reverse(key));
                } else {
                    self.held.push(i);
                }
            }
            Discipline::Eager => {}
            Discipline::Batch => {
                let l = self.layer[i];
                if let Some(c) = self.cursor.get_mut(l) {
                    *c = (*c).min(self.slot[i]);
                }
                self.current = self.current.min(l);
            }
        }
    }

    fn next_batch(&mut self) -> Option<usize> {
        // The current batch is the first layer with an unfinished node.
        while self.unfinished.get(self.current).is_some_and(|&u| u == 0) {
            self.current += 1;
        }
        let current = self.current;
        if current >= self.layers.len() || current >= self.layer_limit {
            return None;
        }
        while let Some(&i) = self.layers[current].get(self.cursor[current]) {
            if self.state[i] == NodeState::Waiting && self.deps_done(i) {
                return Some(i);
            }
            self.cursor[current] += 1;
        }
        None
    }

    fn next_eager(&mut self) -> Option<usize> {
        while let Some(std::cmp::Reverse(key)) = self.ready.pop() {
            let i = key.3;
            if self.state[i] != NodeState::Waiting || self.unmet[i] != 0 {
                continue; // stale: handed out, blocked or waiting again since
            }
            if self.layer[i] >= self.layer_limit {
                self.held.push(i);
                continue;
            }
            if self.clashes(i) {
                self.parked.push(i);
                continue;
            }
            return Some(i);
        }
        None
    }

    /// Whether a running node holds one of `i`'s files.
    fn clashes(&self, i: usize) -> bool {
        self.nodes[i]
            .files
            .iter()
            .any(|f| self.holding.get(f).is_some_and(|&n| n > 0))
    }

    /// Node `i` starts running: it holds its files.
    fn hold(&mut self, i: usize) {
        for &f in &self.nodes[i].files {
            *self.holding.entry(f).or_default() += 1;
        }
    }

    /// Node `i` stopped running: its files are free, and the nodes parked
    /// behind any running node are candidates again (few: only those that
    /// came up while a holder ran).
    fn let_go(&mut self, i: usize) {
        if self.nodes[i].files.is_empty() {
            return;
        }
        for &f in &self.nodes[i].files {
            if let Some(n) = self.holding.get_mut(&f) {
                *n = n.saturating_sub(1);
            }
        }
        for p in std::mem::take(&mut self.parked) {
            self.offer(p);
        }
    }

    /// A handed-out node finished successfully.
    pub fn complete(&mut self, i: usize) {
        self.stop_running(i);
        if self.state[i] == NodeState::Done {
            return;
        }
        self.set(i, NodeState::Done);
        for k in 0..self.dependents[i].len() {
            let d = self.dependents[i][k];
            self.unmet[d] = self.unmet[d].saturating_sub(1);
            if self.unmet[d] == 0 {
                self.offer(d);
            }
        }
    }

    /// A handed-out node failed for good. Returns the nodes newly blocked by
    /// it (transitively), in index order.
    pub fn fail(&mut self, i: usize) -> Vec<usize> {
        self.stop_running(i);
        self.set(i, NodeState::Failed);
        if self.fail_fast {
            self.stopped = true;
        }
        let mut blocked = Vec::new();
        let mut stack = vec![i];
        while let Some(n) = stack.pop() {
            for k in 0..self.dependents[n].len() {
                let d = self.dependents[n][k];
                if self.state[d] == NodeState::Waiting {
                    self.set(d, NodeState::Blocked);
                    blocked.push(d);
                    stack.push(d);
                }
            }
        }
        blocked.sort_unstable();
        blocked
    }

    /// A handed-out node goes back to waiting (interrupted; it will not be
    /// handed out again in this run once stopped).
    pub fn release(&mut self, i: usize) {
        if self.state[i] == NodeState::Running {
            self.stop_running(i);
            self.set(i, NodeState::Waiting);
            self.offer(i);
        }
    }

    /// A failed node waits again (a retry asked for from outside), and the
    /// nodes it alone blocked wait again too. Returns those, in index order.
    pub fn requeue(&mut self, i: usize) -> Vec<usize> {
        if self.state[i] != NodeState::Failed {
            return Vec::new();
        }
        self.set(i, NodeState::Waiting);
        self.offer(i);
        // Only what `i` blocked can be freed: walk its dependents.
        let mut unblocked = Vec::new();
        let mut stack = vec![i];
        while let Some(n) = stack.pop() {
            for k in 0..self.dependents[n].len() {
                let d = self.dependents[n][k];
                let free = self.state[d] == NodeState::Blocked
                    && self.nodes[d].deps.iter().all(|&x| {
                        x >= self.nodes.len()
                            || !matches!(self.state[x], NodeState::Failed | NodeState::Blocked)
                    });
                if free {
                    self.set(d, NodeState::Waiting);
                    self.offer(d);
                    unblocked.push(d);
                    stack.push(d);
                }
            }
        }
        unblocked.sort_unstable();
        unblocked
    }

    /// The nodes `i` waits for.
    pub fn deps(&self, i: usize) -> &[usize] {
        &self.nodes[i].deps
    }

    pub fn running(&self) -> usize {
        self.running
    }

    pub fn state(&self, i: usize) -> NodeState {
        self.state[i]
    }

    /// The Kahn layer (0-based batch) of a node among the remaining work.
    pub fn layer_of(&self, i: usize) -> usize {
        self.layer[i]
    }

    /// The remaining work's batches, each in start order.
    pub fn layers(&self) -> &[Vec<usize>] {
        &self.layers
    }

    /// Whether every node of layer `k` is finished.
    pub fn layer_finished(&self, k: usize) -> bool {
        self.unfinished.get(k).map_or(true, |&u| u == 0)
    }

    /// Waiting nodes held back only by the layer limit (work left for a later
    /// confirmation or iteration).
    pub fn held_back(&self) -> usize {
        self.layers
            .iter()
            .skip(self.layer_limit)
            .flatten()
            .filter(|&&i| self.state[i] == NodeState::Waiting)
            .count()
    }

    /// Nothing runs and nothing can be handed out now.
    pub fn idle(&self) -> bool {
        self.running == 0 && self.lent.is_empty() && self.clone().next_ready().is_none()
    }

    /// Nodes still waiting (not run, not blocked).
    pub fn waiting(&self) -> usize {
        self.waiting
    }
}

/// Layer = 0 for nodes with no unfinished dependency, else one more than the
/// deepest unfinished dependency. Done nodes get layer 0 and do not count.
fn compute_layers(nodes: &[NodeSpec]) -> Vec<usize> {
    let n = nodes.len();
    let mut layer: Vec<Option<usize>> = vec![None; n];
    // Iterative DFS so deep chains cannot overflow the stack. Every node
    // taken off the stack expanded is unmarked, so one marking serves all.
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    for start in 0..n {
        if layer[start].is_some() {
            continue;
        }
        stack.push((start, false));
        while let Some((i, expanded)) = stack.pop() {
            if layer[i].is_some() {
                continue;
            }
            if nodes[i].done {
                layer[i] = Some(0);
                continue;
            }
            if expanded {
                let l = nodes[i]
                    .deps
                    .iter()
                    .filter(|&&d| d < n && d != i && !nodes[d].done)
                    .map(|&d| layer[d].unwrap_or(0) + 1)
                    .max()
                    .unwrap_or(0);
                layer[i] = Some(l);
                on_stack[i] = false;
                continue;
            }
            on_stack[i] = true;
            stack.push((i, true));
            for &d in &nodes[i].deps {
                // A cycle (never in a validated plan) is cut rather than looped on.
                if d < n && d != i && layer[d].is_none() && !on_stack[d] {
                    stack.push((d, false));
                }
            }
        }
    }
    layer.into_iter().map(|l| l.unwrap_or(0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(deps: &[usize], priority: u8, path: u64) -> NodeSpec {
        NodeSpec {
            files: Vec::new(),
            deps: deps.to_vec(),
            priority,
            file_index: 0,
            remaining_path: path,
            done: false,
        }
    }

    fn with_index(mut nodes: Vec<NodeSpec>) -> Vec<NodeSpec> {
        for (i, n) in nodes.iter_mut().enumerate() {
            n.file_index = i;
        }
        nodes
    }

    #[test]
    fn requeue_unblocks_only_what_the_node_alone_blocked() {
        // 0 -> 1 -> 2; 3 -> 4; 5 depends on 1 and 4.
        let nodes = with_index(vec![
            node(&[], 1, 3),
            node(&[0], 1, 2),
            node(&[1], 1, 1),
            node(&[], 1, 2),
            node(&[3], 1, 1),
            node(&[1, 4], 1, 1),
        ]);
        let mut s = Scheduler::new(nodes, Discipline::Eager, 4, false);
        let a = s.next_ready().unwrap();
        let b = s.next_ready().unwrap();
        assert_eq!((a, b), (0, 3));
        assert_eq!(s.fail(0), vec![1, 2, 5]);
        assert_eq!(s.fail(3), vec![4]);
        // Only a failed node can be requeued.
        assert!(s.requeue(1).is_empty());
        assert_eq!(s.state(1), NodeState::Blocked);
        // 5 still waits on 4 (blocked by 3).
        assert_eq!(s.requeue(0), vec![1, 2]);
        assert_eq!(s.state(0), NodeState::Waiting);
        assert_eq!(s.state(5), NodeState::Blocked);
        assert_eq!(s.next_ready(), Some(0));
        assert_eq!(s.requeue(3), vec![4, 5]);
        assert_eq!(s.deps(5), &[1, 4]);
    }

    #[test]
    fn batch_waits_for_whole_layer() {
        // 0, 1 roots; 2 depends on 0; 3 depends on 1 (slow).
        let nodes = with_index(vec![
            node(&[], 1, 2),
            node(&[], 1, 2),
            node(&[0], 1, 1),
            node(&[1], 1, 1),
        ]);
        let mut s = Scheduler::new(nodes, Discipline::Batch, 4, false);
        assert_eq!(s.next_ready(), Some(0));
        assert_eq!(s.next_ready(), Some(1));
        assert_eq!(s.next_ready(), None);
        s.complete(0);
        // 2 is ready by its deps but batch 2 waits for story 1.
        assert_eq!(s.next_ready(), None);
        s.complete(1);
        assert_eq!(s.next_ready(), Some(2));
        assert_eq!(s.next_ready(), Some(3));
    }

    #[test]
    fn eager_starts_as_soon_as_deps_are_done() {
        let nodes = with_index(vec![
            node(&[], 1, 2),
            node(&[], 1, 2),
            node(&[0], 1, 1),
            node(&[1], 1, 1),
        ]);
        let mut s = Scheduler::new(nodes, Discipline::Eager, 4, false);
        assert_eq!(s.next_ready(), Some(0));
        assert_eq!(s.next_ready(), Some(1));
        s.complete(0);
        assert_eq!(s.next_ready(), Some(2));
    }

    #[test]
    fn eager_prefers_longest_path_then_priority_then_file_order() {
        let nodes = with_index(vec![
            node(&[], 2, 1),
            node(&[], 0, 1),
            node(&[], 1, 3),
            node(&[], 0, 1),
        ]);
        let mut s = Scheduler::new(nodes, Discipline::Eager, 1, false);
        let mut order = Vec::new();
        while let Some(i) = s.next_ready() {
            order.push(i);
            s.complete(i);
        }
        assert_eq!(order, vec![2, 1, 3, 0]);
    }

    #[test]
    fn batch_orders_by_priority_then_file() {
        let nodes = with_index(vec![node(&[], 2, 1), node(&[], 0, 1), node(&[], 1, 1)]);
        let mut s = Scheduler::new(nodes, Discipline::Batch, 1, false);
        let mut order = Vec::new();
        while let Some(i) = s.next_ready() {
            order.push(i);
            s.complete(i);
        }
        assert_eq!(order, vec![1, 2, 0]);
    }

    #[test]
    fn failure_blocks_dependents_transitively_and_others_go_on() {
        let nodes = with_index(vec![
            node(&[], 1, 3),
            node(&[0], 1, 2),
            node(&[1], 1, 1),
            node(&[], 1, 1),
        ]);
        let mut s = Scheduler::new(nodes, Discipline::Batch, 4, false);
        assert_eq!(s.next_ready(), Some(0));
        assert_eq!(s.next_ready(), Some(3));
        assert_eq!(s.fail(0), vec![1, 2]);
        s.complete(3);
        assert_eq!(s.next_ready(), None);
        assert!(s.idle());
        assert_eq!(s.state(2), NodeState::Blocked);
    }

    #[test]
    fn fail_fast_stops_handing_out() {
        let nodes = with_index(vec![node(&[], 1, 1), node(&[], 1, 1), node(&[], 1, 1)]);
        let mut s = Scheduler::new(nodes, Discipline::Eager, 1, true);
        let a = s.next_ready().unwrap();
        s.fail(a);
        assert_eq!(s.next_ready(), None);
        assert!(s.is_stopped());
    }

    #[test]
    fn done_nodes_are_skipped_and_layers_shift() {
        let mut nodes = with_index(vec![node(&[], 1, 2), node(&[0], 1, 1)]);
        nodes[0].done = true;
        let mut s = Scheduler::new(nodes, Discipline::Batch, 2, false);
        assert_eq!(s.layers().len(), 1);
        assert_eq!(s.layer_of(1), 0);
        assert_eq!(s.next_ready(), Some(1));
        assert_eq!(s.next_ready(), None);
    }

    #[test]
    fn eager_never_runs_two_nodes_sharing_a_file_at_once() {
        // 0 and 1 declare file 7; 2 declares nothing; 3 declares file 8.
        let mut nodes = with_index(vec![
            node(&[], 1, 4),
            node(&[], 1, 3),
            node(&[], 1, 2),
            node(&[], 1, 1),
        ]);
        nodes[0].files = vec![7];
        nodes[1].files = vec![7, 8];
        nodes[3].files = vec![8];
        let mut s = Scheduler::new(nodes, Discipline::Eager, 3, false);
        // 1 is next by its path but waits behind 0; the others run.
        assert_eq!(s.next_ready(), Some(0));
        assert_eq!(s.next_ready(), Some(2));
        assert_eq!(s.next_ready(), Some(3));
        assert_eq!(s.next_ready(), None);
        // 2 ends: a slot is free, but 1's files are still held.
        s.complete(2);
        assert_eq!(s.next_ready(), None);
        // 0 ends: 3 still holds file 8.
        s.complete(0);
        assert_eq!(s.next_ready(), None);
        s.fail(3);
        assert_eq!(s.next_ready(), Some(1));
        // Nothing waits now: the parked node was handed out once.
        assert_eq!(s.next_ready(), None);
        s.complete(1);
        assert!(s.idle());
    }

    #[test]
    fn a_node_released_while_holding_a_file_frees_it() {
        let mut nodes = with_index(vec![node(&[], 1, 2), node(&[], 1, 1)]);
        nodes[0].files = vec![1];
        nodes[1].files = vec![1];
        let mut s = Scheduler::new(nodes, Discipline::Eager, 2, false);
        assert_eq!(s.next_ready(), Some(0));
        assert_eq!(s.next_ready(), None);
        s.release(0);
        assert_eq!(s.next_ready(), Some(0));
    }

    #[test]
    fn files_a_running_node_conflicted_in_are_held_like_declared_ones() {
        // 1 declares file 5; 0 declares nothing, then conflicts in file 5.
        let mut nodes = with_index(vec![node(&[], 1, 3), node(&[], 1, 2), node(&[], 1, 1)]);
        nodes[1].files = vec![5];
        let mut s = Scheduler::new(nodes, Discipline::Eager, 3, false);
        assert_eq!(s.next_ready(), Some(0));
        s.add_files(0, &[5, 5]);
        // 1 is next by its path but waits while 0 holds file 5; 2 runs.
        assert_eq!(s.next_ready(), Some(2));
        assert_eq!(s.next_ready(), None);
        // Handed out again (interrupted, then resumed in the same run), 0
        // holds file 5 from the start.
        s.release(0);
        assert_eq!(s.next_ready(), Some(0));
        assert_eq!(s.next_ready(), None);
        s.complete(0);
        assert_eq!(s.next_ready(), Some(1), "file 5 is free once 0 ends");
        s.complete(1);
        s.complete(2);
        assert!(s.idle());
    }

    #[test]
    fn a_node_that_lends_its_slot_lets_another_run_and_takes_a_free_one_back() {
        let mut s = Scheduler::new(
            with_index(vec![node(&[], 1, 1), node(&[], 1, 1), node(&[], 1, 1)]),
            Discipline::Batch,
            2,
            false,
        );
        assert_eq!(
            (s.next_ready(), s.next_ready(), s.next_ready()),
            (Some(0), Some(1), None)
        );
        s.lend(1);
        s.lend(1);
        assert_eq!(s.running(), 1);
        assert_eq!(s.state(1), NodeState::Running);
        assert_eq!(s.next_ready(), Some(2));
        assert!(!s.reclaim(1), "no slot is free");
        s.complete(0);
        assert!(s.reclaim(1));
        assert_eq!(s.running(), 2);
        s.complete(1);
        s.complete(2);
        assert_eq!(s.running(), 0);
        // A node that ends while it lent its slot frees nothing more.
        let mut s = Scheduler::new(
            with_index(vec![node(&[], 1, 1)]),
            Discipline::Eager,
            1,
            false,
        );
        assert_eq!(s.next_ready(), Some(0));
        s.lend(0);
        s.fail(0);
        assert_eq!(s.running(), 0);
        assert!(s.idle());
    }

    #[test]
    fn layer_limit_holds_back_later_batches() {
        let nodes = with_index(vec![node(&[], 1, 2), node(&[0], 1, 1)]);
        for d in [Discipline::Batch, Discipline::Eager] {
            let mut s = Scheduler::new(nodes.clone(), d, 2, false);
            s.set_layer_limit(1);
            assert_eq!(s.next_ready(), Some(0));
            s.complete(0);
            assert_eq!(s.next_ready(), None);
            assert_eq!(s.held_back(), 1);
            assert!(s.idle());
            s.set_layer_limit(2);
            assert_eq!(s.next_ready(), Some(1));
        }
    }

    /// A random DAG: node i depends on some nodes < i.
    fn dag() -> impl Strategy<Value = Vec<NodeSpec>> {
        (1usize..24).prop_flat_map(|n| {
            let per_node: Vec<_> = (0..n)
                .map(|i| {
                    (
                        proptest::collection::vec(0..i.max(1), 0..3.min(i + 1)),
                        0u8..3,
                        1u64..5,
                        proptest::bool::weighted(0.1),
                    )
                })
                .collect();
            per_node.prop_map(|v| {
                v.into_iter()
                    .enumerate()
                    .map(|(i, (deps, priority, path, done))| NodeSpec {
                        deps: deps.into_iter().filter(|&d| d < i).collect(),
                        priority,
                        file_index: i,
                        remaining_path: path,
                        done,
                        files: Vec::new(),
                    })
                    .collect()
            })
        })
    }

    /// What a scan over every node picks (the scheduler's definition; it
    /// keeps counts and a heap instead of scanning).
    fn naive_next(
        nodes: &[NodeSpec],
        s: &Scheduler,
        discipline: Discipline,
        parallel: usize,
    ) -> Option<usize> {
        if s.is_stopped() || s.running() >= parallel {
            return None;
        }
        let n = nodes.len();
        let ready = |i: usize| {
            s.state(i) == NodeState::Waiting
                && nodes[i]
                    .deps
                    .iter()
                    .all(|&d| d >= n || d == i || s.state(d) == NodeState::Done)
        };
        match discipline {
            Discipline::Batch => {
                let current = s
                    .layers()
                    .iter()
                    .position(|m| m.iter().any(|&i| !s.state(i).is_terminal()))?;
                if current >= s.layer_limit() {
                    return None;
                }
                s.layers()[current].iter().copied().find(|&i| ready(i))
            }
            Discipline::Eager => (0..n)
                .filter(|&i| ready(i) && s.layer_of(i) < s.layer_limit())
                .min_by_key(|&i| {
                    let x = &nodes[i];
                    (
                        std::cmp::Reverse(x.remaining_path),
                        x.priority,
                        x.file_index,
                        i,
                    )
                }),
        }
    }

    proptest! {
        #[test]
        fn scheduler_invariants(
            nodes in dag(),
            parallel in 1usize..5,
            eager in any::<bool>(),
            fails in proptest::collection::vec(any::<bool>(), 24),
            picks in proptest::collection::vec(any::<usize>(), 64),
        ) {
            let n = nodes.len();
            // Done nodes must not depend on undone ones (a plan can mark
            // anything complete, but we keep the model simple and consistent).
            let discipline = if eager { Discipline::Eager } else { Discipline::Batch };
            let mut s = Scheduler::new(nodes.clone(), discipline, parallel, false);
            let mut running: Vec<usize> = Vec::new();
            // Running nodes whose slot is lent (a retry waiting for others).
            let mut lent: Vec<usize> = Vec::new();
            let mut handed = vec![false; n];
            let mut pick = picks.into_iter().cycle();
            let mut steps = 0usize;
            loop {
                loop {
                    let expected = naive_next(&nodes, &s, discipline, parallel);
                    let Some(i) = s.next_ready() else {
                        prop_assert_eq!(expected, None);
                        break;
                    };
                    prop_assert_eq!(Some(i), expected, "the scan over all nodes picks another");
                    prop_assert!(!handed[i], "node {} handed out twice", i);
                    prop_assert!(!nodes[i].done);
                    for &d in &nodes[i].deps {
                        prop_assert_eq!(s.state(d), NodeState::Done, "dep {} of {} not done", d, i);
                    }
                    if discipline == Discipline::Batch {
                        for k in 0..s.layer_of(i) {
                            prop_assert!(s.layer_finished(k));
                        }
                    }
                    handed[i] = true;
                    running.push(i);
                    prop_assert!(running.len() <= parallel);
                    prop_assert_eq!(s.running(), running.len());
                }
                if running.is_empty() && lent.is_empty() {
                    break;
                }
                // Lend a slot, take one back, or end a node (lent or not);
                // after a while only ends, so the run finishes.
                steps += 1;
                let p = pick.next().unwrap_or(0);
                let action = if steps > 200 { 3 } else { p % 4 };
                if action == 0 && !running.is_empty() {
                    let i = running.swap_remove(p / 4 % running.len());
                    s.lend(i);
                    lent.push(i);
                    prop_assert_eq!(s.state(i), NodeState::Running);
                    prop_assert_eq!(s.running(), running.len());
                    continue;
                }
                if action == 1 && !lent.is_empty() {
                    let k = p / 4 % lent.len();
                    let free = running.len() < parallel;
                    prop_assert_eq!(s.reclaim(lent[k]), free, "a slot is taken back iff one is free");
                    if free {
                        running.push(lent.swap_remove(k));
                    }
                    prop_assert_eq!(s.running(), running.len());
                    continue;
                }
                let i = if lent.is_empty() || (!running.is_empty() && p % 2 == 0) {
                    running.swap_remove(p / 4 % running.len())
                } else {
                    lent.swap_remove(p / 4 % lent.len())
                };
                if fails[i % fails.len()] {
                    s.fail(i);
                } else {
                    s.complete(i);
                }
                prop_assert_eq!(s.running(), running.len());
            }
            // Everything not blocked was handed out (or was done already),
            // and a blocked node has a failed or blocked dependency.
            for i in 0..n {
                match s.state(i) {
                    NodeState::Blocked => {
                        prop_assert!(!handed[i]);
                        prop_assert!(nodes[i].deps.iter().any(|&d| matches!(
                            s.state(d),
                            NodeState::Failed | NodeState::Blocked
                        )));
                    }
                    NodeState::Done => prop_assert!(handed[i] || nodes[i].done),
                    NodeState::Failed => prop_assert!(handed[i]),
                    other => prop_assert!(false, "node {} left {:?}", i, other),
                }
            }
        }
    }
}
