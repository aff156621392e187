//! The feedback tree (seed 004 §2.1): the group's nodes arranged as a
//! k-ary tree rooted at one node (the group agent in mcastd), over which
//! MAK's ACKs are aggregated instead of all reaching the sender.
//!
//! Every node has a *place*: place 0 is the root, and place `i`'s children
//! are `k·i + 1 ..= k·i + k`, its parent `(i − 1) / k`, as in a heap. A
//! place may be vacant (its node left): a node's parent is then its
//! nearest occupied ancestor place, so the children of a node that leaves
//! are adopted by its parent and keep their own subtrees (seed 004 §2.2,
//! Figure 4), and a node that takes the vacant place later becomes their
//! parent again. mcastd carries the places in the group's view (the agent
//! chooses them); [`FeedbackTree::new`] places the nodes in node order.
//! The tree is undirected for feedback: an ACK travels toward the data's
//! source, whoever it is, so each node's *upstream* for a source is its
//! neighbour on the path to that source, and its *downstream* are its other
//! neighbours (seed 004: "the direction depends on the source").
//!
//! Owns: the tree's shape and the paths in it. May not touch: any machine's
//! state (the MAK receiver and sender ask it for their neighbours), who
//! takes which place (the group agent decides).

use mcast_wire::NodeId;

/// Places at or beyond this are not honoured: such a node takes the lowest
/// vacant place instead (a view names at most 16,384 members, and a place
/// table this long stays small).
pub const MAX_PLACE: u32 = 1 << 16;

/// The tree of a view: who is whose neighbour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackTree {
    /// The node at each place (0: vacant); place 0 is the root, never vacant.
    places: Vec<NodeId>,
    /// Every node and its place, by node: the lookups.
    index: Vec<(NodeId, usize)>,
    /// Each occupied place's parent: its nearest occupied ancestor place.
    parent: Vec<Option<usize>>,
    /// Each occupied place's children (the places whose parent it is), in
    /// place order.
    children: Vec<Vec<usize>>,
    fanout: usize,
}

