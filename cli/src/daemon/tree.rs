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
/// (else the lowest node), and it is widened to at most
/// [`MakConfig::tree_max_depth`] levels. `None` when the view is not known
/// or holds no other node.
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
    let depth = MakConfig::default().tree_max_depth;
    let fanout = FeedbackTree::fanout_for(nodes.len(), fanout, depth);
    Some(FeedbackTree::new(root, &nodes, fanout))
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

    fn view(agent: NodeId, nodes: &[NodeId]) -> View {
        View {
            group: 7,
            name: "g".into(),
            epoch: 1,
            agent,
            members: nodes
                .iter()
                .enumerate()
                .map(|(i, &node)| Member {
                    rank: i as u32,
                    node,
                    member: i as u64,
                })
                .collect(),
        }
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
