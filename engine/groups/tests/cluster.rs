//! Group management across an in-memory cluster: N services, one FIFO queue per
//! directed link, messages delivered in a seeded random interleaving across links
//! (FIFO within each link).
//! One concern: the group service's scenarios over that in-memory cluster.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use mcast_groups::{
    GroupError, GroupEvent, GroupId, GroupService, Limits, MemberId, NameError, NodeId, ReqId,
    SettingsOf, View, SYNC_MISSES, SYNC_PERIOD,
};
use proptest::prelude::*;

struct Cluster {
    nodes: Vec<GroupService>,
    links: BTreeMap<(NodeId, NodeId), VecDeque<Vec<u8>>>,
    rng: u64,
    /// Every event each node emitted, in order (index = node id - 1).
    events: Vec<Vec<GroupEvent>>,
    /// Requests issued: (node, req) -> member it was for (None: query/list).
    requests: BTreeMap<(NodeId, ReqId), Option<MemberId>>,
    /// Members reported gone, per node.
    gone: BTreeSet<(NodeId, MemberId)>,
    next_req: ReqId,
    delivered: usize,
}

impl Cluster {
    fn new(n: u32, registry: NodeId, limits: Limits, seed: u64) -> Cluster {
        Cluster {
            nodes: (1..=n)
                .map(|id| GroupService::new(id, registry, limits))
                .collect(),
            links: BTreeMap::new(),
            rng: seed ^ 0x9E37_79B9_7F4A_7C15,
            events: vec![Vec::new(); n as usize],
            requests: BTreeMap::new(),
            gone: BTreeSet::new(),
            next_req: 1,
            delivered: 0,
        }
    }

    /// Each node describes the groups' shared settings as `describe`
    /// (node, group name) says.
    fn with_settings(mut self, describe: fn(NodeId, &str) -> String) -> Cluster {
        self.nodes = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(|s| {
                let node = s.node();
                s.with_settings(SettingsOf::new(move |name| describe(node, name)))
            })
            .collect();
        self
    }

    /// Four nodes, registry node 1, each told the cluster and the registry
    /// confirmed (a majority heard).
    fn confirmed_four(seed: u64) -> Cluster {
        let mut c = Cluster::new(4, 1, Limits::default(), seed);
        for n in 1..=4 {
            c.svc(n).set_cluster(&[1, 2, 3, 4]);
            c.svc(n).confirm_registry();
        }
        c
    }

