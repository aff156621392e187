//! Anti-entropy: the periodic rounds that make views, agents and names
//! agree again after lost messages (reset links, crashes, partitions). Every
//! [`SYNC_PERIOD`] each node sends each group's agent its members there
//! (SYNC), each agent tells the registry its groups (ANNOUNCE, SYNCED) and
//! drops the members of nodes silent for [`SYNC_MISSES`] rounds; a node whose
//! agent disowns a group asks the registry (CLAIM) and moves its members
//! where the registry says (RESIGN, a reply to the CLAIM).
//!
//! Owns the sync bookkeeping: each group's home (the agent this node's
//! members sync with), the last round's time, and the repairs and
//! resignations counters. It repairs memberships but never names groups or
//! arbitrates (the registry does) and never answers a client (the
//! operating agent does).

use crate::agent::AgentGroup;
use crate::key::{joined_range, key, Key};
use crate::operating::Pending;
use crate::wire::Message;
use crate::{
    GroupEvent, GroupId, GroupService, Member, MemberId, NodeId, View, EPOCH_GENERATION_SHIFT,
};

/// The anti-entropy period (ns): every node tells each group's agent its
/// members there (SYNC) and every agent tells the registry its groups
/// (ANNOUNCE). Whatever a reset link, a crash or a partition lost, the
/// views, agents and names agree again within a few periods of the last
/// fault.
pub const SYNC_PERIOD: u64 = 200_000_000;

/// Sync rounds an agent waits for a member node's SYNC before it drops that
/// node's members (a LEAVE lost on a reset link, a node that lost track).
pub const SYNC_MISSES: u32 = 3;

impl GroupService {
    /// One anti-entropy round ([`SYNC_PERIOD`]): agents tell the registry
    /// their groups and drop the members of nodes silent for
    /// [`SYNC_MISSES`] rounds; every node tells each group's agent its
    /// members there.
    pub(crate) fn sync_round(&mut self) {
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
    pub(crate) fn agent_sync(
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
                let place = a.view.place_for(from);
                a.view.members.push(Member {
                    rank: a.next_rank,
                    node: from,
                    member,
                    place,
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
    pub(crate) fn oa_not_agent(&mut self, from: NodeId, group: GroupId, name: String) {
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

    /// The registry's RESIGN: this node's agent role of (`group`, `name`) is
    /// another's, and its members there move to `canonical` under `agent`.
    pub(crate) fn resign(
        &mut self,
        from: NodeId,
        group: GroupId,
        name: String,
        canonical: GroupId,
        agent: NodeId,
    ) {
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

    /// The registry says the group called `name` lives under `canonical`
    /// with agent `agent`: this node's members of (`group`, `name`) move to
    /// it (and to its number, if another), and if this node is named agent
    /// it takes the role from the view it holds (a new generation of
    /// epochs). Members of another name under `group` stay where they are.
    pub(crate) fn relocate(
        &mut self,
        group: GroupId,
        canonical: GroupId,
        agent: NodeId,
        name: String,
    ) {
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
