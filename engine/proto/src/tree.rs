//! The feedback tree (seed 004 §2.1): the group's nodes arranged as a
//! complete k-ary tree rooted at one node (the group agent in mcastd), over
//! which MAK's ACKs are aggregated instead of all reaching the sender.
//!
//! Position 0 is the root; the other nodes follow in node order, so every
//! node that holds the same view computes the same tree. Position `i`'s
//! children are `k·i + 1 ..= k·i + k`, its parent `(i − 1) / k`. The tree
//! is undirected for feedback: an ACK travels toward the data's source,
//! whoever it is, so each node's *upstream* for a source is its neighbour
//! on the path to that source, and its *downstream* are its other
//! neighbours (seed 004: "the direction depends on the source").
//!
//! Owns: the tree's shape and the paths in it. May not touch: any machine's
//! state (the MAK receiver and sender ask it for their neighbours).

use mcast_wire::NodeId;

/// The tree of a view: who is whose neighbour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackTree {
    /// The nodes by position: the root, then the others in node order.
    order: Vec<NodeId>,
    fanout: usize,
}

impl FeedbackTree {
    /// The tree of `nodes` (any order, duplicates and 0 ignored) rooted at
    /// `root` (added if `nodes` lacks it) with `fanout` children a node
    /// (at least 1: a chain).
    pub fn new(root: NodeId, nodes: &[NodeId], fanout: u16) -> FeedbackTree {
        let mut rest: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|&n| n != root && n != 0)
            .collect();
        rest.sort_unstable();
        rest.dedup();
        let mut order = Vec::with_capacity(rest.len() + 1);
        order.push(root);
        order.extend(rest);
        FeedbackTree {
            order,
            fanout: usize::from(fanout.max(1)),
        }
    }

    /// The fanout to use for `nodes` nodes: `fanout` (at least 2), widened
    /// until the tree is at most `max_depth` levels below the root (0: no
    /// limit). Each level adds a hop to every ACK round's feedback lag, and
    /// the window must cover the round (docs/protocol.md §3.4).
    pub fn fanout_for(nodes: usize, fanout: u16, max_depth: u8) -> u16 {
        let mut k = fanout.max(2);
        if max_depth == 0 {
            return k;
        }
        let below = |k: u16| {
            let (mut total, mut level) = (0usize, 1usize);
            for _ in 0..max_depth {
                level = level.saturating_mul(usize::from(k));
                total = total.saturating_add(level);
            }
            total
        };
        while below(k) + 1 < nodes && k < u16::MAX {
            k += 1;
        }
        k
    }

    /// The root.
    pub fn root(&self) -> NodeId {
        self.order[0]
    }

    /// Children a node.
    pub fn fanout(&self) -> u16 {
        self.fanout as u16
    }

    /// Nodes in the tree.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Never: the root is always there.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn position(&self, node: NodeId) -> Option<usize> {
        if node == self.order[0] {
            return Some(0);
        }
        self.order[1..].binary_search(&node).ok().map(|i| i + 1)
    }

    fn parent_of(&self, i: usize) -> Option<usize> {
        (i > 0).then(|| (i - 1) / self.fanout)
    }

    fn children_of(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let first = i * self.fanout + 1;
        (first..first + self.fanout).take_while(|&c| c < self.order.len())
    }

    fn neighbours_of(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.parent_of(i).into_iter().chain(self.children_of(i))
    }

    /// True when `node` is in the tree.
    pub fn contains(&self, node: NodeId) -> bool {
        self.position(node).is_some()
    }

    /// The parent of `node` in the rooted tree (`None` for the root or a
    /// node not in the tree).
    pub fn parent(&self, node: NodeId) -> Option<NodeId> {
        let i = self.position(node)?;
        self.parent_of(i).map(|p| self.order[p])
    }

    /// The children of `node` in the rooted tree.
    pub fn children(&self, node: NodeId) -> Vec<NodeId> {
        match self.position(node) {
            Some(i) => self.children_of(i).map(|c| self.order[c]).collect(),
            None => Vec::new(),
        }
    }

    /// The next node from `local` on the path to `source`: where `local`
    /// sends feedback about `source`'s data. `None` at the source itself or
    /// when either is not in the tree.
    pub fn upstream(&self, source: NodeId, local: NodeId) -> Option<NodeId> {
        let (s, l) = (self.position(source)?, self.position(local)?);
        if s == l {
            return None;
        }
        // Walk up from the source: if `local` is an ancestor, the path goes
        // down to the child of `local` on the way; else up to its parent.
        let mut i = s;
        while let Some(p) = self.parent_of(i) {
            if p == l {
                return Some(self.order[i]);
            }
            i = p;
        }
        self.parent_of(l).map(|p| self.order[p])
    }

    /// `local`'s neighbours other than its upstream for `source`: the nodes
    /// whose feedback about `source`'s data `local` merges into its own.
    pub fn downstream(&self, source: NodeId, local: NodeId) -> Vec<NodeId> {
        let Some(l) = self.position(local) else {
            return Vec::new();
        };
        let up = self.upstream(source, local);
        let parent = self.parent_of(l).map(|p| self.order[p]);
        parent
            .into_iter()
            .chain(self.children_of(l).map(|c| self.order[c]))
            .filter(|&n| Some(n) != up)
            .collect()
    }

    /// The longest path in hops from `local` down through its downstream
    /// neighbours (0 for a leaf of the source's view): how many levels of
    /// aggregation `local` waits on.
    pub fn levels_below(&self, source: NodeId, local: NodeId) -> u32 {
        let Some(l) = self.position(local) else {
            return 0;
        };
        let up = self.upstream(source, local).and_then(|u| self.position(u));
        let mut deepest = 0;
        // (position, the position it was reached from, depth)
        let mut stack = vec![(l, up.unwrap_or(usize::MAX), 0u32)];
        while let Some((i, from, d)) = stack.pop() {
            deepest = deepest.max(d);
            let next: Vec<usize> = self.neighbours_of(i).filter(|&n| n != from).collect();
            stack.extend(next.into_iter().map(|n| (n, i, d + 1)));
        }
        deepest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nodes whose feedback reaches `local` through `neighbour`
    /// (the part of the tree beyond it, as seen from `local`), in node
    /// order.
    fn beyond(t: &FeedbackTree, local: NodeId, neighbour: NodeId) -> Vec<NodeId> {
        let (Some(l), Some(n)) = (t.position(local), t.position(neighbour)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut stack = vec![(n, l)];
        while let Some((i, from)) = stack.pop() {
            out.push(t.order[i]);
            let next: Vec<usize> = t.neighbours_of(i).filter(|&c| c != from).collect();
            stack.extend(next.into_iter().map(|c| (c, i)));
        }
        out.sort_unstable();
        out
    }

    fn tree(n: u32, root: NodeId, k: u16) -> FeedbackTree {
        let nodes: Vec<NodeId> = (1..=n).collect();
        FeedbackTree::new(root, &nodes, k)
    }

    #[test]
    fn a_binary_tree_is_a_heap_of_the_root_then_node_order() {
        // Root 4; positions: 4, 1, 2, 3, 5, 6, 7.
        let t = tree(7, 4, 2);
        assert_eq!(t.children(4), vec![1, 2]);
        assert_eq!(t.children(1), vec![3, 5]);
        assert_eq!(t.children(2), vec![6, 7]);
        assert_eq!(t.parent(6), Some(2));
        assert_eq!(t.parent(4), None);
        assert!(t.children(7).is_empty());
    }

    #[test]
    fn feedback_flows_toward_the_source_whoever_it_is() {
        let t = tree(7, 4, 2);
        // Source at the root: everyone sends to its parent.
        assert_eq!(t.upstream(4, 6), Some(2));
        assert_eq!(t.upstream(4, 2), Some(4));
        assert_eq!(t.downstream(4, 2), vec![6, 7]);
        // Source at a leaf (6): its parent 2 takes from 4 and 7; 4 from 1.
        assert_eq!(t.upstream(6, 2), Some(6));
        assert_eq!(t.upstream(6, 4), Some(2));
        assert_eq!(t.upstream(6, 3), Some(1));
        assert_eq!(t.downstream(6, 2), vec![4, 7]);
        assert_eq!(t.downstream(6, 4), vec![1]);
        assert_eq!(t.downstream(6, 6), vec![2]);
        assert_eq!(t.upstream(6, 6), None);
    }

    #[test]
    fn every_node_is_beyond_exactly_one_neighbour_of_the_source() {
        for (n, k) in [(1, 2), (2, 2), (7, 2), (100, 2), (100, 3), (33, 1)] {
            for root in [1, n / 2 + 1, n] {
                let t = tree(n, root, k);
                for source in 1..=n {
                    let mut seen: Vec<NodeId> = t
                        .downstream(source, source)
                        .into_iter()
                        .flat_map(|nb| beyond(&t, source, nb))
                        .collect();
                    seen.sort_unstable();
                    let others: Vec<NodeId> = (1..=n).filter(|&x| x != source).collect();
                    assert_eq!(seen, others, "n {n} k {k} root {root} source {source}");
                    // Following upstream from anywhere reaches the source.
                    for start in 1..=n {
                        let mut at = start;
                        let mut hops = 0;
                        while let Some(up) = t.upstream(source, at) {
                            at = up;
                            hops += 1;
                            assert!(hops <= n, "a cycle from {start}");
                        }
                        assert_eq!(at, source);
                    }
                }
            }
        }
    }

    #[test]
    fn the_fanout_widens_only_as_far_as_the_depth_limit_needs() {
        // Binary up to 31 nodes (1 + 2 + 4 + 8 + 16) at four levels.
        assert_eq!(FeedbackTree::fanout_for(31, 2, 4), 2);
        assert_eq!(FeedbackTree::fanout_for(32, 2, 4), 3);
        // 513 nodes: 4 + 16 + 64 + 256 = 340 is short, 5 + … + 625 is not.
        assert_eq!(FeedbackTree::fanout_for(513, 2, 4), 5);
        assert_eq!(FeedbackTree::fanout_for(1025, 2, 4), 6);
        assert_eq!(FeedbackTree::fanout_for(513, 2, 0), 2);
        assert_eq!(FeedbackTree::fanout_for(513, 8, 4), 8);
        let t = tree(513, 1, FeedbackTree::fanout_for(513, 2, 4));
        assert_eq!(t.levels_below(1, 1), 4);
    }

    #[test]
    fn levels_below_count_the_deepest_path_away_from_the_source() {
        let t = tree(7, 4, 2);
        assert_eq!(t.levels_below(4, 4), 2);
        assert_eq!(t.levels_below(4, 1), 1);
        assert_eq!(t.levels_below(4, 3), 0);
        // From leaf 6 as source, node 2 reaches 4 → 1 → 3: three levels.
        assert_eq!(t.levels_below(6, 2), 3);
        assert_eq!(t.levels_below(6, 6), 4);
    }
}
