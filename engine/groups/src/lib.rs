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
//! - **The agent stays put while it lives.** The agent is the node whose join
//!   created the group. When its last local member leaves while others remain, it
//!   stays the agent and keeps serving; only its failure moves the role, to the
//!   lowest live member node of a live majority (`roles`).
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

// The service, one module per concern (each an `impl GroupService` block
// over the state below, or a state of its own):
mod agent; // the group agent: members, ranks, views sent
mod anti_entropy; // periodic SYNC/ANNOUNCE rounds and the repairs they bring
mod driver; // messages in and out, events, time; dispatch to the roles
mod key; // how everything per group is keyed: (number, name)
mod operating; // the operating agent: local clients' requests, views held
mod registry; // the registry role: names to numbers, agents, arbitration
mod roles; // who plays which role: cluster, failures, role moves, takeovers
mod types;

// Parts of their own, used by the daemon next to the service:
pub mod detector;
pub mod flush;
pub mod liveness;
pub mod wire;

pub use anti_entropy::{SYNC_MISSES, SYNC_PERIOD};
pub use operating::REQUEST_TIMEOUT;
pub use types::{
    check_name, GroupError, GroupEvent, GroupId, GroupInfo, GroupSummary, Limits, Member, MemberId,
    NameError, NodeId, ReqId, View, RESERVED_GROUPS,
};
pub use wire::DecodeError;

use agent::AgentGroup;
use key::Key;
use operating::Pending;
use registry::Registry;
use wire::Message;

/// How a node describes, by a group's name, the group's settings that
/// every node must share (its algorithm, its mode...). A joining node sends
/// its description in `REGISTER`; the group's agent refuses the join with
/// [`GroupError::SettingsDiffer`] when its own differs. An empty
/// description (the default, and builds before this check) is not checked.
#[derive(Clone, Default)]
pub struct SettingsOf(Option<std::sync::Arc<Describe>>);

/// A function from a group's name to its description (`SettingsOf`).
type Describe = dyn Fn(&str) -> String + Send + Sync;

impl SettingsOf {
    pub fn new(f: impl Fn(&str) -> String + Send + Sync + 'static) -> SettingsOf {
        SettingsOf(Some(std::sync::Arc::new(f)))
    }

    /// The description of group `name`'s settings here (empty: none).
    pub fn describe(&self, name: &str) -> String {
        self.0.as_ref().map_or_else(String::new, |f| f(name))
    }
}

impl std::fmt::Debug for SettingsOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "SettingsOf(..)"
        } else {
            "SettingsOf(none)"
        })
    }
}

/// Group management of one daemon. See the crate documentation.
#[derive(Debug)]
pub struct GroupService {
    node: NodeId,
    limits: Limits,
    /// The groups' shared settings, as this node describes them.
    settings_of: SettingsOf,
    // operating agent (operating.rs)
    next_token: u64,
    pending: BTreeMap<u64, Pending>,
    /// Each request's deadline (ns).
    deadlines: BTreeMap<u64, u64>,
    views: BTreeMap<Key, View>,
    /// Members of this node that joined and have not left (the node is
    /// the authority on its own members), and whether the view held
    /// contains them: a member coming back into a view is a `Joined`.
    joined: BTreeMap<(GroupId, String, MemberId), bool>,
    // group agent (agent.rs)
    agent_of: BTreeMap<Key, AgentGroup>,
    // registry (registry.rs; only used when node == registry_node)
    registry: Registry,
    // roles (roles.rs)
    registry_node: NodeId,
    /// Nodes declared failed (and not heard again).
    failed: std::collections::BTreeSet<NodeId>,
    /// Peers the failure detector doubts (`set_doubted`): not counted as
    /// live when this node weighs a majority to take a role.
    doubted: std::collections::BTreeSet<NodeId>,
    /// The failed set changed since roles left on failed nodes were last
    /// weighed (`set_doubted` weighs them again then, or when the doubts
    /// change).
    reweigh: bool,
    /// The registry's takeover as before 2026-11-29 (replays only:
    /// [`GroupService::registry_takeover_as_before`]).
    takeover_as_before: bool,
    takeovers: u64,
    /// Every node of the cluster, sorted (for moving the registry role).
    cluster: Vec<NodeId>,
    registry_moves: u64,
    registry_epoch: u32,
    confirmed: bool,
    /// Registry requests waiting for `confirmed`.
    held: VecDeque<Message>,
    // anti-entropy (anti_entropy.rs)
    /// For every group with members here: the agent they sync with
    /// (anti-entropy, [`SYNC_PERIOD`]).
    homes: BTreeMap<Key, NodeId>,
    /// The last sync round (ns), if any.
    last_sync: Option<u64>,
    /// Memberships repaired by anti-entropy (added, dropped, moved), and
    /// agent roles given up on the registry's word.
    repairs: u64,
    resignations: u64,
    /// Joins this node refused as agent: their node's settings differ.
    settings_refused: u64,
    // driver (driver.rs)
    loopback: VecDeque<Message>,
    outbox: VecDeque<(NodeId, Vec<u8>)>,
    events: VecDeque<GroupEvent>,
    /// The time of the last [`GroupService::tick`] (ns).
    now: u64,
}

/// View epochs: the bits above this count agent takeovers, those below the
/// changes under one agent.
pub const EPOCH_GENERATION_SHIFT: u32 = 40;

impl GroupService {
    /// A service for node `node`, with `registry` the registry's node (possibly
    /// `node` itself). Limits above the wire's bounds are clamped to them.
    pub fn new(node: NodeId, registry: NodeId, limits: Limits) -> GroupService {
        GroupService {
            node,
            registry_node: registry,
            limits: limits.clamped(),
            settings_of: SettingsOf::default(),
            next_token: 1,
            pending: BTreeMap::new(),
            views: BTreeMap::new(),
            agent_of: BTreeMap::new(),
            registry: Registry::default(),
            loopback: VecDeque::new(),
            outbox: VecDeque::new(),
            events: VecDeque::new(),
            failed: Default::default(),
            doubted: Default::default(),
            reweigh: false,
            takeover_as_before: false,
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
            settings_refused: 0,
        }
    }

    /// Joins are checked against the agent's settings, as `settings_of`
    /// describes them on each node ([`SettingsOf`]).
    pub fn with_settings(mut self, settings_of: SettingsOf) -> GroupService {
        self.settings_of = settings_of;
        self
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
}
