//! The feedback tree of each MAK group this node carries (seed 004 §2.1,
//! docs/protocol.md §3.4): computed from the group's view, rooted at the
//! group agent, and installed in the engine, whose receive streams then
//! report their subtree's ACKs toward each sender over it. Trees of
//! different groups between the same two nodes share the path; the group
//! number in each ACK frame's header tells them apart.
//!
//! Owns: which tree a group's streams report over, the tree's root (which
//! the sequenced mode sends through too), and how `mcast stat` shows it. May not touch: the view (membership), the ACK rounds (the
//! engine's machines run them).

use mcast_engine::{EngineError, Transport};
use mcast_groups::View;
use mcast_proto::mak::MakConfig;
use mcast_proto::FeedbackTree;
use mcast_wire::{GroupId, NodeId};
use serde_json::{json, Value};

use super::Daemon;

/// The tree of `view` for a group with feedback fanout `fanout` (0: none),
/// as node `local` computes it; every node of the view computes the same
/// one. Its root is the group agent when the agent has members in the view
/// (else the lowest node); every other node sits at the place the agent
/// gave it (`Member::place`), so a node that leaves hands its children to
/// its parent and a joining node takes a vacant place (seed 004 §2.2). It
/// is widened to at most [`MakConfig::tree_max_depth`] levels over its
/// places. `None` when the view is not known or holds no other node.
pub(super) fn feedback_tree(
    view: Option<&View>,
    fanout: u16,
    local: NodeId,
) -> Option<FeedbackTree> {
    let nodes = view?.nodes();
    if fanout == 0 || nodes.len() < 2 || !nodes.contains(&local) {
        return None;
    }
    let root = root_of(view)?;
    let placed: Vec<(NodeId, u32)> = view?.members.iter().map(|m| (m.node, m.place)).collect();
    let depth = MakConfig::default().tree_max_depth;
    Some(FeedbackTree::for_view(root, &placed, fanout, depth))
}

/// The root of the hybrid tree of `view`: the group agent when the agent
/// has members in the view, else the view's lowest node (None: no view, or
/// an empty one). The feedback tree and the sequenced mode share it.
pub(super) fn root_of(view: Option<&View>) -> Option<NodeId> {
    // Per publication (the modes' context): no allocation.
    let view = view?;
    if view.has_node(view.agent) {
        Some(view.agent)
    } else {
        view.members.iter().map(|m| m.node).min()
    }
}

impl<T: Transport> Daemon<T> {
    /// Installs `group`'s tree for its current view in the engine (every
    /// view change and every node dropped from the view calls it).
    pub(super) fn install_tree(&mut self, group: GroupId) -> Result<(), EngineError> {
        let Some(lg) = self.local.get(&group) else {
            return Ok(());
        };
        let tree = feedback_tree(lg.view.as_ref(), lg.tree_fanout, self.node);
        self.engine.set_tree_in(group, tree)
    }

