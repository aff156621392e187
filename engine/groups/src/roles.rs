//! Where the roles are: the cluster, the nodes declared failed, and the
//! moves of the registry and agent roles off failed nodes (a majority side
//! only), the adoption of a registry a peer names, and the confirmation
//! that this node knows the registry (requests to it are held until then).
//!
//! Owns the cluster, the failed and doubted sets, the registry's node and
//! epoch, and the held registry requests. It decides who plays a role;
//! what a role does is in `registry`, `agent` and `operating`.

use crate::agent::AgentGroup;
use crate::key::{key, Key};
use crate::operating::Pending;
use crate::types::limit_u32;
use crate::wire::Message;
use crate::{GroupError, GroupId, GroupService, NodeId, View, EPOCH_GENERATION_SHIFT};

impl GroupService {
    /// The nodes of the cluster (this one included): the registry role moves
    /// among them when its node fails. Without it the role never moves.
    pub fn set_cluster(&mut self, nodes: &[NodeId]) {
        self.cluster = nodes.to_vec();
        self.cluster.sort_unstable();
        self.cluster.dedup();
        // With peers, the registry is known only once a majority is heard
        // ([`GroupService::confirm_registry`]).
        self.confirmed = self.cluster.len() <= 1;
        if self.is_registry() && self.registry_moves == 0 && !self.confirmed {
            self.registry.sync_needed = true;
            self.registry.sync_majority = true;
        }
    }

    /// The registry's node as this node knows it.
    pub fn registry(&self) -> NodeId {
        self.registry_node
    }

    /// The registry's node and how many times the role has moved, as beats
    /// carry them between daemons.
    pub fn registry_epoch(&self) -> (NodeId, u32) {
        (self.registry_node, self.registry_epoch)
    }

    /// Times the registry role moved (as this node saw it).
    pub fn registry_moves(&self) -> u64 {
        self.registry_moves
    }

    /// Whether [`GroupService::confirm_registry`] was called (or needed not be).
    pub fn registry_confirmed(&self) -> bool {
        self.confirmed
    }

