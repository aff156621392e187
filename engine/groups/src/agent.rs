//! The group agent (GA), on the node whose client first joined a group (or
//! that took the role over): keeps the group's members, assigns their ranks
//! (never reused within a group), bumps the view epoch on every change and
//! sends each new view to every member node and the member count to the
//! registry; answers REGISTER (refusing a node whose group settings differ
//! from its own), LEAVE and QUERY, and settles a VIEW from another agent of
//! one of its groups.
//!
//! Owns the agent state of each group it serves ([`AgentGroup`]). Never
//! names groups (the registry does) and never changes the views this node
//! holds as a member except through the operating agent (`apply_view`);
//! the repairs of its memberships are anti-entropy's.

use std::collections::BTreeMap;

use crate::key::{key, number_range};
use crate::operating::invalid_name;
use crate::types::limit_u32;
use crate::wire::Message;
use crate::{
    check_name, GroupError, GroupId, GroupService, Member, MemberId, NodeId, View, RESERVED_GROUPS,
};

#[derive(Debug)]
pub(crate) struct AgentGroup {
    pub(crate) view: View,
    pub(crate) next_rank: u32,
    /// Sync rounds since each member node last synced: a node silent for
    /// more than [`SYNC_MISSES`](crate::SYNC_MISSES) rounds loses its members.
    pub(crate) missed: BTreeMap<NodeId, u32>,
}

impl AgentGroup {
    pub(crate) fn new(view: View, next_rank: u32) -> AgentGroup {
        AgentGroup {
            view,
            next_rank,
            missed: BTreeMap::new(),
        }
    }
}

impl GroupService {
    /// Joins refused here as agent because the joining node's group
    /// settings differ from this node's ([`GroupError::SettingsDiffer`]).
    pub fn settings_refused(&self) -> u64 {
        self.settings_refused
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

    pub(crate) fn agent_register(
        &mut self,
        from: NodeId,
        token: u64,
        group: GroupId,
        member: MemberId,
        name: String,
        settings: &str,
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
        // A node configured otherwise would run another protocol in the
        // group: refused before it is a member (SettingsOf).
        let there = self.settings_of.describe(&name);
        if !settings.is_empty() && !there.is_empty() && settings != there {
            self.settings_refused += 1;
            let error = GroupError::SettingsDiffer {
                group,
                name: name.clone(),
                agent: self.node,
                there,
                here: settings.to_owned(),
            };
            return reply(self, Err(error));
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
        // A node that registers a member is in touch: whatever SYNCs it
        // missed before (a daemon since restarted) no longer count.
        a.missed.remove(&from);
        a.view.epoch += 1;
        let place = a.view.place_for(from);
        a.view.members.push(Member {
            rank,
            node: from,
            member,
            place,
        });
        let view = a.view.clone();
        self.publish(&view, Some(from));
        reply(self, Ok((rank, view)));
    }

    pub(crate) fn agent_leave(
        &mut self,
        from: NodeId,
        token: u64,
        group: GroupId,
        member: MemberId,
    ) {
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
    pub(crate) fn publish(&mut self, view: &View, requester: Option<NodeId>) {
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

    /// A QUERY: the agent's view of the group (the first name's, should the
    /// number carry two; the asker checks the name).
    pub(crate) fn agent_query(&mut self, from: NodeId, token: u64, group: GroupId) {
        let view = self.agent_view(group).cloned();
        self.send(from, Message::QueryReply { token, group, view });
    }

    /// A VIEW from `from`, which must be the group's agent. Should this node
    /// be an agent of the group too (two nodes took it over on different
    /// verdicts), the newer epoch wins, then the lower node; the other
    /// steps down and its members join again. The winner's view goes to the
    /// operating agent.
    pub(crate) fn view_from(&mut self, from: NodeId, view: View) {
        if view.agent != from {
            return;
        }
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
}
