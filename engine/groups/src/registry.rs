//! The registry role (the paper's topology information centre, TIC),
//! played by one node at a time: maps group names to group numbers (assigned
//! from each registry epoch's own range, never reused), knows each group's
//! agent and member count, and arbitrates: between two agents of one group
//! (ANNOUNCE: newer epoch, then lower node; the loser gets RESIGN), between
//! two numbers of one name (the lowest wins), and for a member node whose
//! agent disowned the group (CLAIM). A registry that took the role over
//! creates no name before the nodes have told it what exists (SYNCED).
//!
//! Owns the name table and its sync state ([`Registry`]). Never sends views
//! or changes a membership (the agent does), and never moves the role
//! itself (`roles`).

use std::collections::{BTreeMap, VecDeque};

use crate::operating::invalid_name;
use crate::types::limit_u32;
use crate::wire::{LookupResult, Message};
use crate::{check_name, GroupError, GroupId, GroupService, GroupSummary, NodeId, RESERVED_GROUPS};

/// The registry's state: the name table and, for a registry that took the
/// role over, what it waits for before it creates names.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    by_name: BTreeMap<String, GroupId>,
    groups: BTreeMap<GroupId, RegEntry>,
    pub(crate) last_group: GroupId,
    /// As a registry that took the role over: the nodes that have announced
    /// everything they serve; new names wait until every live node has.
    synced: BTreeMap<NodeId, u32>,
    pub(crate) sync_needed: bool,
    /// How many nodes must have synced: every live one after a move, a
    /// majority of the cluster for the configured registry at start (a
    /// restarted registry thus never creates a name before it hears that
    /// the role moved on).
    pub(crate) sync_majority: bool,
    /// Creating lookups waiting for the sync: (from, token, name).
    deferred: VecDeque<(NodeId, u64, String)>,
}

impl Registry {
    /// Forgets which nodes have synced (the role just moved here).
    pub(crate) fn forget_synced(&mut self) {
        self.synced.clear();
    }
}

#[derive(Debug)]
struct RegEntry {
    name: String,
    agent: NodeId,
    members: u32,
    epoch: u64,
}

impl GroupService {
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

    /// Whether this registry knows every group that exists (it has been the
    /// registry from the start, or every live node has synced with it).
    fn registry_synced(&self) -> bool {
        let synced = |n: &NodeId| {
            *n == self.node
                || self
                    .registry
                    .synced
                    .get(n)
                    .is_some_and(|&e| e >= self.registry_epoch)
        };
        if self.registry.sync_needed && self.registry.sync_majority {
            return self.cluster.iter().filter(|n| synced(n)).count() * 2 > self.cluster.len();
        }
        !self.registry.sync_needed
            || self.cluster.iter().all(|n| {
                self.failed.contains(n)
                    || self.doubted.contains(n)
                    || self
                        .registry
                        .synced
                        .get(n)
                        .is_some_and(|&e| e >= self.registry_epoch)
            })
    }

    pub(crate) fn release_deferred(&mut self) {
        if !self.registry_synced() {
            return;
        }
        for (from, token, name) in std::mem::take(&mut self.registry.deferred) {
            self.registry_lookup(from, token, true, name);
        }
    }

    pub(crate) fn registry_lookup(&mut self, from: NodeId, token: u64, create: bool, name: String) {
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
            self.registry.deferred.push_back((from, token, name));
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
    pub(crate) fn registry_announce(
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
    pub(crate) fn registry_claim(
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

    /// Whether the nodes neither failed nor doubted are a majority of the
    /// cluster (always, without a cluster).
    fn live_majority(&self) -> bool {
        self.cluster.is_empty() || self.live_count() * 2 > self.cluster.len()
    }

    pub(crate) fn registry_count(
        &mut self,
        from: NodeId,
        group: GroupId,
        epoch: u64,
        members: u32,
    ) {
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

    pub(crate) fn registry_list(&mut self, from: NodeId, token: u64) {
        if !self.is_registry() {
            return;
        }
        let groups = self.registry_groups();
        self.send(from, Message::ListReply { token, groups });
    }

    /// A node's SYNCED: it has announced everything it serves to the
    /// registry of `epoch`.
    pub(crate) fn registry_note_synced(&mut self, from: NodeId, epoch: u32) {
        // Kept even before this node becomes the registry of that
        // epoch: a peer may see the move a moment earlier.
        let e = self.registry.synced.entry(from).or_insert(epoch);
        *e = (*e).max(epoch);
        self.release_deferred();
    }
}
