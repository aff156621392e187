//! The group barrier (seed 004 §2.1, Figure 3; docs/protocol.md §6.2): a
//! client's `barrier(group)` returns once every member of the group has
//! called it. The daemons of the group's nodes form the group's tree (the
//! same shape as the feedback tree, `tree`, rooted at the group agent, at
//! least binary); each reports up once its own waiting members and every
//! child's subtree have arrived, and the root releases: the release goes
//! down the tree, each node releasing its own members and passing it on.
//!
//! Barriers are numbered by the root from 1. A node learns the number from
//! a release or from its parent's ask, so a node that joins the group
//! mid-way takes part from the next report on; a report counts only for
//! the number it names, so a report of an earlier barrier, still in flight
//! across a change of the tree, never counts for the next.
//!
//! Owns: each group's barrier state ([`GroupBarrier`]) and what it sends.
//! May not touch: the view and the tree (it is given the node's place in
//! them), the clients (it hands back who to release).

use std::collections::{BTreeMap, BTreeSet};

use mcast_engine::{EngineError, Transport};
use mcast_ipc::{ClientId, ErrorCode, Response};
use mcast_wire::{GroupId, NodeId};

use super::tree::feedback_tree;
use super::Daemon;
use crate::links::{BarrierMsg, LinkMessage};

/// This node's place in the group when a barrier step runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Place<'a> {
    /// This node.
    pub node: NodeId,
    pub parent: Option<NodeId>,
    pub children: &'a [NodeId],
    /// The group's local members.
    pub members: &'a [ClientId],
    /// The nodes of the group's view.
    pub view: &'a [NodeId],
}

/// What a barrier step asks the daemon to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Act {
    /// A barrier message to a node (a release names the nodes dropped).
    Send(NodeId, BarrierMsg, u64, Vec<NodeId>),
    /// Answer these waiting requests: the barrier is complete, without
    /// the nodes `dropped`.
    Release {
        clients: Vec<(ClientId, u64)>,
        dropped: Vec<NodeId>,
    },
}

/// One group's barrier at this node.
#[derive(Debug, Clone, Default)]
pub(super) struct GroupBarrier {
    /// The barrier this node is at (0: not known yet).
    current: u64,
    /// Local members waiting, with their request ids.
    waiting: Vec<(ClientId, u64)>,
    /// Children whose subtree has reached `current`, with the nodes each
    /// report covers (views differ between nodes while they change: a
    /// report says which subtree it speaks for).
    arrived: BTreeMap<NodeId, Vec<NodeId>>,
    /// The parent told that this subtree reached a barrier: the parent, the
    /// barrier and the nodes covered (a wider subtree is told again).
    told: Option<(NodeId, u64, Vec<NodeId>)>,
    /// Children asked about `current`.
    asked: BTreeSet<NodeId>,
    /// The view's nodes when the first local member arrived.
    started: Option<Vec<NodeId>>,
    /// Barriers released here.
    released: u64,
}