impl FeedbackTree {
    /// The tree of `nodes` (any order, duplicates and 0 ignored) rooted at
    /// `root` (added if `nodes` lacks it) with `fanout` children a node
    /// (at least 1: a chain), the others at places 1, 2, … in node order.
    pub fn new(root: NodeId, nodes: &[NodeId], fanout: u16) -> FeedbackTree {
        let mut rest: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|&n| n != root && n != 0)
            .collect();
        rest.sort_unstable();
        rest.dedup();
        let mut places = Vec::with_capacity(rest.len() + 1);
        places.push(root);
        places.extend(rest);
        FeedbackTree::shape(places, fanout)
    }

    /// The tree of `placed` (node, place) pairs rooted at `root` with
    /// `fanout`: every node at its place, vacant places skipped (a node's
    /// parent is its nearest occupied ancestor place). Every node that holds
    /// the same pairs computes the same tree, and it is a tree whatever the
    /// pairs say:
    /// - the root takes place 0; a node that held place 0 takes the root's
    ///   former place (the agent role moved);
    /// - a node listed twice keeps its lowest place; of two nodes claiming
    ///   one place the lower node keeps it;
    /// - a node without a place (a conflict, or one at [`MAX_PLACE`] or
    ///   beyond) takes the lowest vacant place, in node order, as a joining
    ///   node would; node 0 is ignored.
    pub fn with_places(root: NodeId, placed: &[(NodeId, u32)], fanout: u16) -> FeedbackTree {
        FeedbackTree::shape(FeedbackTree::resolve(root, placed), fanout)
    }

    /// [`FeedbackTree::with_places`] with `fanout` widened until the tree is
    /// at most `max_depth` levels below the root over its places, vacant
    /// ones included ([`FeedbackTree::fanout_for`]): the tree mcastd installs
    /// for a view, so a tree whose nodes kept their places after others left
    /// is no deeper than before.
    pub fn for_view(
        root: NodeId,
        placed: &[(NodeId, u32)],
        fanout: u16,
        max_depth: u8,
    ) -> FeedbackTree {
        let places = FeedbackTree::resolve(root, placed);
        let fanout = FeedbackTree::fanout_for(places.len(), fanout, max_depth);
        FeedbackTree::shape(places, fanout)
    }

    /// The node at each place (0: vacant), by the rules of
    /// [`FeedbackTree::with_places`].
    fn resolve(root: NodeId, placed: &[(NodeId, u32)]) -> Vec<NodeId> {
        let mut pairs: Vec<(NodeId, u32)> =
            placed.iter().copied().filter(|&(n, _)| n != 0).collect();
        // Each node's lowest place.
        pairs.sort_unstable();
        pairs.dedup_by_key(|&mut (n, _)| n);
        let root_place = pairs.iter().find(|&&(n, _)| n == root).map(|&(_, p)| p);
        let mut by_place: Vec<(u32, NodeId)> = Vec::with_capacity(pairs.len());
        for &(n, p) in &pairs {
            let p = if n == root {
                0
            } else if p == 0 {
                // The former root takes the new root's place (or none).
                root_place.filter(|&q| q != 0).unwrap_or(MAX_PLACE)
            } else {
                p
            };
            by_place.push((p, n));
        }
        if root_place.is_none() {
            by_place.push((0, root));
        }
        by_place.sort_unstable();
        let mut places: Vec<NodeId> = Vec::new();
        let mut unplaced: Vec<NodeId> = Vec::new();
        for (p, n) in by_place {
            let p = p as usize;
            if p >= MAX_PLACE as usize || places.get(p).is_some_and(|&o| o != 0) {
                unplaced.push(n);
                continue;
            }
            if places.len() <= p {
                places.resize(p + 1, 0);
            }
            places[p] = n;
        }
        unplaced.sort_unstable();
        let mut p = 0;
        for n in unplaced {
            p += 1;
            while places.get(p).is_some_and(|&o| o != 0) {
                p += 1;
            }
            if places.len() <= p {
                places.resize(p + 1, 0);
            }
            places[p] = n;
        }
        places
    }

    /// Derives the parents and children of `places` (place 0 occupied).
    fn shape(places: Vec<NodeId>, fanout: u16) -> FeedbackTree {
        let fanout = usize::from(fanout.max(1));
        let mut parent = vec![None; places.len()];
        let mut children = vec![Vec::new(); places.len()];
        for i in 1..places.len() {
            if places[i] == 0 {
                continue;
            }
            let mut p = (i - 1) / fanout;
            while p != 0 && places[p] == 0 {
                p = (p - 1) / fanout;
            }
            parent[i] = Some(p);
            children[p].push(i);
        }
        let mut index: Vec<(NodeId, usize)> = places
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n != 0)
            .map(|(i, &n)| (n, i))
            .collect();
        index.sort_unstable();
        FeedbackTree {
            places,
            index,
            parent,
            children,
            fanout,
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
        self.places[0]
    }

    /// Children a node, vacant places aside (a node that adopted the
    /// children of a vacant place has more).
    pub fn fanout(&self) -> u16 {
        self.fanout as u16
    }

    /// Nodes in the tree.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Never: the root is always there.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Places, occupied or vacant, up to the last occupied one.
    pub fn places(&self) -> usize {
        self.places.len()
    }

    /// The place of `node` (`None`: not in the tree).
    pub fn place(&self, node: NodeId) -> Option<usize> {
        self.position(node)
    }

    fn position(&self, node: NodeId) -> Option<usize> {
        let i = self.index.binary_search_by_key(&node, |&(n, _)| n).ok()?;
        Some(self.index[i].1)
    }

    fn parent_of(&self, i: usize) -> Option<usize> {
        self.parent[i]
    }

    fn children_of(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.children[i].iter().copied()
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
        self.parent_of(i).map(|p| self.places[p])
    }

    /// The children of `node` in the rooted tree.
    pub fn children(&self, node: NodeId) -> Vec<NodeId> {
        match self.position(node) {
            Some(i) => self.children_of(i).map(|c| self.places[c]).collect(),
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
                return Some(self.places[i]);
            }
            i = p;
        }
        self.parent_of(l).map(|p| self.places[p])
    }

    /// `local`'s neighbours other than its upstream for `source`: the nodes
    /// whose feedback about `source`'s data `local` merges into its own.
    pub fn downstream(&self, source: NodeId, local: NodeId) -> Vec<NodeId> {
        let Some(l) = self.position(local) else {
            return Vec::new();
        };
        let up = self.upstream(source, local);
        let parent = self.parent_of(l).map(|p| self.places[p]);
        parent
            .into_iter()
            .chain(self.children_of(l).map(|c| self.places[c]))
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
            out.push(t.places[i]);
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

    /// For every source among nodes 1..=n: every other node is beyond
    /// exactly one of the source's neighbours, and following upstream from
    /// anywhere reaches the source.
    fn assert_a_tree_from_every_source(t: &FeedbackTree, n: u32, what: &str) {
        for source in 1..=n {
            let mut seen: Vec<NodeId> = t
                .downstream(source, source)
                .into_iter()
                .flat_map(|nb| beyond(t, source, nb))
                .collect();
            seen.sort_unstable();
            let others: Vec<NodeId> = (1..=n).filter(|&x| x != source).collect();
            assert_eq!(seen, others, "{what} source {source}");
            for start in 1..=n {
                let mut at = start;
                let mut hops = 0;
                while let Some(up) = t.upstream(source, at) {
                    at = up;
                    hops += 1;
                    assert!(hops <= n, "{what}: a cycle from {start}");
                }
                assert_eq!(at, source, "{what}");
            }
        }
    }

    #[test]
    fn every_node_is_beyond_exactly_one_neighbour_of_the_source() {
        for (n, k) in [(1, 2), (2, 2), (7, 2), (100, 2), (100, 3), (33, 1)] {
            for root in [1, n / 2 + 1, n] {
                assert_a_tree_from_every_source(
                    &tree(n, root, k),
                    n,
                    &format!("n {n} k {k} root {root}"),
                );
            }
        }
    }

    #[test]
    fn a_vacant_places_children_are_adopted_by_its_parent_and_a_joiner_takes_it_back() {
        // Root 1; places 1..=6 held by 2..=7 (binary): 2 has 4 and 5.
        let full: Vec<(NodeId, u32)> = (1..=7).map(|n| (n, n - 1)).collect();
        let t = FeedbackTree::with_places(1, &full, 2);
        assert_eq!(t, tree(7, 1, 2), "places in node order are the plain tree");
        assert_eq!(t.children(2), vec![4, 5]);
        // 2 leaves: 4 and 5 move to the root, nobody else moves.
        let left: Vec<(NodeId, u32)> = full.iter().copied().filter(|&(n, _)| n != 2).collect();
        let t = FeedbackTree::with_places(1, &left, 2);
        assert_eq!(t.children(1), vec![3, 4, 5]);
        assert_eq!((t.parent(4), t.parent(5)), (Some(1), Some(1)));
        assert_eq!(t.children(3), vec![6, 7]);
        assert_eq!((t.len(), t.places(), t.place(4)), (6, 7, Some(3)));
        // A vacant leaf place is skipped, and so are vacant places in a row:
        // 7 at place 6 with 3 (place 2) gone hangs off the root.
        let t = FeedbackTree::with_places(1, &[(1, 0), (4, 3), (7, 6)], 2);
        assert_eq!(t.children(1), vec![4, 7]);
        // 9 joins at the vacant place 1 and takes 4 and 5 back.
        let mut joined = left.clone();
        joined.push((9, 1));
        let t = FeedbackTree::with_places(1, &joined, 2);
        assert_eq!((t.children(1), t.children(9)), (vec![9, 3], vec![4, 5]));
    }

    #[test]
    fn the_root_takes_place_zero_and_bad_places_fall_back_to_the_lowest_vacancy() {
        let full: Vec<(NodeId, u32)> = (1..=7).map(|n| (n, n - 1)).collect();
        // The agent role moved from 1 to 5 (place 4): 1 takes place 4.
        let t = FeedbackTree::with_places(5, &full, 2);
        assert_eq!((t.root(), t.place(1), t.parent(1)), (5, Some(4), Some(2)));
        // A root without a place gets 0; the former holder of 0 is unplaced
        // and takes the lowest vacancy (none here: it becomes a leaf).
        let t = FeedbackTree::with_places(9, &full, 2);
        assert_eq!((t.root(), t.place(1), t.len()), (9, Some(7), 8));
        // Two nodes at one place: the lower keeps it, the other takes the
        // lowest vacancy; a node listed twice keeps its lowest place; a
        // place out of range counts as none; node 0 is ignored.
        let t = FeedbackTree::with_places(
            1,
            &[
                (1, 0),
                (3, 2),
                (2, 2),
                (4, 9),
                (4, 5),
                (6, MAX_PLACE),
                (0, 1),
            ],
            2,
        );
        assert_eq!(
            [2, 3, 4, 6].map(|n| t.place(n)),
            [Some(2), Some(1), Some(5), Some(3)]
        );
        assert!(!t.contains(0));
    }

    #[test]
    fn any_placement_is_a_tree_every_node_reaches_every_source_through() {
        // Pseudo-random layouts with vacancies, conflicts and a moved root.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..300 {
            let n = next(40) as u32 + 1;
            let k = next(3) as u16 + 1;
            let placed: Vec<(NodeId, u32)> = (1..=n).map(|v| (v, next(60) as u32)).collect();
            let root = next(u64::from(n)) as u32 + 1;
            let t = FeedbackTree::with_places(root, &placed, k);
            assert_eq!((t.len(), t.root()), (n as usize, root));
            assert_a_tree_from_every_source(&t, n, &format!("{placed:?} root {root} k {k}"));
        }
    }

    #[test]
    fn a_views_tree_is_widened_over_its_places_vacant_ones_included() {
        // 31 nodes at places 0..=31 with place 5 vacant: 32 places need
        // fanout 3 to stay within four levels, though 31 nodes would not.
        let placed: Vec<(NodeId, u32)> = (0..=31u32)
            .filter(|&p| p != 5)
            .map(|p| (p + 1, p))
            .collect();
        let t = FeedbackTree::for_view(1, &placed, 2, 4);
        assert_eq!((t.len(), t.places(), t.fanout()), (31, 32, 3));
        assert_eq!(t, FeedbackTree::with_places(1, &placed, 3));
        assert!(t.levels_below(1, 1) <= 4);
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
