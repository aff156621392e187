//! Sans-IO group management of `mcastd` (seed 004 §3).
//!
//! Every daemon runs one [`GroupService`], which plays up to three roles:
//!
//! - **operating agent (OA)**, on every node: takes its local clients' requests
//!   ([`GroupService::join`], [`leave`](GroupService::leave),
//!   [`query`](GroupService::query), [`list`](GroupService::list),
//!   [`member_gone`](GroupService::member_gone)), keeps the view of every group
//!   that has local members, and answers with [`GroupEvent`]s;
//! - **registry** (the paper's topology information centre, TIC), on the one
//!   configured node: maps group names to group numbers, assigned from 1 upwards
//!   and never reused, knows each group's agent and its member count;
//! - **group agent (GA)**, on the node whose client first joined the group: keeps
//!   the members, assigns ranks (the paper's PN; never reused within a group),
//!   increments the view epoch on every change and sends each new [`View`] to every
//!   member node.
//!
//! # Flows
//!
//! - **Join** (§3.1): OA → registry `LOOKUP(create)`; the registry answers the group
//!   number and agent, creating the group with the requesting node as agent if
//!   the name is new (the registry serialises concurrent creations, so a name has
//!   one number and one agent). OA → GA `REGISTER`; the GA assigns the rank, bumps
//!   the epoch, sends `VIEW` to the other member nodes, `JOIN_REPLY` (carrying the
//!   view) to the OA and `COUNT` to the registry. The OA emits
//!   [`GroupEvent::ViewChanged`] then [`GroupEvent::Joined`].
//! - **Leave** (§3.2): OA → GA `LEAVE`; the GA removes the member, bumps the epoch,
//!   sends `VIEW` to the remaining member nodes, `LEAVE_REPLY` (carrying the view)
//!   to the leaving node, so it learns that it is out, and `COUNT` to the registry.
//! - **Query** (§3.3): OA → registry `LOOKUP(no create)` → OA → GA `QUERY`.
//! - **List**: OA → registry `LIST`.
//!
//! Messages to the node itself (the registry's own client, the agent's own
//! clients) are handled internally, in order, without reaching
//! [`GroupService::poll_send`]. The wire format is in [`wire`].
//!
//! # Choices
//!
//! - **Empty groups are kept.** When a group's last member leaves, the registry
//!   keeps its name, number and agent (with a member count of 0) and the agent keeps
//!   its epoch and next rank; a later join of the name reuses them. Empty groups
//!   count towards `max_groups`. Deleting them safely needs a handshake between
//!   registry and agent (a `REGISTER` may be on its way to the agent when the
//!   registry deletes), which belongs with failure detection.
//! - **The agent stays put.** The agent is the node whose join created the group.
//!   When its last local member leaves while others remain, it stays the agent and
//!   keeps serving; moving the role is the failure-detection issue's job.
//! - **Views are ordered by the link.** Views of a group come only from its agent
//!   over one in-order link per node, so each node receives them in epoch order; a
//!   view with an epoch not above the one held is ignored anyway. A node keeps the
//!   view of a group while the view contains one of its members and forgets it
//!   (after emitting the `ViewChanged` that excludes it) when it does not.
//! - **A vanished client gets no answers.** After [`GroupService::member_gone`],
//!   requests of that member still in flight produce no event; a join that still
//!   succeeds at the agent is undone by a leave.
//! - **An unknown name is not an error for a query**: it answers
//!   `QueryResult { info: None }`.
//! - **The agent trusts its links.** A `REGISTER` for a group it does not know yet
//!   creates it (the first `REGISTER` may arrive before the registry's answer to the
//!   agent's own lookup); a hostile node could make it hold up to `max_groups`
//!   phantom groups. Replies are accepted only from the node they were asked of.
//!
//! No I/O, no clock. [`detector`] is the failure detector (seed 004 §3.4);
//! [`GroupService::node_failed`] is what an agent does with its verdict.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};

pub mod detector;
pub mod liveness;
mod types;
pub mod wire;

pub use types::{
    check_name, GroupError, GroupEvent, GroupId, GroupInfo, GroupSummary, Limits, Member, MemberId,
    NameError, NodeId, ReqId, View, RESERVED_GROUPS,
};
pub use wire::DecodeError;

use types::limit_u32;
use wire::{LookupResult, Message};