impl GroupBarrier {
    /// The barrier's state for `mcast stat`.
    pub fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({
            "number": self.current,
            "waiting": self.waiting.len(),
            "children_arrived": self.arrived.len(),
            "released": self.released,
        })
    }

    /// Local member `client` (request `req`) arrives.
    pub fn wait(&mut self, client: ClientId, req: u64, at: Place<'_>) -> Vec<Act> {
        self.waiting.retain(|&(c, _)| c != client);
        self.waiting.push((client, req));
        if self.started.is_none() {
            self.started = Some(at.view.to_vec());
        }
        self.step(at)
    }

    /// Local member `client` left the group or disconnected: it is no
    /// longer waited for (nor answered).
    pub fn member_gone(&mut self, client: ClientId, at: Place<'_>) -> Vec<Act> {
        self.waiting.retain(|&(c, _)| c != client);
        self.step(at)
    }

    /// The view (and with it the tree) changed: reports of nodes no longer
    /// children are dropped, a new parent is told again, new children asked.
    pub fn view_changed(&mut self, at: Place<'_>) -> Vec<Act> {
        self.arrived.retain(|c, _| at.children.contains(c));
        self.asked.clear();
        if self
            .told
            .as_ref()
            .is_some_and(|(p, _, _)| Some(*p) != at.parent)
        {
            self.told = None;
        }
        self.step(at)
    }

    /// A barrier message from node `from`.
    pub fn message(
        &mut self,
        from: NodeId,
        what: BarrierMsg,
        number: u64,
        dropped: &[NodeId],
        at: Place<'_>,
    ) -> Vec<Act> {
        let mut acts = Vec::new();
        match what {
            BarrierMsg::Arrived if at.children.contains(&from) && number != 0 => {
                if self.current != 0 && number > self.current {
                    // A child already at a later barrier: the release of
                    // this one reached it but not this node (the root that
                    // sent it failed on the way).
                    self.release(number - 1, Some(Vec::new()), at, &mut acts);
                }
                if self.current == 0 || number > self.current {
                    self.current = number;
                }
                if number == self.current {
                    self.arrived.insert(from, dropped.to_vec());
                } else if number < self.current {
                    // A child still at a barrier already released (the
                    // release passed it by while the tree changed): tell
                    // it where the group is.
                    acts.push(Act::Send(from, BarrierMsg::Ask, self.current, Vec::new()));
                }
            }
            BarrierMsg::Arrived
                if number == 0 && self.current != 0 && at.children.contains(&from) =>
            {
                // A child that does not know the number (this node's ask
                // reached it before it carried the group): ask it again.
                acts.push(Act::Send(from, BarrierMsg::Ask, self.current, Vec::new()));
            }
            BarrierMsg::Ask if number != 0 && self.current != 0 && number < self.current => {
                // The asker is behind: barrier `current − 1` was released
                // (its release was lost with a failed node). Tell it, and
                // answer for this subtree as below.
                acts.push(Act::Send(
                    from,
                    BarrierMsg::Release,
                    self.current - 1,
                    Vec::new(),
                ));
                if Some(from) == at.parent {
                    self.told = None;
                }
            }
            BarrierMsg::Ask if number != 0 => {
                // The root numbers barriers in order: barrier `number` in
                // progress means every one before it was released, whoever
                // says so (views reach nodes one at a time, so the sender
                // may not be this node's parent yet).
                if self.current != 0 && number > self.current {
                    self.release(number - 1, Some(Vec::new()), at, &mut acts);
                }
                if self.current == 0 || number > self.current {
                    self.current = number;
                }
                if Some(from) == at.parent {
                    // Asked by the parent: answer again (a parent still at
                    // an earlier barrier learns from the answer that it was
                    // released).
                    self.told = None;
                }
            }
            BarrierMsg::Release if number != 0 && number >= self.current => {
                self.release(number, Some(dropped.to_vec()), at, &mut acts);
            }
            _ => {}
        }
        acts.extend(self.step(at));
        acts
    }

    /// Reports up, asks down or releases, as far as what has arrived allows.
    fn step(&mut self, at: Place<'_>) -> Vec<Act> {
        let mut acts = Vec::new();
        let here = !self.waiting.is_empty()
            && at
                .members
                .iter()
                .all(|m| self.waiting.iter().any(|&(c, _)| c == *m));
        if !here {
            return acts;
        }
        if self.current == 0 {
            match at.parent {
                // The root numbers the barriers.
                None => self.current = 1,
                // Not told the number yet: the parent's ask will say it. Its
                // ask may have come before this node carried the group (and
                // was lost with it): ARRIVED 0 asks for the number, once per
                // parent.
                Some(p) => {
                    if self.told.as_ref().map(|t| t.0) != Some(p) {
                        acts.push(Act::Send(p, BarrierMsg::Arrived, 0, Vec::new()));
                        self.told = Some((p, 0, Vec::new()));
                    }
                    return acts;
                }
            }
        }
        for &c in at.children {
            if !self.arrived.contains_key(&c) && self.asked.insert(c) {
                acts.push(Act::Send(c, BarrierMsg::Ask, self.current, Vec::new()));
            }
        }
        if !at.children.iter().all(|c| self.arrived.contains_key(c)) {
            return acts;
        }
        // The nodes this subtree speaks for: this one and what its current
        // children's reports cover.
        let mut covered: Vec<NodeId> = at
            .children
            .iter()
            .filter_map(|c| self.arrived.get(c))
            .flatten()
            .copied()
            .chain([at.node])
            .collect();
        covered.sort_unstable();
        covered.dedup();
        match at.parent {
            // The root releases once the reports cover its whole view; a
            // child whose view still lacks some node reports again when
            // its subtree grows.
            None if at.view.iter().all(|n| covered.binary_search(n).is_ok()) => {
                self.release(self.current, None, at, &mut acts)
            }
            None => {}
            Some(p) => {
                let told = (p, self.current, covered);
                if self.told.as_ref() != Some(&told) {
                    acts.push(Act::Send(
                        p,
                        BarrierMsg::Arrived,
                        self.current,
                        told.2.clone(),
                    ));
                    self.told = Some(told);
                }
            }
        }
        acts
    }

    /// Barrier `number` is complete: release the local members, pass it
    /// down, and move on to the next. The root names the nodes dropped
    /// (`dropped` None): those of its view when the barrier began there
    /// that are no longer in it; the others pass the root's list on.
    fn release(
        &mut self,
        number: u64,
        dropped: Option<Vec<NodeId>>,
        at: Place<'_>,
        acts: &mut Vec<Act>,
    ) {
        let started = self.started.take().unwrap_or_default();
        let dropped = dropped.unwrap_or_else(|| {
            started
                .into_iter()
                .filter(|n| !at.view.contains(n))
                .collect()
        });
        acts.push(Act::Release {
            clients: std::mem::take(&mut self.waiting),
            dropped: dropped.clone(),
        });
        acts.extend(
            at.children
                .iter()
                .map(|&c| Act::Send(c, BarrierMsg::Release, number, dropped.clone())),
        );
        self.current = number + 1;
        self.arrived.clear();
        self.asked.clear();
        self.told = None;
        self.released += 1;
    }
}

