//! Commit over a tree (docs/protocol.md §6.4, "Commit over a tree"): in a
//! total-order group that commits, each member must learn the least of
//! every member's barrier report. Multicast by every member (the direct
//! way), that is N frames at each of N members per beacon interval, which
//! saturates large groups (`mcast-bench toc`: commit at 0.33 of total order
//! at 512 processes). From [`DEFAULT_FROM_NODES`] members on, the reports
//! climb a tree instead, as seed 002's switches aggregate them and as its
//! fallback for switches without a programmable data plane does in a host:
//! each member sends its parent, over the daemons' reliable links, the
//! least of its own report and its children's; the root, which so has the
//! least of all, multicasts it as the view's *stable point*, tagged with
//! the view's epoch, in its beacons. A member takes a stable point only for
//! the view it holds: every member of that view computes the same tree, and
//! every report in it was made in that view. In a group that does not
//! commit, the same tree carries the members' claims ([`claims`](super::claims),
//! "Stamps over the tree") and with them the busy members, whom the
//! root's point does not cover.
//!
//! Owns: the tree's shape for the view, the children's reports (and busy
//! members), what this node sent up (or, at the root, multicast), and the
//! stable point known here. May not touch: what a report is or when one is wanted (the mode's,
//! [`total`](super::total)), the links and the stream (the mode sends what
//! this module says is due).

use std::collections::BTreeMap;

use mcast_wire::NodeId;

/// Children per member.
pub const FANOUT: usize = 8;

/// Members in a view from which the reports climb the tree (below, each
/// member multicasts its own). Measured in `mcast-bench toc`
/// (docs/benchmarks.md, "Commit over a tree").
pub const DEFAULT_FROM_NODES: usize = 17;

/// A report up the tree: tag, view epoch (u64), the least report of the
/// sender's subtree (u64), then (claims) its busy members (u32 each).
const TAG_UP: u8 = b'U';
/// Bytes of a report up the tree.
pub const UP_LEN: usize = 1 + 8 + 8;

/// Reports kept for views this node has not installed yet (a child may
/// install a view first): at most this many (a view's children, a few
/// views ahead).
const MAX_EARLY_UPS: usize = 4 * FANOUT;

/// A report up the tree as bytes: then, where the tree carries claims, the
/// subtree's busy members (u32 each).
pub fn encode_up(epoch: u64, report: u64, busy: &[NodeId]) -> Vec<u8> {
    let mut v = Vec::with_capacity(UP_LEN + 4 * busy.len());
    v.push(TAG_UP);
    v.extend_from_slice(&epoch.to_be_bytes());
    v.extend_from_slice(&report.to_be_bytes());
    for id in busy {
        v.extend_from_slice(&id.to_be_bytes());
    }
    v
}

/// (view epoch, report, busy members) of a report up the tree.
pub fn decode_up(body: &[u8]) -> Result<(u64, u64, Vec<NodeId>), String> {
    if body.len() < UP_LEN || (body.len() - UP_LEN) % 4 != 0 || body[0] != TAG_UP {
        return Err(format!(
            "a total-order mode message of {} bytes that is not a report up the commit tree",
            body.len()
        ));
    }
    let word = |at: usize| u64::from_be_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    let busy = body[UP_LEN..]
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok((word(1), word(9), busy))
}

/// A child in the tree, as its parent knows it.
#[derive(Debug, Clone)]
struct Child {
    node: NodeId,
    /// The last report of its subtree in this view (None: none yet).
    report: Option<u64>,
    /// With it, the subtree's busy members (claims only).
    busy: Vec<NodeId>,
    /// Reports received from it in this view, raised or not: a stuck
    /// child repeats its last one, as evidence of life.
    ups: u64,
}