/// Group management of one daemon. See the crate documentation.
#[derive(Debug)]
pub struct GroupService {
    node: NodeId,
    registry_node: NodeId,
    limits: Limits,
    // OA
    next_token: u64,
    pending: BTreeMap<u64, Pending>,
    views: BTreeMap<GroupId, View>,
    // GA
    agent_of: BTreeMap<GroupId, AgentGroup>,
    // registry (only used when node == registry_node)
    registry: Registry,
    loopback: VecDeque<Message>,
    outbox: VecDeque<(NodeId, Vec<u8>)>,
    events: VecDeque<GroupEvent>,
    /// Nodes declared failed (and not heard again).
    failed: std::collections::BTreeSet<NodeId>,
    takeovers: u64,
    /// Every node of the cluster, sorted (for moving the registry role).
    cluster: Vec<NodeId>,
    registry_moves: u64,
    registry_epoch: u32,
    confirmed: bool,
    /// Registry requests waiting for `confirmed`.
    held: VecDeque<Message>,
    /// The time of the last [`GroupService::tick`] (ns) and each request's deadline.
    now: u64,
    deadlines: BTreeMap<u64, u64>,
    /// Members of this node that joined and have not left, with the epoch
    /// of the view they joined in: views are checked against them.
    joined: BTreeMap<(GroupId, MemberId), u64>,
    /// As a registry that took the role over: the nodes that have announced
    /// everything they serve; new names wait until every live node has.
    synced: BTreeMap<NodeId, u32>,
    sync_needed: bool,
    /// Creating lookups waiting for the sync: (from, token, name).
    deferred: VecDeque<(NodeId, u64, String)>,
}

/// View epochs: the bits above this count agent takeovers, those below the
/// changes under one agent.
pub const EPOCH_GENERATION_SHIFT: u32 = 40;

/// How long a request waits for its answer before it fails (ns).
pub const REQUEST_TIMEOUT: u64 = 2_000_000_000;

#[derive(Debug)]
struct AgentGroup {
    view: View,
    next_rank: u32,
}

#[derive(Debug, Default)]
struct Registry {
    by_name: BTreeMap<String, GroupId>,
    groups: BTreeMap<GroupId, RegEntry>,
    last_group: GroupId,
}

#[derive(Debug)]
struct RegEntry {
    name: String,
    agent: NodeId,
    members: u32,
    epoch: u64,
}

#[derive(Debug)]
enum Pending {
    /// Waiting for the registry's lookup.
    JoinLookup {
        req: ReqId,
        member: MemberId,
        name: String,
        cancelled: bool,
    },
    /// Waiting for the agent's answer to REGISTER.
    JoinRegister {
        req: ReqId,
        member: MemberId,
        group: GroupId,
        agent: NodeId,
        cancelled: bool,
    },
    Leave {
        req: ReqId,
        member: MemberId,
        group: GroupId,
        agent: NodeId,
        cancelled: bool,
    },
    QueryLookup {
        req: ReqId,
        name: String,
    },
    QueryView {
        req: ReqId,
        group: GroupId,
        name: String,
        agent: NodeId,
    },
    List {
        req: ReqId,
    },
}

impl Pending {
    /// The client's request this answers.
    fn req(&self) -> ReqId {
        match self {
            Pending::JoinLookup { req, .. }
            | Pending::JoinRegister { req, .. }
            | Pending::Leave { req, .. }
            | Pending::QueryLookup { req, .. }
            | Pending::QueryView { req, .. }
            | Pending::List { req } => *req,
        }
    }

    /// The request to answer if it ends without a reply (None: the member
    /// is gone and its requests get no answer).
    fn answer_to(&self) -> Option<ReqId> {
        match self {
            Pending::JoinLookup { cancelled, .. }
            | Pending::JoinRegister { cancelled, .. }
            | Pending::Leave { cancelled, .. } => (!cancelled).then_some(self.req()),
            _ => Some(self.req()),
        }
    }

    /// The node whose reply this request waits for.
    fn peer(&self, registry: NodeId) -> NodeId {
        match self {
            Pending::JoinLookup { .. } | Pending::QueryLookup { .. } | Pending::List { .. } => {
                registry
            }
            Pending::JoinRegister { agent, .. }
            | Pending::Leave { agent, .. }
            | Pending::QueryView { agent, .. } => *agent,
        }
    }
}

impl GroupService {
    /// A service for node `node`, with `registry` the registry's node (possibly
    /// `node` itself). Limits above the wire's bounds are clamped to them.
    pub fn new(node: NodeId, registry: NodeId, limits: Limits) -> GroupService {
        GroupService {
            node,
            registry_node: registry,
            limits: limits.clamped(),
            next_token: 1,
            pending: BTreeMap::new(),
            views: BTreeMap::new(),
            agent_of: BTreeMap::new(),
            registry: Registry::default(),
            loopback: VecDeque::new(),
            outbox: VecDeque::new(),
            events: VecDeque::new(),
            failed: Default::default(),
            takeovers: 0,
            cluster: Vec::new(),
            registry_moves: 0,
            registry_epoch: 0,
            confirmed: true,
            held: VecDeque::new(),
            now: 0,
            deadlines: BTreeMap::new(),
            joined: BTreeMap::new(),
            synced: Default::default(),
            sync_needed: false,
            deferred: VecDeque::new(),
        }
    }