impl<T: Transport> Daemon<T> {
    /// Runs `f` on `group`'s barrier with this node's place, then does what
    /// it asks. Nothing when this node does not carry the group.
    fn with_barrier(
        &mut self,
        group: GroupId,
        f: impl FnOnce(&mut GroupBarrier, Place<'_>) -> Vec<Act>,
    ) {
        let node = self.node;
        let Some(lg) = self.local.get_mut(&group) else {
            return;
        };
        let view: Vec<NodeId> = lg.view.as_ref().map(|v| v.nodes()).unwrap_or_default();
        let tree = feedback_tree(lg.view.as_ref(), lg.tree_fanout.max(2), node);
        let children = tree.as_ref().map(|t| t.children(node)).unwrap_or_default();
        let place = Place {
            node,
            parent: tree.as_ref().and_then(|t| t.parent(node)),
            children: &children,
            members: &lg.members,
            view: &view,
        };
        let acts = f(&mut lg.barrier, place);
        for act in acts {
            match act {
                Act::Send(to, what, number, dropped) => self.send_link(
                    to,
                    LinkMessage::Barrier {
                        group,
                        what,
                        number,
                        dropped,
                    },
                ),
                Act::Release { clients, dropped } => {
                    for (client, req) in clients {
                        let dropped = dropped.clone();
                        self.clients.server.reply(
                            client,
                            req,
                            Response::Released { group, dropped },
                        );
                    }
                }
            }
        }
    }

    /// A client's Barrier request.
    pub(super) fn barrier_wait(&mut self, client: ClientId, req: u64, group: GroupId) {
        let member = self
            .local
            .get(&group)
            .is_some_and(|lg| lg.members.contains(&client));
        if !member {
            self.clients.server.reply(
                client,
                req,
                Response::error(
                    ErrorCode::UnknownGroup,
                    format!("this client is not a member of group {group}: join it first"),
                ),
            );
            return;
        }
        self.with_barrier(group, |b, at| b.wait(client, req, at));
    }

    /// A local member left `group` (or disconnected).
    pub(super) fn barrier_member_gone(&mut self, group: GroupId, client: ClientId) {
        self.with_barrier(group, |b, at| b.member_gone(client, at));
    }

    /// `group`'s view changed: the tree with it.
    pub(super) fn barrier_view_changed(&mut self, group: GroupId) -> Result<(), EngineError> {
        self.with_barrier(group, |b, at| b.view_changed(at));
        Ok(())
    }

    /// A barrier link message from peer `from`.
    pub(super) fn barrier_message(
        &mut self,
        from: NodeId,
        group: GroupId,
        what: BarrierMsg,
        number: u64,
        dropped: &[NodeId],
    ) {
        self.with_barrier(group, |b, at| b.message(from, what, number, dropped, at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcast_proto::FeedbackTree;
    use std::collections::{BTreeMap, VecDeque};

    /// Nodes 1..=n, one member each (client id = node), the tree rooted at
    /// 1; messages delivered in FIFO order per link, as the daemons' links do.
    struct Net {
        tree: FeedbackTree,
        view: Vec<NodeId>,
        nodes: BTreeMap<NodeId, GroupBarrier>,
        links: VecDeque<(NodeId, NodeId, BarrierMsg, u64, Vec<NodeId>)>,
        released: Vec<(NodeId, Vec<NodeId>)>,
    }

    impl Net {
        fn new(n: u32) -> Net {
            let view: Vec<NodeId> = (1..=n).collect();
            Net {
                tree: FeedbackTree::new(1, &view, 2),
                nodes: view.iter().map(|&v| (v, GroupBarrier::default())).collect(),
                view,
                links: VecDeque::new(),
                released: Vec::new(),
            }
        }

        fn run(&mut self, node: NodeId, f: impl FnOnce(&mut GroupBarrier, Place<'_>) -> Vec<Act>) {
            let children = self.tree.children(node);
            let members = [ClientId(u64::from(node))];
            let at = Place {
                node,
                parent: self.tree.parent(node),
                children: &children,
                members: &members,
                view: &self.view,
            };
            for act in f(self.nodes.get_mut(&node).unwrap(), at) {
                match act {
                    Act::Send(to, what, n, d) => self.links.push_back((node, to, what, n, d)),
                    Act::Release { clients, dropped } => {
                        for (c, _) in clients {
                            self.released.push((c.0 as NodeId, dropped.clone()));
                        }
                    }
                }
            }
        }

        fn wait(&mut self, node: NodeId) {
            self.run(node, |b, at| b.wait(ClientId(u64::from(node)), 1, at));
        }

        fn deliver_all(&mut self) {
            while let Some((from, to, what, n, d)) = self.links.pop_front() {
                if self.nodes.contains_key(&to) {
                    self.run(to, |b, at| b.message(from, what, n, &d, at));
                }
            }
        }

        fn fail(&mut self, node: NodeId) {
            self.nodes.remove(&node);
            self.view.retain(|&n| n != node);
            self.tree = FeedbackTree::new(1, &self.view, 2);
            for n in self.view.clone() {
                self.run(n, |b, at| b.view_changed(at));
            }
        }
    }

    #[test]
    fn nobody_is_released_before_everyone_arrives_and_everyone_is_released_once() {
        let mut net = Net::new(7);
        for round in 1..=3u64 {
            // Arrivals in an order that differs per round; the last is a leaf.
            let order: Vec<NodeId> = match round {
                1 => vec![1, 2, 3, 4, 5, 6, 7],
                2 => vec![7, 6, 5, 4, 3, 2, 1],
                _ => vec![4, 1, 6, 2, 7, 3, 5],
            };
            for (i, &n) in order.iter().enumerate() {
                net.wait(n);
                net.deliver_all();
                if i + 1 < order.len() {
                    assert!(
                        net.released.is_empty(),
                        "round {round}: released before {:?} arrived",
                        &order[i + 1..]
                    );
                }
            }
            let mut got: Vec<NodeId> = net
                .released
                .drain(..)
                .map(|(n, d)| {
                    assert!(d.is_empty());
                    n
                })
                .collect();
            got.sort_unstable();
            assert_eq!(got, (1..=7).collect::<Vec<_>>(), "round {round}");
            assert!(net.nodes.values().all(|b| b.released == round));
        }
    }

    #[test]
    fn an_interior_node_that_fails_is_dropped_and_the_survivors_are_released() {
        let mut net = Net::new(7);
        // Everyone but node 2 (interior: children 4 and 5) arrives.
        for n in [1, 3, 4, 5, 6, 7] {
            net.wait(n);
        }
        net.deliver_all();
        assert!(net.released.is_empty());
        net.fail(2);
        net.deliver_all();
        let mut got = net.released.clone();
        got.sort_unstable();
        let expect: Vec<(NodeId, Vec<NodeId>)> =
            [1, 3, 4, 5, 6, 7].iter().map(|&n| (n, vec![2])).collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn an_ask_that_comes_before_the_view_that_makes_its_sender_the_parent_is_not_lost() {
        let mut net = Net::new(4);
        // 1 → 2, 3; 2 → 4. Nodes 1, 3 and 4 wait; 2 never does and fails
        // before it answers node 4's request for the number (ARRIVED 0).
        for n in [1, 3] {
            net.wait(n);
        }
        net.deliver_all();
        net.nodes.remove(&2);
        net.wait(4);
        assert_eq!(
            net.links.pop_front(),
            Some((4, 2, BarrierMsg::Arrived, 0, vec![]))
        );
        // Node 1 learns of the failure first and asks its new child 4,
        // whose view still shows 2 as its parent.
        let old_view = net.view.clone();
        net.view.retain(|&n| n != 2);
        net.tree = FeedbackTree::new(1, &net.view, 2);
        net.run(1, |b, at| b.view_changed(at));
        let (from, to, what, n, _) = net.links.pop_front().expect("node 1 asks node 4");
        assert_eq!((from, to, what), (1, 4, BarrierMsg::Ask));
        let stale_tree = FeedbackTree::new(1, &old_view, 2);
        let members = [ClientId(4)];
        let b4 = net.nodes.get_mut(&4).unwrap();
        let stale = Place {
            node: 4,
            parent: stale_tree.parent(4),
            children: &[],
            members: &members,
            view: &old_view,
        };
        // It learns the number, and reports to the parent it knows: node 2.
        assert_eq!(
            b4.message(1, what, n, &[], stale),
            vec![Act::Send(2, BarrierMsg::Arrived, 1, vec![4])]
        );
        // Then node 4's view changes: it reports to node 1, which releases all.
        net.run(4, |b, at| b.view_changed(at));
        net.run(3, |b, at| b.view_changed(at));
        net.deliver_all();
        let mut got = net.released.clone();
        got.sort_unstable();
        assert_eq!(got, vec![(1, vec![2]), (3, vec![2]), (4, vec![2])]);
    }

    #[test]
    fn a_node_whose_ask_was_lost_asks_for_the_number_and_is_asked_again() {
        // 1 → 2, 3. Node 1's ask reaches node 3 before node 3 carries the
        // group: the daemon drops it. Node 3's member then arrives: it asks
        // its parent for the number (ARRIVED 0), node 1 asks again, and the
        // barrier completes.
        let mut net = Net::new(3);
        net.wait(1);
        net.wait(2);
        net.links
            .retain(|&(_, to, what, _, _)| !(to == 3 && what == BarrierMsg::Ask));
        net.deliver_all();
        assert!(net.released.is_empty());
        net.wait(3);
        assert_eq!(
            net.links.front(),
            Some(&(3, 1, BarrierMsg::Arrived, 0, vec![]))
        );
        net.deliver_all();
        let mut got: Vec<NodeId> = net.released.iter().map(|r| r.0).collect();
        got.sort_unstable();
        assert_eq!(got, [1, 2, 3]);
    }

    #[test]
    fn a_stale_report_of_the_last_barrier_does_not_count_for_the_next() {
        let mut net = Net::new(3);
        for n in 1..=3 {
            net.wait(n);
        }
        net.deliver_all();
        assert_eq!(net.released.len(), 3);
        net.released.clear();
        // Node 2's report of barrier 1 arrives again (sent twice across a
        // change of the tree): node 1 waits at barrier 2, node 3 has not
        // arrived.
        net.wait(1);
        net.run(1, |b, at| b.message(2, BarrierMsg::Arrived, 1, &[2], at));
        net.deliver_all();
        net.wait(2);
        net.deliver_all();
        assert!(net.released.is_empty(), "released without node 3");
        net.wait(3);
        net.deliver_all();
        assert_eq!(net.released.len(), 3);
    }
}
