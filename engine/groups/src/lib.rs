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
//! # Anti-entropy
//!
//! Messages are lost when links reset (a node declared failed, a restart), and
//! two nodes may take a role on different verdicts. Rather than make every
//! path exact, the state converges: every [`SYNC_PERIOD`] each node sends each
//! group's agent the full list of its members there (SYNC; the agent adds
//! the missing, drops the others, and sends its view to a node holding
//! another), each agent tells the registry its groups (ANNOUNCE), and each
//! node says which registry it follows (SYNCED). An agent drops the members
//! of a node silent for [`SYNC_MISSES`] rounds, and makes its own node's
//! members its local list every round. A join is in the SYNC from its
//! REGISTER on, and a view listing the member completes it should its
//! JOIN_REPLY be lost. A node whose agent answers
//! NOT_AGENT asks the registry (CLAIM); the registry arbitrates between two
//! agents of one group (newer epoch, then lower node; the loser gets RESIGN)
//! and merges a name found under two numbers into the lowest one, whose
//! members move there (a `Joined` with request 0 tells the daemon); one
//! number given to two names stays the name's the registry recorded first.
//! Until then a node keeps everything per group by number *and* name. The
//! registry is the one arbiter; it grants a role only while it hears a
//! majority of the cluster.
//!
//! No I/O, no clock. [`detector`] is the failure detector (seed 004 §3.4);
//! [`GroupService::node_failed`] is what an agent does with its verdict.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};

pub mod detector;
pub mod flush;
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
    views: BTreeMap<Key, View>,
    // GA
    agent_of: BTreeMap<Key, AgentGroup>,
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
    /// Members of this node that joined and have not left (the node is
    /// the authority on its own members), and whether the view held
    /// contains them: a member coming back into a view is a `Joined`.
    joined: BTreeMap<(GroupId, String, MemberId), bool>,
    /// For every group with members here: the agent they sync with
    /// (anti-entropy, [`SYNC_PERIOD`]).
    homes: BTreeMap<Key, NodeId>,
    /// The last sync round (ns), if any.
    last_sync: Option<u64>,
    /// Memberships repaired by anti-entropy (added, dropped, moved), and
    /// agent roles given up on the registry's word.
    repairs: u64,
    resignations: u64,
    /// As a registry that took the role over: the nodes that have announced
    /// everything they serve; new names wait until every live node has.
    synced: BTreeMap<NodeId, u32>,
    sync_needed: bool,
    /// How many nodes must have synced: every live one after a move, a
    /// majority of the cluster for the configured registry at start (a
    /// restarted registry thus never creates a name before it hears that
    /// the role moved on).
    sync_majority: bool,
    /// Creating lookups waiting for the sync: (from, token, name).
    deferred: VecDeque<(NodeId, u64, String)>,
}

/// View epochs: the bits above this count agent takeovers, those below the
/// changes under one agent.
pub const EPOCH_GENERATION_SHIFT: u32 = 40;

/// How long a request waits for its answer before it fails (ns).
pub const REQUEST_TIMEOUT: u64 = 2_000_000_000;

/// The anti-entropy period (ns): every node tells each group's agent its
/// members there (SYNC) and every agent tells the registry its groups
/// (ANNOUNCE). Whatever a reset link, a crash or a partition lost, the
/// views, agents and names agree again within a few periods of the last
/// fault.
pub const SYNC_PERIOD: u64 = 200_000_000;

/// Sync rounds an agent waits for a member node's SYNC before it drops that
/// node's members (a LEAVE lost on a reset link, a node that lost track).
pub const SYNC_MISSES: u32 = 3;

#[derive(Debug)]
struct AgentGroup {
    view: View,
    next_rank: u32,
    /// Sync rounds since each member node last synced: a node silent for
    /// more than [`SYNC_MISSES`] rounds loses its members.
    missed: BTreeMap<NodeId, u32>,
}

impl AgentGroup {
    fn new(view: View, next_rank: u32) -> AgentGroup {
        AgentGroup {
            view,
            next_rank,
            missed: BTreeMap::new(),
        }
    }
}