    /// The tree as `mcast stat` shows it: root, fanout, this node's parent
    /// and children (null without a tree).
    pub(super) fn tree_json(&self, group: GroupId) -> Value {
        match self.engine.tree_in(group) {
            Some(t) => json!({
                "root": t.root(),
                "fanout": t.fanout(),
                "nodes": t.len(),
                "place": t.place(self.node),
                "parent": t.parent(self.node),
                "children": t.children(self.node),
            }),
            None => Value::Null,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcast_groups::Member;

    /// The view after `nodes` joined in turn, each taking the place the
    /// agent gives it.
    fn view(agent: NodeId, nodes: &[NodeId]) -> View {
        let mut v = View {
            group: 7,
            name: "g".into(),
            epoch: 1,
            agent,
            members: Vec::new(),
        };
        for &node in nodes {
            join(&mut v, node);
        }
        v
    }

    fn join(v: &mut View, node: NodeId) {
        let rank = v.members.len() as u32;
        let place = v.place_for(node);
        v.members.push(Member {
            rank,
            node,
            member: u64::from(rank),
            place,
        });
    }

    fn parents(t: &FeedbackTree, nodes: impl Iterator<Item = NodeId>) -> Vec<Option<NodeId>> {
        nodes.map(|n| t.parent(n)).collect()
    }

    #[test]
    fn a_leaving_node_hands_its_children_to_its_parent_and_a_joiner_takes_its_place() {
        // Agent 1 at the root; 2..=7 at places 1..=6 (binary): 2 has 4, 5.
        let mut v = view(1, &[1, 2, 3, 4, 5, 6, 7]);
        let t = feedback_tree(Some(&v), 2, 1).unwrap();
        assert_eq!(t.children(2), vec![4, 5]);
        // 2 leaves: 4 and 5 are the root's now; every other node keeps its
        // parent (a view recomputed in node order would move 4, 5, 6, 7).
        v.members.retain(|m| m.node != 2);
        let after = feedback_tree(Some(&v), 2, 1).unwrap();
        assert_eq!((after.parent(4), after.parent(5)), (Some(1), Some(1)));
        assert_eq!(parents(&after, 6..=7), parents(&t, 6..=7));
        assert_eq!(after.parent(3), t.parent(3));
        // 9 joins: it takes place 1 and its children back; a second joiner,
        // with no place vacant, becomes a leaf.
        join(&mut v, 9);
        let t9 = feedback_tree(Some(&v), 2, 1).unwrap();
        assert_eq!((t9.place(9), t9.children(9)), (Some(1), vec![4, 5]));
        join(&mut v, 8);
        let t8 = feedback_tree(Some(&v), 2, 1).unwrap();
        assert_eq!((t8.place(8), t8.children(8)), (Some(7), vec![]));
        assert_eq!(t8.parent(8), Some(4), "place 7 is under place 3");
        // A second member of a node shares its place.
        join(&mut v, 4);
        assert_eq!(feedback_tree(Some(&v), 2, 1).unwrap(), t8);
    }

    #[test]
    fn the_root_moves_with_the_agent_role() {
        // The agent 1 fails; 5 (place 4) takes the role over: it becomes
        // the root, and place 4 is vacant for the next joiner.
        let mut v = view(1, &[1, 2, 3, 4, 5, 6, 7]);
        v.members.retain(|m| m.node != 1);
        v.agent = 5;
        v.make_root(5);
        let t = feedback_tree(Some(&v), 2, 5).unwrap();
        assert_eq!((t.root(), t.children(5)), (5, vec![2, 3]));
        assert_eq!(v.place_for(8), 4);
        // Every node computes it, whether or not the view's places say so.
        let mut unmoved = view(1, &[1, 2, 3, 4, 5, 6, 7]);
        unmoved.members.retain(|m| m.node != 1);
        unmoved.agent = 5;
        assert_eq!(feedback_tree(Some(&unmoved), 2, 5).unwrap().root(), 5);
    }

    #[test]
    fn the_tree_is_rooted_at_the_agent_and_the_same_at_every_node() {
        let v = view(3, &[1, 2, 3, 4]);
        let t = feedback_tree(Some(&v), 2, 1).unwrap();
        assert_eq!((t.root(), t.children(3)), (3, vec![1, 2]));
        for n in [2, 3, 4] {
            assert_eq!(feedback_tree(Some(&v), 2, n).as_ref(), Some(&t));
        }
        // No fanout, a lone node, or a node outside the view: no tree.
        assert!(feedback_tree(Some(&v), 0, 1).is_none());
        assert!(feedback_tree(Some(&view(1, &[1])), 2, 1).is_none());
        assert!(feedback_tree(Some(&v), 2, 9).is_none());
        // An agent without members in the view: the lowest node roots it.
        assert_eq!(
            feedback_tree(Some(&view(9, &[2, 5])), 2, 2).unwrap().root(),
            2
        );
    }
}