/// Where this node sits in its view's tree, and what it knows of it.
#[derive(Debug)]
pub struct CommitTree {
    /// Views of at least this many members use the tree.
    from_nodes: usize,
    /// The epoch of the view the shape is for (0: none yet).
    epoch: u64,
    /// The view uses the tree.
    on: bool,
    /// The tree's root (the only member whose stable points count).
    root: Option<NodeId>,
    /// This node's parent (None: the root, or no tree).
    parent: Option<NodeId>,
    /// This node's children in this view.
    children: Vec<Child>,
    /// Reports for views newer than `epoch`: (epoch, node) → report and
    /// busy members.
    early: BTreeMap<(u64, NodeId), (u64, Vec<NodeId>)>,
    /// The last value this node sent up, or (root) multicast, in this view.
    sent: u64,
    /// The busy members it sent with it (claims).
    sent_busy: Vec<NodeId>,
    /// A child's report rose since the last send.
    pushed: bool,
    /// When this node last sent (monotonic ns).
    last_send_ns: Option<u64>,
    /// The view's stable point as known here: the root's multicast, or
    /// (root) its own aggregate.
    stable: Option<u64>,
    /// (Claims) the busy members that go with it: their own stamps bound
    /// them, not the point.
    stable_busy: Vec<NodeId>,
    /// Counters: reports sent up (or stable points multicast), received,
    /// stable points taken, and reports refused or dropped.
    pub ups_sent: u64,
    pub ups_received: u64,
    pub stables_received: u64,
    pub ups_dropped: u64,
}

impl CommitTree {
    /// No view yet; views of at least `from_nodes` members use the tree
    /// (`usize::MAX`: never).
    pub fn new(from_nodes: usize) -> CommitTree {
        CommitTree {
            from_nodes: from_nodes.max(2),
            epoch: 0,
            on: false,
            root: None,
            parent: None,
            children: Vec::new(),
            early: BTreeMap::new(),
            sent: 0,
            sent_busy: Vec::new(),
            pushed: false,
            last_send_ns: None,
            stable: None,
            stable_busy: Vec::new(),
            ups_sent: 0,
            ups_received: 0,
            stables_received: 0,
            ups_dropped: 0,
        }
    }

    /// The view of `epoch` at node `me`: itself and `remote`, rooted at
    /// `root` (the view's lowest node when the root is not in it). Every
    /// member computes the same tree: the root first, then the others in
    /// ascending order, each node `i`'s children at `FANOUT·i + 1` on.
    pub fn view(&mut self, epoch: u64, root: Option<NodeId>, me: NodeId, remote: &[NodeId]) {
        if epoch == self.epoch {
            return;
        }
        self.epoch = epoch;
        self.sent = 0;
        self.sent_busy.clear();
        self.pushed = false;
        self.stable = None;
        self.stable_busy.clear();
        self.root = None;
        self.parent = None;
        self.children.clear();
        let mut nodes: Vec<NodeId> = remote.iter().copied().chain([me]).collect();
        nodes.sort_unstable();
        nodes.dedup();
        self.on = nodes.len() >= self.from_nodes;
        // Reports for older views are of no use any more.
        self.early = self.early.split_off(&(epoch, 0));
        if !self.on {
            return;
        }
        let root = root.filter(|r| nodes.contains(r)).unwrap_or(nodes[0]);
        let at = nodes.iter().position(|&n| n == root).expect("there");
        nodes.remove(at);
        nodes.insert(0, root);
        self.root = Some(root);
        let i = nodes.iter().position(|&n| n == me).expect("there");
        self.parent = (i > 0).then(|| nodes[(i - 1) / FANOUT]);
        let first = FANOUT * i + 1;
        for &node in nodes.iter().skip(first).take(FANOUT) {
            let early = self.early.remove(&(epoch, node));
            self.pushed |= early.is_some();
            let ups = u64::from(early.is_some());
            let (report, busy) = early.map_or((None, Vec::new()), |(r, b)| (Some(r), b));
            self.children.push(Child {
                node,
                report,
                busy,
                ups,
            });
        }
    }

    /// The view uses the tree.
    pub fn on(&self) -> bool {
        self.on
    }

    /// This node is the tree's root.
    pub fn is_root(&self) -> bool {
        self.on && self.parent.is_none()
    }

    /// This node's parent in the tree (None: the root, or no tree).
    pub fn parent(&self) -> Option<NodeId> {
        self.parent
    }

