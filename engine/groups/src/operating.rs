//! The operating agent (OA), on every node: takes its local clients'
//! requests (join, leave, query, list, a vanished member), keeps them in
//! flight until the registry or the agent answers or they time out, keeps
//! the view of every group with local members (and which members this node
//! has joined), and answers the daemon with events.
//!
//! Owns the requests in flight ([`Pending`], their tokens and deadlines),
//! the views held and the local memberships. Never changes a group's
//! membership itself: it asks the agent; the agent and the registry own
//! their state.

use crate::key::{joined_range, key, number_range, Key};
use crate::types::limit_u32;
use crate::wire::{LookupResult, Message};
use crate::{
    check_name, GroupError, GroupEvent, GroupId, GroupInfo, GroupService, GroupSummary, MemberId,
    NameError, NodeId, ReqId, View, RESERVED_GROUPS,
};

/// How long a request waits for its answer before it fails (ns).
pub const REQUEST_TIMEOUT: u64 = 2_000_000_000;

#[derive(Debug)]
pub(crate) enum Pending {
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
    pub(crate) fn req(&self) -> ReqId {
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
    pub(crate) fn answer_to(&self) -> Option<ReqId> {
        match self {
            Pending::JoinLookup { cancelled, .. }
            | Pending::JoinRegister { cancelled, .. }
            | Pending::Leave { cancelled, .. } => (!cancelled).then_some(self.req()),
            Pending::Relocate { .. } => None,
            _ => Some(self.req()),
        }
    }

    /// The node whose reply this request waits for.
    pub(crate) fn peer(&self, registry: NodeId) -> NodeId {
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

    /// Requests in flight: (request id, deadline ns); and whether the
    /// registry is confirmed. For counters and diagnostics.
    pub fn requests_in_flight(&self) -> Vec<(ReqId, u64)> {
        self.pending
            .iter()
            .map(|(t, p)| (p.req(), self.deadlines.get(t).copied().unwrap_or(0)))
            .collect()
    }

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

    /// Whether this node's member `member` is in the group numbered
    /// `group`: joined and not left, or its join on its way. False once
    /// its name moved to another number (RESIGN): it is a member there.
    pub fn is_member(&self, group: GroupId, member: MemberId) -> bool {
        self.joined
            .keys()
            .any(|&(g, _, m)| g == group && m == member)
            || self.pending.values().any(|p| {
                matches!(p, Pending::JoinRegister { group: g, member: m, cancelled: false, .. } if *g == group && *m == member)
            })
    }

    pub(crate) fn fail(&mut self, req: ReqId, error: GroupError) {
        self.events.push_back(GroupEvent::Failed { req, error });
    }

    /// Records a request in flight and returns its token, or fails it if too many
    /// are in flight.
    pub(crate) fn start(&mut self, req: ReqId, pending: Pending) -> Option<u64> {
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

    /// Takes the request `token` if it waits for a reply from `from`.
    fn take_pending(&mut self, token: u64, from: NodeId) -> Option<Pending> {
        let p = self.pending.get(&token)?;
        if p.peer(self.registry_node) != from {
            return None;
        }
        self.pending.remove(&token)
    }

    pub(crate) fn oa_lookup_reply(&mut self, from: NodeId, token: u64, result: LookupResult) {
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
                    let settings = self.settings_of.describe(&name);
                    self.send(
                        agent,
                        Message::Register {
                            token,
                            group,
                            member,
                            name,
                            settings,
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

    pub(crate) fn oa_join_reply(
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

    pub(crate) fn oa_leave_reply(
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

    pub(crate) fn oa_query_reply(
        &mut self,
        from: NodeId,
        token: u64,
        group: GroupId,
        view: Option<View>,
    ) {
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

    /// The registry's LIST_REPLY.
    pub(crate) fn oa_list_reply(&mut self, from: NodeId, token: u64, groups: Vec<GroupSummary>) {
        if let Some(Pending::List { req }) = self.take_pending(token, from) {
            self.events.push_back(GroupEvent::List { req, groups });
        }
    }

    /// Takes a view from a group's agent: keeps it if it is newer than the one held
    /// and contains this node; forgets the group if it no longer contains this node.
    pub(crate) fn apply_view(&mut self, view: View) {
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

    /// Whether a member of this node is in the group or joining it.
    pub(crate) fn has_local(&self, k: &Key) -> bool {
        let (group, name) = (k.0, k.1.as_str());
        self.joined.range(joined_range(group, name)).next().is_some()
            || self.pending.values().any(|p| {
                matches!(p, Pending::JoinRegister { group: g, name: n, cancelled: false, .. } if *g == group && n == name)
            })
    }

    /// This node's members of the group: joined and not left, and joins on
    /// their way to `agent`.
    pub(crate) fn local_members(&self, k: &Key, agent: NodeId) -> Vec<MemberId> {
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
}

pub(crate) fn invalid_name(name: &str, reason: NameError) -> GroupError {
    GroupError::InvalidName {
        name: name.to_owned(),
        reason,
    }
}