    /// Node `node` was declared failed (seed 004 §3.4): as the agent of a
    /// group, remove its members and send the new view to the others (the
    /// senders' ACK sets follow); requests waiting for its answer fail with
    /// [`GroupError::NodeFailed`]. Returns the groups whose view this agent
    /// changed. (Moving the registry or agent role off a failed node is not
    /// done here.)
    pub fn node_failed(&mut self, node: NodeId) -> Vec<GroupId> {
        self.failed.insert(node);
        self.release_deferred();
        if node == self.registry_node {
            self.move_registry();
        }
        let mut changed = self.take_over_from(node);
        let groups: Vec<GroupId> = self.agent_of.keys().copied().collect();
        for group in groups {
            let a = self.agent_of.get_mut(&group).expect("listed");
            if !a.view.has_node(node) {
                continue;
            }
            a.view.members.retain(|m| m.node != node);
            a.view.epoch += 1;
            let view = a.view.clone();
            self.publish(&view, node);
            changed.push(group);
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

    /// Time passes (a monotonic clock, ns): requests unanswered for
    /// [`REQUEST_TIMEOUT`] fail with [`GroupError::NoAnswer`] (an answer can
    /// be lost when a link is reset while the cluster changes; the client
    /// retries). Call it now and then; without it nothing times out.
    pub fn tick(&mut self, now: u64) {
        self.now = now;
        let registry = self.registry_node;
        let expired: Vec<u64> = self
            .deadlines
            .iter()
            .filter(|(_, &d)| d <= now)
            .map(|(&t, _)| t)
            .collect();
        for t in expired {
            self.deadlines.remove(&t);
            let Some(p) = self.pending.remove(&t) else {
                continue;
            };
            let node = p.peer(registry);
            if let Some(req) = p.answer_to() {
                self.fail(req, GroupError::NoAnswer { node });
            }
        }
        self.pump();
    }

    /// Requests in flight: (request id, deadline ns); and whether the
    /// registry is confirmed. For counters and diagnostics.
    pub fn requests_in_flight(&self) -> Vec<(ReqId, u64)> {
        self.pending
            .iter()
            .map(|(t, p)| (p.req(), self.deadlines.get(t).copied().unwrap_or(0)))
            .collect()
    }

    /// The nodes of the cluster (this one included): the registry role moves
    /// among them when its node fails. Without it the role never moves.
    pub fn set_cluster(&mut self, nodes: &[NodeId]) {
        self.cluster = nodes.to_vec();
        self.cluster.sort_unstable();
        self.cluster.dedup();
        // With peers, the registry is known only once a majority is heard
        // ([`GroupService::confirm_registry`]).
        self.confirmed = self.cluster.len() <= 1;
    }

    /// The registry's node as this node knows it.
    pub fn registry(&self) -> NodeId {
        self.registry_node
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
        if live.len() * 2 <= self.cluster.len() {
            return;
        }
        self.registry_node = next;
        self.registry_moves += 1;
        self.registry_epoch += 1;
        self.sync_needed = next == self.node;
        if next == self.node {
            // Never hand out a number this node already knows to be taken.
            let known = self.views.keys().chain(self.agent_of.keys()).copied().max();
            self.registry.last_group = self.registry.last_group.max(known.unwrap_or(0));
        }
        // Tell it what this node serves (to itself: through the loopback).
        self.announce_all();
        self.reask_registry();
        self.pump();
    }

    /// The registry's node and how many times the role has moved, as beats
    /// carry them between daemons.
    pub fn registry_epoch(&self) -> (NodeId, u32) {
        (self.registry_node, self.registry_epoch)
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
            self.sync_needed = false;
        }
        self.registry_node = node;
        self.registry_epoch = epoch;
        self.announce_all();
        self.reask_registry();
        self.pump();
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
        self.pump();
    }

    /// Whether [`GroupService::confirm_registry`] was called (or needed not be).
    pub fn registry_confirmed(&self) -> bool {
        self.confirmed
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
                _ => None,
            })
            .collect();
        for m in again {
            self.send(registry, m);
        }
    }

    /// Whether this registry knows every group that exists (it has been the
    /// registry from the start, or every live node has synced with it).
    fn registry_synced(&self) -> bool {
        !self.sync_needed
            || self.cluster.iter().all(|n| {
                self.failed.contains(n)
                    || self
                        .synced
                        .get(n)
                        .is_some_and(|&e| e >= self.registry_epoch)
            })
    }

    fn release_deferred(&mut self) {
        if !self.registry_synced() {
            return;
        }
        for (from, token, name) in std::mem::take(&mut self.deferred) {
            self.registry_lookup(from, token, true, name);
        }
    }

    fn announce_all(&mut self) {
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

    /// Times the registry role moved (as this node saw it).
    pub fn registry_moves(&self) -> u64 {
        self.registry_moves
    }

    /// A node declared failed is alive again (its restarted daemon joins as new).
    pub fn node_recovered(&mut self, node: NodeId) {
        self.failed.remove(&node);
    }

    /// The agent of a group this node is in has failed: if this node is the
    /// lowest node of the last view still alive, and the live nodes are a
    /// majority of that view's nodes, it becomes the agent: the view without
    /// the failed node's members, one epoch later, goes to every member and
    /// the registry (whose entry follows the newer epoch). Otherwise it
    /// waits for that view from whoever takes over; a minority side of a
    /// partition never takes over, so two sides never both hold the role.
    fn take_over_from(&mut self, failed: NodeId) -> Vec<GroupId> {
        let orphaned: Vec<View> = self
            .views
            .values()
            .filter(|v| v.agent == failed && !self.agent_of.contains_key(&v.group))
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
            if live.first() != Some(&self.node) || live.len() * 2 <= nodes.len() {
                continue;
            }
            // And a majority of the whole cluster: a partition's minority side
            // may hold a majority of one group's members, and must still not
            // take its agent role (the other side may keep the agent).
            if !self.cluster.is_empty() {
                let live_cluster = self
                    .cluster
                    .iter()
                    .filter(|n| !self.failed.contains(n))
                    .count();
                if live_cluster * 2 <= self.cluster.len() {
                    continue;
                }
            }
            let mut view = old.clone();
            view.members.retain(|m| !self.failed.contains(&m.node));
            view.agent = self.node;
            // A takeover starts a new generation of epochs (the high bits):
            // every survivor accepts it, even one that saw views of the old
            // agent this node missed.
            view.epoch = ((old.epoch >> EPOCH_GENERATION_SHIFT) + 1) << EPOCH_GENERATION_SHIFT;
            let next_rank = old.members.iter().map(|m| m.rank + 1).max().unwrap_or(0);
            self.agent_of.insert(
                view.group,
                AgentGroup {
                    view: view.clone(),
                    next_rank,
                },
            );
            self.takeovers += 1;
            self.publish(&view, failed);
            changed.push(view.group);
        }
        changed
    }

    /// Agent roles this node took over from failed nodes.
    pub fn takeovers(&self) -> u64 {
        self.takeovers
    }

    /// This node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Whether this node is the registry.
    pub fn is_registry(&self) -> bool {
        self.node == self.registry_node
    }

    /// The limits in force (after clamping).
    pub fn limits(&self) -> Limits {
        self.limits
    }

    // ------------------------------------------------------------ client API

    /// Local client `member` asks to join the group called `name`. Answered by
    /// exactly one `Joined` or `Failed` with `req` (unless the member vanishes first).
    pub fn join(&mut self, req: ReqId, member: MemberId, name: &str) {
        if let Err(reason) = check_name(name, self.limits.max_name_len) {
            return self.fail(req, invalid_name(name, reason));
        }
        let pending = Pending::JoinLookup {
            req,
            member,
            name: name.to_owned(),
            cancelled: false,
        };
        if let Some(token) = self.start(req, pending) {
            self.send(
                self.registry_node,
                Message::Lookup {
                    token,
                    create: true,
                    name: name.to_owned(),
                },
            );
        }
        self.pump();
    }

    /// Local client `member` asks to leave `group`. Answered by exactly one `Left`
    /// or `Failed` (unless the member vanishes first).
    pub fn leave(&mut self, req: ReqId, member: MemberId, group: GroupId) {
        self.joined.remove(&(group, member));
        let Some(view) = self.views.get(&group) else {
            return self.fail(req, GroupError::UnknownGroup { group });
        };
        if view.find(self.node, member).is_none() {
            return self.fail(req, GroupError::NotMember { group, member });
        }
        let agent = view.agent;
        let pending = Pending::Leave {
            req,
            member,
            group,
            agent,
            cancelled: false,
        };
        if let Some(token) = self.start(req, pending) {
            self.send(
                agent,
                Message::Leave {
                    token,
                    group,
                    member,
                },
            );
        }
        self.pump();
    }

    /// Local client `member` vanished: it leaves every group it is in, and its
    /// requests in flight get no answers.
    pub fn member_gone(&mut self, member: MemberId) {
        self.joined.retain(|&(_, m), _| m != member);
        for p in self.pending.values_mut() {
            match p {
                Pending::JoinLookup {
                    member: m,
                    cancelled,
                    ..
                }
                | Pending::JoinRegister {
                    member: m,
                    cancelled,
                    ..
                }
                | Pending::Leave {
                    member: m,
                    cancelled,
                    ..
                } if *m == member => *cancelled = true,
                _ => {}
            }
        }
        let leaves: Vec<(GroupId, NodeId)> = self
            .views
            .values()
            .filter(|v| v.find(self.node, member).is_some())
            .map(|v| (v.group, v.agent))
            .collect();
        for (group, agent) in leaves {
            self.send(
                agent,
                Message::Leave {
                    token: 0,
                    group,
                    member,
                },
            );
        }
        self.pump();
    }

    /// Asks for the group called `name`: its number, agent and the agent's view.
    /// Answered by one `QueryResult` (`None` for an unknown name) or `Failed`.
    pub fn query(&mut self, req: ReqId, name: &str) {
        if let Err(reason) = check_name(name, self.limits.max_name_len) {
            return self.fail(req, invalid_name(name, reason));
        }
        let pending = Pending::QueryLookup {
            req,
            name: name.to_owned(),
        };
        if let Some(token) = self.start(req, pending) {
            self.send(
                self.registry_node,
                Message::Lookup {
                    token,
                    create: false,
                    name: name.to_owned(),
                },
            );
        }
        self.pump();
    }

    /// Asks the registry for every group it knows. Answered by one `List` or `Failed`.
    pub fn list(&mut self, req: ReqId) {
        if let Some(token) = self.start(req, Pending::List { req }) {
            self.send(self.registry_node, Message::List { token });
        }
        self.pump();
    }

    // ------------------------------------------------------------ driver API

    /// A message from node `from`'s group service. Hostile input gives an error
    /// (the message is dropped) or is ignored; it never panics.
    pub fn handle_message(&mut self, from: NodeId, bytes: &[u8]) -> Result<(), DecodeError> {
        let msg = Message::decode(bytes)?;
        self.dispatch(from, msg);
        self.pump();
        Ok(())
    }

    /// The next message for another node's group service.
    pub fn poll_send(&mut self) -> Option<(NodeId, Vec<u8>)> {
        self.outbox.pop_front()
    }

    /// The next event for the daemon.
    pub fn poll_event(&mut self) -> Option<GroupEvent> {
        self.events.pop_front()
    }

    // ------------------------------------------------------------ inspection

    /// The current view of `group` as this node knows it; only for groups with
    /// local members.
    pub fn view(&self, group: GroupId) -> Option<&View> {
        self.views.get(&group)
    }

    /// The groups with local members, by number, with their names.
    pub fn local_groups(&self) -> impl Iterator<Item = (GroupId, &str)> {
        self.views.iter().map(|(g, v)| (*g, v.name.as_str()))
    }

    /// The authoritative view of `group` if this node is its agent. It may have no
    /// members: an emptied group is kept (see the crate documentation).
    pub fn agent_view(&self, group: GroupId) -> Option<&View> {
        self.agent_of.get(&group).map(|a| &a.view)
    }

    /// The groups this node is the agent of.
    pub fn agent_groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.agent_of.keys().copied()
    }

    /// What the registry knows, if this node is the registry: every group, by number.
    pub fn registry_groups(&self) -> Vec<GroupSummary> {
        self.registry
            .groups
            .iter()
            .map(|(g, e)| GroupSummary {
                group: *g,
                name: e.name.clone(),
                agent: e.agent,
                members: e.members,
            })
            .collect()
    }

    // ------------------------------------------------------------ internals

    fn fail(&mut self, req: ReqId, error: GroupError) {
        self.events.push_back(GroupEvent::Failed { req, error });
    }

    /// Records a request in flight and returns its token, or fails it if too many
    /// are in flight.
    fn start(&mut self, req: ReqId, pending: Pending) -> Option<u64> {
        if self.pending.len() >= self.limits.max_pending {
            self.fail(
                req,
                GroupError::TooManyPending {
                    limit: limit_u32(self.limits.max_pending),
                },
            );
            return None;
        }
        let token = self.next_token;
        self.next_token += 1;
        self.pending.insert(token, pending);
        self.deadlines.insert(token, self.now + REQUEST_TIMEOUT);
        Some(token)
    }

    fn send(&mut self, to: NodeId, msg: Message) {
        // Until this node knows who the registry is, what it would ask the
        // registry waits (a restarted node must not trust its configuration:
        // the role may have moved while it was away).
        if !self.confirmed && matches!(msg, Message::Lookup { .. } | Message::List { .. }) {
            self.held.push_back(msg);
            return;
        }
        if to == self.node {
            self.loopback.push_back(msg);
        } else {
            self.outbox.push_back((to, msg.encode()));
        }
    }

    /// Handles the messages this node sent itself, in order.
    fn pump(&mut self) {
        while let Some(msg) = self.loopback.pop_front() {
            self.dispatch(self.node, msg);
        }
    }

    /// Takes the request `token` if it waits for a reply from `from`.
    fn take_pending(&mut self, token: u64, from: NodeId) -> Option<Pending> {
        let p = self.pending.get(&token)?;
        if p.peer(self.registry_node) != from {
            return None;
        }
        self.pending.remove(&token)
    }

    fn dispatch(&mut self, from: NodeId, msg: Message) {
        match msg {
            // registry
            Message::Lookup {
                token,
                create,
                name,
            } => self.registry_lookup(from, token, create, name),
            Message::Count {
                group,
                epoch,
                members,
            } => self.registry_count(from, group, epoch, members),
            Message::List { token } => self.registry_list(from, token),
            Message::Announce {
                group,
                epoch,
                members,
                name,
            } => self.registry_announce(from, group, epoch, members, name),
            Message::Synced { epoch } => {
                // Kept even before this node becomes the registry of that
                // epoch: a peer may see the move a moment earlier.
                let e = self.synced.entry(from).or_insert(epoch);
                *e = (*e).max(epoch);
                self.release_deferred();
            }
            // agent
            Message::Register {
                token,
                group,
                member,
                name,
            } => self.agent_register(from, token, group, member, name),
            Message::Leave {
                token,
                group,
                member,
            } => self.agent_leave(from, token, group, member),
            Message::Query { token, group } => {
                let view = self.agent_of.get(&group).map(|a| a.view.clone());
                self.send(from, Message::QueryReply { token, group, view });
            }
            // operating agent
            Message::LookupReply { token, result } => self.oa_lookup_reply(from, token, result),
            Message::JoinReply {
                token,
                group,
                result,
            } => self.oa_join_reply(from, token, group, result),
            Message::LeaveReply {
                token,
                group,
                result,
            } => self.oa_leave_reply(from, token, group, result),
            Message::View(view) => {
                if view.agent != from {
                    return;
                }
                // Two agents for one group (two nodes took it over on
                // different verdicts): the newer epoch wins, then the lower
                // node; the other steps down and its members join again.
                if let Some(a) = self
                    .agent_of
                    .get(&view.group)
                    .filter(|_| view.agent != self.node)
                {
                    let theirs = (view.epoch, std::cmp::Reverse(view.agent));
                    let ours = (a.view.epoch, std::cmp::Reverse(self.node));
                    if theirs > ours {
                        self.agent_of.remove(&view.group);
                        self.views.remove(&view.group);
                    } else {
                        let mine = a.view.clone();
                        self.send(from, Message::View(mine));
                        return;
                    }
                }
                self.apply_view(view);
            }
            Message::QueryReply { token, group, view } => {
                self.oa_query_reply(from, token, group, view)
            }
            Message::ListReply { token, groups } => {
                if let Some(Pending::List { req }) = self.take_pending(token, from) {
                    self.events.push_back(GroupEvent::List { req, groups });
                }
            }
        }
    }

    // ---------------------------------------------------------- registry

    fn registry_lookup(&mut self, from: NodeId, token: u64, create: bool, name: String) {
        if !self.is_registry() {
            return;
        }
        let result = if let Err(reason) = check_name(&name, self.limits.max_name_len) {
            LookupResult::Error(invalid_name(&name, reason))
        } else if let Some(&group) = self.registry.by_name.get(&name) {
            let agent = self.registry.groups.get(&group).map_or(from, |e| e.agent);
            LookupResult::Found { group, agent }
        } else if !create {
            LookupResult::NotFound
        } else if !self.registry_synced() {
            // A new name, before every live node has told this new registry
            // what exists: it may exist already. Answer once it is known.
            self.deferred.push_back((from, token, name));
            return;
        } else if self.registry.groups.len() >= self.limits.max_groups {
            LookupResult::Error(GroupError::TooManyGroups {
                limit: limit_u32(self.limits.max_groups),
            })
        } else if let Some(group) = self.next_group_number() {
            self.registry.last_group = group;
            self.registry.by_name.insert(name.clone(), group);
            self.registry.groups.insert(
                group,
                RegEntry {
                    name,
                    agent: from,
                    members: 0,
                    epoch: 0,
                },
            );
            LookupResult::Found { group, agent: from }
        } else {
            LookupResult::Error(GroupError::NumbersExhausted)
        };
        self.send(from, Message::LookupReply { token, result });
    }

    /// The next group number: each registry epoch (the role's moves so far)
    /// numbers from its own range, `epoch × 65536 + 1 ..`, so a registry
    /// that took over can never hand out a number an earlier one gave,
    /// whether or not every announcement has reached it yet.
    fn next_group_number(&self) -> Option<GroupId> {
        let base = u64::from(self.registry_epoch) << 16;
        let next = u64::from(self.registry.last_group).max(base) + 1;
        let ok = next < base + (1 << 16) && next < u64::from(RESERVED_GROUPS);
        ok.then_some(next as GroupId)
    }

    /// A group's agent tells this (new) registry about the group.
    fn registry_announce(
        &mut self,
        from: NodeId,
        group: GroupId,
        epoch: u64,
        members: u32,
        name: String,
    ) {
        if !self.is_registry() || group == 0 || group >= RESERVED_GROUPS {
            return;
        }
        if check_name(&name, self.limits.max_name_len).is_err() {
            return;
        }
        let e = self.registry.groups.entry(group).or_insert(RegEntry {
            name: name.clone(),
            agent: from,
            members,
            epoch,
        });
        if epoch >= e.epoch {
            e.agent = from;
            e.epoch = epoch;
            e.members = members;
        }
        self.registry.by_name.entry(name).or_insert(group);
        self.registry.last_group = self.registry.last_group.max(group);
    }

    fn registry_count(&mut self, from: NodeId, group: GroupId, epoch: u64, members: u32) {
        if !self.is_registry() {
            return;
        }
        if let Some(e) = self.registry.groups.get_mut(&group) {
            // A newer epoch from another node: the agent role moved there
            // (its old node failed and the lowest survivor took it over).
            if epoch > e.epoch {
                e.agent = from;
                e.epoch = epoch;
                e.members = members;
            }
        }
    }

    fn registry_list(&mut self, from: NodeId, token: u64) {
        if !self.is_registry() {
            return;
        }
        let groups = self.registry_groups();
        self.send(from, Message::ListReply { token, groups });
    }

    // ---------------------------------------------------------- agent

    fn agent_register(
        &mut self,
        from: NodeId,
        token: u64,
        group: GroupId,
        member: MemberId,
        name: String,
    ) {
        let reply = |s: &mut Self, result| {
            s.send(
                from,
                Message::JoinReply {
                    token,
                    group,
                    result,
                },
            )
        };
        if group == 0 || group >= RESERVED_GROUPS {
            return reply(self, Err(GroupError::UnknownGroup { group }));
        }
        if let Err(reason) = check_name(&name, self.limits.max_name_len) {
            return reply(self, Err(invalid_name(&name, reason)));
        }
        if !self.agent_of.contains_key(&group) {
            if self.agent_of.len() >= self.limits.max_groups {
                let limit = limit_u32(self.limits.max_groups);
                return reply(self, Err(GroupError::TooManyGroups { limit }));
            }
            let view = View {
                group,
                name: name.clone(),
                epoch: 0,
                agent: self.node,
                members: Vec::new(),
            };
            self.agent_of
                .insert(group, AgentGroup { view, next_rank: 0 });
        }
        let max_members = self.limits.max_members;
        let Some(a) = self.agent_of.get_mut(&group) else {
            return;
        };
        let error = if a.view.name != name {
            Some(GroupError::UnknownGroup { group })
        } else if a.view.find(from, member).is_some() {
            Some(GroupError::AlreadyMember { group, member })
        } else if a.view.members.len() >= max_members || a.next_rank == u32::MAX {
            Some(GroupError::GroupFull {
                group,
                limit: limit_u32(max_members),
            })
        } else {
            None
        };
        if let Some(e) = error {
            if a.view.epoch == 0 {
                // Created for this REGISTER only: do not keep an agent state
                // that never had a member.
                self.agent_of.remove(&group);
            }
            return reply(self, Err(e));
        }
        let rank = a.next_rank;
        a.next_rank += 1;
        a.view.epoch += 1;
        a.view.members.push(Member {
            rank,
            node: from,
            member,
        });
        let view = a.view.clone();
        self.publish(&view, from);
        reply(self, Ok((rank, view)));
    }

    fn agent_leave(&mut self, from: NodeId, token: u64, group: GroupId, member: MemberId) {
        let result = match self.agent_of.get_mut(&group) {
            None => Err(GroupError::UnknownGroup { group }),
            Some(a) => match a
                .view
                .members
                .iter()
                .position(|m| m.node == from && m.member == member)
            {
                None => Err(GroupError::NotMember { group, member }),
                Some(i) => {
                    a.view.members.remove(i);
                    a.view.epoch += 1;
                    Ok(a.view.clone())
                }
            },
        };
        if let Ok(view) = &result {
            self.publish(view, from);
        }
        self.send(
            from,
            Message::LeaveReply {
                token,
                group,
                result,
            },
        );
    }

    /// Sends a new view to every member node but `requester` (whose reply carries
    /// it) and the member count to the registry.
    fn publish(&mut self, view: &View, requester: NodeId) {
        for node in view.nodes() {
            if node != requester {
                self.send(node, Message::View(view.clone()));
            }
        }
        // The registry learns the count, and from a newer epoch's sender
        // the agent (ANNOUNCE carries the name, so a registry that took the
        // role over builds its entry from it).
        self.send(
            self.registry_node,
            Message::Announce {
                group: view.group,
                epoch: view.epoch,
                members: limit_u32(view.members.len()),
                name: view.name.clone(),
            },
        );
    }

    // ---------------------------------------------------------- operating agent

    fn oa_lookup_reply(&mut self, from: NodeId, token: u64, result: LookupResult) {
        match self.take_pending(token, from) {
            Some(Pending::JoinLookup {
                req,
                member,
                name,
                cancelled,
            }) => match result {
                _ if cancelled => {}
                LookupResult::Found { group, agent } => {
                    self.pending.insert(
                        token,
                        Pending::JoinRegister {
                            req,
                            member,
                            group,
                            agent,
                            cancelled,
                        },
                    );
                    self.send(
                        agent,
                        Message::Register {
                            token,
                            group,
                            member,
                            name,
                        },
                    );
                }
                // The registry creates on a joining lookup; a "not found" is a
                // registry that is not one.
                LookupResult::NotFound => self.fail(
                    req,
                    GroupError::UnknownGroup {
                        group: RESERVED_GROUPS,
                    },
                ),
                LookupResult::Error(e) => self.fail(req, e),
            },
            Some(Pending::QueryLookup { req, name }) => match result {
                LookupResult::Found { group, agent } => {
                    self.pending.insert(
                        token,
                        Pending::QueryView {
                            req,
                            group,
                            name,
                            agent,
                        },
                    );
                    self.send(agent, Message::Query { token, group });
                }
                LookupResult::NotFound => self
                    .events
                    .push_back(GroupEvent::QueryResult { req, info: None }),
                LookupResult::Error(e) => self.fail(req, e),
            },
            Some(other) => {
                // A reply of the wrong kind: keep waiting for the right one.
                self.pending.insert(token, other);
            }
            None => {}
        }
    }

    fn oa_join_reply(
        &mut self,
        from: NodeId,
        token: u64,
        group: GroupId,
        result: Result<(u32, View), GroupError>,
    ) {
        let Some(p) = self.take_pending(token, from) else {
            return;
        };
        let Pending::JoinRegister {
            req,
            member,
            group: g,
            agent,
            cancelled,
        } = p
        else {
            self.pending.insert(token, p);
            return;
        };
        if g != group {
            self.pending.insert(token, p);
            return;
        }
        match result {
            Ok((rank, view)) => {
                if view.group != group || view.agent != agent {
                    // Malformed: answer the client rather than leave it hanging.
                    if !cancelled {
                        self.fail(req, GroupError::UnknownGroup { group });
                    }
                    return;
                }
                if !cancelled {
                    // Before the view: it must not look like a stale member.
                    self.joined.insert((group, member), view.epoch);
                }
                self.apply_view(view.clone());
                if cancelled {
                    self.send(
                        agent,
                        Message::Leave {
                            token: 0,
                            group,
                            member,
                        },
                    );
                } else {
                    self.events.push_back(GroupEvent::Joined {
                        req,
                        member,
                        group,
                        name: view.name.clone(),
                        rank,
                        view,
                    });
                }
            }
            Err(e) => {
                if !cancelled {
                    self.fail(req, e);
                }
            }
        }
    }

    fn oa_leave_reply(
        &mut self,
        from: NodeId,
        token: u64,
        group: GroupId,
        result: Result<View, GroupError>,
    ) {
        if let Ok(view) = &result {
            if view.group == group && view.agent == from {
                self.apply_view(view.clone());
            }
        }
        if token == 0 {
            return;
        }
        let Some(p) = self.take_pending(token, from) else {
            return;
        };
        let Pending::Leave {
            req,
            member,
            group: g,
            cancelled,
            ..
        } = p
        else {
            self.pending.insert(token, p);
            return;
        };
        if g != group {
            self.pending.insert(token, p);
            return;
        }
        if cancelled {
            return;
        }
        match result {
            Ok(_) => self
                .events
                .push_back(GroupEvent::Left { req, member, group }),
            Err(e) => self.fail(req, e),
        }
    }

    fn oa_query_reply(&mut self, from: NodeId, token: u64, group: GroupId, view: Option<View>) {
        if !matches!(self.pending.get(&token), Some(Pending::QueryView { group: g, .. }) if *g == group)
        {
            return;
        }
        let Some(Pending::QueryView {
            req, name, agent, ..
        }) = self.take_pending(token, from)
        else {
            return;
        };
        let view = view.filter(|v| v.group == group).unwrap_or_else(|| View {
            group,
            name: name.clone(),
            epoch: 0,
            agent,
            members: Vec::new(),
        });
        self.events.push_back(GroupEvent::QueryResult {
            req,
            info: Some(GroupInfo {
                group,
                name,
                agent,
                view,
            }),
        });
    }

    /// Takes a view from a group's agent: keeps it if it is newer than the one held
    /// and contains this node; forgets the group if it no longer contains this node.
    fn apply_view(&mut self, view: View) {
        let group = view.group;
        let held = self.views.get(&group);
        // A newer epoch; or the view of a node that took the agent role over
        // from one declared failed (its epochs continue from the view *it*
        // last had, which may be older than ours).
        let takeover =
            held.is_some_and(|v| v.agent != view.agent && self.failed.contains(&v.agent));
        if held.is_some_and(|v| v.epoch >= view.epoch) && !takeover {
            return;
        }
        let had = held.is_some();
        if view.has_node(self.node) {
            self.views.insert(group, view.clone());
        } else if had {
            self.views.remove(&group);
        } else {
            return;
        }
        self.reconcile(&view);
        self.events
            .push_back(GroupEvent::ViewChanged { group, view });
    }

    /// Checks a new view against this node's own members (anti-entropy: a
    /// message lost when a link was reset must not leave a member out for
    /// good): a member that joined and is missing from a later view without
    /// having left (its membership was lost, e.g. by an eviction) joins
    /// again, and the daemon sees a `Joined` it did not ask for. (The
    /// converse, a LEAVE lost on a reset link, leaves a stale member in the
    /// view until its node fails.)
    fn reconcile(&mut self, view: &View) {
        let g = view.group;
        let in_flight = |s: &Self, member: MemberId| {
            s.pending.values().any(|p| match p {
                Pending::JoinRegister {
                    group, member: m, ..
                }
                | Pending::Leave {
                    group, member: m, ..
                } => *group == g && *m == member,
                _ => false,
            })
        };
        let lost: Vec<MemberId> = self
            .joined
            .iter()
            .filter(|(&(gg, m), &epoch)| {
                gg == g && epoch < view.epoch && view.find(self.node, m).is_none()
            })
            .map(|(&(_, m), _)| m)
            .filter(|&m| !in_flight(self, m))
            .collect();
        for member in lost {
            self.joined.remove(&(g, member));
            let pending = Pending::JoinRegister {
                req: 0,
                member,
                group: g,
                agent: view.agent,
                cancelled: false,
            };
            if let Some(token) = self.start(0, pending) {
                self.send(
                    view.agent,
                    Message::Register {
                        token,
                        group: g,
                        member,
                        name: view.name.clone(),
                    },
                );
            }
        }
    }
}

fn invalid_name(name: &str, reason: NameError) -> GroupError {
    GroupError::InvalidName {
        name: name.to_owned(),
        reason,
    }
}