    /// The epoch of the view the tree is for.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// `from` reports `report` for its subtree in view `epoch`. Err: `from`
    /// is not a child of this node in the view it names.
    pub fn up_received(
        &mut self,
        from: NodeId,
        epoch: u64,
        report: u64,
        busy: Vec<NodeId>,
    ) -> Result<(), String> {
        self.ups_received += 1;
        if epoch < self.epoch {
            return Ok(()); // an older view's: of no use
        }
        if epoch > self.epoch {
            if self.early.len() >= MAX_EARLY_UPS && !self.early.contains_key(&(epoch, from)) {
                self.ups_dropped += 1;
                return Ok(());
            }
            self.early.insert((epoch, from), (report, busy));
            return Ok(());
        }
        let Some(child) = self.children.iter_mut().find(|c| c.node == from) else {
            self.ups_dropped += 1;
            if !self.on {
                return Err(format!(
                    "node {from} sends its commit reports up a tree in view {epoch}, where this node sends its own to all: set commit_tree_from alike on every node"
                ));
            }
            return Err(format!(
                "a commit report from node {from}, not a child of this node in view {epoch}"
            ));
        };
        if child.report.is_none_or(|r| report > r) || child.busy != busy {
            self.pushed = true;
        }
        child.report = Some(report);
        child.busy = busy;
        child.ups += 1;
        Ok(())
    }

    /// The least report of this node's subtree with `own` as its own (None
    /// while a child has not reported in this view).
    pub fn aggregate(&self, own: u64) -> Option<u64> {
        self.children
            .iter()
            .try_fold(own, |least, c| Some(least.min(c.report?)))
    }

    /// The busy members of this node's subtree, sorted: its children's,
    /// and `own` (this node, when busy).
    pub fn aggregate_busy(&self, own: Option<NodeId>) -> Vec<NodeId> {
        let mut busy: Vec<NodeId> = self
            .children
            .iter()
            .flat_map(|c| c.busy.iter().copied())
            .chain(own)
            .collect();
        busy.sort_unstable();
        busy.dedup();
        busy
    }

    /// The value to send now (up, or multicast at the root), if one is due:
    /// the subtree's aggregate rose above the last one sent (or, with
    /// claims, its busy members changed), because this node's report is
    /// wanted (`own_wanted`) or a child's changed, and a quarter of
    /// `interval_ns` passed since the last send.
    pub fn due(
        &self,
        own: u64,
        own_busy: Option<NodeId>,
        own_wanted: bool,
        now_ns: u64,
        interval_ns: u64,
    ) -> Option<u64> {
        let at = self.due_at(own, own_busy, own_wanted, interval_ns)?;
        (now_ns >= at).then(|| self.aggregate(own)).flatten()
    }

    /// When a send is due (see [`Self::due`]), if one is.
    pub fn due_at(
        &self,
        own: u64,
        own_busy: Option<NodeId>,
        own_wanted: bool,
        interval_ns: u64,
    ) -> Option<u64> {
        if !self.on || !(own_wanted || self.pushed) {
            return None;
        }
        let agg = self.aggregate(own)?;
        let changed = agg > self.sent || self.aggregate_busy(own_busy) != self.sent_busy;
        changed.then(|| self.last_send_ns.map_or(0, |t| t + interval_ns / 4))
    }

    /// (Not the root) this node holds a message stuck and has sent
    /// nothing up for two intervals: it repeats its last report
    /// ([`Self::last_sent`]), so that its parent knows it lives.
    pub fn keepalive_due(&self, now_ns: u64, interval_ns: u64) -> bool {
        self.on
            && self.parent.is_some()
            && self
                .last_send_ns
                .is_none_or(|t| now_ns >= t + 2 * interval_ns)
    }

    /// When [`Self::keepalive_due`] will be (for a stuck node).
    pub fn keepalive_at(&self, interval_ns: u64) -> Option<u64> {
        (self.on && self.parent.is_some())
            .then(|| self.last_send_ns.map_or(0, |t| t + 2 * interval_ns))
    }