    fn next_rand(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn svc(&mut self, node: NodeId) -> &mut GroupService {
        &mut self.nodes[node as usize - 1]
    }

    fn get(&self, node: NodeId) -> &GroupService {
        &self.nodes[node as usize - 1]
    }

    fn ids(&self) -> Vec<NodeId> {
        (1..=self.nodes.len() as NodeId).collect()
    }

    /// Moves every node's outgoing messages onto the links and its events into the log.
    fn collect(&mut self) {
        for (i, svc) in self.nodes.iter_mut().enumerate() {
            let from = i as NodeId + 1;
            while let Some((to, bytes)) = svc.poll_send() {
                assert_ne!(
                    to, from,
                    "node {from} sent a message to itself over the network"
                );
                assert!(
                    (1..=self.events.len() as NodeId).contains(&to),
                    "message to unknown node {to}"
                );
                self.links.entry((from, to)).or_default().push_back(bytes);
            }
            while let Some(e) = svc.poll_event() {
                self.events[i].push(e);
            }
        }
    }

    /// Delivers one message from a random non-empty link; false if there was none.
    fn step(&mut self) -> bool {
        self.collect();
        let busy: Vec<(NodeId, NodeId)> = self
            .links
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        if busy.is_empty() {
            return false;
        }
        let (from, to) = busy[(self.next_rand() % busy.len() as u64) as usize];
        let bytes = self
            .links
            .get_mut(&(from, to))
            .unwrap()
            .pop_front()
            .unwrap();
        self.svc(to)
            .handle_message(from, &bytes)
            .expect("a service sent a message its peer cannot decode");
        self.delivered += 1;
        self.collect();
        true
    }

    fn settle(&mut self) {
        let mut n = 0;
        while self.step() {
            n += 1;
            assert!(n < 1_000_000, "the cluster does not go quiet");
        }
    }

    /// Settles, then runs `rounds` anti-entropy rounds (each node's
    /// `tick` one [`SYNC_PERIOD`] apart), settling after each.
    fn settle_synced(&mut self, rounds: u64) {
        self.settle();
        for r in 1..=rounds {
            for n in self.ids() {
                self.svc(n).tick(r * SYNC_PERIOD);
            }
            self.settle();
        }
    }

    fn req(&mut self, node: NodeId, member: Option<MemberId>) -> ReqId {
        let req = self.next_req;
        self.next_req += 1;
        self.requests.insert((node, req), member);
        req
    }

    fn join(&mut self, node: NodeId, member: MemberId, name: &str) -> ReqId {
        let req = self.req(node, Some(member));
        self.svc(node).join(req, member, name);
        self.collect();
        req
    }

    fn leave(&mut self, node: NodeId, member: MemberId, group: GroupId) -> ReqId {
        let req = self.req(node, Some(member));
        self.svc(node).leave(req, member, group);
        self.collect();
        req
    }

    fn query(&mut self, node: NodeId, name: &str) -> ReqId {
        let req = self.req(node, None);
        self.svc(node).query(req, name);
        self.collect();
        req
    }

    fn list(&mut self, node: NodeId) -> ReqId {
        let req = self.req(node, None);
        self.svc(node).list(req);
        self.collect();
        req
    }

    fn member_gone(&mut self, node: NodeId, member: MemberId) {
        self.gone.insert((node, member));
        self.svc(node).member_gone(member);
        self.collect();
    }

    /// The answers (every event but ViewChanged) to `req` at `node`.
    fn answers(&self, node: NodeId, req: ReqId) -> Vec<GroupEvent> {
        self.events[node as usize - 1]
            .iter()
            .filter(|e| answer_req(e) == Some(req))
            .cloned()
            .collect()
    }

    /// The single answer to `req` at `node`.
    fn answer(&self, node: NodeId, req: ReqId) -> GroupEvent {
        let a = self.answers(node, req);
        assert_eq!(a.len(), 1, "node {node} request {req}: answers {a:?}");
        a[0].clone()
    }

    /// Joins and settles; returns (group, rank).
    fn joined(&mut self, node: NodeId, member: MemberId, name: &str) -> (GroupId, u32) {
        let req = self.join(node, member, name);
        self.settle();
        match self.answer(node, req) {
            GroupEvent::Joined {
                group,
                rank,
                name: n,
                member: m,
                view,
                ..
            } => {
                assert_eq!(n, name);
                assert_eq!(m, member);
                assert!(view.find(node, member).is_some());
                (group, rank)
            }
            other => panic!("join of {name} by {node}/{member} answered {other:?}"),
        }
    }

    fn left(&mut self, node: NodeId, member: MemberId, group: GroupId) {
        let req = self.leave(node, member, group);
        self.settle();
        assert_eq!(
            self.answer(node, req),
            GroupEvent::Left { req, member, group }
        );
    }

    fn failed(&self, node: NodeId, req: ReqId) -> GroupError {
        match self.answer(node, req) {
            GroupEvent::Failed { error, .. } => error,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    /// The agent's view of `group`, found on whichever node is its agent.
    fn agent_view(&self, group: GroupId) -> Option<View> {
        let found: Vec<&View> = self
            .nodes
            .iter()
            .filter_map(|s| s.agent_view(group))
            .collect();
        assert!(found.len() <= 1, "group {group} has {} agents", found.len());
        found.first().map(|v| (*v).clone())
    }

    /// After quiescence: every node's view of every group equals the agent's; a
    /// node not in the agent's view holds none; the registry's table matches the
    /// agents; the view events were in order; every request got exactly one answer.
    fn check(&self) {
        assert!(
            self.links.values().all(VecDeque::is_empty),
            "check before settle"
        );
        let registry: Vec<&GroupService> = self.nodes.iter().filter(|s| s.is_registry()).collect();
        assert_eq!(registry.len(), 1);
        let table = registry[0].registry_groups();
        let mut names = BTreeSet::new();
        for s in &table {
            assert!(
                names.insert(s.name.clone()),
                "name {} twice in the registry",
                s.name
            );
            assert!(s.group >= 1 && s.group < 0x8000_0000);
        }
        for svc in &self.nodes {
            for g in svc.agent_groups() {
                let av = svc.agent_view(g).unwrap();
                let entry = table.iter().find(|s| s.group == g).unwrap_or_else(|| {
                    panic!("agent {} serves group {g} the registry lacks", svc.node())
                });
                assert_eq!(entry.agent, svc.node());
                assert_eq!(entry.name, av.name);
                assert_eq!(
                    entry.members as usize,
                    av.members.len(),
                    "registry count of {g}"
                );
                let ranks: BTreeSet<u32> = av.members.iter().map(|m| m.rank).collect();
                assert_eq!(ranks.len(), av.members.len(), "duplicate rank in {av:?}");
                for n in self.ids() {
                    let local = self.get(n).view(g);
                    if av.has_node(n) {
                        assert_eq!(local, Some(av), "node {n}'s view of group {g}");
                    } else {
                        assert_eq!(
                            local, None,
                            "node {n} holds a view of {g} without members in it"
                        );
                    }
                }
            }
        }
        for n in self.ids() {
            for (g, name) in self.get(n).local_groups() {
                let av = self.agent_view(g).expect("local group without an agent");
                assert_eq!(av.name, name);
                assert!(av.has_node(n));
            }
            self.check_view_order(n);
        }
        for (&(n, req), member) in &self.requests {
            let a = self.answers(n, req);
            let vanished = member.is_some_and(|m| self.gone.contains(&(n, m)));
            if vanished {
                assert!(a.len() <= 1, "node {n} request {req}: {a:?}");
            } else {
                assert_eq!(a.len(), 1, "node {n} request {req}: {a:?}");
            }
        }
    }

    /// Each node saw the views of each group in strictly increasing epochs, with no
    /// gap while it was in the group, and its last one is the one it holds.
    fn check_view_order(&self, n: NodeId) {
        let mut last: BTreeMap<GroupId, View> = BTreeMap::new();
        for e in &self.events[n as usize - 1] {
            let GroupEvent::ViewChanged { group, view } = e else {
                continue;
            };
            assert_eq!(*group, view.group);
            if let Some(prev) = last.get(group) {
                if prev.has_node(n) && view.epoch == prev.epoch {
                    // The node forgot the group by itself (no member of
                    // its own wants it any more): the view it held, without it.
                    assert!(!view.has_node(n), "node {n} saw epoch {} twice", view.epoch);
                } else if prev.has_node(n) {
                    assert_eq!(
                        view.epoch,
                        prev.epoch + 1,
                        "node {n} skipped an epoch of {group}"
                    );
                } else {
                    assert!(
                        view.epoch > prev.epoch,
                        "node {n}: epochs of {group} went back"
                    );
                }
            } else {
                assert!(
                    view.has_node(n),
                    "node {n}'s first view of {group} lacks it"
                );
            }
            last.insert(*group, view.clone());
        }
        for (g, v) in &last {
            if v.has_node(n) {
                assert_eq!(self.get(n).view(*g), Some(v));
            } else {
                assert_eq!(self.get(n).view(*g), None);
            }
        }
    }

    /// The ViewChanged epochs node `n` saw for `group`.
    fn epochs(&self, n: NodeId, group: GroupId) -> Vec<u64> {
        self.events[n as usize - 1]
            .iter()
            .filter_map(|e| match e {
                GroupEvent::ViewChanged { group: g, view } if *g == group => Some(view.epoch),
                _ => None,
            })
            .collect()
    }
}

fn answer_req(e: &GroupEvent) -> Option<ReqId> {
    match e {
        GroupEvent::Joined { req, .. }
        | GroupEvent::Left { req, .. }
        | GroupEvent::Failed { req, .. }
        | GroupEvent::QueryResult { req, .. }
        | GroupEvent::List { req, .. } => Some(*req),
        GroupEvent::ViewChanged { .. } => None,
    }
}

fn members(v: &View) -> Vec<(NodeId, MemberId)> {
    v.members.iter().map(|m| (m.node, m.member)).collect()
}

#[test]
fn join_leave_query_list_across_four_nodes() {
    for seed in 0..50 {
        let mut c = Cluster::new(4, 1, Limits::default(), seed);
        let (g, r2) = c.joined(2, 20, "alpha");
        assert_eq!(g, 1, "the first group is number 1");
        assert_eq!(
            c.agent_view(g).unwrap().agent,
            2,
            "the first joiner's node is the agent"
        );
        let (g3, r3) = c.joined(3, 30, "alpha");
        let (g4, r4) = c.joined(4, 40, "alpha");
        assert_eq!((g3, g4), (g, g));
        assert_eq!(BTreeSet::from([r2, r3, r4]).len(), 3, "ranks are unique");
        let v = c.agent_view(g).unwrap();
        assert_eq!(v.epoch, 3);
        assert_eq!(v.nodes(), vec![2, 3, 4]);
        assert_eq!(members(&v), vec![(2, 20), (3, 30), (4, 40)]);
        c.check();

        // The query is answered from the agent via the registry, from any node.
        let q = c.query(1, "alpha");
        c.settle();
        let GroupEvent::QueryResult {
            info: Some(info), ..
        } = c.answer(1, q)
        else {
            panic!("query of alpha failed");
        };
        assert_eq!(
            (info.group, info.name.as_str(), info.agent),
            (g, "alpha", 2)
        );
        assert_eq!(info.view, v);
        let q = c.query(3, "nope");
        c.settle();
        assert_eq!(
            c.answer(3, q),
            GroupEvent::QueryResult { req: q, info: None }
        );

        let (h, _) = c.joined(1, 10, "beta");
        assert_eq!(h, 2, "numbers are assigned sequentially");
        let l = c.list(4);
        c.settle();
        let GroupEvent::List { groups, .. } = c.answer(4, l) else {
            panic!("list failed");
        };
        let got: Vec<(GroupId, &str, NodeId, u32)> = groups
            .iter()
            .map(|s| (s.group, s.name.as_str(), s.agent, s.members))
            .collect();
        assert_eq!(got, vec![(1, "alpha", 2, 3), (2, "beta", 1, 1)]);

        c.left(3, 30, g);
        let v = c.agent_view(g).unwrap();
        assert_eq!(members(&v), vec![(2, 20), (4, 40)]);
        assert_eq!(c.get(3).view(g), None, "the leaving node forgets the group");
        assert_eq!(c.get(4).view(g), Some(&v));
        c.check();
        let l = c.list(3);
        c.settle();
        let GroupEvent::List { groups, .. } = c.answer(3, l) else {
            panic!("list failed");
        };
        assert_eq!(groups[0].members, 2, "the registry's count follows leaves");
    }
}

#[test]
fn the_registrys_own_client_needs_no_network() {
    let mut c = Cluster::new(3, 1, Limits::default(), 7);
    let req = c.join(1, 5, "local");
    // Answered synchronously: registry, agent and OA are all node 1.
    assert!(
        c.links.values().all(VecDeque::is_empty),
        "a message left node 1"
    );
    let GroupEvent::Joined {
        group, rank, view, ..
    } = c.answer(1, req)
    else {
        panic!("not joined");
    };
    assert_eq!((group, rank, view.epoch, view.agent), (1, 0, 1, 1));
    assert_eq!(
        c.events[0][0],
        GroupEvent::ViewChanged {
            group,
            view: view.clone()
        },
        "the first view comes before Joined"
    );
    let q = c.query(1, "local");
    assert!(matches!(
        c.answer(1, q),
        GroupEvent::QueryResult { info: Some(_), .. }
    ));
    let l = c.list(1);
    assert!(matches!(c.answer(1, l), GroupEvent::List { ref groups, .. } if groups.len() == 1));
    // A remote joiner gets the registry's node as agent.
    let (g2, _) = c.joined(2, 7, "local");
    assert_eq!(g2, group);
    let l = c.leave(1, 5, group);
    c.settle();
    assert!(matches!(c.answer(1, l), GroupEvent::Left { .. }));
    c.check();
    assert_eq!(members(c.get(2).view(group).unwrap()), vec![(2, 7)]);
}

#[test]
fn concurrent_joins_of_a_new_name_give_one_group_and_one_agent() {
    for seed in 0..200 {
        let mut c = Cluster::new(4, 1, Limits::default(), seed);
        let reqs: Vec<(NodeId, ReqId)> = [2, 3, 4]
            .iter()
            .map(|&n| (n, c.join(n, 100 + n as u64, "race")))
            .collect();
        c.settle();
        let mut groups = BTreeSet::new();
        let mut ranks = BTreeSet::new();
        for (n, req) in reqs {
            match c.answer(n, req) {
                GroupEvent::Joined { group, rank, .. } => {
                    groups.insert(group);
                    ranks.insert(rank);
                }
                other => panic!("seed {seed}: {other:?}"),
            }
        }
        assert_eq!(groups.len(), 1, "seed {seed}: several group numbers");
        assert_eq!(ranks.len(), 3);
        let g = *groups.first().unwrap();
        let agents: Vec<NodeId> = c
            .ids()
            .into_iter()
            .filter(|&n| c.get(n).agent_view(g).is_some())
            .collect();
        assert_eq!(agents.len(), 1, "seed {seed}: agents {agents:?}");
        let v = c.agent_view(g).unwrap();
        assert_eq!(v.epoch, 3);
        for n in [2, 3, 4] {
            assert_eq!(c.get(n).view(g), Some(&v), "seed {seed} node {n}");
        }
        c.check();
    }
}

#[test]
fn every_member_node_sees_every_epoch_in_order() {
    for seed in 0..100 {
        let mut c = Cluster::new(4, 1, Limits::default(), seed);
        // Joins and leaves issued without waiting, so they race at the agent.
        c.join(2, 1, "g");
        c.settle();
        for n in 1..=4 {
            c.join(n, 2, "g");
            c.join(n, 3, "g");
        }
        c.settle();
        let g = 1;
        for n in [1, 3] {
            c.leave(n, 2, g);
        }
        c.join(4, 4, "g");
        c.settle();
        c.check();
        let v = c.agent_view(g).unwrap();
        assert_eq!(v.epoch, 1 + 8 + 2 + 1);
        assert_eq!(v.members.len(), 1 + 8 - 2 + 1);
        // Node 2 has been in the group since epoch 1: it saw all of them.
        assert_eq!(c.epochs(2, g), (1..=v.epoch).collect::<Vec<_>>());
        for n in 1..=4 {
            let e = c.epochs(n, g);
            assert_eq!(*e.last().unwrap(), v.epoch, "seed {seed} node {n}");
            assert!(
                e.windows(2).all(|w| w[1] == w[0] + 1),
                "seed {seed} node {n}: {e:?}"
            );
        }
    }
}

#[test]
fn a_leaving_node_learns_it_is_out_and_the_others_drop_it() {
    let mut c = Cluster::new(4, 1, Limits::default(), 3);
    let (g, _) = c.joined(2, 1, "g");
    c.joined(3, 1, "g");
    c.joined(4, 1, "g");
    c.joined(4, 2, "g");
    // Node 4 still has member 2 after member 1 leaves: it stays in.
    c.left(4, 1, g);
    assert_eq!(
        members(c.get(4).view(g).unwrap()),
        vec![(2, 1), (3, 1), (4, 2)]
    );
    c.left(3, 1, g);
    let out = c.events[2].iter().rev().find_map(|e| match e {
        GroupEvent::ViewChanged { view, .. } => Some(view.clone()),
        _ => None,
    });
    let out = out.unwrap();
    assert!(!out.has_node(3), "the last view node 3 saw still holds it");
    assert_eq!(Some(&out), c.get(4).view(g));
    assert_eq!(c.get(3).view(g), None);
    assert_eq!(c.get(3).local_groups().count(), 0);
    // Leaving again fails locally.
    let r = c.leave(3, 1, g);
    assert_eq!(c.failed(3, r), GroupError::UnknownGroup { group: g });
    let r = c.leave(4, 1, g);
    assert_eq!(
        c.failed(4, r),
        GroupError::NotMember {
            group: g,
            member: 1
        }
    );
    c.check();
}

#[test]
fn the_agent_stays_after_its_last_member_leaves_and_empty_groups_are_kept() {
    let mut c = Cluster::new(3, 1, Limits::default(), 11);
    let (g, _) = c.joined(2, 1, "g");
    c.joined(3, 1, "g");
    c.left(2, 1, g);
    assert_eq!(c.get(2).view(g), None);
    let v = c.agent_view(g).unwrap();
    assert_eq!((v.agent, members(&v)), (2, vec![(3, 1)]));
    assert_eq!(c.get(3).view(g), Some(&v));
    // Node 2 still serves joins.
    let (g2, rank) = c.joined(1, 9, "g");
    assert_eq!((g2, rank), (g, 2), "ranks are not reused");
    c.left(1, 9, g);
    c.left(3, 1, g);
    let v = c.agent_view(g).unwrap();
    assert!(v.members.is_empty());
    let (g3, rank) = c.joined(3, 1, "g");
    assert_eq!(
        (g3, rank),
        (g, 3),
        "an empty group keeps its number, agent and ranks"
    );
    assert_eq!(c.agent_view(g).unwrap().epoch, v.epoch + 1);
    c.check();
}

#[test]
fn member_gone_leaves_every_group_without_answers() {
    for seed in 0..50 {
        let mut c = Cluster::new(4, 1, Limits::default(), seed);
        let (a, _) = c.joined(2, 1, "a");
        let (b, _) = c.joined(3, 1, "b");
        c.joined(4, 7, "a");
        c.joined(4, 7, "b");
        c.joined(4, 8, "a");
        // One more join and a leave of member 7 in flight when it vanishes.
        let j = c.join(4, 7, "c");
        let l = c.leave(4, 7, a);
        c.member_gone(4, 7);
        c.settle();
        assert!(
            c.answers(4, j).is_empty(),
            "seed {seed}: {:?}",
            c.answers(4, j)
        );
        assert!(c.answers(4, l).is_empty());
        for g in [a, b] {
            let v = c.agent_view(g).unwrap();
            assert!(
                v.find(4, 7).is_none(),
                "seed {seed}: member 7 still in {v:?}"
            );
        }
        // The join of "c" was cancelled before its lookup came back: the registry
        // created the group, but no member ever reached its agent.
        assert_eq!(c.agent_view(3), None);
        assert_eq!(members(c.get(4).view(a).unwrap()), vec![(2, 1), (4, 8)]);
        assert_eq!(c.get(4).view(b), None);
        assert_eq!(
            c.get(4).local_groups().map(|(g, _)| g).collect::<Vec<_>>(),
            vec![a]
        );
        c.check();

        // On the registry's node the lookup is answered at once, so the REGISTER
        // is already on its way to the agent when the client vanishes: the join
        // succeeds there and must be undone.
        let j = c.join(1, 5, "a");
        c.member_gone(1, 5);
        c.settle();
        assert!(c.answers(1, j).is_empty());
        assert!(c.agent_view(a).unwrap().find(1, 5).is_none(), "seed {seed}");
        // Node 1 never shows its vanished member in a view: a view reaching
        // a node with no member wanting the group is held without the node.
        for e in &c.events[0] {
            if let GroupEvent::ViewChanged { view, .. } = e {
                assert!(view.find(1, 5).is_none(), "seed {seed}: {view:?}");
            }
        }
        assert_eq!(c.get(1).view(a), None);
        c.check();
    }
}

#[test]
fn limits_and_invalid_names_fail_with_clear_errors() {
    let limits = Limits {
        max_groups: 2,
        max_members: 2,
        max_name_len: 8,
        max_pending: 3,
    };
    let mut c = Cluster::new(3, 1, limits, 5);
    let cases: [(&str, NameError, &str); 5] = [
        (
            "a b",
            NameError::Whitespace,
            "group name \"a b\" is invalid: whitespace is not allowed",
        ),
        (
            "",
            NameError::Empty,
            "group name \"\" is invalid: it is empty",
        ),
        (
            "tab\tx",
            NameError::Whitespace,
            "group name \"tab\\tx\" is invalid: whitespace is not allowed",
        ),
        (
            "bel\u{7}",
            NameError::NotPrintable,
            "group name \"bel\\u{7}\" is invalid: control characters are not allowed",
        ),
        (
            "ninechars",
            NameError::TooLong { len: 9, max: 8 },
            "group name \"ninechars\" is invalid: it is 9 bytes long and the limit is 8 bytes",
        ),
    ];
    for (name, reason, text) in cases {
        let r = c.join(2, 1, name);
        let e = c.failed(2, r);
        assert_eq!(
            e,
            GroupError::InvalidName {
                name: name.into(),
                reason
            }
        );
        assert_eq!(e.to_string(), text);
        let r = c.query(3, name);
        assert_eq!(
            c.failed(3, r),
            GroupError::InvalidName {
                name: name.into(),
                reason
            }
        );
    }
    assert!(
        c.links.values().all(VecDeque::is_empty),
        "invalid names went on the wire"
    );

    let (g, _) = c.joined(2, 1, "one");
    let r = c.join(2, 1, "one");
    c.settle();
    assert_eq!(
        c.failed(2, r),
        GroupError::AlreadyMember {
            group: g,
            member: 1
        }
    );
    c.joined(3, 1, "one");
    let r = c.join(3, 2, "one");
    c.settle();
    let e = c.failed(3, r);
    assert_eq!(e, GroupError::GroupFull { group: g, limit: 2 });
    assert_eq!(
        e.to_string(),
        "group 1 is full: it has its limit of 2 members"
    );
    c.joined(3, 2, "two");
    let r = c.join(2, 5, "three");
    c.settle();
    let e = c.failed(2, r);
    assert_eq!(e, GroupError::TooManyGroups { limit: 2 });
    assert_eq!(
        e.to_string(),
        "the registry already holds its limit of 2 groups"
    );
    let r = c.leave(2, 1, 77);
    assert_eq!(c.failed(2, r), GroupError::UnknownGroup { group: 77 });
    // Three requests in flight on node 3; the fourth is refused at once.
    for _ in 0..3 {
        c.list(3);
    }
    let r = c.list(3);
    let e = c.failed(3, r);
    assert_eq!(e, GroupError::TooManyPending { limit: 3 });
    c.settle();
    c.check();
}

#[test]
fn a_node_configured_otherwise_is_refused_at_join_and_the_group_goes_on() {
    // Node 4 has "alpha" in another mode; node 1 is of a build that
    // describes nothing; "beta" is alike everywhere.
    fn describe(node: NodeId, name: &str) -> String {
        match (node, name) {
            (1, _) => String::new(),
            (4, "alpha") => "mode = \"fifo\"".into(),
            _ => "mode = \"total\"".into(),
        }
    }
    for seed in 0..20 {
        let mut c = Cluster::new(4, 1, Limits::default(), seed).with_settings(describe);
        let (g, _) = c.joined(2, 20, "alpha");
        c.joined(3, 30, "alpha");
        let refused = c.join(4, 40, "alpha");
        c.settle();
        let error = c.failed(4, refused);
        assert_eq!(
            error,
            GroupError::SettingsDiffer {
                group: g,
                name: "alpha".into(),
                agent: 2,
                there: "mode = \"total\"".into(),
                here: "mode = \"fifo\"".into(),
            }
        );
        assert!(
            error
                .to_string()
                .contains("every node must configure a group alike"),
            "{error}"
        );
        assert_eq!(c.get(2).settings_refused(), 1);
        assert_eq!(c.get(4).view(g), None, "the refused node holds no view");
        // Unchecked: a node that describes nothing.
        c.joined(1, 10, "alpha");
        let v = c.agent_view(g).unwrap();
        assert_eq!(v.nodes(), vec![1, 2, 3], "the group goes on without node 4");
        // Node 4 joins what it configures alike.
        let (h, _) = c.joined(4, 41, "beta");
        assert_eq!(c.agent_view(h).unwrap().nodes(), vec![4]);
        c.joined(3, 31, "beta");
        assert_eq!(c.get(4).settings_refused(), 0);
        c.check();
    }
}

#[test]
fn several_groups_with_different_members() {
    for seed in 0..50 {
        let mut c = Cluster::new(4, 1, Limits::default(), seed);
        let plan: [(NodeId, MemberId, &str); 9] = [
            (1, 1, "red"),
            (2, 1, "green"),
            (3, 1, "blue"),
            (4, 1, "red"),
            (4, 2, "green"),
            (2, 2, "blue"),
            (3, 2, "red"),
            (1, 2, "blue"),
            (2, 3, "red"),
        ];
        for (n, m, name) in plan {
            c.join(n, m, name);
        }
        c.settle();
        c.check();
        let mut by_name = BTreeMap::new();
        for n in c.ids() {
            for (g, name) in c.get(n).local_groups() {
                by_name.insert(name.to_owned(), g);
            }
        }
        assert_eq!(by_name.len(), 3);
        for (name, g) in &by_name {
            let mut expect: Vec<(NodeId, MemberId)> = plan
                .iter()
                .filter(|(_, _, x)| x == name)
                .map(|&(n, m, _)| (n, m))
                .collect();
            expect.sort();
            let mut got = members(&c.agent_view(*g).unwrap());
            got.sort();
            assert_eq!(got, expect, "seed {seed} group {name}");
        }
        assert_eq!(
            c.get(2)
                .local_groups()
                .map(|(_, n)| n.to_owned())
                .collect::<BTreeSet<_>>(),
            BTreeSet::from(["red".to_owned(), "green".to_owned(), "blue".to_owned()])
        );
    }
}

#[test]
fn views_from_anyone_but_the_agent_are_ignored() {
    let mut c = Cluster::new(3, 1, Limits::default(), 1);
    let (g, _) = c.joined(2, 1, "g");
    c.joined(3, 1, "g");
    let mut forged = c.get(3).view(g).unwrap().clone();
    forged.epoch += 10;
    forged.members.clear();
    forged.members.push(mcast_groups::Member {
        rank: 99,
        node: 3,
        member: 1,
        place: 0,
    });
    let bytes = mcast_groups::wire::Message::View(forged.clone()).encode();
    c.svc(3).handle_message(1, &bytes).unwrap();
    assert_ne!(c.get(3).view(g), Some(&forged));
    // A stale view from the agent is ignored too.
    let mut stale = c.get(3).view(g).unwrap().clone();
    stale.epoch -= 1;
    stale.members.pop();
    let bytes = mcast_groups::wire::Message::View(stale).encode();
    let before = c.get(3).view(g).cloned();
    c.svc(3).handle_message(2, &bytes).unwrap();
    assert_eq!(c.get(3).view(g).cloned(), before);
    c.collect();
    c.check();
}

#[derive(Debug, Clone)]
enum Op {
    Join {
        node: u32,
        slot: u64,
        name: usize,
    },
    Leave {
        node: u32,
        slot: u64,
        group: GroupId,
    },
    LeaveLocal {
        node: u32,
        slot: u64,
        pick: usize,
    },
    Gone {
        node: u32,
        slot: u64,
    },
    Query {
        node: u32,
        name: usize,
    },
    List {
        node: u32,
    },
    Deliver {
        steps: usize,
    },
}

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

fn op() -> impl Strategy<Value = Op> {
    let node = 1..=4u32;
    let slot = 0..3u64;
    prop_oneof![
        4 => (node.clone(), slot.clone(), 0..NAMES.len()).prop_map(|(node, slot, name)| Op::Join { node, slot, name }),
        1 => (node.clone(), slot.clone(), 0..5u32).prop_map(|(node, slot, group)| Op::Leave { node, slot, group }),
        3 => (node.clone(), slot.clone(), 0..4usize).prop_map(|(node, slot, pick)| Op::LeaveLocal { node, slot, pick }),
        1 => (node.clone(), slot.clone()).prop_map(|(node, slot)| Op::Gone { node, slot }),
        1 => (node.clone(), 0..NAMES.len()).prop_map(|(node, name)| Op::Query { node, name }),
        1 => node.prop_map(|node| Op::List { node }),
        3 => (0..20usize).prop_map(|steps| Op::Deliver { steps }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Random requests from random nodes, interleaved with random partial delivery:
    /// no panic, and after everything is delivered every node agrees with every
    /// agent, the registry agrees too, and each group's members are exactly those
    /// whose join was answered Joined and who neither left nor vanished.
    #[test]
    fn random_operations_converge(
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..80),
        small in any::<bool>(),
    ) {
        let limits = if small {
            Limits { max_groups: 3, max_members: 5, max_name_len: 8, max_pending: 6 }
        } else {
            Limits::default()
        };
        let mut c = Cluster::new(4, 2, limits, seed);
        // A vanished client's id is not reused: slot s of node n is member
        // s * 1000 + generation.
        let mut generation: BTreeMap<(u32, u64), u64> = BTreeMap::new();
        let member = |g: &BTreeMap<(u32, u64), u64>, n: u32, s: u64| s * 1000 + g.get(&(n, s)).copied().unwrap_or(0);
        for op in ops {
            match op {
                Op::Join { node, slot, name } => {
                    let m = member(&generation, node, slot);
                    c.join(node, m, NAMES[name]);
                }
                Op::Leave { node, slot, group } => {
                    let m = member(&generation, node, slot);
                    c.leave(node, m, group);
                }
                Op::LeaveLocal { node, slot, pick } => {
                    let groups: Vec<GroupId> = c.get(node).local_groups().map(|(g, _)| g).collect();
                    if !groups.is_empty() {
                        let m = member(&generation, node, slot);
                        c.leave(node, m, groups[pick % groups.len()]);
                    }
                }
                Op::Gone { node, slot } => {
                    let m = member(&generation, node, slot);
                    c.member_gone(node, m);
                    *generation.entry((node, slot)).or_default() += 1;
                }
                Op::Query { node, name } => {
                    c.query(node, NAMES[name]);
                }
                Op::List { node } => {
                    c.list(node);
                }
                Op::Deliver { steps } => {
                    for _ in 0..steps {
                        c.step();
                    }
                }
            }
        }
        // Anti-entropy repairs what the races left (a view reaching a node
        // whose member already left, a stale member): a few rounds.
        c.settle_synced(2 + u64::from(SYNC_MISSES));
        c.check();
        // The members each agent holds are exactly the answered joins not undone.
        let mut expect: BTreeSet<(GroupId, NodeId, MemberId)> = BTreeSet::new();
        for n in c.ids() {
            for e in &c.events[n as usize - 1] {
                match e {
                    GroupEvent::Joined { group, member, .. } => {
                        prop_assert!(expect.insert((*group, n, *member)), "joined twice");
                    }
                    GroupEvent::Left { group, member, .. } => {
                        prop_assert!(expect.remove(&(*group, n, *member)), "left without joining");
                    }
                    _ => {}
                }
            }
        }
        expect.retain(|&(_, n, m)| !c.gone.contains(&(n, m)));
        let mut held = BTreeSet::new();
        for svc in &c.nodes {
            for g in svc.agent_groups() {
                for m in &svc.agent_view(g).unwrap().members {
                    held.insert((g, m.node, m.member));
                }
            }
        }
        prop_assert_eq!(held, expect);
    }
}

#[test]
fn a_failed_node_leaves_every_view_its_agent_holds_and_requests_to_it_fail() {
    for seed in 0..20 {
        let mut c = Cluster::new(4, 1, Limits::default(), seed);
        // Node 2 is the agent of "a" (its client joined first); 3 and 4 join.
        let (g, _) = c.joined(2, 1, "a");
        c.joined(3, 1, "a");
        c.joined(4, 1, "a");
        c.settle();
        // Node 4 dies: the agent learns it from its detector.
        let changed = c.svc(2).node_failed(4);
        assert_eq!(changed, vec![g], "seed {seed}");
        c.settle();
        let v = c.agent_view(g).unwrap();
        assert_eq!(v.nodes(), vec![2, 3], "seed {seed}");
        assert_eq!(c.get(3).view(g).map(|v| v.nodes()), Some(vec![2, 3]));
        // A node that is not the agent changes nothing.
        assert!(c.svc(3).node_failed(4).is_empty());
        // A request waiting for a failed node's answer fails, with the reason.
        let q = c.query(3, "a"); // registry (1) answers, then the agent (2) is asked
        c.settle();
        assert!(matches!(c.answer(3, q), GroupEvent::QueryResult { .. }));
        let r = c.query(4, "a");
        // Node 4 asks the registry; the registry "dies" before answering.
        c.svc(4).node_failed(1);
        c.settle(); // the registry's late answer is ignored
        let e = c.failed(4, r);
        assert_eq!(e, GroupError::NodeFailed { node: 1 }, "seed {seed}");
        assert!(e.to_string().contains("declared failed"));
    }
}

#[test]
fn a_node_that_failed_and_joins_again_is_not_taken_for_silent() {
    // The soak's view flap: a node silent for SYNC_MISSES rounds (dead,
    // not yet declared failed) is dropped by its detector; restarted, it
    // joins again, and the agent's next sync round must not drop it for the
    // SYNCs its old daemon missed.
    let mut c = Cluster::new(4, 1, Limits::default(), 0);
    let (g, _) = c.joined(2, 1, "a");
    c.joined(4, 1, "a");
    c.settle();
    for r in 1..=u64::from(SYNC_MISSES) {
        for n in [1, 2, 3] {
            c.svc(n).tick(r * SYNC_PERIOD);
        }
        c.settle();
    }
    assert_eq!(
        c.agent_view(g).unwrap().nodes(),
        vec![2, 4],
        "not silent long enough"
    );
    c.svc(2).node_failed(4);
    c.settle();
    assert_eq!(c.agent_view(g).unwrap().nodes(), vec![2]);
    c.svc(2).node_recovered(4);
    c.joined(4, 2, "a");
    assert_eq!(c.agent_view(g).unwrap().nodes(), vec![2, 4]);
    c.svc(2).tick((u64::from(SYNC_MISSES) + 1) * SYNC_PERIOD);
    c.settle();
    assert_eq!(
        c.agent_view(g).unwrap().nodes(),
        vec![2, 4],
        "dropped one round after it joined"
    );
}

#[test]
fn the_lowest_live_member_takes_over_a_failed_agents_group_with_a_majority_only() {
    for seed in 0..20 {
        let mut c = Cluster::new(4, 1, Limits::default(), seed);
        // "a": agent 2, members on 2, 3, 4. "b": agent 2, members on 2 and 3 only.
        let (a, _) = c.joined(2, 1, "a");
        c.joined(3, 1, "a");
        c.joined(4, 1, "a");
        let (b, _) = c.joined(2, 2, "b");
        c.joined(3, 2, "b");
        c.settle();
        let before = c.get(3).view(a).unwrap().epoch;
        // Node 2 dies; every survivor's detector says so.
        for n in [1, 3, 4] {
            c.svc(n).node_failed(2);
        }
        c.settle();
        // "a": node 3 is the lowest of the live majority {3, 4} of {2, 3, 4}.
        for n in [3, 4] {
            let v = c.get(n).view(a).unwrap();
            assert_eq!(
                (v.agent, v.nodes()),
                (3, vec![3, 4]),
                "seed {seed} node {n}"
            );
            assert!(
                v.epoch > before,
                "a takeover starts a newer generation of epochs"
            );
        }
        assert_eq!(c.get(3).takeovers(), 1, "seed {seed}");
        // "b": {3} is not a majority of {2, 3}: nobody takes it over (a
        // partition's minority side must not), its last view stays.
        assert_eq!(c.get(3).view(b).unwrap().agent, 2, "seed {seed}");
        assert!(c.get(3).agent_view(b).is_none());
        // The registry follows the new agent: a new member joins through node 3.
        let (g, _) = c.joined(1, 9, "a");
        assert_eq!(g, a);
        c.settle();
        let v = c.get(3).agent_view(a).unwrap();
        assert_eq!(v.nodes(), vec![1, 3, 4], "seed {seed}");
        assert_eq!(c.get(4).view(a).unwrap().nodes(), vec![1, 3, 4]);
        // Ranks stay unique after the takeover.
        let mut ranks: Vec<u32> = v.members.iter().map(|m| m.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        assert_eq!(ranks.len(), v.members.len());
    }
}

/// A node whose peers fall silent together, but whose verdicts come one by
/// one, must not count the ones still doubted as live: node 3, cut off,
/// declares node 2 (agent of "a") failed while 4 is suspect. Once the
/// doubt clears (it was only node 2 that died), it takes the role.
#[test]
fn a_doubted_peer_is_not_counted_for_a_majority_and_the_role_waits_for_the_doubt_to_clear() {
    let mut c = Cluster::new(4, 1, Limits::default(), 7);
    let (a, _) = c.joined(2, 1, "a");
    c.joined(3, 1, "a");
    c.joined(4, 1, "a");
    c.settle();
    c.svc(3).set_doubted([1, 4]);
    c.svc(3).node_failed(2);
    c.settle();
    assert_eq!(
        c.get(3).takeovers(),
        0,
        "took the role with 1 and 4 in doubt"
    );
    assert!(c.get(3).agent_view(a).is_none());
    // Node 4 answers its probe: {3, 4} is a majority of the view's
    // {2, 3, 4} (these services know no cluster, so the view's is the only
    // majority weighed).
    c.svc(3).set_doubted([1]);
    c.settle();
    assert_eq!(
        c.get(3).takeovers(),
        1,
        "the doubt cleared: node 3 takes over"
    );
    assert_eq!(c.get(3).agent_view(a).unwrap().nodes(), vec![3, 4]);
    assert_eq!(c.get(4).view(a).unwrap().agent, 3);
}

#[test]
fn the_registry_role_moves_to_the_lowest_live_node_which_rebuilds_the_names() {
    for seed in 0..20 {
        let mut c = Cluster::confirmed_four(seed);
        // "a": agent 1 (the registry's node), members on 1, 2, 3. "b": agent 3, on 3 and 4.
        let (a, _) = c.joined(1, 1, "a");
        c.joined(2, 1, "a");
        c.joined(3, 1, "a");
        let (b, _) = c.joined(3, 2, "b");
        c.joined(4, 1, "b");
        c.settle();
        // Node 1 dies: registry and agent of "a".
        for n in [2, 3, 4] {
            c.svc(n).node_failed(1);
        }
        c.settle();
        for n in [2, 3, 4] {
            assert_eq!(c.get(n).registry(), 2, "seed {seed} node {n}");
        }
        // "a" moved to node 2, "b" stays with node 3.
        assert_eq!(c.get(2).agent_view(a).unwrap().nodes(), vec![2, 3]);
        assert_eq!(c.get(3).view(a).unwrap().agent, 2);
        // The new registry knows both groups, with their agents.
        let r = c.list(4);
        c.settle();
        let GroupEvent::List { groups, .. } = c.answer(4, r) else {
            panic!("seed {seed}: no list")
        };
        let mut got: Vec<(String, GroupId, NodeId)> = groups
            .iter()
            .map(|g| (g.name.clone(), g.group, g.agent))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![("a".into(), a, 2), ("b".into(), b, 3)],
            "seed {seed}"
        );
        // Joins go on: an existing name finds its group, a new one gets a new number.
        let (ga, _) = c.joined(4, 7, "a");
        assert_eq!(ga, a);
        let (gc, _) = c.joined(4, 8, "c");
        assert!(
            gc != a && gc != b,
            "seed {seed}: new group {gc} reuses a number"
        );
        c.settle();
        assert_eq!(c.get(2).agent_view(a).unwrap().nodes(), vec![2, 3, 4]);
        assert_eq!(c.get(4).registry_moves(), 1);
    }
}

#[test]
fn a_restarted_node_holds_its_registry_requests_until_it_learns_where_the_role_went() {
    for seed in 0..20 {
        let mut c = Cluster::confirmed_four(seed);
        let (a, _) = c.joined(2, 1, "a");
        c.settle();
        // Node 1 (the registry) dies; the role moves to 2.
        for n in [2, 3, 4] {
            c.svc(n).node_failed(1);
        }
        c.settle();
        assert_eq!(c.get(3).registry_epoch(), (2, 1));
        // Node 1 restarts: a fresh service that believes its configuration.
        c.nodes[0] = GroupService::new(1, 1, Limits::default());
        c.svc(1).set_cluster(&[1, 2, 3, 4]);
        assert!(!c.get(1).registry_confirmed());
        let r = c.join(1, 5, "a");
        c.settle();
        assert!(
            c.answers(1, r).is_empty(),
            "seed {seed}: it must not answer itself"
        );
        // Its peers' beats name the registry; then a majority is heard.
        let (reg, epoch) = c.get(3).registry_epoch();
        c.svc(1).adopt_registry(reg, epoch);
        c.svc(1).confirm_registry();
        c.settle();
        match c.answer(1, r) {
            GroupEvent::Joined { group, .. } => assert_eq!(group, a, "seed {seed}: same group"),
            other => panic!("seed {seed}: {other:?}"),
        }
    }
}

/// The peers move the registry to a node whose fresh service (it restarted
/// or rejoined) does not know it yet: their ANNOUNCEs reach it before it is
/// the registry and are dropped, their SYNCEDs are kept. When a beat then
/// tells it the role is its own, it must not count those SYNCEDs: with them
/// it created an existing name again under a new number (soak seed
/// 820101695). It waits for the next sync round, which announces again.
#[test]
fn a_node_told_by_its_peers_that_it_is_the_registry_waits_for_their_names() {
    for seed in 0..20 {
        let mut c = Cluster::confirmed_four(seed);
        let (a, _) = c.joined(3, 1, "a");
        c.settle();
        // Node 2 restarts: a fresh service, no names.
        c.nodes[1] = GroupService::new(2, 1, Limits::default());
        c.svc(2).set_cluster(&[1, 2, 3, 4]);
        // Node 1 (the registry) dies; 3 and 4 move the role to node 2 and
        // tell it what they serve before node 2 knows.
        for n in [3, 4] {
            c.svc(n).node_failed(1);
        }
        c.settle();
        assert_eq!(c.get(3).registry_epoch(), (2, 1), "seed {seed}");
        // Node 2 learns it from their beats, hears a majority, and its
        // detector declares node 1 failed.
        c.svc(2).adopt_registry(2, 1);
        c.svc(2).confirm_registry();
        c.svc(2).node_failed(1);
        let r = c.join(2, 9, "a");
        c.settle();
        assert!(
            c.answers(2, r).is_empty(),
            "seed {seed}: the join of an existing name was answered before the registry heard its agent"
        );
        // The next sync round announces "a" to the new registry.
        c.settle_synced(1);
        match c.answer(2, r) {
            GroupEvent::Joined { group, .. } => {
                assert_eq!(group, a, "seed {seed}: \"a\" created again")
            }
            other => panic!("seed {seed}: {other:?}"),
        }
    }
}

/// The places of the feedback tree (seed 004 §2.2) as the agent hands
/// them out: the agent's node at the root's place 0, a joining node at the
/// lowest vacant place, a node's later members at its place, and the root's
/// place to the node that takes the agent role over.
#[test]
fn the_agent_hands_out_tree_places_and_a_joiner_takes_a_vacant_one() {
    fn places(v: &View) -> Vec<(NodeId, u32)> {
        let mut p: Vec<(NodeId, u32)> = v.members.iter().map(|m| (m.node, m.place)).collect();
        p.sort_unstable();
        p.dedup();
        p
    }
    let mut c = Cluster::new(5, 1, Limits::default(), 3);
    let (g, _) = c.joined(2, 1, "t");
    for n in [3, 4, 5] {
        c.joined(n, 1, "t");
    }
    c.joined(4, 2, "t");
    let v = c.agent_view(g).unwrap();
    assert_eq!(v.agent, 2);
    assert_eq!(places(&v), vec![(2, 0), (3, 1), (4, 2), (5, 3)]);
    // Every node holds the agent's places.
    assert_eq!(places(c.get(5).view(g).unwrap()), places(&v));
    // 3 leaves: place 1 is vacant, nobody else moves; 1 joins into it.
    c.left(3, 1, g);
    assert_eq!(
        places(&c.agent_view(g).unwrap()),
        vec![(2, 0), (4, 2), (5, 3)]
    );
    c.joined(1, 1, "t");
    assert_eq!(
        places(&c.agent_view(g).unwrap()),
        vec![(1, 1), (2, 0), (4, 2), (5, 3)]
    );
    // The agent dies: the lowest live node (1) takes the role over and the
    // root's place with it; its place 1 is vacant for the next joiner.
    for n in [1, 3, 4, 5] {
        c.svc(n).node_failed(2);
    }
    c.settle();
    let v = c.get(1).agent_view(g).unwrap().clone();
    assert_eq!((v.agent, places(&v)), (1, vec![(1, 0), (4, 2), (5, 3)]));
    assert_eq!(v.place_for(3), 1);
}