    /// Node `node` was declared failed (seed 004 §3.4): as the agent of a
    /// group, remove its members and send the new view to the others (the
    /// senders' ACK sets follow); requests waiting for its answer fail with
    /// [`GroupError::NodeFailed`]. Returns the groups whose view this agent
    /// changed, including those whose agent role it took over from `node`
    /// (and the registry role moves too if `node` held it: protocol.md §7).
    pub fn node_failed(&mut self, node: NodeId) -> Vec<GroupId> {
        self.failed.insert(node);
        self.reweigh = true;
        self.release_deferred();
        if node == self.registry_node {
            self.move_registry();
        }
        let mut changed = self.take_over_from(node);
        let groups: Vec<Key> = self.agent_of.keys().cloned().collect();
        for k in groups {
            let a = self.agent_of.get_mut(&k).expect("listed");
            if !a.view.has_node(node) {
                continue;
            }
            a.view.members.retain(|m| m.node != node);
            // Its missed SYNCs go with it: a restarted daemon that joins
            // again must not be taken for silent one round after its join.
            a.missed.remove(&node);
            a.view.epoch += 1;
            let view = a.view.clone();
            self.publish(&view, Some(node));
            changed.push(k.0);
        }
        let registry = self.registry_node;
        let waiting: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.peer(registry) == node)
            .map(|(&t, _)| t)
            .collect();
        for t in waiting {
            let p = self.pending.remove(&t).expect("listed");
            if let Some(req) = p.answer_to() {
                self.fail(req, GroupError::NodeFailed { node });
            }
        }
        self.pump();
        changed
    }

    /// A node declared failed is alive again (its restarted daemon joins as new).
    pub fn node_recovered(&mut self, node: NodeId) {
        self.failed.remove(&node);
        self.reweigh = true;
    }

    /// The peers the failure detector doubts now
    /// ([`crate::liveness::Liveness::doubted`]): to be called after every
    /// liveness poll and before every [`GroupService::node_failed`]. A
    /// majority that lets this node take a role counts only nodes neither
    /// failed nor doubted: a node cut off the segment sees every peer fall
    /// silent at once but hands their verdicts over one by one, and
    /// counting the others live until their turn let it take roles alone.
    /// A role left on a failed node for want of a majority is taken here
    /// once the doubts clear.
    pub fn set_doubted(&mut self, nodes: impl IntoIterator<Item = NodeId>) {
        let before = std::mem::take(&mut self.doubted);
        self.doubted.extend(nodes);
        if (self.reweigh || self.doubted != before) && !self.failed.is_empty() {
            self.retake_roles();
        }
        self.reweigh = false;
    }

    /// How many nodes of the cluster this node counts as live when it
    /// weighs a majority: itself, and those neither failed nor doubted.
    pub(crate) fn live_count(&self) -> usize {
        self.cluster
            .iter()
            .filter(|&&n| {
                n == self.node || !(self.failed.contains(&n) || self.doubted.contains(&n))
            })
            .count()
    }

    /// A role left on a failed node because this node did not hear a
    /// majority when the verdict came (some peers doubted): taken now if
    /// it does.
    fn retake_roles(&mut self) {
        if self.failed.contains(&self.registry_node) {
            self.move_registry();
        }
        let agents: std::collections::BTreeSet<NodeId> = self
            .views
            .values()
            .map(|v| v.agent)
            .filter(|a| self.failed.contains(a))
            .collect();
        let mut changed = false;
        for a in agents {
            changed |= !self.take_over_from(a).is_empty();
        }
        if changed {
            self.pump();
        }
    }

    /// The registry's node failed: the lowest live node of the cluster takes
    /// the role, if the live nodes are a majority of the cluster (so the two
    /// sides of a partition never both have one). Every agent announces its
    /// groups to it; it rebuilds the name table from those announcements and
    /// from what it knows itself.
    fn move_registry(&mut self) {
        let live: Vec<NodeId> = self
            .cluster
            .iter()
            .copied()
            .filter(|n| !self.failed.contains(n))
            .collect();
        let Some(&next) = live.first() else {
            return;
        };
        if self.live_count() * 2 <= self.cluster.len() {
            return;
        }
        self.registry_node = next;
        self.registry_moves += 1;
        self.registry_epoch += 1;
        self.registry.sync_needed = false;
        self.registry.sync_majority = false;
        if next == self.node {
            self.take_registry_role();
        }
        // Tell it what this node serves (to itself: through the loopback).
        self.announce_all();
        self.reask_registry();
        self.pump();
    }

    /// This node becomes the registry (the role moved here): its name table
    /// may lack names the role's last holder created, so it creates names
    /// only once every node neither failed nor doubted has told it what it
    /// serves. SYNCEDs heard before are forgotten: they followed ANNOUNCEs
    /// this node dropped, not being the registry then, and counting them
    /// let a registry that a peer's beat made so create existing names
    /// again under new numbers (`scripts/soak.sh --overlap`, seeds
    /// 820101695 and its total-order run, 2026-11-29). The next sync round
    /// (at most [`crate::SYNC_PERIOD`]) brings both again.
    fn take_registry_role(&mut self) {
        self.registry.sync_needed = true;
        self.registry.sync_majority = false;
        if !self.takeover_as_before {
            self.registry.forget_synced();
        }
        // Never hand out a number this node already knows to be taken.
        let known = self
            .views
            .keys()
            .chain(self.agent_of.keys())
            .map(|k| k.0)
            .max();
        self.registry.last_group = self.registry.last_group.max(known.unwrap_or(0));
    }

    /// Brings back the registry's takeover as it was before 2026-11-29
    /// (SYNCEDs heard before the move counted; a node that a peer's beat
    /// made the registry did not wait for them), so that simulator seeds
    /// found before replay the course they failed on. Not for use
    /// otherwise.
    #[doc(hidden)]
    pub fn registry_takeover_as_before(&mut self) {
        self.takeover_as_before = true;
    }

    /// A peer says the registry is `node` after `epoch` moves: a node that
    /// knows of fewer moves (e.g. it restarted), or of as many but a higher
    /// registry node, adopts it, and tells it the groups it serves.
    pub fn adopt_registry(&mut self, node: NodeId, epoch: u32) {
        // Nodes that moved the role on different verdicts may name different
        // registries after the same number of moves: the lower node wins.
        let tie = epoch == self.registry_epoch
            && node < self.registry_node
            && !self.failed.contains(&node);
        if !(epoch > self.registry_epoch || tie) || node == self.registry_node {
            self.registry_epoch = self.registry_epoch.max(epoch);
            return;
        }
        if self.registry_node == self.node {
            self.registry.sync_needed = false;
        }
        self.registry_node = node;
        self.registry_epoch = epoch;
        if node == self.node && !self.takeover_as_before {
            // The peers moved the role here before this node did (it was
            // paused, cut off, or had just rejoined with a fresh service):
            // as after its own move, its table may lack names.
            self.take_registry_role();
        }
        self.announce_all();
        self.reask_registry();
        self.pump();
    }

    /// This service replaces the one of this node's previous incarnation
    /// (declared failed, it rejoins), after [`GroupService::adopt_registry`]
    /// and [`GroupService::confirm_registry`]. If the registry is still this
    /// node, its name table went with the old service: it creates names
    /// only once every node neither failed nor doubted has told it what it
    /// serves (SYNCED after its ANNOUNCEs), as a registry the role moved to
    /// does. With a majority only, its own clients' joins again created
    /// names the groups' agents had not announced yet under new numbers
    /// (`scripts/soak.sh --overlap`, 2026-11-29).
    pub fn rejoined(&mut self) {
        if self.is_registry() {
            self.take_registry_role();
        }
    }

    /// This node has heard from a majority of the cluster, so it knows the
    /// registry: the registry requests held until now go out.
    pub fn confirm_registry(&mut self) {
        if self.confirmed {
            return;
        }
        self.confirmed = true;
        let registry = self.registry_node;
        while let Some(m) = self.held.pop_front() {
            self.send(registry, m);
        }
        // Tells the registry what this node serves (SYNCED: a registry
        // creates names only once enough nodes have).
        self.announce_all();
        self.release_deferred();
        self.pump();
    }

    /// The registry moved: what was asked of the old one and not answered
    /// is asked again of the new one (same tokens; an old answer arriving
    /// late is ignored, answers are accepted only from the registry).
    fn reask_registry(&mut self) {
        if !self.confirmed {
            return; // held requests go out on confirmation
        }
        let registry = self.registry_node;
        let again: Vec<Message> = self
            .pending
            .iter()
            .filter_map(|(&token, p)| match p {
                Pending::JoinLookup {
                    name,
                    cancelled: false,
                    ..
                } => Some(Message::Lookup {
                    token,
                    create: true,
                    name: name.clone(),
                }),
                Pending::QueryLookup { name, .. } => Some(Message::Lookup {
                    token,
                    create: false,
                    name: name.clone(),
                }),
                Pending::List { .. } => Some(Message::List { token }),
                Pending::Relocate { group, name } => Some(Message::Claim {
                    token,
                    group: *group,
                    stale: self.homes.get(&key(*group, name)).copied().unwrap_or(0),
                    name: name.clone(),
                }),
                _ => None,
            })
            .collect();
        for m in again {
            self.send(registry, m);
        }
    }

    pub(crate) fn announce_all(&mut self) {
        let next = self.registry_node;
        let groups: Vec<View> = self.agent_of.values().map(|a| a.view.clone()).collect();
        let epoch = self.registry_epoch;
        for view in groups {
            self.send(
                next,
                Message::Announce {
                    group: view.group,
                    epoch: view.epoch,
                    members: limit_u32(view.members.len()),
                    name: view.name.clone(),
                },
            );
        }
        self.send(next, Message::Synced { epoch });
    }

    /// The agent of a group this node is in has failed: if this node is the
    /// lowest node of the last view still alive, and the live nodes are a
    /// majority of that view's nodes, it becomes the agent: the view without
    /// the failed node's members, one epoch later, goes to every member and
    /// the registry (whose entry follows the newer epoch). Otherwise it
    /// waits for that view from whoever takes over; a minority side of a
    /// partition never takes over, so two sides never both hold the role
    /// (doubted peers do not count as live: [`GroupService::set_doubted`]).
    fn take_over_from(&mut self, failed: NodeId) -> Vec<GroupId> {
        let orphaned: Vec<View> = self
            .views
            .values()
            .filter(|v| v.agent == failed && !self.agent_of.contains_key(&key(v.group, &v.name)))
            .cloned()
            .collect();
        let mut changed = Vec::new();
        for old in orphaned {
            let nodes = old.nodes();
            let live: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| !self.failed.contains(n))
                .collect();
            // Live for the majority: neither failed nor doubted.
            let heard = live
                .iter()
                .filter(|&&n| n == self.node || !self.doubted.contains(&n))
                .count();
            if live.first() != Some(&self.node) || heard * 2 <= nodes.len() {
                continue;
            }
            // And a majority of the whole cluster: a partition's minority side
            // may hold a majority of one group's members, and must still not
            // take its agent role (the other side may keep the agent).
            if !self.cluster.is_empty() && self.live_count() * 2 <= self.cluster.len() {
                continue;
            }
            let mut view = old.clone();
            view.members.retain(|m| !self.failed.contains(&m.node));
            view.agent = self.node;
            // The root moves with the agent role (seed 004 §2.2).
            view.make_root(self.node);
            // A takeover starts a new generation of epochs (the high bits):
            // every survivor accepts it, even one that saw views of the old
            // agent this node missed.
            view.epoch = ((old.epoch >> EPOCH_GENERATION_SHIFT) + 1) << EPOCH_GENERATION_SHIFT;
            let next_rank = old.members.iter().map(|m| m.rank + 1).max().unwrap_or(0);
            self.agent_of.insert(
                key(view.group, &view.name),
                AgentGroup::new(view.clone(), next_rank),
            );
            self.takeovers += 1;
            self.publish(&view, Some(failed));
            changed.push(view.group);
        }
        changed
    }

    /// Agent roles this node took over from failed nodes.
    pub fn takeovers(&self) -> u64 {
        self.takeovers
    }
}