    /// The children whose subtree has not reported `ts` yet, each with the
    /// number of reports it sent in this view (its evidence of life for the
    /// failure detector's watch, `mode::silence`).
    pub fn lagging(&self, ts: u64) -> impl Iterator<Item = (NodeId, u64)> + '_ {
        self.children
            .iter()
            .filter(move |c| c.report.is_none_or(|r| r < ts))
            .map(|c| (c.node, c.ups))
    }

    /// The tree's root (None: no tree).
    pub fn root(&self) -> Option<NodeId> {
        self.root.filter(|_| self.on)
    }

    /// The last value this node sent up, or (root) multicast, in this
    /// view (0: none).
    pub fn last_sent(&self) -> u64 {
        self.sent
    }

    /// The busy members sent with [`Self::last_sent`].
    pub fn last_sent_busy(&self) -> &[NodeId] {
        &self.sent_busy
    }

    /// `value` went up (or, at the root, out) at `now_ns`, with `busy`.
    pub fn sent(&mut self, value: u64, busy: Vec<NodeId>, now_ns: u64) {
        self.sent = value;
        self.sent_busy = busy;
        self.pushed = false;
        self.last_send_ns = Some(now_ns);
        self.ups_sent += 1;
    }

    /// (Root) its own aggregate: every member's least report in the view
    /// (reports only grow). With claims (`own_busy`: this node if busy),
    /// the least claim of the members not busy and the busy members, both
    /// as they are now: the point may fall when a busy member turns idle,
    /// and is used with its list only.
    pub fn settle_root(&mut self, own: u64, claims: Option<Option<NodeId>>) {
        if !self.is_root() {
            return;
        }
        let Some(agg) = self.aggregate(own) else {
            return;
        };
        match claims {
            None => self.stable = Some(self.stable.map_or(agg, |s| s.max(agg))),
            Some(own_busy) => {
                self.stable = Some(agg);
                self.stable_busy = self.aggregate_busy(own_busy);
            }
        }
    }

    /// `from` multicast `stable` for view `epoch` (with claims, `busy` the
    /// busy members that go with it): taken from the view's root, for that
    /// view only.
    pub fn stable_heard(
        &mut self,
        from: NodeId,
        epoch: u64,
        stable: u64,
        busy: Option<Vec<NodeId>>,
    ) {
        self.stables_received += 1;
        if self.on && epoch == self.epoch && self.root == Some(from) {
            match busy {
                None => self.stable = Some(self.stable.map_or(stable, |s| s.max(stable))),
                Some(busy) => {
                    self.stable = Some(stable);
                    self.stable_busy = busy;
                }
            }
        }
    }

    /// At or below this, every member of the view holds every message
    /// (None: not known in this view); with claims, of the members not
    /// [`Self::stable_busy`].
    pub fn stable(&self) -> Option<u64> {
        self.stable
    }

    /// (Claims) the busy members that go with [`Self::stable`].
    pub fn stable_busy(&self) -> &[NodeId] {
        &self.stable_busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree of `n` nodes 1..=n rooted at `root`, as `me` sees it.
    fn tree(n: u32, root: NodeId, me: NodeId) -> CommitTree {
        let remote: Vec<NodeId> = (1..=n).filter(|&v| v != me).collect();
        let mut t = CommitTree::new(2);
        t.view(1, Some(root), me, &remote);
        t
    }

    #[test]
    fn every_member_has_one_parent_and_the_root_reaches_all() {
        for n in [2, 9, 10, 73, 200] {
            let root = 5.min(n);
            let mut reached = vec![root];
            let mut i = 0;
            while i < reached.len() {
                let t = tree(n, root, reached[i]);
                for c in &t.children {
                    assert_eq!(tree(n, root, c.node).parent(), Some(reached[i]));
                    reached.push(c.node);
                }
                i += 1;
            }
            reached.sort_unstable();
            assert_eq!(reached, (1..=n).collect::<Vec<_>>(), "{n} nodes");
            assert!(tree(n, root, root).is_root());
        }
    }

    #[test]
    fn the_aggregate_waits_for_every_child_and_is_their_least() {
        let mut t = tree(20, 1, 1);
        let kids: Vec<NodeId> = t.children.iter().map(|c| c.node).collect();
        assert_eq!(kids, (2..=9).collect::<Vec<_>>());
        for (k, &c) in kids.iter().enumerate() {
            assert_eq!(t.aggregate(100), None, "child {c} not yet reported");
            t.up_received(c, 1, 50 + k as u64, vec![]).unwrap();
        }
        assert_eq!(t.aggregate(100), Some(50));
        assert_eq!(t.aggregate(40), Some(40));
        t.settle_root(100, None);
        assert_eq!(t.stable(), Some(50));
        // A report from a node that is not a child is refused.
        assert!(t.up_received(15, 1, 99, vec![]).is_err());
        // A node whose view has no tree says why a report is refused.
        let mut small = CommitTree::new(DEFAULT_FROM_NODES);
        small.view(1, Some(1), 1, &[2, 3]);
        let e = small.up_received(2, 1, 5, vec![]).unwrap_err();
        assert!(e.contains("commit_tree_from alike"), "{e}");
    }

    #[test]
    fn sends_are_due_when_the_aggregate_rises_at_most_four_per_interval() {
        let mut t = tree(20, 1, 9); // a leaf: 9's children would start at 73
        assert_eq!(t.parent(), Some(1));
        assert_eq!(t.due(10, None, false, 0, 100), None, "nothing wanted");
        assert_eq!(t.due(10, None, true, 0, 100), Some(10));
        t.sent(10, vec![], 0);
        assert_eq!(t.due(10, None, true, 5, 100), None, "no rise");
        assert_eq!(
            t.due(20, None, true, 5, 100),
            None,
            "within a quarter interval"
        );
        assert_eq!(t.due_at(20, None, true, 100), Some(25));
        assert_eq!(t.due(20, None, true, 25, 100), Some(20));
    }

    #[test]
    fn reports_and_stable_points_count_for_their_own_view_only() {
        let mut t = tree(20, 1, 2);
        // A child reports for view 2 before this node installs it.
        let kids: Vec<NodeId> = t.children.iter().map(|c| c.node).collect();
        assert_eq!(kids, (10..=17).collect::<Vec<_>>());
        for &c in &kids {
            t.up_received(c, 2, 7, vec![]).unwrap();
        }
        t.stable_heard(1, 2, 1_000, None);
        assert_eq!(t.stable(), None, "a stable point of a view not held here");
        t.stable_heard(3, 1, 6, None);
        assert_eq!(t.stable(), None, "a stable point from a node not the root");
        t.stable_heard(1, 1, 5, None);
        assert_eq!(t.stable(), Some(5));
        let remote: Vec<NodeId> = (1..=20).filter(|&v| v != 2).collect();
        t.view(2, Some(1), 2, &remote);
        assert_eq!(t.stable(), None, "the old view's stable point is gone");
        assert_eq!(t.aggregate(9), Some(7), "the early reports count now");
        t.up_received(10, 1, 1, vec![]).unwrap();
        assert_eq!(t.aggregate(9), Some(7), "an old view's report is ignored");
    }

    #[test]
    fn small_views_multicast_their_reports() {
        let remote: Vec<NodeId> = (2..=16).collect();
        let mut t = CommitTree::new(DEFAULT_FROM_NODES);
        t.view(1, Some(1), 1, &remote);
        assert!(!t.on());
        assert_eq!(t.due(5, None, true, 0, 100), None);
        let remote: Vec<NodeId> = (2..=17).collect();
        t.view(2, Some(1), 1, &remote);
        assert!(t.on() && t.is_root());
    }

    #[test]
    fn up_reports_round_trip_and_bad_ones_are_refused() {
        assert_eq!(decode_up(&encode_up(3, 77, &[])), Ok((3, 77, vec![])));
        assert_eq!(
            decode_up(&encode_up(3, 77, &[4, 9])),
            Ok((3, 77, vec![4, 9]))
        );
        assert!(decode_up(&encode_up(3, 77, &[])[..UP_LEN - 1]).is_err());
        assert!(decode_up(&encode_up(3, 77, &[4])[..UP_LEN + 3]).is_err());
        assert!(decode_up(b"X123456789abcdefg").is_err());
    }
}