/// A group as a node knows it: its number and its name. The name is the
/// group's identity; the number is normally its alone, but two registries
/// that never heard of each other may give one number to two names until
/// the registry moves one of them (RESIGN). Everything a node keeps per
/// group is keyed by both, so a node with members of both names keeps
/// them apart and a renumbering moves exactly that name's members.
type Key = (GroupId, String);

fn key(group: GroupId, name: &str) -> Key {
    (group, name.to_owned())
}

/// The range of `joined` holding the members of (`group`, `name`).
fn joined_range(
    group: GroupId,
    name: &str,
) -> std::ops::RangeInclusive<(GroupId, String, MemberId)> {
    (group, name.to_owned(), 0)..=(group, name.to_owned(), MemberId::MAX)
}

/// The range of a map keyed by [`Key`] holding every name under `group`.
fn number_range(group: GroupId) -> std::ops::Range<Key> {
    (group, String::new())..(group.saturating_add(1), String::new())
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
        name: String,
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
    /// A CLAIM to the registry: the group's agent said it is not.
    Relocate {
        group: GroupId,
        name: String,
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
            Pending::Relocate { .. } => 0,
        }
    }

    /// The request to answer if it ends without a reply (None: the member
    /// is gone and its requests get no answer).
    fn answer_to(&self) -> Option<ReqId> {
        match self {
            Pending::JoinLookup { cancelled, .. }
            | Pending::JoinRegister { cancelled, .. }
            | Pending::Leave { cancelled, .. } => (!cancelled).then_some(self.req()),
            Pending::Relocate { .. } => None,
            _ => Some(self.req()),
        }
    }

    /// The node whose reply this request waits for.
    fn peer(&self, registry: NodeId) -> NodeId {
        match self {
            Pending::JoinLookup { .. }
            | Pending::QueryLookup { .. }
            | Pending::List { .. }
            | Pending::Relocate { .. } => registry,
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
            homes: BTreeMap::new(),
            last_sync: None,
            repairs: 0,
            resignations: 0,
            synced: Default::default(),
            sync_needed: false,
            sync_majority: false,
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
        let groups: Vec<Key> = self.agent_of.keys().cloned().collect();
        for k in groups {
            let a = self.agent_of.get_mut(&k).expect("listed");
            if !a.view.has_node(node) {
                continue;
            }
            a.view.members.retain(|m| m.node != node);
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
        if self.last_sync.is_none_or(|t| now >= t + SYNC_PERIOD) {
            self.last_sync = Some(now);
            self.sync_round();
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
        if self.is_registry() && self.registry_moves == 0 && !self.confirmed {
            self.sync_needed = true;
            self.sync_majority = true;
        }
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
        self.sync_majority = false;
        if next == self.node {
            // Never hand out a number this node already knows to be taken.
            let known = self
                .views
                .keys()
                .chain(self.agent_of.keys())
                .map(|k| k.0)
                .max();
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
        // Tells the registry what this node serves (SYNCED: a registry
        // creates names only once enough nodes have).
        self.announce_all();
        self.release_deferred();
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

    /// Whether this registry knows every group that exists (it has been the
    /// registry from the start, or every live node has synced with it).
    fn registry_synced(&self) -> bool {
        let synced = |n: &NodeId| {
            *n == self.node
                || self
                    .synced
                    .get(n)
                    .is_some_and(|&e| e >= self.registry_epoch)
        };
        if self.sync_needed && self.sync_majority {
            return self.cluster.iter().filter(|n| synced(n)).count() * 2 > self.cluster.len();
        }
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
    /// (Should the number carry two names for the moment, the member
    /// leaves the first of them it is in.)
    pub fn leave(&mut self, req: ReqId, member: MemberId, group: GroupId) {
        if self.views.range(number_range(group)).next().is_none() {
            return self.fail(req, GroupError::UnknownGroup { group });
        }
        let node = self.node;
        let Some(view) = self
            .views
            .range(number_range(group))
            .map(|(_, v)| v)
            .find(|v| v.find(node, member).is_some())
        else {
            return self.fail(req, GroupError::NotMember { group, member });
        };
        let agent = view.agent;
        let name = view.name.clone();
        let pending = Pending::Leave {
            req,
            member,
            group,
            agent,
            cancelled: false,
        };
        if let Some(token) = self.start(req, pending) {
            // From now on the member is not this node's any more: a sync
            // tells the agent so even if the LEAVE is lost.
            self.joined.remove(&(group, name, member));
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
        self.joined.retain(|(_, _, m), _| *m != member);
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
    /// local members. (Should the number carry two names for the moment,
    /// the first name's: [`GroupService::named_view`] tells them apart.)
    pub fn view(&self, group: GroupId) -> Option<&View> {
        self.views.range(number_range(group)).map(|(_, v)| v).next()
    }

    /// The current view of the group numbered `group` and called `name`, as
    /// this node knows it; only for groups with local members.
    pub fn named_view(&self, group: GroupId, name: &str) -> Option<&View> {
        self.views.get(&key(group, name))
    }

    /// The groups with local members, by number, with their names.
    pub fn local_groups(&self) -> impl Iterator<Item = (GroupId, &str)> {
        self.views.keys().map(|(g, name)| (*g, name.as_str()))
    }

    /// The authoritative view of `group` if this node is its agent. It may have no
    /// members: an emptied group is kept (see the crate documentation).
    /// (The first name's, should the number carry two for the moment.)
    pub fn agent_view(&self, group: GroupId) -> Option<&View> {
        self.agent_of
            .range(number_range(group))
            .map(|(_, a)| &a.view)
            .next()
    }

    /// The authoritative view of the group numbered `group` and called
    /// `name` if this node is its agent.
    pub fn named_agent_view(&self, group: GroupId, name: &str) -> Option<&View> {
        self.agent_of.get(&key(group, name)).map(|a| &a.view)
    }

    /// The groups this node is the agent of (a number twice should it
    /// carry two names for the moment).
    pub fn agent_groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.agent_of.keys().map(|k| k.0)
    }

    /// The groups this node is the agent of, by number, with their names.
    pub fn named_agent_groups(&self) -> impl Iterator<Item = (GroupId, &str)> + '_ {
        self.agent_of.keys().map(|(g, name)| (*g, name.as_str()))
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
        if !self.confirmed
            && matches!(
                msg,
                Message::Lookup { .. } | Message::List { .. } | Message::Claim { .. }
            )
        {
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
                // The first name's, should the number carry two: the asker
                // checks the name.
                let view = self.agent_view(group).cloned();
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
                let k = key(view.group, &view.name);
                if let Some(a) = self.agent_of.get(&k).filter(|_| view.agent != self.node) {
                    let theirs = (view.epoch, std::cmp::Reverse(view.agent));
                    let ours = (a.view.epoch, std::cmp::Reverse(self.node));
                    if theirs > ours {
                        self.agent_of.remove(&k);
                        self.views.remove(&k);
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
            Message::Sync {
                group,
                epoch,
                agent,
                name,
                members,
            } => self.agent_sync(from, group, epoch, agent, &name, &members),
            Message::NotAgent { group, name } => self.oa_not_agent(from, group, name),
            Message::Claim {
                token,
                group,
                stale,
                name,
            } => self.registry_claim(from, token, group, stale, name),
            Message::Resign {
                group,
                name,
                canonical,
                agent,
            } => {
                if from != self.registry_node {
                    return;
                }
                if canonical == group && agent == self.node {
                    return;
                }
                let k = key(group, &name);
                if self.agent_of.remove(&k).is_some() {
                    self.resignations += 1;
                }
                if self.homes.contains_key(&k) {
                    self.relocate(group, canonical, agent, name);
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
            let majority = self.live_majority();
            let agent = match self.registry.groups.get_mut(&group) {
                // Its agent failed and no survivor took over (it had no
                // other member): the joiner takes the role.
                Some(e) if self.failed.contains(&e.agent) && majority => {
                    e.agent = from;
                    from
                }
                Some(e) => e.agent,
                None => from,
            };
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
        self.registry.last_group = self.registry.last_group.max(group);
        let canonical = self.canonical(&name, group);
        // The number may be another name's: the announcer's members move.
        let collides = self
            .registry
            .groups
            .get(&group)
            .is_some_and(|e| e.name != name);
        let mut wins = false;
        if !collides {
            let failed = &self.failed;
            let e = self.registry.groups.entry(group).or_insert(RegEntry {
                name: name.clone(),
                agent: from,
                members,
                epoch,
            });
            // Two nodes hold the agent role of one group (they took it over
            // on different verdicts, or one restarted): the newer epoch keeps
            // it, then the lower node; an agent this registry saw fail loses.
            wins = e.agent == from
                || failed.contains(&e.agent)
                || (epoch, std::cmp::Reverse(from)) > (e.epoch, std::cmp::Reverse(e.agent));
            if wins {
                e.agent = from;
                e.epoch = e.epoch.max(epoch);
                e.members = members;
            }
        }
        if !wins || canonical != group {
            let agent = self
                .registry
                .groups
                .get(&canonical)
                .map_or(from, |c| c.agent);
            self.send(
                from,
                Message::Resign {
                    group,
                    name,
                    canonical,
                    agent,
                },
            );
        }
    }

    /// The number `name` lives under: the lowest number any node announced
    /// or claimed for it (numbers only accumulate, so every registry that
    /// has heard the same numbers agrees, and a name split by a registry
    /// that created it before an announcement reached it is merged).
    ///
    /// Two registries that did not know of each other may have given one
    /// number to two names: the name recorded first keeps it and the other
    /// gets a new number from this registry's range.
    fn canonical(&mut self, name: &str, group: GroupId) -> GroupId {
        let taken = self
            .registry
            .groups
            .get(&group)
            .is_some_and(|e| e.name != name);
        let named = |s: &Self, c: GroupId| s.registry.groups.get(&c).is_none_or(|e| e.name == name);
        match self.registry.by_name.get(name).copied() {
            Some(c) if named(self, c) && (taken || c <= group) => c,
            _ if !taken => {
                self.registry.by_name.insert(name.to_owned(), group);
                group
            }
            _ => match self.next_group_number() {
                Some(c) => {
                    self.registry.last_group = c;
                    self.registry.by_name.insert(name.to_owned(), c);
                    c
                }
                None => group,
            },
        }
    }

    /// A member node's agent said it is not: the registry names the agent,
    /// and gives the role to the claimer if the node it last knew as agent
    /// is the one that disowned it or has failed (only while this registry
    /// hears a majority of the cluster, like every takeover).
    fn registry_claim(
        &mut self,
        from: NodeId,
        token: u64,
        group: GroupId,
        stale: NodeId,
        name: String,
    ) {
        if !self.is_registry()
            || !self.registry_synced()
            || group == 0
            || group >= RESERVED_GROUPS
            || check_name(&name, self.limits.max_name_len).is_err()
        {
            return; // the claimer asks again
        }
        self.registry.last_group = self.registry.last_group.max(group);
        let canonical = self.canonical(&name, group);
        let majority = self.live_majority();
        let failed = &self.failed;
        let e = self.registry.groups.entry(canonical).or_insert(RegEntry {
            name,
            agent: from,
            members: 0,
            epoch: 0,
        });
        let vacant = (canonical == group && e.agent == stale) || failed.contains(&e.agent);
        if vacant && majority {
            e.agent = from;
        }
        let result = LookupResult::Found {
            group: canonical,
            agent: e.agent,
        };
        self.send(from, Message::LookupReply { token, result });
    }

    /// Whether the nodes not declared failed are a majority of the cluster
    /// (always, without a cluster).
    fn live_majority(&self) -> bool {
        let live = self
            .cluster
            .iter()
            .filter(|n| !self.failed.contains(n))
            .count();
        self.cluster.is_empty() || live * 2 > self.cluster.len()
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
        let k = key(group, &name);
        if !self.agent_of.contains_key(&k) {
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
            self.agent_of.insert(k.clone(), AgentGroup::new(view, 0));
        }
        let max_members = self.limits.max_members;
        let Some(a) = self.agent_of.get_mut(&k) else {
            return;
        };
        let error = if a.view.find(from, member).is_some() {
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
                self.agent_of.remove(&k);
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
        self.publish(&view, Some(from));
        reply(self, Ok((rank, view)));
    }

    fn agent_leave(&mut self, from: NodeId, token: u64, group: GroupId, member: MemberId) {
        // LEAVE names the number only: should it carry two names here, the
        // member leaves the first it is in (a sync puts right the other).
        let mut known = false;
        let mut result = Err(GroupError::UnknownGroup { group });
        for (_, a) in self.agent_of.range_mut(number_range(group)) {
            known = true;
            if let Some(i) = a
                .view
                .members
                .iter()
                .position(|m| m.node == from && m.member == member)
            {
                a.view.members.remove(i);
                a.view.epoch += 1;
                result = Ok(a.view.clone());
                break;
            }
        }
        if known && result.is_err() {
            result = Err(GroupError::NotMember { group, member });
        }
        if let Ok(view) = &result {
            self.publish(view, Some(from));
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
    fn publish(&mut self, view: &View, requester: Option<NodeId>) {
        for node in view.nodes() {
            if Some(node) != requester {
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
                            name: name.clone(),
                            agent,
                            cancelled,
                        },
                    );
                    // The member is synced from now on: should the
                    // REGISTER or its answer be lost on a reset link, the
                    // agent adds it on the SYNC and its view completes the
                    // join (apply_view).
                    self.homes.entry(key(group, &name)).or_insert(agent);
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
            Some(Pending::Relocate { group, name }) => {
                if let LookupResult::Found {
                    group: canonical,
                    agent,
                } = result
                {
                    if self.homes.contains_key(&key(group, &name)) {
                        self.relocate(group, canonical, agent, name);
                    }
                }
            }
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
        if !matches!(&p, Pending::JoinRegister { group: g, .. } if *g == group) {
            self.pending.insert(token, p);
            return;
        }
        let Pending::JoinRegister {
            req,
            member,
            name,
            agent,
            cancelled,
            ..
        } = p
        else {
            return;
        };
        match result {
            Ok((rank, view)) => {
                if view.group != group || view.agent != agent || view.name != name {
                    // Malformed: answer the client rather than leave it hanging.
                    if !cancelled {
                        self.fail(req, GroupError::UnknownGroup { group });
                    }
                    return;
                }
                if !cancelled {
                    // Before the view, which contains it: apply_view must
                    // not announce it a second time.
                    self.joined.insert((group, name.clone(), member), true);
                    self.homes.insert(key(group, &name), agent);
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
        let view = view
            .filter(|v| v.group == group && v.name == name)
            .unwrap_or_else(|| View {
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
        let k = key(group, &view.name);
        let held = self.views.get(&k);
        // A newer epoch; or the view of a node that took the agent role over
        // from one declared failed (its epochs continue from the view *it*
        // last had, which may be older than ours).
        let takeover =
            held.is_some_and(|v| v.agent != view.agent && self.failed.contains(&v.agent));
        if held.is_some_and(|v| v.epoch >= view.epoch) && !takeover {
            return;
        }
        let had = held.is_some();
        let mut view = view;
        if !self.has_local(&k) {
            // No member here wants to be in it (a late view of a group this
            // node left or moved away from): this node holds it as a view
            // without itself, and the agent drops its members after their
            // missed syncs.
            let node = self.node;
            view.members.retain(|m| m.node != node);
        }
        if view.has_node(self.node) {
            self.views.insert(k.clone(), view.clone());
        } else if had {
            self.views.remove(&k);
        } else {
            return;
        }
        if let Some(home) = self.homes.get_mut(&k) {
            *home = view.agent;
        }
        self.events.push_back(GroupEvent::ViewChanged {
            group,
            view: view.clone(),
        });
        // Members of this node coming back into the view (anti-entropy
        // restored a membership that a reset link or an eviction lost): the
        // daemon hears a `Joined` it did not ask for.
        let node = self.node;
        for ((_, _, member), present) in self.joined.range_mut(joined_range(group, &view.name)) {
            let now = view.find(node, *member);
            if let (Some(m), false) = (now, *present) {
                self.events.push_back(GroupEvent::Joined {
                    req: 0,
                    member: *member,
                    group,
                    name: view.name.clone(),
                    rank: m.rank,
                    view: view.clone(),
                });
            }
            *present = now.is_some();
        }
        // Joins on their way whose member the view lists already (the
        // agent's JOIN_REPLY was lost on a reset link, or a SYNC brought
        // the member in first): done, as if the reply had come. Not a
        // second join of a member already in (the agent refuses that one),
        // nor one whose LEAVE is on its way (the view may list the member
        // from before that leave).
        let leaving: Vec<MemberId> = self
            .pending
            .values()
            .filter_map(|p| match p {
                Pending::Leave {
                    group: g, member, ..
                } if *g == group => Some(*member),
                _ => None,
            })
            .collect();
        let done: Vec<u64> = self
            .pending
            .iter()
            .filter_map(|(&t, p)| match p {
                Pending::JoinRegister {
                    group: g,
                    name: n,
                    member,
                    cancelled: false,
                    ..
                } if *g == group && *n == view.name && view.find(node, *member).is_some() => {
                    Some(t)
                }
                _ => None,
            })
            .collect();
        for t in done {
            let Some(Pending::JoinRegister { member, .. }) = self.pending.get(&t) else {
                continue;
            };
            if leaving.contains(member)
                || self
                    .joined
                    .contains_key(&(group, view.name.clone(), *member))
            {
                continue;
            }
            let Some(Pending::JoinRegister { req, member, .. }) = self.pending.remove(&t) else {
                continue;
            };
            self.deadlines.remove(&t);
            let rank = view.find(node, member).map_or(0, |m| m.rank);
            self.joined.insert((group, view.name.clone(), member), true);
            self.homes.insert(k.clone(), view.agent);
            self.events.push_back(GroupEvent::Joined {
                req,
                member,
                group,
                name: view.name.clone(),
                rank,
                view: view.clone(),
            });
        }
    }

    // ---------------------------------------------------------- anti-entropy

    /// One anti-entropy round ([`SYNC_PERIOD`]): agents tell the registry
    /// their groups and drop the members of nodes silent for
    /// [`SYNC_MISSES`] rounds; every node tells each group's agent its
    /// members there.
    fn sync_round(&mut self) {
        if self.confirmed {
            // Also SYNCED, which a new registry waits for from every node
            // before it creates names (one lost on a reset link would hold
            // it back for good).
            self.announce_all();
        }
        let groups: Vec<Key> = self.agent_of.keys().cloned().collect();
        for k in groups {
            let me = self.node;
            // This node's own members in the view are exactly the ones it
            // has (it sends itself no SYNC once it has none there, and a
            // view taken over may still list one that left while its LEAVE
            // went to the old agent).
            let mine = self.local_members(&k, me);
            let a = self.agent_of.get_mut(&k).expect("listed");
            let before = a.view.members.len();
            a.view
                .members
                .retain(|m| m.node != me || mine.contains(&m.member));
            if a.view.members.len() != before {
                a.view.epoch += 1;
                let view = a.view.clone();
                self.repairs += (before - view.members.len()) as u64;
                self.publish(&view, None);
            }
            let a = self.agent_of.get_mut(&k).expect("listed");
            let mut silent = Vec::new();
            for n in a.view.nodes() {
                if n == me {
                    continue;
                }
                let missed = a.missed.entry(n).or_insert(0);
                *missed += 1;
                if *missed > SYNC_MISSES {
                    silent.push(n);
                }
            }
            if silent.is_empty() {
                continue;
            }
            a.view.members.retain(|m| !silent.contains(&m.node));
            a.missed.retain(|n, _| !silent.contains(n));
            a.view.epoch += 1;
            let view = a.view.clone();
            self.repairs += silent.len() as u64;
            self.publish(&view, None);
            for n in silent {
                self.send(n, Message::View(view.clone()));
            }
        }
        let homes: Vec<Key> = self.homes.keys().cloned().collect();
        for k in homes {
            self.sync_group(&k);
        }
        // A view held with no member here left in it (its members vanished
        // and the agent that would have answered their leave is gone): the
        // node forgets it as if it had left.
        let stale: Vec<Key> = self
            .views
            .keys()
            .filter(|k| !self.has_local(k))
            .cloned()
            .collect();
        for k in stale {
            let mut view = self.views.remove(&k).expect("listed");
            let node = self.node;
            view.members.retain(|m| m.node != node);
            self.events
                .push_back(GroupEvent::ViewChanged { group: k.0, view });
        }
    }

    /// Whether a member of this node is in the group or joining it.
    fn has_local(&self, k: &Key) -> bool {
        let (group, name) = (k.0, k.1.as_str());
        self.joined.range(joined_range(group, name)).next().is_some()
            || self.pending.values().any(|p| {
                matches!(p, Pending::JoinRegister { group: g, name: n, cancelled: false, .. } if *g == group && n == name)
            })
    }

    /// This node's members of the group: joined and not left, and joins on
    /// their way to `agent`.
    fn local_members(&self, k: &Key, agent: NodeId) -> Vec<MemberId> {
        let (group, name) = (k.0, k.1.as_str());
        let mut members: Vec<MemberId> = self
            .joined
            .range(joined_range(group, name))
            .map(|((_, _, m), _)| *m)
            .collect();
        for p in self.pending.values() {
            if let Pending::JoinRegister {
                group: g,
                name: n,
                member,
                agent: a,
                cancelled: false,
                ..
            } = p
            {
                if *g == group && n == name && *a == agent && !members.contains(member) {
                    members.push(*member);
                }
            }
        }
        members
    }

    /// Whether a CLAIM for the group is in flight.
    fn relocating(&self, k: &Key) -> bool {
        self.pending.values().any(
            |p| matches!(p, Pending::Relocate { group, name } if *group == k.0 && *name == k.1),
        )
    }

    /// Sends the agent of the group this node's members there (SYNC).
    fn sync_group(&mut self, k: &Key) {
        let Some(&home) = self.homes.get(k) else {
            return;
        };
        let members = self.local_members(k, home);
        if members.is_empty() {
            self.homes.remove(k);
            return;
        }
        if self.failed.contains(&home) {
            return; // its survivors take over (take_over_from)
        }
        if self.relocating(k) {
            return;
        }
        let (epoch, agent) = self.views.get(k).map_or((0, home), |v| (v.epoch, v.agent));
        self.send(
            home,
            Message::Sync {
                group: k.0,
                epoch,
                agent,
                name: k.1.clone(),
                members,
            },
        );
    }

    /// A member node's SYNC: its members in the view become exactly the ones
    /// it lists, and it gets the view if it holds another.
    fn agent_sync(
        &mut self,
        from: NodeId,
        group: GroupId,
        epoch: u64,
        agent: NodeId,
        name: &str,
        members: &[MemberId],
    ) {
        let max_members = self.limits.max_members;
        let me = self.node;
        let k = key(group, name);
        let Some(a) = self.agent_of.get_mut(&k) else {
            self.send(
                from,
                Message::NotAgent {
                    group,
                    name: name.to_owned(),
                },
            );
            return;
        };
        a.missed.remove(&from);
        let before = a.view.members.len();
        a.view
            .members
            .retain(|m| m.node != from || members.contains(&m.member));
        let mut changed = before - a.view.members.len();
        for &member in members {
            if a.view.find(from, member).is_none()
                && a.view.members.len() < max_members
                && a.next_rank < u32::MAX
            {
                a.view.members.push(Member {
                    rank: a.next_rank,
                    node: from,
                    member,
                });
                a.next_rank += 1;
                changed += 1;
            }
        }
        // The node holds a view this agent's epochs do not continue (another
        // agent's, or a later one of an agent it replaced): jump to a new
        // generation so that the node takes this agent's views.
        let foreign = agent != me && epoch > 0;
        if epoch > a.view.epoch || (foreign && epoch >= a.view.epoch) {
            a.view.epoch = ((epoch >> EPOCH_GENERATION_SHIFT) + 1) << EPOCH_GENERATION_SHIFT;
            changed += 1;
        }
        let view = a.view.clone();
        if changed > 0 {
            let a = self.agent_of.get_mut(&k).expect("held");
            a.view.epoch += 1;
            let view = a.view.clone();
            self.repairs += 1;
            self.publish(&view, None);
            if !view.has_node(from) {
                self.send(from, Message::View(view));
            }
        } else if epoch != view.epoch || agent != me {
            self.send(from, Message::View(view));
        }
    }

    /// The node this node syncs the group with says it is not the agent: ask
    /// the registry who is (CLAIM).
    fn oa_not_agent(&mut self, from: NodeId, group: GroupId, name: String) {
        let k = (group, name);
        let Some(&home) = self.homes.get(&k) else {
            return;
        };
        if home != from || self.relocating(&k) {
            return;
        }
        let (group, name) = k;
        let pending = Pending::Relocate {
            group,
            name: name.clone(),
        };
        if let Some(token) = self.start(0, pending) {
            // Asked again at the next round rather than after REQUEST_TIMEOUT.
            self.deadlines.insert(token, self.now + 2 * SYNC_PERIOD);
            self.send(
                self.registry_node,
                Message::Claim {
                    token,
                    group,
                    stale: from,
                    name,
                },
            );
        }
    }

    /// The registry says the group called `name` lives under `canonical`
    /// with agent `agent`: this node's members of (`group`, `name`) move to
    /// it (and to its number, if another), and if this node is named agent
    /// it takes the role from the view it holds (a new generation of
    /// epochs). Members of another name under `group` stay where they are.
    fn relocate(&mut self, group: GroupId, canonical: GroupId, agent: NodeId, name: String) {
        let k = key(group, &name);
        if canonical == group {
            if let Some(h) = self.homes.get_mut(&k) {
                *h = agent;
            }
            if agent == self.node && !self.agent_of.contains_key(&k) {
                let held = self.views.get(&k).cloned();
                let mut view = held.clone().unwrap_or(View {
                    group,
                    name: name.clone(),
                    epoch: 0,
                    agent,
                    members: Vec::new(),
                });
                view.agent = agent;
                view.epoch = ((view.epoch >> EPOCH_GENERATION_SHIFT) + 1) << EPOCH_GENERATION_SHIFT;
                let next_rank = view.members.iter().map(|m| m.rank + 1).max().unwrap_or(0);
                self.agent_of
                    .insert(k.clone(), AgentGroup::new(view.clone(), next_rank));
                self.takeovers += 1;
                self.publish(&view, None);
            }
            if agent != self.node {
                self.sync_group(&k);
            }
            return;
        }
        // Another number: the members move there as if they joined it.
        self.agent_of.remove(&k);
        let members: Vec<MemberId> = self
            .joined
            .range(joined_range(group, &name))
            .map(|((_, _, m), _)| *m)
            .collect();
        for &m in &members {
            self.joined.remove(&(group, name.clone(), m));
            self.joined.insert((canonical, name.clone(), m), false);
        }
        self.repairs += members.len() as u64;
        self.homes.remove(&k);
        let to = key(canonical, &name);
        self.homes.insert(to.clone(), agent);
        if let Some(mut view) = self.views.remove(&k) {
            let node = self.node;
            view.members.retain(|m| m.node != node);
            self.events
                .push_back(GroupEvent::ViewChanged { group, view });
        }
        if agent != self.node {
            self.sync_group(&to);
        }
    }

    /// Memberships repaired by anti-entropy (members added or dropped by
    /// an agent, moved to another number), for counters.
    pub fn repairs(&self) -> u64 {
        self.repairs
    }

    /// Agent roles given up on the registry's word.
    pub fn resignations(&self) -> u64 {
        self.resignations
    }
}

fn invalid_name(name: &str, reason: NameError) -> GroupError {
    GroupError::InvalidName {
        name: name.to_owned(),
        reason,
    }
}
